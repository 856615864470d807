// SPDX-License-Identifier: MIT
// libFuzzer target of the model-file reader (io/model_file.hpp), built with
// -DCOULOMB_BUILD_FUZZERS=ON (clang). Each input is parsed as a float and as a double file, with
// and without the checksum (without it, mutations reach the section parsers instead of stopping
// at the CRC). Properties checked on every input:
//   - the parser returns or throws coulomb::io_error; any other exception, crash, leak or
//     sanitizer report is a bug;
//   - whatever parses writes back to an image that parses, with the checksum, to equal contents.
// Run: build/fuzz/fuzz_model_file -max_total_time=60 fuzz/corpus/model_file
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include <coulomb/io/model_file.hpp>

namespace {

template <typename S>
void check(std::span<const std::byte> image, bool verify_checksum) {
  coulomb::io::ReadOptions options;
  options.verify_checksum = verify_checksum;
  options.allow_non_finite = !verify_checksum;
  try {
    const auto file = coulomb::io::parse_model_file<S>(image, "fuzz", options);
    coulomb::io::WriteOptions write;
    write.allow_non_finite = true;
    const auto again = coulomb::io::model_file_bytes(file, write);
    coulomb::io::ReadOptions strict;
    strict.allow_non_finite = true;
    if (!(coulomb::io::parse_model_file<S>(again, "fuzz-again", strict) == file)) std::abort();
  } catch (const coulomb::io_error&) {
    // The expected outcome for malformed input.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
  check<float>(image, false);
  check<double>(image, false);
  check<float>(image, true);
  check<double>(image, true);
  return 0;
}
