// SPDX-License-Identifier: MIT
/// @file train/detail_record_codec.hpp
/// @brief Internal: records in checkpoints, each field declared once. A record type lists its
/// fields in a specialization of RecordLayout (a name, an accessor and flags per field); that
/// one list writes the record as model-file metadata ("<prefix><name>" = text) or as one line
/// of numbers, reads it back (io_error naming the file and the key for a value that does not
/// parse), and adds it to a run's fingerprint (train/resume.hpp).
///
/// Texts read back exactly: integers in decimal, doubles with 17 significant digits ("nan" for
/// NaN), Booleans as true/false, enumerations by name (or number), generator states as four
/// 16-digit hexadecimal words.
#pragma once

#include <array>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../io/model_file.hpp"

namespace coulomb::train::detail {

/// A double printed so that it reads back to the same value ("nan" for NaN).
inline std::string exact_decimal(double x) {
  char buf[40];
  const int n = std::snprintf(buf, sizeof buf, "%.17g", x);
  return std::string(buf, static_cast<std::size_t>(n));
}

/// The four state words of a generator (Rng::state).
using RngState = std::array<std::uint64_t, 4>;

/// How a field is written and read; combine with |.
enum class FieldFlags : unsigned {
  none = 0,
  optional = 1,    ///< a file without it leaves the record's value (a field added later)
  duration = 2,    ///< seconds: read back only when finite and >= 0
  as_integer = 4,  ///< an enumeration written as its number, not its name
};

/// Both sets of flags.
constexpr FieldFlags operator|(FieldFlags a, FieldFlags b) noexcept {
  return static_cast<FieldFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

/// Whether `flags` has `flag`.
constexpr bool has_flag(FieldFlags flags, FieldFlags flag) noexcept {
  return (static_cast<unsigned>(flags) & static_cast<unsigned>(flag)) != 0;
}

/// Accessor of a data member.
template <typename R, typename T>
struct MemberAccess {
  T R::*member;  ///< the member
  /// The member of `r`.
  constexpr T& operator()(R& r) const noexcept { return r.*member; }
  /// The member of `r`, read-only.
  constexpr const T& operator()(const R& r) const noexcept { return r.*member; }
};

/// The condition of a field that is always recorded.
struct Always {
  /// True.
  template <typename R>
  constexpr bool operator()(const R&) const noexcept {
    return true;
  }
};

/// One field of a record: its name after the prefix, an accessor returning a reference to the
/// value in a record, flags, and when it is recorded (`when(record)`; a field a mode does not
/// use, or a newer option recorded only when it differs from what earlier runs always used).
template <typename Get, typename When = Always>
struct RecordField {
  std::string_view name;                ///< key after the prefix (a nested record: its prefix)
  Get get;                              ///< get(record) → reference to the value
  FieldFlags flags = FieldFlags::none;  ///< see FieldFlags
  When when{};                          ///< recorded only when when(record)
};

/// A field held by a data member, recorded when `when(record)`.
template <typename R, typename T, typename When = Always>
constexpr auto field(std::string_view name, T R::*member, FieldFlags flags = FieldFlags::none,
                     When when = {}) {
  return RecordField<MemberAccess<R, T>, When>{name, MemberAccess<R, T>{member}, flags, when};
}

/// A field reached by an accessor (`[](auto& r) -> auto& { return r.inner.value; }`), recorded
/// when `when(record)`.
template <typename Get, typename When = Always>
requires(!std::is_member_object_pointer_v<Get>) constexpr auto field(
    std::string_view name, Get get, FieldFlags flags = FieldFlags::none, When when = {}) {
  return RecordField<Get, When>{name, get, flags, when};
}

/// The fields of a record type: a specialization defines `static constexpr auto fields =
/// std::make_tuple(field(…), …);` in the order they are written.
template <typename Record>
struct RecordLayout;

/// A type whose fields are listed in a RecordLayout.
template <typename T>
concept LaidOutRecord = requires {
  RecordLayout<T>::fields;
};

/// Calls f(field) for every field of `Record`, in order.
template <typename Record, typename F>
void for_each_field(F&& f) {
  std::apply([&](const auto&... fields) { (f(fields), ...); }, RecordLayout<Record>::fields);
}

/// Number of fields of `Record`.
template <typename Record>
inline constexpr std::size_t field_count =
    std::tuple_size_v<std::remove_cvref_t<decltype(RecordLayout<Record>::fields)>>;

// ---- values as text ---------------------------------------------------------------------------

/// The four state words as 16 hexadecimal digits each, separated by spaces.
inline std::string rng_state_text(const RngState& state) {
  std::string out;
  for (const std::uint64_t word : state) {
    char buf[20];
    const int n = std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(word));
    if (!out.empty()) out += ' ';
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

/// The text of a field's value.
template <typename T>
std::string value_text(const T& v, FieldFlags flags) {
  if constexpr (std::same_as<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::same_as<T, std::string>) {
    return v;
  } else if constexpr (std::floating_point<T>) {
    return exact_decimal(static_cast<double>(v));
  } else if constexpr (std::same_as<T, RngState>) {
    return rng_state_text(v);
  } else if constexpr (std::is_enum_v<T>) {
    if constexpr (requires { to_string(v); }) {
      if (!has_flag(flags, FieldFlags::as_integer)) return std::string(to_string(v));
    }
    return std::to_string(static_cast<std::int64_t>(v));
  } else {
    static_assert(std::integral<T>, "a record field is a number, Boolean, text or state");
    return std::to_string(v);
  }
}

/// Parses value_text's output into `out`; false (leaving `out`) when malformed. Returns the
/// description of the expected form through `expected`.
template <typename T>
bool parse_value(std::string_view text, T& out, const char*& expected) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if constexpr (std::same_as<T, bool>) {
    expected = "is neither true nor false";
    if (text != "true" && text != "false") return false;
    out = text == "true";
    return true;
  } else if constexpr (std::same_as<T, std::string>) {
    out = std::string(text);
    return true;
  } else if constexpr (std::floating_point<T>) {
    expected = "is not a number";
    if (text == "nan" || text == "-nan") {
      out = std::numeric_limits<T>::quiet_NaN();
      return true;
    }
    T value{};
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (text.empty() || ec != std::errc() || ptr != last) return false;
    out = value;
    return true;
  } else if constexpr (std::same_as<T, RngState>) {
    expected = "is not a generator state (four words of 16 hexadecimal digits)";
    RngState words{};
    const char* p = first;
    bool ok = true;
    for (std::size_t i = 0; i < 4 && ok; ++i) {
      if (i > 0) ok = p < last && *p++ == ' ';
      const auto [next, ec] = std::from_chars(p, last, words[i], 16);
      ok = ok && ec == std::errc() && next - p == 16;
      p = next;
    }
    if (!ok || p != last || (words[0] | words[1] | words[2] | words[3]) == 0) return false;
    out = words;
    return true;
  } else {
    static_assert(std::integral<T>, "only numbers, Booleans, texts and states are read back");
    expected = "is not an integer";
    T value{};
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (text.empty() || ec != std::errc() || ptr != last) return false;
    out = value;
    return true;
  }
}

// ---- records as metadata ----------------------------------------------------------------------

/// Writes every field of `r` that is recorded as metadata "<prefix><name>" of `file` (a nested
/// record under "<prefix><name>").
template <typename Record, RealScalar S>
void write_record(io::ModelFile<S>& file, const std::string& prefix, const Record& r) {
  for_each_field<Record>([&](const auto& f) {
    if (!f.when(r)) return;
    const auto& value = f.get(r);
    using T = std::remove_cvref_t<decltype(value)>;
    if constexpr (LaidOutRecord<T>) {
      write_record(file, prefix + std::string(f.name), value);
    } else {
      file.set_metadata(prefix + std::string(f.name), value_text(value, f.flags));
    }
  });
}

/// Metadata `key` of `file` read as a field of type T with `flags` (an optional one that the
/// file lacks: `value` as given). Throws io_error "where: 'file': metadata 'key' is not …" for
/// a value that does not parse, and as ModelFile::metadata_value for a missing one.
template <typename T, RealScalar S>
T read_value(const io::ModelFile<S>& file, const std::string& key, std::string_view where,
             FieldFlags flags = FieldFlags::none, T value = {}) {
  if (has_flag(flags, FieldFlags::optional) && file.find_metadata(key) == nullptr) return value;
  const char* expected = "";
  bool ok = parse_value(file.metadata_value(key), value, expected);
  if constexpr (std::floating_point<T>) {
    if (ok && has_flag(flags, FieldFlags::duration) &&
        !(value >= 0 && value <= std::numeric_limits<T>::max())) {
      ok = false;
      expected = "is not a duration in seconds (finite and >= 0)";
    }
  }
  if (!ok) {
    throw io_error(std::string(where) + ": '" + file.source() + "': metadata '" + key + "' " +
                   expected);
  }
  return value;
}

/// Reads the fields of `r` written by write_record (see read_value for the errors; `r` may then
/// be partly read).
template <typename Record, RealScalar S>
void read_record(const io::ModelFile<S>& file, const std::string& prefix, Record& r,
                 std::string_view where) {
  for_each_field<Record>([&](const auto& f) {
    if (!f.when(r)) return;
    auto& value = f.get(r);
    using T = std::remove_cvref_t<decltype(value)>;
    if constexpr (LaidOutRecord<T>) {
      read_record(file, prefix + std::string(f.name), value, where);
    } else {
      value = read_value<T>(file, prefix + std::string(f.name), where, f.flags, value);
    }
  });
}

// ---- records as a line of numbers -------------------------------------------------------------

/// Parses `out.size()` numbers separated by single spaces from `text` ("nan" for NaN); false on
/// any malformed input.
inline bool parse_numbers(std::string_view text, std::span<double> out) {
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i > 0) {
      if (p >= end || *p != ' ') return false;
      ++p;
    }
    const char* stop = p;
    while (stop < end && *stop != ' ') ++stop;
    const std::string_view word(p, static_cast<std::size_t>(stop - p));
    if (word == "nan" || word == "-nan") {
      out[i] = std::numeric_limits<double>::quiet_NaN();
    } else {
      const auto [next, ec] = std::from_chars(p, stop, out[i]);
      if (ec != std::errc() || next != stop) return false;
    }
    p = stop;
  }
  return p == end;
}

/// The fields of `r` (numbers and Booleans, as 1 or 0) as one line: exact decimals separated by
/// single spaces, in layout order.
template <typename Record>
std::string record_line(const Record& r) {
  std::string out;
  for_each_field<Record>([&](const auto& f) {
    if (!out.empty()) out += ' ';
    out += exact_decimal(static_cast<double>(f.get(r)));
  });
  return out;
}

/// Reads record_line's output into `r`; false (with `r` partly read) when the line does not
/// hold one number per field, or an integer field holds a fraction or is out of range.
template <typename Record>
bool parse_record_line(std::string_view text, Record& r) {
  std::array<double, field_count<Record>> v{};
  if (!parse_numbers(text, v)) return false;
  std::size_t i = 0;
  bool ok = true;
  for_each_field<Record>([&](const auto& f) {
    auto& value = f.get(r);
    using T = std::remove_cvref_t<decltype(value)>;
    const double x = v[i++];
    if constexpr (std::same_as<T, bool>) {
      value = x != 0.0;
    } else if constexpr (std::integral<T>) {
      const bool whole = x == std::floor(x) && x >= -9.2e18 && x <= 9.2e18;
      ok = ok && whole;
      if (whole) value = static_cast<T>(x);
    } else {
      value = static_cast<T>(x);
    }
  });
  return ok;
}

/// The records as text, one record_line per record, each ended by a newline.
template <typename Record>
std::string record_lines(const std::vector<Record>& records) {
  std::string out;
  for (const Record& r : records) {
    out += record_line(r);
    out += '\n';
  }
  return out;
}

/// Parses record_lines' output; io_error "where: 'file': <what> has a malformed line N" when a
/// line does not parse or `valid(record)` is false.
template <typename Record, typename Valid>
std::vector<Record> parse_record_lines(std::string_view text, const std::string& source,
                                       std::string_view what, std::string_view where, Valid valid) {
  std::vector<Record> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    Record r{};
    if (end == std::string_view::npos || !parse_record_line(text.substr(start, end - start), r) ||
        !valid(r)) {
      throw io_error(std::string(where) + ": '" + source + "': " + std::string(what) +
                     " has a malformed line " + std::to_string(out.size() + 1));
    }
    out.push_back(r);
    start = end + 1;
  }
  return out;
}

}  // namespace coulomb::train::detail
