// SPDX-License-Identifier: MIT
/// @file text/tsv.hpp
/// @brief Reading tab-separated files with a header row: whole files into memory, lines split
/// on TAB without quoting or escaping (the GLUE convention), column selection by name.
///
/// Format accepted (docs/text.md (section "tsv")):
/// - UTF-8 (or any ASCII-compatible bytes); a leading UTF-8 byte-order mark is skipped.
/// - Lines end with LF or CR LF; the last line may lack its end of line. Empty lines are skipped.
/// - The first non-empty line is the header; it names the columns. Every other line is a row and
///   must have as many TAB-separated fields as the header. There is no quoting: a `"` is an
///   ordinary character, as in GLUE's files.
///
/// A row with the wrong number of fields is an error (coulomb::io_error naming the file and the
/// line), or, with MalformedRows::skip, is skipped and counted (GLUE's original QQP train.tsv has
/// a few such rows, where a question contained a line break).
///
/// The reader never indexes past the input; any byte sequence either parses or throws io_error.
/// This header does not need zlib: gzip-compressed files are read by text/gzip.hpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/atomic_file.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

namespace coulomb {

/// What a reader does with a row whose number of fields differs from the header's.
enum class MalformedRows {
  error,  ///< throw coulomb::io_error naming the file and the line (default)
  skip,   ///< skip the row and count it (TsvReport::skipped_rows)
};

/// Options of the TSV readers.
struct TsvOptions {
  /// Handling of rows with the wrong number of fields.
  MalformedRows malformed = MalformedRows::error;
  /// At most this many line numbers of skipped rows are kept in TsvReport::skipped_lines.
  std::size_t max_recorded_lines = 100;
};

/// What a reader saw besides the rows it returned.
struct TsvReport {
  std::size_t rows = 0;                    ///< rows accepted (the header excluded)
  std::size_t skipped_rows = 0;            ///< malformed rows skipped (MalformedRows::skip)
  std::vector<std::size_t> skipped_lines;  ///< 1-based line numbers of the first skipped rows
  std::size_t blank_lines = 0;             ///< empty lines ignored
};

/// A whole TSV file in memory: the header and the rows, each with its line number.
struct TsvTable {
  std::string source;                          ///< file name (or the name given to parse_tsv)
  std::vector<std::string> header;             ///< column names, in file order
  std::vector<std::vector<std::string>> rows;  ///< rows.size() × header.size() fields
  std::vector<std::size_t> line_numbers;       ///< 1-based line of each row in the source
  TsvReport report;                            ///< skipped and blank lines

  /// The position of the column called `name`, or nothing if there is none. Throws io_error
  /// if several columns have that name.
  std::optional<std::size_t> find_column(std::string_view name) const;

  /// The position of the column called `name`; throws io_error naming the file and the header
  /// when there is no such column, or several.
  std::size_t column(std::string_view name) const;
};

namespace detail {

/// "where: 'source' line N: what" as an io_error.
[[noreturn]] inline void throw_io_at(std::string_view where, std::string_view source,
                                     std::size_t line, const std::string& what) {
  std::string msg(where);
  msg += ": '";
  msg += source;
  msg += "'";
  if (line > 0) {
    msg += " line ";
    msg += std::to_string(line);
  }
  msg += ": ";
  msg += what;
  throw io_error(msg);
}

/// A field shown in a message: at most 40 bytes, control bytes as '?'.
inline std::string quote_field(std::string_view field) {
  constexpr std::size_t limit = 40;
  std::string out = "'";
  for (std::size_t i = 0; i < field.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(field[i]);
    out += (c < 0x20 || c == 0x7F) ? '?' : static_cast<char>(c);
  }
  if (field.size() > limit) out += "...";
  out += "'";
  return out;
}

/// The header's column names joined by ", " (for messages), shortened if long.
inline std::string join_columns(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ", ";
    if (out.size() > 200) {
      out += "...";
      break;
    }
    out += quote_field(names[i]);
  }
  return out;
}

/// True when `bytes` starts with the gzip magic number 1f 8b.
inline bool has_gzip_magic(std::string_view bytes) noexcept {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1F &&
         static_cast<unsigned char>(bytes[1]) == 0x8B;
}

/// Splits `line` on TAB into `fields` (views into `line`); always at least one field.
inline void split_tabs(std::string_view line, std::vector<std::string_view>& fields) {
  fields.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t tab = line.find('\t', start);
    if (tab == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return;
    }
    fields.push_back(line.substr(start, tab - start));
    start = tab + 1;
  }
}

/// Scans TSV text line by line. Calls `on_header(fields)` once for the header and
/// `on_row(line_number, fields)` for every well-formed row (fields are views into `text`, valid
/// during the call). Applies the BOM, CR LF, blank-line and column-count rules of this header.
/// Throws io_error for an input without a header and for malformed rows (unless skipped).
template <typename OnHeader, typename OnRow>
TsvReport scan_tsv(std::string_view text, std::string_view source, const TsvOptions& options,
                   std::string_view where, OnHeader&& on_header, OnRow&& on_row) {
  TsvReport report;
  if (text.size() >= 3 && static_cast<unsigned char>(text[0]) == 0xEF &&
      static_cast<unsigned char>(text[1]) == 0xBB && static_cast<unsigned char>(text[2]) == 0xBF) {
    text.remove_prefix(3);
  }
  std::vector<std::string_view> fields;
  std::size_t expected = 0;  // 0 until the header is seen
  std::vector<std::string> header_names;
  std::size_t line_number = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t eol = text.find('\n', pos);
    const std::size_t end = eol == std::string_view::npos ? text.size() : eol;
    std::string_view line = text.substr(pos, end - pos);
    pos = eol == std::string_view::npos ? text.size() : eol + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      ++report.blank_lines;
      continue;
    }
    split_tabs(line, fields);
    if (expected == 0) {
      expected = fields.size();
      header_names.assign(fields.begin(), fields.end());
      on_header(fields);
      continue;
    }
    if (fields.size() != expected) {
      if (options.malformed == MalformedRows::skip) {
        ++report.skipped_rows;
        if (report.skipped_lines.size() < options.max_recorded_lines) {
          report.skipped_lines.push_back(line_number);
        }
        continue;
      }
      throw_io_at(where, source, line_number,
                  "expected " + std::to_string(expected) + " TAB-separated fields (" +
                      join_columns(header_names) + "), found " + std::to_string(fields.size()));
    }
    on_row(line_number, fields);
    ++report.rows;
  }
  if (expected == 0) {
    throw_io_at(where, source, 0, "no header line (the file is empty or has only blank lines)");
  }
  return report;
}

/// Position of `name` among `header`, or nothing; throws io_error if it appears more than once.
inline std::optional<std::size_t> find_header_column(const std::vector<std::string>& header,
                                                     std::string_view name, std::string_view source,
                                                     std::string_view where) {
  std::optional<std::size_t> found;
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (header[i] != name) continue;
    if (found) {
      throw_io_at(where, source, 1,
                  "the header names column " + quote_field(name) + " more than once");
    }
    found = i;
  }
  return found;
}

}  // namespace detail

inline std::optional<std::size_t> TsvTable::find_column(std::string_view name) const {
  return detail::find_header_column(header, name, source, "coulomb::TsvTable::find_column");
}

inline std::size_t TsvTable::column(std::string_view name) const {
  const auto found = detail::find_header_column(header, name, source, "coulomb::TsvTable::column");
  if (!found) {
    detail::throw_io_at("coulomb::TsvTable::column", source, 1,
                        "no column " + detail::quote_field(name) + " in the header (" +
                            detail::join_columns(header) + ")");
  }
  return *found;
}

/// Parses TSV text (the whole content of a file) into a table. `source` names the text in
/// error messages. Throws io_error for text without a header line and for malformed rows
/// (unless options.malformed is MalformedRows::skip).
inline TsvTable parse_tsv(std::string_view text, std::string_view source,
                          const TsvOptions& options = {}) {
  TsvTable table;
  table.source = std::string(source);
  table.report = detail::scan_tsv(
      text, source, options, "coulomb::parse_tsv",
      [&](const std::vector<std::string_view>& fields) {
        table.header.assign(fields.begin(), fields.end());
      },
      [&](std::size_t line, const std::vector<std::string_view>& fields) {
        table.rows.emplace_back(fields.begin(), fields.end());
        table.line_numbers.push_back(line);
      });
  return table;
}

/// Reads an uncompressed TSV file into a table. Throws io_error when the file cannot be read,
/// is gzip-compressed (use read_tsv_gz of text/gzip.hpp), has no header, or has a malformed row.
inline TsvTable read_tsv(const std::string& path, const TsvOptions& options = {}) {
  const char* where = "coulomb::read_tsv";
  const std::string bytes = coulomb::read_file(path, where);
  if (detail::has_gzip_magic(bytes)) {
    detail::throw_io_at(where, path, 0,
                        "the file is gzip-compressed; read it with read_tsv_gz from "
                        "<coulomb/text/gzip.hpp> (CMake target coulomb::gzip)");
  }
  TsvTable table = parse_tsv(bytes, path, options);
  return table;
}

}  // namespace coulomb
