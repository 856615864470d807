// SPDX-License-Identifier: MIT
/// @file nn/embedding.hpp
/// @brief Lookup tables with their backward: Embedding (token or segment ids → vectors) and
/// PositionEmbedding (learned absolute positions). Documented in docs/model.md.
///
/// Tokens are the rows of an n×d matrix, n = B·L, in the order of a text::TokenBatch: row
/// b·L + t is position t of sequence b, which is also the column-major order of the batch's
/// L×B id arrays, so `batch.ids.data()` is the id sequence of the rows.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../core/tokens.hpp"
#include "detail_layer_types.hpp"
#include "layers.hpp"
#include "parameter.hpp"

namespace coulomb::nn {

/// What Embedding and PositionEmbedding share: a table of `rows` vectors of width `dim`, its
/// gradient, its initialization and its parameter entry. `class_name` ("coulomb::nn::Embedding")
/// names the owner in error messages.
template <RealScalar Scalar>
class EmbeddingTable : public detail::LayerTypes<Scalar> {
 public:
  /// Entries drawn from N(0, stddev²). Throws invalid_argument unless stddev > 0.
  template <std::uniform_random_bit_generator G>
  void initialize(G& rng, double stddev) {
    detail::require_positive(stddev, std::string(class_name_) + "::initialize", "stddev");
    detail::nn_normal(table_, stddev, rng);
  }

  /// Width of the vectors.
  Index dim() const noexcept { return table_.cols(); }

  /// Sets the gradient to zero.
  void zero_grad() { grad_.setZero(); }

  /// Appends `name` (decayed).
  void append_parameters(ParameterList<Scalar>& list, const std::string& name) {
    list.push_back({name, &table_, &grad_, true, true});
  }

  /// The table (rows × dim).
  const Matrix<Scalar>& table() const noexcept { return table_; }
  /// The table, mutable.
  Matrix<Scalar>& table() noexcept { return table_; }
  /// The gradient of the table accumulated since the last zero_grad().
  const Matrix<Scalar>& gradient() const noexcept { return grad_; }

 protected:
  /// An empty table (no rows).
  explicit EmbeddingTable(const char* class_name) noexcept : class_name_(class_name) {}

  /// A zero table; throws invalid_argument (naming `rows_name` or "dim") for a size below 1.
  EmbeddingTable(const char* class_name, Index rows, const char* rows_name, Index dim)
      : class_name_(class_name) {
    const std::string where = std::string(class_name) + "::constructor";
    detail::nn_require_dim(rows, where.c_str(), rows_name);
    detail::nn_require_dim(dim, where.c_str(), "dim");
    table_.setZero(rows, dim);
    grad_.setZero(rows, dim);
  }

  const char* class_name_;  ///< the owner's class name, for error messages
  Matrix<Scalar> table_;    ///< the vectors, one per row
  Matrix<Scalar> grad_;     ///< ∂L/∂table
};

/// A table E ∈ R^{count×dim}: id i maps to row i. The gradient of the table is the sum of the
/// output gradients of the rows that looked it up (a scatter-add).
template <RealScalar Scalar>
class Embedding : public EmbeddingTable<Scalar> {
 public:
  using EmbeddingTable<Scalar>::dim;

  /// An empty table; assign a sized one before use.
  Embedding() noexcept : EmbeddingTable<Scalar>(class_name) {}

  /// A zero table of `count` entries of width `dim` (call initialize). Throws
  /// invalid_argument for a size below 1.
  Embedding(Index count, Index dim) : EmbeddingTable<Scalar>(class_name, count, "count", dim) {}

  /// Number of entries (the id range is [0, count)).
  Index count() const noexcept { return this->table_.rows(); }

  /// X.row(r) = E.row(ids[r]) (X resized to ids.size() × dim). Throws invalid_argument for an
  /// id outside [0, count()).
  void forward(std::span<const TokenId> ids, Matrix<Scalar>& X) const {
    check_ids(ids, "coulomb::nn::Embedding::forward");
    X.resize(static_cast<Index>(ids.size()), dim());
    gather<false>(ids, X);
  }

  /// X.row(r) += E.row(ids[r]); X must be ids.size() × dim.
  void forward_add(std::span<const TokenId> ids, Matrix<Scalar>& X) const {
    const char* where = "coulomb::nn::Embedding::forward_add";
    check_ids(ids, where);
    detail::require_shape(X, static_cast<Index>(ids.size()), dim(), where, "X");
    gather<true>(ids, X);
  }

  /// ∂L/∂E.row(ids[r]) += dX.row(r) for every row r.
  void backward(std::span<const TokenId> ids, const ConstMatrixRef<Scalar>& dX) {
    const char* where = "coulomb::nn::Embedding::backward";
    check_ids(ids, where);
    detail::require_shape(dX, static_cast<Index>(ids.size()), dim(), where, "dX");
    const Index n = dX.rows();
    for (Index j = 0; j < dim(); ++j) {
      auto g = this->grad_.col(j);
      const auto d = dX.col(j);
      for (Index r = 0; r < n; ++r) g(ids[static_cast<std::size_t>(r)]) += d(r);
    }
  }

 private:
  void check_ids(std::span<const TokenId> ids, const char* where) const {
    const Index c = count();
    for (std::size_t r = 0; r < ids.size(); ++r) {
      if (ids[r] < 0 || ids[r] >= c) {
        detail::throw_invalid(where, "argument 'ids' holds " + std::to_string(ids[r]) +
                                         " at position " + std::to_string(r) + ", outside [0, " +
                                         std::to_string(c) + ")");
      }
    }
  }

  template <bool Add>
  void gather(std::span<const TokenId> ids, Matrix<Scalar>& X) const {
    const Index n = X.rows();
    for (Index j = 0; j < dim(); ++j) {
      const auto e = this->table_.col(j);
      auto x = X.col(j);
      for (Index r = 0; r < n; ++r) {
        if constexpr (Add)
          x(r) += e(ids[static_cast<std::size_t>(r)]);
        else
          x(r) = e(ids[static_cast<std::size_t>(r)]);
      }
    }
  }

  static constexpr const char* class_name = "coulomb::nn::Embedding";
};

/// Learned absolute positions P ∈ R^{max_length×dim}: row b·L + t of a batch gets P.row(t).
template <RealScalar Scalar>
class PositionEmbedding : public EmbeddingTable<Scalar> {
 public:
  using EmbeddingTable<Scalar>::dim;

  /// An empty table; assign a sized one before use.
  PositionEmbedding() noexcept : EmbeddingTable<Scalar>(class_name) {}

  /// A zero table for positions [0, max_length) of width `dim`. Throws invalid_argument for a
  /// size below 1.
  PositionEmbedding(Index max_length, Index dim)
      : EmbeddingTable<Scalar>(class_name, max_length, "max_length", dim) {}

  /// Longest sequence the table covers.
  Index max_length() const noexcept { return this->table_.rows(); }

  /// X.row(b·L + t) += P.row(t) for `batch` sequences of length `length`; X must be
  /// (batch·length) × dim. Throws invalid_argument for length > max_length().
  void forward_add(Index length, Index batch, Matrix<Scalar>& X) const {
    const char* where = "coulomb::nn::PositionEmbedding::forward_add";
    check_length(length, batch, where);
    detail::require_shape(X, length * batch, dim(), where, "X");
    for (Index b = 0; b < batch; ++b)
      X.middleRows(b * length, length) += this->table_.topRows(length);
  }

  /// ∂L/∂P.row(t) += Σ_b dX.row(b·L + t).
  void backward(Index length, Index batch, const ConstMatrixRef<Scalar>& dX) {
    const char* where = "coulomb::nn::PositionEmbedding::backward";
    check_length(length, batch, where);
    detail::require_shape(dX, length * batch, dim(), where, "dX");
    for (Index b = 0; b < batch; ++b)
      this->grad_.topRows(length) += dX.middleRows(b * length, length);
  }

 private:
  void check_length(Index length, Index batch, const char* where) const {
    if (!(length >= 1 && length <= max_length()))
      detail::throw_invalid(where, "argument 'length' is " + std::to_string(length) +
                                       ", expected 1.." + std::to_string(max_length()) +
                                       " (max_length)");
    if (!(batch >= 1))
      detail::throw_invalid(where,
                            "argument 'batch' must be at least 1, got " + std::to_string(batch));
  }

  static constexpr const char* class_name = "coulomb::nn::PositionEmbedding";
};

}  // namespace coulomb::nn
