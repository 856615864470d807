// SPDX-License-Identifier: MIT
/// @file nn/detail_layer_types.hpp
/// @brief LayerTypes, the member types that every layer of nn/ publishes (MatrixType, VectorType,
/// ConstRef), declared once for all of them.
#pragma once

#include <Eigen/Core>

#include "../core/config.hpp"

namespace coulomb::detail {

/// The public member types of a layer of nn/ with scalar type `Scalar`, its base. Inside a layer
/// (a class template, which does not see a dependent base's names) the same types are spelled
/// Matrix<Scalar>, Vector<Scalar> and ConstMatrixRef<Scalar>.
template <RealScalar Scalar>
struct LayerTypes {
  using MatrixType = Matrix<Scalar>;        ///< dense column-major matrix
  using VectorType = Vector<Scalar>;        ///< dense column vector
  using ConstRef = ConstMatrixRef<Scalar>;  ///< how inputs are taken (no copy)
};

}  // namespace coulomb::detail
