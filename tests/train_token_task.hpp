// SPDX-License-Identifier: MIT
// A small token-classification task for the training tests (train_text_test.cpp and the MPI
// tests): the label says whether a marker token occurs in the sequence; and the small
// classifier both train on it.
#pragma once

#include <cstdint>
#include <vector>

#include <coulomb/core/config.hpp>
#include <coulomb/core/random.hpp>
#include <coulomb/core/tokens.hpp>
#include <coulomb/nn/text_classifier_config.hpp>
#include <coulomb/text/encoder.hpp>

namespace coulomb_train_test {

inline constexpr coulomb::Index vocab = 24;
inline constexpr coulomb::TokenId marker = 4;  // the token whose presence is the label

/// `n` sequences of 3 to 10 tokens drawn from [5, vocab); in those with label 1 (about half)
/// one to two positions hold the marker token.
inline coulomb::EncodedDataset token_task(coulomb::Index n, coulomb::Rng& rng) {
  coulomb::EncodedDataset data;
  std::vector<coulomb::TokenId> ids;
  std::vector<std::uint8_t> segments;
  for (coulomb::Index i = 0; i < n; ++i) {
    const auto length = static_cast<std::size_t>(3 + coulomb::uniform_index(8, rng));
    ids.resize(length);
    for (auto& id : ids)
      id = static_cast<coulomb::TokenId>(5 + coulomb::uniform_index(vocab - 5, rng));
    const int label = static_cast<int>(coulomb::uniform_index(2, rng));
    if (label == 1) {
      const auto count = 1 + coulomb::uniform_index(2, rng);
      for (std::uint64_t c = 0; c < count; ++c) ids[coulomb::uniform_index(length, rng)] = marker;
    }
    segments.assign(length, 0);
    data.push_back(ids, segments, label);
  }
  return data;
}

/// A one-layer classifier of width 16 for token_task (no dropout, 16 features, one thread).
inline coulomb::nn::TextClassifierConfig small_config(
    coulomb::nn::AttentionKind attention = coulomb::nn::AttentionKind::linear) {
  coulomb::nn::TextClassifierConfig c;
  c.vocab_size = vocab;
  c.max_length = 12;
  c.d_model = 16;
  c.num_heads = 2;
  c.d_ff = 32;
  c.num_layers = 1;
  c.num_classes = 2;
  c.dropout = 0.0;
  c.attention = attention;
  c.num_features = 16;
  c.num_threads = 1;
  return c;
}

}  // namespace coulomb_train_test
