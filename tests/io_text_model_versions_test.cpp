// SPDX-License-Identifier: MIT
// Text-model layout versions and files on disk (io/text_model.hpp): the pair head is saved as
// version 2 and its overlap features as version 3 while mean pooling stays version 1; the
// committed fixtures of tests/data load and save back to the same bytes; every path loader
// reads a FIFO once.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <coulomb/io/text_model.hpp>

#include "fifo_support.hpp"
#include "io_text_model_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace io_text_model_versions_test {

using namespace io_text_model_support;

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
  auto loaded = io::load_text_model<coulomb::FavorPlus<float>>(path);
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
  auto loaded = io::load_text_model<coulomb::FavorPlus<float>>(path);
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

namespace {

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
    auto loaded = io::load_text_model<coulomb::FavorPlus<float>>(path);
    const Bytes resaved = io::model_file_bytes(io::text_model_file(
        loaded.model, loaded.vocabulary, loaded.header.encoder, loaded.header.metadata));
    const std::string on_disk = coulomb::read_file(path);
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
  auto loaded = io::load_text_model<coulomb::Porf<double, coulomb::Relu>>(path);
  CHECK(io::model_file_bytes(io::text_model_file(loaded.model, loaded.vocabulary,
                                                 loaded.header.encoder, loaded.header.metadata)) ==
        io::model_file_bytes(io::load_model_file<double>(path)));
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
  const std::string bytes = coulomb::read_file(regular);
  const std::string fifo = dir.file("model.fifo");
  auto through_fifo = [&](const std::string& fed, auto&& load) {
    fs::remove(fifo);
    coulomb_test::FifoFeeder feeder(fifo, fed);
    REQUIRE(feeder.created());
    return load(fifo);
  };

  auto loaded = through_fifo(bytes, [](const std::string& path) {
    return io::load_text_model<coulomb::FavorPlus<float>>(path);
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
                 return io::load_text_model<coulomb::FavorPlus<float>>(path);
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

}  // namespace io_text_model_versions_test
