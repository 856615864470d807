// SPDX-License-Identifier: MIT
/// @file text/dataset.hpp
/// @brief Labelled sentence and sentence-pair datasets read from TSV files, with the columns
/// selected by name, and the column layouts of the GLUE tasks the paper uses.
///
/// Badiei Khuzani et al. (2026), §5 evaluates on SST-2, QQP and Rotten Tomatoes. A dataset here
/// is a list of examples (text_a, optional text_b, integer label), each remembering its line in
/// the file so that later errors can point at it. Columns are found by name in the header, so
/// GLUE's SST-2 (`sentence<TAB>label`) and the project's bundled copy (`label<TAB>sentence`)
/// read the same way. Formats and their column names: docs/text.md (section "formats").
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "tsv.hpp"

namespace coulomb {

/// Which header columns hold the label and the text(s).
struct TextColumns {
  /// Label column; empty for unlabelled files (GLUE test splits), whose labels are then −1.
  std::string label = "label";
  /// First (or only) text column.
  std::string text_a = "sentence";
  /// Second text column of a sentence-pair task; empty for single-sentence tasks.
  std::string text_b;

  /// True for a sentence-pair task.
  bool is_pair() const noexcept { return !text_b.empty(); }

  /// SST-2, both as GLUE distributes it (`sentence<TAB>label`) and as bundled in the project's
  /// data (`label<TAB>sentence`).
  static TextColumns sst2() { return {"label", "sentence", ""}; }
  /// Rotten Tomatoes as bundled (`label<TAB>sentence`).
  static TextColumns rotten_tomatoes() { return {"label", "sentence", ""}; }
  /// MRPC as bundled (`label<TAB>sentence1<TAB>sentence2`).
  static TextColumns mrpc() { return {"label", "sentence1", "sentence2"}; }
  /// MRPC as GLUE distributes it (`Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String`).
  static TextColumns glue_mrpc() { return {"Quality", "#1 String", "#2 String"}; }
  /// QQP as GLUE distributes it (`id<TAB>qid1<TAB>qid2<TAB>question1<TAB>question2<TAB>
  /// is_duplicate`); the label is is_duplicate.
  static TextColumns qqp() { return {"is_duplicate", "question1", "question2"}; }
  /// QQP in the project's bundled layout (`label<TAB>question1<TAB>question2`).
  static TextColumns qqp_bundled() { return {"label", "question1", "question2"}; }
};

/// Options of the dataset readers.
struct TextReadOptions {
  /// Labels must be integers in [0, num_classes).
  int num_classes = 2;
  /// Handling of rows with the wrong number of fields.
  MalformedRows malformed = MalformedRows::error;
  /// At most this many line numbers of skipped rows are recorded.
  std::size_t max_recorded_lines = 100;
};

/// One example: a sentence (or a pair) and its label.
struct TextExample {
  std::string text_a;    ///< the sentence, or the first sentence of a pair
  std::string text_b;    ///< the second sentence of a pair (empty for single sentences)
  int label = -1;        ///< class in [0, num_classes), or −1 in an unlabelled file
  std::size_t line = 0;  ///< 1-based line in the source file (0 if not from a file)
};

/// A labelled dataset read from one file.
struct TextDataset {
  std::string source;                 ///< file it was read from
  bool is_pair = false;               ///< sentence-pair task
  bool is_labelled = true;            ///< false when read without a label column
  int num_classes = 2;                ///< labels lie in [0, num_classes)
  std::vector<TextExample> examples;  ///< in file order
  TsvReport report;                   ///< skipped malformed rows, blank lines
  std::size_t empty_texts = 0;        ///< examples with an empty or all-blank text field

  /// Number of examples.
  Index size() const noexcept { return static_cast<Index>(examples.size()); }
  /// The labels, in order.
  std::vector<int> labels() const {
    std::vector<int> out;
    out.reserve(examples.size());
    for (const auto& e : examples) out.push_back(e.label);
    return out;
  }
  /// Number of examples of each class (size num_classes).
  std::vector<Index> class_counts() const {
    std::vector<Index> counts(static_cast<std::size_t>(num_classes > 0 ? num_classes : 0), 0);
    for (const auto& e : examples) {
      if (e.label >= 0 && e.label < num_classes) ++counts[static_cast<std::size_t>(e.label)];
    }
    return counts;
  }
};

/// Order augmentation of a sentence-pair dataset: returns `data` followed by every pair with its
/// two sentences exchanged (same label, same line), so a model sees each pair in both orders. A
/// paraphrase or duplicate label does not depend on which sentence comes first, while the encoder
/// (segment ids) and the pair head's [u, v, …] do; the copies teach that symmetry. Throws
/// invalid_argument if `data` holds single sentences.
inline TextDataset with_swapped_pairs(const TextDataset& data) {
  if (!data.is_pair)
    detail::throw_invalid(
        "coulomb::with_swapped_pairs",
        "the dataset '" + data.source + "' holds single sentences, not sentence pairs");
  TextDataset out = data;
  out.examples.reserve(2 * data.examples.size());
  for (const TextExample& e : data.examples)
    out.examples.push_back(TextExample{e.text_b, e.text_a, e.label, e.line});
  return out;
}

namespace detail {

/// True if `s` has only ASCII blanks (or is empty).
inline bool is_blank(std::string_view s) noexcept {
  for (const char c : s) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n' && c != '\f' && c != '\v') return false;
  }
  return true;
}

/// Parses a label field: a decimal integer in [0, num_classes), optionally surrounded by spaces.
inline std::optional<int> parse_label(std::string_view field, int num_classes) noexcept {
  while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
  while (!field.empty() && field.back() == ' ') field.remove_suffix(1);
  if (field.empty()) return std::nullopt;
  int value = -1;
  const char* first = field.data();
  const char* last = first + field.size();
  const auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || ptr != last || value < 0 || value >= num_classes) return std::nullopt;
  return value;
}

/// Builds a dataset from TSV text (the core of the readers).
inline TextDataset parse_text_dataset(std::string_view text, std::string_view source,
                                      const TextColumns& columns, const TextReadOptions& options,
                                      std::string_view where) {
  require(options.num_classes >= 2, where,
          "argument 'options.num_classes' must be at least 2, got " +
              std::to_string(options.num_classes));
  require(!columns.text_a.empty(), where, "argument 'columns.text_a' is empty");
  TextDataset data;
  data.source = std::string(source);
  data.is_pair = columns.is_pair();
  data.is_labelled = !columns.label.empty();
  data.num_classes = options.num_classes;
  std::size_t col_label = 0;
  std::size_t col_a = 0;
  std::size_t col_b = 0;
  TsvOptions tsv;
  tsv.malformed = options.malformed;
  tsv.max_recorded_lines = options.max_recorded_lines;
  auto locate = [&](const std::vector<std::string>& header, const std::string& name) {
    const auto found = find_header_column(header, name, source, where);
    if (!found) {
      throw_io_at(
          where, source, 1,
          "no column " + quote_field(name) + " in the header (" + join_columns(header) + ")");
    }
    return *found;
  };
  data.report = scan_tsv(
      text, source, tsv, where,
      [&](const std::vector<std::string_view>& fields) {
        const std::vector<std::string> header(fields.begin(), fields.end());
        col_a = locate(header, columns.text_a);
        if (data.is_pair) col_b = locate(header, columns.text_b);
        if (data.is_labelled) col_label = locate(header, columns.label);
      },
      [&](std::size_t line, const std::vector<std::string_view>& fields) {
        // scan_tsv guarantees fields.size() equals the header's, which holds every column.
        TextExample ex;
        ex.line = line;
        if (data.is_labelled) {
          const auto label = parse_label(fields.at(col_label), options.num_classes);
          if (!label) {
            throw_io_at(where, source, line,
                        "label " + quote_field(fields.at(col_label)) + " in column " +
                            quote_field(columns.label) + " is not an integer in [0, " +
                            std::to_string(options.num_classes) + ")");
          }
          ex.label = *label;
        }
        ex.text_a = std::string(fields.at(col_a));
        if (data.is_pair) ex.text_b = std::string(fields.at(col_b));
        if (is_blank(ex.text_a) || (data.is_pair && is_blank(ex.text_b))) ++data.empty_texts;
        data.examples.push_back(std::move(ex));
      });
  return data;
}

}  // namespace detail

/// Parses a dataset from TSV text (a whole file's content); `source` names it in messages. With
/// read_text_file_auto (text/gzip.hpp) a program reads a file once, looks at its header line,
/// chooses the columns, and parses the same text, so that a pipe or a FIFO works too. Throws
/// io_error for a missing or duplicated column, a malformed row (unless skipped), or a label
/// that is not an integer in [0, options.num_classes); invalid_argument for bad options.
inline TextDataset parse_text_dataset(std::string_view text, std::string_view source,
                                      const TextColumns& columns = TextColumns::sst2(),
                                      const TextReadOptions& options = {}) {
  return detail::parse_text_dataset(text, source, columns, options, "coulomb::parse_text_dataset");
}

/// Reads a dataset from an uncompressed TSV file. Throws io_error as parse_text_dataset, and
/// when the file cannot be read or is gzip-compressed (use read_text_dataset_gz or
/// read_text_dataset_auto of text/gzip.hpp).
inline TextDataset read_text_dataset(const std::string& path,
                                     const TextColumns& columns = TextColumns::sst2(),
                                     const TextReadOptions& options = {}) {
  const char* where = "coulomb::read_text_dataset";
  const std::string bytes = coulomb::read_file(path, where);
  if (detail::has_gzip_magic(bytes)) {
    detail::throw_io_at(where, path, 0,
                        "the file is gzip-compressed; read it with read_text_dataset_gz or "
                        "read_text_dataset_auto from <coulomb/text/gzip.hpp> (CMake target "
                        "coulomb::gzip)");
  }
  return detail::parse_text_dataset(bytes, path, columns, options, where);
}

}  // namespace coulomb
