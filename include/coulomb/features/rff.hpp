// SPDX-License-Identifier: MIT
/// @file features/rff.hpp
/// @brief Random Fourier features for the Gaussian kernel exp(−‖x − y‖²/(2σ²)).
///
/// Rahimi & Recht, *Random Features for Large-Scale Kernel Machines*, NIPS 2007; ω ~ N(0, σ⁻² I):
///   RffForm::cosine_phase: φ(x) = √(2/m) cos(Ωx + b),  b ~ U[0, 2π)   (D = m)
///   RffForm::cos_sin:      φ(x) = (1/√m) [cos Ωx, sin Ωx]               (D = 2m, lower variance)
/// The particles stored in Ω are the frequencies themselves (already divided by σ): the
/// particle model moves them freely, and σ only sets the draw and the reference kernel.
#pragma once

#include <cmath>
#include <numbers>
#include <string>

#include <Eigen/Core>

#include "draw.hpp"
#include "feature_map.hpp"
#include "kernels.hpp"

namespace coulomb {

/// Which random Fourier estimator.
enum class RffForm {
  cosine_phase,  ///< √(2/m) cos(Ωx + b) with random phases b
  cos_sin        ///< (1/√m)[cos Ωx, sin Ωx]
};

/// Construction options of Rff.
struct RffOptions {
  double bandwidth = 1.0;  ///< σ of the Gaussian kernel; Ω is drawn from N(0, σ⁻² I)
  Draw draw = Draw::iid;   ///< how Ω is drawn (orthogonal draws are also valid)
};

/// Random Fourier features of the Gaussian kernel (the family; see the file comment). Satisfies
/// FeatureMap. Its maps are Rff (random phases, the default form) and RffCosSin; name()
/// is that name.
template <typename Scalar, RffForm Form = RffForm::cosine_phase>
class Rff : public FeatureMapBase<Rff<Scalar, Form>, Scalar> {
  using Base = FeatureMapBase<Rff<Scalar, Form>, Scalar>;
  friend Base;
  static constexpr bool with_phase = Form == RffForm::cosine_phase;

 public:
  using typename Base::MatrixType;  ///< Matrix<Scalar>
  using typename Base::VectorType;  ///< Vector<Scalar>

  static constexpr bool is_positive = false;            ///< see feature_map_traits
  static constexpr bool has_closed_form_kernel = true;  ///< see feature_map_traits
  static constexpr bool has_phases = with_phase;        ///< see feature_map_traits
  static constexpr bool is_stabilizable = false;        ///< see feature_map_traits
  /// D / m; see feature_map_traits
  static constexpr Index outputs_per_particle = with_phase ? 1 : 2;
  static constexpr RffForm form = Form;  ///< the form chosen by the template argument

  /// The map's name (its type's), used in error messages.
  static constexpr const char* name() noexcept { return with_phase ? "Rff" : "RffCosSin"; }

  /// m frequencies in dimension d (and m phases for cosine_phase), drawn from `rng`.
  template <std::uniform_random_bit_generator G>
  Rff(Index input_dim, Index num_particles, G& rng, RffOptions options = {}) {
    set_bandwidth(options.bandwidth);
    this->init_random(input_dim, num_particles, options.draw, rng);
  }

  /// Given frequencies Ω (m×d) and, for cosine_phase, phases b (m) drawn from `rng`.
  template <typename D, std::uniform_random_bit_generator G>
  Rff(const Eigen::MatrixBase<D>& omega, G& rng, RffOptions options = {}) {
    set_bandwidth(options.bandwidth);
    this->init_given(omega, options.draw);
    draw_extra(rng);
  }

  /// Given frequencies Ω (m×d) and phases b (m entries; ignored by cos_sin).
  template <typename D, typename DB>
  Rff(const Eigen::MatrixBase<D>& omega, const Eigen::MatrixBase<DB>& phases,
      RffOptions options = {}) {
    set_bandwidth(options.bandwidth);
    this->init_given(omega, options.draw);
    if constexpr (with_phase) set_phases(phases);
  }

  /// σ of the reference Gaussian kernel.
  double bandwidth() const noexcept { return bandwidth_; }

  /// The phases b (m entries; empty for cos_sin), a read-only view of the map's storage.
  Eigen::Map<const VectorType> phases() const noexcept {
    return Eigen::Map<const VectorType>(phases_.data(), phases_.size());
  }

  /// The phases as the m × 1 matrix the map stores, writable in place (cosine_phase only): the
  /// storage a model's parameter view points to. Call particles_written() after writing.
  MatrixType& phases_storage() noexcept requires(with_phase) { return phases_; }

  /// Replaces the phases; b must be finite with num_particles() entries.
  template <typename DB>
  void set_phases(const Eigen::MatrixBase<DB>& phases) requires(with_phase) {
    const std::string where = this->name_of("set_phases");
    detail::require(
        phases.size() == this->num_particles(), where,
        "argument 'phases' has " + std::to_string(phases.size()) +
            " entries, expected num_particles() = " + std::to_string(this->num_particles()));
    detail::require_finite(phases, where, "phases");
    phases_ = phases.reshaped();
  }

  /// exp(−‖x − y‖²/(2σ²)) between the rows of X and Y.
  template <typename DX, typename DY>
  MatrixType exact_kernel(const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y) const {
    return gaussian_kernel(X, Y, bandwidth_);
  }

 private:
  void set_bandwidth(double bandwidth) {
    detail::require_positive(bandwidth, this->name_of("constructor"), "options.bandwidth");
    bandwidth_ = bandwidth;
  }

  Matrix<double> scaled_draw(Matrix<double> standard) const { return standard / bandwidth_; }

  template <typename G>
  void draw_extra(G& rng) {
    if constexpr (with_phase) {
      Vector<double> b(this->num_particles());
      fill_uniform(b, 0.0, 2.0 * std::numbers::pi, rng);
      phases_ = b.cast<Scalar>();
    }
  }

  template <typename D>
  void map_impl(const Eigen::MatrixBase<D>& X, MatrixType& Phi, Stabilizer,
                VectorType* log_scale) const {
    if (!this->start_map(X, Phi, log_scale)) return;
    const Index m = this->num_particles();
    auto Z = Phi.leftCols(m);
    this->project(X, Z);
    if constexpr (with_phase) {
      const Scalar c = static_cast<Scalar>(std::sqrt(2.0 / static_cast<double>(m)));
      for (Index j = 0; j < m; ++j)
        Phi.col(j).array() = c * (Phi.col(j).array() + phases_(j)).cos();
    } else {
      const Scalar c = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(m)));
      for (Index j = 0; j < m; ++j) {
        Phi.col(m + j).array() = c * Phi.col(j).array().sin();
        Phi.col(j).array() = c * Phi.col(j).array().cos();
      }
    }
  }

  template <typename D>
  void backward_impl(const Eigen::MatrixBase<D>& X, const MatrixType& Phi, const MatrixType& dPhi,
                     MatrixType& dZ) const {
    const Index m = this->num_particles();
    if constexpr (with_phase) {
      // dφ/dz = −√(2/m) sin(z + b): the sine is not recoverable from Φ, so z is recomputed.
      const Scalar c = static_cast<Scalar>(std::sqrt(2.0 / static_cast<double>(m)));
      dZ.resize(X.rows(), m);
      this->project(X, dZ);
      for (Index j = 0; j < m; ++j)
        dZ.col(j).array() = -c * (dZ.col(j).array() + phases_(j)).sin() * dPhi.col(j).array();
    } else {
      // d cos = −sin, d sin = cos, both read from Φ.
      dZ.resize(Phi.rows(), m);
      for (Index j = 0; j < m; ++j)
        dZ.col(j).array() = Phi.col(j).array() * dPhi.col(m + j).array() -
                            Phi.col(m + j).array() * dPhi.col(j).array();
    }
  }

  double bandwidth_ = 1.0;
  MatrixType phases_;  // b as an m × 1 matrix (what a parameter view points to); empty for cos_sin
};

/// RFF pairs (1/√m)[cos Ωx, sin Ωx].
template <typename Scalar>
using RffCosSin = Rff<Scalar, RffForm::cos_sin>;

}  // namespace coulomb
