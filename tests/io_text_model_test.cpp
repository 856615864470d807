// SPDX-License-Identifier: MIT
// Whole text models in one file (io/text_model.hpp): the feature-map registry's names and their
// run-time dispatch; save and load give bit-identical logits, the same vocabulary, encoder
// options, feature-map options and metadata (linear FAVOR+ with per-layer and shared Ω, tied
// Q = K, segments for pairs, softmax attention; PORF-relu with ε in double; RFF with its phases
// and bandwidth in float, RFF cos-sin with a shared Ω in double); loading into the wrong types
// or into a model of another configuration fails naming the field and both values. Models are
// tiny, so all of it is fast. Rejections: io_text_model_reject_test.cpp; layout versions,
// fixtures and FIFOs: io_text_model_versions_test.cpp.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/features/porf.hpp>
#include <coulomb/features/registry.hpp>
#include <coulomb/features/rff.hpp>
#include <coulomb/io/text_model.hpp>

#include "io_text_model_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace io_text_model_test {

using namespace io_text_model_support;

TEST_CASE("text model: feature-map names and their dispatch agree", "[io][text_model]") {
  for (const auto name : io::feature_map_names) {
    INFO(name);
    const std::string_view f32 = io::dispatch_feature_map<float>(name, [](auto tag) {
      using Map = typename decltype(tag)::type;
      static_assert(std::is_same_v<typename Map::Scalar, float>);
      return io::feature_map_name<Map>();
    });
    CHECK(f32 == name);
    const std::string_view both =
        io::dispatch_text_model(io::ScalarType::float64, name, [](auto tag) {
          using Map = typename decltype(tag)::type;
          return std::is_same_v<typename Map::Scalar, double> ? io::feature_map_name<Map>()
                                                              : std::string_view("wrong scalar");
        });
    CHECK(both == name);
  }
  STATIC_REQUIRE(io::feature_map_name<coulomb::FavorPlus<double>>() == "favor");
  STATIC_REQUIRE(io::feature_map_name<coulomb::Porf<float, coulomb::Softplus>>() ==
                 "porf-softplus");
  STATIC_REQUIRE(io::feature_map_name<coulomb::Rff<float>>() == "rff");
  STATIC_REQUIRE(coulomb::feature_map_name<coulomb::RffCosSin<double>>() == "rff-cos-sin");
  STATIC_REQUIRE(!io::is_named_feature_map_v<coulomb::FavorHyperbolic<float>>);
  // Every key has a record in the registry, with the options its map takes.
  for (const auto name : coulomb::feature_map_names) CHECK(coulomb::find_feature_map(name));
  CHECK(coulomb::find_feature_map("porf-relu")->takes_epsilon);
  CHECK_FALSE(coulomb::find_feature_map("porf-exp")->takes_epsilon);
  CHECK(coulomb::find_feature_map("rff")->takes_bandwidth);
  CHECK_FALSE(coulomb::find_feature_map("favor")->takes_bandwidth);
  CHECK_FALSE(coulomb::find_feature_map("favour"));
  CHECK_THAT(thrown<coulomb::invalid_argument>(
                 [&] { (void)io::dispatch_feature_map<float>("favour", [](auto) { return 0; }); }),
             Contains("unknown feature map 'favour'") &&
                 Contains("favor, porf-exp, porf-softplus, porf-relu, softmax-feat"));
  CHECK_THROWS_AS(io::dispatch_scalar(static_cast<io::ScalarType>(7), [](auto) { return 0; }),
                  coulomb::invalid_argument);

  // The spec of a map and the map made from a spec round-trip (ε and the Draw policy).
  coulomb::Rng rng(3);
  const io::FeatureMapSpec spec{"porf-relu", coulomb::Draw::iid, 0.25};
  const auto map = io::make_feature_map<coulomb::Porf<float, coulomb::Relu>>(spec, 4, 6, rng);
  CHECK(map.epsilon() == 0.25);
  CHECK(map.draw_policy() == coulomb::Draw::iid);
  CHECK(io::feature_map_spec(map) == spec);
  CHECK_THAT(thrown<coulomb::invalid_argument>(
                 [&] { (void)io::make_feature_map<coulomb::FavorPlus<float>>(spec, 4, 6, rng); }),
             Contains("'spec.name' is 'porf-relu'") && Contains("the type is 'favor'"));
  // RFF's bandwidth round-trips too.
  const io::FeatureMapSpec rff_spec{"rff", coulomb::Draw::iid, 0.0, 0.5};
  const auto rff = coulomb::make_feature_map<coulomb::Rff<double>>(rff_spec, 4, 6, rng);
  CHECK(rff.bandwidth() == 0.5);
  CHECK(coulomb::feature_map_spec(rff) == rff_spec);
}

TEST_CASE("text model: save and load give bit-identical logits (FAVOR+, float)",
          "[io][text_model]") {
  struct Case {
    const char* name;
    bool shared_omega, tied_qk, pairs;
    AttentionKind attention;
  };
  const Case c =
      GENERATE(Case{"per-layer omega", false, false, false, AttentionKind::linear},
               Case{"shared omega", true, false, false, AttentionKind::linear},
               Case{"tied Q = K, pairs", false, true, true, AttentionKind::linear},
               Case{"softmax attention, pairs", false, false, true, AttentionKind::softmax});
  INFO(c.name);
  const coulomb::Vocabulary vocab = small_vocabulary();
  TextClassifierConfig config = small_config(vocab.size());
  config.shared_omega = c.shared_omega;
  config.tied_qk = c.tied_qk;
  config.use_segments = c.pairs;
  config.attention = c.attention;
  const coulomb::EncoderOptions enc_options{10, c.pairs};
  FavorModel model(config, 11);
  // A "learned" Ω that no seed redraws: the file must hold the values, not a recipe.
  for (Index i = 0; i < model.num_omegas(); ++i) {
    Matrix<float> omega = model.omega(i) * 1.5f;
    omega(0, 0) = 0.1234567f;
    model.set_omega(i, omega);
  }
  const coulomb::TextEncoder encoder(vocab, enc_options);
  const coulomb::TokenBatch batch = encoded_batch(encoder, c.pairs);
  Matrix<float> logits;
  model.forward(batch, logits);

  ScratchDir dir("roundtrip");
  const std::string path = dir.file("model.clmb");
  io::save_text_model(path, model, vocab, enc_options, kMetadata);

  auto loaded = io::load_text_model<coulomb::FavorPlus<float>>(path);
  Matrix<float> again;
  loaded.model.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  require_same_parameters(model, loaded.model);
  CHECK(loaded.vocabulary == vocab);
  CHECK(loaded.header.encoder == enc_options);
  CHECK(loaded.header.metadata == kMetadata);
  CHECK(loaded.header.scalar == io::ScalarType::float32);
  CHECK(loaded.header.source == path);
  CHECK(io::detail::config_entries(loaded.model.config()) ==
        io::detail::config_entries(model.config()));
  if (c.attention == AttentionKind::linear) {
    CHECK(loaded.header.feature_map == io::feature_map_spec(model.feature_map(0)));
    // The layers' maps hold the loaded Ω right after loading (not only after a forward).
    auto fresh = io::load_text_model<coulomb::FavorPlus<float>>(path);
    for (Index l = 0; l < fresh.model.num_layers(); ++l)
      CHECK(bitwise_equal(fresh.model.feature_map(l).omega(), model.omega(model.omega_index(l))));
  }
  // The encoder made from the file encodes as the training encoder did.
  const coulomb::TokenBatch rebatched = encoded_batch(loaded.make_encoder(), c.pairs);
  CHECK((rebatched.ids == batch.ids).all());
  CHECK((rebatched.segments == batch.segments).all());

  // The header alone says what to load it with.
  const io::TextModelHeader header = io::read_text_model_header(path);
  CHECK(header.scalar == io::ScalarType::float32);
  CHECK(header.feature_map.name == "favor");
  CHECK(header.config.d_model == config.d_model);
  CHECK(header.metadata == kMetadata);

  // Loading into an existing model of the same configuration (another seed) gives the same.
  FavorModel other(config, 99);
  const io::TextModelAssets assets = io::load_text_model_into(path, other);
  other.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  CHECK(assets.vocabulary == vocab);

  // Saving is deterministic: the loaded model saves to the same bytes.
  CHECK(io::model_file_bytes(io::text_model_file(loaded.model, loaded.vocabulary,
                                                 loaded.header.encoder, loaded.header.metadata)) ==
        io::model_file_bytes(io::text_model_file(model, vocab, enc_options, kMetadata)));
}

TEST_CASE("text model: PORF-relu in double keeps ε, the Draw policy and the logits",
          "[io][text_model]") {
  const coulomb::Vocabulary vocab = small_vocabulary();
  TextClassifierConfig config = small_config(vocab.size());
  config.shared_omega = true;
  config.train_omega = true;
  coulomb::Rng proto_rng(5);
  const coulomb::Porf<double, coulomb::Relu> prototype(4, config.num_features, proto_rng,
                                                       {coulomb::Draw::iid, 0.25});
  ReluModel model(config, prototype, 21);
  const coulomb::EncoderOptions enc_options{12, false};
  const coulomb::TokenBatch batch = encoded_batch(coulomb::TextEncoder(vocab, enc_options), false);
  Matrix<double> logits, again;
  model.forward(batch, logits);

  ScratchDir dir("relu");
  const std::string path = dir.file("relu.clmb");
  io::save_text_model(path, model, vocab, enc_options);
  CHECK(io::peek_scalar_type(path) == io::ScalarType::float64);
  auto loaded = io::load_text_model<coulomb::Porf<double, coulomb::Relu>>(path);
  loaded.model.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  require_same_parameters(model, loaded.model);
  CHECK(loaded.model.feature_map(0).epsilon() == 0.25);
  CHECK(loaded.model.feature_map(1).draw_policy() == coulomb::Draw::iid);
  CHECK(loaded.model.omega_trainable());
  CHECK(loaded.header.metadata.empty());
  // The run-time thread count can be overridden without changing anything else.
  io::TextModelLoadOptions options;
  options.num_threads = 2;
  auto threaded = io::load_text_model<coulomb::Porf<double, coulomb::Relu>>(path, options);
  CHECK(threaded.model.config().num_threads == 2);
  require_same_parameters(loaded.model, threaded.model);
  // The same Draw policy: redrawing from the same generator gives the same Ω.
  coulomb::Rng r1(8), r2(8);
  model.redraw_omega(r1);
  loaded.model.redraw_omega(r2);
  CHECK(bitwise_equal(model.omega(0), loaded.model.omega(0)));
}

namespace {

/// Saves and loads a model of the RFF map `Map` (Ω and, for Rff, phases set to values no seed
/// redraws) and checks bit-identical logits, parameters, maps, bandwidth and Draw policy.
template <typename Map>
void check_rff_round_trip(const std::string& key, bool shared_omega, double bandwidth,
                          coulomb::Draw draw) {
  using S = typename Map::Scalar;
  INFO(key);
  const coulomb::Vocabulary vocab = small_vocabulary();
  TextClassifierConfig config = small_config(vocab.size());
  config.shared_omega = shared_omega;
  coulomb::Rng proto_rng(6);
  coulomb::RffOptions options;
  options.bandwidth = bandwidth;
  options.draw = draw;
  TextClassifier<Map> model(config, Map(4, config.num_features, proto_rng, options), 23);
  for (auto& p : model.parameters()) {
    if (p.name.ends_with(".omega")) *p.value *= S(1.25);
    if (p.name.ends_with(".phases")) p.value->array() += S(0.5);
  }
  const coulomb::EncoderOptions enc_options{12, false};
  const coulomb::TokenBatch batch = encoded_batch(coulomb::TextEncoder(vocab, enc_options), false);
  Matrix<S> logits, again;
  model.forward(batch, logits);

  ScratchDir dir("rff_" + key);
  const std::string path = dir.file("rff.clmb");
  io::save_text_model(path, model, vocab, enc_options);
  const io::TextModelHeader header = io::read_text_model_header(path);
  CHECK(header.feature_map.name == key);
  CHECK(header.feature_map.bandwidth == bandwidth);
  CHECK(header.feature_map == coulomb::feature_map_spec(model.feature_map(0)));
  CHECK(io::load_model_file<S>(path).metadata_value("feature_map.bandwidth") ==
        io::detail::shortest_decimal(bandwidth));

  auto loaded = io::load_text_model<Map>(path);
  loaded.model.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  require_same_parameters(model, loaded.model);
  for (Index l = 0; l < model.num_layers(); ++l) {
    const Map& saved = model.feature_map(l);
    const Map& read = loaded.model.feature_map(l);
    CHECK(bitwise_equal(read.omega(), saved.omega()));
    // Loaded into the map's own Ω, the one copy (nn_omega_owner_test.cpp).
    CHECK(&loaded.model.omega(loaded.model.omega_index(l)) == &read.omega());
    CHECK(bitwise_equal(Matrix<S>(read.phases()), Matrix<S>(saved.phases())));
    CHECK(read.phases().size() == (Map::has_phases ? config.num_features : 0));
    CHECK(read.bandwidth() == bandwidth);
    CHECK(read.draw_policy() == draw);
  }
  // A program that does not know the types finds them from the key.
  const std::string visited = io::visit_text_model(path, [](auto& m) {
    using Loaded = std::remove_cvref_t<decltype(m.model.feature_map(0))>;
    return std::string(coulomb::feature_map_name<Loaded>());
  });
  CHECK(visited == key);
  // Saving again gives the same bytes.
  CHECK(io::model_file_bytes(io::text_model_file(loaded.model, loaded.vocabulary,
                                                 loaded.header.encoder, loaded.header.metadata)) ==
        io::model_file_bytes(io::text_model_file(model, vocab, enc_options)));
  // Same bandwidth and Draw policy: redrawing from the same generator gives the same Ω.
  coulomb::Rng r1(8), r2(8);
  model.redraw_omega(r1);
  loaded.model.redraw_omega(r2);
  CHECK(bitwise_equal(model.omega(0), loaded.model.omega(0)));
  // A model of another bandwidth is not overwritten.
  options.bandwidth = 2 * bandwidth;
  TextClassifier<Map> other(config, Map(4, config.num_features, proto_rng, options), 5);
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model_into(path, other); }),
             Contains("feature_map.bandwidth is '" + io::detail::shortest_decimal(bandwidth) +
                      "' in the file, the model has '" +
                      io::detail::shortest_decimal(2 * bandwidth) + "'"));
}

}  // namespace

TEST_CASE("text model: RFF with phases and RFF cos-sin give bit-identical logits",
          "[io][text_model]") {
  check_rff_round_trip<coulomb::Rff<float>>("rff", false, 0.7, coulomb::Draw::orthogonal_chi);
  check_rff_round_trip<coulomb::RffCosSin<double>>("rff-cos-sin", true, 2.5, coulomb::Draw::iid);
}

TEST_CASE("text model: an RFF file with a bad bandwidth or non-finite phases is rejected",
          "[io][text_model]") {
  using Map = coulomb::Rff<float>;
  const coulomb::Vocabulary vocab = small_vocabulary();
  const TextClassifierConfig config = small_config(vocab.size());
  coulomb::Rng rng(2);
  const TextClassifier<Map> model(config, Map(4, config.num_features, rng, {0.5}), 1);
  const io::ModelFile<float> good = io::text_model_file(model, vocab, {12, false});
  CHECK_NOTHROW(io::load_text_model<Map>(rebuild(good, {})));
  const std::vector<std::pair<std::function<void(Meta&)>, std::string>> cases = {
      {[](Meta& m) { m.erase("feature_map.bandwidth"); }, "no metadata 'feature_map.bandwidth'"},
      {[](Meta& m) { m["feature_map.bandwidth"] = "0"; }, "'feature_map.bandwidth' is '0'"},
      {[](Meta& m) { m["feature_map.bandwidth"] = "-2"; }, "expected a number > 0"},
      {[](Meta& m) { m["feature_map.bandwidth"] = "inf"; }, "expected a finite number"},
      {[](Meta& m) { m["feature_map.epsilon"] = "0.1"; }, "the map 'rff' has no ε"},
      {[](Meta& m) { m["feature_map.name"] = "rff-cos-sin"; }, "feature map is 'rff-cos-sin'"},
  };
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    const std::string what = thrown<coulomb::io_error>(
        [&] { (void)io::load_text_model<Map>(rebuild(good, cases[k].first)); });
    CHECK_THAT(what, Contains("edited.clmb") && Contains(cases[k].second));
  }
  // Phases must be finite, as Ω must, even where other parameters may not be.
  const std::string phases = "model.encoder.0.attention.phases";
  REQUIRE(good.find_tensor(phases) != nullptr);
  auto poison = [&](const std::string& name, Matrix<float>& value) {
    if (name == phases) value(2, 0) = std::numeric_limits<float>::quiet_NaN();
    return true;
  };
  CHECK_THAT(thrown<coulomb::io_error>(
                 [&] { (void)io::load_text_model<Map>(rebuild(good, {}, {}, poison)); }),
             Contains("tensor '" + phases + "' (a feature map's phases)") &&
                 Contains("non-finite entry nan at (2, 0)"));
}

TEST_CASE("text model: loading into other types or another configuration names the field",
          "[io][text_model]") {
  const coulomb::Vocabulary vocab = small_vocabulary();
  const TextClassifierConfig config = small_config(vocab.size());
  ScratchDir dir("mismatch");
  const std::string favor_path = dir.file("favor.clmb");
  FavorModel model(config, 1);
  io::save_text_model(favor_path, model, vocab, {12, false});

  // Scalar type.
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)(io::load_text_model<coulomb::Porf<double, coulomb::Relu>>(favor_path));
             }),
             Contains(favor_path) && Contains("scalar type is float32 in the file") &&
                 Contains("expects float64"));
  // Feature map.
  using FloatRelu = coulomb::Porf<float, coulomb::Relu>;
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)(io::load_text_model<FloatRelu>(favor_path)); }),
             Contains("feature map is 'favor' in the file") &&
                 Contains("metadata 'feature_map.name'") && Contains("expects 'porf-relu'"));
  // Softmax attention has no feature map: any map type loads it.
  TextClassifierConfig softmax = config;
  softmax.attention = AttentionKind::softmax;
  FavorModel softmax_model(softmax, 2);
  const std::string softmax_path = dir.file("softmax.clmb");
  io::save_text_model(softmax_path, softmax_model, vocab, {12, false});
  auto as_relu = io::load_text_model<FloatRelu>(softmax_path);
  CHECK(as_relu.model.num_omegas() == 0);
  CHECK(as_relu.model.num_parameters() == softmax_model.num_parameters());

  // Another configuration: every differing field, with both values; the model is unchanged.
  TextClassifierConfig wider = config;
  wider.d_ff = 16;
  wider.layer_norm_eps = 1e-6;
  wider.train_omega = true;  // run-time state: not a difference
  FavorModel target(wider, 3);
  const Matrix<float> before = *target.parameters().back().value;
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model_into(favor_path, target); }),
             Contains(favor_path) && Contains("another configuration (2 differences)") &&
                 Contains("config.d_ff is '12' in the file, the model has '16'") &&
                 Contains("config.layer_norm_eps is '1e-05' in the file, the model "
                          "has '1e-06'"));
  CHECK(bitwise_equal(before, *target.parameters().back().value));
  // The same configuration with other feature-map options (the Draw policy).
  coulomb::Rng rng(4);
  FavorModel iid(config,
                 coulomb::FavorPlus<float>(4, config.num_features, rng, {coulomb::Draw::iid}), 3);
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model_into(favor_path, iid); }),
             Contains("feature_map.draw is 'orthogonal_chi' in the file, the model "
                      "has 'iid'"));

  // Saving checks that the parts fit together.
  const coulomb::Vocabulary tiny;  // special tokens only
  CHECK_THAT(thrown<coulomb::invalid_argument>([&] {
               (void)io::save_text_model(dir.file("x.clmb"), model, tiny, {12, false});
             }),
             Contains("'vocabulary' has 4 tokens") && Contains("config.vocab_size"));
  CHECK_THAT(thrown<coulomb::invalid_argument>([&] {
               (void)io::save_text_model(dir.file("x.clmb"), model, vocab, {13, false});
             }),
             Contains("'encoder.max_length' is 13") && Contains("config.max_length = 12"));
  CHECK_THAT(thrown<coulomb::invalid_argument>([&] {
               (void)io::save_text_model(dir.file("x.clmb"), model, vocab, {12, false},
                                         {{"", "empty key"}});
             }),
             Contains("empty key"));
  CHECK_FALSE(fs::exists(dir.file("x.clmb")));
  // A model file that is not a text model.
  io::ModelFile<float> plain;
  plain.set_metadata("model.width", "8");
  io::save_model_file(dir.file("plain.clmb"), plain);
  CHECK_THAT(
      thrown<coulomb::io_error>([&] { (void)io::read_text_model_header(dir.file("plain.clmb")); }),
      Contains("not a text-model file") && Contains("'kind'"));
}

}  // namespace io_text_model_test
