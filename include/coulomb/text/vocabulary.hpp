// SPDX-License-Identifier: MIT
/// @file text/vocabulary.hpp
/// @brief The token vocabulary of a text model: special tokens, words of the training split
/// that occur at least a minimum number of times, and a plain-text file format.
///
/// Ids 0–3 are the special tokens [PAD] (padding), [UNK] (unknown word), [SEP] (between the two
/// sentences of a pair) and [CLS] (optional first token). Ids 4, 5, … are the words, ordered by
/// decreasing training count, ties by byte order, so the same training split always gives the
/// same ids. A word of the text that spells a special token ("[SEP]" with the tokenizer's
/// punctuation split off) is an ordinary (usually unknown) word: text cannot inject a special id.
///
/// The vocabulary remembers the TokenizerOptions it was built with, so that a loaded vocabulary
/// tokenizes new text the way the training text was tokenized. File format:
/// docs/text.md (section "vocabulary").
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../core/atomic_file.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/tokens.hpp"
#include "dataset.hpp"
#include "tokenizer.hpp"
#include "tsv.hpp"

namespace coulomb {

/// Options of building a vocabulary.
struct VocabularyOptions {
  /// Words seen fewer times than this in the training texts are left out (they become [UNK]).
  std::int64_t min_frequency = 1;
  /// Largest vocabulary size, special tokens included; 0 for no limit. The most frequent words
  /// are kept.
  Index max_size = 0;
};

namespace detail {

/// Transparent string hash, so that lookups by string_view allocate nothing.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

}  // namespace detail

/// Bidirectional map between tokens and ids.
class Vocabulary {
 public:
  /// Id of the padding token, [PAD].
  static constexpr TokenId pad_id = 0;
  static constexpr TokenId unk_id = 1;       ///< [UNK]: a word not in the vocabulary
  static constexpr TokenId sep_id = 2;       ///< [SEP]: separator between the sentences of a pair
  static constexpr TokenId cls_id = 3;       ///< [CLS]: optional first token of every sequence
  static constexpr TokenId num_special = 4;  ///< ids below this are special tokens

  /// The name of special token `id` (0 ≤ id < num_special).
  static constexpr std::string_view special_name(TokenId id) noexcept {
    constexpr std::string_view names[] = {"[PAD]", "[UNK]", "[SEP]", "[CLS]"};
    return id >= 0 && id < num_special ? names[id] : std::string_view{};
  }

  /// A vocabulary with only the special tokens.
  explicit Vocabulary(TokenizerOptions tokenizer = {}) : tokenizer_(tokenizer) {
    for (TokenId id = 0; id < num_special; ++id) {
      tokens_.emplace_back(special_name(id));
      counts_.push_back(0);
    }
  }

  /// Builds a vocabulary from word counts: special tokens first, then every word with count ≥
  /// options.min_frequency, by decreasing count and then byte order, up to options.max_size.
  /// Words equal to a special token's name are skipped. Throws invalid_argument for
  /// min_frequency < 1, max_size in [1, num_special), or a word that is empty or has a blank.
  template <typename CountMap>
  static Vocabulary from_counts(const CountMap& counts, const VocabularyOptions& options = {},
                                TokenizerOptions tokenizer = {}) {
    const char* where = "coulomb::Vocabulary::from_counts";
    detail::require(options.min_frequency >= 1, where,
                    "argument 'options.min_frequency' must be at least 1, got " +
                        std::to_string(options.min_frequency));
    detail::require(options.max_size == 0 || options.max_size >= num_special, where,
                    "argument 'options.max_size' must be 0 (no limit) or at least " +
                        std::to_string(num_special) + ", got " + std::to_string(options.max_size));
    std::vector<std::pair<std::string_view, std::int64_t>> words;
    for (const auto& [word, count] : counts) {
      const std::string_view w(word);
      detail::require(!w.empty(), where, "argument 'counts' contains an empty word");
      detail::require(
          std::none_of(w.begin(), w.end(), Tokenizer::is_blank), where,
          "argument 'counts' contains the word " + detail::quote_field(w) + ", which has a blank");
      if (static_cast<std::int64_t>(count) < options.min_frequency || is_special_name(w)) continue;
      words.emplace_back(w, static_cast<std::int64_t>(count));
    }
    std::sort(words.begin(), words.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    std::size_t keep = words.size();
    if (options.max_size > 0) {
      keep = std::min(keep, static_cast<std::size_t>(options.max_size - num_special));
    }
    Vocabulary vocab(tokenizer);
    vocab.tokens_.reserve(num_special + keep);
    vocab.counts_.reserve(num_special + keep);
    vocab.index_.reserve(keep);
    for (std::size_t k = 0; k < keep; ++k) vocab.push_word(words[k].first, words[k].second);
    return vocab;
  }

  /// Number of tokens, special tokens included.
  Index size() const noexcept { return static_cast<Index>(tokens_.size()); }

  /// The id of `word`, or unk_id if it is not in the vocabulary (special names included).
  TokenId id(std::string_view word) const {
    const auto it = index_.find(word);
    return it == index_.end() ? unk_id : it->second;
  }

  /// The id of `word`, or nothing.
  std::optional<TokenId> find(std::string_view word) const {
    const auto it = index_.find(word);
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }

  /// True if `word` is a (non-special) token of the vocabulary.
  bool contains(std::string_view word) const { return index_.find(word) != index_.end(); }

  /// The token of `id`. Throws invalid_argument for an id outside [0, size()).
  const std::string& token(TokenId id) const {
    check_id(id, "coulomb::Vocabulary::token");
    return tokens_[static_cast<std::size_t>(id)];
  }

  /// The training count of `id` (0 for special tokens). Throws invalid_argument for a bad id.
  std::int64_t count(TokenId id) const {
    check_id(id, "coulomb::Vocabulary::count");
    return counts_[static_cast<std::size_t>(id)];
  }

  /// True for the ids of special tokens.
  static constexpr bool is_special(TokenId id) noexcept { return id >= 0 && id < num_special; }

  /// True if `word` is the name of a special token.
  static constexpr bool is_special_name(std::string_view word) noexcept {
    for (TokenId id = 0; id < num_special; ++id) {
      if (word == special_name(id)) return true;
    }
    return false;
  }

  /// The tokenizer options this vocabulary was built with.
  const TokenizerOptions& tokenizer_options() const noexcept { return tokenizer_; }

  /// Writes the vocabulary in its text format.
  void write(std::ostream& out) const {
    out << "coulomb-vocabulary 1\n";
    out << "lowercase " << (tokenizer_.lowercase ? 1 : 0) << "\n";
    out << "split_punctuation " << (tokenizer_.split_punctuation ? 1 : 0) << "\n";
    out << "size " << tokens_.size() << "\n";
    for (std::size_t i = 0; i < tokens_.size(); ++i)
      out << tokens_[i] << '\t' << counts_[i] << '\n';
  }

  /// Saves the vocabulary to `path`, atomically (core/atomic_file.hpp): a crash or an error leaves
  /// the previous file intact. Throws io_error naming `path` when the file cannot be written.
  void save(const std::string& path) const {
    std::ostringstream out;
    write(out);
    const std::string text = out.str();
    write_file_atomically(path, std::as_bytes(std::span<const char>(text)),
                          "coulomb::Vocabulary::save");
  }

  /// Parses a vocabulary in its text format; `source` names it in messages. Throws io_error
  /// naming the line for a bad magic line or version, a missing or malformed field, special
  /// tokens not at ids 0–3, an empty, blank-containing or duplicate token, a bad count, or a
  /// token count that differs from the size line.
  static Vocabulary parse(std::string_view text, std::string_view source) {
    const char* where = "coulomb::Vocabulary::parse";
    std::size_t pos = 0;
    std::size_t line_number = 0;
    auto next_line = [&](std::string_view& line) {
      if (pos >= text.size()) return false;
      const std::size_t eol = text.find('\n', pos);
      const std::size_t end = eol == std::string_view::npos ? text.size() : eol;
      line = text.substr(pos, end - pos);
      pos = eol == std::string_view::npos ? text.size() : eol + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      ++line_number;
      return true;
    };
    auto fail = [&](const std::string& what) {
      detail::throw_io_at(where, source, line_number, what);
    };
    auto parse_int = [](std::string_view s, std::int64_t& value) {
      if (s.empty()) return false;
      const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      return ec == std::errc() && ptr == s.data() + s.size();
    };
    auto header_value = [&](std::string_view key) {
      std::string_view line;
      if (!next_line(line)) {
        ++line_number;
        fail("the file ends before the '" + std::string(key) + "' line");
      }
      const std::string prefix = std::string(key) + " ";
      std::int64_t value = -1;
      if (line.substr(0, prefix.size()) != prefix ||
          !parse_int(line.substr(prefix.size()), value)) {
        fail("expected '" + std::string(key) + " <integer>', found " + detail::quote_field(line));
      }
      return value;
    };

    std::string_view line;
    if (!next_line(line) || line != "coulomb-vocabulary 1") {
      if (line.substr(0, 19) == "coulomb-vocabulary ") {
        fail("unsupported vocabulary version " + detail::quote_field(line.substr(19)) +
             " (this build reads version 1)");
      }
      fail("not a coulomb vocabulary (the first line must be 'coulomb-vocabulary 1')");
    }
    TokenizerOptions tok;
    const std::int64_t lower = header_value("lowercase");
    if (lower != 0 && lower != 1) fail("'lowercase' must be 0 or 1");
    tok.lowercase = lower == 1;
    const std::int64_t punct = header_value("split_punctuation");
    if (punct != 0 && punct != 1) fail("'split_punctuation' must be 0 or 1");
    tok.split_punctuation = punct == 1;
    const std::int64_t size = header_value("size");
    if (size < num_special || size > std::int64_t{INT32_MAX}) {
      fail("'size' must be in [" + std::to_string(num_special) + ", 2^31 - 1], got " +
           std::to_string(size));
    }

    Vocabulary vocab(tok);
    vocab.tokens_.clear();
    vocab.counts_.clear();
    // Every entry takes a line of at least 4 bytes ("w\t1\n"), so the rest of the text bounds
    // how many can follow: a corrupted 'size' line cannot make a short file reserve much.
    const auto left = static_cast<std::int64_t>((text.size() - pos) / 4 + 1);
    const auto reserve =
        static_cast<std::size_t>(std::min<std::int64_t>({size, std::int64_t{1} << 20, left}));
    vocab.tokens_.reserve(reserve);
    vocab.counts_.reserve(reserve);
    vocab.index_.reserve(reserve);
    for (std::int64_t k = 0; k < size; ++k) {
      if (!next_line(line)) {
        ++line_number;
        fail("the file ends after " + std::to_string(k) + " of " + std::to_string(size) +
             " tokens");
      }
      const std::size_t tab = line.find('\t');
      if (tab == std::string_view::npos) fail("expected '<token><TAB><count>'");
      const std::string_view word = line.substr(0, tab);
      std::int64_t count = -1;
      if (!parse_int(line.substr(tab + 1), count) || count < 0) {
        fail("bad count " + detail::quote_field(line.substr(tab + 1)) +
             " (a non-negative integer expected)");
      }
      if (k < num_special) {
        const auto id = static_cast<TokenId>(k);
        if (word != special_name(id)) {
          fail("token " + std::to_string(k) + " must be the special token " +
               std::string(special_name(id)) + ", found " + detail::quote_field(word));
        }
        vocab.tokens_.emplace_back(word);
        vocab.counts_.push_back(count);
        continue;
      }
      if (word.empty()) fail("empty token");
      for (const char c : word) {
        if (Tokenizer::is_blank(c))
          fail("token " + detail::quote_field(word) + " contains a blank");
      }
      if (is_special_name(word)) fail("special token " + detail::quote_field(word) + " repeated");
      if (vocab.contains(word)) fail("duplicate token " + detail::quote_field(word));
      vocab.push_word(word, count);
    }
    while (next_line(line)) {
      if (!line.empty()) fail("unexpected line after the " + std::to_string(size) + " tokens");
    }
    return vocab;
  }

  /// Loads a vocabulary saved by save(). Throws io_error as parse, and when the file cannot be
  /// read.
  static Vocabulary load(const std::string& path) {
    const std::string bytes = coulomb::read_file(path, "coulomb::Vocabulary::load");
    return parse(bytes, path);
  }

  /// Same tokens, counts and tokenizer options.
  friend bool operator==(const Vocabulary& a, const Vocabulary& b) {
    return a.tokenizer_ == b.tokenizer_ && a.tokens_ == b.tokens_ && a.counts_ == b.counts_;
  }

 private:
  void push_word(std::string_view word, std::int64_t count) {
    const auto id = static_cast<TokenId>(tokens_.size());
    tokens_.emplace_back(word);
    counts_.push_back(count);
    index_.emplace(tokens_.back(), id);
  }

  void check_id(TokenId id, const char* where) const {
    if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) {
      detail::throw_invalid(where, "argument 'id' = " + std::to_string(id) + " is outside [0, " +
                                       std::to_string(tokens_.size()) + ")");
    }
  }

  TokenizerOptions tokenizer_;
  std::vector<std::string> tokens_;
  std::vector<std::int64_t> counts_;
  std::unordered_map<std::string, TokenId, detail::StringHash, std::equal_to<>> index_;
};

/// Counts the words of texts, then builds a Vocabulary from them.
class VocabularyBuilder {
 public:
  /// A builder that tokenizes with `tokenizer`.
  explicit VocabularyBuilder(TokenizerOptions tokenizer = {}) : tokenizer_(tokenizer) {}

  /// Counts the tokens of `text`.
  void add_text(std::string_view text) {
    tokenizer_.for_each_token(text, scratch_, [this](std::string_view t) {
      const auto it = counts_.find(t);
      if (it == counts_.end()) {
        counts_.emplace(std::string(t), 1);
      } else {
        ++it->second;
      }
    });
  }

  /// Counts the tokens of every text (both sentences of pairs) of `data`.
  void add_dataset(const TextDataset& data) {
    for (const auto& ex : data.examples) {
      add_text(ex.text_a);
      if (data.is_pair) add_text(ex.text_b);
    }
  }

  /// The counts so far.
  const std::unordered_map<std::string, std::int64_t, detail::StringHash, std::equal_to<>>& counts()
      const noexcept {
    return counts_;
  }

  /// The vocabulary of the counts so far (see Vocabulary::from_counts).
  Vocabulary build(const VocabularyOptions& options = {}) const {
    return Vocabulary::from_counts(counts_, options, tokenizer_.options());
  }

 private:
  Tokenizer tokenizer_;
  std::string scratch_;
  std::unordered_map<std::string, std::int64_t, detail::StringHash, std::equal_to<>> counts_;
};

/// The vocabulary of a training split (both sentences of pairs).
inline Vocabulary build_vocabulary(const TextDataset& train, const VocabularyOptions& options = {},
                                   TokenizerOptions tokenizer = {}) {
  VocabularyBuilder builder(tokenizer);
  builder.add_dataset(train);
  return builder.build(options);
}

}  // namespace coulomb
