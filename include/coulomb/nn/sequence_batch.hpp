// SPDX-License-Identifier: MIT
/// @file nn/sequence_batch.hpp
/// @brief Padded mini-batches of a generated sequence task (data::TokenSequenceDataset: ListOps,
/// MQAR) for the SequenceModel: ids and mask in the layout of text/batching.hpp, the sequence
/// labels, and the rows of the tokens that have a target with their targets. Documented in
/// docs/model.md ("The sequence model").
///
/// A batch of B sequences padded to length L holds ids and mask as L × B arrays (column b is
/// sequence b); the model's row b·L + t is position t of sequence b. A per-token task predicts
/// only some tokens (MQAR: the query positions), so the batch lists those rows and their targets,
/// which SequenceModel::forward_rows and the cross-entropy take as they are:
///   model.forward_rows(batch.ids, batch.mask, batch.rows, logits, true, rng);
///   loss = nn::softmax_cross_entropy(logits, batch.targets, dlogits);
/// With TokenTargets::next_token every real token but the last of its sequence has the next
/// token as its target (language modelling of raw sequences).
///
/// group_by_length reorders a shuffled visiting order so that each batch holds sequences of
/// similar length (length bucketing), which cuts the padding of tasks whose lengths vary.
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../core/tokens.hpp"
#include "../data/token_sequences.hpp"

namespace coulomb::nn {

/// Which tokens of a batch have targets.
enum class TokenTargets {
  dataset,    ///< the dataset's per-token targets (none for a dataset without them)
  next_token  ///< the next token of the sequence (a language model of the sequences)
};

/// One padded mini-batch of a TokenSequenceDataset.
struct SequenceBatch {
  TokenArray ids;              ///< L × B token ids; 0 at padding
  PaddingMask mask;            ///< L × B; true where ids holds a token
  std::vector<int> labels;     ///< B sequence labels (−1 when the task has none)
  std::vector<Index> rows;     ///< rows b·L + t of the tokens with a target, in that order
  std::vector<int> targets;    ///< the target of each of rows
  std::vector<Index> indices;  ///< B positions of the sequences in the dataset
  std::vector<Index> lengths;  ///< B sequence lengths

  /// Padded length L.
  Index length() const noexcept { return ids.rows(); }
  /// Number of sequences B.
  Index size() const noexcept { return ids.cols(); }
};

/// Fills `out` with the sequences `indices` of `data`, padded (id 0) to the longest of them or
/// to `pad_to` when it is positive, with the targets chosen by `targets`. Reuses out's storage.
/// Throws invalid_argument for an empty `indices`, an index outside the dataset, or a sequence
/// longer than a positive `pad_to`.
inline void make_sequence_batch(const data::TokenSequenceDataset& data,
                                std::span<const Index> indices, SequenceBatch& out,
                                Index pad_to = 0, TokenTargets targets = TokenTargets::dataset) {
  const char* where = "coulomb::nn::make_sequence_batch";
  if (indices.empty()) detail::throw_invalid(where, "argument 'indices' is empty");
  if (!(pad_to >= 0))
    detail::throw_invalid(where, "argument 'pad_to' must be >= 0, got " + std::to_string(pad_to));
  Index longest = 0;
  for (const Index i : indices) {
    if (!(i >= 0 && i < data.size()))
      detail::throw_invalid(where, "argument 'indices' holds " + std::to_string(i) +
                                       ", outside [0, " + std::to_string(data.size()) + ")");
    longest = std::max(longest, data.length(i));
  }
  if (pad_to > 0 && longest > pad_to)
    detail::throw_invalid(where, "a sequence has " + std::to_string(longest) +
                                     " tokens, more than pad_to = " + std::to_string(pad_to));
  const Index L = pad_to > 0 ? pad_to : std::max<Index>(longest, 1);
  const auto B = static_cast<Index>(indices.size());
  out.ids.setZero(L, B);
  out.mask.setConstant(L, B, false);
  out.labels.resize(static_cast<std::size_t>(B));
  out.indices.assign(indices.begin(), indices.end());
  out.lengths.resize(static_cast<std::size_t>(B));
  out.rows.clear();
  out.targets.clear();
  const bool from_data = targets == TokenTargets::dataset && data.has_targets();
  for (Index b = 0; b < B; ++b) {
    const Index i = indices[static_cast<std::size_t>(b)];
    const auto seq = data.sequence(i);
    const auto tgt = data.sequence_targets(i);
    const auto n = static_cast<Index>(seq.size());
    for (Index t = 0; t < n; ++t) {
      const auto st = static_cast<std::size_t>(t);
      out.ids(t, b) = seq[st];
      out.mask(t, b) = true;
      const TokenId y = from_data                                          ? tgt[st]
                        : targets == TokenTargets::next_token && t + 1 < n ? seq[st + 1]
                                                                           : data::no_target;
      if (y != data::no_target) {
        out.rows.push_back(b * L + t);
        out.targets.push_back(static_cast<int>(y));
      }
    }
    out.labels[static_cast<std::size_t>(b)] = data.labels[static_cast<std::size_t>(i)];
    out.lengths[static_cast<std::size_t>(b)] = n;
  }
}

/// Length bucketing of a visiting order: `order` is cut into windows of `window_batches` ×
/// `batch_size` entries, each window is sorted by `length_of(i)` (stably, so equal lengths keep
/// their shuffled order), and the full batches of `batch_size` consecutive entries are then put
/// in a random order drawn from `rng`; a last, smaller batch stays last, so the batches are
/// still order[k·batch_size, (k+1)·batch_size). Every entry stays in the order exactly once.
/// With a shuffled `order` the batches are random groups of near-equal length, visited in a
/// random order; one window of the whole order gives the least padding. Throws
/// invalid_argument for batch_size < 1 or window_batches < 1.
template <typename LengthOf, std::uniform_random_bit_generator G>
void group_by_length(std::span<Index> order, LengthOf&& length_of, Index batch_size,
                     Index window_batches, G& rng) {
  const char* where = "coulomb::nn::group_by_length";
  detail::require(batch_size >= 1, where,
                  "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
  detail::require(
      window_batches >= 1, where,
      "argument 'window_batches' must be at least 1, got " + std::to_string(window_batches));
  const auto n = order.size();
  const auto bs = static_cast<std::size_t>(batch_size);
  const std::size_t window = window_batches > static_cast<Index>(n / bs)
                                 ? n
                                 : static_cast<std::size_t>(window_batches) * bs;
  for (std::size_t w = 0; w < n; w += window)
    std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(w),
                     order.begin() + static_cast<std::ptrdiff_t>(std::min(n, w + window)),
                     [&](Index a, Index b) { return length_of(a) < length_of(b); });
  const std::size_t full = n / bs;
  std::vector<std::size_t> batches(full);
  std::iota(batches.begin(), batches.end(), std::size_t{0});
  shuffle(std::span<std::size_t>(batches), rng);
  std::vector<Index> before(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(full * bs));
  for (std::size_t k = 0; k < full; ++k)
    std::copy_n(before.begin() + static_cast<std::ptrdiff_t>(batches[k] * bs), bs,
                order.begin() + static_cast<std::ptrdiff_t>(k * bs));
}

}  // namespace coulomb::nn
