// SPDX-License-Identifier: MIT
/// @file nn/encoder_config.hpp
/// @brief EncoderConfig, the fields that TextClassifierConfig and SequenceModelConfig share: the
/// token embedding, the encoder stack and its attention, the norms and the threads. Documented in
/// docs/model.md ("Configuration").
///
/// The sizes and switches of the model of Badiei Khuzani et al., *A Coulomb Particle Model for
/// Learning Kernel Attention in Transformers*, 2026, §4 (d_model, heads, layers, m particles per
/// feature map, one Ω per layer or one shared Ω).
#pragma once

#include "../core/config.hpp"
#include "attention_block.hpp"

namespace coulomb::nn {

/// The configuration of the embeddings and the encoder that both models have; the base of
/// TextClassifierConfig and SequenceModelConfig, whose validate_config checks every field.
struct EncoderConfig {
  /// Largest num_threads: a bound on what a configuration (or a model file) can ask for, so that
  /// a damaged or hostile file cannot make the model start a million threads.
  static constexpr int max_threads = 1024;

  Index vocab_size = 0;  ///< token ids are in [0, vocab_size)
  /// Longest batch length L (learned positions: the rows of the position table); a
  /// SequenceModel also decodes at most max_length tokens.
  Index max_length = 128;
  Index d_model = 64;    ///< width d of the residual stream; a multiple of num_heads
  Index num_heads = 4;   ///< attention heads H; d_head = d_model / num_heads
  Index d_ff = 256;      ///< hidden width of the feed-forward blocks
  Index num_layers = 2;  ///< encoder layers N (at least 1)
  double dropout = 0.1;  ///< dropout rate in [0, 1) (embeddings and both branches)
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

  /// Width of a head, d_model / num_heads (0 while num_heads is not positive).
  Index head_dim() const noexcept { return num_heads > 0 ? d_model / num_heads : 0; }
};

}  // namespace coulomb::nn
