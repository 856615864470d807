// SPDX-License-Identifier: MIT
// The sequence model (nn/sequence_model.hpp): every head's backward against central differences in
// double (causal LM with rotary positions and trainable Ω, per-token outputs at chosen rows with
// sinusoidal positions and tied, shared Ω, softmax attention, classification with rotary
// positions); padding does not change the outputs of real tokens; infer gives forward's logits;
// fully padded and length-1 sequences give finite outputs and gradients; bad configurations and
// inputs throw, naming the argument.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/features/softmax_features.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/sequence_model.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_sequence_model_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::PaddingMask;
using coulomb::TokenArray;
using coulomb::TokenId;
using coulomb::nn::AttentionKind;
using coulomb::nn::PositionKind;
using coulomb::nn::SequenceHead;
using coulomb::nn::SequenceModelConfig;
using coulomb_nn_test::make_batch;
using coulomb_nn_test::mask_of;
using coulomb_test::Mat;
using Model = coulomb::nn::SequenceModel<coulomb::FavorPlus<double>>;

SequenceModelConfig small_config(SequenceHead head, PositionKind positions) {
  SequenceModelConfig c;
  c.vocab_size = 11;
  c.max_length = 8;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_layers = 2;
  c.head = head;
  c.num_outputs = head == SequenceHead::causal_lm ? 0 : 3;
  c.positions = positions;
  c.dropout = 0.1;
  c.num_features = 6;
  c.num_threads = 1;
  return c;
}

/// Targets of every real token (the next token for a language model, a class otherwise), and
/// the rows b·L + t they belong to.
struct Targets {
  std::vector<Index> rows;
  std::vector<int> values;
};

Targets token_targets(const TokenArray& ids, const PaddingMask& mask, Index classes,
                      coulomb::Rng& rng) {
  Targets out;
  for (Index b = 0; b < ids.cols(); ++b)
    for (Index t = 0; t < ids.rows(); ++t)
      if (mask(t, b)) {
        out.rows.push_back(b * ids.rows() + t);
        out.values.push_back(
            static_cast<int>(coulomb::uniform_index(static_cast<std::uint64_t>(classes), rng)));
      }
  return out;
}

/// Every parameter's gradient against central differences of `loss()`, after `run_backward()`
/// filled the gradients. Returns the largest relative error.
template <typename M, typename F, typename G>
double check_gradients(M& model, F&& loss, G&& run_backward) {
  model.zero_grad();
  run_backward();
  const auto params = model.parameters();
  std::vector<Mat<double>> analytic;
  for (const auto& p : params) analytic.push_back(*p.gradient);
  return coulomb_nn_test::check_parameters(params, loss, analytic);
}

/// The largest relative error of every parameter's gradient of a causal LM's cross-entropy over
/// the real rows of `batch` (the logits of padded rows get a zero gradient), with dropout from a
/// fixed seed, against central differences.
double causal_lm_gradient_error(Model& model, const coulomb::TokenBatch& batch,
                                const PaddingMask& mask, const Targets& y) {
  auto loss_and_grad = [&](Mat<double>* dfull) {
    Mat<double> logits;
    coulomb::Rng dropout(9);
    model.forward(batch.ids, mask, logits, true, dropout);
    Mat<double> real(static_cast<Index>(y.rows.size()), logits.cols()), dreal;
    for (std::size_t r = 0; r < y.rows.size(); ++r)
      real.row(static_cast<Index>(r)) = logits.row(y.rows[r]);
    const double value = coulomb::nn::softmax_cross_entropy(real, y.values, dreal);
    if (dfull) {
      dfull->setZero(logits.rows(), logits.cols());
      for (std::size_t r = 0; r < y.rows.size(); ++r)
        dfull->row(y.rows[r]) = dreal.row(static_cast<Index>(r));
    }
    return value;
  };
  return check_gradients(
      model, [&] { return loss_and_grad(nullptr); },
      [&] {
        Mat<double> d;
        loss_and_grad(&d);
        model.backward(d);
      });
}

}  // namespace

TEST_CASE("NnSequenceModel_GradientsMatchFiniteDifferences", "[nn][sequence][gradient]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnSequenceModel_GradientsMatchFiniteDifferences");
  const Index L = 6;
  const PaddingMask mask = mask_of(L, {6, 3, 5});
  const coulomb::TokenBatch batch = make_batch({6, 3, 5}, L, 11, 3, rng);

  SECTION("causal LM, rotary positions, FAVOR+ with trainable Omega, dropout, every row") {
    SequenceModelConfig c = small_config(SequenceHead::causal_lm, PositionKind::rotary);
    c.train_omega = true;
    Model model(c, 21);
    const Targets y = token_targets(batch.ids, mask, c.output_dim(), rng);
    const double worst = causal_lm_gradient_error(model, batch, mask, y);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }

  SECTION("per-token head at chosen rows, sinusoidal positions, softmax features, tied, shared") {
    SequenceModelConfig c = small_config(SequenceHead::per_token, PositionKind::sinusoidal);
    c.train_omega = true;
    c.tied_qk = true;
    c.shared_omega = true;
    coulomb::nn::SequenceModel<coulomb::SoftmaxFeat<double>> model(c, 22);
    Targets y = token_targets(batch.ids, mask, c.output_dim(), rng);
    // Every other real row, one of them twice.
    Targets some;
    for (std::size_t r = 0; r < y.rows.size(); r += 2) {
      some.rows.push_back(y.rows[r]);
      some.values.push_back(y.values[r]);
    }
    some.rows.push_back(y.rows[0]);
    some.values.push_back(y.values[1]);
    auto loss = [&](Mat<double>* d) {
      Mat<double> logits;
      coulomb::Rng dropout(9);
      model.forward_rows(batch.ids, mask, some.rows, logits, true, dropout);
      return d ? coulomb::nn::softmax_cross_entropy(logits, some.values, *d)
               : coulomb::nn::softmax_cross_entropy(logits, some.values);
    };
    const double worst = check_gradients(
        model, [&] { return loss(nullptr); },
        [&] {
          Mat<double> d;
          loss(&d);
          model.backward(d);
        });
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }

  SECTION("causal LM with exact softmax attention and learned positions, at the real rows") {
    SequenceModelConfig c = small_config(SequenceHead::causal_lm, PositionKind::learned);
    c.attention = AttentionKind::softmax;
    Model model(c, 23);
    const Targets y = token_targets(batch.ids, mask, c.output_dim(), rng);
    auto loss = [&](Mat<double>* d) {
      Mat<double> logits;
      coulomb::Rng dropout(9);
      model.forward_rows(batch.ids, mask, y.rows, logits, true, dropout);
      return d ? coulomb::nn::softmax_cross_entropy(logits, y.values, *d)
               : coulomb::nn::softmax_cross_entropy(logits, y.values);
    };
    const double worst = check_gradients(
        model, [&] { return loss(nullptr); },
        [&] {
          Mat<double> d;
          loss(&d);
          model.backward(d);
        });
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }

  SECTION("causal LM with a key convolution of width 3, rotary positions, trainable Omega") {
    SequenceModelConfig c = small_config(SequenceHead::causal_lm, PositionKind::rotary);
    c.train_omega = true;
    c.key_conv = 3;
    Model model(c, 23);
    // Away from the identity start, so that every tap carries a gradient through the keys.
    Index convolutions = 0;
    for (const auto& p : model.parameters())
      if (p.name.find("key_conv") != std::string::npos) {
        CHECK(p.value->rows() == 3);
        CHECK(p.value->cols() == c.d_model);
        coulomb::fill_standard_normal(*p.value, rng);
        ++convolutions;
      }
    CHECK(convolutions == c.num_layers);
    const Targets y = token_targets(batch.ids, mask, c.output_dim(), rng);
    const double worst = causal_lm_gradient_error(model, batch, mask, y);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }

  SECTION("classification with rotary positions, FAVOR+ with trainable Omega") {
    SequenceModelConfig c = small_config(SequenceHead::classification, PositionKind::rotary);
    c.train_omega = true;
    Model model(c, 24);
    auto loss = [&](Mat<double>* d) {
      Mat<double> logits;
      coulomb::Rng dropout(9);
      model.forward(batch.ids, mask, logits, true, dropout);
      return d ? coulomb::nn::softmax_cross_entropy(logits, batch.labels, *d)
               : coulomb::nn::softmax_cross_entropy(logits, batch.labels);
    };
    const double worst = check_gradients(
        model, [&] { return loss(nullptr); },
        [&] {
          Mat<double> d;
          loss(&d);
          model.backward(d);
        });
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
}

TEST_CASE("NnSequenceModel_PaddingDoesNotChangeRealTokens", "[nn][sequence][model]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnSequenceModel_PaddingDoesNotChangeRealTokens");
  const coulomb::TokenBatch batch = make_batch({5, 2, 4}, 5, 11, 3, rng);
  for (const auto head : {SequenceHead::per_token, SequenceHead::causal_lm}) {
    for (const auto kind : {AttentionKind::linear, AttentionKind::softmax}) {
      SequenceModelConfig c = small_config(head, PositionKind::rotary);
      c.attention = kind;
      Model model(c, 31);
      INFO(coulomb::nn::to_string(head) << ", " << coulomb::nn::to_string(kind));
      TokenArray other = batch.ids;
      for (Index b = 0; b < other.cols(); ++b)
        for (Index t = batch.lengths[static_cast<std::size_t>(b)]; t < other.rows(); ++t)
          other(t, b) = static_cast<TokenId>(5 + t);
      TokenArray longer = TokenArray::Zero(8, 3);
      longer.topRows(5) = batch.ids;
      PaddingMask longer_mask = PaddingMask::Constant(8, 3, false);
      longer_mask.topRows(5) = batch.mask;
      Mat<double> a, b, l;
      model.forward(batch.ids, batch.mask, a);
      model.forward(other, batch.mask, b);
      model.forward(longer, longer_mask, l);
      for (Index s = 0; s < 3; ++s)
        for (Index t = 0; t < batch.lengths[static_cast<std::size_t>(s)]; ++t) {
          CHECK(coulomb_test::rel_diff(b.row(s * 5 + t), a.row(s * 5 + t)) < 1e-14);
          CHECK(coulomb_test::rel_diff(l.row(s * 8 + t), a.row(s * 5 + t)) < 1e-14);
        }
    }
  }
}

// infer (EncoderStack::infer: the feed-forward part in blocks of rows) gives the evaluation
// forward's logits bit for bit, for every head, causal and not, one and two threads, over 450
// rows (several blocks and a ragged last one); a backward after it throws.
TEST_CASE("NnSequenceModel_InferGivesTheForwardsLogits", "[nn][sequence][model]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnSequenceModel_InferGivesTheForwardsLogits");
  std::vector<Index> lengths;
  for (Index b = 0; b < 15; ++b) lengths.push_back(3 + (b * 5) % 28);
  const coulomb::TokenBatch batch = make_batch(lengths, 30, 11, 3, rng);
  for (const auto head :
       {SequenceHead::causal_lm, SequenceHead::per_token, SequenceHead::classification})
    for (const auto kind : {AttentionKind::linear, AttentionKind::softmax})
      for (const int threads : {1, 2}) {
        SequenceModelConfig c = small_config(head, PositionKind::rotary);
        c.attention = kind;
        c.max_length = 30;
        c.num_threads = threads;
        Model model(c, 41);
        INFO(coulomb::nn::to_string(head)
             << ", " << coulomb::nn::to_string(kind) << ", " << threads << " threads");
        Mat<double> expected, logits;
        model.forward(batch.ids, batch.mask, expected);
        model.infer(batch.ids, batch.mask, logits);
        CHECK(logits == expected);
        CHECK_THROWS_WITH(model.backward(logits), Contains("infer keeps nothing"));
        if (head != SequenceHead::classification) {
          const Targets y = token_targets(batch.ids, batch.mask, 3, rng);
          Mat<double> rows;
          model.infer_rows(batch.ids, batch.mask, y.rows, rows);
          REQUIRE(rows.rows() == static_cast<Index>(y.rows.size()));
          for (std::size_t r = 0; r < y.rows.size(); ++r)
            CHECK(rows.row(static_cast<Index>(r)) == expected.row(y.rows[r]));
        }
      }
}

TEST_CASE("NnSequenceModel_FullyPaddedAndLengthOneAreFinite", "[nn][sequence][model]") {
  // Length-1 batches, a fully padded sequence beside real ones, and a batch with no token at
  // all: finite logits and finite gradients, for every head and both attentions. A fully
  // padded sequence's classification logits are the classifier's bias.
  coulomb::Rng rng = coulomb_test::test_rng("NnSequenceModel_FullyPaddedAndLengthOneAreFinite");
  const std::vector<std::vector<Index>> shapes{{1}, {1, 1}, {4, 0, 2}, {0, 0}};
  for (const auto head :
       {SequenceHead::classification, SequenceHead::per_token, SequenceHead::causal_lm}) {
    for (const auto kind : {AttentionKind::linear, AttentionKind::softmax}) {
      SequenceModelConfig c = small_config(head, PositionKind::rotary);
      c.attention = kind;
      c.train_omega = kind == AttentionKind::linear;
      Model model(c, 41);
      for (const auto& lengths : shapes) {
        const Index L = std::max<Index>(1, *std::max_element(lengths.begin(), lengths.end()));
        const coulomb::TokenBatch batch = make_batch(lengths, L, c.vocab_size, 3, rng);
        INFO(coulomb::nn::to_string(head) << ", " << coulomb::nn::to_string(kind) << ", L = " << L
                                          << ", B = " << lengths.size());
        Mat<double> logits;
        coulomb::Rng dropout(1);
        model.forward(batch.ids, batch.mask, logits, true, dropout);
        CHECK(logits.allFinite());
        if (head == SequenceHead::classification)
          for (std::size_t b = 0; b < lengths.size(); ++b)
            if (lengths[b] == 0) {
              Mat<double> bias;
              for (const auto& p : model.parameters())
                if (p.name == "classifier.bias") bias = p.value->transpose();
              CHECK(logits.row(static_cast<Index>(b)) == bias);
            }
        model.zero_grad();
        model.backward(Mat<double>::Ones(logits.rows(), logits.cols()));
        for (const auto& p : model.parameters()) {
          INFO(p.name);
          CHECK(p.gradient->allFinite());
        }
        if (head == SequenceHead::classification) continue;
        // No row asked for (a batch without targets): 0 × C logits and zero gradients.
        model.forward_rows(batch.ids, batch.mask, std::vector<Index>{}, logits, false, dropout);
        CHECK(logits.rows() == 0);
        CHECK(logits.cols() == c.output_dim());
        model.zero_grad();
        model.backward(Mat<double>::Zero(0, c.output_dim()));
        for (const auto& p : model.parameters()) CHECK(p.gradient->isZero(0));
      }
    }
  }
}

TEST_CASE("NnSequenceModel_BadInputThrows", "[nn][sequence][model][errors]") {
  SequenceModelConfig c = small_config(SequenceHead::per_token, PositionKind::rotary);
  auto invalid = [](SequenceModelConfig bad, const char* text) {
    CHECK_THROWS_WITH(Model(bad, 1), Contains(text));
  };
  {
    SequenceModelConfig bad = c;
    bad.num_heads = 8;  // d_head = 1: odd
    invalid(bad, "must be even");
    bad.positions = PositionKind::learned;
    CHECK_NOTHROW(Model(bad, 1));
  }
  {
    SequenceModelConfig bad = c;
    bad.num_outputs = 1;
    invalid(bad, "'config.num_outputs'");
    bad.num_outputs = -1;
    invalid(bad, "'config.num_outputs'");
  }
  {
    SequenceModelConfig bad = c;
    bad.position_base = 1.0;
    invalid(bad, "'config.position_base'");
    bad.vocab_size = 0;
    invalid(bad, "'config.vocab_size'");
  }
  {
    SequenceModelConfig bad = c;
    bad.key_conv = -1;
    invalid(bad, "'config.key_conv'");
    bad.key_conv = 2;
    bad.tied_qk = true;
    invalid(bad, "'config.key_conv'");
  }
  Model model(c, 1);
  coulomb::Rng rng(2);
  const coulomb::TokenBatch batch = make_batch({3, 2}, 3, c.vocab_size, 3, rng);
  Mat<double> logits;
  CHECK_THROWS_WITH(model.backward(Mat<double>::Zero(6, 3)), Contains("no forward"));
  TokenArray bad_ids = batch.ids;
  bad_ids(1, 1) = 11;
  CHECK_THROWS_WITH(model.forward(bad_ids, batch.mask, logits), Contains("'ids' holds 11"));
  CHECK_THROWS_WITH(
      model.forward(TokenArray::Ones(9, 1), PaddingMask::Constant(9, 1, true), logits),
      Contains("config.max_length"));
  CHECK_THROWS_WITH(model.forward(batch.ids, PaddingMask::Constant(2, 2, true), logits),
                    Contains("'mask'"));
  coulomb::Rng unused(0);
  const std::vector<Index> padded_row{5};  // position 2 of sequence 1, which has 2 tokens
  CHECK_THROWS_WITH(model.forward_rows(batch.ids, batch.mask, padded_row, logits, false, unused),
                    Contains("padding"));
  const std::vector<Index> outside{6};
  CHECK_THROWS_WITH(model.forward_rows(batch.ids, batch.mask, outside, logits, false, unused),
                    Contains("outside"));
  model.forward(batch.ids, batch.mask, logits);
  CHECK(logits.rows() == 6);
  CHECK_THROWS_WITH(model.backward(Mat<double>::Zero(5, 3)), Contains("'dlogits'"));
  Mat<double> nan = Mat<double>::Zero(6, 3);
  nan(0, 0) = std::nan("");
  CHECK_THROWS_WITH(model.backward(nan), Contains("'dlogits'"));
  // Rows of the classification head, and Ω of a softmax model.
  Model classifier(small_config(SequenceHead::classification, PositionKind::learned), 1);
  CHECK_THROWS_WITH(classifier.forward_rows(batch.ids, batch.mask, outside, logits, false, unused),
                    Contains("forward_rows"));
  c.attention = AttentionKind::softmax;
  Model exact(c, 1);
  CHECK(exact.num_omegas() == 0);
  CHECK_THROWS_WITH(exact.omega(0), Contains("softmax attention"));
  CHECK_THROWS_WITH(model.set_omega(0, Mat<double>::Zero(2, 2)), Contains("'omega'"));
}

TEST_CASE("NnSequenceModel_ParameterNamesPerHead", "[nn][sequence][model]") {
  for (const auto positions :
       {PositionKind::learned, PositionKind::sinusoidal, PositionKind::rotary}) {
    Model lm(small_config(SequenceHead::causal_lm, positions), 1);
    std::vector<std::string> names;
    for (const auto& p : lm.parameters()) names.push_back(p.name);
    INFO(coulomb::nn::to_string(positions));
    CHECK(names.front() == "embedding.token");
    CHECK((names[1] == "embedding.position") == (positions == PositionKind::learned));
    CHECK(names.back() == "token_head.bias");
    CHECK(lm.parameters().back().value->rows() == 11);  // num_outputs 0: the vocabulary
  }
}

}  // namespace nn_sequence_model_test
