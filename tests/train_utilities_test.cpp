// SPDX-License-Identifier: MIT
// Learning-rate schedules (train/schedule.hpp), gradient clipping and the finiteness check
// (train/gradients.hpp), early stopping (train/early_stopping.hpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include <coulomb/core/check.hpp>
#include <coulomb/nn/parameter.hpp>
#include <coulomb/train/early_stopping.hpp>
#include <coulomb/train/gradients.hpp>
#include <coulomb/train/schedule.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace train_utilities_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::Matrix;
using coulomb::nn::ParameterList;
using coulomb::train::Decay;
using coulomb::train::LearningRateSchedule;

}  // namespace

TEST_CASE("Schedule_ValuesAtKeyPoints", "[train][schedule]") {
  const double tight = coulomb_test::tol<double>::tight;
  // Peak 1, floor 0.1, W = 10, T = 110.
  const auto cosine = LearningRateSchedule::warmup_cosine(1.0, 10, 110, 0.1);
  const auto linear = LearningRateSchedule::warmup_linear(1.0, 10, 110, 0.1);
  cosine.validate();
  linear.validate();
  for (const auto& s : {cosine, linear}) {
    CHECK(s(0) == Approx(0.1).epsilon(tight));  // (t + 1)/W: the first step is not wasted
    CHECK(s(4) == Approx(0.5).epsilon(tight));
    CHECK(s(9) == Approx(1.0).epsilon(tight));    // end of the warm-up
    CHECK(s(10) == Approx(1.0).epsilon(tight));   // start of the decay
    CHECK(s(60) == Approx(0.55).epsilon(tight));  // halfway: both shapes give the midpoint
    CHECK(s(110) == Approx(0.1).epsilon(tight));
    CHECK(s(100000) == Approx(0.1).epsilon(tight));
    CHECK(s(-3) == s(0));
  }
  // A quarter of the way: linear 0.1 + 0.9·0.75, cosine 0.1 + 0.9·(1 + cos(π/4))/2.
  CHECK(linear(35) == Approx(0.775).epsilon(tight));
  CHECK(cosine(35) == Approx(0.1 + 0.45 * (1.0 + std::cos(std::numbers::pi / 4))).epsilon(tight));
  // Monotone decay after the warm-up.
  for (Index t = 10; t < 120; ++t) {
    CHECK(cosine(t + 1) <= cosine(t));
    CHECK(linear(t + 1) <= linear(t));
  }

  const auto constant = LearningRateSchedule::constant(3e-4);
  constant.validate();
  CHECK(constant(0) == 3e-4);
  CHECK(constant(1000000) == 3e-4);
  // Constant after a warm-up; no warm-up; a decay that ends with the warm-up.
  const LearningRateSchedule warm_constant{2.0, 0.0, 4, 0, Decay::constant};
  CHECK(warm_constant(1) == Approx(1.0).epsilon(tight));
  CHECK(warm_constant(50) == 2.0);
  CHECK(LearningRateSchedule::warmup_cosine(1.0, 0, 10)(0) == 1.0);
  CHECK(LearningRateSchedule::warmup_linear(1.0, 0, 10)(5) == Approx(0.5).epsilon(tight));
  const auto abrupt = LearningRateSchedule::warmup_linear(1.0, 5, 5, 0.2);
  CHECK(abrupt(4) == 1.0);
  CHECK(abrupt(5) == Approx(0.2).epsilon(tight));
}

TEST_CASE("Schedule_RejectsBadSettings", "[train][schedule][input]") {
  using coulomb::invalid_argument;
  CHECK_THROWS_AS(LearningRateSchedule::constant(0.0).validate(), invalid_argument);
  CHECK_THROWS_AS(LearningRateSchedule::constant(std::nan("")).validate(), invalid_argument);
  CHECK_THROWS_AS(LearningRateSchedule::warmup_cosine(1.0, 10, 5).validate(), invalid_argument);
  CHECK_THROWS_AS(LearningRateSchedule::warmup_cosine(1.0, 0, 0).validate(), invalid_argument);
  CHECK_THROWS_AS(LearningRateSchedule::warmup_linear(1.0, 1, 5, 2.0).validate(), invalid_argument);
  CHECK_THROWS_AS(LearningRateSchedule::warmup_linear(1.0, -1, 5).validate(), invalid_argument);
  CHECK_THROWS_WITH(LearningRateSchedule::warmup_linear(1.0, 1, 5, -0.1).validate(),
                    Contains("LearningRateSchedule") && Contains("'floor'"));
}

TEST_CASE("ClipGradientNorm_ScalesToTheBoundAndReturnsTheNorm", "[train][clip]") {
  Matrix<float> a(2, 2), ga(2, 2), b(3, 1), gb(3, 1), frozen(1, 1), gfrozen(1, 1);
  a.setZero();
  b.setZero();
  frozen.setZero();
  ga << 3, 0, 0, 4;  // ‖ga‖ = 5
  gb << 0, 12, 0;    // ‖gb‖ = 12, global ‖G‖ = 13
  gfrozen << 1000;   // not trainable: not counted, not scaled
  const ParameterList<float> params{{"a", &a, &ga, true, true},
                                    {"b", &b, &gb, true, false},
                                    {"frozen", &frozen, &gfrozen, false, true}};
  const double tight = coulomb_test::tol<float>::tight;
  CHECK(coulomb::train::global_gradient_norm(params) == Approx(13.0).epsilon(tight));

  SECTION("below the bound nothing changes") {
    const Matrix<float> ga0 = ga;
    CHECK(coulomb::train::clip_gradient_norm(params, 13.5) == Approx(13.0).epsilon(tight));
    CHECK(ga == ga0);
  }
  SECTION("above the bound the direction is kept and the norm becomes the bound") {
    CHECK(coulomb::train::clip_gradient_norm(params, 1.3) == Approx(13.0).epsilon(tight));
    CHECK(coulomb::train::global_gradient_norm(params) == Approx(1.3).epsilon(tight));
    CHECK(ga(0, 0) == Approx(0.3).epsilon(tight));
    CHECK(ga(1, 1) == Approx(0.4).epsilon(tight));
    CHECK(gb(1) == Approx(1.2).epsilon(tight));
    CHECK(gfrozen(0) == 1000.0f);
  }
  SECTION("float gradients whose squares overflow float are measured in double") {
    ga.setConstant(3e30f);
    const double norm = coulomb::train::clip_gradient_norm(params, 1.0);
    CHECK(norm == Approx(std::sqrt(4 * 9e60 + 144.0)).epsilon(tight));
    CHECK(coulomb::train::global_gradient_norm(params) == Approx(1.0).epsilon(tight));
  }
  SECTION("a non-finite gradient is an error naming the parameter, nothing is scaled") {
    gb(2) = -std::numeric_limits<float>::infinity();
    const Matrix<float> ga0 = ga;
    CHECK_THROWS_AS(coulomb::train::clip_gradient_norm(params, 1.0), coulomb::numerical_error);
    CHECK_THROWS_WITH(coulomb::train::clip_gradient_norm(params, 1.0),
                      Contains("gradient of parameter 'b' has a non-finite entry -inf at (2, 0)"));
    CHECK(ga == ga0);
  }
  SECTION("the bound must be positive") {
    CHECK_THROWS_AS(coulomb::train::clip_gradient_norm(params, 0.0), coulomb::invalid_argument);
  }
}

TEST_CASE("RequireFiniteParameters_NamesTheStepAndParameter", "[train][finite]") {
  Matrix<double> w = Matrix<double>::Ones(2, 3), gw = Matrix<double>::Zero(2, 3);
  Matrix<double> omega = Matrix<double>::Ones(2, 2);
  const ParameterList<double> params{{"encoder.0.w_q", &w, &gw, true, true},
                                     {"omega", &omega, nullptr, false, true}};
  using coulomb::train::FiniteCheck;
  using coulomb::train::require_finite_parameters;
  CHECK_NOTHROW(require_finite_parameters(params, 7));
  gw(1, 2) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(require_finite_parameters(params, 7), coulomb::numerical_error);
  CHECK_THROWS_WITH(require_finite_parameters(params, 7),
                    Contains("step 7: the gradient of parameter 'encoder.0.w_q' has a non-finite "
                             "entry nan at (1, 2)"));
  CHECK_NOTHROW(require_finite_parameters(params, 7, FiniteCheck::values));
  gw(1, 2) = 0.0;
  omega(0, 1) = std::numeric_limits<double>::infinity();  // a frozen Ω is checked too
  CHECK_THROWS_WITH(require_finite_parameters(params, 12, FiniteCheck::values),
                    Contains("step 12: the value of parameter 'omega' has a non-finite entry inf "
                             "at (0, 1)"));
  CHECK_NOTHROW(require_finite_parameters(params, 12, FiniteCheck::gradients));
}

// all_finite (core/check.hpp), the vectorized check every block of a training step runs: it
// must find one NaN or ±∞ wherever it is (in the vectorized body or the scalar tail, in a
// strided block, in an expression) and accept every finite value, the largest included.
TEMPLATE_TEST_CASE("AllFinite_FindsEveryNonFiniteEntryAndAcceptsEveryFiniteOne", "[train][finite]",
                   float, double) {
  using S = TestType;
  using Lim = std::numeric_limits<S>;
  using coulomb::detail::all_finite;
  using RowMajor = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const S bad[] = {Lim::quiet_NaN(), Lim::infinity(), -Lim::infinity()};
  const S good[] = {Lim::max(), Lim::lowest(), Lim::denorm_min(), S(-0.0), Lim::min()};
  Matrix<S> big = Matrix<S>::Constant(37, 29, S(0.5));
  RowMajor rows = RowMajor::Constant(3, 35, S(-2));
  Eigen::Matrix<S, Eigen::Dynamic, 1> empty(0);
  CHECK(all_finite(empty));
  CHECK(all_finite(Matrix<S>(0, 1 << 20)));
  // Every position of each shape: contiguous, row-major, a strided block, a Ref with an outer
  // stride and an expression over that block.
  auto each_position = [&](auto& target, auto&& view) {
    for (Index j = 0; j < target.cols(); ++j) {
      for (Index i = 0; i < target.rows(); ++i) {
        const S keep = target(i, j);
        for (const S b : bad) {
          target(i, j) = b;
          if (all_finite(view())) FAIL("missed " << b << " at (" << i << ", " << j << ")");
        }
        for (const S g : good) {
          target(i, j) = g;
          if (!all_finite(view())) FAIL("refused " << g << " at (" << i << ", " << j << ")");
        }
        target(i, j) = keep;
      }
    }
  };
  each_position(big, [&]() -> const Matrix<S>& { return big; });
  each_position(rows, [&]() -> const RowMajor& { return rows; });
  auto block = big.block(3, 2, 30, 21);
  each_position(block, [&] { return big.block(3, 2, 30, 21); });
  each_position(block, [&] {
    return Eigen::Ref<const Matrix<S>, 0, Eigen::OuterStride<>>(big.block(3, 2, 30, 21));
  });
  each_position(block, [&] { return S(0.5) * big.block(3, 2, 30, 21).array(); });
  CHECK(all_finite(big));
}

TEST_CASE("EarlyStopping_RestoresTheBestParameters", "[train][early_stopping]") {
  using coulomb::MetricGoal;
  using coulomb::train::EarlyStopping;
  Matrix<float> w(2, 2), gw(2, 2), omega(1, 3);
  omega << 1, 2, 3;
  const ParameterList<float> params{{"w", &w, &gw, true, true},
                                    {"omega", &omega, nullptr, false, true}};
  EarlyStopping<float> stop({.patience = 3, .min_delta = 0.0, .goal = MetricGoal::maximize});
  CHECK_FALSE(stop.has_best());
  CHECK_THROWS_AS(stop.restore_best(params), coulomb::invalid_argument);

  const std::vector<double> accuracy = {0.50, 0.62, 0.58, 0.62, 0.61, 0.70};
  Matrix<float> best;
  Index epoch = 0;
  for (; epoch < static_cast<Index>(accuracy.size()) && !stop.should_stop(); ++epoch) {
    w.setConstant(static_cast<float>(epoch));  // "training" changes the parameters
    omega(0) = static_cast<float>(10 * epoch);
    const bool improved = stop.update(epoch, accuracy[static_cast<std::size_t>(epoch)], params);
    CHECK(improved == (epoch <= 1));  // 0.62 again at epoch 3 is not an improvement
    if (improved) best = w;
  }
  CHECK(epoch == 5);  // epochs 2, 3, 4 without improvement: stop before epoch 5
  CHECK(stop.should_stop());
  CHECK(stop.best_epoch() == 1);
  CHECK(stop.best_value() == 0.62);
  CHECK(stop.epochs_without_improvement() == 3);
  CHECK(stop.last_epoch() == 4);
  stop.restore_best(params);
  CHECK(w == best);
  CHECK(omega(0) == 10.0f);

  SECTION("restore refuses another parameter list and changes nothing") {
    Matrix<float> v(2, 2);
    w.setConstant(-1.0f);
    const ParameterList<float> other{{"w", &w, &gw, true, true}, {"v", &v, nullptr, true, true}};
    CHECK_THROWS_WITH(stop.restore_best(other), Contains("'v' was not captured"));
    const ParameterList<float> fewer{{"w", &w, &gw, true, true}};
    CHECK_THROWS_WITH(stop.restore_best(fewer), Contains("'omega' is not in the list"));
    CHECK((w.array() == -1.0f).all());
  }
  SECTION("epochs must increase; a NaN metric is a numerical error naming the epoch") {
    CHECK_THROWS_AS(stop.update(4, 0.9, params), coulomb::invalid_argument);
    CHECK_THROWS_WITH(stop.update(5, std::nan(""), params), Contains("epoch 5"));
    CHECK_THROWS_AS(stop.update(5, std::nan(""), params), coulomb::numerical_error);
    CHECK(stop.last_epoch() == 4);
  }
}

TEST_CASE("EarlyStopping_MinimizesWithMinDelta", "[train][early_stopping]") {
  using coulomb::MetricGoal;
  using coulomb::train::EarlyStopping;
  Matrix<double> w = Matrix<double>::Zero(1, 1);
  const ParameterList<double> params{{"w", &w, nullptr, false, true}};
  EarlyStopping<double> stop({.patience = 2, .min_delta = 0.01, .goal = MetricGoal::minimize});
  CHECK(stop.update(0, 1.00, params));
  CHECK_FALSE(stop.update(1, 0.995, params));  // better, but not by more than min_delta
  CHECK(stop.update(2, 0.98, params));
  CHECK_FALSE(stop.update(3, 0.975, params));
  CHECK_FALSE(stop.should_stop());
  CHECK_FALSE(stop.update(4, 2.0, params));
  CHECK(stop.should_stop());
  CHECK(stop.best_epoch() == 2);
  CHECK(stop.best_value() == 0.98);
  CHECK_THROWS_AS(EarlyStopping<double>({.patience = 0}), coulomb::invalid_argument);
  CHECK_THROWS_AS(EarlyStopping<double>({.patience = 1, .min_delta = -1.0}),
                  coulomb::invalid_argument);
}

}  // namespace train_utilities_test
