// SPDX-License-Identifier: MIT
// ListOps (data/listops.hpp): labels against an independent recursive-descent evaluator,
// structure limits, the length distribution against the exact one of LRA's branching process,
// determinism, distinct splits, the text and TSV forms, and the checks of the options.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <coulomb/data/listops.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace data_listops_test {

namespace {

using coulomb::Index;
using coulomb::data::ListOpsOptions;
using coulomb::data::ListOpsVocabulary;
using coulomb::data::SequenceSplits;
using coulomb::data::TokenId;
using coulomb::data::TokenSequenceDataset;
using V = ListOpsVocabulary;

/// What the independent evaluator finds in one expression.
struct Parsed {
  int value = -1;
  int depth = 0;  ///< tree depth, the root at 1 and digits counted (LRA's convention)
  int fewest_args = 1 << 30;
  int most_args = 0;
};

/// A recursive-descent evaluator of ListOps token ids, written apart from the library's:
/// expr := digit | operator expr+ ']'. MED sorts its arguments and takes the middle one, or
/// the floor of the mean of the two middle ones (Python's int(np.median) on digits).
class Evaluator {
 public:
  explicit Evaluator(std::span<const TokenId> tokens) : tokens_(tokens) {}

  /// Parses the whole span as one expression; throws std::runtime_error if it is not one.
  Parsed parse() {
    Parsed p;
    p.value = expression(1, p);
    if (pos_ != tokens_.size()) throw std::runtime_error("tokens after the expression");
    return p;
  }

 private:
  int expression(int depth, Parsed& p) {
    if (pos_ >= tokens_.size()) throw std::runtime_error("expression expected at the end");
    const TokenId id = tokens_[pos_++];
    p.depth = std::max(p.depth, depth);
    if (id >= V::first_digit && id <= V::first_digit + 9) return id - V::first_digit;
    if (id < V::op_min || id > V::op_sum_mod) throw std::runtime_error("unexpected token");
    std::vector<int> args;
    while (pos_ < tokens_.size() && tokens_[pos_] != V::close)
      args.push_back(expression(depth + 1, p));
    if (pos_ >= tokens_.size()) throw std::runtime_error("missing ']'");
    ++pos_;
    if (args.empty()) throw std::runtime_error("operator without arguments");
    p.fewest_args = std::min(p.fewest_args, static_cast<int>(args.size()));
    p.most_args = std::max(p.most_args, static_cast<int>(args.size()));
    std::sort(args.begin(), args.end());
    const std::size_t n = args.size();
    switch (id) {
      case V::op_min:
        return args.front();
      case V::op_max:
        return args.back();
      case V::op_median:
        return n % 2 == 1 ? args[n / 2] : (args[n / 2 - 1] + args[n / 2]) / 2;
      default: {
        int sum = 0;
        for (const int a : args) sum += a;
        return sum % 10;
      }
    }
  }

  std::span<const TokenId> tokens_;
  std::size_t pos_ = 0;
};

/// The ids of a text such as "[MAX 2 9 ]", by the names of ListOpsVocabulary.
std::vector<TokenId> ids_of(const std::string& text) {
  std::vector<TokenId> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    TokenId id = 0;
    while (id < V::size && V::name(id) != word) ++id;
    if (id == V::size) throw std::runtime_error("no token '" + word + "'");
    ids.push_back(id);
  }
  return ids;
}

/// Checks every sequence of `d` against the options and the independent evaluator.
void check_split(const TokenSequenceDataset& d, const ListOpsOptions& o) {
  REQUIRE(d.num_classes == 10);
  REQUIRE(d.vocabulary_size == V::size);
  REQUIRE_FALSE(d.has_targets());
  for (Index i = 0; i < d.size(); ++i) {
    std::span<const TokenId> seq = d.sequence(i);
    if (o.add_cls) {
      REQUIRE(seq.front() == V::cls);
      seq = seq.subspan(1);
    }
    INFO("sequence " << i);
    const auto length = static_cast<Index>(seq.size());
    REQUIRE(length >= o.min_length);
    REQUIRE(length <= o.max_length);
    // Brackets balance (an operator opens one) and nest at most max_depth − 1 deep.
    int open = 0;
    int deepest = 0;
    bool tokens_ok = true;  // every id a digit, an operator or ']', and no ']' unmatched
    for (const TokenId id : seq) {
      tokens_ok = tokens_ok && (V::is_digit(id) || V::is_operator(id) || id == V::close);
      open += V::is_operator(id) ? 1 : id == V::close ? -1 : 0;
      tokens_ok = tokens_ok && open >= 0;
      deepest = std::max(deepest, open);
    }
    REQUIRE(tokens_ok);
    REQUIRE(open == 0);
    REQUIRE(deepest <= o.max_depth - 1);
    Parsed p;
    REQUIRE_NOTHROW(p = Evaluator(seq).parse());
    REQUIRE(p.value == d.labels[static_cast<std::size_t>(i)]);
    REQUIRE(p.depth <= o.max_depth);
    if (p.most_args > 0) {
      REQUIRE(p.fewest_args >= 2);
      REQUIRE(p.most_args <= o.max_args);
    }
    REQUIRE(coulomb::data::listops_value(d.sequence(i)) == p.value);
  }
}

/// Exact probabilities of the lengths 0 … max_length of a tree of LRA's process (root at depth
/// 1; entries above max_length dropped), by convolving the length distributions of subtrees
/// depth by depth: f_D = δ₁; f_d(n) = (1 − p)·δ₁(n) + p/(A − 1)·Σ_{k=2..A} f_{d+1}^{∗k}(n − 2).
std::vector<double> exact_length_probabilities(const ListOpsOptions& o) {
  const auto n_max = static_cast<std::size_t>(o.max_length);
  std::vector<double> f(n_max + 1, 0.0);
  f[1] = 1.0;  // depth max_depth: a digit
  for (int depth = o.max_depth - 1; depth >= 1; --depth) {
    std::vector<double> next(n_max + 1, 0.0);
    next[1] = 1.0 - o.operator_probability;
    std::vector<double> power = f;  // f^{∗k}, from k = 1
    for (int k = 2; k <= o.max_args; ++k) {
      std::vector<double> conv(n_max + 1, 0.0);
      for (std::size_t a = 1; a <= n_max; ++a) {
        if (power[a] == 0.0) continue;
        for (std::size_t b = 1; a + b <= n_max; ++b) conv[a + b] += power[a] * f[b];
      }
      power = conv;
      for (std::size_t n = 2; n <= n_max; ++n)
        next[n] += o.operator_probability / (o.max_args - 1) * power[n - 2];
    }
    f = next;
  }
  return f;
}

/// All sequences of the three splits.
std::vector<std::vector<TokenId>> all_sequences(const SequenceSplits& s) {
  std::vector<std::vector<TokenId>> out;
  for (const TokenSequenceDataset* d : {&s.train, &s.dev, &s.test})
    for (Index i = 0; i < d->size(); ++i)
      out.emplace_back(d->sequence(i).begin(), d->sequence(i).end());
  return out;
}

/// FNV-1a over the ids and labels of a split: a fingerprint of the generated stream.
std::uint64_t fingerprint(const TokenSequenceDataset& d) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](std::uint64_t x) {
    for (int b = 0; b < 8; ++b, x >>= 8) h = (h ^ (x & 0xffU)) * 0x100000001b3ULL;
  };
  for (const TokenId id : d.ids) mix(static_cast<std::uint32_t>(id));
  for (const int label : d.labels) mix(static_cast<std::uint32_t>(label));
  return h;
}

/// Generates with `o` and checks that it is refused with a message naming `field`.
void require_refused(const ListOpsOptions& o, const std::string& field) {
  INFO("field " << field);
  try {
    (void)coulomb::data::generate_listops(o, 1);
    FAIL("no exception");
  } catch (const coulomb::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("'options." + field + "'"));
  }
}

/// Small options for the tests: the default task at reduced sizes.
ListOpsOptions small(Index train, Index dev, Index test) {
  ListOpsOptions o;
  o.num_train = train;
  o.num_dev = dev;
  o.num_test = test;
  return o;
}

}  // namespace

TEST_CASE("ListOps_VocabularyKeepsTheTextSpecialIds", "[data]") {
  STATIC_REQUIRE(std::is_same_v<coulomb::data::TokenId, coulomb::TokenId>);
  STATIC_REQUIRE(V::pad == coulomb::Vocabulary::pad_id);
  STATIC_REQUIRE(V::cls == coulomb::Vocabulary::cls_id);
  std::set<std::string_view> names;
  for (TokenId id = 0; id < V::size; ++id) names.insert(V::name(id));
  CHECK(names.size() == static_cast<std::size_t>(V::size));
  CHECK(V::name(V::size).empty());
  CHECK(V::name(-1).empty());
  CHECK(V::name(V::op_sum_mod) == "[SM");  // LRA's spelling of SUM_MOD
}

TEST_CASE("ListOps_OperatorsFollowLra", "[data]") {
  using coulomb::data::listops_value;
  CHECK(listops_value(ids_of("[MAX 2 9 [MIN 4 7 ] 0 ]")) == 9);
  CHECK(listops_value(ids_of("[MIN 2 9 [MIN 4 7 ] 0 ]")) == 0);
  CHECK(listops_value(ids_of("[MED 1 2 ]")) == 1);      // int(1.5)
  CHECK(listops_value(ids_of("[MED 9 1 6 4 ]")) == 5);  // (4 + 6) / 2
  CHECK(listops_value(ids_of("[MED 3 8 7 ]")) == 7);
  CHECK(listops_value(ids_of("[SM 9 9 9 ]")) == 7);  // 27 mod 10
  CHECK(listops_value(ids_of("[SM [MAX 5 6 ] [MED 2 3 ] ]")) == 8);
  CHECK(listops_value(ids_of("7")) == 7);
  std::vector<TokenId> with_specials = ids_of("[MAX 1 3 ]");
  with_specials.insert(with_specials.begin(), V::cls);
  with_specials.push_back(V::pad);
  CHECK(listops_value(with_specials) == 3);
}

TEST_CASE("ListOps_ValueRefusesMalformedExpressions", "[data][input]") {
  using coulomb::data::listops_value;
  for (const char* bad : {"]", "[MAX ]", "[MAX 1", "1 2", "[MAX 1 ] 2", "[MIN 1 ] ]", ""}) {
    INFO(bad);
    CHECK_THROWS_AS(listops_value(ids_of(bad)), coulomb::invalid_argument);
  }
  const std::vector<TokenId> unknown = {V::op_max, 99, V::close};
  CHECK_THROWS_WITH(listops_value(unknown), Catch::Contains("position 1"));
  const std::vector<TokenId> sep = {V::op_max, V::digit(1), V::sep, V::close};
  CHECK_THROWS_AS(listops_value(sep), coulomb::invalid_argument);
}

TEST_CASE("ListOps_LabelsMatchAnIndependentEvaluator", "[data]") {
  const std::uint64_t seed = coulomb_test::test_rng("ListOps_LabelsMatchAnIndependentEvaluator")();
  SECTION("the default task") {
    const ListOpsOptions o = small(1200, 150, 150);
    const SequenceSplits s = coulomb::data::generate_listops(o, seed);
    REQUIRE(s.train.size() == 1200);
    REQUIRE(s.dev.size() == 150);
    REQUIRE(s.test.size() == 150);
    check_split(s.train, o);
    check_split(s.dev, o);
    check_split(s.test, o);
    // Every class occurs (MAX and MIN make 0 and 9 the commonest).
    const std::vector<int>& labels = s.train.labels;
    for (int c = 0; c < 10; ++c) CHECK(std::count(labels.begin(), labels.end(), c) > 0);
  }
  SECTION("shallow trees, few arguments, [CLS], a high operator probability") {
    ListOpsOptions o = small(1500, 0, 100);
    o.min_length = 10;
    o.max_length = 40;
    o.max_depth = 4;
    o.max_args = 3;
    o.operator_probability = 0.6;
    o.add_cls = true;
    const SequenceSplits s = coulomb::data::generate_listops(o, seed);
    check_split(s.train, o);
    check_split(s.test, o);
    CHECK(s.dev.size() == 0);
  }
  SECTION("single digits when min_length is 1") {
    ListOpsOptions o = small(10, 0, 0);  // the ten digits, each once
    o.min_length = 1;
    o.max_length = 1;
    const SequenceSplits s = coulomb::data::generate_listops(o, seed);
    check_split(s.train, o);
    std::vector<int> labels = s.train.labels;
    std::sort(labels.begin(), labels.end());
    CHECK(labels == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  }
}

TEST_CASE("ListOps_LengthsFollowTheExactDistribution", "[data]") {
  // The kept lengths follow LRA's process conditioned on [min_length, max_length]: compared
  // with the exact distribution by the Kolmogorov–Smirnov distance (critical value 2.45/√n at
  // the 0.001 % level) and by ten equal-width bins, each within 5 binomial standard errors.
  const std::uint64_t seed = coulomb_test::test_rng("ListOps_LengthsFollowTheExactDistribution")();
  ListOpsOptions o = small(4000, 0, 0);
  bool spread = false;  // the default range: lengths spread over the whole range
  SECTION("the default range") {
    spread = true;
  }
  SECTION("LRA's range, 501 to 1,999 (most near the minimum)") {
    o = ListOpsOptions::lra();
    o.num_train = 1500;
    o.num_dev = 0;
    o.num_test = 0;
  }
  SECTION("a narrow range of shallow trees (most near the minimum)") {
    o.min_length = 20;
    o.max_length = 60;
    o.max_depth = 5;
    o.max_args = 4;
  }
  const std::vector<double> f = exact_length_probabilities(o);
  double in_range = 0.0;
  for (Index n = o.min_length; n <= o.max_length; ++n) in_range += f[static_cast<std::size_t>(n)];
  REQUIRE(in_range > 0.0);

  const SequenceSplits s = coulomb::data::generate_listops(o, seed);
  std::vector<Index> counts(static_cast<std::size_t>(o.max_length + 1), 0);
  const Index cls = o.add_cls ? 1 : 0;
  for (Index i = 0; i < s.train.size(); ++i)
    ++counts[static_cast<std::size_t>(s.train.length(i) - cls)];
  const auto n = static_cast<double>(s.train.size());

  double ks = 0.0;
  double cdf_exact = 0.0;
  double cdf_seen = 0.0;
  for (Index len = o.min_length; len <= o.max_length; ++len) {
    cdf_exact += f[static_cast<std::size_t>(len)] / in_range;
    cdf_seen += static_cast<double>(counts[static_cast<std::size_t>(len)]) / n;
    ks = std::max(ks, std::abs(cdf_exact - cdf_seen));
  }
  INFO("KS distance " << ks);
  CHECK(ks < 2.45 / std::sqrt(n));

  const Index width = (o.max_length - o.min_length + 1 + 9) / 10;
  Index upper_half = 0;
  for (Index b = 0; b < 10; ++b) {
    double p = 0.0;
    Index seen = 0;
    for (Index len = o.min_length + b * width;
         len < o.min_length + (b + 1) * width && len <= o.max_length; ++len) {
      p += f[static_cast<std::size_t>(len)] / in_range;
      seen += counts[static_cast<std::size_t>(len)];
    }
    const double se = std::sqrt(n * p * (1.0 - p));
    INFO("bin " << b << ": " << seen << " lengths, expected " << n * p);
    CHECK(std::abs(static_cast<double>(seen) - n * p) <= 5.0 * se + 1.0);
    // Not piled at the minimum: over the default range LRA's process spreads the kept lengths
    // nearly evenly (exact bin shares 7–13 %), so no tenth of the range holds a fifth of them,
    // and the upper half holds more than a third.
    if (spread) CHECK(static_cast<double>(seen) < n / 5.0);
    if (spread && b >= 5) upper_half += seen;
  }
  if (spread) CHECK(static_cast<double>(upper_half) > n / 3.0);
}

TEST_CASE("ListOps_SameSeedSameSequencesOtherSeedOthers", "[data]") {
  const ListOpsOptions o = small(300, 50, 50);
  const SequenceSplits a = coulomb::data::generate_listops(o, 7);
  const SequenceSplits b = coulomb::data::generate_listops(o, 7);
  const SequenceSplits c = coulomb::data::generate_listops(o, 8);
  CHECK(a.train.ids == b.train.ids);
  CHECK(a.train.labels == b.train.labels);
  CHECK(a.test.ids == b.test.ids);
  CHECK(a.train.ids != c.train.ids);
  CHECK(a.test.ids != c.test.ids);
  // Split k comes from its own stream: a larger training split leaves dev and test alone.
  ListOpsOptions more = o;
  more.num_train = 400;
  const SequenceSplits d = coulomb::data::generate_listops(more, 7);
  CHECK(d.dev.ids == a.dev.ids);
  CHECK(d.test.ids == a.test.ids);
  CHECK(std::equal(a.train.ids.begin(), a.train.ids.end(), d.train.ids.begin()));
}

TEST_CASE("ListOps_StreamIsPinnedForASeed", "[data][regression]") {
  // Integer draws only: these fingerprints hold on every platform. A change of the generator's
  // stream changes them; say so in CHANGELOG.md.
  const SequenceSplits s = coulomb::data::generate_listops(small(20, 5, 5), 2026);
  CHECK(fingerprint(s.train) == 0x551bae626857ab9eULL);
  CHECK(fingerprint(s.test) == 0x8b5558c0491cc0d1ULL);
}

TEST_CASE("ListOps_SplitsHoldNoDuplicates", "[data]") {
  SECTION("the default task") {
    const SequenceSplits s = coulomb::data::generate_listops(small(1000, 200, 200), 3);
    const auto all = all_sequences(s);
    CHECK(std::set<std::vector<TokenId>>(all.begin(), all.end()).size() == all.size());
  }
  SECTION("a task with 400 distinct expressions, all asked for") {
    // Length 4 at depth 2: [op d d ], 4 operators × 100 digit pairs.
    ListOpsOptions o = small(300, 50, 50);
    o.min_length = 4;
    o.max_length = 4;
    o.max_depth = 2;
    o.max_args = 2;
    const SequenceSplits s = coulomb::data::generate_listops(o, 3);
    const auto all = all_sequences(s);
    CHECK(all.size() == 400);
    CHECK(std::set<std::vector<TokenId>>(all.begin(), all.end()).size() == 400);
    o.num_test = 51;  // one more than exist
    o.max_rejections_in_a_row = 20'000;
    CHECK_THROWS_WITH(coulomb::data::generate_listops(o, 3),
                      Catch::Contains("20000 trees in a row"));
  }
}

TEST_CASE("ListOps_TextAndTsvRoundTrip", "[data]") {
  const std::vector<TokenId> expr = ids_of("[MAX 2 9 [MIN 4 7 ] 0 ]");
  CHECK(coulomb::data::listops_text(expr) == "[MAX 2 9 [MIN 4 7 ] 0 ]");
  const std::vector<TokenId> bad = {V::op_max, V::unk, V::close};
  CHECK_THROWS_AS(coulomb::data::listops_text(bad), coulomb::invalid_argument);

  ListOpsOptions o = small(40, 0, 0);
  o.add_cls = true;
  const SequenceSplits s = coulomb::data::generate_listops(o, 11);
  const std::string tsv = coulomb::data::listops_tsv(s.train);
  CHECK(tsv.rfind("Source\tTarget\n", 0) == 0);
  coulomb::TextReadOptions read;
  read.num_classes = 10;
  const coulomb::TextDataset text = coulomb::parse_text_dataset(
      tsv, "listops.tsv", coulomb::TextColumns{"Target", "Source", ""}, read);
  REQUIRE(text.size() == s.train.size());
  for (Index i = 0; i < text.size(); ++i) {
    const auto& ex = text.examples[static_cast<std::size_t>(i)];
    CHECK(ex.label == s.train.labels[static_cast<std::size_t>(i)]);
    std::vector<TokenId> back = ids_of(ex.text_a);
    back.insert(back.begin(), V::cls);
    CHECK(std::equal(back.begin(), back.end(), s.train.sequence(i).begin(),
                     s.train.sequence(i).end()));
  }
}

TEST_CASE("ListOps_InvalidOptionsAreRefusedByName", "[data][input]") {
  ListOpsOptions o = small(10, 1, 1);
  {
    ListOpsOptions bad = o;
    bad.min_length = 600;  // above max_length = 500
    require_refused(bad, "max_length");
  }
  {
    ListOpsOptions bad = o;
    bad.min_length = 0;
    require_refused(bad, "min_length");
  }
  {
    ListOpsOptions bad = o;
    bad.max_depth = 0;
    require_refused(bad, "max_depth");
  }
  {
    ListOpsOptions bad = o;
    bad.max_args = 1;
    require_refused(bad, "max_args");
  }
  for (const double p : {0.0, -0.5, 1.5, std::nan("")}) {
    ListOpsOptions bad = o;
    bad.operator_probability = p;
    require_refused(bad, "operator_probability");
  }
  {
    ListOpsOptions bad = o;
    bad.num_dev = -1;
    require_refused(bad, "num_dev");
    bad = o;
    bad.max_rejections_in_a_row = 0;
    require_refused(bad, "max_rejections_in_a_row");
  }
  {
    // Depth 3 with 3 arguments reaches at most 2 + 3·(2 + 3) = 17 tokens.
    ListOpsOptions bad = o;
    bad.max_depth = 3;
    bad.max_args = 3;
    bad.min_length = 18;
    bad.max_length = 30;
    require_refused(bad, "min_length");
    bad.min_length = 17;
    CHECK_NOTHROW(coulomb::data::generate_listops(bad, 1));
  }
  const ListOpsOptions lra = ListOpsOptions::lra();
  CHECK(lra.num_train == 96'000);
  CHECK(lra.num_dev == 2'000);
  CHECK(lra.num_test == 2'000);
  CHECK(lra.min_length == 501);
  CHECK(lra.max_length == 1'999);
  CHECK(lra.max_depth == 10);
  CHECK(lra.max_args == 10);
  CHECK(lra.operator_probability == 0.25);
}

}  // namespace data_listops_test
