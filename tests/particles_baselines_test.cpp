// SPDX-License-Identifier: MIT
// Tests of the baselines of the particle model: Sinha & Duchi's importance sampling
// (particles/importance_sampling.hpp) and the ridge classifier with cross-validation and the
// cross-validated RFF bandwidth (baselines/ridge.hpp, baselines/rff_bandwidth.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include <Eigen/QR>

#include <coulomb/coulomb.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace particles_baselines_test {

namespace {

using coulomb::Index;
using Mat = coulomb::Matrix<double>;
using Vec = coulomb::Vector<double>;

/// Two concentric rings in 2-D (radius 1: label 0, radius 2: label 1) with radial noise.
void make_rings(Index n, coulomb::Rng& rng, Mat& X, Eigen::VectorXi& labels) {
  X.resize(n, 2);
  labels.resize(n);
  for (Index i = 0; i < n; ++i) {
    labels(i) = static_cast<int>(i % 2);
    const double r = (labels(i) == 1 ? 2.0 : 1.0) + 0.15 * coulomb::standard_normal(rng);
    const double a = 2.0 * std::numbers::pi * coulomb::uniform01(rng);
    X(i, 0) = r * std::cos(a);
    X(i, 1) = r * std::sin(a);
  }
}

/// Checks the KKT conditions of max qᵀv s.t. q ∈ Δ, D_χ²(q) ≤ ρ at the solver's (q, γ, τ):
/// q_m = max(0, v_m − τ)/(γM), which with feasibility and complementary slackness proves
/// optimality of this concave program.
void check_kkt(const Vec& v, double rho, const coulomb::ChiSquareSolution& s) {
  const double m = static_cast<double>(v.size());
  CHECK(s.weights.minCoeff() >= 0.0);
  CHECK(s.weights.sum() == Approx(1.0).epsilon(1e-12));
  CHECK(s.divergence <= rho * (1.0 + 1e-9));
  CHECK(s.objective == Approx(s.weights.dot(v)).epsilon(1e-12));
  if (!s.constraint_active) return;
  CHECK(s.divergence == Approx(rho).epsilon(1e-8));  // complementary slackness, γ > 0
  REQUIRE(s.dual > 0.0);
  const double scale = v.cwiseAbs().maxCoeff();
  for (Index k = 0; k < v.size(); ++k) {
    const double predicted = std::max(0.0, v(k) - s.threshold) / (s.dual * m);
    CHECK(std::abs(s.weights(k) - predicted) <= 1e-8 * (1.0 / m + std::abs(predicted)));
    if (s.weights(k) == 0.0) CHECK(v(k) <= s.threshold + 1e-12 * scale);
  }
}

}  // namespace

TEST_CASE("ChiSquareAlignment_SatisfiesConstraintAndKkt", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("ChiSquareAlignment_SatisfiesConstraintAndKkt");
  Vec v(60);
  coulomb::fill_standard_normal(v, rng);
  v = v.array().square();  // alignments are squares: ≥ 0, skewed
  double previous = -1.0;
  for (double rho : {1e-3, 0.05, 0.5, 2.0, 10.0, 1e4}) {
    INFO("rho = " << rho);
    const coulomb::ChiSquareSolution s = coulomb::maximize_alignment_chi_square(v, rho);
    check_kkt(v, rho, s);
    // Better aligned than the uniform weights, and monotone in the budget ρ.
    CHECK(s.objective > v.mean());
    CHECK(s.objective >= previous);
    previous = s.objective;
    // No random feasible point does better: q' = uniform + t·(random direction on Σ = 0),
    // scaled onto the divergence ball and kept in the simplex.
    for (int trial = 0; trial < 200; ++trial) {
      Vec dir(v.size());
      coulomb::fill_standard_normal(dir, rng);
      dir.array() -= dir.mean();
      const double m = static_cast<double>(v.size());
      // D_χ²(1/M + δ) = M‖δ‖²; the largest step inside the ball and the simplex:
      double t = std::sqrt(rho / m) / dir.norm();
      for (Index k = 0; k < dir.size(); ++k)
        if (dir(k) < 0.0) t = std::min(t, (1.0 / m) / -dir(k));
      const Vec q = Vec::Constant(v.size(), 1.0 / m) + t * coulomb::uniform01(rng) * dir;
      CHECK(q.dot(v) <= s.objective * (1.0 + 1e-12));
    }
  }
  // ρ beyond M/|argmax| − 1: all mass on the maximizer.
  const coulomb::ChiSquareSolution vertex = coulomb::maximize_alignment_chi_square(v, 1e6);
  Index best = 0;
  v.maxCoeff(&best);
  CHECK_FALSE(vertex.constraint_active);
  CHECK(vertex.weights(best) == 1.0);
}

TEST_CASE("ChiSquareAlignment_MatchesGridSearchOnThreeFeatures", "[particles][baselines]") {
  // Brute force on the 2-simplex with a fine grid.
  const Vec v = (Vec(3) << 0.9, 0.5, 0.1).finished();
  for (double rho : {0.05, 0.3, 1.0}) {
    const coulomb::ChiSquareSolution s = coulomb::maximize_alignment_chi_square(v, rho);
    double grid_best = -1.0;
    const int steps = 2000;
    for (int a = 0; a <= steps; ++a) {
      for (int b = 0; a + b <= steps; ++b) {
        const Vec q = (Vec(3) << a, b, steps - a - b).finished() / steps;
        if (coulomb::chi_square_divergence(q) <= rho) grid_best = std::max(grid_best, q.dot(v));
      }
    }
    INFO("rho = " << rho << ": solver " << s.objective << ", grid " << grid_best);
    CHECK(s.objective >= grid_best - 1e-12);
    CHECK(s.objective <= grid_best + 2e-3);  // the grid's resolution
  }
}

TEST_CASE("ChiSquareAlignment_ConstantAlignmentsGiveUniformWeights", "[particles][baselines]") {
  const Vec v = Vec::Constant(7, 0.25);
  const coulomb::ChiSquareSolution s = coulomb::maximize_alignment_chi_square(v, 0.5);
  CHECK((s.weights.array() - 1.0 / 7.0).abs().maxCoeff() < 1e-15);
}

TEST_CASE("ImportanceSampling_AlignmentsMatchBruteForce", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("ImportanceSampling_AlignmentsMatchBruteForce");
  const Index n = 40, d = 3, pool = 9;
  Mat X(n, d);
  coulomb::fill_standard_normal(X, rng);
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i) labels(i) = X(i, 0) * X(i, 1) > 0.0;
  const Mat Y = coulomb::binary_targets<double>(labels);
  const Mat Yc = Y.array() - Y.mean();

  auto check_map = [&](const auto& map, auto per_particle_features) {
    using Map = std::decay_t<decltype(map)>;
    coulomb::ImportanceSampling<Map> is(map, X, Y, {.rho = 0.5, .centre = true});
    for (Index k = 0; k < pool; ++k) {
      // v_k = (1/n²) Σ_{i,j} ŷ_i ŷ_j ϕ(x_i; w_k)ᵀϕ(x_j; w_k) through the n×n matrix.
      const Mat phi = per_particle_features(map, k);  // n × (outputs per particle)
      const Mat K = phi * phi.transpose();
      const Mat terms = (Yc * Yc.transpose()).cwiseProduct(K) / double(n * n);
      const double brute = terms.sum();
      // The brute-force sum cancels: its rounding error is relative to Σ|terms|, not to v.
      const double tolerance = coulomb_test::tol<double>::tight * terms.cwiseAbs().sum();
      CHECK(std::abs(is.alignments()(k) - brute) <= tolerance);
    }
    // The weighted pool features give the kernel Σ_k q_k ϕ_k ϕ_kᵀ.
    Mat weighted;
    is.weighted_features(X, weighted);
    Mat expected = Mat::Zero(n, n);
    for (Index k = 0; k < pool; ++k) {
      const Mat phi = per_particle_features(map, k);
      expected += is.weights()(k) * phi * phi.transpose();
    }
    CHECK((weighted * weighted.transpose() - expected).norm() <= 1e-12 * expected.norm());
    check_kkt(is.alignments(), 0.5, is.solution());
  };

  const coulomb::RffCosSin<double> cos_sin(d, pool, rng);
  check_map(cos_sin, [&](const coulomb::RffCosSin<double>& m, Index k) {
    Mat phi(n, 2);
    const Vec z = X * m.omega().row(k).transpose();
    phi.col(0) = z.array().cos();
    phi.col(1) = z.array().sin();
    return phi;
  });
  const coulomb::Rff<double> phase(d, pool, rng);
  check_map(phase, [&](const coulomb::Rff<double>& m, Index k) {
    const Vec z = X * m.omega().row(k).transpose();
    return Mat(std::sqrt(2.0) * (z.array() + m.phases()(k)).cos());
  });
}

TEST_CASE("ImportanceSampling_SampledFeaturesAreBetterAlignedThanUniform",
          "[particles][baselines]") {
  coulomb::Rng rng =
      coulomb_test::test_rng("ImportanceSampling_SampledFeaturesAreBetterAlignedThanUniform");
  // Rings: only frequencies of the right scale align with the labels.
  Mat X;
  Eigen::VectorXi labels;
  make_rings(400, rng, X, labels);
  const Mat Y = coulomb::binary_targets<double>(labels);
  using Map = coulomb::RffCosSin<double>;
  const Map pool(2, 1000, rng, {.bandwidth = 0.5});
  coulomb::ImportanceSampling<Map> is(pool, X, Y, {.rho = 2.0});
  CHECK(is.solution().divergence <= 2.0 * (1.0 + 1e-9));
  CHECK(is.solution().objective > 1.5 * is.alignments().mean());

  // Normalized alignment of 64 particles drawn from q against 64 drawn uniformly from the pool
  // (the first 64, an i.i.d. Gaussian draw), averaged over 10 draws each.
  const Index count = 64;
  coulomb::AlignmentEnergy<Map> alignment(Map(pool.omega().topRows(count), Vec()), X, Y);
  double learned = 0.0, uniform = 0.0;
  for (int r = 0; r < 10; ++r) {
    learned += alignment.normalized_alignment(is.sample_particles(count, rng));
    uniform += alignment.normalized_alignment(
        pool.omega().middleRows(static_cast<Index>(r) * count, count));
  }
  INFO("normalized alignment: importance sampling " << learned / 10 << ", uniform "
                                                    << uniform / 10);
  CHECK(learned > 1.2 * uniform);
}

TEST_CASE("ImportanceSampling_SamplesFollowTheWeights", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("ImportanceSampling_SamplesFollowTheWeights");
  Mat X(50, 2);
  coulomb::fill_standard_normal(X, rng);
  Eigen::VectorXi labels(50);
  for (Index i = 0; i < 50; ++i) labels(i) = X(i, 0) > 0.0;
  using Map = coulomb::RffCosSin<double>;
  coulomb::ImportanceSampling<Map> is(Map(2, 12, rng), X, coulomb::binary_targets<double>(labels),
                                      {.rho = 1.0});
  const Index draws = 40000;
  const std::vector<Index> idx = is.sample_indices(draws, rng);
  Vec counts = Vec::Zero(12);
  for (Index k : idx) counts(k) += 1.0;
  for (Index k = 0; k < 12; ++k) {
    const double q = is.weights()(k);
    const double se = std::sqrt(q * (1.0 - q) / static_cast<double>(draws));
    INFO("particle " << k << ": q = " << q << ", frequency " << counts(k) / draws);
    CHECK(std::abs(counts(k) / draws - q) <= 5.0 * se + 1e-12);
    if (q == 0.0) CHECK(counts(k) == 0.0);
  }
  // Sampled particles are rows of the pool.
  const Mat omega = is.sample_particles(5, rng);
  for (Index r = 0; r < 5; ++r) {
    bool found = false;
    for (Index k = 0; k < 12; ++k) found = found || omega.row(r) == is.pool().omega().row(k);
    CHECK(found);
  }
}

TEST_CASE("ImportanceSampling_BadInput", "[particles][baselines][input]") {
  coulomb::Rng rng = coulomb_test::test_rng("ImportanceSampling_BadInput");
  const Mat X = Mat::Random(10, 3);
  Eigen::VectorXi labels(10);
  labels << 0, 1, 0, 1, 0, 1, 0, 1, 0, 1;
  const Mat Y = coulomb::binary_targets<double>(labels);
  using Map = coulomb::RffCosSin<double>;
  const Map pool(3, 8, rng);
  using IS = coulomb::ImportanceSampling<Map>;
  CHECK_THROWS_AS(IS(pool, X.topRows(9), Y), coulomb::invalid_argument);
  CHECK_THROWS_AS(IS(pool, Mat(0, 3), Mat(0, 1)), coulomb::invalid_argument);
  CHECK_THROWS_AS(IS(pool, X.leftCols(2), Y), coulomb::invalid_argument);
  CHECK_THROWS_AS(IS(pool, X, Mat::Ones(10, 1), {.centre = true}), coulomb::invalid_argument);
  CHECK_THROWS_WITH(IS(pool, X, Y, {.rho = 0.0}), Catch::Contains("'options.rho'"));
  CHECK_THROWS_AS(IS(pool, X, Y).sample_indices(0, rng), coulomb::invalid_argument);
  Vec bad = Vec::Ones(4);
  bad(2) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(coulomb::maximize_alignment_chi_square(bad, 1.0), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::maximize_alignment_chi_square(Vec(), 1.0), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::maximize_alignment_chi_square(Vec::Ones(3), -1.0),
                  coulomb::invalid_argument);
}

TEST_CASE("RidgeClassifier_SolvesTheRegularizedNormalEquations", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("RidgeClassifier_SolvesTheRegularizedNormalEquations");
  const Index n = 80, dim = 6;
  Mat phi(n, dim);
  coulomb::fill_standard_normal(phi, rng);
  phi.col(2).array() += 3.0;  // a non-centred column: the intercept must absorb it
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i) labels(i) = phi(i, 0) + 0.5 * phi(i, 1) > 0.2;
  const double alpha = 0.05;
  coulomb::RidgeClassifier ridge(alpha);
  ridge.fit(phi, labels);
  // Reference: least squares on the augmented system [Φ 1; √(nα)·[I 0]] [w; b] = [y; 0] by QR.
  const Vec y = 2.0 * labels.cast<double>().array() - 1.0;
  Mat a = Mat::Zero(n + dim, dim + 1);
  a.topLeftCorner(n, dim) = phi;
  a.topRightCorner(n, 1).setOnes();
  a.bottomLeftCorner(dim, dim) = std::sqrt(n * alpha) * Mat::Identity(dim, dim);
  Vec rhs = Vec::Zero(n + dim);
  rhs.head(n) = y;
  const Vec ref = a.colPivHouseholderQr().solve(rhs);
  CHECK((ridge.weights() - ref.head(dim)).norm() <= 1e-10 * ref.norm());
  CHECK(ridge.intercept() == Approx(ref(dim)).epsilon(1e-10));
  CHECK(ridge.accuracy(phi, labels) > 0.9);

  CHECK_THROWS_AS(coulomb::RidgeClassifier(0.0), coulomb::invalid_argument);
  CHECK_THROWS_AS(ridge.fit(phi.topRows(n - 1), labels), coulomb::invalid_argument);
  Eigen::VectorXi bad = labels;
  bad(0) = 3;
  CHECK_THROWS_WITH(ridge.fit(phi, bad), Catch::Contains("'labels'"));
  CHECK_THROWS_AS(ridge.decision_function(phi.leftCols(3)), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::RidgeClassifier().decision_function(phi), coulomb::invalid_argument);
}

TEST_CASE("CrossValidateRidge_MatchesPerFoldFits", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("CrossValidateRidge_MatchesPerFoldFits");
  const Index n = 90, dim = 5;
  Mat phi(n, dim);
  coulomb::fill_standard_normal(phi, rng);
  Eigen::VectorXi labels(n);
  for (Index i = 0; i < n; ++i)
    labels(i) = phi(i, 0) - phi(i, 3) + 0.8 * coulomb::standard_normal(rng) > 0.0;
  const std::vector<Index> folds = coulomb::k_fold_assignment(n, 4, rng);
  std::vector<Index> sizes(4, 0);
  for (Index f : folds) ++sizes[static_cast<std::size_t>(f)];
  CHECK(*std::max_element(sizes.begin(), sizes.end()) -
            *std::min_element(sizes.begin(), sizes.end()) <=
        1);
  const std::vector<double> alphas{1e-4, 1e-2, 1.0, 100.0};
  const coulomb::RidgeCrossValidation cv =
      coulomb::cross_validate_ridge(phi, labels, alphas, folds);
  for (std::size_t a = 0; a < alphas.size(); ++a) {
    double correct = 0.0;
    for (Index f = 0; f < 4; ++f) {
      std::vector<Index> in, out;
      for (Index i = 0; i < n; ++i)
        (folds[static_cast<std::size_t>(i)] == f ? out : in).push_back(i);
      coulomb::RidgeClassifier r(alphas[a]);
      r.fit(phi(in, Eigen::all), labels(in));
      correct += r.accuracy(phi(out, Eigen::all), labels(out)) * static_cast<double>(out.size());
    }
    CHECK(cv.accuracies[a] == Approx(correct / n).epsilon(1e-12));
  }
  CHECK(cv.accuracy == *std::max_element(cv.accuracies.begin(), cv.accuracies.end()));
  // A huge penalty predicts the majority class only, which is worse here.
  CHECK(cv.alpha < 100.0);
  CHECK_THROWS_AS(coulomb::k_fold_assignment(3, 4, rng), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::cross_validate_ridge(phi, labels, {}, folds), coulomb::invalid_argument);
}

TEST_CASE("SelectRffBandwidth_PrefersTheScaleOfTheData", "[particles][baselines]") {
  coulomb::Rng rng = coulomb_test::test_rng("SelectRffBandwidth_PrefersTheScaleOfTheData");
  Mat X;
  Eigen::VectorXi labels;
  make_rings(300, rng, X, labels);
  const double median = coulomb::median_pairwise_distance(X, 500, rng);
  CHECK(median > 1.0);
  CHECK(median < 4.0);
  const std::vector<Index> folds = coulomb::k_fold_assignment(300, 3, rng);
  // Far too narrow (features are noise), sensible, far too wide (nearly linear features).
  const std::vector<double> bandwidths{0.01, 0.5, 100.0};
  const coulomb::BandwidthSelection sel =
      coulomb::select_rff_bandwidth(X, labels, bandwidths, {1e-4, 1e-2}, 32, folds, rng);
  INFO("CV accuracies per bandwidth: " << sel.accuracies.col(0).transpose());
  CHECK(sel.bandwidth == 0.5);
  CHECK(sel.accuracy > 0.9);
  CHECK(sel.accuracy == sel.accuracies.maxCoeff());
}

}  // namespace particles_baselines_test
