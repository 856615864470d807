// SPDX-License-Identifier: MIT
// Benchmark: one projected Langevin step of the particle model (Badiei Khuzani et al., 2026,
// Algorithm 1) for N particles in dimension d with a minibatch of n samples, against Eigen GEMMs
// with the same shapes and FLOP count measured in the same run.
//
// A step is: the features Φ of the minibatch (one n×d·d×N GEMM plus elementwise work), the
// alignment gradient (ŶᵀΦ, ∂E/∂Φ, the map's backward and one N×n·n×d GEMM), the Riesz gradient
// (the N×N Gram matrix ΩΩᵀ, the pair coefficients, and one N×N·N×d GEMM), N·d Gaussian draws,
// the update and the projection. The reference does only the four GEMMs of those shapes:
//   X_b Ωᵀ (n×d·d×N), dZᵀ X_b (N×n·n×d), Ω Ωᵀ (N×d·d×N), C Ω (N×N·N×d),
// 4·N·d·(n + N) FLOPs in all; time(reference) / time(step) is the fraction of the GEMM rate
// the step keeps.
//
//   build/bench/bench_particles --benchmark_format=json --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true > particles.json     (one command line)
//   python3 bench/report_particles.py --stat min particles.json
//
// Data, particles and workspaces are set up outside the timed loop. A benchmark iteration runs
// `steps` Langevin steps through ProjectedLangevin::optimize (so the optimizer's per-call setup
// is amortized); the "step_us" counter is the time per step.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <coulomb/coulomb.hpp>

namespace {

using coulomb::Index;

struct Shape {
  Index particles, dim, batch, samples;
};

Shape shape_of(const benchmark::State& state) {
  return {state.range(0), state.range(1), state.range(2), state.range(3)};
}

constexpr Index steps_per_iteration = 16;

/// Riesz s = 1 with softening 0.1. (The Coulomb default s = d − 2 = 62 would underflow float
/// for particles at typical distances and time denormal arithmetic instead of the method.)
const coulomb::RieszOptions riesz_options{.s = 1.0, .softening = 0.1};

template <typename Scalar>
coulomb::Matrix<Scalar> gaussian(Index rows, Index cols, std::uint64_t seed, double scale) {
  coulomb::Rng rng(seed);
  coulomb::Matrix<Scalar> m(rows, cols);
  coulomb::fill_standard_normal(m, rng);
  return m * static_cast<Scalar>(scale);
}

/// Inputs of norm about 1 (as attention's d^{-1/4}-scaled, mean-pooled keys are), labels from
/// the sign of a random direction.
template <typename Scalar>
void make_data(const Shape& s, coulomb::Matrix<Scalar>& X, Eigen::VectorXi& labels) {
  X = gaussian<Scalar>(s.samples, s.dim, 1, 1.0 / std::sqrt(static_cast<double>(s.dim)));
  const coulomb::Matrix<Scalar> w = gaussian<Scalar>(s.dim, 1, 2, 1.0);
  labels.resize(s.samples);
  for (Index i = 0; i < s.samples; ++i) labels(i) = (X.row(i) * w)(0, 0) > Scalar(0);
}

double step_flops(const Shape& s) {
  const double N = static_cast<double>(s.particles), d = static_cast<double>(s.dim),
               n = static_cast<double>(s.batch);
  return 4.0 * N * d * (n + N);
}

void set_counters(benchmark::State& state, const Shape& s, double steps) {
  state.counters["GFLOPS"] = benchmark::Counter(step_flops(s) * steps * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["step_us"] = benchmark::Counter(
      steps * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

/// The reference: the four GEMMs of one step's shapes, nothing else.
template <typename Scalar>
void BM_GemmReference(benchmark::State& state) {
  const Shape s = shape_of(state);
  const auto Xb = gaussian<Scalar>(s.batch, s.dim, 1, 1.0);
  const auto W = gaussian<Scalar>(s.particles, s.dim, 2, 1.0);
  const auto dZ = gaussian<Scalar>(s.batch, s.particles, 3, 1.0);
  const auto C = gaussian<Scalar>(s.particles, s.particles, 4, 1.0);
  coulomb::Matrix<Scalar> Z(s.batch, s.particles), G(s.particles, s.dim),
      gram(s.particles, s.particles), R(s.particles, s.dim);
  Z.setZero();
  G.setZero();
  gram.setZero();
  R.setZero();
  for (auto _ : state) {
    Z.noalias() = Xb * W.transpose();
    G.noalias() = dZ.transpose() * Xb;
    gram.noalias() = W * W.transpose();
    R.noalias() = C * W;
    benchmark::DoNotOptimize(Z.data());
    benchmark::DoNotOptimize(G.data());
    benchmark::DoNotOptimize(gram.data());
    benchmark::DoNotOptimize(R.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, 1.0);
}

/// `steps` full Langevin steps (minibatch alignment + Riesz repulsion + noise + ball
/// projection) per iteration.
template <typename Map>
void BM_LangevinStep(benchmark::State& state) {
  using Scalar = typename Map::Scalar;
  const Shape s = shape_of(state);
  coulomb::Matrix<Scalar> X;
  Eigen::VectorXi labels;
  make_data(s, X, labels);
  coulomb::Rng rng(5);
  const Map map(s.dim, s.particles, rng);
  coulomb::AlignmentEnergy<Map> alignment(map, X, coulomb::binary_targets<Scalar>(labels));
  coulomb::Hamiltonian<coulomb::AlignmentEnergy<Map>> hamiltonian(alignment, 1e-3, riesz_options);
  coulomb::ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep> langevin(
      {.max_iterations = steps_per_iteration, .beta = 1e4, .batch_size = s.batch, .seed = 7},
      {.radius = 10.0}, {.step_size = 1e-3});
  coulomb::Matrix<Scalar> omega = map.omega();
  langevin.optimize(hamiltonian, omega);  // touch every workspace once
  for (auto _ : state) {
    langevin.optimize(hamiltonian, omega);
    benchmark::DoNotOptimize(omega.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, static_cast<double>(steps_per_iteration));
}

/// The alignment part alone: E and ∂E/∂Ω on one minibatch.
template <typename Map>
void BM_AlignmentGradient(benchmark::State& state) {
  using Scalar = typename Map::Scalar;
  const Shape s = shape_of(state);
  coulomb::Matrix<Scalar> X;
  Eigen::VectorXi labels;
  make_data(s, X, labels);
  coulomb::Rng rng(5);
  const Map map(s.dim, s.particles, rng);
  coulomb::AlignmentEnergy<Map> alignment(map, X, coulomb::binary_targets<Scalar>(labels));
  alignment.shuffle(rng);
  coulomb::Matrix<Scalar> gradient;
  alignment.evaluate_with_gradient(map.omega(), 0, s.batch, gradient);
  for (auto _ : state) {
    benchmark::DoNotOptimize(alignment.evaluate_with_gradient(map.omega(), 0, s.batch, gradient));
    benchmark::ClobberMemory();
  }
  set_counters(state, s, 1.0);
}

/// The repulsion part alone: W and ∂W/∂Ω.
template <typename Scalar>
void BM_RieszGradient(benchmark::State& state) {
  const Shape s = shape_of(state);
  const auto omega = gaussian<Scalar>(s.particles, s.dim, 6, 1.0);
  const coulomb::RieszEnergy<Scalar> riesz(riesz_options);
  coulomb::Matrix<Scalar> gradient;
  riesz.evaluate_with_gradient(omega, gradient);
  for (auto _ : state) {
    benchmark::DoNotOptimize(riesz.evaluate_with_gradient(omega, gradient));
    benchmark::ClobberMemory();
  }
  set_counters(state, s, 1.0);
}

/// The Langevin noise alone: N·d Gaussian draws.
template <typename Scalar>
void BM_GaussianNoise(benchmark::State& state) {
  const Shape s = shape_of(state);
  coulomb::Matrix<Scalar> noise(s.particles, s.dim);
  coulomb::Rng rng(8);
  for (auto _ : state) {
    coulomb::fill_standard_normal(noise, rng);
    benchmark::DoNotOptimize(noise.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, s, 1.0);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "d", "n", "samples"});
  b->Args({256, 64, 1024, 8192});   // the acceptance shape (issue 3)
  b->Args({1024, 64, 1024, 8192});  // more particles: the O(N²d) repulsion grows
  b->Unit(benchmark::kMicrosecond);
  b->ComputeStatistics(
      "min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace coulomb;
  benchmark::RegisterBenchmark("GemmReference<float>", BM_GemmReference<float>)->Apply(shapes);
  benchmark::RegisterBenchmark("LangevinStep<FavorPlus<float>>", BM_LangevinStep<FavorPlus<float>>)
      ->Apply(shapes);
  benchmark::RegisterBenchmark("LangevinStep<RffCosSin<float>>", BM_LangevinStep<RffCosSin<float>>)
      ->Apply(shapes);
  benchmark::RegisterBenchmark("AlignmentGradient<FavorPlus<float>>",
                               BM_AlignmentGradient<FavorPlus<float>>)
      ->Apply(shapes);
  benchmark::RegisterBenchmark("RieszGradient<float>", BM_RieszGradient<float>)->Apply(shapes);
  benchmark::RegisterBenchmark("GaussianNoise<float>", BM_GaussianNoise<float>)->Apply(shapes);
  benchmark::RegisterBenchmark("GemmReference<double>", BM_GemmReference<double>)->Apply(shapes);
  benchmark::RegisterBenchmark("LangevinStep<FavorPlus<double>>",
                               BM_LangevinStep<FavorPlus<double>>)
      ->Apply(shapes);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
