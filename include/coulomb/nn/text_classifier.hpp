// SPDX-License-Identifier: MIT
/// @file nn/text_classifier.hpp
/// @brief The Transformer text classifier of the paper's sentence benchmarks: embeddings,
/// pre-norm encoder layers with linear (kernel) or exact softmax attention, masked mean pooling
/// (or, for sentence pairs, the pair head) and a linear classifier, with a hand-written backward,
/// its parameter list and access to the feature maps' Ω. Documented in docs/model.md.
///
/// Badiei Khuzani et al., *A Coulomb Particle Model for Learning Kernel Attention in
/// Transformers*, 2026, §4: the particles Ω of each attention layer (or one shared Ω) are learned
/// by the particle model on sequence representations (Phase A, nn/phase_a_representations.hpp),
/// frozen, and the rest of the model is trained with cross-entropy (Phase B).
///
/// For a batch of B sequences padded to length L (coulomb::TokenBatch; n = B·L rows, row b·L + t
/// is position t of sequence b):
///   x = E_tok[ids] + E_pos[t] (+ E_seg[segments]),  x ← Dropout(x)
///   x ← EncoderLayer_l(x) for l = 1..N       (nn/encoder.hpp, nn/encoder_stack.hpp)
///   p_b = masked mean over t of LN_f(x)_{b·L+t},  logits_b = p_b W_c + b_c,
/// or, with the pair head (config.pooling = PoolingKind::pair, nn/pair_head.hpp), p_b = the
/// head's output for the two sentences of pair b. The configuration and its checks are
/// nn/text_classifier_config.hpp.
/// Padding never reaches a real token's output (attention ignores padded keys, every other
/// step is per token, the pooling skips padding), so logits do not depend on what the padded
/// positions hold or on how much padding there is.
#pragma once

#include <concepts>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/precision.hpp"
#include "../core/random.hpp"
#include "../core/tokens.hpp"
#include "../features/favor.hpp"
#include "../features/feature_map.hpp"
#include "attention_block.hpp"
#include "embedding.hpp"
#include "encoder.hpp"
#include "encoder_access.hpp"
#include "encoder_stack.hpp"
#include "layers.hpp"
#include "pair_head.hpp"
#include "parameter.hpp"
#include "pooling.hpp"
#include "text_classifier_config.hpp"

namespace coulomb::nn {

/// The Transformer text classifier (see the file comment and docs/model.md) with feature map
/// `Map` (used when config.attention is linear; with softmax attention the model has no feature
/// map and no Ω, whatever `Map` is) and the map's scalar type, float or double:
/// `TextClassifier<FavorPlus<float>>`.
///
/// Use: `forward` (training with dropout drawn from a generator, or evaluation) gives logits;
/// `backward(dlogits)` adds ∂loss/∂parameter to the gradients of parameters(); `zero_grad()`
/// clears them. Buffers are members: once the batch shape (B, L) repeats, calls allocate
/// nothing in nn/ (pad batches to a fixed length to get there; see docs/model.md). One model
/// per thread of control: forward and backward use internal state. Ω lives once, in the
/// feature maps of the encoder (EncoderStack); omega(), parameters() and the layers' attention
/// all see that one copy. Copies of a model are independent models.
template <FeatureMap Map>
class TextClassifier : public EncoderAccess<TextClassifier<Map>, Map> {
 public:
  using Scalar = typename Map::Scalar;            ///< float or double, the feature map's
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
    build(seed, this->fresh_maps(config_.d_model / config_.num_heads, config_.num_features));
  }

  /// A model whose feature maps are copies of `prototype` (its options, for example a PORF ε
  /// or an RFF bandwidth) with Ω redrawn from `seed`. The prototype must have input_dim() =
  /// d_model / num_heads and num_particles() = config.num_features. Throws invalid_argument
  /// otherwise or for an invalid config.
  TextClassifier(const TextClassifierConfig& config, const Map& prototype, std::uint64_t seed)
      : config_(checked(config)) {
    detail::check_prototype(config_, prototype, "coulomb::nn::TextClassifier::constructor");
    build(seed, this->redrawn_copies(prototype));
  }

  /// The configuration.
  const TextClassifierConfig& config() const noexcept { return config_; }

  // ---- forward and backward ---------------------------------------------------------------

  /// logits (resized to B × C) for `batch`. With `training`, dropout masks are drawn from
  /// `rng` (embeddings, then each layer's attention and feed-forward branches, then the pair
  /// head) and every product is in Scalar; without, dropout is the identity, `rng` is not used
  /// and the encoder's affine layers run in inference_precision(). Keeps what backward needs.
  /// Throws invalid_argument naming 'batch.ids', 'batch.mask', 'batch.segments' or
  /// 'batch.overlap' for a batch that does not fit the config (empty, longer than max_length,
  /// ids or segments out of range, shapes that differ, overlap features missing or not finite
  /// with config.pair_overlap).
  void forward(const TokenBatch& batch, MatrixType& logits, bool training, Rng& rng) {
    run_forward(batch, logits, training, rng, /*inference=*/false);
  }

  /// Evaluation forward (no dropout), in inference_precision().
  void forward(const TokenBatch& batch, MatrixType& logits) {
    Rng unused(0);
    forward(batch, logits, false, unused);
  }

  /// Inference: the logits of the evaluation forward, bit for bit, computed without what
  /// backward needs (EncoderStack::infer: the feed-forward part of each layer in blocks of rows
  /// that stay in cache). backward then throws until the next forward. Throws as forward.
  void infer(const TokenBatch& batch, MatrixType& logits) {
    Rng unused(0);
    run_forward(batch, logits, /*training=*/false, unused, /*inference=*/true);
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
    const bool align_gradient = config_.pair_alignment && train_token_embedding_;
    if (config_.pooling == PoolingKind::pair) {
      classifier_.backward(pair_head_.output(), dlogits, dhead_);
      pair_head_.backward(dhead_, mask_, segments_, align_gradient, dhf_);
    } else {
      classifier_.backward(pooled_, dlogits, dpooled_);
      pool_.backward(dpooled_, mask_, dhf_);
    }
    final_norm_.backward(dhf_, dx_);
    encoder_.backward(dx_, mask_);
    embed_dropout_.backward(dx_);
    if (train_token_embedding_) token_.backward(ids_, dx_);
    if (align_gradient) token_.backward(ids_, pair_head_.token_gradient());
    position_.backward(length_, batch_, dx_);
    if (config_.use_segments) segment_.backward(segments_, dx_);
  }

  /// Sets the gradient of every parameter (Ω included) to zero.
  void zero_grad() {
    token_.zero_grad();
    position_.zero_grad();
    segment_.zero_grad();
    encoder_.zero_grad();
    final_norm_.zero_grad();
    pair_head_.zero_grad();
    classifier_.zero_grad();
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
  /// add a non-trainable ".phases" (m × 1) after each Ω. Ω's and the phases' values are the
  /// feature maps' own storage (not a copy). The pointers refer to this model and stay valid
  /// while it is neither moved nor destroyed.
  ParameterList<Scalar> parameters() {
    ParameterList<Scalar> list;
    token_.append_parameters(list, "embedding.token");
    list.back().trainable = train_token_embedding_;
    position_.append_parameters(list, "embedding.position");
    if (config_.use_segments) segment_.append_parameters(list, "embedding.segment");
    encoder_.append_parameters(list);
    final_norm_.append_parameters(list, "final_norm.");
    pair_head_.append_parameters(list);
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
    pair_head_.set_overlap_standardization(mean, sd);
  }

  /// Total number of scalar parameters (trainable or not).
  Index num_parameters() {
    Index total = 0;
    for (const auto& p : parameters()) total += p.value->size();
    return total;
  }

  // ---- inference precision ---------------------------------------------------------------

  /// Asks for the arithmetic of the evaluation forward (core/precision.hpp): with bf16, the
  /// encoder's affine layers (Q, K, V and output projections, W₁ and W₂) take bf16 weights and
  /// inputs and accumulate in fp32; embeddings, norms, attention, GELU, pooling and the
  /// classifier stay in Scalar. bf16 needs a float model and AVX512-BF16 where `available`
  /// (default: bf16_available(); false forces the fallback); otherwise the model stays fp32 and
  /// the returned notice says why. Not saved in model files; training forwards ignore it.
  PrecisionChoice set_inference_precision(InferencePrecision requested,
                                          bool available = bf16_available()) {
    PrecisionChoice choice = choose_inference_precision<Scalar>(requested, available);
    inference_precision_ = choice.used;
    return choice;
  }

  /// The arithmetic of the evaluation forward (fp32 unless set_inference_precision granted bf16).
  InferencePrecision inference_precision() const noexcept { return inference_precision_; }

  // ---- the token embedding ----------------------------------------------------------------

  // The layers, feature maps and Ω: EncoderAccess (num_layers, layer, num_omegas, omega, set_omega,
  // feature_map, ...).

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

 private:
  // The forward of forward() and infer(): with `inference`, the encoder's infer (no dropout,
  // nothing kept for backward); `rng` is used only with `training`.
  void run_forward(const TokenBatch& batch, MatrixType& logits, bool training, Rng& rng,
                   bool inference) {
    check_batch(batch, inference ? "coulomb::nn::TextClassifier::infer"
                                 : "coulomb::nn::TextClassifier::forward");
    const Index L = batch.length();
    const Index B = batch.size();
    const auto n = static_cast<std::size_t>(L * B);
    length_ = L;
    batch_ = B;
    ids_.assign(batch.ids.data(), batch.ids.data() + n);
    mask_ = batch.mask;
    token_.forward(ids_, x_);
    if (config_.pair_alignment) tokens_ = x_;  // only with the pair head (validate_config)
    position_.forward_add(L, B, x_);
    if (config_.use_segments) {
      segments_.assign(batch.segments.data(), batch.segments.data() + n);
      segment_.forward_add(segments_, x_);
    }
    if (inference) {
      encoder_.infer(x_, mask_, inference_precision_);
    } else {
      embed_dropout_.forward(x_, training, rng);
      encoder_.forward(x_, mask_, training, rng,
                       training ? InferencePrecision::fp32 : inference_precision_);
    }
    final_norm_.forward(x_, hf_);
    if (config_.pooling == PoolingKind::pair) {
      pair_head_.forward(hf_, tokens_, mask_, segments_, batch.overlap, training, rng);
      classifier_.forward(pair_head_.output(), logits);
    } else {
      pool_.forward(hf_, mask_, pooled_);
      classifier_.forward(pooled_, logits);
    }
    has_forward_ = !inference;
  }

  friend class EncoderAccess<TextClassifier, Map>;
  static constexpr const char* class_name = "coulomb::nn::TextClassifier::";

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
    if (pair) pair_head_ = PairHead<Scalar>(c);
    classifier_ = Linear<Scalar>(pair ? pair_head_.output_dim() : c.d_model, c.num_classes);

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
    encoder_ = EncoderStack<Scalar, Map>::initialized(
        lo, c.num_layers, c.attention == AttentionKind::linear, c.shared_omega, c.num_threads,
        map_rng, root, make_map);
    Rng head_rng = root.split(static_cast<std::uint64_t>(2 + c.num_layers));
    classifier_.initialize(head_rng);
    if (pair && c.pair_hidden > 0) {
      Rng hidden_rng = root.split(static_cast<std::uint64_t>(3 + c.num_layers));
      pair_head_.initialize(hidden_rng);
    }
    // The affine layers split their products over the attention threads (Linear::set_num_threads).
    classifier_.set_num_threads(c.num_threads);
    pair_head_.set_num_threads(c.num_threads);
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
  EncoderStack<Scalar, Map> encoder_;  // the layers and the feature maps, the owners of Ω
  LayerNorm<Scalar> final_norm_;
  MaskedMeanPool<Scalar> pool_;
  PairHead<Scalar> pair_head_;  // config.pooling == pair; empty otherwise
  Linear<Scalar> classifier_;

  // State of the last forward.
  MatrixType x_, hf_, pooled_, dx_, dhf_, dpooled_, dhead_;
  MatrixType tokens_;  // the token embeddings, for the pair head's alignment features
  std::vector<TokenId> ids_, segments_;
  PaddingMask mask_;
  Index batch_ = 0;
  Index length_ = 0;
  bool has_forward_ = false;
  bool train_token_embedding_ = true;
  InferencePrecision inference_precision_ = InferencePrecision::fp32;
};

}  // namespace coulomb::nn
