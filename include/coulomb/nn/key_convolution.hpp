// SPDX-License-Identifier: MIT
/// @file nn/key_convolution.hpp
/// @brief A short causal depthwise convolution over the positions of each sequence, applied to
/// the keys of an attention block (MultiHeadAttention::set_key_convolution). Documented in
/// docs/model.md (section "Key convolution").
///
/// For keys K ∈ R^{n×d} of B sequences of length L (row b·L + t holds position t of sequence b)
/// and weights c ∈ R^{w×d} (w the width):
///   K'_{b,t} = Σ_{j=0}^{min(w−1, t)} c_j ⊙ K_{b,t−j},
/// so a key can carry the tokens just before it: with w = 2, the key at the position of a value
/// also encodes the key token before it, which is how a single linear-attention layer can look
/// up "the token after the query" (the shift of H3 and Based). The weights start at c_0 = 1 and
/// c_j = 0 for j ≥ 1 (the identity: a fresh block computes the keys it computed without the
/// convolution). Positions t − j < 0 contribute nothing; padded positions are read like real
/// ones (their keys are masked in the attention itself), and a decoding step shifts the history
/// at every token, so step() and forward() agree for any padding.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "detail_layer_types.hpp"
#include "parameter.hpp"

namespace coulomb::nn {

/// The decoding history of a KeyConvolution: the last w − 1 keys of every sequence.
template <RealScalar Scalar>
class KeyConvolutionHistory {
 public:
  /// Sequences being decoded.
  Index batch() const noexcept { return batch_; }
  /// Scalars held: B·(w − 1)·d.
  Index num_scalars() const noexcept {
    Index n = 0;
    for (const auto& m : past_) n += m.size();
    return n;
  }

 private:
  template <RealScalar S>
  friend class KeyConvolution;

  std::vector<Matrix<Scalar>> past_;  // past_[j − 1]: the keys j positions back (B × d)
  Index batch_ = 0;
};

/// The short causal depthwise convolution of the file comment (width w, d channels).
template <RealScalar Scalar>
class KeyConvolution : public detail::LayerTypes<Scalar> {
 public:
  /// No convolution (width 0): enabled() is false.
  KeyConvolution() = default;

  /// Width `width` over `dim` channels, initialized to the identity. Throws invalid_argument
  /// unless width ≥ 1 and dim ≥ 1.
  KeyConvolution(Index width, Index dim) {
    const char* where = "coulomb::nn::KeyConvolution::constructor";
    if (!(width >= 1))
      detail::throw_invalid(where,
                            "argument 'width' must be at least 1, got " + std::to_string(width));
    if (!(dim >= 1))
      detail::throw_invalid(where, "argument 'dim' must be at least 1, got " + std::to_string(dim));
    c_.setZero(width, dim);
    dc_.setZero(width, dim);
    initialize();
  }

  /// Whether the convolution is in use (width ≥ 1).
  bool enabled() const noexcept { return c_.rows() > 0; }
  /// The width w (0 when disabled).
  Index width() const noexcept { return c_.rows(); }
  /// The channels d.
  Index dim() const noexcept { return c_.cols(); }

  /// c_0 = 1, c_j = 0 for j ≥ 1 (the identity).
  void initialize() {
    c_.setZero();
    if (c_.rows() > 0) c_.row(0).setOnes();
  }

  /// Y = conv(K) for K of n × d with n a multiple of `length` (sequences of `length` rows each);
  /// Y resized to n × d and must not alias K.
  void forward(const ConstMatrixRef<Scalar>& K, Index length, Matrix<Scalar>& Y) const {
    check_input(K, length, "coulomb::nn::KeyConvolution::forward", "K");
    Y.resize(K.rows(), K.cols());
    const Index B = K.rows() / length;
    for (Index ch = 0; ch < dim(); ++ch) {
      auto y = Y.col(ch);
      const auto k = K.col(ch);
      for (Index b = 0; b < B; ++b) {
        const Index r0 = b * length;
        y.segment(r0, length) = c_(0, ch) * k.segment(r0, length);
        for (Index j = 1; j < std::min(width(), length); ++j)
          y.segment(r0 + j, length - j) += c_(j, ch) * k.segment(r0, length - j);
      }
    }
  }

  /// Given dY = ∂L/∂Y for the input K of the forward: ∂L/∂c += Σ_t K_{t−j} ⊙ dY_t, and
  /// dK = ∂L/∂K (resized; must not alias dY).
  void backward(const ConstMatrixRef<Scalar>& K, Index length, const ConstMatrixRef<Scalar>& dY,
                Matrix<Scalar>& dK) {
    const char* where = "coulomb::nn::KeyConvolution::backward";
    check_input(K, length, where, "K");
    detail::require_shape(dY, K.rows(), dim(), where, "dY");
    dK.resize(K.rows(), K.cols());
    const Index B = K.rows() / length;
    for (Index ch = 0; ch < dim(); ++ch) {
      auto dk = dK.col(ch);
      const auto k = K.col(ch);
      const auto dy = dY.col(ch);
      for (Index b = 0; b < B; ++b) {
        const Index r0 = b * length;
        dk.segment(r0, length) = c_(0, ch) * dy.segment(r0, length);
        dc_(0, ch) += k.segment(r0, length).dot(dy.segment(r0, length));
        for (Index j = 1; j < std::min(width(), length); ++j) {
          dk.segment(r0, length - j) += c_(j, ch) * dy.segment(r0 + j, length - j);
          dc_(j, ch) += k.segment(r0, length - j).dot(dy.segment(r0 + j, length - j));
        }
      }
    }
  }

  /// Starts decoding `batch` sequences: an empty history (the positions before the first).
  void reset(KeyConvolutionHistory<Scalar>& history, Index batch) const {
    history.past_.assign(static_cast<std::size_t>(std::max<Index>(width() - 1, 0)),
                         Matrix<Scalar>::Zero(batch, dim()));
    history.batch_ = batch;
  }

  /// One decoding step: k (B × d) holds the keys of the next position; Y (resized to B × d)
  /// receives their convolution with the history, which then moves on by one position.
  void step(const ConstMatrixRef<Scalar>& k, KeyConvolutionHistory<Scalar>& history,
            Matrix<Scalar>& Y) const {
    const char* where = "coulomb::nn::KeyConvolution::step";
    detail::require_shape(k, history.batch_, dim(), where, "k");
    Y.noalias() = k * c_.row(0).asDiagonal();
    for (Index j = 1; j < width(); ++j)
      Y.noalias() += history.past_[static_cast<std::size_t>(j - 1)] * c_.row(j).asDiagonal();
    if (width() > 1) {
      std::rotate(history.past_.rbegin(), history.past_.rbegin() + 1, history.past_.rend());
      history.past_.front() = k;
    }
  }

  /// Sets the gradient of the weights to zero.
  void zero_grad() { dc_.setZero(); }

  /// Appends prefix + `name` (w × d; trainable, no weight decay: a gain, like a norm's).
  void append_parameters(ParameterList<Scalar>& list, const std::string& prefix,
                         const char* name = "key_conv") {
    list.push_back({prefix + name, &c_, &dc_, true, false});
  }

  /// The weights c (w × d).
  const Matrix<Scalar>& weight() const noexcept { return c_; }
  /// The weights c, mutable.
  Matrix<Scalar>& weight() noexcept { return c_; }
  /// ∂L/∂c accumulated since the last zero_grad().
  const Matrix<Scalar>& weight_gradient() const noexcept { return dc_; }

 private:
  void check_input(const ConstMatrixRef<Scalar>& K, Index length, const char* where,
                   const char* name) const {
    detail::require_cols(K, dim(), where, name);
    if (!(length >= 1 && K.rows() % length == 0))
      detail::throw_invalid(
          where, "argument '" + std::string(name) + "' has " + std::to_string(K.rows()) +
                     " rows, not a multiple of the sequence length " + std::to_string(length));
  }

  Matrix<Scalar> c_, dc_;
};

}  // namespace coulomb::nn
