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
/// A column-major matrix or block with unit inner stride goes column by column through four
/// independent sums (Eigen's sum of a strided block is one chain of adds, bound by their
/// latency).
template <typename Derived>
bool all_finite(const Eigen::DenseBase<Derived>& m) {
  using Scalar = typename Derived::Scalar;
  static_assert(!Eigen::NumTraits<Scalar>::IsInteger, "all_finite: floating-point scalars only");
  constexpr bool direct = (int(Eigen::internal::traits<Derived>::Flags) & Eigen::DirectAccessBit) &&
                          !(int(Derived::Flags) & Eigen::RowMajorBit) &&
                          Eigen::internal::packet_traits<Scalar>::Vectorizable;
  if constexpr (direct) {
    const Derived& d = m.derived();
    if (d.innerStride() == 1) {
      namespace ei = Eigen::internal;
      using Packet = typename ei::packet_traits<Scalar>::type;
      constexpr Index P = ei::packet_traits<Scalar>::size;
      const Packet zero = ei::pset1<Packet>(Scalar(0));
      Packet acc[4] = {zero, zero, zero, zero};
      Scalar tail = 0;
      for (Index j = 0; j < d.cols(); ++j) {
        const Scalar* col = d.data() + j * d.outerStride();
        Index i = 0;
        for (; i + 4 * P <= d.rows(); i += 4 * P)
          for (int u = 0; u < 4; ++u)
            acc[u] = ei::padd(acc[u], ei::pmul(ei::ploadu<Packet>(col + i + u * P), zero));
        for (; i + P <= d.rows(); i += P)
          acc[0] = ei::padd(acc[0], ei::pmul(ei::ploadu<Packet>(col + i), zero));
        for (; i < d.rows(); ++i) tail += col[i] * Scalar(0);
      }
      const Packet sum = ei::padd(ei::padd(acc[0], acc[1]), ei::padd(acc[2], acc[3]));
      return ei::predux(sum) + tail == Scalar(0);
    }
  }
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
