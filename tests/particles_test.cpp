// SPDX-License-Identifier: MIT
// Tests of the particle model (include/coulomb/particles/): alignment energy, Riesz energy,
// Hamiltonian and projected Langevin dynamics.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include <coulomb/coulomb.hpp>
#include <coulomb/particles/alignment.hpp>
#include <coulomb/particles/hamiltonian.hpp>
#include <coulomb/particles/langevin.hpp>
#include <coulomb/particles/riesz.hpp>

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace particles_test {

namespace {

using coulomb::Index;
using Mat = coulomb::Matrix<double>;

/// Central finite-difference gradient of f at Ω, step h scaled to each entry.
template <typename F>
Mat finite_difference(F&& f, const Mat& omega) {
  Mat grad(omega.rows(), omega.cols());
  for (Index j = 0; j < omega.cols(); ++j) {
    for (Index i = 0; i < omega.rows(); ++i) {
      const double h = 1e-6 * std::max(1.0, std::abs(omega(i, j)));
      Mat plus = omega;
      Mat minus = omega;
      plus(i, j) += h;
      minus(i, j) -= h;
      grad(i, j) = (f(plus) - f(minus)) / (2 * h);
    }
  }
  return grad;
}

double relative_error(const Mat& a, const Mat& b) {
  return (a - b).norm() / std::max(b.norm(), 1e-300);
}

/// A noisy XOR in 2-D: label 1 when x0·x1 > 0.
struct XorData {
  Mat X;
  Eigen::VectorXi labels;
};

XorData make_xor(Index n, std::uint64_t seed) {
  coulomb::Rng rng(seed);
  XorData data{Mat(n, 2), Eigen::VectorXi(n)};
  coulomb::fill_standard_normal(data.X, rng);
  for (Index i = 0; i < n; ++i) data.labels(i) = data.X(i, 0) * data.X(i, 1) > 0 ? 1 : 0;
  return data;
}

double min_pairwise_distance(const Mat& omega) {
  double best = std::numeric_limits<double>::infinity();
  for (Index k = 0; k < omega.rows(); ++k)
    for (Index l = 0; l < k; ++l) best = std::min(best, (omega.row(k) - omega.row(l)).norm());
  return best;
}

}  // namespace

TEMPLATE_TEST_CASE("AlignmentEnergy_MatchesBruteForceAndFiniteDifferences", "[particles]",
                   coulomb::Rff<double>, coulomb::RffCosSin<double>, coulomb::FavorPlus<double>,
                   coulomb::PorfSoftplus<double>, coulomb::SoftmaxFeatJoint<double>) {
  coulomb::Rng rng(11);
  const Index n = 12, d = 3, m = 5;
  Mat X(n, d);
  coulomb::fill_standard_normal(X, rng);
  X *= 0.7;
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i) labels(i) = static_cast<int>(i % 3 == 0);
  TestType map(d, m, rng);
  coulomb::AlignmentEnergy<TestType> energy(map, X, coulomb::binary_targets<double>(labels));

  const Mat omega = map.omega();
  Mat gradient;
  const double value = energy.evaluate_with_gradient(omega, gradient);

  // Brute force through the n×n kernel matrix: −(1/n²) Σ ŷ_iᵀŷ_j K(x_i, x_j).
  const Mat y = energy.targets();
  const Mat phi = map.map(X);
  const Mat K = phi * phi.transpose();
  const double brute = -(y * y.transpose()).cwiseProduct(K).sum() / static_cast<double>(n * n);
  CHECK(value == Approx(brute).epsilon(1e-12));
  // Centred targets have zero mean.
  CHECK(std::abs(y.sum()) < 1e-12);

  const Mat fd = finite_difference([&](const Mat& w) { return energy.evaluate(w); }, omega);
  CHECK(relative_error(gradient, fd) < 1e-6);
}

TEST_CASE("AlignmentEnergy_MultiClassAndMetric", "[particles]") {
  coulomb::Rng rng(12);
  const Index n = 30, d = 4, m = 16;
  Mat X(n, d);
  coulomb::fill_standard_normal(X, rng);
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i) labels(i) = static_cast<int>(i % 3);
  coulomb::RffCosSin<double> map(d, m, rng);
  coulomb::AlignmentEnergy<coulomb::RffCosSin<double>> energy(
      map, X, coulomb::one_hot_targets<double>(labels, 3));
  const Mat omega = map.omega();
  Mat gradient;
  energy.evaluate_with_gradient(omega, gradient);
  const Mat fd = finite_difference([&](const Mat& w) { return energy.evaluate(w); }, omega);
  CHECK(relative_error(gradient, fd) < 1e-6);

  // Normalized alignment against the brute-force Cortes et al. formula with centred K.
  const Mat phi = map.map(X);
  const Mat H = Mat::Identity(n, n) - Mat::Constant(n, n, 1.0 / n);
  const Mat Kc = H * phi * phi.transpose() * H;
  const Mat y = energy.targets();
  const Mat YY = y * y.transpose();
  const double brute = Kc.cwiseProduct(YY).sum() / (Kc.norm() * YY.norm());
  CHECK(energy.normalized_alignment(omega) == Approx(brute).epsilon(1e-10));
  CHECK(brute > 0.0);
  CHECK(brute <= 1.0);
}

TEST_CASE("AlignmentEnergy_BadInput", "[particles][input]") {
  coulomb::Rng rng(13);
  const Mat X = Mat::Random(10, 3);
  coulomb::FavorPlus<double> map(3, 8, rng);
  using Energy = coulomb::AlignmentEnergy<coulomb::FavorPlus<double>>;
  Eigen::VectorXi labels(10);
  labels << 0, 1, 0, 1, 0, 1, 0, 1, 0, 1;
  const Mat y = coulomb::binary_targets<double>(labels);
  CHECK_THROWS_AS(Energy(map, X.topRows(9), y), coulomb::invalid_argument);       // length mismatch
  CHECK_THROWS_AS(Energy(map, Mat(0, 3), Mat(0, 1)), coulomb::invalid_argument);  // n = 0
  CHECK_THROWS_AS(Energy(map, X.leftCols(2), y), coulomb::invalid_argument);
  CHECK_THROWS_AS(Energy(map, X, Mat::Ones(10, 1)), coulomb::invalid_argument);  // constant
  Eigen::VectorXi bad = labels;
  bad(3) = 2;
  CHECK_THROWS_WITH(coulomb::binary_targets<double>(bad), Catch::Contains("'labels'"));
  CHECK_THROWS_AS(coulomb::one_hot_targets<double>(bad, 2), coulomb::invalid_argument);
}

TEST_CASE("AlignmentEnergy_ViewsTheCallersMatricesAndCopiesTheRest", "[particles]") {
  coulomb::Rng rng(14);
  const Index n = 24, d = 3, m = 8;
  Mat X(n, d);
  coulomb::fill_standard_normal(X, rng);
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i) labels(i) = X(i, 0) > 0 ? 1 : 0;
  const Mat y = coulomb::binary_targets<double>(labels);
  using Map = coulomb::FavorPlus<double>;
  const Map map(d, m, rng);
  const Mat omega = map.omega();
  using Energy = coulomb::AlignmentEnergy<Map>;

  // Lvalue matrices are read in place (uncentred targets too); centred targets are a copy.
  Energy viewed(map, X, y, {.centre = false});
  CHECK(viewed.inputs().data() == X.data());
  CHECK(viewed.targets().data() == y.data());
  Energy centred(map, X, y);
  CHECK(centred.inputs().data() == X.data());
  CHECK(centred.targets().data() != y.data());
  CHECK(std::abs(centred.targets().sum()) < 1e-12);
  CHECK(y.minCoeff() == -1.0);  // the caller's targets are not centred in place

  // A temporary or an expression is held by the energy and gives the same energy.
  Energy from_expression(map, X * 1.0, Mat(y), {.centre = false});
  CHECK(from_expression.inputs().data() != X.data());
  const double e = viewed.evaluate(omega);
  CHECK(from_expression.evaluate(omega) == e);

  // A copy outlives its original: it reads its own copy of what the original held.
  std::optional<Energy> original(std::in_place, map, X * 1.0, y, coulomb::AlignmentOptions{});
  const double e_centred = original->evaluate(omega);
  Energy copy(*original);
  Energy moved(std::move(*original));
  CHECK(copy.inputs().data() != moved.inputs().data());
  original.reset();
  CHECK(copy.evaluate(omega) == e_centred);
  CHECK(moved.evaluate(omega) == e_centred);
  CHECK(centred.evaluate(omega) == e_centred);
}

TEST_CASE("RieszEnergy_MatchesBruteForceAndFiniteDifferences", "[particles]") {
  coulomb::Rng rng(14);
  Mat omega(9, 5);
  coulomb::fill_standard_normal(omega, rng);
  for (double s : {0.0, 1.0, 1.5, 3.0, 6.0}) {
    // Tiles of 4 rows over 9 particles exercise a partial last tile.
    coulomb::RieszEnergy<double> riesz({.s = s, .softening = 0.1, .tile_rows = 4});
    Mat gradient;
    const double value = riesz.evaluate_with_gradient(omega, gradient);
    double brute = 0.0;
    for (Index k = 0; k < omega.rows(); ++k) {
      for (Index l = 0; l < omega.rows(); ++l) {
        if (k == l) continue;
        const double t = (omega.row(k) - omega.row(l)).squaredNorm() + 0.01;
        brute += s == 0.0 ? -0.5 * std::log(t) : std::pow(t, -0.5 * s);
      }
    }
    brute /= 81.0;
    CHECK(value == Approx(brute).epsilon(1e-12));
    const Mat fd = finite_difference([&](const Mat& w) { return riesz.evaluate(w); }, omega);
    CHECK(relative_error(gradient, fd) < 1e-6);
  }
  // Coulomb default: s = D − 2.
  CHECK(coulomb::RieszEnergy<double>().exponent(5) == 3.0);
  CHECK_THROWS_AS(coulomb::RieszEnergy<double>().exponent(2), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::RieszEnergy<double>({.s = 1.0, .softening = 0.0}),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::RieszEnergy<double>({.s = 1.0}).evaluate(omega.topRows(1)),
                  coulomb::invalid_argument);
}

TEST_CASE("ProjectedLangevin_DecreasesEnergyStaysInsideAndRepulsionPreventsCollapse",
          "[particles][langevin]") {
  const XorData data = make_xor(400, 21);
  coulomb::Rng rng(22);
  using Map = coulomb::Rff<double>;
  const Map map(2, 32, rng);
  coulomb::AlignmentEnergy<Map> alignment(map, data.X,
                                          coulomb::binary_targets<double>(data.labels));
  const coulomb::BallProjection ball{.radius = 6.0};

  double min_distance[2] = {0.0, 0.0};
  const double lambdas[2] = {0.0, 0.05};
  for (int run = 0; run < 2; ++run) {
    coulomb::Hamiltonian<coulomb::AlignmentEnergy<Map>> hamiltonian(alignment, lambdas[run],
                                                                    {.s = 0.0, .softening = 1e-2});
    Mat omega = map.omega();
    const double start = hamiltonian.evaluate(omega);
    const double alignment_start = alignment.normalized_alignment(omega);
    coulomb::ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep> langevin(
        {.max_iterations = 300, .beta = 1e5, .batch_size = 100, .seed = 3}, ball,
        {.step_size = 0.05});
    langevin.optimize(hamiltonian, omega);
    const double end = hamiltonian.evaluate(omega);
    INFO("lambda = " << lambdas[run] << ": H " << start << " -> " << end);
    CHECK(end < start - 0.5 * std::abs(start));  // a clear margin: H falls by half its size
    CHECK(alignment.normalized_alignment(omega) > 1.5 * alignment_start);
    CHECK(ball.contains(omega));
    min_distance[run] = min_pairwise_distance(omega);
  }
  INFO("min pairwise distance without repulsion " << min_distance[0] << ", with "
                                                  << min_distance[1]);
  CHECK(min_distance[0] < 0.25 * min_distance[1]);
}

TEST_CASE("ProjectedLangevin_IsReproducibleForASeed", "[particles][langevin]") {
  const XorData data = make_xor(200, 31);
  coulomb::Rng rng(32);
  using Map = coulomb::FavorPlus<double>;
  const Map map(2, 16, rng);
  coulomb::AlignmentEnergy<Map> alignment(map, data.X,
                                          coulomb::binary_targets<double>(data.labels));
  coulomb::Hamiltonian<coulomb::AlignmentEnergy<Map>> hamiltonian(alignment, 0.01,
                                                                  {.s = 0.0, .softening = 0.1});
  auto run = [&](std::uint64_t seed) {
    Mat omega = map.omega();
    coulomb::ProjectedLangevin<coulomb::BoxProjection, coulomb::CosineStep> langevin(
        {.max_iterations = 50, .beta = 100.0, .batch_size = 64, .seed = seed},
        {.lower = -3, .upper = 3}, {.step_size = 0.05, .final_step_size = 0.0, .horizon = 50});
    langevin.optimize(hamiltonian, omega);
    return omega;
  };
  const Mat a = run(7);
  const Mat b = run(7);
  const Mat c = run(8);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("ProjectedLangevin_NonFiniteEnergyThrowsAndKeepsParticles", "[particles][input]") {
  // An objective whose energy becomes NaN once the first particle leaves x < 1.
  struct Blows {
    double evaluate_with_gradient(const Mat& w, Mat& g) const {
      g = Mat::Constant(w.rows(), w.cols(), -1.0);  // pushes every entry up
      return w(0, 0) < 1.0 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
    }
  } objective;
  Mat omega = Mat::Zero(3, 2);
  coulomb::ProjectedLangevin<coulomb::BallProjection> langevin({.max_iterations = 100},
                                                               {.radius = 100.0}, {0.1});
  try {
    langevin.optimize(objective, omega);
    FAIL("no exception");
  } catch (const coulomb::numerical_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("step"));
  }
  CHECK(omega.allFinite());
  CHECK(omega(0, 0) < 1.0);  // the particles of the last finite step

  CHECK_THROWS_AS(coulomb::ProjectedLangevin<coulomb::BallProjection>({}, {.radius = 0.0}),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::ProjectedLangevin<>({.beta = -1.0}), coulomb::invalid_argument);
  Mat one = Mat::Zero(1, 2);
  CHECK_THROWS_AS(langevin.optimize(objective, one), coulomb::invalid_argument);
}

TEST_CASE("LangevinCallbacks_LogSnapshotAndEarlyStop", "[particles][langevin]") {
  const XorData data = make_xor(200, 41);
  coulomb::Rng rng(42);
  using Map = coulomb::RffCosSin<double>;
  const Map map(2, 8, rng);
  coulomb::AlignmentEnergy<Map> alignment(map, data.X,
                                          coulomb::binary_targets<double>(data.labels));
  coulomb::Hamiltonian<coulomb::AlignmentEnergy<Map>> hamiltonian(alignment, 0.01,
                                                                  {.s = 0.0, .softening = 0.1});
  coulomb::ProjectedLangevin<> langevin({.max_iterations = 40}, {.radius = 5.0}, {0.05});
  coulomb::EnergyLog log;
  coulomb::ParticleSnapshots<double> snapshots{.every = 10};
  // A metric that never improves after its first evaluation stops the run early.
  int calls = 0;
  coulomb::ParticleEarlyStopping<double> stop{
      .metric = [&](const Mat&) { return calls++ == 0 ? 1.0 : 0.0; },
      .every = 5,
      .stopping = {.patience = 2}};
  Mat omega = map.omega();
  langevin.optimize(hamiltonian, omega, log, snapshots, stop);
  // Evaluations at steps 5, 10, 15: the third is the second without improvement.
  CHECK(log.energy.size() == 15);
  CHECK(log.alignment.size() == 15);
  CHECK(stop.best_iteration() == 5);
  CHECK(stop.best_value() == 1.0);
  CHECK(snapshots.particles.size() == 2);  // the start and step 10
  CHECK(snapshots.particles.front() == map.omega());
  for (std::size_t t = 0; t < log.energy.size(); ++t)
    CHECK(log.energy[t] == Approx(log.alignment[t] + 0.01 * log.repulsion[t]).epsilon(1e-12));
}

TEST_CASE("ProjectedLangevin_RejectsBadStepSizes", "[particles][langevin][input]") {
  using coulomb::ProjectedLangevin;
  CHECK_THROWS_WITH(
      (ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep>({}, {}, {0.0})),
      Catch::Contains("'step_size'"));
  CHECK_THROWS_AS(
      (ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep>({}, {}, {-1.0})),
      coulomb::invalid_argument);
  CHECK_THROWS_AS((ProjectedLangevin<coulomb::BallProjection, coulomb::InverseTimeStep>(
                      {}, {}, {.step_size = 0.1, .time_scale = 0.0})),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS((ProjectedLangevin<coulomb::BallProjection, coulomb::CosineStep>(
                      {}, {}, {.step_size = 0.1, .final_step_size = 0.2, .horizon = 10})),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS((ProjectedLangevin<coulomb::BallProjection, coulomb::CosineStep>(
                      {}, {}, {.step_size = 0.1, .final_step_size = 0.0, .horizon = 0})),
                  coulomb::invalid_argument);
  // A user schedule without validate() that goes negative is caught at the step it does.
  struct GoesNegative {
    double operator()(Index t) const { return t < 3 ? 0.01 : -0.01; }
  };
  struct Quadratic {
    double evaluate_with_gradient(const Mat& w, Mat& g) const {
      g = 2.0 * w;
      return w.squaredNorm();
    }
  } objective;
  ProjectedLangevin<coulomb::BallProjection, GoesNegative> langevin({.max_iterations = 10});
  Mat omega = Mat::Ones(3, 2);
  CHECK_THROWS_WITH(langevin.optimize(objective, omega), Catch::Contains("at step 3"));
  // A cosine schedule that reaches η = 0 is valid: the last steps move nothing.
  ProjectedLangevin<coulomb::BallProjection, coulomb::CosineStep> cosine(
      {.max_iterations = 6}, {}, {.step_size = 0.1, .final_step_size = 0.0, .horizon = 3});
  Mat w = Mat::Ones(3, 2);
  CHECK_NOTHROW(cosine.optimize(objective, w));
  CHECK(w.norm() < Mat::Ones(3, 2).norm());
}

}  // namespace particles_test
