// SPDX-License-Identifier: MIT
/// @file core/printable.hpp
/// @brief Text shown to people: untrusted names in an error message (cut, control bytes
/// replaced) or on a one-line display (control bytes escaped, width in UTF-8 code points), and
/// durations and rates in short units ("3m05s", "12.3k").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "config.hpp"

namespace coulomb::detail {

/// A name shown in a message: at most 60 bytes, control bytes as '?', "..." when cut. A name
/// read from a corrupted file cannot make the message huge or unreadable.
inline std::string printable_name(std::string_view name) {
  std::string out;
  for (std::size_t i = 0; i < name.size() && i < 60; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    out += (c < 0x20 || c == 0x7F) ? '?' : static_cast<char>(c);
  }
  if (name.size() > 60) out += "...";
  return out;
}

/// `text` with control characters written as escapes (`\n`, `\t`, `\x01`), so that a name can
/// never break a one-line display.
inline std::string printable(std::string_view text) {
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7F) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xF];
    }
  }
  return out;
}

/// Number of UTF-8 code points in `text` (the bytes that do not continue a sequence).
inline Index display_width(std::string_view text) {
  Index n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

/// The longest prefix of `text` with at most `width` code points.
inline std::string_view cut_to_width(std::string_view text, Index width) {
  Index n = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (n == width) return text.substr(0, i);
      ++n;
    }
  }
  return text;
}

}  // namespace coulomb::detail

namespace coulomb {

/// A duration for people: "0.25s", "9.8s", "42s", "3m05s", "2h03m".
inline std::string format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  seconds = std::max(seconds, 0.0);
  char buffer[48];
  if (seconds < 10.0) {
    std::snprintf(buffer, sizeof buffer, "%.*fs", seconds < 1.0 ? 2 : 1, seconds);
  } else if (seconds < 60.0) {
    std::snprintf(buffer, sizeof buffer, "%.0fs", std::floor(seconds));
  } else if (seconds < 3600.0) {
    const auto s = static_cast<long long>(seconds);
    std::snprintf(buffer, sizeof buffer, "%lldm%02llds", s / 60, s % 60);
  } else {
    const auto m = static_cast<long long>(seconds / 60.0);
    std::snprintf(buffer, sizeof buffer, "%lldh%02lldm", m / 60, m % 60);
  }
  return buffer;
}

/// A rate for people, three significant digits with k/M/G above 10⁴: "0.125", "48.8", "1234",
/// "12.3k", "4.56M".
inline std::string format_rate(double rate) {
  if (!std::isfinite(rate)) return "?";
  const char* suffix = "";
  if (std::abs(rate) >= 1e10) {
    rate /= 1e9;
    suffix = "G";
  } else if (std::abs(rate) >= 1e7) {
    rate /= 1e6;
    suffix = "M";
  } else if (std::abs(rate) >= 1e4) {
    rate /= 1e3;
    suffix = "k";
  }
  char buffer[48];
  if (std::abs(rate) >= 1000.0)
    std::snprintf(buffer, sizeof buffer, "%.0f%s", rate, suffix);
  else
    std::snprintf(buffer, sizeof buffer, "%.3g%s", rate, suffix);
  return buffer;
}

}  // namespace coulomb
