// SPDX-License-Identifier: MIT
// Backward passes of linear and softmax attention against central finite differences in
// double (Q, K, V and Ω), masked and unmasked, causal and not, one and several parts; the
// frozen-kernel mode; float gradients against double ones.
#include <catch2/catch.hpp>

#include <utility>
#include <vector>

#include "attention_reference.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace attention_gradient_test {

namespace {

using coulomb::AttentionGradients;
using coulomb::AttentionOptions;
using coulomb::Index;
using coulomb::LinearAttention;
using coulomb::PaddingMask;
using coulomb::SoftmaxAttention;
using coulomb_test::Mat;

/// Relative error allowed between an analytic gradient and central differences (double).
constexpr double fd_tolerance = 1e-6;

struct Problem {
  Index batch, length, heads, dk, dv;
  Mat<double> Q, K, V, W;  // W: weights of the loss L = Σ W ⊙ Out
};

Problem make_problem(coulomb::Rng& rng, Index heads, Index dk, double key_norm_spread) {
  Problem p{2, 7, heads, dk, 2, {}, {}, {}, {}};
  const Index rows = p.batch * p.length;
  p.Q = coulomb_test::gaussian(rows, heads * dk, rng);
  p.K = coulomb_test::gaussian(rows, heads * dk, rng);
  // Keys whose norms grow along the sequence: later blocks bring larger stabilizer shifts,
  // so the rescaling of the running state is exercised.
  for (Index i = 0; i < rows; ++i)
    p.K.row(i) *= 1.0 + key_norm_spread * static_cast<double>(i % p.length) / p.length;
  p.V = coulomb_test::gaussian(rows, heads * p.dv, rng);
  p.W = coulomb_test::gaussian(rows, heads * p.dv, rng);
  return p;
}

template <typename Attention, typename... Extra>
Mat<double> run_forward(const Attention& attn, const Problem& p, const PaddingMask* mask,
                        const Mat<double>& Q, const Mat<double>& K, const Mat<double>& V,
                        typename Attention::Workspace& ws) {
  Mat<double> out;
  if (mask)
    attn.forward(Q, K, V, *mask, out, ws);
  else
    attn.forward(Q, K, V, out, ws, p.batch);
  return out;
}

template <typename Attention>
AttentionGradients<double> analytic(const Attention& attn, const Problem& p,
                                    const PaddingMask* mask) {
  typename Attention::Workspace ws;
  const Mat<double> out = run_forward(attn, p, mask, p.Q, p.K, p.V, ws);
  AttentionGradients<double> g;
  if (mask)
    attn.backward(p.Q, p.K, p.V, *mask, out, p.W, g, ws);
  else
    attn.backward(p.Q, p.K, p.V, out, p.W, g, ws, p.batch);
  return g;
}

/// FD checks of dQ, dK, dV for an attention built by make(maps-or-nothing).
template <typename Make>
void check_qkv(const Problem& p, const PaddingMask* mask, const AttentionGradients<double>& g,
               Make&& make) {
  const auto attn = make();
  typename decltype(attn)::Workspace ws;
  auto loss = [&](const Mat<double>& Q, const Mat<double>& K, const Mat<double>& V) {
    return (p.W.array() * run_forward(attn, p, mask, Q, K, V, ws).array()).sum();
  };
  const Mat<double> fq =
      coulomb_test::fd_gradient(p.Q, [&](const Mat<double>& x) { return loss(x, p.K, p.V); });
  const Mat<double> fk =
      coulomb_test::fd_gradient(p.K, [&](const Mat<double>& x) { return loss(p.Q, x, p.V); });
  const Mat<double> fv =
      coulomb_test::fd_gradient(p.V, [&](const Mat<double>& x) { return loss(p.Q, p.K, x); });
  CHECK(coulomb_test::rel_diff(g.dQ, fq) < fd_tolerance);
  CHECK(coulomb_test::rel_diff(g.dK, fk) < fd_tolerance);
  CHECK(coulomb_test::rel_diff(g.dV, fv) < fd_tolerance);
  if (mask) {
    for (Index b = 0; b < p.batch; ++b) {
      for (Index t = 0; t < p.length; ++t) {
        if ((*mask)(t, b)) continue;
        const Index r = b * p.length + t;
        CHECK(g.dQ.row(r).isZero(0));
        CHECK(g.dK.row(r).isZero(0));
        CHECK(g.dV.row(r).isZero(0));
      }
    }
  }
}

template <typename Map>
void check_linear(const std::vector<Map>& maps, const Problem& p, bool causal,
                  const PaddingMask* mask, Index parts) {
  AttentionOptions opt;
  opt.num_heads = p.heads;
  opt.causal = causal;
  opt.block_size = 3;
  opt.sequence_parts = parts;
  INFO(Map::name() << " causal " << causal << " mask " << (mask != nullptr) << " parts " << parts);
  const LinearAttention<Map> attn(maps, opt);
  const AttentionGradients<double> g = analytic(attn, p, mask);
  check_qkv(p, mask, g, [&] { return LinearAttention<Map>(maps, opt); });
  REQUIRE(g.dOmega.size() == maps.size());
  typename LinearAttention<Map>::Workspace ws;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    const Mat<double> fo = coulomb_test::fd_gradient(maps[i].omega(), [&](const Mat<double>& om) {
      std::vector<Map> changed = maps;
      changed[i].set_omega(om);
      const LinearAttention<Map> a(changed, opt);
      return (p.W.array() * run_forward(a, p, mask, p.Q, p.K, p.V, ws).array()).sum();
    });
    INFO("map " << i);
    CHECK(coulomb_test::rel_diff(g.dOmega[i], fo) < fd_tolerance);
  }
}

}  // namespace

TEST_CASE("LinearAttention_GradientsMatchFiniteDifferences", "[attention][linear][gradient]") {
  auto rng = coulomb_test::test_rng("LinearAttention_GradientsMatchFiniteDifferences");
  const Problem p = make_problem(rng, 2, 3, 1.5);
  const PaddingMask mask = coulomb_test::make_mask(p.length, {2, 0}, 3);
  using Favor = coulomb::FavorPlus<double>;
  const std::vector<Favor> favor{Favor(3, 6, rng), Favor(3, 6, rng)};  // one map per head
  const std::vector<coulomb::PorfSoftplus<double>> softplus{
      coulomb::PorfSoftplus<double>(3, 6, rng)};  // shared by the heads
  for (const bool causal : {false, true}) {
    for (const PaddingMask* m : {static_cast<const PaddingMask*>(nullptr), &mask}) {
      for (const Index parts : {Index(1), Index(2)}) check_linear(favor, p, causal, m, parts);
      check_linear(softplus, p, causal, m, 2);
    }
  }
}

TEST_CASE("LinearAttention_FrozenKernelModeSkipsOmega", "[attention][linear][gradient]") {
  auto rng = coulomb_test::test_rng("LinearAttention_FrozenKernelModeSkipsOmega");
  const Problem p = make_problem(rng, 1, 3, 0.5);
  const coulomb::FavorPlus<double> fm(3, 8, rng);
  for (const bool causal : {false, true}) {
    AttentionOptions opt;
    opt.causal = causal;
    opt.block_size = 4;
    const auto full = analytic(LinearAttention<coulomb::FavorPlus<double>>(fm, opt), p, nullptr);
    opt.omega_gradient = false;
    const auto frozen = analytic(LinearAttention<coulomb::FavorPlus<double>>(fm, opt), p, nullptr);
    CHECK(frozen.dOmega.empty());
    CHECK(coulomb_test::rel_diff(frozen.dQ, full.dQ) < coulomb_test::tol<double>::tight);
    CHECK(coulomb_test::rel_diff(frozen.dK, full.dK) < coulomb_test::tol<double>::tight);
    CHECK(coulomb_test::rel_diff(frozen.dV, full.dV) < coulomb_test::tol<double>::tight);
  }
}

/// Forward and backward of `attn`; then a second backward of the same forward with weights W2.
template <typename Map, typename S = typename Map::Scalar>
std::pair<AttentionGradients<S>, AttentionGradients<S>> two_backwards(
    const LinearAttention<Map>& attn, const Problem& p, const PaddingMask* mask, Mat<S>& out) {
  typename LinearAttention<Map>::Workspace ws;
  const Mat<S> Q = p.Q.cast<S>(), K = p.K.cast<S>(), V = p.V.cast<S>();
  const Mat<double> w2 = (-0.5 * p.W.array() + 0.25).matrix();
  const Mat<S> W = p.W.cast<S>(), W2 = w2.cast<S>();
  AttentionGradients<S> g1, g2;
  if (mask) {
    attn.forward(Q, K, V, *mask, out, ws);
    attn.backward(Q, K, V, *mask, out, W, g1, ws);
    attn.backward(Q, K, V, *mask, out, W2, g2, ws);
  } else {
    attn.forward(Q, K, V, out, ws, p.batch);
    attn.backward(Q, K, V, out, W, g1, ws, p.batch);
    attn.backward(Q, K, V, out, W2, g2, ws, p.batch);
  }
  return {std::move(g1), std::move(g2)};
}

template <typename S>
bool same_bits(const AttentionGradients<S>& a, const AttentionGradients<S>& b) {
  if (!(a.dQ == b.dQ && a.dK == b.dK && a.dV == b.dV && a.dOmega.size() == b.dOmega.size()))
    return false;
  for (std::size_t i = 0; i < a.dOmega.size(); ++i)
    if (!(a.dOmega[i] == b.dOmega[i])) return false;
  return true;
}

/// AttentionOptions::keep_features: the backward reuses the forward's features instead of
/// mapping again, and must give exactly what mapping again gives, for every block layout
/// (blocks without a real key included), with and without padding, stabilized or not, and for
/// a second backward of the same forward.
template <typename Map>
void check_kept_features(const std::vector<Map>& maps, const Problem& p, const PaddingMask* mask) {
  for (const bool causal : {false, true}) {
    for (const Index block : {Index(2), Index(3), Index(64)}) {
      for (const Index parts : {Index(1), Index(2)}) {
        AttentionOptions opt;
        opt.num_heads = p.heads;
        opt.causal = causal;
        opt.block_size = block;
        opt.sequence_parts = parts;
        INFO(Map::name() << " causal " << causal << " block " << block << " parts " << parts
                         << " mask " << (mask != nullptr));
        Mat<typename Map::Scalar> out_again, out_kept;
        const auto again = two_backwards(LinearAttention<Map>(maps, opt), p, mask, out_again);
        opt.keep_features = true;
        const auto kept = two_backwards(LinearAttention<Map>(maps, opt), p, mask, out_kept);
        CHECK(out_kept == out_again);
        CHECK(same_bits(kept.first, again.first));
        CHECK(same_bits(kept.second, again.second));
        CHECK_FALSE(same_bits(kept.first, kept.second));  // the second backward is another one
      }
    }
  }
}

TEST_CASE("LinearAttention_KeptFeaturesGiveTheSameGradientsBitForBit",
          "[attention][linear][gradient]") {
  auto rng = coulomb_test::test_rng("LinearAttention_KeptFeaturesGiveTheSameGradientsBitForBit");
  const Problem p = make_problem(rng, 2, 3, 1.5);
  // Sequence 0 ends with 5 padded tokens, so with blocks of 2 its last blocks hold no real key;
  // position 1 is a hole in both sequences.
  const PaddingMask mask = coulomb_test::make_mask(p.length, {5, 0}, 1);
  using Favor = coulomb::FavorPlus<double>;
  const std::vector<Favor> favor{Favor(3, 6, rng), Favor(3, 6, rng)};
  const std::vector<coulomb::FavorPlus<float>> favor_float{
      coulomb::FavorPlus<float>(favor[0].omega().cast<float>())};
  const std::vector<coulomb::PorfRelu<double>> relu{coulomb::PorfRelu<double>(3, 6, rng)};
  for (const PaddingMask* m : {static_cast<const PaddingMask*>(nullptr), &mask}) {
    check_kept_features(favor, p, m);
    check_kept_features(favor_float, p, m);
    check_kept_features(relu, p, m);
  }
}

TEST_CASE("LinearAttention_CausalBackwardOfOtherSizesMapsAgain", "[attention][linear][gradient]") {
  // A causal backward with kept features whose sizes are not the last forward's (here the rows
  // of 2 sequences of 7 taken as 1 sequence of 14) maps its features again: it must give what a
  // workspace without kept features gives.
  auto rng = coulomb_test::test_rng("LinearAttention_CausalBackwardOfOtherSizesMapsAgain");
  const Problem p = make_problem(rng, 2, 3, 1.5);
  using Favor = coulomb::FavorPlus<double>;
  const Favor map(3, 6, rng);
  AttentionOptions opt;
  opt.num_heads = p.heads;
  opt.causal = true;
  opt.block_size = 3;
  const LinearAttention<Favor> plain(map, opt);
  opt.keep_features = true;
  const LinearAttention<Favor> keeping(map, opt);
  LinearAttention<Favor>::Workspace ws, fresh;
  Mat<double> out_two, out_one;
  keeping.forward(p.Q, p.K, p.V, out_two, ws, p.batch);
  plain.forward(p.Q, p.K, p.V, out_one, fresh, 1);
  AttentionGradients<double> g_keeping, g_plain;
  keeping.backward(p.Q, p.K, p.V, out_one, p.W, g_keeping, ws, 1);
  plain.backward(p.Q, p.K, p.V, out_one, p.W, g_plain, fresh, 1);
  CHECK(same_bits(g_keeping, g_plain));
}

TEST_CASE("LinearAttention_FloatGradientsMatchDouble", "[attention][linear][gradient][float]") {
  auto rng = coulomb_test::test_rng("LinearAttention_FloatGradientsMatchDouble");
  const Problem p = make_problem(rng, 2, 3, 1.0);
  const PaddingMask mask = coulomb_test::make_mask(p.length, {1, 2});
  const coulomb::FavorPlus<double> fd(3, 16, rng);
  const coulomb::FavorPlus<float> ff(fd.omega().cast<float>());
  AttentionOptions opt;
  opt.num_heads = 2;
  opt.causal = true;
  opt.block_size = 3;
  const LinearAttention<coulomb::FavorPlus<double>> ad(fd, opt);
  const LinearAttention<coulomb::FavorPlus<float>> af(ff, opt);
  const auto gd = analytic(ad, p, &mask);
  LinearAttention<coulomb::FavorPlus<float>>::Workspace ws;
  const Mat<float> Q = p.Q.cast<float>(), K = p.K.cast<float>(), V = p.V.cast<float>();
  Mat<float> out;
  af.forward(Q, K, V, mask, out, ws);
  AttentionGradients<float> gf;
  af.backward(Q, K, V, mask, out, p.W.cast<float>(), gf, ws);
  const double tol = coulomb_test::tol<float>::loose;
  CHECK(coulomb_test::rel_diff(gf.dQ, gd.dQ) < tol);
  CHECK(coulomb_test::rel_diff(gf.dK, gd.dK) < tol);
  CHECK(coulomb_test::rel_diff(gf.dV, gd.dV) < tol);
  CHECK(coulomb_test::rel_diff(gf.dOmega[0], gd.dOmega[0]) < tol);
}

TEST_CASE("SoftmaxAttention_GradientsMatchFiniteDifferences", "[attention][softmax][gradient]") {
  auto rng = coulomb_test::test_rng("SoftmaxAttention_GradientsMatchFiniteDifferences");
  const Problem p = make_problem(rng, 2, 3, 1.0);
  const PaddingMask mask = coulomb_test::make_mask(p.length, {2, 0}, 3);
  for (const bool causal : {false, true}) {
    for (const PaddingMask* m : {static_cast<const PaddingMask*>(nullptr), &mask}) {
      for (const Index parts : {Index(1), Index(2)}) {
        AttentionOptions opt;
        opt.num_heads = 2;
        opt.causal = causal;
        opt.block_size = 3;
        opt.sequence_parts = parts;
        INFO("causal " << causal << " mask " << (m != nullptr) << " parts " << parts);
        const SoftmaxAttention<double> attn(opt);
        const auto g = analytic(attn, p, m);
        CHECK(g.dOmega.empty());
        check_qkv(p, m, g, [&] { return SoftmaxAttention<double>(opt); });
      }
    }
  }
}

}  // namespace attention_gradient_test
