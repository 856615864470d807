// SPDX-License-Identifier: MIT
/// @file io/model_file_reader.hpp
/// @brief Reading the bytes of docs/file_format.md into a ModelFile
/// (io/model_file_container.hpp). The reader trusts nothing: every length is checked against
/// what is left of its section before anything is allocated, the sections must fill the file
/// exactly, and the checksum must match. Any malformed, truncated or corrupted image is
/// rejected with coulomb::io_error naming the file, the byte offset and what is wrong; no input
/// makes it crash or allocate more than the file's size (plus the tensors' own storage, which
/// the file holds). parse_model_file is the entry point for fuzzing (fuzz/fuzz_model_file.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/atomic_file.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/printable.hpp"
#include "crc32c.hpp"
#include "model_file_container.hpp"

namespace coulomb::io {

namespace detail {

using coulomb::detail::printable_name;  // moved to core/printable.hpp

/// Bounds-checked little-endian reader over a file image; every failure is an io_error naming
/// the source and the offset.
class ImageReader {
 public:
  ImageReader(std::span<const std::byte> image, std::string_view where, std::string_view source)
      : image_(image), where_(where), source_(source) {}

  [[noreturn]] void fail_at(std::size_t offset, const std::string& what) const {
    std::string msg(where_);
    msg += ": '";
    msg += source_;
    msg += "' offset ";
    msg += std::to_string(offset);
    msg += ": ";
    msg += what;
    throw io_error(msg);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  std::size_t position() const noexcept { return pos_; }
  void set_limit(std::size_t limit) noexcept { limit_ = limit; }
  std::size_t remaining() const noexcept { return limit_ - pos_; }

  /// Next `n` bytes of the current section; throws if fewer are left.
  std::span<const std::byte> take(std::uint64_t n, const char* what) {
    if (n > remaining()) {
      fail(std::string(what) + " needs " + std::to_string(n) + " bytes, only " +
           std::to_string(remaining()) + " are left in the " + section_);
    }
    const auto out = image_.subspan(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }

  template <typename U>
  U get(const char* what) {
    const auto b = take(sizeof(U), what);
    U v = 0;
    for (std::size_t i = 0; i < sizeof(U); ++i)
      v |= static_cast<U>(static_cast<U>(b[i]) << (8 * i));
    return v;
  }

  /// A name: u32 length (1 … max_name_size) and its bytes.
  std::string get_name(const char* what) {
    const std::size_t at = pos_;
    const auto len = get<std::uint32_t>(what);
    if (len == 0 || len > ModelFileFormat::max_name_size) {
      fail_at(at, std::string(what) + " length " + std::to_string(len) + " is outside [1, 65535]");
    }
    const auto b = take(len, what);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }

  /// A count of entries, each at least `min_entry` bytes: bounded by what is left.
  std::uint64_t get_count(std::size_t min_entry, const char* what) {
    const std::size_t at = pos_;
    const auto n = get<std::uint64_t>(what);
    if (n > remaining() / min_entry) {
      fail_at(at, std::string(what) + " " + std::to_string(n) + " cannot fit in the " +
                      std::to_string(remaining()) + " bytes left in the " + section_);
    }
    return n;
  }

  void enter_section(const char* name, std::uint64_t length) {
    section_ = name;
    limit_ = pos_ + static_cast<std::size_t>(length);
  }
  void leave_section() const {
    if (pos_ != limit_) {
      fail(std::to_string(limit_ - pos_) + " unused bytes at the end of the " + section_);
    }
  }

 private:
  std::span<const std::byte> image_;
  std::string_view where_;
  std::string_view source_;
  std::size_t pos_ = 0;
  std::size_t limit_ = 0;
  std::string section_ = "header";
};

/// The bytes of a file image read into a string (io::read_file), as the parsers take them.
inline std::span<const std::byte> image_of(const std::string& bytes) noexcept {
  return {reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()};
}

}  // namespace detail

/// The scalar type stored in the header of a model file image, after checking the magic, the
/// version and the byte-order marker. Lets a program choose `ModelFile<float>` or
/// `ModelFile<double>` before reading. Throws io_error (naming `source` and the offset) for an
/// image that is not a model file of this version, or whose scalar type is unknown.
inline ScalarType peek_scalar_type(std::span<const std::byte> image, std::string_view source) {
  using F = ModelFileFormat;
  detail::ImageReader r(image, "coulomb::io::parse_model_file", source);
  r.set_limit(image.size());
  if (image.size() < F::magic.size() || !std::equal(F::magic.begin(), F::magic.end(), image.begin(),
                                                    [](unsigned char a, std::byte b) {
                                                      return a == static_cast<unsigned char>(b);
                                                    })) {
    r.fail_at(0, "not a coulomb model file (wrong magic bytes)");
  }
  (void)r.take(F::magic.size(), "the magic");
  const std::size_t version_at = r.position();
  const auto version = r.get<std::uint32_t>("the format version");
  if (version != F::version) {
    r.fail_at(version_at, "unsupported format version " + std::to_string(version) +
                              " (this build reads version " + std::to_string(F::version) + ")");
  }
  const std::size_t bom_at = r.position();
  const auto bom = r.get<std::uint32_t>("the byte-order marker");
  if (bom != F::byte_order_marker) {
    std::ostringstream os;
    os << "bad byte-order marker 0x" << std::hex << bom << " (expected 0x" << F::byte_order_marker
       << ": the file must be little-endian)";
    r.fail_at(bom_at, os.str());
  }
  const std::size_t type_at = r.position();
  const auto type = r.get<std::uint8_t>("the scalar type");
  if (type != static_cast<std::uint8_t>(ScalarType::float32) &&
      type != static_cast<std::uint8_t>(ScalarType::float64)) {
    r.fail_at(type_at, "unknown scalar type code " + std::to_string(type));
  }
  return static_cast<ScalarType>(type);
}

/// The scalar type stored in the model file at `path`, read from its header only (see the
/// overload for images). Throws io_error naming the path when the file cannot be read, is not a
/// model file of this version, or has an unknown scalar type. A program that loads the file
/// next should not call this: a pipe or FIFO can be read only once. It reads the file once
/// (io::read_file) and passes the image to both peek_scalar_type and parse_model_file, as the
/// loaders of io/text_model.hpp do.
inline ScalarType peek_scalar_type(const std::string& path) {
  const char* where = "coulomb::io::peek_scalar_type";
  std::ifstream in(path, std::ios::binary);
  if (!in) coulomb::detail::throw_file_error(where, path, "cannot open the file for reading");
  std::array<char, 17> header{};
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  const auto got = static_cast<std::size_t>(in.gcount());
  return peek_scalar_type(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(header.data()), got), path);
}

/// Parses a model file image held in memory; `source` names it in messages. This is the whole
/// reader (load_model_file reads the file and calls it) and the entry point for fuzzing: for
/// every byte sequence it either returns a ModelFile or throws io_error "coulomb::io::
/// parse_model_file: 'source' offset N: what", for a wrong magic, an unsupported version, a
/// wrong byte-order marker, a scalar type other than S's, non-zero reserved bytes, section
/// lengths that do not add up to the image size (truncated or extended files), a checksum
/// mismatch (any corrupted byte), a length or count that exceeds what is left of its section,
/// empty, too long or duplicate names, tensor dimensions over 2³¹ − 1, unused bytes at the end of
/// a section, or (unless options.allow_non_finite) a non-finite tensor entry.
template <RealScalar S>
ModelFile<S> parse_model_file(std::span<const std::byte> image, std::string_view source,
                              const ReadOptions& options = {}) {
  static_assert(std::numeric_limits<S>::is_iec559, "model files store IEEE-754 scalars");
  using F = ModelFileFormat;
  const ScalarType stored = peek_scalar_type(image, source);
  detail::ImageReader r(image, "coulomb::io::parse_model_file", source);
  if (stored != scalar_type_of<S>()) {
    r.fail_at(16, "the file stores " + scalar_type_name(static_cast<std::uint8_t>(stored)) +
                      " tensors, the reader expects " +
                      scalar_type_name(static_cast<std::uint8_t>(scalar_type_of<S>())));
  }
  r.set_limit(image.size());
  (void)r.take(17, "the header");
  for (int i = 0; i < 7; ++i) {
    if (r.get<std::uint8_t>("the reserved bytes") != 0) {
      r.fail_at(r.position() - 1, "reserved header byte is not zero");
    }
  }
  const auto total = r.get<std::uint64_t>("the file length");
  if (total != image.size()) {
    r.fail_at(24, "the header gives a file length of " + std::to_string(total) + " bytes, the " +
                      (total > image.size() ? "file is truncated at " : "file has ") +
                      std::to_string(image.size()) + " bytes");
  }
  const auto meta_len = r.get<std::uint64_t>("the metadata length");
  const auto blob_len = r.get<std::uint64_t>("the blob length");
  const auto tensor_len = r.get<std::uint64_t>("the tensor length");
  // Each section holds at least its 8-byte count; the lengths (each < the file size) must add up
  // to the file size.
  const std::uint64_t body = image.size() - F::header_size - F::trailer_size;
  if (image.size() < F::header_size + F::trailer_size + 24 || meta_len < 8 || blob_len < 8 ||
      tensor_len < 8 || meta_len > body || blob_len > body || tensor_len > body ||
      meta_len + blob_len + tensor_len != body) {
    r.fail_at(32, "section lengths " + std::to_string(meta_len) + " + " + std::to_string(blob_len) +
                      " + " + std::to_string(tensor_len) + " do not fill the " +
                      std::to_string(image.size()) + "-byte file");
  }
  if (options.verify_checksum) {
    const std::size_t end = image.size() - F::trailer_size;
    const std::uint32_t computed = crc32c(image.first(end));
    std::uint32_t stored_crc = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      stored_crc |= static_cast<std::uint32_t>(image[end + i]) << (8 * i);
    }
    if (computed != stored_crc) {
      std::ostringstream os;
      os << "checksum mismatch (stored CRC-32C 0x" << std::hex << stored_crc << ", computed 0x"
         << computed << "): the file is corrupted";
      r.fail_at(end, os.str());
    }
  }

  ModelFile<S> file{std::string(source)};

  // Metadata and blobs: (name, u64 length, bytes) entries, names unique within the section.
  // `what` names the section, its count, an entry's name, length and bytes, and a duplicate.
  auto read_named_bytes = [&r](std::uint64_t length, const std::array<const char*, 6>& what,
                               auto&& is_duplicate, auto&& store) {
    r.enter_section(what[0], length);
    const auto count = r.get_count(13, what[1]);
    for (std::uint64_t i = 0; i < count; ++i) {
      const std::size_t at = r.position();
      std::string name = r.get_name(what[2]);
      const auto v = r.take(r.get<std::uint64_t>(what[3]), what[4]);
      if (is_duplicate(name))
        r.fail_at(at, std::string(what[5]) + " '" + detail::printable_name(name) + "'");
      store(std::move(name), std::string(reinterpret_cast<const char*>(v.data()), v.size()));
    }
    r.leave_section();
  };
  read_named_bytes(
      meta_len,
      {"metadata section", "metadata count", "metadata key", "metadata value length",
       "metadata value", "duplicate metadata key"},
      [&](const std::string& key) { return file.find_metadata(key) != nullptr; },
      [&](std::string key, std::string value) {
        file.set_metadata(std::move(key), std::move(value));
      });
  read_named_bytes(
      blob_len,
      {"blob section", "blob count", "blob name", "blob length", "blob data",
       "duplicate blob name"},
      [&](const std::string& name) { return file.find_blob(name) != nullptr; },
      [&](std::string name, std::string bytes) {
        file.add_blob(std::move(name), std::move(bytes));
      });

  r.enter_section("tensor section", tensor_len);
  const auto n_tensor = r.get_count(22, "tensor count");
  for (std::uint64_t i = 0; i < n_tensor; ++i) {
    const std::size_t at = r.position();
    std::string name = r.get_name("tensor name");
    const std::string shown = detail::printable_name(name);
    if (file.find_tensor(name) != nullptr) r.fail_at(at, "duplicate tensor name '" + shown + "'");
    const std::size_t type_at = r.position();
    const auto type = r.get<std::uint8_t>("tensor scalar type");
    if (type != static_cast<std::uint8_t>(scalar_type_of<S>())) {
      r.fail_at(type_at, "tensor '" + shown + "' has scalar type " + scalar_type_name(type) +
                             ", the file header says " +
                             scalar_type_name(static_cast<std::uint8_t>(scalar_type_of<S>())));
    }
    const std::size_t dims_at = r.position();
    const auto rows = r.get<std::uint64_t>("tensor rows");
    const auto cols = r.get<std::uint64_t>("tensor columns");
    if (rows > F::max_dimension || cols > F::max_dimension) {
      r.fail_at(dims_at, "tensor '" + shown + "' claims " + std::to_string(rows) + "×" +
                             std::to_string(cols) +
                             " entries, over the limit of 2^31 - 1 rows or "
                             "columns");
    }
    // rows, cols < 2³¹, so rows·cols < 2⁶² and rows·cols·8 < 2⁶⁵ could overflow: divide instead.
    const std::uint64_t count = rows * cols;
    if (count > r.remaining() / sizeof(S)) {
      r.fail_at(dims_at, "tensor '" + shown + "' of " + std::to_string(rows) + "×" +
                             std::to_string(cols) + " entries needs " + std::to_string(count) +
                             "×" + std::to_string(sizeof(S)) + " bytes, only " +
                             std::to_string(r.remaining()) + " are left in the tensor section");
    }
    const std::size_t data_at = r.position();
    const auto data = r.take(count * sizeof(S), "tensor data");
    Matrix<S> value(static_cast<Index>(rows), static_cast<Index>(cols));
    if constexpr (std::endian::native == std::endian::little) {
      if (count > 0) std::memcpy(value.data(), data.data(), data.size());
    } else {
      using U = std::conditional_t<sizeof(S) == 4, std::uint32_t, std::uint64_t>;
      for (std::size_t k = 0; k < count; ++k) {
        U u = 0;
        for (std::size_t b = 0; b < sizeof(S); ++b) {
          u |= static_cast<U>(static_cast<U>(data[k * sizeof(S) + b]) << (8 * b));
        }
        value.data()[k] = std::bit_cast<S>(u);
      }
    }
    if (!options.allow_non_finite && !detail::all_finite(value)) {
      for (std::size_t k = 0; k < count; ++k) {
        if (!std::isfinite(value.data()[k])) {
          std::ostringstream os;
          os << "tensor '" << shown << "' has a non-finite entry " << value.data()[k] << " at ("
             << static_cast<Index>(k) % value.rows() << ", " << static_cast<Index>(k) / value.rows()
             << ")";
          r.fail_at(data_at + k * sizeof(S), os.str());
        }
      }
    }
    file.add_tensor(std::move(name), std::move(value));
  }
  r.leave_section();
  return file;
}

/// Reads and parses the model file at `path`. Throws io_error naming the path when it cannot be
/// read, and as parse_model_file for its contents.
template <RealScalar S>
ModelFile<S> load_model_file(const std::string& path, const ReadOptions& options = {}) {
  const std::string bytes = read_file(path, "coulomb::io::load_model_file");
  return parse_model_file<S>(detail::image_of(bytes), path, options);
}

}  // namespace coulomb::io
