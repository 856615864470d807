// SPDX-License-Identifier: MIT
// examples/common/cli.hpp: the command-line glue shared by coulomb's example binaries.
//
// Every example parses its flags with CLI11 (Debian's libcli11-dev, header-only; linked to the
// example targets only, never to the library) through coulomb_examples::CommandLine, so that
// they all behave alike:
//
//   - `--help` prints a one-paragraph description, every option with its default and its
//     allowed values, and a pointer to docs/tools.md; exit status 0.
//   - `--version` prints "<name> (coulomb) <coulomb::version_string()>"; exit status 0.
//   - An invalid flag or value prints one line naming the flag and what it accepts, for example
//     "--seeds: must be an integer in [1, 1000], got '0'", then "Run with --help for more
//     information."; the exit status is non-zero (CLI11's code: 105 for an invalid value, 109
//     for an unexpected argument). Problems found before the work (bad data, an output that
//     cannot be written: check_paths with an OutputPlan of common/output.hpp) are reported the
//     same way with 105 (reject). Errors while running print "<name>: <message>", status 1.
//   - No arguments reproduce the example's documented default run.
//
// The common options, each added by one call (an example adds only those that make sense for
// it, with its own default):
//
//   add_out(dir)            --out DIR (also accepted as the first positional argument): where
//                           the results go; created if missing; must not be an existing file.
//   add_threads(n)          --threads N, 1 ≤ N ≤ 256: worker threads.
//   add_seed(seed)          --seed S, an integer in [0, 2^64): the base seed of the run.
//   add_quiet()             -q,--quiet: no progress output and no per-item messages (the
//                           results and the JSON log are still written).
//   add_figures(mode)       --figures MODE (auto | on | off): gnuplot figures (common/figure.hpp).
//   add_progress()          --progress MODE (auto | terminal | lines | off): how progress is
//                           shown (auto: one updating line when stderr is a terminal, plain
//                           periodic lines otherwise); --progress-json FILE: also log progress
//                           as JSON lines (one object per update) to FILE, checked as every
//                           output by check_paths; "-", a FIFO or a device are streamed.
//                           finish(status) turns a failed log into exit status 1.
//
// Progress goes to stderr (stdout carries the results), through
// coulomb::train::ProgressReporter; make_progress() builds one from --progress,
// --progress-json and --quiet. Validators with clear messages for example-specific flags:
// integer_in(lo, hi), number_in(lo, hi), positive_number(allow_infinity),
// non_negative_number(), probability(), existing_directory() (CLI11's own validators also work;
// their messages are less precise, and CLI::Range lets NaN through); repeated_entry(list) finds
// a repeated list entry.
//
// A typical main():
//
//     int main(int argc, char** argv) {
//       coulomb_examples::CommandLine cli("mean_field", "One paragraph on what it does.");
//       std::filesystem::path out = "mean_field_out";
//       int seeds = 8;
//       cli.add_out(out);
//       cli.app().add_option("--seeds", seeds, "seeds per N")
//           ->check(coulomb_examples::integer_in(2, 1000))->capture_default_str();
//       cli.add_progress();
//       if (const auto status = cli.parse(argc, argv)) return *status;
//       try {
//         auto progress = cli.make_progress(total, {.label = "mean_field"});
//         ...
//       } catch (const std::exception& e) { return cli.fail(e); }
//     }
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <CLI/CLI.hpp>

#include <coulomb/core/config.hpp>
#include <coulomb/train/progress.hpp>

#include "output.hpp"

namespace coulomb_examples {

namespace detail {

/// Whether `text` is a whole decimal integer (optional leading '-'); stores it in `value`.
inline bool parse_integer(const std::string& text, long long& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

/// Whether `text` is a whole number std::strtod accepts (including "inf"); stores it.
inline bool parse_number(const std::string& text, double& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && !std::isnan(value);
}

}  // namespace detail

/// `text` with its spaces turned into line breaks so that no line exceeds `width` characters
/// (UTF-8 aware; a longer word stays whole). CLI11 prints the description as given.
inline std::string wrap(const std::string& text, std::size_t width = 79) {
  std::string out;
  std::size_t line = 0;  // code points on the current line
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    std::size_t n = 0;
    for (unsigned char c : word) n += (c & 0xC0) != 0x80;
    if (line > 0 && line + 1 + n > width) {
      out += '\n';
      line = 0;
    } else if (line > 0) {
      out += ' ';
      ++line;
    }
    out += word;
    line += n;
  }
  return out;
}

/// An integer in [lo, hi] ("must be an integer in [1, 1000], got '0'").
inline CLI::Validator integer_in(long long lo, long long hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        long long v = 0;
        if (!detail::parse_integer(text, v) || v < lo || v > hi)
          return "must be an integer in " + range + ", got '" + text + "'";
        return {};
      },
      "in " + range);
}

/// A finite number > 0, or with `allow_infinity` also "inf" (for example β = ∞, no noise).
inline CLI::Validator positive_number(bool allow_infinity = false) {
  return CLI::Validator(
      [allow_infinity](std::string& text) -> std::string {
        double v = 0;
        if (!detail::parse_number(text, v) || !(v > 0.0) || (!allow_infinity && std::isinf(v)))
          return std::string(allow_infinity ? "must be a number > 0 or inf"
                                            : "must be a finite number > 0") +
                 ", got '" + text + "'";
        return {};
      },
      allow_infinity ? "> 0 or inf" : "> 0");
}

/// A finite number ≥ 0.
inline CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!detail::parse_number(text, v) || !(v >= 0.0) || !std::isfinite(v))
          return "must be a finite number >= 0, got '" + text + "'";
        return {};
      },
      ">= 0");
}

/// A number in [0, 1).
inline CLI::Validator probability() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!detail::parse_number(text, v) || !(v >= 0.0 && v < 1.0))
          return "must be a number in [0, 1), got '" + text + "'";
        return {};
      },
      "in [0, 1)");
}

/// An output directory: created when missing, so it only must not be an existing non-directory.
inline CLI::Validator output_directory() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty()) return "must not be empty";
        std::error_code ec;
        if (std::filesystem::exists(text, ec) && !std::filesystem::is_directory(text, ec))
          return "'" + text + "' exists and is not a directory";
        return {};
      },
      "");
}

/// A number in [lo, hi] (NaN is refused: "must be a number in [1, 1000], got 'nan'").
inline CLI::Validator number_in(double lo, double hi) {
  std::ostringstream range;
  range << "[" << lo << ", " << hi << "]";
  return CLI::Validator(
      [lo, hi, r = range.str()](std::string& text) -> std::string {
        double v = 0;
        if (!detail::parse_number(text, v) || !(v >= lo && v <= hi))
          return "must be a number in " + r + ", got '" + text + "'";
        return {};
      },
      "in " + range.str());
}

/// The first entry of `list` that appears twice in it, if any (lists of flags are sets: a
/// repeated entry would repeat the work).
template <typename T>
std::optional<T> repeated_entry(const std::vector<T>& list) {
  for (std::size_t i = 0; i < list.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (list[j] == list[i]) return list[i];
  return std::nullopt;
}

/// An existing directory (an input, for example a data directory).
inline CLI::Validator existing_directory() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::error_code ec;
        if (!std::filesystem::is_directory(text, ec))
          return "'" + text + "' is not an existing directory";
        return {};
      },
      "");
}

/// The command line of one example binary (see the file comment).
class CommandLine {
 public:
  /// `name` is the binary's name (used in messages, --version and the recorded command line);
  /// `description` the paragraph that --help prints first.
  CommandLine(std::string name, std::string description)
      : name_(std::move(name)), app_(wrap(description), name_) {
    app_.set_version_flag("--version",
                          name_ + " (coulomb) " + std::string(coulomb::version_string()),
                          "Print the version of coulomb and exit");
    app_.footer("Common options and the progress output are described in docs/tools.md.");
    app_.get_formatter()->column_width(34);
  }

  /// The CLI11 application, for example-specific options.
  CLI::App& app() noexcept { return app_; }
  /// The binary's name.
  const std::string& name() const noexcept { return name_; }

  /// --out DIR, also accepted as the first positional argument; `dir` holds the default.
  CLI::Option* add_out(std::filesystem::path& dir,
                       const std::string& help = "Output directory (created if missing)") {
    return app_.add_option("--out,out", dir, help)
        ->type_name("DIR")
        ->check(output_directory())
        ->capture_default_str();
  }

  /// --threads N in [1, 256]; `threads` holds the default.
  CLI::Option* add_threads(int& threads, const std::string& help = "Worker threads") {
    return app_.add_option("--threads", threads, help)
        ->check(integer_in(1, 256))
        ->capture_default_str();
  }

  /// --seed S in [0, 2^64); `seed` holds the default.
  CLI::Option* add_seed(std::uint64_t& seed, const std::string& help = "Base seed of the run") {
    return app_.add_option("--seed", seed, help)
        ->check(CLI::Validator(
            [](std::string& text) -> std::string {
              std::uint64_t v = 0;
              const char* end = text.data() + text.size();
              const auto [ptr, ec] = std::from_chars(text.data(), end, v);
              if (text.empty() || ec != std::errc() || ptr != end)
                return "must be an integer in [0, 2^64), got '" + text + "'";
              return {};
            },
            "in [0, 2^64)"))
        ->capture_default_str();
  }

  /// --figures MODE (auto | on | off): what a missing or failing gnuplot means
  /// (common/figure.hpp); `mode` holds the default.
  CLI::Option* add_figures(std::string& mode) {
    return app_
        .add_option("--figures", mode,
                    "Figures drawn with gnuplot: auto (when gnuplot works, else a warning), on "
                    "(a figure that cannot be drawn fails the run) or off")
        ->type_name("MODE")
        ->check(CLI::IsMember({"auto", "on", "off"}))
        ->capture_default_str();
  }

  /// -q,--quiet.
  CLI::Option* add_quiet() {
    return app_.add_flag("-q,--quiet", quiet_,
                         "No progress output and no per-item messages (results and the JSON "
                         "log are still written)");
  }

  /// --progress MODE and --progress-json FILE.
  void add_progress() {
    app_.add_option("--progress", progress_mode_,
                    "How progress is shown on stderr: auto (one updating line on a terminal, "
                    "plain lines otherwise), terminal, lines or off")
        ->type_name("MODE")
        ->check(CLI::IsMember({"auto", "terminal", "lines", "off"}))
        ->capture_default_str();
    app_.add_option("--progress-json", progress_json_,
                    "Also log progress as JSON lines (one object per update) to FILE")
        ->type_name("FILE");
  }

  /// Parses the command line. Returns the exit status when the program should stop now (after
  /// --help or --version: 0; after an invalid flag: CLI11's non-zero code, with the message on
  /// stderr), or nothing when it should run. Records the command line for command_line().
  std::optional<int> parse(int argc, char** argv) {
    command_ = name_;
    for (int i = 1; i < argc; ++i) {
      command_ += ' ';
      command_ += argv[i];
    }
    try {
      app_.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app_.exit(e);
    }
    return std::nullopt;
  }

  /// "<name> <arguments…>" as given, for reports ("Generated by `…`").
  const std::string& command_line() const noexcept { return command_; }
  /// Whether --quiet was given.
  bool quiet() const noexcept { return quiet_; }
  /// The --progress-json file (empty: none).
  const std::string& progress_json() const noexcept { return progress_json_; }

  /// A progress reporter on stderr for `total` steps, with the mode of --progress (off with
  /// --quiet) and the JSON log of --progress-json; `options` gives the label, unit and periods.
  std::unique_ptr<coulomb::train::ProgressReporter> make_progress(
      coulomb::Index total, coulomb::train::ProgressOptions options = {}) const {
    options.mode = quiet_ ? coulomb::train::ProgressMode::off
                          : coulomb::train::progress_mode_from_string(progress_mode_);
    if (quiet_) options.messages = false;  // no per-epoch lines either
    // One log for the whole program: opened (truncated) by the first reporter, appended to by
    // the later ones (Phase A, then Phase B, ...); each line carries its reporter's label.
    if (!progress_json_.empty()) {
      if (!json_log_) json_log_ = open_progress_log();
      options.json = json_log_.get();
    }
    return std::make_unique<coulomb::train::ProgressReporter>(std::cerr, total, std::move(options));
  }

  /// For checks that need several values (after parse()): prints "<flag>: <what>" and the
  /// --help hint on stderr, as CLI11 does for a single value, and returns CLI11's exit status
  /// of an invalid value (non-zero).
  int reject(const std::string& flag, const std::string& what) const {
    std::cerr << flag << ": " << what << "\nRun with --help for more information.\n";
    return static_cast<int>(CLI::ExitCodes::ValidationError);
  }

  /// Registers the --progress-json file (when given) as a stream output of `plan`, then checks
  /// the plan (common/output.hpp). Returns nothing when the run may start, else the exit status
  /// of an invalid value (105) after printing "<flag>: <what>" as reject() does.
  std::optional<int> check_paths(OutputPlan& plan) const {
    if (!progress_json_.empty()) plan.output("--progress-json", progress_json_, true);
    if (const auto problem = plan.check()) return reject(problem->flag, problem->what);
    return std::nullopt;
  }

  /// The exit status of a run that ended with `status`: 1 instead of 0 when the --progress-json
  /// log could not be written completely (with "<name>: --progress-json '<path>': write error"
  /// on stderr), else `status`. Call it last.
  int finish(int status) const {
    if (json_log_) {
      json_log_->flush();
      if (!*json_log_) {
        std::cerr << name_ << ": --progress-json '" << progress_json_
                  << "': write error (the log is incomplete)\n";
        return status == 0 ? 1 : status;
      }
    }
    return status;
  }

  /// Prints "<name>: <what>" on stderr and returns 1, for the catch block of main().
  int fail(const std::exception& e) const {
    std::cerr << name_ << ": " << e.what() << "\n";
    return 1;
  }

 private:
  std::string name_;
  CLI::App app_;
  std::string command_{};
  bool quiet_ = false;
  std::string progress_mode_ = "auto";
  std::string progress_json_{};
  mutable std::shared_ptr<std::ostream> json_log_{};  // the --progress-json log, once opened

  /// The --progress-json log: a live log (each line flushed as written, for `tail -f`), so not
  /// atomic. "-" and the file standard output or error goes to are those streams; a FIFO or a
  /// device is appended to (never truncated); a regular file is truncated.
  std::shared_ptr<std::ostream> open_progress_log() const {
    const int stream = progress_json_ == "-" ? 1 : coulomb::standard_stream_of(progress_json_);
    if (stream == 1) return std::shared_ptr<std::ostream>(&std::cout, [](std::ostream*) {});
    if (stream == 2) return std::shared_ptr<std::ostream>(&std::cerr, [](std::ostream*) {});
    const auto mode = detail::is_stream_target(progress_json_) ? std::ios::out | std::ios::app
                                                               : std::ios::out | std::ios::trunc;
    auto log = std::make_shared<std::ofstream>(progress_json_, mode);
    if (!*log)
      throw coulomb::io_error("--progress-json '" + progress_json_ +
                              "': cannot open it for writing");
    return log;
  }
};

}  // namespace coulomb_examples
