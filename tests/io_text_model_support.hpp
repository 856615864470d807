// SPDX-License-Identifier: MIT
/// @file tests/io_text_model_support.hpp
/// @brief Helpers of the text-model tests (io_text_model_*_test.cpp): a scratch directory,
/// a tiny vocabulary, configuration and batch, bitwise comparisons, edits of a model file's
/// metadata, blobs and tensors, and the message of an expected exception.
#pragma once

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
#include <coulomb/features/registry.hpp>
#include <coulomb/features/rff.hpp>
#include <coulomb/io/crc32c.hpp>
#include <coulomb/io/model_file.hpp>
#include <coulomb/io/text_model.hpp>
#include <coulomb/nn/text_classifier.hpp>
#include <coulomb/text/batching.hpp>
#include <coulomb/text/encoder.hpp>
#include <coulomb/text/vocabulary.hpp>

#include "scratch_dir.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
namespace io_text_model_support {

namespace fs = std::filesystem;
namespace io = coulomb::io;
using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::Matrix;
using coulomb::nn::AttentionKind;
using coulomb::nn::TextClassifier;
using coulomb::nn::TextClassifierConfig;
using FavorModel = TextClassifier<coulomb::FavorPlus<float>>;
using ReluModel = TextClassifier<coulomb::Porf<double, coulomb::Relu>>;
using Bytes = std::vector<std::byte>;
using coulomb_test::ScratchDir;

inline const std::vector<std::string> kTexts = {"the movie was great", "a dull , boring film",
                                                "great acting and a fine story", "not good at all",
                                                "the story was fine but the acting was dull"};

/// The vocabulary of kTexts: 4 special tokens and the words.
inline coulomb::Vocabulary small_vocabulary() {
  coulomb::VocabularyBuilder builder;
  for (const auto& t : kTexts) builder.add_text(t);
  return builder.build();
}

inline TextClassifierConfig small_config(Index vocab_size) {
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
inline coulomb::TokenBatch encoded_batch(const coulomb::TextEncoder& encoder, bool pairs) {
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
inline void fix_checksum(Bytes& image) {
  const std::size_t end = image.size() - 4;
  const std::uint32_t crc = coulomb::io::crc32c(std::span<const std::byte>(image.data(), end));
  for (std::size_t i = 0; i < 4; ++i) image[end + i] = static_cast<std::byte>(crc >> (8 * i));
}

/// Offset of the first occurrence of `needle` in `image` (REQUIREd to exist).
inline std::size_t find_bytes(const Bytes& image, std::string_view needle) {
  const auto it = std::search(image.begin(), image.end(), needle.begin(), needle.end(),
                              [](std::byte b, char c) { return b == static_cast<std::byte>(c); });
  REQUIRE(it != image.end());
  return static_cast<std::size_t>(it - image.begin());
}

/// A copy of `file` with its metadata passed through `edit_metadata`, its blobs through
/// `edit_blob` (return false to drop one), and its tensors through `edit_tensor` (idem).
using S = float;
inline io::ModelFile<S> rebuild(
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
      (void)io::load_text_model<coulomb::FavorPlus<float>>(rebuild(file, cases[k].first));
    });
    INFO(what);
    CHECK_THAT(what, Contains("edited.clmb") && Contains(cases[k].second));
  }
}

inline const io::TextModelMetadata kMetadata = {{"dataset", "rotten_tomatoes"},
                                                {"kernel", "learned"},
                                                {"seed", "7"},
                                                {"metrics", "{\"accuracy\": 0.75}"},
                                                {"odd", std::string("tab\tnew\nline\0nul", 17)}};

/// The path of a file in tests/data.
inline std::string data_file(const std::string& name) {
  return (fs::path(COULOMB_TEST_DATA_DIR) / name).string();
}

}  // namespace io_text_model_support
