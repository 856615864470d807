// SPDX-License-Identifier: MIT
// examples/common/paper_stats.hpp: the bookkeeping of the reproduce_paper driver.
//
// A run table is a CSV file with one row per training run: some key columns (dataset,
// variant, seed, ...) and numeric value columns (metrics and timings). The driver appends a row
// as soon as a run ends, so an interrupted reproduction loses at most the run in progress, and
// a restart skips every run already in the file. From the table it computes per-cell means and
// sample standard deviations and paired differences between two variants over matching seeds,
// with a two-sided 95 % Student-t confidence interval.
//
// The CSV is plain: comma-separated, no quoting. Keys must not contain a comma, a double
// quote or a line break (the driver's keys are identifiers such as "favor" or "learned"); the
// writer refuses such keys instead of writing a file it cannot read back.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <coulomb/io/atomic_file.hpp>

namespace coulomb_examples::paper {

/// One training run: its key fields and its numeric results, in the table's column order.
struct RunRow {
  std::vector<std::string> keys;
  std::vector<double> values;
};

/// Mean, sample standard deviation (n − 1 in the denominator; 0 when n = 1) and count.
struct Summary {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double sd = std::numeric_limits<double>::quiet_NaN();
  int n = 0;
};

/// The mean of b − a over paired runs, its standard deviation, and the two-sided 95 %
/// Student-t confidence interval [lo, hi] of the mean (NaN when n < 2).
struct PairedDifference {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double sd = std::numeric_limits<double>::quiet_NaN();
  double lo = std::numeric_limits<double>::quiet_NaN();
  double hi = std::numeric_limits<double>::quiet_NaN();
  int n = 0;
};

/// The 0.975 quantile of Student's t distribution with `df` degrees of freedom (df ≥ 1): the
/// factor of a two-sided 95 % confidence interval. Exact to the 3 decimals of the usual tables
/// for df ≤ 30; beyond, the Cornish–Fisher expansion around the normal quantile (error < 1e-4).
inline double student_t_975(int df) {
  if (df < 1)
    throw std::invalid_argument("student_t_975: df must be at least 1, got " + std::to_string(df));
  static constexpr double table[30] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                       2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                       2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                       2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df <= 30) return table[df - 1];
  const double z = 1.959963984540054;
  const double n = df;
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * n) + (5 * z5 + 16 * z3 + 3 * z) / (96 * n * n) +
         (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * n * n * n);
}

/// Summary of `x` (NaN entries are an error: a run that produced no figure has no row).
inline Summary summarize(std::span<const double> x) {
  Summary s;
  s.n = static_cast<int>(x.size());
  if (x.empty()) return s;
  double sum = 0.0;
  for (double v : x) sum += v;
  s.mean = sum / static_cast<double>(x.size());
  double ss = 0.0;
  for (double v : x) ss += (v - s.mean) * (v - s.mean);
  s.sd = x.size() > 1 ? std::sqrt(ss / static_cast<double>(x.size() - 1)) : 0.0;
  return s;
}

/// Paired difference b − a (same length; entry i of both comes from the same seed).
inline PairedDifference paired_difference(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size())
    throw std::invalid_argument("paired_difference: the two samples have " +
                                std::to_string(a.size()) + " and " + std::to_string(b.size()) +
                                " entries; they must be paired one to one");
  std::vector<double> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = b[i] - a[i];
  const Summary s = summarize(d);
  PairedDifference p;
  p.n = s.n;
  p.mean = s.mean;
  p.sd = s.sd;
  if (s.n >= 2) {
    const double half = student_t_975(s.n - 1) * s.sd / std::sqrt(static_cast<double>(s.n));
    p.lo = s.mean - half;
    p.hi = s.mean + half;
  }
  return p;
}

/// The rows of a run table, with its column names; reads and appends the CSV file.
class RunTable {
 public:
  RunTable(std::vector<std::string> key_names, std::vector<std::string> value_names)
      : key_names_(std::move(key_names)), value_names_(std::move(value_names)) {
    for (const auto& k : key_names_) check_field(k, "key column name");
    for (const auto& v : value_names_) check_field(v, "value column name");
  }

  const std::vector<std::string>& key_names() const noexcept { return key_names_; }
  const std::vector<std::string>& value_names() const noexcept { return value_names_; }
  const std::vector<RunRow>& rows() const noexcept { return rows_; }

  /// Index of a value column; throws if there is none of that name.
  std::size_t value_index(std::string_view name) const {
    for (std::size_t i = 0; i < value_names_.size(); ++i)
      if (value_names_[i] == name) return i;
    throw std::invalid_argument("run table: no value column '" + std::string(name) + "'");
  }

  /// Whether a row with exactly these keys exists.
  bool contains(const std::vector<std::string>& keys) const {
    return std::any_of(rows_.begin(), rows_.end(), [&](const RunRow& r) { return r.keys == keys; });
  }

  /// Adds a row in memory (checked against the columns).
  void add(RunRow row) {
    check_row(row);
    rows_.push_back(std::move(row));
  }

  /// Reads `path` if it exists. The header must equal this table's columns (a table written
  /// by another version of the driver is refused rather than misread). Returns the number of
  /// rows read. A last line without a newline (a run killed while writing) is ignored.
  std::size_t load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return 0;
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t pos = 0, line_no = 0, count = 0;
    while (pos < text.size()) {
      const std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) break;  // torn last line
      const std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      ++line_no;
      const auto fields = split(line);
      if (line_no == 1) {
        if (fields != header())
          throw std::runtime_error(path + ":1: the columns differ from this driver's (" +
                                   join(header()) + "); move the file away or use another --out");
        continue;
      }
      if (fields.size() != header().size())
        throw std::runtime_error(path + ":" + std::to_string(line_no) + ": " +
                                 std::to_string(fields.size()) + " fields, expected " +
                                 std::to_string(header().size()));
      RunRow row;
      row.keys.assign(fields.begin(),
                      fields.begin() + static_cast<std::ptrdiff_t>(key_names_.size()));
      for (std::size_t i = key_names_.size(); i < fields.size(); ++i) {
        double v = 0.0;
        const auto& f = fields[i];
        const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
        if (ec != std::errc() || ptr != f.data() + f.size())
          throw std::runtime_error(path + ":" + std::to_string(line_no) + ": column '" +
                                   header()[i] + "' is not a number: '" + f + "'");
        row.values.push_back(v);
      }
      rows_.push_back(std::move(row));
      ++count;
    }
    return count;
  }

  /// Adds `row` to the table and replaces the file at `path` with the whole table, atomically
  /// (io/atomic_file.hpp: a crash or a full disk leaves the previous file, never a torn one).
  void append(const std::string& path, RunRow row) {
    check_row(row);
    rows_.push_back(std::move(row));
    try {
      save(path);
    } catch (...) {
      rows_.pop_back();
      throw;
    }
  }

  /// Writes the header and every row to `path`, atomically.
  void save(const std::string& path) const {
    std::string text = join(header()) + '\n';
    for (const auto& r : rows_) {
      std::vector<std::string> fields = r.keys;
      for (double v : r.values) {
        char buf[64];
        const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
        fields.emplace_back(buf, ptr);
      }
      text += join(fields) + '\n';
    }
    coulomb::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())),
                                   "run table");
  }

  /// Values of column `value` of the rows whose keys match `filter` (an empty filter entry
  /// matches anything), ordered by the key column `order_by` (the seed, for pairing).
  std::map<std::string, double> select(const std::vector<std::string>& filter,
                                       std::string_view value, std::size_t order_by) const {
    const std::size_t vi = value_index(value);
    std::map<std::string, double> out;
    for (const auto& r : rows_) {
      bool match = true;
      for (std::size_t k = 0; k < filter.size() && k < r.keys.size(); ++k)
        if (!filter[k].empty() && filter[k] != r.keys[k]) match = false;
      if (match) out[r.keys.at(order_by)] = r.values[vi];
    }
    return out;
  }

 private:
  std::vector<std::string> header() const {
    std::vector<std::string> h = key_names_;
    h.insert(h.end(), value_names_.begin(), value_names_.end());
    return h;
  }

  static void check_field(const std::string& f, const char* what) {
    if (f.empty() || f.find_first_of(",\"\r\n") != std::string::npos)
      throw std::invalid_argument(std::string("run table: ") + what + " '" + f +
                                  "' is empty or holds a comma, quote or line break");
  }

  void check_row(const RunRow& row) const {
    if (row.keys.size() != key_names_.size() || row.values.size() != value_names_.size())
      throw std::invalid_argument("run table: a row has " + std::to_string(row.keys.size()) +
                                  " keys and " + std::to_string(row.values.size()) +
                                  " values; the table has " + std::to_string(key_names_.size()) +
                                  " and " + std::to_string(value_names_.size()));
    for (const auto& k : row.keys) check_field(k, "key");
  }

  static std::vector<std::string> split(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (true) {
      const std::size_t c = line.find(',', pos);
      out.emplace_back(line.substr(pos, c == std::string_view::npos ? line.npos : c - pos));
      if (c == std::string_view::npos) break;
      pos = c + 1;
    }
    return out;
  }

  static std::string join(const std::vector<std::string>& f) {
    std::string s;
    for (std::size_t i = 0; i < f.size(); ++i) {
      if (i) s += ',';
      s += f[i];
    }
    return s;
  }

  std::vector<std::string> key_names_;
  std::vector<std::string> value_names_;
  std::vector<RunRow> rows_;
};

}  // namespace coulomb_examples::paper
