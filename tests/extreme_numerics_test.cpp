// SPDX-License-Identifier: MIT
// Extreme numerics (issue 6): every feature map, linear attention with every map (causal and
// not, masked), softmax attention, the particle energies and Langevin, the text classifier and
// Phase B, fed inputs with huge norms, zero and all-equal rows, single rows, denormals,
// all-equal or zero particles, single-token, fully padded and long sequences. Each call either
// gives finite results — with the property that such inputs imply (a convex combination of
// the values, the mean of the values for identical keys, zero for padding) — or throws a
// coulomb::error whose message names the offending argument; a NaN is never returned silently.
// The guarantees are listed in docs/numerics.md.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <coulomb/train/phase_b.hpp>

#include "attention_reference.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace extreme_numerics_test {

namespace {

using coulomb::AttentionOptions;
using coulomb::Index;
using coulomb::PaddingMask;
using coulomb::Stabilizer;
using coulomb_test::Mat;
using coulomb_test::Vec;
using namespace coulomb_test::cases;

// ---------------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------------

/// What a call did: completed, or threw a coulomb::error (its message kept).
struct Outcome {
  bool threw = false;
  bool numerical = false;  ///< the exception was a coulomb::numerical_error
  std::string message;
};

/// Runs f. A coulomb::error is an accepted outcome (returned); any other exception fails the
/// test. Not a template, so that the Catch machinery is compiled once.
Outcome run(const std::function<void()>& f) {
  Outcome o;
  try {
    f();
  } catch (const coulomb::numerical_error& e) {
    o.threw = true;
    o.numerical = true;
    o.message = e.what();
  } catch (const coulomb::error& e) {
    o.threw = true;
    o.message = e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a std::exception that is not a coulomb::error: " << e.what());
    o.threw = true;
  }
  return o;
}

/// Whether `message` names the argument `arg` as 'arg'.
bool names(const std::string& message, const std::string& arg) {
  return message.find("'" + arg + "'") != std::string::npos;
}

template <typename S>
bool all_finite(const Mat<S>& m) {
  return m.allFinite();
}

// ---------------------------------------------------------------------------------------------
// Extreme inputs
// ---------------------------------------------------------------------------------------------

/// One extreme input of a feature map and what is promised for it.
template <typename S>
struct Input {
  std::string label;
  Mat<S> X;
  /// The map must complete (finite output, no exception) with every stabilizer. Otherwise it
  /// may instead throw a coulomb::error naming 'X'.
  bool must_complete = true;
  /// ‖x‖² overflows for every row (and XΩᵀ does not): exactly the exponential maps with the
  /// global shift throw; with per-row shifts they give shifts −∞; every other map completes.
  bool squared_norm_overflows = false;
};

/// n rows of norm `norm` in random directions, alternating in sign (row 2i+1 = −row 2i).
template <typename S>
Mat<S> signed_rows(Index n, Index d, double norm, coulomb::Rng& rng) {
  Mat<double> x = coulomb_test::rows_with_norms(n, d, 1.0, 1.0, rng);
  for (Index i = 1; i < n; i += 2) x.row(i) = -x.row(i - 1);
  x *= norm;
  return x.cast<S>();
}

/// The sweep of extreme inputs for scalar S in dimension d.
template <typename S>
std::vector<Input<S>> extreme_inputs(Index d, coulomb::Rng& rng) {
  using limits = std::numeric_limits<S>;
  std::vector<Input<S>> in;
  in.push_back({"zero rows", Mat<S>::Zero(3, d), true, false});
  {
    Mat<S> equal(4, d);
    const Mat<S> row = signed_rows<S>(1, d, 2.0, rng);
    for (Index i = 0; i < 4; ++i) equal.row(i) = row;
    in.push_back({"all-equal rows", equal, true, false});
  }
  in.push_back({"a single row", signed_rows<S>(1, d, 1.5, rng), true, false});
  {
    Mat<S> denormal(2, d);
    for (Index j = 0; j < d; ++j) {
      denormal(0, j) = static_cast<S>(j + 1) * limits::denorm_min() * (j % 2 == 0 ? 1 : -1);
      denormal(1, j) = limits::min() / static_cast<S>(j + 2);
    }
    in.push_back({"denormal entries", denormal, true, false});
  }
  in.push_back({"norm 1e3", signed_rows<S>(4, d, 1e3, rng), true, false});
  in.push_back({"norm 1e6", signed_rows<S>(4, d, 1e6, rng), true, false});
  {
    // Rows of very different norms in one block: the global shift is set by the largest.
    Mat<S> mixed(3, d);
    mixed.row(0).setZero();
    mixed.row(1) = signed_rows<S>(1, d, 1.0, rng);
    mixed.row(2) = signed_rows<S>(1, d, 1e6, rng);
    in.push_back({"mixed norms 0, 1, 1e6", mixed, true, false});
  }
  // ‖x‖²/2 overflows float at norms above ~1.8e19; 1e30 is representable in both types.
  in.push_back({"norm 1e30", signed_rows<S>(2, d, 1e30, rng), std::is_same_v<S, double>,
                std::is_same_v<S, float>});
  if constexpr (std::is_same_v<S, double>) {
    in.push_back(
        {"norm 1e200 (squared norm overflows)", signed_rows<S>(2, d, 1e200, rng), false, true});
  }
  // Entries near the largest finite value: XΩᵀ overflows.
  in.push_back({"entries near the largest finite value", Mat<S>::Constant(2, d, limits::max() / 4),
                false, false});
  return in;
}

// ---------------------------------------------------------------------------------------------
// Feature maps
// ---------------------------------------------------------------------------------------------

/// Forward (every stabilizer) and backward of `map` on X: finite, or a coulomb::error naming the
/// argument when allowed. Returns whether any call threw.
template <typename Map>
bool check_map_on(const Map& map, const Input<typename Map::Scalar>& input) {
  using S = typename Map::Scalar;
  const Mat<S>& X = input.X;
  bool any_threw = false;
  for (const Stabilizer s : {Stabilizer::none, Stabilizer::per_row, Stabilizer::global}) {
    INFO(Map::name() << " on " << input.label << ", stabilizer " << coulomb::to_string(s));
    Mat<S> phi;
    Vec<S> log_scale;
    const Outcome fwd = run([&] { map.map(X, phi, s, log_scale); });
    constexpr bool exp_map = coulomb::feature_map_traits<Map>::is_stabilizable;
    if (input.squared_norm_overflows) {
      CHECK(fwd.threw == (exp_map && s == Stabilizer::global));
      if (exp_map && s == Stabilizer::per_row && !fwd.threw)
        CHECK((log_scale.array() == -std::numeric_limits<S>::infinity()).all());
    }
    if (fwd.threw) {
      // Only inputs whose projections or squared norms overflow, with numerical_error.
      INFO("message: " << fwd.message);
      CHECK(!input.must_complete);
      CHECK(fwd.numerical);
      CHECK(names(fwd.message, "X"));
      any_threw = true;
      continue;
    }
    REQUIRE(phi.rows() == X.rows());
    CHECK(all_finite(phi));
    // A shift may be −∞ (the row's unbiased features all underflow to 0), never NaN or +∞.
    CHECK(!log_scale.array().isNaN().any());
    CHECK((log_scale.array() < std::numeric_limits<S>::infinity()).all());
    if constexpr (coulomb::feature_map_traits<Map>::is_positive) CHECK((phi.array() >= S(0)).all());
    if constexpr (coulomb::feature_map_traits<Map>::is_stabilizable) {
      // With a representable ‖x‖², the shifts make the largest entry c = 1/√D (of each row for
      // per_row, of the block for global), up to the rounding of an exponent of size max|ωᵀx|.
      if (input.must_complete && s != Stabilizer::none && X.rows() > 0) {
        const S c = static_cast<S>(1.0 / std::sqrt(static_cast<double>(map.output_dim())));
        const double z_max =
            (X.template cast<double>() * map.omega().template cast<double>().transpose())
                .cwiseAbs()
                .maxCoeff();
        const double allowed = coulomb_test::tol<S>::tight * (1.0 + z_max);
        if (s == Stabilizer::per_row) {
          for (Index i = 0; i < X.rows(); ++i)
            CHECK(std::abs(static_cast<double>(phi.row(i).maxCoeff() / c) - 1.0) <= allowed);
        } else {
          CHECK(std::abs(static_cast<double>(phi.maxCoeff() / c) - 1.0) <= allowed);
        }
      }
    }

    // Backward with a gradient of mixed signs.
    Mat<S> dphi(phi.rows(), phi.cols());
    for (Index j = 0; j < dphi.cols(); ++j)
      for (Index i = 0; i < dphi.rows(); ++i) dphi(i, j) = S((i + 2 * j) % 3) - S(1);
    Mat<S> dX, dOmega;
    const Outcome bwd = run([&] { map.backward(X, phi, dphi, dX, dOmega); });
    if (bwd.threw) {
      INFO("backward message: " << bwd.message);
      CHECK(!input.must_complete);
      CHECK(bwd.numerical);
      CHECK(names(bwd.message, "X"));
      any_threw = true;
      continue;
    }
    CHECK(all_finite(dX));
    CHECK(all_finite(dOmega));
  }
  return any_threw;
}

}  // namespace

TEMPLATE_PRODUCT_TEST_CASE("Extreme_FeatureMapsFiniteOrClearError", "[extreme][features]",
                           (Rff, RffCosSin, FavorPlus, FavorHyperbolic, PorfExp, PorfSoftplus,
                            PorfRelu, PorfReluEps, SoftmaxFeat, SoftmaxFeatJoint,
                            SoftmaxFeatSeparate),
                           (float, double)) {
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(coulomb_test::label<TestType>("ExtremeMaps/"));
  const Index d = 8;
  const Index m = 16;
  const Map map = TestType::make(d, m, rng);
  for (const auto& input : extreme_inputs<S>(d, rng)) check_map_on(map, input);
}

TEMPLATE_PRODUCT_TEST_CASE("Extreme_FeatureMapsOnEqualOrZeroParticles", "[extreme][features]",
                           (Rff, RffCosSin, FavorPlus, FavorHyperbolic, PorfExp, PorfSoftplus,
                            PorfRelu, PorfReluEps, SoftmaxFeat, SoftmaxFeatJoint,
                            SoftmaxFeatSeparate),
                           (float, double)) {
  // Ω with identical rows (collapsed particles) and Ω = 0: every feature of a row is the
  // same, so the features are finite with equal columns (per group for the two-group maps),
  // for ordinary and huge inputs alike.
  using Map = typename TestType::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(coulomb_test::label<TestType>("ExtremeParticles/"));
  const Index d = 8;
  const Index m = 16;
  Map map = TestType::make(d, m, rng);
  const Mat<S> one = signed_rows<S>(1, d, 1.3, rng);
  Mat<S> equal(m, d);
  for (Index k = 0; k < m; ++k) equal.row(k) = one;
  for (const bool zero : {false, true}) {
    map.set_omega(zero ? Mat<S>(Mat<S>::Zero(m, d)) : equal);
    const std::vector<Input<S>> inputs{
        {"ordinary rows", signed_rows<S>(4, d, 1.0, rng), true, false},
        {"zero rows", Mat<S>::Zero(2, d), true, false},
        {"norm 1e3", signed_rows<S>(2, d, 1e3, rng), true, false},
        {"norm 1e6", signed_rows<S>(2, d, 1e6, rng), true, false}};
    for (const auto& input : inputs) {
      INFO((zero ? "zero" : "all-equal") << " particles, " << input.label);
      CHECK_FALSE(check_map_on(map, input));
      // Equal particles give equal columns in each group of m columns (RFF with phases
      // differs per column through b).
      if constexpr (!Map::has_phases) {
        for (const Stabilizer s : {Stabilizer::none, Stabilizer::per_row}) {
          const Mat<S> phi = map.map(input.X, s);
          const Index groups = phi.cols() / m;
          for (Index g = 0; g < groups; ++g) {
            const auto block = phi.middleCols(g * m, m);
            for (Index k = 1; k < m; ++k)
              CHECK((block.col(k) - block.col(0)).cwiseAbs().maxCoeff() <=
                    S(4) * std::numeric_limits<S>::epsilon() * block.cwiseAbs().maxCoeff());
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Linear and softmax attention
// ---------------------------------------------------------------------------------------------

namespace {

/// One attention scenario: inputs, mask, and what the output must be.
template <typename S>
struct Scenario {
  std::string label;
  Index batch = 1;
  Mat<S> Q, K, V;
  std::optional<PaddingMask> mask;
  /// Every query sees keys that are all identical to each other (zero or all-equal tokens):
  /// its output is the mean of the values it attends to (prefix mean when causal).
  bool identical_keys = false;
  /// The call must complete (no exception).
  bool must_complete = true;
};

/// The mean of the values each query attends to (causal: positions <= i; padded keys left out;
/// zero for padded queries and queries with no key).
template <typename S>
Mat<S> mean_of_values(const Scenario<S>& sc, Index heads, bool causal) {
  const Index L = sc.Q.rows() / sc.batch;
  const Index dv = sc.V.cols() / heads;
  Mat<S> out = Mat<S>::Zero(sc.V.rows(), sc.V.cols());
  for (Index b = 0; b < sc.batch; ++b) {
    for (Index i = 0; i < L; ++i) {
      if (sc.mask && !(*sc.mask)(i, b)) continue;
      Mat<double> sum = Mat<double>::Zero(1, heads * dv);
      Index count = 0;
      for (Index j = 0; j < L; ++j) {
        if ((causal && j > i) || (sc.mask && !(*sc.mask)(j, b))) continue;
        sum += sc.V.row(b * L + j).template cast<double>();
        ++count;
      }
      if (count > 0) out.row(b * L + i) = (sum / static_cast<double>(count)).template cast<S>();
    }
  }
  return out;
}

/// The attention scenarios for scalar S: H heads of width dk, values of width dv.
template <typename S>
std::vector<Scenario<S>> attention_scenarios(Index heads, Index dk, Index dv, coulomb::Rng& rng) {
  std::vector<Scenario<S>> list;
  const Index L = 6;
  const Index B = 2;
  auto values = [&](Index rows) { return coulomb_test::gaussian<S>(rows, heads * dv, rng); };
  auto tokens = [&](Index rows, double norm) {
    return signed_rows<S>(rows, heads * dk, norm, rng);
  };
  {
    Scenario<S> s{"zero queries and keys",
                  B,
                  Mat<S>::Zero(B * L, heads * dk),
                  Mat<S>::Zero(B * L, heads * dk),
                  values(B * L),
                  {},
                  true,
                  true};
    list.push_back(s);
  }
  {
    const Mat<S> row = tokens(1, 2.0);
    Scenario<S> s{"all-equal tokens",
                  B,
                  row.replicate(B * L, 1),
                  row.replicate(B * L, 1),
                  values(B * L),
                  {},
                  true,
                  true};
    list.push_back(s);
  }
  {
    Scenario<S> s{"a single token", 3, tokens(3, 1.0), tokens(3, 1.0), values(3), {}, false, true};
    list.push_back(s);
  }
  {
    // Sequence 1 is all padding (every key padded); sequence 0 has a padded tail.
    Scenario<S> s{"a fully padded sequence",
                  B,
                  tokens(B * L, 1.0),
                  tokens(B * L, 1.0),
                  values(B * L),
                  coulomb_test::make_mask(L, {2, L}),
                  false,
                  true};
    list.push_back(s);
  }
  for (const double norm : {1e3, 1e6}) {
    std::ostringstream name;
    name << "queries and keys of norm " << norm;
    Scenario<S> s{name.str(),
                  B,
                  tokens(B * L, norm),
                  tokens(B * L, norm),
                  values(B * L),
                  coulomb_test::make_mask(L, {0, 1}),
                  false,
                  true};
    list.push_back(s);
  }
  {
    // Huge queries against ordinary keys and the reverse, in one long sequence whose later
    // blocks bring larger shifts (blocks of 64 causal, 256 non-causal: L = 300 spans both).
    const Index long_L = 300;
    Mat<S> Q = tokens(long_L, 1.0);
    Mat<S> K = tokens(long_L, 1.0);
    for (Index i = 0; i < long_L; ++i) {
      const double f = std::pow(10.0, 6.0 * static_cast<double>(i) / long_L);
      Q.row(i) *= static_cast<S>(f);
      K.row(long_L - 1 - i) *= static_cast<S>(f);
    }
    // In float, causal backward can meet a denominator just above the guard's threshold whose
    // inverse overflows: it then throws (docs/numerics.md, "Known limits").
    Scenario<S> s{"a long sequence, norms 1 to 1e6", 1, Q, K, values(long_L), {}, false,
                  std::is_same_v<S, double>};
    list.push_back(s);
  }
  {
    Scenario<S> s{"queries and keys of norm 1e30",
                  B,
                  tokens(B * L, 1e30),
                  tokens(B * L, 1e30),
                  values(B * L),
                  {},
                  false,
                  std::is_same_v<S, double>};
    list.push_back(s);
  }
  {
    using limits = std::numeric_limits<S>;
    Scenario<S> s{"entries near the largest finite value",
                  1,
                  Mat<S>::Constant(L, heads * dk, limits::max() / 4),
                  Mat<S>::Constant(L, heads * dk, -limits::max() / 4),
                  values(L),
                  {},
                  false,
                  false};
    list.push_back(s);
  }
  return list;
}

/// Forward and backward of `attn` (LinearAttention or SoftmaxAttention) on a scenario: finite
/// with the scenario's properties, or (where allowed) a coulomb::error naming an argument.
template <typename Attention, typename S>
void check_attention_on(const Attention& attn, const Scenario<S>& sc, bool positive_weights,
                        bool zero_features_at_zero, bool features_may_vanish = false) {
  const bool causal = attn.options().causal;
  const Index heads = attn.num_heads();
  INFO(sc.label << (causal ? ", causal" : ", non-causal") << (sc.mask ? ", masked" : ""));
  typename Attention::Workspace ws;
  Mat<S> out;
  const Outcome fwd = run([&] {
    if (sc.mask)
      attn.forward(sc.Q, sc.K, sc.V, *sc.mask, out, ws);
    else
      attn.forward(sc.Q, sc.K, sc.V, out, ws, sc.batch);
  });
  if (fwd.threw) {
    INFO("message: " << fwd.message);
    CHECK(!sc.must_complete);
    CHECK(fwd.numerical);
    CHECK((names(fwd.message, "Q") || names(fwd.message, "K") || names(fwd.message, "X")));
    return;
  }
  REQUIRE(out.rows() == sc.V.rows());
  CHECK(all_finite(out));
  const Index L = sc.Q.rows() / sc.batch;
  const Index dv = sc.V.cols() / heads;
  const S eps = std::numeric_limits<S>::epsilon();
  // Padded queries give zero outputs.
  if (sc.mask) {
    for (Index b = 0; b < sc.batch; ++b)
      for (Index i = 0; i < L; ++i)
        if (!(*sc.mask)(i, b)) CHECK(out.row(b * L + i).isZero(0));
  }
  if (sc.identical_keys) {
    // Every kernel value a query sees is the same: the mean of the values (or 0 when the
    // features of the tokens vanish and the zero-denominator guard applies).
    const Mat<S> expected = zero_features_at_zero ? Mat<S>::Zero(out.rows(), out.cols())
                                                  : mean_of_values(sc, heads, causal);
    CHECK((out - expected).cwiseAbs().maxCoeff() <=
          S(64) * eps * (S(1) + sc.V.cwiseAbs().maxCoeff()));
  } else if (positive_weights) {
    // A convex combination of the values a query attends to (or 0): within the range of
    // all values, per column.
    const Vec<S> lo = sc.V.colwise().minCoeff().transpose();
    const Vec<S> hi = sc.V.colwise().maxCoeff().transpose();
    const S slack = S(64) * eps * (S(1) + sc.V.cwiseAbs().maxCoeff());
    for (Index c = 0; c < out.cols(); ++c) {
      CHECK(out.col(c).minCoeff() >= std::min(lo(c), S(0)) - slack);
      CHECK(out.col(c).maxCoeff() <= std::max(hi(c), S(0)) + slack);
    }
  }
  if (sc.batch == sc.Q.rows() && !zero_features_at_zero && positive_weights) {
    // Single tokens: each output is its own value, or 0 when φ(q)ᵀφ(k) = 0 (PORF-relu with
    // ε = 0 and q or k in the negative cone of Ω: the zero-denominator guard).
    const S slack = S(64) * eps * (S(1) + sc.V.cwiseAbs().maxCoeff());
    for (Index i = 0; i < out.rows(); ++i) {
      for (Index h = 0; h < heads; ++h) {
        INFO("token " << i << ", head " << h);
        const auto o = out.row(i).segment(h * dv, dv);
        const bool own = (o - sc.V.row(i).segment(h * dv, dv)).cwiseAbs().maxCoeff() <= slack;
        CHECK((own || (features_may_vanish && o.isZero(0))));
      }
    }
  }

  // Backward with dOut of mixed signs.
  Mat<S> dout(out.rows(), out.cols());
  for (Index j = 0; j < dout.cols(); ++j)
    for (Index i = 0; i < dout.rows(); ++i) dout(i, j) = S((2 * i + j) % 5) - S(2);
  coulomb::AttentionGradients<S> g;
  const Outcome bwd = run([&] {
    if (sc.mask)
      attn.backward(sc.Q, sc.K, sc.V, *sc.mask, out, dout, g, ws);
    else
      attn.backward(sc.Q, sc.K, sc.V, out, dout, g, ws, sc.batch);
  });
  if (bwd.threw) {
    INFO("backward message: " << bwd.message);
    CHECK(!sc.must_complete);
    CHECK(bwd.numerical);
    CHECK((names(bwd.message, "Q") || names(bwd.message, "X")));
    return;
  }
  CHECK(all_finite(g.dQ));
  CHECK(all_finite(g.dK));
  CHECK(all_finite(g.dV));
  for (const auto& d : g.dOmega) CHECK(all_finite(d));
  if (sc.mask) {
    for (Index b = 0; b < sc.batch; ++b) {
      for (Index i = 0; i < L; ++i) {
        if ((*sc.mask)(i, b)) continue;
        CHECK(g.dQ.row(b * L + i).isZero(0));
        CHECK(g.dK.row(b * L + i).isZero(0));
        CHECK(g.dV.row(b * L + i).isZero(0));
      }
    }
  }
}

template <typename Case>
void sweep_linear_attention() {
  using Map = typename Case::Map;
  using S = typename Map::Scalar;
  coulomb::Rng rng = coulomb_test::test_rng(coulomb_test::label<Case>("ExtremeLinear/"));
  const Index heads = 2, dk = 4, dv = 3, m = 8;
  const Map map = Case::make(dk, m, rng);
  // PORF-relu without a floor has φ(0) = 0: zero tokens give zero denominators.
  constexpr bool zero_at_zero = std::is_same_v<Case, PorfRelu<S>>;
  for (const auto& sc : attention_scenarios<S>(heads, dk, dv, rng)) {
    for (const bool causal : {false, true}) {
      AttentionOptions opt;
      opt.num_heads = heads;
      opt.causal = causal;
      opt.num_threads = 1;
      const coulomb::LinearAttention<Map> attn(map, opt);
      check_attention_on(attn, sc, coulomb::feature_map_traits<Map>::is_positive,
                         zero_at_zero && sc.label == "zero queries and keys", zero_at_zero);
    }
  }
}

}  // namespace

TEMPLATE_PRODUCT_TEST_CASE("Extreme_LinearAttentionFiniteOrClearError", "[extreme][attention]",
                           (Rff, RffCosSin, FavorPlus, FavorHyperbolic, PorfExp, PorfSoftplus,
                            PorfRelu, PorfReluEps, SoftmaxFeat, SoftmaxFeatJoint,
                            SoftmaxFeatSeparate),
                           (double)) {
  sweep_linear_attention<TestType>();
}

TEMPLATE_PRODUCT_TEST_CASE("Extreme_LinearAttentionFloat", "[extreme][attention][float]",
                           (Rff, FavorPlus, FavorHyperbolic, PorfSoftplus, PorfReluEps,
                            SoftmaxFeat),
                           (float)) {
  sweep_linear_attention<TestType>();
}

TEMPLATE_TEST_CASE("Extreme_SoftmaxAttentionFiniteOrClearError", "[extreme][attention]", float,
                   double) {
  using S = TestType;
  coulomb::Rng rng = coulomb_test::test_rng("ExtremeSoftmax");
  const Index heads = 2, dk = 4, dv = 3;
  for (const auto& sc : attention_scenarios<S>(heads, dk, dv, rng)) {
    for (const bool causal : {false, true}) {
      AttentionOptions opt;
      opt.num_heads = heads;
      opt.causal = causal;
      opt.num_threads = 1;
      const coulomb::SoftmaxAttention<S> attn(opt);
      check_attention_on(attn, sc, true, false);
    }
  }
}

TEST_CASE("Extreme_ZeroDenominatorGuardOnAllZeroFeatures", "[extreme][attention]") {
  // PORF-relu without a floor maps every key in the negative cone of Ω to φ = 0. With keys
  // −x for x in the positive cone of every ω (Ω with equal rows ω, keys −ω), every key's
  // features vanish: every denominator is exactly 0 and the guard gives zero outputs and
  // zero gradients, causal or not, for ordinary and huge queries.
  coulomb::Rng rng = coulomb_test::test_rng("ExtremeZeroDenominator");
  const Index dk = 4, m = 8, L = 7;
  Mat<double> omega(m, dk);
  const Mat<double> w = signed_rows<double>(1, dk, 1.0, rng);
  for (Index k = 0; k < m; ++k) omega.row(k) = w;
  const coulomb::PorfRelu<double> relu(omega);
  const Mat<double> K = (-w).replicate(L, 1);
  const Mat<double> V = coulomb_test::gaussian(L, 2, rng);
  for (const double qnorm : {1.0, 1e6}) {
    const Mat<double> Q = signed_rows<double>(L, dk, qnorm, rng);
    for (const bool causal : {false, true}) {
      INFO("query norm " << qnorm << (causal ? ", causal" : ", non-causal"));
      AttentionOptions opt;
      opt.causal = causal;
      const coulomb::LinearAttention<coulomb::PorfRelu<double>> attn(relu, opt);
      coulomb::LinearAttention<coulomb::PorfRelu<double>>::Workspace ws;
      Mat<double> out;
      attn.forward(Q, K, V, out, ws);
      CHECK(out.isZero(0));
      coulomb::AttentionGradients<double> g;
      attn.backward(Q, K, V, out, Mat<double>::Ones(L, 2), g, ws);
      CHECK(g.dQ.isZero(0));
      CHECK(g.dK.isZero(0));
      CHECK(g.dV.isZero(0));
      REQUIRE(g.dOmega.size() == 1);
      CHECK(g.dOmega[0].isZero(0));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The particle model
// ---------------------------------------------------------------------------------------------

TEMPLATE_TEST_CASE("Extreme_RieszEnergyOfCoincidentParticles", "[extreme][particles]", float,
                   double) {
  // Coincident particles sit at the singularity of the Riesz kernel: the softening ε keeps
  // W finite as long as ε^{−s} is representable; the gradient of coincident particles is 0 by
  // symmetry. Where ε^{−s} overflows, the energy reports it (a coulomb::error or +∞, which
  // Langevin turns into a numerical_error), never a NaN.
  using S = TestType;
  coulomb::Rng rng = coulomb_test::test_rng("ExtremeRiesz");
  const Index N = 6;
  for (const Index D : {Index{4}, Index{16}, Index{64}}) {
    const Mat<S> one = signed_rows<S>(1, D, 0.7, rng);
    const Mat<S> equal = one.replicate(N, 1);
    const Mat<S> zero = Mat<S>::Zero(N, D);
    for (const Mat<S>* omega : {&equal, &zero}) {
      const coulomb::RieszEnergy<S> riesz{};
      Mat<S> grad;
      S value = 0;
      const Outcome o = run([&] { value = riesz.evaluate_with_gradient(*omega, grad); });
      INFO("D = " << D << (omega == &zero ? ", zero particles" : ", equal particles") << ", energy "
                  << value << ", message " << o.message);
      const double s = static_cast<double>(D - 2);
      const double exact = static_cast<double>(N - 1) / N * std::pow(1e-3, -s);
      if (exact < 0.5 * static_cast<double>(std::numeric_limits<S>::max())) {
        REQUIRE_FALSE(o.threw);
        // The squared distances come from the Gram matrix, ‖ω_k‖² + ‖ω_l‖² − 2ω_kᵀω_l, whose
        // cancellation leaves an absolute error of a few eps·‖ω‖² (0 for Ω = 0); against
        // ε² = 1e-6 that is a relative error of f = t^{−s/2} of about (s/2)·4·eps·‖ω‖²/ε²:
        // ~20% in float, ~1e-9 in double.
        const double sq = static_cast<double>(omega->row(0).squaredNorm());
        const double gram_error = 4.0 * coulomb_test::tol<S>::eps * sq / 1e-6;
        CHECK(std::abs(static_cast<double>(value) - exact) <=
              (1e-3 + 0.5 * s * gram_error) * exact);
        CHECK(all_finite(grad));
      } else {
        // ε^{−s} overflows: a numerical_error naming the particles.
        CHECK(o.threw);
        CHECK(o.numerical);
        CHECK(names(o.message, "omega"));
      }
    }
  }
}

TEST_CASE("Extreme_LangevinStopsWhenTheRepulsionOverflows", "[extreme][particles]") {
  // float particles in dimension 16 (Coulomb s = 14) that coincide: ε^{−s} = 1e42 overflows
  // float. Langevin stops at step 0 with a numerical_error naming the step, and the particles
  // are the ones it started from.
  coulomb::Rng rng = coulomb_test::test_rng("ExtremeLangevinRiesz");
  const Index N = 5, D = 16;
  const Mat<float> start = signed_rows<float>(1, D, 0.5, rng).replicate(N, 1);
  coulomb::RieszEnergy<float> riesz{};
  coulomb::LangevinOptions lo;
  lo.max_iterations = 5;
  coulomb::ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep> langevin(lo);
  Mat<float> particles = start;
  const Outcome o = run([&] { langevin.optimize(riesz, particles); });
  INFO("message: " << o.message);
  REQUIRE(o.threw);
  CHECK(o.numerical);
  CHECK(o.message.find("step 0") != std::string::npos);
  CHECK(names(o.message, "omega"));
  CHECK(particles == start);
}

TEST_CASE("Extreme_HamiltonianAndLangevinOnDegenerateInputs", "[extreme][particles]") {
  // The Hamiltonian (alignment + Riesz) with all-equal particles, zero representations and
  // representations of huge norm, and Langevin from all-equal particles: finite energies and
  // particles, or Langevin's numerical_error naming the step with finite particles.
  coulomb::Rng rng = coulomb_test::test_rng("ExtremeHamiltonian");
  const Index d = 8, m = 12, n = 20;
  Mat<double> labels(n, 1);
  for (Index i = 0; i < n; ++i) labels(i, 0) = i % 2;
  const Mat<double> Y = coulomb::binary_targets<double>(labels);
  const Mat<double> one = signed_rows<double>(1, d, 0.5, rng);
  const Mat<double> equal = one.replicate(m, 1);
  const std::vector<std::pair<std::string, Mat<double>>> reps{
      {"zero representations", Mat<double>::Zero(n, d)},
      {"ordinary representations", signed_rows<double>(n, d, 1.0, rng)},
      {"representations of norm 1e3", signed_rows<double>(n, d, 1e3, rng)},
      {"representations of norm 1e30", signed_rows<double>(n, d, 1e30, rng)}};
  for (const auto& [label, X] : reps) {
    INFO(label);
    coulomb::AlignmentEnergy<coulomb::FavorPlus<double>> alignment(
        coulomb::FavorPlus<double>(d, m, rng), X, Y);
    coulomb::Hamiltonian<coulomb::AlignmentEnergy<coulomb::FavorPlus<double>>> h(alignment, 0.1);
    Mat<double> grad;
    const double value = h.evaluate_with_gradient(equal, grad);
    CHECK(std::isfinite(value));
    CHECK(grad.allFinite());
    // Langevin from the collapsed particles.
    coulomb::LangevinOptions lo;
    lo.max_iterations = 20;
    lo.beta = 1e4;
    lo.seed = 3;
    coulomb::ProjectedLangevin<coulomb::BallProjection, coulomb::ConstantStep> langevin(
        lo, coulomb::BallProjection{5.0}, coulomb::ConstantStep{1e-3});
    Mat<double> particles = equal;
    const Outcome o = run([&] { langevin.optimize(h, particles); });
    INFO("message: " << o.message);
    if (o.threw) CHECK(o.message.find("step") != std::string::npos);
    CHECK(particles.allFinite());
  }
}

// ---------------------------------------------------------------------------------------------
// The text classifier and Phase B
// ---------------------------------------------------------------------------------------------

namespace {

using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<float>>;

coulomb::nn::TextClassifierConfig tiny_config(coulomb::nn::AttentionKind kind) {
  coulomb::nn::TextClassifierConfig c;
  c.vocab_size = 16;
  c.max_length = 48;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 16;
  c.num_layers = 1;
  c.num_classes = 2;
  c.dropout = 0.1;
  c.attention = kind;
  c.num_features = 8;
  c.num_threads = 1;
  return c;
}

/// A batch of B sequences of the given lengths padded to L, every token `id` (or ids cycling
/// through [4, vocab) when id < 0).
coulomb::TokenBatch batch_of(const std::vector<Index>& lengths, Index L, int id, Index vocab) {
  coulomb::TokenBatch batch;
  const auto B = static_cast<Index>(lengths.size());
  batch.ids.setZero(L, B);
  batch.segments.setZero(L, B);
  batch.mask.setConstant(L, B, false);
  for (Index b = 0; b < B; ++b) {
    const Index n = lengths[static_cast<std::size_t>(b)];
    for (Index t = 0; t < n; ++t) {
      batch.ids(t, b) =
          static_cast<coulomb::TokenId>(id >= 0 ? id : 4 + (t * 7 + b * 3) % (vocab - 4));
      batch.mask(t, b) = true;
    }
    batch.labels.push_back(static_cast<int>(b % 2));
    batch.indices.push_back(b);
    batch.lengths.push_back(n);
  }
  return batch;
}

}  // namespace

TEST_CASE("Extreme_TextClassifierOnEdgeBatches", "[extreme][nn]") {
  // Single-token batches, batches at max_length, sequences of only unknown tokens and of one
  // repeated token: finite logits, loss and gradients, with linear and softmax attention, in
  // training (dropout) and evaluation mode.
  const Index V = 16;
  const Index max_len = 48;
  const std::vector<std::pair<std::string, coulomb::TokenBatch>> batches{
      {"single tokens", batch_of({1, 1, 1}, 1, -1, V)},
      {"max_length", batch_of({max_len, max_len}, max_len, -1, V)},
      {"max_length and one token", batch_of({max_len, 1}, max_len, -1, V)},
      {"only unknown tokens", batch_of({5, 3}, 5, coulomb::Vocabulary::unk_id, V)},
      {"one repeated token", batch_of({max_len, 7}, max_len, 9, V)}};
  for (const auto kind :
       {coulomb::nn::AttentionKind::linear, coulomb::nn::AttentionKind::softmax}) {
    Model model(tiny_config(kind), 11);
    for (const auto& [label, batch] : batches) {
      for (const bool training : {true, false}) {
        INFO(label << (kind == coulomb::nn::AttentionKind::linear ? ", linear" : ", softmax")
                   << (training ? ", training" : ", evaluation"));
        Mat<float> logits, dlogits;
        coulomb::Rng dropout_rng(5);
        model.forward(batch, logits, training, dropout_rng);
        REQUIRE(logits.rows() == batch.size());
        CHECK(logits.allFinite());
        const float loss =
            coulomb::nn::softmax_cross_entropy(logits, std::span<const int>(batch.labels), dlogits);
        CHECK(std::isfinite(loss));
        model.zero_grad();
        model.backward(dlogits);
        CHECK_NOTHROW(coulomb::train::require_finite_parameters(model.parameters(), 0));
      }
    }
  }
}

namespace {

coulomb::EncodedDataset small_dataset(Index n, coulomb::Rng& rng) {
  coulomb::EncodedDataset data;
  std::vector<coulomb::TokenId> ids;
  std::vector<std::uint8_t> segments;
  for (Index i = 0; i < n; ++i) {
    const auto length = static_cast<std::size_t>(1 + coulomb::uniform_index(6, rng));
    ids.resize(length);
    for (auto& id : ids) id = static_cast<coulomb::TokenId>(4 + coulomb::uniform_index(12, rng));
    segments.assign(length, 0);
    data.push_back(ids, segments, static_cast<int>(i % 2));
  }
  return data;
}

/// A clock for the progress reporter that runs `hook(step)` at each update: the reporter reads
/// the clock once at construction and once per update, i.e. after each Phase B step.
struct HookClock {
  std::function<void(Index)>* hook;
  Index* calls;
  double operator()() const {
    if (*calls > 0) (*hook)(*calls);
    ++*calls;
    return static_cast<double>(*calls);
  }
};

}  // namespace

TEST_CASE("Extreme_PhaseBStopsAtAnInjectedNaN", "[extreme][train]") {
  // A NaN written into a parameter after step k stops training at step k + 1 with a
  // numerical_error naming the step and the parameter; that step changes nothing, so every
  // other parameter keeps its value after step k (the last finite state).
  coulomb::Rng rng = coulomb_test::test_rng("ExtremePhaseB");
  const coulomb::EncodedDataset train = small_dataset(48, rng);
  const coulomb::EncodedDataset valid;
  const Index inject_after = 3;
  for (const std::string& target : {std::string("classifier.weight"), std::string("embedding")}) {
    Model model(tiny_config(coulomb::nn::AttentionKind::linear), 2);
    const auto params = model.parameters();
    std::size_t victim = params.size();
    for (std::size_t k = 0; k < params.size(); ++k)
      if (params[k].name.find(target) != std::string::npos && victim == params.size()) victim = k;
    REQUIRE(victim < params.size());
    const std::string victim_name = params[victim].name;
    INFO("NaN injected into " << victim_name);
    std::vector<Mat<float>> snapshot;
    std::function<void(Index)> hook = [&](Index step) {
      if (step != inject_after) return;
      (*params[victim].value)(0, 0) = std::numeric_limits<float>::quiet_NaN();
      snapshot.clear();
      for (const auto& p : params) snapshot.push_back(*p.value);
    };
    Index calls = 0;
    std::ostringstream sink;
    coulomb::train::ProgressOptions po;
    po.mode = coulomb::train::ProgressMode::off;
    coulomb::train::ProgressReporter progress(sink, 0, po, HookClock{&hook, &calls});
    coulomb::train::PhaseBOptions options;
    options.epochs = 2;
    options.batch_size = 8;
    options.schedule.learning_rate = 1e-2;
    options.progress = &progress;
    options.seed = 4;
    const Outcome o = run([&] { coulomb::train::run_phase_b(model, train, valid, options); });
    INFO("message: " << o.message);
    REQUIRE(o.threw);
    CHECK(o.message.find("step " + std::to_string(inject_after + 1)) != std::string::npos);
    CHECK(names(o.message, victim_name));
    REQUIRE(snapshot.size() == params.size());
    for (std::size_t k = 0; k < params.size(); ++k) {
      INFO("parameter " << params[k].name);
      if (k == victim) continue;
      CHECK(params[k].value->allFinite());
      CHECK(*params[k].value == snapshot[k]);
    }
  }
}

TEST_CASE("Extreme_PhaseBWithAHugeEmbeddingNeverSavesNaN", "[extreme][train]") {
  // A huge but finite value written into an embedding during training (1e30, whose square
  // overflows float in the layer norm): training either absorbs it with finite parameters or
  // stops with a numerical_error naming the step; it never ends with a non-finite parameter.
  coulomb::Rng rng = coulomb_test::test_rng("ExtremePhaseBHuge");
  const coulomb::EncodedDataset train = small_dataset(48, rng);
  const coulomb::EncodedDataset valid = small_dataset(8, rng);
  Model model(tiny_config(coulomb::nn::AttentionKind::linear), 2);
  const auto params = model.parameters();
  std::function<void(Index)> hook = [&](Index step) {
    if (step != 2) return;
    for (const auto& p : params)
      if (p.name.find("embedding") != std::string::npos) {
        p.value->row(5).setConstant(1e30f);
        break;
      }
  };
  Index calls = 0;
  std::ostringstream sink;
  coulomb::train::ProgressOptions po;
  po.mode = coulomb::train::ProgressMode::off;
  coulomb::train::ProgressReporter progress(sink, 0, po, HookClock{&hook, &calls});
  coulomb::train::PhaseBOptions options;
  options.epochs = 2;
  options.batch_size = 8;
  options.progress = &progress;
  const Outcome o = run([&] { coulomb::train::run_phase_b(model, train, valid, options); });
  INFO("message: " << o.message);
  if (o.threw) {
    CHECK(o.message.find("step ") != std::string::npos);
  } else {
    for (const auto& p : params) {
      INFO("parameter " << p.name);
      CHECK(p.value->allFinite());
    }
  }
}

// detail::all_finite, which every input and output check uses, on matrices and on blocks with
// an outer stride: finite entries as large as the type allows (and −0) pass; one NaN, +∞ or −∞
// fails wherever it sits (the unrolled packets, a single packet, the scalar tail of a column;
// the first and the last column).
TEMPLATE_TEST_CASE("Extreme_AllFiniteFindsEveryNonFiniteEntry", "[extreme][check]", float, double) {
  using S = TestType;
  using Lim = std::numeric_limits<S>;
  for (const Index rows : {Index(1), Index(7), Index(16), Index(37), Index(70)}) {
    Mat<S> m(rows + 3, 5);
    for (Index j = 0; j < m.cols(); ++j)
      for (Index i = 0; i < m.rows(); ++i)
        m(i, j) = (i + j) % 3 == 0 ? Lim::max() : ((i + j) % 3 == 1 ? -S(0) : -Lim::max());
    const auto block = m.block(1, 0, rows, m.cols());  // outer stride rows + 3
    CHECK(coulomb::detail::all_finite(m));
    CHECK(coulomb::detail::all_finite(block));
    for (const S bad : {Lim::quiet_NaN(), Lim::infinity(), -Lim::infinity()}) {
      Index missed = 0;
      for (Index j : {Index(0), Index(2), Index(4)}) {
        for (Index i = 0; i < rows; ++i) {
          Mat<S> copy = m;
          copy(1 + i, j) = bad;
          const auto view = copy.block(1, 0, rows, copy.cols());
          missed += coulomb::detail::all_finite(view) ? 1 : 0;
          missed += coulomb::detail::all_finite(copy) ? 1 : 0;
        }
      }
      INFO("rows " << rows << " bad " << bad);
      CHECK(missed == 0);
    }
  }
}

}  // namespace extreme_numerics_test
