// SPDX-License-Identifier: MIT
// Exhaustive damage to a small model file (io/model_file.hpp): every byte flipped in several
// ways, every truncation, appended bytes, and random garbage behind a valid checksum. Every
// case must be rejected with coulomb::io_error (or, with the checksum off, parse to something
// that writes back to a valid file), and nothing may crash: this test also runs under ASan and
// UBSan. The file is small (a few hundred bytes), so all cases run in well under a second.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <coulomb/core/random.hpp>
#include <coulomb/io/model_file.hpp>

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace io_corruption_test {

namespace {

using coulomb::Matrix;
using coulomb::io::ModelFile;
using Bytes = std::vector<std::byte>;

template <typename S>
ModelFile<S> small_file() {
  ModelFile<S> f;
  f.set_metadata("model.width", "8");
  f.set_metadata("odd\tkey", std::string("line\nbreak\0nul", 14));
  f.add_blob("vocabulary", "coulomb-vocabulary 1\nlowercase 1\n");
  Matrix<S> w(2, 3);
  w << S(1), S(-2), S(0.5), S(3.25), S(-0.0), S(7);
  f.add_tensor("encoder.0.w", w);
  f.add_tensor("encoder.0.b", Matrix<S>::Constant(1, 2, S(0.125)));
  f.add_tensor("empty", Matrix<S>(0, 4));
  return f;
}

/// The region of the file a byte offset falls into, for the report of what was covered.
std::string region_of(std::size_t offset, std::size_t size, const Bytes& image) {
  auto u64 = [&](std::size_t at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(image[at + i]) << (8 * i);
    return v;
  };
  const std::uint64_t meta = u64(32);
  const std::uint64_t blob = u64(40);
  if (offset < 56) return "header";
  if (offset < 56 + meta) return "metadata";
  if (offset < 56 + meta + blob) return "blobs";
  if (offset < size - 4) return "tensors";
  return "checksum";
}

/// Parses `image`; returns "ok", "io_error", or the type of any other exception (a failure).
template <typename S>
std::string outcome(std::span<const std::byte> image, const coulomb::io::ReadOptions& options) {
  try {
    const ModelFile<S> f = coulomb::io::parse_model_file<S>(image, "damaged.clmb", options);
    // Whatever parsed must write back to a valid file with the same contents.
    const Bytes again = coulomb::io::model_file_bytes(f, {true});
    if (!(coulomb::io::parse_model_file<S>(again, "again", {true, true}) == f)) {
      return "round trip differs";
    }
    return "ok";
  } catch (const coulomb::io_error&) {
    return "io_error";
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  }
}

}  // namespace

TEMPLATE_TEST_CASE("ModelFile_RejectsEveryCorruptedByteAndEveryTruncation", "[io][corruption]",
                   float, double) {
  using S = TestType;
  const Bytes image = coulomb::io::model_file_bytes(small_file<S>());
  const std::size_t n = image.size();
  INFO("file of " << n << " bytes");
  REQUIRE(n < 1024);
  REQUIRE(coulomb::io::parse_model_file<S>(image, "intact") == small_file<S>());

  std::map<std::string, int> rejected_per_region;
  int failures = 0;
  // Every byte, four corruptions each: the lowest bit, the highest bit, all bits, and a
  // replacement by zero (or 0x55 where the byte is already zero).
  for (std::size_t i = 0; i < n; ++i) {
    const auto original = static_cast<unsigned char>(image[i]);
    const std::array<unsigned char, 4> replacements = {
        static_cast<unsigned char>(original ^ 0x01u), static_cast<unsigned char>(original ^ 0x80u),
        static_cast<unsigned char>(~original),
        static_cast<unsigned char>(original == 0 ? 0x55 : 0x00)};
    for (const unsigned char r : replacements) {
      Bytes damaged = image;
      damaged[i] = static_cast<std::byte>(r);
      const std::string result = outcome<S>(damaged, {});
      if (result != "io_error") {
        ++failures;
        UNSCOPED_INFO("byte " << i << " (" << region_of(i, n, image) << ") set to "
                              << static_cast<int>(r) << ": " << result);
      } else {
        ++rejected_per_region[region_of(i, n, image)];
      }
    }
  }
  // Every truncation, including the empty file, and appended bytes.
  for (std::size_t len = 0; len < n; ++len) {
    const std::string result = outcome<S>(std::span<const std::byte>(image).first(len), {});
    if (result != "io_error") {
      ++failures;
      UNSCOPED_INFO("truncated to " << len << " bytes: " << result);
    }
  }
  for (const std::size_t extra : {1u, 4u, 100u}) {
    Bytes longer = image;
    longer.resize(n + extra, std::byte{0});
    const std::string result = outcome<S>(longer, {});
    if (result != "io_error") {
      ++failures;
      UNSCOPED_INFO(extra << " bytes appended: " << result);
    }
  }
  CHECK(failures == 0);
  for (const char* region : {"header", "metadata", "blobs", "tensors", "checksum"}) {
    INFO("region " << region);
    CHECK(rejected_per_region[region] > 0);
  }
}

TEMPLATE_TEST_CASE("ModelFile_StructuralChecksHoldWithoutTheChecksum", "[io][corruption]", float,
                   double) {
  // With the checksum off (as the fuzzer runs), damaged images reach the section parsers: each
  // must be rejected with io_error or parse to contents that write back to a valid file. Then
  // random garbage: random bytes over a valid header, and random overwrites of 1 to 8 bytes.
  using S = TestType;
  const Bytes image = coulomb::io::model_file_bytes(small_file<S>());
  const std::size_t n = image.size();
  coulomb::io::ReadOptions no_crc;
  no_crc.verify_checksum = false;
  int failures = 0;
  int parsed = 0;
  auto judge = [&](const Bytes& damaged, const std::string& label) {
    const std::string result = outcome<S>(damaged, no_crc);
    if (result == "ok") {
      ++parsed;
    } else if (result != "io_error") {
      ++failures;
      UNSCOPED_INFO(label << ": " << result);
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (const unsigned char mask : {0x01, 0x02, 0x10, 0x80, 0xFF}) {
      Bytes damaged = image;
      damaged[i] ^= static_cast<std::byte>(mask);
      judge(damaged, "byte " + std::to_string(i) + " ^ " + std::to_string(mask));
    }
  }
  coulomb::Rng rng(0xC011A7E5u);
  for (int trial = 0; trial < 2000; ++trial) {
    Bytes damaged = image;
    const auto edits = 1 + coulomb::uniform_index(8, rng);
    for (std::uint64_t e = 0; e < edits; ++e) {
      damaged[coulomb::uniform_index(n, rng)] = static_cast<std::byte>(rng() & 0xFF);
    }
    judge(damaged, "random edit " + std::to_string(trial));
  }
  for (int trial = 0; trial < 200; ++trial) {
    Bytes garbage(image.begin(), image.begin() + 56);  // a valid header, random body
    garbage.resize(n);
    for (std::size_t i = 56; i < n; ++i) garbage[i] = static_cast<std::byte>(rng() & 0xFF);
    judge(garbage, "random body " + std::to_string(trial));
  }
  CHECK(failures == 0);
  // Flips inside tensor data and metadata values are structurally valid: some must parse.
  CHECK(parsed > 0);
}

}  // namespace io_corruption_test
