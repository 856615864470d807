// SPDX-License-Identifier: MIT
/// @file nn/pair_head.hpp
/// @brief The pair head of the text classifier for sentence pairs: the two sentences pooled
/// apart and compared, optional alignment and lexical-overlap features, an optional GELU hidden
/// layer and dropout, with its backward. Documented in docs/model.md (section "The pair head").
///
/// For sequence b with the encoder's final normalized output h (nn/text_classifier.hpp):
///   u_b, v_b = masked means of h over the tokens of segment 0 and of segment 1 (PairPool),
///   f_b = [u_b, v_b, |u_b − v_b|, u_b ⊙ v_b]
///         (+ the two alignment features of the token embeddings, PairAlignment, with
///         config.pair_alignment; + the pair_overlap_features lexical overlap features of the
///         pair, standardized as z_k = (o_k − shift_k)·scale_k, with config.pair_overlap),
///   out_b = Dropout(GELU(f_b W_h + b_h)) with config.pair_hidden > 0, else Dropout(f_b).
/// The classifier of the model then maps out_b to the logits. The comparison features follow
/// the sentence encoders of Conneau et al., *Supervised Learning of Universal Sentence
/// Representations from Natural Language Inference Data*, EMNLP 2017.
#pragma once

#include <cmath>
#include <random>
#include <span>
#include <string>

#include <Eigen/Core>

#include "../attention/layout.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/tokens.hpp"
#include "detail_layer_types.hpp"
#include "layers.hpp"
#include "parameter.hpp"
#include "pooling.hpp"
#include "text_classifier_config.hpp"

namespace coulomb::nn {

/// The pair head (see the file comment). Default-constructed, it is the absent head of a model
/// with mean pooling: no parameters, and zero_grad() does nothing.
template <RealScalar Scalar>
class PairHead : public detail::LayerTypes<Scalar> {
 public:
  /// No pair head.
  PairHead() = default;

  /// The pair head that `config` asks for (config.pooling is PoolingKind::pair; the config is
  /// valid): hidden layer zero until initialize(), overlap features entering as they are (shift
  /// 0, scale 1) until set_overlap_standardization().
  explicit PairHead(const TextClassifierConfig& config)
      : d_model_(config.d_model),
        hidden_(config.pair_hidden),
        alignment_(config.pair_alignment),
        overlap_(config.pair_overlap),
        dropout_(config.dropout) {
    if (hidden_ > 0) hidden_layer_ = Linear<Scalar>(feature_dim(), hidden_);
    if (overlap_) {
      shift_ = Matrix<Scalar>::Zero(pair_overlap_features, 1);
      scale_ = Matrix<Scalar>::Ones(pair_overlap_features, 1);
      shift_grad_ = Matrix<Scalar>::Zero(pair_overlap_features, 1);
      scale_grad_ = Matrix<Scalar>::Zero(pair_overlap_features, 1);
    }
  }

  /// Width of f_b: 4·d_model, + 2 with the alignment features, + pair_overlap_features with the
  /// overlap features.
  Index feature_dim() const noexcept {
    return 4 * d_model_ + (alignment_ ? 2 : 0) + (overlap_ ? pair_overlap_features : 0);
  }
  /// Width of out_b, the classifier's input: the hidden width, or feature_dim() without a
  /// hidden layer.
  Index output_dim() const noexcept { return hidden_ > 0 ? hidden_ : feature_dim(); }

  /// Xavier-uniform W_h and zero b_h from `rng` (only with a hidden layer; draws nothing
  /// otherwise).
  template <std::uniform_random_bit_generator G>
  void initialize(G& rng) {
    if (hidden_ > 0) hidden_layer_.initialize(rng);
  }

  /// Threads of the hidden layer's products (Linear::set_num_threads).
  void set_num_threads(int threads) { hidden_layer_.set_num_threads(threads); }

  /// out (output(), B × output_dim()) from the final normalized states `h` ((B·L) × d), the
  /// token embeddings `tokens` ((B·L) × d; read only with config.pair_alignment), the mask
  /// (L × B), the segment id of every row and the batch's raw overlap features (B ×
  /// pair_overlap_features; read only with config.pair_overlap). With `training`, dropout
  /// draws its mask from `rng`. Keeps what backward needs.
  template <std::uniform_random_bit_generator G>
  void forward(const ConstMatrixRef<Scalar>& h, const ConstMatrixRef<Scalar>& tokens,
               const PaddingMask& mask, std::span<const TokenId> segments,
               const Eigen::ArrayXXd& overlap, bool training, G& rng) {
    if (alignment_ || overlap_) {
      pool_.forward(h, mask, segments, pair_features_);
      const Index w = pair_features_.cols();
      pooled_.resize(mask.cols(), feature_dim());
      pooled_.leftCols(w) = pair_features_;
      if (alignment_) {
        align_.forward(tokens, mask, segments, aligned_);
        pooled_.middleCols(w, 2) = aligned_;
      }
      if (overlap_) standardize_overlap(overlap, w + (alignment_ ? 2 : 0));
    } else {
      pool_.forward(h, mask, segments, pooled_);
    }
    if (hidden_ > 0) {
      hidden_layer_.forward(pooled_, hidden_pre_);
      gelu_.forward(hidden_pre_, out_, training);
    } else {
      out_ = pooled_;
    }
    dropout_.forward(out_, training, rng);
  }

  /// out_b of the last forward (B × output_dim()).
  const Matrix<Scalar>& output() const noexcept { return out_; }

  /// Given dout = ∂L/∂out of the last forward (B × output_dim(); overwritten), adds the
  /// gradients of the hidden layer and of the overlap standardization, writes dh = ∂L/∂h
  /// (resized to (B·L) × d) and, with config.pair_alignment and `token_gradient`, keeps
  /// ∂L/∂tokens (token_gradient()). Same mask and segments as the forward.
  void backward(Matrix<Scalar>& dout, const PaddingMask& mask, std::span<const TokenId> segments,
                bool token_gradient, Matrix<Scalar>& dh) {
    dropout_.backward(dout);
    if (hidden_ > 0) {
      gelu_.backward(hidden_pre_, dout, dout);
      hidden_layer_.backward(pooled_, dout, dpooled_);
    } else {
      dpooled_ = dout;
    }
    const Index d = d_model_;
    if (alignment_ || overlap_) {
      // The alignment's gradient reaches only the token table: nothing to do when the table
      // is frozen. The overlap features' columns reach only their (fixed) standardization.
      if (alignment_ && token_gradient)
        align_.backward(dpooled_.middleCols(4 * d, 2), mask, segments, dtokens_);
      if (overlap_) overlap_backward(dpooled_.rightCols(pair_overlap_features));
      pool_.backward(dpooled_.leftCols(4 * d), mask, segments, dh);
    } else {
      pool_.backward(dpooled_, mask, segments, dh);
    }
  }

  /// ∂L/∂tokens of the last backward ((B·L) × d), with config.pair_alignment.
  const Matrix<Scalar>& token_gradient() const noexcept { return dtokens_; }

  /// Sets the gradients of the hidden layer and of the standardization to zero.
  void zero_grad() {
    hidden_layer_.zero_grad();
    shift_grad_.setZero();
    scale_grad_.setZero();
  }

  /// Appends pair_head.hidden.{weight, bias} with a hidden layer, and pair_head.overlap.{shift,
  /// scale} (never trainable) with the overlap features.
  void append_parameters(ParameterList<Scalar>& list) {
    if (hidden_ > 0) hidden_layer_.append_parameters(list, "pair_head.hidden.");
    if (overlap_) {
      list.push_back({"pair_head.overlap.shift", &shift_, &shift_grad_, false, false});
      list.push_back({"pair_head.overlap.scale", &scale_, &scale_grad_, false, false});
    }
  }

  /// Sets the standardization of the overlap features: feature k enters as (o_k − mean_k) /
  /// sd_k, or o_k − mean_k where sd_k is 0. Throws invalid_argument without config.pair_overlap,
  /// or for vectors that are not of length pair_overlap_features, not finite, or with a
  /// negative sd; nothing changes then.
  template <typename D1, typename D2>
  void set_overlap_standardization(const Eigen::DenseBase<D1>& mean,
                                   const Eigen::DenseBase<D2>& sd) {
    const char* where = "coulomb::nn::TextClassifier::set_overlap_standardization";
    if (!overlap_)
      detail::throw_invalid(where, "the model has no overlap features (config.pair_overlap)");
    if (!(mean.size() == pair_overlap_features && sd.size() == pair_overlap_features))
      detail::throw_invalid(where, "arguments 'mean' and 'sd' must have " +
                                       std::to_string(pair_overlap_features) + " entries, got " +
                                       std::to_string(mean.size()) + " and " +
                                       std::to_string(sd.size()));
    for (Index k = 0; k < pair_overlap_features; ++k) {
      const double m = static_cast<double>(mean.derived().coeff(k));
      const double s = static_cast<double>(sd.derived().coeff(k));
      if (!(std::isfinite(m) && std::isfinite(s) && s >= 0.0))
        detail::throw_invalid(where, "entry " + std::to_string(k) +
                                         ": mean and sd must be finite and sd >= 0, got " +
                                         std::to_string(m) + " and " + std::to_string(s));
    }
    for (Index k = 0; k < pair_overlap_features; ++k) {
      const double s = static_cast<double>(sd.derived().coeff(k));
      shift_(k, 0) = static_cast<Scalar>(static_cast<double>(mean.derived().coeff(k)));
      scale_(k, 0) = s > 0.0 ? static_cast<Scalar>(1.0 / s) : Scalar(1);
    }
  }

 private:
  // pooled_'s columns first … first + pair_overlap_features − 1 from the batch's overlap
  // features, standardized; keeps the raw features for backward.
  void standardize_overlap(const Eigen::ArrayXXd& overlap, Index first) {
    overlap_in_ = overlap.matrix().template cast<Scalar>();
    for (Index k = 0; k < pair_overlap_features; ++k) {
      const Scalar shift = shift_(k, 0);
      const Scalar scale = scale_(k, 0);
      for (Index b = 0; b < overlap.rows(); ++b)
        pooled_(b, first + k) = (overlap_in_(b, k) - shift) * scale;
    }
  }

  // Gradients of the standardization's shift and scale from dZ = ∂L/∂z (B × K): with
  // z = (o − shift)·scale, ∂L/∂shift_k = −scale_k Σ_b dZ_bk and ∂L/∂scale_k = Σ_b dZ_bk (o_bk −
  // shift_k). Exact, so that every parameter's gradient is, although no optimizer uses them.
  void overlap_backward(const ConstMatrixRef<Scalar>& dZ) {
    for (Index k = 0; k < pair_overlap_features; ++k) {
      const Scalar shift = shift_(k, 0);
      Scalar sum = 0;
      Scalar weighted = 0;
      for (Index b = 0; b < dZ.rows(); ++b) {
        sum += dZ(b, k);
        weighted += dZ(b, k) * (overlap_in_(b, k) - shift);
      }
      shift_grad_(k, 0) -= scale_(k, 0) * sum;
      scale_grad_(k, 0) += weighted;
    }
  }

  Index d_model_ = 0;
  Index hidden_ = 0;
  bool alignment_ = false;
  bool overlap_ = false;
  PairPool<Scalar> pool_;
  PairAlignment<Scalar> align_;
  Linear<Scalar> hidden_layer_;
  Gelu<Scalar> gelu_;
  Dropout<Scalar> dropout_;
  // The overlap features' standardization (K × 1) and its gradients (exact, unused by
  // optimizers: the parameters are not trainable).
  Matrix<Scalar> shift_, scale_, shift_grad_, scale_grad_;
  Matrix<Scalar> overlap_in_;  // the last forward's overlap features (B × K)
  Matrix<Scalar> pair_features_, aligned_, pooled_, hidden_pre_, out_;
  Matrix<Scalar> dpooled_, dtokens_;
};

}  // namespace coulomb::nn
