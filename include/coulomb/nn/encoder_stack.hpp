// SPDX-License-Identifier: MIT
/// @file nn/encoder_stack.hpp
/// @brief The N encoder layers of the text classifier and the feature maps their attention
/// uses: the one owner of every Ω. Documented in docs/model.md.
///
/// Badiei Khuzani et al., *A Coulomb Particle Model for Learning Kernel Attention in
/// Transformers*, 2026, §4: each attention layer has its particles Ω ∈ R^{m×d_head}, shared by
/// its heads, or one Ω is shared by every layer. The stack holds one feature map per layer, or
/// one map for all of them, and each layer's attention borrows its map (MultiHeadAttention
/// constructed from std::ref). The parameter views of Ω (and of RFF phases) point into the maps
/// (FeatureMapBase::omega_storage), so that an optimizer step, a restored snapshot or a loaded
/// file changes the one copy of Ω that attention uses; forward then refreshes what the maps
/// derive from Ω (their overflow bounds, an O(m·d) pass per map). With causal attention the
/// stack also decodes one token at a time (reset, step; nn/encoder.hpp).
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/precision.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "encoder.hpp"
#include "parameter.hpp"

namespace coulomb::nn {

/// The encoder layers of a model and the feature maps of their linear attention (see the file
/// comment). Copies use their own maps: a copied stack's layers borrow the copy's maps, never
/// the original's.
template <RealScalar Scalar, FeatureMap Map>
class EncoderStack {
  static_assert(
      requires(Map & map) {
        { map.omega_storage() } -> std::same_as<Matrix<Scalar>&>;
        map.particles_written();
      },
      "EncoderStack: the feature map must expose Ω in place (omega_storage() and "
      "particles_written(), as every map derived from FeatureMapBase does)");
  static_assert(
      !feature_map_traits<Map>::has_phases ||
          requires(Map & map) {
            { map.phases_storage() } -> std::same_as<Matrix<Scalar>&>;
          },
      "EncoderStack: a feature map with phases must expose them in place (phases_storage())");

 public:
  using MatrixType = Matrix<Scalar>;        ///< dense column-major matrix
  using Layer = EncoderLayer<Scalar, Map>;  ///< one encoder layer

  /// An empty stack (no layers, no maps); assign a built one before use.
  EncoderStack() = default;

  /// `num_layers` layers with linear attention over `maps`: with `shared`, one map for every
  /// layer (maps.size() == 1, its Ω named "attention.omega"), else one map per layer
  /// (maps.size() == num_layers, "encoder.i.attention.omega"). ∂L/∂Ω is computed when
  /// options.attention.omega_gradient is set. Throws invalid_argument for num_layers < 1,
  /// another number of maps, or maps that do not fit options (input_dim() = d_model /
  /// num_heads).
  EncoderStack(const EncoderLayerOptions& options, Index num_layers, std::vector<Map> maps,
               bool shared)
      : maps_(std::move(maps)), shared_(shared), omega_gradient_(options.attention.omega_gradient) {
    const char* where = "coulomb::nn::EncoderStack::constructor";
    require_layers(num_layers, where);
    const auto count = static_cast<Index>(maps_.size());
    const Index expected = shared ? 1 : num_layers;
    if (!(count == expected))
      detail::throw_invalid(where, "argument 'maps' has " + std::to_string(count) +
                                       " maps, expected " + std::to_string(expected) +
                                       (shared ? " (shared)" : " (one per layer)"));
    for (const Map& map : maps_) {
      omega_grad_.push_back(MatrixType::Zero(map.num_particles(), map.input_dim()));
      if constexpr (feature_map_traits<Map>::has_phases)
        phases_grad_.push_back(MatrixType::Zero(map.num_particles(), 1));
    }
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (Index i = 0; i < num_layers; ++i) layers_.emplace_back(options, std::ref(map_of(i)));
  }

  /// `num_layers` layers with exact softmax attention: no maps, no Ω. Throws invalid_argument
  /// for num_layers < 1.
  EncoderStack(const EncoderLayerOptions& options, Index num_layers) {
    require_layers(num_layers, "coulomb::nn::EncoderStack::constructor");
    layers_.reserve(static_cast<std::size_t>(num_layers));
    for (Index i = 0; i < num_layers; ++i) layers_.emplace_back(options);
  }

  /// The stack of a model built from the random streams of docs/model.md: with `linear`
  /// attention, its maps drawn by make_map(map_rng) (one when `shared`, else one per layer);
  /// then layer i initialized from root.split(2 + i) and the products of every affine layer
  /// split over `num_threads` (Linear::set_num_threads).
  template <typename MakeMap>
  static EncoderStack initialized(const EncoderLayerOptions& options, Index num_layers, bool linear,
                                  bool shared, Index num_threads, Rng& map_rng, Rng& root,
                                  MakeMap&& make_map) {
    EncoderStack stack;
    if (linear) {
      const auto count = static_cast<std::size_t>(shared ? 1 : num_layers);
      std::vector<Map> maps;
      maps.reserve(count);
      for (std::size_t k = 0; k < count; ++k) maps.push_back(make_map(map_rng));
      stack = EncoderStack(options, num_layers, std::move(maps), shared);
    } else {
      stack = EncoderStack(options, num_layers);
    }
    for (Index i = 0; i < num_layers; ++i) {
      Rng layer_rng = root.split(static_cast<std::uint64_t>(2 + i));
      Layer& layer = stack.layer(i);
      layer.initialize(layer_rng);
      auto& a = layer.attention();
      for (Linear<Scalar>* l : {&a.query_projection(), &a.key_projection(), &a.value_projection(),
                                &a.output_projection(), &layer.ffn_in(), &layer.ffn_out()})
        l->set_num_threads(num_threads);
    }
    return stack;
  }

  /// A copy whose layers use the copy's maps.
  EncoderStack(const EncoderStack& other)
      : maps_(other.maps_),
        omega_grad_(other.omega_grad_),
        phases_grad_(other.phases_grad_),
        layers_(other.layers_),
        shared_(other.shared_),
        omega_gradient_(other.omega_gradient_) {
    bind_maps();
  }

  /// Copies `other`; the layers then use this stack's maps.
  EncoderStack& operator=(const EncoderStack& other) {
    if (this == &other) return *this;
    maps_ = other.maps_;
    omega_grad_ = other.omega_grad_;
    phases_grad_ = other.phases_grad_;
    layers_ = other.layers_;
    shared_ = other.shared_;
    omega_gradient_ = other.omega_gradient_;
    bind_maps();
    return *this;
  }

  /// Moves: the maps keep their addresses (a vector's storage moves), so the layers stay bound.
  EncoderStack(EncoderStack&&) = default;
  /// Moves (see the move constructor).
  EncoderStack& operator=(EncoderStack&&) = default;

  /// Number of layers N.
  Index num_layers() const noexcept { return static_cast<Index>(layers_.size()); }
  /// Layer `i` (0 <= i < num_layers(), unchecked).
  Layer& layer(Index i) noexcept { return layers_[static_cast<std::size_t>(i)]; }
  /// Layer `i`, read-only.
  const Layer& layer(Index i) const noexcept { return layers_[static_cast<std::size_t>(i)]; }

  /// Number of maps, that is of distinct Ω: 1 when shared, num_layers() per layer, 0 for
  /// softmax attention.
  Index num_maps() const noexcept { return static_cast<Index>(maps_.size()); }
  /// Whether one map (one Ω) serves every layer.
  bool shared() const noexcept { return shared_; }
  /// Which map layer `layer` uses (0 when shared).
  Index map_index(Index layer) const noexcept { return shared_ ? 0 : layer; }
  /// Map `k` (0 <= k < num_maps(), unchecked): the owner of Ω number k.
  Map& map(Index k) noexcept { return maps_[static_cast<std::size_t>(k)]; }
  /// Map `k`, read-only.
  const Map& map(Index k) const noexcept { return maps_[static_cast<std::size_t>(k)]; }

  /// Whether backward computes ∂L/∂Ω.
  bool omega_gradient() const noexcept { return omega_gradient_; }
  /// Turns the computation of ∂L/∂Ω on or off in every layer (always off without maps).
  void set_omega_gradient(bool on) {
    omega_gradient_ = on && !maps_.empty();
    for (auto& layer : layers_) layer.attention().set_omega_gradient(on);
  }

  /// x ← layer_N(… layer_1(x)) in place (EncoderLayer::forward, its affine layers in
  /// `precision`), after the maps re-derived their overflow bounds from Ω (which a parameter
  /// view may have changed).
  template <std::uniform_random_bit_generator G>
  void forward(MatrixType& x, const PaddingMask& mask, bool training, G& rng,
               InferencePrecision precision = InferencePrecision::fp32) {
    for (Map& map : maps_) map.particles_written();
    for (auto& layer : layers_) layer.forward(x, mask, training, rng, precision);
  }

  /// x ← layer_N(… layer_1(x)) in place for inference (EncoderLayer::infer: forward's values
  /// without training, keeping nothing for backward).
  void infer(MatrixType& x, const PaddingMask& mask,
             InferencePrecision precision = InferencePrecision::fp32) {
    for (Map& map : maps_) map.particles_written();
    for (auto& layer : layers_) layer.infer(x, mask, precision);
  }

  /// dx ← ∂L/∂(stack input) in place, given dx = ∂L/∂(stack output) of the last forward (same
  /// mask). Adds every layer's parameter gradients, and ∂L/∂Ω when omega_gradient().
  void backward(MatrixType& dx, const PaddingMask& mask) {
    for (Index i = num_layers() - 1; i >= 0; --i) {
      Layer& l = layer(i);
      l.backward(dx, mask);
      if (omega_gradient_)
        omega_grad_[static_cast<std::size_t>(map_index(i))] += l.attention().last_omega_gradient();
    }
  }

  /// Starts decoding `batch` sequences in every layer (causal attention only): `states`
  /// resized to num_layers() and emptied, after the maps re-derived their overflow bounds from
  /// Ω. Throws invalid_argument for a non-causal attention or batch < 1.
  void reset(std::vector<EncoderLayerDecodingState<Scalar>>& states, Index batch) {
    for (Map& map : maps_) map.particles_written();
    states.resize(static_cast<std::size_t>(num_layers()));
    for (Index i = 0; i < num_layers(); ++i)
      layer(i).reset(states[static_cast<std::size_t>(i)], batch);
  }

  /// One decoding step through every layer, x (B × d) in place (EncoderLayer::step). Throws
  /// invalid_argument unless `states` came from reset.
  void step(MatrixType& x, const Eigen::Array<bool, Eigen::Dynamic, 1>* valid,
            std::vector<EncoderLayerDecodingState<Scalar>>& states) {
    if (!(static_cast<Index>(states.size()) == num_layers()))
      detail::throw_invalid("coulomb::nn::EncoderStack::step",
                            "argument 'states' has " + std::to_string(states.size()) +
                                " layers, expected " + std::to_string(num_layers()) +
                                " (call reset first)");
    for (Index i = 0; i < num_layers(); ++i)
      layer(i).step(x, valid, states[static_cast<std::size_t>(i)]);
  }

  /// Sets every gradient (Ω's included) to zero.
  void zero_grad() {
    for (auto& layer : layers_) layer.zero_grad();
    for (auto& g : omega_grad_) g.setZero();
    for (auto& g : phases_grad_) g.setZero();
  }

  /// Appends [attention.omega (and .phases) when shared], then for each layer i the
  /// parameters of EncoderLayer::append_parameters under "encoder.i.", with
  /// "encoder.i.attention.omega" (and .phases) after the attention's projections when not
  /// shared. Ω's value is the map's own storage; it is trainable when omega_gradient(), and
  /// never decayed; the phases (m × 1) are not trainable.
  void append_parameters(ParameterList<Scalar>& list) {
    if (shared_ && !maps_.empty()) append_omega(list, "attention.", 0);
    for (Index i = 0; i < num_layers(); ++i) {
      const std::string prefix = "encoder." + std::to_string(i) + ".";
      layer(i).append_parameters(list, prefix, [&](ParameterList<Scalar>& l) {
        if (!shared_ && !maps_.empty()) append_omega(l, prefix + "attention.", i);
      });
    }
  }

 private:
  static void require_layers(Index num_layers, const char* where) {
    if (!(num_layers >= 1))
      detail::throw_invalid(
          where, "argument 'num_layers' must be at least 1, got " + std::to_string(num_layers));
  }

  Map& map_of(Index layer) { return maps_[static_cast<std::size_t>(map_index(layer))]; }

  // Points every layer's attention at this stack's map (after a copy).
  void bind_maps() {
    if (maps_.empty()) return;
    for (Index i = 0; i < num_layers(); ++i) layer(i).attention().borrow_feature_map(map_of(i));
  }

  void append_omega(ParameterList<Scalar>& list, const std::string& prefix, Index k) {
    const auto s = static_cast<std::size_t>(k);
    list.push_back(
        {prefix + "omega", &maps_[s].omega_storage(), &omega_grad_[s], omega_gradient_, false});
    if constexpr (feature_map_traits<Map>::has_phases)
      list.push_back(
          {prefix + "phases", &maps_[s].phases_storage(), &phases_grad_[s], false, false});
  }

  std::vector<Map> maps_;                // the owners of Ω: 1 (shared) or one per layer
  std::vector<MatrixType> omega_grad_;   // ∂L/∂Ω per map
  std::vector<MatrixType> phases_grad_;  // zero: the phases are never trained
  std::vector<Layer> layers_;            // each borrows maps_[map_index(i)]
  bool shared_ = false;                  // one map for every layer
  bool omega_gradient_ = false;          // backward computes ∂L/∂Ω
};

}  // namespace coulomb::nn
