// SPDX-License-Identifier: MIT
/// @file core/check.hpp
/// @brief Argument validation helpers that throw coulomb::invalid_argument with a message
/// naming the function and the argument.
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <string_view>

#include <Eigen/Core>

#include "config.hpp"
#include "error.hpp"

namespace coulomb::detail {

/// Builds "where: what" and throws invalid_argument.
[[noreturn]] inline void throw_invalid(std::string_view where, const std::string& what) {
  std::string msg(where);
  msg += ": ";
  msg += what;
  throw invalid_argument(msg);
}

/// Throws unless `condition`; the message is "where: what".
inline void require(bool condition, std::string_view where, const std::string& what) {
  if (!condition) throw_invalid(where, what);
}

/// Whether every entry of `m` is finite (no NaN, no ±∞). One vectorized pass: x·0 is ±0 for a
/// finite x and NaN for ±∞ and NaN, so the sum of those products is 0 exactly when every entry
/// is finite. Eigen's allFinite() compares (x − x) with itself entry by entry in scalar code
/// and costs several times more; in a training step these checks run on every block.
template <typename Derived>
bool all_finite(const Eigen::DenseBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  static_assert(!Eigen::NumTraits<Scalar>::IsInteger, "all_finite: floating-point scalars only");
  return (m.derived().array() * Scalar(0)).sum() == Scalar(0);
}

/// Throws if any entry of `m` is NaN or infinite; names the argument and the first bad entry.
template <typename Derived>
void require_finite(const Eigen::DenseBase<Derived>& m, std::string_view where,
                    std::string_view name) {
  // One vectorized pass; locate the entry only on the error path.
  if (all_finite(m)) return;
  for (Index j = 0; j < m.cols(); ++j) {
    for (Index i = 0; i < m.rows(); ++i) {
      if (!std::isfinite(static_cast<double>(m(i, j)))) {
        std::ostringstream os;
        os << "argument '" << name << "' has a non-finite entry " << m(i, j) << " at (" << i << ", "
           << j << ")";
        throw_invalid(where, os.str());
      }
    }
  }
}

/// Throws unless `m` has `cols` columns.
template <typename Derived>
void require_cols(const Eigen::EigenBase<Derived>& m, Index cols, std::string_view where,
                  std::string_view name) {
  if (m.cols() != cols) {
    std::ostringstream os;
    os << "argument '" << name << "' has " << m.cols() << " columns, expected " << cols;
    throw_invalid(where, os.str());
  }
}

/// Throws unless `m` is rows x cols.
template <typename Derived>
void require_shape(const Eigen::EigenBase<Derived>& m, Index rows, Index cols,
                   std::string_view where, std::string_view name) {
  if (m.rows() != rows || m.cols() != cols) {
    std::ostringstream os;
    os << "argument '" << name << "' is " << m.rows() << "x" << m.cols() << ", expected " << rows
       << "x" << cols;
    throw_invalid(where, os.str());
  }
}

/// Throws unless value > 0 (and finite).
template <typename T>
void require_positive(T value, std::string_view where, std::string_view name) {
  if (!(value > T(0)) || !std::isfinite(static_cast<double>(value))) {
    std::ostringstream os;
    os << "argument '" << name << "' must be positive and finite, got " << value;
    throw_invalid(where, os.str());
  }
}

}  // namespace coulomb::detail
