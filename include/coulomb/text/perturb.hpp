// SPDX-License-Identifier: MIT
/// @file text/perturb.hpp
/// @brief Seeded input perturbations for robustness evaluation: random token drop and random
/// token swap at a given rate (Badiei Khuzani et al. 2026, §5: "the same metrics under
/// perturbed inputs").
///
/// For a sequence of n tokens and a rate r ∈ [0, 1] (docs/text.md (section "perturbations")):
/// - drop: k = ⌊r·n + u⌋ tokens (u ~ U[0, 1), so E[k] = r·n exactly, even for short
///   sequences), at most n − 1, chosen uniformly without replacement, are removed; the others
///   keep their order. At least one token always remains.
/// - swap: k = ⌊r·n/2 + u⌋ disjoint pairs of positions (at most ⌊n/2⌋), chosen uniformly, have
///   their tokens exchanged, so about r·n positions move. The multiset of tokens is unchanged.
/// On an encoded sequence the special tokens ([CLS], [SEP], [PAD]) stay where they are, and each
/// sentence of a pair is perturbed on its own, so a pair stays a pair. The perturbation acts on
/// the encoded (already truncated) tokens. Draws come from the generator given, so the same seed
/// gives the same perturbed dataset.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "encoder.hpp"
#include "vocabulary.hpp"

namespace coulomb {

/// The kind of a perturbation.
enum class PerturbationKind {
  none,  ///< leave the tokens as they are
  drop,  ///< remove random tokens
  swap,  ///< exchange random pairs of tokens
};

/// A perturbation: a kind and a rate in [0, 1].
struct Perturbation {
  PerturbationKind kind = PerturbationKind::none;  ///< what to do
  double rate = 0.0;                               ///< fraction of tokens affected
};

namespace detail {

inline void check_rate(double rate, const char* where) {
  require(rate >= 0.0 && rate <= 1.0, where,
          "argument 'rate' must be in [0, 1], got " + std::to_string(rate));
}

/// ⌊x + u⌋ with u ~ U[0, 1): an integer with expectation x.
template <std::uniform_random_bit_generator G>
std::size_t stochastic_round(double x, G& rng) {
  return static_cast<std::size_t>(std::floor(x + uniform01(rng)));
}

/// The first k entries of a uniform random permutation of 0 … n−1 (partial Fisher–Yates).
template <std::uniform_random_bit_generator G>
void choose_positions(std::size_t n, std::size_t k, std::vector<std::size_t>& out, G& rng) {
  out.resize(n);
  std::iota(out.begin(), out.end(), std::size_t{0});
  partial_shuffle(std::span<std::size_t>(out), k, rng);
  out.resize(k);
}

/// The positions a drop or swap of `rate` touches among n tokens: k = ⌊rate·n + u⌋ tokens to
/// drop (at most n − 1), or k = ⌊rate·n/2 + u⌋ pairs to swap (at most ⌊n/2⌋) with their 2k
/// positions, distinct and uniformly chosen, in `chosen`. Returns k (0, without a draw, when
/// n ≤ 1). Throws invalid_argument, naming `where`, for a rate outside [0, 1].
template <std::uniform_random_bit_generator G>
std::size_t choose_perturbed(PerturbationKind kind, double rate, std::size_t n,
                             std::vector<std::size_t>& chosen, G& rng, const char* where) {
  check_rate(rate, where);
  if (n <= 1) return 0;
  const bool swap = kind == PerturbationKind::swap;
  const double expected =
      swap ? rate * static_cast<double>(n) / 2.0 : rate * static_cast<double>(n);
  const std::size_t k = std::min(stochastic_round(expected, rng), swap ? n / 2 : n - 1);
  if (k > 0) choose_positions(n, swap ? 2 * k : k, chosen, rng);
  return k;
}

}  // namespace detail

/// Removes k = ⌊rate·n + u⌋ (at most n − 1) uniformly chosen tokens of `tokens`, keeping the
/// order of the rest; returns k. Throws invalid_argument for a rate outside [0, 1].
template <typename T, std::uniform_random_bit_generator G>
std::size_t drop_tokens(std::vector<T>& tokens, double rate, G& rng) {
  std::vector<std::size_t> chosen;
  const std::size_t k = detail::choose_perturbed(PerturbationKind::drop, rate, tokens.size(),
                                                 chosen, rng, "coulomb::drop_tokens");
  if (k == 0) return 0;
  const std::size_t n = tokens.size();
  std::vector<char> drop(n, 0);
  for (const std::size_t p : chosen) drop[p] = 1;
  std::size_t w = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (!drop[r]) tokens[w++] = std::move(tokens[r]);
  }
  tokens.resize(w);
  return k;
}

/// Exchanges the tokens of k = ⌊rate·n/2 + u⌋ (at most ⌊n/2⌋) disjoint, uniformly chosen pairs
/// of positions; returns k. Throws invalid_argument for a rate outside [0, 1].
template <typename T, std::uniform_random_bit_generator G>
std::size_t swap_tokens(std::vector<T>& tokens, double rate, G& rng) {
  std::vector<std::size_t> chosen;
  const std::size_t k = detail::choose_perturbed(PerturbationKind::swap, rate, tokens.size(),
                                                 chosen, rng, "coulomb::swap_tokens");
  for (std::size_t j = 0; j < k; ++j) std::swap(tokens[chosen[2 * j]], tokens[chosen[2 * j + 1]]);
  return k;
}

/// Applies `p` to one encoded sequence (ids, aligned segment ids and, unless `keys` is empty,
/// aligned word keys, which move with their tokens): each maximal run of non-special tokens (a
/// sentence) is perturbed on its own and keeps the segment of its first token; special tokens
/// stay in place. Returns the number of tokens dropped (drop) or of pairs swapped (swap).
/// Throws invalid_argument for a bad rate or ids, segments and (non-empty) keys of different
/// lengths.
template <std::uniform_random_bit_generator G>
std::size_t perturb_sequence(std::vector<TokenId>& ids, std::vector<std::uint8_t>& segments,
                             std::vector<std::uint64_t>& keys, const Perturbation& p, G& rng) {
  const char* where = "coulomb::perturb_sequence";
  detail::check_rate(p.rate, where);
  detail::require(ids.size() == segments.size(), where,
                  "arguments 'ids' and 'segments' differ in length");
  detail::require(keys.empty() || keys.size() == ids.size(), where,
                  "arguments 'ids' and 'keys' differ in length");
  if (p.kind == PerturbationKind::none || p.rate == 0.0) return 0;
  const bool with_keys = !keys.empty();
  std::vector<TokenId> out_ids;
  std::vector<std::uint8_t> out_seg;
  std::vector<std::uint64_t> out_keys;
  out_ids.reserve(ids.size());
  out_seg.reserve(ids.size());
  if (with_keys) out_keys.reserve(ids.size());
  // A run is perturbed as a list of positions (the draws do not depend on what is moved).
  std::vector<std::size_t> run;
  std::size_t changed = 0;
  std::size_t i = 0;
  // Special ids are those of Vocabulary::is_special except [UNK], which stands for a word.
  auto is_fixed = [](TokenId id) { return Vocabulary::is_special(id) && id != Vocabulary::unk_id; };
  auto emit = [&](std::size_t from, std::uint8_t segment) {
    out_ids.push_back(ids[from]);
    out_seg.push_back(segment);
    if (with_keys) out_keys.push_back(keys[from]);
  };
  while (i < ids.size()) {
    if (is_fixed(ids[i])) {
      emit(i, segments[i]);
      ++i;
      continue;
    }
    const std::uint8_t segment = segments[i];
    run.clear();
    while (i < ids.size() && !is_fixed(ids[i])) run.push_back(i++);
    changed += p.kind == PerturbationKind::drop ? drop_tokens(run, p.rate, rng)
                                                : swap_tokens(run, p.rate, rng);
    for (const std::size_t r : run) emit(r, segment);
  }
  ids.swap(out_ids);
  segments.swap(out_seg);
  if (with_keys) keys.swap(out_keys);
  return changed;
}

/// The same for a sequence without word keys.
template <std::uniform_random_bit_generator G>
std::size_t perturb_sequence(std::vector<TokenId>& ids, std::vector<std::uint8_t>& segments,
                             const Perturbation& p, G& rng) {
  std::vector<std::uint64_t> no_keys;
  return perturb_sequence(ids, segments, no_keys, p, rng);
}

/// A copy of `data` with every sequence perturbed by `p`, drawing from `rng` sequence after
/// sequence. Labels, lines, the encoding statistics and the word keys (moved with their
/// tokens) are kept.
template <std::uniform_random_bit_generator G>
EncodedDataset perturb_dataset(const EncodedDataset& data, const Perturbation& p, G& rng) {
  detail::check_rate(p.rate, "coulomb::perturb_dataset");
  EncodedDataset out;
  out.is_pair = data.is_pair;
  out.num_classes = data.num_classes;
  out.stats = data.stats;
  out.ids.reserve(data.ids.size());
  out.segments.reserve(data.segments.size());
  const bool with_keys = data.has_keys() && !data.ids.empty();
  if (with_keys) out.keys.reserve(data.keys.size());
  std::vector<TokenId> ids;
  std::vector<std::uint8_t> seg;
  std::vector<std::uint64_t> keys;
  for (Index i = 0; i < data.size(); ++i) {
    const auto s = data.sequence(i);
    const auto g = data.segment_ids(i);
    ids.assign(s.begin(), s.end());
    seg.assign(g.begin(), g.end());
    if (with_keys) {
      const auto k = data.word_keys(i);
      keys.assign(k.begin(), k.end());
    }
    perturb_sequence(ids, seg, keys, p, rng);
    if (with_keys) {
      out.push_back(ids, seg, keys, data.labels[static_cast<std::size_t>(i)],
                    data.lines[static_cast<std::size_t>(i)]);
    } else {
      out.push_back(ids, seg, data.labels[static_cast<std::size_t>(i)],
                    data.lines[static_cast<std::size_t>(i)]);
    }
  }
  return out;
}

/// The same with a generator seeded by `seed` (coulomb::Rng).
inline EncodedDataset perturb_dataset(const EncodedDataset& data, const Perturbation& p,
                                      std::uint64_t seed) {
  Rng rng(seed);
  return perturb_dataset(data, p, rng);
}

}  // namespace coulomb
