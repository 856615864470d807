// SPDX-License-Identifier: MIT
// Linear attention: the blocked forward against the explicit quadratic product (non-causal and
// causal, masked, multi-head, batched, any block size and number of parts), convergence to
// softmax attention as m grows, the causal prefix and 1/t properties, the recurrent step,
// the stabilizer at large norms, the zero-denominator guard, workspace reuse and bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "attention_reference.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace attention_linear_test {

namespace {

using coulomb::AttentionOptions;
using coulomb::Index;
using coulomb::LinearAttention;
using coulomb::PaddingMask;
using coulomb_test::Mat;
using coulomb_test::tol;

struct Problem {
  Index batch, length, heads, dk, dv;
  Mat<double> Q, K, V;
};

Problem make_problem(Index batch, Index length, Index heads, Index dk, Index dv, coulomb::Rng& rng,
                     double norm = 1.0) {
  Problem p{batch, length, heads, dk, dv, {}, {}, {}};
  p.Q = norm * coulomb_test::gaussian(batch * length, heads * dk, rng);
  p.K = norm * coulomb_test::gaussian(batch * length, heads * dk, rng);
  p.V = coulomb_test::gaussian(batch * length, heads * dv, rng);
  return p;
}

/// The blocked forward equals the quadratic reference for every block size and part count.
template <typename Map>
void check_against_quadratic(const std::vector<Map>& maps, const Problem& p, bool causal,
                             const PaddingMask* mask) {
  const double scale = std::pow(static_cast<double>(p.dk), -0.25);
  const Mat<double> ref = coulomb_test::quadratic_linear_attention(maps, p.Q, p.K, p.V, p.batch,
                                                                   p.heads, causal, mask, scale);
  REQUIRE(ref.allFinite());
  typename LinearAttention<Map>::Workspace ws;  // reused across shapes and options on purpose
  for (const Index block : {Index(1), Index(4), Index(64)}) {
    for (const Index parts : {Index(1), Index(2), Index(3)}) {
      AttentionOptions opt;
      opt.num_heads = p.heads;
      opt.causal = causal;
      opt.block_size = block;
      opt.sequence_parts = parts;
      const LinearAttention<Map> attn(maps, opt);
      Mat<double> out;
      if (mask)
        attn.forward(p.Q, p.K, p.V, *mask, out, ws);
      else
        attn.forward(p.Q, p.K, p.V, out, ws, p.batch);
      INFO(Map::name() << " block " << block << " parts " << parts << " causal " << causal
                       << " mask " << (mask != nullptr));
      CHECK(coulomb_test::rel_diff(out, ref) < tol<double>::loose);
    }
  }
}

}  // namespace

TEST_CASE("LinearAttention_MatchesQuadraticReference", "[attention][linear]") {
  auto rng = coulomb_test::test_rng("LinearAttention_MatchesQuadraticReference");
  const Problem p = make_problem(2, 13, 2, 4, 3, rng);
  const PaddingMask mask = coulomb_test::make_mask(p.length, {3, 0}, 5);
  const std::vector<coulomb::FavorPlus<double>> favor{coulomb::FavorPlus<double>(4, 16, rng),
                                                      coulomb::FavorPlus<double>(4, 16, rng)};
  const std::vector<coulomb::PorfSoftplus<double>> softplus{
      coulomb::PorfSoftplus<double>(4, 16, rng)};
  const std::vector<coulomb::SoftmaxFeat<double>> softmax_feat{
      coulomb::SoftmaxFeat<double>(4, 8, rng), coulomb::SoftmaxFeat<double>(4, 8, rng)};
  for (const bool causal : {false, true}) {
    for (const PaddingMask* m : {static_cast<const PaddingMask*>(nullptr), &mask}) {
      check_against_quadratic(favor, p, causal, m);
      check_against_quadratic(softplus, p, causal, m);
      check_against_quadratic(softmax_feat, p, causal, m);
    }
  }
}

TEST_CASE("LinearAttention_ApproachesSoftmaxAttentionAsMGrows", "[attention][linear][kernel]") {
  auto rng = coulomb_test::test_rng("LinearAttention_ApproachesSoftmaxAttentionAsMGrows");
  const Index L = 24, d = 8, draws = 6;
  // Inputs of norm about 0.6 after the d^{-1/4} scaling: the FAVOR+ variance, which grows
  // like e^{‖x + y‖²}, stays moderate.
  const Problem p = make_problem(1, L, 1, d, 4, rng, 0.35);
  AttentionOptions opt;
  const coulomb::SoftmaxAttention<double> exact(opt);
  const Mat<double> ref = exact.forward(p.Q, p.K, p.V);
  std::vector<double> mean_error;
  for (const Index m : {Index(16), Index(64), Index(256), Index(1024)}) {
    double sum = 0;
    for (Index r = 0; r < draws; ++r) {
      const LinearAttention<coulomb::FavorPlus<double>> attn(coulomb::FavorPlus<double>(d, m, rng),
                                                             opt);
      sum += coulomb_test::rel_diff(attn.forward(p.Q, p.K, p.V), ref);
    }
    mean_error.push_back(sum / static_cast<double>(draws));
  }
  INFO("mean relative errors for m = 16, 64, 256, 1024: "
       << mean_error[0] << ", " << mean_error[1] << ", " << mean_error[2] << ", " << mean_error[3]);
  for (std::size_t i = 1; i < mean_error.size(); ++i) CHECK(mean_error[i] < mean_error[i - 1]);
  // The Monte Carlo error falls like 1/√m: a factor 8 from m = 16 to 1024; ask for 4.
  CHECK(mean_error.back() < mean_error.front() / 4);
}

TEST_CASE("LinearAttention_CausalOutputEqualsNonCausalOnPrefix", "[attention][linear][causal]") {
  auto rng = coulomb_test::test_rng("LinearAttention_CausalOutputEqualsNonCausalOnPrefix");
  const Problem p = make_problem(1, 17, 2, 4, 3, rng);
  const coulomb::FavorPlus<double> fm(4, 32, rng);
  AttentionOptions opt;
  opt.num_heads = 2;
  opt.block_size = 5;
  AttentionOptions causal_opt = opt;
  causal_opt.causal = true;
  const LinearAttention<coulomb::FavorPlus<double>> causal(fm, causal_opt);
  const LinearAttention<coulomb::FavorPlus<double>> full(fm, opt);
  const Mat<double> out = causal.forward(p.Q, p.K, p.V);
  for (const Index i : {Index(0), Index(4), Index(5), Index(9), Index(16)}) {
    const Mat<double> prefix =
        full.forward(p.Q.topRows(i + 1), p.K.topRows(i + 1), p.V.topRows(i + 1));
    INFO("position " << i);
    CHECK(coulomb_test::rel_diff(out.row(i), prefix.row(i)) < tol<double>::loose);
  }
}

namespace {

/// q = k constant, v one-hot on the first token: the causal output at position t is 1/t.
template <typename Map>
void check_one_over_t(const Map& fm) {
  const Index L = 11, d = fm.input_dim();
  coulomb::Rng rng(7);
  using S = typename Map::Scalar;
  Mat<S> Q(L, d), K(L, d), V = Mat<S>::Zero(L, 2);
  const Mat<S> row = coulomb_test::gaussian<S>(1, d, rng);
  for (Index i = 0; i < L; ++i) {
    Q.row(i) = row;
    K.row(i) = row;
  }
  V(0, 0) = 1;
  AttentionOptions opt;
  opt.causal = true;
  opt.block_size = 4;
  const LinearAttention<Map> attn(fm, opt);
  const Mat<S> out = attn.forward(Q, K, V);
  for (Index t = 1; t <= L; ++t) {
    INFO(Map::name() << " t = " << t << " out = " << out(t - 1, 0));
    CHECK(std::abs(static_cast<double>(out(t - 1, 0)) * t - 1.0) < tol<S>::tight);
    CHECK(out(t - 1, 1) == 0);
  }
}

}  // namespace

TEST_CASE("LinearAttention_CausalOutputIsOneOverT", "[attention][linear][causal]") {
  auto rng = coulomb_test::test_rng("LinearAttention_CausalOutputIsOneOverT");
  check_one_over_t(coulomb::FavorPlus<double>(4, 16, rng));
  check_one_over_t(coulomb::PorfSoftplus<double>(4, 16, rng));
  check_one_over_t(coulomb::SoftmaxFeat<double>(4, 16, rng));
  check_one_over_t(coulomb::RffCosSin<double>(4, 16, rng));
  check_one_over_t(coulomb::FavorPlus<float>(4, 16, rng));
}

TEST_CASE("LinearAttention_RecurrentStepMatchesBatchCausal", "[attention][linear][causal]") {
  auto rng = coulomb_test::test_rng("LinearAttention_RecurrentStepMatchesBatchCausal");
  const Problem p = make_problem(2, 12, 2, 4, 3, rng, 2.0);  // larger norms: shifts differ
  const PaddingMask mask = coulomb_test::make_mask(p.length, {0, 4}, 6);
  using Map = coulomb::FavorPlus<double>;
  AttentionOptions opt;
  opt.num_heads = 2;
  opt.causal = true;
  opt.block_size = 5;
  const LinearAttention<Map> attn(std::vector<Map>{Map(4, 16, rng), Map(4, 16, rng)}, opt);
  for (const bool masked : {false, true}) {
    Mat<double> batch_out;
    LinearAttention<Map>::Workspace ws;
    if (masked)
      attn.forward(p.Q, p.K, p.V, mask, batch_out, ws);
    else
      attn.forward(p.Q, p.K, p.V, batch_out, ws, p.batch);
    LinearAttention<Map>::State state;
    attn.reset(state, p.batch);
    Mat<double> q(p.batch, 8), k(p.batch, 8), v(p.batch, 6), out;
    Eigen::Array<bool, Eigen::Dynamic, 1> valid(p.batch);
    for (Index t = 0; t < p.length; ++t) {
      for (Index b = 0; b < p.batch; ++b) {
        q.row(b) = p.Q.row(b * p.length + t);
        k.row(b) = p.K.row(b * p.length + t);
        v.row(b) = p.V.row(b * p.length + t);
        valid(b) = mask(t, b);
      }
      if (masked)
        attn.step(q, k, v, valid, out, state);
      else
        attn.step(q, k, v, out, state);
      for (Index b = 0; b < p.batch; ++b) {
        INFO("t = " << t << " b = " << b << " masked " << masked);
        CHECK(coulomb_test::rel_diff(out.row(b), batch_out.row(b * p.length + t)) <
              tol<double>::loose);
        if (masked && !valid(b)) CHECK(out.row(b).isZero(0));
      }
    }
    CHECK(state.position() == p.length);
  }
}

TEST_CASE("LinearAttention_FloatStabilizedAtLargeNorms", "[attention][linear][stability][float]") {
  auto rng = coulomb_test::test_rng("LinearAttention_FloatStabilizedAtLargeNorms");
  // Query/key norms 10..30 (exponents down to about −450): unstabilized float features
  // underflow. Keys sorted by norm so that later blocks bring larger shifts.
  const Index L = 40, d = 6, m = 64;
  Mat<double> Q = coulomb_test::rows_with_norms(L, d, 10, 30, rng);
  Mat<double> K = coulomb_test::rows_with_norms(L, d, 10, 30, rng);
  const Mat<double> V = coulomb_test::gaussian(L, 2, rng);
  const coulomb::FavorPlus<double> fm_d(d, m, rng);
  const coulomb::FavorPlus<float> fm_f(fm_d.omega().cast<float>());
  AttentionOptions opt;
  opt.input_scale = 1.0;
  opt.block_size = 8;
  for (const bool causal : {false, true}) {
    opt.causal = causal;
    const Mat<double> ref = coulomb_test::quadratic_linear_attention(std::vector{fm_d}, Q, K, V, 1,
                                                                     1, causal, nullptr, 1.0);
    const LinearAttention<coulomb::FavorPlus<double>> attn_d(fm_d, opt);
    const LinearAttention<coulomb::FavorPlus<float>> attn_f(fm_f, opt);
    const Mat<double> out_d = attn_d.forward(Q, K, V);
    const Mat<float> out_f = attn_f.forward(Q.cast<float>(), K.cast<float>(), V.cast<float>());
    INFO("causal " << causal);
    REQUIRE(out_f.allFinite());
    CHECK(coulomb_test::rel_diff(out_d, ref) < tol<double>::loose);
    // Float: exponents of size ~450 carry an absolute rounding of ~450·eps each.
    CHECK(coulomb_test::rel_diff(out_f, ref) < 450 * tol<float>::tight);
    // Unstabilized float features of these inputs are useless (the reason for the shifts).
    const Mat<float> phi = fm_f.map(Q.cast<float>());
    CHECK(phi.rowwise().sum().minCoeff() < 1e-30f);
  }
}

TEST_CASE("LinearAttention_ZeroDenominatorGivesZeroOutput", "[attention][linear][stability]") {
  auto rng = coulomb_test::test_rng("LinearAttention_ZeroDenominatorGivesZeroOutput");
  // Sequence 1 is all padding; PORF-relu with ε = 0 gives φ(0) = 0, so a zero query has a
  // zero denominator.
  Problem p = make_problem(2, 6, 1, 3, 2, rng);
  p.Q.row(2).setZero();
  const PaddingMask mask = coulomb_test::make_mask(6, {0, 6});
  const coulomb::PorfRelu<double> relu(3, 8, rng);
  for (const bool causal : {false, true}) {
    AttentionOptions opt;
    opt.causal = causal;
    const LinearAttention<coulomb::PorfRelu<double>> attn(relu, opt);
    LinearAttention<coulomb::PorfRelu<double>>::Workspace ws;
    Mat<double> out;
    attn.forward(p.Q, p.K, p.V, mask, out, ws);
    REQUIRE(out.allFinite());
    CHECK(out.row(2).isZero(0));
    CHECK(out.bottomRows(6).isZero(0));
    coulomb::AttentionGradients<double> g;
    attn.backward(p.Q, p.K, p.V, mask, out, Mat<double>::Ones(12, 2), g, ws);
    CHECK(g.dQ.allFinite());
    CHECK(g.dK.allFinite());
    CHECK(g.dQ.row(2).isZero(0));
    CHECK(g.dK.bottomRows(6).isZero(0));
    CHECK(g.dV.bottomRows(6).isZero(0));
  }
}

TEST_CASE("LinearAttention_BadInputThrows", "[attention][linear][input]") {
  auto rng = coulomb_test::test_rng("LinearAttention_BadInputThrows");
  using Map = coulomb::FavorPlus<double>;
  using Catch::Matchers::Contains;
  const Map fm(4, 8, rng);
  AttentionOptions opt;
  opt.num_heads = 2;
  const LinearAttention<Map> attn(fm, opt);
  const Problem p = make_problem(2, 5, 2, 4, 3, rng);
  LinearAttention<Map>::Workspace ws;
  Mat<double> out;
  using coulomb::invalid_argument;
  CHECK_THROWS_WITH(attn.forward(p.Q, p.K.topRows(8), p.V, out, ws, 2), Contains("'K'"));
  CHECK_THROWS_WITH(attn.forward(p.Q, p.K, p.V.topRows(8), out, ws, 2), Contains("'V'"));
  CHECK_THROWS_WITH(attn.forward(p.Q, p.K, p.V.leftCols(5), out, ws, 2), Contains("'V'"));
  CHECK_THROWS_WITH(attn.forward(p.Q, p.K, p.V, out, ws, 3), Contains("batch"));
  CHECK_THROWS_WITH(attn.forward(p.Q.leftCols(6), p.K.leftCols(6), p.V, out, ws, 2),
                    Contains("'Q'"));
  const PaddingMask bad_mask = PaddingMask::Constant(4, 2, true);
  CHECK_THROWS_WITH(attn.forward(p.Q, p.K, p.V, bad_mask, out, ws), Contains("'mask'"));
  Mat<double> nan_k = p.K;
  nan_k(3, 1) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(attn.forward(p.Q, nan_k, p.V, out, ws, 2), Contains("'K'"));
  Mat<double> inf_v = p.V;
  inf_v(0, 0) = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(attn.forward(p.Q, p.K, inf_v, out, ws, 2), invalid_argument);
  // Backward before any forward, with a wrong dOut, with a NaN in dOut.
  coulomb::AttentionGradients<double> g;
  LinearAttention<Map>::Workspace fresh;
  CHECK_THROWS_WITH(attn.backward(p.Q, p.K, p.V, p.V, p.V, g, fresh, 2), Contains("forward"));
  attn.forward(p.Q, p.K, p.V, out, ws, 2);
  CHECK_THROWS_WITH(attn.backward(p.Q, p.K, p.V, out, out.leftCols(3), g, ws, 2),
                    Contains("'dOut'"));
  Mat<double> nan_g = out;
  nan_g(1, 1) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(attn.backward(p.Q, p.K, p.V, out, nan_g, g, ws, 2), Contains("'dOut'"));
  // Construction: map count, options.
  AttentionOptions three = opt;
  three.num_heads = 3;
  CHECK_THROWS_WITH(LinearAttention<Map>(std::vector<Map>{fm, fm}, three), Contains("'maps'"));
  AttentionOptions bad_scale = opt;
  bad_scale.input_scale = -1.0;
  CHECK_THROWS_WITH(LinearAttention<Map>(fm, bad_scale), Contains("input_scale"));
  AttentionOptions bad_heads = opt;
  bad_heads.num_heads = 0;
  CHECK_THROWS_AS(LinearAttention<Map>(fm, bad_heads), invalid_argument);
  // Step: without reset, and with a batch other than the state's.
  LinearAttention<Map>::State state;
  Mat<double> q = p.Q.topRows(2);
  CHECK_THROWS_WITH(attn.step(q, q, p.V.topRows(2), out, state), Contains("reset"));
  attn.reset(state, 3);
  CHECK_THROWS_WITH(attn.step(q, q, p.V.topRows(2), out, state), Contains("'q'"));
  CHECK_THROWS_AS(attn.reset(state, 0), invalid_argument);
}

}  // namespace attention_linear_test
