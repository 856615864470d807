// SPDX-License-Identifier: MIT
// Tokenizer, vocabulary (building, save/load) and encoder (truncation, pairs, segment ids) of
// text/tokenizer.hpp, text/vocabulary.hpp and text/encoder.hpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace text_vocabulary_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::TokenId;
using coulomb::Vocabulary;
using Strings = std::vector<std::string>;

coulomb::TextDataset make_dataset(const Strings& texts, const Strings& second = {}) {
  coulomb::TextDataset d;
  d.is_pair = !second.empty();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    coulomb::TextExample e;
    e.text_a = texts[i];
    if (d.is_pair) e.text_b = second.at(i);
    e.label = static_cast<int>(i % 2);
    e.line = i + 2;
    d.examples.push_back(e);
  }
  return d;
}

/// A random string over an alphabet rich in blanks, punctuation, capitals and UTF-8 pieces.
std::string random_text(coulomb::Rng& rng, std::size_t max_len) {
  static const std::vector<std::string> pieces = {" ",
                                                  "\t",
                                                  "\n",
                                                  "\r",
                                                  "a",
                                                  "Z",
                                                  "q",
                                                  "'",
                                                  ",",
                                                  ".",
                                                  "-",
                                                  "[",
                                                  "]",
                                                  "7",
                                                  "é",
                                                  "\xC3\x89",
                                                  "\xE2\x80\x9C",
                                                  "\xE2\x80\xA6",
                                                  "\xE2\x82\xAC",
                                                  "\xC3",
                                                  "\xE2",
                                                  "\x80",
                                                  "\xFF",
                                                  std::string(1, '\0')};
  std::string s;
  const auto len = static_cast<std::size_t>(coulomb::uniform_index(max_len + 1, rng));
  for (std::size_t k = 0; k < len; ++k) {
    s += pieces[static_cast<std::size_t>(coulomb::uniform_index(pieces.size(), rng))];
  }
  return s;
}

/// Reference truncation of a pair to a word budget T (longest first, ties from the second).
std::pair<std::size_t, std::size_t> reference_pair_lengths(std::size_t la, std::size_t lb,
                                                           std::size_t T) {
  if (la + lb <= T) return {la, lb};
  const std::size_t s = std::min(la, lb);
  if (2 * s <= T) return la <= lb ? std::pair{la, T - la} : std::pair{T - lb, lb};
  return {(T + 1) / 2, T / 2};
}

}  // namespace

TEST_CASE("Tokenizer_SplitsBlanksPunctuationAndLowercases", "[text][tokenizer]") {
  const coulomb::Tokenizer tok;
  CHECK(tok.tokenize("Hello, WORLD!  isn't\tit") ==
        Strings{"hello", ",", "world", "!", "isn", "'", "t", "it"});
  CHECK(tok.tokenize(" . . . grows -lrb- flimsier ") ==
        Strings{".", ".", ".", "grows", "-", "lrb", "-", "flimsier"});
  // Latin-1 capitals are lower-cased; General Punctuation characters are tokens of their own.
  CHECK(tok.tokenize("\xC3\x89t\xC3\xA9 \xE2\x80\x9Cgreat\xE2\x80\x9D\xE2\x80\xA6") ==
        Strings{"\xC3\xA9t\xC3\xA9", "\xE2\x80\x9C", "great", "\xE2\x80\x9D", "\xE2\x80\xA6"});
  // × (U+00D7) has no small letter; € (U+20AC) is not punctuation.
  CHECK(tok.tokenize("\xC3\x97 5\xE2\x82\xAC") == Strings{"\xC3\x97", "5\xE2\x82\xAC"});
  CHECK(tok.tokenize("").empty());
  CHECK(tok.tokenize(" \t\r\n ").empty());

  const coulomb::Tokenizer raw({.lowercase = false, .split_punctuation = false});
  CHECK(raw.tokenize("Hello, WORLD! isn't") == Strings{"Hello,", "WORLD!", "isn't"});
}

TEST_CASE("Tokenizer_LosesOnlyBlanksOnArbitraryBytes", "[text][tokenizer][input]") {
  // Tokens are non-empty and blank-free, and their concatenation is the (lower-cased) text
  // without its blanks: nothing is lost or invented, whatever the bytes.
  auto rng = coulomb_test::test_rng("Tokenizer_LosesOnlyBlanksOnArbitraryBytes");
  for (const bool lower : {false, true}) {
    for (const bool punct : {false, true}) {
      const coulomb::Tokenizer tok({.lowercase = lower, .split_punctuation = punct});
      for (int trial = 0; trial < 400; ++trial) {
        const std::string text = random_text(rng, 40);
        std::string expected;
        if (lower) {
          coulomb::Tokenizer::lowercase_into(text, expected);
        } else {
          expected = text;
        }
        std::erase_if(expected, [](char c) { return coulomb::Tokenizer::is_blank(c); });
        std::string joined;
        for (const auto& t : tok.tokenize(text)) {
          REQUIRE_FALSE(t.empty());
          REQUIRE(std::none_of(t.begin(), t.end(), coulomb::Tokenizer::is_blank));
          if (punct && coulomb::Tokenizer::punctuation_length(t, 0) > 0) {
            REQUIRE(coulomb::Tokenizer::punctuation_length(t, 0) == t.size());
          }
          joined += t;
        }
        REQUIRE(joined == expected);
      }
    }
  }
}

TEST_CASE("Vocabulary_MinFrequencyOrderAndUnknownWords", "[text][vocabulary]") {
  const auto train = make_dataset({"the cat sat", "the dog sat", "The cat ran"});
  // counts: the 3, cat 2, sat 2, dog 1, ran 1
  const auto all = coulomb::build_vocabulary(train);
  REQUIRE(all.size() == Vocabulary::num_special + 5);
  CHECK(all.token(Vocabulary::pad_id) == "[PAD]");
  CHECK(all.token(Vocabulary::unk_id) == "[UNK]");
  CHECK(all.token(Vocabulary::sep_id) == "[SEP]");
  CHECK(all.token(Vocabulary::cls_id) == "[CLS]");
  // By decreasing count, then byte order.
  CHECK(all.token(4) == "the");
  CHECK(all.token(5) == "cat");
  CHECK(all.token(6) == "sat");
  CHECK(all.token(7) == "dog");
  CHECK(all.token(8) == "ran");
  CHECK(all.count(4) == 3);
  CHECK(all.count(Vocabulary::pad_id) == 0);

  const auto frequent = coulomb::build_vocabulary(train, {.min_frequency = 2});
  CHECK(frequent.size() == Vocabulary::num_special + 3);
  CHECK(frequent.id("dog") == Vocabulary::unk_id);
  CHECK(frequent.id("cat") == 5);
  CHECK_FALSE(frequent.find("ran").has_value());
  // Every word kept has count ≥ min_frequency, every word left out has less.
  coulomb::VocabularyBuilder builder;
  builder.add_dataset(train);
  for (const auto& [word, count] : builder.counts()) {
    CHECK(frequent.contains(word) == (count >= 2));
  }

  const auto small = coulomb::build_vocabulary(train, {.max_size = Vocabulary::num_special + 2});
  CHECK(small.size() == Vocabulary::num_special + 2);
  CHECK(small.contains("cat"));
  CHECK_FALSE(small.contains("sat"));

  CHECK_THROWS_AS(coulomb::build_vocabulary(train, {.min_frequency = 0}),
                  coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::build_vocabulary(train, {.max_size = 2}), coulomb::invalid_argument);
  CHECK_THROWS_AS(all.token(9), coulomb::invalid_argument);
  CHECK_THROWS_AS(all.token(-1), coulomb::invalid_argument);
  CHECK_THROWS_AS(Vocabulary::from_counts(std::map<std::string, int>{{"a b", 3}}),
                  coulomb::invalid_argument);
}

TEST_CASE("Vocabulary_SpecialNamesInTextAreOrdinaryWords", "[text][vocabulary][input]") {
  // Without punctuation splitting "[SEP]" survives tokenization; it must not become a separator.
  const coulomb::TokenizerOptions raw{.lowercase = false, .split_punctuation = false};
  const auto vocab = coulomb::build_vocabulary(make_dataset({"[SEP] [PAD] x", "[SEP] x"}), {}, raw);
  CHECK(vocab.size() == Vocabulary::num_special + 1);
  const coulomb::TextEncoder enc(vocab);
  const auto e = enc.encode("[SEP] x [CLS]");
  CHECK(e.ids == std::vector<TokenId>{Vocabulary::unk_id, 4, Vocabulary::unk_id});
}

TEST_CASE("Vocabulary_SaveLoadRoundTrip", "[text][vocabulary][io]") {
  const coulomb::TokenizerOptions options{.lowercase = false, .split_punctuation = true};
  const auto vocab = coulomb::build_vocabulary(
      make_dataset({"Caf\xC3\xA9 au lait , s'il vous pla\xC3\xAEt", "au revoir \xE2\x80\xA6 !"}),
      {}, options);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("coulomb_text_vocab_" + std::to_string(coulomb_test::base_seed()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "vocab.txt").string();
  vocab.save(path);
  const auto loaded = Vocabulary::load(path);
  std::filesystem::remove_all(dir);
  CHECK(loaded == vocab);
  CHECK(loaded.tokenizer_options() == options);
  for (TokenId id = 0; id < vocab.size(); ++id) {
    CHECK(loaded.token(id) == vocab.token(id));
    if (!Vocabulary::is_special(id)) CHECK(loaded.id(vocab.token(id)) == id);
  }
  std::ostringstream out;
  loaded.write(out);
  CHECK(Vocabulary::parse(out.str(), "again") == vocab);
  CHECK_THROWS_AS(vocab.save((dir / "missing_dir" / "v.txt").string()), coulomb::io_error);
}

TEST_CASE("Vocabulary_MalformedFilesNameTheLine", "[text][vocabulary][io][input]") {
  const std::string head = "coulomb-vocabulary 1\nlowercase 1\nsplit_punctuation 1\n";
  const std::string specials = "[PAD]\t0\n[UNK]\t0\n[SEP]\t0\n[CLS]\t0\n";
  const auto good = Vocabulary::parse(head + "size 5\n" + specials + "word\t3\n", "v");
  CHECK(good.id("word") == 4);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not a coulomb vocabulary"},
      {"vocabulary\n", "line 1"},
      {"coulomb-vocabulary 2\n", "unsupported vocabulary version"},
      {"coulomb-vocabulary 1\nlowercase 2\n", "line 2"},
      {head, "line 4"},
      {head + "size x\n", "line 4"},
      {head + "size 3\n", "line 4"},
      {head + "size 5\n" + specials, "line 9"},
      {head + "size 5\n" + "[UNK]\t0\n[PAD]\t0\n", "line 5"},
      {head + "size 5\n" + specials + "word\n", "line 9"},
      {head + "size 5\n" + specials + "word\t-3\n", "line 9"},
      {head + "size 5\n" + specials + "word\t3x\n", "line 9"},
      {head + "size 5\n" + specials + "\t3\n", "empty token"},
      {head + "size 5\n" + specials + "two words\t3\n", "blank"},
      {head + "size 6\n" + specials + "word\t3\nword\t2\n", "duplicate"},
      {head + "size 5\n" + specials + "[SEP]\t3\n", "repeated"},
      {head + "size 5\n" + specials + "word\t3\nmore\t1\n", "line 10"},
      {head + "size 99999999999\n", "size"},
  };
  for (const auto& [text, expected] : cases) {
    INFO(text);
    try {
      (void)Vocabulary::parse(text, "vocab.txt");
      FAIL("no io_error");
    } catch (const coulomb::io_error& e) {
      CHECK_THAT(e.what(), Contains("vocab.txt") && Contains(expected));
    }
  }
  CHECK_THROWS_AS(Vocabulary::load("/nonexistent/vocab.txt"), coulomb::io_error);
}

TEST_CASE("Encoder_SingleSentencesTruncateAndCount", "[text][encoder]") {
  const auto vocab = coulomb::build_vocabulary(make_dataset({"a b c d e f"}));
  const TokenId a = vocab.id("a");
  const TokenId b = vocab.id("b");
  const TokenId c = vocab.id("c");
  const coulomb::TextEncoder enc(vocab, {.max_length = 4});
  auto e = enc.encode("A b zz c d e");
  CHECK(e.ids == std::vector<TokenId>{a, b, Vocabulary::unk_id, c});
  CHECK(e.segments == std::vector<std::uint8_t>{0, 0, 0, 0});
  CHECK(e.truncated);
  CHECK(e.words == 6);
  CHECK(e.dropped == 2);
  CHECK(e.unknown == 1);

  const coulomb::TextEncoder cls(vocab, {.max_length = 3, .add_cls = true});
  e = cls.encode("a b c");
  CHECK(e.ids == std::vector<TokenId>{Vocabulary::cls_id, a, b});
  e = cls.encode("  ");
  CHECK(e.ids == std::vector<TokenId>{Vocabulary::cls_id, Vocabulary::unk_id});
  CHECK(e.empty == 1);
  CHECK(e.unknown == 0);
  CHECK_FALSE(e.truncated);

  CHECK_THROWS_AS(coulomb::TextEncoder(vocab, {.max_length = 0}), coulomb::invalid_argument);
  CHECK_THROWS_AS(coulomb::TextEncoder(vocab, {.max_length = 1, .add_cls = true}),
                  coulomb::invalid_argument);
  CHECK_NOTHROW(enc.encode("a", "b"));
  const coulomb::TextEncoder tiny(vocab, {.max_length = 2});
  CHECK_THROWS_AS(tiny.encode("a", "b"), coulomb::invalid_argument);  // pairs need 3
}

TEST_CASE("Encoder_PairsHaveSeparatorSegmentsAndLongestFirstTruncation", "[text][encoder]") {
  const auto vocab = coulomb::build_vocabulary(make_dataset({"w"}));
  const TokenId w = vocab.id("w");
  for (const bool add_cls : {false, true}) {
    for (Index max_length = 3 + add_cls; max_length <= 14; ++max_length) {
      const coulomb::TextEncoder enc(vocab, {.max_length = max_length, .add_cls = add_cls});
      const auto budget = static_cast<std::size_t>(max_length - 1 - add_cls);
      for (std::size_t la = 0; la <= 10; ++la) {
        for (std::size_t lb = 0; lb <= 10; ++lb) {
          std::string ta;
          std::string tb;
          for (std::size_t k = 0; k < la; ++k) ta += "w ";
          for (std::size_t k = 0; k < lb; ++k) tb += "w ";
          const auto e = enc.encode(ta, tb);
          // Empty sentences become one [UNK] before truncation.
          const auto [ka, kb] = reference_pair_lengths(std::max<std::size_t>(la, 1),
                                                       std::max<std::size_t>(lb, 1), budget);
          INFO("la " << la << " lb " << lb << " max_length " << max_length << " cls " << add_cls);
          REQUIRE(e.ids.size() == ka + kb + 1 + add_cls);
          REQUIRE(e.ids.size() <= static_cast<std::size_t>(max_length));
          std::size_t at = 0;
          if (add_cls) REQUIRE(e.ids[at++] == Vocabulary::cls_id);
          for (std::size_t k = 0; k < ka; ++k, ++at) {
            REQUIRE(e.ids[at] == (la == 0 ? Vocabulary::unk_id : w));
            REQUIRE(e.segments[at] == 0);
          }
          REQUIRE(e.ids[at] == Vocabulary::sep_id);
          REQUIRE(e.segments[at++] == 0);
          for (std::size_t k = 0; k < kb; ++k, ++at) {
            REQUIRE(e.ids[at] == (lb == 0 ? Vocabulary::unk_id : w));
            REQUIRE(e.segments[at] == 1);
          }
          REQUIRE(e.empty == (la == 0) + (lb == 0));
          REQUIRE(e.truncated ==
                  (ka + kb < std::max<std::size_t>(la, 1) + std::max<std::size_t>(lb, 1)));
          REQUIRE(e.dropped == static_cast<Index>(la + lb - std::min(la, ka) - std::min(lb, kb)));
        }
      }
    }
  }
}

TEST_CASE("Encoder_DatasetKeepsLabelsLinesAndStatistics", "[text][encoder]") {
  const auto train = make_dataset({"good film", "bad film , bad", "good"}, {"yes", "no", ""});
  const auto vocab = coulomb::build_vocabulary(train, {.min_frequency = 2});
  // good 2, film 2, bad 2: yes, no and "," are unknown.
  const coulomb::TextEncoder enc(vocab, {.max_length = 5});
  const auto data = enc.encode(train);
  REQUIRE(data.size() == 3);
  CHECK(data.is_pair);
  CHECK(data.labels == std::vector<int>{0, 1, 0});
  CHECK(data.lines == std::vector<std::size_t>{2, 3, 4});
  CHECK(data.length(0) == 4);  // good film [SEP] yes
  CHECK(data.length(1) == 5);  // bad film , [SEP] no  (bad dropped)
  const auto seq1 = data.sequence(1);
  CHECK(std::vector<TokenId>(seq1.begin(), seq1.end()) ==
        std::vector<TokenId>{vocab.id("bad"), vocab.id("film"), Vocabulary::unk_id,
                             Vocabulary::sep_id, Vocabulary::unk_id});
  CHECK(data.stats.sequences == 3);
  CHECK(data.stats.words == 3 + 5 + 1);
  CHECK(data.stats.truncated_sequences == 1);
  CHECK(data.stats.truncated_tokens == 1);
  CHECK(data.stats.empty_texts == 1);
  CHECK(data.stats.unknown_tokens == 3);  // yes, ",", no
  CHECK(data.stats.longest == 5);
  CHECK(data.stats.tokens == 4 + 5 + 3);
  CHECK_THROWS_AS(data.sequence(3), coulomb::invalid_argument);
}

TEST_CASE("Encoder_ArbitraryBytesGiveValidSequences", "[text][encoder][input]") {
  auto rng = coulomb_test::test_rng("Encoder_ArbitraryBytesGiveValidSequences");
  coulomb::VocabularyBuilder builder;
  for (int k = 0; k < 50; ++k) builder.add_text(random_text(rng, 30));
  const auto vocab = builder.build({.min_frequency = 2});
  const coulomb::TextEncoder enc(vocab, {.max_length = 9, .add_cls = true});
  for (int trial = 0; trial < 500; ++trial) {
    const auto e = trial % 2 == 0 ? enc.encode(random_text(rng, 30))
                                  : enc.encode(random_text(rng, 30), random_text(rng, 30));
    REQUIRE(!e.ids.empty());
    REQUIRE(e.ids.size() <= 9);
    REQUIRE(e.ids.size() == e.segments.size());
    REQUIRE(e.ids[0] == Vocabulary::cls_id);
    for (const TokenId id : e.ids) REQUIRE((id >= 0 && id < vocab.size() && id != 0));
  }
}

}  // namespace text_vocabulary_test
