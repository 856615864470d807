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
#include "layers.hpp"
#include "parameter.hpp"

namespace coulomb::nn {

/// A table E ∈ R^{count×dim}: id i maps to row i. The gradient of the table is the sum of the
/// output gradients of the rows that looked it up (a scatter-add).
template <RealScalar Scalar>
class Embedding {
 public:
  using MatrixType = Matrix<Scalar>;              ///< dense column-major matrix
  using ConstRef = Eigen::Ref<const MatrixType>;  ///< how inputs are taken (no copy)

  /// An empty table; assign a sized one before use.
  Embedding() = default;

  /// A zero table of `count` entries of width `dim` (call initialize). Throws
  /// invalid_argument for a size below 1.
  Embedding(Index count, Index dim) {
    const char* where = "coulomb::nn::Embedding::constructor";
    detail::nn_require_dim(count, where, "count");
    detail::nn_require_dim(dim, where, "dim");
    table_.setZero(count, dim);
    grad_.setZero(count, dim);
  }

  /// Entries drawn from N(0, stddev²).
  template <std::uniform_random_bit_generator G>
  void initialize(G& rng, double stddev) {
    detail::require_positive(stddev, "coulomb::nn::Embedding::initialize", "stddev");
    detail::nn_normal(table_, stddev, rng);
  }

  /// Number of entries (the id range is [0, count)).
  Index count() const noexcept { return table_.rows(); }
  /// Width of the vectors.
  Index dim() const noexcept { return table_.cols(); }

  /// X.row(r) = E.row(ids[r]) (X resized to ids.size() × dim). Throws invalid_argument for an
  /// id outside [0, count()).
  void forward(std::span<const TokenId> ids, MatrixType& X) const {
    check_ids(ids, "coulomb::nn::Embedding::forward");
    X.resize(static_cast<Index>(ids.size()), dim());
    gather<false>(ids, X);
  }

  /// X.row(r) += E.row(ids[r]); X must be ids.size() × dim.
  void forward_add(std::span<const TokenId> ids, MatrixType& X) const {
    const char* where = "coulomb::nn::Embedding::forward_add";
    check_ids(ids, where);
    detail::require_shape(X, static_cast<Index>(ids.size()), dim(), where, "X");
    gather<true>(ids, X);
  }

  /// ∂L/∂E.row(ids[r]) += dX.row(r) for every row r.
  void backward(std::span<const TokenId> ids, const ConstRef& dX) {
    const char* where = "coulomb::nn::Embedding::backward";
    check_ids(ids, where);
    detail::require_shape(dX, static_cast<Index>(ids.size()), dim(), where, "dX");
    const Index n = dX.rows();
    for (Index j = 0; j < dim(); ++j) {
      auto g = grad_.col(j);
      const auto d = dX.col(j);
      for (Index r = 0; r < n; ++r) g(ids[static_cast<std::size_t>(r)]) += d(r);
    }
  }

  /// Sets the gradient to zero.
  void zero_grad() { grad_.setZero(); }

  /// Appends `name` (decayed).
  void append_parameters(ParameterList<Scalar>& list, const std::string& name) {
    list.push_back({name, &table_, &grad_, true, true});
  }

  /// The table E (count × dim).
  const MatrixType& table() const noexcept { return table_; }
  /// The table, mutable.
  MatrixType& table() noexcept { return table_; }
  /// ∂L/∂E accumulated since the last zero_grad().
  const MatrixType& gradient() const noexcept { return grad_; }

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
  void gather(std::span<const TokenId> ids, MatrixType& X) const {
    const Index n = X.rows();
    for (Index j = 0; j < dim(); ++j) {
      const auto e = table_.col(j);
      auto x = X.col(j);
      for (Index r = 0; r < n; ++r) {
        if constexpr (Add)
          x(r) += e(ids[static_cast<std::size_t>(r)]);
        else
          x(r) = e(ids[static_cast<std::size_t>(r)]);
      }
    }
  }

  MatrixType table_, grad_;
};

/// Learned absolute positions P ∈ R^{max_length×dim}: row b·L + t of a batch gets P.row(t).
template <RealScalar Scalar>
class PositionEmbedding {
 public:
  using MatrixType = Matrix<Scalar>;              ///< dense column-major matrix
  using ConstRef = Eigen::Ref<const MatrixType>;  ///< how inputs are taken (no copy)

  /// An empty table; assign a sized one before use.
  PositionEmbedding() = default;

  /// A zero table for positions [0, max_length) of width `dim`.
  PositionEmbedding(Index max_length, Index dim) {
    const char* where = "coulomb::nn::PositionEmbedding::constructor";
    detail::nn_require_dim(max_length, where, "max_length");
    detail::nn_require_dim(dim, where, "dim");
    table_.setZero(max_length, dim);
    grad_.setZero(max_length, dim);
  }

  /// Entries drawn from N(0, stddev²).
  template <std::uniform_random_bit_generator G>
  void initialize(G& rng, double stddev) {
    detail::require_positive(stddev, "coulomb::nn::PositionEmbedding::initialize", "stddev");
    detail::nn_normal(table_, stddev, rng);
  }

  /// Longest sequence the table covers.
  Index max_length() const noexcept { return table_.rows(); }
  /// Width of the vectors.
  Index dim() const noexcept { return table_.cols(); }

  /// X.row(b·L + t) += P.row(t) for `batch` sequences of length `length`; X must be
  /// (batch·length) × dim. Throws invalid_argument for length > max_length().
  void forward_add(Index length, Index batch, MatrixType& X) const {
    const char* where = "coulomb::nn::PositionEmbedding::forward_add";
    check_length(length, batch, where);
    detail::require_shape(X, length * batch, dim(), where, "X");
    for (Index b = 0; b < batch; ++b) X.middleRows(b * length, length) += table_.topRows(length);
  }

  /// ∂L/∂P.row(t) += Σ_b dX.row(b·L + t).
  void backward(Index length, Index batch, const ConstRef& dX) {
    const char* where = "coulomb::nn::PositionEmbedding::backward";
    check_length(length, batch, where);
    detail::require_shape(dX, length * batch, dim(), where, "dX");
    for (Index b = 0; b < batch; ++b) grad_.topRows(length) += dX.middleRows(b * length, length);
  }

  /// Sets the gradient to zero.
  void zero_grad() { grad_.setZero(); }

  /// Appends `name` (decayed).
  void append_parameters(ParameterList<Scalar>& list, const std::string& name) {
    list.push_back({name, &table_, &grad_, true, true});
  }

  /// The table P (max_length × dim).
  const MatrixType& table() const noexcept { return table_; }
  /// The table, mutable.
  MatrixType& table() noexcept { return table_; }
  /// ∂L/∂P accumulated since the last zero_grad().
  const MatrixType& gradient() const noexcept { return grad_; }

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

  MatrixType table_, grad_;
};

}  // namespace coulomb::nn
