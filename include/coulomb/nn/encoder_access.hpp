// SPDX-License-Identifier: MIT
/// @file nn/encoder_access.hpp
/// @brief EncoderAccess, the access to the encoder layers, the feature maps and their Ω that
/// TextClassifier and SequenceModel share: both keep Ω once, in the feature maps of their
/// EncoderStack.
#pragma once

#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "attention_block.hpp"

namespace coulomb::nn {

/// The layer and Ω accessors of a model `Derived` (CRTP) with feature map `Map`. Derived befriends
/// this class and has the members `encoder_` (an EncoderStack, the owner of Ω), `config_` (with
/// `attention` and `train_omega`) and `class_name` ("coulomb::nn::TextClassifier::", ...),
/// which the error messages name.
template <typename Derived, typename Map>
class EncoderAccess {
 public:
  using OmegaMatrix = Matrix<typename Map::Scalar>;  ///< the type of an Ω (m × d_head)

  /// Number of encoder layers.
  Index num_layers() const noexcept { return self().encoder_.num_layers(); }

  /// Encoder layer `i` (for inspection and tests). Throws invalid_argument for i outside
  /// [0, num_layers()).
  decltype(auto) layer(Index i) {
    require_layer_index(i, "layer", "i");
    return self().encoder_.layer(i);
  }

  /// Number of distinct Ω: 1 when shared, num_layers() per layer, 0 for softmax attention.
  Index num_omegas() const noexcept { return self().encoder_.num_maps(); }

  /// Which Ω layer `layer` uses (0 when shared).
  Index omega_index(Index layer) const noexcept { return self().encoder_.map_index(layer); }

  /// Ω number `i` (m × d_head): the feature map's own Ω, which the optimizer and model files
  /// see through parameters(). Throws invalid_argument for softmax attention or an index out
  /// of range.
  const OmegaMatrix& omega(Index i) const {
    require_omega_index(i, "omega");
    return self().encoder_.map(i).omega();
  }

  /// Replaces Ω number `i` (for example with the particles learned in Phase A), in the one
  /// feature map that every layer using it shares. Throws invalid_argument for softmax
  /// attention, an index out of range, or an Ω that is not m × d_head and finite.
  template <typename D>
  void set_omega(Index i, const Eigen::MatrixBase<D>& omega) {
    const std::string where = std::string(Derived::class_name) + "set_omega";
    require_omega_index(i, "set_omega");
    auto& map = self().encoder_.map(i);
    const OmegaMatrix& current = map.omega();
    detail::require_shape(omega, current.rows(), current.cols(), where, "omega");
    detail::require_finite(omega, where, "omega");
    map.set_omega(omega);
  }

  /// The feature map of encoder layer `layer`: the owner of omega(omega_index(layer)), shared
  /// with every layer that uses the same Ω. Writes through parameters() (an optimizer step, a
  /// loaded file) reach its Ω at once; its overflow bounds follow at the next forward. Throws
  /// invalid_argument for softmax attention or a bad index.
  const Map& feature_map(Index layer) const {
    require_layer_index(layer, "feature_map", "layer");
    return self().encoder_.layer(layer).attention().feature_map();
  }

  /// Whether Ω is trained end to end (config.train_omega).
  bool omega_trainable() const noexcept { return self().config_.train_omega; }

  /// Freezes (false) or unfreezes (true) every Ω: the trainable flag of parameters() and the
  /// computation of ∂L/∂Ω in backward follow it. Call parameters() again afterwards.
  void set_omega_trainable(bool trainable) {
    self().config_.train_omega = trainable;
    self().encoder_.set_omega_gradient(trainable);
  }

  /// Draws every Ω (and RFF phases) afresh from `rng` with the maps' Draw policy (the
  /// "redrawn" vanilla baseline).
  void redraw_omega(Rng& rng) {
    auto& encoder = self().encoder_;
    for (Index k = 0; k < encoder.num_maps(); ++k) encoder.map(k).redraw(rng);
  }

 protected:
  /// Makes the feature maps of a new model: Map(d_head, m, rng), with the map's default options.
  static auto fresh_maps(Index d_head, Index m) {
    return [d_head, m](Rng& rng) { return Map(d_head, m, rng); };
  }

  /// Makes the feature maps of a new model: copies of `prototype` (which must outlive the
  /// maker) with Ω redrawn.
  static auto redrawn_copies(const Map& prototype) {
    return [&prototype](Rng& rng) {
      Map map = prototype;
      map.redraw(rng);
      return map;
    };
  }

  /// Throws invalid_argument naming argument `name` of `function` unless 0 <= layer <
  /// num_layers.
  void require_layer_index(Index layer, const char* function, const char* name) const {
    const Index layers = self().encoder_.num_layers();
    if (!(layer >= 0 && layer < layers))
      detail::throw_invalid(std::string(Derived::class_name) + function,
                            std::string("argument '") + name + "' is " + std::to_string(layer) +
                                ", expected 0.." + std::to_string(layers - 1));
  }

  /// Throws invalid_argument for softmax attention or unless 0 <= i < num_omegas().
  void require_omega_index(Index i, const char* function) const {
    const std::string where = std::string(Derived::class_name) + function;
    if (!(self().config_.attention == AttentionKind::linear))
      detail::throw_invalid(where, "the model uses softmax attention, which has no Omega");
    if (!(i >= 0 && i < num_omegas()))
      detail::throw_invalid(where, "argument 'i' is " + std::to_string(i) + ", expected 0.." +
                                       std::to_string(num_omegas() - 1));
  }

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }
  const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
};

}  // namespace coulomb::nn
