// SPDX-License-Identifier: MIT
// Benchmark: linear attention (FAVOR+, float) against exact softmax attention and against
// Eigen GEMMs of the same shapes and FLOP count, forward and forward+backward, 1 and 2
// threads. One sequence, H heads of width d = 64, m = 256 features (docs/benchmarks.md).
//
//   build/bench/bench_attention --benchmark_format=json --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true > attention.json    (one command line)
//   python3 bench/report_attention.py attention.json
//
// Peak memory (one process per mode; VmHWM of /proc/self/status, beyond the inputs and
// outputs, which are allocated and touched before the baseline is read):
//
//   build/bench/bench_attention --peak-memory=noncausal
//   build/bench/bench_attention --peak-memory=causal
//
// FLOP counts are the minimal ones of linear attention: the forward is four GEMMs of
// 2·L·d·m FLOPs per head (Φ_Q and Φ_K projections, Φ_Kᵀ[V, 1], Φ_Q·[S, z]), the
// forward+backward twelve (four more for dΦ_Q, ∂L/∂S, dΦ_K, dV and four for dQ, dΩ_Q, dK,
// dΩ_K). The reference runs exactly these twelve products with Eigen on full-length matrices
// and nothing else, so time(reference) / time(linear) is the fraction of the GEMM rate that
// linear attention keeps. Softmax attention counts 4·L²·d (forward) and 14·L²·d
// (forward+backward, with the recomputed scores) per head.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <string>

#include <coulomb/coulomb.hpp>

#include "bench_common.hpp"
#include "peak_kernels.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using coulomb_bench::set_threads;

using coulomb::Index;
using Mat = coulomb::Matrix<float>;
using Map = coulomb::FavorPlus<float>;

constexpr Index d_head = 64;
constexpr Index num_features = 256;

Mat random_matrix(Index rows, Index cols, std::uint64_t seed) {
  coulomb::Rng rng(seed);
  Mat x(rows, cols);
  coulomb::fill_standard_normal(x, rng);
  return x;
}

struct Inputs {
  Mat Q, K, V, dOut;
  Inputs(Index L, Index heads)
      : Q(random_matrix(L, heads * d_head, 1)),
        K(random_matrix(L, heads * d_head, 2)),
        V(random_matrix(L, heads * d_head, 3)),
        dOut(random_matrix(L, heads * d_head, 4)) {}
};

void set_counters(benchmark::State& state, double flops) {
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

double linear_flops(Index L, Index heads, bool backward) {
  return (backward ? 12.0 : 4.0) * 2.0 * static_cast<double>(L) * d_head * num_features *
         static_cast<double>(heads);
}

double softmax_flops(Index L, Index heads, bool backward) {
  return (backward ? 14.0 : 4.0) * static_cast<double>(L) * static_cast<double>(L) * d_head *
         static_cast<double>(heads);
}

// Arguments: L, heads, threads. Keep: AttentionOptions::keep_features, as the models that
// train set it (the backward reuses the forward's features instead of mapping again).
template <bool Backward, bool Causal, bool Keep = false>
void BM_Linear(benchmark::State& state) {
  const Index L = state.range(0), H = state.range(1);
  const int T = static_cast<int>(state.range(2));
  set_threads(T);
  const Inputs in(L, H);
  coulomb::Rng rng(5);
  coulomb::AttentionOptions opt;
  opt.num_heads = H;
  opt.causal = Causal;
  opt.num_threads = T;
  opt.keep_features = Keep;
  const coulomb::LinearAttention<Map> attn(Map(d_head, num_features, rng), opt);
  coulomb::LinearAttention<Map>::Workspace ws;
  Mat out;
  coulomb::AttentionGradients<float> grads;
  attn.forward(in.Q, in.K, in.V, out, ws);  // allocate and touch every buffer once
  if (Backward) attn.backward(in.Q, in.K, in.V, out, in.dOut, grads, ws);
  for (auto _ : state) {
    attn.forward(in.Q, in.K, in.V, out, ws);
    if (Backward) attn.backward(in.Q, in.K, in.V, out, in.dOut, grads, ws);
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(grads.dQ.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, linear_flops(L, H, Backward));
}

template <bool Backward, bool Causal>
void BM_Softmax(benchmark::State& state) {
  const Index L = state.range(0), H = state.range(1);
  const int T = static_cast<int>(state.range(2));
  set_threads(T);
  const Inputs in(L, H);
  coulomb::AttentionOptions opt;
  opt.num_heads = H;
  opt.causal = Causal;
  opt.num_threads = T;
  const coulomb::SoftmaxAttention<float> attn(opt);
  coulomb::SoftmaxAttention<float>::Workspace ws;
  Mat out;
  coulomb::AttentionGradients<float> grads;
  attn.forward(in.Q, in.K, in.V, out, ws);
  if (Backward) attn.backward(in.Q, in.K, in.V, out, in.dOut, grads, ws);
  for (auto _ : state) {
    attn.forward(in.Q, in.K, in.V, out, ws);
    if (Backward) attn.backward(in.Q, in.K, in.V, out, in.dOut, grads, ws);
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(grads.dQ.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, softmax_flops(L, H, Backward));
}

/// The GEMMs of linear attention, per head, on full-length matrices.
struct GemmBuffers {
  Mat zq, zk, s, o, dpq, ds, dpk, dv, dq, dwq, dk, dwk;
  GemmBuffers(Index L) {
    for (Mat* m : {&zq, &zk, &dpq, &dpk}) m->setZero(L, num_features);
    for (Mat* m : {&o, &dv, &dq, &dk}) m->setZero(L, d_head);
    for (Mat* m : {&s, &ds, &dwq, &dwk}) m->setZero(num_features, d_head);
  }
};

template <bool Backward>
void gemm_head(const Inputs& in, const Mat& omega, Index h, GemmBuffers& b) {
  const auto q = in.Q.middleCols(h * d_head, d_head);
  const auto k = in.K.middleCols(h * d_head, d_head);
  const auto v = in.V.middleCols(h * d_head, d_head);
  const auto g = in.dOut.middleCols(h * d_head, d_head);
  b.zq.noalias() = q * omega.transpose();
  b.zk.noalias() = k * omega.transpose();
  b.s.noalias() = b.zk.transpose() * v;
  b.o.noalias() = b.zq * b.s;
  if (!Backward) return;
  b.dpq.noalias() = g * b.s.transpose();
  b.ds.noalias() = b.zq.transpose() * g;
  b.dpk.noalias() = v * b.ds.transpose();
  b.dv.noalias() = b.zk * b.ds;
  b.dq.noalias() = b.dpq * omega;
  b.dwq.noalias() = b.dpq.transpose() * q;
  b.dk.noalias() = b.dpk * omega;
  b.dwk.noalias() = b.dpk.transpose() * k;
}

/// Reference: the same GEMMs, heads in parallel when there are at least as many heads as
/// threads, otherwise Eigen's own parallel GEMM.
template <bool Backward>
void BM_EigenGemm(benchmark::State& state) {
  const Index L = state.range(0), H = state.range(1);
  const int T = static_cast<int>(state.range(2));
  set_threads(T);
  const Inputs in(L, H);
  const Mat omega = random_matrix(num_features, d_head, 6);
  std::vector<GemmBuffers> buffers;
  for (int t = 0; t < T; ++t) buffers.emplace_back(L);
  const bool heads_parallel = H >= T;
  for (auto _ : state) {
    if (heads_parallel) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) schedule(static)
#endif
      for (Index h = 0; h < H; ++h) {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#else
        const int t = 0;
#endif
        gemm_head<Backward>(in, omega, h, buffers[static_cast<std::size_t>(t)]);
      }
    } else {
      for (Index h = 0; h < H; ++h) gemm_head<Backward>(in, omega, h, buffers[0]);
    }
    benchmark::DoNotOptimize(buffers[0].o.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, linear_flops(L, H, Backward));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"L", "heads", "threads"});
  for (const int threads : {1, 2})
    for (const int heads : {1, 8})
      for (const int L : {256, 1024, 4096, 16384}) b->Args({L, heads, threads});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

// ---- peak memory -----------------------------------------------------------------------------

int peak_memory(bool causal, Index L) {
  set_threads(1);
  const Index H = 1;
  Inputs in(L, H);
  Mat out(L, H * d_head);
  coulomb::AttentionGradients<float> grads;
  grads.dQ.setZero(L, H * d_head);
  grads.dK.setZero(L, H * d_head);
  grads.dV.setZero(L, H * d_head);
  grads.dOmega.assign(1, Mat::Zero(num_features, d_head));
  out.setZero();
  const double io_mib = 8.0 * static_cast<double>(L * H * d_head) * sizeof(float) / 1048576.0;
  coulomb::Rng rng(5);
  coulomb::AttentionOptions opt;
  opt.causal = causal;
  opt.num_threads = 1;
  const coulomb::LinearAttention<Map> attn(Map(d_head, num_features, rng), opt);
  coulomb::LinearAttention<Map>::Workspace ws;
  const long before = coulomb_bench::status_kib("VmHWM");
  attn.forward(in.Q, in.K, in.V, out, ws);
  attn.backward(in.Q, in.K, in.V, out, in.dOut, grads, ws);
  const long after = coulomb_bench::status_kib("VmHWM");
  std::printf(
      "{\"mode\": \"%s\", \"L\": %ld, \"d\": %ld, \"m\": %ld, \"heads\": 1, \"scalar\": "
      "\"float\", \"inputs_outputs_MiB\": %.1f, \"VmHWM_before_MiB\": %.1f, "
      "\"VmHWM_after_MiB\": %.1f, \"peak_beyond_inputs_outputs_MiB\": %.1f, "
      "\"checksum\": %.6g}\n",
      causal ? "causal" : "noncausal", static_cast<long>(L), static_cast<long>(d_head),
      static_cast<long>(num_features), io_mib, before / 1024.0, after / 1024.0,
      (after - before) / 1024.0, static_cast<double>(out.sum() + grads.dQ.sum()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* prefix = "--peak-memory=";
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) {
      const std::string mode = argv[i] + std::strlen(prefix);
      const Index L = i + 1 < argc ? std::stol(argv[i + 1]) : 65536;
      return peak_memory(mode == "causal", L);
    }
  }
  // The core's FMA peak, so that with --benchmark_enable_random_interleaving every row and the
  // peak are measured side by side.
  benchmark::RegisterBenchmark("Peak/fma_fp32_avx512", coulomb_bench::BM_PeakFmaFp32Avx512)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("EigenGemm/forward", BM_EigenGemm<false>)->Apply(shapes);
  benchmark::RegisterBenchmark("EigenGemm/forward_backward", BM_EigenGemm<true>)->Apply(shapes);
  benchmark::RegisterBenchmark("Linear/forward", BM_Linear<false, false>)->Apply(shapes);
  benchmark::RegisterBenchmark("Linear/forward_backward", BM_Linear<true, false>)->Apply(shapes);
  benchmark::RegisterBenchmark("LinearCausal/forward", BM_Linear<false, true>)->Apply(shapes);
  benchmark::RegisterBenchmark("LinearCausal/forward_backward", BM_Linear<true, true>)
      ->Apply(shapes);
  benchmark::RegisterBenchmark("Linear/forward_backward_kept", BM_Linear<true, false, true>)
      ->Apply(shapes);
  benchmark::RegisterBenchmark("LinearCausal/forward_backward_kept", BM_Linear<true, true, true>)
      ->Apply(shapes);
  benchmark::RegisterBenchmark("Softmax/forward", BM_Softmax<false, false>)->Apply(shapes);
  benchmark::RegisterBenchmark("Softmax/forward_backward", BM_Softmax<true, false>)->Apply(shapes);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
