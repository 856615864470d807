// SPDX-License-Identifier: MIT
// The attention block, the encoder layer and the Transformer text classifier with FAVOR+
// features (and, in the same types, exact softmax attention): backward passes of the block and
// the layer against central finite differences, end-to-end gradients against central finite
// differences in double, invariance to padding, reproducibility, the parameter list, the Phase A
// representations, access to Ω, bad input, inference (infer against the evaluation forward),
// and a few optimization steps that fit a small batch;
// the pair head (PairPool's features and backward, the model's gradients with it against finite
// differences, padding invariance, that it tells the two sentences apart, bad configurations).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/phase_a_representations.hpp>
#include <coulomb/nn/text_classifier.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_model_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::PaddingMask;
using coulomb::nn::AttentionKind;
using coulomb::nn::TextClassifierConfig;
using coulomb_nn_test::fd_gradient;
using coulomb_nn_test::fd_tolerance;
using coulomb_nn_test::gradient_error;
using coulomb_nn_test::make_batch;
using coulomb_nn_test::mask_of;
using coulomb_nn_test::weighted_sum;
using coulomb_test::gaussian;
using coulomb_test::Mat;
using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<double>>;

TextClassifierConfig small_config() {
  TextClassifierConfig c;
  c.vocab_size = 16;
  c.max_length = 9;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_layers = 2;
  c.num_classes = 3;
  c.dropout = 0.1;
  c.num_features = 6;
  c.use_segments = true;
  c.num_threads = 1;
  return c;
}

std::map<std::string, coulomb::nn::ParameterRef<double>> by_name(Model& model) {
  std::map<std::string, coulomb::nn::ParameterRef<double>> out;
  for (const auto& p : model.parameters()) out[p.name] = p;
  return out;
}

}  // namespace

namespace {

/// FD check of a MultiHeadAttention block: input, every projection and (linear) Ω.
template <typename Block>
void check_attention_block(Block& block, coulomb::Rng& rng, bool omega) {
  const Index L = 5;
  const PaddingMask mask = mask_of(L, {5, 3});
  Mat<double> X = gaussian(2 * L, block.model_dim(), rng);
  const Mat<double> R = gaussian(2 * L, block.model_dim(), rng);
  Mat<double> Y, dX;
  block.forward(X, mask, Y);
  block.zero_grad();
  block.backward(X, mask, R, dX);
  auto loss = [&] {
    Mat<double> out;
    block.forward(X, mask, out);
    return weighted_sum(R, out);
  };
  CHECK(gradient_error(dX, fd_gradient(X, loss)) < fd_tolerance);
  coulomb::nn::ParameterList<double> params;
  block.append_parameters(params, "");
  for (const auto& p : params) {
    INFO(p.name);
    CHECK(gradient_error(*p.gradient, fd_gradient(*p.value, loss)) < fd_tolerance);
  }
  if (omega) {
    const Mat<double> dOmega = block.last_omega_gradient();
    Mat<double> om = block.feature_map().omega();
    auto omega_loss = [&] {
      block.feature_map().set_omega(om);
      return loss();
    };
    CHECK(gradient_error(dOmega, fd_gradient(om, omega_loss)) < fd_tolerance);
  }
  // Padded rows: zero gradient.
  for (Index t = 3; t < L; ++t) CHECK(dX.row(L + t).isZero(0));
}

}  // namespace

TEST_CASE("NnMultiHeadAttention_BackwardMatchesFiniteDifferences", "[nn][attention]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnMultiHeadAttention_BackwardMatchesFD");
  using Map = coulomb::FavorPlus<double>;
  using Block = coulomb::nn::MultiHeadAttention<double, Map>;
  coulomb::AttentionOptions opt;
  opt.num_heads = 2;
  opt.num_threads = 1;
  const Map map(4, 6, rng);
  SECTION("linear FAVOR+, separate projections, dOmega") {
    Block block(8, map, opt, false);
    block.initialize(rng);
    REQUIRE(block.omega_gradient());
    check_attention_block(block, rng, true);
  }
  SECTION("linear FAVOR+, tied queries and keys") {
    Block block(8, map, opt, true);
    block.initialize(rng);
    check_attention_block(block, rng, true);
    CHECK(&block.keys() == &block.queries());
  }
  SECTION("softmax attention") {
    Block block(8, opt, false);
    block.initialize(rng);
    check_attention_block(block, rng, false);
    CHECK_THROWS_WITH(block.feature_map(), Contains("softmax"));
  }
  SECTION("frozen kernel: no dOmega") {
    Block block(8, map, opt, false);
    block.set_omega_gradient(false);
    CHECK_FALSE(block.omega_gradient());
    block.initialize(rng);
    check_attention_block(block, rng, false);
    CHECK(block.last_omega_gradient().size() == 0);
  }
  SECTION("bad widths") {
    CHECK_THROWS_WITH(Block(9, opt, false), Contains("'d_model'"));
    CHECK_THROWS_WITH(Block(12, map, opt, false), Contains("'map'"));
  }
}

TEST_CASE("NnEncoderLayer_BackwardMatchesFiniteDifferences", "[nn][encoder]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnEncoderLayer_BackwardMatchesFD");
  using Map = coulomb::FavorPlus<double>;
  coulomb::nn::EncoderLayerOptions opt;
  opt.d_model = 8;
  opt.d_ff = 12;
  opt.dropout = 0.2;
  opt.attention.num_heads = 2;
  opt.attention.num_threads = 1;
  coulomb::nn::EncoderLayer<double, Map> layer(opt, Map(4, 6, rng));
  layer.initialize(rng);
  const Index L = 4;
  const PaddingMask mask = mask_of(L, {4, 2, 3});
  Mat<double> X = gaussian(3 * L, 8, rng);
  const Mat<double> R = gaussian(3 * L, 8, rng);
  // No forward yet, or only infer (which keeps nothing): backward refuses.
  Mat<double> x = X, dx0 = R;
  CHECK_THROWS_WITH(layer.backward(dx0, mask), Contains("no forward"));
  layer.infer(x, mask);
  CHECK_THROWS_WITH(layer.backward(dx0, mask), Contains("no forward"));
  // Dropout with a fixed mask: the same generator state at every evaluation.
  auto run = [&](Mat<double>& x) {
    coulomb::Rng dropout_rng(99);
    layer.forward(x, mask, true, dropout_rng);
  };
  x = X;
  run(x);
  layer.zero_grad();
  Mat<double> dx = R;
  layer.backward(dx, mask);
  auto loss = [&] {
    Mat<double> out = X;
    run(out);
    return weighted_sum(R, out);
  };
  CHECK(gradient_error(dx, fd_gradient(X, loss)) < fd_tolerance);
  coulomb::nn::ParameterList<double> params;
  layer.append_parameters(params, "", [](auto&) {});
  CHECK(params.size() == 16);
  for (const auto& p : params) {
    INFO(p.name);
    CHECK(gradient_error(*p.gradient, fd_gradient(*p.value, loss)) < fd_tolerance);
  }
}

TEST_CASE("NnTextClassifier_GradientsMatchFiniteDifferences", "[nn][model][gradient]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_GradientsMatchFD");
  TextClassifierConfig c = small_config();
  const coulomb::TokenBatch batch = make_batch({6, 3, 5}, 6, c.vocab_size, c.num_classes, rng);
  SECTION("FAVOR+, per-layer trainable Omega, segments, dropout with a fixed mask") {
    c.train_omega = true;
    Model model(c, 11);
    CHECK(by_name(model).count("encoder.1.attention.omega") == 1);
    const double worst = coulomb_nn_test::check_model_gradients(model, batch, true);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
  SECTION("exact softmax attention, dropout with a fixed mask") {
    c.attention = AttentionKind::softmax;
    c.use_segments = false;
    Model model(c, 12);
    const double worst = coulomb_nn_test::check_model_gradients(model, batch, true);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
  SECTION("FAVOR+, tied queries and keys, frozen Omega gets no gradient") {
    c.tied_qk = true;
    c.dropout = 0.0;
    c.num_layers = 1;
    Model model(c, 13);
    Mat<double> logits, dlogits;
    model.forward(batch, logits);
    coulomb::nn::softmax_cross_entropy(logits, batch.labels, dlogits);
    model.zero_grad();
    model.backward(dlogits);
    auto params = model.parameters();
    std::vector<Mat<double>> analytic;
    coulomb::nn::ParameterList<double> trainable;
    for (const auto& p : params) {
      if (p.name == "encoder.0.attention.omega") {
        CHECK_FALSE(p.trainable);
        CHECK(p.gradient->isZero(0));
        continue;
      }
      trainable.push_back(p);
      analytic.push_back(*p.gradient);
    }
    const double worst = coulomb_nn_test::check_parameters(
        trainable,
        [&] {
          Mat<double> out;
          model.forward(batch, out);
          return coulomb::nn::softmax_cross_entropy(out, batch.labels);
        },
        analytic);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
}

TEST_CASE("NnTextClassifier_PaddingDoesNotChangeOutputs", "[nn][model]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_PaddingDoesNotChangeOutputs");
  for (const AttentionKind kind : {AttentionKind::linear, AttentionKind::softmax}) {
    INFO("attention " << coulomb::nn::to_string(kind));
    TextClassifierConfig c = small_config();
    c.attention = kind;
    c.train_omega = true;
    Model model(c, 21);
    const coulomb::TokenBatch batch = make_batch({5, 2, 4}, 5, c.vocab_size, c.num_classes, rng);

    // Other content at the padded positions, and more padding.
    coulomb::TokenBatch other = batch;
    for (Index b = 0; b < batch.size(); ++b)
      for (Index t = batch.lengths[static_cast<size_t>(b)]; t < batch.length(); ++t) {
        other.ids(t, b) = static_cast<coulomb::TokenId>(5 + t);
        other.segments(t, b) = 1;
      }
    coulomb::TokenBatch longer = batch;
    longer.ids.setZero(9, 3);
    longer.segments.setZero(9, 3);
    longer.mask.setConstant(9, 3, false);
    longer.ids.topRows(5) = batch.ids;
    longer.segments.topRows(5) = batch.segments;
    longer.mask.topRows(5) = batch.mask;

    auto run = [&](const coulomb::TokenBatch& bt, std::vector<Mat<double>>& grads) {
      Mat<double> logits, dlogits;
      model.forward(bt, logits);
      coulomb::nn::softmax_cross_entropy(logits, bt.labels, dlogits);
      model.zero_grad();
      model.backward(dlogits);
      grads.clear();
      for (const auto& p : model.parameters()) grads.push_back(*p.gradient);
      return logits;
    };
    std::vector<Mat<double>> g0, g1, g2;
    const Mat<double> l0 = run(batch, g0);
    const Mat<double> l1 = run(other, g1);
    const Mat<double> l2 = run(longer, g2);
    CHECK(coulomb_test::rel_diff(l1, l0) < 1e-14);
    CHECK(coulomb_test::rel_diff(l2, l0) < 1e-14);
    for (std::size_t k = 0; k < g0.size(); ++k) {
      INFO("parameter " << k);
      CHECK((g1[k] - g0[k]).norm() <= 1e-13 * std::max(1.0, g0[k].norm()));
      CHECK((g2[k] - g0[k]).norm() <= 1e-13 * std::max(1.0, g0[k].norm()));
    }
  }
}

TEST_CASE("NnTextClassifier_ReproducibleForASeed", "[nn][model]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_ReproducibleForASeed");
  const TextClassifierConfig c = small_config();
  const coulomb::TokenBatch batch = make_batch({4, 6}, 6, c.vocab_size, c.num_classes, rng);
  Model a(c, 5);
  Model b(c, 5);
  Model other(c, 6);
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  const auto po = other.parameters();
  REQUIRE(pa.size() == pb.size());
  bool all_differ = true;
  for (std::size_t k = 0; k < pa.size(); ++k) {
    INFO(pa[k].name);
    CHECK(*pa[k].value == *pb[k].value);
    const bool constant = pa[k].name.find("norm") != std::string::npos ||
                          pa[k].name.find(".b_") != std::string::npos ||
                          pa[k].name.find("bias") != std::string::npos;
    if (!constant && *pa[k].value == *po[k].value) all_differ = false;
  }
  CHECK(all_differ);
  Mat<double> la, lb, lo;
  coulomb::Rng ra(3), rb(3), ro(4);
  a.forward(batch, la, true, ra);
  b.forward(batch, lb, true, rb);
  CHECK(la == lb);
  // Other dropout draws give other logits.
  b.forward(batch, lo, true, ro);
  CHECK(lo != la);
}

// infer computes the evaluation forward's logits with the feed-forward part of every layer in
// blocks of rows (EncoderLayer::infer): the same operations on every entry, so the same bits,
// for any number of rows (here 37 x 13 = 481, three blocks and a ragged last one with one
// thread) and threads; it keeps nothing for backward, which then throws until a forward.
template <typename Scalar>
void check_infer_equals_forward() {
  using FloatModel = coulomb::nn::TextClassifier<coulomb::FavorPlus<Scalar>>;
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_InferGivesTheForwardsLogits");
  std::vector<Index> lengths;
  for (Index b = 0; b < 13; ++b) lengths.push_back(5 + (b * 7) % 33);
  for (const AttentionKind kind : {AttentionKind::linear, AttentionKind::softmax})
    for (const int threads : {1, 2}) {
      INFO("attention " << coulomb::nn::to_string(kind) << ", threads " << threads);
      TextClassifierConfig c = small_config();
      c.attention = kind;
      c.max_length = 40;
      c.d_ff = 20;
      c.num_threads = threads;
      FloatModel model(c, 31);
      const coulomb::TokenBatch batch = make_batch(lengths, 37, c.vocab_size, c.num_classes, rng);
      Mat<Scalar> expected, logits, dlogits;
      model.forward(batch, expected);
      model.infer(batch, logits);
      CHECK(logits == expected);
      coulomb::nn::softmax_cross_entropy(logits, batch.labels, dlogits);
      CHECK_THROWS_WITH(model.backward(dlogits), Contains("no forward"));
      // A forward after infer differentiates again, with the gradients of a fresh model.
      model.forward(batch, logits);
      model.zero_grad();
      model.backward(dlogits);
      FloatModel fresh(c, 31);
      fresh.forward(batch, logits);
      fresh.zero_grad();
      fresh.backward(dlogits);
      const auto pm = model.parameters();
      const auto pf = fresh.parameters();
      for (std::size_t k = 0; k < pm.size(); ++k) {
        INFO(pm[k].name);
        CHECK(*pm[k].gradient == *pf[k].gradient);
      }
    }
}

TEST_CASE("NnTextClassifier_InferGivesTheForwardsLogits", "[nn][model]") {
  SECTION("double") {
    check_infer_equals_forward<double>();
  }
  SECTION("float") {
    check_infer_equals_forward<float>();
  }
}

TEST_CASE("NnTextClassifier_ParameterList", "[nn][model]") {
  TextClassifierConfig c = small_config();
  {
    Model model(c, 1);
    const auto params = model.parameters();
    std::vector<std::string> names;
    for (const auto& p : params) names.push_back(p.name);
    const std::vector<std::string> layer0 = {
        "encoder.0.norm1.gain",    "encoder.0.norm1.bias",      "encoder.0.attention.w_q",
        "encoder.0.attention.b_q", "encoder.0.attention.w_k",   "encoder.0.attention.b_k",
        "encoder.0.attention.w_v", "encoder.0.attention.b_v",   "encoder.0.attention.w_o",
        "encoder.0.attention.b_o", "encoder.0.attention.omega", "encoder.0.norm2.gain",
        "encoder.0.norm2.bias",    "encoder.0.ffn.w_1",         "encoder.0.ffn.b_1",
        "encoder.0.ffn.w_2",       "encoder.0.ffn.b_2"};
    REQUIRE(names.size() == 3 + 2 * layer0.size() + 4);
    CHECK(names[0] == "embedding.token");
    CHECK(names[1] == "embedding.position");
    CHECK(names[2] == "embedding.segment");
    for (std::size_t k = 0; k < layer0.size(); ++k) CHECK(names[3 + k] == layer0[k]);
    CHECK(names[3 + layer0.size()] == "encoder.1.norm1.gain");
    CHECK(names[names.size() - 4] == "final_norm.gain");
    CHECK(names.back() == "classifier.bias");
    CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
    Index total = 0;
    for (const auto& p : params) {
      INFO(p.name);
      REQUIRE(p.value != nullptr);
      REQUIRE(p.gradient != nullptr);
      CHECK(p.gradient->rows() == p.value->rows());
      CHECK(p.gradient->cols() == p.value->cols());
      const bool is_omega = p.name.ends_with("omega");
      const bool no_decay = is_omega || p.name.find("norm") != std::string::npos ||
                            p.name.ends_with("bias") || p.name.find(".b_") != std::string::npos;
      CHECK(p.trainable == !is_omega);
      CHECK(p.decay == !no_decay);
      total += p.value->size();
    }
    CHECK(model.num_parameters() == total);
    const auto named = by_name(model);
    CHECK(named.at("embedding.token").value->rows() == 16);
    CHECK(named.at("embedding.token").value->cols() == 8);
    CHECK(named.at("embedding.position").value->rows() == 9);
    CHECK(named.at("encoder.0.attention.omega").value->rows() == 6);
    CHECK(named.at("encoder.0.attention.omega").value->cols() == 4);
    CHECK(named.at("encoder.0.ffn.w_1").value->rows() == 8);
    CHECK(named.at("encoder.0.ffn.w_1").value->cols() == 12);
    CHECK(named.at("classifier.weight").value->cols() == 3);
    model.set_omega_trainable(true);
    CHECK(by_name(model).at("encoder.1.attention.omega").trainable);
  }
  {
    c.shared_omega = true;
    c.tied_qk = true;
    c.use_segments = false;
    Model model(c, 1);
    const auto named = by_name(model);
    CHECK(named.count("attention.omega") == 1);
    CHECK(named.count("encoder.0.attention.omega") == 0);
    CHECK(named.count("encoder.0.attention.w_k") == 0);
    CHECK(named.count("embedding.segment") == 0);
    CHECK(model.parameters()[2].name == "attention.omega");
  }
  {
    c.attention = AttentionKind::softmax;
    Model model(c, 1);
    for (const auto& p : model.parameters()) CHECK(p.name.find("omega") == std::string::npos);
  }
}

TEST_CASE("NnTextClassifier_PhaseARepresentations", "[nn][model][phase_a]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_PhaseARepresentations");
  const TextClassifierConfig c = small_config();
  Model model(c, 31);
  const coulomb::TokenBatch batch = make_batch({6, 2, 4}, 6, c.vocab_size, c.num_classes, rng);
  const std::vector<Mat<double>> reps = coulomb::nn::phase_a_representations(model, batch);
  REQUIRE(reps.size() == 2);
  CHECK(reps[0].rows() == 3);
  CHECK(reps[0].cols() == 8);

  // Layer 0 by hand from the parameters: embeddings, LN₁, key projection, masked mean, and the
  // scale d_head^{-1/4} = 4^{-1/4}.
  const auto p = by_name(model);
  const Mat<double>& tok = *p.at("embedding.token").value;
  const Mat<double>& pos = *p.at("embedding.position").value;
  const Mat<double>& seg = *p.at("embedding.segment").value;
  const Mat<double>& gain = *p.at("encoder.0.norm1.gain").value;
  const Mat<double>& bias = *p.at("encoder.0.norm1.bias").value;
  const Mat<double>& wk = *p.at("encoder.0.attention.w_k").value;
  const Mat<double>& bk = *p.at("encoder.0.attention.b_k").value;
  const double scale = std::pow(4.0, -0.25);
  for (Index b = 0; b < 3; ++b) {
    coulomb::RowVector<double> sum = coulomb::RowVector<double>::Zero(8);
    const Index n = batch.lengths[static_cast<size_t>(b)];
    for (Index t = 0; t < n; ++t) {
      coulomb::RowVector<double> x =
          tok.row(batch.ids(t, b)) + pos.row(t) + seg.row(batch.segments(t, b));
      const double mean = x.mean();
      const double var = (x.array() - mean).square().mean();
      x = ((x.array() - mean) / std::sqrt(var + c.layer_norm_eps)).matrix();
      x = (x.array() * gain.col(0).transpose().array() + bias.col(0).transpose().array()).matrix();
      sum += x * wk + bk.col(0).transpose();
    }
    const coulomb::RowVector<double> expected = scale * sum / static_cast<double>(n);
    CHECK(coulomb_test::rel_diff(reps[0].row(b), expected) < 1e-13);
  }

  // Eval mode: no dropout, so the representations do not depend on any generator.
  const std::vector<Mat<double>> again = coulomb::nn::phase_a_representations(model, batch);
  CHECK(again[1] == reps[1]);

  const Mat<double> stacked = coulomb::nn::split_heads(reps[0], 2);
  CHECK(stacked.rows() == 6);
  CHECK(stacked.cols() == 4);
  CHECK(stacked.topRows(3) == reps[0].leftCols(4));
  CHECK(stacked.bottomRows(3) == reps[0].rightCols(4));
  CHECK_THROWS_WITH(coulomb::nn::split_heads(reps[0], 3), Contains("'representations'"));
  // Into rows of a larger sample: head h at first_row + h·head_stride.
  Mat<double> sample = Mat<double>::Zero(10, 4);
  coulomb::nn::split_heads_into(reps[0], 2, sample, 1, 5);
  CHECK(sample.middleRows(1, 3) == reps[0].leftCols(4));
  CHECK(sample.middleRows(6, 3) == reps[0].rightCols(4));
  CHECK(sample.row(0).isZero(0));
  CHECK(sample.row(4).isZero(0));
  CHECK_THROWS_WITH(coulomb::nn::split_heads_into(reps[0], 2, sample, 3, 5), Contains("'out'"));
}

TEST_CASE("NnTextClassifier_OmegaAccess", "[nn][model][omega]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_OmegaAccess");
  TextClassifierConfig c = small_config();
  c.dropout = 0.0;
  const coulomb::TokenBatch batch = make_batch({5, 3}, 5, c.vocab_size, c.num_classes, rng);
  {
    Model model(c, 41);
    REQUIRE(model.num_omegas() == 2);
    CHECK(model.omega(0) == model.feature_map(0).omega());
    CHECK(model.omega(1) == model.feature_map(1).omega());
    CHECK(model.omega(0) != model.omega(1));
    Mat<double> before, after;
    model.forward(batch, before);
    const Mat<double> learned = coulomb_test::gaussian(6, 4, rng);
    model.set_omega(1, learned);
    CHECK(model.feature_map(1).omega() == learned);
    CHECK(model.omega(1) == learned);
    model.forward(batch, after);
    CHECK(after != before);

    // Frozen: backward leaves Ω's gradient at zero; trainable: it gets one.
    Mat<double> dlogits;
    coulomb::nn::softmax_cross_entropy(after, batch.labels, dlogits);
    model.zero_grad();
    model.backward(dlogits);
    CHECK(by_name(model).at("encoder.0.attention.omega").gradient->isZero(0));
    model.set_omega_trainable(true);
    model.forward(batch, after);
    model.zero_grad();
    model.backward(dlogits);
    CHECK(by_name(model).at("encoder.0.attention.omega").gradient->norm() > 0.0);

    // An optimizer writes the value, which is the map's own Ω (nn_omega_owner_test.cpp).
    Mat<double>& value = *by_name(model).at("encoder.0.attention.omega").value;
    value(0, 0) += 0.5;
    CHECK(model.feature_map(0).omega() == value);

    const Mat<double> old = model.omega(0);
    coulomb::Rng redraw_rng(3);
    model.redraw_omega(redraw_rng);
    CHECK(model.omega(0) != old);
    CHECK(model.feature_map(0).omega() == model.omega(0));

    CHECK_THROWS_WITH(model.set_omega(0, Mat<double>::Zero(5, 4)), Contains("'omega'"));
    Mat<double> nan = learned;
    nan(2, 2) = std::nan("");
    CHECK_THROWS_WITH(model.set_omega(0, nan), Contains("'omega'"));
    CHECK_THROWS_WITH(model.omega(2), Contains("'i'"));
    CHECK_THROWS_WITH(model.feature_map(2), Contains("'layer'"));
    CHECK_THROWS_WITH(model.layer(-1), Contains("'i'"));
  }
  {
    c.shared_omega = true;
    Model model(c, 42);
    REQUIRE(model.num_omegas() == 1);
    CHECK(model.feature_map(0).omega() == model.feature_map(1).omega());
    const Mat<double> learned = coulomb_test::gaussian(6, 4, rng);
    model.set_omega(0, learned);
    CHECK(model.feature_map(0).omega() == learned);
    CHECK(model.feature_map(1).omega() == learned);
  }
  {
    // A prototype's options are kept; its Ω is redrawn from the seed.
    c.shared_omega = false;
    coulomb::Rng proto_rng(1);
    const coulomb::FavorPlus<double> proto(4, 6, proto_rng, {coulomb::Draw::iid});
    Model model(c, proto, 43);
    CHECK(model.feature_map(0).draw_policy() == coulomb::Draw::iid);
    CHECK(model.omega(0) != proto.omega());
    Model same(c, proto, 43);
    CHECK(same.omega(1) == model.omega(1));
  }
  {
    c.attention = AttentionKind::softmax;
    Model model(c, 44);
    CHECK(model.num_omegas() == 0);
    CHECK_THROWS_WITH(model.omega(0), Contains("softmax"));
    CHECK_THROWS_WITH(model.feature_map(0), Contains("softmax"));
  }
}

TEST_CASE("NnTextClassifier_BadInputThrows", "[nn][model][errors]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_BadInputThrows");
  const TextClassifierConfig good = small_config();
  auto with = [&](auto change) {
    TextClassifierConfig c = good;
    change(c);
    return c;
  };
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.vocab_size = 0; }), 1),
                    Contains("'config.vocab_size'"));
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.d_model = 9; }), 1), Contains("'config.d_model'"));
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.num_classes = 1; }), 1),
                    Contains("'config.num_classes'"));
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.dropout = 1.0; }), 1), Contains("'config.dropout'"));
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.num_layers = 0; }), 1),
                    Contains("'config.num_layers'"));
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.num_features = 0; }), 1),
                    Contains("'config.num_features'"));
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.max_length = 0; }), 1),
                    Contains("'config.max_length'"));
  CHECK_THROWS_AS(Model(with([](auto& c) { c.layer_norm_eps = -1.0; }), 1),
                  coulomb::invalid_argument);
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.num_threads = -1; }), 1),
                    Contains("'config.num_threads'"));
  CHECK_THROWS_WITH(Model(with([](auto& c) { c.num_threads = 1025; }), 1),
                    Contains("'config.num_threads' must be in [0, 1024]"));
  CHECK_NOTHROW(Model(with([](auto& c) { c.num_threads = 1024; }), 1));
  coulomb::Rng proto_rng(1);
  CHECK_THROWS_WITH(Model(good, coulomb::FavorPlus<double>(5, 6, proto_rng), 1),
                    Contains("'prototype'"));
  CHECK_THROWS_WITH(Model(good, coulomb::FavorPlus<double>(4, 7, proto_rng), 1),
                    Contains("'prototype'"));

  Model model(good, 1);
  Mat<double> logits;
  CHECK_THROWS_WITH(model.backward(Mat<double>::Zero(2, 3)), Contains("'dlogits'"));
  const coulomb::TokenBatch batch = make_batch({4, 2}, 4, good.vocab_size, good.num_classes, rng);
  auto bad = batch;
  bad.ids(1, 1) = 16;
  CHECK_THROWS_WITH(model.forward(bad, logits), Contains("'batch.ids'") && Contains("(1, 1)"));
  bad = batch;
  bad.ids(0, 0) = -2;
  CHECK_THROWS_WITH(model.forward(bad, logits), Contains("'batch.ids'"));
  bad = make_batch({10}, 10, good.vocab_size, good.num_classes, rng);
  CHECK_THROWS_WITH(model.forward(bad, logits), Contains("'batch.ids'") && Contains("max_length"));
  bad = batch;
  bad.mask.resize(3, 2);
  CHECK_THROWS_WITH(model.forward(bad, logits), Contains("'batch.mask'"));
  bad = batch;
  bad.segments(0, 1) = 2;
  CHECK_THROWS_WITH(model.forward(bad, logits), Contains("'batch.segments'"));
  bad = batch;
  bad.segments.resize(4, 1);
  CHECK_THROWS_WITH(model.forward(bad, logits), Contains("'batch.segments'"));
  coulomb::TokenBatch empty;
  CHECK_THROWS_WITH(model.forward(empty, logits), Contains("'batch.ids'"));

  model.forward(batch, logits);
  CHECK_THROWS_WITH(model.backward(Mat<double>::Zero(3, 3)), Contains("'dlogits'"));
  Mat<double> nan = Mat<double>::Zero(2, 3);
  nan(0, 0) = std::nan("");
  CHECK_THROWS_WITH(model.backward(nan), Contains("'dlogits'"));
}

TEST_CASE("NnPairPool_FeaturesAndBackward", "[nn][model][pair]") {
  // f = [u, v, |u - v|, u * v] from the per-segment means, and its backward against central
  // differences of a weighted sum, with a sequence whose first segment is empty.
  coulomb::Rng rng = coulomb_test::test_rng("NnPairPool_FeaturesAndBackward");
  const Index L = 6, d = 3;
  const PaddingMask mask = mask_of(L, {6, 4, 1});
  // Segment 1 on the second half of each sequence (all of a 1-token one), 1 at some padding.
  std::vector<std::int32_t> segments(static_cast<std::size_t>(3 * L), 0);
  const std::vector<Index> lengths = {6, 4, 1};
  for (Index b = 0; b < 3; ++b)
    for (Index t = 0; t < L; ++t)
      segments[static_cast<std::size_t>(b * L + t)] =
          (t >= lengths[static_cast<std::size_t>(b)] / 2) ? 1 : 0;
  Mat<double> X = gaussian(3 * L, d, rng);
  coulomb::nn::PairPool<double> pool;
  Mat<double> F;
  pool.forward(X, mask, segments, F);
  REQUIRE(F.rows() == 3);
  REQUIRE(F.cols() == 4 * d);
  for (Index b = 0; b < 3; ++b) {
    Mat<double> u = Mat<double>::Zero(1, d), v = Mat<double>::Zero(1, d);
    Index nu = 0, nv = 0;
    for (Index t = 0; t < lengths[static_cast<std::size_t>(b)]; ++t) {
      if (segments[static_cast<std::size_t>(b * L + t)] == 0) {
        u += X.row(b * L + t);
        ++nu;
      } else {
        v += X.row(b * L + t);
        ++nv;
      }
    }
    if (nu > 0) u /= static_cast<double>(nu);
    if (nv > 0) v /= static_cast<double>(nv);
    INFO("sequence " << b);
    CHECK((F.block(b, 0, 1, d) - u).norm() < 1e-14);
    CHECK((F.block(b, d, 1, d) - v).norm() < 1e-14);
    CHECK((F.block(b, 2 * d, 1, d) - (u - v).cwiseAbs()).norm() < 1e-14);
    CHECK((F.block(b, 3 * d, 1, d) - u.cwiseProduct(v)).norm() < 1e-14);
  }
  CHECK(F.block(2, 0, 1, d).isZero(0));  // the 1-token sequence has no first sentence

  const Mat<double> R = gaussian(3, 4 * d, rng);
  Mat<double> dX;
  pool.backward(R, mask, segments, dX);
  const Mat<double> fd = fd_gradient(X, [&] {
    coulomb::nn::PairPool<double> p;
    Mat<double> out;
    p.forward(X, mask, segments, out);
    return weighted_sum(R, out);
  });
  CHECK(gradient_error(dX, fd) < fd_tolerance);
  for (Index b = 0; b < 3; ++b)  // padding rows get nothing
    for (Index t = lengths[static_cast<std::size_t>(b)]; t < L; ++t)
      CHECK(dX.row(b * L + t).isZero(0));

  CHECK_THROWS_WITH(pool.forward(X, mask, std::span(segments).first(5), F), Contains("'segments'"));
  CHECK_THROWS_WITH(pool.backward(Mat<double>::Zero(3, d), mask, segments, dX), Contains("'dF'"));
}

TEST_CASE("NnPairAlignment_FeaturesAndBackward", "[nn][model][pair]") {
  // a_b: mean over sentence-1 tokens of the best cosine with a sentence-2 token (and the
  // reverse); 1 when a sentence's tokens all occur in the other; the backward against central
  // differences (away from ties of the max, which random rows do not have).
  coulomb::Rng rng = coulomb_test::test_rng("NnPairAlignment_FeaturesAndBackward");
  const Index L = 6, d = 4;
  const std::vector<Index> lengths = {6, 5, 1};
  const PaddingMask mask = mask_of(L, lengths);
  std::vector<std::int32_t> segments(static_cast<std::size_t>(3 * L), 0);
  for (Index b = 0; b < 3; ++b)
    for (Index t = 0; t < L; ++t)
      segments[static_cast<std::size_t>(b * L + t)] =
          (t >= lengths[static_cast<std::size_t>(b)] / 2) ? 1 : 0;
  Mat<double> X = gaussian(3 * L, d, rng);
  // Sequence 0: sentence 2 (rows 3..5) repeats sentence 1 (rows 0..2) in another order and
  // scale, so that both of its features are 1.
  X.row(3) = 2.0 * X.row(1);
  X.row(4) = 0.5 * X.row(0);
  X.row(5) = X.row(2);
  coulomb::nn::PairAlignment<double> align;
  Mat<double> A;
  align.forward(X, mask, segments, A);
  REQUIRE(A.rows() == 3);
  REQUIRE(A.cols() == 2);
  CHECK(A(0, 0) == Approx(1.0).epsilon(1e-12));
  CHECK(A(0, 1) == Approx(1.0).epsilon(1e-12));
  CHECK(A(2, 0) == 0.0);  // the 1-token sequence has no first sentence
  CHECK(A(2, 1) == 0.0);
  // Sequence 1 by hand: tokens 0..1 against 2..4.
  auto cosine = [&](Index i, Index j) {
    return X.row(i).dot(X.row(j)) / X.row(i).norm() / X.row(j).norm();
  };
  double a = 0.0, b = 0.0;
  for (Index i = 0; i < 2; ++i) {
    double best = -2.0;
    for (Index j = 2; j < 5; ++j) best = std::max(best, cosine(L + i, L + j));
    a += best / 2.0;
  }
  for (Index j = 2; j < 5; ++j) {
    double best = -2.0;
    for (Index i = 0; i < 2; ++i) best = std::max(best, cosine(L + i, L + j));
    b += best / 3.0;
  }
  CHECK(A(1, 0) == Approx(a).epsilon(1e-12));
  CHECK(A(1, 1) == Approx(b).epsilon(1e-12));

  Mat<double> Y = gaussian(3 * L, d, rng);  // no exact matches: the max has no ties
  const Mat<double> R = gaussian(3, 2, rng);
  Mat<double> dY;
  align.forward(Y, mask, segments, A);
  align.backward(R, mask, segments, dY);
  const Mat<double> fd = fd_gradient(Y, [&] {
    coulomb::nn::PairAlignment<double> p;
    Mat<double> out;
    p.forward(Y, mask, segments, out);
    return weighted_sum(R, out);
  });
  CHECK(gradient_error(dY, fd) < fd_tolerance);
  CHECK_THROWS_WITH(align.backward(Mat<double>::Zero(3, 3), mask, segments, dY), Contains("'dA'"));
}

TEST_CASE("NnTextClassifier_PairHead", "[nn][model][pair]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_PairHead");
  TextClassifierConfig c = small_config();
  c.pooling = coulomb::nn::PoolingKind::pair;
  const coulomb::TokenBatch batch = make_batch({6, 3, 5, 1}, 6, c.vocab_size, c.num_classes, rng);

  SECTION("gradients match finite differences: hidden layer, dropout with a fixed mask") {
    c.pair_hidden = 5;
    c.train_omega = true;
    c.num_layers = 1;  // two layers with per-layer Ω: NnTextClassifier_GradientsMatchFD
    Model model(c, 61);
    const auto params = by_name(model);
    REQUIRE(params.count("pair_head.hidden.weight") == 1);
    CHECK(params.at("pair_head.hidden.weight").value->rows() == 4 * c.d_model);
    CHECK(params.at("pair_head.hidden.weight").value->cols() == 5);
    CHECK(params.at("classifier.weight").value->rows() == 5);
    const double worst = coulomb_nn_test::check_model_gradients(model, batch, true);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
  SECTION("gradients match finite differences: alignment features, hidden layer") {
    c.pair_hidden = 3;
    c.pair_alignment = true;
    c.num_layers = 1;
    c.train_omega = true;
    Model model(c, 65);
    CHECK(by_name(model).at("pair_head.hidden.weight").value->rows() == 4 * c.d_model + 2);
    const double worst = coulomb_nn_test::check_model_gradients(model, batch, true);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
  SECTION("gradients match finite differences: overlap and alignment features, linear head") {
    c.pair_alignment = true;
    c.pair_overlap = true;
    c.num_layers = 1;
    c.train_omega = true;
    Model model(c, 66);
    const auto params = by_name(model);
    CHECK(params.at("classifier.weight").value->rows() == 4 * c.d_model + 2 + 6);
    REQUIRE(params.count("pair_head.overlap.shift") == 1);
    CHECK_FALSE(params.at("pair_head.overlap.shift").trainable);
    CHECK_FALSE(params.at("pair_head.overlap.scale").trainable);
    Eigen::ArrayXd mean(6), sd(6);
    mean << 0.6, 0.5, 0.4, 0.45, 0.3, 0.2;
    sd << 0.15, 0.2, 0.25, 0.1, 0.3, 0.0;  // an sd of 0 only centres
    model.set_overlap_standardization(mean, sd);
    CHECK((*params.at("pair_head.overlap.scale").value)(5, 0) == 1.0);
    CHECK((*params.at("pair_head.overlap.scale").value)(0, 0) == Approx(1.0 / 0.15));
    coulomb::TokenBatch with_overlap = batch;
    with_overlap.overlap.resize(batch.size(), 6);
    coulomb::fill_uniform(with_overlap.overlap, 0.0, 1.0, rng);
    // Every parameter, the (fixed) standardization included, has its exact gradient.
    const double worst = coulomb_nn_test::check_model_gradients(model, with_overlap, true);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
  SECTION("the overlap features reach the logits; a batch must carry them") {
    c.pair_overlap = true;
    Model model(c, 67);
    coulomb::TokenBatch with_overlap = batch;
    with_overlap.overlap = Eigen::ArrayXXd::Constant(batch.size(), 6, 0.5);
    Mat<double> l0, l1;
    model.forward(with_overlap, l0);
    with_overlap.overlap(1, 3) = 0.9;
    model.forward(with_overlap, l1);
    CHECK(coulomb_test::rel_diff(l1.row(1), l0.row(1)) > 1e-6);
    CHECK(l1.row(0) == l0.row(0));
    CHECK_THROWS_WITH(model.forward(batch, l0), Contains("'batch.overlap' is 0x0, expected 4x6"));
    with_overlap.overlap(2, 0) = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH(model.forward(with_overlap, l0), Contains("'batch.overlap' holds a value"));
  }
  SECTION("gradients match finite differences: linear head, softmax attention, one layer") {
    c.attention = AttentionKind::softmax;
    c.num_layers = 1;
    Model model(c, 62);
    const auto params = by_name(model);
    CHECK(params.count("pair_head.hidden.weight") == 0);
    CHECK(params.at("classifier.weight").value->rows() == 4 * c.d_model);
    const double worst = coulomb_nn_test::check_model_gradients(model, batch, true);
    INFO("largest relative error " << worst);
    CHECK(worst < coulomb_nn_test::fd_tolerance);
  }
  SECTION("padding, whatever its ids and segment ids, changes nothing") {
    c.pair_hidden = 4;
    Model model(c, 63);
    coulomb::TokenBatch other = batch;
    for (Index b = 0; b < batch.size(); ++b)
      for (Index t = batch.lengths[static_cast<std::size_t>(b)]; t < batch.length(); ++t) {
        other.ids(t, b) = static_cast<coulomb::TokenId>(5 + t);
        other.segments(t, b) = t % 2;
      }
    Mat<double> l0, l1;
    model.forward(batch, l0);
    model.forward(other, l1);
    CHECK(coulomb_test::rel_diff(l1, l0) < 1e-14);
  }
  SECTION(
      "the head compares the sentences: moving a token to the other sentence changes the "
      "logits, which mean pooling over both would not see") {
    c.num_layers = 1;
    c.dropout = 0.0;
    Model model(c, 64);
    coulomb::TokenBatch moved = batch;
    moved.segments(2, 0) = 1 - moved.segments(2, 0);
    // Without segment embeddings' effect: the same embedding for both segments.
    auto params = by_name(model);
    Mat<double>& seg = *params.at("embedding.segment").value;
    seg.row(1) = seg.row(0);
    Mat<double> l0, l1;
    model.forward(batch, l0);
    model.forward(moved, l1);
    CHECK(coulomb_test::rel_diff(l1, l0) > 1e-6);
    TextClassifierConfig mean_config = c;
    mean_config.pooling = coulomb::nn::PoolingKind::mean;
    Model mean_model(mean_config, 64);
    auto mean_params = by_name(mean_model);
    Mat<double>& mean_seg = *mean_params.at("embedding.segment").value;
    mean_seg.row(1) = mean_seg.row(0);
    mean_model.forward(batch, l0);
    mean_model.forward(moved, l1);
    CHECK(coulomb_test::rel_diff(l1, l0) < 1e-14);
  }
  SECTION("invalid configurations are rejected, naming the field") {
    TextClassifierConfig bad = c;
    bad.use_segments = false;
    CHECK_THROWS_WITH(Model(bad, 1), Contains("'config.pooling'"));
    bad = c;
    bad.pair_hidden = -1;
    CHECK_THROWS_WITH(Model(bad, 1), Contains("'config.pair_hidden'"));
    bad = small_config();
    bad.pair_hidden = 3;
    CHECK_THROWS_WITH(Model(bad, 1), Contains("'config.pair_hidden'"));
    bad = small_config();
    bad.pair_alignment = true;
    CHECK_THROWS_WITH(Model(bad, 1), Contains("'config.pair_alignment'"));
    bad = small_config();
    bad.pair_overlap = true;
    CHECK_THROWS_WITH(Model(bad, 1), Contains("'config.pair_overlap'"));
  }
}

TEST_CASE("NnTextClassifier_GradientStepsFitASmallBatch", "[nn][model]") {
  // The loss of a small batch falls under plain gradient descent on every trainable parameter,
  // for linear and softmax attention: forward, loss, backward and the parameter list work
  // together.
  coulomb::Rng rng = coulomb_test::test_rng("NnTextClassifier_GradientStepsFitASmallBatch");
  for (const AttentionKind kind : {AttentionKind::linear, AttentionKind::softmax}) {
    INFO("attention " << coulomb::nn::to_string(kind));
    TextClassifierConfig c = small_config();
    c.attention = kind;
    c.dropout = 0.0;
    Model model(c, 51);
    const coulomb::TokenBatch batch =
        make_batch({6, 3, 5, 4, 6, 2}, 6, c.vocab_size, c.num_classes, rng);
    Mat<double> logits, dlogits;
    double first = 0.0;
    double last = 0.0;
    auto params = model.parameters();
    for (int step = 0; step < 80; ++step) {
      model.forward(batch, logits);
      last = coulomb::nn::softmax_cross_entropy(logits, batch.labels, dlogits);
      if (step == 0) first = last;
      model.zero_grad();
      model.backward(dlogits);
      for (auto& p : params)
        if (p.trainable) *p.value -= 0.1 * *p.gradient;
    }
    INFO("loss " << first << " -> " << last);
    CHECK(last < 0.25 * first);
  }
}

}  // namespace nn_model_test
