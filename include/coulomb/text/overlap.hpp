// SPDX-License-Identifier: MIT
/// @file text/overlap.hpp
/// @brief Lexical overlap of the two sentences of a pair, computed from word keys: the input
/// of the pair head's overlap features (nn::TextClassifierConfig::pair_overlap).
///
/// A word key is a 64-bit hash of a token's text after the tokenizer's normalization (FNV-1a,
/// never 0), so two occurrences of one word have the same key even when the vocabulary maps
/// the word to [UNK] (a name or a number that the training split never contains). Special
/// tokens have key 0 and are ignored. For a pair with sentences a and b and n = 1, 2, 3, let
/// G_n(a) be the set of distinct n-grams of consecutive words of a (and G_n(b) of b); the six
/// features are
///   [ |G_1(a) ∩ G_1(b)| / |G_1(a)|, |G_1(a) ∩ G_1(b)| / |G_1(b)|,
///     the same for n = 2, the same for n = 3 ],
/// the fraction of a's n-grams found in b and of b's found in a, with 0 where a set is empty
/// (a sentence shorter than n). Exchanging the sentences exchanges the two entries of each n.
/// docs/text.md (section "lexical overlap") describes them; docs/results.md measures them on MRPC.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/tokens.hpp"

namespace coulomb {

/// The word key of a token: the 64-bit FNV-1a hash of its bytes, with 0 (the key of special
/// tokens) replaced by 1. The same on every platform.
constexpr std::uint64_t word_key(std::string_view token) noexcept {
  std::uint64_t h = 14695981039346656037ULL;
  for (const char c : token) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h == 0 ? 1 : h;
}

namespace detail {

// Hash of n consecutive keys (n = 1 gives the key itself): a 64-bit combination (the
// splitmix64 finalizer) whose collisions between distinct n-grams of two sentences are
// negligible.
inline std::uint64_t ngram_key(const std::uint64_t* keys, int n) noexcept {
  std::uint64_t h = keys[0];
  for (int k = 1; k < n; ++k) {
    h ^= keys[k] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBULL;
    h ^= h >> 31;
  }
  return h;
}

// The distinct n-gram keys of `words`, sorted, in `out`.
inline void distinct_ngrams(const std::vector<std::uint64_t>& words, int n,
                            std::vector<std::uint64_t>& out) {
  out.clear();
  const auto len = static_cast<std::ptrdiff_t>(words.size());
  for (std::ptrdiff_t i = 0; i + n <= len; ++i) out.push_back(ngram_key(words.data() + i, n));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

// Size of the intersection of two sorted sets.
inline std::size_t sorted_intersection_size(const std::vector<std::uint64_t>& a,
                                            const std::vector<std::uint64_t>& b) noexcept {
  std::size_t i = 0;
  std::size_t j = 0;
  std::size_t common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      ++common;
      ++i;
      ++j;
    }
  }
  return common;
}

}  // namespace detail

/// Computes the six overlap features of one encoded pair into `out` from its word keys and
/// segment ids (aligned, one per token): the words of sentence a are the tokens of segment 0
/// with a nonzero key, those of b the tokens of segment 1 with a nonzero key, in order. Throws
/// invalid_argument when `keys` and `segments` differ in length.
inline void pair_overlap(std::span<const std::uint64_t> keys,
                         std::span<const std::uint8_t> segments,
                         std::array<double, pair_overlap_features>& out) {
  detail::require(keys.size() == segments.size(), "coulomb::pair_overlap",
                  "arguments 'keys' and 'segments' differ in length (" +
                      std::to_string(keys.size()) + " and " + std::to_string(segments.size()) +
                      ")");
  std::vector<std::uint64_t> a;
  std::vector<std::uint64_t> b;
  for (std::size_t t = 0; t < keys.size(); ++t) {
    if (keys[t] == 0) continue;
    if (segments[t] == 0) a.push_back(keys[t]);
    if (segments[t] == 1) b.push_back(keys[t]);
  }
  std::vector<std::uint64_t> ga;
  std::vector<std::uint64_t> gb;
  for (int n = 1; n <= 3; ++n) {
    detail::distinct_ngrams(a, n, ga);
    detail::distinct_ngrams(b, n, gb);
    const auto common = static_cast<double>(detail::sorted_intersection_size(ga, gb));
    const auto k = static_cast<std::size_t>(2 * (n - 1));
    out[k] = ga.empty() ? 0.0 : common / static_cast<double>(ga.size());
    out[k + 1] = gb.empty() ? 0.0 : common / static_cast<double>(gb.size());
  }
}

}  // namespace coulomb
