// SPDX-License-Identifier: MIT
/// @file nn/text_classifier_config.hpp
/// @brief The configuration of the Transformer text classifier (TextClassifierConfig), its
/// pooling kinds and its validation. Documented in docs/model.md (section "Configuration").
///
/// The fields are the sizes and switches of the model of Badiei Khuzani et al., *A Coulomb
/// Particle Model for Learning Kernel Attention in Transformers*, 2026, §4 (d_model, heads,
/// layers, m particles per feature map, one Ω per layer or one shared Ω), and of the pair head
/// for sentence pairs (nn/pair_head.hpp).
#pragma once

#include <cmath>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "attention_block.hpp"
#include "config_checks.hpp"

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
    detail::require_config_at_least(value, low, where, name);
  };
  detail::check_encoder_sizes(config, where);
  at_least(config.num_classes, 2, "num_classes");
  detail::check_head_split(config, where);
  detail::check_dropout_and_attention(config, where);
  if (config.use_segments) at_least(config.num_segments, 1, "num_segments");
  detail::check_norms_and_threads(config, where);
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

}  // namespace coulomb::nn
