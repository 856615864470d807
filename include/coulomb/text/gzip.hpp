// SPDX-License-Identifier: MIT
/// @file text/gzip.hpp
/// @brief Reading gzip-compressed TSV files (RFC 1952) through zlib, and files that may or may
/// not be compressed (read_text_file_auto, read_text_dataset_auto: by content, not by name).
///
/// This is the only coulomb header that needs zlib. Link the CMake target `coulomb::gzip`, which
/// adds zlib when CMake finds it. Without zlib (the target then defines COULOMB_NO_ZLIB), the
/// functions keep their signatures and throw coulomb::io_error saying that coulomb was built
/// without zlib.
///
/// The whole file is decompressed into memory, then parsed as by text/tsv.hpp, so messages give
/// the line number in the uncompressed text. Concatenated gzip members (what `cat a.gz b.gz`
/// makes) are read one after the other. A truncated stream, a CRC or length mismatch, data after
/// the last member, or output over GzipOptions::max_bytes throw io_error; nothing is returned
/// from a damaged file.
#pragma once

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#ifndef COULOMB_NO_ZLIB
#include <zlib.h>
#endif

#include "../core/error.hpp"
#include "dataset.hpp"
#include "tsv.hpp"

namespace coulomb {

/// Options of the gzip readers.
struct GzipOptions {
  /// Largest decompressed size accepted, in bytes (a guard against decompression bombs).
  std::size_t max_bytes = std::size_t{1} << 32;
};

/// True when coulomb was built with zlib (reading gzip files works).
constexpr bool has_zlib() noexcept {
#ifdef COULOMB_NO_ZLIB
  return false;
#else
  return true;
#endif
}

/// Decompresses gzip data (one or more members) held in memory. `source` names it in messages.
/// Throws io_error for data that is not gzip, damaged, truncated, followed by other bytes, or
/// larger than options.max_bytes once decompressed.
inline std::string gunzip(std::string_view compressed, std::string_view source,
                          const GzipOptions& options = {}) {
  const char* where = "coulomb::gunzip";
#ifdef COULOMB_NO_ZLIB
  (void)compressed;
  (void)options;
  detail::throw_io_at(where, source, 0,
                      "coulomb was built without zlib, so gzip files cannot be read (install "
                      "zlib, e.g. Debian's zlib1g-dev, and link coulomb::gzip)");
#else
  if (!detail::has_gzip_magic(compressed)) {
    detail::throw_io_at(where, source, 0, "not gzip data (no gzip header 1f 8b)");
  }
  struct Stream {
    z_stream z{};
    bool live = false;
    ~Stream() {
      if (live) inflateEnd(&z);
    }
  } s;
  // windowBits 15 + 16: gzip wrapper only (no zlib or raw deflate streams).
  if (inflateInit2(&s.z, 15 + 16) != Z_OK) {
    detail::throw_io_at(where, source, 0, "zlib could not be initialised");
  }
  s.live = true;

  // The buffer may hold one byte more than max_bytes, so that an output of exactly max_bytes
  // is accepted and a larger one detected.
  const std::size_t cap = options.max_bytes == SIZE_MAX ? SIZE_MAX : options.max_bytes + 1;
  std::string out;
  out.resize(std::min(cap, std::max<std::size_t>(4 * compressed.size(), 1 << 16)));
  std::size_t produced = 0;
  std::size_t consumed = 0;  // bytes of `compressed` handed to zlib so far
  constexpr std::size_t chunk = UINT_MAX;
  auto too_large = [&] {
    detail::throw_io_at(
        where, source, 0,
        "decompresses to more than max_bytes = " + std::to_string(options.max_bytes) + " bytes");
  };
  for (;;) {
    if (s.z.avail_in == 0 && consumed < compressed.size()) {
      const std::size_t n = std::min(chunk, compressed.size() - consumed);
      s.z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data() + consumed));
      s.z.avail_in = static_cast<uInt>(n);
      consumed += n;
    }
    if (produced == out.size()) {
      if (out.size() >= cap) too_large();
      out.resize(std::min(cap, std::max<std::size_t>(2 * out.size(), 1 << 16)));
    }
    const std::size_t room = std::min(chunk, out.size() - produced);
    const uInt in_before = s.z.avail_in;
    s.z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    s.z.avail_out = static_cast<uInt>(room);
    const int ret = inflate(&s.z, Z_NO_FLUSH);
    produced += room - s.z.avail_out;
    if (produced > options.max_bytes) too_large();
    if (ret == Z_STREAM_END) {
      const std::size_t left = s.z.avail_in + (compressed.size() - consumed);
      if (left == 0) break;
      // Another member must follow, starting with the gzip magic.
      const std::size_t at = compressed.size() - left;
      if (!detail::has_gzip_magic(compressed.substr(at))) {
        detail::throw_io_at(
            where, source, 0,
            "unexpected data after the end of the gzip stream, at byte " + std::to_string(at));
      }
      if (inflateReset(&s.z) != Z_OK) {
        detail::throw_io_at(where, source, 0, "zlib could not be reset");
      }
      continue;
    }
    const bool progress = s.z.avail_in != in_before || s.z.avail_out != room;
    if (ret == Z_OK && progress) continue;
    if (ret == Z_OK || ret == Z_BUF_ERROR) {
      // No progress with output room left: more input is needed, and there is none.
      if (s.z.avail_in == 0 && consumed == compressed.size()) {
        detail::throw_io_at(where, source, 0,
                            "truncated gzip stream: the data ends after " +
                                std::to_string(compressed.size()) +
                                " compressed bytes, before the end of the stream");
      }
      if (!progress && s.z.avail_in != 0) {
        detail::throw_io_at(where, source, 0, "zlib made no progress on the gzip data");
      }
      continue;
    }
    if (ret == Z_MEM_ERROR) {
      detail::throw_io_at(where, source, 0, "zlib ran out of memory");
    }
    const std::string why = s.z.msg != nullptr ? std::string(s.z.msg) : std::string("error");
    detail::throw_io_at(where, source, 0, "corrupted gzip data (zlib: " + why + ")");
  }
  out.resize(produced);
  return out;
#endif
}

/// Reads and decompresses a whole gzip file. Throws io_error as gunzip, and when the file
/// cannot be read.
inline std::string read_gzip_file(const std::string& path, const GzipOptions& options = {}) {
  const std::string bytes = coulomb::read_file(path, "coulomb::read_gzip_file");
  return gunzip(bytes, path, options);
}

namespace detail {

/// The bytes of the file at `path`, read once, decompressed when they start with the gzip magic.
inline std::string read_text_auto(const std::string& path, const GzipOptions& gzip,
                                  std::string_view where) {
  std::string bytes = coulomb::read_file(path, where);
  if (has_gzip_magic(bytes)) bytes = gunzip(bytes, path, gzip);
  return bytes;
}

}  // namespace detail

/// The whole text of the file at `path`, decompressed when it is gzip data. Whether it is
/// gzip is decided by its first two bytes (1f 8b), never by its name: a gzip file named `.tsv`
/// and a plain file named `.tsv.gz` both read right. The file is read exactly once, so `path`
/// may be a pipe, a FIFO, /dev/stdin or a shell's `<(…)`: a tool reads it once, looks at its
/// header line (to choose the TextColumns, say), then parses the same text with
/// parse_text_dataset or parse_tsv. Throws io_error naming `path` when the file cannot be read,
/// and as gunzip for damaged gzip data.
inline std::string read_text_file_auto(const std::string& path, const GzipOptions& gzip = {}) {
  return detail::read_text_auto(path, gzip, "coulomb::read_text_file_auto");
}

/// Reads a gzip-compressed TSV file into a table (see parse_tsv).
inline TsvTable read_tsv_gz(const std::string& path, const TsvOptions& options = {},
                            const GzipOptions& gzip = {}) {
  return parse_tsv(read_gzip_file(path, gzip), path, options);
}

/// Reads a dataset from a gzip-compressed TSV file (see parse_text_dataset).
inline TextDataset read_text_dataset_gz(const std::string& path,
                                        const TextColumns& columns = TextColumns::sst2(),
                                        const TextReadOptions& options = {},
                                        const GzipOptions& gzip = {}) {
  return detail::parse_text_dataset(read_gzip_file(path, gzip), path, columns, options,
                                    "coulomb::read_text_dataset_gz");
}

/// Reads a dataset from a TSV file, gzip-compressed or not (decided by the first two bytes, as
/// read_text_file_auto does; the file is read once).
inline TextDataset read_text_dataset_auto(const std::string& path,
                                          const TextColumns& columns = TextColumns::sst2(),
                                          const TextReadOptions& options = {},
                                          const GzipOptions& gzip = {}) {
  const char* where = "coulomb::read_text_dataset_auto";
  return detail::parse_text_dataset(detail::read_text_auto(path, gzip, where), path, columns,
                                    options, where);
}

}  // namespace coulomb
