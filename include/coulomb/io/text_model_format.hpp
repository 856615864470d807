// SPDX-License-Identifier: MIT
/// @file io/text_model_format.hpp
/// @brief The layout of a text-model file on top of the model-file container: its constants
/// (TextModelFormat), the header it yields (TextModelHeader), what loading returns
/// (LoadedTextModel, TextModelAssets), the configuration as metadata entries, and the run-time
/// dispatch from a file's scalar type and feature-map key to the types to load it with. Layout:
/// docs/file_format.md (section "Text models").
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../features/feature_map.hpp"
#include "../features/registry.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/encoder.hpp"
#include "../text/vocabulary.hpp"
#include "model_file.hpp"

namespace coulomb::io {

// The feature-map registry is features/registry.hpp; these io:: names stay for existing callers.
using coulomb::dispatch_feature_map;
using coulomb::feature_map_name;
using coulomb::feature_map_name_list;
using coulomb::feature_map_names;
using coulomb::feature_map_spec;
using coulomb::FeatureMapSpec;
using coulomb::is_named_feature_map_v;
using coulomb::make_feature_map;
using coulomb::parse_draw;

/// Calls `f(std::type_identity<S>{})` with S = float for ScalarType::float32 and double for
/// float64. Throws invalid_argument for another code.
template <typename F>
decltype(auto) dispatch_scalar(ScalarType scalar, F&& f) {
  if (scalar == ScalarType::float32) return std::forward<F>(f)(std::type_identity<float>{});
  if (scalar == ScalarType::float64) return std::forward<F>(f)(std::type_identity<double>{});
  coulomb::detail::throw_invalid("coulomb::io::dispatch_scalar",
                                 "argument 'scalar' is " +
                                     scalar_type_name(static_cast<std::uint8_t>(scalar)) +
                                     " (expected float32 or float64)");
}

/// Both dispatches at once: calls `f(std::type_identity<Map>{})` with the map named `name` for
/// the scalar type `scalar` (Map::Scalar is float or double). Instantiates `f` for every
/// registered map and both scalar types. Throws as dispatch_scalar and dispatch_feature_map.
template <typename F>
decltype(auto) dispatch_text_model(ScalarType scalar, std::string_view name, F&& f) {
  return dispatch_scalar(scalar, [&](auto scalar_tag) -> decltype(auto) {
    using S = typename decltype(scalar_tag)::type;
    return dispatch_feature_map<S>(name, f);
  });
}

/// Free-form string metadata of a text model (dataset, kernel, seed, metrics, ...), stored
/// under the keys "meta.<key>". Keys are non-empty; values may hold any bytes.
using TextModelMetadata = std::map<std::string, std::string>;

/// Constants of the text-model layout on top of the model-file container (docs/file_format.md,
/// section "Text models").
struct TextModelFormat {
  static constexpr std::string_view kind = "text-classifier";  ///< metadata "kind"
  /// The newest metadata "text_model.version" this build writes and reads: 2 adds
  /// "config.pooling", "config.pair_hidden" and "config.pair_alignment" (the pair head; a file
  /// without "config.pair_alignment" reads as false); 3 adds "config.pair_overlap" (the
  /// pair head's lexical overlap features). A model is written with the oldest version that
  /// holds its configuration (text_model_version_for): mean pooling as version 1, byte for
  /// byte as before, the pair head without overlap features as version 2, so that older
  /// builds read them, and a model with overlap features as version 3, which an older build
  /// refuses with the message that names the version.
  static constexpr int version = 3;
  static constexpr int oldest_version = 1;  ///< the oldest version this build reads
  static constexpr std::string_view vocabulary_blob = "vocabulary";  ///< the vocabulary's blob
  static constexpr std::string_view tensor_prefix = "model.";        ///< before parameter names
  static constexpr std::string_view metadata_prefix = "meta.";       ///< before user metadata keys
};

/// Everything a text-model file says about the model except its vocabulary and its tensors:
/// what read_text_model_header returns, so that a program can choose the types to load with.
struct TextModelHeader {
  std::string source;                       ///< the file (for messages)
  ScalarType scalar = ScalarType::float32;  ///< the tensors' scalar type
  nn::TextClassifierConfig config{};        ///< the model's configuration
  FeatureMapSpec feature_map{};             ///< the feature map's name and options
  EncoderOptions encoder{};                 ///< how texts were encoded at training time
  TextModelMetadata metadata{};             ///< free-form metadata, without the "meta." prefix
};

/// A loaded text model: the classifier, its vocabulary and everything else the file holds.
template <FeatureMap Map>
struct LoadedTextModel {
  nn::TextClassifier<Map> model;  ///< the classifier, parameters and Ω as saved
  Vocabulary vocabulary;          ///< the vocabulary (with its tokenizer options)
  TextModelHeader header;         ///< configuration, feature map, encoder options, metadata

  /// A TextEncoder that encodes new text exactly as the training text was encoded.
  TextEncoder make_encoder() const { return TextEncoder(vocabulary, header.encoder); }
};

/// The vocabulary and header of a file loaded into an existing model (load_text_model_into).
struct TextModelAssets {
  Vocabulary vocabulary;   ///< the vocabulary (with its tokenizer options)
  TextModelHeader header;  ///< configuration, feature map, encoder options, metadata
};

/// Options of loading a text model.
struct TextModelLoadOptions {
  /// Attention threads of the loaded model (config.num_threads; 0: all). Unset: the value saved
  /// in the file. A run-time setting: it does not change any result.
  std::optional<int> num_threads{};
  /// Options of the container reader (checksum, non-finite entries).
  ReadOptions read{};
};

namespace detail {

/// Shortest decimal that reads back to exactly `x`.
inline std::string shortest_decimal(double x) {
  std::array<char, 32> buf{};
  const auto [ptr, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), x);
  (void)ec;  // 32 characters always suffice for a double
  return std::string(buf.data(), ptr);
}

inline std::string bool_text(bool b) {
  return b ? "true" : "false";
}

/// The text-model version a file of configuration `c` is written as: 1 for mean pooling (the
/// layout of version 1, unchanged), 2 for the pair head, 3 for the pair head with overlap
/// features.
inline int text_model_version_for(const nn::TextClassifierConfig& c) {
  return c.pooling == nn::PoolingKind::mean ? 1 : c.pair_overlap ? 3 : 2;
}

/// The configuration fields as (metadata key, value) pairs, in declaration order.
/// "config.pooling", "config.pair_hidden" and "config.pair_alignment" (version 2) are included
/// when `every_field` or when the pooling is not mean; without them a model of mean pooling
/// gives the entries of version 1 (its files and checkpoint fingerprints are unchanged).
/// "config.pair_overlap" (version 3) is included when `every_field` or when it is true, so a
/// pair head without overlap features gives the entries of version 2.
inline std::vector<std::pair<std::string, std::string>> config_entries(
    const nn::TextClassifierConfig& c, bool every_field = false) {
  auto i = [](Index v) { return std::to_string(v); };
  std::vector<std::pair<std::string, std::string>> entries = {
      {"config.vocab_size", i(c.vocab_size)},
      {"config.max_length", i(c.max_length)},
      {"config.d_model", i(c.d_model)},
      {"config.num_heads", i(c.num_heads)},
      {"config.d_ff", i(c.d_ff)},
      {"config.num_layers", i(c.num_layers)},
      {"config.num_classes", i(c.num_classes)},
      {"config.dropout", shortest_decimal(c.dropout)},
      {"config.attention", nn::to_string(c.attention)},
      {"config.num_features", i(c.num_features)},
      {"config.shared_omega", bool_text(c.shared_omega)},
      {"config.train_omega", bool_text(c.train_omega)},
      {"config.tied_qk", bool_text(c.tied_qk)},
      {"config.use_segments", bool_text(c.use_segments)},
      {"config.num_segments", i(c.num_segments)},
      {"config.layer_norm_eps", shortest_decimal(c.layer_norm_eps)},
      {"config.embedding_init_std", shortest_decimal(c.embedding_init_std)},
      {"config.num_threads", std::to_string(c.num_threads)}};
  if (every_field || c.pooling != nn::PoolingKind::mean) {
    entries.emplace_back("config.pooling", nn::to_string(c.pooling));
    entries.emplace_back("config.pair_hidden", i(c.pair_hidden));
    entries.emplace_back("config.pair_alignment", bool_text(c.pair_alignment));
  }
  if (every_field || c.pair_overlap)
    entries.emplace_back("config.pair_overlap", bool_text(c.pair_overlap));
  return entries;
}

}  // namespace detail

}  // namespace coulomb::io
