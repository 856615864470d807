// SPDX-License-Identifier: MIT
// backward_input and backward_params of every feature map against central finite differences
// of a scalar loss, in double precision; with the stabilizer, on losses that the stabilizer's
// shift leaves unchanged.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace features_gradient_test {

namespace {

using coulomb::Draw;
using coulomb::Stabilizer;
using coulomb_test::Index;
using coulomb_test::Mat;
using coulomb_test::Vec;
using namespace coulomb_test::cases;

constexpr Index kN = 5;  // batch rows
constexpr Index kD = 4;  // input dimension
constexpr Index kM = 6;  // particles
constexpr double kMaxRelError = 1e-6;

/// A scalar loss of the features: value L(Φ) and gradient dPhi = ∂L/∂Φ.
enum class Loss {
  linear,           ///< Σ_ij W_ij Φ_ij
  row_normalized,   ///< Σ_ij W_ij Φ_ij / Σ_k Φ_ik: invariant to a per-row scale of Φ
  block_normalized  ///< Σ_ij W_ij Φ_ij / Σ_kl Φ_kl: invariant to a global scale of Φ
};

double loss_value(Loss loss, const Mat<double>& W, const Mat<double>& phi) {
  switch (loss) {
    case Loss::linear:
      return W.cwiseProduct(phi).sum();
    case Loss::row_normalized:
      return (W.cwiseProduct(phi).rowwise().sum().array() / phi.rowwise().sum().array()).sum();
    case Loss::block_normalized:
      return W.cwiseProduct(phi).sum() / phi.sum();
  }
  return 0.0;
}

Mat<double> loss_gradient(Loss loss, const Mat<double>& W, const Mat<double>& phi) {
  switch (loss) {
    case Loss::linear:
      return W;
    case Loss::row_normalized: {
      // ∂/∂Φ_ij of a_i/S_i, a_i = Σ_k W_ik Φ_ik, S_i = Σ_k Φ_ik: W_ij/S_i − a_i/S_i².
      const Vec<double> a = W.cwiseProduct(phi).rowwise().sum();
      const Vec<double> S = phi.rowwise().sum();
      Mat<double> g = W;
      for (Index i = 0; i < phi.rows(); ++i)
        g.row(i) = (W.row(i).array() / S(i) - a(i) / (S(i) * S(i))).matrix();
      return g;
    }
    case Loss::block_normalized: {
      const double a = W.cwiseProduct(phi).sum();
      const double S = phi.sum();
      return (W.array() / S - a / (S * S)).matrix();
    }
  }
  return W;
}

/// Central finite-difference gradient of f at `at`, entry by entry, with step 1e-5·max(1, |a|).
Mat<double> fd_gradient(const Mat<double>& at, const std::function<double(const Mat<double>&)>& f) {
  Mat<double> g(at.rows(), at.cols());
  Mat<double> probe = at;
  for (Index j = 0; j < at.cols(); ++j) {
    for (Index i = 0; i < at.rows(); ++i) {
      const double h = 1e-5 * std::max(1.0, std::abs(at(i, j)));
      probe(i, j) = at(i, j) + h;
      const double up = f(probe);
      probe(i, j) = at(i, j) - h;
      const double down = f(probe);
      probe(i, j) = at(i, j);
      g(i, j) = (up - down) / (2.0 * h);
    }
  }
  return g;
}

/// Inputs for the gradient check. Relu features have a kink at ωᵀx = 0: redraw X until every
/// |ωᵀx| >= 1e-3 (the finite-difference steps move z by < 1e-4).
template <typename Map>
Mat<double> kink_free_inputs(const Map& map, coulomb::Rng& rng) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const Mat<double> X = coulomb_test::rows_with_norms(kN, kD, 0.5, 1.5, rng);
    if ((X * map.omega().transpose()).cwiseAbs().minCoeff() >= 1e-3) return X;
  }
  FAIL("could not draw inputs away from the relu kinks");
  return {};
}

/// Compares backward_input and backward_params with finite differences of
/// L(map(X, s)) for the given loss.
template <typename Map>
void check_gradients(const Map& map, const Mat<double>& X, const Mat<double>& W, Stabilizer s,
                     Loss loss) {
  Mat<double> phi;
  map.map(X, phi, s);
  const Mat<double> dphi = loss_gradient(loss, W, phi);

  Mat<double> dX;
  Mat<double> dOmega;
  map.backward_input(X, phi, dphi, dX);
  map.backward_params(X, phi, dphi, dOmega);
  REQUIRE(dX.rows() == X.rows());
  REQUIRE(dX.cols() == map.input_dim());
  REQUIRE(dOmega.rows() == map.num_particles());
  REQUIRE(dOmega.cols() == map.input_dim());
  REQUIRE(dX.allFinite());
  REQUIRE(dOmega.allFinite());
  // backward computes both at once, identically.
  Mat<double> dX_both;
  Mat<double> dOmega_both;
  map.backward(X, phi, dphi, dX_both, dOmega_both);
  CHECK(coulomb_test::rel_diff(dX_both, dX) <= coulomb_test::tol<double>::tight);
  CHECK(coulomb_test::rel_diff(dOmega_both, dOmega) <= coulomb_test::tol<double>::tight);

  const Mat<double> fd_x =
      fd_gradient(X, [&](const Mat<double>& Xp) { return loss_value(loss, W, map.map(Xp, s)); });
  Map probe = map;
  const Mat<double> fd_omega = fd_gradient(map.omega(), [&](const Mat<double>& Op) {
    probe.set_omega(Op);
    return loss_value(loss, W, probe.map(X, s));
  });

  const double err_x = (fd_x - dX).norm() / std::max(dX.norm(), 1e-300);
  const double err_omega = (fd_omega - dOmega).norm() / std::max(dOmega.norm(), 1e-300);
  INFO(Map::name() << ", stabilizer " << coulomb::to_string(s) << ": relative error dX " << err_x
                   << ", dOmega " << err_omega << "\ndX =\n"
                   << dX << "\nfinite differences =\n"
                   << fd_x << "\ndOmega =\n"
                   << dOmega << "\nfinite differences =\n"
                   << fd_omega);
  // The gradients are not trivially zero.
  CHECK(dX.norm() > 1e-8);
  CHECK(dOmega.norm() > 1e-8);
  CHECK(err_x < kMaxRelError);
  CHECK(err_omega < kMaxRelError);
}

}  // namespace

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_GradientsMatchFiniteDifferences", "[features][gradient]",
                           (Rff, RffCosSin, FavorPlus, FavorHyperbolic, PorfExp, PorfSoftplus,
                            PorfRelu, PorfReluEps, SoftmaxFeat, SoftmaxFeatJoint,
                            SoftmaxFeatSeparate),
                           (double)) {
  // L = Σ_ij W_ij Φ_ij with a fixed random W (so dPhi = W); the whole gradient must agree
  // with central differences: ‖g_fd − g‖/‖g‖ < 1e-6.
  using Map = typename TestType::Map;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("Gradients/") + Map::name());
  for (const Draw draw : {Draw::iid, Draw::orthogonal_chi}) {
    INFO("draw " << coulomb::to_string(draw));
    const Map map = TestType::make(kD, kM, rng, draw);
    const Mat<double> X = kink_free_inputs(map, rng);
    const Mat<double> W = coulomb_test::gaussian(kN, map.output_dim(), rng);
    check_gradients(map, X, W, Stabilizer::none, Loss::linear);
  }
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_StabilizedGradientsMatchFiniteDifferences",
                           "[features][gradient][stability]", (FavorPlus, FavorHyperbolic, PorfExp),
                           (double)) {
  // backward treats the stabilizer shift as a constant. On a loss the shift cancels from —
  // row-normalized features for per_row, block-normalized for global — that must equal the
  // finite differences of the stabilized pipeline (where the shift does move with X and Ω).
  using Map = typename TestType::Map;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("StabilizedGradients/") + Map::name());
  const Map map = TestType::make(kD, kM, rng, Draw::orthogonal_chi);
  // Larger inputs so that the shifts are far from 0.
  const Mat<double> X = coulomb_test::rows_with_norms(kN, kD, 1.0, 3.0, rng);
  const Mat<double> W = coulomb_test::gaussian(kN, map.output_dim(), rng);
  SECTION("per_row with a row-normalized loss") {
    check_gradients(map, X, W, Stabilizer::per_row, Loss::row_normalized);
  }
  SECTION("global with a block-normalized loss") {
    check_gradients(map, X, W, Stabilizer::global, Loss::block_normalized);
  }
  SECTION("the normalized losses are shift-invariant: unstabilized gradients agree") {
    check_gradients(map, X, W, Stabilizer::none, Loss::row_normalized);
    check_gradients(map, X, W, Stabilizer::none, Loss::block_normalized);
  }
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_FloatGradientsMatchDouble", "[features][gradient][float]",
                           (Rff, RffCosSin, FavorPlus, FavorHyperbolic, PorfExp, PorfSoftplus,
                            PorfRelu, PorfReluEps, SoftmaxFeat, SoftmaxFeatJoint,
                            SoftmaxFeatSeparate),
                           (float)) {
  // The float backward computes the same gradients as the double one (same particles, same
  // inputs, away from relu kinks) up to float rounding.
  using FloatMap = typename TestType::Map;
  using DoubleCase = typename TestType::template rebind<double>;
  using DoubleMap = typename DoubleCase::Map;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("FloatGradients/") + FloatMap::name());
  const FloatMap fmap = TestType::make(kD, kM, rng, Draw::orthogonal_chi);
  DoubleMap dmap = DoubleCase::make(kD, kM, rng, Draw::orthogonal_chi);
  dmap.set_omega(fmap.omega().template cast<double>());
  if constexpr (coulomb::feature_map_traits<FloatMap>::has_phases) {
    dmap.set_phases(fmap.phases().template cast<double>());
  }
  const Mat<double> Xd = kink_free_inputs(dmap, rng).template cast<float>().template cast<double>();
  const Mat<double> Wd = coulomb_test::gaussian(kN, dmap.output_dim(), rng);
  const Mat<float> Xf = Xd.cast<float>();
  const Mat<float> Wf = Wd.cast<float>();

  Mat<float> phi_f;
  Mat<double> phi_d;
  fmap.map(Xf, phi_f, Stabilizer::none);
  dmap.map(Xd, phi_d, Stabilizer::none);
  CHECK(coulomb_test::rel_diff(phi_f, phi_d) < coulomb_test::tol<float>::tight);
  Mat<float> dx_f;
  Mat<float> dw_f;
  Mat<double> dx_d;
  Mat<double> dw_d;
  fmap.backward_input(Xf, phi_f, Wf, dx_f);
  fmap.backward_params(Xf, phi_f, Wf, dw_f);
  dmap.backward_input(Xd, phi_d, Wd, dx_d);
  dmap.backward_params(Xd, phi_d, Wd, dw_d);
  INFO("dX float vs double " << coulomb_test::rel_diff(dx_f, dx_d) << ", dOmega "
                             << coulomb_test::rel_diff(dw_f, dw_d));
  CHECK(coulomb_test::rel_diff(dx_f, dx_d) < coulomb_test::tol<float>::tight);
  CHECK(coulomb_test::rel_diff(dw_f, dw_d) < coulomb_test::tol<float>::tight);
}

TEMPLATE_TEST_CASE("PorfRelu_BackwardIsZeroWhereReluIsInactive", "[features][gradient]", float,
                   double) {
  // Where ωᵀx < 0 the relu feature is the constant ε/√m, so dΦ/dz = 0 and an input whose
  // projections are all negative has zero gradients, for every m and ε. (A backward that
  // recovers relu(z) from Φ as Φ·√m − ε and tests it for > 0 gets a rounding residue of
  // either sign instead of exactly 0 for some (m, ε), e.g. m = 5 or 6 with ε = 0.1.)
  using S = TestType;
  const Index d = 3;
  for (Index m = 1; m <= 16; ++m) {
    for (const double eps : {0.0, 0.01, 0.1, 0.3, 1.0}) {
      INFO("m = " << m << ", epsilon = " << eps);
      // Every particle has a positive first coordinate; the inputs a negative one.
      Mat<S> omega = Mat<S>::Constant(m, d, S(0.25));
      for (Index k = 0; k < m; ++k) omega(k, 0) = S(1) + S(0.1) * static_cast<S>(k);
      Mat<S> X(2, d);
      X << S(-2), S(0.5), S(-0.5), S(-1), S(0.25), S(0.25);
      const coulomb::PorfRelu<S> map(omega, {Draw::orthogonal_chi, eps});
      const Mat<S> phi = map.map(X);
      const S floor_value = static_cast<S>(eps / std::sqrt(static_cast<double>(m)));
      // All projections are negative: every feature is the floor ε/√m.
      REQUIRE(((phi.array() - floor_value).abs() <= S(coulomb_test::tol<S>::tight) * floor_value)
                  .all());
      const Mat<S> dphi = Mat<S>::Ones(2, m);
      Mat<S> dX;
      Mat<S> dOmega;
      map.backward_input(X, phi, dphi, dX);
      map.backward_params(X, phi, dphi, dOmega);
      CHECK(dX.isZero(0));
      CHECK(dOmega.isZero(0));
    }
  }
}

}  // namespace features_gradient_test
