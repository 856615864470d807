// SPDX-License-Identifier: MIT
/// @file metrics/detail_probabilities.hpp
/// @brief Internal: checked read access to predicted probabilities (an n × C matrix of rows
/// summing to 1, or an n × 1 column of P(y = 1) seen as two classes), shared by the metrics.
#pragma once

#include <cmath>
#include <span>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb::detail {

/// Read access to checked probabilities, a column of P(y = 1) seen as two classes.
template <typename Derived>
class ProbabilityView {
 public:
  explicit ProbabilityView(const Eigen::MatrixBase<Derived>& p) : p_(p.derived()) {}
  Index rows() const noexcept { return p_.rows(); }
  Index classes() const noexcept { return p_.cols() == 1 ? 2 : p_.cols(); }
  bool is_column() const noexcept { return p_.cols() == 1; }
  double operator()(Index i, Index c) const {
    if (p_.cols() == 1) {
      const auto p1 = static_cast<double>(p_(i, 0));
      return c == 1 ? p1 : 1.0 - p1;
    }
    return static_cast<double>(p_(i, c));
  }
  /// Predicted class: argmax, lowest index on ties; for a column, 1 iff p > 0.5.
  int predicted(Index i) const {
    if (p_.cols() == 1) return static_cast<double>(p_(i, 0)) > 0.5 ? 1 : 0;
    Index best = 0;
    for (Index c = 1; c < p_.cols(); ++c) {
      if (p_(i, c) > p_(i, best)) best = c;
    }
    return static_cast<int>(best);
  }

 private:
  const Derived& p_;
};

/// Checks probabilities and labels: n ≥ 1 rows, one per label; entries finite and in [0, 1]
/// (to 1e-5); rows of a C ≥ 2 matrix summing to 1 (to 1e-4); labels in [0, C).
template <typename Derived>
void check_probabilities(const Eigen::MatrixBase<Derived>& probs, std::span<const int> labels,
                         const char* where) {
  const Index n = probs.rows();
  require(n >= 1, where, "argument 'probs' has no rows");
  require(probs.cols() >= 1, where, "argument 'probs' has no columns");
  require(static_cast<std::size_t>(n) == labels.size(), where,
          "argument 'labels' has " + std::to_string(labels.size()) + " entries, expected " +
              std::to_string(n) + " (the rows of 'probs')");
  require_finite(probs, where, "probs");
  constexpr double entry_tol = 1e-5;
  constexpr double sum_tol = 1e-4;
  const Index classes = probs.cols() == 1 ? 2 : probs.cols();
  for (Index i = 0; i < n; ++i) {
    double sum = 0.0;
    for (Index c = 0; c < probs.cols(); ++c) {
      const auto v = static_cast<double>(probs(i, c));
      require(v >= -entry_tol && v <= 1.0 + entry_tol, where,
              "argument 'probs' has entry " + std::to_string(v) + " at (" + std::to_string(i) +
                  ", " + std::to_string(c) + "), outside [0, 1]");
      sum += v;
    }
    if (probs.cols() > 1) {
      require(std::abs(sum - 1.0) <= sum_tol, where,
              "row " + std::to_string(i) + " of argument 'probs' sums to " + std::to_string(sum) +
                  ", not 1");
    }
    const int y = labels[static_cast<std::size_t>(i)];
    require(y >= 0 && y < classes, where,
            "argument 'labels' has " + std::to_string(y) + " at " + std::to_string(i) +
                ", outside [0, " + std::to_string(classes) + ")");
  }
}

}  // namespace coulomb::detail
