// SPDX-License-Identifier: MIT
/// @file train/gradients.hpp
/// @brief Gradient clipping by global norm, and the finiteness check that stops training before
/// a NaN or infinity can reach the parameters or a saved model.
///
/// Clipping by global norm (Pascanu, Mikolov & Bengio, "On the difficulty of training recurrent
/// neural networks", ICML 2013): with G the concatenation of the gradients of all trainable
/// parameters and ‖G‖ its Euclidean norm, every gradient is scaled by c/‖G‖ when ‖G‖ > c, so the
/// direction of the update is kept and its length bounded.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"
#include "detail_parameters.hpp"

namespace coulomb::train {

/// What require_finite_parameters checks.
enum class FiniteCheck {
  values,                ///< the values of all parameters
  gradients,             ///< the gradients of the trainable parameters
  values_and_gradients,  ///< both
};

/// Throws numerical_error "coulomb::train::require_finite_parameters: step N: the gradient of
/// parameter 'name' has a non-finite entry nan at (i, j)" for the first non-finite entry found
/// (parameters in list order, values before gradients). Values are checked for every parameter,
/// gradients for the trainable ones. `step` is the training step named in the message (< 0:
/// none). Throws invalid_argument for a parameter without a value, or a trainable one without a
/// gradient (when gradients are checked).
template <RealScalar S>
void require_finite_parameters(const nn::ParameterList<S>& params, std::int64_t step,
                               FiniteCheck check = FiniteCheck::values_and_gradients) {
  const char* where = "coulomb::train::require_finite_parameters";
  const bool values = check != FiniteCheck::gradients;
  const bool gradients = check != FiniteCheck::values;
  for (const auto& p : params) {
    detail::check_parameter(p, where, gradients && p.trainable);
    if (values) detail::require_finite_tensor(*p.value, where, step, "value", p.name);
    if (gradients && p.trainable) {
      detail::require_finite_tensor(*p.gradient, where, step, "gradient", p.name);
    }
  }
}

namespace detail {

/// Σ x_i² over n values, accumulated in double in 16 interleaved partial sums (one chain would
/// wait on the latency of each addition: a third of a Phase B step's clipping time went there).
template <RealScalar S>
double sum_of_squares(const S* x, Index n) noexcept {
  constexpr int lanes = 16;
  double acc[lanes] = {};
  Index i = 0;
  for (; i + lanes <= n; i += lanes) {
    for (int l = 0; l < lanes; ++l) {
      const auto v = static_cast<double>(x[i + l]);
      acc[l] += v * v;
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    const auto v = static_cast<double>(x[i]);
    acc[l] += v * v;
  }
  for (int w = lanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

/// Scales the gradients of the trainable parameters by max_norm/norm when norm (their global
/// norm, finite) exceeds max_norm: the scaling step of clip_gradient_norm.
template <RealScalar S>
void scale_gradients_to(const nn::ParameterList<S>& params, double norm, double max_norm) {
  if (norm > max_norm) {
    const auto scale = static_cast<S>(max_norm / norm);
    for (const auto& p : params) {
      if (p.trainable) *p.gradient *= scale;
    }
  }
}

}  // namespace detail

/// The global Euclidean norm ‖G‖ of the gradients of the trainable parameters, accumulated in
/// double (so float gradients of any size do not overflow). Non-trainable parameters are
/// skipped. Throws invalid_argument for a trainable parameter without a value or gradient, or
/// with a gradient of another shape.
template <RealScalar S>
double global_gradient_norm(const nn::ParameterList<S>& params) {
  const char* where = "coulomb::train::global_gradient_norm";
  double sum = 0.0;
  for (const auto& p : params) {
    if (!p.trainable) continue;
    detail::check_parameter(p, where, true);
    sum += detail::sum_of_squares(p.gradient->data(), p.gradient->size());
  }
  return std::sqrt(sum);
}

/// Scales the gradients of the trainable parameters by max_norm/‖G‖ when their global norm ‖G‖
/// exceeds `max_norm`, and returns ‖G‖ before clipping (for logging). Throws invalid_argument
/// unless max_norm > 0 is finite (and as global_gradient_norm); numerical_error naming the
/// parameter when a gradient has a non-finite entry (the norm is then not finite, and scaling
/// would turn every gradient into NaN). Nothing is changed when it throws.
template <RealScalar S>
double clip_gradient_norm(const nn::ParameterList<S>& params, double max_norm) {
  const char* where = "coulomb::train::clip_gradient_norm";
  coulomb::detail::require_positive(max_norm, where, "max_norm");
  const double norm = global_gradient_norm(params);
  if (!std::isfinite(norm)) {
    for (const auto& p : params) {
      if (p.trainable) detail::require_finite_tensor(*p.gradient, where, -1, "gradient", p.name);
    }
    // Finite entries whose squares overflow double (|g| > 1e154): not representable either.
    throw numerical_error(std::string(where) + ": the global gradient norm overflows");
  }
  detail::scale_gradients_to(params, norm, max_norm);
  return norm;
}

}  // namespace coulomb::train
