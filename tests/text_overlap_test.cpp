// SPDX-License-Identifier: MIT
// Word keys and the lexical overlap features of sentence pairs (text/overlap.hpp), as the
// encoder records them, batches carry them, perturbations move them and their moments are taken.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace text_overlap_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::TokenId;
using coulomb::Vocabulary;
using Features = std::array<double, coulomb::pair_overlap_features>;

coulomb::TextDataset pairs(const std::vector<std::pair<std::string, std::string>>& texts) {
  coulomb::TextDataset d;
  d.is_pair = true;
  int label = 0;
  for (const auto& [a, b] : texts) d.examples.push_back({a, b, label++ % 2, 0});
  return d;
}

// The features of one pair, encoded with a vocabulary built from `train`.
Features overlap_of(const coulomb::TextEncoder& encoder, const std::string& a,
                    const std::string& b) {
  const coulomb::EncodedText e = encoder.encode(a, b);
  Features f{};
  coulomb::pair_overlap(e.keys, e.segments, f);
  return f;
}

}  // namespace

TEST_CASE("Overlap_FeaturesCountSharedNgrams", "[text][overlap]") {
  const auto train = pairs({{"the cat sat on the mat", "a dog ran"}});
  const coulomb::TextEncoder encoder(coulomb::build_vocabulary(train), {.max_length = 64});

  SECTION("a sentence paired with itself: every fraction is 1") {
    const Features f = overlap_of(encoder, "the cat sat on the mat", "the cat sat on the mat");
    for (const double x : f) CHECK(x == 1.0);
  }
  SECTION("no word in common: every fraction is 0") {
    const Features f = overlap_of(encoder, "the cat sat", "a dog ran");
    for (const double x : f) CHECK(x == 0.0);
  }
  SECTION("counted by hand: distinct n-grams, the fraction of each side found in the other") {
    // a: the cat sat on the mat -> unigrams {the, cat, sat, on, mat} (5), bigrams {the cat,
    //    cat sat, sat on, on the, the mat} (5), trigrams 4.
    // b: the cat lay on the mat -> unigrams {the, cat, lay, on, mat} (5), bigrams {the cat,
    //    cat lay, lay on, on the, the mat} (5), trigrams {the cat lay, cat lay on, lay on the,
    //    on the mat} (4).
    // Shared: unigrams 4, bigrams 3 (the cat, on the, the mat), trigrams 1 (on the mat).
    const Features f = overlap_of(encoder, "the cat sat on the mat", "the cat lay on the mat");
    CHECK(f[0] == Approx(4.0 / 5.0));
    CHECK(f[1] == Approx(4.0 / 5.0));
    CHECK(f[2] == Approx(3.0 / 5.0));
    CHECK(f[3] == Approx(3.0 / 5.0));
    CHECK(f[4] == Approx(1.0 / 4.0));
    CHECK(f[5] == Approx(1.0 / 4.0));
    // Sentences of different lengths: a's fraction and b's fraction differ.
    // a: cat sat (unigrams 2, bigrams 1), b: the cat sat down (4, 3, 2): shared 2, 1, 0.
    const Features g = overlap_of(encoder, "cat sat", "the cat sat down");
    CHECK(g[0] == Approx(1.0));
    CHECK(g[1] == Approx(2.0 / 4.0));
    CHECK(g[2] == Approx(1.0));
    CHECK(g[3] == Approx(1.0 / 3.0));
    CHECK(g[4] == 0.0);  // a has no trigram
    CHECK(g[5] == 0.0);
  }
  SECTION("exchanging the sentences exchanges the two fractions of each n") {
    const Features f = overlap_of(encoder, "cat sat", "the cat sat down");
    const Features g = overlap_of(encoder, "the cat sat down", "cat sat");
    for (std::size_t n = 0; n < 3; ++n) {
      CHECK(f[2 * n] == g[2 * n + 1]);
      CHECK(f[2 * n + 1] == g[2 * n]);
    }
  }
  SECTION("words the vocabulary does not know keep their identity") {
    // "zurich" and "1998" are [UNK] for this vocabulary, but a name matches only itself.
    const auto same = encoder.encode("zurich in 1998", "zurich 1998");
    CHECK(std::count(same.ids.begin(), same.ids.end(), Vocabulary::unk_id) == 5);
    Features f{};
    coulomb::pair_overlap(same.keys, same.segments, f);
    CHECK(f[0] == Approx(2.0 / 3.0));
    CHECK(f[1] == 1.0);
    const Features g = overlap_of(encoder, "zurich in 1998", "geneva 2003");
    CHECK(g[0] == 0.0);
    CHECK(g[1] == 0.0);
  }
  SECTION("the tokenizer's normalization applies: case and punctuation") {
    const Features f = overlap_of(encoder, "The CAT, sat.", "the cat sat");
    // a: the , cat , sat . -> unigrams {the, cat, ",", sat, "."}: 3 of 5 in b; b: 3 of 3.
    CHECK(f[0] == Approx(3.0 / 5.0));
    CHECK(f[1] == 1.0);
  }
}

TEST_CASE("Overlap_KeysOfTheEncoderAndTheirChecks", "[text][overlap][input]") {
  const auto train = pairs({{"the cat sat", "a dog ran"}});
  const coulomb::TextEncoder encoder(coulomb::build_vocabulary(train),
                                     {.max_length = 6, .add_cls = true});
  // [CLS] the cat [SEP] a dog (truncated): special tokens have key 0, every word its word_key.
  const coulomb::EncodedText e = encoder.encode("the cat sat", "a dog ran");
  REQUIRE(e.keys.size() == e.ids.size());
  const std::vector<std::uint64_t> expected = {
      0, coulomb::word_key("the"), coulomb::word_key("cat"),
      0, coulomb::word_key("a"),   coulomb::word_key("dog")};
  CHECK(e.keys == expected);
  CHECK(e.truncated);
  // An empty sentence is one [UNK] placeholder without a key, so its fractions are 0.
  const coulomb::EncodedText empty = encoder.encode("", "the cat");
  CHECK(empty.keys.front() == 0);
  CHECK(empty.keys.at(1) == 0);
  Features f{};
  coulomb::pair_overlap(empty.keys, empty.segments, f);
  for (const double x : f) CHECK(x == 0.0);
  // Single sentences have keys too.
  CHECK(encoder.encode("the dog").keys ==
        std::vector<std::uint64_t>{0, coulomb::word_key("the"), coulomb::word_key("dog")});
  // word_key is FNV-1a and never 0, the key of special tokens.
  CHECK(coulomb::word_key("") == 14695981039346656037ULL);
  CHECK(coulomb::word_key("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(coulomb::word_key("cat") != coulomb::word_key("cab"));

  CHECK_THROWS_WITH(coulomb::pair_overlap(e.keys, std::span(e.segments).first(3), f),
                    Contains("'keys' and 'segments'"));

  // A dataset holds keys for every sequence or for none.
  coulomb::EncodedDataset d = encoder.encode(train);
  CHECK(d.has_keys());
  CHECK(d.word_keys(0).size() == static_cast<std::size_t>(d.length(0)));
  const std::vector<TokenId> ids = {4, 5};
  const std::vector<std::uint8_t> seg = {0, 0};
  CHECK_THROWS_WITH(d.push_back(ids, seg, 0), Contains("holds word keys"));
  coulomb::EncodedDataset plain;
  plain.push_back(ids, seg, 0);
  CHECK_FALSE(plain.has_keys());
  CHECK(plain.word_keys(0).empty());
  const std::vector<std::uint64_t> keys = {7, 8};
  CHECK_THROWS_WITH(plain.push_back(ids, seg, keys, 0), Contains("without word keys"));
  CHECK_THROWS_WITH(d.push_back(ids, seg, std::span(keys).first(1), 0),
                    Contains("'seq_ids' and 'seq_keys'"));
}

TEST_CASE("Overlap_BatchesMomentsAndPerturbations", "[text][overlap]") {
  const auto train = pairs({{"the cat sat on the mat", "the cat lay on the mat"},
                            {"a dog ran", "the dog ran home"},
                            {"birds fly south", "fish swim"},
                            {"it rains", "it rains"},
                            {"one two three four", "four three two one"}});
  const coulomb::TextEncoder encoder(coulomb::build_vocabulary(train), {.max_length = 32});
  const coulomb::EncodedDataset data = encoder.encode(train);

  // A batch carries each pair's features, in batch order.
  coulomb::TokenBatch batch;
  const std::vector<Index> pick = {3, 0, 4};
  coulomb::make_batch(data, pick, batch);
  REQUIRE(batch.overlap.rows() == 3);
  REQUIRE(batch.overlap.cols() == coulomb::pair_overlap_features);
  for (Index b = 0; b < 3; ++b) {
    const auto& ex = train.examples[static_cast<std::size_t>(pick[static_cast<std::size_t>(b)])];
    const Features f = overlap_of(encoder, ex.text_a, ex.text_b);
    for (Index k = 0; k < coulomb::pair_overlap_features; ++k)
      CHECK(batch.overlap(b, k) == f[static_cast<std::size_t>(k)]);
  }
  CHECK(batch.overlap(0, 0) == 1.0);  // "it rains" twice
  CHECK(batch.overlap(2, 2) == 0.0);  // the same words in reverse share no bigram
  CHECK(batch.overlap(2, 0) == 1.0);  // but every word

  // Single sentences and datasets without keys give no features.
  coulomb::EncodedDataset singles = data;
  singles.is_pair = false;
  coulomb::make_batch(singles, pick, batch);
  CHECK(batch.overlap.size() == 0);

  // Moments over the dataset's pairs.
  const coulomb::PairOverlapMoments m = coulomb::pair_overlap_moments(data);
  REQUIRE(m.mean.size() == coulomb::pair_overlap_features);
  for (Index k = 0; k < coulomb::pair_overlap_features; ++k) {
    double sum = 0.0;
    double squares = 0.0;
    for (const auto& ex : train.examples) {
      const double x = overlap_of(encoder, ex.text_a, ex.text_b)[static_cast<std::size_t>(k)];
      sum += x;
      squares += x * x;
    }
    const double mean = sum / 5.0;
    CHECK(m.mean(k) == Approx(mean));
    CHECK(m.sd(k) == Approx(std::sqrt(squares / 5.0 - mean * mean)).margin(1e-12));
  }
  CHECK_THROWS_WITH(coulomb::pair_overlap_moments(singles), Contains("single sentences"));
  CHECK_THROWS_WITH(coulomb::pair_overlap_moments(coulomb::EncodedDataset{.is_pair = true}),
                    Contains("empty"));

  // A perturbation moves each key with its token and draws as it does without keys.
  for (const auto kind : {coulomb::PerturbationKind::drop, coulomb::PerturbationKind::swap}) {
    const coulomb::Perturbation p{kind, 0.4};
    const coulomb::EncodedDataset keyed = coulomb::perturb_dataset(data, p, std::uint64_t{5});
    coulomb::EncodedDataset unkeyed;
    unkeyed.is_pair = true;
    for (Index i = 0; i < data.size(); ++i)
      unkeyed.push_back(data.sequence(i), data.segment_ids(i),
                        data.labels[static_cast<std::size_t>(i)]);
    const coulomb::EncodedDataset plain = coulomb::perturb_dataset(unkeyed, p, std::uint64_t{5});
    CHECK(keyed.ids == plain.ids);
    CHECK(keyed.segments == plain.segments);
    CHECK_FALSE(plain.has_keys());
    REQUIRE(keyed.has_keys());
    CHECK(keyed.ids != data.ids);
    // Every token keeps the key of its word (each word of this vocabulary has its own id).
    const Vocabulary& vocab = encoder.vocabulary();
    for (std::size_t t = 0; t < keyed.ids.size(); ++t) {
      const TokenId id = keyed.ids[t];
      CHECK(keyed.keys[t] == (Vocabulary::is_special(id) ? 0 : coulomb::word_key(vocab.token(id))));
    }
  }
}

}  // namespace text_overlap_test
