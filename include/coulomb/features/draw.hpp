// SPDX-License-Identifier: MIT
/// @file features/draw.hpp
/// @brief Drawing the particles Ω ∈ R^{m×d} of a random feature map.
///
/// - `Draw::iid`: every entry N(0, 1).
/// - `Draw::orthogonal_chi`: rows in blocks of d exactly orthogonal directions (the Q factor of
///   the QR decomposition of a d×d Gaussian matrix, with the sign correction that makes it Haar
///   distributed), each row rescaled by an independent chi(d) norm (the norm of a fresh
///   Gaussian d-vector). Every row is then marginally N(0, I), so kernel estimates stay
///   unbiased while the rows within a block are coupled (Choromanski et al., *Rethinking
///   Attention with Performers*, ICLR 2021; Yu et al., *Orthogonal Random Features*, NIPS 2016).
/// - `Draw::orthogonal_sqrt_d`: the same directions with every norm fixed to √d (the
///   "regularized" variant: lower variance, slightly biased).
///
/// The draw is made in double precision from the generator and then rounded, so float and
/// double maps built from the same seed hold the same particles up to rounding.
#pragma once

#include <cmath>
#include <random>
#include <string>

#include <Eigen/Core>
#include <Eigen/QR>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"

namespace coulomb {

/// How the rows of Ω are drawn (see features/draw.hpp).
enum class Draw {
  iid,               ///< independent N(0, I) rows
  orthogonal_chi,    ///< orthogonal blocks, chi(d) norms (unbiased)
  orthogonal_sqrt_d  ///< orthogonal blocks, norms fixed to √d (regularized)
};

/// Name of a Draw value, for messages and reports.
inline const char* to_string(Draw draw) noexcept {
  switch (draw) {
    case Draw::iid:
      return "iid";
    case Draw::orthogonal_chi:
      return "orthogonal_chi";
    case Draw::orthogonal_sqrt_d:
      return "orthogonal_sqrt_d";
  }
  return "unknown";
}

/// Returns an m×d matrix of particles drawn by `draw` from generator `g`, each row marginally
/// N(0, I) (exactly so for `iid` and `orthogonal_chi`). Throws invalid_argument for m < 1 or
/// d < 1.
template <std::uniform_random_bit_generator G>
Matrix<double> draw_particles(Index num_particles, Index input_dim, Draw draw, G& g) {
  detail::require(
      num_particles >= 1, "coulomb::draw_particles",
      "argument 'num_particles' must be at least 1, got " + std::to_string(num_particles));
  detail::require(input_dim >= 1, "coulomb::draw_particles",
                  "argument 'input_dim' must be at least 1, got " + std::to_string(input_dim));
  const Index m = num_particles;
  const Index d = input_dim;
  Matrix<double> omega(m, d);
  if (draw == Draw::iid) {
    fill_standard_normal(omega, g);
    return omega;
  }
  Matrix<double> gauss(d, d);
  Vector<double> norm_draw(d);
  for (Index start = 0; start < m; start += d) {
    const Index rows = std::min(d, m - start);
    fill_standard_normal(gauss, g);
    Eigen::HouseholderQR<Matrix<double>> qr(gauss);
    Matrix<double> q = qr.householderQ();
    // Haar measure: flip each column of Q by the sign of the matching diagonal entry of R.
    const auto& r = qr.matrixQR();
    for (Index k = 0; k < d; ++k)
      if (r(k, k) < 0.0) q.col(k) = -q.col(k);
    for (Index k = 0; k < rows; ++k) {
      double norm = std::sqrt(static_cast<double>(d));
      if (draw == Draw::orthogonal_chi) {
        fill_standard_normal(norm_draw, g);
        norm = norm_draw.norm();
      }
      omega.row(start + k) = norm * q.col(k).transpose();
    }
  }
  return omega;
}

}  // namespace coulomb
