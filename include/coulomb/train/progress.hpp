// SPDX-License-Identifier: MIT
/// @file train/progress.hpp
/// @brief Progress of long work (Phase A, Phase B, the benchmark drivers): step/total, named
/// values such as the loss, throughput and ETA, shown on one updating line on a terminal and as
/// plain periodic lines otherwise, with an optional JSON-lines log.
///
/// Output modes (ProgressMode):
///   - terminal: one line redrawn in place with a carriage return, at most once per
///     `min_redraw_interval` seconds (10 per second by default) and always at the last step;
///   - lines: a plain line every `line_every_steps` steps and/or every `line_every_seconds`
///     seconds (whichever comes first), for logs and pipes;
///   - automatic (the default): terminal when the stream is std::cout, std::cerr or std::clog and
///     that file descriptor is a terminal (isatty, POSIX), lines otherwise;
///   - off: no progress lines (the JSON log, if any, is still written).
///
/// A line reads, for example,
///
///     phase A  120/600 (20%)  energy -0.1523  eta 0.01  48.8 steps/s  elapsed 2.5s  ETA 9.8s
///
/// Throughput is items per second since the reporter started: steps by default, or any count the
/// caller passes (tokens, sequences, particle-steps). ETA = remaining / rate, over items when a
/// total number of items is known, over steps otherwise; it is omitted while no rate is known.
///
/// The JSON-lines log holds one object per update (thinned by `json_every_steps` and
/// `json_min_interval`) and one at finish(), for example
///
///     {"event":"update","label":"phase A","step":120,"total":600,"items":120,"elapsed_s":2.5,
///      "rate":48,"unit":"steps","eta_s":10,"values":{"energy":-0.1523,"eta":0.01}}
///
/// (on one line). Strings are escaped as JSON requires (quotes, backslashes, control characters;
/// invalid UTF-8 becomes U+FFFD); NaN and ±∞ are written as null, since JSON has no such numbers;
/// unknown quantities (total, ETA, rate) are null. Each line is flushed when written, so a log
/// cut short by a crash holds complete lines only (but possibly a partial last one).
///
/// Time comes from an injectable clock (seconds, non-decreasing), so tests can drive the
/// reporter with a fake clock. The reporter is not thread-safe: callers that report from several
/// threads serialize the calls (for example under a mutex).
///
/// LangevinProgress adapts a reporter to the callback protocol of
/// coulomb::ProjectedLangevin::optimize (particles/langevin.hpp) for Phase A.
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iomanip>
#include <iostream>
#include <limits>
#include <locale>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/ioctl.h>
#include <unistd.h>
#endif

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

namespace coulomb::train {

/// How a ProgressReporter writes to its stream (see the file comment).
enum class ProgressMode {
  automatic,  ///< terminal if the stream is a terminal, lines otherwise
  terminal,   ///< one line updated in place with a carriage return, rate-limited
  lines,      ///< plain periodic lines
  off,        ///< nothing on the stream (the JSON log is still written)
};

/// The name of a mode: "auto", "terminal", "lines" or "off".
inline const char* to_string(ProgressMode mode) noexcept {
  switch (mode) {
    case ProgressMode::automatic:
      return "auto";
    case ProgressMode::terminal:
      return "terminal";
    case ProgressMode::lines:
      return "lines";
    case ProgressMode::off:
      return "off";
  }
  return "?";
}

/// The mode named "auto", "terminal", "lines" or "off". Throws invalid_argument for any other
/// name.
inline ProgressMode progress_mode_from_string(std::string_view name) {
  for (ProgressMode m :
       {ProgressMode::automatic, ProgressMode::terminal, ProgressMode::lines, ProgressMode::off})
    if (name == to_string(m)) return m;
  coulomb::detail::throw_invalid(
      "coulomb::train::progress_mode_from_string",
      "argument 'name' must be auto, terminal, lines or off, got '" + std::string(name) + "'");
}

/// A named value shown with the progress, for example {"loss", 0.53}.
struct ProgressValue {
  std::string name;  ///< shown as is on the line; escaped in the JSON log
  double value = 0;  ///< any double; NaN and ±∞ are shown as such and logged as null
};

/// A clock for the reporter: seconds since an arbitrary origin, never decreasing.
using ProgressClock = std::function<double()>;

/// The default clock: std::chrono::steady_clock in seconds.
inline double steady_clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Options of ProgressReporter.
struct ProgressOptions {
  std::string label{};         ///< printed first on every line and logged as "label" (may be empty)
  std::string unit = "steps";  ///< the unit of the throughput ("steps", "tokens", …)
  ProgressMode mode = ProgressMode::automatic;  ///< see ProgressMode
  /// Print message() lines (per-epoch summaries) in every mode, off included. False silences
  /// them; with mode off as well, the reporter prints nothing (a tool's --quiet).
  bool messages = true;
  /// Terminal mode: least time between two redraws in seconds (≥ 0; 0.1 = 10 per second).
  double min_redraw_interval = 0.1;
  /// Lines mode: a line every this many steps (≥ 0; 0: not by steps).
  Index line_every_steps = 0;
  /// Lines mode: a line once this many seconds have passed since the last one (≥ 0; 0: not by
  /// time). With both periods 0, lines mode prints only the finish() line.
  double line_every_seconds = 10.0;
  Index total_items = 0;  ///< total number of items, for the ETA over items (0: unknown)
  /// Steps already done when the reporter starts (≥ 0), for example when training resumes
  /// from a checkpoint: the throughput and the ETA count only the steps after it.
  Index start_step = 0;
  /// Items already done when the reporter starts (≥ 0; with update(step, items, …)).
  double start_items = 0.0;
  int precision = 4;  ///< significant digits of the values on the line (1 to 17)
  /// Terminal mode: longest line in characters (0: the terminal's width when it can be found,
  /// else no limit). Longer lines are cut so that the carriage return never wraps.
  Index max_width = 0;
  std::ostream* json = nullptr;  ///< JSON-lines log to this stream (not owned; nullptr: none)
  std::string json_path{};       ///< JSON-lines log to this file (truncated; empty: none)
  /// Log every update (1), or (k > 1) an update once k steps have passed since the last
  /// logged one.
  Index json_every_steps = 1;
  double json_min_interval = 0.0;  ///< and at least this many seconds apart (≥ 0)

  /// Throws invalid_argument, naming the option, for negative periods or intervals, a
  /// precision outside [1, 17], a negative total_items, start_step, start_items or max_width,
  /// json_every_steps < 1, or both `json` and `json_path` set.
  void validate() const {
    const char* where = "coulomb::train::ProgressOptions";
    using coulomb::detail::require;
    require(min_redraw_interval >= 0.0 && std::isfinite(min_redraw_interval), where,
            "argument 'min_redraw_interval' must be finite and >= 0, got " +
                std::to_string(min_redraw_interval));
    require(line_every_steps >= 0, where,
            "argument 'line_every_steps' must be >= 0, got " + std::to_string(line_every_steps));
    require(line_every_seconds >= 0.0 && std::isfinite(line_every_seconds), where,
            "argument 'line_every_seconds' must be finite and >= 0, got " +
                std::to_string(line_every_seconds));
    require(total_items >= 0, where,
            "argument 'total_items' must be >= 0, got " + std::to_string(total_items));
    require(start_step >= 0, where,
            "argument 'start_step' must be >= 0, got " + std::to_string(start_step));
    require(start_items >= 0.0 && std::isfinite(start_items), where,
            "argument 'start_items' must be finite and >= 0, got " + std::to_string(start_items));
    require(precision >= 1 && precision <= 17, where,
            "argument 'precision' must be in [1, 17], got " + std::to_string(precision));
    require(max_width >= 0, where,
            "argument 'max_width' must be >= 0, got " + std::to_string(max_width));
    require(json_every_steps >= 1, where,
            "argument 'json_every_steps' must be >= 1, got " + std::to_string(json_every_steps));
    require(json_min_interval >= 0.0 && std::isfinite(json_min_interval), where,
            "argument 'json_min_interval' must be finite and >= 0, got " +
                std::to_string(json_min_interval));
    require(json == nullptr || json_path.empty(), where,
            "arguments 'json' and 'json_path' are both set; give at most one");
  }
};

namespace detail {

/// Whether `out` is std::cout, std::cerr or std::clog writing to a terminal; its width in
/// columns when it is one and the width can be found (else 0).
inline bool stream_is_terminal(const std::ostream& out, Index* width = nullptr) {
  if (width) *width = 0;
#if defined(__unix__) || defined(__APPLE__)
  int fd = -1;
  if (&out == &std::cout)
    fd = STDOUT_FILENO;
  else if (&out == &std::cerr || &out == &std::clog)
    fd = STDERR_FILENO;
  if (fd < 0 || ::isatty(fd) == 0) return false;
  winsize size{};
  if (width && ::ioctl(fd, TIOCGWINSZ, &size) == 0) *width = static_cast<Index>(size.ws_col);
  return true;
#else
  (void)out;
  return false;
#endif
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

/// `text` with control characters written as escapes (`\n`, `\t`, `\x01`), so that a name can
/// never break the one-line display.
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

}  // namespace detail

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

/// Reports the progress of long work (see the file comment). Typical use:
///
///     coulomb::train::ProgressReporter progress(std::cout, num_steps,
///                                               {.label = "phase B", .unit = "tokens"});
///     for (Index step = 1; step <= num_steps; ++step) {
///       const double loss = train_step(batch);
///       tokens += batch.tokens();
///       progress.update(step, tokens, {{"loss", loss}});
///     }
///     progress.finish();
class ProgressReporter {
 public:
  /// Reports to `out` on work of `total` steps (0: unknown, then no percentage and the ETA only
  /// through `options.total_items`). Time starts now, on `clock`. Throws invalid_argument for a
  /// negative total, invalid options or an empty clock, and io_error if `options.json_path`
  /// cannot be opened for writing.
  explicit ProgressReporter(std::ostream& out, Index total = 0, ProgressOptions options = {},
                            ProgressClock clock = steady_clock_seconds)
      : out_(&out), options_(std::move(options)), clock_(std::move(clock)), total_(total) {
    const char* where = "coulomb::train::ProgressReporter";
    options_.validate();
    coulomb::detail::require(total >= 0, where,
                             "argument 'total' must be >= 0, got " + std::to_string(total));
    coulomb::detail::require(static_cast<bool>(clock_), where, "argument 'clock' is empty");
    Index terminal_width = 0;
    switch (options_.mode) {
      case ProgressMode::automatic:
        terminal_ = detail::stream_is_terminal(out, &terminal_width);
        break;
      case ProgressMode::terminal:
        terminal_ = true;
        detail::stream_is_terminal(out, &terminal_width);
        break;
      case ProgressMode::lines:
        terminal_ = false;
        break;
      case ProgressMode::off:
        silent_ = true;
        break;
    }
    width_ =
        options_.max_width > 0 ? options_.max_width : (terminal_width > 1 ? terminal_width - 1 : 0);
    if (!options_.json_path.empty()) {
      json_file_ =
          std::make_unique<std::ofstream>(options_.json_path, std::ios::out | std::ios::trunc);
      if (!*json_file_)
        throw io_error(std::string(where) + ": cannot open the JSON log '" + options_.json_path +
                       "' (argument 'options.json_path') for writing");
      json_ = json_file_.get();
    } else {
      json_ = options_.json;
    }
    step_ = options_.start_step;
    items_ = static_cast<double>(step_);
    last_line_step_ = step_;
    last_json_step_ = step_;
    start_time_ = clock_();
    last_line_time_ = start_time_;
    last_json_time_ = start_time_;
  }

  ProgressReporter(const ProgressReporter&) = delete;             ///< not copyable
  ProgressReporter& operator=(const ProgressReporter&) = delete;  ///< not copyable

  /// Ends a dangling terminal line with a newline (without the finish() line). Never throws.
  ~ProgressReporter() {
    if (line_open_) {
      try {
        *out_ << '\n' << std::flush;
      } catch (...) {  // a destructor must not throw; the stream state tells the caller
      }
    }
  }

  /// The options (validated).
  const ProgressOptions& options() const noexcept { return options_; }
  /// Whether the reporter draws one updating line (terminal mode, resolved).
  bool terminal() const noexcept { return terminal_ && !silent_; }
  /// The total number of steps (0: unknown).
  Index total() const noexcept { return total_; }
  /// The last step reported (`options.start_step` before the first update).
  Index step() const noexcept { return step_; }
  /// Seconds since the reporter started, on its clock.
  double elapsed() const { return clock_() - start_time_; }
  /// Whether finish() was called.
  bool finished() const noexcept { return finished_; }

  /// Sets the total number of steps (0: unknown), for work whose size is known only later.
  /// Throws invalid_argument if it is negative.
  void set_total(Index total) {
    coulomb::detail::require(total >= 0, "coulomb::train::ProgressReporter::set_total",
                             "argument 'total' must be >= 0, got " + std::to_string(total));
    total_ = total;
  }

  /// Reports that `step` steps are done (cumulative; the throughput counts steps), with
  /// `values` shown after the step. See update(Index, double, …) for the errors.
  void update(Index step, std::initializer_list<ProgressValue> values = {}) {
    update_impl(step, static_cast<double>(step), false, values.begin(), values.size());
  }
  /// As above, with the values in a vector.
  void update(Index step, const std::vector<ProgressValue>& values) {
    update_impl(step, static_cast<double>(step), false, values.data(), values.size());
  }
  /// Reports that `step` steps and `items` items (cumulative: tokens, sequences, …) are done;
  /// the throughput counts items. Use one of the two forms for the whole run. Throws
  /// invalid_argument, naming the argument, if the step or the item count goes backwards (below
  /// the start values at first) or (items) is not finite, if two values have the same name, if
  /// the forms are mixed, or if the reporter has finished.
  void update(Index step, double items, std::initializer_list<ProgressValue> values) {
    update_impl(step, items, true, values.begin(), values.size());
  }
  /// As above, with the values in a vector.
  void update(Index step, double items, const std::vector<ProgressValue>& values) {
    update_impl(step, items, true, values.data(), values.size());
  }

  /// Prints `text` as a line of its own: in terminal mode above the progress line, which is
  /// then redrawn; otherwise as is (also in mode off). Prints nothing when options.messages is
  /// false. Not logged to JSON.
  void message(std::string_view text) {
    if (!options_.messages) return;
    if (line_open_) {
      *out_ << '\r' << std::string(static_cast<std::size_t>(drawn_width_), ' ') << '\r';
      line_open_ = false;
      drawn_width_ = 0;
    }
    *out_ << text << '\n';
    if (terminal() && !last_line_.empty()) draw_terminal(last_line_);
    out_->flush();
  }

  /// Ends the report: the terminal line is redrawn with the last state and closed, or (lines
  /// mode) a final line is printed, "label  done: S unit in T (rate unit/s)" (with items:
  /// "label  done: S steps, I unit in T (rate unit/s)") followed by the last values; the JSON log
  /// gets an object with "event":"finish". Calling it again does nothing.
  void finish() {
    if (finished_) return;
    finished_ = true;
    const double now = clock_();
    const std::string line = finish_line(now);
    if (!silent_) {
      if (terminal_) {
        draw_terminal(line);
        *out_ << '\n';
        line_open_ = false;
      } else {
        *out_ << line << '\n';
      }
      out_->flush();
    }
    if (json_) write_json("finish", now);
  }

  /// The text of the progress line for the current state at time `now` (on the reporter's
  /// clock). update() prints this; it is public for tests and custom displays.
  std::string line(double now) const {
    std::string s = label_prefix();
    s += std::to_string(step_);
    if (total_ > 0) {
      s += '/';
      s += std::to_string(total_);
      const double percent = 100.0 * static_cast<double>(step_) / static_cast<double>(total_);
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, " (%.0f%%)", std::floor(percent));
      s += buffer;
    }
    append_values(s);
    const double rate = throughput(now);
    if (std::isfinite(rate)) s += "  " + format_rate(rate) + " " + options_.unit + "/s";
    s += "  elapsed " + format_duration(now - start_time_);
    const double eta = eta_seconds(now);
    if (std::isfinite(eta)) s += "  ETA " + format_duration(eta);
    return s;
  }

  /// Items (or steps) per second since the start, at time `now` (counting only those after
  /// `options.start_items` or `options.start_step`); NaN until some time has passed and some
  /// work is done.
  double throughput(double now) const {
    const double dt = now - start_time_;
    const double done = items_ - base_items();
    if (!(dt > 0.0) || !(done > 0.0)) return std::numeric_limits<double>::quiet_NaN();
    return done / dt;
  }

  /// Estimated seconds left at time `now`: remaining items over the item rate when
  /// `options.total_items` is set and items are counted, else remaining steps over the step
  /// rate when the total is known; NaN when it cannot be estimated yet.
  double eta_seconds(double now) const {
    const double dt = now - start_time_;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (!(dt > 0.0)) return nan;
    if (options_.total_items > 0 && counts_items_) {
      const double done = items_ - options_.start_items;
      if (!(done > 0.0)) return nan;
      return std::max(0.0, static_cast<double>(options_.total_items) - items_) * dt / done;
    }
    const Index done = step_ - options_.start_step;
    if (total_ <= 0 || done <= 0) return nan;
    return static_cast<double>(std::max<Index>(0, total_ - step_)) * dt / static_cast<double>(done);
  }

 private:
  /// Items done before the start: start_items when items are counted, else start_step.
  double base_items() const {
    return counts_items_ ? options_.start_items : static_cast<double>(options_.start_step);
  }

  std::string label_prefix() const {
    if (options_.label.empty()) return {};
    return detail::printable(options_.label) + "  ";
  }

  void append_values(std::string& s) const {
    std::ostringstream os;
    os.imbue(std::locale::classic());
    os << std::setprecision(options_.precision);
    for (const ProgressValue& v : values_)
      os << "  " << detail::printable(v.name) << ' ' << v.value;
    s += os.str();
  }

  std::string finish_line(double now) const {
    std::string s = label_prefix();
    s += "done: " + std::to_string(step_) + ' ' + (counts_items_ ? "steps" : options_.unit);
    if (counts_items_) {
      std::ostringstream os;
      os.imbue(std::locale::classic());
      os << std::setprecision(15) << items_;
      s += ", " + os.str() + " " + options_.unit;
    }
    s += " in " + format_duration(now - start_time_);
    const double rate = throughput(now);
    if (std::isfinite(rate)) s += " (" + format_rate(rate) + " " + options_.unit + "/s)";
    append_values(s);
    return s;
  }

  template <typename It>
  void update_impl(Index step, double items, bool counts_items, It values, std::size_t count) {
    const char* where = "coulomb::train::ProgressReporter::update";
    using coulomb::detail::require;
    require(!finished_, where, "called after finish()");
    require(step >= step_, where,
            "argument 'step' must not go backwards: got " + std::to_string(step) + " after " +
                std::to_string(step_));
    const double previous_items =
        updated_ ? items_ : (counts_items ? options_.start_items : static_cast<double>(step_));
    require(std::isfinite(items) && items >= previous_items, where,
            "argument 'items' must be finite and must not go backwards: got " +
                std::to_string(items) + " after " + std::to_string(previous_items));
    require(!updated_ || counts_items == counts_items_, where,
            "use one form of update() for the whole run: with items or without");
    for (std::size_t i = 0; i < count; ++i)
      for (std::size_t j = 0; j < i; ++j)
        require(values[i].name != values[j].name, where,
                "argument 'values' names '" + detail::printable(values[i].name) + "' twice");
    step_ = step;
    items_ = items;
    counts_items_ = counts_items;
    updated_ = true;
    values_.assign(values, values + count);
    const double now = clock_();
    if (!silent_) {
      if (terminal_) {
        const bool last = total_ > 0 && step_ >= total_;
        if (!drawn_once_ || last || now - last_draw_time_ >= options_.min_redraw_interval) {
          last_line_ = line(now);
          draw_terminal(last_line_);
          out_->flush();
          last_draw_time_ = now;
          drawn_once_ = true;
        }
      } else {
        const bool by_steps =
            options_.line_every_steps > 0 && step_ - last_line_step_ >= options_.line_every_steps;
        const bool by_time = options_.line_every_seconds > 0.0 &&
                             now - last_line_time_ >= options_.line_every_seconds;
        if (by_steps || by_time) {
          *out_ << line(now) << '\n';
          out_->flush();
          last_line_step_ = step_;
          last_line_time_ = now;
        }
      }
    }
    const bool json_due =
        options_.json_every_steps == 1 || step_ - last_json_step_ >= options_.json_every_steps;
    if (json_ && json_due && now - last_json_time_ >= options_.json_min_interval) {
      write_json("update", now);
      last_json_step_ = step_;
      last_json_time_ = now;
    }
  }

  /// A carriage return, the line (cut to the width), and blanks over what is left of the previous
  /// one.
  void draw_terminal(const std::string& text) {
    const std::string_view shown =
        width_ > 0 ? detail::cut_to_width(text, width_) : std::string_view(text);
    const Index w = detail::display_width(shown);
    *out_ << '\r' << shown;
    if (drawn_width_ > w) *out_ << std::string(static_cast<std::size_t>(drawn_width_ - w), ' ');
    drawn_width_ = w;
    line_open_ = true;
  }

  void write_json(const char* event, double now) {
    std::string s = "{\"event\":";
    detail::append_json_string(s, event);
    s += ",\"label\":";
    detail::append_json_string(s, options_.label);
    s += ",\"step\":" + std::to_string(step_);
    s += ",\"total\":";
    if (total_ > 0)
      s += std::to_string(total_);
    else
      s += "null";
    s += ",\"items\":";
    detail::append_json_number(s, items_);
    s += ",\"elapsed_s\":";
    detail::append_json_number(s, now - start_time_);
    s += ",\"rate\":";
    detail::append_json_number(s, throughput(now));
    s += ",\"unit\":";
    detail::append_json_string(s, options_.unit);
    s += ",\"eta_s\":";
    detail::append_json_number(s, eta_seconds(now));
    s += ",\"values\":{";
    for (std::size_t i = 0; i < values_.size(); ++i) {
      if (i > 0) s += ',';
      detail::append_json_string(s, values_[i].name);
      s += ':';
      detail::append_json_number(s, values_[i].value);
    }
    s += "}}\n";
    *json_ << s;
    json_->flush();
  }

  std::ostream* out_;
  ProgressOptions options_;
  ProgressClock clock_;
  Index total_ = 0;
  std::unique_ptr<std::ofstream> json_file_{};
  std::ostream* json_ = nullptr;
  bool terminal_ = false;
  bool silent_ = false;
  Index width_ = 0;
  double start_time_ = 0.0;
  Index step_ = 0;
  double items_ = 0.0;
  bool counts_items_ = false;
  bool updated_ = false;
  std::vector<ProgressValue> values_{};
  // terminal mode
  bool drawn_once_ = false;
  bool line_open_ = false;
  double last_draw_time_ = 0.0;
  Index drawn_width_ = 0;
  std::string last_line_{};
  // lines mode
  Index last_line_step_ = 0;
  double last_line_time_ = 0.0;
  // JSON log
  Index last_json_step_ = 0;
  double last_json_time_ = 0.0;
  bool finished_ = false;
};

/// A callback for coulomb::ProjectedLangevin::optimize that reports every step to a
/// ProgressReporter: the energy H_N before the step, the step size η_t, ‖∇H‖ and, when the
/// objective has `terms()` (as coulomb::Hamiltonian does), the alignment and repulsion terms.
/// If the reporter's total is unknown (0), begin_optimization sets it to the optimizer's
/// `options().max_iterations`. With `finish_at_end`, end_optimization calls finish(). It never
/// stops the run. Use:
///
///     ProgressReporter progress(std::cout, 0, {.label = "phase A"});
///     langevin.optimize(hamiltonian, omega, LangevinProgress{progress});
struct LangevinProgress {
  ProgressReporter* reporter = nullptr;  ///< where to report (not owned; nullptr: nowhere)
  bool finish_at_end = true;             ///< call reporter->finish() at the end of the run

  /// Reports to `r`; `finish` as finish_at_end.
  explicit LangevinProgress(ProgressReporter& r, bool finish = true)
      : reporter(&r), finish_at_end(finish) {}

  /// Sets the reporter's total from the optimizer when it is unknown.
  template <typename Opt, typename F, typename M>
  void begin_optimization(const Opt& optimizer, F&, const M&) {
    if constexpr (requires { optimizer.options().max_iterations; }) {
      if (reporter && reporter->total() == 0)
        reporter->set_total(static_cast<Index>(optimizer.options().max_iterations));
    }
  }

  /// Reports step `step.iteration + 1`; never stops the run.
  template <typename Opt, typename F, typename M, typename Step>
  bool step_taken(const Opt&, F& objective, const M&, const Step& step) {
    if (!reporter) return false;
    constexpr bool has_terms = requires {
      objective.terms().alignment;
    };
    if (values_.empty()) {  // the names, once; later steps only change the numbers
      values_.resize(has_terms ? 5 : 3);
      std::size_t k = 0;
      values_[k++].name = "energy";
      if constexpr (has_terms) {
        values_[k++].name = "alignment";
        values_[k++].name = "repulsion";
      }
      values_[k++].name = "eta";
      values_[k].name = "|grad|";
    }
    std::size_t k = 0;
    values_[k++].value = static_cast<double>(step.energy);
    if constexpr (has_terms) {
      values_[k++].value = static_cast<double>(objective.terms().alignment);
      values_[k++].value = static_cast<double>(objective.terms().repulsion);
    }
    values_[k++].value = static_cast<double>(step.step_size);
    values_[k].value = static_cast<double>(step.gradient_norm);
    reporter->update(static_cast<Index>(step.iteration) + 1, values_);
    return false;
  }

  /// Calls finish() on the reporter when finish_at_end is set.
  template <typename Opt, typename F, typename M>
  void end_optimization(const Opt&, F&, const M&) {
    if (reporter && finish_at_end) reporter->finish();
  }

 private:
  std::vector<ProgressValue> values_{};
};

}  // namespace coulomb::train
