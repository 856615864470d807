// SPDX-License-Identifier: MIT
/// @file particles/riesz.hpp
/// @brief Softened Riesz s-energy of the particles, the repulsion term of the Hamiltonian.
///
/// Badiei Khuzani et al. (2026), §2:
///   W_{N,s}(Ω) = (1/N²) Σ_{k≠l} (‖ω_k − ω_l‖² + ε²)^{−s/2}            (s > 0)
///   W_{N,0}(Ω) = −(1/N²) Σ_{k≠l} ½ log(‖ω_k − ω_l‖² + ε²)             (s = 0, log energy)
/// The Coulomb case is s = D − 2 in dimension D ≥ 3. ε > 0 softens the singularity at
/// coincident particles. With f(u) = (u + ε²)^{−s/2} (or −½ log(u + ε²)),
///   ∂W/∂ω_k = (4/N²) Σ_{l≠k} f′(‖ω_k − ω_l‖²) (ω_k − ω_l),
/// computed through the Gram matrix ΩΩᵀ in row tiles: O(N²·D) time, O(T·N) memory for a tile
/// of T rows, GEMM-rate inner loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"

namespace coulomb {

/// Parameters of the Riesz energy.
struct RieszOptions {
  /// Exponent s >= 0 (0 = log energy). A negative value selects the Coulomb exponent
  /// s = D − 2 for the particles' dimension D (which must then be at least 3).
  double s = -1.0;
  /// Softening ε > 0.
  double softening = 1e-3;
  /// Rows per tile of the pairwise computation.
  Index tile_rows = 256;
};

/// Riesz s-energy W_{N,s} with value and gradient with respect to the particles (rows).
template <typename ScalarT>
class RieszEnergy {
  static_assert(RealScalar<ScalarT>, "RieszEnergy is instantiated for float or double");

 public:
  using Scalar = ScalarT;
  using MatrixType = Matrix<Scalar>;

  explicit RieszEnergy(RieszOptions options = {}) : options_(options) {
    const char* where = "coulomb::RieszEnergy";
    detail::require(std::isfinite(options.s), where, "argument 'options.s' must be finite");
    detail::require_positive(options.softening, where, "options.softening");
    detail::require(options.tile_rows >= 1, where, "argument 'options.tile_rows' must be >= 1");
  }

  const RieszOptions& options() const noexcept { return options_; }

  /// The exponent used for particles of dimension `dim` (resolves the Coulomb default).
  double exponent(Index dim) const {
    if (options_.s >= 0.0) return options_.s;
    detail::require(dim >= 3, "coulomb::RieszEnergy",
                    "the Coulomb exponent s = D − 2 needs dimension D >= 3, got D = " +
                        std::to_string(dim) + "; set options.s explicitly");
    return static_cast<double>(dim - 2);
  }

  /// W(Ω).
  template <typename D>
  Scalar evaluate(const Eigen::MatrixBase<D>& omega) const {
    return compute(omega, nullptr);
  }

  /// W(Ω); `gradient` (N×D, resized) receives ∂W/∂Ω.
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>& omega, MatrixType& gradient) const {
    return compute(omega, &gradient);
  }

 private:
  template <typename D>
  Scalar compute(const Eigen::MatrixBase<D>& omega, MatrixType* gradient) const {
    const char* where = "coulomb::RieszEnergy::evaluate";
    const Index n = omega.rows();
    detail::require(n >= 2, where,
                    "argument 'omega' needs at least 2 particles (rows), got " + std::to_string(n));
    detail::require_finite(omega, where, "omega");
    const double s = exponent(omega.cols());
    const double eps2 = options_.softening * options_.softening;
    const MatrixType& particles = omega.derived();
    const Vector<Scalar> sq_norms = particles.rowwise().squaredNorm();
    if (gradient) gradient->setZero(n, omega.cols());

    const Index tile = std::min<Index>(options_.tile_rows, n);
    MatrixType gram(tile, n);
    MatrixType coeff(tile, n);
    double energy = 0.0;
    for (Index r0 = 0; r0 < n; r0 += tile) {
      const Index rows = std::min(tile, n - r0);
      auto g = gram.topRows(rows);
      auto c = coeff.topRows(rows);
      g.noalias() = particles.middleRows(r0, rows) * particles.transpose();
      // u_kl = ‖ω_k − ω_l‖² from the Gram matrix (clamped at 0 against rounding), t = u + ε².
      auto t = g.array();
      t = (Scalar(-2) * t).colwise() + sq_norms.segment(r0, rows).array();
      t.rowwise() += sq_norms.transpose().array();
      t = t.max(Scalar(0)) + static_cast<Scalar>(eps2);
      // f(u) and f′(u) for every pair of the tile; the pair (k, k) is removed afterwards.
      if (s == 0.0) {
        c.array() = Scalar(-0.5) / t;
        t = Scalar(-0.5) * t.log();
      } else {
        const Scalar half_s = static_cast<Scalar>(0.5 * s);
        c.array() = t.inverse();
        t = t.pow(-half_s);
        c.array() *= -half_s * t;  // f′ = −(s/2) t^{−s/2} / t
      }
      for (Index k = 0; k < rows; ++k) {
        t(k, r0 + k) = 0;
        c(k, r0 + k) = 0;
      }
      energy += static_cast<double>(t.sum());
      if (gradient) {
        // Σ_l f′_kl (ω_k − ω_l) = (Σ_l f′_kl) ω_k − Σ_l f′_kl ω_l, for the tile's rows k.
        auto grad_rows = gradient->middleRows(r0, rows);
        grad_rows.noalias() -= c * particles;
        grad_rows += c.rowwise().sum().asDiagonal() * particles.middleRows(r0, rows);
      }
    }
    const double inv_n2 = 1.0 / (static_cast<double>(n) * static_cast<double>(n));
    if (gradient) *gradient *= static_cast<Scalar>(4.0 * inv_n2);
    return static_cast<Scalar>(energy * inv_n2);
  }

  RieszOptions options_;
};

}  // namespace coulomb
