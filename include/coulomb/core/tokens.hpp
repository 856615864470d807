// SPDX-License-Identifier: MIT
/// @file core/tokens.hpp
/// @brief Token ids and padded batches of token sequences: the types text/ produces
/// (text/batching.hpp) and attention/ and nn/ consume, declared here so that neither side
/// includes the other.
///
/// A batch of B sequences padded to length L is stored as L × B arrays: column b is sequence b,
/// row t position t, the layout of attention's inputs (attention/layout.hpp), where the token
/// at position t of sequence b is row b·L + t of the (B·L)-row matrices a model builds from it.
/// The padding mask is true at tokens and false at padding.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "config.hpp"

namespace coulomb {

/// Token ids are 32-bit.
using TokenId = std::int32_t;

/// L × B token ids or segment ids of a batch.
using TokenArray = Eigen::Array<TokenId, Eigen::Dynamic, Eigen::Dynamic>;

/// Padding mask: L × B, entry (t, b) is true when position t of sequence b is a real token and
/// false when it is padding. Padded keys contribute nothing to attention; padded queries give
/// zero outputs (and zero gradients).
using PaddingMask = Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic>;

/// Number of lexical overlap features of a sentence pair (two for each n-gram length 1, 2, 3;
/// text/overlap.hpp computes them), the columns of TokenBatch::overlap.
inline constexpr Index pair_overlap_features = 6;

/// One padded mini-batch (text/batching.hpp makes them from an encoded dataset).
struct TokenBatch {
  TokenArray ids;              ///< L × B token ids; the vocabulary's pad id at padding
  TokenArray segments;         ///< L × B segment ids (0 or 1); 0 at padding
  PaddingMask mask;            ///< L × B; true where ids holds a token
  std::vector<int> labels;     ///< B labels
  std::vector<Index> indices;  ///< B positions of the sequences in the dataset
  std::vector<Index> lengths;  ///< B sequence lengths (number of true entries of each column)
  /// B × pair_overlap_features lexical overlap features of each pair (coulomb::pair_overlap)
  /// when the dataset holds sentence pairs with word keys; 0 × 0 otherwise
  Eigen::ArrayXXd overlap;

  /// Padded length L.
  Index length() const noexcept { return ids.rows(); }
  /// Number of sequences B.
  Index size() const noexcept { return ids.cols(); }
};

}  // namespace coulomb
