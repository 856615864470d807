// SPDX-License-Identifier: MIT
/// @file text/batching.hpp
/// @brief Padded mini-batches of encoded sequences with padding masks, and seeded shuffling.
///
/// A batch of B sequences padded to length L is stored as L × B arrays (column b is sequence b,
/// position t in row t), the layout of attention's inputs (attention/layout.hpp): the token
/// at position t of sequence b is row b·L + t of the (B·L)-row matrices a model builds from it.
/// The batch (TokenBatch) and its mask (PaddingMask: true = token, false = padding) are the types
/// of core/tokens.hpp, so the mask goes to LinearAttention and SoftmaxAttention as it is. Padding
/// positions hold Vocabulary::pad_id and segment 0.
///
/// Shuffling is a Fisher–Yates permutation drawn from coulomb::Rng; epoch e of a Batcher with
/// seed s uses the generator Rng(s).split(e), so an epoch's order depends only on (s, e), not on
/// the epochs run before it (a training run can resume at any epoch).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../core/tokens.hpp"
#include "encoder.hpp"
#include "overlap.hpp"
#include "vocabulary.hpp"

namespace coulomb {

namespace detail {

// Row `row` of `table` from the overlap features of pair i of `data` (which has word keys).
inline void overlap_row(const EncodedDataset& data, Index i, Eigen::ArrayXXd& table, Index row) {
  std::array<double, pair_overlap_features> f{};
  pair_overlap(data.word_keys(i), data.segment_ids(i), f);
  for (Index k = 0; k < pair_overlap_features; ++k) table(row, k) = f[static_cast<std::size_t>(k)];
}

}  // namespace detail

/// Fills `out` with the sequences `indices` of `data`, padded to the longest of them, or to
/// `pad_to` when it is positive, and, for a dataset of pairs with word keys, their overlap
/// features (TokenBatch::overlap). Reuses out's storage. Throws invalid_argument for an empty
/// `indices`, an index outside the dataset, or a sequence longer than a positive `pad_to`.
inline void make_batch(const EncodedDataset& data, std::span<const Index> indices, TokenBatch& out,
                       Index pad_to = 0) {
  const char* where = "coulomb::make_batch";
  detail::require(!indices.empty(), where, "argument 'indices' is empty");
  detail::require(pad_to >= 0, where,
                  "argument 'pad_to' must be >= 0, got " + std::to_string(pad_to));
  Index longest = 0;
  for (const Index i : indices) {
    detail::require(i >= 0 && i < data.size(), where,
                    "argument 'indices' holds " + std::to_string(i) + ", outside [0, " +
                        std::to_string(data.size()) + ")");
    longest = std::max(longest, data.length(i));
  }
  if (pad_to > 0) {
    detail::require(longest <= pad_to, where,
                    "a sequence has " + std::to_string(longest) +
                        " tokens, more than pad_to = " + std::to_string(pad_to));
  }
  const Index L = pad_to > 0 ? pad_to : std::max<Index>(longest, 1);
  const auto B = static_cast<Index>(indices.size());
  out.ids.resize(L, B);
  out.segments.resize(L, B);
  out.mask.resize(L, B);
  out.ids.setConstant(Vocabulary::pad_id);
  out.segments.setZero();
  out.mask.setConstant(false);
  out.labels.resize(static_cast<std::size_t>(B));
  out.indices.assign(indices.begin(), indices.end());
  out.lengths.resize(static_cast<std::size_t>(B));
  for (Index b = 0; b < B; ++b) {
    const Index i = indices[static_cast<std::size_t>(b)];
    const auto seq = data.sequence(i);
    const auto seg = data.segment_ids(i);
    const auto n = static_cast<Index>(seq.size());
    for (Index t = 0; t < n; ++t) {
      out.ids(t, b) = seq[static_cast<std::size_t>(t)];
      out.segments(t, b) = seg[static_cast<std::size_t>(t)];
      out.mask(t, b) = true;
    }
    out.labels[static_cast<std::size_t>(b)] = data.labels[static_cast<std::size_t>(i)];
    out.lengths[static_cast<std::size_t>(b)] = n;
  }
  if (data.is_pair && data.has_keys()) {
    out.overlap.resize(B, pair_overlap_features);
    for (Index b = 0; b < B; ++b)
      detail::overlap_row(data, indices[static_cast<std::size_t>(b)], out.overlap, b);
  } else {
    out.overlap.resize(0, 0);
  }
}

/// Mean and standard deviation of each overlap feature over a dataset's pairs.
struct PairOverlapMoments {
  Eigen::ArrayXd mean;  ///< pair_overlap_features means
  Eigen::ArrayXd sd;    ///< pair_overlap_features standard deviations (divisor n)
};

namespace detail {

// The overlap features of every pair of `data` (n × pair_overlap_features, row i for sequence
// i), after the checks of pair_overlap_moments, whose messages name `where`.
inline Eigen::ArrayXXd pair_overlap_table(const EncodedDataset& data, const char* where) {
  require(data.is_pair, where, "the dataset holds single sentences, not pairs");
  require(data.size() > 0, where, "the dataset is empty");
  require(data.has_keys(), where,
          "the dataset has no word keys (EncodedDataset::keys; TextEncoder records them)");
  Eigen::ArrayXXd table(data.size(), pair_overlap_features);
  for (Index i = 0; i < data.size(); ++i) overlap_row(data, i, table, i);
  return table;
}

// Mean and standard deviation (divisor n) of each column of `table`.
inline PairOverlapMoments column_moments(const Eigen::ArrayXXd& table) {
  PairOverlapMoments m;
  m.mean = Eigen::ArrayXd::Zero(table.cols());
  m.sd = Eigen::ArrayXd::Zero(table.cols());
  const auto n = static_cast<double>(table.rows());
  for (Index k = 0; k < table.cols(); ++k) {
    double sum = 0.0;
    for (Index i = 0; i < table.rows(); ++i) sum += table(i, k);
    const double mean = sum / n;
    double squares = 0.0;
    for (Index i = 0; i < table.rows(); ++i) squares += (table(i, k) - mean) * (table(i, k) - mean);
    m.mean(k) = mean;
    m.sd(k) = std::sqrt(squares / n);
  }
  return m;
}

}  // namespace detail

/// The moments of the overlap features (coulomb::pair_overlap) of every pair of `data`, for
/// nn::TextClassifier::set_overlap_standardization (computed on the training split). Throws
/// invalid_argument for a dataset that is empty, not of sentence pairs, or without word keys.
inline PairOverlapMoments pair_overlap_moments(const EncodedDataset& data) {
  return detail::column_moments(detail::pair_overlap_table(data, "coulomb::pair_overlap_moments"));
}

/// Shuffles `v` in place by Fisher–Yates with draws from `rng` (coulomb::uniform_index), so the
/// result is the same on every platform for the same generator state.
template <typename T, std::uniform_random_bit_generator G>
void shuffle_in_place(std::vector<T>& v, G& rng) {
  shuffle(std::span<T>(v), rng);
}

/// Options of Batcher.
struct BatcherOptions {
  /// Sequences per batch (the last batch of an epoch may be smaller unless drop_last).
  Index batch_size = 32;
  /// Visit the sequences in a new random order every epoch (false: dataset order).
  bool shuffle = true;
  /// Seed of the shuffles.
  std::uint64_t seed = 0;
  /// Leave out the last batch of an epoch when it is smaller than batch_size.
  bool drop_last = false;
  /// Pad every batch to this length (0: to the longest sequence of the batch).
  Index pad_to = 0;
};

/// Cuts an encoded dataset into padded mini-batches, epoch after epoch. Keeps a reference to
/// the dataset, which must outlive it and not change while it is used.
class Batcher {
 public:
  /// A batcher over `data`, positioned at the start of epoch 0. Throws invalid_argument for
  /// batch_size < 1 or pad_to < 0, or a positive pad_to shorter than the longest sequence.
  Batcher(const EncodedDataset& data, BatcherOptions options) : data_(&data), options_(options) {
    const char* where = "coulomb::Batcher::constructor";
    detail::require(options_.batch_size >= 1, where,
                    "argument 'options.batch_size' must be at least 1, got " +
                        std::to_string(options_.batch_size));
    detail::require(
        options_.pad_to >= 0, where,
        "argument 'options.pad_to' must be >= 0, got " + std::to_string(options_.pad_to));
    if (options_.pad_to > 0) {
      for (Index i = 0; i < data.size(); ++i) {
        detail::require(
            data.length(i) <= options_.pad_to, where,
            "sequence " + std::to_string(i) + " has " + std::to_string(data.length(i)) +
                " tokens, more than options.pad_to = " + std::to_string(options_.pad_to));
      }
    }
    start_epoch(0);
  }

  /// A batcher keeps a reference to its dataset, so a temporary one is refused.
  Batcher(EncodedDataset&&, BatcherOptions) = delete;

  /// Restarts at the beginning of epoch `epoch`, with its order (shuffled by Rng(seed).split(epoch)
  /// when options.shuffle).
  void start_epoch(std::uint64_t epoch) {
    epoch_ = epoch;
    order_.resize(static_cast<std::size_t>(data_->size()));
    std::iota(order_.begin(), order_.end(), Index{0});
    if (options_.shuffle) {
      Rng base(options_.seed);
      Rng rng = base.split(epoch);
      shuffle_in_place(order_, rng);
    }
    position_ = 0;
  }

  /// Fills `out` with the next batch of the epoch; returns false (leaving `out` unchanged) at
  /// the end of the epoch.
  bool next(TokenBatch& out) {
    const auto n = order_.size();
    const auto bs = static_cast<std::size_t>(options_.batch_size);
    if (position_ >= n) return false;
    const std::size_t take = std::min(bs, n - position_);
    if (take < bs && options_.drop_last) {
      position_ = n;
      return false;
    }
    make_batch(*data_, std::span<const Index>(order_.data() + position_, take), out,
               options_.pad_to);
    position_ += take;
    return true;
  }

  /// Batches per epoch.
  Index num_batches() const noexcept {
    const Index n = data_->size();
    const Index bs = options_.batch_size;
    return options_.drop_last ? n / bs : (n + bs - 1) / bs;
  }

  /// The visiting order of the current epoch.
  const std::vector<Index>& order() const noexcept { return order_; }
  /// The current epoch.
  std::uint64_t epoch() const noexcept { return epoch_; }
  /// The options.
  const BatcherOptions& options() const noexcept { return options_; }

 private:
  const EncodedDataset* data_;
  BatcherOptions options_;
  std::vector<Index> order_;
  std::size_t position_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace coulomb
