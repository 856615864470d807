// SPDX-License-Identifier: MIT
// Metrics of the predicted classes (metrics/classification.hpp: confusion counts, accuracy,
// MCC, F1) and evaluate_classification (metrics/evaluation.hpp) against values computed by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <coulomb/metrics/classification.hpp>
#include <coulomb/metrics/evaluation.hpp>

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace metrics_classification_test {

namespace {

using coulomb::Index;
using Labels = std::vector<int>;

using coulomb_test::column;

}  // namespace

TEST_CASE("Classification_BinaryValuesComputedByHand", "[metrics]") {
  const Labels y = {1, 1, 1, 0, 0, 0, 1, 0};
  const Eigen::VectorXd p = column({0.9, 0.8, 0.4, 0.3, 0.6, 0.1, 0.7, 0.2});
  // Predictions 1 1 0 0 1 0 1 0: TP = 3, FN = 1, FP = 1, TN = 3.
  CHECK(coulomb::predicted_classes(p) == Labels{1, 1, 0, 0, 1, 0, 1, 0});
  const auto cm = coulomb::confusion_matrix(p, y);
  CHECK(cm(1, 1) == 3);
  CHECK(cm(1, 0) == 1);
  CHECK(cm(0, 1) == 1);
  CHECK(cm(0, 0) == 3);
  CHECK(coulomb::accuracy(p, y) == Approx(0.75).epsilon(1e-15));
  // MCC = (3·3 − 1·1) / √(4·4·4·4) = 1/2; F1 = 2·3 / (2·3 + 1 + 1) = 3/4.
  CHECK(coulomb::matthews_corrcoef(p, y) == Approx(0.5).epsilon(1e-15));
  CHECK(coulomb::f1_score(p, y) == Approx(0.75).epsilon(1e-15));
  CHECK(coulomb::f1_score(p, y, 0) == Approx(0.75).epsilon(1e-15));
  // Float probabilities give the same.
  const Eigen::VectorXf pf = p.cast<float>();
  CHECK(coulomb::matthews_corrcoef(pf, y) == Approx(0.5));
}

TEST_CASE("Classification_MultiClassValuesComputedByHand", "[metrics]") {
  const Labels y = {0, 0, 1, 1, 2, 2};
  Eigen::MatrixXd p(6, 3);
  p << 0.7, 0.2, 0.1,  //
      0.3, 0.6, 0.1,   //
      0.1, 0.8, 0.1,   //
      0.2, 0.5, 0.3,   //
      0.1, 0.1, 0.8,   //
      0.5, 0.2, 0.3;
  // Predictions 0 1 1 1 2 0: c = 4, s = 6, t = (2, 2, 2), p = (2, 3, 1).
  CHECK(coulomb::predicted_classes(p) == Labels{0, 1, 1, 1, 2, 0});
  CHECK(coulomb::accuracy(p, y) == Approx(4.0 / 6.0));
  // R_K = (4·6 − (4 + 6 + 2)) / √((36 − 14)(36 − 12)) = 12 / √528.
  CHECK(coulomb::matthews_corrcoef(p, y) == Approx(12.0 / std::sqrt(528.0)).epsilon(1e-14));
  // F1: class 0 = 2/4, class 1 = 4/5, class 2 = 2/3.
  CHECK(coulomb::macro_f1(p, y) == Approx((0.5 + 0.8 + 2.0 / 3.0) / 3.0).epsilon(1e-14));
  CHECK(coulomb::f1_score(p, y, 1) == Approx(0.8));
}

TEST_CASE("Classification_LimitingCases", "[metrics]") {
  const Labels y = {0, 1, 1, 0};
  CHECK(coulomb::matthews_corrcoef(column({0.1, 0.9, 0.8, 0.2}), y) == Approx(1.0));
  CHECK(coulomb::matthews_corrcoef(column({0.9, 0.1, 0.2, 0.8}), y) == Approx(-1.0));
  // One predicted class: MCC undefined, reported as 0; F1 of the never-predicted class is 0.
  const auto constant = column({0.9, 0.9, 0.9, 0.9});
  CHECK(coulomb::matthews_corrcoef(constant, y) == 0.0);
  CHECK(coulomb::f1_score(constant, y, 0) == 0.0);
  CHECK(coulomb::f1_score(constant, y, 1) == Approx(2.0 / 3.0));
  // p = 0.5 predicts class 0 (ties go to the lower class).
  CHECK(coulomb::predicted_classes(column({0.5})) == Labels{0});
}

TEST_CASE("Classification_RejectBadInput", "[metrics][input]") {
  const auto p = column({0.2, 0.7});
  CHECK_THROWS_AS(coulomb::accuracy(p, Labels{0}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::accuracy(p, Labels{0, 2}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::accuracy(p, Labels{0, -1}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::accuracy(column({0.2, 1.5}), Labels{0, 1}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::accuracy(column({0.2, std::nan("")}), Labels{0, 1}),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::accuracy(Eigen::VectorXd(0), Labels{}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::f1_score(p, Labels{0, 1}, 2), coulomb::invalid_argument);
}

TEST_CASE("EvaluateClassification_EveryMetricAsComputedByHand", "[metrics]") {
  const Labels y = {1, 1, 1, 0, 0, 0, 1, 0};
  const Eigen::VectorXd p = column({0.9, 0.8, 0.4, 0.3, 0.6, 0.1, 0.7, 0.2});
  // The values of Classification_BinaryValuesComputedByHand and
  // Calibration_BinaryValuesComputedByHand (metrics_calibration_test.cpp).
  const double ll =
      -(2 * std::log(0.9) + 2 * std::log(0.8) + 2 * std::log(0.4) + 2 * std::log(0.7)) / 8.0;
  const auto all = coulomb::evaluate_classification(p, y);
  CHECK(all.count == 8);
  CHECK(all.accuracy == Approx(0.75));
  CHECK(all.mcc == Approx(0.5));
  CHECK(all.f1 == Approx(0.75));
  CHECK(all.ece == Approx(0.3));
  CHECK(all.log_loss == Approx(ll));
  CHECK(all.brier == Approx(0.125));

  // The same predictions as a two-column matrix give the same metrics.
  Eigen::MatrixXd two(8, 2);
  two.col(0) = 1.0 - p.array();
  two.col(1) = p;
  const auto same = coulomb::evaluate_classification(two, y);
  CHECK(same.accuracy == all.accuracy);
  CHECK(same.mcc == Approx(all.mcc));
  CHECK(same.ece == Approx(all.ece));
  CHECK(same.log_loss == Approx(all.log_loss));
  CHECK(same.brier == Approx(all.brier));

  // More than two classes: the F1 is the macro F1.
  const Labels y3 = {0, 0, 1, 1, 2, 2};
  Eigen::MatrixXd p3(6, 3);
  p3 << 0.7, 0.2, 0.1,  //
      0.3, 0.6, 0.1,    //
      0.1, 0.8, 0.1,    //
      0.2, 0.5, 0.3,    //
      0.1, 0.1, 0.8,    //
      0.5, 0.2, 0.3;
  CHECK(coulomb::evaluate_classification(p3, y3).f1 == Approx(coulomb::macro_f1(p3, y3)));

  coulomb::MetricOptions options;
  options.positive_class = 3;
  CHECK_THROWS_AS(coulomb::evaluate_classification(column({0.2, 0.7}), Labels{0, 1}, options),
                  coulomb::invalid_argument);
}

}  // namespace metrics_classification_test
