// SPDX-License-Identifier: MIT
/// @file tests/attention_reference.hpp
/// @brief Brute-force references for the attention tests: quadratic linear attention
/// (explicit L×L kernel matrix), exact softmax attention with an explicit L×L score matrix,
/// and central finite differences.
#pragma once

#include <cmath>
#include <functional>
#include <limits>

#include "test_support.hpp"

namespace coulomb_test {

/// Quadratic linear attention of every (sequence, head): A = Φ(sQ) Φ(sK)ᵀ (unstabilized),
/// keys masked (padding, and j > i when causal), out_i = Σ_j A_ij v_j / Σ_j A_ij, zero for
/// padded queries and zero denominators.
template <typename Map>
Mat<typename Map::Scalar> quadratic_linear_attention(
    const std::vector<Map>& maps, const Mat<typename Map::Scalar>& Q,
    const Mat<typename Map::Scalar>& K, const Mat<typename Map::Scalar>& V, Index batch,
    Index heads, bool causal, const coulomb::PaddingMask* mask, double scale) {
  using S = typename Map::Scalar;
  const Index L = Q.rows() / batch;
  const Index dk = Q.cols() / heads;
  const Index dv = V.cols() / heads;
  Mat<S> out = Mat<S>::Zero(Q.rows(), V.cols());
  for (Index b = 0; b < batch; ++b) {
    for (Index h = 0; h < heads; ++h) {
      const Map& fm = maps[maps.size() == 1 ? 0 : static_cast<std::size_t>(h)];
      const Mat<S> q = static_cast<S>(scale) * Q.block(b * L, h * dk, L, dk);
      const Mat<S> k = static_cast<S>(scale) * K.block(b * L, h * dk, L, dk);
      const Mat<S> v = V.block(b * L, h * dv, L, dv);
      Mat<S> A = fm.map(q) * fm.map(k).transpose();
      for (Index i = 0; i < L; ++i) {
        for (Index j = 0; j < L; ++j) {
          const bool key_ok = !mask || (*mask)(j, b);
          if (!key_ok || (causal && j > i)) A(i, j) = 0;
        }
      }
      for (Index i = 0; i < L; ++i) {
        const S den = A.row(i).sum();
        if ((mask && !(*mask)(i, b)) || std::abs(den) < std::numeric_limits<S>::min()) continue;
        out.block(b * L + i, h * dv, 1, dv) = A.row(i) * v / den;
      }
    }
  }
  return out;
}

/// Exact softmax attention with explicit L×L scores s²·qᵀk.
inline Mat<double> explicit_softmax_attention(const Mat<double>& Q, const Mat<double>& K,
                                              const Mat<double>& V, Index batch, Index heads,
                                              bool causal, const coulomb::PaddingMask* mask,
                                              double scale) {
  const Index L = Q.rows() / batch;
  const Index dk = Q.cols() / heads;
  const Index dv = V.cols() / heads;
  Mat<double> out = Mat<double>::Zero(Q.rows(), V.cols());
  for (Index b = 0; b < batch; ++b) {
    for (Index h = 0; h < heads; ++h) {
      const Mat<double> q = Q.block(b * L, h * dk, L, dk);
      const Mat<double> k = K.block(b * L, h * dk, L, dk);
      const Mat<double> v = V.block(b * L, h * dv, L, dv);
      const Mat<double> scores = scale * scale * q * k.transpose();
      for (Index i = 0; i < L; ++i) {
        if (mask && !(*mask)(i, b)) continue;
        double mx = -std::numeric_limits<double>::infinity();
        for (Index j = 0; j < L; ++j) {
          if ((mask && !(*mask)(j, b)) || (causal && j > i)) continue;
          mx = std::max(mx, scores(i, j));
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;
        Vec<double> w = Vec<double>::Zero(L);
        for (Index j = 0; j < L; ++j) {
          if ((mask && !(*mask)(j, b)) || (causal && j > i)) continue;
          w(j) = std::exp(scores(i, j) - mx);
        }
        out.block(b * L + i, h * dv, 1, dv) = w.transpose() * v / w.sum();
      }
    }
  }
  return out;
}

/// Central finite-difference gradient of f at x (every entry), step h·max(1, |x_i|).
inline Mat<double> fd_gradient(Mat<double> x, const std::function<double(const Mat<double>&)>& f,
                               double h = 1e-5) {
  Mat<double> g(x.rows(), x.cols());
  for (Index j = 0; j < x.cols(); ++j) {
    for (Index i = 0; i < x.rows(); ++i) {
      const double x0 = x(i, j);
      const double step = h * std::max(1.0, std::abs(x0));
      x(i, j) = x0 + step;
      const double fp = f(x);
      x(i, j) = x0 - step;
      const double fm = f(x);
      x(i, j) = x0;
      g(i, j) = (fp - fm) / (2 * step);
    }
  }
  return g;
}

/// A padding mask L × batch with the given number of padded positions at the end of each
/// sequence (pad[b]), and optionally one padded position in the middle.
inline coulomb::PaddingMask make_mask(Index L, const std::vector<Index>& pad, Index hole = -1) {
  coulomb::PaddingMask mask =
      coulomb::PaddingMask::Constant(L, static_cast<Index>(pad.size()), true);
  for (std::size_t b = 0; b < pad.size(); ++b) {
    for (Index t = L - pad[b]; t < L; ++t) mask(t, static_cast<Index>(b)) = false;
    if (hole >= 0) mask(hole, static_cast<Index>(b)) = false;
  }
  return mask;
}

}  // namespace coulomb_test
