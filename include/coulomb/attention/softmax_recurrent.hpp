// SPDX-License-Identifier: MIT
/// @file attention/softmax_recurrent.hpp
/// @brief Causal decoding with exact softmax attention, one token at a time, from a cache of
/// the keys and values seen so far (docs/attention.md, "Recurrent decoding"): for each
/// (sequence, head), at step t,
///   out_t = Σ_{j ≤ t} p_j v_j,  p_j = exp(s_j − max_i s_i) / Σ_i exp(s_i − max_i s_i),
///   s_j = s²·q_tᵀk_j,
/// over the real (valid) tokens j. The cache grows by one key and one value per token, so memory
/// and time per step grow linearly with the position, unlike linear attention's O(D·d_v) state
/// (linear_recurrent.hpp). This is the reference against which linear decoding is measured
/// (Vaswani et al., *Attention Is All You Need*, NeurIPS 2017).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "layout.hpp"

namespace coulomb {

template <RealScalar ScalarT>
class SoftmaxAttention;

/// Running state of causal decoding with softmax attention for a batch: per sequence, the keys
/// (H·d_k) and values (H·d_v) of its real tokens so far, one row each. Filled by
/// SoftmaxAttention::reset and SoftmaxAttention::step.
template <RealScalar Scalar>
class SoftmaxAttentionCache {
 public:
  /// Sequences in the batch.
  Index batch() const noexcept { return batch_; }
  /// Tokens consumed since reset() (padding included).
  Index position() const noexcept { return position_; }
  /// Keys and values held, in scalars (grows with every real token).
  Index num_scalars() const noexcept {
    Index total = 0;
    for (std::size_t b = 0; b < count_.size(); ++b)
      total += count_[b] * (keys_[b].cols() + values_[b].cols());
    return total;
  }

 private:
  template <RealScalar S>
  friend class SoftmaxAttention;

  Index batch_ = 0;
  Index position_ = 0;
  std::vector<Matrix<Scalar>> keys_, values_;  // per sequence: capacity × (H·d_k), × (H·d_v)
  std::vector<Index> count_;                   // real tokens cached per sequence
  Vector<Scalar> scores_;
};

namespace detail {

/// One decoding step of softmax attention (inputs checked by the caller; `valid` or nullptr):
/// appends the token's key and value to its sequence's cache and writes its output, or 0 for
/// padding (whose cache is left unchanged). Throws numerical_error when a score overflows.
template <typename Scalar>
void softmax_recurrent_step(const AttentionDims& dims, Scalar s2,
                            const Eigen::Ref<const Matrix<Scalar>>& q,
                            const Eigen::Ref<const Matrix<Scalar>>& k,
                            const Eigen::Ref<const Matrix<Scalar>>& v, const bool* valid,
                            Matrix<Scalar>& out, std::vector<Matrix<Scalar>>& keys,
                            std::vector<Matrix<Scalar>>& values, std::vector<Index>& count,
                            Vector<Scalar>& scores) {
  const Index B = dims.batch;
  const Index H = dims.heads;
  const Index dk = dims.dk;
  const Index dv = dims.dv;
  out.setZero(B, H * dv);
  for (Index b = 0; b < B; ++b) {
    if (valid && !valid[b]) continue;
    const auto sb = static_cast<std::size_t>(b);
    Matrix<Scalar>& K = keys[sb];
    Matrix<Scalar>& V = values[sb];
    const Index n = count[sb];
    if (K.rows() == n) {  // full: double the capacity (amortized O(1) per token)
      const Index capacity = std::max<Index>(16, 2 * n);
      K.conservativeResize(capacity, H * dk);
      V.conservativeResize(capacity, H * dv);
    }
    K.row(n) = k.row(b);
    V.row(n) = v.row(b);
    const Index len = n + 1;
    count[sb] = len;
    for (Index h = 0; h < H; ++h) {
      scores.noalias() = s2 * (K.block(0, h * dk, len, dk) * q.block(b, h * dk, 1, dk).transpose());
      const Scalar mx = scores.maxCoeff();
      if (!std::isfinite(static_cast<double>(mx)))
        throw numerical_error(
            "coulomb::SoftmaxAttention::step: the scores s^2 q^T k overflow: arguments 'q' and "
            "'k' are too large; scale them down");
      scores = (scores.array() - mx).exp();
      const Scalar sum = scores.sum();
      out.block(b, h * dv, 1, dv).noalias() =
          (scores.transpose() * V.block(0, h * dv, len, dv)) / sum;
    }
  }
}

}  // namespace detail

}  // namespace coulomb
