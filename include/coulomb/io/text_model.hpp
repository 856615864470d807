// SPDX-License-Identifier: MIT
/// @file io/text_model.hpp
/// @brief Saving and loading a whole trained text classifier (nn::TextClassifier) in one model
/// file (io/model_file.hpp): configuration, scalar type, feature map and its options,
/// vocabulary, encoder options, every parameter (every Ω included) and free-form metadata; and
/// the stable names of the feature maps a text model can use, with a run-time dispatch from a
/// name to the map's type. Layout: docs/file_format.md (section "Text models"); use:
/// docs/model.md (section "Saving and loading").
///
/// A program that knows the model's types loads it with load_text_model<S, Map>(path). A
/// program that does not (an evaluation tool) lets visit_text_model read the file, find the
/// scalar type and the feature map it names, and call it with the loaded model:
///
///     coulomb::io::visit_text_model(path, [&](auto& loaded) {  // LoadedTextModel<S, Map>&
///       loaded.model.forward(batch, logits);
///       ...
///     });
///
/// Every loader that takes a path reads the file exactly once, so a pipe, a FIFO or /dev/stdin
/// works; read_text_model_header followed by load_text_model reads it twice.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/draw.hpp"
#include "../features/favor.hpp"
#include "../features/feature_map.hpp"
#include "../features/porf.hpp"
#include "../features/softmax_features.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/encoder.hpp"
#include "../text/vocabulary.hpp"
#include "model_file.hpp"
#include "parameters.hpp"

namespace coulomb::io {

// ---- feature-map names ------------------------------------------------------------------------

/// The stable name of feature map type `Map` in a text-model file, or an empty view for a map
/// that text models cannot store. The names (docs/model.md): "favor" (FavorPlus), "porf-exp"
/// (Porf with Exp), "porf-softplus", "porf-relu" and "softmax-feat" (SoftmaxFeatures, plain
/// form), for float and double alike (the scalar type is stored on its own).
template <typename Map>
constexpr std::string_view feature_map_name() noexcept {
  using S = typename Map::Scalar;
  if constexpr (std::is_same_v<Map, FavorPlus<S>>)
    return "favor";
  else if constexpr (std::is_same_v<Map, Porf<S, Exp>>)
    return "porf-exp";
  else if constexpr (std::is_same_v<Map, Porf<S, Softplus>>)
    return "porf-softplus";
  else if constexpr (std::is_same_v<Map, Porf<S, Relu>>)
    return "porf-relu";
  else if constexpr (std::is_same_v<Map, SoftmaxFeatures<S, SoftmaxForm::plain>>)
    return "softmax-feat";
  else
    return {};
}

/// Whether text-model files can store feature map type `Map` (it has a feature_map_name).
template <typename Map>
inline constexpr bool is_named_feature_map_v = !feature_map_name<Map>().empty();

/// Every feature-map name, in the order of dispatch_feature_map.
inline constexpr std::array<std::string_view, 5> feature_map_names = {
    "favor", "porf-exp", "porf-softplus", "porf-relu", "softmax-feat"};

/// The feature-map names as one string, "favor, porf-exp, ..." (for messages and --help).
inline std::string feature_map_name_list() {
  std::string out;
  for (const auto name : feature_map_names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

namespace detail {

[[noreturn]] inline void unknown_feature_map(std::string_view name, std::string_view where) {
  std::string shown;
  for (std::size_t i = 0; i < name.size() && i < 60; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    shown += (c < 0x20 || c == 0x7F) ? '?' : static_cast<char>(c);
  }
  coulomb::detail::throw_invalid(
      where, "unknown feature map '" + shown + "' (valid names: " + feature_map_name_list() + ")");
}

}  // namespace detail

/// Calls `f(std::type_identity<Map>{})` with the feature map type `Map<S>` named `name` (see
/// feature_map_name) and returns what it returns; every branch of `f` must return the same
/// type. Throws invalid_argument listing the valid names for an unknown name. Every map type
/// is instantiated, so `f` must compile for each of them. Use:
///
///     dispatch_feature_map<float>(name, [&](auto tag) {
///       using Map = typename decltype(tag)::type;
///       nn::TextClassifier<float, Map> model(config, seed);
///       ...
///     });
template <RealScalar S, typename F>
decltype(auto) dispatch_feature_map(std::string_view name, F&& f) {
  if (name == "favor") return std::forward<F>(f)(std::type_identity<FavorPlus<S>>{});
  if (name == "porf-exp") return std::forward<F>(f)(std::type_identity<Porf<S, Exp>>{});
  if (name == "porf-softplus") return std::forward<F>(f)(std::type_identity<Porf<S, Softplus>>{});
  if (name == "porf-relu") return std::forward<F>(f)(std::type_identity<Porf<S, Relu>>{});
  if (name == "softmax-feat")
    return std::forward<F>(f)(std::type_identity<SoftmaxFeatures<S, SoftmaxForm::plain>>{});
  detail::unknown_feature_map(name, "coulomb::io::dispatch_feature_map");
}

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
/// the scalar type `scalar` (Map::Scalar is float or double). Instantiates `f` for every map and
/// both scalar types (ten instantiations). Throws as dispatch_scalar and dispatch_feature_map.
template <typename F>
decltype(auto) dispatch_text_model(ScalarType scalar, std::string_view name, F&& f) {
  return dispatch_scalar(scalar, [&](auto scalar_tag) -> decltype(auto) {
    using S = typename decltype(scalar_tag)::type;
    return dispatch_feature_map<S>(name, f);
  });
}

// ---- feature-map options ----------------------------------------------------------------------

/// The name and the options of a text model's feature map: what a file records so that the
/// loaded model's maps behave like the saved ones (the Draw policy matters for redraw_omega,
/// ε for PORF-softplus and PORF-relu).
struct FeatureMapSpec {
  std::string name = "favor";        ///< one of feature_map_names
  Draw draw = Draw::orthogonal_chi;  ///< the maps' Draw policy (FeatureMapBase::draw_policy)
  double epsilon = 0.0;              ///< PORF's additive floor ε (0 for the other maps)

  /// Equal when every field is.
  friend bool operator==(const FeatureMapSpec&, const FeatureMapSpec&) = default;
};

/// The spec of `map`: its name, Draw policy and (PORF) ε. `Map` must be a named map.
template <FeatureMap Map>
FeatureMapSpec feature_map_spec(const Map& map) {
  static_assert(is_named_feature_map_v<Map>,
                "feature_map_spec: text-model files cannot store this feature map type");
  FeatureMapSpec spec;
  spec.name = std::string(feature_map_name<Map>());
  spec.draw = map.draw_policy();
  if constexpr (requires { map.epsilon(); }) spec.epsilon = map.epsilon();
  return spec;
}

/// A map of type `Map` with the options of `spec`, m = `num_particles` particles in dimension d
/// = `input_dim` drawn from `rng` (a prototype for nn::TextClassifier's constructor). Throws
/// invalid_argument when spec.name is not `Map`'s name, or for options the map rejects (a
/// negative ε, a non-zero ε for porf-exp).
template <FeatureMap Map>
Map make_feature_map(const FeatureMapSpec& spec, Index input_dim, Index num_particles, Rng& rng) {
  static_assert(is_named_feature_map_v<Map>,
                "make_feature_map: text-model files cannot store this feature map type");
  constexpr std::string_view name = feature_map_name<Map>();
  coulomb::detail::require(
      spec.name == name, "coulomb::io::make_feature_map",
      "argument 'spec.name' is '" + spec.name + "', the type is '" + std::string(name) + "'");
  using S = typename Map::Scalar;
  if constexpr (std::is_same_v<Map, FavorPlus<S>>) {
    FavorOptions o;
    o.draw = spec.draw;
    return Map(input_dim, num_particles, rng, o);
  } else if constexpr (std::is_same_v<Map, SoftmaxFeatures<S, SoftmaxForm::plain>>) {
    SoftmaxFeatureOptions o;
    o.draw = spec.draw;
    return Map(input_dim, num_particles, rng, o);
  } else {
    PorfOptions o;
    o.draw = spec.draw;
    o.epsilon = spec.epsilon;
    return Map(input_dim, num_particles, rng, o);
  }
}

/// The Draw value called `name` by coulomb::to_string(Draw) ("iid", "orthogonal_chi",
/// "orthogonal_sqrt_d"), or nothing.
inline std::optional<Draw> parse_draw(std::string_view name) noexcept {
  for (const Draw d : {Draw::iid, Draw::orthogonal_chi, Draw::orthogonal_sqrt_d}) {
    if (name == to_string(d)) return d;
  }
  return std::nullopt;
}

// ---- text-model files -------------------------------------------------------------------------

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
template <RealScalar S, FeatureMap Map>
struct LoadedTextModel {
  nn::TextClassifier<S, Map> model;  ///< the classifier, parameters and Ω as saved
  Vocabulary vocabulary;             ///< the vocabulary (with its tokenizer options)
  TextModelHeader header;            ///< configuration, feature map, encoder options, metadata

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
  const std::string& attention = r.text("config.attention");
  if (attention == "linear")
    c.attention = nn::AttentionKind::linear;
  else if (attention == "softmax")
    c.attention = nn::AttentionKind::softmax;
  else
    r.bad("config.attention", "'linear' or 'softmax'");
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
    const std::string& pooling = r.text("config.pooling");
    if (pooling == "mean")
      c.pooling = nn::PoolingKind::mean;
    else if (pooling == "pair")
      c.pooling = nn::PoolingKind::pair;
    else
      r.bad("config.pooling", "'mean' or 'pair'");
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

  h.feature_map.name = r.text("feature_map.name");
  bool known = false;
  for (const auto name : feature_map_names) known = known || h.feature_map.name == name;
  if (!known)
    r.fail("metadata 'feature_map.name' is '" + printable_name(h.feature_map.name) +
           "', not a feature map this build knows (" + feature_map_name_list() + ")");
  const auto draw = parse_draw(r.text("feature_map.draw"));
  if (!draw) r.bad("feature_map.draw", "'iid', 'orthogonal_chi' or 'orthogonal_sqrt_d'");
  h.feature_map.draw = *draw;
  h.feature_map.epsilon = r.real("feature_map.epsilon");
  const bool takes_epsilon =
      h.feature_map.name == "porf-softplus" || h.feature_map.name == "porf-relu";
  if (h.feature_map.epsilon < 0.0 || (!takes_epsilon && h.feature_map.epsilon != 0.0))
    r.bad("feature_map.epsilon",
          takes_epsilon ? "a number >= 0" : "0 (the map '" + h.feature_map.name + "' has no ε)");

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

/// Throws io_error unless a file of `header` can be loaded as TextClassifier<S, Map>: same
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

/// Re-sets every Ω so that the layers' feature maps hold the loaded values now (not only at the
/// next forward).
template <RealScalar S, FeatureMap Map>
void sync_omegas(nn::TextClassifier<S, Map>& model) {
  for (Index i = 0; i < model.num_omegas(); ++i) {
    const Matrix<S> omega = model.omega(i);
    model.set_omega(i, omega);
  }
}

/// Throws io_error, before anything is copied into `model`, unless every tensor of `file` that
/// would become one of model's Ω is finite: a feature map cannot hold a non-finite Ω, even when
/// the container reader accepted non-finite entries (ReadOptions::allow_non_finite, which other
/// parameters may use). A missing tensor is left to load_parameters.
template <RealScalar S, FeatureMap Map>
void require_finite_omegas(const ModelFile<S>& file, nn::TextClassifier<S, Map>& model,
                           const std::string& where) {
  for (const auto& p : model.parameters()) {
    bool is_omega = false;
    for (Index i = 0; i < model.num_omegas(); ++i)
      is_omega = is_omega || p.value == &model.omega(i);
    if (!is_omega) continue;
    const std::string name = std::string(TextModelFormat::tensor_prefix) + p.name;
    const Matrix<S>* t = file.find_tensor(name);
    if (t == nullptr || coulomb::detail::all_finite(*t)) continue;
    for (Index c = 0; c < t->cols(); ++c) {
      for (Index r = 0; r < t->rows(); ++r) {
        if (std::isfinite((*t)(r, c))) continue;
        std::ostringstream value;
        value << (*t)(r, c);
        throw io_error(where + ": '" + file.source() + "': tensor '" + name +
                       "' (a feature map's Ω) has a non-finite entry " + value.str() + " at (" +
                       std::to_string(r) + ", " + std::to_string(c) +
                       "); Ω must be finite even when other parameters may not be "
                       "(ReadOptions::allow_non_finite)");
      }
    }
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

/// Adds a whole text model to `file`: the layout of docs/file_format.md (section "Text
/// models") — metadata "kind", "text_model.version" (1 for mean pooling, 2 for the pair head,
/// 3 for the pair head with overlap features), "text_model.scalar", every field of the
/// configuration ("config.<field>"; "config.pooling", "config.pair_hidden" and
/// "config.pair_alignment" from version 2 on, "config.pair_overlap" in version 3), the feature
/// map ("feature_map.name", ".draw", ".epsilon"), the encoder options ("encoder.max_length",
/// "encoder.add_cls") and `metadata` ("meta.<key>"); the blob "vocabulary" (Vocabulary::write's
/// text); and every parameter (Ω included) as the tensor "model.<name>". A trainer may add more
/// (optimizer state under other prefixes) before saving. Throws invalid_argument, with `file`
/// unchanged, when the vocabulary's size is not config.vocab_size, encoder.max_length is not in [1
/// + add_cls, config.max_length], a metadata key is empty, or the file already holds one of these
/// names.
template <RealScalar S, FeatureMap Map>
void add_text_model(ModelFile<S>& file, const nn::TextClassifier<S, Map>& model,
                    const Vocabulary& vocabulary, const EncoderOptions& encoder,
                    const TextModelMetadata& metadata = {}) {
  static_assert(is_named_feature_map_v<Map>,
                "add_text_model: text-model files cannot store this feature map type (see "
                "coulomb::io::feature_map_names)");
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
  add_parameters(out, const_cast<nn::TextClassifier<S, Map>&>(model).parameters(),
                 TextModelFormat::tensor_prefix);
  file = std::move(out);
}

/// The model file of a text model (see add_text_model), in memory.
template <RealScalar S, FeatureMap Map>
ModelFile<S> text_model_file(const nn::TextClassifier<S, Map>& model, const Vocabulary& vocabulary,
                             const EncoderOptions& encoder,
                             const TextModelMetadata& metadata = {}) {
  ModelFile<S> file;
  add_text_model(file, model, vocabulary, encoder, metadata);
  return file;
}

/// Saves a whole text model at `path` in one model file (layout: add_text_model), atomically:
/// a crash or an error leaves the previous file intact (io/atomic_file.hpp). Throws as
/// add_text_model, io_error naming `path` when it cannot be written, numerical_error when a
/// parameter holds NaN or ∞ (unless options.allow_non_finite).
template <RealScalar S, FeatureMap Map>
void save_text_model(const std::string& path, const nn::TextClassifier<S, Map>& model,
                     const Vocabulary& vocabulary, const EncoderOptions& encoder,
                     const TextModelMetadata& metadata = {}, const WriteOptions& options = {}) {
  save_model_file(path, text_model_file(model, vocabulary, encoder, metadata), options);
}

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

/// The text model held in `file` as TextClassifier<S, Map>: configuration from the file,
/// every parameter and Ω as saved (its logits are bit-identical to the saved model's), the
/// vocabulary and the header. Throws io_error naming the file for a file that is not a text
/// model, a missing or malformed field (naming the metadata key), a scalar type or (with linear
/// attention) a feature map other than S and Map (naming both), a vocabulary that does not
/// parse or whose size is not config.vocab_size, and a missing, extra or misshapen tensor. With
/// softmax attention the model has no feature map, and any Map loads it.
template <RealScalar S, FeatureMap Map>
LoadedTextModel<S, Map> load_text_model(const ModelFile<S>& file,
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
  LoadedTextModel<S, Map> loaded{nn::TextClassifier<S, Map>(config, prototype, 0),
                                 std::move(vocabulary), std::move(header)};
  detail::require_finite_omegas(file, loaded.model, where);
  load_parameters(file, loaded.model.parameters(), TextModelFormat::tensor_prefix);
  detail::sync_omegas(loaded.model);
  return loaded;
}

/// Reads the text-model file at `path` once (a pipe or FIFO works; see the overload for a
/// parsed file). Throws io_error naming `path` as load_model_file for a file that cannot be
/// read, is truncated or corrupted, or stores another scalar type than S.
template <RealScalar S, FeatureMap Map>
LoadedTextModel<S, Map> load_text_model(const std::string& path,
                                        const TextModelLoadOptions& options = {}) {
  return load_text_model<S, Map>(
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
template <RealScalar S, FeatureMap Map>
TextModelAssets load_text_model_into(const std::string& path, nn::TextClassifier<S, Map>& model,
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
  }
  if (count > 0)
    throw io_error(where + ": '" + path + "': the file was saved by a model of another " +
                   "configuration (" + std::to_string(count) + " difference" +
                   (count > 1 ? "s" : "") + "):" + problems);
  Vocabulary vocabulary = detail::parse_text_model_vocabulary(file, header, where);
  detail::require_finite_omegas(file, model, where);
  load_parameters(file, model.parameters(), TextModelFormat::tensor_prefix);
  detail::sync_omegas(model);
  return TextModelAssets{std::move(vocabulary), std::move(header)};
}

/// Reads the text-model file at `path` once, then calls `f(loaded)` with the
/// LoadedTextModel<S, Map>& of the scalar type and feature map the file names, and returns what
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
      auto loaded = load_text_model<S, Map>(file, options);
      return f(loaded);
    });
  });
}

}  // namespace coulomb::io
