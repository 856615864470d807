// SPDX-License-Identifier: MIT
/// @file nn/attention_block.hpp
/// @brief Multi-head self-attention with its projections: linear attention over a feature map
/// (the kernel of the paper) or exact softmax attention (the reference), forward and backward
/// including ∂L/∂Ω. Documented in docs/model.md.
///
/// For input X ∈ R^{n×d} (n = B·L tokens, one per row, d = H·d_head):
///   Q = X W_Q + b_Q,  K = X W_K + b_K (or K = Q when queries and keys are tied),
///   V = X W_V + b_V,  A = attention(Q, K, V, mask),  Y = A W_O + b_O.
/// The attention modules apply the scale s = d_head^{-1/4} to Q and K themselves
/// (AttentionOptions::input_scale), so Q and K enter them unscaled: with FAVOR+ or PORF-exp
/// features φ(sq)ᵀφ(sk) estimates exp(qᵀk/√d_head), the kernel of softmax attention. Head h is
/// columns [h·d_head, (h+1)·d_head) of Q, K, V and A (attention/layout.hpp). With tied queries
/// and keys, the one projection receives the sum of both gradients.
///
/// With rotary positions (set_rotary, nn/positions.hpp), Q and K are rotated by their position
/// t before the attention, Q ← R_t Q, K ← R_t K, and their gradients rotated back, dQ ← R_tᵀ dQ.
/// With causal attention the block also decodes one token at a time (reset, step): each
/// sequence's next token goes through the same projections and rotation, and the attention's
/// recurrent step (linear: key sums of O(m·d_head) per head; softmax: a cache of keys and
/// values) gives the output the causal forward gives at that position.
///
/// With a key convolution (set_key_convolution, nn/key_convolution.hpp), the keys are
/// K = conv(X W_K + b_K) before the rotation: a short causal depthwise convolution over the
/// positions of each sequence, so a key can carry the tokens just before it.
#pragma once

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../attention/linear_attention.hpp"
#include "../attention/softmax_attention.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/precision.hpp"
#include "../features/feature_map.hpp"
#include "key_convolution.hpp"
#include "layers.hpp"
#include "parameter.hpp"
#include "positions.hpp"

namespace coulomb::nn {

/// Which attention a model uses.
enum class AttentionKind {
  linear,  ///< linear (kernelized) attention over the model's feature map
  softmax  ///< exact softmax attention (no feature map, no Ω)
};

/// Name of an AttentionKind value ("linear" or "softmax").
inline const char* to_string(AttentionKind kind) noexcept {
  return kind == AttentionKind::linear ? "linear" : "softmax";
}

/// The decoding state of one MultiHeadAttention (reset, step): the attention's recurrent state
/// (linear attention: per sequence and head the key sums, O(m·d_head) whatever the position;
/// softmax attention: the keys and values so far) and the step's buffers.
template <RealScalar Scalar>
class AttentionDecodingState {
 public:
  /// Sequences being decoded.
  Index batch() const noexcept { return batch_; }
  /// Tokens consumed since reset (the position of the next token).
  Index position() const noexcept { return position_; }
  /// Scalars held by the attention's recurrent state (not counting the step's buffers): with
  /// linear attention B·H·(D·(d_head + 1) + 1) once a token is in, whatever the position; with
  /// softmax attention, growing with every real token; plus B·(w − 1)·d with a key convolution
  /// of width w.
  Index num_scalars() const noexcept {
    return linear_.num_scalars() + softmax_.num_scalars() + key_conv_.num_scalars();
  }

 private:
  template <RealScalar S, FeatureMap M>
  friend class MultiHeadAttention;

  LinearAttentionState<Scalar> linear_;
  SoftmaxAttentionCache<Scalar> softmax_;
  KeyConvolutionHistory<Scalar> key_conv_;
  Matrix<Scalar> q_, k_, k_pre_, v_, a_;
  Index batch_ = 0;
  Index position_ = 0;
};

/// Multi-head self-attention block (see the file comment). With AttentionKind::linear, one
/// feature map (one Ω ∈ R^{m×d_head}) is shared by the heads of the block.
template <RealScalar Scalar, FeatureMap Map>
class MultiHeadAttention {
  static_assert(std::is_same_v<typename Map::Scalar, Scalar>,
                "MultiHeadAttention: the feature map's scalar type must be the block's");

 public:
  using MatrixType = Matrix<Scalar>;                     ///< dense column-major matrix
  using ConstRef = Eigen::Ref<const MatrixType>;         ///< how inputs are taken (no copy)
  using Linearized = LinearAttention<Map>;               ///< the linear attention module
  using Exact = SoftmaxAttention<Scalar>;                ///< the softmax attention module
  using DecodingState = AttentionDecodingState<Scalar>;  ///< the state of reset and step

  /// Linear attention over a copy of `map` (input_dim() = d_model / options.num_heads), with
  /// model width `d_model`; queries and keys share one projection if `tied_qk`. Projections
  /// are zero until initialize(). Throws invalid_argument if d_model is not num_heads ×
  /// map.input_dim(), or for bad options.
  MultiHeadAttention(Index d_model, const Map& map, AttentionOptions options, bool tied_qk)
      : kind_(AttentionKind::linear), tied_(tied_qk), exact_(options) {
    const char* where = "coulomb::nn::MultiHeadAttention::constructor";
    check_width(d_model, options, where);
    check_map(map, d_model, options.num_heads, where);
    linear_.emplace(map, options);
    make_projections(d_model);
  }

  /// As above, but borrowing `map` instead of copying it: the block uses that very map, which
  /// must outlive it (a model that owns its maps, nn/encoder_stack.hpp).
  MultiHeadAttention(Index d_model, std::reference_wrapper<Map> map, AttentionOptions options,
                     bool tied_qk)
      : kind_(AttentionKind::linear), tied_(tied_qk), exact_(options) {
    const char* where = "coulomb::nn::MultiHeadAttention::constructor";
    check_width(d_model, options, where);
    check_map(map.get(), d_model, options.num_heads, where);
    linear_.emplace(map, options);
    make_projections(d_model);
  }

  /// Exact softmax attention with model width `d_model`.
  MultiHeadAttention(Index d_model, AttentionOptions options, bool tied_qk)
      : kind_(AttentionKind::softmax), tied_(tied_qk), exact_(options) {
    check_width(d_model, options, "coulomb::nn::MultiHeadAttention::constructor");
    make_projections(d_model);
  }

  /// Xavier-uniform projections, zero biases; draws W_Q, (W_K,) W_V, W_O in that order. The key
  /// convolution, if any, starts as the identity (no draw).
  template <std::uniform_random_bit_generator G>
  void initialize(G& rng) {
    w_q_.initialize(rng);
    if (!tied_) w_k_.initialize(rng);
    w_v_.initialize(rng);
    w_o_.initialize(rng);
    key_conv_.initialize();
  }

  /// The attention kind.
  AttentionKind kind() const noexcept { return kind_; }
  /// Whether queries and keys share one projection.
  bool tied() const noexcept { return tied_; }
  /// Model width d.
  Index model_dim() const noexcept { return w_q_.input_dim(); }
  /// Number of heads H.
  Index num_heads() const noexcept { return exact_.num_heads(); }
  /// Width of a head, d / H.
  Index head_dim() const noexcept { return model_dim() / num_heads(); }
  /// Whether the attention is causal (AttentionOptions::causal): only then can it decode.
  bool causal() const noexcept { return exact_.options().causal; }

  /// Rotates queries and keys by their position from now on (rotary positions with this base,
  /// nn/positions.hpp). Throws invalid_argument for an odd head_dim() or a base that is not
  /// finite and above 1.
  void set_rotary(double base) { rotary_ = RotaryPositions<Scalar>(head_dim(), base); }
  /// The rotary positions (enabled() is false without them).
  const RotaryPositions<Scalar>& rotary() const noexcept { return rotary_; }

  /// Convolves the keys from now on with a short causal depthwise convolution of `width`
  /// positions (nn/key_convolution.hpp), starting as the identity. Throws invalid_argument for
  /// width < 1, or when queries and keys are tied (the keys need their own projection).
  void set_key_convolution(Index width) {
    const char* where = "coulomb::nn::MultiHeadAttention::set_key_convolution";
    if (tied_)
      detail::throw_invalid(where,
                            "queries and keys are tied (tied_qk): a key convolution needs a key "
                            "projection of its own");
    key_conv_ = KeyConvolution<Scalar>(width, model_dim());
  }
  /// The key convolution (enabled() is false without it).
  const KeyConvolution<Scalar>& key_convolution() const noexcept { return key_conv_; }

  /// The factor s the attention applies to queries and keys (d_head^{-1/4} by default).
  Scalar input_scale() const {
    return static_cast<Scalar>(detail::attention_input_scale(
        "coulomb::nn::MultiHeadAttention::input_scale", exact_.options(), head_dim()));
  }

  /// The feature map (linear attention only; throws invalid_argument for softmax attention).
  const Map& feature_map() const {
    require_linear("feature_map");
    return linear_->feature_map(0);
  }
  /// The feature map, mutable: set_omega or redraw between calls (not between a forward and
  /// its backward).
  Map& feature_map() {
    require_linear("feature_map");
    return linear_->feature_map(0);
  }

  /// Whether the block borrows its feature map (constructed from std::ref, or
  /// borrow_feature_map) rather than owning a copy.
  bool borrows_feature_map() const noexcept {
    return kind_ == AttentionKind::linear && linear_->borrows_maps();
  }

  /// Uses `map` from now on, borrowed (it must outlive the block): how a copied model points its
  /// layers at its own maps. Throws invalid_argument for softmax attention or a map whose
  /// input_dim() is not head_dim().
  void borrow_feature_map(Map& map) {
    const char* where = "coulomb::nn::MultiHeadAttention::borrow_feature_map";
    require_linear("borrow_feature_map");
    check_map(map, model_dim(), num_heads(), where);
    const AttentionOptions options = linear_->options();
    linear_.emplace(std::ref(map), options);
  }

  /// Whether backward computes ∂L/∂Ω (linear attention).
  bool omega_gradient() const noexcept {
    return kind_ == AttentionKind::linear && linear_->options().omega_gradient;
  }
  /// Turns the computation of ∂L/∂Ω on or off (off: the frozen-kernel mode, one GEMM less).
  void set_omega_gradient(bool on) {
    if (kind_ != AttentionKind::linear || linear_->options().omega_gradient == on) return;
    AttentionOptions opt = linear_->options();
    opt.omega_gradient = on;
    if (linear_->borrows_maps()) {
      Map& map = linear_->feature_map(0);  // not the attention's: survives the emplace
      linear_.emplace(std::ref(map), opt);
    } else {
      Map map = std::move(linear_->feature_map(0));
      linear_.emplace(std::move(map), opt);
    }
  }

  /// Y = A W_O + b_O for the input X (n × d) and the padding mask (L × B, n = L·B); Y resized
  /// to n × d. Keeps Q, K, V and A for backward and for keys(). `precision` is that of the four
  /// projections (Linear::forward); the attention itself is always in Scalar.
  void forward(const ConstRef& X, const PaddingMask& mask, MatrixType& Y,
               InferencePrecision precision = InferencePrecision::fp32) {
    const char* where = "coulomb::nn::MultiHeadAttention::forward";
    detail::require_cols(X, model_dim(), where, "X");
    if (!(X.rows() == mask.size()))
      detail::throw_invalid(where, "argument 'X' has " + std::to_string(X.rows()) +
                                       " rows, expected L x B = " + std::to_string(mask.size()) +
                                       " (the size of 'mask')");
    w_q_.forward(X, q_, precision);
    if (key_conv_.enabled()) {
      w_k_.forward(X, k_pre_, precision);
      key_conv_.forward(k_pre_, mask.rows(), k_);
    } else if (!tied_) {
      w_k_.forward(X, k_, precision);
    }
    w_v_.forward(X, v_, precision);
    if (rotary_.enabled()) {
      rotary_.rotate(q_, mask.rows());
      if (!tied_) rotary_.rotate(k_, mask.rows());
    }
    if (kind_ == AttentionKind::linear)
      linear_->forward(q_, keys(), v_, mask, a_, linear_ws_);
    else
      exact_.forward(q_, keys(), v_, mask, a_, exact_ws_);
    w_o_.forward(a_, Y, precision);
  }

  /// Given dY = ∂L/∂Y of the last forward on X (same mask): adds the gradients of the
  /// projections, keeps ∂L/∂Ω (last_omega_gradient(), if omega_gradient()), and writes
  /// dX = ∂L/∂X (resized; must not alias dY).
  void backward(const ConstRef& X, const PaddingMask& mask, const ConstRef& dY, MatrixType& dX) {
    const char* where = "coulomb::nn::MultiHeadAttention::backward";
    detail::require_shape(X, q_.rows(), model_dim(), where, "X");
    detail::require_shape(dY, q_.rows(), model_dim(), where, "dY");
    w_o_.backward(a_, dY, da_);
    if (kind_ == AttentionKind::linear)
      linear_->backward(q_, keys(), v_, mask, a_, da_, grads_, linear_ws_);
    else
      exact_.backward(q_, keys(), v_, mask, a_, da_, grads_, exact_ws_);
    if (tied_) {
      grads_.dQ += grads_.dK;
      if (rotary_.enabled()) rotary_.rotate_back(grads_.dQ, mask.rows());
      w_q_.backward(X, grads_.dQ, dX);
    } else {
      if (rotary_.enabled()) {
        rotary_.rotate_back(grads_.dQ, mask.rows());
        rotary_.rotate_back(grads_.dK, mask.rows());
      }
      w_q_.backward(X, grads_.dQ, dX);
      if (key_conv_.enabled()) {
        key_conv_.backward(k_pre_, mask.rows(), grads_.dK, dk_pre_);
        w_k_.backward_add(X, dk_pre_, dX);
      } else {
        w_k_.backward_add(X, grads_.dK, dX);
      }
    }
    w_v_.backward_add(X, grads_.dV, dX);
  }

  /// ∂L/∂Ω of the last backward (m × d_head), summed over heads and sequences; empty when
  /// omega_gradient() is false.
  const MatrixType& last_omega_gradient() const noexcept {
    static const MatrixType empty;
    return grads_.dOmega.empty() ? empty : grads_.dOmega[0];
  }

  /// The keys K of the last forward (n × d, unscaled; rotated with rotary positions; the
  /// queries when tied).
  const MatrixType& keys() const noexcept { return tied_ ? q_ : k_; }
  /// The queries Q of the last forward (n × d, unscaled; rotated with rotary positions).
  const MatrixType& queries() const noexcept { return q_; }

  /// Starts decoding `batch` sequences (causal attention only): empty recurrent state. Throws
  /// invalid_argument for a non-causal attention or batch < 1.
  void reset(DecodingState& state, Index batch) const {
    const char* where = "coulomb::nn::MultiHeadAttention::reset";
    if (!causal())
      detail::throw_invalid(where,
                            "the attention is not causal (AttentionOptions::causal), so "
                            "it cannot decode one token at a time");
    if (!(batch >= 1))
      detail::throw_invalid(where,
                            "argument 'batch' must be at least 1, got " + std::to_string(batch));
    if (kind_ == AttentionKind::linear)
      linear_->reset(state.linear_, batch);
    else
      exact_.reset(state.softmax_, batch);
    key_conv_.reset(state.key_conv_, batch);
    state.batch_ = batch;
    state.position_ = 0;
  }

  /// One decoding step: X (B × d) holds the block's input at the next position of every
  /// sequence; Y (resized to B × d) receives the block's output there, which equals the causal
  /// forward's row at that position up to rounding. valid (nullptr, or B entries) marks padding
  /// (false): its state is unchanged and its attention output zero, as in the forward. Throws
  /// invalid_argument without reset, or for X of another shape.
  void step(const ConstRef& X, const Eigen::Array<bool, Eigen::Dynamic, 1>* valid,
            DecodingState& state, MatrixType& Y) const {
    const char* where = "coulomb::nn::MultiHeadAttention::step";
    if (!(state.batch_ >= 1))
      detail::throw_invalid(where, "argument 'state' was not reset (call reset(state, batch))");
    detail::require_shape(X, state.batch_, model_dim(), where, "X");
    w_q_.forward(X, state.q_);
    if (key_conv_.enabled()) {
      w_k_.forward(X, state.k_pre_);
      key_conv_.step(state.k_pre_, state.key_conv_, state.k_);
    } else if (!tied_) {
      w_k_.forward(X, state.k_);
    }
    w_v_.forward(X, state.v_);
    rotary_.rotate_at(state.q_, state.position_);
    if (!tied_) rotary_.rotate_at(state.k_, state.position_);
    const MatrixType& k = tied_ ? state.q_ : state.k_;
    if (kind_ == AttentionKind::linear) {
      if (valid)
        linear_->step(state.q_, k, state.v_, *valid, state.a_, state.linear_);
      else
        linear_->step(state.q_, k, state.v_, state.a_, state.linear_);
    } else {
      if (valid)
        exact_.step(state.q_, k, state.v_, *valid, state.a_, state.softmax_);
      else
        exact_.step(state.q_, k, state.v_, state.a_, state.softmax_);
    }
    w_o_.forward(state.a_, Y);
    ++state.position_;
  }

  /// Sets the gradients of the projections to zero.
  void zero_grad() {
    w_q_.zero_grad();
    w_k_.zero_grad();
    w_v_.zero_grad();
    w_o_.zero_grad();
    key_conv_.zero_grad();
  }

  /// Appends prefix + w_q, b_q, (w_k, b_k unless tied), (key_conv with a key convolution), w_v,
  /// b_v, w_o, b_o.
  void append_parameters(ParameterList<Scalar>& list, const std::string& prefix) {
    w_q_.append_parameters(list, prefix, "w_q", "b_q");
    if (!tied_) w_k_.append_parameters(list, prefix, "w_k", "b_k");
    if (key_conv_.enabled()) key_conv_.append_parameters(list, prefix, "key_conv");
    w_v_.append_parameters(list, prefix, "w_v", "b_v");
    w_o_.append_parameters(list, prefix, "w_o", "b_o");
  }

  /// The query projection (also the key projection when tied).
  Linear<Scalar>& query_projection() noexcept { return w_q_; }
  /// The key projection (unused when tied).
  Linear<Scalar>& key_projection() noexcept { return w_k_; }
  /// The value projection.
  Linear<Scalar>& value_projection() noexcept { return w_v_; }
  /// The output projection.
  Linear<Scalar>& output_projection() noexcept { return w_o_; }

 private:
  static void check_width(Index d_model, const AttentionOptions& options, const char* where) {
    detail::check_attention_options(where, options);
    if (!(d_model >= 1 && d_model % options.num_heads == 0))
      detail::throw_invalid(where, "argument 'd_model' (" + std::to_string(d_model) +
                                       ") must be a positive multiple of options.num_heads (" +
                                       std::to_string(options.num_heads) + ")");
  }

  static void check_map(const Map& map, Index d_model, Index num_heads, const char* where) {
    if (!(map.input_dim() * num_heads == d_model))
      detail::throw_invalid(
          where, "argument 'map' has input_dim " + std::to_string(map.input_dim()) +
                     ", expected d_model / num_heads = " + std::to_string(d_model / num_heads));
  }

  void make_projections(Index d) {
    w_q_ = Linear<Scalar>(d, d);
    if (!tied_) w_k_ = Linear<Scalar>(d, d);
    w_v_ = Linear<Scalar>(d, d);
    w_o_ = Linear<Scalar>(d, d);
  }

  void require_linear(const char* function) const {
    if (!(kind_ == AttentionKind::linear))
      detail::throw_invalid(std::string("coulomb::nn::MultiHeadAttention::") + function,
                            "this block uses softmax attention, which has no feature map");
  }

  AttentionKind kind_;
  bool tied_;
  std::optional<Linearized> linear_;
  Exact exact_;
  Linear<Scalar> w_q_, w_k_, w_v_, w_o_;
  typename Linearized::Workspace linear_ws_;
  typename Exact::Workspace exact_ws_;
  AttentionGradients<Scalar> grads_;
  RotaryPositions<Scalar> rotary_;   // disabled unless set_rotary
  KeyConvolution<Scalar> key_conv_;  // disabled unless set_key_convolution
  MatrixType q_, k_, k_pre_, dk_pre_, v_, a_, da_;
};

}  // namespace coulomb::nn
