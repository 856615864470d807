// SPDX-License-Identifier: MIT
// The fused head and loss (nn::Linear::cross_entropy_backward, SequenceModel::
// forward_backward_rows): the loss and every gradient equal those of the unfused forward,
// softmax_cross_entropy and backward (several row blocks and vocabulary chunks, one and two
// threads, a scale), the gradients agree with central differences in double, logits far beyond
// exp's range give a finite loss, a non-finite logit returns NaN and changes nothing, and bad
// labels throw, naming the argument.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/nn/layers.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/sequence_model.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

namespace nn_linear_cross_entropy_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb_test::Mat;

/// A layer of d inputs and C outputs with random weights and bias, and n rows with labels.
struct Problem {
  coulomb::nn::Linear<double> layer;
  Mat<double> X;
  std::vector<int> labels;
};

Problem make_problem(Index n, Index d, Index C, double weight_scale, coulomb::Rng& rng) {
  Problem p{coulomb::nn::Linear<double>(d, C), Mat<double>(n, d), {}};
  p.layer.initialize(rng);
  p.layer.weight() *= weight_scale;
  for (Index j = 0; j < C; ++j) p.layer.bias()(j, 0) = 0.1 * coulomb::standard_normal(rng);
  for (Index j = 0; j < d; ++j)
    for (Index r = 0; r < n; ++r) p.X(r, j) = coulomb::standard_normal(rng);
  for (Index r = 0; r < n; ++r)
    p.labels.push_back(
        static_cast<int>(coulomb::uniform_index(static_cast<std::uint64_t>(C), rng)));
  return p;
}

double relative(const Mat<double>& a, const Mat<double>& b) {
  return (a - b).norm() / std::max(b.norm(), 1e-300);
}

}  // namespace

TEST_CASE("NnLinearCrossEntropy_EqualsUnfused", "[nn][loss]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinearCrossEntropy_EqualsUnfused");
  // 1,100 rows: three blocks of rows (512) per thread range; 300 outputs: chunks of 128, 128, 44.
  const Index n = 1100, d = 12, C = 300;
  const double scale = GENERATE(1.0, 0.37);
  const int threads = GENERATE(1, 2);
  Problem p = make_problem(n, d, C, 3.0, rng);
  p.layer.set_num_threads(threads);

  // Unfused: logits, the loss and its gradient, scaled, then backward.
  Mat<double> logits, dlogits, dx_ref;
  p.layer.forward(p.X, logits);
  const double loss_ref = coulomb::nn::softmax_cross_entropy(logits, p.labels, dlogits);
  dlogits *= scale;
  p.layer.zero_grad();
  p.layer.backward(p.X, dlogits, dx_ref);
  const Mat<double> dw_ref = p.layer.weight_gradient();
  const Mat<double> db_ref = p.layer.bias_gradient();

  p.layer.zero_grad();
  Mat<double> dx;
  const double loss = p.layer.cross_entropy_backward(p.X, p.labels, dx, scale);
  INFO("scale " << scale << ", threads " << threads);
  CHECK(std::abs(loss - loss_ref) <= 1e-13 * std::abs(loss_ref));
  CHECK(relative(p.layer.weight_gradient(), dw_ref) < 1e-12);
  CHECK(relative(p.layer.bias_gradient(), db_ref) < 1e-12);
  CHECK(relative(dx, dx_ref) < 1e-12);

  // The parameter gradients accumulate; dX is overwritten.
  p.layer.cross_entropy_backward(p.X, p.labels, dx, scale);
  CHECK(relative(p.layer.weight_gradient(), 2.0 * dw_ref) < 1e-12);
  CHECK(relative(dx, dx_ref) < 1e-12);
}

TEST_CASE("NnLinearCrossEntropy_GradientsMatchFiniteDifferences", "[nn][loss][gradient]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinearCrossEntropy_GradientsMatchFiniteDifferences");
  const Index n = 9, d = 5, C = 140;  // two chunks of outputs, the second one short
  Problem p = make_problem(n, d, C, 2.0, rng);
  Mat<double> dx, unused;
  auto loss = [&] {
    coulomb::nn::Linear<double> copy = p.layer;
    return static_cast<double>(copy.cross_entropy_backward(p.X, p.labels, unused));
  };
  p.layer.zero_grad();
  p.layer.cross_entropy_backward(p.X, p.labels, dx);
  CHECK(coulomb_nn_test::gradient_error(p.layer.weight_gradient(),
                                        coulomb_nn_test::fd_gradient(p.layer.weight(), loss)) <
        coulomb_nn_test::fd_tolerance);
  CHECK(coulomb_nn_test::gradient_error(p.layer.bias_gradient(),
                                        coulomb_nn_test::fd_gradient(p.layer.bias(), loss)) <
        coulomb_nn_test::fd_tolerance);
  CHECK(coulomb_nn_test::gradient_error(dx, coulomb_nn_test::fd_gradient(p.X, loss)) <
        coulomb_nn_test::fd_tolerance);
}

TEST_CASE("NnLinearCrossEntropy_ExtremeAndNonFiniteLogits", "[nn][loss]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinearCrossEntropy_ExtremeAndNonFiniteLogits");
  const Index n = 40, d = 6, C = 200;
  Problem p = make_problem(n, d, C, 1.0, rng);
  coulomb::nn::Linear<float> layer(d, C);
  layer.weight() = p.layer.weight().cast<float>() * 60.0f;  // logits of several hundred
  layer.bias() = p.layer.bias().cast<float>();
  const Mat<float> X = p.X.cast<float>();
  Mat<float> dx;
  layer.zero_grad();
  const float loss = layer.cross_entropy_backward(X, p.labels, dx);
  CHECK(std::isfinite(loss));
  CHECK(coulomb::detail::all_finite(dx));
  CHECK(coulomb::detail::all_finite(layer.weight_gradient()));
  // Against the unfused loss in double on the same float inputs.
  Mat<double> logits;
  coulomb::nn::Linear<double> wide(d, C);
  wide.weight() = layer.weight().cast<double>();
  wide.bias() = layer.bias().cast<double>();
  wide.forward(X.cast<double>(), logits);
  const double exact = coulomb::nn::softmax_cross_entropy(logits, p.labels);
  CHECK(std::abs(static_cast<double>(loss) - exact) <= 1e-4 * std::abs(exact));

  // A non-finite logit: NaN, and nothing changed.
  const Mat<float> dw_before = layer.weight_gradient();
  Mat<float> bad = X;
  bad(17, 2) = std::numeric_limits<float>::infinity();
  Mat<float> dx_bad = dx;
  CHECK(std::isnan(layer.cross_entropy_backward(bad, p.labels, dx_bad)));
  CHECK((layer.weight_gradient().array() == dw_before.array()).all());
  CHECK((dx_bad.array() == dx.array()).all());
}

TEST_CASE("NnLinearCrossEntropy_RejectsBadInput", "[nn][loss]") {
  coulomb::nn::Linear<double> layer(4, 10);
  Mat<double> X = Mat<double>::Ones(3, 4), dx;
  CHECK_THROWS_WITH(layer.cross_entropy_backward(X, std::vector<int>{1, 2}, dx),
                    Contains("argument 'labels' has 2 entries, expected 3"));
  CHECK_THROWS_WITH(layer.cross_entropy_backward(X, std::vector<int>{1, 10, 2}, dx),
                    Contains("argument 'labels' holds 10 at index 1"));
  CHECK_THROWS_WITH(
      layer.cross_entropy_backward(Mat<double>::Ones(3, 5), std::vector<int>{1, 2, 3}, dx),
      Contains("X"));
}

TEST_CASE("NnLinearCrossEntropy_SequenceModelFusedEqualsUnfused", "[nn][sequence][loss]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnLinearCrossEntropy_SequenceModelFusedEqualsUnfused");
  coulomb::nn::SequenceModelConfig c;
  c.vocab_size = 11;
  c.max_length = 8;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_layers = 2;
  c.head = coulomb::nn::SequenceHead::causal_lm;
  c.num_outputs = 0;  // the vocabulary
  c.dropout = 0.1;
  c.num_features = 6;
  c.num_threads = 1;
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>> model(c, 31);
  const Index L = 6;
  const coulomb::PaddingMask mask = coulomb_nn_test::mask_of(L, {6, 3, 5});
  const coulomb::TokenBatch batch = coulomb_nn_test::make_batch({6, 3, 5}, L, 11, 3, rng);
  const std::vector<Index> rows = {0, 2, 5, 6, 8, 12, 16};
  std::vector<int> targets;
  for (std::size_t r = 0; r < rows.size(); ++r)
    targets.push_back(static_cast<int>((3 * r + 1) % 11));
  const double scale = 0.5;

  Mat<double> logits, dlogits;
  coulomb::Rng dropout(9);
  model.forward_rows(batch.ids, mask, rows, logits, true, dropout);
  const double loss_ref = coulomb::nn::softmax_cross_entropy(logits, targets, dlogits);
  dlogits *= scale;
  model.zero_grad();
  model.backward(dlogits);
  std::vector<Mat<double>> ref;
  for (const auto& p : model.parameters()) ref.push_back(*p.gradient);

  model.zero_grad();
  coulomb::Rng dropout2(9);
  const double loss =
      model.forward_backward_rows(batch.ids, mask, rows, targets, scale, true, dropout2);
  CHECK(std::abs(loss - loss_ref) <= 1e-13 * std::abs(loss_ref));
  const auto params = model.parameters();
  for (std::size_t k = 0; k < params.size(); ++k) {
    INFO("parameter " << params[k].name);
    if (ref[k].norm() == 0.0)
      CHECK(params[k].gradient->norm() == 0.0);
    else
      CHECK(relative(*params[k].gradient, ref[k]) < 1e-12);
  }
  // backward cannot follow it; the classification head has no rows.
  CHECK_THROWS_WITH(model.backward(dlogits), Contains("no forward to differentiate"));
  coulomb::nn::SequenceModelConfig cc = c;
  cc.head = coulomb::nn::SequenceHead::classification;
  cc.num_outputs = 3;
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>> classifier(cc, 31);
  CHECK_THROWS_WITH(
      classifier.forward_backward_rows(batch.ids, mask, rows, targets, 1.0, false, dropout),
      Contains("classification head"));
}

}  // namespace nn_linear_cross_entropy_test
