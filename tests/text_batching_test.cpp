// SPDX-License-Identifier: MIT
// Padded batches, padding masks and seeded shuffling (text/batching.hpp); token drop and swap
// perturbations (text/perturb.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace text_batching_test {

namespace {

using coulomb::Index;
using coulomb::TokenId;
using coulomb::Vocabulary;

/// n sequences; sequence i has length 1 + (i·7 mod max_len) and ids 100·i + t (pairs: a [SEP]
/// in the middle, segment 1 after it).
coulomb::EncodedDataset make_encoded(Index n, Index max_len, bool pairs = false) {
  coulomb::EncodedDataset d;
  d.is_pair = pairs;
  for (Index i = 0; i < n; ++i) {
    const Index len = 1 + (i * 7) % max_len;
    std::vector<TokenId> ids;
    std::vector<std::uint8_t> seg;
    const Index sep = pairs && len >= 3 ? len / 2 : -1;
    for (Index t = 0; t < len; ++t) {
      ids.push_back(t == sep ? Vocabulary::sep_id : static_cast<TokenId>(100 * i + t + 10));
      seg.push_back(sep >= 0 && t > sep ? 1 : 0);
    }
    d.push_back(ids, seg, static_cast<int>(i % 2), static_cast<std::size_t>(i + 2));
  }
  return d;
}

bool is_permutation_of_range(std::vector<Index> v, Index n) {
  std::sort(v.begin(), v.end());
  std::vector<Index> range(static_cast<std::size_t>(n));
  std::iota(range.begin(), range.end(), Index{0});
  return v == range;
}

/// True if `sub` is `full` with some entries removed (order kept).
bool is_subsequence(const std::vector<TokenId>& sub, const std::vector<TokenId>& full) {
  std::size_t j = 0;
  for (const TokenId x : full) {
    if (j < sub.size() && sub[j] == x) ++j;
  }
  return j == sub.size();
}

}  // namespace

TEST_CASE("Batching_PadsToLongestWithMasks", "[text][batching]") {
  const auto data = make_encoded(6, 5, /*pairs=*/true);
  coulomb::TokenBatch batch;
  const std::vector<Index> pick = {4, 0, 2};
  coulomb::make_batch(data, pick, batch);
  Index longest = 0;
  for (const Index i : pick) longest = std::max(longest, data.length(i));
  REQUIRE(batch.length() == longest);
  REQUIRE(batch.size() == 3);
  CHECK(batch.indices == pick);
  for (Index b = 0; b < 3; ++b) {
    const Index i = pick[static_cast<std::size_t>(b)];
    const auto seq = data.sequence(i);
    const auto seg = data.segment_ids(i);
    CHECK(batch.lengths[static_cast<std::size_t>(b)] == data.length(i));
    CHECK(batch.mask.col(b).count() == data.length(i));
    CHECK(batch.labels[static_cast<std::size_t>(b)] == data.labels[static_cast<std::size_t>(i)]);
    for (Index t = 0; t < batch.length(); ++t) {
      const bool real = t < data.length(i);
      CHECK(batch.mask(t, b) == real);
      CHECK(batch.ids(t, b) == (real ? seq[static_cast<std::size_t>(t)] : Vocabulary::pad_id));
      CHECK(batch.segments(t, b) == (real ? seg[static_cast<std::size_t>(t)] : 0));
    }
  }
  // A fixed length pads further; one shorter than a sequence is an error.
  coulomb::make_batch(data, pick, batch, 8);
  CHECK(batch.length() == 8);
  CHECK(batch.mask.count() == data.length(4) + data.length(0) + data.length(2));
  CHECK_THROWS_AS(coulomb::make_batch(data, pick, batch, 2), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::make_batch(data, std::vector<Index>{6}, batch),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::make_batch(data, std::vector<Index>{}, batch),
                  coulomb::invalid_argument);
  // The mask has the type attention takes.
  STATIC_REQUIRE(std::is_same_v<decltype(batch.mask), coulomb::PaddingMask>);
}

TEST_CASE("Batcher_EpochsArePermutationsFixedBySeedAndEpoch", "[text][batching][random]") {
  const auto data = make_encoded(53, 9);
  auto rng = coulomb_test::test_rng("Batcher_EpochsArePermutationsFixedBySeedAndEpoch");
  const std::uint64_t seed = rng();
  coulomb::BatcherOptions options{.batch_size = 8, .shuffle = true, .seed = seed};
  coulomb::Batcher batcher(data, options);
  CHECK(batcher.num_batches() == 7);

  auto run_epoch = [](coulomb::Batcher& b, std::uint64_t epoch) {
    b.start_epoch(epoch);
    std::vector<Index> seen;
    coulomb::TokenBatch batch;
    Index batches = 0;
    while (b.next(batch)) {
      ++batches;
      CHECK(batch.size() <= 8);
      seen.insert(seen.end(), batch.indices.begin(), batch.indices.end());
    }
    CHECK(batches == b.num_batches());
    CHECK_FALSE(b.next(batch));
    return seen;
  };
  std::vector<std::vector<Index>> orders;
  for (std::uint64_t e = 0; e < 3; ++e) {
    orders.push_back(run_epoch(batcher, e));
    CHECK(is_permutation_of_range(orders.back(), 53));
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[1] != orders[2]);
  // Epoch 2 alone, in a new batcher with the same seed, gives the same order.
  coulomb::Batcher fresh(data, options);
  CHECK(run_epoch(fresh, 2) == orders[2]);
  // Another seed, another order.
  options.seed = seed + 1;
  coulomb::Batcher other(data, options);
  CHECK(run_epoch(other, 0) != orders[0]);
  // No shuffling: dataset order. drop_last leaves out the short batch.
  options.shuffle = false;
  options.drop_last = true;
  coulomb::Batcher ordered(data, options);
  const auto seen = run_epoch(ordered, 5);
  REQUIRE(seen.size() == 48);
  for (std::size_t k = 0; k < seen.size(); ++k) CHECK(seen[k] == static_cast<Index>(k));

  CHECK_THROWS_AS(coulomb::Batcher(data, {.batch_size = 0}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::Batcher(data, {.pad_to = 5}), coulomb::invalid_argument);
}

TEST_CASE("Perturb_DropRemovesTheRateOfTokensInOrder", "[text][perturb][random]") {
  auto rng = coulomb_test::test_rng("Perturb_DropRemovesTheRateOfTokensInOrder");
  for (const double rate : {0.1, 0.2}) {
    for (const std::size_t n : {3, 10, 23}) {
      const double target = rate * static_cast<double>(n);
      std::vector<double> fractions;
      for (int trial = 0; trial < 2000; ++trial) {
        std::vector<TokenId> tokens(n);
        std::iota(tokens.begin(), tokens.end(), TokenId{10});
        const auto original = tokens;
        const std::size_t k = coulomb::drop_tokens(tokens, rate, rng);
        // k = ⌊r·n + u⌋ ∈ {⌊r·n⌋, ⌊r·n⌋ + 1}, and the survivors keep their order.
        REQUIRE((k == static_cast<std::size_t>(std::floor(target)) ||
                 k == static_cast<std::size_t>(std::floor(target)) + 1));
        REQUIRE(tokens.size() == n - k);
        REQUIRE(is_subsequence(tokens, original));
        fractions.push_back(static_cast<double>(k) / static_cast<double>(n));
      }
      // E[k] = r·n exactly (stochastic rounding), also for short sequences.
      const auto s = coulomb_test::summarize(fractions);
      INFO("rate " << rate << " n " << n << " mean " << s.mean << " se " << s.se);
      CHECK(std::abs(s.mean - rate) < 5.0 * s.se + 1e-12);
    }
  }
  // A sequence keeps at least one token; rates outside [0, 1] are rejected.
  std::vector<TokenId> one{5};
  CHECK(coulomb::drop_tokens(one, 1.0, rng) == 0);
  std::vector<TokenId> four{1, 2, 3, 4};
  CHECK(coulomb::drop_tokens(four, 1.0, rng) == 3);
  CHECK(four.size() == 1);
  CHECK_THROWS_AS(coulomb::drop_tokens(four, 1.5, rng), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::drop_tokens(four, std::nan(""), rng), coulomb::invalid_argument);
}

TEST_CASE("Perturb_SwapMovesTheRateOfTokens", "[text][perturb][random]") {
  auto rng = coulomb_test::test_rng("Perturb_SwapMovesTheRateOfTokens");
  for (const double rate : {0.1, 0.2}) {
    const std::size_t n = 20;
    std::vector<double> moved_fraction;
    for (int trial = 0; trial < 2000; ++trial) {
      std::vector<TokenId> tokens(n);
      std::iota(tokens.begin(), tokens.end(), TokenId{10});
      const std::size_t k = coulomb::swap_tokens(tokens, rate, rng);
      // Disjoint pairs: exactly 2k distinct tokens move, and the multiset is unchanged.
      std::size_t moved = 0;
      for (std::size_t t = 0; t < n; ++t) moved += tokens[t] != static_cast<TokenId>(10 + t);
      REQUIRE(moved == 2 * k);
      auto sorted = tokens;
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t t = 0; t < n; ++t) REQUIRE(sorted[t] == static_cast<TokenId>(10 + t));
      moved_fraction.push_back(static_cast<double>(moved) / static_cast<double>(n));
    }
    const auto s = coulomb_test::summarize(moved_fraction);
    INFO("rate " << rate << " mean " << s.mean << " se " << s.se);
    CHECK(std::abs(s.mean - rate) < 5.0 * s.se + 1e-12);
  }
}

TEST_CASE("Perturb_EncodedPairsKeepSpecialTokensAndSeeds", "[text][perturb]") {
  const auto data = make_encoded(40, 12, /*pairs=*/true);
  for (const auto kind : {coulomb::PerturbationKind::drop, coulomb::PerturbationKind::swap}) {
    const coulomb::Perturbation p{kind, 0.2};
    const auto a = coulomb::perturb_dataset(data, p, std::uint64_t{17});
    const auto b = coulomb::perturb_dataset(data, p, std::uint64_t{17});
    const auto c = coulomb::perturb_dataset(data, p, std::uint64_t{18});
    CHECK(a.ids == b.ids);
    CHECK(a.ids != c.ids);
    CHECK(a.labels == data.labels);
    CHECK(a.lines == data.lines);
    REQUIRE(a.size() == data.size());
    for (Index i = 0; i < data.size(); ++i) {
      const auto before = data.sequence(i);
      const auto after = a.sequence(i);
      const auto seg = a.segment_ids(i);
      // The [SEP] survives, exactly once, segment 0 up to it and 1 after it; every sentence
      // keeps a token.
      const auto sep_before = std::count(before.begin(), before.end(), Vocabulary::sep_id);
      REQUIRE(std::count(after.begin(), after.end(), Vocabulary::sep_id) == sep_before);
      const auto sep_at = std::find(after.begin(), after.end(), Vocabulary::sep_id) - after.begin();
      for (std::size_t t = 0; t < after.size(); ++t) {
        const bool second = sep_before > 0 && static_cast<std::ptrdiff_t>(t) > sep_at;
        REQUIRE(seg[t] == (second ? 1 : 0));
      }
      if (sep_before > 0) {
        REQUIRE(sep_at > 0);
        REQUIRE(static_cast<std::size_t>(sep_at) + 1 < after.size());
      }
      if (kind == coulomb::PerturbationKind::swap) REQUIRE(after.size() == before.size());
      // Tokens never cross the separator.
      for (std::size_t t = 0; t < after.size(); ++t) {
        if (after[t] == Vocabulary::sep_id) continue;
        const auto it = std::find(before.begin(), before.end(), after[t]);
        REQUIRE(it != before.end());
        const bool was_second =
            sep_before > 0 &&
            it - before.begin() >
                std::find(before.begin(), before.end(), Vocabulary::sep_id) - before.begin();
        REQUIRE(was_second == (seg[t] == 1));
      }
    }
  }
  // Rate 0 and kind none change nothing.
  CHECK(coulomb::perturb_dataset(data, {coulomb::PerturbationKind::drop, 0.0}, std::uint64_t{1})
            .ids == data.ids);
  CHECK(coulomb::perturb_dataset(data, {coulomb::PerturbationKind::none, 0.5}, std::uint64_t{1})
            .ids == data.ids);
  CHECK_THROWS_AS(
      coulomb::perturb_dataset(data, {coulomb::PerturbationKind::swap, -0.1}, std::uint64_t{1}),
      coulomb::invalid_argument);
}

}  // namespace text_batching_test
