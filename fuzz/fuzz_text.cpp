// SPDX-License-Identifier: MIT
// libFuzzer target of the tokenizer, the vocabulary and the encoder (text/tokenizer.hpp,
// text/vocabulary.hpp, text/encoder.hpp), built with -DCOULOMB_BUILD_FUZZERS=ON (clang). Each
// input is used twice:
//   1. as text (any bytes, invalid UTF-8 included): tokenized with the four tokenizer options,
//      counted into a vocabulary that is written and parsed back, and encoded as a sentence and,
//      cut in the middle, as a sentence pair with several encoder options;
//   2. as a vocabulary file (Vocabulary::parse); a vocabulary that parses is written and parsed
//      back and encodes the input.
// Properties checked on every input (a violation calls std::abort):
//   - parsing returns or throws coulomb::io_error; nothing else throws; any crash, leak or
//     sanitizer report is a bug;
//   - tokens are non-empty and blank-free; joined, they are the (lower-cased) text without its
//     blanks; punctuation tokens are one character and words hold none; lower-casing is
//     idempotent and changes no token boundary;
//   - a vocabulary survives write + parse unchanged, maps each of its words to its id, and gives
//     every word of its own text a known id (special-token names excepted);
//   - an encoded sequence fits max_length, has [CLS] exactly where asked, one [SEP] per pair and
//     no other special id, ids inside the vocabulary, segments 0 then 1, and word and
//     truncation counts that agree with the tokenizer.
// Run: build/fuzz/fuzz_text -max_total_time=60 <copy of fuzz/corpus/text>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <coulomb/text/encoder.hpp>
#include <coulomb/text/tokenizer.hpp>
#include <coulomb/text/vocabulary.hpp>

namespace {

using coulomb::Index;
using coulomb::TokenId;
using coulomb::Tokenizer;
using coulomb::TokenizerOptions;
using coulomb::Vocabulary;

void require(bool ok) {
  if (!ok) std::abort();
}

std::string lowercased(std::string_view text) {
  std::string out;
  Tokenizer::lowercase_into(text, out);
  return out;
}

void check_tokens(std::string_view text, const TokenizerOptions& options,
                  const std::vector<std::string>& tokens) {
  const std::string source = options.lowercase ? lowercased(text) : std::string(text);
  std::string expected;
  for (const char c : source) {
    if (!Tokenizer::is_blank(c)) expected += c;
  }
  std::string joined;
  for (const auto& t : tokens) {
    require(!t.empty());
    require(std::none_of(t.begin(), t.end(), Tokenizer::is_blank));
    joined += t;
    if (!options.split_punctuation) continue;
    const std::size_t p = Tokenizer::punctuation_length(t, 0);
    if (p > 0) {
      require(p == t.size());
    } else {
      for (std::size_t i = 0; i < t.size(); ++i) require(Tokenizer::punctuation_length(t, i) == 0);
    }
  }
  require(joined == expected);
}

Vocabulary round_trip(const Vocabulary& vocab) {
  std::ostringstream out;
  vocab.write(out);
  Vocabulary again = Vocabulary::parse(out.str(), "fuzz-again");  // io_error here is a bug
  require(again == vocab);
  return again;
}

void check_vocabulary(const Vocabulary& vocab) {
  require(vocab.size() >= Vocabulary::num_special);
  for (TokenId id = 0; id < Vocabulary::num_special; ++id) {
    require(vocab.token(id) == Vocabulary::special_name(id));
    require(!vocab.find(vocab.token(id)));  // text cannot name a special id
  }
  for (TokenId id = Vocabulary::num_special; id < static_cast<TokenId>(vocab.size()); ++id) {
    require(vocab.id(vocab.token(id)) == id);
    require(!Vocabulary::is_special_name(vocab.token(id)));
    require(vocab.count(id) >= 0);
  }
}

// Encodes `a` (and `b` when `pair`) and checks the sequence against the tokenizer.
void check_encoding(const coulomb::TextEncoder& encoder, std::string_view a, std::string_view b,
                    bool pair) {
  const auto& options = encoder.options();
  const auto& vocab = encoder.vocabulary();
  const coulomb::EncodedText enc = pair ? encoder.encode(a, b) : encoder.encode(a);
  const Index words_a = static_cast<Index>(encoder.tokenizer().tokenize(a).size());
  const Index words_b = pair ? static_cast<Index>(encoder.tokenizer().tokenize(b).size()) : 0;
  require(enc.words == words_a + words_b);
  require(enc.empty == (words_a == 0 ? 1 : 0) + (pair && words_b == 0 ? 1 : 0));
  require(enc.ids.size() == enc.segments.size());
  require(static_cast<Index>(enc.ids.size()) <= options.max_length);
  const Index specials = (options.add_cls ? 1 : 0) + (pair ? 1 : 0);
  const Index kept = static_cast<Index>(enc.ids.size()) - specials;
  require(kept + enc.dropped == enc.words + enc.empty);
  require(enc.truncated == (enc.dropped > 0));
  Index seps = 0;
  Index unknown = 0;
  std::uint8_t segment = 0;
  for (std::size_t i = 0; i < enc.ids.size(); ++i) {
    const TokenId id = enc.ids[i];
    require(id >= 0 && id < static_cast<TokenId>(vocab.size()));
    require(id != Vocabulary::pad_id);
    require((id == Vocabulary::cls_id) == (options.add_cls && i == 0));
    require(enc.segments[i] == segment);
    if (id == Vocabulary::sep_id) {
      ++seps;
      segment = 1;
    }
    if (id == Vocabulary::unk_id) ++unknown;
  }
  require(seps == (pair ? 1 : 0));
  require(unknown == enc.unknown + enc.empty);  // every empty sentence keeps its placeholder
  if (pair) require(enc.segments.back() == 1);  // both sentences keep a token
}

void check_encoder(const Vocabulary& vocab, std::string_view text) {
  const std::string_view a = text.substr(0, text.size() / 2);
  const std::string_view b = text.substr(text.size() / 2);
  const coulomb::EncoderOptions configs[] = {{1, false}, {4, true}, {7, false}, {128, true}};
  for (const auto& options : configs) {
    const coulomb::TextEncoder encoder(vocab, options);
    check_encoding(encoder, text, {}, false);
    if (options.max_length >= 3 + (options.add_cls ? 1 : 0)) check_encoding(encoder, a, b, true);
  }
}

// The vocabulary of all the words of `text`, and with `small_too` one where most are unknown.
void check_vocabularies(std::string_view text, const Tokenizer& tokenizer,
                        const std::vector<std::string>& tokens, bool small_too) {
  coulomb::VocabularyBuilder builder(tokenizer.options());
  builder.add_text(text);
  const Vocabulary vocab = builder.build();
  check_vocabulary(vocab);
  require(vocab.tokenizer_options() == tokenizer.options());
  for (const auto& t : tokens) {
    // Every word is known, but a word that spells a special token stays an unknown word.
    require((vocab.id(t) == Vocabulary::unk_id) == Vocabulary::is_special_name(t));
  }
  check_encoder(round_trip(vocab), text);
  if (!small_too) return;

  const Vocabulary small = builder.build({.min_frequency = 2, .max_size = 6});
  require(small.size() <= 6);
  check_vocabulary(small);
  check_encoder(round_trip(small), text);
}

void check_as_text(std::string_view text) {
  // Lower-casing keeps the length and is idempotent.
  const std::string lower = lowercased(text);
  require(lower.size() == text.size());
  require(lowercased(lower) == lower);
  for (const bool split : {false, true}) {
    const Tokenizer raw({.lowercase = false, .split_punctuation = split});
    const Tokenizer low({.lowercase = true, .split_punctuation = split});
    const auto raw_tokens = raw.tokenize(text);
    const auto low_tokens = low.tokenize(text);
    check_tokens(text, raw.options(), raw_tokens);
    check_tokens(text, low.options(), low_tokens);
    // Lower-casing never moves a token boundary.
    require(raw_tokens.size() == low_tokens.size());
    for (std::size_t i = 0; i < raw_tokens.size(); ++i) {
      require(lowercased(raw_tokens[i]) == low_tokens[i]);
    }

    // Vocabularies and encoders (the costly part) with two of the four tokenizers: the one
    // that can produce special-token names as words, and the default one.
    if (split) {
      check_vocabularies(text, low, low_tokens, true);
    } else {
      check_vocabularies(text, raw, raw_tokens, false);
    }
  }
}

void check_as_vocabulary_file(std::string_view text) {
  Vocabulary vocab;
  try {
    vocab = Vocabulary::parse(text, "fuzz");
  } catch (const coulomb::io_error&) {
    return;  // the expected outcome for most inputs
  }
  check_vocabulary(vocab);
  check_encoder(round_trip(vocab), text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_as_text(text);
  check_as_vocabulary_file(text);
  return 0;
}
