// SPDX-License-Identifier: MIT
// Calibration metrics (metrics/calibration.hpp: ECE and the reliability diagram, log loss,
// Brier score) against values computed by hand and against a brute-force ECE.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <coulomb/metrics/calibration.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace metrics_calibration_test {

namespace {

using coulomb::Index;
using Labels = std::vector<int>;

using coulomb_test::column;

/// ECE straight from the definition: bins ((m−1)/M, m/M], a confidence of exactly 0 in the
/// first, confidences and predictions from the rows.
double brute_force_ece(const Eigen::MatrixXd& probs, const Labels& y, Index M) {
  const Index n = probs.rows();
  double ece = 0.0;
  for (Index m = 0; m < M; ++m) {
    const double lo = static_cast<double>(m) / static_cast<double>(M);
    const double hi = static_cast<double>(m + 1) / static_cast<double>(M);
    double conf = 0.0;
    double correct = 0.0;
    double count = 0.0;
    for (Index i = 0; i < n; ++i) {
      Index pred = 0;
      for (Index c = 1; c < probs.cols(); ++c) {
        if (probs(i, c) > probs(i, pred)) pred = c;
      }
      const double q = probs(i, pred);
      if ((q > lo || (m == 0 && q <= lo)) && q <= hi) {
        conf += q;
        correct += pred == y[static_cast<std::size_t>(i)] ? 1.0 : 0.0;
        count += 1.0;
      }
    }
    if (count > 0) ece += count / static_cast<double>(n) * std::abs(correct / count - conf / count);
  }
  return ece;
}

}  // namespace

TEST_CASE("Calibration_BinaryValuesComputedByHand", "[metrics]") {
  const Labels y = {1, 1, 1, 0, 0, 0, 1, 0};
  const Eigen::VectorXd p = column({0.9, 0.8, 0.4, 0.3, 0.6, 0.1, 0.7, 0.2});
  // Predictions 1 1 0 0 1 0 1 0.
  // Brier = (0.01 + 0.04 + 0.36 + 0.09 + 0.36 + 0.01 + 0.09 + 0.04) / 8 = 1/8.
  CHECK(coulomb::brier_score(p, y) == Approx(0.125).epsilon(1e-14));
  // Probabilities of the true class: .9 .8 .4 .7 .4 .9 .7 .8.
  const double ll =
      -(2 * std::log(0.9) + 2 * std::log(0.8) + 2 * std::log(0.4) + 2 * std::log(0.7)) / 8.0;
  CHECK(coulomb::log_loss(p, y) == Approx(ll).epsilon(1e-14));
  // Confidences .9 .8 .6 .7 .6 .9 .7 .8 in 15 bins (m/15, (m+1)/15], m = 0 … 14: 0.6 = 9/15 and
  // 0.8 = 12/15 close bins 8 and 11. Bin 8 {.6 wrong, .6 wrong}, bin 10 {.7, .7 right}, bin 11
  // {.8, .8 right}, bin 13 {.9, .9 right}: ECE = (2·.6 + 2·.3 + 2·.2 + 2·.1) / 8 = 0.3.
  CHECK(coulomb::expected_calibration_error(p, y) == Approx(0.3).epsilon(1e-14));
  const auto bins = coulomb::reliability_diagram(p, y);
  REQUIRE(bins.size() == 15);
  Index total = 0;
  for (std::size_t m = 0; m < bins.size(); ++m) {
    total += bins[m].count;
    CHECK(bins[m].lower == Approx(static_cast<double>(m) / 15.0));
    CHECK(bins[m].upper == Approx(static_cast<double>(m + 1) / 15.0));
    const bool used = m == 8 || m == 10 || m == 11 || m == 13;
    CHECK(bins[m].count == (used ? 2 : 0));
  }
  CHECK(total == 8);
  CHECK(bins[8].mean_confidence == Approx(0.6));
  CHECK(bins[8].accuracy == 0.0);
  CHECK(bins[10].accuracy == 1.0);
  // Float probabilities give the same; the two-column form too.
  const Eigen::VectorXf pf = p.cast<float>();
  CHECK(coulomb::expected_calibration_error(pf.col(0), y) == Approx(0.3).epsilon(1e-6));
  Eigen::MatrixXd two(8, 2);
  two.col(0) = 1.0 - p.array();
  two.col(1) = p;
  CHECK(coulomb::expected_calibration_error(two, y) == Approx(0.3).epsilon(1e-14));
  CHECK(coulomb::log_loss(two, y) == Approx(ll).epsilon(1e-14));
  CHECK(coulomb::brier_score(two, y) == Approx(0.125).epsilon(1e-14));
}

TEST_CASE("Calibration_MultiClassValuesComputedByHand", "[metrics]") {
  const Labels y = {0, 0, 1, 1, 2, 2};
  Eigen::MatrixXd p(6, 3);
  p << 0.7, 0.2, 0.1,  //
      0.3, 0.6, 0.1,   //
      0.1, 0.8, 0.1,   //
      0.2, 0.5, 0.3,   //
      0.1, 0.1, 0.8,   //
      0.5, 0.2, 0.3;
  // Brier: Σ_c (p_c − onehot)² per row, averaged.
  const double brier = ((0.09 + 0.04 + 0.01) + (0.49 + 0.36 + 0.01) + (0.01 + 0.04 + 0.01) +
                        (0.04 + 0.25 + 0.09) + (0.01 + 0.01 + 0.04) + (0.25 + 0.04 + 0.49)) /
                       6.0;
  CHECK(coulomb::brier_score(p, y) == Approx(brier).epsilon(1e-14));
  const double ll = -(std::log(0.7) + std::log(0.3) + std::log(0.8) + std::log(0.5) +
                      std::log(0.8) + std::log(0.3)) /
                    6.0;
  CHECK(coulomb::log_loss(p, y) == Approx(ll).epsilon(1e-14));
  CHECK(coulomb::expected_calibration_error(p, y) == Approx(brute_force_ece(p, y, 15)));
}

TEST_CASE("Calibration_LimitingCases", "[metrics]") {
  // Calibrated within a bin: 10 examples at confidence 0.7, 7 of them right.
  Eigen::VectorXd p = Eigen::VectorXd::Constant(10, 0.7);
  const Labels seven = {1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  CHECK(coulomb::expected_calibration_error(p, seven) == Approx(0.0).margin(1e-15));
  // A true class with probability 0 costs −log(ε).
  CHECK(coulomb::log_loss(column({0.0}), Labels{1}) == Approx(-std::log(1e-15)));
  CHECK(coulomb::log_loss(column({0.0}), Labels{1}, 1e-3) == Approx(-std::log(1e-3)));
}

TEST_CASE("Calibration_EceMatchesBruteForceOnBinBoundaries", "[metrics][random]") {
  // Probabilities on a grid of 1/30, so that many confidences fall exactly on the boundaries
  // m/15 of the bins.
  auto rng = coulomb_test::test_rng("Calibration_EceMatchesBruteForceOnBinBoundaries");
  for (int trial = 0; trial < 50; ++trial) {
    const Index n = 1 + static_cast<Index>(coulomb::uniform_index(60, rng));
    const Index C = 2 + static_cast<Index>(coulomb::uniform_index(2, rng));
    Eigen::MatrixXd p(n, C);
    Labels y(static_cast<std::size_t>(n));
    for (Index i = 0; i < n; ++i) {
      Index left = 30;
      for (Index c = 0; c + 1 < C; ++c) {
        const auto k =
            static_cast<Index>(coulomb::uniform_index(static_cast<std::uint64_t>(left + 1), rng));
        p(i, c) = static_cast<double>(k) / 30.0;
        left -= k;
      }
      p(i, C - 1) = static_cast<double>(left) / 30.0;
      y[static_cast<std::size_t>(i)] =
          static_cast<int>(coulomb::uniform_index(static_cast<std::uint64_t>(C), rng));
    }
    for (const Index M : {Index{1}, Index{10}, Index{15}}) {
      CHECK(coulomb::expected_calibration_error(p, y, M) ==
            Approx(brute_force_ece(p, y, M)).margin(1e-13));
    }
    Index total = 0;
    for (const auto& b : coulomb::reliability_diagram(p, y)) total += b.count;
    CHECK(total == n);
  }
}

TEST_CASE("Calibration_RejectBadInput", "[metrics][input]") {
  const auto p = column({0.2, 0.7});
  CHECK_THROWS_AS(coulomb::brier_score(p, Labels{0}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::log_loss(column({0.2, 1.5}), Labels{0, 1}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::reliability_diagram(p, Labels{0, 2}), coulomb::invalid_argument);
  Eigen::MatrixXd rows(1, 3);
  rows << 0.5, 0.5, 0.5;
  CHECK_THROWS_AS(coulomb::brier_score(rows, Labels{0}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::expected_calibration_error(p, Labels{0, 1}, 0),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::log_loss(p, Labels{0, 1}, 0.0), coulomb::invalid_argument);
}

}  // namespace metrics_calibration_test
