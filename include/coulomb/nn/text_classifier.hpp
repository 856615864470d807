// SPDX-License-Identifier: MIT
/// @file nn/text_classifier.hpp
/// @brief The Transformer text classifier of the paper's sentence benchmarks: embeddings,
/// pre-norm encoder layers with linear (kernel) or exact softmax attention, masked mean pooling
/// (or, for sentence pairs, the pair head) and a linear classifier, with a hand-written backward,
/// its parameter list, access to the feature maps' Ω, and the Phase A representations. Documented
/// in docs/model.md.
///
/// Badiei Khuzani et al., *A Coulomb Particle Model for Learning Kernel Attention in
/// Transformers*, 2026, §4: the particles Ω of each attention layer (or one shared Ω) are learned
/// by the particle model on sequence representations (Phase A: the masked mean of each
/// sequence's d_head^{-1/4}-scaled keys, phase_a_representations()), frozen, and the rest of the
/// model is trained with cross-entropy (Phase B).
///
/// For a batch of B sequences padded to length L (coulomb::TokenBatch; n = B·L rows, row b·L + t
/// is position t of sequence b):
///   x = E_tok[ids] + E_pos[t] (+ E_seg[segments]),  x ← Dropout(x)
///   x ← EncoderLayer_l(x) for l = 1..N       (nn/encoder.hpp)
///   p_b = masked mean over t of LN_f(x)_{b·L+t},  logits_b = p_b W_c + b_c.
/// With the pair head (config.pooling = PoolingKind::pair, sentence pairs with segments), the two
/// sentences are pooled apart and compared (nn/pooling.hpp, PairPool):
///   u_b, v_b = masked means of LN_f(x) over the tokens of segment 0 and of segment 1,
///   f_b = [u_b, v_b, |u_b − v_b|, u_b ⊙ v_b]  (with config.pair_alignment, also the two
///         alignment features of the token embeddings E_tok[ids], PairAlignment; with
///         config.pair_overlap, also the six lexical overlap features of the pair,
///         TokenBatch::overlap (text/overlap.hpp), standardized: z_k = (o_k − shift_k)·scale_k
///         with the fixed parameters of set_overlap_standardization),
///   h_b = Dropout(GELU(f_b W_h + b_h)) with config.pair_hidden > 0, else h_b = Dropout(f_b),
///   logits_b = h_b W_c + b_c.
/// Padding never reaches a real token's output (attention ignores padded keys, every other
/// step is per token, the pooling skips padding), so logits do not depend on what the padded
/// positions hold or on how much padding there is.
#pragma once

#include <concepts>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/favor.hpp"
#include "../features/feature_map.hpp"
#include "../text/batching.hpp"
#include "attention_block.hpp"
#include "embedding.hpp"
#include "encoder.hpp"
#include "layers.hpp"
#include "parameter.hpp"
#include "pooling.hpp"

namespace coulomb::nn {

/// How a TextClassifier turns the encoder's output into the classifier's input.
enum class PoolingKind {
  mean,  ///< masked mean over all tokens (single sentences and pairs alike)
  pair  ///< pair head: each sentence pooled apart, then [u, v, |u − v|, u ⊙ v] (needs segments)
};

/// Name of a PoolingKind value ("mean" or "pair").
inline const char* to_string(PoolingKind kind) noexcept {
  return kind == PoolingKind::mean ? "mean" : "pair";
}

/// Configuration of a TextClassifier. Every field is checked by validate_config().
struct TextClassifierConfig {
  /// Largest num_threads: a bound on what a configuration (or a model file) can ask for, so that
  /// a damaged or hostile file cannot make the model start a million threads.
  static constexpr int max_threads = 1024;

  Index vocab_size = 0;    ///< token ids are in [0, vocab_size)
  Index max_length = 128;  ///< longest padded batch length L (rows of the position table)
  Index d_model = 64;      ///< width d of the residual stream; a multiple of num_heads
  Index num_heads = 4;     ///< attention heads H; d_head = d_model / num_heads
  Index d_ff = 256;        ///< hidden width of the feed-forward blocks
  Index num_layers = 2;    ///< encoder layers N (at least 1)
  Index num_classes = 2;   ///< classes C (at least 2)
  double dropout = 0.1;    ///< dropout rate in [0, 1) (embeddings and both branches)
  AttentionKind attention = AttentionKind::linear;  ///< linear (feature map) or softmax
  Index num_features = 64;           ///< particles m of each feature map (linear attention)
  bool shared_omega = false;         ///< one Ω for all layers (true) or one per layer (false)
  bool train_omega = false;          ///< Ω trainable end to end (false: frozen, Phase B)
  bool tied_qk = false;              ///< one projection for queries and keys (Q = K)
  bool use_segments = false;         ///< add segment embeddings (sentence pairs)
  Index num_segments = 2;            ///< segment ids are in [0, num_segments) when used
  double layer_norm_eps = 1e-5;      ///< ε of every layer norm
  double embedding_init_std = 0.02;  ///< standard deviation of the embedding initialization
  /// Attention and affine-layer threads (AttentionOptions::num_threads; 0: all), at most
  /// max_threads.
  int num_threads = 0;
  PoolingKind pooling = PoolingKind::mean;  ///< mean pooling or the pair head (sentence pairs)
  Index pair_hidden = 0;  ///< pair head: width of its GELU hidden layer (0: none; pair only)
  /// pair head: append the two alignment features of the token embeddings (PairAlignment)
  bool pair_alignment = false;
  /// pair head: append the pair_overlap_features lexical overlap features of each pair
  /// (TokenBatch::overlap: the fractions of each sentence's word n-grams, n = 1, 2, 3, found in
  /// the other sentence; text/overlap.hpp). Batches must then come from a dataset of pairs
  /// with word keys (TextEncoder records them).
  bool pair_overlap = false;
};

/// Throws invalid_argument, naming the field ('config.d_model', ...), unless every field of
/// `config` is valid.
inline void validate_config(const TextClassifierConfig& config) {
  const char* where = "coulomb::nn::validate_config";
  auto at_least = [&](Index value, Index low, const char* name) {
    if (!(value >= low))
      detail::throw_invalid(where, std::string("argument 'config.") + name + "' must be at least " +
                                       std::to_string(low) + ", got " + std::to_string(value));
  };
  at_least(config.vocab_size, 1, "vocab_size");
  at_least(config.max_length, 1, "max_length");
  at_least(config.d_model, 1, "d_model");
  at_least(config.num_heads, 1, "num_heads");
  at_least(config.d_ff, 1, "d_ff");
  at_least(config.num_layers, 1, "num_layers");
  at_least(config.num_classes, 2, "num_classes");
  if (!(config.d_model % config.num_heads == 0))
    detail::throw_invalid(where, "argument 'config.d_model' (" + std::to_string(config.d_model) +
                                     ") must be a multiple of config.num_heads (" +
                                     std::to_string(config.num_heads) + ")");
  if (!(std::isfinite(config.dropout) && config.dropout >= 0.0 && config.dropout < 1.0))
    detail::throw_invalid(where, "argument 'config.dropout' must be in [0, 1), got " +
                                     std::to_string(config.dropout));
  if (!(config.attention == AttentionKind::linear || config.attention == AttentionKind::softmax))
    detail::throw_invalid(where, "argument 'config.attention' is not linear or softmax");
  if (config.attention == AttentionKind::linear) at_least(config.num_features, 1, "num_features");
  if (config.use_segments) at_least(config.num_segments, 1, "num_segments");
  detail::require_positive(config.layer_norm_eps, where, "config.layer_norm_eps");
  detail::require_positive(config.embedding_init_std, where, "config.embedding_init_std");
  if (!(config.num_threads >= 0 && config.num_threads <= TextClassifierConfig::max_threads))
    detail::throw_invalid(where, "argument 'config.num_threads' must be in [0, " +
                                     std::to_string(TextClassifierConfig::max_threads) + "], got " +
                                     std::to_string(config.num_threads));
  if (!(config.pooling == PoolingKind::mean || config.pooling == PoolingKind::pair))
    detail::throw_invalid(where, "argument 'config.pooling' is not mean or pair");
  if (config.pooling == PoolingKind::pair) {
    if (!(config.use_segments && config.num_segments >= 2))
      detail::throw_invalid(where,
                            "argument 'config.pooling' is pair, which needs config.use_segments "
                            "and config.num_segments >= 2 (sentence pairs)");
    at_least(config.pair_hidden, 0, "pair_hidden");
  } else if (!(config.pair_hidden == 0)) {
    detail::throw_invalid(where, "argument 'config.pair_hidden' must be 0 with mean pooling, got " +
                                     std::to_string(config.pair_hidden));
  } else if (config.pair_alignment) {
    detail::throw_invalid(where,
                          "argument 'config.pair_alignment' must be false with mean pooling");
  } else if (config.pair_overlap) {
    detail::throw_invalid(where, "argument 'config.pair_overlap' must be false with mean pooling");
  }
}

/// The Transformer text classifier (see the file comment and docs/model.md), for scalar type
/// `Scalar` and feature map `Map` (used when config.attention is linear; with softmax
/// attention the model has no feature map and no Ω, whatever `Map` is).
///
/// Use: `forward` (training with dropout drawn from a generator, or evaluation) gives logits;
/// `backward(dlogits)` adds ∂loss/∂parameter to the gradients of parameters(); `zero_grad()`
/// clears them. Buffers are members: once the batch shape (B, L) repeats, calls allocate
/// nothing in nn/ (pad batches to a fixed length to get there; see docs/model.md). One model
/// per thread of control: forward and backward use internal state.
template <RealScalar Scalar, FeatureMap Map = FavorPlus<Scalar>>
class TextClassifier {
  static_assert(std::is_same_v<typename Map::Scalar, Scalar>,
                "TextClassifier: the feature map's scalar type must be the model's");

 public:
  using MatrixType = Matrix<Scalar>;              ///< dense column-major matrix
  using ConstRef = Eigen::Ref<const MatrixType>;  ///< how inputs are taken (no copy)
  using Layer = EncoderLayer<Scalar, Map>;        ///< one encoder layer
  using FeatureMapType = Map;                     ///< the feature map type

  /// A model with parameters drawn from `seed` (scheme in docs/model.md) and feature maps
  /// constructed as Map(d_head, num_features, rng) with their default options. Throws
  /// invalid_argument for an invalid config.
  TextClassifier(const TextClassifierConfig& config,
                 std::uint64_t seed) requires std::constructible_from<Map, Index, Index, Rng&>
      : config_(checked(config)) {
    const Index d_head = config_.d_model / config_.num_heads;
    build(seed, [&](Rng& rng) { return Map(d_head, config_.num_features, rng); });
  }

  /// A model whose feature maps are copies of `prototype` (its options, for example a PORF ε
  /// or an RFF bandwidth) with Ω redrawn from `seed`. The prototype must have input_dim() =
  /// d_model / num_heads and num_particles() = config.num_features. Throws invalid_argument
  /// otherwise or for an invalid config.
  TextClassifier(const TextClassifierConfig& config, const Map& prototype, std::uint64_t seed)
      : config_(checked(config)) {
    const char* where = "coulomb::nn::TextClassifier::constructor";
    const Index d_head = config_.d_model / config_.num_heads;
    if (config_.attention == AttentionKind::linear) {
      if (!(prototype.input_dim() == d_head))
        detail::throw_invalid(
            where, "argument 'prototype' has input_dim " + std::to_string(prototype.input_dim()) +
                       ", expected d_model / num_heads = " + std::to_string(d_head));
      if (!(prototype.num_particles() == config_.num_features))
        detail::throw_invalid(where, "argument 'prototype' has " +
                                         std::to_string(prototype.num_particles()) +
                                         " particles, expected config.num_features = " +
                                         std::to_string(config_.num_features));
    }
    build(seed, [&](Rng& rng) {
      Map map = prototype;
      map.redraw(rng);
      return map;
    });
  }

  /// The configuration.
  const TextClassifierConfig& config() const noexcept { return config_; }
  /// Number of encoder layers.
  Index num_layers() const noexcept { return static_cast<Index>(layers_.size()); }
  /// Encoder layer `i` (for inspection and tests). Throws invalid_argument for i outside
  /// [0, num_layers()).
  Layer& layer(Index i) {
    require_layer_index(i, "layer", "i");
    return layers_[static_cast<std::size_t>(i)];
  }

  // ---- forward and backward ---------------------------------------------------------------

  /// logits (resized to B × C) for `batch`. With `training`, dropout masks are drawn from
  /// `rng` (embeddings, then each layer's attention and feed-forward branches); without, dropout
  /// is the identity and `rng` is not used. Keeps what backward needs. Throws invalid_argument
  /// naming 'batch.ids', 'batch.mask', 'batch.segments' or 'batch.overlap' for a batch that
  /// does not fit the config (empty, longer than max_length, ids or segments out of range,
  /// shapes that differ, overlap features missing or not finite with config.pair_overlap).
  void forward(const TokenBatch& batch, MatrixType& logits, bool training, Rng& rng) {
    check_batch(batch, "coulomb::nn::TextClassifier::forward");
    sync_feature_maps();
    const Index L = batch.length();
    const Index B = batch.size();
    const auto n = static_cast<std::size_t>(L * B);
    length_ = L;
    batch_ = B;
    ids_.assign(batch.ids.data(), batch.ids.data() + n);
    mask_ = batch.mask;
    token_.forward(ids_, x_);
    const bool align = config_.pair_alignment;  // only with the pair head (validate_config)
    if (align) tokens_ = x_;
    position_.forward_add(L, B, x_);
    if (config_.use_segments) {
      segments_.assign(batch.segments.data(), batch.segments.data() + n);
      segment_.forward_add(segments_, x_);
    }
    embed_dropout_.forward(x_, training, rng);
    for (auto& layer : layers_) layer.forward(x_, mask_, training, rng);
    final_norm_.forward(x_, hf_);
    if (config_.pooling == PoolingKind::pair) {
      const bool overlap = config_.pair_overlap;
      if (align || overlap) {
        pair_pool_.forward(hf_, mask_, segments_, pair_features_);
        const Index w = pair_features_.cols();
        pooled_.resize(B, w + (align ? 2 : 0) + (overlap ? pair_overlap_features : 0));
        pooled_.leftCols(w) = pair_features_;
        if (align) {
          alignment_.forward(tokens_, mask_, segments_, aligned_);
          pooled_.middleCols(w, 2) = aligned_;
        }
        if (overlap) standardize_overlap(batch.overlap, w + (align ? 2 : 0));
      } else {
        pair_pool_.forward(hf_, mask_, segments_, pooled_);
      }
      if (config_.pair_hidden > 0) {
        pair_hidden_.forward(pooled_, hidden_pre_);
        gelu_.forward(hidden_pre_, head_in_, training);
      } else {
        head_in_ = pooled_;
      }
      head_dropout_.forward(head_in_, training, rng);
      classifier_.forward(head_in_, logits);
    } else {
      pool_.forward(hf_, mask_, pooled_);
      classifier_.forward(pooled_, logits);
    }
    has_forward_ = true;
  }

  /// Evaluation forward (no dropout).
  void forward(const TokenBatch& batch, MatrixType& logits) {
    Rng unused(0);
    forward(batch, logits, false, unused);
  }

  /// Adds ∂loss/∂parameter to the gradient of every parameter, given dlogits = ∂loss/∂logits
  /// (B × C) of the last forward. Ω's gradient is added only when Ω is trainable. Throws
  /// invalid_argument without a forward, or for dlogits of another shape or non-finite.
  void backward(const ConstRef& dlogits) {
    const char* where = "coulomb::nn::TextClassifier::backward";
    if (!(has_forward_))
      detail::throw_invalid(where, "argument 'dlogits': no forward to differentiate");
    detail::require_shape(dlogits, batch_, config_.num_classes, where, "dlogits");
    detail::require_finite(dlogits, where, "dlogits");
    if (config_.pooling == PoolingKind::pair) {
      classifier_.backward(head_in_, dlogits, dhead_);
      head_dropout_.backward(dhead_);
      if (config_.pair_hidden > 0) {
        gelu_.backward(hidden_pre_, dhead_, dhead_);
        pair_hidden_.backward(pooled_, dhead_, dpooled_);
      } else {
        dpooled_ = dhead_;
      }
      const Index d = config_.d_model;
      if (config_.pair_alignment || config_.pair_overlap) {
        // The alignment's gradient reaches only the token table: nothing to do when the table
        // is frozen. The overlap features' columns reach only their (fixed) standardization.
        if (config_.pair_alignment && train_token_embedding_)
          alignment_.backward(dpooled_.middleCols(4 * d, 2), mask_, segments_, dtokens_);
        if (config_.pair_overlap) overlap_backward(dpooled_.rightCols(pair_overlap_features));
        pair_pool_.backward(dpooled_.leftCols(4 * d), mask_, segments_, dhf_);
      } else {
        pair_pool_.backward(dpooled_, mask_, segments_, dhf_);
      }
    } else {
      classifier_.backward(pooled_, dlogits, dpooled_);
      pool_.backward(dpooled_, mask_, dhf_);
    }
    final_norm_.backward(dhf_, dx_);
    const bool omega_grad = config_.attention == AttentionKind::linear && config_.train_omega;
    for (Index i = num_layers() - 1; i >= 0; --i) {
      Layer& layer = layers_[static_cast<std::size_t>(i)];
      layer.backward(dx_, mask_);
      if (omega_grad) omega_grad_[omega_index(i)] += layer.attention().last_omega_gradient();
    }
    embed_dropout_.backward(dx_);
    if (train_token_embedding_) token_.backward(ids_, dx_);
    if (train_token_embedding_ && config_.pair_alignment) token_.backward(ids_, dtokens_);
    position_.backward(length_, batch_, dx_);
    if (config_.use_segments) segment_.backward(segments_, dx_);
  }

  /// Sets the gradient of every parameter (Ω included) to zero.
  void zero_grad() {
    token_.zero_grad();
    position_.zero_grad();
    segment_.zero_grad();
    for (auto& layer : layers_) layer.zero_grad();
    final_norm_.zero_grad();
    pair_hidden_.zero_grad();
    classifier_.zero_grad();
    for (auto& g : omega_grad_) g.setZero();
    for (auto& g : phases_grad_) g.setZero();
    overlap_shift_grad_.setZero();
    overlap_scale_grad_.setZero();
  }

  // ---- parameters ---------------------------------------------------------------------------

  /// Every parameter, in a fixed order with unique dotted names (docs/model.md lists them):
  /// embedding.{token, position, segment}, [attention.omega when shared], per layer i
  /// encoder.i.{norm1.gain, norm1.bias, attention.w_q, attention.b_q, [attention.w_k,
  /// attention.b_k unless tied], attention.w_v, attention.b_v, attention.w_o, attention.b_o,
  /// [attention.omega per layer], norm2.gain, norm2.bias, ffn.w_1, ffn.b_1, ffn.w_2, ffn.b_2},
  /// final_norm.{gain, bias}, [pair_head.hidden.{weight, bias} with a pair head's hidden layer],
  /// [pair_head.overlap.{shift, scale} with config.pair_overlap: never trainable, set by
  /// set_overlap_standardization], classifier.{weight, bias}. Ω is trainable only with
  /// config.train_omega; Ω, biases and norm parameters are not decayed. RFF maps with phases
  /// add a non-trainable ".phases" (m × 1) after each Ω. The pointers refer to this model and
  /// stay valid while it is neither moved nor destroyed.
  ParameterList<Scalar> parameters() {
    ParameterList<Scalar> list;
    token_.append_parameters(list, "embedding.token");
    list.back().trainable = train_token_embedding_;
    position_.append_parameters(list, "embedding.position");
    if (config_.use_segments) segment_.append_parameters(list, "embedding.segment");
    const bool linear = config_.attention == AttentionKind::linear;
    if (linear && config_.shared_omega) append_omega(list, "attention.", 0);
    for (Index i = 0; i < num_layers(); ++i) {
      const std::string prefix = "encoder." + std::to_string(i) + ".";
      layers_[static_cast<std::size_t>(i)].append_parameters(
          list, prefix, [&](ParameterList<Scalar>& l) {
            if (linear && !config_.shared_omega)
              append_omega(l, prefix + "attention.", static_cast<std::size_t>(i));
          });
    }
    final_norm_.append_parameters(list, "final_norm.");
    if (config_.pooling == PoolingKind::pair && config_.pair_hidden > 0)
      pair_hidden_.append_parameters(list, "pair_head.hidden.");
    if (config_.pair_overlap) {
      list.push_back(
          {"pair_head.overlap.shift", &overlap_shift_, &overlap_shift_grad_, false, false});
      list.push_back(
          {"pair_head.overlap.scale", &overlap_scale_, &overlap_scale_grad_, false, false});
    }
    classifier_.append_parameters(list, "classifier.");
    return list;
  }

  // ---- the pair head's overlap features ------------------------------------------------------

  /// Sets the standardization of the overlap features (config.pair_overlap): feature k enters
  /// the classifier as (o_k − mean_k) / sd_k, or o_k − mean_k where sd_k is 0. Call it with the
  /// moments of the training split (coulomb::pair_overlap_moments) before training; until then
  /// the features enter as they are (shift 0, scale 1). Stored in model files as the
  /// parameters pair_head.overlap.shift and .scale, which no optimizer changes. Throws
  /// invalid_argument without config.pair_overlap, or for vectors that are not of length
  /// pair_overlap_features, not finite, or with a negative sd.
  template <typename D1, typename D2>
  void set_overlap_standardization(const Eigen::DenseBase<D1>& mean,
                                   const Eigen::DenseBase<D2>& sd) {
    const char* where = "coulomb::nn::TextClassifier::set_overlap_standardization";
    if (!config_.pair_overlap)
      detail::throw_invalid(where, "the model has no overlap features (config.pair_overlap)");
    if (!(mean.size() == pair_overlap_features && sd.size() == pair_overlap_features))
      detail::throw_invalid(where, "arguments 'mean' and 'sd' must have " +
                                       std::to_string(pair_overlap_features) + " entries, got " +
                                       std::to_string(mean.size()) + " and " +
                                       std::to_string(sd.size()));
    for (Index k = 0; k < pair_overlap_features; ++k) {
      const double m = static_cast<double>(mean.derived().coeff(k));
      const double s = static_cast<double>(sd.derived().coeff(k));
      if (!(std::isfinite(m) && std::isfinite(s) && s >= 0.0))
        detail::throw_invalid(where, "entry " + std::to_string(k) +
                                         ": mean and sd must be finite and sd >= 0, got " +
                                         std::to_string(m) + " and " + std::to_string(s));
      overlap_shift_(k, 0) = static_cast<Scalar>(m);
      overlap_scale_(k, 0) = s > 0.0 ? static_cast<Scalar>(1.0 / s) : Scalar(1);
    }
  }

  /// Total number of scalar parameters (trainable or not).
  Index num_parameters() {
    Index total = 0;
    for (const auto& p : parameters()) total += p.value->size();
    return total;
  }

  // ---- feature maps and Ω -------------------------------------------------------------------

  /// Number of distinct Ω: 1 when shared, num_layers() per layer, 0 for softmax attention.
  Index num_omegas() const noexcept { return static_cast<Index>(omega_.size()); }

  /// Which Ω layer `layer` uses (0 when shared).
  Index omega_index(Index layer) const noexcept { return config_.shared_omega ? 0 : layer; }

  /// Ω number `i` (m × d_head), the value the optimizer and model files see.
  const MatrixType& omega(Index i) const {
    require_omega_index(i, "omega");
    return omega_[static_cast<std::size_t>(i)];
  }

  /// Replaces Ω number `i` (for example with the particles learned in Phase A) in the model and
  /// in the feature maps of every layer that uses it. Throws invalid_argument for softmax
  /// attention, an index out of range, or an Ω that is not m × d_head and finite.
  template <typename D>
  void set_omega(Index i, const Eigen::MatrixBase<D>& omega) {
    const char* where = "coulomb::nn::TextClassifier::set_omega";
    require_omega_index(i, "set_omega");
    const auto& current = omega_[static_cast<std::size_t>(i)];
    detail::require_shape(omega, current.rows(), current.cols(), where, "omega");
    detail::require_finite(omega, where, "omega");
    omega_[static_cast<std::size_t>(i)] = omega;
    sync_feature_maps();
  }

  /// The feature map of encoder layer `layer`, whose Ω is omega(omega_index(layer)) as of the
  /// last forward, set_omega or redraw_omega (an optimizer step on a trainable Ω reaches the
  /// map at the next forward). Throws invalid_argument for softmax attention or a bad index.
  const Map& feature_map(Index layer) const {
    require_layer_index(layer, "feature_map", "layer");
    return layers_[static_cast<std::size_t>(layer)].attention().feature_map();
  }

  /// Whether Ω is trained end to end (config.train_omega).
  bool omega_trainable() const noexcept { return config_.train_omega; }

  /// Freezes (false) or unfreezes (true) every Ω: the trainable flag of parameters() and the
  /// computation of ∂L/∂Ω in backward follow it. Call parameters() again afterwards.
  void set_omega_trainable(bool trainable) {
    config_.train_omega = trainable;
    for (auto& layer : layers_) layer.attention().set_omega_gradient(trainable);
  }

  /// Whether the token embedding table is trained (true unless set_token_embedding_trainable
  /// froze it).
  bool token_embedding_trainable() const noexcept { return train_token_embedding_; }

  /// Freezes (false) or unfreezes (true) the token embedding table `embedding.token`: the
  /// trainable flag of parameters() follows it, and a frozen table gets no gradient (backward
  /// skips its scatter-add). Frozen at its random draw, the table still tells words apart, which
  /// is what comparing two sentences needs, but it can no longer memorize which words go with
  /// which label (docs/model.md, the pair head). Training state, not configuration: not saved
  /// in model files (a loaded model is trainable). Call parameters() again afterwards.
  void set_token_embedding_trainable(bool trainable) noexcept {
    train_token_embedding_ = trainable;
  }

  /// Draws every Ω (and RFF phases) afresh from `rng` with the maps' Draw policy (the
  /// "redrawn" vanilla baseline).
  void redraw_omega(Rng& rng) {
    for (std::size_t k = 0; k < omega_.size(); ++k) {
      Map& map = layers_[first_layer_of(k)].attention().feature_map();
      map.redraw(rng);
      store_map(k, map);
    }
    sync_feature_maps();
  }

  // ---- Phase A ------------------------------------------------------------------------------

  /// The Phase A representations of `batch`: for every encoder layer, a B × d matrix whose row
  /// b, columns [h·d_head, (h+1)·d_head), is the masked mean over the tokens of sequence b of
  /// head h's key vectors, times the attention's input scale s = d_head^{-1/4}:
  ///   r_{b,h} = s · (1/n_b) Σ_{t : mask(t,b)} k_{b·L+t, h}
  /// (the keys the feature map sees, pooled; MISSION §4). Runs an evaluation forward (no
  /// dropout), which replaces the state a backward would use. split_heads() stacks the heads
  /// as rows.
  void phase_a_representations(const TokenBatch& batch, std::vector<MatrixType>& out) {
    forward(batch, logits_scratch_);
    out.resize(layers_.size());
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const auto& attention = layers_[i].attention();
      key_pool_.forward(attention.keys(), mask_, out[i]);
      out[i] *= attention.input_scale();
    }
  }

  /// phase_a_representations as a new vector.
  std::vector<MatrixType> phase_a_representations(const TokenBatch& batch) {
    std::vector<MatrixType> out;
    phase_a_representations(batch, out);
    return out;
  }

  /// Rows of every head stacked: from R (B × H·d_head) to (H·B) × d_head, where rows
  /// [h·B, (h+1)·B) are head h. Throws invalid_argument if R's columns are not a multiple of
  /// `num_heads`.
  static MatrixType split_heads(const ConstRef& representations, Index num_heads) {
    const char* where = "coulomb::nn::TextClassifier::split_heads";
    if (!(num_heads >= 1 && representations.cols() % num_heads == 0))
      detail::throw_invalid(
          where, "argument 'representations' has " + std::to_string(representations.cols()) +
                     " columns, not a multiple of num_heads = " + std::to_string(num_heads));
    const Index B = representations.rows();
    const Index dh = representations.cols() / num_heads;
    MatrixType out(num_heads * B, dh);
    for (Index h = 0; h < num_heads; ++h)
      out.middleRows(h * B, B) = representations.middleCols(h * dh, dh);
    return out;
  }

 private:
  static const TextClassifierConfig& checked(const TextClassifierConfig& config) {
    validate_config(config);
    return config;
  }

  template <typename MakeMap>
  void build(std::uint64_t seed, MakeMap&& make_map) {
    const TextClassifierConfig& c = config_;
    token_ = Embedding<Scalar>(c.vocab_size, c.d_model);
    position_ = PositionEmbedding<Scalar>(c.max_length, c.d_model);
    if (c.use_segments) segment_ = Embedding<Scalar>(c.num_segments, c.d_model);
    embed_dropout_ = Dropout<Scalar>(c.dropout);
    final_norm_ = LayerNorm<Scalar>(c.d_model, c.layer_norm_eps);
    const bool pair = c.pooling == PoolingKind::pair;
    const Index features =
        4 * c.d_model + (c.pair_alignment ? 2 : 0) + (c.pair_overlap ? pair_overlap_features : 0);
    const Index head_width = !pair ? c.d_model : c.pair_hidden > 0 ? c.pair_hidden : features;
    if (pair && c.pair_hidden > 0) pair_hidden_ = Linear<Scalar>(features, c.pair_hidden);
    if (c.pair_overlap) {
      overlap_shift_ = MatrixType::Zero(pair_overlap_features, 1);
      overlap_scale_ = MatrixType::Ones(pair_overlap_features, 1);
      overlap_shift_grad_ = MatrixType::Zero(pair_overlap_features, 1);
      overlap_scale_grad_ = MatrixType::Zero(pair_overlap_features, 1);
    }
    head_dropout_ = Dropout<Scalar>(pair ? c.dropout : 0.0);
    classifier_ = Linear<Scalar>(head_width, c.num_classes);

    EncoderLayerOptions lo;
    lo.d_model = c.d_model;
    lo.d_ff = c.d_ff;
    lo.dropout = c.dropout;
    lo.layer_norm_eps = c.layer_norm_eps;
    lo.tied_qk = c.tied_qk;
    lo.attention.num_heads = c.num_heads;
    lo.attention.num_threads = c.num_threads;
    lo.attention.omega_gradient = c.train_omega;
    // A training model: its backward reuses the forward's features (the same results, one
    // feature map per block less; memory 2·B·H·L·m per layer).
    lo.attention.keep_features = true;

    // Random streams: embeddings, feature maps, each layer, classifier (docs/model.md).
    Rng root(seed);
    Rng embed_rng = root.split(0);
    token_.initialize(embed_rng, c.embedding_init_std);
    position_.initialize(embed_rng, c.embedding_init_std);
    if (c.use_segments) segment_.initialize(embed_rng, c.embedding_init_std);
    Rng map_rng = root.split(1);
    layers_.clear();
    layers_.reserve(static_cast<std::size_t>(c.num_layers));
    if (c.attention == AttentionKind::linear) {
      const auto count = static_cast<std::size_t>(c.shared_omega ? 1 : c.num_layers);
      std::vector<Map> maps;
      maps.reserve(count);
      for (std::size_t k = 0; k < count; ++k) maps.push_back(make_map(map_rng));
      omega_.resize(count);
      omega_grad_.resize(count);
      for (std::size_t k = 0; k < count; ++k) {
        omega_grad_[k].setZero(maps[k].num_particles(), maps[k].input_dim());
        store_map(k, maps[k]);
      }
      for (Index i = 0; i < c.num_layers; ++i)
        layers_.emplace_back(lo, maps[static_cast<std::size_t>(omega_index(i))]);
    } else {
      for (Index i = 0; i < c.num_layers; ++i) layers_.emplace_back(lo);
    }
    for (Index i = 0; i < c.num_layers; ++i) {
      Rng layer_rng = root.split(static_cast<std::uint64_t>(2 + i));
      layers_[static_cast<std::size_t>(i)].initialize(layer_rng);
    }
    Rng head_rng = root.split(static_cast<std::uint64_t>(2 + c.num_layers));
    classifier_.initialize(head_rng);
    if (pair && c.pair_hidden > 0) {
      Rng hidden_rng = root.split(static_cast<std::uint64_t>(3 + c.num_layers));
      pair_hidden_.initialize(hidden_rng);
    }
    // The affine layers split their products over the attention threads (Linear::set_num_threads).
    for (auto& layer : layers_) {
      auto& a = layer.attention();
      for (Linear<Scalar>* l : {&a.query_projection(), &a.key_projection(), &a.value_projection(),
                                &a.output_projection(), &layer.ffn_in(), &layer.ffn_out()})
        l->set_num_threads(c.num_threads);
    }
    classifier_.set_num_threads(c.num_threads);
    pair_hidden_.set_num_threads(c.num_threads);
  }

  /// Copies the map's Ω (and phases) into parameter slot k.
  void store_map(std::size_t k, const Map& map) {
    omega_[k] = map.omega();
    if constexpr (feature_map_traits<Map>::has_phases) {
      if (phases_.size() != omega_.size()) {
        phases_.resize(omega_.size());
        phases_grad_.resize(omega_.size());
      }
      phases_[k] = map.phases();
      phases_grad_[k].setZero(map.num_particles(), 1);
    }
  }

  std::size_t first_layer_of(std::size_t k) const { return config_.shared_omega ? 0 : k; }

  /// Pushes the parameter values of Ω (and phases) into the layers' maps where they differ.
  void sync_feature_maps() {
    if (config_.attention != AttentionKind::linear) return;
    const char* where = "coulomb::nn::TextClassifier::forward";
    for (Index i = 0; i < num_layers(); ++i) {
      const auto k = static_cast<std::size_t>(omega_index(i));
      Map& map = layers_[static_cast<std::size_t>(i)].attention().feature_map();
      const MatrixType& om = omega_[k];
      detail::require_shape(om, map.num_particles(), map.input_dim(), where, "omega");
      if (map.omega() != om) map.set_omega(om);
      if constexpr (feature_map_traits<Map>::has_phases) {
        detail::require_shape(phases_[k], map.num_particles(), 1, where, "phases");
        if (map.phases() != phases_[k].col(0)) map.set_phases(phases_[k].col(0));
      }
    }
  }

  void append_omega(ParameterList<Scalar>& list, const std::string& prefix, std::size_t k) {
    list.push_back({prefix + "omega", &omega_[k], &omega_grad_[k], config_.train_omega, false});
    if constexpr (feature_map_traits<Map>::has_phases)
      list.push_back({prefix + "phases", &phases_[k], &phases_grad_[k], false, false});
  }

  void require_layer_index(Index layer, const char* function, const char* name) const {
    if (!(layer >= 0 && layer < num_layers()))
      detail::throw_invalid(std::string("coulomb::nn::TextClassifier::") + function,
                            std::string("argument '") + name + "' is " + std::to_string(layer) +
                                ", expected 0.." + std::to_string(num_layers() - 1));
  }

  void require_omega_index(Index i, const char* function) const {
    const std::string where = std::string("coulomb::nn::TextClassifier::") + function;
    if (!(config_.attention == AttentionKind::linear))
      detail::throw_invalid(where, "the model uses softmax attention, which has no Omega");
    if (!(i >= 0 && i < num_omegas()))
      detail::throw_invalid(where, "argument 'i' is " + std::to_string(i) + ", expected 0.." +
                                       std::to_string(num_omegas() - 1));
  }

  void check_batch(const TokenBatch& batch, const char* where) const {
    const Index L = batch.ids.rows();
    const Index B = batch.ids.cols();
    if (!(L >= 1 && B >= 1))
      detail::throw_invalid(where, "argument 'batch.ids' is " + std::to_string(L) + "x" +
                                       std::to_string(B) +
                                       ", expected at least 1x1 (length x sequences)");
    if (!(L <= config_.max_length))
      detail::throw_invalid(
          where, "argument 'batch.ids' has length " + std::to_string(L) +
                     ", more than config.max_length = " + std::to_string(config_.max_length));
    detail::require_shape(batch.mask, L, B, where, "batch.mask");
    check_range(batch.ids, config_.vocab_size, where, "batch.ids", "config.vocab_size");
    if (config_.use_segments) {
      detail::require_shape(batch.segments, L, B, where, "batch.segments");
      check_range(batch.segments, config_.num_segments, where, "batch.segments",
                  "config.num_segments");
    }
    if (config_.pair_overlap) {
      if (!(batch.overlap.rows() == B && batch.overlap.cols() == pair_overlap_features))
        detail::throw_invalid(
            where, "argument 'batch.overlap' is " + std::to_string(batch.overlap.rows()) + "x" +
                       std::to_string(batch.overlap.cols()) + ", expected " + std::to_string(B) +
                       "x" + std::to_string(pair_overlap_features) +
                       " (config.pair_overlap needs batches of a dataset of sentence pairs with "
                       "word keys, as TextEncoder encodes them)");
      if (!batch.overlap.allFinite())
        detail::throw_invalid(where, "argument 'batch.overlap' holds a value that is not finite");
    }
  }

  // pooled_'s columns first … first + pair_overlap_features − 1 from the batch's overlap
  // features, standardized; keeps the raw features for backward.
  void standardize_overlap(const Eigen::ArrayXXd& overlap, Index first) {
    overlap_in_ = overlap.matrix().template cast<Scalar>();
    for (Index k = 0; k < pair_overlap_features; ++k) {
      const Scalar shift = overlap_shift_(k, 0);
      const Scalar scale = overlap_scale_(k, 0);
      for (Index b = 0; b < overlap.rows(); ++b)
        pooled_(b, first + k) = (overlap_in_(b, k) - shift) * scale;
    }
  }

  // Gradients of the standardization's shift and scale from dZ = ∂L/∂z (B × K): with
  // z = (o − shift)·scale, ∂L/∂shift_k = −scale_k Σ_b dZ_bk and ∂L/∂scale_k = Σ_b dZ_bk (o_bk −
  // shift_k). Exact, so that every parameter's gradient is, although no optimizer uses them.
  void overlap_backward(const ConstRef& dZ) {
    for (Index k = 0; k < pair_overlap_features; ++k) {
      const Scalar shift = overlap_shift_(k, 0);
      Scalar sum = 0;
      Scalar weighted = 0;
      for (Index b = 0; b < dZ.rows(); ++b) {
        sum += dZ(b, k);
        weighted += dZ(b, k) * (overlap_in_(b, k) - shift);
      }
      overlap_shift_grad_(k, 0) -= overlap_scale_(k, 0) * sum;
      overlap_scale_grad_(k, 0) += weighted;
    }
  }

  static void check_range(const TokenArray& a, Index limit, const char* where, const char* name,
                          const char* limit_name) {
    for (Index b = 0; b < a.cols(); ++b) {
      for (Index t = 0; t < a.rows(); ++t) {
        if (a(t, b) < 0 || a(t, b) >= limit) {
          detail::throw_invalid(where, std::string("argument '") + name + "' holds " +
                                           std::to_string(a(t, b)) + " at (" + std::to_string(t) +
                                           ", " + std::to_string(b) + "), outside [0, " +
                                           limit_name + " = " + std::to_string(limit) + ")");
        }
      }
    }
  }

  TextClassifierConfig config_;
  Embedding<Scalar> token_, segment_;
  PositionEmbedding<Scalar> position_;
  Dropout<Scalar> embed_dropout_;
  std::vector<Layer> layers_;
  LayerNorm<Scalar> final_norm_;
  MaskedMeanPool<Scalar> pool_, key_pool_;
  PairPool<Scalar> pair_pool_;
  PairAlignment<Scalar> alignment_;
  Linear<Scalar> pair_hidden_;
  Gelu<Scalar> gelu_;
  Dropout<Scalar> head_dropout_;
  Linear<Scalar> classifier_;
  std::vector<MatrixType> omega_, omega_grad_, phases_, phases_grad_;

  // State of the last forward.
  MatrixType x_, hf_, pooled_, dx_, dhf_, dpooled_, logits_scratch_;
  // The overlap features' standardization (K × 1; config.pair_overlap) and its gradients
  // (exact, unused by optimizers: the parameters are not trainable).
  MatrixType overlap_shift_, overlap_scale_, overlap_shift_grad_, overlap_scale_grad_;
  MatrixType overlap_in_;                    // the last forward's overlap features (B × K)
  MatrixType hidden_pre_, head_in_, dhead_;  // pair head
  MatrixType tokens_, aligned_, dtokens_, pair_features_;  // the alignment features
  std::vector<TokenId> ids_, segments_;
  PaddingMask mask_;
  Index batch_ = 0;
  Index length_ = 0;
  bool has_forward_ = false;
  bool train_token_embedding_ = true;
};

}  // namespace coulomb::nn
