// SPDX-License-Identifier: MIT
/// @file data/token_sequences.hpp
/// @brief Datasets of token-id sequences made by the task generators of data/ (ListOps, MQAR),
/// with a label per sequence, a target per token, or both, and their train/dev/test splits.
///
/// Why a type of its own: text/dataset.hpp holds sentences as strings and text/encoder.hpp's
/// EncodedDataset one label per sequence with segment ids; neither has per-token targets, which
/// a causal language-model task such as MQAR needs (Arora, Eyuboglu et al., *Zoology: Measuring
/// and Improving Recall in Efficient Language Models*, ICLR 2024). The layout follows
/// EncodedDataset (sequences back to back, offsets), so a ListOps split copies into one with
/// zero segment ids. data/ stands beside the chain features ← … ← train and includes only core/.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"

namespace coulomb::data {

/// Token ids are 32-bit, as coulomb::TokenId of text/vocabulary.hpp (the same type).
using TokenId = std::int32_t;

/// Target of a position that has none (the loss and the metrics skip it; Zoology writes −100).
inline constexpr TokenId no_target = -1;

/// Sequences of token ids stored back to back: sequence i is ids[offsets[i] … offsets[i+1]).
/// Each has a label (−1 when the task has none) and, for per-token tasks, a target per token
/// (targets aligned with ids, no_target where nothing is predicted; empty for sequence tasks).
struct TokenSequenceDataset {
  std::vector<TokenId> ids;             ///< every sequence's ids, concatenated
  std::vector<TokenId> targets;         ///< empty, or aligned with ids (no_target: none)
  std::vector<std::size_t> offsets{0};  ///< size() + 1 entries
  std::vector<int> labels;              ///< label of each sequence, −1 when none
  int num_classes = 0;                  ///< labels lie in [0, num_classes); 0: unlabelled
  Index vocabulary_size = 0;            ///< ids (and targets) lie in [0, vocabulary_size)

  /// Number of sequences.
  Index size() const noexcept { return static_cast<Index>(labels.size()); }
  /// True when every token has a target entry (a per-token task).
  bool has_targets() const noexcept { return !targets.empty() && targets.size() == ids.size(); }
  /// Number of tokens of sequence i. Throws invalid_argument for i outside [0, size()).
  Index length(Index i) const {
    const std::size_t first = begin(i);  // checks i before end(i) reads offsets
    return static_cast<Index>(end(i) - first);
  }
  /// The ids of sequence i.
  std::span<const TokenId> sequence(Index i) const {
    const std::size_t first = begin(i);
    return {ids.data() + first, end(i) - first};
  }
  /// The targets of sequence i (empty unless has_targets()).
  std::span<const TokenId> sequence_targets(Index i) const {
    const std::size_t first = begin(i);
    if (!has_targets()) return {};
    return {targets.data() + first, end(i) - first};
  }
  /// Length of the longest sequence (0 when empty).
  Index max_length() const noexcept {
    std::size_t longest = 0;
    for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
      longest = std::max(longest, offsets[i + 1] - offsets[i]);
    return static_cast<Index>(longest);
  }
  /// Appends a sequence with a label and, for a per-token task, its targets (same length as
  /// `seq`; an empty span for a sequence task). Throws invalid_argument for an empty sequence,
  /// targets of another length, or targets given for some sequences only.
  void push_back(std::span<const TokenId> seq, int label, std::span<const TokenId> seq_targets) {
    // Checked with if: require() would build its message on every call.
    const char* where = "coulomb::data::TokenSequenceDataset::push_back";
    if (seq.empty()) coulomb::detail::throw_invalid(where, "argument 'seq' is empty");
    if (!seq_targets.empty() && seq_targets.size() != seq.size())
      coulomb::detail::throw_invalid(where, "arguments 'seq' and 'seq_targets' differ in length");
    if (size() > 0 && seq_targets.empty() != targets.empty())
      coulomb::detail::throw_invalid(where, "targets must be given for every sequence or for none");
    ids.insert(ids.end(), seq.begin(), seq.end());
    targets.insert(targets.end(), seq_targets.begin(), seq_targets.end());
    offsets.push_back(ids.size());
    labels.push_back(label);
  }

 private:
  std::size_t begin(Index i) const {
    if (i < 0 || i >= size()) {
      coulomb::detail::throw_invalid("coulomb::data::TokenSequenceDataset",
                                     "argument 'i' = " + std::to_string(i) + " is outside [0, " +
                                         std::to_string(size()) + ")");
    }
    return offsets[static_cast<std::size_t>(i)];
  }
  std::size_t end(Index i) const { return offsets[static_cast<std::size_t>(i) + 1]; }
};

/// The three splits a generator makes; no sequence occurs twice across (or within) them.
struct SequenceSplits {
  TokenSequenceDataset train;  ///< training split
  TokenSequenceDataset dev;    ///< development split (model selection, early stopping)
  TokenSequenceDataset test;   ///< test split
};

namespace detail {

/// Uniform integers in [0, n) for 0 < n < 2³² by Lemire's multiply-and-shift with rejection:
/// x·n for the top 32 bits x of a draw, redrawn while its low half is below 2³² mod n. Exactly
/// uniform, integer only (the same on every platform), and without uniform_index's two
/// divisions per draw, which the generators would pay on every token.
class UniformBelow {
 public:
  /// Draws in [0, n); n must be positive (checked by the callers' option validation).
  explicit constexpr UniformBelow(std::uint32_t n) noexcept
      : n_(n), reject_below_(static_cast<std::uint32_t>(0U - n) % n) {}
  /// One draw.
  template <std::uniform_random_bit_generator G>
  std::uint32_t operator()(G& rng) const {
    std::uint64_t m = (coulomb::detail::random_bits64(rng) >> 32) * n_;
    while (static_cast<std::uint32_t>(m) < reject_below_)
      m = (coulomb::detail::random_bits64(rng) >> 32) * n_;
    return static_cast<std::uint32_t>(m >> 32);
  }

 private:
  std::uint32_t n_;
  std::uint32_t reject_below_;
};

/// A 64-bit hash of a token sequence: one multiply per id, then a final mix (splitmix64's),
/// with only integer operations, so the same on every platform.
inline std::uint64_t sequence_hash(std::span<const TokenId> seq) noexcept {
  std::uint64_t h = 0x9E3779B97F4A7C15ULL ^ seq.size();
  for (const TokenId id : seq) h = (h ^ static_cast<std::uint32_t>(id)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ULL;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

/// Remembers sequences and says whether a new one equals one seen before: by hash, then by
/// comparing the ids, so the answer is exact (a hash collision is never taken for a duplicate).
/// Holds views into the datasets registered with it, which must stay alive and unmodified
/// except by appending.
class SequenceDeduplicator {
 public:
  /// True if `seq` equals a sequence added before.
  bool contains(std::span<const TokenId> seq) const {
    const auto [first, last] = seen_.equal_range(sequence_hash(seq));
    for (auto it = first; it != last; ++it) {
      const auto other = it->second.first->sequence(it->second.second);
      if (other.size() == seq.size() && std::equal(other.begin(), other.end(), seq.begin()))
        return true;
    }
    return false;
  }
  /// Records sequence i of `owner`.
  void add(const TokenSequenceDataset& owner, Index i) {
    seen_.emplace(sequence_hash(owner.sequence(i)), std::make_pair(&owner, i));
  }

 private:
  std::unordered_multimap<std::uint64_t, std::pair<const TokenSequenceDataset*, Index>> seen_;
};

/// One sequence a generator drew: its ids, label and targets (views of the generator's buffers).
struct SequenceDraw {
  std::span<const TokenId> ids;      ///< the sequence
  int label = -1;                    ///< its label (−1: none)
  std::span<const TokenId> targets;  ///< per-position targets (empty: none)
};

/// The loop every task generator shares: split k of `out` (train, dev, test) receives sizes[k]
/// distinct sequences drawn from its own generator Rng(seed).split(k), so a split does not
/// depend on the sizes of the others. prepare(d, k) sets up split d; draw(rng) returns a
/// SequenceDraw, or nothing to reject the draw; a draw that repeats any sequence before it is
/// rejected too. After `rejection_limit` rejections in a row it throws coulomb::error
/// "<where>: <rejection_limit> <too_many()>".
template <typename Prepare, typename Draw, typename TooMany>
void generate_splits(SequenceSplits& out, const Index (&sizes)[3], std::uint64_t seed,
                     std::uint64_t rejection_limit, const char* where, Prepare&& prepare,
                     Draw&& draw, TooMany&& too_many) {
  SequenceDeduplicator seen;
  TokenSequenceDataset* splits[] = {&out.train, &out.dev, &out.test};
  for (std::uint64_t k = 0; k < 3; ++k) {
    TokenSequenceDataset& d = *splits[k];
    prepare(d, k);
    Rng base(seed);
    Rng rng = base.split(k);
    std::uint64_t rejected = 0;
    while (d.size() < sizes[k]) {
      if (rejected == rejection_limit)
        throw error(std::string(where) + ": " + std::to_string(rejection_limit) + " " + too_many());
      const std::optional<SequenceDraw> drawn = draw(rng);
      if (!drawn || seen.contains(drawn->ids)) {
        ++rejected;
        continue;
      }
      rejected = 0;
      d.push_back(drawn->ids, drawn->label, drawn->targets);
      seen.add(d, d.size() - 1);
    }
  }
}

}  // namespace detail

}  // namespace coulomb::data
