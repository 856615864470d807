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
/// program that does not (an evaluation tool) reads the scalar type and the feature-map name
/// first, then dispatches:
///
///     const auto header = coulomb::io::read_text_model_header(path);
///     coulomb::io::dispatch_text_model(header.scalar, header.feature_map.name,
///                                      [&](auto tag) {
///       using Map = typename decltype(tag)::type;     // e.g. FavorPlus<float>
///       using S = typename Map::Scalar;
///       auto loaded = coulomb::io::load_text_model<S, Map>(path);
///       ...
///     });
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/draw.hpp"
#include "../features/favor.hpp"
#include "../features/feature_map.hpp"
#include "../features/porf.hpp"
#include "../features/softmax_features.hpp"
#include "model_file.hpp"

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
  coulomb::detail::throw_invalid(where, "unknown feature map '" + shown +
                                            "' (valid names: " + feature_map_name_list() + ")");
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
  coulomb::detail::throw_invalid(
      "coulomb::io::dispatch_scalar",
      "argument 'scalar' is " + scalar_type_name(static_cast<std::uint8_t>(scalar)) +
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
  coulomb::detail::require(spec.name == name, "coulomb::io::make_feature_map",
                           "argument 'spec.name' is '" + spec.name + "', the type is '" +
                               std::string(name) + "'");
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

}  // namespace coulomb::io
