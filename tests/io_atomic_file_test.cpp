// SPDX-License-Identifier: MIT
// Tests of io/atomic_file.hpp's guards: what an atomic write refuses to replace (directories,
// devices, FIFOs, the file standard output goes to), how it follows symbolic links, and
// check_output_path, the check a tool makes before a long computation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <coulomb/io/atomic_file.hpp>

#include "scratch_dir.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#if defined(__linux__)
#include <sys/sysmacros.h>  // makedev
#endif
#include <unistd.h>
#include <csignal>
#define COULOMB_ATOMIC_TEST_POSIX 1
#endif

namespace io_atomic_file_test {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using coulomb::io_error;
using Scratch = coulomb_test::ScratchDir;

void write_text(const std::string& path, const std::string& text) {
  coulomb::io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

#ifdef COULOMB_ATOMIC_TEST_POSIX

TEST_CASE("AtomicWrite_NeverReplacesAFifoADeviceOrADirectory", "[io][atomic]") {
  Scratch dir("non_regular");
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(write_text(fifo, "x"),
                    Contains("'" + fifo + "': is a FIFO (named pipe), not a regular file"));
  CHECK(fs::is_fifo(fifo));

  // As root a rename over a device node would succeed: the guard must refuse it first. A
  // private node where one can be made (as root), so that a broken guard cannot replace
  // /dev/null itself; /dev/null otherwise (where the rename would fail anyway).
  std::string device = "/dev/null";
  if (::mknod(dir.file("null").c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0)
    device = dir.file("null");
  CHECK_THROWS_WITH(write_text(device, "x"),
                    Contains("is a character device, not a regular file: it is never replaced"));
  CHECK(fs::is_character_file(device));

  fs::create_directory(dir.file("sub"));
  CHECK_THROWS_WITH(write_text(dir.file("sub"), "x"), Contains("is a directory"));

  // A link to a FIFO is refused too, and nothing is left behind.
  fs::create_symlink(fifo, dir.file("link_to_pipe"));
  CHECK_THROWS_WITH(write_text(dir.file("link_to_pipe"), "x"),
                    Contains("is a symbolic link to a FIFO (named pipe)"));
  std::vector<std::string> expected{"link_to_pipe", "pipe", "sub"};
  if (device != "/dev/null") expected.insert(expected.begin() + 1, "null");  // sorted
  CHECK(dir.entries() == expected);
}

TEST_CASE("AtomicWrite_RefusesTheFileStandardOutputGoesTo", "[io][atomic]") {
  // Redirect this process's stderr to a file, as `tool 2> log` does; /dev/stderr then names the
  // log, which an atomic replace would destroy.
  Scratch dir("stdout");
  const std::string log = dir.file("log.txt");
  const int saved = ::dup(2);
  REQUIRE(saved >= 0);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::dup2(fd, 2) == 2);
  ::close(fd);
  REQUIRE(::write(2, "printed\n", 8) == 8);
  std::string message;
  try {
    write_text(log, "replaced");
  } catch (const io_error& e) {
    message = e.what();
  }
  ::dup2(saved, 2);
  ::close(saved);
  CHECK_THAT(message, Contains("is the same file as the standard error of this process"));
  CHECK(read_text(log) == "printed\n");
}

TEST_CASE("AtomicWrite_FollowsSymbolicLinksAndKeepsThem", "[io][atomic]") {
  Scratch dir("links");
  const std::string target = dir.file("real.txt");
  write_text(target, "old");
  fs::create_symlink("real.txt", dir.file("link"));  // relative, as `ln -s` makes them
  fs::create_symlink(dir.file("link"), dir.file("link2"));
  write_text(dir.file("link2"), "new");
  CHECK(fs::is_symlink(fs::symlink_status(dir.file("link"))));
  CHECK(fs::is_symlink(fs::symlink_status(dir.file("link2"))));
  CHECK(read_text(target) == "new");
  CHECK(coulomb::io::resolve_output_path(dir.file("link2")) == target);

  // A dangling link: the file is created where it points.
  fs::create_symlink("created.txt", dir.file("dangling"));
  write_text(dir.file("dangling"), "fresh");
  CHECK(read_text(dir.file("created.txt")) == "fresh");
  CHECK(fs::is_symlink(fs::symlink_status(dir.file("dangling"))));

  // A loop of links is refused by name.
  fs::create_symlink("loop_b", dir.file("loop_a"));
  fs::create_symlink("loop_a", dir.file("loop_b"));
  CHECK_THROWS_WITH(write_text(dir.file("loop_a"), "x"), Contains("symbolic links"));
}

TEST_CASE("CheckOutputPath_FindsProblemsBeforeTheWork", "[io][atomic]") {
  Scratch dir("check");
  using coulomb::io::check_output_path;
  CHECK_NOTHROW(check_output_path(dir.file("model.clmb")));
  CHECK_THROWS_WITH(check_output_path(dir.file("missing/model.clmb")),
                    Contains("the directory '" + dir.file("missing") + "' does not exist"));
  write_text(dir.file("a_file"), "x");
  CHECK_THROWS_WITH(check_output_path(dir.file("a_file/model.clmb")),
                    Contains("'" + dir.file("a_file") + "' is not a directory"));
  CHECK_THROWS_WITH(check_output_path(dir.file("x"), "where", std::uintmax_t(1) << 62),
                    Contains("bytes free, the file needs 4611686018427387904"));
  CHECK_THROWS_AS(check_output_path("/dev/zero"), io_error);  // refused before any write

  SECTION("a file system that takes no more bytes (RLIMIT_FSIZE)") {
    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    rlimit none = saved;
    none.rlim_cur = 0;
    auto* const previous = std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &none) == 0);
    std::string message;
    try {
      check_output_path(dir.file("model.clmb"), "--model");
    } catch (const io_error& e) {
      message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous);
    CHECK_THAT(message, Contains("--model: '" + dir.file("model.clmb") +
                                 "': cannot write a file in the directory"));
  }
  SECTION("a read-only directory") {
    fs::create_directory(dir.file("ro"));
    fs::permissions(dir.file("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    if (::geteuid() == 0) {
      // root writes anyway: the check must then agree with the write.
      CHECK_NOTHROW(check_output_path(dir.file("ro/model.clmb")));
      CHECK_NOTHROW(write_text(dir.file("ro/model.clmb"), "root"));
    } else {
      CHECK_THROWS_WITH(check_output_path(dir.file("ro/model.clmb")),
                        Contains("cannot create a file in the directory"));
    }
    fs::permissions(dir.file("ro"), fs::perms::owner_all);
  }
  // The probe files are gone.
  for (const auto& name : dir.entries()) CHECK(name.find(".tmp.") == std::string::npos);
}

#endif  // COULOMB_ATOMIC_TEST_POSIX

}  // namespace io_atomic_file_test
