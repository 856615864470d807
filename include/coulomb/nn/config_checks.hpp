// SPDX-License-Identifier: MIT
/// @file nn/config_checks.hpp
/// @brief The checks of the configuration fields that TextClassifierConfig and
/// SequenceModelConfig share (sizes, heads, dropout, attention, norms, threads), each naming the
/// field it rejects. validate_config of either configuration calls them in its own order.
#pragma once

#include <cmath>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "attention_block.hpp"

namespace coulomb::detail {

/// Throws invalid_argument naming 'config.<name>' unless value >= low.
inline void require_config_at_least(Index value, Index low, const char* where, const char* name) {
  if (!(value >= low))
    throw_invalid(where, std::string("argument 'config.") + name + "' must be at least " +
                             std::to_string(low) + ", got " + std::to_string(value));
}

/// Checks the sizes of the encoder: vocab_size, max_length, d_model, num_heads, d_ff and
/// num_layers are at least 1.
template <typename Config>
void check_encoder_sizes(const Config& config, const char* where) {
  require_config_at_least(config.vocab_size, 1, where, "vocab_size");
  require_config_at_least(config.max_length, 1, where, "max_length");
  require_config_at_least(config.d_model, 1, where, "d_model");
  require_config_at_least(config.num_heads, 1, where, "num_heads");
  require_config_at_least(config.d_ff, 1, where, "d_ff");
  require_config_at_least(config.num_layers, 1, where, "num_layers");
}

/// Checks that d_model is a multiple of num_heads (both at least 1).
template <typename Config>
void check_head_split(const Config& config, const char* where) {
  if (!(config.d_model % config.num_heads == 0))
    throw_invalid(where, "argument 'config.d_model' (" + std::to_string(config.d_model) +
                             ") must be a multiple of config.num_heads (" +
                             std::to_string(config.num_heads) + ")");
}

/// Checks dropout (in [0, 1)), the attention kind and, with linear attention, num_features.
template <typename Config>
void check_dropout_and_attention(const Config& config, const char* where) {
  if (!(std::isfinite(config.dropout) && config.dropout >= 0.0 && config.dropout < 1.0))
    throw_invalid(where, "argument 'config.dropout' must be in [0, 1), got " +
                             std::to_string(config.dropout));
  if (!(config.attention == nn::AttentionKind::linear ||
        config.attention == nn::AttentionKind::softmax))
    throw_invalid(where, "argument 'config.attention' is not linear or softmax");
  if (config.attention == nn::AttentionKind::linear)
    require_config_at_least(config.num_features, 1, where, "num_features");
}

/// Checks layer_norm_eps and embedding_init_std (positive) and num_threads (in
/// [0, Config::max_threads]).
template <typename Config>
void check_norms_and_threads(const Config& config, const char* where) {
  require_positive(config.layer_norm_eps, where, "config.layer_norm_eps");
  require_positive(config.embedding_init_std, where, "config.embedding_init_std");
  if (!(config.num_threads >= 0 && config.num_threads <= Config::max_threads))
    throw_invalid(where, "argument 'config.num_threads' must be in [0, " +
                             std::to_string(Config::max_threads) + "], got " +
                             std::to_string(config.num_threads));
}

/// With linear attention, checks that `prototype` (the feature map whose copies every head
/// gets) has input_dim d_model / num_heads and config.num_features particles.
template <typename Config, typename Map>
void check_prototype(const Config& config, const Map& prototype, const char* where) {
  if (config.attention != nn::AttentionKind::linear) return;
  const Index d_head = config.d_model / config.num_heads;
  if (!(prototype.input_dim() == d_head))
    throw_invalid(where, "argument 'prototype' has input_dim " +
                             std::to_string(prototype.input_dim()) +
                             ", expected d_model / num_heads = " + std::to_string(d_head));
  if (!(prototype.num_particles() == config.num_features))
    throw_invalid(where, "argument 'prototype' has " + std::to_string(prototype.num_particles()) +
                             " particles, expected config.num_features = " +
                             std::to_string(config.num_features));
}

}  // namespace coulomb::detail
