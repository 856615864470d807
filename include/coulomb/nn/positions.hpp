// SPDX-License-Identifier: MIT
/// @file nn/positions.hpp
/// @brief Positions without parameters for sequences of any length: sinusoidal encodings added
/// to the embeddings, and rotary positions applied to queries and keys. Documented in
/// docs/model.md ("Positions"); the learned table is PositionEmbedding (nn/embedding.hpp).
///
/// Sinusoidal (Vaswani et al., *Attention Is All You Need*, NeurIPS 2017, §3.5): with
/// ω_i = base^{−2i/d},
///   PE(t, 2i) = sin(t·ω_i),  PE(t, 2i + 1) = cos(t·ω_i),  x_{b·L+t} += PE(t).
/// Rotary (Su et al., *RoFormer: Enhanced Transformer with Rotary Position Embedding*, 2021,
/// eq. 34): within each head of width d_h, the pair of columns (i, i + d_h/2) of query and key
/// t is rotated by the angle t·θ_i, θ_i = base^{−2i/d_h}, i < d_h/2 (the "half" pairing of
/// GPT-NeoX, which keeps whole columns together):
///   x'_i = x_i cos tθ_i − x_{i+d_h/2} sin tθ_i,  x'_{i+d_h/2} = x_i sin tθ_i + x_{i+d_h/2} cos
///   tθ_i.
/// Then (R_t q)ᵀ(R_u k) = qᵀR_{u−t}k depends on the offset only, and so does any kernel that
/// is invariant under rotations (exp(qᵀk) and every map drawn from an isotropic distribution).
/// The backward is the transpose, R_tᵀ = R_{−t}.
///
/// The angles t·ω_i are computed in double and rounded once to the scalar type: in float, t·θ
/// at t = 4096 would carry an error of about 4096·2⁻²⁴ ≈ 2.4e-4 rad. The decoding step
/// computes the angle of one position with the same operations as the tables, so it gets the
/// same numbers.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "detail_layer_types.hpp"

namespace coulomb::nn {

/// How a model encodes positions.
enum class PositionKind {
  learned,     ///< a trained table of max_length rows added to the embeddings (PositionEmbedding)
  sinusoidal,  ///< fixed sinusoids added to the embeddings (SinusoidalPositions)
  rotary       ///< queries and keys rotated by their position in every layer (RotaryPositions)
};

/// Name of a PositionKind value ("learned", "sinusoidal" or "rotary").
inline const char* to_string(PositionKind kind) noexcept {
  switch (kind) {
    case PositionKind::learned:
      return "learned";
    case PositionKind::sinusoidal:
      return "sinusoidal";
    case PositionKind::rotary:
      return "rotary";
  }
  return "unknown";
}

}  // namespace coulomb::nn

namespace coulomb::detail {

/// The frequencies base^{−2i/dim}, i = 0 … count − 1, in double.
inline std::vector<double> position_frequencies(Index count, Index dim, double base) {
  std::vector<double> freq(static_cast<std::size_t>(count));
  for (Index i = 0; i < count; ++i)
    freq[static_cast<std::size_t>(i)] =
        std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
  return freq;
}

/// Checks a base of positions (> 1 and finite).
inline void require_position_base(double base, const char* where) {
  if (!(std::isfinite(base) && base > 1.0))
    throw_invalid(where,
                  "argument 'base' must be finite and greater than 1, got " + std::to_string(base));
}

/// Checks a position: 0 <= position.
inline void require_position(Index position, const char* where) {
  if (!(position >= 0))
    throw_invalid(where, "argument 'position' must be >= 0, got " + std::to_string(position));
}

}  // namespace coulomb::detail

namespace coulomb::nn {

/// Sinusoidal position encodings of width `dim` (see the file comment): no parameters, any
/// length. The rows computed so far are cached.
template <RealScalar Scalar>
class SinusoidalPositions : public detail::LayerTypes<Scalar> {
 public:
  /// No encodings (dim() = 0); assign a sized one before use.
  SinusoidalPositions() = default;

  /// Encodings of width `dim` with ω_i = base^{−2i/dim}. Throws invalid_argument for dim < 1 or
  /// a base that is not finite and above 1.
  explicit SinusoidalPositions(Index dim, double base = 10000.0) : dim_(dim), base_(base) {
    const char* where = "coulomb::nn::SinusoidalPositions::constructor";
    if (!(dim >= 1))
      detail::throw_invalid(where, "argument 'dim' must be at least 1, got " + std::to_string(dim));
    detail::require_position_base(base, where);
    freq_ = detail::position_frequencies((dim + 1) / 2, dim, base);
  }

  /// Width of the encodings.
  Index dim() const noexcept { return dim_; }
  /// The base of the frequencies.
  double base() const noexcept { return base_; }

  /// PE(t, j), rounded from double.
  Scalar value(Index t, Index j) const {
    const double angle = static_cast<double>(t) * freq_[static_cast<std::size_t>(j / 2)];
    return static_cast<Scalar>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
  }

  /// X.row(b·L + t) += PE(t) for `batch` sequences of length `length`; X must be
  /// (batch·length) × dim().
  void forward_add(Index length, Index batch, Matrix<Scalar>& X) {
    const char* where = "coulomb::nn::SinusoidalPositions::forward_add";
    detail::require_shape(X, length * batch, dim_, where, "X");
    extend(length);
    for (Index b = 0; b < batch; ++b) X.middleRows(b * length, length) += table_.topRows(length);
  }

  /// Every row of X += PE(position) (one decoding step); X must have dim() columns.
  void add_at(Index position, Matrix<Scalar>& X) const {
    const char* where = "coulomb::nn::SinusoidalPositions::add_at";
    detail::require_position(position, where);
    detail::require_cols(X, dim_, where, "X");
    for (Index j = 0; j < dim_; ++j) X.col(j).array() += value(position, j);
  }

 private:
  void extend(Index length) {
    const Index have = table_.rows();
    if (length <= have) return;
    table_.conservativeResize(length, dim_);
    for (Index j = 0; j < dim_; ++j)
      for (Index t = have; t < length; ++t) table_(t, j) = value(t, j);
  }

  Index dim_ = 0;
  double base_ = 10000.0;
  std::vector<double> freq_;
  Matrix<Scalar> table_;  // PE(t, j) for the rows computed so far
};

/// Rotary positions for queries and keys of `num_heads` heads of width `head_dim` (see the
/// file comment): no parameters, any length. The angles computed so far are cached.
template <RealScalar Scalar>
class RotaryPositions : public detail::LayerTypes<Scalar> {
 public:
  /// No rotation (head_dim() = 0); rotate() and rotate_back() then do nothing.
  RotaryPositions() = default;

  /// Rotations of heads of width `head_dim` (even, at least 2) with θ_i = base^{−2i/head_dim}.
  /// Throws invalid_argument for an odd or non-positive head_dim, or a base that is not finite
  /// and above 1.
  explicit RotaryPositions(Index head_dim, double base = 10000.0)
      : head_dim_(head_dim), base_(base) {
    const char* where = "coulomb::nn::RotaryPositions::constructor";
    if (!(head_dim >= 2 && head_dim % 2 == 0))
      detail::throw_invalid(where,
                            "argument 'head_dim' must be even and at least 2 (rotary "
                            "positions rotate pairs of columns), got " +
                                std::to_string(head_dim));
    detail::require_position_base(base, where);
    freq_ = detail::position_frequencies(head_dim / 2, head_dim, base);
  }

  /// Whether this rotates anything (head_dim() > 0).
  bool enabled() const noexcept { return head_dim_ > 0; }
  /// Width of a head (0 when disabled).
  Index head_dim() const noexcept { return head_dim_; }
  /// The base of the frequencies.
  double base() const noexcept { return base_; }

  /// cos(t·θ_i) and sin(t·θ_i), rounded from double.
  Scalar cos_at(Index t, Index i) const {
    return static_cast<Scalar>(
        std::cos(static_cast<double>(t) * freq_[static_cast<std::size_t>(i)]));
  }
  /// sin(t·θ_i), rounded from double.
  Scalar sin_at(Index t, Index i) const {
    return static_cast<Scalar>(
        std::sin(static_cast<double>(t) * freq_[static_cast<std::size_t>(i)]));
  }

  /// X ← R X: row b·L + t of X ((B·L) × (H·head_dim)) rotated by position t, every head.
  /// Throws invalid_argument for columns that are not a multiple of head_dim() or rows that are
  /// not a multiple of `length`.
  void rotate(Matrix<Scalar>& X, Index length) { apply<false>(X, length); }

  /// X ← Rᵀ X, the backward of rotate: given ∂L/∂(R x), gives ∂L/∂x.
  void rotate_back(Matrix<Scalar>& X, Index length) { apply<true>(X, length); }

  /// Every row of X (B × (H·head_dim)) rotated by one position (a decoding step).
  void rotate_at(Matrix<Scalar>& X, Index position) const {
    const char* where = "coulomb::nn::RotaryPositions::rotate_at";
    if (!enabled()) return;
    detail::require_position(position, where);
    check_cols(X, where);
    const Index half = head_dim_ / 2;
    for (Index h = 0; h < X.cols() / head_dim_; ++h) {
      for (Index i = 0; i < half; ++i) {
        const Scalar c = cos_at(position, i);
        const Scalar s = sin_at(position, i);
        auto x1 = X.col(h * head_dim_ + i).array();
        auto x2 = X.col(h * head_dim_ + half + i).array();
        for (Index r = 0; r < X.rows(); ++r) {
          const Scalar a = x1(r);
          const Scalar b = x2(r);
          x1(r) = a * c - b * s;
          x2(r) = a * s + b * c;
        }
      }
    }
  }

 private:
  void check_cols(const Matrix<Scalar>& X, const char* where) const {
    if (!(X.cols() % head_dim_ == 0))
      detail::throw_invalid(
          where, "argument 'X' has " + std::to_string(X.cols()) +
                     " columns, not a multiple of head_dim = " + std::to_string(head_dim_));
  }

  template <bool Inverse>
  void apply(Matrix<Scalar>& X, Index length) {
    const char* where = Inverse ? "coulomb::nn::RotaryPositions::rotate_back"
                                : "coulomb::nn::RotaryPositions::rotate";
    if (!enabled()) return;
    check_cols(X, where);
    if (!(length >= 1 && X.rows() % length == 0))
      detail::throw_invalid(where,
                            "argument 'X' has " + std::to_string(X.rows()) +
                                " rows, not a multiple of length = " + std::to_string(length));
    extend(length);
    const Index half = head_dim_ / 2;
    const Index batch = X.rows() / length;
    for (Index h = 0; h < X.cols() / head_dim_; ++h) {
      for (Index i = 0; i < half; ++i) {
        const auto c = cos_.col(i).head(length).array();
        const auto s = sin_.col(i).head(length).array();
        for (Index b = 0; b < batch; ++b) {
          auto x1 = X.col(h * head_dim_ + i).segment(b * length, length).array();
          auto x2 = X.col(h * head_dim_ + half + i).segment(b * length, length).array();
          for (Index t = 0; t < length; ++t) {
            const Scalar a = x1(t);
            const Scalar e = x2(t);
            if constexpr (Inverse) {
              x1(t) = a * c(t) + e * s(t);
              x2(t) = e * c(t) - a * s(t);
            } else {
              x1(t) = a * c(t) - e * s(t);
              x2(t) = a * s(t) + e * c(t);
            }
          }
        }
      }
    }
  }

  void extend(Index length) {
    const Index have = cos_.rows();
    if (length <= have) return;
    const Index half = head_dim_ / 2;
    cos_.conservativeResize(length, half);
    sin_.conservativeResize(length, half);
    for (Index i = 0; i < half; ++i) {
      for (Index t = have; t < length; ++t) {
        cos_(t, i) = cos_at(t, i);
        sin_(t, i) = sin_at(t, i);
      }
    }
  }

  Index head_dim_ = 0;
  double base_ = 10000.0;
  std::vector<double> freq_;
  Matrix<Scalar> cos_, sin_;  // cos(tθ_i), sin(tθ_i) for the positions computed so far (t × d_h/2)
};

}  // namespace coulomb::nn
