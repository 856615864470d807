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
///   - automatic (the default): terminal when the stream is a standard stream on a terminal
///     (core/terminal.hpp), lines otherwise;
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
/// (on one line; strings and numbers as core/json.hpp writes them, unknown quantities as null).
/// Each line is flushed when written, so a crash can cut only the last line short.
///
/// Time comes from an injectable clock (seconds, non-decreasing), so tests can drive the
/// reporter with a fake clock. The reporter is not thread-safe: callers that report from several
/// threads serialize the calls (for example under a mutex).
///
/// train/callbacks.hpp adapts a reporter to the callbacks of Phase A (LangevinProgress) and
/// Phase B (PhaseBProgress).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <locale>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/json.hpp"
#include "../core/printable.hpp"
#include "../core/terminal.hpp"

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
using coulomb::detail::display_width;  ///< moved to core/printable.hpp
}  // namespace detail

using coulomb::format_duration;  ///< moved to core/printable.hpp
using coulomb::format_rate;      ///< moved to core/printable.hpp

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
      : out_(&out),
        options_(std::move(options)),
        clock_(std::move(clock)),
        total_(total),
        line_(out) {
    const char* where = "coulomb::train::ProgressReporter";
    options_.validate();
    coulomb::detail::require(total >= 0, where,
                             "argument 'total' must be >= 0, got " + std::to_string(total));
    coulomb::detail::require(static_cast<bool>(clock_), where, "argument 'clock' is empty");
    Index terminal_width = 0;
    switch (options_.mode) {
      case ProgressMode::automatic:
        terminal_ = coulomb::detail::stream_is_terminal(out, &terminal_width);
        break;
      case ProgressMode::terminal:
        terminal_ = true;
        coulomb::detail::stream_is_terminal(out, &terminal_width);
        break;
      case ProgressMode::lines:
        terminal_ = false;
        break;
      case ProgressMode::off:
        silent_ = true;
        break;
    }
    line_.set_width(options_.max_width > 0 ? options_.max_width
                                           : (terminal_width > 1 ? terminal_width - 1 : 0));
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
    line_.clear();
    *out_ << text << '\n';
    if (terminal() && !last_line_.empty()) line_.draw(last_line_);
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
        line_.draw(line);
        line_.close();
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
    return coulomb::detail::printable(options_.label) + "  ";
  }

  void append_values(std::string& s) const {
    std::ostringstream os;
    os.imbue(std::locale::classic());
    os << std::setprecision(options_.precision);
    for (const ProgressValue& v : values_)
      os << "  " << coulomb::detail::printable(v.name) << ' ' << v.value;
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
        require(
            values[i].name != values[j].name, where,
            "argument 'values' names '" + coulomb::detail::printable(values[i].name) + "' twice");
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
          line_.draw(last_line_);
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

  void write_json(const char* event, double now) {
    std::string s;
    coulomb::detail::JsonObjectWriter o(s);
    o.string("event", event).string("label", options_.label).integer("step", step_);
    if (total_ > 0)
      o.integer("total", total_);
    else
      o.null("total");
    o.number("items", items_)
        .number("elapsed_s", now - start_time_)
        .number("rate", throughput(now))
        .string("unit", options_.unit)
        .number("eta_s", eta_seconds(now));
    coulomb::detail::JsonObjectWriter values = o.object("values");
    for (const ProgressValue& v : values_) values.number(v.name, v.value);
    values.close();
    o.close();
    s += '\n';
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
  double start_time_ = 0.0;
  Index step_ = 0;
  double items_ = 0.0;
  bool counts_items_ = false;
  bool updated_ = false;
  std::vector<ProgressValue> values_{};
  // terminal mode (line_ is declared last, so that it ends an open line before the rest goes)
  bool drawn_once_ = false;
  double last_draw_time_ = 0.0;
  std::string last_line_{};
  // lines mode
  Index last_line_step_ = 0;
  double last_line_time_ = 0.0;
  // JSON log
  Index last_json_step_ = 0;
  double last_json_time_ = 0.0;
  bool finished_ = false;
  coulomb::detail::TerminalLine line_;
};

}  // namespace coulomb::train
