// SPDX-License-Identifier: MIT
/// @file features/softmax_features.hpp
/// @brief softmax-feat: a softmax over the random projections Ωx.
///
///   SoftmaxForm::plain:              φ(x) = softmax(Ωx)                        (D = m)
///   SoftmaxForm::symmetric_joint:    φ(x) = softmax([Ωx, −Ωx])                 (D = 2m)
///   SoftmaxForm::symmetric_separate: φ(x) = [softmax(Ωx), softmax(−Ωx)] / √2   (D = 2m)
/// Each softmax is over the features of one input, so every row sums to 1 (to √2 for the
/// separate form) and its largest entry is at least 1/D: the attention denominator can never
/// vanish. The kernel is defined by its expectation; there is no closed form. The softmax is
/// always computed with its row maximum subtracted, which is exact, so the Stabilizer argument
/// has no effect.
#pragma once

#include <cmath>

#include <Eigen/Core>

#include "draw.hpp"
#include "feature_map.hpp"

namespace coulomb {

/// Which softmax-feature form.
enum class SoftmaxForm {
  plain,              ///< softmax(Ωx)
  symmetric_joint,    ///< one softmax over [Ωx, −Ωx]
  symmetric_separate  ///< [softmax(Ωx), softmax(−Ωx)]/√2
};

/// Construction options of SoftmaxFeatures.
struct SoftmaxFeatureOptions {
  Draw draw = Draw::orthogonal_chi;  ///< how Ω is drawn (and redrawn)
};

/// Softmax random features. Satisfies FeatureMap.
template <typename ScalarT, SoftmaxForm Form = SoftmaxForm::plain>
class SoftmaxFeatures : public FeatureMapBase<SoftmaxFeatures<ScalarT, Form>, ScalarT> {
  using Base = FeatureMapBase<SoftmaxFeatures<ScalarT, Form>, ScalarT>;
  friend Base;

 public:
  using typename Base::MatrixType;
  using typename Base::Scalar;
  using typename Base::VectorType;

  static constexpr bool is_positive = true;
  static constexpr bool has_closed_form_kernel = false;
  static constexpr bool has_phases = false;
  static constexpr bool is_stabilizable = false;
  static constexpr Index outputs_per_particle = Form == SoftmaxForm::plain ? 1 : 2;
  static constexpr SoftmaxForm form = Form;

  static constexpr const char* name() noexcept {
    if constexpr (Form == SoftmaxForm::plain)
      return "SoftmaxFeatures";
    else if constexpr (Form == SoftmaxForm::symmetric_joint)
      return "SoftmaxFeaturesJoint";
    else
      return "SoftmaxFeaturesSeparate";
  }

  /// m particles in dimension d, drawn from `rng`.
  template <std::uniform_random_bit_generator G>
  SoftmaxFeatures(Index input_dim, Index num_particles, G& rng,
                  SoftmaxFeatureOptions options = {}) {
    this->init_random(input_dim, num_particles, options.draw, rng);
  }

  /// Given particles Ω (m×d).
  template <typename D>
  explicit SoftmaxFeatures(const Eigen::MatrixBase<D>& omega, SoftmaxFeatureOptions options = {}) {
    this->init_given(omega, options.draw);
  }

 private:
  static constexpr double group_scale() noexcept {
    return Form == SoftmaxForm::symmetric_separate ? 0.70710678118654752440 : 1.0;
  }

  /// In place: columns [begin, begin + count) of Phi hold exponents; replace them by
  /// scale · softmax of each row over those columns, given the row maxima.
  static void softmax_columns(MatrixType& Phi, Index begin, Index count, const VectorType& row_max,
                              VectorType& row_sum, Scalar scale) {
    row_sum.setZero(Phi.rows());
    for (Index j = begin; j < begin + count; ++j) {
      Phi.col(j).array() = (Phi.col(j).array() - row_max.array()).exp();
      row_sum += Phi.col(j);
    }
    row_sum = scale * row_sum.cwiseInverse();
    for (Index j = begin; j < begin + count; ++j) Phi.col(j).array() *= row_sum.array();
  }

  template <typename D>
  void map_impl(const Eigen::MatrixBase<D>& X, MatrixType& Phi, Stabilizer,
                VectorType* log_scale) const {
    const Index n = X.rows();
    const Index m = this->num_particles();
    Phi.resize(n, this->output_dim());
    if (log_scale) log_scale->setZero(n);
    if (n == 0) return;
    Phi.leftCols(m).noalias() = X * this->omega_.transpose();
    VectorType row_max;
    VectorType row_sum;
    const Scalar scale = static_cast<Scalar>(group_scale());
    if constexpr (Form == SoftmaxForm::plain) {
      detail::rowwise_max<Scalar>(Phi.leftCols(m), row_max);
      softmax_columns(Phi, 0, m, row_max, row_sum, scale);
    } else {
      for (Index j = 0; j < m; ++j) Phi.col(m + j) = -Phi.col(j);
      if constexpr (Form == SoftmaxForm::symmetric_joint) {
        detail::rowwise_max<Scalar>(Phi.leftCols(m).cwiseAbs(), row_max);
        softmax_columns(Phi, 0, 2 * m, row_max, row_sum, scale);
      } else {
        detail::rowwise_max<Scalar>(Phi.leftCols(m), row_max);
        softmax_columns(Phi, 0, m, row_max, row_sum, scale);
        detail::rowwise_max<Scalar>(Phi.rightCols(m), row_max);
        softmax_columns(Phi, m, m, row_max, row_sum, scale);
      }
    }
  }

  /// For one softmax group Φ = scale · softmax(u) over columns [begin, begin + count), with
  /// g = ∂L/∂Φ: ∂L/∂u = scale · s ⊙ (g − ⟨g, s⟩) = Φ ⊙ (g − ⟨g, Φ⟩/scale).
  static void softmax_group_backward(const MatrixType& Phi, const MatrixType& dPhi, Index begin,
                                     Index count, Scalar scale, VectorType& dot, MatrixType& dU) {
    dot.setZero(Phi.rows());
    for (Index j = begin; j < begin + count; ++j)
      dot.array() += Phi.col(j).array() * dPhi.col(j).array();
    dot /= scale;
    for (Index j = begin; j < begin + count; ++j)
      dU.col(j).array() = Phi.col(j).array() * (dPhi.col(j).array() - dot.array());
  }

  template <typename D>
  void backward_impl(const Eigen::MatrixBase<D>&, const MatrixType& Phi, const MatrixType& dPhi,
                     MatrixType& dZ) const {
    const Index m = this->num_particles();
    const Scalar scale = static_cast<Scalar>(group_scale());
    VectorType dot;
    if constexpr (Form == SoftmaxForm::plain) {
      dZ.resize(Phi.rows(), m);
      softmax_group_backward(Phi, dPhi, 0, m, scale, dot, dZ);
    } else {
      // u = [z, −z]: ∂L/∂z = ∂L/∂u_left − ∂L/∂u_right.
      MatrixType dU(Phi.rows(), 2 * m);
      if constexpr (Form == SoftmaxForm::symmetric_joint) {
        softmax_group_backward(Phi, dPhi, 0, 2 * m, scale, dot, dU);
      } else {
        softmax_group_backward(Phi, dPhi, 0, m, scale, dot, dU);
        softmax_group_backward(Phi, dPhi, m, m, scale, dot, dU);
      }
      dZ = dU.leftCols(m) - dU.rightCols(m);
    }
  }
};

/// softmax(Ωx).
template <typename Scalar>
using SoftmaxFeat = SoftmaxFeatures<Scalar, SoftmaxForm::plain>;
/// softmax([Ωx, −Ωx]) (one joint softmax).
template <typename Scalar>
using SoftmaxFeatJoint = SoftmaxFeatures<Scalar, SoftmaxForm::symmetric_joint>;
/// [softmax(Ωx), softmax(−Ωx)]/√2 (two separate softmaxes).
template <typename Scalar>
using SoftmaxFeatSeparate = SoftmaxFeatures<Scalar, SoftmaxForm::symmetric_separate>;

}  // namespace coulomb
