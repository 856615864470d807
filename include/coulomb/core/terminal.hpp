// SPDX-License-Identifier: MIT
/// @file core/terminal.hpp
/// @brief A status line on a terminal: whether a standard stream is a terminal and how wide it
/// is (POSIX isatty and TIOCGWINSZ), and one line redrawn in place with a carriage return.
#pragma once

#include <iostream>
#include <ostream>
#include <string>
#include <string_view>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/ioctl.h>
#include <unistd.h>
#endif

#include "config.hpp"
#include "printable.hpp"

namespace coulomb::detail {

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

/// One line of a terminal redrawn in place. Each draw starts with a carriage return, is cut to
/// the width (so that it never wraps, which would break the next carriage return) and blanks
/// what is left of the previous text. A line left open is ended with a newline on destruction.
class TerminalLine {
 public:
  /// A line on `out` of at most `width` code points (0: no limit).
  explicit TerminalLine(std::ostream& out, Index width = 0) : out_(&out), width_(width) {}

  TerminalLine(const TerminalLine&) = delete;
  TerminalLine& operator=(const TerminalLine&) = delete;

  /// Ends an open line with a newline. Never throws.
  ~TerminalLine() {
    if (open_) {
      try {
        *out_ << '\n' << std::flush;
      } catch (...) {  // a destructor must not throw; the stream state tells the caller
      }
    }
  }

  /// Sets the longest line in code points (0: no limit).
  void set_width(Index width) noexcept { width_ = width; }

  /// Whether a drawn line waits for its newline.
  bool open() const noexcept { return open_; }

  /// A carriage return, `text` (cut to the width), and blanks over what is left of the previous
  /// text. Does not flush.
  void draw(std::string_view text) {
    const std::string_view shown = width_ > 0 ? cut_to_width(text, width_) : text;
    const Index w = display_width(shown);
    *out_ << '\r' << shown;
    if (drawn_width_ > w) *out_ << std::string(static_cast<std::size_t>(drawn_width_ - w), ' ');
    drawn_width_ = w;
    open_ = true;
  }

  /// Blanks an open line and returns to its start, so that other output can take its place.
  void clear() {
    if (!open_) return;
    *out_ << '\r' << std::string(static_cast<std::size_t>(drawn_width_), ' ') << '\r';
    open_ = false;
    drawn_width_ = 0;
  }

  /// Ends the line with a newline (the text stays on the screen).
  void close() {
    *out_ << '\n';
    open_ = false;
  }

 private:
  std::ostream* out_;
  Index width_ = 0;
  Index drawn_width_ = 0;
  bool open_ = false;
};

}  // namespace coulomb::detail
