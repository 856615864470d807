// SPDX-License-Identifier: MIT
/// @file io/model_file_writer.hpp
/// @brief Writing a ModelFile (io/model_file_container.hpp) as the bytes of docs/file_format.md:
/// deterministic (metadata in key order, blobs and tensors in insertion order), streamed in
/// pieces with the CRC-32C computed on the way, atomic on disk (core/atomic_file.hpp), and
/// refusing non-finite tensor entries unless told otherwise.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/atomic_file.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "crc32c.hpp"
#include "model_file_container.hpp"

namespace coulomb::io {

namespace detail {

/// Little-endian encoding of unsigned integers into a byte buffer.
template <typename U>
void put_le(std::string& out, U value) {
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    out.push_back(static_cast<char>(static_cast<unsigned char>(value >> (8 * i))));
  }
}

/// Throws numerical_error unless every entry of every tensor is finite.
template <RealScalar S>
void require_finite_tensors(const ModelFile<S>& file, std::string_view where,
                            std::string_view target) {
  for (const auto& t : file.tensors()) {
    if (all_finite(t.value)) continue;
    for (Index j = 0; j < t.value.cols(); ++j) {
      for (Index i = 0; i < t.value.rows(); ++i) {
        if (!std::isfinite(t.value(i, j))) {
          std::ostringstream os;
          os << where << ": '" << target << "': tensor '" << t.name << "' has a non-finite entry "
             << t.value(i, j) << " at (" << i << ", " << j
             << "); refusing to save it (WriteOptions::allow_non_finite writes it anyway)";
          throw numerical_error(os.str());
        }
      }
    }
  }
}

/// Writes the image of `file` to `sink` (a callable taking std::span<const std::byte>) in
/// pieces, computing the checksum on the way: the header and the sections are produced in order
/// and the CRC-32C trailer last, so the whole image is never held in memory.
template <RealScalar S, typename Sink>
void encode_model_file(const ModelFile<S>& file, Sink&& sink) {
  static_assert(std::numeric_limits<S>::is_iec559, "model files store IEEE-754 scalars");
  using F = ModelFileFormat;
  std::uint64_t meta_len = 8;
  for (const auto& [k, v] : file.metadata()) meta_len += 4 + k.size() + 8 + v.size();
  std::uint64_t blob_len = 8;
  for (const auto& b : file.blobs()) blob_len += 4 + b.name.size() + 8 + b.bytes.size();
  std::uint64_t tensor_len = 8;
  for (const auto& t : file.tensors()) {
    tensor_len +=
        4 + t.name.size() + 1 + 16 + static_cast<std::uint64_t>(t.value.size()) * sizeof(S);
  }
  const std::uint64_t total = F::header_size + meta_len + blob_len + tensor_len + F::trailer_size;

  std::uint32_t crc = 0;
  std::string buf;
  buf.reserve(1 << 16);
  auto flush = [&] {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(buf.data()),
                                           buf.size());
    crc = crc32c(bytes, crc);
    sink(bytes);
    buf.clear();
  };
  auto maybe_flush = [&] {
    if (buf.size() >= (1 << 16)) flush();
  };
  auto put_name = [&](const std::string& name) {
    put_le(buf, static_cast<std::uint32_t>(name.size()));
    buf += name;
  };
  auto put_bytes = [&](const char* data, std::size_t n) {
    if (n >= (1 << 16)) {  // large payloads go to the sink directly, without a copy
      flush();
      const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), n);
      crc = crc32c(bytes, crc);
      sink(bytes);
    } else {
      buf.append(data, n);
      maybe_flush();
    }
  };

  // Header.
  for (const unsigned char c : F::magic) buf.push_back(static_cast<char>(c));
  put_le(buf, F::version);
  put_le(buf, F::byte_order_marker);
  buf.push_back(static_cast<char>(scalar_type_of<S>()));
  buf.append(7, '\0');
  put_le(buf, total);
  put_le(buf, meta_len);
  put_le(buf, blob_len);
  put_le(buf, tensor_len);

  // Metadata.
  put_le(buf, static_cast<std::uint64_t>(file.metadata().size()));
  for (const auto& [k, v] : file.metadata()) {
    put_name(k);
    put_le(buf, static_cast<std::uint64_t>(v.size()));
    put_bytes(v.data(), v.size());
  }
  // Blobs.
  put_le(buf, static_cast<std::uint64_t>(file.blobs().size()));
  for (const auto& b : file.blobs()) {
    put_name(b.name);
    put_le(buf, static_cast<std::uint64_t>(b.bytes.size()));
    put_bytes(b.bytes.data(), b.bytes.size());
  }
  // Tensors: column-major entries, IEEE-754 little-endian.
  put_le(buf, static_cast<std::uint64_t>(file.tensors().size()));
  for (const auto& t : file.tensors()) {
    put_name(t.name);
    buf.push_back(static_cast<char>(scalar_type_of<S>()));
    put_le(buf, static_cast<std::uint64_t>(t.value.rows()));
    put_le(buf, static_cast<std::uint64_t>(t.value.cols()));
    const auto n = static_cast<std::size_t>(t.value.size());
    if constexpr (std::endian::native == std::endian::little) {
      put_bytes(reinterpret_cast<const char*>(t.value.data()), n * sizeof(S));
    } else {
      using U = std::conditional_t<sizeof(S) == 4, std::uint32_t, std::uint64_t>;
      for (std::size_t i = 0; i < n; ++i) {
        put_le(buf, std::bit_cast<U>(t.value.data()[i]));
        maybe_flush();
      }
    }
    maybe_flush();
  }
  flush();
  std::string trailer;
  put_le(trailer, crc);
  sink(std::span<const std::byte>(reinterpret_cast<const std::byte*>(trailer.data()),
                                  trailer.size()));
}

}  // namespace detail

/// Writes the file image of `file` to `out`. Throws io_error when the stream fails (`target`
/// names it in messages), numerical_error for non-finite entries unless
/// options.allow_non_finite. This does not make the write atomic: save_model_file does.
template <RealScalar S>
void write_model_file(std::ostream& out, const ModelFile<S>& file, const WriteOptions& options = {},
                      std::string_view target = "stream") {
  const char* where = "coulomb::io::write_model_file";
  if (!options.allow_non_finite) detail::require_finite_tensors(file, where, target);
  detail::encode_model_file(file, [&](std::span<const std::byte> bytes) {
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) coulomb::detail::throw_file_error(where, target, "write error on the output stream");
  });
  out.flush();
  if (!out) coulomb::detail::throw_file_error(where, target, "write error on the output stream");
}

/// The file image of `file`, as bytes. Throws as write_model_file.
template <RealScalar S>
std::vector<std::byte> model_file_bytes(const ModelFile<S>& file,
                                        const WriteOptions& options = {}) {
  if (!options.allow_non_finite) {
    detail::require_finite_tensors(file, "coulomb::io::model_file_bytes", "memory");
  }
  std::vector<std::byte> out;
  detail::encode_model_file(file, [&out](std::span<const std::byte> bytes) {
    out.insert(out.end(), bytes.begin(), bytes.end());
  });
  return out;
}

/// Saves `file` at `path` atomically: a temporary file beside it is written, flushed to the
/// disk and renamed over `path` (core/atomic_file.hpp), so a crash or an error leaves the previous
/// file intact and no temporary file behind. Throws io_error naming `path` and the system's
/// reason, numerical_error for non-finite entries unless options.allow_non_finite (in both
/// cases `path` is untouched).
template <RealScalar S>
void save_model_file(const std::string& path, const ModelFile<S>& file,
                     const WriteOptions& options = {}) {
  const char* where = "coulomb::io::save_model_file";
  if (!options.allow_non_finite) detail::require_finite_tensors(file, where, path);
  write_file_atomically(
      path, [&file](auto& sink) { detail::encode_model_file(file, sink); }, where);
}

}  // namespace coulomb::io
