// SPDX-License-Identifier: MIT
/// @file nn/encoder.hpp
/// @brief One pre-norm Transformer encoder layer with its backward. Documented in
/// docs/model.md.
///
/// Pre-norm residual blocks (Xiong et al., *On Layer Normalization in the Transformer
/// Architecture*, ICML 2020), acting on the residual stream x ∈ R^{n×d} in place:
///   x ← x + Dropout(MHA(LN₁(x)))
///   x ← x + Dropout(W₂ GELU(W₁ LN₂(x) + b₁) + b₂),  W₁ ∈ R^{d×d_ff}, W₂ ∈ R^{d_ff×d}.
/// The backward runs the same steps in reverse on the gradient of the stream, also in place:
/// the identity path of each residual carries the gradient through unchanged, and the branch
/// adds its input gradient. With causal attention, step() runs the same layer on one token of
/// each sequence at a time (decoding), every part but the attention acting on that token alone.
#pragma once

#include <algorithm>
#include <concepts>
#include <functional>
#include <random>
#include <string>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/parallel.hpp"
#include "../core/precision.hpp"
#include "attention_block.hpp"
#include "layers.hpp"
#include "parameter.hpp"

namespace coulomb::nn {

/// Sizes and options of one encoder layer.
struct EncoderLayerOptions {
  Index d_model = 64;            ///< width d of the residual stream
  Index d_ff = 256;              ///< hidden width of the feed-forward block
  double dropout = 0.1;          ///< rate after the attention and feed-forward branches
  double layer_norm_eps = 1e-5;  ///< ε of both layer norms
  bool tied_qk = false;          ///< one projection for queries and keys
  bool rotary = false;           ///< rotate queries and keys by their position (nn/positions.hpp)
  double rotary_base = 10000.0;  ///< base of the rotary frequencies θ_i = base^{−2i/d_head}
  Index key_conv = 0;            ///< width of the keys' convolution (0: none; key_convolution.hpp)
  AttentionOptions attention{};  ///< num_heads, causal, threads, ... of the attention
};

/// The decoding state of one EncoderLayer (EncoderLayer::step): its attention's recurrent state
/// and the step's buffers.
template <RealScalar Scalar>
class EncoderLayerDecodingState {
 public:
  /// The attention's state (its size: AttentionDecodingState::num_scalars).
  const AttentionDecodingState<Scalar>& attention() const noexcept { return attention_; }

 private:
  template <RealScalar S, FeatureMap M>
  friend class EncoderLayer;

  AttentionDecodingState<Scalar> attention_;
  Matrix<Scalar> h1_, h2_, f1_, g_, branch_;
};

/// One pre-norm encoder layer (see the file comment).
template <RealScalar Scalar, FeatureMap Map>
class EncoderLayer {
 public:
  using MatrixType = Matrix<Scalar>;                  ///< dense column-major matrix
  using ConstRef = Eigen::Ref<const MatrixType>;      ///< how inputs are taken (no copy)
  using Attention = MultiHeadAttention<Scalar, Map>;  ///< the attention block

  /// A layer with exact softmax attention (no `map`), or with linear attention over `map`: over
  /// a copy of it (a Map), or over that very map, borrowed (a std::reference_wrapper<Map>, which
  /// must outlive the layer: EncoderStack owns the maps of its layers). Throws
  /// invalid_argument for options that do not fit (for example rotary positions with an odd
  /// d_head).
  template <typename... MapArg>
  requires(
      sizeof...(MapArg) == 0 ||
      (sizeof...(MapArg) == 1 &&
       ((std::same_as<MapArg, Map> ||
         std::same_as<MapArg, std::reference_wrapper<
                                  Map>>)&&...))) explicit EncoderLayer(const EncoderLayerOptions&
                                                                           options,
                                                                       const MapArg&... map)
      : norm1_(options.d_model, options.layer_norm_eps),
        attention_(options.d_model, map..., options.attention, options.tied_qk),
        dropout1_(options.dropout),
        norm2_(options.d_model, options.layer_norm_eps),
        ffn1_(options.d_model, options.d_ff),
        ffn2_(options.d_ff, options.d_model),
        dropout2_(options.dropout) {
    if (options.rotary) attention_.set_rotary(options.rotary_base);
    if (options.key_conv != 0) attention_.set_key_convolution(options.key_conv);
  }

  /// Norms to γ = 1, β = 0; attention projections, then W₁, then W₂ Xavier-uniform from
  /// `rng`; zero biases.
  template <std::uniform_random_bit_generator G>
  void initialize(G& rng) {
    norm1_.initialize();
    norm2_.initialize();
    attention_.initialize(rng);
    ffn1_.initialize(rng);
    ffn2_.initialize(rng);
  }

  /// x ← layer(x) in place, for x of n × d with n = mask.size(). With `training`, the two
  /// dropouts draw their masks from `rng` (attention branch first). `precision` is that of the
  /// six affine layers (Linear::forward; bf16 for inference only, never with `training`).
  template <std::uniform_random_bit_generator G>
  void forward(MatrixType& x, const PaddingMask& mask, bool training, G& rng,
               InferencePrecision precision = InferencePrecision::fp32) {
    norm1_.forward(x, h1_);
    attention_.forward(h1_, mask, branch_, precision);
    dropout1_.forward(branch_, training, rng);
    x += branch_;
    norm2_.forward(x, h2_);
    ffn1_.forward(h2_, f1_, precision);
    gelu_.forward(f1_, g_, training);
    ffn2_.forward(g_, branch_, precision);
    dropout2_.forward(branch_, training, rng);
    x += branch_;
    backward_ready_ = true;
  }

  /// x ← layer(x) in place for inference: the values of forward without `training`, bit for
  /// bit, with the part after the attention (residual, second norm, feed-forward, residual)
  /// done in blocks of infer_rows rows per thread, whose intermediates stay in the L2 cache.
  /// Keeps nothing for backward, which throws until the next forward.
  void infer(MatrixType& x, const PaddingMask& mask,
             InferencePrecision precision = InferencePrecision::fp32) {
    backward_ready_ = false;
    norm1_.apply(x, h1_, norm_ws_);
    attention_.forward(h1_, mask, branch_, precision);
    const Index block = infer_rows * coulomb::detail::resolve_threads(ffn1_.num_threads());
    for (Index r0 = 0; r0 < x.rows(); r0 += block) {
      auto rows = x.middleRows(r0, std::min(block, x.rows() - r0));
      rows += branch_.middleRows(r0, rows.rows());
      norm2_.apply(rows, h2_, norm_ws_);
      ffn1_.forward(h2_, f1_, precision);
      Gelu<Scalar>::apply(f1_, g_);
      ffn2_.forward(g_, dbranch_, precision);
      rows += dbranch_;
    }
  }

  /// dx ← ∂L/∂(layer input) in place, given dx = ∂L/∂(layer output) of the last forward
  /// (same mask). Adds the parameter gradients. Throws invalid_argument after infer or step
  /// (or before any forward).
  void backward(MatrixType& dx, const PaddingMask& mask) {
    if (!backward_ready_)
      detail::throw_invalid("coulomb::nn::EncoderLayer::backward",
                            "no forward to differentiate (infer and step keep nothing for "
                            "backward)");
    dbranch_ = dx;
    dropout2_.backward(dbranch_);
    ffn2_.backward(g_, dbranch_, dg_);
    gelu_.backward(f1_, dg_, dg_);
    ffn1_.backward(h2_, dg_, dh_);
    norm2_.backward(dh_, dnorm_);
    dx += dnorm_;
    dbranch_ = dx;
    dropout1_.backward(dbranch_);
    attention_.backward(h1_, mask, dbranch_, dh_);
    norm1_.backward(dh_, dnorm_);
    dx += dnorm_;
  }

  /// Starts decoding `batch` sequences (causal attention only; MultiHeadAttention::reset).
  void reset(EncoderLayerDecodingState<Scalar>& state, Index batch) const {
    attention_.reset(state.attention_, batch);
  }

  /// One decoding step, x (B × d) ← layer(x) in place for the next token of every sequence,
  /// equal to the causal forward's rows at that position up to rounding (no dropout). valid
  /// (nullptr or B entries) marks padding tokens, which leave the attention's state unchanged.
  /// It uses the layer norms' and GELU's forward, so it replaces what a pending backward needs:
  /// run a new forward before the next backward.
  void step(MatrixType& x, const Eigen::Array<bool, Eigen::Dynamic, 1>* valid,
            EncoderLayerDecodingState<Scalar>& state) {
    backward_ready_ = false;
    norm1_.forward(x, state.h1_);
    attention_.step(state.h1_, valid, state.attention_, state.branch_);
    x += state.branch_;
    norm2_.forward(x, state.h2_);
    ffn1_.forward(state.h2_, state.f1_);
    gelu_.forward(state.f1_, state.g_);
    ffn2_.forward(state.g_, state.branch_);
    x += state.branch_;
  }

  /// Sets every parameter gradient to zero.
  void zero_grad() {
    norm1_.zero_grad();
    attention_.zero_grad();
    norm2_.zero_grad();
    ffn1_.zero_grad();
    ffn2_.zero_grad();
  }

  /// Appends prefix + norm1.{gain,bias}, attention.{w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o},
  /// norm2.{gain,bias}, ffn.{w_1, b_1, w_2, b_2}; Ω is not among them (its map may be shared by
  /// several layers; EncoderStack appends it).
  /// `after_attention` is called between the attention and norm2, so that a caller can insert
  /// parameters of the attention (Ω) in that position.
  template <typename F>
  void append_parameters(ParameterList<Scalar>& list, const std::string& prefix,
                         F&& after_attention) {
    norm1_.append_parameters(list, prefix + "norm1.");
    attention_.append_parameters(list, prefix + "attention.");
    after_attention(list);
    norm2_.append_parameters(list, prefix + "norm2.");
    ffn1_.append_parameters(list, prefix + "ffn.", "w_1", "b_1");
    ffn2_.append_parameters(list, prefix + "ffn.", "w_2", "b_2");
  }

  /// The attention block.
  Attention& attention() noexcept { return attention_; }
  /// The attention block, read-only.
  const Attention& attention() const noexcept { return attention_; }
  /// The first layer norm (before attention).
  LayerNorm<Scalar>& norm1() noexcept { return norm1_; }
  /// The second layer norm (before the feed-forward block).
  LayerNorm<Scalar>& norm2() noexcept { return norm2_; }
  /// W₁, b₁.
  Linear<Scalar>& ffn_in() noexcept { return ffn1_; }
  /// W₂, b₂.
  Linear<Scalar>& ffn_out() noexcept { return ffn2_; }

 private:
  LayerNorm<Scalar> norm1_;
  Attention attention_;
  Dropout<Scalar> dropout1_;
  LayerNorm<Scalar> norm2_;
  Linear<Scalar> ffn1_, ffn2_;
  Gelu<Scalar> gelu_;
  Dropout<Scalar> dropout2_;
  MatrixType h1_, h2_, f1_, g_, branch_;
  MatrixType dbranch_, dg_, dh_, dnorm_;
  typename LayerNorm<Scalar>::Workspace norm_ws_;  // infer's norms
  bool backward_ready_ = false;                    // a forward (not infer) came last
  // Rows per thread of infer's blocks: a multiple of the product tile (3 packets of 16) and of
  // every SIMD width, so the blocks split the rows where the whole-matrix loops would; the
  // block's h2, f1 and g (192 × (d + 2 d_ff) floats, 440 KB at d = 64, d_ff = 256) fit the L2
  // cache.
  static constexpr Index infer_rows = 192;
};

}  // namespace coulomb::nn
