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
#include "encoder_config.hpp"
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

/// Configuration of a SequenceModel: the encoder's fields (EncoderConfig), the head and the
/// positions. Every field is checked by validate_config().
struct SequenceModelConfig : EncoderConfig {
  SequenceHead head = SequenceHead::classification;  ///< what the model outputs
  /// Outputs C per sequence or token: classes, or 0 for vocab_size (a language model predicts
  /// tokens). At least 2.
  Index num_outputs = 2;
  PositionKind positions = PositionKind::rotary;  ///< how positions enter (docs/model.md)
  double position_base = 10000.0;  ///< base of the sinusoidal or rotary frequencies (> 1)
  /// Width of the short causal convolution of every attention's keys (0: none; needs untied
  /// queries and keys; nn/key_convolution.hpp). 2 lets a key carry the token before it.
  Index key_conv = 0;

  /// Whether the attention is causal (the causal_lm head).
  bool causal() const noexcept { return head == SequenceHead::causal_lm; }
  /// Outputs C of the head: num_outputs, or vocab_size when num_outputs is 0.
  Index output_dim() const noexcept { return num_outputs > 0 ? num_outputs : vocab_size; }
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
  detail::require_config_at_least(config.key_conv, 0, where, "key_conv");
  if (config.key_conv > 0 && config.tied_qk)
    detail::throw_invalid(where, "argument 'config.key_conv' is " +
                                     std::to_string(config.key_conv) +
                                     " but config.tied_qk is set: the key convolution needs a key "
                                     "projection of its own");
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
  static_cast<EncoderConfig&>(c) = config;
  c.head = SequenceHead::classification;
  c.num_outputs = config.num_classes;
  c.positions = PositionKind::learned;
  return c;
}

}  // namespace coulomb::nn
