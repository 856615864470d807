// SPDX-License-Identifier: MIT
/// @file nn/sequence_model_config.hpp
/// @brief The configuration of the general sequence model (SequenceModelConfig): its heads,
/// positions and sizes, its validation, and the configuration that reproduces a
/// TextClassifier. Documented in docs/model.md ("The sequence model").
///
/// The sizes and switches are those of the model of Badiei Khuzani et al., *A Coulomb Particle
/// Model for Learning Kernel Attention in Transformers*, 2026, §4 (d_model, heads, layers, m
/// particles per feature map, one Ω per layer or one shared Ω); the heads add per-token outputs
/// and causal language modelling to its sequence classification.
#pragma once

#include <cmath>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "attention_block.hpp"
#include "config_checks.hpp"
#include "positions.hpp"
#include "text_classifier_config.hpp"

namespace coulomb::nn {

/// What a SequenceModel outputs.
enum class SequenceHead {
  classification,  ///< one output per sequence: masked mean pooling, then a linear classifier
  per_token,       ///< one output per token, bidirectional (non-causal) attention
  causal_lm        ///< one output per token from causal attention; decodes one token at a time
};

/// Name of a SequenceHead value ("classification", "per_token" or "causal_lm").
inline const char* to_string(SequenceHead head) noexcept {
  switch (head) {
    case SequenceHead::classification:
      return "classification";
    case SequenceHead::per_token:
      return "per_token";
    case SequenceHead::causal_lm:
      return "causal_lm";
  }
  return "unknown";
}

/// Configuration of a SequenceModel. Every field is checked by validate_config().
struct SequenceModelConfig {
  /// Largest num_threads (as TextClassifierConfig::max_threads).
  static constexpr int max_threads = TextClassifierConfig::max_threads;

  Index vocab_size = 0;    ///< token ids are in [0, vocab_size)
  Index max_length = 128;  ///< longest batch length L and longest decoding (learned: table rows)
  Index d_model = 64;      ///< width d of the residual stream; a multiple of num_heads
  Index num_heads = 4;     ///< attention heads H; d_head = d_model / num_heads
  Index d_ff = 256;        ///< hidden width of the feed-forward blocks
  Index num_layers = 2;    ///< encoder layers N (at least 1)
  SequenceHead head = SequenceHead::classification;  ///< what the model outputs
  /// Outputs C per sequence or token: classes, or 0 for vocab_size (a language model predicts
  /// tokens). At least 2.
  Index num_outputs = 2;
  PositionKind positions = PositionKind::rotary;  ///< how positions enter (docs/model.md)
  double position_base = 10000.0;  ///< base of the sinusoidal or rotary frequencies (> 1)
  double dropout = 0.1;            ///< dropout rate in [0, 1) (embeddings and both branches)
  AttentionKind attention = AttentionKind::linear;  ///< linear (feature map) or softmax
  Index num_features = 64;           ///< particles m of each feature map (linear attention)
  bool shared_omega = false;         ///< one Ω for all layers (true) or one per layer (false)
  bool train_omega = false;          ///< Ω trainable end to end (false: frozen, Phase B)
  bool tied_qk = false;              ///< one projection for queries and keys (Q = K)
  double layer_norm_eps = 1e-5;      ///< ε of every layer norm
  double embedding_init_std = 0.02;  ///< standard deviation of the embedding initialization
  /// Attention and affine-layer threads (AttentionOptions::num_threads; 0: all), at most
  /// max_threads.
  int num_threads = 0;

  /// Whether the attention is causal (the causal_lm head).
  bool causal() const noexcept { return head == SequenceHead::causal_lm; }
  /// Outputs C of the head: num_outputs, or vocab_size when num_outputs is 0.
  Index output_dim() const noexcept { return num_outputs > 0 ? num_outputs : vocab_size; }
  /// Width of a head, d_model / num_heads.
  Index head_dim() const noexcept { return num_heads > 0 ? d_model / num_heads : 0; }
};

/// Throws invalid_argument, naming the field ('config.d_model', ...), unless every field of
/// `config` is valid.
inline void validate_config(const SequenceModelConfig& config) {
  const char* where = "coulomb::nn::validate_config";
  detail::check_encoder_sizes(config, where);
  detail::require_config_at_least(config.num_outputs, 0, where, "num_outputs");
  if (!(config.output_dim() >= 2))
    detail::throw_invalid(where, "argument 'config.num_outputs' gives " +
                                     std::to_string(config.output_dim()) +
                                     " outputs (0 means vocab_size), expected at least 2");
  detail::check_head_split(config, where);
  if (!(config.head == SequenceHead::classification || config.head == SequenceHead::per_token ||
        config.head == SequenceHead::causal_lm))
    detail::throw_invalid(where,
                          "argument 'config.head' is not classification, per_token or "
                          "causal_lm");
  if (!(config.positions == PositionKind::learned || config.positions == PositionKind::sinusoidal ||
        config.positions == PositionKind::rotary))
    detail::throw_invalid(where,
                          "argument 'config.positions' is not learned, sinusoidal or "
                          "rotary");
  if (config.positions != PositionKind::learned &&
      !(std::isfinite(config.position_base) && config.position_base > 1.0))
    detail::throw_invalid(where,
                          "argument 'config.position_base' must be finite and greater "
                          "than 1, got " +
                              std::to_string(config.position_base));
  if (config.positions == PositionKind::rotary && config.head_dim() % 2 != 0)
    detail::throw_invalid(where,
                          "argument 'config.positions' is rotary, which rotates pairs of "
                          "columns: d_model / num_heads = " +
                              std::to_string(config.head_dim()) + " must be even");
  detail::check_dropout_and_attention(config, where);
  detail::check_norms_and_threads(config, where);
}

/// The configuration of the SequenceModel that is the given text classifier: the
/// classification head with learned positions and the same sizes, so that the same seed gives
/// the same parameters and the same logits, bit for bit. Throws invalid_argument for an invalid
/// `config`, or one with segments or the pair head, which the sequence model does not have.
inline SequenceModelConfig sequence_model_config(const TextClassifierConfig& config) {
  const char* where = "coulomb::nn::sequence_model_config";
  validate_config(config);
  if (config.use_segments || config.pooling != PoolingKind::mean)
    detail::throw_invalid(where,
                          "argument 'config' uses segments or the pair head, which the "
                          "sequence model does not have");
  SequenceModelConfig c;
  c.vocab_size = config.vocab_size;
  c.max_length = config.max_length;
  c.d_model = config.d_model;
  c.num_heads = config.num_heads;
  c.d_ff = config.d_ff;
  c.num_layers = config.num_layers;
  c.head = SequenceHead::classification;
  c.num_outputs = config.num_classes;
  c.positions = PositionKind::learned;
  c.dropout = config.dropout;
  c.attention = config.attention;
  c.num_features = config.num_features;
  c.shared_omega = config.shared_omega;
  c.train_omega = config.train_omega;
  c.tied_qk = config.tied_qk;
  c.layer_norm_eps = config.layer_norm_eps;
  c.embedding_init_std = config.embedding_init_std;
  c.num_threads = config.num_threads;
  return c;
}

}  // namespace coulomb::nn
