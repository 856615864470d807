// SPDX-License-Identifier: MIT
/// @file io/model_file_container.hpp
/// @brief The contents of a model or checkpoint file in memory (ModelFile: metadata, named
/// blobs and named tensors of one scalar type), the format's constants, and the options of
/// reading and writing. The layout on disk: io/model_file.hpp and docs/file_format.md.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

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

/// Whether every entry of `m` is finite, in O(size) whatever the shape (as one column, so that
/// a 0 × 2³¹ tensor costs nothing even for a reduction that loops over the columns).
template <RealScalar S>
bool all_finite(const Matrix<S>& m) {
  return coulomb::detail::all_finite(
      Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>>(m.data(), m.size()));
}

}  // namespace detail

}  // namespace coulomb::io
