// SPDX-License-Identifier: MIT
// tests/scratch_dir.hpp: a fresh directory for one test, shared by the tests that write files.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace coulomb_test {

/// An empty directory <tmp>/coulomb_test_<name>_<pid> (the pid keeps parallel test processes
/// apart), removed with its contents at the end, even where a test made it read-only.
struct ScratchDir {
  std::filesystem::path path;

  explicit ScratchDir(const std::string& name) {
    long pid = 0;
#if defined(__unix__) || defined(__APPLE__)
    pid = static_cast<long>(::getpid());
#endif
    path = std::filesystem::temp_directory_path() /
           ("coulomb_test_" + name + "_" + std::to_string(pid));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  /// The path of `name` in the directory.
  std::string file(const std::string& name) const {
    return (path / name).string();
  }
  /// Writes `bytes` to the file `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string f = file(name);
    std::ofstream(f, std::ios::binary) << bytes;
    return f;
  }
  /// Names of the entries of the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace coulomb_test
