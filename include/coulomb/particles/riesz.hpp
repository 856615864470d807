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
#include <type_traits>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"

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
  /// Number of leading columns of the particles the energy acts on (0: all). With particles
  /// [Ω | b] (learned phases), `columns = d` repels the frequencies only; the gradient is then
  /// zero in the other columns.
  Index columns = 0;
};

/// Riesz s-energy W_{N,s} with value and gradient with respect to the particles (rows). Keeps
/// its tile workspaces between calls (no allocation once the sizes repeat), so one instance
/// must not be evaluated from several threads at once.
template <typename ScalarT>
class RieszEnergy {
  static_assert(RealScalar<ScalarT>, "RieszEnergy is instantiated for float or double");

 public:
  using Scalar = ScalarT;             ///< float or double
  using MatrixType = Matrix<Scalar>;  ///< particles and gradients

  /// Validates the options: s finite, ε > 0 finite, tile_rows ≥ 1.
  explicit RieszEnergy(RieszOptions options = {}) : options_(options) {
    const char* where = "coulomb::RieszEnergy";
    detail::require(std::isfinite(options.s), where, "argument 'options.s' must be finite");
    detail::require_positive(options.softening, where, "options.softening");
    detail::require(options.tile_rows >= 1, where, "argument 'options.tile_rows' must be >= 1");
    detail::require(options.columns >= 0, where, "argument 'options.columns' must be >= 0");
  }

  /// The options given to the constructor.
  const RieszOptions& options() const noexcept { return options_; }

  /// The exponent used for particles of dimension `dim` (resolves the Coulomb default).
  double exponent(Index dim) const {
    if (options_.s >= 0.0) return options_.s;
    detail::require(dim >= 3, "coulomb::RieszEnergy",
                    "the Coulomb exponent s = D − 2 needs dimension D >= 3, got D = " +
                        std::to_string(dim) + "; set options.s explicitly");
    return static_cast<double>(dim - 2);
  }

  /// W(Ω) (of the leading `options.columns` columns when that is not 0).
  template <typename D>
  Scalar evaluate(const Eigen::MatrixBase<D>& omega) const {
    if (restricts(omega.cols())) {
      leading_ = omega.leftCols(options_.columns);
      return compute(leading_, nullptr);
    }
    return compute(omega, nullptr);
  }

  /// W(Ω); `gradient` (N×D, resized) receives ∂W/∂Ω (zero outside the leading
  /// `options.columns` columns when that is not 0).
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>& omega, MatrixType& gradient) const {
    if (restricts(omega.cols())) {
      leading_ = omega.leftCols(options_.columns);
      const Scalar value = compute(leading_, &leading_gradient_);
      gradient.setZero(omega.rows(), omega.cols());
      gradient.leftCols(options_.columns) = leading_gradient_;
      return value;
    }
    return compute(omega, &gradient);
  }

 private:
  /// Whether only the leading columns count; throws if there are fewer columns than that.
  bool restricts(Index cols) const {
    if (options_.columns == 0) return false;
    detail::require(
        cols >= options_.columns, "coulomb::RieszEnergy::evaluate",
        "argument 'omega' has " + std::to_string(cols) +
            " columns, fewer than options.columns = " + std::to_string(options_.columns));
    return cols > options_.columns;
  }

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
    Vector<Scalar>& sq_norms = sq_norms_;
    sq_norms.noalias() = particles.rowwise().squaredNorm();
    if (gradient) gradient->setZero(n, omega.cols());

    const Index tile = std::min<Index>(options_.tile_rows, n);
    MatrixType& gram = gram_;
    MatrixType& coeff = coeff_;
    gram.resize(tile, n);
    coeff.resize(tile, n);
    double energy = 0.0;
    const bool log_energy = s == 0.0;
    // Integer exponents (Coulomb: s = D − 2) use r = t^{−1/2} and repeated squaring, several
    // times faster than a general power; other exponents use exp(−(s/2) log t).
    const bool integer_power = !log_energy && s == std::round(s) && s <= 256.0;
    const Scalar half_s = static_cast<Scalar>(0.5 * s);
    base_.resize(tile);
    for (Index r0 = 0; r0 < n; r0 += tile) {
      const Index rows = std::min(tile, n - r0);
      auto g = gram.topRows(rows);
      auto c = coeff.topRows(rows);
      g.noalias() = particles.middleRows(r0, rows) * particles.transpose();
      const auto sq_tile = sq_norms.segment(r0, rows).array();
      // Column by column (each column of the tile stays in L1 through all the passes):
      // u_kl = ‖ω_k − ω_l‖² from the Gram matrix, clamped at 0 against rounding, t = u + ε²;
      // then f(t) into the Gram tile and f′(t) into the coefficient tile.
      for (Index l = 0; l < n; ++l) {
        auto t = g.col(l).array();
        auto fp = c.col(l).array();
        t = (sq_tile + (sq_norms(l) - Scalar(2) * t)).max(Scalar(0)) + static_cast<Scalar>(eps2);
        if (log_energy) {
          fp = Scalar(-0.5) * t.inverse();
          t = Scalar(-0.5) * t.log();
        } else if (integer_power) {
          auto b = base_.head(rows).array();
          b = t.rsqrt();
          fp = -half_s * b.square();  // −(s/2)/t; times f below
          auto k = static_cast<unsigned>(s);
          bool first = true;
          while (k != 0) {  // t ← b^s
            if (k & 1u) {
              if (first)
                t = b;
              else
                t *= b;
              first = false;
            }
            k >>= 1u;
            if (k != 0) b = b.square();
          }
          fp *= t;
        } else {
          fp = -half_s * t.inverse();
          t = (-half_s * t.log()).exp();
          fp *= t;  // f′ = −(s/2) t^{−s/2} / t
        }
        if (l >= r0 && l < r0 + rows) {  // the pair (k, k) is not a pair
          t(l - r0) = 0;
          fp(l - r0) = 0;
        }
      }
      auto t = g.array();
      energy += static_cast<double>(t.sum());
      if (gradient) {
        // Σ_l f′_kl (ω_k − ω_l) = (Σ_l f′_kl) ω_k − Σ_l f′_kl ω_l, for the tile's rows k.
        auto grad_rows = gradient->middleRows(r0, rows);
        grad_rows.noalias() -= c * particles;
        // The row sums first: inside the lazy diagonal product they would be recomputed for
        // every coefficient.
        auto row_sums = base_.head(rows);
        row_sums.noalias() = c.rowwise().sum();
        grad_rows += row_sums.asDiagonal() * particles.middleRows(r0, rows);
      }
    }
    const double inv_n2 = 1.0 / (static_cast<double>(n) * static_cast<double>(n));
    if (gradient) *gradient *= static_cast<Scalar>(4.0 * inv_n2);
    // Coincident (or nearly coincident) particles give (u + ε²)^{−s/2} up to ε^{−s}, which
    // overflows float for ε = 1e-3 and s >= 13, and double for s >= 103: the energy is then
    // +∞ and the gradient NaN (∞ · 0). Report it instead of returning them.
    if (!std::isfinite(energy * inv_n2) ||
        !std::isfinite(static_cast<double>(static_cast<Scalar>(energy * inv_n2))) ||
        (gradient && !coulomb::detail::all_finite(*gradient))) {
      throw numerical_error(
          std::string(where) + ": the repulsion overflows " +
          (std::is_same_v<Scalar, float> ? "float" : "double") +
          ": argument 'omega' has particles so close that (|w_k - w_l|^2 + eps^2)^(-s/2) is "
          "not representable (s = " +
          std::to_string(s) + ", eps = " + std::to_string(options_.softening) +
          "); increase options.softening, lower options.s or use double");
    }
    return static_cast<Scalar>(energy * inv_n2);
  }

  RieszOptions options_;
  // Workspaces of compute(): a tile of the Gram matrix (then of f), a tile of f′, ‖ω_k‖², and
  // one column of t^{−1/2} (then the row sums of f′).
  mutable MatrixType gram_, coeff_, leading_, leading_gradient_;
  mutable Vector<Scalar> sq_norms_, base_;
};

}  // namespace coulomb
