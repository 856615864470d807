// SPDX-License-Identifier: MIT
// Benchmark (issue 5): the Transformer text classifier (nn/text_classifier.hpp), float, at the
// size of the sentence benchmarks: d_model 64, 4 heads (d_head 16), 2 layers, d_ff 256,
// m = 64 FAVOR+ features per layer (one Ω per layer), vocabulary 16,384, 2 classes, dropout 0.1.
//
// Inference (TextClassifier::infer: the evaluation forward's logits, no dropout) for
// L ∈ {64, 256, 1024, 4096} with a fixed number of tokens per batch, B·L = 8192 (B = 128, 32,
// 8, 2), every sequence of full length L; three variants of one model (same seed, max_length
// 4096):
//   Inference/vanilla  linear attention, Ω as drawn (FAVOR+, Gaussian rows);
//   Inference/learned  the same model after set_omega with another Ω (the vanilla Ω moved by
//                      the noise of 25 Langevin steps, η = 0.01, β = 1, and rescaled row by
//                      row to norms between 0.5 and 1.5 of the original: what Phase A changes);
//   Inference/softmax  exact softmax attention (same seed, so the same other weights);
//   Inference/vanilla_bf16  the vanilla model with InferencePrecision::bf16 (the encoder's
//                      affine layers with bf16 weights and inputs, fp32 accumulation, VDPBF16PS;
//                      core/precision.hpp), skipped with a message on a CPU without AVX512-BF16.
// Counters: ms_per_1000_seq (time per 1,000 sequences) and tokens_per_s.
//
// Phase B training step (train::detail::PhaseBStepper::step, the step of run_phase_b: forward
// with dropout, softmax cross-entropy, zero_grad, backward, the finiteness check of the gradients,
// global-norm clipping at 1, AdamW step; Ω frozen) for B = 32 and L ∈ {64, 256}, 1 and 2
// threads (TextClassifierConfig::num_threads, OpenMP and Eigen's threads), model max_length
// 256. Sequence lengths are drawn uniformly from [L/2, L] (a quarter of the positions are
// padding, as in padded sentence batches); tokens_per_s counts the padded positions, B·L per
// step, as the PyTorch peer does. Train/softmax is the same step with exact softmax attention.
//
//   build/bench/bench_model --benchmark_format=json --benchmark_repetitions=3
//       --benchmark_enable_random_interleaving=true > model.json   (one command line)
//   MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 /usr/bin/python3
//       bench/torch_train_peer.py --threads 1 2 --json torch_model.json   (one command line)
//   python3 bench/report_model.py model.json --torch torch_model.json
//
// The products of nn::Linear against Eigen's GEMM for the same shapes, one thread, n = 8192 rows
// (B·L of the training step), in × out ∈ {64 × 64, 64 × 256, 256 × 64} (the projections and
// the two feed-forward layers of d_model 64, d_ff 256):
//   Product/forward/coulomb    Linear::forward, Y = X W + 1 bᵀ (detail::tall_small_product);
//   Product/forward/eigen      the same with Eigen: Y = 1 bᵀ, then Y += X W;
//   Product/forward/bf16       Linear::forward in InferencePrecision::bf16 (W packed to bf16 pairs
//                              on every call, X converted per block of rows, VDPBF16PS);
//   Product/input_grad/coulomb dX = dY Wᵀ as Linear::backward computes it;
//   Product/input_grad/eigen   dX = dY Wᵀ with Eigen;
//   Product/weight_grad/coulomb ∂L/∂W += Xᵀ dY as Linear computes it (detail::inner_product);
//   Product/weight_grad/eigen   the same as one Eigen product over all 8,192 rows.
//
// `bench_model --parameters` prints the parameter counts of the three models (compare with the
// counts torch_train_peer.py prints). Every buffer is reused across iterations: the models,
// batches, logits and optimizer live outside the timing loop, and two untimed iterations size
// and touch everything first.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <coulomb/coulomb.hpp>

#include "bench_common.hpp"

namespace {

using coulomb_bench::set_threads;

using coulomb::Index;
using Mat = coulomb::Matrix<float>;
using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<float>>;

constexpr Index tokens_per_inference_batch = 8192;
constexpr Index train_batch = 32;
constexpr Index inference_max_length = 4096;
constexpr Index train_max_length = 256;

coulomb::nn::TextClassifierConfig model_config(coulomb::nn::AttentionKind attention,
                                               Index max_length, int threads) {
  coulomb::nn::TextClassifierConfig c;
  c.vocab_size = 16384;
  c.max_length = max_length;
  c.d_model = 64;
  c.num_heads = 4;
  c.d_ff = 256;
  c.num_layers = 2;
  c.num_classes = 2;
  c.dropout = 0.1;
  c.attention = attention;
  c.num_features = 64;
  c.shared_omega = false;
  c.train_omega = false;  // Phase B: Ω frozen
  c.num_threads = threads;
  return c;
}

/// B sequences of length L with random ids; lengths uniform in [min_length, L] (padding after).
coulomb::TokenBatch make_batch(Index L, Index B, Index min_length, Index vocab,
                               std::uint64_t seed) {
  coulomb::Rng rng(seed);
  coulomb::TokenBatch batch;
  batch.ids.setZero(L, B);
  batch.segments.setZero(L, B);
  batch.mask.setConstant(L, B, false);
  batch.labels.resize(static_cast<std::size_t>(B));
  batch.indices.resize(static_cast<std::size_t>(B));
  batch.lengths.resize(static_cast<std::size_t>(B));
  for (Index b = 0; b < B; ++b) {
    const Index n = min_length + static_cast<Index>(coulomb::uniform_index(
                                     static_cast<std::uint64_t>(L - min_length + 1), rng));
    for (Index t = 0; t < n; ++t) {
      batch.ids(t, b) = static_cast<coulomb::TokenId>(
          1 + coulomb::uniform_index(static_cast<std::uint64_t>(vocab - 1), rng));
      batch.mask(t, b) = true;
    }
    batch.labels[static_cast<std::size_t>(b)] = static_cast<int>(coulomb::uniform_index(2, rng));
    batch.indices[static_cast<std::size_t>(b)] = b;
    batch.lengths[static_cast<std::size_t>(b)] = n;
  }
  return batch;
}

/// The "learned" Ω of a layer: the vanilla one after the noise of 25 Langevin steps
/// (η = 0.01, β = 1: √(2η/β) ξ per step) and a rescaling of each row to between 0.5 and 1.5
/// of its norm. Only the values differ from the vanilla Ω, never the shapes.
Mat learned_omega(const Mat& vanilla, std::uint64_t seed) {
  coulomb::Rng rng(seed);
  Mat omega = vanilla;
  Mat noise(omega.rows(), omega.cols());
  const float sigma = std::sqrt(2.0f * 0.01f / 1.0f);
  for (int step = 0; step < 25; ++step) {
    coulomb::fill_standard_normal(noise, rng);
    omega += sigma * noise;
  }
  for (Index k = 0; k < omega.rows(); ++k) {
    const double target = (0.5 + coulomb::uniform01(rng)) * vanilla.row(k).norm();
    omega.row(k) *= static_cast<float>(target / omega.row(k).norm());
  }
  return omega;
}

enum class Variant { vanilla, learned, softmax };

std::unique_ptr<Model> make_model(Variant v, Index max_length, int threads) {
  const auto kind = v == Variant::softmax ? coulomb::nn::AttentionKind::softmax
                                          : coulomb::nn::AttentionKind::linear;
  auto model = std::make_unique<Model>(model_config(kind, max_length, threads), 1);
  if (v == Variant::learned) {
    for (Index i = 0; i < model->num_omegas(); ++i)
      model->set_omega(i, learned_omega(model->omega(i), 100 + static_cast<std::uint64_t>(i)));
  }
  return model;
}

// ---- inference ---------------------------------------------------------------------------------

// Arguments: L, threads.
template <Variant V, coulomb::InferencePrecision P = coulomb::InferencePrecision::fp32>
void BM_Inference(benchmark::State& state) {
  const Index L = state.range(0);
  const int T = static_cast<int>(state.range(1));
  const Index B = tokens_per_inference_batch / L;
  set_threads(T);
  auto model = make_model(V, inference_max_length, T);
  if (const auto choice = model->set_inference_precision(P); choice.used != P) {
    state.SkipWithError(choice.notice.c_str());
    return;
  }
  const coulomb::TokenBatch batch = make_batch(L, B, L, model->config().vocab_size, 7);
  Mat logits;
  model->infer(batch, logits);  // size and touch every buffer
  model->infer(batch, logits);
  for (auto _ : state) {
    model->infer(batch, logits);
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
  }
  state.counters["B"] = static_cast<double>(B);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(B * L), benchmark::Counter::kIsIterationInvariantRate);
  // seconds per B/1000 units = seconds per 1,000 sequences; ×1000 for milliseconds.
  state.counters["ms_per_1000_seq"] = benchmark::Counter(
      static_cast<double>(B) / 1000.0 / 1000.0,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// ---- Phase B training step ---------------------------------------------------------------------

// Arguments: L, threads.
template <Variant V>
void BM_Train(benchmark::State& state) {
  const Index L = state.range(0);
  const int T = static_cast<int>(state.range(1));
  const Index B = train_batch;
  set_threads(T);
  auto model = make_model(V, train_max_length, T);
  const coulomb::TokenBatch batch = make_batch(L, B, L / 2, model->config().vocab_size, 8);
  // The step of run_phase_b: forward with dropout, loss, backward, the finiteness check of
  // the gradients, clipping, AdamW. The schedule is flat at 1e-4 (no warm-up, the final rate
  // equal to the peak).
  coulomb::train::PhaseBOptions options;
  options.schedule.learning_rate = 1e-4;
  options.schedule.final_learning_rate = 1e-4;
  options.schedule.warmup_steps = 0;
  options.optimizer.weight_decay = 0.01;
  options.clip_norm = 1.0;
  coulomb::train::detail::PhaseBStepper<float, coulomb::FavorPlus<float>> stepper(
      *model, options, Index{1} << 40, coulomb::Rng(3));
  double loss = 0.0;
  auto step = [&] { loss = stepper.step(batch); };
  step();  // size and touch every buffer, create the optimizer state
  step();
  for (auto _ : state) {
    step();
    benchmark::DoNotOptimize(loss);
    benchmark::ClobberMemory();
  }
  state.counters["B"] = static_cast<double>(B);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(B * L), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["loss"] = loss;
}

// ---- the products of Linear against Eigen ------------------------------------------------------

enum class Product { forward, input_grad, weight_grad };

// Arguments: in, out. Coulomb = true measures what Linear computes, false the Eigen reference
// (for the weight gradient: one Eigen product over all rows instead of the blocks).
template <Product K, bool Coulomb>
void BM_Product(benchmark::State& state) {
  const Index in = state.range(0), out = state.range(1), n = 8192;
  set_threads(1);
  coulomb::Rng rng(11);
  coulomb::nn::Linear<float> layer(in, out);
  layer.initialize(rng);
  coulomb::fill_standard_normal(layer.bias(), rng);
  Mat X(n, in), dY(n, out), Y(n, out), dX(n, in), dW(in, out);
  coulomb::fill_standard_normal(X, rng);
  coulomb::fill_standard_normal(dY, rng);
  dW.setZero();
  const Mat& W = layer.weight();
  auto run = [&] {
    if constexpr (K == Product::forward) {
      if constexpr (Coulomb) {
        layer.forward(X, Y);
      } else {
        Y.rowwise() = layer.bias().col(0).transpose();
        Y.noalias() += X * W;
      }
    } else if constexpr (K == Product::input_grad) {
      if constexpr (Coulomb) {  // what Linear::backward computes for dX
        coulomb::detail::tall_small_product(dY.data(), n, n, out, W.data(), W.rows(), Index{1}, in,
                                            dX.data(), n, coulomb::detail::ProductInit::zero,
                                            static_cast<const float*>(nullptr));
      } else {
        dX.noalias() = dY * W.transpose();
      }
    } else {
      if constexpr (Coulomb) {  // what Linear::backward computes for ∂L/∂W
        coulomb::detail::inner_product(X.data(), n, dY.data(), n, n, in, out, dW.data(), in,
                                       coulomb::detail::ProductInit::accumulate);
      } else {
        dW.noalias() += X.transpose() * dY;
      }
    }
  };
  run();
  run();
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(Y.data());
    benchmark::DoNotOptimize(dX.data());
    benchmark::DoNotOptimize(dW.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP_per_s"] = benchmark::Counter(2.0 * static_cast<double>(n * in * out) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

// Arguments: in, out. Linear::forward in bf16 (skipped without AVX512-BF16).
void BM_ProductBf16(benchmark::State& state) {
  const Index in = state.range(0), out = state.range(1), n = 8192;
  set_threads(1);
  if (!coulomb::bf16_available()) {
    state.SkipWithError("no AVX512-BF16 on this CPU (or COULOMB_DISABLE_BF16 is set)");
    return;
  }
  coulomb::Rng rng(11);
  coulomb::nn::Linear<float> layer(in, out);
  layer.initialize(rng);
  coulomb::fill_standard_normal(layer.bias(), rng);
  Mat X(n, in), Y(n, out);
  coulomb::fill_standard_normal(X, rng);
  layer.forward(X, Y, coulomb::InferencePrecision::bf16);
  layer.forward(X, Y, coulomb::InferencePrecision::bf16);
  for (auto _ : state) {
    layer.forward(X, Y, coulomb::InferencePrecision::bf16);
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP_per_s"] = benchmark::Counter(2.0 * static_cast<double>(n * in * out) * 1e-9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

void product_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"in", "out"});
  b->Args({64, 64});
  b->Args({64, 256});
  b->Args({256, 64});
  b->Unit(benchmark::kMicrosecond);
  b->UseRealTime();
}

void inference_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"L", "threads"});
  for (const int threads : {1, 2})
    for (const int L : {64, 256, 1024, 4096}) b->Args({L, threads});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

void train_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"L", "threads"});
  for (const int threads : {1, 2})
    for (const int L : {64, 256}) b->Args({L, threads});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

int print_parameters() {
  struct Row {
    const char* name;
    Variant v;
    Index max_length;
  };
  for (const Row& r :
       {Row{"inference linear (vanilla/learned)", Variant::vanilla, inference_max_length},
        Row{"inference softmax", Variant::softmax, inference_max_length},
        Row{"train linear", Variant::vanilla, train_max_length},
        Row{"train softmax", Variant::softmax, train_max_length}}) {
    auto model = make_model(r.v, r.max_length, 1);
    Index trainable = 0, frozen = 0;
    for (const auto& p : model->parameters()) (p.trainable ? trainable : frozen) += p.value->size();
    std::printf("%-36s max_length %5ld: %ld parameters (%ld trainable, %ld frozen: Omega)\n",
                r.name, static_cast<long>(r.max_length), static_cast<long>(trainable + frozen),
                static_cast<long>(trainable), static_cast<long>(frozen));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--parameters") == 0) return print_parameters();
  {
    auto model = make_model(Variant::vanilla, train_max_length, 1);
    benchmark::AddCustomContext("train_model_parameters", std::to_string(model->num_parameters()));
  }
  {
    auto model = make_model(Variant::vanilla, inference_max_length, 1);
    benchmark::AddCustomContext("inference_model_parameters",
                                std::to_string(model->num_parameters()));
  }
#ifdef _OPENMP
  benchmark::AddCustomContext("openmp", "yes");
#else
  benchmark::AddCustomContext("openmp", "no (one thread only)");
#endif
  benchmark::RegisterBenchmark("Inference/vanilla", BM_Inference<Variant::vanilla>)
      ->Apply(inference_shapes);
  benchmark::RegisterBenchmark("Inference/vanilla_bf16",
                               BM_Inference<Variant::vanilla, coulomb::InferencePrecision::bf16>)
      ->Apply(inference_shapes);
  benchmark::RegisterBenchmark("Inference/learned", BM_Inference<Variant::learned>)
      ->Apply(inference_shapes);
  benchmark::RegisterBenchmark("Inference/softmax", BM_Inference<Variant::softmax>)
      ->Apply(inference_shapes);
  benchmark::RegisterBenchmark("Train/linear", BM_Train<Variant::vanilla>)->Apply(train_shapes);
  benchmark::RegisterBenchmark("Train/softmax", BM_Train<Variant::softmax>)->Apply(train_shapes);
  benchmark::RegisterBenchmark("Product/forward/coulomb", BM_Product<Product::forward, true>)
      ->Apply(product_shapes);
  benchmark::RegisterBenchmark("Product/forward/eigen", BM_Product<Product::forward, false>)
      ->Apply(product_shapes);
  benchmark::RegisterBenchmark("Product/forward/bf16", BM_ProductBf16)->Apply(product_shapes);
  benchmark::RegisterBenchmark("Product/input_grad/coulomb", BM_Product<Product::input_grad, true>)
      ->Apply(product_shapes);
  benchmark::RegisterBenchmark("Product/input_grad/eigen", BM_Product<Product::input_grad, false>)
      ->Apply(product_shapes);
  benchmark::RegisterBenchmark("Product/weight_grad/coulomb",
                               BM_Product<Product::weight_grad, true>)
      ->Apply(product_shapes);
  benchmark::RegisterBenchmark("Product/weight_grad/eigen", BM_Product<Product::weight_grad, false>)
      ->Apply(product_shapes);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
