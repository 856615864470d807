// SPDX-License-Identifier: MIT
// Tests of the scale-free particle learner and the issue-20 API: learned phases, the Riesz
// energy on leading columns, the balanced repulsion weight, TiltedLangevin (its stationary law,
// its scale invariance, its reproducibility), the EnergyPlateau convergence report, the
// block-streamed importance sampling with its support model, and the reference ridge.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include <Eigen/QR>

#include <coulomb/coulomb.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace particles_learner_test {

namespace {

using coulomb::Index;
using Mat = coulomb::Matrix<double>;
using Vec = coulomb::Vector<double>;

/// Central finite-difference gradient of f at Θ, step scaled to each entry.
template <typename F>
Mat finite_difference(F&& f, const Mat& theta) {
  Mat grad(theta.rows(), theta.cols());
  for (Index j = 0; j < theta.cols(); ++j)
    for (Index i = 0; i < theta.rows(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::abs(theta(i, j)));
      Mat plus = theta, minus = theta;
      plus(i, j) += h;
      minus(i, j) -= h;
      grad(i, j) = (f(plus) - f(minus)) / (2 * h);
    }
  return grad;
}

/// Radial labels in d dimensions: 1 when ‖x‖² > d (Sinha & Duchi's example, small).
void make_radial(Index n, Index d, coulomb::Rng& rng, Mat& X, Eigen::VectorXi& labels) {
  X.resize(n, d);
  coulomb::fill_standard_normal(X, rng);
  labels.resize(n);
  for (Index i = 0; i < n; ++i) labels(i) = X.row(i).squaredNorm() > static_cast<double>(d);
}

/// H(Θ) = (a/2N) Σ_k ‖ω_k‖²: a quadratic objective whose tilted law is Gaussian.
struct Quadratic {
  double a = 1.0;
  double evaluate_with_gradient(const Mat& theta, Mat& gradient) const {
    const double n = static_cast<double>(theta.rows());
    gradient = (a / n) * theta;
    return 0.5 * a * theta.squaredNorm() / n;
  }
};

/// A constant objective: the tilted law is the base measure itself.
struct Constant {
  double evaluate_with_gradient(const Mat& theta, Mat& gradient) const {
    gradient.setZero(theta.rows(), theta.cols());
    return 1.0;
  }
};

/// An objective scaled by c: c·H.
template <typename F>
struct Scaled {
  F* inner;
  double c;
  double evaluate_with_gradient(const Mat& theta, Mat& gradient) {
    const double v = inner->evaluate_with_gradient(theta, gradient);
    gradient *= c;
    return c * v;
  }
};

/// H(Θ) = Σ_k e_k with e_k = (a/2N)‖θ_k − μ‖², separable: TiltedLangevin may take exact moves.
struct QuadraticParticles {
  double a = 1.0;
  double mu = 0.0;
  static bool separable() { return true; }
  void particle_energies(const Mat& theta, Vec& e) const {
    const double n = static_cast<double>(theta.rows());
    e = (0.5 * a / n) * (theta.array() - mu).matrix().rowwise().squaredNorm();
  }
  double evaluate_particles(const Mat& theta, Vec& e, Mat& gradient) const {
    particle_energies(theta, e);
    gradient = (a / static_cast<double>(theta.rows())) * (theta.array() - mu).matrix();
    return e.sum();
  }
  double evaluate_with_gradient(const Mat& theta, Mat& gradient) const {
    Vec e;
    return evaluate_particles(theta, e, gradient);
  }
};

/// A separable double well in one dimension: e(θ) = −(c/N)[exp(−(θ−2)²/0.02) + ½
/// exp(−(θ+2)²/0.02)], two narrow wells that the local moves of a small step cannot cross.
struct DoubleWell {
  double c = 1.0;
  static double well(double t) {
    return std::exp(-(t - 2) * (t - 2) / 0.02) + 0.5 * std::exp(-(t + 2) * (t + 2) / 0.02);
  }
  static double well_derivative(double t) {
    return -(t - 2) / 0.01 * std::exp(-(t - 2) * (t - 2) / 0.02) -
           0.5 * (t + 2) / 0.01 * std::exp(-(t + 2) * (t + 2) / 0.02);
  }
  static bool separable() { return true; }
  void particle_energies(const Mat& theta, Vec& e) const {
    const double n = static_cast<double>(theta.rows());
    e.resize(theta.rows());
    for (Index k = 0; k < theta.rows(); ++k) e(k) = -(c / n) * well(theta(k, 0));
  }
  double evaluate_particles(const Mat& theta, Vec& e, Mat& gradient) const {
    particle_energies(theta, e);
    const double n = static_cast<double>(theta.rows());
    gradient.resize(theta.rows(), 1);
    for (Index k = 0; k < theta.rows(); ++k)
      gradient(k, 0) = -(c / n) * well_derivative(theta(k, 0));
    return e.sum();
  }
  double evaluate_with_gradient(const Mat& theta, Mat& gradient) const {
    Vec e;
    return evaluate_particles(theta, e, gradient);
  }
};

}  // namespace

TEST_CASE("AlignmentEnergy_FourierPathMatchesTheFeaturePath", "[particles][gradient]") {
  // Rff and RffCosSin take the fused Fourier path; it must give the value and gradient of the
  // general path (features, ∂E/∂Φ, the map's backward_params), here computed in the test.
  coulomb::Rng rng = coulomb_test::test_rng("AlignmentEnergy_FourierPathMatchesTheFeaturePath");
  const Index n = 157, d = 4, m = 9;  // n not a multiple of the block of rows
  Mat X;
  Eigen::VectorXi labels;
  make_radial(n, d, rng, X, labels);
  Eigen::VectorXi classes(n);
  for (Index i = 0; i < n; ++i) classes(i) = static_cast<int>(coulomb::uniform_index(3, rng));
  const std::vector<Mat> targets{coulomb::binary_targets<double>(labels),
                                 coulomb::one_hot_targets<double>(classes, 3)};
  auto check = [&](auto map, const Mat& Y, coulomb::AlignmentOptions options) {
    using Map = decltype(map);
    INFO(Map::name() << ", C = " << Y.cols() << ", centre = " << options.centre
                     << ", phases = " << options.learn_phases);
    coulomb::AlignmentEnergy<Map> energy(map, X, Y, options);
    STATIC_REQUIRE(coulomb::AlignmentEnergy<Map>::separable());
    Mat theta = map.omega();
    if constexpr (coulomb::feature_map_traits<Map>::has_phases)
      if (options.learn_phases) theta = coulomb::phased_particles(map);
    Mat gradient;
    const double value = energy.evaluate_with_gradient(theta, gradient);
    // The general path.
    const Mat& y = energy.targets();
    const Mat phi = map.map(X);
    const Mat projection = y.transpose() * phi / double(n);
    const Mat dphi = -2.0 / double(n) * y * projection;
    Mat d_omega;
    coulomb::BackwardWorkspace<double> workspace;
    map.backward_params(X, phi, dphi, d_omega, workspace);
    CHECK(value == Approx(-projection.squaredNorm()).epsilon(1e-12));
    CHECK(coulomb_test::rel_diff(gradient.leftCols(d), d_omega) < 1e-12);
    if (gradient.cols() == d + 1) {
      const Vec d_phase = workspace.dZ.colwise().sum().transpose();
      CHECK(coulomb_test::rel_diff(gradient.col(d), d_phase) < 1e-12);
    }
    // One-particle energies: e_k = −Σ_c P_kc² over the particle's own features.
    Vec e, e_only;
    Mat gradient_particles;
    CHECK(energy.evaluate_particles(theta, e, gradient_particles) == Approx(value).epsilon(1e-12));
    energy.particle_energies(theta, e_only);
    CHECK(coulomb_test::rel_diff(e, e_only) < 1e-12);
    CHECK(coulomb_test::rel_diff(gradient_particles, gradient) < 1e-12);
    for (Index k = 0; k < m; ++k) {
      double expected = -projection.col(k).squaredNorm();
      if (Map::outputs_per_particle == 2) expected -= projection.col(m + k).squaredNorm();
      CHECK(e(k) == Approx(expected).epsilon(1e-10));
    }
    // A minibatch: the rows in the current order.
    energy.shuffle(rng);
    Mat batch_gradient;
    const double batch_value = energy.evaluate_with_gradient(theta, 20, 61, batch_gradient);
    Mat other;
    const Mat fd = finite_difference(
        [&](const Mat& t) { return energy.evaluate_with_gradient(t, 20, 61, other); }, theta);
    CHECK(coulomb_test::rel_diff(batch_gradient, fd) < 1e-6);
    CHECK(batch_value != Approx(value).epsilon(1e-6));  // it is a different sum
  };
  for (const Mat& Y : targets)
    for (const bool centre : {false, true}) {
      check(coulomb::Rff<double>(d, m, rng, {.bandwidth = 0.7}), Y, {.centre = centre});
      check(coulomb::Rff<double>(d, m, rng, {.bandwidth = 0.7}), Y,
            {.centre = centre, .learn_phases = true});
      check(coulomb::RffCosSin<double>(d, m, rng, {.bandwidth = 0.7}), Y, {.centre = centre});
    }
}

TEST_CASE("TiltedLangevin_MetropolisIsExactAtLargeSteps", "[particles][langevin]") {
  // e_k = (a/2N)‖θ_k − μ‖², P₀ = N(0, σ²): π_k is Gaussian with precision τ = β_eff a + 1/σ² and
  // mean β_eff a μ / τ. At h = 0.6 the unadjusted chain is far off (its bias grows with h·τσ²);
  // the Metropolis-adjusted chain must be exact up to sampling error.
  coulomb::Rng rng = coulomb_test::test_rng("TiltedLangevin_MetropolisIsExactAtLargeSteps");
  const Index n_particles = 4000;
  const double sigma = 0.5;
  QuadraticParticles objective{4.0, 0.3};
  auto moments = [&](bool metropolis, double& mean, double& var, double& expected_mean,
                     double& expected_var, double& acceptance) {
    Mat theta = coulomb_test::gaussian(n_particles, 2, rng) * sigma;
    coulomb::TiltedLangevin langevin({.max_iterations = 150,
                                      .beta = 2.0,
                                      .step = 0.6,
                                      .base_scale = sigma,
                                      .seed = 9,
                                      .metropolis = metropolis});
    langevin.optimize(objective, theta);
    const auto& report = langevin.report();
    CHECK(report.metropolis == metropolis);
    const double tau = report.beta_effective * objective.a + 1.0 / (sigma * sigma);
    expected_mean = report.beta_effective * objective.a * objective.mu / tau;
    expected_var = 1.0 / tau;
    mean = theta.mean();
    var = (theta.array() - mean).square().mean();
    acceptance = report.moves_offered > 0
                     ? double(report.moves_accepted) / double(report.moves_offered)
                     : 1.0;
  };
  double mean, var, expected_mean, expected_var, acceptance;
  moments(true, mean, var, expected_mean, expected_var, acceptance);
  INFO("MALA: mean " << mean << " (" << expected_mean << "), variance " << var << " ("
                     << expected_var << "), acceptance " << acceptance);
  const double se = std::sqrt(expected_var / (2.0 * n_particles));
  CHECK(std::abs(mean - expected_mean) < 5.0 * se);
  CHECK(std::abs(var / expected_var - 1.0) < 5.0 * std::sqrt(1.0 / n_particles));
  CHECK(acceptance > 0.2);
  CHECK(acceptance < 0.99);  // the large step is rejected often: the check is not vacuous
  // The unadjusted chain at the same step misses the variance by more than that.
  moments(false, mean, var, expected_mean, expected_var, acceptance);
  INFO("ULA: variance " << var << " (" << expected_var << ")");
  CHECK(std::abs(var / expected_var - 1.0) > 10.0 * std::sqrt(1.0 / n_particles));
}

TEST_CASE("TiltedLangevin_JumpsLeaveTheTiltedLawInvariant", "[particles][langevin]") {
  // Two narrow wells at ±2 (the one at −2 half as deep) under P₀ = N(0, 1.5²), all particles
  // started in the well at +2. With a small step no particle crosses; independence jumps to P₀
  // must bring the share of the well at −2 to its exact value, ∫₋ π / ∫ π by quadrature.
  coulomb::Rng rng = coulomb_test::test_rng("TiltedLangevin_JumpsLeaveTheTiltedLawInvariant");
  const Index n_particles = 3000;
  const double sigma = 1.5;
  DoubleWell objective{1.0};
  auto share_left = [&](Index jump_period, double& expected, double& accepted) {
    Mat theta =
        Mat::Constant(n_particles, 1, 2.0) + 0.05 * coulomb_test::gaussian(n_particles, 1, rng);
    coulomb::TiltedLangevin langevin({.max_iterations = 400,
                                      .beta = 20.0,
                                      .step = 0.0002,
                                      .base_scale = sigma,
                                      .seed = 4,
                                      .metropolis = true,
                                      .jump_period = jump_period});
    langevin.optimize(objective, theta);
    const double beta_n = langevin.report().beta_effective;  // β_eff N · (c/N) = β_eff c
    double left = 0.0, total = 0.0;
    for (double t = -8.0; t <= 8.0; t += 1e-4) {
      const double w =
          std::exp(beta_n * objective.c * DoubleWell::well(t) - t * t / (2 * sigma * sigma));
      total += w;
      if (t < 0) left += w;
    }
    expected = left / total;
    accepted = double(langevin.report().jumps_accepted);
    return (theta.array() < 0.0).cast<double>().mean();
  };
  double expected, accepted;
  const double with_jumps = share_left(4, expected, accepted);
  INFO("share at -2 with jumps " << with_jumps << ", exact " << expected << ", jumps accepted "
                                 << accepted);
  REQUIRE(expected > 0.05);
  REQUIRE(expected < 0.95);
  CHECK(std::abs(with_jumps - expected) <
        5.0 * std::sqrt(expected * (1 - expected) / n_particles) + 0.01);
  CHECK(accepted > 0);
  const double without = share_left(0, expected, accepted);
  INFO("share at -2 without jumps " << without);
  CHECK(without < 0.01);
}

TEST_CASE("AlignmentEnergy_PhaseGradientMatchesFiniteDifferences", "[particles][gradient]") {
  coulomb::Rng rng =
      coulomb_test::test_rng("AlignmentEnergy_PhaseGradientMatchesFiniteDifferences");
  const Index n = 30, d = 3, m = 6;
  Mat X;
  Eigen::VectorXi labels;
  make_radial(n, d, rng, X, labels);
  for (const bool centre : {false, true}) {
    INFO("centre = " << centre);
    const coulomb::Rff<double> map(d, m, rng, {.bandwidth = 0.8});
    coulomb::AlignmentEnergy<coulomb::Rff<double>> energy(
        map, X, coulomb::binary_targets<double>(labels), {.centre = centre, .learn_phases = true});
    const Mat theta = coulomb::phased_particles(map);
    REQUIRE(theta.cols() == d + 1);
    Mat gradient;
    const double value = energy.evaluate_with_gradient(theta, gradient);
    REQUIRE(gradient.rows() == m);
    REQUIRE(gradient.cols() == d + 1);
    // The value is the alignment of the map with these phases, through the n×n kernel.
    const Mat y = energy.targets();
    const Mat phi = map.map(X);
    CHECK(
        value ==
        Approx(-(y.transpose() * phi * phi.transpose() * y)(0, 0) / double(n * n)).epsilon(1e-12));
    const Mat fd = finite_difference([&](const Mat& t) { return energy.evaluate(t); }, theta);
    CHECK(coulomb_test::rel_diff(gradient, fd) < 1e-6);
    // A minibatch: the same formula on the batch's rows.
    energy.shuffle(rng);
    Mat batch_gradient;
    energy.evaluate_with_gradient(theta, 5, 12, batch_gradient);
    Mat other;
    const Mat fd_batch = finite_difference(
        [&](const Mat& t) { return energy.evaluate_with_gradient(t, 5, 12, other); }, theta);
    CHECK(coulomb_test::rel_diff(batch_gradient, fd_batch) < 1e-6);
    // Float agrees with double (the same particles, rounded).
    using MapF = coulomb::Rff<float>;
    const coulomb::Matrix<float> theta_f = theta.cast<float>();
    MapF map_f(theta_f.leftCols(d), theta_f.col(d), {.bandwidth = 0.8});
    coulomb::AlignmentEnergy<MapF> energy_f(map_f, X.cast<float>(),
                                            coulomb::binary_targets<float>(labels),
                                            {.centre = centre, .learn_phases = true});
    coulomb::Matrix<float> gradient_f;
    energy_f.evaluate_with_gradient(theta_f, gradient_f);
    CHECK(coulomb_test::rel_diff(gradient_f, gradient) < coulomb_test::tol<float>::loose);
  }
}

TEST_CASE("AlignmentEnergy_PhasesNeedAMapWithPhases", "[particles][input]") {
  coulomb::Rng rng = coulomb_test::test_rng("AlignmentEnergy_PhasesNeedAMapWithPhases");
  Mat X;
  Eigen::VectorXi labels;
  make_radial(10, 2, rng, X, labels);
  const Mat Y = coulomb::binary_targets<double>(labels);
  using CosSin = coulomb::RffCosSin<double>;
  CHECK_THROWS_WITH(
      coulomb::AlignmentEnergy<CosSin>(CosSin(2, 4, rng), X, Y, {.learn_phases = true}),
      Catch::Contains("'options.learn_phases'"));
  coulomb::Rff<double> map(2, 4, rng);
  coulomb::AlignmentEnergy<coulomb::Rff<double>> energy(map, X, Y, {.learn_phases = true});
  CHECK_THROWS_AS(energy.evaluate(map.omega()), coulomb::invalid_argument);  // d columns, not d+1
  // set_phased_particles round-trips and refuses a wrong shape without changing the map.
  Mat theta = coulomb::phased_particles(map);
  theta.col(2).array() += 0.5;
  coulomb::set_phased_particles(map, theta);
  CHECK(coulomb::phased_particles(map) == theta);
  CHECK_THROWS_WITH(coulomb::set_phased_particles(map, theta.leftCols(2)),
                    Catch::Contains("'theta'"));
  CHECK(coulomb::phased_particles(map) == theta);
}

TEST_CASE("RieszEnergy_LeadingColumnsOnly", "[particles][gradient]") {
  coulomb::Rng rng = coulomb_test::test_rng("RieszEnergy_LeadingColumnsOnly");
  const Mat theta = coulomb_test::gaussian(7, 4, rng);
  const coulomb::RieszEnergy<double> restricted({.s = 1.0, .softening = 0.1, .columns = 3});
  const coulomb::RieszEnergy<double> plain({.s = 1.0, .softening = 0.1});
  Mat g, g_plain;
  const double value = restricted.evaluate_with_gradient(theta, g);
  CHECK(value == plain.evaluate_with_gradient(theta.leftCols(3).eval(), g_plain));
  CHECK(g.leftCols(3) == g_plain);
  CHECK(g.col(3).isZero(0.0));
  const Mat fd = finite_difference([&](const Mat& t) { return restricted.evaluate(t); }, theta);
  CHECK(coulomb_test::rel_diff(g, fd) < 1e-6);
  // The Coulomb default s = D − 2 uses the leading columns' dimension.
  CHECK_THROWS_AS(coulomb::RieszEnergy<double>({.columns = -1}), coulomb::invalid_argument);
  CHECK_THROWS_WITH(restricted.evaluate(theta.leftCols(2).eval()), Catch::Contains("'omega'"));
}

TEST_CASE("BalancedRepulsionWeight_BalancesTheGradients", "[particles]") {
  coulomb::Rng rng = coulomb_test::test_rng("BalancedRepulsionWeight_BalancesTheGradients");
  Mat X;
  Eigen::VectorXi labels;
  make_radial(40, 3, rng, X, labels);
  const coulomb::Rff<double> map(3, 8, rng);
  coulomb::AlignmentEnergy<coulomb::Rff<double>> energy(
      map, X, coulomb::binary_targets<double>(labels), {.centre = false, .learn_phases = true});
  const coulomb::RieszOptions riesz{.s = 1.0, .softening = 0.05, .columns = 3};
  const Mat theta = coulomb::phased_particles(map);
  const double lambda = coulomb::balanced_repulsion_weight(energy, riesz, theta, 0.5);
  Mat g_align, g_riesz;
  energy.evaluate_with_gradient(theta, g_align);
  coulomb::RieszEnergy<double>(riesz).evaluate_with_gradient(theta, g_riesz);
  CHECK(lambda * g_riesz.leftCols(3).norm() ==
        Approx(0.5 * g_align.leftCols(3).norm()).epsilon(1e-12));
  CHECK_THROWS_WITH(coulomb::balanced_repulsion_weight(energy, riesz, theta, -1.0),
                    Catch::Contains("'relative'"));
}

TEST_CASE("TiltedLangevin_ConstantObjectiveSamplesTheBaseMeasure", "[particles][langevin]") {
  // With H constant the stationary law is P₀ = N(0, σ²I) × U[−π, π): after many steps the
  // particles' coordinates have variance σ² and the phases the uniform law's mean 0 and
  // variance π²/3.
  const double sigma = 2.5;
  const Index n_particles = 20000;
  Mat theta = Mat::Zero(n_particles, 3);
  Constant objective;
  coulomb::TiltedLangevin langevin(
      {.max_iterations = 400, .step = 0.02, .base_scale = sigma, .phase_columns = 1, .seed = 3});
  langevin.optimize(objective, theta);
  for (Index c = 0; c < 2; ++c) {
    const double var = theta.col(c).squaredNorm() / double(n_particles);
    INFO("column " << c << ": variance " << var << ", expected " << sigma * sigma);
    // Discretization: ULA's relative bias h/2 = 1 % on a unit Gaussian, taming a few % more;
    // sampling: the standard error of a variance, √(2/N) = 1 %.
    CHECK(std::abs(var / (sigma * sigma) - 1.0) < 0.04 + 4.0 * std::sqrt(2.0 / n_particles));
  }
  CHECK(theta.col(2).minCoeff() >= -std::numbers::pi);
  CHECK(theta.col(2).maxCoeff() < std::numbers::pi);
  const double se = std::numbers::pi / std::sqrt(3.0 * n_particles);
  CHECK(std::abs(theta.col(2).mean()) < 5.0 * se);
  CHECK(theta.col(2).squaredNorm() / n_particles ==
        Approx(std::numbers::pi * std::numbers::pi / 3.0).epsilon(0.06));
}

TEST_CASE("TiltedLangevin_QuadraticObjectiveGivesTheTiltedGaussian", "[particles][langevin]") {
  // H = (a/2N) Σ‖ω_k‖² and P₀ = N(0, σ²I): the tilted law ∝ exp(−β_eff a‖ω‖²/2 − ‖ω‖²/(2σ²))
  // is Gaussian of variance 1/(β_eff a + 1/σ²), with β_eff = β/s read from the report.
  coulomb::Rng rng =
      coulomb_test::test_rng("TiltedLangevin_QuadraticObjectiveGivesTheTiltedGaussian");
  const Index n_particles = 20000;
  const double sigma = 0.5;
  Mat theta = coulomb_test::gaussian(n_particles, 2, rng) * sigma;
  Quadratic objective{3.0};
  coulomb::TiltedLangevin langevin(
      {.max_iterations = 600, .beta = 1.0, .step = 0.02, .base_scale = sigma, .seed = 5});
  langevin.optimize(objective, theta);
  const double beta_eff = langevin.report().beta_effective;
  // s = σ · RMS‖N ∇_k H‖ = σ · a · RMS‖ω_k‖ at the start.
  REQUIRE(langevin.report().energy_scale > 0.0);
  const double expected = 1.0 / (beta_eff * objective.a + 1.0 / (sigma * sigma));
  const double var = theta.squaredNorm() / double(2 * n_particles);
  INFO("variance " << var << ", expected " << expected << ", beta_eff " << beta_eff);
  // Precision in the base units p = β_eff a σ² + 1 ≈ 1.7: ULA's relative bias h·p/2 ≈ 2 %,
  // taming a few % more; the standard error of the variance √(1/N) = 0.7 %.
  CHECK(std::abs(var / expected - 1.0) < 0.05 + 4.0 * std::sqrt(1.0 / n_particles));
}

TEST_CASE("TiltedLangevin_IsScaleFreeAndReproducible", "[particles][langevin]") {
  coulomb::Rng rng = coulomb_test::test_rng("TiltedLangevin_IsScaleFreeAndReproducible");
  Mat X;
  Eigen::VectorXi labels;
  make_radial(60, 3, rng, X, labels);
  const coulomb::Rff<double> map(3, 10, rng);
  coulomb::AlignmentEnergy<coulomb::Rff<double>> energy(
      map, X, coulomb::binary_targets<double>(labels), {.centre = false, .learn_phases = true});
  const Mat theta0 = coulomb::phased_particles(map);
  const coulomb::TiltedLangevinOptions options{
      .max_iterations = 50, .base_scale = 1.0, .phase_columns = 1, .seed = 9};
  auto run = [&](auto& objective) {
    Mat theta = theta0;
    coulomb::TiltedLangevin(options).optimize(objective, theta);
    return theta;
  };
  const Mat once = run(energy);
  CHECK(run(energy) == once);  // same seed, same bits
  // Multiplying H by 1000 changes s by 1000 and β_eff by 1/1000: the same dynamics.
  Scaled<decltype(energy)> scaled{&energy, 1000.0};
  CHECK(coulomb_test::rel_diff(run(scaled), once) < 1e-9);
  // Another seed moves differently.
  Mat other = theta0;
  coulomb::TiltedLangevinOptions reseeded = options;
  reseeded.seed = 10;
  coulomb::TiltedLangevin(reseeded).optimize(energy, other);
  CHECK(other != once);
}

TEST_CASE("TiltedLangevin_WithoutNoiseDescends", "[particles][langevin]") {
  coulomb::Rng rng = coulomb_test::test_rng("TiltedLangevin_WithoutNoiseDescends");
  Mat theta = coulomb_test::gaussian(20, 3, rng);
  Quadratic objective{1.0};
  coulomb::EnergyLog log;
  coulomb::TiltedLangevin({.max_iterations = 40, .step = 0.1, .noise = false})
      .optimize(objective, theta, log);
  for (std::size_t t = 1; t < log.energy.size(); ++t) CHECK(log.energy[t] < log.energy[t - 1]);
}

TEST_CASE("TiltedLangevin_BadInput", "[particles][langevin][input]") {
  using coulomb::TiltedLangevin;
  CHECK_THROWS_WITH(TiltedLangevin({.beta = 0.0}), Catch::Contains("'options.beta'"));
  CHECK_THROWS_WITH(TiltedLangevin({.step = -1.0}), Catch::Contains("'options.step'"));
  CHECK_THROWS_WITH(TiltedLangevin({.base_scale = 0.0}), Catch::Contains("'options.base_scale'"));
  CHECK_THROWS_WITH(TiltedLangevin({.phase_columns = -1}),
                    Catch::Contains("'options.phase_columns'"));
  CHECK_THROWS_WITH(TiltedLangevin({.batch_period = 0}), Catch::Contains("'options.batch_period'"));
  CHECK_THROWS_WITH(TiltedLangevin({.max_iterations = -1}),
                    Catch::Contains("'options.max_iterations'"));
  Quadratic objective;
  Mat one = Mat::Ones(1, 2);
  CHECK_THROWS_WITH(TiltedLangevin().optimize(objective, one), Catch::Contains("'particles'"));
  Mat phases_only = Mat::Ones(4, 1);
  CHECK_THROWS_WITH(TiltedLangevin({.phase_columns = 1}).optimize(objective, phases_only),
                    Catch::Contains("'particles'"));
  Mat nan = Mat::Ones(4, 2);
  nan(1, 1) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(TiltedLangevin().optimize(objective, nan), coulomb::invalid_argument);
  Mat four = Mat::Ones(4, 2);
  CHECK_THROWS_WITH(TiltedLangevin({.batch_size = 8}).optimize(objective, four),
                    Catch::Contains("batch_size"));
}

TEST_CASE("EnergyPlateau_DetectsTheEndOfTheDescent", "[particles][langevin]") {
  coulomb::Rng rng = coulomb_test::test_rng("EnergyPlateau_DetectsTheEndOfTheDescent");
  // E_t = e^{−t/100} + noise of sd 0.01: the mean stops moving beyond the noise after ~ 5 time
  // constants; a steady linear descent never converges.
  struct Dummy {};
  Dummy opt, f;
  Mat particles;
  coulomb::EnergyPlateau plateau{.window = 50};
  Index stopped_at = -1;
  for (Index t = 0; t < 3000 && stopped_at < 0; ++t) {
    const double e = std::exp(-double(t) / 100.0) + 0.01 * coulomb::standard_normal(rng);
    if (plateau.step_taken(opt, f, particles, coulomb::LangevinStep{t, e, 0.1, 0.0}))
      stopped_at = t + 1;
  }
  INFO("stopped at " << stopped_at);
  REQUIRE(plateau.converged);
  CHECK(stopped_at == plateau.converged_at);
  CHECK(stopped_at >= 300);   // not before the decay has mostly happened (e^{−3} = 0.05)
  CHECK(stopped_at <= 1200);  // and not long after it is lost in the noise
  coulomb::EnergyPlateau linear{.window = 50};
  for (Index t = 0; t < 3000; ++t)
    CHECK_FALSE(
        linear.step_taken(opt, f, particles, coulomb::LangevinStep{t, -double(t), 0.1, 0.0}));
  CHECK_FALSE(linear.converged);
  CHECK(linear.window_means.size() == 60);
}

TEST_CASE("ImportanceSampling_BlocksGiveTheSameAlignments", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("ImportanceSampling_BlocksGiveTheSameAlignments");
  Mat X;
  Eigen::VectorXi labels;
  make_radial(50, 3, rng, X, labels);
  const Mat Y = coulomb::binary_targets<double>(labels);
  auto check = [&](const auto& pool) {
    using Map = std::decay_t<decltype(pool)>;
    const coulomb::ImportanceSampling<Map> whole(pool, X, Y, {.rho = 2.0, .block_size = 1000});
    for (const Index block : {1, 3, 7}) {
      INFO(Map::name() << ", block " << block);
      const coulomb::ImportanceSampling<Map> blocked(pool, X, Y, {.rho = 2.0, .block_size = block});
      CHECK(coulomb_test::rel_diff(blocked.alignments(), whole.alignments()) <
            coulomb_test::tol<double>::tight);
      CHECK(coulomb_test::rel_diff(blocked.weights(), whole.weights()) < 1e-9);
    }
    // The default is Sinha & Duchi's uncentred alignment: v_m = ‖(1/n) Σ y_i ϕ(x_i; w_m)‖².
    const coulomb::ImportanceSampling<Map> is(pool, X, Y, {.rho = 2.0});
    CHECK_FALSE(is.options().centre);
    const Mat phi = pool.map(X) * std::sqrt(double(pool.num_particles()));
    const Mat proj = Y.transpose() * phi / double(X.rows());
    for (Index k = 0; k < pool.num_particles(); ++k) {
      double v = 0;
      for (Index c = k; c < proj.cols(); c += pool.num_particles()) v += proj(0, c) * proj(0, c);
      CHECK(is.alignments()(k) == Approx(v).epsilon(1e-12));
    }
  };
  // Random Fourier pools take AlignmentEnergy's fused pass (blocks of rows); other maps the
  // blocks of pool particles.
  check(coulomb::Rff<double>(3, 23, rng));
  check(coulomb::RffCosSin<double>(3, 23, rng));
  check(coulomb::FavorHyperbolic<double>(3, 23, rng));
  using Map = coulomb::Rff<double>;
  CHECK_THROWS_WITH(coulomb::ImportanceSampling<Map>(Map(3, 4, rng), X, Y, {.block_size = 0}),
                    Catch::Contains("'options.block_size'"));
}

TEST_CASE("ImportanceSampling_SupportMapKeepsItsPhases", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("ImportanceSampling_SupportMapKeepsItsPhases");
  Mat X;
  Eigen::VectorXi labels;
  make_radial(80, 3, rng, X, labels);
  const Mat Y = coulomb::binary_targets<double>(labels);
  using Map = coulomb::Rff<double>;
  const Map pool(3, 200, rng, {.bandwidth = 1.3});
  const coulomb::ImportanceSampling<Map> is(pool, X, Y, {.rho = 10.0});
  const std::vector<Index> support = is.support_indices();
  Index positive = 0;
  for (Index m = 0; m < pool.num_particles(); ++m) positive += is.weights()(m) > 0.0;
  REQUIRE(static_cast<Index>(support.size()) == positive);
  REQUIRE(positive > 1);
  REQUIRE(positive < pool.num_particles());
  const Map model = is.support_map();
  CHECK(model.num_particles() == positive);
  CHECK(model.bandwidth() == pool.bandwidth());
  // Its features are the pool's support columns, renormalized from 1/√M to 1/√|S|.
  const Mat phi_pool = pool.map(X);
  const Mat phi = model.map(X);
  for (std::size_t j = 0; j < support.size(); ++j) {
    CHECK(model.omega().row(Index(j)) == pool.omega().row(support[j]));
    CHECK(model.phases()(Index(j)) == pool.phases()(support[j]));
    const Vec expected =
        phi_pool.col(support[j]) * std::sqrt(double(pool.num_particles()) / double(positive));
    CHECK(coulomb_test::rel_diff(phi.col(Index(j)), expected) < coulomb_test::tol<double>::tight);
  }
  // A map without phases: the support's frequencies.
  const coulomb::RffCosSin<double> cos_sin(3, 50, rng);
  const coulomb::ImportanceSampling<coulomb::RffCosSin<double>> is2(cos_sin, X, Y, {.rho = 5.0});
  const auto model2 = is2.support_map();
  CHECK(model2.num_particles() == static_cast<Index>(is2.support_indices().size()));
  CHECK(model2.omega() == cos_sin.omega()(is2.support_indices(), Eigen::all));
}

TEST_CASE("ReferenceRidgeClassifier_MatchesADirectSolve", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("ReferenceRidgeClassifier_MatchesADirectSolve");
  const Index n = 90, dim = 7;
  const Mat phi = coulomb_test::gaussian(n, dim, rng).array() + 0.3;  // uncentred on purpose
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i) labels(i) = phi(i, 0) + 0.5 * phi(i, 1) > 0.4;
  const double lambda = 0.05;
  coulomb::ReferenceRidgeClassifier classifier(lambda);
  classifier.fit(phi, labels);
  // Direct solve: the least-squares problem ‖[Φ; √λ I] w − [y − ȳ; 0]‖² by QR.
  Vec y(n);
  for (Index i = 0; i < n; ++i) y(i) = labels(i) ? 1.0 : -1.0;
  const double y_mean = y.mean();
  Mat A(n + dim, dim);
  A << phi, std::sqrt(lambda) * Mat::Identity(dim, dim);
  Vec b = Vec::Zero(n + dim);
  b.head(n) = y.array() - y_mean;
  const Vec w = A.colPivHouseholderQr().solve(b);
  CHECK(coulomb_test::rel_diff(classifier.weights(), w) < 1e-10);
  CHECK(classifier.intercept() == Approx(y_mean).epsilon(1e-15));
  const Vec f = classifier.decision_function(phi);
  CHECK(coulomb_test::rel_diff(f, ((phi * w).array() + y_mean).matrix()) < 1e-10);
  Index correct = 0;
  for (Index i = 0; i < n; ++i) correct += (f(i) > 0) == (labels(i) == 1);
  CHECK(classifier.accuracy(phi, labels) == double(correct) / n);

  CHECK_THROWS_WITH(coulomb::ReferenceRidgeClassifier(0.0), Catch::Contains("'lambda'"));
  CHECK_THROWS_WITH(coulomb::ReferenceRidgeClassifier().fit(phi.topRows(5), labels),
                    Catch::Contains("'Phi'"));
  CHECK_THROWS_WITH(coulomb::ReferenceRidgeClassifier().decision_function(phi),
                    Catch::Contains("not fitted"));
}

}  // namespace particles_learner_test
