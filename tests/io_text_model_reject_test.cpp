// SPDX-License-Identifier: MIT
// Text-model files that must be rejected (io/text_model.hpp, io/text_model_header.hpp): a file
// whose container is valid but whose text-model content is not (every field, the vocabulary,
// the tensors) is rejected naming what is wrong; damaged bytes in the metadata, the vocabulary
// and a parameter tensor, and truncation at many offsets, are rejected without a crash (this
// test also runs under ASan and UBSan); a non-finite Ω is rejected naming the tensor.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <coulomb/io/crc32c.hpp>
#include <coulomb/io/text_model.hpp>

#include "io_text_model_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace io_text_model_reject_test {

using namespace io_text_model_support;

TEST_CASE("text model: valid containers with invalid text-model content are rejected",
          "[io][text_model]") {
  const coulomb::Vocabulary vocab = small_vocabulary();
  const TextClassifierConfig config = small_config(vocab.size());
  const FavorModel model(config, 1);
  const io::ModelFile<float> good = io::text_model_file(model, vocab, {12, false}, kMetadata);
  // Sanity: the untouched file loads.
  CHECK_NOTHROW(io::load_text_model<coulomb::FavorPlus<float>>(rebuild(good, {})));

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
      {[](Meta& m) { m["config.attention"] = "quadratic"; },
       {"'config.attention'", "'linear' or 'softmax'"}},
      {[](Meta& m) { m["config.tied_qk"] = "1"; }, {"'config.tied_qk' is '1'", "'true'"}},
      {[](Meta& m) { m["config.d_ff"] = "16"; }, {"shape 8×12 in the file", "8×16"}},
      {[](Meta& m) { m["config.tied_qk"] = "true"; }, {"matches no parameter"}},
      {[](Meta& m) { m["config.use_segments"] = "true"; }, {"embedding.segment"}},
      {[](Meta& m) { m["config.vocab_size"] = "40"; },
       {"the vocabulary has", "'config.vocab_size' is 40"}},
      {[](Meta& m) { m["config.max_length"] = "2000000000"; },
       {"config.max_length × config.d_model = 16000000000 parameters", "corrupted configuration"}},
      {[](Meta& m) { m["config.num_layers"] = "1000000"; }, {"config.num_layers × config.d_model"}},
      {[](Meta& m) { m["feature_map.name"] = "nystrom"; },
       {"'feature_map.name' is 'nystrom'", "favor, porf-exp"}},
      {[](Meta& m) { m["feature_map.name"] = "rff"; }, {"no metadata 'feature_map.bandwidth'"}},
      {[](Meta& m) { m["feature_map.bandwidth"] = "1"; },
       {"'feature_map.bandwidth' is set", "'favor' has no bandwidth"}},
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
      (void)io::load_text_model<coulomb::FavorPlus<float>>(bad);
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
  CHECK_THAT(
      thrown<coulomb::io_error>([&] {
        (void)(io::load_text_model<coulomb::FavorPlus<float>>(rebuild(good, {}, drop_vocab)));
      }),
      Contains("no blob 'vocabulary'"));
  auto garble = [](const std::string&, std::string& bytes) {
    bytes.replace(bytes.find("lowercase 1"), 11, "lowercase 7");
    return true;
  };
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)(io::load_text_model<coulomb::FavorPlus<float>>(rebuild(good, {}, garble)));
             }),
             Contains("edited.clmb (blob 'vocabulary')") && Contains("line 2"));
  auto shorten = [](const std::string&, std::string& bytes) {
    std::ostringstream os;
    coulomb::Vocabulary().write(os);
    bytes = os.str();
    return true;
  };
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)(io::load_text_model<coulomb::FavorPlus<float>>(rebuild(good, {}, shorten)));
             }),
             Contains("the vocabulary has 4 tokens"));

  // The tensors: one missing, one extra, one of another shape.
  auto drop = [](const std::string& name, Matrix<float>&) {
    return name != "model.encoder.1.attention.omega";
  };
  CHECK_THAT(thrown<coulomb::io_error>([&] {
               (void)(io::load_text_model<coulomb::FavorPlus<float>>(rebuild(good, {}, {}, drop)));
             }),
             Contains("'encoder.1.attention.omega' has no tensor"));
  auto reshape = [](const std::string& name, Matrix<float>& value) {
    if (name == "model.classifier.weight") value.resize(value.rows(), value.cols() + 1);
    return true;
  };
  CHECK_THAT(
      thrown<coulomb::io_error>([&] {
        (void)(io::load_text_model<coulomb::FavorPlus<float>>(rebuild(good, {}, {}, reshape)));
      }),
      Contains("'model.classifier.weight' has shape"));
  io::ModelFile<float> extra = rebuild(good, {});
  extra.add_tensor("model.encoder.2.ffn.w_1", Matrix<float>::Zero(2, 2));
  CHECK_THAT(thrown<coulomb::io_error>(
                 [&] { (void)(io::load_text_model<coulomb::FavorPlus<float>>(extra)); }),
             Contains("'model.encoder.2.ffn.w_1' matches no parameter"));
  // Tensors under other prefixes (a trainer's optimizer state) are allowed.
  io::ModelFile<float> checkpoint = rebuild(good, {});
  checkpoint.add_tensor("optimizer.first_moment.classifier.bias", Matrix<float>::Zero(2, 1));
  CHECK_NOTHROW(io::load_text_model<coulomb::FavorPlus<float>>(checkpoint));
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
    return io::load_text_model<coulomb::FavorPlus<float>>(file);
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
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model<Map>(bad); }),
             Contains("'edited.clmb'") && Contains("tensor '" + omega_name + "'") &&
                 Contains("non-finite entry nan at (4, 3)"));
  // Another parameter may be non-finite when the reader allows it: the model loads.
  auto poison_bias = [](const std::string& name, Matrix<float>& value) {
    if (name == "model.classifier.bias") value(0, 0) = std::numeric_limits<float>::infinity();
    return true;
  };
  CHECK_NOTHROW(io::load_text_model<Map>(rebuild(good, {}, {}, poison_bias)));

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
  CHECK_THAT(thrown<coulomb::io_error>([&] { (void)io::load_text_model<Map>(path, load); }),
             Contains(path) && Contains("tensor '" + omega_name + "'"));
  auto target = io::load_text_model<Map>(data_file("text_model_single.clmb"));
  const Matrix<float> omega_before = target.model.omega(1);
  CHECK_THAT(
      thrown<coulomb::io_error>([&] { (void)io::load_text_model_into(path, target.model, read); }),
      Contains("tensor '" + omega_name + "'"));
  CHECK(bitwise_equal(target.model.omega(1), omega_before));
  CHECK(target.model.omega(1).allFinite());
}

}  // namespace io_text_model_reject_test
