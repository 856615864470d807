// SPDX-License-Identifier: MIT
/// @file features/softmax_features.hpp
/// @brief softmax-feat: a softmax over the random projections Ωx.
///
///   SoftmaxFeatForm::plain:              φ(x) = softmax(Ωx)                        (D = m)
///   SoftmaxFeatForm::symmetric_joint:    φ(x) = softmax([Ωx, −Ωx])                 (D = 2m)
///   SoftmaxFeatForm::symmetric_separate: φ(x) = [softmax(Ωx), softmax(−Ωx)] / √2   (D = 2m)
/// Each softmax is over the features of one input, so every row sums to 1 (to √2 for the
/// separate form) and its largest entry is at least 1/D: the attention denominator can never
/// vanish. The kernel is defined by its expectation; there is no closed form. The softmax is
/// always computed with its row maximum subtracted, which is exact, so the Stabilizer argument
/// has no effect.
#pragma once

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "../core/exp_kernels.hpp"
#include "draw.hpp"
#include "feature_map.hpp"

namespace coulomb {

/// Which softmax-feature form.
enum class SoftmaxFeatForm {
  plain,              ///< softmax(Ωx)
  symmetric_joint,    ///< one softmax over [Ωx, −Ωx]
  symmetric_separate  ///< [softmax(Ωx), softmax(−Ωx)]/√2
};

/// Construction options of SoftmaxFeat.
struct SoftmaxFeatOptions {
  Draw draw = Draw::orthogonal_chi;  ///< how Ω is drawn (and redrawn)
};

/// Softmax random features (the family; see the file comment). Satisfies FeatureMap. Its maps
/// are SoftmaxFeat (the plain form, the default), SoftmaxFeatJoint and
/// SoftmaxFeatSeparate; name() is that name.
template <typename Scalar, SoftmaxFeatForm Form = SoftmaxFeatForm::plain>
class SoftmaxFeat : public FeatureMapBase<SoftmaxFeat<Scalar, Form>, Scalar> {
  using Base = FeatureMapBase<SoftmaxFeat<Scalar, Form>, Scalar>;
  friend Base;

 public:
  using typename Base::MatrixType;  ///< Matrix<Scalar>
  using typename Base::VectorType;  ///< Vector<Scalar>

  static constexpr bool is_positive = true;              ///< see feature_map_traits
  static constexpr bool has_closed_form_kernel = false;  ///< see feature_map_traits
  static constexpr bool has_phases = false;              ///< see feature_map_traits
  static constexpr bool is_stabilizable = false;         ///< see feature_map_traits
  /// D / m; see feature_map_traits
  static constexpr Index outputs_per_particle = Form == SoftmaxFeatForm::plain ? 1 : 2;
  static constexpr SoftmaxFeatForm form = Form;  ///< the form chosen by the template argument

  /// The map's name (its type's or alias's), used in error messages.
  static constexpr const char* name() noexcept {
    if constexpr (Form == SoftmaxFeatForm::plain)
      return "SoftmaxFeat";
    else if constexpr (Form == SoftmaxFeatForm::symmetric_joint)
      return "SoftmaxFeatJoint";
    else
      return "SoftmaxFeatSeparate";
  }

  /// m particles in dimension d, drawn from `rng`.
  template <std::uniform_random_bit_generator G>
  SoftmaxFeat(Index input_dim, Index num_particles, G& rng, SoftmaxFeatOptions options = {}) {
    this->init_random(input_dim, num_particles, options.draw, rng);
  }

  /// Given particles Ω (m×d).
  template <typename D>
  explicit SoftmaxFeat(const Eigen::MatrixBase<D>& omega, SoftmaxFeatOptions options = {}) {
    this->init_given(omega, options.draw);
  }

 private:
  static constexpr double group_scale() noexcept {
    return Form == SoftmaxFeatForm::symmetric_separate ? 0.70710678118654752440 : 1.0;
  }

  /// Rows [r0, r0 + rows) of columns [begin, begin + count) become
  /// exp(sign·Z(:, j) − row_max), where Z is the projection block in the first m columns
  /// (column j − begin of it), and row_sum their row sums. Reads Z before it writes column
  /// j, so the positive group may overwrite Z in place.
  static void softmax_group(MatrixType& Phi, Index r0, Index rows, Index begin, Index count,
                            Scalar sign, const VectorType& row_max, VectorType& row_sum) {
    row_sum.setZero(rows);
    const auto max = row_max.head(rows).array();
    for (Index j = 0; j < count; ++j) {
      auto out = Phi.col(begin + j).segment(r0, rows).array();
      out = detail::exp_flushed(sign * Phi.col(j).segment(r0, rows).array() - max);
      row_sum += out.matrix();
    }
  }

  /// Rows [r0, r0 + rows) of columns [begin, begin + count) times scale / row_sum, flushed: a
  /// normal exponential divided by the sum (and by √2) can fall below the normal range.
  static void scale_group(MatrixType& Phi, Index r0, Index rows, Index begin, Index count,
                          VectorType& row_sum, Scalar scale) {
    row_sum = scale * row_sum.cwiseInverse();
    for (Index j = begin; j < begin + count; ++j) {
      auto out = Phi.col(j).segment(r0, rows).array();
      out = (out * row_sum.array()).unaryExpr(detail::FlushSubnormal<Scalar>{});
    }
  }

  template <typename D>
  void map_impl(const Eigen::MatrixBase<D>& X, MatrixType& Phi, Stabilizer,
                VectorType* log_scale) const {
    if (!this->start_map(X, Phi, log_scale)) return;
    const Index n = X.rows();
    const Index m = this->num_particles();
    // One GEMM, then every elementwise pass (row max, exp and row sum, normalization) on a
    // block of rows that stays in cache. The negative group of the symmetric forms is written
    // first, from Z, so that the positive group can then replace Z in place.
    this->project(X, Phi.leftCols(m));
    const Index block = detail::exp_block_rows<Scalar>(Phi.cols());
    const Scalar scale = static_cast<Scalar>(group_scale());
    VectorType row_max(block);
    VectorType row_sum(block);
    VectorType row_sum_neg(block);
    for (Index r0 = 0; r0 < n; r0 += block) {
      const Index rows = std::min(block, n - r0);
      if constexpr (Form == SoftmaxFeatForm::plain) {
        detail::block_row_max(Phi, r0, rows, m, false, row_max.head(rows));
        softmax_group(Phi, r0, rows, 0, m, Scalar(1), row_max, row_sum);
        scale_group(Phi, r0, rows, 0, m, row_sum, scale);
      } else if constexpr (Form == SoftmaxFeatForm::symmetric_joint) {
        // One softmax over [z, −z]: its maximum is max_j |z_j|.
        detail::block_row_max(Phi, r0, rows, m, true, row_max.head(rows));
        softmax_group(Phi, r0, rows, m, m, Scalar(-1), row_max, row_sum_neg);
        softmax_group(Phi, r0, rows, 0, m, Scalar(1), row_max, row_sum);
        row_sum += row_sum_neg;
        scale_group(Phi, r0, rows, 0, 2 * m, row_sum, scale);
      } else {
        // Negative group first: max_j (−z_j) = −min_j z_j.
        auto neg_max = row_max.head(rows);
        neg_max = -Phi.col(0).segment(r0, rows);
        for (Index j = 1; j < m; ++j) neg_max = neg_max.cwiseMax(-Phi.col(j).segment(r0, rows));
        softmax_group(Phi, r0, rows, m, m, Scalar(-1), row_max, row_sum_neg);
        scale_group(Phi, r0, rows, m, m, row_sum_neg, scale);
        detail::block_row_max(Phi, r0, rows, m, false, row_max.head(rows));
        softmax_group(Phi, r0, rows, 0, m, Scalar(1), row_max, row_sum);
        scale_group(Phi, r0, rows, 0, m, row_sum, scale);
      }
    }
  }

  /// For one softmax group Φ = scale · softmax(u) over columns [begin, begin + count), with
  /// g = ∂L/∂Φ: ∂L/∂u = scale · s ⊙ (g − ⟨g, s⟩) = Φ ⊙ (g − ⟨g, Φ⟩/scale). This returns the
  /// row vector ⟨g, Φ⟩/scale of the group.
  static void group_dot(const MatrixType& Phi, const MatrixType& dPhi, Index begin, Index count,
                        Scalar scale, VectorType& dot) {
    dot.setZero(Phi.rows());
    for (Index j = begin; j < begin + count; ++j)
      dot.array() += Phi.col(j).array() * dPhi.col(j).array();
    dot /= scale;
  }

  template <typename D>
  void backward_impl(const Eigen::MatrixBase<D>&, const MatrixType& Phi, const MatrixType& dPhi,
                     MatrixType& dZ) const {
    const Index m = this->num_particles();
    const Scalar scale = static_cast<Scalar>(group_scale());
    dZ.resize(Phi.rows(), m);
    VectorType dot;
    if constexpr (Form == SoftmaxFeatForm::plain) {
      group_dot(Phi, dPhi, 0, m, scale, dot);
      for (Index j = 0; j < m; ++j)
        dZ.col(j).array() = Phi.col(j).array() * (dPhi.col(j).array() - dot.array());
    } else {
      // u = [z, −z]: ∂L/∂z_j = ∂L/∂u_j − ∂L/∂u_{m+j}, each from its group's dot product (one
      // group over all 2m columns for the joint form, one per half for the separate form).
      VectorType dot_neg;
      if constexpr (Form == SoftmaxFeatForm::symmetric_joint) {
        group_dot(Phi, dPhi, 0, 2 * m, scale, dot);
      } else {
        group_dot(Phi, dPhi, 0, m, scale, dot);
        group_dot(Phi, dPhi, m, m, scale, dot_neg);
      }
      const VectorType& neg = Form == SoftmaxFeatForm::symmetric_joint ? dot : dot_neg;
      for (Index j = 0; j < m; ++j)
        dZ.col(j).array() = Phi.col(j).array() * (dPhi.col(j).array() - dot.array()) -
                            Phi.col(m + j).array() * (dPhi.col(m + j).array() - neg.array());
    }
  }
};

/// softmax([Ωx, −Ωx]) (one joint softmax).
template <typename Scalar>
using SoftmaxFeatJoint = SoftmaxFeat<Scalar, SoftmaxFeatForm::symmetric_joint>;
/// [softmax(Ωx), softmax(−Ωx)]/√2 (two separate softmaxes).
template <typename Scalar>
using SoftmaxFeatSeparate = SoftmaxFeat<Scalar, SoftmaxFeatForm::symmetric_separate>;

}  // namespace coulomb
