// SPDX-License-Identifier: MIT
/// @file nn/sequence_model.hpp
/// @brief The general sequence model: token embeddings and positions, the encoder stack with
/// linear (kernel) or exact softmax attention, a final LayerNorm and one of three heads
/// (sequence classification, per-token outputs, causal language modelling), with a hand-written
/// backward, its parameter list, access to Ω, and recurrent generation for the causal head.
/// Documented in docs/model.md ("The sequence model").
///
/// Badiei Khuzani et al., *A Coulomb Particle Model for Learning Kernel Attention in
/// Transformers*, 2026, §4: the particles Ω of each attention layer (or one shared Ω) are the
/// kernel of linear attention; Katharopoulos et al., *Transformers are RNNs*, ICML 2020: causal
/// linear attention is a recurrence with a state of O(m·d_head) per head, so a causal model
/// generates one token at a time in constant time and memory per token.
///
/// For a batch of B sequences padded to length L (ids and mask L × B; n = B·L rows, row b·L + t
/// is position t of sequence b):
///   x = E_tok[ids] (+ E_pos[t] learned, or + PE(t) sinusoidal),  x ← Dropout(x)
///   x ← EncoderLayer_l(x), l = 1..N   (rotary positions rotate Q and K inside each layer)
///   h = LN_f(x)
///   classification: logits_b = (masked mean over t of h_{b·L+t}) W + b   (B × C)
///   per_token, causal_lm: logits_r = h_r W + b for every row r, or the rows asked for
/// With the classification head and learned positions this is TextClassifier's model (mean
/// pooling, no segments): the same configuration (sequence_model_config) and seed give the
/// same parameters, logits and gradients, bit for bit.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../core/tokens.hpp"
#include "../features/feature_map.hpp"
#include "attention_block.hpp"
#include "embedding.hpp"
#include "encoder.hpp"
#include "encoder_access.hpp"
#include "encoder_stack.hpp"
#include "layers.hpp"
#include "parameter.hpp"
#include "pooling.hpp"
#include "positions.hpp"
#include "sequence_model_config.hpp"

namespace coulomb::nn {

/// The decoding state of a SequenceModel (reset, step): per layer the attention's recurrent
/// state (linear attention: O(m·d_head) per head, whatever the position), and the position.
template <RealScalar Scalar>
class SequenceDecodingState {
 public:
  /// Sequences being decoded.
  Index batch() const noexcept { return batch_; }
  /// Tokens consumed since reset (the position of the next token).
  Index position() const noexcept { return position_; }
  /// Number of layers.
  Index num_layers() const noexcept { return static_cast<Index>(layers_.size()); }
  /// The state of layer `i` (0 <= i < num_layers(), unchecked).
  const EncoderLayerDecodingState<Scalar>& layer(Index i) const noexcept {
    return layers_[static_cast<std::size_t>(i)];
  }
  /// Scalars held by the attention states of all layers (AttentionDecodingState::num_scalars):
  /// with linear attention N·B·H·(D·(d_head + 1) + 1), constant in the position.
  Index num_scalars() const noexcept {
    Index total = 0;
    for (const auto& l : layers_) total += l.attention().num_scalars();
    return total;
  }

 private:
  template <FeatureMap M>
  friend class SequenceModel;

  std::vector<EncoderLayerDecodingState<Scalar>> layers_;
  Matrix<Scalar> x_, hf_;
  Index batch_ = 0;
  Index position_ = 0;
};

/// The sequence model (see the file comment and docs/model.md) with feature map `Map` (used
/// with linear attention; with softmax attention the model has no feature map and no Ω,
/// whatever `Map` is) and the map's scalar type, float or double:
/// `SequenceModel<FavorPlus<float>>`. One model per thread of control: forward, backward and
/// step use internal state. Ω lives once, in the encoder's feature maps.
template <FeatureMap Map>
class SequenceModel : public EncoderAccess<SequenceModel<Map>, Map> {
 public:
  using Scalar = typename Map::Scalar;                      ///< float or double, the feature map's
  using MatrixType = Matrix<Scalar>;                        ///< dense column-major matrix
  using ConstRef = Eigen::Ref<const MatrixType>;            ///< how inputs are taken (no copy)
  using Layer = EncoderLayer<Scalar, Map>;                  ///< one encoder layer
  using FeatureMapType = Map;                               ///< the feature map type
  using DecodingState = SequenceDecodingState<Scalar>;      ///< the state of reset and step
  using ValidMask = Eigen::Array<bool, Eigen::Dynamic, 1>;  ///< one flag per sequence (step)

  /// A model with parameters drawn from `seed` (the scheme of TextClassifier, docs/model.md)
  /// and feature maps constructed as Map(d_head, num_features, rng). Throws invalid_argument
  /// for an invalid config.
  SequenceModel(const SequenceModelConfig& config,
                std::uint64_t seed) requires std::constructible_from<Map, Index, Index, Rng&>
      : config_(checked(config)) {
    build(seed, this->fresh_maps(config_.head_dim(), config_.num_features));
  }

  /// A model whose feature maps are copies of `prototype` (its options) with Ω redrawn from
  /// `seed`. Throws invalid_argument for a prototype of another input_dim() (d_head) or number
  /// of particles (num_features), or an invalid config.
  SequenceModel(const SequenceModelConfig& config, const Map& prototype, std::uint64_t seed)
      : config_(checked(config)) {
    detail::check_prototype(config_, prototype, "coulomb::nn::SequenceModel::constructor");
    build(seed, this->redrawn_copies(prototype));
  }

  /// The configuration.
  const SequenceModelConfig& config() const noexcept { return config_; }

  // ---- forward and backward ---------------------------------------------------------------

  /// Logits for the batch ids, mask (both L × B; mask true at tokens): B × C with the
  /// classification head, (B·L) × C with a per-token head (row b·L + t). With `training`,
  /// dropout masks are drawn from `rng` (embeddings, then each layer's two branches). Keeps what
  /// backward needs. Throws invalid_argument naming 'ids' or 'mask' for a batch that does not
  /// fit (empty, longer than max_length, ids out of range, shapes that differ).
  void forward(const TokenArray& ids, const PaddingMask& mask, MatrixType& logits, bool training,
               Rng& rng) {
    run_forward(ids, mask, nullptr, logits, training, rng);
  }

  /// Evaluation forward (no dropout).
  void forward(const TokenArray& ids, const PaddingMask& mask, MatrixType& logits) {
    Rng unused(0);
    forward(ids, mask, logits, false, unused);
  }

  /// Inference: the evaluation forward's logits, bit for bit, without what backward needs
  /// (EncoderStack::infer: each layer's feed-forward part in blocks of rows that stay in
  /// cache); backward then throws until the next forward. Throws as forward.
  void infer(const TokenArray& ids, const PaddingMask& mask, MatrixType& logits) {
    Rng unused(0);
    run_forward(ids, mask, nullptr, logits, /*training=*/false, unused, /*head=*/true,
                /*inference=*/true);
  }

  /// infer() of a per-token head at the rows `rows` only, as forward_rows. Throws as
  /// forward_rows.
  void infer_rows(const TokenArray& ids, const PaddingMask& mask, std::span<const Index> rows,
                  MatrixType& logits) {
    check_rows_call(rows, mask, "coulomb::nn::SequenceModel::infer_rows", "infer");
    Rng unused(0);
    run_forward(ids, mask, &rows, logits, /*training=*/false, unused, /*head=*/true,
                /*inference=*/true);
  }

  /// A per-token head's logits at the rows `rows` only (|rows| × C; row r = b·L + t), for
  /// example the positions that have a target: the head's product then costs |rows|·d·C instead
  /// of B·L·d·C. Throws invalid_argument for the classification head, or a row outside [0, B·L)
  /// or at padding.
  void forward_rows(const TokenArray& ids, const PaddingMask& mask, std::span<const Index> rows,
                    MatrixType& logits, bool training, Rng& rng) {
    check_rows_call(rows, mask, "coulomb::nn::SequenceModel::forward_rows", "forward");
    run_forward(ids, mask, &rows, logits, training, rng);
  }

  /// Training pass of a per-token head at the rows `rows` (as forward_rows) with `targets` (one
  /// per row, in [0, C)): the forward (dropout from `rng` when `training`), the mean softmax
  /// cross-entropy of the rows' logits, and the gradient of scale × that loss added to every
  /// parameter's gradient. The same as forward_rows, softmax_cross_entropy, scaling dlogits and
  /// backward up to float round-off, but the |rows| × C logits are never held whole
  /// (Linear::cross_entropy_backward): for a language-model head over a large vocabulary.
  /// Returns the loss; if a logit is not finite, returns NaN and adds nothing. Throws as
  /// forward_rows, and invalid_argument for targets of another count or out of range. backward
  /// cannot follow it (there are no logits to differentiate).
  Scalar forward_backward_rows(const TokenArray& ids, const PaddingMask& mask,
                               std::span<const Index> rows, std::span<const int> targets,
                               Scalar scale, bool training, Rng& rng) {
    check_rows_call(rows, mask, "coulomb::nn::SequenceModel::forward_backward_rows",
                    "forward and backward");
    MatrixType unused;
    run_forward(ids, mask, &rows, unused, training, rng, false);
    const Scalar loss = head_.cross_entropy_backward(selected_, targets, dselected_, scale);
    if (std::isfinite(static_cast<double>(loss))) backward_from_selected();
    return loss;
  }

  /// Adds ∂loss/∂parameter to every gradient, given dlogits = ∂loss/∂logits of the last forward
  /// (its shape). Ω's gradient is added only when Ω is trainable. Throws invalid_argument without
  /// a forward (or after infer or a step, which replace what backward needs), or for dlogits of
  /// another shape or non-finite.
  void backward(const ConstRef& dlogits) {
    const char* where = "coulomb::nn::SequenceModel::backward";
    if (!(has_forward_))
      detail::throw_invalid(where,
                            "argument 'dlogits': no forward to differentiate (infer keeps "
                            "nothing for backward, and a step since the last forward "
                            "replaces what it needs)");
    detail::require_shape(dlogits, logit_rows_, config_.output_dim(), where, "dlogits");
    detail::require_finite(dlogits, where, "dlogits");
    if (config_.head == SequenceHead::classification) {
      head_.backward(pooled_, dlogits, dpooled_);
      pool_.backward(dpooled_, mask_, dhf_);
    } else if (all_rows_) {
      head_.backward(hf_, dlogits, dhf_);
    } else {
      head_.backward(selected_, dlogits, dselected_);
      backward_from_selected();
      return;
    }
    backward_below_head();
  }

  /// Sets the gradient of every parameter (Ω included) to zero.
  void zero_grad() {
    token_.zero_grad();
    position_.zero_grad();
    encoder_.zero_grad();
    final_norm_.zero_grad();
    head_.zero_grad();
  }

  // ---- recurrent generation (causal_lm) -----------------------------------------------------

  /// Starts generating `batch` sequences: empty attention states at position 0, after the maps
  /// re-derived their overflow bounds from Ω. Throws invalid_argument unless the head is
  /// causal_lm, or for batch < 1.
  void reset(DecodingState& state, Index batch) {
    const char* where = "coulomb::nn::SequenceModel::reset";
    if (!config_.causal())
      detail::throw_invalid(where, std::string("the model's head is ") + to_string(config_.head) +
                                       "; generating one token at a time needs causal attention "
                                       "(config.head = causal_lm)");
    if (!(batch >= 1))
      detail::throw_invalid(where,
                            "argument 'batch' must be at least 1, got " + std::to_string(batch));
    encoder_.reset(state.layers_, batch);
    state.batch_ = batch;
    state.position_ = 0;
  }

  /// One generation step: ids (B entries) holds the token at position state.position() of every
  /// sequence; logits (resized to B × C) receives the outputs at that position, equal to the
  /// causal forward's rows b·L + t up to rounding. Time and memory per step do not grow with the
  /// position (linear attention). It replaces what a pending backward needs. Throws
  /// invalid_argument without reset, for ids of another size or out of range, or at a position
  /// of max_length or more.
  void step(std::span<const TokenId> ids, MatrixType& logits, DecodingState& state) {
    run_step(ids, nullptr, logits, state);
  }

  /// The same, where valid(b) = false marks a padding token of sequence b: its attention states
  /// are left unchanged (as padding in the forward's mask), and its logits are those the forward
  /// gives at a padded position.
  void step(std::span<const TokenId> ids, const ValidMask& valid, MatrixType& logits,
            DecodingState& state) {
    if (!(valid.size() == static_cast<Index>(ids.size())))
      detail::throw_invalid("coulomb::nn::SequenceModel::step",
                            "argument 'valid' has " + std::to_string(valid.size()) +
                                " entries, expected " + std::to_string(ids.size()) +
                                " (the entries of ids)");
    run_step(ids, &valid, logits, state);
  }

  // ---- parameters ---------------------------------------------------------------------------

  /// Every parameter, in a fixed order with unique names: embedding.token,
  /// [embedding.position with learned positions], the encoder's (EncoderStack::append_parameters,
  /// Ω included), final_norm.{gain, bias}, then classifier.{weight, bias} (classification) or
  /// token_head.{weight, bias} (per-token heads). The names of a classification model are a
  /// TextClassifier's. Ω is trainable only with config.train_omega; Ω, biases and norm
  /// parameters are not decayed. The pointers refer to this model.
  ParameterList<Scalar> parameters() {
    ParameterList<Scalar> list;
    token_.append_parameters(list, "embedding.token");
    if (config_.positions == PositionKind::learned)
      position_.append_parameters(list, "embedding.position");
    encoder_.append_parameters(list);
    final_norm_.append_parameters(list, "final_norm.");
    head_.append_parameters(
        list, config_.head == SequenceHead::classification ? "classifier." : "token_head.");
    return list;
  }

  /// Total number of scalar parameters (trainable or not).
  Index num_parameters() {
    Index total = 0;
    for (const auto& p : parameters()) total += p.value->size();
    return total;
  }

  // The layers, feature maps and Ω: EncoderAccess (num_layers, layer, num_omegas, omega, set_omega,
  // feature_map, ...).

 private:
  friend class EncoderAccess<SequenceModel, Map>;
  static constexpr const char* class_name = "coulomb::nn::SequenceModel::";

  static const SequenceModelConfig& checked(const SequenceModelConfig& config) {
    validate_config(config);
    return config;
  }

  // The parameters and their random streams as TextClassifier draws them (docs/model.md,
  // "Initialization"): the same seed gives the same bits.
  template <typename MakeMap>
  void build(std::uint64_t seed, MakeMap&& make_map) {
    const SequenceModelConfig& c = config_;
    token_ = Embedding<Scalar>(c.vocab_size, c.d_model);
    if (c.positions == PositionKind::learned)
      position_ = PositionEmbedding<Scalar>(c.max_length, c.d_model);
    if (c.positions == PositionKind::sinusoidal)
      sinusoid_ = SinusoidalPositions<Scalar>(c.d_model, c.position_base);
    embed_dropout_ = Dropout<Scalar>(c.dropout);
    final_norm_ = LayerNorm<Scalar>(c.d_model, c.layer_norm_eps);
    head_ = Linear<Scalar>(c.d_model, c.output_dim());

    EncoderLayerOptions lo;
    lo.d_model = c.d_model;
    lo.d_ff = c.d_ff;
    lo.dropout = c.dropout;
    lo.layer_norm_eps = c.layer_norm_eps;
    lo.tied_qk = c.tied_qk;
    lo.rotary = c.positions == PositionKind::rotary;
    lo.rotary_base = c.position_base;
    lo.key_conv = c.key_conv;
    lo.attention.num_heads = c.num_heads;
    lo.attention.num_threads = c.num_threads;
    lo.attention.omega_gradient = c.train_omega;
    lo.attention.causal = c.causal();
    lo.attention.keep_features = true;  // the backward reuses the forward's features

    Rng root(seed);
    Rng embed_rng = root.split(0);
    token_.initialize(embed_rng, c.embedding_init_std);
    if (c.positions == PositionKind::learned) position_.initialize(embed_rng, c.embedding_init_std);
    Rng map_rng = root.split(1);
    encoder_ = EncoderStack<Scalar, Map>::initialized(
        lo, c.num_layers, c.attention == AttentionKind::linear, c.shared_omega, c.num_threads,
        map_rng, root, make_map);
    Rng head_rng = root.split(static_cast<std::uint64_t>(2 + c.num_layers));
    head_.initialize(head_rng);
    head_.set_num_threads(c.num_threads);
  }

  /// backward from dselected_ (∂loss/∂h at the selected rows): scattered to their rows of h.
  void backward_from_selected() {
    dhf_.setZero(length_ * batch_, config_.d_model);
    for (Index j = 0; j < config_.d_model; ++j)
      for (std::size_t r = 0; r < rows_.size(); ++r)
        dhf_(rows_[r], j) += dselected_(static_cast<Index>(r), j);
    backward_below_head();
  }

  /// backward from dhf_ = ∂loss/∂h through the final norm, the encoder and the embeddings.
  void backward_below_head() {
    final_norm_.backward(dhf_, dx_);
    encoder_.backward(dx_, mask_);
    embed_dropout_.backward(dx_);
    token_.backward(ids_, dx_);
    if (config_.positions == PositionKind::learned) position_.backward(length_, batch_, dx_);
  }

  /// The forward; without `head`, it stops at h (and selected_ for `rows`): no logits, and
  /// backward(dlogits) is not allowed after it.
  void run_forward(const TokenArray& ids, const PaddingMask& mask,
                   const std::span<const Index>* rows, MatrixType& logits, bool training, Rng& rng,
                   bool head = true, bool inference = false) {
    check_batch(
        ids, mask,
        inference ? "coulomb::nn::SequenceModel::infer" : "coulomb::nn::SequenceModel::forward");
    has_forward_ = false;
    const Index L = ids.rows();
    const Index B = ids.cols();
    const auto n = static_cast<std::size_t>(L * B);
    length_ = L;
    batch_ = B;
    ids_.assign(ids.data(), ids.data() + n);
    mask_ = mask;
    token_.forward(ids_, x_);
    if (config_.positions == PositionKind::learned) position_.forward_add(L, B, x_);
    if (config_.positions == PositionKind::sinusoidal) sinusoid_.forward_add(L, B, x_);
    if (inference) {
      encoder_.infer(x_, mask_);
    } else {
      embed_dropout_.forward(x_, training, rng);
      encoder_.forward(x_, mask_, training, rng);
    }
    final_norm_.forward(x_, hf_);
    all_rows_ = rows == nullptr;
    if (config_.head == SequenceHead::classification) {
      pool_.forward(hf_, mask_, pooled_);
      head_.forward(pooled_, logits);
    } else if (all_rows_) {
      head_.forward(hf_, logits);
    } else {
      rows_.assign(rows->begin(), rows->end());
      const auto R = static_cast<Index>(rows_.size());
      selected_.resize(R, config_.d_model);
      for (Index j = 0; j < config_.d_model; ++j)
        for (Index r = 0; r < R; ++r) selected_(r, j) = hf_(rows_[static_cast<std::size_t>(r)], j);
      if (!head) return;
      head_.forward(selected_, logits);
    }
    logit_rows_ = logits.rows();
    has_forward_ = !inference;
  }

  void run_step(std::span<const TokenId> ids, const ValidMask* valid, MatrixType& logits,
                DecodingState& state) {
    const char* where = "coulomb::nn::SequenceModel::step";
    if (!(state.batch_ >= 1 && static_cast<Index>(state.layers_.size()) == this->num_layers()))
      detail::throw_invalid(where, "argument 'state' was not reset (call reset(state, batch))");
    if (!(static_cast<Index>(ids.size()) == state.batch_))
      detail::throw_invalid(where, "argument 'ids' has " + std::to_string(ids.size()) +
                                       " entries, expected the batch of the state (" +
                                       std::to_string(state.batch_) + ")");
    const Index t = state.position_;
    if (!(t < config_.max_length))
      detail::throw_invalid(
          where, "the state is at position " + std::to_string(t) + ", and config.max_length = " +
                     std::to_string(config_.max_length) + " bounds the positions a model can take");
    has_forward_ = false;           // the layer norms' buffers now hold the step's rows
    token_.forward(ids, state.x_);  // checks the ids' range
    if (config_.positions == PositionKind::learned) state.x_.rowwise() += position_.table().row(t);
    if (config_.positions == PositionKind::sinusoidal) sinusoid_.add_at(t, state.x_);
    encoder_.step(state.x_, valid, state.layers_);
    final_norm_.forward(state.x_, state.hf_);
    head_.forward(state.hf_, logits);
    ++state.position_;
  }

  void check_batch(const TokenArray& ids, const PaddingMask& mask, const char* where) const {
    const Index L = ids.rows();
    const Index B = ids.cols();
    if (!(L >= 1 && B >= 1))
      detail::throw_invalid(where, "argument 'ids' is " + std::to_string(L) + "x" +
                                       std::to_string(B) +
                                       ", expected at least 1x1 (length x sequences)");
    if (!(L <= config_.max_length))
      detail::throw_invalid(
          where, "argument 'ids' has length " + std::to_string(L) +
                     ", more than config.max_length = " + std::to_string(config_.max_length));
    detail::require_shape(mask, L, B, where, "mask");
    for (Index b = 0; b < B; ++b) {
      for (Index t = 0; t < L; ++t) {
        if (ids(t, b) < 0 || ids(t, b) >= config_.vocab_size)
          detail::throw_invalid(where, "argument 'ids' holds " + std::to_string(ids(t, b)) +
                                           " at (" + std::to_string(t) + ", " + std::to_string(b) +
                                           "), outside [0, config.vocab_size = " +
                                           std::to_string(config_.vocab_size) + ")");
      }
    }
  }

  // A call at chosen rows: a per-token head (the classification head has one output per
  // sequence; `instead` names the call to use) and rows inside the batch, not at padding.
  void check_rows_call(std::span<const Index> rows, const PaddingMask& mask, const char* where,
                       const char* instead) const {
    if (config_.head == SequenceHead::classification)
      detail::throw_invalid(
          where,
          std::string("the classification head has one output per sequence; use ") + instead);
    check_rows(rows, mask, where);
  }

  static void check_rows(std::span<const Index> rows, const PaddingMask& mask, const char* where) {
    const Index L = mask.rows();
    const Index n = mask.size();
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Index row = rows[r];
      if (!(row >= 0 && row < n))
        detail::throw_invalid(where, "argument 'rows' holds " + std::to_string(row) + " at index " +
                                         std::to_string(r) +
                                         ", outside [0, L x B = " + std::to_string(n) + ")");
      if (!mask(row % L, row / L))
        detail::throw_invalid(where, "argument 'rows' holds " + std::to_string(row) + " at index " +
                                         std::to_string(r) + ": position " +
                                         std::to_string(row % L) + " of sequence " +
                                         std::to_string(row / L) + " is padding");
    }
  }

  SequenceModelConfig config_;
  Embedding<Scalar> token_;
  PositionEmbedding<Scalar> position_;    // learned positions only
  SinusoidalPositions<Scalar> sinusoid_;  // sinusoidal positions only
  Dropout<Scalar> embed_dropout_;
  EncoderStack<Scalar, Map> encoder_;  // the layers and the feature maps, the owners of Ω
  LayerNorm<Scalar> final_norm_;
  MaskedMeanPool<Scalar> pool_;
  Linear<Scalar> head_;  // classifier (classification) or token head

  // State of the last forward.
  MatrixType x_, hf_, pooled_, selected_, dx_, dhf_, dpooled_, dselected_;
  std::vector<TokenId> ids_;
  std::vector<Index> rows_;
  PaddingMask mask_;
  Index batch_ = 0;
  Index length_ = 0;
  Index logit_rows_ = 0;
  bool all_rows_ = true;
  bool has_forward_ = false;
};

}  // namespace coulomb::nn
