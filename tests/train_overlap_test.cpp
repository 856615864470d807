// SPDX-License-Identifier: MIT
// The pair head's overlap features started from a logistic regression
// (train/overlap_head.hpp, baselines/logistic_regression.hpp): the regression is at its optimum,
// the model then computes exactly the regression's logits from the overlap features, it separates a
// task that overlap decides, and bad arguments are refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/train/overlap_head.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace train_overlap_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::Matrix;
using coulomb::nn::TextClassifierConfig;
// float, as the examples train it (and as the other training tests instantiate it).
using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<float>>;

// Pairs of 4 to 8 words from 30: a paraphrase (label 1) keeps a's words with one or two
// replaced, a non-paraphrase (label 0) is drawn afresh. Overlap decides the label, up to noise.
coulomb::TextDataset overlap_task(Index n, coulomb::Rng& rng) {
  coulomb::TextDataset d;
  d.is_pair = true;
  auto word = [&] { return "w" + std::to_string(coulomb::uniform_index(30, rng)); };
  for (Index i = 0; i < n; ++i) {
    const auto length = static_cast<std::size_t>(4 + coulomb::uniform_index(5, rng));
    std::vector<std::string> a(length);
    for (auto& w : a) w = word();
    const int label = static_cast<int>(coulomb::uniform_index(2, rng));
    std::vector<std::string> b = a;
    if (label == 1) {
      for (std::uint64_t c = 0; c <= coulomb::uniform_index(2, rng); ++c)
        b[coulomb::uniform_index(length, rng)] = word();
    } else {
      for (auto& w : b) w = word();
    }
    auto join = [](const std::vector<std::string>& words) {
      std::string s;
      for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
      return s;
    };
    d.examples.push_back({join(a), join(b), label, 0});
  }
  return d;
}

TextClassifierConfig pair_config(Index vocab_size) {
  TextClassifierConfig c;
  c.vocab_size = vocab_size;
  c.max_length = 20;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 16;
  c.num_layers = 1;
  c.num_features = 8;
  c.num_threads = 1;
  c.use_segments = true;
  c.pooling = coulomb::nn::PoolingKind::pair;
  c.pair_overlap = true;
  return c;
}

}  // namespace

TEST_CASE("OverlapHead_StartsFromTheRegressionOptimum", "[train][overlap]") {
  coulomb::Rng rng = coulomb_test::test_rng("OverlapHead_StartsFromTheRegressionOptimum");
  const coulomb::TextDataset text = overlap_task(200, rng);
  const coulomb::TextEncoder encoder(coulomb::build_vocabulary(text), {.max_length = 20});
  const coulomb::EncodedDataset data = encoder.encode(text);
  Model model(pair_config(encoder.vocabulary().size()), 3);
  const coulomb::LogisticRegressionOptions options;
  const coulomb::train::OverlapHeadFit fit = coulomb::train::fit_overlap_head(model, data, options);
  const Index K = coulomb::pair_overlap_features;
  REQUIRE(fit.regression.coefficients.rows() == K + 1);
  REQUIRE(fit.regression.coefficients.cols() == 2);
  INFO("Newton steps " << fit.regression.newton_steps << ", loss " << fit.regression.loss);

  // The standardized design matrix, built here from the moments.
  Matrix<double> Z(data.size(), K + 1);
  std::array<double, coulomb::pair_overlap_features> f{};
  for (Index i = 0; i < data.size(); ++i) {
    coulomb::pair_overlap(data.word_keys(i), data.segment_ids(i), f);
    for (Index k = 0; k < K; ++k)
      Z(i, k) = (f[static_cast<std::size_t>(k)] - fit.moments.mean(k)) / fit.moments.sd(k);
    Z(i, K) = 1.0;
  }

  SECTION("the objective's gradient vanishes and no nearby point is lower") {
    coulomb::Vector<double> grad;
    const double at = coulomb::logistic_regression_objective(
        Z, data.labels, fit.regression.coefficients, options.l2, &grad);
    CHECK(at == Approx(fit.regression.loss).epsilon(1e-12));
    CHECK(grad.cwiseAbs().maxCoeff() < 1e-9);
    for (Index j = 0; j < fit.regression.coefficients.size(); ++j) {
      for (const double h : {-1e-3, 1e-3}) {
        Matrix<double> moved = fit.regression.coefficients;
        moved.data()[j] += h;
        CHECK(coulomb::logistic_regression_objective(Z, data.labels, moved, options.l2) > at);
      }
    }
  }
  SECTION("overlap decides this task, and the regression learns it") {
    CHECK(fit.regression.accuracy > 0.9);
    // Paraphrases share more words: the coefficients of the unigram fractions favour class 1.
    CHECK(fit.regression.coefficients(0, 1) - fit.regression.coefficients(0, 0) > 0.0);
  }
  SECTION("with the encoder's contribution removed, the model computes the regression") {
    auto params = model.parameters();
    for (auto& p : params) {
      if (p.name == "classifier.weight") p.value->topRows(p.value->rows() - K).setZero();
      if (p.name == "pair_head.overlap.shift")
        CHECK(p.value->col(0).isApprox(fit.moments.mean.matrix().cast<float>()));
      if (p.name == "pair_head.overlap.scale")
        CHECK(p.value->col(0).isApprox(fit.moments.sd.inverse().matrix().cast<float>()));
    }
    coulomb::TokenBatch batch;
    std::vector<Index> all(static_cast<std::size_t>(data.size()));
    for (Index i = 0; i < data.size(); ++i) all[static_cast<std::size_t>(i)] = i;
    coulomb::make_batch(data, all, batch);
    Matrix<float> logits;
    model.forward(batch, logits);
    const Matrix<double> expected = Z * fit.regression.coefficients;
    // Equal up to float rounding of the features, the coefficients and the products.
    CHECK((logits.cast<double>() - expected).cwiseAbs().maxCoeff() <
          1e-5 * (1.0 + expected.cwiseAbs().maxCoeff()));
  }
  SECTION("deterministic") {
    Model again(pair_config(encoder.vocabulary().size()), 3);
    const auto second = coulomb::train::fit_overlap_head(again, data, options);
    CHECK(second.regression.coefficients == fit.regression.coefficients);
  }
}

TEST_CASE("OverlapHead_RefusesBadArguments", "[train][overlap][input]") {
  coulomb::Rng rng = coulomb_test::test_rng("OverlapHead_RefusesBadArguments");
  const coulomb::TextDataset text = overlap_task(20, rng);
  const coulomb::TextEncoder encoder(coulomb::build_vocabulary(text), {.max_length = 20});
  const coulomb::EncodedDataset data = encoder.encode(text);
  const TextClassifierConfig c = pair_config(encoder.vocabulary().size());
  using coulomb::train::fit_overlap_head;

  TextClassifierConfig without = c;
  without.pair_overlap = false;
  Model plain(without, 1);
  CHECK_THROWS_WITH(fit_overlap_head(plain, data), Contains("config.pair_overlap"));
  CHECK_THROWS_WITH(
      plain.set_overlap_standardization(Eigen::ArrayXd::Zero(6), Eigen::ArrayXd::Ones(6)),
      Contains("config.pair_overlap"));
  TextClassifierConfig hidden = c;
  hidden.pair_hidden = 4;
  Model with_hidden(hidden, 1);
  CHECK_THROWS_WITH(fit_overlap_head(with_hidden, data), Contains("config.pair_hidden = 4"));

  Model model(c, 1);
  CHECK_THROWS_WITH(fit_overlap_head(model, data, {.l2 = 0.0}), Contains("'l2'"));
  CHECK_THROWS_WITH(fit_overlap_head(model, data, {.max_newton_steps = 0}),
                    Contains("'max_newton_steps'"));
  coulomb::EncodedDataset unlabelled = data;
  unlabelled.labels[3] = -1;
  CHECK_THROWS_WITH(fit_overlap_head(model, unlabelled), Contains("sequence 3 has label -1"));
  coulomb::EncodedDataset singles = data;
  singles.is_pair = false;
  CHECK_THROWS_WITH(fit_overlap_head(model, singles), Contains("single sentences"));
  coulomb::EncodedDataset no_keys;
  no_keys.is_pair = true;
  for (Index i = 0; i < data.size(); ++i)
    no_keys.push_back(data.sequence(i), data.segment_ids(i),
                      data.labels[static_cast<std::size_t>(i)]);
  CHECK_THROWS_WITH(fit_overlap_head(model, no_keys), Contains("no word keys"));

  CHECK_THROWS_WITH(
      model.set_overlap_standardization(Eigen::ArrayXd::Zero(5), Eigen::ArrayXd::Ones(6)),
      Contains("6 entries"));
  Eigen::ArrayXd sd = Eigen::ArrayXd::Ones(6);
  sd(2) = -1.0;
  CHECK_THROWS_WITH(model.set_overlap_standardization(Eigen::ArrayXd::Zero(6), sd),
                    Contains("entry 2"));
  sd(2) = std::nan("");
  CHECK_THROWS_WITH(model.set_overlap_standardization(Eigen::ArrayXd::Zero(6), sd),
                    Contains("entry 2"));
}

TEST_CASE("LogisticRegression_SeparatesAndRefusesBadArguments", "[train][overlap][input]") {
  // Two classes split by the sign of the first column; the second column is a constant.
  Matrix<double> Z(40, 2);
  std::vector<int> labels(40);
  for (Index i = 0; i < 40; ++i) {
    Z(i, 0) = static_cast<double>(i) - 19.5;
    Z(i, 1) = 1.0;
    labels[static_cast<std::size_t>(i)] = i < 20 ? 0 : 1;
  }
  const coulomb::LogisticRegressionFit fit = coulomb::fit_logistic_regression(Z, labels, 2);
  CHECK(fit.accuracy == 1.0);
  CHECK(fit.coefficients(0, 1) > fit.coefficients(0, 0));
  coulomb::Vector<double> grad;
  coulomb::logistic_regression_objective(Z, labels, fit.coefficients, 1e-3, &grad);
  CHECK(grad.cwiseAbs().maxCoeff() < 1e-9);

  using coulomb::fit_logistic_regression;
  CHECK_THROWS_WITH(fit_logistic_regression(Z, labels, 1), Contains("'num_classes'"));
  std::vector<int> short_labels(labels.begin(), labels.end() - 1);
  CHECK_THROWS_WITH(fit_logistic_regression(Z, short_labels, 2), Contains("one per row"));
  std::vector<int> bad = labels;
  bad[7] = 2;
  CHECK_THROWS_WITH(fit_logistic_regression(Z, bad, 2), Contains("at index 7"));
  Matrix<double> nan = Z;
  nan(3, 0) = std::nan("");
  CHECK_THROWS_WITH(fit_logistic_regression(nan, labels, 2), Contains("'Z'"));
  CHECK_THROWS_WITH(fit_logistic_regression(Z, labels, 2, {.tolerance = -1.0}),
                    Contains("'tolerance'"));
}

}  // namespace train_overlap_test
