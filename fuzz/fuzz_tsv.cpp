// SPDX-License-Identifier: MIT
// libFuzzer target of the TSV and dataset readers (text/tsv.hpp, text/dataset.hpp) and of the
// gzip reader (text/gzip.hpp), built with -DCOULOMB_BUILD_FUZZERS=ON (clang). Each input is
// the content of a file: when it starts with the gzip magic 1f 8b it is decompressed first (as
// read_text_dataset_auto does), and the text is then read
//   - as a table (parse_tsv), with malformed rows an error and with them skipped;
//   - as a dataset in the layouts of SST-2, MRPC (pairs), GLUE's QQP, the bundled QQP and an
//     unlabelled single-sentence file, in both modes.
// Besides, the input itself is gzip-compressed here (as one member and as two concatenated
// members) and must decompress to itself, and every truncation of that stream must be rejected.
// Properties checked on every input (a violation calls std::abort):
//   - the readers return or throw coulomb::io_error; any other exception, crash, leak or
//     sanitizer report is a bug;
//   - a table has header.size() fields in every row, increasing line numbers after the
//     header's, report.rows == rows.size(), and counts every line once (header, row, skipped
//     row or blank line);
//   - with MalformedRows::skip the table reader throws only for text that has no non-blank line;
//   - a dataset agrees with the table read in the same mode: same rows, lines, texts and counts,
//     labels that are the label column's integers in [0, num_classes);
//   - gzip(x), as one member or two, decompresses to x; with max_bytes below x's size it
//     throws; a truncated stream throws.
// Run: build/fuzz/fuzz_tsv -max_total_time=60 <copy of fuzz/corpus/tsv>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zlib.h>

#include <coulomb/text/dataset.hpp>
#include <coulomb/text/gzip.hpp>
#include <coulomb/text/tsv.hpp>

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

// True when no line of `text` (BOM skipped, one trailing CR removed) has a byte: the only
// texts on which the table reader may throw with MalformedRows::skip.
bool has_no_content(std::string_view text) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) return false;
    pos = eol + 1;
  }
  return true;
}

// Number of lines of `text` after the BOM (a last line may lack its LF).
std::size_t count_lines(std::string_view text) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::size_t lines = 0;
  for (const char c : text) lines += c == '\n' ? 1 : 0;
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines;
}

void check_table(std::string_view text, const coulomb::TsvTable& table) {
  // Every line is the header, a row, a skipped row or a blank line.
  const auto& r = table.report;
  require(1 + r.rows + r.skipped_rows + r.blank_lines == count_lines(text));
  for (std::size_t i = 1; i < r.skipped_lines.size(); ++i) {
    require(r.skipped_lines[i - 1] < r.skipped_lines[i]);
  }
  require(!table.header.empty());
  require(table.rows.size() == table.line_numbers.size());
  require(table.report.rows == table.rows.size());
  std::size_t previous = 0;
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    require(table.rows[i].size() == table.header.size());
    require(table.line_numbers[i] > previous);
    require(table.line_numbers[i] >= 2);  // the header takes at least line 1
    previous = table.line_numbers[i];
  }
  require(table.report.skipped_lines.size() <= table.report.skipped_rows);
}

// The label a dataset must give to `field`, or -2 when the field is not a valid label.
int expected_label(std::string_view field, int num_classes) {
  while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
  while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
  int value = -2;
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || ec != std::errc() || ptr != field.data() + field.size() || value < 0 ||
      value >= num_classes) {
    return -2;
  }
  return value;
}

// Reads `text` as a dataset with `columns` and compares it with `table` (read in the same mode,
// or null when that read threw).
void check_dataset(std::string_view text, const coulomb::TsvTable* table,
                   const coulomb::TextColumns& columns, coulomb::MalformedRows mode,
                   int num_classes) {
  coulomb::TextReadOptions options;
  options.malformed = mode;
  options.num_classes = num_classes;
  coulomb::TextDataset data;
  try {
    data = coulomb::parse_text_dataset(text, "fuzz", columns, options);
  } catch (const coulomb::io_error&) {
    return;  // a missing or repeated column, a bad label, a malformed row, no header
  }
  require(table != nullptr);  // the dataset reader accepts no text that the table reader rejects
  require(data.is_pair == columns.is_pair());
  require(data.is_labelled == !columns.label.empty());
  require(data.examples.size() == table->rows.size());
  require(data.report.rows == table->report.rows);
  require(data.report.skipped_rows == table->report.skipped_rows);
  require(data.report.blank_lines == table->report.blank_lines);
  const std::size_t col_a = table->column(columns.text_a);
  const std::size_t col_b = columns.is_pair() ? table->column(columns.text_b) : 0;
  const std::size_t col_label = data.is_labelled ? table->column(columns.label) : 0;
  std::size_t empty = 0;
  for (std::size_t i = 0; i < data.examples.size(); ++i) {
    const auto& ex = data.examples[i];
    const auto& row = table->rows[i];
    require(ex.line == table->line_numbers[i]);
    require(ex.text_a == row[col_a]);
    require(columns.is_pair() ? ex.text_b == row[col_b] : ex.text_b.empty());
    if (data.is_labelled) {
      require(ex.label == expected_label(row[col_label], num_classes));
    } else {
      require(ex.label == -1);
    }
    if (coulomb::detail::is_blank(ex.text_a) ||
        (columns.is_pair() && coulomb::detail::is_blank(ex.text_b))) {
      ++empty;
    }
  }
  require(data.empty_texts == empty);
  const auto counts = data.class_counts();
  require(counts.size() == static_cast<std::size_t>(num_classes));
}

void check_text(std::string_view text) {
  for (const auto mode : {coulomb::MalformedRows::error, coulomb::MalformedRows::skip}) {
    coulomb::TsvOptions options;
    options.malformed = mode;
    options.max_recorded_lines = 3;
    coulomb::TsvTable table;
    bool parsed = false;
    try {
      table = coulomb::parse_tsv(text, "fuzz", options);
      parsed = true;
    } catch (const coulomb::io_error&) {
      if (mode == coulomb::MalformedRows::skip) require(has_no_content(text));
    }
    if (parsed) {
      check_table(text, table);
      if (mode == coulomb::MalformedRows::error) require(table.report.skipped_rows == 0);
    }
    const coulomb::TsvTable* t = parsed ? &table : nullptr;
    check_dataset(text, t, coulomb::TextColumns::sst2(), mode, 2);
    check_dataset(text, t, coulomb::TextColumns::mrpc(), mode, 2);
    check_dataset(text, t, coulomb::TextColumns::qqp(), mode, 2);
    check_dataset(text, t, coulomb::TextColumns::qqp_bundled(), mode, 3);
    check_dataset(text, t, coulomb::TextColumns{"", "sentence", ""}, mode, 2);
  }
}

// gzip members of `data` cut at the given positions (zlib, default level; a 512-byte window and
// little memory keep every input fast).
std::string gzip_members(std::string_view data, const std::vector<std::size_t>& cuts) {
  std::string out;
  std::size_t begin = 0;
  for (std::size_t k = 0; k <= cuts.size(); ++k) {
    const std::size_t end = k < cuts.size() ? cuts[k] : data.size();
    z_stream z{};
    require(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 9 + 16, 1, Z_DEFAULT_STRATEGY) ==
            Z_OK);
    std::string member(deflateBound(&z, static_cast<uLong>(end - begin)) + 32, '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + begin));
    z.avail_in = static_cast<uInt>(end - begin);
    z.next_out = reinterpret_cast<Bytef*>(member.data());
    z.avail_out = static_cast<uInt>(member.size());
    require(deflate(&z, Z_FINISH) == Z_STREAM_END);
    member.resize(member.size() - z.avail_out);
    deflateEnd(&z);
    out += member;
    begin = end;
  }
  return out;
}

// True when gunzip rejects `compressed` (with `options`).
bool gunzip_throws(std::string_view compressed, const coulomb::GzipOptions& options = {}) {
  try {
    (void)coulomb::gunzip(compressed, "fuzz", options);
  } catch (const coulomb::io_error&) {
    return true;
  }
  return false;
}

// Four decompressions per input (each costs a 64 KiB output buffer): one and two members, a
// truncated stream, and a size limit one byte too small.
void check_gzip_round_trip(std::string_view data) {
  const std::string one = gzip_members(data, {});
  require(coulomb::gunzip(one, "fuzz") == data);
  const std::string two = gzip_members(data, {data.size() / 2});
  require(coulomb::gunzip(two, "fuzz") == data);
  // Cut inside the 8-byte trailer or in the middle of the stream (a cut of the two-member
  // stream could fall on the boundary between the members, which is a valid stream).
  const std::size_t keep = data.size() % 2 == 0 ? one.size() - 1 : one.size() / 2;
  require(gunzip_throws(std::string_view(one).substr(0, keep)));
  if (!data.empty()) {
    coulomb::GzipOptions small;
    small.max_bytes = data.size() - 1;
    require(gunzip_throws(two, small));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (coulomb::detail::has_gzip_magic(bytes)) {
    coulomb::GzipOptions options;
    options.max_bytes = std::size_t{1} << 20;  // bounds the memory of a decompression bomb
    std::string text;
    try {
      text = coulomb::gunzip(bytes, "fuzz", options);
    } catch (const coulomb::io_error&) {
      return 0;  // damaged, truncated, trailing data, or too large
    }
    check_text(text);
  } else {
    check_text(bytes);
  }
  check_gzip_round_trip(bytes);
  return 0;
}
