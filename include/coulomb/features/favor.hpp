// SPDX-License-Identifier: MIT
/// @file features/favor.hpp
/// @brief FAVOR+ positive random features for the softmax kernel exp(xᵀy).
///
/// Choromanski et al., *Rethinking Attention with Performers*, ICLR 2021, Lemma 1:
///   positive (FavorForm::positive):     φ(x) = (1/√m) exp(Ωx − ‖x‖²/2)
///   hyperbolic (FavorForm::hyperbolic): φ(x) = (1/√(2m)) e^{−‖x‖²/2} [e^{Ωx}, e^{−Ωx}]
/// Both give E[φ(x)ᵀφ(y)] = exp(xᵀy) for rows of Ω marginally N(0, I); the hyperbolic form
/// pairs every ω with −ω (antithetic), which lowers the variance. Orthogonal draws with chi
/// norms are the default, as in the paper. The Stabilizer subtracts the largest exponent (per
/// query row or over a key block); the shift cancels exactly in attention.
#pragma once

#include <cmath>

#include <Eigen/Core>

#include "detail_exp.hpp"
#include "draw.hpp"
#include "feature_map.hpp"
#include "kernels.hpp"

namespace coulomb {

/// Which FAVOR+ estimator.
enum class FavorForm {
  positive,   ///< (1/√m) exp(Ωx − ‖x‖²/2), D = m
  hyperbolic  ///< (1/√(2m)) e^{−‖x‖²/2}[e^{Ωx}, e^{−Ωx}], D = 2m
};

/// Construction options of Favor.
struct FavorOptions {
  Draw draw = Draw::orthogonal_chi;  ///< how Ω is drawn (and redrawn)
};

/// FAVOR+ random features estimating the softmax kernel exp(xᵀy) (the family; see the file
/// comment). Satisfies FeatureMap. Its maps are FavorPlus and FavorHyperbolic; name() is
/// that name.
template <typename Scalar, FavorForm Form>
class Favor : public FeatureMapBase<Favor<Scalar, Form>, Scalar> {
  using Base = FeatureMapBase<Favor<Scalar, Form>, Scalar>;
  friend Base;

 public:
  using typename Base::MatrixType;  ///< Matrix<Scalar>
  using typename Base::VectorType;  ///< Vector<Scalar>

  static constexpr bool is_positive = true;             ///< see feature_map_traits
  static constexpr bool has_closed_form_kernel = true;  ///< see feature_map_traits
  static constexpr bool has_phases = false;             ///< see feature_map_traits
  static constexpr bool is_stabilizable = true;         ///< see feature_map_traits
  /// D / m; see feature_map_traits
  static constexpr Index outputs_per_particle = Form == FavorForm::hyperbolic ? 2 : 1;
  static constexpr FavorForm form = Form;  ///< the form chosen by the template argument

  /// The map's name (its alias's), used in error messages.
  static constexpr const char* name() noexcept {
    return Form == FavorForm::hyperbolic ? "FavorHyperbolic" : "FavorPlus";
  }

  /// m particles in dimension d, drawn from `rng`.
  template <std::uniform_random_bit_generator G>
  Favor(Index input_dim, Index num_particles, G& rng, FavorOptions options = {}) {
    this->init_random(input_dim, num_particles, options.draw, rng);
  }

  /// Given particles Ω (m×d).
  template <typename D>
  explicit Favor(const Eigen::MatrixBase<D>& omega, FavorOptions options = {}) {
    this->init_given(omega, options.draw);
  }

  /// exp(xᵀy) between the rows of X and Y.
  template <typename DX, typename DY>
  MatrixType exact_kernel(const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y) const {
    return softmax_kernel(X, Y);
  }

 private:
  static constexpr bool hyperbolic = Form == FavorForm::hyperbolic;

  template <typename D>
  void map_impl(const Eigen::MatrixBase<D>& X, MatrixType& Phi, Stabilizer stabilizer,
                VectorType* log_scale) const {
    detail::exp_features<Scalar>(X, this->packed_omega_transpose(), hyperbolic, stabilizer, Phi,
                                 log_scale);
  }

  template <typename D>
  void backward_impl(const Eigen::MatrixBase<D>&, const MatrixType& Phi, const MatrixType& dPhi,
                     MatrixType& dZ) const {
    detail::exp_features_backward<Scalar>(Phi, dPhi, this->num_particles(), hyperbolic, dZ);
  }

  template <typename D>
  void input_correction(const Eigen::MatrixBase<D>& X, const MatrixType& Phi,
                        const MatrixType& dPhi, MatrixType& dX) const {
    detail::exp_features_norm_correction<Scalar>(X, Phi, dPhi, dX);
  }
};

/// FAVOR+ with positive features exp(Ωx − ‖x‖²/2)/√m.
template <typename Scalar>
using FavorPlus = Favor<Scalar, FavorForm::positive>;

/// FAVOR+ with hyperbolic (antithetic) features.
template <typename Scalar>
using FavorHyperbolic = Favor<Scalar, FavorForm::hyperbolic>;

}  // namespace coulomb
