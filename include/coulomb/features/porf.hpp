// SPDX-License-Identifier: MIT
/// @file features/porf.hpp
/// @brief PORF-f: positive orthogonal random features φ(x) = (1/√m) (f(Ωx) + ε) with the
/// activation f a template policy.
///
/// - `Exp`:      f(z) = exp(z − ‖x‖²/2), an unbiased estimator of the softmax kernel exp(xᵀy)
///               (the positive-feature estimator of Choromanski et al., 2021); honours the
///               Stabilizer. ε is not used.
/// - `Softplus`: f(z) = log(1 + e^z), computed without overflow; the kernel is defined by its
///               expectation (no closed form).
/// - `Relu`:     f(z) = max(z, 0); E[φ(x)ᵀφ(y)] is the arc-cosine kernel of order 1 plus the ε
///               terms: k(x, y) + ε (‖x‖ + ‖y‖)/√(2π) + ε². A row of relu features is all zero
///               when x lies in the negative cone of Ω (for example x = 0); ε > 0 (Performer's
///               `kernel_epsilon`) keeps every entry positive.
/// Orthogonal draws with chi norms are the default.
#pragma once

#include <cmath>
#include <numbers>
#include <string>

#include <Eigen/Core>

#include "detail_exp.hpp"
#include "draw.hpp"
#include "feature_map.hpp"
#include "kernels.hpp"

namespace coulomb {

/// Activation policy: exponential with the −‖x‖²/2 correction (softmax kernel).
struct Exp {
  static constexpr const char* name = "exp";  ///< name of the activation
};
/// Activation policy: softplus log(1 + e^z).
struct Softplus {
  static constexpr const char* name = "softplus";  ///< name of the activation
};
/// Activation policy: ReLU max(z, 0).
struct Relu {
  static constexpr const char* name = "relu";  ///< name of the activation
};

/// Construction options of Porf.
struct PorfOptions {
  Draw draw = Draw::orthogonal_chi;  ///< how Ω is drawn (and redrawn)
  double epsilon = 0.0;              ///< additive floor ε >= 0 (softplus and relu only)
};

/// Positive orthogonal random features with activation `Activation` ∈ {Exp, Softplus, Relu}
/// (the family; see the file comment). Its maps are PorfExp, PorfSoftplus and
/// PorfRelu; name() is that name.
template <typename Scalar, typename Activation>
class Porf : public FeatureMapBase<Porf<Scalar, Activation>, Scalar> {
  using Base = FeatureMapBase<Porf<Scalar, Activation>, Scalar>;
  friend Base;
  static constexpr bool is_exp = std::is_same_v<Activation, Exp>;
  static_assert(is_exp || std::is_same_v<Activation, Softplus> || std::is_same_v<Activation, Relu>,
                "Porf: Activation must be coulomb::Exp, coulomb::Softplus or coulomb::Relu");

 public:
  using typename Base::MatrixType;     ///< Matrix<Scalar>
  using typename Base::VectorType;     ///< Vector<Scalar>
  using activation_type = Activation;  ///< the activation policy (Exp, Softplus or Relu)

  static constexpr bool is_positive = true;  ///< see feature_map_traits
  static constexpr bool has_closed_form_kernel =
      !std::is_same_v<Activation, Softplus>;       ///< see feature_map_traits
  static constexpr bool has_phases = false;        ///< see feature_map_traits
  static constexpr bool is_stabilizable = is_exp;  ///< see feature_map_traits
  /// D / m; see feature_map_traits
  static constexpr Index outputs_per_particle = 1;

  /// The map's name (its alias's), used in error messages.
  static constexpr const char* name() noexcept {
    if constexpr (is_exp)
      return "PorfExp";
    else if constexpr (std::is_same_v<Activation, Softplus>)
      return "PorfSoftplus";
    else
      return "PorfRelu";
  }

  /// m particles in dimension d, drawn from `rng`.
  template <std::uniform_random_bit_generator G>
  Porf(Index input_dim, Index num_particles, G& rng, PorfOptions options = {}) {
    set_epsilon(options.epsilon);
    this->init_random(input_dim, num_particles, options.draw, rng);
  }

  /// Given particles Ω (m×d).
  template <typename D>
  explicit Porf(const Eigen::MatrixBase<D>& omega, PorfOptions options = {}) {
    set_epsilon(options.epsilon);
    this->init_given(omega, options.draw);
  }

  /// The additive floor ε.
  double epsilon() const noexcept { return epsilon_; }

  /// E[φ(x)ᵀφ(y)] between the rows of X and Y (Exp and Relu only).
  template <typename DX, typename DY>
  MatrixType exact_kernel(const Eigen::MatrixBase<DX>& X, const Eigen::MatrixBase<DY>& Y) const
      requires(has_closed_form_kernel) {
    if constexpr (is_exp) {
      return softmax_kernel(X, Y);
    } else {
      MatrixType k = arccos1_kernel(X, Y);
      if (epsilon_ > 0.0) {
        const Scalar eps = static_cast<Scalar>(epsilon_);
        const Scalar mean_factor =
            static_cast<Scalar>(epsilon_ / std::sqrt(2.0 * std::numbers::pi));
        k.colwise() += mean_factor * X.rowwise().norm();
        k.rowwise() += mean_factor * Y.rowwise().norm().transpose();
        k.array() += eps * eps;
      }
      return k;
    }
  }

 private:
  void set_epsilon(double epsilon) {
    detail::require(
        std::isfinite(epsilon) && epsilon >= 0.0, this->name_of("constructor"),
        "argument 'options.epsilon' must be finite and >= 0, got " + std::to_string(epsilon));
    detail::require(!is_exp || epsilon == 0.0, this->name_of("constructor"),
                    "argument 'options.epsilon' must be 0 for the exp activation");
    epsilon_ = epsilon;
  }

  template <typename D>
  void map_impl(const Eigen::MatrixBase<D>& X, MatrixType& Phi, Stabilizer stabilizer,
                VectorType* log_scale) const {
    if constexpr (is_exp) {
      detail::exp_features<Scalar>(X, this->packed_omega_transpose(), false, stabilizer, Phi,
                                   log_scale);
    } else {
      if (!this->start_map(X, Phi, log_scale)) return;
      const Index m = this->num_particles();
      this->project(X, Phi);
      const Scalar c = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(m)));
      const Scalar floor = static_cast<Scalar>(epsilon_);
      for (Index j = 0; j < m; ++j) {
        auto z = Phi.col(j).array();
        if constexpr (std::is_same_v<Activation, Softplus>) {
          // log(1 + e^z) = max(z, 0) + log1p(e^{−|z|}): no overflow for large |z|.
          z = c * (z.max(Scalar(0)) + (-z.abs()).exp().log1p() + floor);
        } else {
          z = c * (z.max(Scalar(0)) + floor);
        }
      }
    }
  }

  template <typename D>
  void backward_impl(const Eigen::MatrixBase<D>&, const MatrixType& Phi, const MatrixType& dPhi,
                     MatrixType& dZ) const {
    if constexpr (is_exp) {
      detail::exp_features_backward<Scalar>(Phi, dPhi, this->num_particles(), false, dZ);
    } else {
      const Index m = this->num_particles();
      const Scalar c = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(m)));
      [[maybe_unused]] const Scalar inv_c = Scalar(1) / c;
      const Scalar floor = static_cast<Scalar>(epsilon_);
      dZ.resize(Phi.rows(), m);
      for (Index j = 0; j < m; ++j) {
        if constexpr (std::is_same_v<Activation, Softplus>) {
          // f'(z) = sigmoid(z) = 1 − e^{−softplus(z)}, accurate for both signs of z, with
          // softplus(z) = Φ/c − ε recovered from the forward output.
          const auto f = Phi.col(j).array() * inv_c - floor;
          dZ.col(j).array() = c * dPhi.col(j).array() * (-(-f).expm1());
        } else {
          // relu′(z) = 1 for z > 0. The forward writes exactly c·(0 + ε) = c·ε for z <= 0, so
          // comparing Φ with that same product is exact (f recovered from Φ is not).
          dZ.col(j).array() =
              (Phi.col(j).array() > c * floor).select(c * dPhi.col(j).array(), Scalar(0));
        }
      }
    }
  }

  template <typename D>
  void input_correction(const Eigen::MatrixBase<D>& X, const MatrixType& Phi,
                        const MatrixType& dPhi, MatrixType& dX) const {
    if constexpr (is_exp) detail::exp_features_norm_correction<Scalar>(X, Phi, dPhi, dX);
  }

  double epsilon_ = 0.0;
};

/// PORF with the exponential activation (softmax kernel).
template <typename Scalar>
using PorfExp = Porf<Scalar, Exp>;
/// PORF with the softplus activation.
template <typename Scalar>
using PorfSoftplus = Porf<Scalar, Softplus>;
/// PORF with the ReLU activation (arc-cosine kernel of order 1).
template <typename Scalar>
using PorfRelu = Porf<Scalar, Relu>;

}  // namespace coulomb
