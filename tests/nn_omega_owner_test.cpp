// SPDX-License-Identifier: MIT
// Ω has one owner (issue 21): the feature map of the encoder (one map per layer, or one map
// shared by every layer) holds Ω, and the model's parameter views of Ω (and of RFF phases) are
// that storage, not a copy. Checked by data pointers and by writes through each side, for
// per-layer and shared Ω, after an optimizer step, through a copy of the model and a move.
// A change that gives the model a second copy of Ω fails here.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/features/rff.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/text_classifier.hpp>
#include <coulomb/train/adamw.hpp>

#include "nn_support.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_omega_owner_test {

namespace {

using coulomb::Index;
using coulomb::nn::TextClassifierConfig;
using coulomb_test::Mat;

TextClassifierConfig small_config(bool shared) {
  TextClassifierConfig c;
  c.vocab_size = 16;
  c.max_length = 8;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_layers = 3;
  c.num_classes = 2;
  c.dropout = 0.0;
  c.num_features = 6;
  c.shared_omega = shared;
  c.train_omega = true;
  c.num_threads = 1;
  return c;
}

/// The parameters of `model` whose names end with `suffix` (".omega", ".phases"), in order.
template <typename Model>
std::vector<coulomb::nn::ParameterRef<typename Model::FeatureMapType::Scalar>> views(
    Model& model, const std::string& suffix) {
  std::vector<coulomb::nn::ParameterRef<typename Model::FeatureMapType::Scalar>> out;
  for (const auto& p : model.parameters())
    if (p.name.size() > suffix.size() && p.name.ends_with(suffix)) out.push_back(p);
  return out;
}

/// Every layer's attention uses the model's map of its Ω, every Ω view is that map's storage,
/// and layers that share Ω share one map object.
template <typename Model>
void require_one_copy(Model& model) {
  const auto omegas = views(model, ".omega");
  REQUIRE(static_cast<Index>(omegas.size()) == model.num_omegas());
  for (Index l = 0; l < model.num_layers(); ++l) {
    INFO("layer " << l);
    const auto k = static_cast<std::size_t>(model.omega_index(l));
    const auto& map = model.feature_map(l);
    CHECK(&model.layer(l).attention().feature_map() == &map);
    CHECK(model.layer(l).attention().borrows_feature_map());
    CHECK(omegas[k].value == &model.omega(static_cast<Index>(k)));
    CHECK(omegas[k].value->data() == map.omega().data());
    if (l > 0 && model.omega_index(l) == model.omega_index(l - 1))
      CHECK(&model.feature_map(l - 1) == &map);
  }
}

}  // namespace

TEST_CASE("NnOmegaOwner_ParameterViewIsTheMapsStorage", "[nn][model][omega]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnOmegaOwner_ParameterViewIsTheMapsStorage");
  using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<double>>;
  for (const bool shared : {false, true}) {
    INFO("shared " << shared);
    const TextClassifierConfig c = small_config(shared);
    Model model(c, 5);
    REQUIRE(model.num_omegas() == (shared ? 1 : 3));
    require_one_copy(model);

    // A write through the view is the map's Ω at once; set_omega is seen through the view.
    const auto omegas = views(model, ".omega");
    const Index last = model.num_layers() - 1;
    Mat<double>& view = *omegas.back().value;
    view(1, 2) = 0.75;
    CHECK(model.feature_map(last).omega()(1, 2) == 0.75);
    CHECK(model.omega(model.num_omegas() - 1)(1, 2) == 0.75);
    const Mat<double> learned = coulomb_test::gaussian(6, 4, rng);
    model.set_omega(model.num_omegas() - 1, learned);
    CHECK(view == learned);
    CHECK(model.feature_map(last).omega() == learned);
    require_one_copy(model);
  }
}

TEST_CASE("NnOmegaOwner_TrainingUpdatesTheOneCopy", "[nn][model][omega]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnOmegaOwner_TrainingUpdatesTheOneCopy");
  using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<double>>;
  for (const bool shared : {false, true}) {
    INFO("shared " << shared);
    const TextClassifierConfig c = small_config(shared);
    const coulomb::TokenBatch batch =
        coulomb_nn_test::make_batch({6, 3, 8}, 8, c.vocab_size, c.num_classes, rng);
    Model model(c, 7);
    const Mat<double> before = model.omega(0);
    Mat<double> logits, dlogits;
    model.forward(batch, logits);
    coulomb::nn::softmax_cross_entropy(logits, batch.labels, dlogits);
    model.zero_grad();
    model.backward(dlogits);
    coulomb::train::AdamW<double> optimizer;
    optimizer.step(model.parameters(), 1e-2);
    require_one_copy(model);
    CHECK(model.feature_map(0).omega() != before);

    // The next forward uses the stepped Ω: the logits of a model given it by set_omega.
    Model reference(c, 7);
    const auto from = model.parameters();
    const auto to = reference.parameters();
    for (std::size_t i = 0; i < from.size(); ++i) *to[i].value = *from[i].value;
    Mat<double> stepped, expected;
    model.forward(batch, stepped);
    reference.forward(batch, expected);
    CHECK(stepped == expected);
  }
}

TEST_CASE("NnOmegaOwner_CopiesAndMovesKeepOneCopyEach", "[nn][model][omega]") {
  coulomb::Rng rng = coulomb_test::test_rng("NnOmegaOwner_CopiesAndMovesKeepOneCopyEach");
  using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<double>>;
  for (const bool shared : {false, true}) {
    INFO("shared " << shared);
    const TextClassifierConfig c = small_config(shared);
    const coulomb::TokenBatch batch =
        coulomb_nn_test::make_batch({5, 8}, 8, c.vocab_size, c.num_classes, rng);
    Model model(c, 9);
    Model copy = model;
    require_one_copy(copy);
    for (Index l = 0; l < model.num_layers(); ++l)
      CHECK(&copy.feature_map(l) != &model.feature_map(l));
    Mat<double> original, copied;
    model.forward(batch, original);
    copy.forward(batch, copied);
    CHECK(copied == original);

    // Ω of the copy changes alone.
    const Mat<double> kept = model.omega(0);
    copy.set_omega(0, coulomb_test::gaussian(6, 4, rng));
    CHECK(model.omega(0) == kept);
    copy.forward(batch, copied);
    CHECK(copied != original);

    // Copy assignment rebinds too; a move keeps the maps where they are.
    copy = model;
    require_one_copy(copy);
    CHECK(copy.omega(0) == kept);
    const double* storage = model.omega(0).data();
    Model moved = std::move(model);
    require_one_copy(moved);
    CHECK(moved.omega(0).data() == storage);
  }
}

TEST_CASE("NnOmegaOwner_RffPhasesAreTheMapsStorage", "[nn][model][omega]") {
  using Model = coulomb::nn::TextClassifier<coulomb::Rff<float>>;
  for (const bool shared : {false, true}) {
    INFO("shared " << shared);
    Model model(small_config(shared), 11);
    require_one_copy(model);
    const auto phases = views(model, ".phases");
    REQUIRE(static_cast<Index>(phases.size()) == model.num_omegas());
    for (Index l = 0; l < model.num_layers(); ++l) {
      const auto k = static_cast<std::size_t>(model.omega_index(l));
      CHECK(phases[k].value->data() == model.feature_map(l).phases().data());
      CHECK(phases[k].value->rows() == 6);
      CHECK(phases[k].value->cols() == 1);
    }
    (*phases[0].value)(3, 0) = 1.25f;
    CHECK(model.feature_map(0).phases()(3) == 1.25f);
  }
}

}  // namespace nn_omega_owner_test
