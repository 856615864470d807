// SPDX-License-Identifier: MIT
// examples/common/figure.hpp: figures drawn by gnuplot, without a shell.
//
// gnuplot runs through posix_spawnp with an argument vector: `gnuplot -c SCRIPT OUT.png ARG…`.
// No path ever enters a shell command or gnuplot's own syntax: the script reads the PNG's path
// as ARG1 and its data files and titles as ARG2, ARG3, … (gnuplot's `-c`), so a folder named
// `bob's "data"` or `$(rm -rf ~)` is just a name. The script is written atomically beside the
// figure (<stem>.gp, re-runnable with the command in its first line); gnuplot writes a temporary
// PNG that is renamed over the figure only when gnuplot succeeded.
//
// --figures MODE (CommandLine::add_figures) decides what a missing or failing gnuplot means:
//   auto  (default) draw when gnuplot works; otherwise one warning line on stderr, exit status 0;
//   on    a figure that cannot be drawn fails the run (exit status 1, after every other output);
//   off   no figures, no scripts.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <coulomb/io/atomic_file.hpp>

#include "output.hpp"

extern char** environ;

namespace coulomb_examples {

/// How a program run by run_program ended.
struct ProgramRun {
  bool started = false;     ///< false: it could not be started (not installed)
  int exit_status = -1;     ///< its exit status (-1 when killed by a signal or not started)
  std::string diagnostics;  ///< what it wrote on stderr (at most 4 kB), or why it did not start
};

/// Runs the program `argv[0]` (searched on PATH) with the arguments `argv`, without a shell;
/// its standard input and output are /dev/null, its standard error is captured.
inline ProgramRun run_program(const std::vector<std::string>& argv) {
  ProgramRun run;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int err_pipe[2];
  if (::pipe(err_pipe) != 0) {
    run.diagnostics = std::string("cannot create a pipe: ") + std::strerror(errno);
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[1]);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(err_pipe[0]);
    run.diagnostics = argv[0] + ": " + std::strerror(rc);
    return run;
  }
  run.started = true;
  char buffer[1024];
  for (;;) {
    const ::ssize_t n = ::read(err_pipe[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (run.diagnostics.size() < 4096) run.diagnostics.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(err_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // posix_spawnp of glibc reports a missing program as exit status 127 of the child.
  if (WIFEXITED(status)) {
    run.exit_status = WEXITSTATUS(status);
    if (run.exit_status == 127 && run.diagnostics.empty()) {
      run.started = false;
      run.diagnostics = argv[0] + ": not found";
    }
  }
  return run;
}

/// Draws the figures of one tool (see the file comment).
class Figures {
 public:
  /// `mode`: "auto", "on" or "off" (--figures).
  explicit Figures(std::string mode = "auto") : mode_(std::move(mode)) {}

  /// Whether figures are wanted at all (mode other than off).
  bool wanted() const noexcept { return mode_ != "off"; }

  /// "set terminal …" for a PNG of `width` × `height` pixels: pngcairo when gnuplot has it.
  std::string terminal(int width, int height) {
    probe();
    return std::string("set terminal ") + (cairo_ ? "pngcairo enhanced font ',10'" : "png") +
           " size " + std::to_string(width) + "," + std::to_string(height) + "\n";
  }

  /// Draws `png` with the gnuplot `script`, which reads the PNG's path as ARG1 and `args` as
  /// ARG2, ARG3, …; prints "figure: <png>" on success. Returns whether the figure was drawn.
  /// Never throws for a missing or failing gnuplot (see the mode); throws io_error when the
  /// script cannot be written.
  bool draw(const std::filesystem::path& png, const std::string& script,
            const std::vector<std::string>& args = {}) {
    if (!wanted()) return false;
    probe();
    if (!available_) {
      problem("gnuplot is not installed (" + reason_ + "): no figure " + png.string(), true);
      return false;
    }
    const std::filesystem::path gp = png.parent_path() / (png.stem().string() + ".gp");
    std::string text = "# Drawn by: gnuplot -c " + one_line(gp.filename().string()) + " " +
                       one_line(png.filename().string());
    for (const auto& a : args) text += " '" + one_line(a) + "'";
    text += "\n" + script;
    write_output("figure script", gp.string(), text);
    const std::string target = coulomb::resolve_output_path(png.string(), "figure");
    const std::string temporary = coulomb::detail::temporary_path_for(target).string();
    std::vector<std::string> argv{"gnuplot", "-c", gp.string(), temporary};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProgramRun run = run_program(argv);
    std::error_code ec;
    const bool drawn =
        run.started && run.exit_status == 0 && std::filesystem::file_size(temporary, ec) > 0 && !ec;
    if (!drawn || std::rename(temporary.c_str(), target.c_str()) != 0) {
      std::filesystem::remove(temporary, ec);
      problem("gnuplot failed on " + gp.string() + (run.diagnostics.empty() ? "" : ": ") +
              first_line(run.diagnostics));
      return false;
    }
    std::cout << "figure: " << png.string() << "\n";
    return true;
  }

  /// Whether a figure was asked for with --figures on and not drawn.
  bool failed() const noexcept { return failed_; }

 private:
  void probe() {
    if (probed_) return;
    probed_ = true;
    const ProgramRun version = run_program({"gnuplot", "--version"});
    available_ = version.started && version.exit_status == 0;
    if (!available_) {
      reason_ = version.diagnostics.empty() ? "gnuplot --version failed"
                                            : first_line(version.diagnostics);
      return;
    }
    cairo_ = run_program({"gnuplot", "-e", "set terminal pngcairo"}).exit_status == 0;
  }

  /// Reports a figure not drawn: an error with --figures on, else a warning (`once`: only the
  /// first time, for a cause that fails every figure of the run).
  void problem(const std::string& what, bool once = false) {
    if (mode_ == "on") {
      failed_ = true;
      std::cerr << "error: " << what << "\n";
      return;
    }
    if (once && warned_missing_) return;
    warned_missing_ = warned_missing_ || once;
    std::cerr << "warning: " << what << "\n";
  }

  static std::string first_line(const std::string& text) {
    std::string line = text.substr(0, text.find('\n'));
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    return line;
  }

  /// `text` for a comment line: control characters become '?'.
  static std::string one_line(std::string text) {
    for (char& c : text)
      if (static_cast<unsigned char>(c) < 0x20) c = '?';
    return text;
  }

  std::string mode_;
  bool probed_ = false, available_ = false, cairo_ = false;
  bool failed_ = false, warned_missing_ = false;
  std::string reason_{};
};

}  // namespace coulomb_examples
