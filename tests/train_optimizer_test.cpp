// SPDX-License-Identifier: MIT
// AdamW of train/adamw.hpp: hand-computed steps (bias correction at steps 1 and 2, with and
// without decoupled weight decay), convergence on a convex quadratic, frozen parameters, the
// checks of the parameter list, non-finite detection, and exact resumption from exported state.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <coulomb/nn/parameter.hpp>
#include <coulomb/train/adamw.hpp>
#include <coulomb/train/schedule.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace train_optimizer_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::Matrix;
using coulomb::nn::ParameterList;
using coulomb::train::AdamW;
using coulomb::train::AdamWOptions;

template <typename S>
bool same_bits(const Matrix<S>& a, const Matrix<S>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         (a.size() == 0 ||
          std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(S)) == 0);
}

/// A small model: w (2×1, decayed), b (1×1, not decayed), omega (2×2, frozen).
template <typename S>
struct TinyModel {
  Matrix<S> w{2, 1}, gw{2, 1}, b{1, 1}, gb{1, 1}, omega{2, 2}, gomega{2, 2};
  ParameterList<S> params() {
    return {{"layer.w", &w, &gw, true, true},
            {"layer.b", &b, &gb, true, false},
            {"omega", &omega, &gomega, false, true}};
  }
};

}  // namespace

TEMPLATE_TEST_CASE("AdamW_MatchesHandComputedSteps", "[train][adamw]", float, double) {
  using S = TestType;
  // Hand computation (40-digit decimal arithmetic) of
  //   θ ← θ(1 − ηλ) [decay only];  m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²;
  //   θ ← θ − η m/(1−β₁ᵗ) / (√(v/(1−β₂ᵗ)) + ε)
  // with β₁ = 0.9, β₂ = 0.999, ε = 1e-8, λ = 0.1, η = 0.01.
  // Step 1 with decay, θ = 1.5, g = 0.5: θ = 1.5·0.999 − 0.01·0.5/(0.5 + 1e-8) = 1.4885000002.
  // Step 2, g = −0.25: m = 0.02, v = 0.00031225, m̂ = 0.02/0.19, v̂ = 0.00031225/0.001999.
  const AdamWOptions options{0.9, 0.999, 1e-8, 0.1, true};
  AdamW<S> opt(options);
  TinyModel<S> model;
  model.w << S(1.5), S(1.5);
  model.b << S(1.5);
  model.omega.setConstant(S(7));
  model.gomega.setConstant(std::numeric_limits<S>::quiet_NaN());  // never read: frozen
  auto params = model.params();
  // w decays; b has the same value and gradient as w's entries, but does not decay.
  model.gw << S(0.5), S(0.5);
  model.gb << S(0.5);
  opt.step(params, 0.01);
  const double tol = coulomb_test::tol<S>::tight;
  CHECK(opt.step_count() == 1);
  CHECK(static_cast<double>(model.w(0)) == Approx(1.488500000199999996).epsilon(tol));
  CHECK(static_cast<double>(model.b(0)) == Approx(1.490000000199999996).epsilon(tol));
  // Bias correction at step 1: m̂ = g, v̂ = g², so the step is η·g/(|g| + ε).
  CHECK(static_cast<double>((*opt.first_moment("layer.b"))(0)) == Approx(0.05).epsilon(tol));
  CHECK(static_cast<double>((*opt.second_moment("layer.b"))(0)) == Approx(0.00025).epsilon(tol));

  model.gw << S(-0.25), S(-0.25);
  model.gb << S(-0.25);
  opt.step(params, 0.01);
  CHECK(opt.step_count() == 2);
  CHECK(static_cast<double>(model.w(0)) == Approx(1.484348129870584616).epsilon(tol));
  CHECK(static_cast<double>(model.b(0)) == Approx(1.487336629870784616).epsilon(tol));
  CHECK(static_cast<double>((*opt.first_moment("layer.b"))(0)) == Approx(0.02).epsilon(tol));
  CHECK(static_cast<double>((*opt.second_moment("layer.b"))(0)) == Approx(0.00031225).epsilon(tol));
  // Both entries of w follow the same arithmetic; the frozen Ω is untouched and has no state.
  CHECK(model.w(1) == model.w(0));
  CHECK((model.omega.array() == S(7)).all());
  CHECK(opt.first_moment("omega") == nullptr);
}

TEST_CASE("AdamW_MatchesHandComputedStepsWithoutDecay", "[train][adamw]") {
  // λ = 0: a negative parameter with a large gradient. Step 1: θ = −2 − 0.01·3/(3 + 1e-8);
  // step 2 (g = 1): m = 0.37, v = 0.009991, θ = −2.0187106394349471256 (40-digit arithmetic).
  AdamW<double> opt(AdamWOptions{0.9, 0.999, 1e-8, 0.0, true});
  Matrix<double> x(1, 1), g(1, 1);
  x << -2.0;
  ParameterList<double> params{{"x", &x, &g, true, true}};
  g << 3.0;
  opt.step(params, 0.01);
  CHECK(x(0) == Approx(-2.009999999966666666777).epsilon(coulomb_test::tol<double>::tight));
  g << 1.0;
  opt.step(params, 0.01);
  CHECK(x(0) == Approx(-2.018710639434947125650).epsilon(coulomb_test::tol<double>::tight));
}

TEMPLATE_TEST_CASE("AdamW_ConvergesOnConvexQuadratic", "[train][adamw]", float, double) {
  using S = TestType;
  // f(θ) = ½ Σ a_ij (θ_ij − c_ij)² with curvatures a from 0.1 to 10: ∇f = a ∘ (θ − c).
  // Cosine decay to 0 lets the iterate settle; without weight decay the minimiser is c.
  auto rng = coulomb_test::test_rng("AdamW_ConvergesOnConvexQuadratic");
  const Matrix<double> c = coulomb_test::gaussian(4, 3, rng);
  Matrix<double> a(4, 3);
  for (Index k = 0; k < a.size(); ++k) a.data()[k] = 0.1 * std::pow(100.0, k / 11.0);
  Matrix<S> theta = Matrix<S>::Zero(4, 3), grad(4, 3);
  ParameterList<S> params{{"theta", &theta, &grad, true, true}};
  AdamW<S> opt(AdamWOptions{0.9, 0.999, 1e-8, 0.0, true});
  const auto schedule = coulomb::train::LearningRateSchedule::warmup_cosine(0.05, 50, 3000);
  const double f0 = 0.5 * (a.array() * c.array().square()).sum();
  for (Index t = 0; t < 3000; ++t) {
    grad = (a.array() * (theta.template cast<double>() - c).array()).matrix().template cast<S>();
    opt.step(params, schedule(t));
  }
  const Matrix<double> err = theta.template cast<double>() - c;
  const double f = 0.5 * (a.array() * err.array().square()).sum();
  INFO("f0 = " << f0 << ", f = " << f << ", max |θ − c| = " << err.cwiseAbs().maxCoeff());
  // The float bound is the float resolution of c (|c| ≲ 3) times a margin; double goes further.
  const double bound = std::is_same_v<S, float> ? 1e-4 : 1e-6;
  CHECK(err.cwiseAbs().maxCoeff() < bound);
}

TEST_CASE("AdamW_LeavesFrozenParametersAlone", "[train][adamw]") {
  TinyModel<double> model;
  model.w.setOnes();
  model.b.setOnes();
  model.omega << 1, 2, 3, 4;
  const Matrix<double> omega0 = model.omega;
  model.gw.setConstant(0.1);
  model.gb.setConstant(0.1);
  auto params = model.params();
  params[2].gradient = nullptr;  // a frozen parameter needs no gradient
  AdamW<double> opt;
  for (int i = 0; i < 3; ++i) opt.step(params, 0.1);
  CHECK(same_bits(model.omega, omega0));
  CHECK(opt.first_moment("omega") == nullptr);
  CHECK(opt.export_state().tensors.size() == 4);
}

TEST_CASE("AdamW_RejectsAChangedParameterList", "[train][adamw][input]") {
  using coulomb::invalid_argument;
  TinyModel<double> model;
  model.w.setOnes();
  model.b.setOnes();
  model.omega.setOnes();
  model.gw.setConstant(0.1);
  model.gb.setConstant(0.1);
  model.gomega.setZero();
  AdamW<double> opt;
  auto params = model.params();
  opt.step(params, 0.1);
  const Matrix<double> w1 = model.w;

  SECTION("a new trainable parameter") {
    params[2].trainable = true;  // unfreezing Ω after the first step
    CHECK_THROWS_WITH(
        opt.step(params, 0.1),
        Contains("trainable parameter 'omega' has no optimizer state") && Contains("after step 1"));
  }
  SECTION("a removed parameter") {
    params.erase(params.begin() + 1);
    CHECK_THROWS_WITH(opt.step(params, 0.1),
                      Contains("state for 'layer.b', which is not a trainable parameter"));
  }
  SECTION("a renamed parameter") {
    params[1].name = "layer.bias";
    CHECK_THROWS_AS(opt.step(params, 0.1), invalid_argument);
  }
  SECTION("a resized parameter") {
    model.w.resize(3, 1);
    model.gw.resize(3, 1);
    model.w.setOnes();
    model.gw.setOnes();
    CHECK_THROWS_WITH(opt.step(params, 0.1),
                      Contains("parameter 'layer.w' is 3×1, its optimizer state is 2×1"));
  }
  SECTION("a duplicate name") {
    params.push_back(params[0]);
    params.back().trainable = true;
    CHECK_THROWS_WITH(opt.step(params, 0.1), Contains("'layer.w' appears twice"));
  }
  SECTION("a gradient of the wrong shape") {
    model.gb.resize(2, 1);
    model.gb.setZero();
    CHECK_THROWS_WITH(opt.step(params, 0.1),
                      Contains("the gradient of parameter 'layer.b' is 2×1, its value is 1×1"));
  }
  SECTION("a parameter appearing after steps without trainable parameters") {
    AdamW<double> late;
    auto frozen = params;
    for (auto& p : frozen) p.trainable = false;
    late.step(frozen, 0.1);
    CHECK(late.step_count() == 1);
    CHECK_THROWS_WITH(late.step(params, 0.1),
                      Contains("'layer.w' has no optimizer state: the parameter list changed"));
  }
  SECTION("a bad learning rate") {
    CHECK_THROWS_AS(opt.step(params, -1.0), invalid_argument);
    CHECK_THROWS_AS(opt.step(params, std::numeric_limits<double>::infinity()), invalid_argument);
  }
  // Whatever failed, nothing changed.
  if (model.w.rows() == 2) CHECK(same_bits(model.w, w1));
  CHECK(opt.step_count() == 1);
}

TEST_CASE("AdamW_RejectsBadOptionsAndDuplicatesAtTheFirstStep", "[train][adamw][input]") {
  using coulomb::invalid_argument;
  CHECK_THROWS_AS(AdamW<double>(AdamWOptions{1.0, 0.999, 1e-8, 0.0, true}), invalid_argument);
  CHECK_THROWS_AS(AdamW<double>(AdamWOptions{0.9, -0.1, 1e-8, 0.0, true}), invalid_argument);
  CHECK_THROWS_AS(AdamW<double>(AdamWOptions{0.9, 0.999, 0.0, 0.0, true}), invalid_argument);
  CHECK_THROWS_AS(AdamW<double>(AdamWOptions{0.9, 0.999, 1e-8, -1.0, true}), invalid_argument);
  Matrix<double> x = Matrix<double>::Ones(2, 2), g = Matrix<double>::Ones(2, 2);
  const ParameterList<double> dup{{"x", &x, &g, true, true}, {"x", &x, &g, true, true}};
  AdamW<double> opt;
  CHECK_THROWS_WITH(opt.step(dup, 0.1), Contains("'x' appears twice"));
  CHECK(opt.step_count() == 0);
  CHECK(opt.first_moment("x") == nullptr);
  CHECK(x == Matrix<double>::Ones(2, 2));
}

TEST_CASE("AdamW_NonFiniteValuesNameTheStepAndParameter", "[train][adamw][input]") {
  TinyModel<float> model;
  model.w.setOnes();
  model.b.setOnes();
  model.omega.setOnes();
  model.gw.setConstant(0.1f);
  model.gb.setConstant(0.1f);
  model.gomega.setZero();
  auto params = model.params();
  AdamW<float> opt;
  opt.step(params, 0.1);
  opt.step(params, 0.1);
  const Matrix<float> w2 = model.w;
  const Matrix<float> m2 = *opt.first_moment("layer.w");
  model.gw(1) = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(opt.step(params, 0.1), coulomb::numerical_error);
  CHECK_THROWS_WITH(
      opt.step(params, 0.1),
      Contains("step 3") && Contains("gradient of parameter 'layer.w' has a non-finite entry nan "
                                     "at (1, 0)"));
  model.gw(1) = 0.1f;
  model.b(0) = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(opt.step(params, 0.1), Contains("step 3") && Contains("value of parameter "
                                                                          "'layer.b'"));
  CHECK(same_bits(model.w, w2));
  CHECK(same_bits(*opt.first_moment("layer.w"), m2));
  CHECK(opt.step_count() == 2);
}

TEST_CASE("AdamW_ResumesExactlyFromExportedState", "[train][adamw]") {
  // Ten steps in one go against five steps, export, import into a fresh optimizer, five more:
  // bitwise the same parameters and moments.
  auto gradient = [](Index t, TinyModel<double>& m) {
    m.gw << std::sin(0.3 * t) + m.w(0), std::cos(0.7 * t) - m.w(1);
    m.gb << 0.01 * t - m.b(0);
  };
  auto init = [](TinyModel<double>& m) {
    m.w << 0.5, -0.25;
    m.b << 2.0;
    m.omega.setIdentity();
    m.gomega.setZero();
  };
  TinyModel<double> ref;
  init(ref);
  AdamW<double> opt_ref;
  auto p_ref = ref.params();
  for (Index t = 0; t < 10; ++t) {
    gradient(t, ref);
    opt_ref.step(p_ref, 0.05);
  }

  TinyModel<double> run;
  init(run);
  auto p_run = run.params();
  coulomb::train::AdamWState<double> saved;
  {
    AdamW<double> first;
    for (Index t = 0; t < 5; ++t) {
      gradient(t, run);
      first.step(p_run, 0.05);
    }
    saved = first.export_state();
  }
  CHECK(saved.step == 5);
  CHECK(saved.tensors.size() == 4);
  AdamW<double> second;
  second.import_state(saved, p_run);
  for (Index t = 5; t < 10; ++t) {
    gradient(t, run);
    second.step(p_run, 0.05);
  }
  CHECK(same_bits(run.w, ref.w));
  CHECK(same_bits(run.b, ref.b));
  CHECK(same_bits(*second.second_moment("layer.w"), *opt_ref.second_moment("layer.w")));
  CHECK(second.step_count() == 10);

  SECTION("import rejects state that does not fit the parameters") {
    using coulomb::invalid_argument;
    AdamW<double> other;
    auto missing = saved;
    missing.tensors.pop_back();
    CHECK_THROWS_WITH(other.import_state(missing, p_run),
                      Contains("'layer.w' has no second moment"));
    auto resized = saved;
    resized.tensors[0].value.resize(3, 3);
    resized.tensors[0].value.setZero();
    CHECK_THROWS_WITH(other.import_state(resized, p_run), Contains("is 3×3, parameter"));
    auto negative = saved;
    negative.tensors[1].value(0) = -1.0;  // a second moment
    CHECK_THROWS_AS(other.import_state(negative, p_run), invalid_argument);
    auto stranger = saved;
    stranger.tensors.push_back({"first_moment.omega", Matrix<double>::Zero(2, 2)});
    CHECK_THROWS_WITH(other.import_state(stranger, p_run),
                      Contains("belongs to no trainable parameter"));
    auto garbage = saved;
    garbage.tensors.push_back({"velocity.layer.w", Matrix<double>::Zero(2, 1)});
    CHECK_THROWS_WITH(other.import_state(garbage, p_run), Contains("is not AdamW state"));
    CHECK(other.step_count() == 0);
    CHECK(other.first_moment("layer.w") == nullptr);
  }
}

}  // namespace train_optimizer_test
