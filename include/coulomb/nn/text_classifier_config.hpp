// SPDX-License-Identifier: MIT
/// @file nn/text_classifier_config.hpp
/// @brief The configuration of the Transformer text classifier (TextClassifierConfig), its
/// pooling kinds and its validation. Documented in docs/model.md (section "Configuration").
///
/// The fields are those of the encoder (nn/encoder_config.hpp: the sizes and switches of the model
/// of Badiei Khuzani et al., *A Coulomb Particle Model for Learning Kernel Attention in
/// Transformers*, 2026, §4), the classes, the segments and the pair head for sentence pairs
/// (nn/pair_head.hpp).
#pragma once

#include <cmath>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "attention_block.hpp"
#include "config_checks.hpp"
#include "encoder_config.hpp"

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

/// Configuration of a TextClassifier: the encoder's fields (EncoderConfig) and the classifier's.
/// Every field is checked by validate_config().
struct TextClassifierConfig : EncoderConfig {
  Index num_classes = 2;                    ///< classes C (at least 2)
  bool use_segments = false;                ///< add segment embeddings (sentence pairs)
  Index num_segments = 2;                   ///< segment ids are in [0, num_segments) when used
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
