// SPDX-License-Identifier: MIT
// Mean-field behaviour of the particle model (Badiei Khuzani et al., 2026, §3): with β and λ
// fixed, the same projected Langevin dynamics run with more particles gives an energy H_N and a
// particle histogram that fluctuate less across seeds and settle on a limit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <coulomb/coulomb.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace particles_meanfield_test {

namespace {

using coulomb::Index;
// Float: the property is statistical, and Eigen 3.4 vectorizes sin, cos and log for float
// only, which keeps the N = 256 runs fast.
using Mat = coulomb::Matrix<float>;
using Map = coulomb::RffCosSin<float>;

constexpr double radius = 5.0;
constexpr int bins = 10;

struct Outcome {
  double energy;
  std::vector<double> histogram;  // fraction of the particles per bin of ‖ω‖ on [0, R]
};

Outcome simulate(const Mat& X, const Eigen::VectorXi& labels, Index n_particles,
                 std::uint64_t seed) {
  coulomb::Rng rng(seed);
  const Map map(2, n_particles, rng);
  coulomb::AlignmentEnergy<Map> alignment(map, X, coulomb::binary_targets<float>(labels));
  coulomb::Hamiltonian<coulomb::AlignmentEnergy<Map>> hamiltonian(alignment, 0.05,
                                                                  {.s = 0.0, .softening = 0.1});
  coulomb::ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep> langevin(
      {.max_iterations = 100, .beta = 200.0, .seed = seed + 1}, {.radius = radius},
      {.step_size = 0.5});
  Mat omega = map.omega();
  langevin.optimize(hamiltonian, omega);
  Outcome out{static_cast<double>(hamiltonian.evaluate(omega)), std::vector<double>(bins, 0.0)};
  for (Index k = 0; k < n_particles; ++k) {
    const double norm = static_cast<double>(omega.row(k).norm());
    const int b = std::min(bins - 1, static_cast<int>(norm / radius * bins));
    out.histogram[static_cast<std::size_t>(b)] += 1.0 / static_cast<double>(n_particles);
  }
  return out;
}

double sd(const std::vector<double>& v) {
  const double m = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double s = 0.0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

}  // namespace

TEST_CASE("ParticleModel_MeanFieldFluctuationsShrinkWithN", "[particles][langevin][meanfield]") {
  coulomb::Rng rng = coulomb_test::test_rng("ParticleModel_MeanFieldFluctuationsShrinkWithN");
  const Index n = 120;
  Mat X(n, 2);
  coulomb::fill_standard_normal(X, rng);
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i) labels(i) = X(i, 0) * X(i, 1) > 0.0;
  const std::uint64_t base = rng();

  const std::vector<Index> sizes{16, 64, 256};
  const int seeds = 10;
  std::vector<double> energy_sd, histogram_spread;
  std::vector<std::vector<double>> mean_histogram;
  for (Index size : sizes) {
    std::vector<double> energies;
    std::vector<std::vector<double>> histograms;
    for (int s = 0; s < seeds; ++s) {
      const Outcome o =
          simulate(X, labels, size,
                   base + 1000 * static_cast<std::uint64_t>(size) + static_cast<std::uint64_t>(s));
      energies.push_back(o.energy);
      histograms.push_back(o.histogram);
    }
    energy_sd.push_back(sd(energies));
    // Histogram statistic: mean total-variation distance between the histograms of two seeds.
    double spread = 0.0;
    int pairs = 0;
    for (int a = 0; a < seeds; ++a)
      for (int b = 0; b < a; ++b, ++pairs)
        for (int k = 0; k < bins; ++k)
          spread += 0.5 * std::abs(histograms[a][k] - histograms[b][k]);
    histogram_spread.push_back(spread / pairs);
    std::vector<double> mean(bins, 0.0);
    for (const auto& h : histograms)
      for (int k = 0; k < bins; ++k) mean[k] += h[k] / seeds;
    mean_histogram.push_back(mean);
  }
  INFO("sd of H_N over seeds for N = 16, 64, 256: " << energy_sd[0] << ", " << energy_sd[1] << ", "
                                                    << energy_sd[2]);
  INFO("mean TV distance between seeds' histograms: "
       << histogram_spread[0] << ", " << histogram_spread[1] << ", " << histogram_spread[2]);
  // Fluctuations fall like 1/√N: a factor 4 from N = 16 to 256; require at least 2.
  CHECK(energy_sd[2] < 0.5 * energy_sd[0]);
  CHECK(histogram_spread[2] < 0.5 * histogram_spread[0]);
  CHECK(histogram_spread[1] < histogram_spread[0]);
  CHECK(histogram_spread[2] < histogram_spread[1]);
  // The mean histogram settles: it moves less from N = 64 to 256 than the seed-to-seed spread
  // at N = 16.
  double drift = 0.0;
  for (int k = 0; k < bins; ++k)
    drift += 0.5 * std::abs(mean_histogram[2][k] - mean_histogram[1][k]);
  INFO("TV distance between the mean histograms of N = 64 and 256: " << drift);
  CHECK(drift < 0.5 * histogram_spread[0]);
}

}  // namespace particles_meanfield_test
