// SPDX-License-Identifier: MIT
// Recurrent generation of the sequence model (nn/sequence_model.hpp, causal_lm head): one step
// per token equals the full causal forward at every position, for every feature map of the
// registry and for exact softmax attention, in float and double, at L = 1, 2 and longer, with
// padding, with each kind of positions; the decoding state of linear attention does not grow
// with the position (softmax's cache does); the softmax attention's own step against its causal
// forward; and generation to L = 4096 with rotary positions.
#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <coulomb/attention/softmax_attention.hpp>
#include <coulomb/features/favor.hpp>
#include <coulomb/features/registry.hpp>
#include <coulomb/nn/sequence_model.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_sequence_generation_test {

namespace {

using coulomb::Index;
using coulomb::PaddingMask;
using coulomb::TokenArray;
using coulomb::TokenId;
using coulomb::nn::AttentionKind;
using coulomb::nn::PositionKind;
using coulomb::nn::SequenceHead;
using coulomb::nn::SequenceModelConfig;
using coulomb_nn_test::mask_of;
using coulomb_test::Mat;
using coulomb_test::tol;

SequenceModelConfig lm_config(Index max_length) {
  SequenceModelConfig c;
  c.vocab_size = 13;
  c.max_length = max_length;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_layers = 2;
  c.head = SequenceHead::causal_lm;
  c.num_outputs = 0;  // the vocabulary
  c.positions = PositionKind::rotary;
  c.dropout = 0.1;  // unused: generation and evaluation run without dropout
  c.num_features = 8;
  c.num_threads = 1;
  return c;
}

/// Random ids of B sequences of length L (padding id 0 where the mask is false).
TokenArray random_ids(const PaddingMask& mask, Index vocab, coulomb::Rng& rng) {
  TokenArray ids = TokenArray::Zero(mask.rows(), mask.cols());
  for (Index b = 0; b < mask.cols(); ++b)
    for (Index t = 0; t < mask.rows(); ++t)
      if (mask(t, b))
        ids(t, b) = static_cast<TokenId>(
            1 + coulomb::uniform_index(static_cast<std::uint64_t>(vocab - 1), rng));
  return ids;
}

/// The largest relative difference, over positions t and sequences b, between the logits of a
/// step at position t and the causal forward's row b·L + t; `masked` feeds the mask to the
/// steps as `valid`.
template <typename Model>
double step_against_forward(Model& model, const TokenArray& ids, const PaddingMask& mask,
                            bool masked, Index* steps_taken = nullptr,
                            std::vector<Index>* state_sizes = nullptr) {
  using S = typename Model::MatrixType::Scalar;
  const Index L = ids.rows();
  const Index B = ids.cols();
  Mat<S> full;
  model.forward(ids, mask, full);
  REQUIRE(full.rows() == B * L);
  typename Model::DecodingState state;
  model.reset(state, B);
  Mat<S> logits;
  std::vector<TokenId> token(static_cast<std::size_t>(B));
  typename Model::ValidMask valid(B);
  double worst = 0.0;
  for (Index t = 0; t < L; ++t) {
    for (Index b = 0; b < B; ++b) {
      token[static_cast<std::size_t>(b)] = ids(t, b);
      valid(b) = mask(t, b);
    }
    if (masked)
      model.step(token, valid, logits, state);
    else
      model.step(token, logits, state);
    REQUIRE(logits.rows() == B);
    REQUIRE(logits.cols() == full.cols());
    for (Index b = 0; b < B; ++b) {
      const double err = coulomb_test::rel_diff(logits.row(b), full.row(b * L + t));
      INFO("t = " << t << ", b = " << b << ", error " << err);
      CHECK(logits.allFinite());
      worst = std::max(worst, err);
    }
    if (state_sizes) state_sizes->push_back(state.num_scalars());
  }
  if (steps_taken) *steps_taken = state.position();
  return worst;
}

/// Runs `f(std::type_identity<Map>{})` for every map of the registry of scalar S.
template <typename S, typename F>
void for_each_registered_map(F&& f) {
  std::apply(
      [&](const auto&... entry) {
        (f(std::type_identity<typename std::remove_cvref_t<decltype(entry)>::map_type>{}), ...);
      },
      coulomb::feature_map_registry<S>);
}

template <typename S>
void check_every_map(const std::string& name) {
  auto rng = coulomb_test::test_rng(name);
  for (const Index L : {Index(1), Index(2), Index(9)}) {
    const Index shorter = L > 1 ? L - 1 : 1;
    const PaddingMask padded = mask_of(L, {L, shorter, L});
    const PaddingMask full = mask_of(L, {L, L});
    const TokenArray ids_padded = random_ids(padded, 13, rng);
    const TokenArray ids_full = random_ids(full, 13, rng);
    for_each_registered_map<S>([&](auto tag) {
      using Map = typename decltype(tag)::type;
      coulomb::nn::SequenceModel<Map> model(lm_config(16), 7 + static_cast<std::uint64_t>(L));
      INFO(Map::name() << ", L = " << L);
      CHECK(step_against_forward(model, ids_full, full, false) < tol<S>::loose);
      CHECK(step_against_forward(model, ids_padded, padded, true) < tol<S>::loose);
    });
    SequenceModelConfig c = lm_config(16);
    c.attention = AttentionKind::softmax;
    coulomb::nn::SequenceModel<coulomb::FavorPlus<S>> exact(c, 3);
    INFO("softmax attention, L = " << L);
    CHECK(step_against_forward(exact, ids_full, full, false) < tol<S>::loose);
    CHECK(step_against_forward(exact, ids_padded, padded, true) < tol<S>::loose);
  }
}

}  // namespace

TEST_CASE("NnSequenceModel_StepEqualsCausalForwardForEveryMap", "[nn][sequence][generation]") {
  check_every_map<double>("NnSequenceModel_StepEqualsCausalForwardForEveryMap double");
  check_every_map<float>("NnSequenceModel_StepEqualsCausalForwardForEveryMap float");
}

TEMPLATE_TEST_CASE("NnSequenceModel_StepEqualsCausalForwardForEveryPositionKind",
                   "[nn][sequence][generation]", float, double) {
  auto rng = coulomb_test::test_rng("NnSequenceModel_StepEqualsCausalForwardForEveryPositionKind");
  // 150 tokens: three blocks of the causal forward (64 rows each), so the step is compared with
  // positions whose key sums come from earlier blocks; queries and keys tied in one variant.
  const Index L = 150;
  const PaddingMask mask = mask_of(L, {L, 100});
  const TokenArray ids = random_ids(mask, 13, rng);
  for (const auto kind : {PositionKind::learned, PositionKind::sinusoidal, PositionKind::rotary}) {
    for (const bool tied : {false, true}) {
      SequenceModelConfig c = lm_config(L);
      c.positions = kind;
      c.tied_qk = tied;
      coulomb::nn::SequenceModel<coulomb::FavorPlus<TestType>> model(c, 5);
      INFO(coulomb::nn::to_string(kind) << (tied ? ", tied" : ""));
      CHECK(step_against_forward(model, ids, mask, true) < tol<TestType>::loose);
    }
  }
}

TEMPLATE_TEST_CASE("NnSequenceModel_StepEqualsCausalForwardWithKeyConvolution",
                   "[nn][sequence][generation]", float, double) {
  auto rng = coulomb_test::test_rng("NnSequenceModel_StepEqualsCausalForwardWithKeyConvolution");
  // Lengths below, at and above the width, padded sequences, and taps away from the identity
  // start, with linear and softmax attention.
  for (const Index L : {Index(1), Index(2), Index(70)}) {
    const PaddingMask mask = mask_of(L, {L, L > 1 ? L - 1 : 1, L});
    const TokenArray ids = random_ids(mask, 13, rng);
    for (const Index width : {Index(1), Index(2), Index(4)}) {
      for (const auto attention : {AttentionKind::linear, AttentionKind::softmax}) {
        SequenceModelConfig c = lm_config(L);
        c.key_conv = width;
        c.attention = attention;
        coulomb::nn::SequenceModel<coulomb::FavorPlus<TestType>> model(c, 11);
        for (const auto& p : model.parameters())
          if (p.name.find("key_conv") != std::string::npos)
            coulomb::fill_standard_normal(*p.value, rng);
        INFO("L = " << L << ", width " << width << ", " << coulomb::nn::to_string(attention));
        CHECK(step_against_forward(model, ids, mask, true) < tol<TestType>::loose);
      }
    }
  }
}

TEST_CASE("NnSequenceModel_LinearStateDoesNotGrowSoftmaxCacheDoes", "[nn][sequence][generation]") {
  auto rng = coulomb_test::test_rng("NnSequenceModel_LinearStateDoesNotGrowSoftmaxCacheDoes");
  const Index L = 40;
  const PaddingMask mask = mask_of(L, {L, L});
  const TokenArray ids = random_ids(mask, 13, rng);
  SequenceModelConfig c = lm_config(L);
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>> linear(c, 1);
  std::vector<Index> sizes;
  Index steps = 0;
  CHECK(step_against_forward(linear, ids, mask, false, &steps, &sizes) < tol<double>::loose);
  CHECK(steps == L);
  // N layers · B sequences · H heads · (D·(d_head + 1) + 1): FAVOR+ has D = m = 8, d_head = 4.
  const Index expected = c.num_layers * 2 * c.num_heads * (c.num_features * (c.head_dim() + 1) + 1);
  for (const Index s : sizes) CHECK(s == expected);

  c.attention = AttentionKind::softmax;
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>> exact(c, 1);
  sizes.clear();
  CHECK(step_against_forward(exact, ids, mask, false, &steps, &sizes) < tol<double>::loose);
  // One key and one value (d each) per token, layer and sequence.
  for (std::size_t t = 0; t < sizes.size(); ++t)
    CHECK(sizes[t] == c.num_layers * 2 * static_cast<Index>(t + 1) * 2 * c.d_model);
}

TEMPLATE_TEST_CASE("SoftmaxAttention_StepMatchesBatchCausal", "[nn][sequence][generation]", float,
                   double) {
  using S = TestType;
  auto rng = coulomb_test::test_rng("SoftmaxAttention_StepMatchesBatchCausal");
  const Index B = 2, L = 11, H = 2, dk = 3, dv = 4;
  const Mat<S> Q = coulomb_test::gaussian<S>(B * L, H * dk, rng);
  const Mat<S> K = coulomb_test::gaussian<S>(B * L, H * dk, rng);
  const Mat<S> V = coulomb_test::gaussian<S>(B * L, H * dv, rng);
  const PaddingMask mask = mask_of(L, {L, 6});
  coulomb::AttentionOptions opt;
  opt.num_heads = H;
  opt.causal = true;
  opt.block_size = 4;
  const coulomb::SoftmaxAttention<S> attn(opt);
  Mat<S> full;
  typename coulomb::SoftmaxAttention<S>::Workspace ws;
  attn.forward(Q, K, V, mask, full, ws);
  typename coulomb::SoftmaxAttention<S>::Cache cache;
  attn.reset(cache, B);
  Mat<S> q(B, H * dk), k(B, H * dk), v(B, H * dv), out;
  Eigen::Array<bool, Eigen::Dynamic, 1> valid(B);
  for (Index t = 0; t < L; ++t) {
    for (Index b = 0; b < B; ++b) {
      q.row(b) = Q.row(b * L + t);
      k.row(b) = K.row(b * L + t);
      v.row(b) = V.row(b * L + t);
      valid(b) = mask(t, b);
    }
    attn.step(q, k, v, valid, out, cache);
    for (Index b = 0; b < B; ++b) {
      INFO("t = " << t << ", b = " << b);
      if (valid(b)) {
        CHECK(coulomb_test::rel_diff(out.row(b), full.row(b * L + t)) < tol<S>::loose);
      } else {
        CHECK(out.row(b).isZero(0));
        CHECK(full.row(b * L + t).isZero(0));
      }
    }
  }
  CHECK(cache.position() == L);
  CHECK(cache.num_scalars() == (L + 6) * H * (dk + dv));
  Mat<S> wrong(B + 1, H * dk);
  wrong.setZero();
  CHECK_THROWS_AS(attn.step(wrong, wrong, Mat<S>::Zero(B + 1, H * dv), out, cache),
                  coulomb::invalid_argument);
  typename coulomb::SoftmaxAttention<S>::Cache fresh;
  CHECK_THROWS_AS(attn.step(q, k, v, out, fresh), coulomb::invalid_argument);
}

TEST_CASE("NnSequenceModel_GeneratesTo4096WithRotaryPositions",
          "[nn][sequence][generation][float]") {
  // One sequence of 4,096 tokens in float: the steps, whose positions are computed one at a
  // time, agree with the causal forward at every position, and the logits stay finite.
  auto rng = coulomb_test::test_rng("NnSequenceModel_GeneratesTo4096WithRotaryPositions");
  const Index L = 4096;
  SequenceModelConfig c = lm_config(L);
  c.num_layers = 1;
  const PaddingMask mask = mask_of(L, {L});
  const TokenArray ids = random_ids(mask, c.vocab_size, rng);
  coulomb::nn::SequenceModel<coulomb::FavorPlus<float>> model(c, 11);
  Index steps = 0;
  std::vector<Index> sizes;
  CHECK(step_against_forward(model, ids, mask, false, &steps, &sizes) < tol<float>::loose);
  CHECK(steps == L);
  CHECK(sizes.front() == sizes.back());
}

TEST_CASE("NnSequenceModel_DecodingErrors", "[nn][sequence][generation][errors]") {
  SequenceModelConfig c = lm_config(3);
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>> model(c, 1);
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>>::DecodingState state;
  Mat<double> logits;
  const std::vector<TokenId> one{1};
  // A step without reset, a wrong batch, an id out of range, past max_length.
  CHECK_THROWS_WITH(model.step(one, logits, state), Catch::Matchers::Contains("reset"));
  model.reset(state, 2);
  CHECK_THROWS_WITH(model.step(one, logits, state), Catch::Matchers::Contains("'ids' has 1"));
  const std::vector<TokenId> bad{1, 13};
  CHECK_THROWS_WITH(model.step(bad, logits, state), Catch::Matchers::Contains("13"));
  const std::vector<TokenId> two{1, 2};
  for (int t = 0; t < 3; ++t) model.step(two, logits, state);
  CHECK_THROWS_WITH(model.step(two, logits, state), Catch::Matchers::Contains("max_length"));
  CHECK_THROWS_AS(model.reset(state, 0), coulomb::invalid_argument);
  // Generation needs the causal head.
  c.head = SequenceHead::per_token;
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>> bidirectional(c, 1);
  CHECK_THROWS_WITH(bidirectional.reset(state, 1), Catch::Matchers::Contains("causal_lm"));
  // A step replaces what backward needs.
  model.reset(state, 2);
  const PaddingMask mask = mask_of(3, {3, 2});
  const TokenArray ids = TokenArray::Constant(3, 2, 1);
  model.forward(ids, mask, logits);
  Mat<double> step_logits;
  model.step(two, step_logits, state);
  CHECK_THROWS_WITH(model.backward(Mat<double>::Zero(logits.rows(), logits.cols())),
                    Catch::Matchers::Contains("no forward"));
}

}  // namespace nn_sequence_generation_test
