// SPDX-License-Identifier: MIT
/// @file features/registry.hpp
/// @brief The registry of the feature maps a model file can record: one row per map, giving
/// its type, its options struct, its stable key ("favor", "rff", …) and which options beyond
/// the Draw policy the file keeps (PORF's ε, RFF's bandwidth σ). Saving, loading, run-time
/// dispatch (dispatch_feature_map) and the tools' lists of names all read this one table
/// (feature_map_registry); docs/feature_maps.md says how to add a row.
///
/// A map's key is fixed once files exist (it is stored in them); Map::name() is the name of
/// its class in messages. Both are unique over the rows (checked at compile time).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/printable.hpp"
#include "../core/random.hpp"
#include "draw.hpp"
#include "favor.hpp"
#include "feature_map.hpp"
#include "porf.hpp"
#include "rff.hpp"
#include "softmax_features.hpp"

namespace coulomb {

/// What the registry records of a map, whatever its scalar type: the stable key and the
/// options beyond the Draw policy that a file keeps.
struct FeatureMapRecord {
  std::string_view key{};        ///< stable name in files and on command lines
  bool takes_epsilon = false;    ///< ε is an option (PORF-softplus, PORF-relu); else it is 0
  bool takes_bandwidth = false;  ///< the bandwidth σ is an option (RFF); else it is not stored
  std::string_view label{};      ///< name in tables and reports ("FAVOR+"; the key when empty)
};

/// One row of the registry: the map type `Map`, built from options of type `Options` (a struct
/// with a `Draw draw` field, and `epsilon` or `bandwidth` fields for the options it records).
template <typename Map, typename Options>
struct FeatureMapEntry : FeatureMapRecord {
  using map_type = Map;          ///< the feature map
  using options_type = Options;  ///< its construction options
};

/// The registry, for scalar type S: every feature map a model file can record. To register a
/// map, add its row here (docs/feature_maps.md, "How to add a feature map"); keys are part of
/// the file format and never change. New rows go last: the order is the order of
/// feature_map_names.
template <RealScalar S>
inline constexpr std::tuple feature_map_registry{
    FeatureMapEntry<FavorPlus<S>, FavorOptions>{{.key = "favor", .label = "FAVOR+"}},
    FeatureMapEntry<Porf<S, Exp>, PorfOptions>{{.key = "porf-exp", .label = "PORF-exp"}},
    FeatureMapEntry<Porf<S, Softplus>, PorfOptions>{
        {.key = "porf-softplus", .takes_epsilon = true, .label = "PORF-softplus"}},
    FeatureMapEntry<Porf<S, Relu>, PorfOptions>{
        {.key = "porf-relu", .takes_epsilon = true, .label = "PORF-relu"}},
    FeatureMapEntry<SoftmaxFeat<S>, SoftmaxFeatOptions>{
        {.key = "softmax-feat", .label = "softmaxfeat"}},
    FeatureMapEntry<Rff<S>, RffOptions>{{.key = "rff", .takes_bandwidth = true, .label = "RFF"}},
    FeatureMapEntry<RffCosSin<S>, RffOptions>{
        {.key = "rff-cos-sin", .takes_bandwidth = true, .label = "RFF-cos-sin"}}};

namespace detail {

template <RealScalar S>
using FeatureMapRegistryType = std::remove_cvref_t<decltype(feature_map_registry<S>)>;

template <RealScalar S>
inline constexpr std::size_t feature_map_count = std::tuple_size_v<FeatureMapRegistryType<S>>;

/// The row of `Map` in the registry of its scalar type, or the number of rows.
template <typename Map, typename Registry>
struct FeatureMapRow;

template <typename Map, typename... Entries>
struct FeatureMapRow<Map, std::tuple<Entries...>> {
  static constexpr std::size_t index = [] {
    constexpr bool same[] = {std::is_same_v<typename Entries::map_type, Map>...};
    std::size_t i = 0;
    while (i < sizeof...(Entries) && !same[i]) ++i;
    return i;
  }();
};

template <typename Map>
constexpr std::size_t feature_map_row() noexcept {
  using S = typename Map::Scalar;
  return FeatureMapRow<Map, FeatureMapRegistryType<S>>::index;
}

/// The registry without its types: one FeatureMapRecord per row, in order.
inline constexpr auto feature_map_records = std::apply(
    [](const auto&... entry) { return std::array<FeatureMapRecord, sizeof...(entry)>{entry...}; },
    feature_map_registry<float>);

// Keys and class names are unique (a name() depends on the form, not on the scalar type).
inline constexpr bool feature_map_registry_is_unique = std::apply(
    [](const auto&... entry) {
      const std::array<std::string_view, sizeof...(entry)> keys{entry.key...};
      const std::array<std::string_view, sizeof...(entry)> names{
          std::remove_cvref_t<decltype(entry)>::map_type::name()...};
      for (std::size_t i = 0; i < keys.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
          if (keys[i] == keys[j] || names[i] == names[j]) return false;
      return true;
    },
    feature_map_registry<float>);
static_assert(feature_map_registry_is_unique,
              "feature_map_registry: two rows share a key or a map name()");

}  // namespace detail

/// The stable key of feature map type `Map` (its row in feature_map_registry), or an empty
/// view for a map that is not registered: "favor" (FavorPlus), "porf-exp", "porf-softplus",
/// "porf-relu" (Porf), "softmax-feat" (SoftmaxFeat), "rff" (Rff),
/// "rff-cos-sin" (RffCosSin), for float and double alike.
template <typename Map>
constexpr std::string_view feature_map_name() noexcept {
  using S = typename Map::Scalar;
  constexpr std::size_t row = detail::feature_map_row<Map>();
  if constexpr (row < detail::feature_map_count<S>)
    return std::get<row>(feature_map_registry<S>).key;
  else
    return {};
}

/// Whether `Map` has a row in feature_map_registry (model files can record it).
template <typename Map>
inline constexpr bool is_named_feature_map_v = !feature_map_name<Map>().empty();

/// Every registered key, in the order of the registry.
inline constexpr auto feature_map_names = std::apply(
    [](const auto&... entry) {
      return std::array<std::string_view, sizeof...(entry)>{entry.key...};
    },
    feature_map_registry<float>);

/// The registry's record of the map with key `name`, or nothing.
constexpr std::optional<FeatureMapRecord> find_feature_map(std::string_view name) noexcept {
  for (const FeatureMapRecord& r : detail::feature_map_records)
    if (r.key == name) return r;
  return std::nullopt;
}

/// The keys as one string, "favor, porf-exp, ..." (for messages and --help).
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
  throw_invalid(where, "unknown feature map '" + printable_name(name) +
                           "' (valid names: " + feature_map_name_list() + ")");
}

template <RealScalar S, std::size_t I, typename F>
decltype(auto) dispatch_feature_map_from(std::string_view name, F&& f) {
  const auto& entry = std::get<I>(feature_map_registry<S>);
  using Tag = std::type_identity<typename std::remove_cvref_t<decltype(entry)>::map_type>;
  if constexpr (I + 1 == feature_map_count<S>) {
    if (name != entry.key) unknown_feature_map(name, "coulomb::dispatch_feature_map");
    return std::forward<F>(f)(Tag{});
  } else {
    if (name == entry.key) return std::forward<F>(f)(Tag{});
    return dispatch_feature_map_from<S, I + 1>(name, std::forward<F>(f));
  }
}

}  // namespace detail

/// Calls `f(std::type_identity<Map>{})` with the registered map type `Map` (scalar S) whose key
/// is `name`, and returns what it returns; every branch of `f` must return the same type.
/// Throws invalid_argument listing the valid names for an unknown name. Every registered map
/// type is instantiated, so `f` must compile for each of them. Use:
///
///     dispatch_feature_map<float>(name, [&](auto tag) {
///       using Map = typename decltype(tag)::type;
///       nn::TextClassifier<Map> model(config, seed);
///       ...
///     });
template <RealScalar S, typename F>
decltype(auto) dispatch_feature_map(std::string_view name, F&& f) {
  return detail::dispatch_feature_map_from<S, 0>(name, std::forward<F>(f));
}

/// The key and the options of a registered map: what a file records so that a loaded model's
/// maps behave like the saved ones (the Draw policy matters for redraw_omega, ε for
/// PORF-softplus and PORF-relu, σ for RFF's reference kernel and redraws).
struct FeatureMapSpec {
  std::string name = "favor";        ///< the map's key (one of feature_map_names)
  Draw draw = Draw::orthogonal_chi;  ///< the maps' Draw policy (FeatureMapBase::draw_policy)
  double epsilon = 0.0;              ///< PORF's additive floor ε (0 for the other maps)
  double bandwidth = 1.0;            ///< RFF's bandwidth σ (1 for the other maps)

  /// Equal when every field is.
  friend bool operator==(const FeatureMapSpec&, const FeatureMapSpec&) = default;
};

/// The spec of `map`: its key, Draw policy, ε (PORF) and bandwidth (RFF). `Map` must be
/// registered.
template <FeatureMap Map>
FeatureMapSpec feature_map_spec(const Map& map) {
  static_assert(is_named_feature_map_v<Map>,
                "feature_map_spec: this feature map type is not in feature_map_registry");
  FeatureMapSpec spec;
  spec.name = std::string(feature_map_name<Map>());
  spec.draw = map.draw_policy();
  if constexpr (requires { map.epsilon(); }) spec.epsilon = map.epsilon();
  if constexpr (requires { map.bandwidth(); }) spec.bandwidth = map.bandwidth();
  return spec;
}

/// A map of type `Map` with the options of `spec`, m = `num_particles` particles in dimension d
/// = `input_dim` drawn from `rng` (a prototype for nn::TextClassifier's constructor). Throws
/// invalid_argument when spec.name is not `Map`'s key, or for options the map rejects (a
/// negative ε, a non-zero ε for porf-exp, a bandwidth that is not positive).
template <FeatureMap Map>
Map make_feature_map(const FeatureMapSpec& spec, Index input_dim, Index num_particles, Rng& rng) {
  static_assert(is_named_feature_map_v<Map>,
                "make_feature_map: this feature map type is not in feature_map_registry");
  constexpr std::string_view name = feature_map_name<Map>();
  detail::require(
      spec.name == name, "coulomb::make_feature_map",
      "argument 'spec.name' is '" + spec.name + "', the type is '" + std::string(name) + "'");
  using S = typename Map::Scalar;
  using Entry = std::remove_cvref_t<decltype(std::get<detail::feature_map_row<Map>()>(
      feature_map_registry<S>))>;
  typename Entry::options_type options{};
  options.draw = spec.draw;
  if constexpr (requires { options.epsilon; }) options.epsilon = spec.epsilon;
  if constexpr (requires { options.bandwidth; }) options.bandwidth = spec.bandwidth;
  return Map(input_dim, num_particles, rng, options);
}

/// The Draw value called `name` by coulomb::to_string(Draw) ("iid", "orthogonal_chi",
/// "orthogonal_sqrt_d"), or nothing.
inline std::optional<Draw> parse_draw(std::string_view name) noexcept {
  for (const Draw d : {Draw::iid, Draw::orthogonal_chi, Draw::orthogonal_sqrt_d}) {
    if (name == to_string(d)) return d;
  }
  return std::nullopt;
}

}  // namespace coulomb
