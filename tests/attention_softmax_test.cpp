// SPDX-License-Identifier: MIT
// Exact softmax attention: the blocked forward against an explicit L×L score matrix (causal,
// masked, multi-head, batched, several block sizes and parts), large scores, and bad input.
#include <catch2/catch.hpp>

#include <cmath>

#include "attention_reference.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace attention_softmax_test {

using coulomb::AttentionOptions;
using coulomb::Index;
using coulomb::PaddingMask;
using coulomb::SoftmaxAttention;
using coulomb_test::Mat;

TEST_CASE("SoftmaxAttention_MatchesExplicitScores", "[attention][softmax]") {
  auto rng = coulomb_test::test_rng("SoftmaxAttention_MatchesExplicitScores");
  const Index B = 2, L = 19, H = 2, dk = 4, dv = 3;
  // Scores of size ~100: the row maximum must be subtracted.
  const Mat<double> Q = 5.0 * coulomb_test::gaussian(B * L, H * dk, rng);
  const Mat<double> K = 5.0 * coulomb_test::gaussian(B * L, H * dk, rng);
  const Mat<double> V = coulomb_test::gaussian(B * L, H * dv, rng);
  const PaddingMask mask = coulomb_test::make_mask(L, {0, 5}, 2);
  SoftmaxAttention<double>::Workspace ws;
  for (const bool causal : {false, true}) {
    for (const PaddingMask* m : {static_cast<const PaddingMask*>(nullptr), &mask}) {
      const Mat<double> ref = coulomb_test::explicit_softmax_attention(
          Q, K, V, B, H, causal, m, std::pow(static_cast<double>(dk), -0.25));
      for (const Index block : {Index(0), Index(1), Index(6)}) {
        for (const Index parts : {Index(1), Index(3)}) {
          AttentionOptions opt;
          opt.num_heads = H;
          opt.causal = causal;
          opt.block_size = block;
          opt.sequence_parts = parts;
          const SoftmaxAttention<double> attn(opt);
          Mat<double> out;
          if (m)
            attn.forward(Q, K, V, *m, out, ws);
          else
            attn.forward(Q, K, V, out, ws, B);
          INFO("causal " << causal << " mask " << (m != nullptr) << " block " << block << " parts "
                         << parts);
          REQUIRE(out.allFinite());
          CHECK(coulomb_test::rel_diff(out, ref) < coulomb_test::tol<double>::loose);
        }
      }
    }
  }
}

TEST_CASE("SoftmaxAttention_FullyPaddedSequenceGivesZeros", "[attention][softmax]") {
  auto rng = coulomb_test::test_rng("SoftmaxAttention_FullyPaddedSequenceGivesZeros");
  const Mat<float> Q = coulomb_test::gaussian<float>(8, 2, rng);
  const Mat<float> V = coulomb_test::gaussian<float>(8, 2, rng);
  const PaddingMask mask = coulomb_test::make_mask(4, {0, 4});
  const SoftmaxAttention<float> attn;
  SoftmaxAttention<float>::Workspace ws;
  Mat<float> out;
  attn.forward(Q, Q, V, mask, out, ws);
  REQUIRE(out.allFinite());
  CHECK(out.bottomRows(4).isZero(0));
  CHECK(!out.topRows(4).isZero(0));
  coulomb::AttentionGradients<float> g;
  attn.backward(Q, Q, V, mask, out, Mat<float>::Ones(8, 2), g, ws);
  CHECK(g.dQ.allFinite());
  CHECK(g.dQ.bottomRows(4).isZero(0));
  CHECK(g.dV.bottomRows(4).isZero(0));
}

TEST_CASE("SoftmaxAttention_BadInputThrows", "[attention][softmax][input]") {
  auto rng = coulomb_test::test_rng("SoftmaxAttention_BadInputThrows");
  using Catch::Matchers::Contains;
  AttentionOptions opt;
  opt.num_heads = 2;
  const SoftmaxAttention<double> attn(opt);
  const Mat<double> Q = coulomb_test::gaussian(6, 4, rng);
  const Mat<double> V = coulomb_test::gaussian(6, 2, rng);
  SoftmaxAttention<double>::Workspace ws;
  Mat<double> out;
  CHECK_THROWS_WITH(attn.forward(Q, Q.leftCols(2), V, out, ws), Contains("'K'"));
  CHECK_THROWS_WITH(attn.forward(Q, Q, V.leftCols(1), out, ws), Contains("'V'"));
  CHECK_THROWS_WITH(attn.forward(Q.leftCols(3), Q.leftCols(3), V, out, ws), Contains("'Q'"));
  CHECK_THROWS_WITH(attn.forward(Q, Q, V, PaddingMask::Constant(6, 2, true), out, ws),
                    Contains("'mask'"));
  Mat<double> bad = Q;
  bad(2, 2) = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(attn.forward(bad, Q, V, out, ws), Contains("'Q'"));
  coulomb::AttentionGradients<double> g;
  CHECK_THROWS_WITH(attn.backward(Q, Q, V, V, V, g, ws), Contains("forward"));
  attn.forward(Q, Q, V, out, ws);
  CHECK_THROWS_WITH(attn.backward(Q, Q, V, out, V.topRows(3), g, ws), Contains("'dOut'"));
}

}  // namespace attention_softmax_test
