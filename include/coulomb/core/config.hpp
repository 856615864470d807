// SPDX-License-Identifier: MIT
/// @file core/config.hpp
/// @brief Version, index type and the Eigen matrix aliases used throughout coulomb.
///
/// Every dense object in coulomb is a column-major Eigen matrix of a scalar type chosen by the
/// user (`float` or `double`); these aliases give them short names.
#pragma once

#include <Eigen/Core>

#define COULOMB_VERSION_MAJOR 0  ///< major version (API changes allowed before 1.0)
#define COULOMB_VERSION_MINOR 1  ///< minor version
#define COULOMB_VERSION_PATCH 0  ///< patch version

namespace coulomb {

/// Library version as "major.minor.patch".
constexpr const char* version_string() noexcept {
  return "0.1.0";
}

/// Signed index type of every size and position (Eigen's).
using Index = Eigen::Index;

/// Dynamic column-major matrix.
template <typename Scalar>
using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;

/// Dynamic column vector.
template <typename Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

/// Read-only view of a dynamic matrix or of a block of one (Eigen::Ref: no copy).
template <typename Scalar>
using ConstMatrixRef = Eigen::Ref<const Matrix<Scalar>>;

/// Dynamic row vector.
template <typename Scalar>
using RowVector = Eigen::Matrix<Scalar, 1, Eigen::Dynamic>;

/// The scalar types coulomb is instantiated and tested with.
template <typename Scalar>
concept RealScalar = std::same_as<Scalar, float> || std::same_as<Scalar, double>;

}  // namespace coulomb
