// SPDX-License-Identifier: MIT
/// @file particles/hamiltonian.hpp
/// @brief The particle Hamiltonian H_N(Ω) = E(Ω) + λ·W_{N,s}(Ω): kernel-target alignment
/// (attraction towards the labels) plus Riesz repulsion (Badiei Khuzani et al., 2026, §2).
///
/// A composable objective: any alignment-like term with `evaluate_with_gradient` (and the
/// minibatch overload, `num_samples()`, `shuffle(rng)`) plus a RieszEnergy. Without repulsion
/// (λ = 0) every particle drifts to the same best frequency; the Riesz term keeps them apart.
///
/// λ in scale-free units (balanced_repulsion_weight): λ = λ_rel ‖∇E(Ω₀)‖_F / ‖∇W(Ω₀)‖_F, so that
/// λ_rel = 1 makes both forces equally strong at the start whatever the data's scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "riesz.hpp"

namespace coulomb {

/// The two terms of the last evaluation, for logging.
struct HamiltonianTerms {
  double alignment = 0.0;  ///< E(Ω)
  double repulsion = 0.0;  ///< W_{N,s}(Ω) (before the factor λ)
  double total = 0.0;      ///< E + λ W
};

/// λ = relative · ‖∇E(Ω)‖_F / ‖∇W(Ω)‖_F on all samples: the repulsion weight at which the two
/// forces are `relative` times as strong as each other at Ω (the gradients compared on the
/// columns the repulsion acts on). Throws invalid_argument unless relative ≥ 0 is finite.
template <typename Alignment, typename D>
double balanced_repulsion_weight(Alignment& alignment, const RieszOptions& riesz,
                                 const Eigen::MatrixBase<D>& omega, double relative = 1.0) {
  detail::require(std::isfinite(relative) && relative >= 0.0, "coulomb::balanced_repulsion_weight",
                  "argument 'relative' must be finite and >= 0, got " + std::to_string(relative));
  using Scalar = typename Alignment::Scalar;
  Matrix<Scalar> g_align, g_riesz;
  alignment.evaluate_with_gradient(omega, g_align);
  RieszEnergy<Scalar>(riesz).evaluate_with_gradient(omega, g_riesz);
  const Index cols = riesz.columns > 0 ? std::min(riesz.columns, g_align.cols()) : g_align.cols();
  const double a = static_cast<double>(g_align.leftCols(cols).norm());
  const double w = static_cast<double>(g_riesz.leftCols(cols).norm());
  return relative * a / std::max(w, std::numeric_limits<double>::min());
}

/// H = alignment + λ · Riesz.
template <typename Alignment>
class Hamiltonian {
 public:
  using Scalar = typename Alignment::Scalar;  ///< the alignment's scalar type
  using MatrixType = Matrix<Scalar>;          ///< particles and gradients

  /// `alignment` is referenced, not copied: it must outlive the Hamiltonian.
  Hamiltonian(Alignment& alignment, double lambda, RieszOptions riesz = {})
      : alignment_(&alignment), riesz_(riesz), lambda_(lambda) {
    detail::require(std::isfinite(lambda) && lambda >= 0.0, "coulomb::Hamiltonian",
                    "argument 'lambda' must be finite and >= 0, got " + std::to_string(lambda));
  }

  /// λ, the weight of the repulsion.
  double lambda() const noexcept { return lambda_; }
  /// The repulsion term W_{N,s}.
  const RieszEnergy<Scalar>& repulsion() const noexcept { return riesz_; }
  /// The alignment term (the object given to the constructor).
  Alignment& alignment() noexcept { return *alignment_; }
  /// The terms of the last evaluation.
  const HamiltonianTerms& terms() const noexcept { return terms_; }
  /// Number n of samples of the alignment term.
  Index num_samples() const { return alignment_->num_samples(); }

  /// Draws a new minibatch order of the alignment term (see AlignmentEnergy::shuffle).
  template <std::uniform_random_bit_generator G>
  void shuffle(G& rng) {
    alignment_->shuffle(rng);
  }

  /// Whether H is a sum of one-particle energies: no repulsion (λ = 0) and an alignment term
  /// that is one (AlignmentEnergy of Rff or RffCosSin). TiltedLangevin's exact moves need it.
  bool separable() const {
    if constexpr (requires { Alignment::separable(); })
      return lambda_ == 0.0 && Alignment::separable();
    else
      return false;
  }

  /// The one-particle energies of the alignment term; throws invalid_argument unless separable().
  template <typename D>
  requires requires(Alignment& a, const Eigen::MatrixBase<D>& o, Vector<Scalar>& e) {
    a.particle_energies(o, e);
  }
  void particle_energies(const Eigen::MatrixBase<D>& omega, Vector<Scalar>& energies) {
    require_separable("particle_energies");
    alignment_->particle_energies(omega, energies);
  }

  /// H, its one-particle energies and ∂H/∂Ω on all samples; throws invalid_argument unless
  /// separable().
  template <typename D>
  requires requires(Alignment& a, const Eigen::MatrixBase<D>& o, Vector<Scalar>& e, MatrixType& g) {
    a.evaluate_particles(o, e, g);
  }
  Scalar evaluate_particles(const Eigen::MatrixBase<D>& omega, Vector<Scalar>& energies,
                            MatrixType& gradient) {
    require_separable("evaluate_particles");
    terms_.alignment =
        static_cast<double>(alignment_->evaluate_particles(omega, energies, gradient));
    terms_.repulsion = 0.0;
    return finish();
  }

  /// H(Ω) on all samples.
  template <typename D>
  Scalar evaluate(const Eigen::MatrixBase<D>& omega) {
    terms_.alignment = static_cast<double>(alignment_->evaluate(omega));
    terms_.repulsion = lambda_ > 0.0 ? static_cast<double>(riesz_.evaluate(omega)) : 0.0;
    return finish();
  }

  /// H(Ω) and ∂H/∂Ω on all samples.
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>& omega, MatrixType& gradient) {
    terms_.alignment = static_cast<double>(alignment_->evaluate_with_gradient(omega, gradient));
    add_repulsion(omega, gradient);
    return finish();
  }

  /// H and ∂H/∂Ω with the alignment on a minibatch (the repulsion needs no data).
  template <typename D>
  Scalar evaluate_with_gradient(const Eigen::MatrixBase<D>& omega, Index begin, Index size,
                                MatrixType& gradient) {
    terms_.alignment =
        static_cast<double>(alignment_->evaluate_with_gradient(omega, begin, size, gradient));
    add_repulsion(omega, gradient);
    return finish();
  }

 private:
  void require_separable(const char* what) const {
    detail::require(separable(), (std::string("coulomb::Hamiltonian::") + what).c_str(),
                    "H is not a sum of one-particle energies (the repulsion couples the "
                    "particles: lambda = " +
                        std::to_string(lambda_) + ")");
  }

  template <typename D>
  void add_repulsion(const Eigen::MatrixBase<D>& omega, MatrixType& gradient) {
    if (lambda_ == 0.0) {
      terms_.repulsion = 0.0;
      return;
    }
    terms_.repulsion = static_cast<double>(riesz_.evaluate_with_gradient(omega, repulsion_grad_));
    gradient += static_cast<Scalar>(lambda_) * repulsion_grad_;
  }

  Scalar finish() {
    terms_.total = terms_.alignment + lambda_ * terms_.repulsion;
    return static_cast<Scalar>(terms_.total);
  }

  Alignment* alignment_;
  RieszEnergy<Scalar> riesz_;
  double lambda_;
  HamiltonianTerms terms_;
  MatrixType repulsion_grad_;
};

}  // namespace coulomb
