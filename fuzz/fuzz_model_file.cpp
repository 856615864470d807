// SPDX-License-Identifier: MIT
// libFuzzer target of the model-file reader (io/model_file.hpp) and of the text-model loader on
// top of it (io/text_model.hpp), built with -DCOULOMB_BUILD_FUZZERS=ON (clang). Each input is
// parsed as a float and as a double file, with and without the checksum (without it, mutations
// reach the section parsers, and the text-model loader, instead of stopping at the CRC).
// Properties checked on every input:
//   - the parser returns or throws coulomb::io_error; any other exception, crash, leak or
//     sanitizer report is a bug;
//   - whatever parses writes back to an image that parses, with the checksum, to equal contents,
//     and peek_scalar_type (which reads the header only) gives its scalar type;
//   - whatever parses is handed to the text-model loader (header, dispatch_feature_map on the
//     stored name, load_text_model with the map the file names and with another map), which
//     returns or throws io_error (dispatch_feature_map: invalid_argument for an unknown name);
//   - a model that loads is used: its encoder encodes a tiny batch (the vocabulary's own words,
//     an unknown word and an empty text; sentence pairs when the model has segments) and the
//     forward gives B × C logits, finite when every parameter is finite and moderate (|x| <= 4;
//     with non-finite or larger ones the forward may also end in a coulomb::error, e.g.
//     numerical_error when the features overflow); saved again (text_model_file) and reloaded,
//     it gives bit-identical logits.
// The seed corpus holds small container files (make_seed_corpus.cpp) and copies of the
// text-model fixtures of tests/data (text_model_*.clmb).
// Run: build/fuzz/fuzz_model_file -max_total_time=60 fuzz/corpus/model_file
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <coulomb/io/model_file.hpp>
#include <coulomb/io/text_model.hpp>
#include <coulomb/text/batching.hpp>
#include <coulomb/text/encoder.hpp>
#include <coulomb/text/vocabulary.hpp>

namespace {

namespace io = coulomb::io;

/// A property does not hold: says which, then aborts (libFuzzer saves the input).
[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_model_file: %s\n", what);
  std::abort();
}

template <typename S>
bool bitwise_equal(const coulomb::Matrix<S>& a, const coulomb::Matrix<S>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         (a.size() == 0 ||
          std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(S)) == 0);
}

/// A tiny batch for `loaded`, encoded by its own encoder: a text of the vocabulary's first
/// words, an unknown word, an empty text; sentence pairs when the model has segments (and the
/// encoder room for a pair).
template <typename Loaded>
coulomb::TokenBatch tiny_batch(const Loaded& loaded) {
  const coulomb::Vocabulary& vocab = loaded.vocabulary;
  std::string words;
  for (coulomb::Index id = coulomb::Vocabulary::num_special; id < vocab.size() && id < 12; ++id) {
    if (!words.empty()) words += ' ';
    words += vocab.token(static_cast<coulomb::TokenId>(id));
  }
  const coulomb::nn::TextClassifierConfig& c = loaded.model.config();
  coulomb::TextDataset data;
  data.num_classes = static_cast<int>(c.num_classes);
  data.is_pair = c.use_segments && c.num_segments >= 2 &&
                 loaded.header.encoder.max_length >= 3 + (loaded.header.encoder.add_cls ? 1 : 0);
  const std::vector<std::string> texts = {words, "qzxjvw", ""};
  for (std::size_t i = 0; i < texts.size(); ++i) {
    coulomb::TextExample ex;
    ex.text_a = texts[i];
    if (data.is_pair) ex.text_b = texts[(i + 1) % texts.size()];
    ex.label = 0;
    data.examples.push_back(ex);
  }
  const coulomb::EncodedDataset enc = loaded.make_encoder().encode(data);
  std::vector<coulomb::Index> all(static_cast<std::size_t>(enc.size()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<coulomb::Index>(i);
  coulomb::TokenBatch batch;
  coulomb::make_batch(enc, all, batch);
  return batch;
}

/// Whether every parameter of `model` is finite with |x| <= 4.
template <typename Model>
bool moderate_parameters(Model& model) {
  for (const auto& p : model.parameters()) {
    if (!(p.value->array().abs() <= 4).all()) return false;
  }
  return true;
}

/// Uses a model that loaded: forward on a tiny batch, then save, reload and compare.
template <typename Map>
void use_loaded(io::LoadedTextModel<Map>& loaded) {
  using S = typename Map::Scalar;
  const coulomb::TokenBatch batch = tiny_batch(loaded);
  // The overlap features need pairs; an encoder too short to encode one gives none, and the
  // model then refuses the batch by name (checked here, so nothing else is left untested).
  if (loaded.model.config().pair_overlap && batch.overlap.rows() != batch.size()) {
    coulomb::Matrix<S> unused;
    try {
      loaded.model.forward(batch, unused);
    } catch (const coulomb::invalid_argument&) {
      return;
    }
    fail("a model with overlap features took a batch without them");
  }
  const bool moderate = moderate_parameters(loaded.model);
  coulomb::Matrix<S> logits;
  try {
    loaded.model.forward(batch, logits);
  } catch (const coulomb::error&) {
    // A clear error (numerical_error when the features overflow, invalid_argument naming a
    // non-finite intermediate) for non-finite or huge parameters; never for moderate ones.
    if (moderate) throw;
    return;
  }
  if (logits.rows() != batch.size() || logits.cols() != loaded.model.config().num_classes)
    fail("the logits of a loaded model are not B x C");
  if (moderate && !logits.allFinite())
    fail("a loaded model with moderate parameters gives non-finite logits");

  const io::ModelFile<S> saved = io::text_model_file(loaded.model, loaded.vocabulary,
                                                     loaded.header.encoder, loaded.header.metadata);
  io::WriteOptions write;
  write.allow_non_finite = true;
  const auto image = io::model_file_bytes(saved, write);
  io::ReadOptions read;
  read.allow_non_finite = true;
  try {
    auto again = io::load_text_model<Map>(io::parse_model_file<S>(image, "fuzz-again", read));
    if (!(again.vocabulary == loaded.vocabulary) ||
        !(again.header.encoder == loaded.header.encoder))
      fail("a loaded model saved and reloaded has another vocabulary or encoder");
    coulomb::Matrix<S> logits_again;
    again.model.forward(batch, logits_again);
    if (!bitwise_equal(logits, logits_again))
      fail("a loaded model saved and reloaded gives other logits");
  } catch (const coulomb::io_error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("a loaded model saved again does not load");
  }
}

/// Hands a parsed container to the text-model layer.
template <typename S>
void check_text_model(const io::ModelFile<S>& file) {
  // dispatch_feature_map on whatever the file names: a map type, or invalid_argument.
  if (const std::string* name = file.find_metadata("feature_map.name")) {
    try {
      io::dispatch_feature_map<S>(*name, [](auto) {});
    } catch (const coulomb::invalid_argument&) {
    }
  }
  io::TextModelHeader header;
  try {
    header = io::text_model_header(file);
  } catch (const coulomb::io_error&) {
    return;  // not a text model (most inputs)
  }
  io::dispatch_feature_map<S>(header.feature_map.name, [&](auto tag) {
    using Map = typename decltype(tag)::type;
    try {
      auto loaded = io::load_text_model<Map>(file);
      use_loaded(loaded);
    } catch (const coulomb::io_error&) {
    }
  });
  // Another map than the stored one: io_error for linear attention, loads for softmax.
  try {
    if (header.feature_map.name == "favor") {
      (void)io::load_text_model<coulomb::Porf<S, coulomb::Relu>>(file);
    } else {
      (void)io::load_text_model<coulomb::FavorPlus<S>>(file);
    }
    if (header.config.attention == coulomb::nn::AttentionKind::linear)
      fail("a linear-attention model loaded with another feature map");
  } catch (const coulomb::io_error&) {
  }
}

template <typename S>
void check(std::span<const std::byte> image, std::optional<io::ScalarType> peeked,
           bool verify_checksum) {
  io::ReadOptions options;
  options.verify_checksum = verify_checksum;
  options.allow_non_finite = !verify_checksum;
  try {
    const auto file = io::parse_model_file<S>(image, "fuzz", options);
    if (peeked != io::scalar_type_of<S>())
      fail("peek_scalar_type disagrees with the scalar type of a file that parses");
    io::WriteOptions write;
    write.allow_non_finite = true;
    const auto again = io::model_file_bytes(file, write);
    io::ReadOptions strict;
    strict.allow_non_finite = true;
    if (!(io::parse_model_file<S>(again, "fuzz-again", strict) == file)) std::abort();
    // Without the checksum every container that parses reaches the text-model layer (with it,
    // the same contents would only be loaded twice).
    if (!verify_checksum) check_text_model(file);
  } catch (const coulomb::io_error&) {
    // The expected outcome for malformed input.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
  // peek_scalar_type reads the header only: io_error, or the type of any file that parses.
  std::optional<io::ScalarType> peeked;
  try {
    peeked = io::peek_scalar_type(image, "fuzz");
  } catch (const coulomb::io_error&) {
  }
  check<float>(image, peeked, false);
  check<double>(image, peeked, false);
  check<float>(image, peeked, true);
  check<double>(image, peeked, true);
  return 0;
}
