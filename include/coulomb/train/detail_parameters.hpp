// SPDX-License-Identifier: MIT
/// @file train/detail_parameters.hpp
/// @brief Internal: checks of nn::ParameterList entries shared by the optimizer, the gradient
/// utilities and early stopping, with messages that name the function and the parameter.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"

namespace coulomb::train::detail {

/// "rows×cols".
inline std::string shape_text(Index rows, Index cols) {
  return std::to_string(rows) + "×" + std::to_string(cols);
}

/// Throws invalid_argument unless `p` has a name and a value, and, when `need_gradient`, a
/// gradient of the value's shape.
template <typename S>
void check_parameter(const nn::ParameterRef<S>& p, std::string_view where, bool need_gradient) {
  if (p.name.empty()) coulomb::detail::throw_invalid(where, "a parameter has an empty name");
  if (p.value == nullptr) {
    coulomb::detail::throw_invalid(where, "parameter '" + p.name + "' has no value");
  }
  if (!need_gradient) return;
  if (p.gradient == nullptr) {
    coulomb::detail::throw_invalid(where, "trainable parameter '" + p.name + "' has no gradient");
  }
  if (p.gradient->rows() != p.value->rows() || p.gradient->cols() != p.value->cols()) {
    coulomb::detail::throw_invalid(where, "the gradient of parameter '" + p.name + "' is " +
                                              shape_text(p.gradient->rows(), p.gradient->cols()) +
                                              ", its value is " +
                                              shape_text(p.value->rows(), p.value->cols()));
  }
}

/// Throws numerical_error "where: step N: the <what> of 'name' has a non-finite entry x at
/// (i, j)" unless every entry of `m` is finite. step < 0 leaves the step out.
template <typename S>
void require_finite_tensor(const Matrix<S>& m, std::string_view where, std::int64_t step,
                           std::string_view what, const std::string& name) {
  if (coulomb::detail::all_finite(m)) return;
  for (Index j = 0; j < m.cols(); ++j) {
    for (Index i = 0; i < m.rows(); ++i) {
      if (!std::isfinite(m(i, j))) {
        std::ostringstream os;
        os << where << ": ";
        if (step >= 0) os << "step " << step << ": ";
        os << "the " << what << " of parameter '" << name << "' has a non-finite entry " << m(i, j)
           << " at (" << i << ", " << j << ")";
        throw numerical_error(os.str());
      }
    }
  }
}

}  // namespace coulomb::train::detail
