// SPDX-License-Identifier: MIT
// The sequence model's classification head is the TextClassifier (nn/sequence_model.hpp,
// nn/text_classifier.hpp): the same configuration (sequence_model_config) and seed give the same
// parameter names and values, logits and gradients, bit for bit, dropout included, with linear
// and softmax attention, tied and shared Ω or not.
#include <catch2/catch.hpp>

#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/sequence_model.hpp>
#include <coulomb/nn/text_classifier.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_sequence_classifier_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::nn::AttentionKind;
using coulomb_nn_test::make_batch;
using coulomb_test::Mat;
using Model = coulomb::nn::SequenceModel<coulomb::FavorPlus<double>>;

}  // namespace

TEST_CASE("NnSequenceModel_ClassificationIsTheTextClassifier", "[nn][sequence][model]") {
  // The same configuration and seed: the same parameters (names and values), logits and
  // gradients, bit for bit, with dropout drawn from the same generator.
  coulomb::Rng rng = coulomb_test::test_rng("NnSequenceModel_ClassificationIsTheTextClassifier");
  coulomb::nn::TextClassifierConfig tc;
  tc.vocab_size = 16;
  tc.max_length = 9;
  tc.d_model = 8;
  tc.num_heads = 2;
  tc.d_ff = 12;
  tc.num_classes = 3;
  tc.num_features = 6;
  tc.num_threads = 1;
  const coulomb::TokenBatch batch = make_batch({6, 3, 5}, 6, tc.vocab_size, tc.num_classes, rng);
  for (const AttentionKind kind : {AttentionKind::linear, AttentionKind::softmax}) {
    for (const bool tied : {false, true}) {
      tc.attention = kind;
      tc.tied_qk = tied;
      tc.train_omega = kind == AttentionKind::linear;
      tc.shared_omega = tied;
      INFO(coulomb::nn::to_string(kind) << (tied ? ", tied and shared" : ""));
      coulomb::nn::TextClassifier<coulomb::FavorPlus<double>> classifier(tc, 17);
      Model model(coulomb::nn::sequence_model_config(tc), 17);
      Mat<double> a, b, da, db;
      coulomb::Rng ra(4), rb(4);
      classifier.forward(batch, a, true, ra);
      model.forward(batch.ids, batch.mask, b, true, rb);
      CHECK(a == b);
      coulomb::nn::softmax_cross_entropy(a, batch.labels, da);
      coulomb::nn::softmax_cross_entropy(b, batch.labels, db);
      classifier.zero_grad();
      classifier.backward(da);
      model.zero_grad();
      model.backward(db);
      const auto pa = classifier.parameters();
      const auto pb = model.parameters();
      REQUIRE(pa.size() == pb.size());
      for (std::size_t k = 0; k < pa.size(); ++k) {
        INFO(pa[k].name);
        CHECK(pa[k].name == pb[k].name);
        CHECK(pa[k].trainable == pb[k].trainable);
        CHECK(*pa[k].value == *pb[k].value);
        CHECK(*pa[k].gradient == *pb[k].gradient);
      }
    }
  }
  tc.use_segments = true;
  CHECK_THROWS_WITH(coulomb::nn::sequence_model_config(tc), Contains("segments"));
}

}  // namespace nn_sequence_classifier_test
