// SPDX-License-Identifier: MIT
// The Transformer text classifier with a second feature map, softmax features (the paper's
// strongest QQP setting uses them with Q = K): end-to-end gradients against central finite
// differences in double with one shared, trainable Ω, tied queries and keys, segment
// embeddings, padding of unequal lengths and dropout with a fixed mask; and the Phase A
// representations of a tied model, which are the pooled queries. Also the float smoke test: a
// float model and a double model from the same seed agree to float accuracy (parameters,
// logits, gradients), and gradient steps in float lower the loss. (Here, not in a file of its
// own: it needs the double model of this file as its reference, and a second translation unit
// would instantiate it again.)
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <coulomb/features/softmax_features.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/phase_a_representations.hpp>
#include <coulomb/nn/text_classifier.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_model_softmaxfeat_test {

namespace {

using coulomb::Index;
using coulomb_test::Mat;
using Model = coulomb::nn::TextClassifier<coulomb::SoftmaxFeat<double>>;

coulomb::nn::TextClassifierConfig tied_shared_config() {
  coulomb::nn::TextClassifierConfig c;
  c.vocab_size = 14;
  c.max_length = 8;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 10;
  c.num_layers = 2;
  c.num_classes = 2;
  c.dropout = 0.15;
  c.num_features = 5;
  c.shared_omega = true;
  c.train_omega = true;
  c.tied_qk = true;
  c.use_segments = true;
  c.num_threads = 1;
  return c;
}

}  // namespace

TEST_CASE("NnTextClassifier_SoftmaxFeatTiedSharedGradientsMatchFiniteDifferences",
          "[nn][model][gradient]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_SoftmaxFeatTiedSharedGradients");
  const auto c = tied_shared_config();
  Model model(c, 61);
  const coulomb::TokenBatch batch =
      coulomb_nn_test::make_batch({7, 2, 5, 4}, 7, c.vocab_size, c.num_classes, rng);
  std::vector<std::string> names;
  for (const auto& p : model.parameters()) names.push_back(p.name);
  CHECK(std::find(names.begin(), names.end(), "attention.omega") != names.end());
  CHECK(std::find(names.begin(), names.end(), "encoder.0.attention.w_k") == names.end());
  const double worst = coulomb_nn_test::check_model_gradients(model, batch, true);
  INFO("largest relative error " << worst);
  CHECK(worst < coulomb_nn_test::fd_tolerance);
}

TEST_CASE("NnTextClassifier_TiedPhaseARepresentationsArePooledQueries", "[nn][model][phase_a]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_TiedPhaseARepresentations");
  const auto c = tied_shared_config();
  Model model(c, 62);
  const coulomb::TokenBatch batch =
      coulomb_nn_test::make_batch({3, 7, 1}, 7, c.vocab_size, c.num_classes, rng);
  const auto reps = coulomb::nn::phase_a_representations(model, batch);
  REQUIRE(reps.size() == 2);
  const double scale = std::pow(4.0, -0.25);
  for (Index i = 0; i < 2; ++i) {
    const Mat<double>& q = model.layer(i).attention().queries();
    for (Index b = 0; b < 3; ++b) {
      const Index n = batch.lengths[static_cast<std::size_t>(b)];
      const coulomb::RowVector<double> expected = scale * q.middleRows(b * 7, n).colwise().mean();
      CHECK(coulomb_test::rel_diff(reps[static_cast<std::size_t>(i)].row(b), expected) < 1e-14);
    }
  }
}

TEST_CASE("NnTextClassifier_FloatAgreesWithDouble", "[nn][model][float]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_FloatAgreesWithDouble");
  for (const auto kind :
       {coulomb::nn::AttentionKind::linear, coulomb::nn::AttentionKind::softmax}) {
    INFO("attention " << coulomb::nn::to_string(kind));
    coulomb::nn::TextClassifierConfig c;
    c.vocab_size = 30;
    c.max_length = 16;
    c.d_model = 16;
    c.num_heads = 2;
    c.d_ff = 32;
    c.num_layers = 2;
    c.num_classes = 2;
    c.dropout = 0.1;
    c.num_features = 16;
    c.attention = kind;
    c.num_threads = 1;
    coulomb::nn::TextClassifier<coulomb::SoftmaxFeat<float>> single(c, 71);
    Model reference(c, 71);
    const auto ps = single.parameters();
    const auto pd = reference.parameters();
    REQUIRE(ps.size() == pd.size());
    for (std::size_t k = 0; k < ps.size(); ++k) {
      INFO(ps[k].name);
      CHECK(ps[k].name == pd[k].name);
      CHECK(coulomb_test::rel_diff(*ps[k].value, *pd[k].value) <=
            4 * coulomb_test::tol<float>::eps);
    }

    const coulomb::TokenBatch batch =
        coulomb_nn_test::make_batch({16, 9, 12, 5}, 16, c.vocab_size, c.num_classes, rng);
    coulomb::Matrix<float> logits, dlogits;
    coulomb::Matrix<double> logits_d, dlogits_d;
    coulomb::Rng rs(5), rd(5);
    single.forward(batch, logits, true, rs);
    reference.forward(batch, logits_d, true, rd);
    CHECK(coulomb_test::rel_diff(logits, logits_d) < coulomb_test::tol<float>::loose);
    const float loss = coulomb::nn::softmax_cross_entropy(logits, batch.labels, dlogits);
    coulomb::nn::softmax_cross_entropy(logits_d, batch.labels, dlogits_d);
    single.zero_grad();
    reference.zero_grad();
    single.backward(dlogits);
    reference.backward(dlogits_d);
    double diff = 0.0;
    double norm = 0.0;
    for (std::size_t k = 0; k < ps.size(); ++k) {
      REQUIRE(ps[k].gradient->allFinite());
      diff += (ps[k].gradient->cast<double>() - *pd[k].gradient).squaredNorm();
      norm += pd[k].gradient->squaredNorm();
    }
    CHECK(std::sqrt(diff / norm) < coulomb_test::tol<float>::loose);

    // A few steps of gradient descent (no dropout) lower the loss.
    float first = 0.0f;
    float last = 0.0f;
    for (int step = 0; step < 20; ++step) {
      single.forward(batch, logits);
      last = coulomb::nn::softmax_cross_entropy(logits, batch.labels, dlogits);
      if (step == 0) first = last;
      single.zero_grad();
      single.backward(dlogits);
      for (const auto& p : ps)
        if (p.trainable) *p.value -= 0.1f * *p.gradient;
    }
    INFO("training loss " << loss << ", eval loss " << first << " -> " << last);
    CHECK(std::isfinite(last));
    CHECK(last < first);
  }
}

}  // namespace nn_model_softmaxfeat_test
