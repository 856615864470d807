// SPDX-License-Identifier: MIT
// Numerical stability of the positive feature maps at large input norms, and the stabilizer:
// shifted exponential features are finite and non-negative, and the shift cancels exactly in
// linear attention's ratio φ(q)ᵀΣφ(k)vᵀ / φ(q)ᵀΣφ(k).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace features_stability_test {

namespace {

using coulomb::Draw;
using coulomb::Stabilizer;
using coulomb_test::Index;
using coulomb_test::Mat;
using coulomb_test::tol;
using coulomb_test::Vec;
using namespace coulomb_test::cases;

constexpr Index kParticles = 256;

/// Inputs of the given norms (one row per norm) in uniformly random directions, plus a zero
/// row.
Mat<double> rows_of_norms(const std::vector<double>& norms, Index d, coulomb::Rng& rng) {
  Mat<double> x(static_cast<Index>(norms.size()) + 1, d);
  for (std::size_t i = 0; i < norms.size(); ++i) {
    x.row(static_cast<Index>(i)) = coulomb_test::rows_with_norms(1, d, norms[i], norms[i], rng);
  }
  x.row(x.rows() - 1).setZero();
  return x;
}

/// Linear attention: out_i = φ(q_i)ᵀ(Σ_j φ(k_j) v_jᵀ) / φ(q_i)ᵀ(Σ_j φ(k_j)), in the scalar of the
/// features.
template <typename S>
Mat<S> attention(const Mat<S>& phi_q, const Mat<S>& phi_k, const Mat<S>& V) {
  const Mat<S> kv = phi_k.transpose() * V;                 // D x d_v
  const Vec<S> k_sum = phi_k.colwise().sum().transpose();  // D
  const Mat<S> numerator = phi_q * kv;                     // n_q x d_v
  const Vec<S> denominator = phi_q * k_sum;                // n_q
  return (numerator.array().colwise() / denominator.array()).matrix();
}

/// Values in [-1, 1].
template <typename S>
Mat<S> values(Index n, Index dv, coulomb::Rng& rng) {
  Mat<double> v(n, dv);
  coulomb::fill_uniform(v, -1.0, 1.0, rng);
  return v.cast<S>();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Positive maps at large norms
// ---------------------------------------------------------------------------------------------

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_StabilizedFeaturesFiniteAtLargeNorms",
                           "[features][stability]",
                           (FavorPlus, FavorHyperbolic, PorfExp, PorfSoftplus, PorfReluEps,
                            SoftmaxFeat, SoftmaxFeatJoint, SoftmaxFeatSeparate),
                           (float, double)) {
  // Positive maps stay usable for inputs of norm up to 100 (‖x‖²/2 = 5000, far beyond the
  // exponent range of float and double): with the per-row stabilizer every entry is finite and
  // >= 0 and every row has a positive entry (so the attention denominator of a query cannot
  // vanish); with the global stabilizer (keys) the block is finite, >= 0, with a positive
  // entry.
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  using traits = coulomb::feature_map_traits<Map>;
  static_assert(traits::is_positive);
  coulomb::Rng rng = coulomb_test::test_rng(std::string("StabilizedLargeNorms/") + Map::name());
  const std::vector<double> norms{0.1, 1.0, 5.0, 10.0, 20.0, 30.0, 30.0, 50.0, 50.0, 100.0};
  for (const Index d : {Index{16}, Index{64}}) {
    const Map map = TestType::make(d, kParticles, rng, Draw::orthogonal_chi);
    const Mat<S> X = rows_of_norms(norms, d, rng).template cast<S>();
    const Index D = map.output_dim();
    const S c = static_cast<S>(1.0 / std::sqrt(static_cast<double>(D)));
    const S z_max = (X * map.omega().transpose()).cwiseAbs().maxCoeff();

    SECTION("per_row, d = " + std::to_string(d)) {
      Mat<S> phi;
      Vec<S> log_scale;
      map.map(X, phi, Stabilizer::per_row, log_scale);
      REQUIRE(phi.rows() == X.rows());
      REQUIRE(phi.cols() == D);
      CHECK(phi.allFinite());
      CHECK((phi.array() >= S(0)).all());
      CHECK((phi.rowwise().maxCoeff().array() > S(0)).all());
      CHECK(log_scale.size() == X.rows());
      CHECK(log_scale.allFinite());
      if constexpr (traits::is_stabilizable) {
        // The largest entry of each row is c·exp(0) = 1/√D, up to the rounding of an exponent
        // of size max|ωᵀx| (the shift subtracted from it).
        const Vec<S> row_max = phi.rowwise().maxCoeff();
        CHECK(((row_max.array() - c).abs() <= S(tol<S>::tight) * c * (S(1) + z_max)).all());
      }
    }
    SECTION("global, d = " + std::to_string(d)) {
      Mat<S> phi;
      Vec<S> log_scale;
      map.map(X, phi, Stabilizer::global, log_scale);
      CHECK(phi.allFinite());
      CHECK((phi.array() >= S(0)).all());
      CHECK(phi.maxCoeff() > S(0));
      CHECK(log_scale.allFinite());
      // One shift for the whole block.
      CHECK((log_scale.array() == log_scale(0)).all());
      if constexpr (traits::is_stabilizable) {
        CHECK(std::abs(phi.maxCoeff() - c) <= S(tol<S>::tight) * c * (S(1) + z_max));
      }
    }
    SECTION("maps that are not exponential ignore the stabilizer, d = " + std::to_string(d)) {
      if constexpr (!traits::is_stabilizable) {
        const Mat<S> none = map.map(X, Stabilizer::none);
        for (const Stabilizer s : {Stabilizer::per_row, Stabilizer::global}) {
          Mat<S> phi;
          Vec<S> log_scale;
          map.map(X, phi, s, log_scale);
          CHECK(phi == none);
          CHECK(log_scale == Vec<S>::Zero(X.rows()));
        }
        CHECK(none.allFinite());
        CHECK((none.array() >= S(0)).all());
      }
    }
  }
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_PerRowStabilizerAtExtremeNorms", "[features][stability]",
                           (FavorPlus, FavorHyperbolic, PorfExp), (float, double)) {
  // The per-row shift makes each row's largest exponent 0 for any finite input whose squared
  // norm is representable: every row is finite with largest entry c = 1/√D, up to the
  // rounding of an exponent of size max|ωᵀx| (the −‖x‖²/2 term cancels exactly, so it must
  // not limit the accuracy). Norms here go to 1e5 (float) and 1e10 (double), where ‖x‖²/2
  // exceeds max|ωᵀx| by a factor ~1e4–1e9.
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("PerRowExtreme/") + Map::name());
  const Index d = 16;
  const Map map = TestType::make(d, kParticles, rng, Draw::orthogonal_chi);
  const std::vector<double> norms = std::is_same_v<S, float>
                                        ? std::vector<double>{1e3, 1e3, 1e4, 1e4, 1e5, 1e5}
                                        : std::vector<double>{1e6, 1e6, 1e8, 1e8, 1e10, 1e10};
  const Mat<S> X = rows_of_norms(norms, d, rng).template cast<S>();
  const S c = static_cast<S>(1.0 / std::sqrt(static_cast<double>(map.output_dim())));
  Mat<S> phi;
  Vec<S> log_scale;
  map.map(X, phi, Stabilizer::per_row, log_scale);
  CHECK(phi.allFinite());
  CHECK((phi.array() >= S(0)).all());
  CHECK(log_scale.allFinite());
  for (Index i = 0; i < X.rows(); ++i) {
    const double z_max = (X.row(i) * map.omega().transpose()).cwiseAbs().maxCoeff();
    const double row_max = phi.row(i).maxCoeff();
    INFO("row " << i << ": ‖x‖ = " << X.row(i).norm() << ", max|ωᵀx| = " << z_max
                << ", largest entry / c = " << row_max / c);
    CHECK(std::abs(row_max / c - 1.0) <= tol<S>::tight * (1.0 + z_max));
  }
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_ExpFeaturesAreNormalOrZero", "[features][stability]",
                           (FavorPlus, FavorHyperbolic, PorfExp, SoftmaxFeat, SoftmaxFeatJoint,
                            SoftmaxFeatSeparate),
                           (float, double)) {
  // Eigen's vectorized exp clamps its argument and returns a subnormal constant (5.6e-309 in
  // double) where the exact value is far smaller. The exponential maps flush every result below
  // the smallest normal number to 0: an entry is 0 or normal, under every stabilizer, for
  // inputs whose exponents span the end of the normal range (the rows are long enough for the
  // vectorized path: 64 rows per column).
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("NormalOrZero/") + Map::name());
  const Index d = 8;
  const Map map = TestType::make(d, 32, rng, Draw::iid);
  // ‖x‖²/2 around the end of the normal range: 87 (float) or 708 (double), and far beyond.
  const double edge = std::is_same_v<S, float> ? 13.2 : 37.6;
  std::vector<double> norms;
  for (Index i = 0; i < 63; ++i) norms.push_back(edge * (0.8 + 0.01 * static_cast<double>(i)));
  norms.back() = edge * 1e3;
  const Mat<S> X = rows_of_norms(norms, d, rng).template cast<S>();
  // The softmax features see the projections themselves: scale them up instead.
  const Mat<S> input = Map::is_stabilizable ? X : Mat<S>(S(20) * X);
  const S tiny = std::numeric_limits<S>::min();
  for (const Stabilizer st : {Stabilizer::none, Stabilizer::per_row, Stabilizer::global}) {
    INFO("stabilizer " << static_cast<int>(st));
    Mat<S> phi;
    map.map(input, phi, st);
    REQUIRE(phi.allFinite());
    Index zeros = 0, subnormal = 0;
    std::string first;
    for (Index j = 0; j < phi.cols(); ++j) {
      for (Index i = 0; i < phi.rows(); ++i) {
        const S v = phi(i, j);
        if (v == S(0)) {
          ++zeros;
        } else if (v < tiny && subnormal++ == 0) {
          first = "(" + std::to_string(i) + ", " + std::to_string(j) +
                  ") = " + std::to_string(static_cast<double>(v) / static_cast<double>(tiny)) +
                  " times the smallest normal number";
        }
      }
    }
    INFO("first subnormal entry " << first);
    CHECK(subnormal == 0);
    // The sweep reaches the flushed range: some entries are 0 (the last row at least).
    if (st == Stabilizer::none || st == Stabilizer::global) CHECK(zeros > 0);
  }
}

TEST_CASE("FavorPlus_FlushKeepsEveryNormalFeature", "[features][stability]") {
  // Only results below the smallest normal number are flushed: unstabilized double FAVOR+
  // features agree with exp(ωᵀx − ‖x‖²/2)/√m evaluated in long double wherever that is at
  // least twice the smallest normal number, and are 0 wherever it is below half of it.
  coulomb::Rng rng = coulomb_test::test_rng("FlushKeepsNormal");
  const Index d = 8, m = 32;
  const coulomb::FavorPlus<double> map(d, m, rng, coulomb::FavorOptions{Draw::iid});
  std::vector<double> norms;
  for (Index i = 0; i < 63; ++i) norms.push_back(37.6 * (0.9 + 0.005 * static_cast<double>(i)));
  const Mat<double> X = rows_of_norms(norms, d, rng);
  const Mat<double> phi = map.map(X);
  const double tiny = std::numeric_limits<double>::min();
  Index kept = 0, flushed = 0, not_zero = 0;
  for (Index i = 0; i < X.rows(); ++i) {
    long double h = 0;
    for (Index k = 0; k < d; ++k) h += static_cast<long double>(X(i, k)) * X(i, k);
    h /= 2;
    for (Index j = 0; j < m; ++j) {
      long double z = 0;
      for (Index k = 0; k < d; ++k)
        z += static_cast<long double>(X(i, k)) * static_cast<long double>(map.omega()(j, k));
      const long double exact = std::exp(z - h) / std::sqrt(static_cast<long double>(m));
      INFO("row " << i << ", feature " << j << ": exact " << static_cast<double>(exact)
                  << ", mapped " << phi(i, j));
      if (exact >= 2 * static_cast<long double>(tiny)) {
        ++kept;
        CHECK(std::abs(static_cast<long double>(phi(i, j)) / exact - 1) < 1e-9L);
      } else if (exact < static_cast<long double>(tiny) / 2) {
        ++flushed;
        if (phi(i, j) != 0.0) ++not_zero;
      }
    }
  }
  CHECK(kept > 0);
  CHECK(flushed > 0);
  CHECK(not_zero == 0);
}

TEMPLATE_PRODUCT_TEST_CASE("SoftmaxFeat_RowsSumToOne", "[features][stability]",
                           (SoftmaxFeat, SoftmaxFeatJoint, SoftmaxFeatSeparate), (float, double)) {
  // Each softmax is over one input's features: rows sum to 1 (the separate form is two
  // softmaxes scaled by 1/√2, each half summing to 1/√2), at any input norm.
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("SoftmaxRows/") + Map::name());
  const Index d = 16;
  const Index m = 64;
  const Map map = TestType::make(d, m, rng, Draw::orthogonal_chi);
  const Mat<S> X = rows_of_norms({0.1, 1.0, 10.0, 50.0, 100.0, 1000.0}, d, rng).template cast<S>();
  const Mat<S> phi = map.map(X);
  REQUIRE(phi.allFinite());
  const S sum_tol = S(tol<S>::tight);
  if constexpr (Map::form == coulomb::SoftmaxFeatForm::symmetric_separate) {
    const S half = static_cast<S>(std::sqrt(0.5));
    CHECK(((phi.leftCols(m).rowwise().sum().array() - half).abs() < sum_tol).all());
    CHECK(((phi.rightCols(m).rowwise().sum().array() - half).abs() < sum_tol).all());
  } else {
    CHECK(((phi.rowwise().sum().array() - S(1)).abs() < sum_tol).all());
  }
  // The largest entry of each row is at least 1/D.
  CHECK((phi.rowwise().maxCoeff().array() >=
         S(1) / static_cast<S>(map.output_dim()) * (S(1) - sum_tol))
            .all());
}

TEMPLATE_TEST_CASE("PorfRelu_ZeroRowsOnlyWithoutEpsilon", "[features][stability]", float, double) {
  // With ε = 0, PORF-relu features are relu(ωᵀx)/√m >= 0: finite and non-negative, but a row
  // is all zero when x lies in the negative cone of Ω, for example x = 0 (so ε = 0 features
  // must not feed an attention denominator on their own). With ε > 0 every entry is at least
  // ε/√m > 0, x = 0 included.
  using S = TestType;
  coulomb::Rng rng = coulomb_test::test_rng("PorfRelu_ZeroRowsOnlyWithoutEpsilon");
  const Index d = 16;
  const std::vector<double> norms{0.1, 1.0, 30.0, 50.0, 1000.0};
  const Mat<S> X = rows_of_norms(norms, d, rng).template cast<S>();  // last row is 0
  const Index zero_row = X.rows() - 1;
  coulomb::Rng r1(coulomb_test::base_seed());
  coulomb::Rng r2(coulomb_test::base_seed());
  const coulomb::PorfRelu<S> plain(d, kParticles, r1, {Draw::orthogonal_chi, 0.0});
  const coulomb::PorfRelu<S> floored(d, kParticles, r2, {Draw::orthogonal_chi, 0.1});
  REQUIRE(plain.omega() == floored.omega());
  const S c = static_cast<S>(1.0 / std::sqrt(static_cast<double>(kParticles)));

  for (const Stabilizer s : {Stabilizer::none, Stabilizer::per_row, Stabilizer::global}) {
    INFO("stabilizer " << coulomb::to_string(s));
    const Mat<S> phi0 = plain.map(X, s);
    CHECK(phi0.allFinite());
    CHECK((phi0.array() >= S(0)).all());
    CHECK((phi0.row(zero_row).array() == S(0)).all());
    // Non-zero inputs have a positive entry (orthogonal blocks always have a direction with
    // ωᵀx > 0 unless x is in the negative cone of a whole block).
    CHECK((phi0.topRows(zero_row).rowwise().maxCoeff().array() > S(0)).all());

    const Mat<S> phi1 = floored.map(X, s);
    CHECK(phi1.allFinite());
    CHECK((phi1.array() > S(0)).all());
    CHECK((phi1.row(zero_row).array() == c * S(0.1)).all());
    // The floor shifts every entry by exactly ε/√m.
    CHECK((phi1 - phi0).cwiseAbs().maxCoeff() <=
          c * S(0.1) * (S(1) + S(tol<S>::tight)) + S(tol<S>::tight) * phi0.maxCoeff());
  }
}

// ---------------------------------------------------------------------------------------------
// The stabilizer cancels in attention
// ---------------------------------------------------------------------------------------------

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_StabilizerShiftsAreReturned", "[features][stability]",
                           (FavorPlus, FavorHyperbolic, PorfExp), (float, double)) {
  // map(X, Phi, s, log_scale) returns the shifts: Phi_stab ⊙ exp(log_scale) row-wise equals
  // the unstabilized features, for moderate norms where those neither overflow nor underflow.
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("ShiftsReturned/") + Map::name());
  const Index d = 16;
  const Map map = TestType::make(d, kParticles, rng, Draw::orthogonal_chi);
  const Mat<S> X = coulomb_test::rows_with_norms(24, d, 0.5, 3.0, rng).template cast<S>();
  Mat<S> phi_none;
  Vec<S> log_none;
  map.map(X, phi_none, Stabilizer::none, log_none);
  REQUIRE(phi_none.allFinite());
  REQUIRE((phi_none.array() > S(0)).all());
  CHECK(log_none == Vec<S>::Zero(X.rows()));
  CHECK(map.map(X) == phi_none);

  for (const Stabilizer s : {Stabilizer::per_row, Stabilizer::global}) {
    INFO("stabilizer " << coulomb::to_string(s));
    Mat<S> phi;
    Vec<S> log_scale;
    map.map(X, phi, s, log_scale);
    REQUIRE(log_scale.size() == X.rows());
    // The shifts are the largest exponents: positive for these inputs (the unstabilized rows
    // have entries above 1/√D), so the stabilized entries are smaller.
    const Mat<S> restored = (phi.array().colwise() * log_scale.array().exp()).matrix();
    // Each entry is exp(e) with |e| up to ~|log_scale| + a few; its rounding is ~eps·|e|.
    const double scale = 1.0 + log_scale.cwiseAbs().maxCoeff();
    const double err = ((restored - phi_none).array().abs() / phi_none.array()).maxCoeff();
    INFO("max relative error of Phi_stab * exp(log_scale) vs Phi: " << err);
    CHECK(err < tol<S>::tight * scale);
    // The same map without log_scale gives the same features.
    CHECK(map.map(X, s) == phi);
  }
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_StabilizedAttentionEqualsUnstabilized",
                           "[features][stability]", (FavorPlus, FavorHyperbolic, PorfExp),
                           (double)) {
  // Queries per_row-stabilized and keys global-stabilized give the same attention output as
  // the unbiased features, to ~1e-12 relative, where the unstabilized map is representable.
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("StabilizedAttention/") + Map::name());
  const Index d = 16;
  const Map map = TestType::make(d, kParticles, rng, Draw::orthogonal_chi);
  const Mat<S> Q = coulomb_test::rows_with_norms(16, d, 0.5, 3.0, rng);
  const Mat<S> K = coulomb_test::rows_with_norms(64, d, 0.5, 3.0, rng);
  const Mat<S> V = values<S>(64, 3, rng);
  const Mat<S> phi_q = map.map(Q);
  const Mat<S> phi_k = map.map(K);
  REQUIRE((phi_q.array() > S(0)).all());
  REQUIRE((phi_k.array() > S(0)).all());
  const Mat<S> reference = attention(phi_q, phi_k, V);

  const Mat<S> stab_q = map.map(Q, Stabilizer::per_row);
  const Mat<S> stab_k = map.map(K, Stabilizer::global);
  // The shifts are not trivial: the stabilized features differ from the unbiased ones.
  CHECK(coulomb_test::rel_diff(stab_q, phi_q) > 0.1);
  CHECK(coulomb_test::rel_diff(stab_k, phi_k) > 0.1);
  const Mat<S> out = attention(stab_q, stab_k, V);
  const double err = coulomb_test::rel_diff(out, reference);
  INFO("relative difference of the attention outputs: " << err);
  CHECK(err < 1e-12);
  // Any combination of per-query and shared key shifts cancels as well.
  const Mat<S> out_rr = attention(stab_q, phi_k, V);
  const Mat<S> out_gg = attention(map.map(Q, Stabilizer::global), stab_k, V);
  CHECK(coulomb_test::rel_diff(out_rr, reference) < 1e-12);
  CHECK(coulomb_test::rel_diff(out_gg, reference) < 1e-12);
  // A per-row shift of the keys would not cancel: the check above can fail.
  const Mat<S> out_wrong = attention(stab_q, map.map(K, Stabilizer::per_row), V);
  CHECK(coulomb_test::rel_diff(out_wrong, reference) > 1e-6);
}

TEMPLATE_PRODUCT_TEST_CASE("FeatureMap_FloatStabilizedAttentionAtLargeNorms",
                           "[features][stability][float]", (FavorPlus, FavorHyperbolic, PorfExp),
                           (float)) {
  // For queries of norm 30 or 50 (with keys of norm 2), and for queries and keys of norm 22,
  // the unstabilized float features of the large inputs underflow: exp(ωᵀx − ‖x‖²/2) < 1e-45,
  // so the rows are all zero and unstabilized float attention is 0/0. Stabilized
  // (queries per_row, keys global), float attention is finite and matches double attention
  // computed with the same particles and inputs within a float tolerance: exponents of size
  // ~‖q‖‖k‖ are rounded to ~eps_float relative.
  // (When queries and keys are both much larger, e.g. both of norm 50, a per-row-stabilized
  // query and the globally stabilized keys can have no feature where both are non-negligible,
  // and φ(q)ᵀΣφ(k) underflows in float even though every feature is finite: that is a range
  // limit of float attention, not of the stabilizer.)
  using FloatMap = typename TestType::Map;
  using DoubleMap = typename TestType::template rebind<double>::Map;
  coulomb::Rng rng = coulomb_test::test_rng(std::string("FloatLargeNorms/") + FloatMap::name());
  struct Config {
    double query_norm;
    double key_norm;
  };
  for (const Index d : {Index{16}, Index{64}}) {
    for (const Config cfg : {Config{30.0, 2.0}, Config{50.0, 2.0}, Config{22.0, 22.0}}) {
      INFO("d = " << d << ", query norm " << cfg.query_norm << ", key norm " << cfg.key_norm);
      const FloatMap fmap = TestType::make(d, kParticles, rng, Draw::orthogonal_chi);
      const DoubleMap dmap(fmap.omega().template cast<double>());
      const Mat<float> Q = coulomb_test::rows_with_norms(8, d, cfg.query_norm, cfg.query_norm, rng)
                               .template cast<float>();
      const Mat<float> K = coulomb_test::rows_with_norms(32, d, cfg.key_norm, cfg.key_norm, rng)
                               .template cast<float>();
      const Mat<float> V = values<float>(32, 3, rng);

      // The stabilizer is needed: without it every entry of the large inputs' rows underflows
      // below the smallest normal float (to 0, or — Eigen's SSE/AVX packet exp clamps its
      // argument at about −88.4 — to a constant ~2.9e-39 that carries no information).
      const float tiny = std::numeric_limits<float>::min();
      const Mat<float> unstab_q = fmap.map(Q);
      CHECK((unstab_q.array() < tiny).all());
      if (cfg.key_norm > 20.0) CHECK((fmap.map(K).array() < tiny).all());

      const Mat<float> out_f =
          attention(fmap.map(Q, Stabilizer::per_row), fmap.map(K, Stabilizer::global), V);
      REQUIRE(out_f.allFinite());
      const Mat<double> Qd = Q.cast<double>();
      const Mat<double> Kd = K.cast<double>();
      const Mat<double> out_d =
          attention(dmap.map(Qd, Stabilizer::per_row), dmap.map(Kd, Stabilizer::global),
                    Mat<double>(V.cast<double>()));
      REQUIRE(out_d.allFinite());
      // The output is a convex combination of the values (in [-1, 1]).
      CHECK(out_d.cwiseAbs().maxCoeff() <= 1.0 + 1e-12);
      const double err = (out_f.cast<double>() - out_d).cwiseAbs().maxCoeff();
      const double allowed = 8.0 * tol<float>::eps * cfg.query_norm * cfg.key_norm;
      INFO("max |float − double| = " << err << ", allowed " << allowed);
      CHECK(err < allowed);
    }
  }
}

}  // namespace features_stability_test
