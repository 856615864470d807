// SPDX-License-Identifier: MIT
// MQAR (data/mqar.hpp): every query's target is the value bound to its key in the context,
// keys and values distinct and from their ranges, the targets exactly at the query positions,
// the placement distributions, Zoology's grid, determinism, distinct splits and the checks of
// the options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <coulomb/data/mqar.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace data_mqar_test {

namespace {

using coulomb::Index;
using coulomb::data::MqarOptions;
using coulomb::data::MqarPlacement;
using coulomb::data::MqarVocabulary;
using coulomb::data::no_target;
using coulomb::data::SequenceSplits;
using coulomb::data::TokenId;
using coulomb::data::TokenSequenceDataset;

/// Options with small splits.
MqarOptions sized(MqarOptions o, Index train, Index dev, Index test) {
  o.num_train = train;
  o.num_dev = dev;
  o.num_test = test;
  return o;
}

/// Checks every sequence of `d` against `o`, reading the context as an independent decoder
/// would: the first 2P tokens are the pairs; a position after them with a target must hold a
/// context key, and its target must be that key's value.
void check_split(const TokenSequenceDataset& d, const MqarOptions& o) {
  const MqarVocabulary vocab = MqarVocabulary::for_size(o.vocabulary_size);
  const Index P = o.num_pairs;
  const Index Q = o.queries();
  REQUIRE(d.vocabulary_size == o.vocabulary_size);
  REQUIRE(d.has_targets());
  REQUIRE(d.num_classes == 0);
  for (Index i = 0; i < d.size(); ++i) {
    INFO("sequence " << i);
    REQUIRE(d.length(i) == o.length);
    REQUIRE(d.labels[static_cast<std::size_t>(i)] == -1);
    const std::span<const TokenId> ids = d.sequence(i);
    const std::span<const TokenId> targets = d.sequence_targets(i);
    std::map<TokenId, TokenId> bound;  // key → value
    std::set<TokenId> values;
    bool context_ok = true;
    for (Index p = 0; p < P; ++p) {
      const TokenId key = ids[static_cast<std::size_t>(2 * p)];
      const TokenId value = ids[static_cast<std::size_t>(2 * p + 1)];
      context_ok = context_ok && key >= 1 && key < o.vocabulary_size / 2;
      context_ok = context_ok && value >= o.vocabulary_size / 2 && value < o.vocabulary_size;
      context_ok = context_ok && vocab.is_key(key) && vocab.is_value(value);
      context_ok = context_ok && bound.emplace(key, value).second && values.insert(value).second;
      context_ok = context_ok && targets[static_cast<std::size_t>(2 * p)] == no_target &&
                   targets[static_cast<std::size_t>(2 * p + 1)] == no_target;
    }
    REQUIRE(context_ok);  // P distinct keys, P distinct values, in their ranges, no targets
    Index asked = 0;
    bool queries_ok = true;
    bool filler_ok = true;
    std::set<TokenId> asked_keys;
    for (Index t = 2 * P; t < o.length; ++t) {
      const TokenId id = ids[static_cast<std::size_t>(t)];
      const TokenId target = targets[static_cast<std::size_t>(t)];
      filler_ok = filler_ok && id >= 0 && id < o.vocabulary_size;
      if (target == no_target) {
        // Without random filler, a position that asks nothing holds the filler token: the
        // targets then mark exactly the positions holding a key.
        if (!o.random_filler) filler_ok = filler_ok && id == MqarVocabulary::filler;
        continue;
      }
      ++asked;
      const auto it = bound.find(id);
      queries_ok = queries_ok && it != bound.end() && it->second == target;
      queries_ok = queries_ok && asked_keys.insert(id).second;
      if (o.placement == MqarPlacement::power_law) queries_ok = queries_ok && (t - 2 * P) % 2 == 0;
    }
    REQUIRE(queries_ok);
    REQUIRE(filler_ok);
    REQUIRE(asked == Q);
  }
}

/// FNV-1a over the ids and targets of a split: a fingerprint of the generated stream.
std::uint64_t fingerprint(const TokenSequenceDataset& d) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](std::uint64_t x) {
    for (int b = 0; b < 8; ++b, x >>= 8) h = (h ^ (x & 0xffU)) * 0x100000001b3ULL;
  };
  for (const TokenId id : d.ids) mix(static_cast<std::uint32_t>(id));
  for (const TokenId t : d.targets) mix(static_cast<std::uint32_t>(t));
  return h;
}

/// Generates with `o` and checks that it is refused with a message naming `field`.
void require_refused(const MqarOptions& o, const std::string& field) {
  INFO("field " << field);
  try {
    (void)coulomb::data::generate_mqar(o, 1);
    FAIL("no exception");
  } catch (const coulomb::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("'options." + field + "'"));
  }
}

}  // namespace

TEST_CASE("Mqar_QueriesTargetTheValueBoundToTheirKey", "[data]") {
  const std::uint64_t seed = coulomb_test::test_rng("Mqar_QueriesTargetTheValueBoundToTheirKey")();
  MqarOptions o = sized(MqarOptions{}, 400, 50, 50);
  SECTION("Zoology's defaults: L = 64, 4 pairs, every key asked, random filler") {}
  SECTION("filler 0, so the targets mark exactly the query positions") {
    o.random_filler = false;
  }
  SECTION("L = 256, 64 pairs (a full cell of the grid)") {
    o.length = 256;
    o.num_pairs = 64;
  }
  SECTION("fewer queries than pairs") {
    o.length = 128;
    o.num_pairs = 16;
    o.num_queries = 5;
    o.random_filler = false;
  }
  SECTION("uniform placement, with the positions all used") {
    o.placement = MqarPlacement::uniform;
    o.length = 48;
    o.num_pairs = 16;  // 2·16 + 16 = 48
    o.random_filler = false;
  }
  SECTION("uniform placement, few queries, a small vocabulary") {
    o.placement = MqarPlacement::uniform;
    o.vocabulary_size = 40;
    o.length = 30;
    o.num_pairs = 8;
    o.num_queries = 3;
  }
  const SequenceSplits s = coulomb::data::generate_mqar(o, seed);
  REQUIRE(s.train.size() == 400);
  REQUIRE(s.dev.size() == 50);
  REQUIRE(s.test.size() == 50);
  check_split(s.train, o);
  check_split(s.dev, o);
  check_split(s.test, o);
}

TEST_CASE("Mqar_GridShapesAreAcceptedAndOthersRefusedByName", "[data][input]") {
  const std::vector<MqarOptions> grid = coulomb::data::mqar_grid();
  CHECK(grid.size() == 17);
  std::set<std::pair<Index, Index>> cells;
  for (const MqarOptions& cell : grid) {
    INFO("L = " << cell.length << ", P = " << cell.num_pairs);
    CHECK(cell.vocabulary_size == 8'192);
    CHECK(cell.queries() == cell.num_pairs);
    cells.emplace(cell.length, cell.num_pairs);
    const MqarOptions o = sized(cell, 20, 5, 5);
    const SequenceSplits s = coulomb::data::generate_mqar(o, 5);
    check_split(s.train, o);
    check_split(s.test, o);
  }
  for (const Index L : coulomb::data::mqar_grid_lengths) {
    for (const Index P : coulomb::data::mqar_grid_pairs) {
      if (cells.count({L, P}) != 0) continue;
      // The three cells without room for 4P tokens: L = 64 with 32 or 64 pairs, 128 with 64.
      CHECK(4 * P > L);
      require_refused(sized(MqarOptions::zoology(L, P), 2, 0, 0), "length");
    }
  }
  // The uniform placement needs only 2P + Q positions.
  MqarOptions uniform = sized(MqarOptions::zoology(64, 30), 5, 0, 0);
  uniform.placement = MqarPlacement::uniform;
  uniform.num_queries = 4;
  CHECK_NOTHROW(coulomb::data::generate_mqar(uniform, 1));
  uniform.num_queries = 5;
  require_refused(uniform, "length");

  const MqarOptions o = sized(MqarOptions{}, 2, 0, 0);
  MqarOptions bad = o;
  bad.num_pairs = 0;
  require_refused(bad, "num_pairs");
  bad = o;
  bad.num_queries = 5;  // more than the 4 pairs
  require_refused(bad, "num_queries");
  bad = o;
  bad.num_queries = -1;
  require_refused(bad, "num_queries");
  bad = o;
  bad.vocabulary_size = 9;  // keys 1 … 3: fewer than 4
  require_refused(bad, "vocabulary_size");
  bad.vocabulary_size = 10;
  CHECK_NOTHROW(coulomb::data::generate_mqar(bad, 1));
  bad = o;
  bad.vocabulary_size = Index{1} << 32;
  require_refused(bad, "vocabulary_size");
  bad = o;
  bad.power_a = 1e6;  // huge exponents are fine: the weights are scaled by the largest
  CHECK_NOTHROW(coulomb::data::generate_mqar(bad, 1));
  for (const double a : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
    bad = o;
    bad.power_a = a;
    require_refused(bad, "power_a");
  }
  bad = o;
  bad.num_train = -1;
  require_refused(bad, "num_train");
  bad = o;
  bad.max_rejections_in_a_row = 0;
  require_refused(bad, "max_rejections_in_a_row");
}

TEST_CASE("Mqar_PlacementsFollowTheirDistributions", "[data]") {
  // One pair and one query, so each sequence shows where the query went; the frequency of
  // every slot or position is within 5 binomial standard errors of its probability.
  const std::uint64_t seed = coulomb_test::test_rng("Mqar_PlacementsFollowTheirDistributions")();
  MqarOptions o = sized(MqarOptions{}, 20'000, 0, 0);
  o.num_pairs = 1;
  o.random_filler = false;
  std::vector<double> p;  // probability of each slot (power law) or position (uniform)
  Index stride = 2;
  SECTION("power law, Zoology's a = 0.01") {
    o.length = 2 + 2 * 16;
    for (int g = 1; g <= 16; ++g) p.push_back(std::pow(g, 0.01 - 1.0));
  }
  SECTION("power law, a = 0.5") {
    o.length = 2 + 2 * 16;
    o.power_a = 0.5;
    for (int g = 1; g <= 16; ++g) p.push_back(std::pow(g, 0.5 - 1.0));
  }
  SECTION("power law, a = 3 (late slots likelier)") {
    o.length = 2 + 2 * 16;
    o.power_a = 3.0;
    for (int g = 1; g <= 16; ++g) p.push_back(std::pow(g, 3.0 - 1.0));
  }
  SECTION("uniform placement") {
    o.placement = MqarPlacement::uniform;
    o.length = 2 + 16;
    p.assign(16, 1.0);
    stride = 1;
  }
  double total = 0.0;
  for (const double w : p) total += w;
  for (double& w : p) w /= total;
  const SequenceSplits s = coulomb::data::generate_mqar(o, seed);
  std::vector<Index> seen(p.size(), 0);
  for (Index i = 0; i < s.train.size(); ++i) {
    const auto targets = s.train.sequence_targets(i);
    for (std::size_t t = 2; t < targets.size(); ++t)
      if (targets[t] != no_target) ++seen[(t - 2) / static_cast<std::size_t>(stride)];
  }
  const auto n = static_cast<double>(s.train.size());
  for (std::size_t g = 0; g < p.size(); ++g) {
    INFO("slot " << g << ": " << seen[g] << ", expected " << n * p[g]);
    CHECK(std::abs(static_cast<double>(seen[g]) - n * p[g]) <=
          5.0 * std::sqrt(n * p[g] * (1 - p[g])));
  }
}

TEST_CASE("Mqar_SameSeedSameSequencesOtherSeedOthers", "[data]") {
  const MqarOptions o = sized(MqarOptions::zoology(128, 16), 200, 20, 20);
  const SequenceSplits a = coulomb::data::generate_mqar(o, 7);
  const SequenceSplits b = coulomb::data::generate_mqar(o, 7);
  const SequenceSplits c = coulomb::data::generate_mqar(o, 8);
  CHECK(a.train.ids == b.train.ids);
  CHECK(a.train.targets == b.train.targets);
  CHECK(a.test.ids == b.test.ids);
  CHECK(a.train.ids != c.train.ids);
  CHECK(a.dev.ids != c.dev.ids);
  // Split k comes from its own stream: a larger training split leaves dev and test alone.
  MqarOptions more = o;
  more.num_train = 300;
  const SequenceSplits d = coulomb::data::generate_mqar(more, 7);
  CHECK(d.dev.ids == a.dev.ids);
  CHECK(d.test.targets == a.test.targets);
}

TEST_CASE("Mqar_StreamIsPinnedForASeed", "[data][regression]") {
  // Integer draws only, and power-law weights from std::pow rounded to 2⁻³⁰: these
  // fingerprints hold on every platform. A change of the stream changes them; say so in
  // CHANGELOG.md.
  MqarOptions o = sized(MqarOptions::zoology(64, 8), 10, 2, 2);
  CHECK(fingerprint(coulomb::data::generate_mqar(o, 2026).train) == 0x5def7ff8712517c8ULL);
  o.placement = MqarPlacement::uniform;
  CHECK(fingerprint(coulomb::data::generate_mqar(o, 2026).test) == 0x80e045bfc6740ea9ULL);
}

TEST_CASE("Mqar_SplitsHoldNoDuplicates", "[data]") {
  // Vocabulary 8: keys 1–3, values 4–7. One pair, L = 4, filler 0: the sequences are
  // k v k 0, so 3 × 4 = 12 exist, and all 12 can be asked for, but not 13.
  MqarOptions o = sized(MqarOptions{}, 8, 2, 2);
  o.vocabulary_size = 8;
  o.length = 4;
  o.num_pairs = 1;
  o.random_filler = false;
  const SequenceSplits s = coulomb::data::generate_mqar(o, 3);
  std::set<std::vector<TokenId>> all;
  for (const TokenSequenceDataset* d : {&s.train, &s.dev, &s.test})
    for (Index i = 0; i < d->size(); ++i) all.emplace(d->sequence(i).begin(), d->sequence(i).end());
  CHECK(all.size() == 12);
  o.num_test = 3;
  o.max_rejections_in_a_row = 20'000;
  CHECK_THROWS_WITH(coulomb::data::generate_mqar(o, 3),
                    Catch::Contains("20000 sequences in a row"));
}

}  // namespace data_mqar_test
