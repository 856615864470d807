// SPDX-License-Identifier: MIT
/// @file text/encoder.hpp
/// @brief Turning sentences and sentence pairs into token-id sequences: tokenization,
/// vocabulary lookup, an optional [CLS], the [SEP] of pairs, segment ids and truncation to a
/// maximum length.
///
/// Layout of one sequence (docs/text.md (section "encoding")), with max_length counting every
/// token:
///   single sentence:  [CLS]? a_1 … a_p                   segments 0 … 0
///   sentence pair:    [CLS]? a_1 … a_p [SEP] b_1 … b_q   segments 0 … 0 0 1 … 1
/// Truncation drops tokens from the end: of the sentence for single sentences, and of the
/// longer sentence, one token at a time, for pairs ("longest first"; on a tie from the
/// second), so both sentences keep at least one token. A sentence with no token (empty or only
/// blanks) is encoded as one [UNK], so every sequence has a real token to pool over; such texts
/// are counted in EncodingStats::empty_texts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "dataset.hpp"
#include "overlap.hpp"
#include "tokenizer.hpp"
#include "vocabulary.hpp"

namespace coulomb {

/// Options of TextEncoder.
struct EncoderOptions {
  /// Largest number of tokens of a sequence, special tokens included. At least 1 + add_cls
  /// (3 + add_cls to encode pairs).
  Index max_length = 128;
  /// Start every sequence with [CLS].
  bool add_cls = false;

  /// Equal when every option is.
  friend bool operator==(const EncoderOptions&, const EncoderOptions&) = default;
};

/// One encoded sequence.
struct EncodedText {
  std::vector<TokenId> ids;  ///< token ids, special tokens included
  std::vector<std::uint8_t>
      segments;  ///< 0 for the first sentence (and [CLS], [SEP]), 1 for the second
  /// word key of every token (coulomb::word_key of its text, text/overlap.hpp), aligned with
  /// ids; 0 for [CLS], [SEP] and the placeholder of an empty sentence
  std::vector<std::uint64_t> keys;
  Index words = 0;         ///< tokens of the text(s) before truncation (specials excluded)
  Index unknown = 0;       ///< [UNK] among the kept tokens (empty-text placeholders excluded)
  Index empty = 0;         ///< sentences with no token (0, 1 or 2)
  Index dropped = 0;       ///< words dropped by truncation
  bool truncated = false;  ///< tokens were dropped to fit max_length
};

/// What encoding a dataset did, for reports.
struct EncodingStats {
  Index sequences = 0;            ///< sequences encoded
  Index tokens = 0;               ///< ids written, special tokens included
  Index words = 0;                ///< tokens of the texts before truncation
  Index unknown_tokens = 0;       ///< words mapped to [UNK]
  Index truncated_sequences = 0;  ///< sequences that lost tokens to max_length
  Index truncated_tokens = 0;     ///< words dropped by truncation
  Index empty_texts = 0;          ///< sentences with no token, encoded as one [UNK]
  Index longest = 0;              ///< most words of one sequence before truncation

  /// Fraction of kept words that are unknown.
  double unknown_rate() const noexcept {
    const Index kept = words - truncated_tokens;
    return kept > 0 ? static_cast<double>(unknown_tokens) / static_cast<double>(kept) : 0.0;
  }
};

/// A dataset of encoded sequences, stored back to back (offsets[i] … offsets[i+1]).
struct EncodedDataset {
  std::vector<TokenId> ids;            ///< every sequence's ids, concatenated
  std::vector<std::uint8_t> segments;  ///< segment ids, aligned with ids
  /// word keys (EncodedText::keys), aligned with ids; empty when the sequences were appended
  /// without keys (the pair head's overlap features need them)
  std::vector<std::uint64_t> keys;
  std::vector<std::size_t> offsets{
      0};                          ///< size() + 1 entries; sequence i is [offsets[i], offsets[i+1])
  std::vector<int> labels;         ///< label of each sequence (−1 when unlabelled)
  std::vector<std::size_t> lines;  ///< line of each sequence in its source file (0 if none)
  bool is_pair = false;            ///< sequences are sentence pairs
  int num_classes = 2;             ///< labels lie in [0, num_classes)
  EncodingStats stats;             ///< what encoding did

  /// Number of sequences.
  Index size() const noexcept { return static_cast<Index>(labels.size()); }
  /// Number of tokens of sequence i.
  Index length(Index i) const { return static_cast<Index>(at(i + 1) - at(i)); }
  /// The ids of sequence i.
  std::span<const TokenId> sequence(Index i) const {
    return {ids.data() + at(i), static_cast<std::size_t>(length(i))};
  }
  /// The segment ids of sequence i.
  std::span<const std::uint8_t> segment_ids(Index i) const {
    return {segments.data() + at(i), static_cast<std::size_t>(length(i))};
  }
  /// True when every token has a word key (keys is aligned with ids).
  bool has_keys() const noexcept { return keys.size() == ids.size(); }
  /// The word keys of sequence i (empty unless has_keys()).
  std::span<const std::uint64_t> word_keys(Index i) const {
    const std::size_t first = at(i);
    if (!has_keys()) return {};
    return {keys.data() + first, static_cast<std::size_t>(length(i))};
  }
  /// Appends one sequence without word keys. Throws invalid_argument when seq_ids and
  /// seq_segments differ in length, or when the dataset holds keys.
  void push_back(std::span<const TokenId> seq_ids, std::span<const std::uint8_t> seq_segments,
                 int label, std::size_t line = 0) {
    detail::require(keys.empty(), "coulomb::EncodedDataset::push_back",
                    "the dataset holds word keys: append with the overload that takes them");
    append(seq_ids, seq_segments, label, line);
  }
  /// Appends one sequence with its word keys. Throws invalid_argument when seq_ids,
  /// seq_segments and seq_keys differ in length, or when the dataset already holds sequences
  /// without keys.
  void push_back(std::span<const TokenId> seq_ids, std::span<const std::uint8_t> seq_segments,
                 std::span<const std::uint64_t> seq_keys, int label, std::size_t line = 0) {
    const char* where = "coulomb::EncodedDataset::push_back";
    detail::require(seq_keys.size() == seq_ids.size(), where,
                    "arguments 'seq_ids' and 'seq_keys' differ in length");
    detail::require(keys.size() == ids.size(), where,
                    "the dataset holds sequences without word keys");
    append(seq_ids, seq_segments, label, line);
    keys.insert(keys.end(), seq_keys.begin(), seq_keys.end());
  }

 private:
  void append(std::span<const TokenId> seq_ids, std::span<const std::uint8_t> seq_segments,
              int label, std::size_t line) {
    detail::require(seq_ids.size() == seq_segments.size(), "coulomb::EncodedDataset::push_back",
                    "arguments 'seq_ids' and 'seq_segments' differ in length");
    ids.insert(ids.end(), seq_ids.begin(), seq_ids.end());
    segments.insert(segments.end(), seq_segments.begin(), seq_segments.end());
    offsets.push_back(ids.size());
    labels.push_back(label);
    lines.push_back(line);
  }

  std::size_t at(Index i) const {
    detail::require(i >= 0 && static_cast<std::size_t>(i) < offsets.size(),
                    "coulomb::EncodedDataset",
                    "sequence index " + std::to_string(i) + " is outside [0, " +
                        std::to_string(labels.size()) + ")");
    return offsets[static_cast<std::size_t>(i)];
  }
};

/// Encodes sentences and sentence pairs with a vocabulary.
class TextEncoder {
 public:
  /// An encoder with `vocabulary` (whose tokenizer options it uses). Throws invalid_argument
  /// for max_length < 1 + add_cls.
  explicit TextEncoder(Vocabulary vocabulary, EncoderOptions options = {})
      : vocab_(std::move(vocabulary)), tokenizer_(vocab_.tokenizer_options()), options_(options) {
    detail::require(options_.max_length >= 1 + (options_.add_cls ? 1 : 0),
                    "coulomb::TextEncoder::constructor",
                    "argument 'options.max_length' must be at least " +
                        std::to_string(1 + (options_.add_cls ? 1 : 0)) + ", got " +
                        std::to_string(options_.max_length));
  }

  /// The vocabulary.
  const Vocabulary& vocabulary() const noexcept { return vocab_; }
  /// The tokenizer (with the vocabulary's options).
  const Tokenizer& tokenizer() const noexcept { return tokenizer_; }
  /// The options.
  const EncoderOptions& options() const noexcept { return options_; }

  /// Appends the ids of the words of `text` to `ids` (no special tokens, no truncation).
  void word_ids(std::string_view text, std::vector<TokenId>& ids) const {
    std::string scratch;
    tokenizer_.for_each_token(text, scratch,
                              [&](std::string_view t) { ids.push_back(vocab_.id(t)); });
  }

  /// Appends the ids and the word keys (coulomb::word_key) of the words of `text`.
  void word_ids(std::string_view text, std::vector<TokenId>& ids,
                std::vector<std::uint64_t>& keys) const {
    std::string scratch;
    tokenizer_.for_each_token(text, scratch, [&](std::string_view t) {
      ids.push_back(vocab_.id(t));
      keys.push_back(word_key(t));
    });
  }

  /// Encodes one sentence into `out`.
  void encode(std::string_view text, EncodedText& out) const {
    reset(out);
    std::vector<TokenId> a;
    std::vector<std::uint64_t> ka;
    word_ids(text, a, ka);
    out.words = static_cast<Index>(a.size());
    const auto budget = static_cast<std::size_t>(options_.max_length - (options_.add_cls ? 1 : 0));
    fill_empty(a, ka, out);
    if (a.size() > budget) {
      out.dropped = static_cast<Index>(a.size() - budget);
      a.resize(budget);
      out.truncated = true;
    }
    if (options_.add_cls) append(out, Vocabulary::cls_id, 0, 0);
    for (std::size_t k = 0; k < a.size(); ++k) append_word(out, a[k], ka[k], 0);
  }

  /// Encodes a sentence pair into `out`. Throws invalid_argument when max_length < 3 + add_cls.
  void encode(std::string_view text_a, std::string_view text_b, EncodedText& out) const {
    const Index need = 3 + (options_.add_cls ? 1 : 0);
    detail::require(options_.max_length >= need, "coulomb::TextEncoder::encode",
                    "sentence pairs need options.max_length >= " + std::to_string(need) + ", got " +
                        std::to_string(options_.max_length));
    reset(out);
    std::vector<TokenId> a;
    std::vector<TokenId> b;
    std::vector<std::uint64_t> ka;
    std::vector<std::uint64_t> kb;
    word_ids(text_a, a, ka);
    word_ids(text_b, b, kb);
    out.words = static_cast<Index>(a.size() + b.size());
    fill_empty(a, ka, out);
    fill_empty(b, kb, out);
    const auto budget =
        static_cast<std::size_t>(options_.max_length - 1 - (options_.add_cls ? 1 : 0));
    std::size_t la = a.size();
    std::size_t lb = b.size();
    // Longest first: drop from the longer sentence (from the second on a tie); budget ≥ 2 and
    // la, lb ≥ 1 keep both sentences non-empty.
    while (la + lb > budget) {
      if (la > lb) {
        --la;
      } else {
        --lb;
      }
    }
    out.dropped = static_cast<Index>((a.size() - la) + (b.size() - lb));
    out.truncated = out.dropped > 0;
    if (options_.add_cls) append(out, Vocabulary::cls_id, 0, 0);
    for (std::size_t k = 0; k < la; ++k) append_word(out, a[k], ka[k], 0);
    append(out, Vocabulary::sep_id, 0, 0);
    for (std::size_t k = 0; k < lb; ++k) append_word(out, b[k], kb[k], 1);
  }

  /// Encodes a single sentence.
  EncodedText encode(std::string_view text) const {
    EncodedText out;
    encode(text, out);
    return out;
  }

  /// Encodes a sentence pair.
  EncodedText encode(std::string_view text_a, std::string_view text_b) const {
    EncodedText out;
    encode(text_a, text_b, out);
    return out;
  }

  /// Encodes every example of `data` (pairs if data.is_pair), keeping labels and line numbers.
  EncodedDataset encode(const TextDataset& data) const {
    EncodedDataset enc;
    enc.is_pair = data.is_pair;
    enc.num_classes = data.num_classes;
    enc.labels.reserve(data.examples.size());
    enc.lines.reserve(data.examples.size());
    enc.offsets.reserve(data.examples.size() + 1);
    EncodedText one;
    for (const auto& ex : data.examples) {
      if (data.is_pair) {
        encode(ex.text_a, ex.text_b, one);
      } else {
        encode(ex.text_a, one);
      }
      enc.push_back(one.ids, one.segments, one.keys, ex.label, ex.line);
      add_stats(enc.stats, one);
    }
    return enc;
  }

  /// Adds one encoded sequence to `stats`.
  static void add_stats(EncodingStats& stats, const EncodedText& one) {
    ++stats.sequences;
    stats.tokens += static_cast<Index>(one.ids.size());
    stats.words += one.words;
    stats.unknown_tokens += one.unknown;
    stats.empty_texts += one.empty;
    if (one.truncated) ++stats.truncated_sequences;
    stats.truncated_tokens += one.dropped;
    if (one.words > stats.longest) stats.longest = one.words;
  }

 private:
  static void reset(EncodedText& out) {
    out.ids.clear();
    out.segments.clear();
    out.keys.clear();
    out.words = 0;
    out.unknown = 0;
    out.empty = 0;
    out.dropped = 0;
    out.truncated = false;
  }

  // An empty sentence becomes one [UNK] placeholder (not counted as an unknown word).
  static void fill_empty(std::vector<TokenId>& words, std::vector<std::uint64_t>& keys,
                         EncodedText& out) {
    if (words.empty()) {
      words.push_back(empty_marker);
      keys.push_back(0);
      ++out.empty;
    }
  }

  static void append(EncodedText& out, TokenId id, std::uint64_t key, std::uint8_t segment) {
    out.ids.push_back(id);
    out.keys.push_back(key);
    out.segments.push_back(segment);
  }

  static void append_word(EncodedText& out, TokenId id, std::uint64_t key, std::uint8_t segment) {
    if (id == empty_marker) {
      append(out, Vocabulary::unk_id, 0, segment);
      return;
    }
    if (id == Vocabulary::unk_id) ++out.unknown;
    append(out, id, key, segment);
  }

  // Internal stand-in for the placeholder [UNK] of an empty sentence (never stored).
  static constexpr TokenId empty_marker = -1;

  Vocabulary vocab_;
  Tokenizer tokenizer_;
  EncoderOptions options_;
};

}  // namespace coulomb
