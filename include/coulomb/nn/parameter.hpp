// SPDX-License-Identifier: MIT
/// @file nn/parameter.hpp
/// @brief A named view of one trainable tensor and its gradient: the interface between a model,
/// its optimizer and its file format.
///
/// A model exposes `std::vector<ParameterRef<S>> parameters()`, in a fixed order with unique,
/// dotted names ("encoder.0.attention.w_q"). An optimizer (train/) updates `*value` from
/// `*gradient` for the parameters that are trainable; a model file (io/) stores every parameter
/// by name and shape, trainable or not (a frozen Ω is part of the model).
#pragma once

#include <string>
#include <vector>

#include "coulomb/core/config.hpp"

namespace coulomb::nn {

/// One tensor of a model. Vectors (biases, norm gains) are stored as k×1 matrices, so that every
/// parameter has the same type.
template <typename Scalar>
struct ParameterRef {
  std::string name{};                  ///< unique, dotted name; the key in model files
  Matrix<Scalar>* value = nullptr;     ///< the tensor; owned by the model
  Matrix<Scalar>* gradient = nullptr;  ///< ∂loss/∂value, same shape; owned by the model
  bool trainable = true;               ///< false: the optimizer leaves it alone (frozen Ω)
  bool decay = true;  ///< whether decoupled weight decay applies (false for biases, norms)
};

/// The parameters of a model, in the model's order.
template <typename Scalar>
using ParameterList = std::vector<ParameterRef<Scalar>>;

}  // namespace coulomb::nn
