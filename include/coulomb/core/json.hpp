// SPDX-License-Identifier: MIT
/// @file core/json.hpp
/// @brief JSON text for logs: strings escaped as RFC 8259 requires (quotes, backslashes,
/// control characters; invalid UTF-8 becomes U+FFFD), numbers in the shortest form that reads
/// back exactly (NaN and ±∞, which JSON cannot hold, as null), and objects written key by key
/// (JsonObjectWriter). The library's headers write their JSON (the progress log,
/// train/progress.hpp) with these; the tools use nlohmann-json, which the headers do not need.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace coulomb::detail {

/// Length of the valid UTF-8 sequence at the start of `s` (1 to 4), or 0 if it is invalid
/// (overlong forms, surrogates and code points above U+10FFFF are invalid).
inline std::size_t utf8_sequence_length(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if ((byte(i) & 0xC0) != 0x80) return 0;
  return n;
}

/// Appends `text` as a JSON string (with the quotes): '"' and '\' escaped, control characters
/// as `\n`, `\t`, … or `\u00XX`, invalid UTF-8 bytes replaced by `\ufffd`.
inline void append_json_string(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence_length(text.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(text.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

/// Appends `value` as a JSON number (the shortest form that reads back exactly), or null when
/// it is NaN or infinite.
inline void append_json_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}

/// Writes one JSON object into a string, a member at a time:
///
///     JsonObjectWriter o(s);
///     o.string("event", "update").integer("step", 3);
///     o.object("values").number("loss", 0.5).close();
///     o.close();  // s == {"event":"update","step":3,"values":{"loss":0.5}}
///
/// Keys and strings are escaped by append_json_string, numbers written by append_json_number.
class JsonObjectWriter {
 public:
  /// Starts an object at the end of `out` (which must outlive the writer).
  explicit JsonObjectWriter(std::string& out) : out_(&out) { *out_ += '{'; }

  /// Appends "key": "value".
  JsonObjectWriter& string(std::string_view key, std::string_view value) {
    member(key);
    append_json_string(*out_, value);
    return *this;
  }
  /// Appends "key": value (null when not finite).
  JsonObjectWriter& number(std::string_view key, double value) {
    member(key);
    append_json_number(*out_, value);
    return *this;
  }
  /// Appends "key": value, an integer.
  JsonObjectWriter& integer(std::string_view key, std::int64_t value) {
    member(key);
    *out_ += std::to_string(value);
    return *this;
  }
  /// Appends "key": null.
  JsonObjectWriter& null(std::string_view key) {
    member(key);
    *out_ += "null";
    return *this;
  }
  /// Appends "key": and starts a nested object there; close it before the next member.
  JsonObjectWriter object(std::string_view key) {
    member(key);
    return JsonObjectWriter(*out_);
  }
  /// Ends the object.
  void close() { *out_ += '}'; }

 private:
  void member(std::string_view key) {
    if (!first_) *out_ += ',';
    first_ = false;
    append_json_string(*out_, key);
    *out_ += ':';
  }

  std::string* out_;
  bool first_ = true;
};

}  // namespace coulomb::detail
