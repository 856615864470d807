// SPDX-License-Identifier: MIT
/// @file data/mqar.hpp
/// @brief Multi-query associative recall (MQAR), generated as Zoology does it (Arora,
/// Eyuboglu, Timalsina, Johnson, Poli, Zou, Rudra, Ré, *Zoology: Measuring and Improving
/// Recall in Efficient Language Models*, ICLR 2024; zoology/data/associative_recall.py).
///
/// A sequence of L tokens starts with P key–value pairs `k₁ v₁ k₂ v₂ … k_P v_P` (keys distinct,
/// values distinct, from disjoint halves of the vocabulary: keys in [1, V/2), values in
/// [V/2, V)); the other L − 2P positions hold filler, among which Q of the keys are asked
/// again. A causal language model reads the sequence; at the position of a query key its
/// target is the value bound to that key in the context, and every other position has no
/// target (no_target). Placements:
/// - power_law (Zoology's multiquery_ar, the default): the query region is cut into
///   ⌊(L − 2P)/2⌋ slots of two tokens; key j of the context is asked at the start of slot g_j,
///   the g_j drawn one after another without replacement with probability ∝ (g + 1)^(a − 1)
///   (a = power_a; Zoology: 0.01, so most queries come soon after the context; a = 1 is
///   uniform). Needs 2P + 2Q ≤ L.
/// - uniform (Zoology's associative_recall): Q distinct positions uniform in [2P, L), each
///   asking a distinct key drawn uniformly. Needs 2P + Q ≤ L.
/// Filler is token 0, or (random_filler, Zoology's default) a uniform token of [0, V), which
/// may equal a key or a value; it never has a target.
///
/// Determinism: integer draws from coulomb::Rng only, except the power-law weights, which are
/// (g + 1)^(a − 1) computed once by std::pow and rounded to multiples of 2⁻³⁰, so a seed gives
/// the same sequences on every platform whose pow agrees to about 2⁻²² of those weights'
/// rounding boundaries (docs/tasks.md). Split k (0 train, 1 dev, 2 test) is drawn from
/// Rng(seed).split(k); no sequence occurs twice in the three splits together (Zoology only
/// warns about overlap).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "token_sequences.hpp"

namespace coulomb::data {

/// Where the queries go in the part of a sequence after the key–value pairs.
enum class MqarPlacement {
  power_law,  ///< slots of two tokens at power-law distributed gaps (Zoology's multiquery_ar)
  uniform,    ///< uniform distinct positions (Zoology's associative_recall)
};

/// The token ranges of MQAR for a vocabulary of V ids: filler 0, keys [1, V/2), values
/// [V/2, V).
struct MqarVocabulary {
  static constexpr TokenId filler = 0;     ///< the filler token (when not random)
  static constexpr TokenId first_key = 1;  ///< the smallest key id
  TokenId first_value = 0;                 ///< V/2: the smallest value id, one past the keys
  TokenId size = 0;                        ///< V: every id lies in [0, V)

  /// The ranges for `vocabulary_size` ids (validated by generate_mqar, not here).
  static constexpr MqarVocabulary for_size(Index vocabulary_size) noexcept {
    return MqarVocabulary{static_cast<TokenId>(vocabulary_size / 2),
                          static_cast<TokenId>(vocabulary_size)};
  }
  /// True for a key id.
  constexpr bool is_key(TokenId id) const noexcept { return id >= first_key && id < first_value; }
  /// True for a value id.
  constexpr bool is_value(TokenId id) const noexcept { return id >= first_value && id < size; }
};

/// Options of generate_mqar. The defaults are Zoology's (vocabulary 8,192, L = 64, 4 pairs,
/// every key asked once, power-law gaps with a = 0.01, random filler, 100,000 training and
/// 3,000 test sequences) with a development split of 3,000, which Zoology does not have.
struct MqarOptions {
  Index num_train = 100'000;      ///< sequences of the training split
  Index num_dev = 3'000;          ///< sequences of the development split
  Index num_test = 3'000;         ///< sequences of the test split
  Index vocabulary_size = 8'192;  ///< V; at least 2·num_pairs + 2, at most 2³¹ − 1
  Index length = 64;              ///< L, tokens of every sequence
  Index num_pairs = 4;            ///< P, key–value pairs at the start (at least 1)
  /// Q, queries (distinct keys) per sequence, at most num_pairs; 0 means num_pairs (Zoology's
  /// MQAR asks every key once).
  Index num_queries = 0;
  /// Where the queries go.
  MqarPlacement placement = MqarPlacement::power_law;
  /// Exponent a of the power-law gaps (positive; Zoology: 0.01; 1 gives uniform slots).
  double power_a = 0.01;
  /// Filler tokens uniform in [0, V) (Zoology's generator default; its ICLR Figure 2 runs used
  /// filler 0, false here).
  bool random_filler = true;
  /// Give up (coulomb::error) after this many sequences in a row that repeat earlier ones (at
  /// least 1): more sequences requested than the vocabulary and length allow.
  Index max_rejections_in_a_row = 1'000'000;

  /// Q as used: num_queries, or num_pairs when it is 0.
  Index queries() const noexcept { return num_queries == 0 ? num_pairs : num_queries; }

  /// The defaults with length L and P pairs (a cell of Zoology's grid).
  static MqarOptions zoology(Index length, Index num_pairs) {
    MqarOptions o;
    o.length = length;
    o.num_pairs = num_pairs;
    return o;
  }
};

/// Sequence lengths of Zoology's MQAR grid (its Figure 2 varies L from 64 to 512).
inline constexpr std::array<Index, 4> mqar_grid_lengths{64, 128, 256, 512};
/// Key–value pair counts of Zoology's MQAR grid (4 to 64).
inline constexpr std::array<Index, 5> mqar_grid_pairs{4, 8, 16, 32, 64};

namespace detail {

// Throws invalid_argument, naming the field, unless `o` describes a task that can be generated.
inline void validate_mqar(const MqarOptions& o, const char* where) {
  auto name = [](const char* field) { return std::string("argument 'options.") + field + "' "; };
  auto require = [where](bool ok, const std::string& what) {
    coulomb::detail::require(ok, where, what);
  };
  require(o.num_train >= 0, name("num_train") + "must be >= 0");
  require(o.num_dev >= 0, name("num_dev") + "must be >= 0");
  require(o.num_test >= 0, name("num_test") + "must be >= 0");
  require(o.max_rejections_in_a_row >= 1, name("max_rejections_in_a_row") + "must be at least 1");
  require(o.num_pairs >= 1,
          name("num_pairs") + "must be at least 1, got " + std::to_string(o.num_pairs));
  require(o.vocabulary_size <= std::numeric_limits<TokenId>::max(),
          name("vocabulary_size") + "must be at most 2^31 - 1, got " +
              std::to_string(o.vocabulary_size));
  // Keys [1, V/2) and values [V/2, V) must each hold num_pairs distinct ids.
  require(o.vocabulary_size / 2 - 1 >= o.num_pairs,
          name("vocabulary_size") + "= " + std::to_string(o.vocabulary_size) +
              " leaves fewer than options.num_pairs = " + std::to_string(o.num_pairs) +
              " keys in [1, V/2)");
  require(o.num_queries >= 0 && o.num_queries <= o.num_pairs,
          name("num_queries") + "must lie in [0, options.num_pairs = " +
              std::to_string(o.num_pairs) + "], got " + std::to_string(o.num_queries));
  require(o.power_a > 0.0 && std::isfinite(o.power_a),
          name("power_a") + "must be positive and finite, got " + std::to_string(o.power_a));
  const Index q = o.queries();
  const bool slots = o.placement == MqarPlacement::power_law;
  const Index needed = 2 * o.num_pairs + (slots ? 2 * q : q);
  require(o.length >= needed,
          name("length") + "= " + std::to_string(o.length) + " is shorter than " +
              (slots ? "2·options.num_pairs + 2·queries" : "2·options.num_pairs + queries") +
              " = " + std::to_string(needed) +
              " (options.num_pairs = " + std::to_string(o.num_pairs) + ", options.num_queries = " +
              std::to_string(o.num_queries) + (slots ? ", power-law slots of two tokens)" : ")"));
  require(o.length <= std::numeric_limits<std::int32_t>::max(),
          name("length") + "must be below 2^31, got " + std::to_string(o.length));
}

// Draws `count` distinct integers of [first, first + n) in random order into `out` (count ≤ n),
// redrawing repeats; a linear scan finds them (count ≤ 64 in Zoology's grid), so the cost does
// not grow with the vocabulary.
template <std::uniform_random_bit_generator G>
void draw_distinct(G& rng, const UniformBelow& below_n, TokenId first, Index count,
                   std::vector<TokenId>& out) {
  out.clear();
  while (static_cast<Index>(out.size()) < count) {
    const TokenId id = first + static_cast<TokenId>(below_n(rng));
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
}

// Draws indices of [0, n) without replacement, each with probability ∝ its integer weight
// among those left (successive sampling, as numpy's choice(replace=False, p=…)), with a
// Fenwick tree of the weights: O(log n) per draw.
class WeightedSampler {
 public:
  explicit WeightedSampler(std::vector<std::uint64_t> weights) : weights_(std::move(weights)) {}

  // Starts a new sequence of draws with every index available.
  void reset() {
    const std::size_t n = weights_.size();
    tree_.assign(n + 1, 0);
    for (std::size_t i = 1; i <= n; ++i) {
      tree_[i] += weights_[i - 1];
      const std::size_t parent = i + (i & (0 - i));
      if (parent <= n) tree_[parent] += tree_[i];
    }
    total_ = tree_.empty() ? 0 : prefix(n);
  }

  // One draw among the indices not yet drawn since reset() (at least one must be left).
  template <std::uniform_random_bit_generator G>
  std::size_t draw(G& rng) {
    std::uint64_t r = uniform_index(total_, rng);
    // Descend the tree to the index whose cumulative weight range holds r.
    std::size_t pos = 0;
    std::size_t step = std::bit_floor(weights_.size());
    for (; step > 0; step >>= 1) {
      if (pos + step <= weights_.size() && tree_[pos + step] <= r) {
        pos += step;
        r -= tree_[pos];
      }
    }
    // Remove the drawn index's weight.
    const std::uint64_t w = weights_[pos];
    for (std::size_t i = pos + 1; i <= weights_.size(); i += i & (0 - i)) tree_[i] -= w;
    total_ -= w;
    return pos;
  }

 private:
  std::uint64_t prefix(std::size_t i) const {
    std::uint64_t s = 0;
    for (; i > 0; i -= i & (0 - i)) s += tree_[i];
    return s;
  }

  std::vector<std::uint64_t> weights_;
  std::vector<std::uint64_t> tree_;
  std::uint64_t total_ = 0;
};

// The power-law weights (g + 1)^(a − 1) of the slots g = 0 … n − 1, divided by the largest
// (the first for a ≤ 1, the last for a > 1, so no power overflows), in units of 2⁻³⁰ and at
// least 1, so every slot stays possible.
inline std::vector<std::uint64_t> mqar_power_law_weights(Index n, double a) {
  std::vector<std::uint64_t> w(static_cast<std::size_t>(n));
  const double largest_at = a > 1.0 ? static_cast<double>(n) : 1.0;
  for (Index g = 0; g < n; ++g) {
    const double x = std::pow(static_cast<double>(g + 1) / largest_at, a - 1.0);
    w[static_cast<std::size_t>(g)] =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(std::ldexp(x, 30))));
  }
  return w;
}

}  // namespace detail

/// Every cell of Zoology's grid (mqar_grid_lengths × mqar_grid_pairs) that the default
/// power-law layout can hold (4P ≤ L: 17 of the 20), with the other options at their
/// defaults.
inline std::vector<MqarOptions> mqar_grid() {
  std::vector<MqarOptions> cells;
  for (const Index length : mqar_grid_lengths)
    for (const Index pairs : mqar_grid_pairs)
      if (4 * pairs <= length) cells.push_back(MqarOptions::zoology(length, pairs));
  return cells;
}

/// Generates the train, dev and test splits of MQAR from `seed` (see the file comment):
/// sequences of options.length ids in [0, options.vocabulary_size), targets aligned with them
/// (the bound value at each query position, no_target elsewhere), labels −1. Throws
/// invalid_argument, naming the field, for options that cannot be generated, and
/// coulomb::error after options.max_rejections_in_a_row repeated sequences in a row.
inline SequenceSplits generate_mqar(const MqarOptions& options, std::uint64_t seed) {
  const char* where = "coulomb::data::generate_mqar";
  detail::validate_mqar(options, where);
  const auto rejection_limit = static_cast<std::uint64_t>(options.max_rejections_in_a_row);
  const MqarVocabulary vocab = MqarVocabulary::for_size(options.vocabulary_size);
  const Index L = options.length;
  const Index P = options.num_pairs;
  const Index Q = options.queries();
  const Index context = 2 * P;
  const bool slots = options.placement == MqarPlacement::power_law;
  const Index num_slots = (L - context) / 2;

  const detail::UniformBelow key_draw(static_cast<std::uint32_t>(vocab.first_value - 1));
  const detail::UniformBelow value_draw(static_cast<std::uint32_t>(vocab.size - vocab.first_value));
  const detail::UniformBelow filler_draw(static_cast<std::uint32_t>(vocab.size));
  detail::WeightedSampler slot_sampler(
      slots ? detail::mqar_power_law_weights(num_slots, options.power_a)
            : std::vector<std::uint64_t>{});
  std::vector<TokenId> keys;
  std::vector<TokenId> values;
  std::vector<Index> positions;  // uniform placement: [context, L), partially shuffled
  std::vector<Index> asked;      // uniform placement: key indices, partially shuffled
  std::vector<TokenId> ids(static_cast<std::size_t>(L));
  std::vector<TokenId> targets(static_cast<std::size_t>(L));

  SequenceSplits out;
  const Index sizes[] = {options.num_train, options.num_dev, options.num_test};
  auto prepare = [&](TokenSequenceDataset& d, std::uint64_t k) {
    d.vocabulary_size = options.vocabulary_size;
    // Up to 2²⁷ ids (512 MB) reserved; beyond, the vectors grow.
    const std::size_t reserve = std::min(static_cast<std::size_t>(sizes[k]),
                                         (std::size_t{1} << 27) / static_cast<std::size_t>(L)) *
                                static_cast<std::size_t>(L);
    d.ids.reserve(reserve);
    d.targets.reserve(reserve);
  };
  auto draw = [&](Rng& rng) -> std::optional<detail::SequenceDraw> {
    detail::draw_distinct(rng, key_draw, MqarVocabulary::first_key, P, keys);
    detail::draw_distinct(rng, value_draw, vocab.first_value, P, values);
    for (Index i = 0; i < P; ++i) {
      ids[static_cast<std::size_t>(2 * i)] = keys[static_cast<std::size_t>(i)];
      ids[static_cast<std::size_t>(2 * i + 1)] = values[static_cast<std::size_t>(i)];
    }
    for (Index t = context; t < L; ++t)
      ids[static_cast<std::size_t>(t)] =
          options.random_filler ? static_cast<TokenId>(filler_draw(rng)) : MqarVocabulary::filler;
    std::fill(targets.begin(), targets.end(), no_target);
    auto ask = [&](Index position, Index pair) {
      ids[static_cast<std::size_t>(position)] = keys[static_cast<std::size_t>(pair)];
      targets[static_cast<std::size_t>(position)] = values[static_cast<std::size_t>(pair)];
    };
    if (slots) {
      // Key j is asked at the start of the j-th slot drawn (Zoology's order).
      slot_sampler.reset();
      for (Index j = 0; j < Q; ++j)
        ask(context + 2 * static_cast<Index>(slot_sampler.draw(rng)), j);
    } else {
      // Partial Fisher–Yates shuffles of the positions and of the key indices.
      positions.resize(static_cast<std::size_t>(L - context));
      for (Index t = context; t < L; ++t) positions[static_cast<std::size_t>(t - context)] = t;
      asked.resize(static_cast<std::size_t>(P));
      for (Index i = 0; i < P; ++i) asked[static_cast<std::size_t>(i)] = i;
      for (Index j = 0; j < Q; ++j) {
        const auto uj = static_cast<std::size_t>(j);
        std::swap(positions[uj], positions[uj + uniform_index(positions.size() - uj, rng)]);
        std::swap(asked[uj], asked[uj + uniform_index(asked.size() - uj, rng)]);
        ask(positions[uj], asked[uj]);
      }
    }
    return detail::SequenceDraw{ids, -1, targets};
  };
  auto too_many = [] {
    return std::string(
        "sequences in a row (options.max_rejections_in_a_row) repeated earlier ones; ask for "
        "fewer sequences");
  };
  detail::generate_splits(out, sizes, seed, rejection_limit, where, prepare, draw, too_many);
  return out;
}

}  // namespace coulomb::data
