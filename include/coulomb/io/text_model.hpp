// SPDX-License-Identifier: MIT
/// @file io/text_model.hpp
/// @brief Saving and loading a whole trained text classifier (nn::TextClassifier) in one model
/// file (io/model_file.hpp): configuration, scalar type, feature map and its options (the maps
/// of features/registry.hpp), vocabulary, encoder options, every parameter (every Ω and RFF
/// phase included) and free-form metadata. The layout's types are io/text_model_format.hpp,
/// the checks of a file before loading io/text_model_header.hpp. Layout: docs/file_format.md
/// (section "Text models"); use: docs/model.md (section "Saving and loading").
///
/// A program that knows the model's types loads it with load_text_model<Map>(path). A
/// program that does not (an evaluation tool) lets visit_text_model read the file, find the
/// scalar type and the feature map it names, and call it with the loaded model:
///
///     coulomb::io::visit_text_model(path, [&](auto& loaded) {  // LoadedTextModel<Map>&
///       loaded.model.forward(batch, logits);
///       ...
///     });
///
/// Every loader that takes a path reads the file exactly once, so a pipe, a FIFO or /dev/stdin
/// works; read_text_model_header followed by load_text_model reads it twice.
#pragma once

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../features/registry.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/encoder.hpp"
#include "../text/vocabulary.hpp"
#include "model_file.hpp"
#include "parameters.hpp"
#include "text_model_format.hpp"
#include "text_model_header.hpp"

namespace coulomb::io {

namespace detail {

/// Throws io_error, before anything is copied into `model`, unless every tensor of `file` that
/// would become one of model's Ω (or RFF phases) is finite: a feature map cannot hold a
/// non-finite Ω, even when the container reader accepted non-finite entries
/// (ReadOptions::allow_non_finite, which other parameters may use). A missing tensor is left to
/// load_parameters.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
void require_finite_omegas(const ModelFile<S>& file, nn::TextClassifier<Map>& model,
                           const std::string& where) {
  for (const auto& p : model.parameters()) {
    bool is_omega = false;
    for (Index i = 0; i < model.num_omegas(); ++i)
      is_omega = is_omega || p.value == &model.omega(i);
    const bool is_phases =
        feature_map_traits<Map>::has_phases && std::string_view(p.name).ends_with(".phases");
    if (!is_omega && !is_phases) continue;
    const std::string name = std::string(TextModelFormat::tensor_prefix) + p.name;
    const Matrix<S>* t = file.find_tensor(name);
    if (t == nullptr || coulomb::detail::all_finite(*t)) continue;
    for (Index c = 0; c < t->cols(); ++c) {
      for (Index r = 0; r < t->rows(); ++r) {
        if (std::isfinite((*t)(r, c))) continue;
        std::ostringstream value;
        value << (*t)(r, c);
        throw io_error(where + ": '" + file.source() + "': tensor '" + name +
                       "' (a feature map's " + (is_omega ? "Ω" : "phases") +
                       ") has a non-finite entry " + value.str() + " at (" + std::to_string(r) +
                       ", " + std::to_string(c) +
                       "); Ω must be finite even when other parameters may not be "
                       "(ReadOptions::allow_non_finite)");
      }
    }
  }
}

}  // namespace detail

/// Adds a whole text model to `file`: the layout of docs/file_format.md (section "Text
/// models") — metadata "kind", "text_model.version" (1 for mean pooling, 2 for the pair head,
/// 3 for the pair head with overlap features), "text_model.scalar", every field of the
/// configuration ("config.<field>"; "config.pooling", "config.pair_hidden" and
/// "config.pair_alignment" from version 2 on, "config.pair_overlap" in version 3), the feature
/// map ("feature_map.name", ".draw", ".epsilon", and ".bandwidth" for RFF), the encoder options
/// ("encoder.max_length", "encoder.add_cls") and `metadata` ("meta.<key>"); the blob "vocabulary"
/// (Vocabulary::write's text); and every parameter (Ω included) as the tensor "model.<name>". A
/// trainer may add more (optimizer state under other prefixes) before saving. Throws
/// invalid_argument, with `file` unchanged, when the vocabulary's size is not config.vocab_size,
/// encoder.max_length is not in [1
/// + add_cls, config.max_length], a metadata key is empty, or the file already holds one of these
/// names.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
void add_text_model(ModelFile<S>& file, const nn::TextClassifier<Map>& model,
                    const Vocabulary& vocabulary, const EncoderOptions& encoder,
                    const TextModelMetadata& metadata = {}) {
  static_assert(is_named_feature_map_v<Map>,
                "add_text_model: text-model files cannot store this feature map type (see "
                "coulomb::feature_map_registry)");
  const char* where = "coulomb::io::add_text_model";
  const nn::TextClassifierConfig& c = model.config();
  coulomb::detail::require(vocabulary.size() == c.vocab_size, where,
                           "argument 'vocabulary' has " + std::to_string(vocabulary.size()) +
                               " tokens, the model's config.vocab_size is " +
                               std::to_string(c.vocab_size));
  const Index min_length = 1 + (encoder.add_cls ? 1 : 0);
  coulomb::detail::require(
      encoder.max_length >= min_length && encoder.max_length <= c.max_length, where,
      "argument 'encoder.max_length' is " + std::to_string(encoder.max_length) + ", expected " +
          std::to_string(min_length) +
          " to the model's config.max_length = " + std::to_string(c.max_length));
  for (const auto& entry : metadata)
    coulomb::detail::require(!entry.first.empty(), where, "argument 'metadata' has an empty key");

  FeatureMapSpec spec;
  spec.name = std::string(feature_map_name<Map>());
  if (c.attention == nn::AttentionKind::linear) spec = feature_map_spec(model.feature_map(0));

  // Build everything in a copy first, so that `file` is unchanged when anything throws.
  ModelFile<S> out = file;
  auto set = [&](const std::string& key, std::string value) {
    coulomb::detail::require(out.find_metadata(key) == nullptr, where,
                             "the file already has metadata '" + key + "'");
    out.set_metadata(key, std::move(value));
  };
  set("kind", std::string(TextModelFormat::kind));
  set("text_model.version", std::to_string(detail::text_model_version_for(c)));
  set("text_model.scalar", scalar_type_name(static_cast<std::uint8_t>(scalar_type_of<S>())));
  for (auto& [key, value] : detail::config_entries(c)) set(key, std::move(value));
  set("feature_map.name", spec.name);
  set("feature_map.draw", to_string(spec.draw));
  set("feature_map.epsilon", detail::shortest_decimal(spec.epsilon));
  if (find_feature_map(spec.name)->takes_bandwidth)
    set("feature_map.bandwidth", detail::shortest_decimal(spec.bandwidth));
  set("encoder.max_length", std::to_string(encoder.max_length));
  set("encoder.add_cls", detail::bool_text(encoder.add_cls));
  for (const auto& [key, value] : metadata)
    set(std::string(TextModelFormat::metadata_prefix) + key, value);
  std::ostringstream vocab_text;
  vocabulary.write(vocab_text);
  coulomb::detail::require(out.find_blob(TextModelFormat::vocabulary_blob) == nullptr, where,
                           "the file already has a blob 'vocabulary'");
  out.add_blob(std::string(TextModelFormat::vocabulary_blob), vocab_text.str());
  // parameters() only hands out pointers; nothing is modified through them here.
  add_parameters(out, const_cast<nn::TextClassifier<Map>&>(model).parameters(),
                 TextModelFormat::tensor_prefix);
  file = std::move(out);
}

/// The model file of a text model (see add_text_model), in memory.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
ModelFile<S> text_model_file(const nn::TextClassifier<Map>& model, const Vocabulary& vocabulary,
                             const EncoderOptions& encoder,
                             const TextModelMetadata& metadata = {}) {
  ModelFile<S> file;
  add_text_model(file, model, vocabulary, encoder, metadata);
  return file;
}

/// Saves a whole text model at `path` in one model file (layout: add_text_model), atomically:
/// a crash or an error leaves the previous file intact (core/atomic_file.hpp). Throws as
/// add_text_model, io_error naming `path` when it cannot be written, numerical_error when a
/// parameter holds NaN or ∞ (unless options.allow_non_finite).
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
void save_text_model(const std::string& path, const nn::TextClassifier<Map>& model,
                     const Vocabulary& vocabulary, const EncoderOptions& encoder,
                     const TextModelMetadata& metadata = {}, const WriteOptions& options = {}) {
  save_model_file(path, text_model_file(model, vocabulary, encoder, metadata), options);
}

/// The text model held in `file` as TextClassifier<Map>: configuration from the file,
/// every parameter and Ω as saved (its logits are bit-identical to the saved model's), the
/// vocabulary and the header. Throws io_error naming the file for a file that is not a text
/// model, a missing or malformed field (naming the metadata key), a scalar type or (with linear
/// attention) a feature map other than S and Map (naming both), a vocabulary that does not
/// parse or whose size is not config.vocab_size, and a missing, extra or misshapen tensor. With
/// softmax attention the model has no feature map, and any Map loads it.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
LoadedTextModel<Map> load_text_model(const ModelFile<S>& file,
                                     const TextModelLoadOptions& options = {}) {
  static_assert(is_named_feature_map_v<Map>,
                "load_text_model: text-model files cannot store this feature map type");
  const std::string where = "coulomb::io::load_text_model";
  TextModelHeader header = detail::parse_text_model_header(file, where);
  detail::require_text_model_types<S, Map>(header, where);
  Vocabulary vocabulary = detail::parse_text_model_vocabulary(file, header, where);
  detail::require_plausible_size(file, header, where);
  nn::TextClassifierConfig config = header.config;
  if (options.num_threads) config.num_threads = *options.num_threads;
  FeatureMapSpec spec = header.feature_map;
  spec.name = std::string(feature_map_name<Map>());  // softmax attention: any Map
  if (config.attention != nn::AttentionKind::linear) spec = FeatureMapSpec{spec.name};
  Rng rng(0);
  const Index d_head = config.d_model / config.num_heads;
  Map prototype = [&] {
    try {
      return make_feature_map<Map>(spec, d_head, config.num_features, rng);
    } catch (const invalid_argument& e) {
      throw io_error(where + ": '" + file.source() + "': the stored feature-map options " +
                     "are invalid: " + e.what());
    }
  }();
  LoadedTextModel<Map> loaded{nn::TextClassifier<Map>(config, prototype, 0), std::move(vocabulary),
                              std::move(header)};
  detail::require_finite_omegas(file, loaded.model, where);
  load_parameters(file, loaded.model.parameters(), TextModelFormat::tensor_prefix);
  return loaded;
}

/// Reads the text-model file at `path` once (a pipe or FIFO works; see the overload for a
/// parsed file). Throws io_error naming `path` as load_model_file for a file that cannot be
/// read, is truncated or corrupted, or stores another scalar type than S.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
LoadedTextModel<Map> load_text_model(const std::string& path,
                                     const TextModelLoadOptions& options = {}) {
  return load_text_model<Map>(
      detail::read_model_file_as<S>(path, options.read, "coulomb::io::load_text_model",
                                    "the program expects",
                                    " (read_text_model_header gives the type to load with)"),
      options);
}

/// Loads the parameters of the text-model file at `path` into an existing `model`, after
/// checking that the file was saved by a model of the same configuration (every field but
/// train_omega and num_threads, which are run-time state) and feature map with the same
/// options; returns the vocabulary and the header. Throws io_error naming the file and every
/// field that differs with both values ("config.d_model is '64' in the file, the model has
/// '32'"), and as load_text_model; `model` is unchanged on error. Reads the file once.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
TextModelAssets load_text_model_into(const std::string& path, nn::TextClassifier<Map>& model,
                                     const ReadOptions& options = {}) {
  const std::string where = "coulomb::io::load_text_model_into";
  const ModelFile<S> file = detail::read_model_file_as<S>(path, options, where, "the model's is");
  TextModelHeader header = detail::parse_text_model_header(file, where);
  detail::require_text_model_types<S, Map>(header, where);
  std::string problems;
  int count = 0;
  auto compare = [&](const std::string& key, const std::string& in_file,
                     const std::string& in_model) {
    if (in_file == in_model) return;
    problems +=
        "\n  " + key + " is '" + in_file + "' in the file, the model has '" + in_model + "'";
    ++count;
  };
  const auto stored_config = detail::config_entries(header.config, true);
  const auto model_config = detail::config_entries(model.config(), true);
  for (std::size_t k = 0; k < stored_config.size(); ++k) {
    const std::string& key = stored_config[k].first;
    if (key == "config.train_omega" || key == "config.num_threads") continue;
    compare(key, stored_config[k].second, model_config[k].second);
  }
  if (model.config().attention == nn::AttentionKind::linear) {
    const FeatureMapSpec spec = feature_map_spec(model.feature_map(0));
    compare("feature_map.draw", to_string(header.feature_map.draw), to_string(spec.draw));
    compare("feature_map.epsilon", detail::shortest_decimal(header.feature_map.epsilon),
            detail::shortest_decimal(spec.epsilon));
    compare("feature_map.bandwidth", detail::shortest_decimal(header.feature_map.bandwidth),
            detail::shortest_decimal(spec.bandwidth));
  }
  if (count > 0)
    throw io_error(where + ": '" + path + "': the file was saved by a model of another " +
                   "configuration (" + std::to_string(count) + " difference" +
                   (count > 1 ? "s" : "") + "):" + problems);
  Vocabulary vocabulary = detail::parse_text_model_vocabulary(file, header, where);
  detail::require_finite_omegas(file, model, where);
  load_parameters(file, model.parameters(), TextModelFormat::tensor_prefix);
  return TextModelAssets{std::move(vocabulary), std::move(header)};
}

/// Reads the text-model file at `path` once, then calls `f(loaded)` with the
/// LoadedTextModel<Map>& of the scalar type and feature map the file names, and returns what
/// `f` returns (the same type for every instantiation). For programs that do not know the model's
/// types in advance (examples/evaluate.cpp); instantiates `f` and the model for both scalar
/// types and every feature map (see dispatch_text_model). Throws as load_text_model.
template <typename F>
decltype(auto) visit_text_model(const std::string& path, F&& f,
                                const TextModelLoadOptions& options = {}) {
  const char* where = "coulomb::io::visit_text_model";
  const std::string bytes = read_file(path, where);  // once: a pipe cannot be read twice
  const auto image = detail::image_of(bytes);
  return dispatch_scalar(peek_scalar_type(image, path), [&](auto scalar_tag) -> decltype(auto) {
    using S = typename decltype(scalar_tag)::type;
    const ModelFile<S> file = parse_model_file<S>(image, path, options.read);
    const TextModelHeader header = detail::parse_text_model_header(file, where);
    return dispatch_feature_map<S>(header.feature_map.name, [&](auto map_tag) -> decltype(auto) {
      using Map = typename decltype(map_tag)::type;
      auto loaded = load_text_model<Map>(file, options);
      return f(loaded);
    });
  });
}

}  // namespace coulomb::io
