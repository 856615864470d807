// SPDX-License-Identifier: MIT
/// @file io/model_file.hpp
/// @brief coulomb's model and checkpoint file: a versioned, self-describing, checksummed
/// container of metadata (string → string), named blobs (bytes) and named tensors (matrices).
///
/// Layout, version 1 (all integers little-endian; byte by byte in docs/file_format.md):
///
///     header (56 bytes)   magic "\x89CLMB\r\n\x1A", version, byte-order marker, scalar type,
///                         reserved zeros, total file length, lengths of the three sections
///     metadata section    count, then (key, value) pairs, keys unique
///     blob section        count, then (name, bytes) pairs, names unique
///     tensor section      count, then (name, scalar type, rows, cols, column-major data)
///     trailer (4 bytes)   CRC-32C of every byte before it
///
/// The reader trusts nothing: every length is checked against what is left of its section
/// before anything is allocated, the sections must fill the file exactly, and the checksum must
/// match. Any malformed, truncated or corrupted image is rejected with coulomb::io_error naming
/// the file, the byte offset and what is wrong; no input makes it crash or allocate more than
/// the file's size (plus the tensors' own storage, which the file holds). parse_model_file is the
/// entry point for fuzzing (fuzz/fuzz_model_file.cpp).
///
/// Writing is deterministic (the same ModelFile gives the same bytes: metadata in key order,
/// blobs and tensors in insertion order) and atomic (io/atomic_file.hpp). Non-finite tensor
/// entries are refused on both sides by default, so that a NaN never reaches a saved model
/// unnoticed.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "atomic_file.hpp"
#include "crc32c.hpp"

namespace coulomb::io {

/// Scalar type of the tensors of a model file, as stored in the file.
enum class ScalarType : std::uint8_t {
  float32 = 1,  ///< IEEE-754 binary32 (`float`)
  float64 = 2,  ///< IEEE-754 binary64 (`double`)
};

/// The ScalarType code of `S`.
template <RealScalar S>
constexpr ScalarType scalar_type_of() noexcept {
  return std::same_as<S, float> ? ScalarType::float32 : ScalarType::float64;
}

/// "float32", "float64" or "unknown type <code>".
inline std::string scalar_type_name(std::uint8_t code) {
  if (code == static_cast<std::uint8_t>(ScalarType::float32)) return "float32";
  if (code == static_cast<std::uint8_t>(ScalarType::float64)) return "float64";
  return "unknown type " + std::to_string(code);
}

/// Constants of the file format (docs/file_format.md).
struct ModelFileFormat {
  /// The 8 magic bytes at offset 0: 0x89 'C' 'L' 'M' 'B' '\\r' '\\n' 0x1A. The high first byte
  /// and the CR LF / Ctrl-Z catch transfers that alter bytes or line ends.
  static constexpr std::array<unsigned char, 8> magic = {0x89, 'C',  'L',  'M',
                                                         'B',  '\r', '\n', 0x1A};
  static constexpr std::uint32_t version = 1;  ///< the format version this build writes and reads
  /// Byte-order marker: written as the little-endian bytes 04 03 02 01.
  static constexpr std::uint32_t byte_order_marker = 0x01020304u;
  static constexpr std::size_t header_size = 56;       ///< bytes before the metadata section
  static constexpr std::size_t trailer_size = 4;       ///< the CRC-32C at the end
  static constexpr std::size_t max_name_size = 65535;  ///< longest key or blob/tensor name
  /// Largest number of rows or columns of a tensor (2³¹ − 1).
  static constexpr std::uint64_t max_dimension = 0x7FFFFFFFu;
};

/// One named tensor of a ModelFile.
template <RealScalar S>
struct NamedTensor {
  std::string name{};  ///< unique among the file's tensors
  Matrix<S> value{};   ///< the tensor (column-major)
};

/// One named blob (arbitrary bytes, for example a serialized vocabulary) of a ModelFile.
struct NamedBlob {
  std::string name{};   ///< unique among the file's blobs
  std::string bytes{};  ///< the contents, any bytes
};

/// The contents of a model or checkpoint file, in memory: metadata, blobs and tensors of scalar
/// type `S`. Names and keys are non-empty and at most ModelFileFormat::max_name_size bytes;
/// tensor names are unique among tensors, blob names among blobs, keys among metadata.
template <RealScalar S>
class ModelFile {
 public:
  using Scalar = S;  ///< scalar type of the tensors

  /// An empty file; `source` names it in messages (the path it was read from, if any).
  explicit ModelFile(std::string source = {}) : source_(std::move(source)) {}

  /// The path this file was read from, or the name given to parse_model_file ("" if built in
  /// memory).
  const std::string& source() const noexcept { return source_; }

  // --- metadata ---------------------------------------------------------------------------------

  /// Sets metadata `key` to `value` (replacing an earlier value). Values may hold any bytes.
  /// Throws invalid_argument for an empty or too long key.
  void set_metadata(std::string key, std::string value) {
    check_name(key, "coulomb::io::ModelFile::set_metadata", "key");
    metadata_.insert_or_assign(std::move(key), std::move(value));
  }

  /// All metadata, by key.
  const std::map<std::string, std::string, std::less<>>& metadata() const noexcept {
    return metadata_;
  }

  /// The value of `key`, or nullptr.
  const std::string* find_metadata(std::string_view key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
  }

  /// The value of `key`; throws io_error naming the file when there is none.
  const std::string& metadata_value(std::string_view key) const {
    const std::string* v = find_metadata(key);
    if (v == nullptr) fail_missing("coulomb::io::ModelFile::metadata_value", "metadata key", key);
    return *v;
  }

  // --- blobs ------------------------------------------------------------------------------------

  /// Adds a blob. Throws invalid_argument for an empty, too long or duplicate name.
  void add_blob(std::string name, std::string bytes) {
    const char* where = "coulomb::io::ModelFile::add_blob";
    check_name(name, where, "name");
    if (blob_index_.count(name) != 0) duplicate(where, "blob", name);
    blob_index_.emplace(name, blobs_.size());
    blobs_.push_back(NamedBlob{std::move(name), std::move(bytes)});
  }

  /// All blobs, in insertion (file) order.
  const std::vector<NamedBlob>& blobs() const noexcept { return blobs_; }

  /// The bytes of blob `name`, or nullptr.
  const std::string* find_blob(std::string_view name) const {
    const auto it = blob_index_.find(name);
    return it == blob_index_.end() ? nullptr : &blobs_[it->second].bytes;
  }

  /// The bytes of blob `name`; throws io_error naming the file when there is none.
  const std::string& blob(std::string_view name) const {
    const std::string* b = find_blob(name);
    if (b == nullptr) fail_missing("coulomb::io::ModelFile::blob", "blob", name);
    return *b;
  }

  // --- tensors ----------------------------------------------------------------------------------

  /// Adds a tensor (a copy of `value`, evaluated). Throws invalid_argument for an empty, too
  /// long or duplicate name, or more than ModelFileFormat::max_dimension rows or columns.
  template <typename Derived>
  void add_tensor(std::string name, const Eigen::MatrixBase<Derived>& value) {
    add_tensor(std::move(name), Matrix<S>(value));
  }

  /// Adds a tensor, taking `value`. Throws as the other overload.
  void add_tensor(std::string name, Matrix<S>&& value) {
    const char* where = "coulomb::io::ModelFile::add_tensor";
    check_name(name, where, "name");
    if (tensor_index_.count(name) != 0) duplicate(where, "tensor", name);
    constexpr auto max_dim = static_cast<Index>(ModelFileFormat::max_dimension);
    if (value.rows() > max_dim || value.cols() > max_dim) {
      throw invalid_argument(std::string(where) + ": tensor '" + name + "' is " +
                             std::to_string(value.rows()) + "×" + std::to_string(value.cols()) +
                             ", over the format's limit of 2^31 - 1 rows or columns");
    }
    tensor_index_.emplace(name, tensors_.size());
    tensors_.push_back(NamedTensor<S>{std::move(name), std::move(value)});
  }

  /// All tensors, in insertion (file) order.
  const std::vector<NamedTensor<S>>& tensors() const noexcept { return tensors_; }

  /// Tensor `name`, or nullptr.
  const Matrix<S>* find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second].value;
  }

  /// Tensor `name`; throws io_error naming the file when there is none.
  const Matrix<S>& tensor(std::string_view name) const {
    const Matrix<S>* t = find_tensor(name);
    if (t == nullptr) fail_missing("coulomb::io::ModelFile::tensor", "tensor", name);
    return *t;
  }

  /// Same metadata, blobs and tensors (names, order, shapes and values); the source is ignored.
  friend bool operator==(const ModelFile& a, const ModelFile& b) {
    if (a.metadata_ != b.metadata_ || a.tensors_.size() != b.tensors_.size()) return false;
    if (a.blobs_.size() != b.blobs_.size()) return false;
    for (std::size_t i = 0; i < a.blobs_.size(); ++i) {
      if (a.blobs_[i].name != b.blobs_[i].name || a.blobs_[i].bytes != b.blobs_[i].bytes) {
        return false;
      }
    }
    for (std::size_t i = 0; i < a.tensors_.size(); ++i) {
      const auto& x = a.tensors_[i];
      const auto& y = b.tensors_[i];
      if (x.name != y.name || x.value.rows() != y.value.rows() ||
          x.value.cols() != y.value.cols()) {
        return false;
      }
      // Bitwise comparison of the entries (so that -0 ≠ +0 and equal NaNs compare equal).
      if (x.value.size() > 0 &&
          std::memcmp(x.value.data(), y.value.data(),
                      static_cast<std::size_t>(x.value.size()) * sizeof(S)) != 0) {
        return false;
      }
    }
    return true;
  }

 private:
  static void check_name(const std::string& name, const char* where, const char* what) {
    if (name.empty() || name.size() > ModelFileFormat::max_name_size) {
      throw invalid_argument(std::string(where) + ": argument '" + what +
                             "' must have 1 to 65535 bytes, got " + std::to_string(name.size()));
    }
  }
  [[noreturn]] static void duplicate(const char* where, const char* kind, const std::string& name) {
    throw invalid_argument(std::string(where) + ": a " + kind + " named '" + name +
                           "' is already in the file");
  }
  [[noreturn]] void fail_missing(const char* where, const char* kind, std::string_view name) const {
    std::string msg(where);
    msg += ": '" + source_ + "': the file has no " + kind + " '" + std::string(name) + "'";
    throw io_error(msg);
  }

  std::string source_;
  std::map<std::string, std::string, std::less<>> metadata_;
  std::vector<NamedBlob> blobs_;
  std::map<std::string, std::size_t, std::less<>> blob_index_;
  std::vector<NamedTensor<S>> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

/// Options of writing a model file.
struct WriteOptions {
  /// Write tensors with NaN or infinite entries. Off by default: saving them throws
  /// numerical_error naming the tensor and the entry, so that a diverged model is never saved
  /// as if it were fine.
  bool allow_non_finite = false;
};

/// Options of reading a model file.
struct ReadOptions {
  /// Accept tensors with NaN or infinite entries (off by default: io_error).
  bool allow_non_finite = false;
  /// Check the CRC-32C trailer (on by default). A fuzzer turns it off to reach the section
  /// parsers with mutated bytes; every structural check still applies.
  bool verify_checksum = true;
};

namespace detail {

/// Little-endian encoding of unsigned integers into a byte buffer.
template <typename U>
void put_le(std::string& out, U value) {
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    out.push_back(static_cast<char>(static_cast<unsigned char>(value >> (8 * i))));
  }
}

/// Whether every entry of `m` is finite, in O(size) whatever the shape (as one column, so that
/// a 0 × 2³¹ tensor costs nothing even for a reduction that loops over the columns).
template <RealScalar S>
bool all_finite(const Matrix<S>& m) {
  return coulomb::detail::all_finite(
      Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>>(m.data(), m.size()));
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

/// A name shown in a message: at most 60 bytes, control bytes as '?'.
inline std::string printable_name(std::string_view name) {
  std::string out;
  for (std::size_t i = 0; i < name.size() && i < 60; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    out += (c < 0x20 || c == 0x7F) ? '?' : static_cast<char>(c);
  }
  if (name.size() > 60) out += "...";
  return out;
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
    if (!out) detail::throw_file_error(where, target, "write error on the output stream");
  });
  out.flush();
  if (!out) detail::throw_file_error(where, target, "write error on the output stream");
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
/// disk and renamed over `path` (io/atomic_file.hpp), so a crash or an error leaves the previous
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
  if (!in) detail::throw_file_error(where, path, "cannot open the file for reading");
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

  r.enter_section("metadata section", meta_len);
  const auto n_meta = r.get_count(13, "metadata count");
  for (std::uint64_t i = 0; i < n_meta; ++i) {
    const std::size_t at = r.position();
    std::string key = r.get_name("metadata key");
    const auto len = r.get<std::uint64_t>("metadata value length");
    const auto v = r.take(len, "metadata value");
    if (file.find_metadata(key) != nullptr) {
      r.fail_at(at, "duplicate metadata key '" + detail::printable_name(key) + "'");
    }
    file.set_metadata(std::move(key),
                      std::string(reinterpret_cast<const char*>(v.data()), v.size()));
  }
  r.leave_section();

  r.enter_section("blob section", blob_len);
  const auto n_blob = r.get_count(13, "blob count");
  for (std::uint64_t i = 0; i < n_blob; ++i) {
    const std::size_t at = r.position();
    std::string name = r.get_name("blob name");
    const auto len = r.get<std::uint64_t>("blob length");
    const auto v = r.take(len, "blob data");
    if (file.find_blob(name) != nullptr) {
      r.fail_at(at, "duplicate blob name '" + detail::printable_name(name) + "'");
    }
    file.add_blob(std::move(name), std::string(reinterpret_cast<const char*>(v.data()), v.size()));
  }
  r.leave_section();

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
