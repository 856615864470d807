// SPDX-License-Identifier: MIT
// Whole text models in one file (io/text_model.hpp): the feature-map names and their run-time
// dispatch; save and load give bit-identical logits, the same vocabulary, encoder options,
// feature-map options and metadata (linear FAVOR+ with per-layer and shared Ω, tied Q = K,
// segments for pairs, softmax attention; PORF-relu with ε in double); loading into the wrong
// types or into a model of another configuration fails naming the field and both values; a
// file whose container is valid but whose text-model content is not (every field, the
// vocabulary, the tensors) is rejected naming what is wrong; damaged bytes in the metadata,
// the vocabulary and a parameter tensor, and truncation at many offsets, are rejected without
// a crash (this test also runs under ASan and UBSan). Models are tiny, so all of it is fast.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/features/porf.hpp>
#include <coulomb/io/crc32c.hpp>
#include <coulomb/io/model_file.hpp>
#include <coulomb/io/text_model.hpp>
#include <coulomb/nn/text_classifier.hpp>
#include <coulomb/text/batching.hpp>
#include <coulomb/text/encoder.hpp>
#include <coulomb/text/vocabulary.hpp>

#include "fifo_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace io_text_model_test {

namespace {

namespace fs = std::filesystem;
namespace io = coulomb::io;
using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::Matrix;
using coulomb::nn::AttentionKind;
using coulomb::nn::TextClassifier;
using coulomb::nn::TextClassifierConfig;
using FavorModel = TextClassifier<float, coulomb::FavorPlus<float>>;
using ReluModel = TextClassifier<double, coulomb::Porf<double, coulomb::Relu>>;
using Bytes = std::vector<std::byte>;

/// A fresh, empty directory under the system's temporary directory, removed at the end.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name) {
    path = fs::temp_directory_path() / ("coulomb_text_model_test_" + name);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

const std::vector<std::string> kTexts = {"the movie was great", "a dull , boring film",
                                         "great acting and a fine story", "not good at all",
                                         "the story was fine but the acting was dull"};

/// The vocabulary of kTexts: 4 special tokens and the words.
coulomb::Vocabulary small_vocabulary() {
  coulomb::VocabularyBuilder builder;
  for (const auto& t : kTexts) builder.add_text(t);
  return builder.build();
}

TextClassifierConfig small_config(Index vocab_size) {
  TextClassifierConfig c;
  c.vocab_size = vocab_size;
  c.max_length = 12;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_layers = 2;
  c.num_classes = 2;
  c.dropout = 0.1;
  c.num_features = 6;
  c.num_threads = 1;
  return c;
}

/// kTexts encoded (as pairs of consecutive texts with `pairs`) into one padded batch.
coulomb::TokenBatch encoded_batch(const coulomb::TextEncoder& encoder, bool pairs) {
  coulomb::TextDataset data;
  data.is_pair = pairs;
  for (std::size_t i = 0; i < kTexts.size(); ++i) {
    coulomb::TextExample ex;
    ex.text_a = kTexts[i];
    if (pairs) ex.text_b = kTexts[(i + 1) % kTexts.size()];
    ex.label = static_cast<int>(i % 2);
    data.examples.push_back(ex);
  }
  const coulomb::EncodedDataset enc = encoder.encode(data);
  std::vector<Index> all(static_cast<std::size_t>(enc.size()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<Index>(i);
  coulomb::TokenBatch batch;
  coulomb::make_batch(enc, all, batch);
  return batch;
}

template <typename S>
bool bitwise_equal(const Matrix<S>& a, const Matrix<S>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         (a.size() == 0 ||
          std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(S)) == 0);
}

/// Every parameter of `a` and `b`: same names, order and bits.
template <typename Model>
void require_same_parameters(Model& a, Model& b) {
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t k = 0; k < pa.size(); ++k) {
    INFO("parameter " << pa[k].name);
    CHECK(pa[k].name == pb[k].name);
    CHECK(pa[k].trainable == pb[k].trainable);
    CHECK(bitwise_equal(*pa[k].value, *pb[k].value));
  }
}

template <typename S>
std::span<const std::byte> as_span(const Bytes& b) {
  return {b.data(), b.size()};
}

/// Recomputes the CRC-32C trailer of a model-file image (to get damaged content past the
/// container's checksum, to the text-model checks behind it).
void fix_checksum(Bytes& image) {
  const std::size_t end = image.size() - 4;
  const std::uint32_t crc = coulomb::io::crc32c(std::span<const std::byte>(image.data(), end));
  for (std::size_t i = 0; i < 4; ++i) image[end + i] = static_cast<std::byte>(crc >> (8 * i));
}

/// Offset of the first occurrence of `needle` in `image` (REQUIREd to exist).
std::size_t find_bytes(const Bytes& image, std::string_view needle) {
  const auto it = std::search(image.begin(), image.end(), needle.begin(), needle.end(),
                              [](std::byte b, char c) { return b == static_cast<std::byte>(c); });
  REQUIRE(it != image.end());
  return static_cast<std::size_t>(it - image.begin());
}

/// A copy of `file` with its metadata passed through `edit_metadata`, its blobs through
/// `edit_blob` (return false to drop one), and its tensors through `edit_tensor` (idem).
using S = float;
io::ModelFile<S> rebuild(
    const io::ModelFile<S>& file,
    const std::function<void(std::map<std::string, std::string>&)>& edit_metadata,
    const std::function<bool(const std::string&, std::string&)>& edit_blob = {},
    const std::function<bool(const std::string&, Matrix<S>&)>& edit_tensor = {}) {
  std::map<std::string, std::string> meta(file.metadata().begin(), file.metadata().end());
  if (edit_metadata) edit_metadata(meta);
  io::ModelFile<S> out("edited.clmb");
  for (const auto& [k, v] : meta) out.set_metadata(k, v);
  for (const auto& b : file.blobs()) {
    std::string bytes = b.bytes;
    if (!edit_blob || edit_blob(b.name, bytes)) out.add_blob(b.name, bytes);
  }
  for (const auto& t : file.tensors()) {
    Matrix<S> value = t.value;
    if (!edit_tensor || edit_tensor(t.name, value)) out.add_tensor(t.name, std::move(value));
  }
  return out;
}

/// The message of the exception of type E that `f` throws, or a note that it threw none (an
/// exception of another type propagates and fails the test).
template <typename E, typename F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

/// One edit of a file's metadata and a part of the message that loading the edited file must
/// give.
using Meta = std::map<std::string, std::string>;
using MetadataEdit = std::pair<std::function<void(Meta&)>, std::string>;

/// Checks that every edit of `file` in `cases` makes loading it fail with an io_error that
/// names the edited file and holds the case's message.
void check_edits_rejected(const io::ModelFile<float>& file,
                          const std::vector<MetadataEdit>& cases) {
  for (std::size_t k = 0; k < cases.size(); ++k) {
    INFO("case " << k);
    const std::string what = thrown<coulomb::io_error>([&] {
      (void)io::load_text_model<float, coulomb::FavorPlus<float>>(rebuild(file, cases[k].first));
    });
    INFO(what);
    CHECK_THAT(what, Contains("edited.clmb") && Contains(cases[k].second));
  }
}

const io::TextModelMetadata kMetadata = {{"dataset", "rotten_tomatoes"},
                                         {"kernel", "learned"},
                                         {"seed", "7"},
                                         {"metrics", "{\"accuracy\": 0.75}"},
                                         {"odd", std::string("tab\tnew\nline\0nul", 17)}};

}  // namespace

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
  STATIC_REQUIRE(!io::is_named_feature_map_v<coulomb::FavorHyperbolic<float>>);
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

  auto loaded = io::load_text_model<float, coulomb::FavorPlus<float>>(path);
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
    auto fresh = io::load_text_model<float, coulomb::FavorPlus<float>>(path);
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
  auto loaded = io::load_text_model<double, coulomb::Porf<double, coulomb::Relu>>(path);
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
  auto threaded = io::load_text_model<double, coulomb::Porf<double, coulomb::Relu>>(path, options);
  CHECK(threaded.model.config().num_threads == 2);
  require_same_parameters(loaded.model, threaded.model);
  // The same Draw policy: redrawing from the same generator gives the same Ω.
  coulomb::Rng r1(8), r2(8);
  model.redraw_omega(r1);
  loaded.model.redraw_omega(r2);
  CHECK(bitwise_equal(model.omega(0), loaded.model.omega(0)));
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
  CHECK_THAT(
      thrown<coulomb::io_error>([&] {
        (void)(io::load_text_model<double, coulomb::Porf<double, coulomb::Relu>>(favor_path));
      }),
      Contains(favor_path) && Contains("scalar type is float32 in the file") &&
          Contains("expects float64"));
  // Feature map.
  using FloatRelu = coulomb::Porf<float, coulomb::Relu>;
  CHECK_THAT(
      thrown<coulomb::io_error>([&] { (void)(io::load_text_model<float, FloatRelu>(favor_path)); }),
      Contains("feature map is 'favor' in the file") && Contains("metadata 'feature_map.name'") &&
          Contains("expects 'porf-relu'"));
  // Softmax attention has no feature map: any map type loads it.
  TextClassifierConfig softmax = config;
  softmax.attention = AttentionKind::softmax;
  FavorModel softmax_model(softmax, 2);
  const std::string softmax_path = dir.file("softmax.clmb");
  io::save_text_model(softmax_path, softmax_model, vocab, {12, false});
  auto as_relu = io::load_text_model<float, FloatRelu>(softmax_path);
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

TEST_CASE("text model: valid containers with invalid text-model content are rejected",
          "[io][text_model]") {
  const coulomb::Vocabulary vocab = small_vocabulary();
  const TextClassifierConfig config = small_config(vocab.size());
  const FavorModel model(config, 1);
  const io::ModelFile<float> good = io::text_model_file(model, vocab, {12, false}, kMetadata);
  // Sanity: the untouched file loads.
  CHECK_NOTHROW(io::load_text_model<float, coulomb::FavorPlus<float>>(rebuild(good, {})));

  using Meta = std::map<std::string, std::string>;
  struct MetaCase {
    std::function<void(Meta&)> edit;
    std::vector<std::string> expected;  // substrings of the message
  };
  const std::vector<MetaCase> meta_cases = {
      {[](Meta& m) { m.erase("kind"); }, {"not a text-model file", "'kind'"}},
      {[](Meta& m) { m["kind"] = "checkpoint"; }, {"metadata 'kind' is 'checkpoint'"}},
      {[](Meta& m) { m["text_model.version"] = std::to_string(io::TextModelFormat::version + 1); },
       {"unsupported text-model version " + std::to_string(io::TextModelFormat::version + 1)}},
      {[](Meta& m) { m["text_model.scalar"] = "float64"; }, {"'text_model.scalar' is 'float64'"}},
      {[](Meta& m) { m.erase("config.d_ff"); }, {"no metadata 'config.d_ff'"}},
      {[](Meta& m) { m["config.d_model"] = "8x"; }, {"'config.d_model' is '8x'", "an integer"}},
      {[](Meta& m) { m["config.d_model"] = "-8"; }, {"'config.d_model' is '-8'"}},
      {[](Meta& m) { m["config.d_model"] = "99999999999"; }, {"'config.d_model'"}},
      {[](Meta& m) { m["config.num_threads"] = "1000000"; }, {"'config.num_threads'"}},
      {[](Meta& m) { m["config.num_heads"] = "3"; }, {"configuration is invalid", "d_model"}},
      {[](Meta& m) { m["config.dropout"] = "1.5"; }, {"configuration is invalid", "dropout"}},
      {[](Meta& m) { m["config.dropout"] = "nan"; }, {"'config.dropout' is 'nan'"}},
      {[](Meta& m) { m["config.attention"] = "quadratic"; }, {"'config.attention'"}},
      {[](Meta& m) { m["config.tied_qk"] = "1"; }, {"'config.tied_qk' is '1'", "'true'"}},
      {[](Meta& m) { m["config.d_ff"] = "16"; }, {"shape 8×12 in the file", "8×16"}},
      {[](Meta& m) { m["config.tied_qk"] = "true"; }, {"matches no parameter"}},
      {[](Meta& m) { m["config.use_segments"] = "true"; }, {"embedding.segment"}},
      {[](Meta& m) { m["config.vocab_size"] = "40"; },
       {"the vocabulary has", "'config.vocab_size' is 40"}},
      {[](Meta& m) { m["config.max_length"] = "2000000000"; },
       {"config.max_length × config.d_model = 16000000000 parameters", "corrupted configuration"}},
      {[](Meta& m) { m["config.num_layers"] = "1000000"; }, {"config.num_layers × config.d_model"}},
      {[](Meta& m) { m["feature_map.name"] = "rff"; },
       {"'feature_map.name' is 'rff'", "favor, porf-exp"}},
      {[](Meta& m) { m["feature_map.name"] = "porf-relu"; }, {"feature map is 'porf-relu'"}},
      {[](Meta& m) { m["feature_map.draw"] = "sobol"; }, {"'feature_map.draw' is 'sobol'"}},
      {[](Meta& m) { m["feature_map.epsilon"] = "0.5"; }, {"'feature_map.epsilon' is '0.5'"}},
      {[](Meta& m) { m["encoder.max_length"] = "13"; },
       {"'encoder.max_length' is 13", "config.max_length = 12"}},
      {[](Meta& m) {
         m["encoder.max_length"] = "1";
         m["encoder.add_cls"] = "true";
       },
       {"'encoder.max_length' is 1"}},
  };
  for (std::size_t k = 0; k < meta_cases.size(); ++k) {
    INFO("metadata case " << k);
    const io::ModelFile<float> bad = rebuild(good, meta_cases[k].edit);
    try {
      (void)io::load_text_model<float, coulomb::FavorPlus<float>>(bad);
      FAIL("loaded");
    } catch (const coulomb::io_error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK_THAT(what, Contains("edited.clmb"));
      for (const auto& s : meta_cases[k].expected) CHECK_THAT(what, Contains(s));
    }
  }

  // The vocabulary blob: missing, not a vocabulary, or of another size.
  auto drop_vocab = [](const std::string& name, std::string&) { return name != "vocabulary"; };
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)(io::load_text_model<float, coulomb::FavorPlus<float>>(
                   rebuild(good, {}, drop_vocab)));
             }),
             Contains("no blob 'vocabulary'"));
  auto garble = [](const std::string&, std::string& bytes) {
    bytes.replace(bytes.find("lowercase 1"), 11, "lowercase 7");
    return true;
  };
  CHECK_THAT(
      thrown<coulomb::io_error>([&] {
        (void)(io::load_text_model<float, coulomb::FavorPlus<float>>(rebuild(good, {}, garble)));
      }),
      Contains("edited.clmb (blob 'vocabulary')") && Contains("line 2"));
  auto shorten = [](const std::string&, std::string& bytes) {
    std::ostringstream os;
    coulomb::Vocabulary().write(os);
    bytes = os.str();
    return true;
  };
  CHECK_THAT(
      thrown<coulomb::io_error>([&] {
        (void)(io::load_text_model<float, coulomb::FavorPlus<float>>(rebuild(good, {}, shorten)));
      }),
      Contains("the vocabulary has 4 tokens"));

  // The tensors: one missing, one extra, one of another shape.
  auto drop = [](const std::string& name, Matrix<float>&) {
    return name != "model.encoder.1.attention.omega";
  };
  CHECK_THAT(
      thrown<coulomb::io_error>([&] {
        (void)(io::load_text_model<float, coulomb::FavorPlus<float>>(rebuild(good, {}, {}, drop)));
      }),
      Contains("'encoder.1.attention.omega' has no tensor"));
  auto reshape = [](const std::string& name, Matrix<float>& value) {
    if (name == "model.classifier.weight") value.resize(value.rows(), value.cols() + 1);
    return true;
  };
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)(io::load_text_model<float, coulomb::FavorPlus<float>>(
                   rebuild(good, {}, {}, reshape)));
             }),
             Contains("'model.classifier.weight' has shape"));
  io::ModelFile<float> extra = rebuild(good, {});
  extra.add_tensor("model.encoder.2.ffn.w_1", Matrix<float>::Zero(2, 2));
  CHECK_THAT(thrown<coulomb::io_error>(
                 [&] { (void)(io::load_text_model<float, coulomb::FavorPlus<float>>(extra)); }),
             Contains("'model.encoder.2.ffn.w_1' matches no parameter"));
  // Tensors under other prefixes (a trainer's optimizer state) are allowed.
  io::ModelFile<float> checkpoint = rebuild(good, {});
  checkpoint.add_tensor("optimizer.first_moment.classifier.bias", Matrix<float>::Zero(2, 1));
  CHECK_NOTHROW(io::load_text_model<float, coulomb::FavorPlus<float>>(checkpoint));
}

TEST_CASE("text model: the pair head is saved as version 2, mean pooling still as version 1",
          "[io][text_model][pair]") {
  const coulomb::Vocabulary vocab = small_vocabulary();
  TextClassifierConfig config = small_config(vocab.size());
  config.use_segments = true;
  config.pooling = coulomb::nn::PoolingKind::pair;
  config.pair_hidden = 6;
  config.pair_alignment = true;
  const coulomb::EncoderOptions enc_options{10, true};
  FavorModel model(config, 21);
  const coulomb::TokenBatch batch = encoded_batch(coulomb::TextEncoder(vocab, enc_options), true);
  Matrix<float> logits;
  model.forward(batch, logits);

  const io::ModelFile<float> file = io::text_model_file(model, vocab, enc_options, kMetadata);
  REQUIRE(file.find_metadata("text_model.version") != nullptr);
  CHECK(*file.find_metadata("text_model.version") == "2");
  CHECK(*file.find_metadata("config.pooling") == "pair");
  CHECK(*file.find_metadata("config.pair_hidden") == "6");
  CHECK(*file.find_metadata("config.pair_alignment") == "true");
  ScratchDir dir("pair_head");
  const std::string path = dir.file("pair.clmb");
  io::save_text_model(path, model, vocab, enc_options, kMetadata);
  auto loaded = io::load_text_model<float, coulomb::FavorPlus<float>>(path);
  CHECK(loaded.header.config.pooling == coulomb::nn::PoolingKind::pair);
  CHECK(loaded.header.config.pair_hidden == 6);
  CHECK(loaded.header.config.pair_alignment);
  Matrix<float> again;
  loaded.model.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  require_same_parameters(model, loaded.model);
  CHECK(io::model_file_bytes(io::text_model_file(loaded.model, loaded.vocabulary,
                                                 loaded.header.encoder, loaded.header.metadata)) ==
        io::model_file_bytes(file));

  // A model of mean pooling keeps the layout of version 1: no pooling fields.
  TextClassifierConfig mean = config;
  mean.pooling = coulomb::nn::PoolingKind::mean;
  mean.pair_hidden = 0;
  mean.pair_alignment = false;
  const FavorModel mean_model(mean, 21);
  const io::ModelFile<float> mean_file = io::text_model_file(mean_model, vocab, enc_options);
  CHECK(*mean_file.find_metadata("text_model.version") == "1");
  CHECK(mean_file.find_metadata("config.pooling") == nullptr);
  CHECK(mean_file.find_metadata("config.pair_hidden") == nullptr);
  CHECK(mean_file.find_metadata("config.pair_alignment") == nullptr);

  // Loading into a model of another pooling names the fields.
  FavorModel target(mean, 3);
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model_into(path, target); }),
             Contains("config.pooling is 'pair' in the file, the model has 'mean'") &&
                 Contains("config.pair_hidden is '6' in the file, the model has '0'") &&
                 Contains("config.pair_alignment is 'true' in the file, the model has 'false'"));
  FavorModel same(config, 4);
  (void)io::load_text_model_into(path, same);
  same.forward(batch, again);
  CHECK(bitwise_equal(logits, again));

  // Invalid or missing pooling fields are rejected naming the key; a pair file relabelled as
  // version 1 (mean pooling) does not load silently: its head's tensors do not fit.
  check_edits_rejected(
      file,
      {
          {[](Meta& m) { m["config.pooling"] = "max"; }, "'config.pooling' is 'max'"},
          {[](Meta& m) { m.erase("config.pooling"); }, "no metadata 'config.pooling'"},
          {[](Meta& m) { m["config.pair_hidden"] = "-1"; }, "'config.pair_hidden' is '-1'"},
          {[](Meta& m) { m["config.pair_hidden"] = "7"; }, "'model.pair_head.hidden.weight'"},
          {[](Meta& m) { m["config.pair_alignment"] = "yes"; }, "'config.pair_alignment' is 'yes'"},
          // Absent means false (the field came later within version 2): the head's input is then
          // 2 features narrower than the stored tensor.
          {[](Meta& m) { m.erase("config.pair_alignment"); }, "'model.pair_head.hidden.weight'"},
          {[](Meta& m) { m["config.use_segments"] = "false"; }, "configuration is invalid"},
          {[](Meta& m) { m["text_model.version"] = "1"; }, "'model.classifier.weight' has shape"},
      });
}

TEST_CASE("text model: the pair head with overlap features is saved as version 3",
          "[io][text_model][pair]") {
  const coulomb::Vocabulary vocab = small_vocabulary();
  TextClassifierConfig config = small_config(vocab.size());
  config.use_segments = true;
  config.pooling = coulomb::nn::PoolingKind::pair;
  config.pair_overlap = true;
  const coulomb::EncoderOptions enc_options{10, true};
  FavorModel model(config, 23);
  Eigen::ArrayXd mean(6), sd(6);
  mean << 0.7, 0.6, 0.5, 0.4, 0.3, 0.2;
  sd << 0.1, 0.2, 0.3, 0.1, 0.2, 0.3;
  model.set_overlap_standardization(mean, sd);
  const coulomb::TokenBatch batch = encoded_batch(coulomb::TextEncoder(vocab, enc_options), true);
  REQUIRE(batch.overlap.rows() == batch.size());
  Matrix<float> logits;
  model.forward(batch, logits);

  const io::ModelFile<float> file = io::text_model_file(model, vocab, enc_options, kMetadata);
  CHECK(*file.find_metadata("text_model.version") == "3");
  CHECK(*file.find_metadata("config.pair_overlap") == "true");
  REQUIRE(file.find_tensor("model.pair_head.overlap.shift") != nullptr);
  ScratchDir dir("pair_overlap");
  const std::string path = dir.file("overlap.clmb");
  io::save_text_model(path, model, vocab, enc_options, kMetadata);
  auto loaded = io::load_text_model<float, coulomb::FavorPlus<float>>(path);
  CHECK(loaded.header.config.pair_overlap);
  Matrix<float> again;
  loaded.model.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  require_same_parameters(model, loaded.model);

  // Without overlap features the pair head stays version 2, without the field.
  TextClassifierConfig plain = config;
  plain.pair_overlap = false;
  const FavorModel plain_model(plain, 23);
  const io::ModelFile<float> plain_file = io::text_model_file(plain_model, vocab, enc_options);
  CHECK(*plain_file.find_metadata("text_model.version") == "2");
  CHECK(plain_file.find_metadata("config.pair_overlap") == nullptr);
  FavorModel target(plain, 3);
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model_into(path, target); }),
             Contains("config.pair_overlap is 'true' in the file, the model has 'false'"));

  check_edits_rejected(
      file,
      {
          {[](Meta& m) { m["config.pair_overlap"] = "maybe"; }, "'config.pair_overlap' is 'maybe'"},
          {[](Meta& m) { m.erase("config.pair_overlap"); }, "no metadata 'config.pair_overlap'"},
          // Relabelled as version 2 (no overlap features), its tensors do not fit.
          {[](Meta& m) { m["text_model.version"] = "2"; }, "'model.classifier.weight' has shape"},
          {[](Meta& m) { m["text_model.version"] = "4"; }, "unsupported text-model version 4"},
      });
}

TEST_CASE("text model: damaged bytes and truncations are rejected without a crash",
          "[io][text_model]") {
  const coulomb::Vocabulary vocab = small_vocabulary();
  const TextClassifierConfig config = small_config(vocab.size());
  const FavorModel model(config, 1);
  const Bytes image =
      io::model_file_bytes(io::text_model_file(model, vocab, {12, false}, kMetadata));
  auto load = [](const Bytes& bytes) {
    const auto file = io::parse_model_file<float>(as_span<float>(bytes), "damaged.clmb");
    return io::load_text_model<float, coulomb::FavorPlus<float>>(file);
  };
  REQUIRE_NOTHROW(load(image));

  // Regions: a metadata entry, the vocabulary blob, the data of one parameter tensor.
  const std::size_t meta_at = find_bytes(image, "config.d_model");
  const std::size_t vocab_at = find_bytes(image, "coulomb-vocabulary 1");
  const std::string tensor_name = "model.encoder.0.attention.omega";
  // After the name: 1 byte of scalar type, 8 + 8 bytes of shape, then the data.
  const std::size_t tensor_at = find_bytes(image, tensor_name) + tensor_name.size() + 17;
  const std::size_t tensor_bytes = static_cast<std::size_t>(config.num_features) * 4 * 4;
  struct Region {
    const char* name;
    std::size_t begin, size;
  };
  const std::vector<Region> regions = {{"metadata", meta_at - 12, 40},
                                       {"vocabulary", vocab_at - 8, 120},
                                       {"tensor", tensor_at, tensor_bytes}};

  // Every byte of each region flipped: the checksum catches it.
  std::size_t cases = 0;
  for (const auto& region : regions) {
    for (std::size_t k = region.begin; k < region.begin + region.size; ++k) {
      Bytes bad = image;
      bad[k] ^= std::byte{0x5A};
      INFO(region.name << " byte " << k);
      CHECK_THAT(thrown<coulomb::io_error>([&] { (void)load(bad); }),
                 Contains("checksum mismatch"));
      ++cases;
    }
  }
  // Truncated at many offsets (every offset of the header and then a stride through the file).
  for (std::size_t n = 0; n < image.size(); n += (n < 64 ? 1 : 37)) {
    const Bytes cut(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("truncated to " << n << " of " << image.size() << " bytes");
    CHECK_THROWS_AS(load(cut), coulomb::io_error);
    ++cases;
  }
  // The same damage behind a valid checksum reaches the text-model checks: each case is
  // rejected with io_error or loads a model that still fits together (a flipped bit in a
  // weight or a token is undetectable by design); nothing else may escape, nothing may crash.
  std::size_t rejected = 0;
  std::size_t loaded = 0;
  for (const auto& region : regions) {
    for (std::size_t k = region.begin; k < region.begin + region.size; k += 2) {
      Bytes bad = image;
      bad[k] ^= std::byte{0x21};
      fix_checksum(bad);
      INFO(region.name << " byte " << k << " with a valid checksum");
      try {
        auto m = load(bad);
        CHECK(m.vocabulary.size() == m.model.config().vocab_size);
        ++loaded;
      } catch (const coulomb::io_error&) {
        ++rejected;
      }
      ++cases;
    }
  }
  INFO(cases << " cases, " << rejected << " rejected and " << loaded
             << " loaded behind a valid checksum");
  CHECK(rejected > 0);
  CHECK(loaded > 0);  // the tensor region
}

namespace {

/// The path of a file in tests/data.
std::string data_file(const std::string& name) {
  return (fs::path(COULOMB_TEST_DATA_DIR) / name).string();
}

/// The two committed fixtures (also used by the command-line tests of examples/evaluate.cpp):
/// tiny untrained FAVOR+ models, one for single sentences (encoder max length 8, so long
/// sentences are truncated), one for sentence pairs (segments, shared Ω, Q = K, [CLS]).
coulomb::Vocabulary fixture_vocabulary() {
  coulomb::VocabularyBuilder builder;
  for (const char* t : {"a gentle , funny film", "the plot goes nowhere", "dull , dull , dull",
                        "great acting and a fine story", "the council approved the budget",
                        "the museum will reopen in may , she said"})
    builder.add_text(t);
  return builder.build();
}

void write_fixture(bool pair, const std::string& path) {
  const coulomb::Vocabulary vocab = fixture_vocabulary();
  TextClassifierConfig config = small_config(vocab.size());
  config.max_length = 16;
  config.use_segments = pair;
  config.shared_omega = pair;
  config.tied_qk = pair;
  const FavorModel model(config, pair ? 2 : 1);
  const coulomb::EncoderOptions enc =
      pair ? coulomb::EncoderOptions{16, true} : coulomb::EncoderOptions{8, false};
  io::save_text_model(
      path, model, vocab, enc,
      {{"purpose", "test fixture (untrained)"}, {"columns", pair ? "pair" : "single"}});
}

/// The third fixture: PORF-relu (ε = 0.1, i.i.d. draws) in double, single sentences,
/// [CLS] first; it takes evaluate through its other scalar type and map.
void write_relu_fixture(const std::string& path) {
  const coulomb::Vocabulary vocab = fixture_vocabulary();
  TextClassifierConfig config = small_config(vocab.size());
  coulomb::Rng rng(3);
  const coulomb::Porf<double, coulomb::Relu> prototype(4, config.num_features, rng,
                                                       {coulomb::Draw::iid, 0.1});
  const ReluModel model(config, prototype, 3);
  io::save_text_model(path, model, vocab, {12, true},
                      {{"purpose", "test fixture (untrained)"}, {"columns", "single"}});
}

}  // namespace

// Not run by default: `coulomb_tests "[.generate_fixtures]"` rewrites the three fixture files
// after a deliberate change of the text-model layout (then bump TextModelFormat::version).
TEST_CASE("text model: write the fixtures of tests/data", "[.generate_fixtures]") {
  write_fixture(false, data_file("text_model_single.clmb"));
  write_fixture(true, data_file("text_model_pair.clmb"));
  write_relu_fixture(data_file("text_model_relu_f64.clmb"));
}

TEST_CASE("text model: the committed version-1 fixtures still load and save back to the same bytes",
          "[io][text_model]") {
  for (const bool pair : {false, true}) {
    const std::string path = data_file(pair ? "text_model_pair.clmb" : "text_model_single.clmb");
    INFO(path);
    const io::TextModelHeader header = io::read_text_model_header(path);
    CHECK(header.feature_map.name == "favor");
    CHECK(header.config.use_segments == pair);
    CHECK(header.encoder.max_length == (pair ? 16 : 8));
    CHECK(header.metadata.at("columns") == (pair ? "pair" : "single"));
    auto loaded = io::load_text_model<float, coulomb::FavorPlus<float>>(path);
    const Bytes resaved = io::model_file_bytes(io::text_model_file(
        loaded.model, loaded.vocabulary, loaded.header.encoder, loaded.header.metadata));
    const std::string on_disk = coulomb::io::read_file(path);
    CHECK(resaved.size() == on_disk.size());
    CHECK(std::memcmp(resaved.data(), on_disk.data(), std::min(resaved.size(), on_disk.size())) ==
          0);
    Matrix<float> logits;
    loaded.model.forward(encoded_batch(loaded.make_encoder(), pair), logits);
    CHECK(logits.allFinite());
  }
  const std::string path = data_file("text_model_relu_f64.clmb");
  const io::TextModelHeader header = io::read_text_model_header(path);
  CHECK(header.scalar == io::ScalarType::float64);
  CHECK(header.feature_map == io::FeatureMapSpec{"porf-relu", coulomb::Draw::iid, 0.1});
  CHECK(header.encoder == coulomb::EncoderOptions{12, true});
  auto loaded = io::load_text_model<double, coulomb::Porf<double, coulomb::Relu>>(path);
  CHECK(io::model_file_bytes(io::text_model_file(loaded.model, loaded.vocabulary,
                                                 loaded.header.encoder, loaded.header.metadata)) ==
        io::model_file_bytes(io::load_model_file<double>(path)));
}

// Found by fuzz/fuzz_model_file: a per-layer Ω holding NaN (there in a PORF-relu float64 model),
// in a file read with ReadOptions::allow_non_finite (as the fuzzer reads), made load_text_model
// throw invalid_argument from a feature map's set_omega instead of io_error naming the tensor.
TEST_CASE(
    "text model: a non-finite Omega is rejected naming the tensor, even when non-finite "
    "parameters are allowed",
    "[io][text_model]") {
  using Map = coulomb::FavorPlus<float>;
  const io::ModelFile<float> good = io::load_model_file<float>(data_file("text_model_single.clmb"));
  const std::string omega_name = "model.encoder.1.attention.omega";
  REQUIRE(good.find_tensor(omega_name) != nullptr);
  auto poison = [&](const std::string& name, Matrix<float>& value) {
    if (name == omega_name) value(4, 3) = std::numeric_limits<float>::quiet_NaN();
    return true;
  };
  const io::ModelFile<float> bad = rebuild(good, {}, {}, poison);
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model<float, Map>(bad); }),
             Contains("'edited.clmb'") && Contains("tensor '" + omega_name + "'") &&
                 Contains("non-finite entry nan at (4, 3)"));
  // Another parameter may be non-finite when the reader allows it: the model loads.
  auto poison_bias = [](const std::string& name, Matrix<float>& value) {
    if (name == "model.classifier.bias") value(0, 0) = std::numeric_limits<float>::infinity();
    return true;
  };
  CHECK_NOTHROW(io::load_text_model<float, Map>(rebuild(good, {}, {}, poison_bias)));

  // Through the file reader, which must be told to accept non-finite entries at all; the
  // model given to load_text_model_into is unchanged.
  ScratchDir dir("nonfinite_omega");
  const std::string path = dir.file("nan_omega.clmb");
  io::WriteOptions write;
  write.allow_non_finite = true;
  io::save_model_file(path, bad, write);
  io::ReadOptions read;
  read.allow_non_finite = true;
  io::TextModelLoadOptions load;
  load.read = read;
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model<float, Map>(path, load); }),
             Contains(path) && Contains("tensor '" + omega_name + "'"));
  auto target = io::load_text_model<float, Map>(data_file("text_model_single.clmb"));
  const Matrix<float> omega_before = target.model.omega(1);
  CHECK_THAT(
      thrown<coulomb::io_error>([&] { (void)io::load_text_model_into(path, target.model, read); }),
      Contains("tensor '" + omega_name + "'"));
  CHECK(bitwise_equal(target.model.omega(1), omega_before));
  CHECK(target.model.omega(1).allFinite());
}

#ifdef COULOMB_TEST_HAVE_FIFO

namespace {

/// The names and bits of every parameter of `model`, as one string (the same type for every
/// scalar type and feature map, as visit_text_model needs).
template <typename Model>
std::string parameter_bits(Model& model) {
  std::string out;
  for (const auto& p : model.parameters()) {
    out += p.name + ':';
    out.append(reinterpret_cast<const char*>(p.value->data()),
               static_cast<std::size_t>(p.value->size()) * sizeof(*p.value->data()));
  }
  return out;
}

}  // namespace

TEST_CASE("TextModel_EveryPathLoaderReadsAFifoOnce", "[io][text_model][fifo]") {
  // A named pipe (as /dev/stdin, a pipe or a shell's <(…)) can be read once. Each loader that
  // takes a path gets a FIFO of its own fed with a saved model, and must give what the regular
  // file gives; a loader that opened the path twice would see an empty second stream.
  const coulomb::Vocabulary vocab = small_vocabulary();
  const TextClassifierConfig config = small_config(vocab.size());
  FavorModel model(config, 7);
  const coulomb::EncoderOptions enc_options{12, false};
  const coulomb::TokenBatch batch = encoded_batch(coulomb::TextEncoder(vocab, enc_options), false);
  Matrix<float> logits, again;
  model.forward(batch, logits);
  ScratchDir dir("fifo");
  const std::string regular = dir.file("model.clmb");
  io::save_text_model(regular, model, vocab, enc_options, kMetadata);
  const std::string bytes = io::read_file(regular);
  const std::string fifo = dir.file("model.fifo");
  auto through_fifo = [&](const std::string& fed, auto&& load) {
    fs::remove(fifo);
    coulomb_test::FifoFeeder feeder(fifo, fed);
    REQUIRE(feeder.created());
    return load(fifo);
  };

  auto loaded = through_fifo(bytes, [](const std::string& path) {
    return io::load_text_model<float, coulomb::FavorPlus<float>>(path);
  });
  loaded.model.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  CHECK(loaded.header.source == fifo);

  FavorModel other(config, 99);
  const io::TextModelAssets assets = through_fifo(
      bytes, [&](const std::string& path) { return io::load_text_model_into(path, other); });
  other.forward(batch, again);
  CHECK(bitwise_equal(logits, again));
  CHECK(assets.vocabulary == vocab);

  const io::TextModelHeader header =
      through_fifo(bytes, [](const std::string& path) { return io::read_text_model_header(path); });
  CHECK(header.scalar == io::ScalarType::float32);
  CHECK(header.feature_map.name == "favor");
  CHECK(header.metadata == kMetadata);

  auto visit = [](const std::string& path) {
    return io::visit_text_model(path, [](auto& visited) { return parameter_bits(visited.model); });
  };
  CHECK(through_fifo(bytes, visit) == parameter_bits(model));
  CHECK(visit(regular) == parameter_bits(model));

  // Wrong bytes through a FIFO: the usual io_error naming it, at once.
  const std::string garbage = "label\tsentence\n1\tnot a model at all\n";
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)through_fifo(garbage, [](const std::string& path) {
                 return io::load_text_model<float, coulomb::FavorPlus<float>>(path);
               });
             }),
             Contains("'" + fifo + "'") && Contains("wrong magic bytes"));
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)through_fifo(garbage, visit); }),
             Contains("'" + fifo + "'") && Contains("wrong magic bytes"));
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)through_fifo(bytes.substr(0, bytes.size() - 9), [](const std::string& path) {
                 return io::read_text_model_header(path);
               });
             }),
             Contains("'" + fifo + "'") && Contains("truncated"));
}

#endif

}  // namespace io_text_model_test
