// SPDX-License-Identifier: MIT
/// @file text/tokenizer.hpp
/// @brief A word-level tokenizer: splits on blanks, optionally lower-cases and splits
/// punctuation into one-character tokens. Locale-independent and byte-exact on UTF-8.
///
/// Rules (docs/text.md (section "tokenizer")), applied to the bytes of a UTF-8 text:
/// - Words are separated by ASCII blanks (space, TAB, CR, LF, FF, VT).
/// - lowercase: A–Z become a–z, and the capital letters of Latin-1 Supplement (U+00C0–U+00DE
///   except U+00D7 ×) become their small letters (É → é). Other characters are unchanged.
/// - split_punctuation: every ASCII punctuation character (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~)
///   and every character of the General Punctuation block U+2000–U+206F (‘ ’ “ ” – — … and
///   others) is a token of its own, so "isn't" gives "isn", "'", "t".
/// - Bytes that are not valid UTF-8 are kept as they are, inside words; no input is rejected.
/// Tokens are never empty and never contain a blank.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace coulomb {

/// Options of Tokenizer.
struct TokenizerOptions {
  /// Lower-case ASCII and Latin-1 Supplement letters.
  bool lowercase = true;
  /// Make each punctuation character a token of its own.
  bool split_punctuation = true;

  /// Equal when every option is.
  friend bool operator==(const TokenizerOptions&, const TokenizerOptions&) = default;
};

/// Splits text into word and punctuation tokens.
class Tokenizer {
 public:
  /// A tokenizer with the given options.
  explicit Tokenizer(TokenizerOptions options = {}) : options_(options) {}

  /// The options.
  const TokenizerOptions& options() const noexcept { return options_; }

  /// Calls `f(std::string_view token)` for every token of `text`, in order. The views point
  /// into `scratch` (the lower-cased text) or into `text`, and are valid during the call.
  template <typename F>
  void for_each_token(std::string_view text, std::string& scratch, F&& f) const {
    std::string_view s = text;
    if (options_.lowercase) {
      lowercase_into(text, scratch);
      s = scratch;
    }
    const std::size_t n = s.size();
    std::size_t i = 0;
    while (i < n) {
      if (is_blank(s[i])) {
        ++i;
        continue;
      }
      std::size_t p = 0;
      if (options_.split_punctuation && (p = punctuation_length(s, i)) > 0) {
        f(s.substr(i, p));
        i += p;
        continue;
      }
      const std::size_t start = i;
      while (i < n && !is_blank(s[i]) &&
             !(options_.split_punctuation && punctuation_length(s, i) > 0)) {
        ++i;
      }
      f(s.substr(start, i - start));
    }
  }

  /// Appends the tokens of `text` to `out`.
  void tokenize(std::string_view text, std::vector<std::string>& out) const {
    std::string scratch;
    for_each_token(text, scratch, [&](std::string_view t) { out.emplace_back(t); });
  }

  /// The tokens of `text`.
  std::vector<std::string> tokenize(std::string_view text) const {
    std::vector<std::string> out;
    tokenize(text, out);
    return out;
  }

  /// True for the ASCII blanks that separate words.
  static constexpr bool is_blank(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  }

  /// True for ASCII punctuation, the 32 printable characters that are neither letters, digits
  /// nor space (`!` to `/`, `:` to `@`, `[` to the backquote, `{` to `~`).
  static constexpr bool is_ascii_punctuation(char c) noexcept {
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~');
  }

  /// Length in bytes of the punctuation character starting at s[i] (1 for ASCII, 3 for
  /// U+2000–U+206F encoded as E2 80 xx or E2 81 xx), or 0 if s[i] does not start one.
  static constexpr std::size_t punctuation_length(std::string_view s, std::size_t i) noexcept {
    if (i >= s.size()) return 0;
    if (is_ascii_punctuation(s[i])) return 1;
    if (i + 2 < s.size() && static_cast<unsigned char>(s[i]) == 0xE2) {
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      const auto b2 = static_cast<unsigned char>(s[i + 2]);
      if ((b1 == 0x80 || b1 == 0x81) && (b2 & 0xC0) == 0x80) return 3;
    }
    return 0;
  }

  /// Writes the lower-cased `text` into `out` (same length in bytes).
  static void lowercase_into(std::string_view text, std::string& out) {
    out.assign(text.begin(), text.end());
    const std::size_t n = out.size();
    for (std::size_t i = 0; i < n; ++i) {
      const auto c = static_cast<unsigned char>(out[i]);
      if (c >= 'A' && c <= 'Z') {
        out[i] = static_cast<char>(c + ('a' - 'A'));
      } else if (c == 0xC3 && i + 1 < n) {
        // U+00C0–U+00DE (but not U+00D7) are C3 80–C3 9E; their small letters are 0x20 higher.
        const auto d = static_cast<unsigned char>(out[i + 1]);
        if ((d & 0xC0) == 0x80) {
          if (d <= 0x9E && d != 0x97) out[i + 1] = static_cast<char>(d + 0x20);
          ++i;
        }
      }
    }
  }

 private:
  TokenizerOptions options_;
};

}  // namespace coulomb
