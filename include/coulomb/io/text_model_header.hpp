// SPDX-License-Identifier: MIT
/// @file io/text_model_header.hpp
/// @brief Reading and checking what a text-model file says before a model is built from it:
/// its header (configuration, feature map, encoder options, metadata; every field checked and
/// named in errors), its vocabulary, and whether its types and sizes fit (a corrupted
/// configuration cannot make the loader allocate more than the file could fill).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../features/registry.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/vocabulary.hpp"
#include "model_file.hpp"
#include "text_model_format.hpp"

namespace coulomb::io {

namespace detail {

/// Typed reads of a file's metadata, failing with io_error "where: 'source': metadata 'key'
/// ...".
template <RealScalar S>
class MetadataReader {
 public:
  MetadataReader(const ModelFile<S>& file, std::string where)
      : file_(file), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw io_error(where_ + ": '" + file_.source() + "': " + what);
  }

  const std::string& text(const std::string& key) const {
    const std::string* v = file_.find_metadata(key);
    if (v == nullptr)
      fail("the file has no metadata '" + key + "' (not a text-model file of this version?)");
    return *v;
  }

  [[noreturn]] void bad(const std::string& key, const std::string& expected) const {
    fail("metadata '" + key + "' is '" + printable_name(text(key)) + "', expected " + expected);
  }

  std::int64_t integer(const std::string& key, std::int64_t low, std::int64_t high) const {
    const std::string& t = text(key);
    std::int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || ptr != t.data() + t.size() || v < low || v > high)
      bad(key, "an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
    return v;
  }

  Index index(const std::string& key, Index low) const {
    return static_cast<Index>(integer(key, low, std::int64_t{0x7FFFFFFF}));
  }

  double real(const std::string& key) const {
    const std::string& t = text(key);
    double v = 0;
    const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || ptr != t.data() + t.size() || !std::isfinite(v))
      bad(key, "a finite number");
    return v;
  }

  /// The value of `key` among `values`, by their names (to_string); "expected 'a' or 'b'".
  template <typename Enum>
  Enum one_of(const std::string& key, std::initializer_list<Enum> values) const {
    const std::string& t = text(key);
    std::string expected;
    std::size_t k = 0;
    for (const Enum v : values) {
      if (t == to_string(v)) return v;
      expected += k == 0 ? "" : k + 1 == values.size() ? " or " : ", ";
      // Appended piece by piece: `"'" + std::string(…) + "'"` draws a false -Wrestrict from
      // GCC 12's libstdc++ in optimized builds.
      expected += '\'';
      expected += to_string(v);
      expected += '\'';
      ++k;
    }
    bad(key, expected);
  }

  bool boolean(const std::string& key) const {
    const std::string& t = text(key);
    if (t == "true") return true;
    if (t == "false") return false;
    bad(key, "'true' or 'false'");
  }

 private:
  const ModelFile<S>& file_;
  std::string where_;
};

/// The header of a parsed text-model file; every field checked (io_error naming the file and
/// the metadata key otherwise).
template <RealScalar S>
TextModelHeader parse_text_model_header(const ModelFile<S>& file, const std::string& where) {
  using TF = TextModelFormat;
  const MetadataReader<S> r(file, where);
  const std::string* kind = file.find_metadata("kind");
  if (kind == nullptr || *kind != TF::kind) {
    r.fail(kind == nullptr
               ? std::string("not a text-model file (it has no metadata 'kind'; a checkpoint or "
                             "another kind of model file?)")
               : "not a text-model file (metadata 'kind' is '" + printable_name(*kind) +
                     "', expected '" + std::string(TF::kind) + "')");
  }
  const std::int64_t version = r.integer("text_model.version", 1, 1 << 30);
  if (version < TF::oldest_version || version > TF::version)
    r.fail("unsupported text-model version " + std::to_string(version) +
           " (metadata 'text_model.version'; this build reads versions " +
           std::to_string(TF::oldest_version) + " to " + std::to_string(TF::version) + ")");

  TextModelHeader h;
  h.source = file.source();
  h.scalar = scalar_type_of<S>();
  const std::string& scalar = r.text("text_model.scalar");
  if (scalar != scalar_type_name(static_cast<std::uint8_t>(h.scalar)))
    r.fail("metadata 'text_model.scalar' is '" + printable_name(scalar) +
           "', the file's header says " + scalar_type_name(static_cast<std::uint8_t>(h.scalar)));

  nn::TextClassifierConfig& c = h.config;
  c.vocab_size = r.index("config.vocab_size", 1);
  c.max_length = r.index("config.max_length", 1);
  c.d_model = r.index("config.d_model", 1);
  c.num_heads = r.index("config.num_heads", 1);
  c.d_ff = r.index("config.d_ff", 1);
  c.num_layers = r.index("config.num_layers", 1);
  c.num_classes = r.index("config.num_classes", 2);
  c.dropout = r.real("config.dropout");
  c.attention =
      r.one_of("config.attention", {nn::AttentionKind::linear, nn::AttentionKind::softmax});
  c.num_features = r.index("config.num_features", 1);
  c.shared_omega = r.boolean("config.shared_omega");
  c.train_omega = r.boolean("config.train_omega");
  c.tied_qk = r.boolean("config.tied_qk");
  c.use_segments = r.boolean("config.use_segments");
  c.num_segments = r.index("config.num_segments", 1);
  c.layer_norm_eps = r.real("config.layer_norm_eps");
  c.embedding_init_std = r.real("config.embedding_init_std");
  c.num_threads =
      static_cast<int>(r.integer("config.num_threads", 0, nn::TextClassifierConfig::max_threads));
  if (version >= 2) {  // version 1: mean pooling, no pair head
    c.pooling = r.one_of("config.pooling", {nn::PoolingKind::mean, nn::PoolingKind::pair});
    c.pair_hidden = r.index("config.pair_hidden", 0);
    // Added to version 2 later: absent means false.
    if (file.find_metadata("config.pair_alignment") != nullptr)
      c.pair_alignment = r.boolean("config.pair_alignment");
  }
  if (version >= 3) c.pair_overlap = r.boolean("config.pair_overlap");
  try {
    nn::validate_config(c);
  } catch (const invalid_argument& e) {
    r.fail(std::string("the stored configuration is invalid: ") + e.what());
  }

  // The feature map: its key in features/registry.hpp and the options its row records.
  FeatureMapSpec& map = h.feature_map;
  map.name = r.text("feature_map.name");
  const std::optional<FeatureMapRecord> row = find_feature_map(map.name);
  if (!row)
    r.fail("metadata 'feature_map.name' is '" + printable_name(map.name) +
           "', not a feature map this build knows (" + feature_map_name_list() + ")");
  const auto draw = parse_draw(r.text("feature_map.draw"));
  if (!draw) r.bad("feature_map.draw", "'iid', 'orthogonal_chi' or 'orthogonal_sqrt_d'");
  map.draw = *draw;
  map.epsilon = r.real("feature_map.epsilon");
  if (map.epsilon < 0.0 || (!row->takes_epsilon && map.epsilon != 0.0))
    r.bad("feature_map.epsilon",
          row->takes_epsilon ? "a number >= 0" : "0 (the map '" + map.name + "' has no ε)");
  if (row->takes_bandwidth) {
    map.bandwidth = r.real("feature_map.bandwidth");
    if (!(map.bandwidth > 0.0)) r.bad("feature_map.bandwidth", "a number > 0");
  } else if (file.find_metadata("feature_map.bandwidth") != nullptr) {
    r.fail("metadata 'feature_map.bandwidth' is set, but the map '" + map.name +
           "' has no bandwidth");
  }

  h.encoder.max_length = r.index("encoder.max_length", 1);
  h.encoder.add_cls = r.boolean("encoder.add_cls");
  if (h.encoder.max_length < 1 + (h.encoder.add_cls ? 1 : 0) || h.encoder.max_length > c.max_length)
    r.fail("metadata 'encoder.max_length' is " + std::to_string(h.encoder.max_length) +
           ", expected " + std::to_string(1 + (h.encoder.add_cls ? 1 : 0)) +
           " to config.max_length = " + std::to_string(c.max_length));

  for (const auto& [key, value] : file.metadata()) {
    if (key.size() > TF::metadata_prefix.size() &&
        std::string_view(key).substr(0, TF::metadata_prefix.size()) == TF::metadata_prefix)
      h.metadata.emplace(key.substr(TF::metadata_prefix.size()), value);
  }
  return h;
}

/// The vocabulary blob of a text-model file, parsed and checked against the configuration.
template <RealScalar S>
Vocabulary parse_text_model_vocabulary(const ModelFile<S>& file, const TextModelHeader& header,
                                       const std::string& where) {
  const std::string* blob = file.find_blob(TextModelFormat::vocabulary_blob);
  if (blob == nullptr)
    throw io_error(where + ": '" + file.source() + "': the file has no blob '" +
                   std::string(TextModelFormat::vocabulary_blob) + "'");
  Vocabulary vocab = Vocabulary::parse(
      *blob, file.source() + " (blob '" + std::string(TextModelFormat::vocabulary_blob) + "')");
  if (vocab.size() != header.config.vocab_size)
    throw io_error(where + ": '" + file.source() + "': the vocabulary has " +
                   std::to_string(vocab.size()) + " tokens, metadata 'config.vocab_size' is " +
                   std::to_string(header.config.vocab_size));
  return vocab;
}

/// Throws io_error unless a file of `header` can be loaded as TextClassifier<Map>: same
/// scalar type and, with linear attention, the same feature map.
template <RealScalar S, FeatureMap Map>
void require_text_model_types(const TextModelHeader& header, const std::string& where) {
  const std::string expected_scalar =
      scalar_type_name(static_cast<std::uint8_t>(scalar_type_of<S>()));
  const std::string stored_scalar = scalar_type_name(static_cast<std::uint8_t>(header.scalar));
  if (header.scalar != scalar_type_of<S>())
    throw io_error(where + ": '" + header.source + "': scalar type is " + stored_scalar +
                   " in the file (metadata 'text_model.scalar'), the program expects " +
                   expected_scalar + " (read_text_model_header gives the type to load with)");
  constexpr std::string_view name = feature_map_name<Map>();
  if (header.config.attention == nn::AttentionKind::linear && header.feature_map.name != name)
    throw io_error(where + ": '" + header.source + "': feature map is '" + header.feature_map.name +
                   "' in the file (metadata 'feature_map.name'), the program expects '" +
                   std::string(name) + "' (read_text_model_header gives the type to load with)");
}

/// Throws io_error unless the tensors of `file` under the model prefix hold at least as many
/// entries as each of the largest blocks the configuration implies (token and position
/// embeddings, the feed-forward and attention weights of all layers, Ω, the classifier), so that
/// a corrupted configuration cannot make the model allocate more than the file could fill: the
/// model is built only after this check, and its parameters are then checked one by one.
template <RealScalar S>
void require_plausible_size(const ModelFile<S>& file, const TextModelHeader& header,
                            const std::string& where) {
  double stored = 0.0;
  for (const auto& t : file.tensors()) {
    if (std::string_view(t.name).substr(0, TextModelFormat::tensor_prefix.size()) ==
        TextModelFormat::tensor_prefix)
      stored += static_cast<double>(t.value.size());
  }
  const nn::TextClassifierConfig& c = header.config;
  const auto d = static_cast<double>(c.d_model);
  const auto layers = static_cast<double>(c.num_layers);
  const double omegas = c.attention == nn::AttentionKind::linear
                            ? (c.shared_omega ? 1.0 : layers) *
                                  static_cast<double>(c.num_features) * d /
                                  static_cast<double>(c.num_heads)
                            : 0.0;
  const std::pair<const char*, double> blocks[] = {
      {"config.vocab_size × config.d_model", static_cast<double>(c.vocab_size) * d},
      {"config.max_length × config.d_model", static_cast<double>(c.max_length) * d},
      {"config.num_segments × config.d_model",
       c.use_segments ? static_cast<double>(c.num_segments) * d : 0.0},
      {"config.num_layers × config.d_model × config.d_ff",
       layers * d * static_cast<double>(c.d_ff)},
      {"config.num_layers × config.d_model²", layers * d * d},
      {"4 × config.d_model × config.pair_hidden",
       c.pooling == nn::PoolingKind::pair ? 4.0 * d * static_cast<double>(c.pair_hidden) : 0.0},
      {"the Ω entries", omegas},
      {"config.d_model × config.num_classes", d * static_cast<double>(c.num_classes)}};
  auto count = [](double x) {
    return x < 9e15 ? std::to_string(static_cast<long long>(x)) : shortest_decimal(x);
  };
  for (const auto& [what, need] : blocks) {
    if (need > stored)
      throw io_error(where + ": '" + file.source() + "': the configuration needs " + what + " = " +
                     count(need) + " parameters, more than the " + count(stored) +
                     " entries of the file's tensors (a corrupted configuration?)");
  }
}

/// The model file at `path` as ModelFile<S>, read once (a pipe or FIFO cannot be read twice:
/// the scalar type is peeked from the image in memory). io_error naming `path` when it cannot be
/// read or parsed, or stores another scalar type ("..., <expects> float64<hint>").
template <RealScalar S>
ModelFile<S> read_model_file_as(const std::string& path, const ReadOptions& options,
                                const std::string& where, std::string_view expects,
                                std::string_view hint = {}) {
  const std::string bytes = read_file(path, where);
  const ScalarType stored = peek_scalar_type(image_of(bytes), path);
  if (stored != scalar_type_of<S>())
    throw io_error(where + ": '" + path + "': scalar type is " +
                   scalar_type_name(static_cast<std::uint8_t>(stored)) + " in the file, " +
                   std::string(expects) + " " +
                   scalar_type_name(static_cast<std::uint8_t>(scalar_type_of<S>())) +
                   std::string(hint));
  return parse_model_file<S>(image_of(bytes), path, options);
}

}  // namespace detail

/// The header of a text model held in `file` (everything but the vocabulary and the tensors).
/// Throws io_error naming the file and the metadata key for a file that is not a text model
/// of this version, or a field that is missing or malformed.
template <RealScalar S>
TextModelHeader text_model_header(const ModelFile<S>& file) {
  return detail::parse_text_model_header(file, "coulomb::io::text_model_header");
}

/// The header of the text-model file at `path`: scalar type, configuration, feature map,
/// encoder options and metadata, so that a program can choose the types to load it with (see
/// dispatch_text_model). Reads the file once and checks all of it (checksum included). Throws
/// io_error as load_model_file and text_model_header.
inline TextModelHeader read_text_model_header(const std::string& path,
                                              const ReadOptions& options = {}) {
  const char* where = "coulomb::io::read_text_model_header";
  const std::string bytes = read_file(path, where);
  const auto image = detail::image_of(bytes);
  return dispatch_scalar(peek_scalar_type(image, path), [&](auto tag) {
    using S = typename decltype(tag)::type;
    return detail::parse_text_model_header(parse_model_file<S>(image, path, options), where);
  });
}

}  // namespace coulomb::io
