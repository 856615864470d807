// SPDX-License-Identifier: MIT
/// @file nn/pooling.hpp
/// @brief Masked mean pooling over the positions of each sequence, and the pair pooling of
/// sentence pairs (one masked mean per segment, compared), with their backwards. Documented in
/// docs/model.md.
///
/// For B sequences of length L stored as (B·L) × d rows (row b·L + t is position t of
/// sequence b) and a padding mask M (L × B, true at tokens):
///   p_b = (1/n_b) Σ_{t : M(t,b)} x_{b·L+t},  n_b = Σ_t M(t, b),
/// so padding never enters the result. A sequence without any token (n_b = 0) pools to the
/// zero vector, and its rows get zero gradients.
///
/// Pair pooling (PairPool) takes the segment id of every row as well (0: first sentence, 1:
/// second) and pools each segment on its own, u_b over the tokens of segment 0 and v_b over
/// those of segment 1, then returns the comparison features
///   f_b = [u_b, v_b, |u_b − v_b|, u_b ⊙ v_b]  (4d columns).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "detail_layer_types.hpp"

namespace coulomb::detail {

/// The input checks of PairPool::forward and PairAlignment::forward: a mask of at least 1x1,
/// and L·B rows of X and entries of `segments`. Throws invalid_argument naming the argument.
inline void nn_check_pair_inputs(const char* where, Index x_rows, const PaddingMask& mask,
                                 std::size_t segments) {
  const Index L = mask.rows();
  const Index B = mask.cols();
  if (!(B >= 1 && L >= 1))
    throw_invalid(where, "argument 'mask' is " + std::to_string(L) + "x" + std::to_string(B) +
                             ", expected at least 1x1");
  if (!(x_rows == L * B))
    throw_invalid(where, "argument 'X' has " + std::to_string(x_rows) + " rows, expected L x B = " +
                             std::to_string(L * B) + " (the size of 'mask')");
  if (!(static_cast<Index>(segments) == L * B))
    throw_invalid(where, "argument 'segments' has " + std::to_string(segments) +
                             " entries, expected L x B = " + std::to_string(L * B) +
                             " (the size of 'mask')");
}

}  // namespace coulomb::detail

namespace coulomb::nn {

/// Masked mean pooling (see the file comment). Keeps 1/n_b of the last forward for backward.
template <RealScalar Scalar>
class MaskedMeanPool : public detail::LayerTypes<Scalar> {
 public:
  /// P (resized to B × d) from X ((B·L) × d) and the mask (L × B). Throws invalid_argument if
  /// X does not have mask.size() rows.
  void forward(const ConstMatrixRef<Scalar>& X, const PaddingMask& mask, Matrix<Scalar>& P) {
    const char* where = "coulomb::nn::MaskedMeanPool::forward";
    const Index L = mask.rows();
    const Index B = mask.cols();
    if (!(B >= 1 && L >= 1))
      detail::throw_invalid(where, "argument 'mask' is " + std::to_string(L) + "x" +
                                       std::to_string(B) + ", expected at least 1x1");
    if (!(X.rows() == L * B))
      detail::throw_invalid(where, "argument 'X' has " + std::to_string(X.rows()) +
                                       " rows, expected L x B = " + std::to_string(L * B) +
                                       " (the size of 'mask')");
    inv_count_.resize(B);
    for (Index b = 0; b < B; ++b) {
      const Index n = mask.col(b).count();
      inv_count_(b) = n > 0 ? Scalar(1) / static_cast<Scalar>(n) : Scalar(0);
    }
    P.setZero(B, X.cols());
    for (Index j = 0; j < X.cols(); ++j) {
      for (Index b = 0; b < B; ++b) {
        Scalar sum = 0;
        for (Index t = 0; t < L; ++t)
          if (mask(t, b)) sum += X(b * L + t, j);
        P(b, j) = sum * inv_count_(b);
      }
    }
  }

  /// dX (resized to (B·L) × d) from dP = ∂L/∂P: dx_{b·L+t} = M(t,b) dp_b / n_b. Needs the
  /// forward of the same mask; throws invalid_argument if dP is not B × d for that forward.
  void backward(const ConstMatrixRef<Scalar>& dP, const PaddingMask& mask,
                Matrix<Scalar>& dX) const {
    const char* where = "coulomb::nn::MaskedMeanPool::backward";
    const Index L = mask.rows();
    const Index B = mask.cols();
    if (!(B == inv_count_.size()))
      detail::throw_invalid(where, "argument 'mask' has " + std::to_string(B) +
                                       " columns, but the last forward had " +
                                       std::to_string(inv_count_.size()));
    if (!(dP.rows() == B))
      detail::throw_invalid(where, "argument 'dP' has " + std::to_string(dP.rows()) +
                                       " rows, expected " + std::to_string(B) +
                                       " (the sequences of 'mask')");
    dX.resize(L * B, dP.cols());
    for (Index j = 0; j < dP.cols(); ++j) {
      for (Index b = 0; b < B; ++b) {
        const Scalar g = dP(b, j) * inv_count_(b);
        for (Index t = 0; t < L; ++t) dX(b * L + t, j) = mask(t, b) ? g : Scalar(0);
      }
    }
  }

 private:
  Vector<Scalar> inv_count_;
};

/// Pair pooling of sentence pairs (see the file comment): u_b and v_b, the masked means of the
/// rows of segment 0 and of segment 1 of sequence b, and f_b = [u_b, v_b, |u_b − v_b|,
/// u_b ⊙ v_b]. Rows with another segment id are not pooled; a segment without any token pools
/// to the zero vector. Keeps u, v and the counts of the last forward for backward.
template <RealScalar Scalar>
class PairPool : public detail::LayerTypes<Scalar> {
 public:
  /// F (resized to B × 4d) from X ((B·L) × d), the mask (L × B) and the segment id of every
  /// row (`segments[b·L + t]`, L·B entries). Throws invalid_argument if X or `segments` do not
  /// have mask.size() rows or entries.
  void forward(const ConstMatrixRef<Scalar>& X, const PaddingMask& mask,
               std::span<const std::int32_t> segments, Matrix<Scalar>& F) {
    detail::nn_check_pair_inputs("coulomb::nn::PairPool::forward", X.rows(), mask, segments.size());
    const Index L = mask.rows();
    const Index B = mask.cols();
    const Index d = X.cols();
    inv_u_.resize(B);
    inv_v_.resize(B);
    for (Index b = 0; b < B; ++b) {
      Index nu = 0, nv = 0;
      for (Index t = 0; t < L; ++t) {
        if (!mask(t, b)) continue;
        const std::int32_t s = segments[static_cast<std::size_t>(b * L + t)];
        nu += s == 0 ? 1 : 0;
        nv += s == 1 ? 1 : 0;
      }
      inv_u_(b) = nu > 0 ? Scalar(1) / static_cast<Scalar>(nu) : Scalar(0);
      inv_v_(b) = nv > 0 ? Scalar(1) / static_cast<Scalar>(nv) : Scalar(0);
    }
    u_.setZero(B, d);
    v_.setZero(B, d);
    for (Index j = 0; j < d; ++j) {
      for (Index b = 0; b < B; ++b) {
        Scalar su = 0, sv = 0;
        for (Index t = 0; t < L; ++t) {
          if (!mask(t, b)) continue;
          const std::int32_t s = segments[static_cast<std::size_t>(b * L + t)];
          if (s == 0)
            su += X(b * L + t, j);
          else if (s == 1)
            sv += X(b * L + t, j);
        }
        u_(b, j) = su * inv_u_(b);
        v_(b, j) = sv * inv_v_(b);
      }
    }
    F.resize(B, 4 * d);
    F.leftCols(d) = u_;
    F.middleCols(d, d) = v_;
    F.middleCols(2 * d, d) = (u_ - v_).cwiseAbs();
    F.rightCols(d) = u_.cwiseProduct(v_);
  }

  /// dX (resized to (B·L) × d) from dF = ∂L/∂F (B × 4d) for the forward of the same mask and
  /// segments: with g = sign(u − v) (0 where u = v),
  ///   du = dF_u + g ⊙ dF_|u−v| + v ⊙ dF_u⊙v,  dv = dF_v − g ⊙ dF_|u−v| + u ⊙ dF_u⊙v,
  /// and each token row of segment 0 (1) gets du_b / n_u (dv_b / n_v); other rows get zero.
  /// Throws invalid_argument if dF is not B × 4d for that forward.
  void backward(const ConstMatrixRef<Scalar>& dF, const PaddingMask& mask,
                std::span<const std::int32_t> segments, Matrix<Scalar>& dX) {
    const char* where = "coulomb::nn::PairPool::backward";
    const Index L = mask.rows();
    const Index B = mask.cols();
    const Index d = u_.cols();
    if (!(B == u_.rows() && static_cast<Index>(segments.size()) == L * B))
      detail::throw_invalid(where, "arguments 'mask' and 'segments' do not match the last forward");
    detail::require_shape(dF, B, 4 * d, where, "dF");
    const auto sign = (u_ - v_).array().sign().matrix();
    du_ = dF.leftCols(d) + sign.cwiseProduct(dF.middleCols(2 * d, d)) +
          v_.cwiseProduct(dF.rightCols(d));
    dv_ = dF.middleCols(d, d) - sign.cwiseProduct(dF.middleCols(2 * d, d)) +
          u_.cwiseProduct(dF.rightCols(d));
    dX.resize(L * B, d);
    for (Index j = 0; j < d; ++j) {
      for (Index b = 0; b < B; ++b) {
        const Scalar gu = du_(b, j) * inv_u_(b);
        const Scalar gv = dv_(b, j) * inv_v_(b);
        for (Index t = 0; t < L; ++t) {
          const std::int32_t s = segments[static_cast<std::size_t>(b * L + t)];
          dX(b * L + t, j) = !mask(t, b) ? Scalar(0) : s == 0 ? gu : s == 1 ? gv : Scalar(0);
        }
      }
    }
  }

  /// u of the last forward (B × d): the mean of the first sentence's rows.
  const Matrix<Scalar>& first() const noexcept { return u_; }
  /// v of the last forward (B × d): the mean of the second sentence's rows.
  const Matrix<Scalar>& second() const noexcept { return v_; }

 private:
  Matrix<Scalar> u_, v_, du_, dv_;
  Vector<Scalar> inv_u_, inv_v_;
};

/// Soft lexical alignment of sentence pairs: for sequence b, with x̂_t = x_t / ‖x_t‖ (0 for a
/// zero row) and S0, S1 the tokens of segment 0 and 1,
///   a_b = (1/|S0|) Σ_{i∈S0} max_{j∈S1} x̂_i · x̂_j,   a'_b = (1/|S1|) Σ_{j∈S1} max_{i∈S0} x̂_i · x̂_j,
/// how well each sentence's tokens find a match in the other (cosine similarity; 1 for the same
/// token when x holds the token embeddings). A pair with an empty sentence gives 0 for both.
/// Keeps the normalized rows, the norms and every argmax of the last forward for backward.
template <RealScalar Scalar>
class PairAlignment : public detail::LayerTypes<Scalar> {
 public:
  /// A (resized to B × 2: a_b, a'_b) from X ((B·L) × d), the mask (L × B) and the segment id
  /// of every row (`segments[b·L + t]`). Throws invalid_argument if X or `segments` do not have
  /// mask.size() rows or entries.
  void forward(const ConstMatrixRef<Scalar>& X, const PaddingMask& mask,
               std::span<const std::int32_t> segments, Matrix<Scalar>& A) {
    detail::nn_check_pair_inputs("coulomb::nn::PairAlignment::forward", X.rows(), mask,
                                 segments.size());
    const Index L = mask.rows();
    const Index B = mask.cols();
    norm_.resize(X.rows());
    unit_.resize(X.rows(), X.cols());
    for (Index r = 0; r < X.rows(); ++r) {
      norm_(r) = X.row(r).norm();
      if (norm_(r) > Scalar(0))
        unit_.row(r) = X.row(r) / norm_(r);
      else
        unit_.row(r).setZero();
    }
    match_.assign(static_cast<std::size_t>(L * B), -1);
    weight_.setZero(L * B);
    A.setZero(B, 2);
    std::vector<Index>& first = first_;
    std::vector<Index>& second = second_;
    for (Index b = 0; b < B; ++b) {
      first.clear();
      second.clear();
      for (Index t = 0; t < L; ++t) {
        if (!mask(t, b)) continue;
        const std::int32_t s = segments[static_cast<std::size_t>(b * L + t)];
        if (s == 0) first.push_back(b * L + t);
        if (s == 1) second.push_back(b * L + t);
      }
      if (first.empty() || second.empty()) continue;
      for (int side = 0; side < 2; ++side) {
        const std::vector<Index>& from = side == 0 ? first : second;
        const std::vector<Index>& to = side == 0 ? second : first;
        const Scalar w = Scalar(1) / static_cast<Scalar>(from.size());
        Scalar total = 0;
        for (const Index i : from) {
          Index arg = to.front();
          Scalar best = unit_.row(i).dot(unit_.row(arg));
          for (std::size_t k = 1; k < to.size(); ++k) {
            const Scalar c = unit_.row(i).dot(unit_.row(to[k]));
            if (c > best) {
              best = c;
              arg = to[k];
            }
          }
          match_[static_cast<std::size_t>(i)] = arg;
          weight_(i) = w;
          total += best;
        }
        A(b, side) = total * w;
      }
    }
    batch_ = B;
  }

  /// dX (resized to (B·L) × d) from dA = ∂L/∂A (B × 2) for the last forward (the argmax of
  /// each max is held fixed: its subgradient). Throws invalid_argument if dA is not B × 2.
  void backward(const ConstMatrixRef<Scalar>& dA, const PaddingMask& mask,
                std::span<const std::int32_t> segments, Matrix<Scalar>& dX) {
    const char* where = "coulomb::nn::PairAlignment::backward";
    const Index L = mask.rows();
    detail::require_shape(dA, batch_, 2, where, "dA");
    if (!(mask.cols() == batch_ && static_cast<Index>(segments.size()) == L * batch_ &&
          unit_.rows() == L * batch_))
      detail::throw_invalid(where, "arguments 'mask' and 'segments' do not match the last forward");
    dunit_.setZero(unit_.rows(), unit_.cols());
    for (Index r = 0; r < unit_.rows(); ++r) {
      const Index j = match_[static_cast<std::size_t>(r)];
      if (j < 0) continue;
      const std::int32_t s = segments[static_cast<std::size_t>(r)];
      const Scalar g = dA(r / L, s == 0 ? 0 : 1) * weight_(r);
      dunit_.row(r) += g * unit_.row(j);
      dunit_.row(j) += g * unit_.row(r);
    }
    dX.resize(unit_.rows(), unit_.cols());
    for (Index r = 0; r < unit_.rows(); ++r) {
      if (norm_(r) > Scalar(0))
        dX.row(r) = (dunit_.row(r) - unit_.row(r).dot(dunit_.row(r)) * unit_.row(r)) / norm_(r);
      else
        dX.row(r).setZero();
    }
  }

 private:
  Matrix<Scalar> unit_, dunit_;
  Vector<Scalar> norm_, weight_;
  std::vector<Index> match_, first_, second_;
  Index batch_ = 0;
};

}  // namespace coulomb::nn
