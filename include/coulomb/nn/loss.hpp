// SPDX-License-Identifier: MIT
/// @file nn/loss.hpp
/// @brief Softmax probabilities and the softmax cross-entropy loss with its gradient.
/// Documented in docs/model.md.
///
/// For logits Z ∈ R^{B×C} (one row per sequence) and labels y_b ∈ [0, C):
///   p_b = softmax(z_b),  loss = −(1/B) Σ_b log p_b[y_b],  ∂loss/∂z_b = (p_b − e_{y_b}) / B.
/// The log-softmax is computed as z − max z − log Σ exp(z − max z), exact for any finite
/// logits. The logits are column-major with one row per example, so every pass runs column by
/// column (contiguous memory: a 2,048 × 8,192 language-model batch no longer strides through
/// memory row by row) while each row still sees the operations of a row-by-row loop in the same
/// order: the same bits.
#pragma once

#include <cmath>
#include <span>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb {

namespace detail {

/// Checks labels: one per row of the argument `rows_name` (`rows` of them), each in [0, C).
inline void nn_check_labels(std::span<const int> labels, Index rows, Index C, const char* where,
                            const char* rows_name) {
  if (!(static_cast<Index>(labels.size()) == rows))
    detail::throw_invalid(where, "argument 'labels' has " + std::to_string(labels.size()) +
                                     " entries, expected " + std::to_string(rows) +
                                     " (the rows of '" + rows_name + "')");
  for (std::size_t b = 0; b < labels.size(); ++b) {
    if (!(labels[b] >= 0 && labels[b] < C))
      detail::throw_invalid(where, "argument 'labels' holds " + std::to_string(labels[b]) +
                                       " at index " + std::to_string(b) + ", expected 0.." +
                                       std::to_string(C - 1));
  }
}

/// Checks logits (non-empty, finite) and labels (one per row, in [0, C)).
template <typename D>
void nn_check_logits_labels(const Eigen::MatrixBase<D>& logits, std::span<const int> labels,
                            const char* where) {
  if (!(logits.rows() >= 1 && logits.cols() >= 1))
    detail::throw_invalid(where, "argument 'logits' is " + std::to_string(logits.rows()) + "x" +
                                     std::to_string(logits.cols()) + ", expected at least 1x1");
  detail::require_finite(logits, where, "logits");
  nn_check_labels(labels, logits.rows(), logits.cols(), where, "logits");
}

/// Per row b of Z: mx_b = max_j Z(b, j), column by column.
template <typename D>
void nn_row_max(const Eigen::MatrixBase<D>& Z,
                Eigen::Array<typename D::Scalar, Eigen::Dynamic, 1>& mx) {
  mx = Z.col(0).array();
  for (Index j = 1; j < Z.cols(); ++j) mx = mx.max(Z.col(j).array());
}

/// Per row b of Z (B × C): mx_b = max_j Z(b, j) and E(b, j) = exp(Z(b, j) − mx_b) (E resized to
/// B × C), column by column; the exponential is std::exp per entry, as the row-wise expressions
/// these passes replace evaluated it (a strided row has no packet access), so E has their bits.
template <typename D>
void nn_shifted_exp(const Eigen::MatrixBase<D>& Z, Matrix<typename D::Scalar>& E,
                    Eigen::Array<typename D::Scalar, Eigen::Dynamic, 1>& mx) {
  const Index B = Z.rows(), C = Z.cols();
  nn_row_max(Z, mx);
  E.resize(B, C);
  for (Index j = 0; j < C; ++j)
    for (Index b = 0; b < B; ++b) E(b, j) = std::exp(Z(b, j) - mx(b));
}

/// Per row b of E: s_b = E(b, 0) + E(b, 1) + … + E(b, C − 1), added left to right (the order of
/// Eigen's sum over one row), column by column.
template <typename S>
void nn_row_sums(const Matrix<S>& E, Eigen::Array<S, Eigen::Dynamic, 1>& sum) {
  sum = E.col(0).array();
  for (Index j = 1; j < E.cols(); ++j) sum += E.col(j).array();
}

}  // namespace detail

namespace nn {

/// Row-wise softmax of the logits: probs (resized to B × C) has rows that sum to 1. Throws
/// invalid_argument for an empty or non-finite `logits`.
template <typename D>
void softmax_probabilities(const Eigen::MatrixBase<D>& logits, Matrix<typename D::Scalar>& probs) {
  const char* where = "coulomb::nn::softmax_probabilities";
  if (!(logits.rows() >= 1 && logits.cols() >= 1))
    detail::throw_invalid(where, "argument 'logits' is " + std::to_string(logits.rows()) + "x" +
                                     std::to_string(logits.cols()) + ", expected at least 1x1");
  detail::require_finite(logits, where, "logits");
  using Scalar = typename D::Scalar;
  Eigen::Array<Scalar, Eigen::Dynamic, 1> mx, sum;
  detail::nn_shifted_exp(logits, probs, mx);
  detail::nn_row_sums(probs, sum);
  for (Index j = 0; j < probs.cols(); ++j) probs.col(j).array() /= sum;
}

/// Mean softmax cross-entropy −(1/B) Σ_b log softmax(z_b)[y_b], and its gradient
/// dlogits = (softmax(Z) − one_hot(y)) / B (resized to B × C). Throws invalid_argument for an
/// empty or non-finite `logits`, or `labels` of the wrong size or outside [0, C).
template <typename D>
typename D::Scalar softmax_cross_entropy(const Eigen::MatrixBase<D>& logits,
                                         std::span<const int> labels,
                                         Matrix<typename D::Scalar>& dlogits) {
  using Scalar = typename D::Scalar;
  detail::nn_check_logits_labels(logits, labels, "coulomb::nn::softmax_cross_entropy");
  const Index B = logits.rows();
  const Scalar inv_b = Scalar(1) / static_cast<Scalar>(B);
  Eigen::Array<Scalar, Eigen::Dynamic, 1> mx, sum;
  detail::nn_shifted_exp(logits, dlogits, mx);
  detail::nn_row_sums(dlogits, sum);
  double total = 0.0;
  for (Index b = 0; b < B; ++b) {
    const auto y = static_cast<Index>(labels[static_cast<std::size_t>(b)]);
    total += static_cast<double>(std::log(sum(b)) - (logits(b, y) - mx(b)));
  }
  const Eigen::Array<Scalar, Eigen::Dynamic, 1> scale = inv_b / sum;  // (p_b − e_y)/B = scale·E
  for (Index j = 0; j < dlogits.cols(); ++j) dlogits.col(j).array() *= scale;
  for (Index b = 0; b < B; ++b) dlogits(b, labels[static_cast<std::size_t>(b)]) -= inv_b;
  return static_cast<Scalar>(total / static_cast<double>(B));
}

/// The mean softmax cross-entropy without its gradient.
template <typename D>
typename D::Scalar softmax_cross_entropy(const Eigen::MatrixBase<D>& logits,
                                         std::span<const int> labels) {
  using Scalar = typename D::Scalar;
  detail::nn_check_logits_labels(logits, labels, "coulomb::nn::softmax_cross_entropy");
  const Index B = logits.rows();
  Eigen::Array<Scalar, Eigen::Dynamic, 1> mx, sum(B);
  detail::nn_row_max(logits, mx);
  for (Index b = 0; b < B; ++b) sum(b) = std::exp(logits(b, 0) - mx(b));
  for (Index j = 1; j < logits.cols(); ++j)  // Σ_j exp(z_bj − mx_b), left to right per row
    for (Index b = 0; b < B; ++b) sum(b) += std::exp(logits(b, j) - mx(b));
  double total = 0.0;
  for (Index b = 0; b < B; ++b) {
    const auto y = static_cast<Index>(labels[static_cast<std::size_t>(b)]);
    total += static_cast<double>(std::log(sum(b)) - (logits(b, y) - mx(b)));
  }
  return static_cast<Scalar>(total / static_cast<double>(B));
}

}  // namespace nn
}  // namespace coulomb
