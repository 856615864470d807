// SPDX-License-Identifier: MIT
/// @file tests/nn_support.hpp
/// @brief Helpers of the nn tests: central finite differences over matrices and over a
/// model's parameter list, the gradient comparison, and hand-built token batches.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <coulomb/attention/layout.hpp>
#include <coulomb/nn/parameter.hpp>
#include <coulomb/text/batching.hpp>

#include "test_support.hpp"

namespace coulomb_nn_test {

using coulomb::Index;
using coulomb_test::Mat;

/// Loss Σ R ⊙ Y, whose gradient with respect to Y is R.
inline double weighted_sum(const Mat<double>& R, const Mat<double>& Y) {
  return (R.array() * Y.array()).sum();
}

/// A padding mask L × B (true = real token) with the given lengths.
inline coulomb::PaddingMask mask_of(Index L, const std::vector<Index>& lengths) {
  coulomb::PaddingMask mask =
      coulomb::PaddingMask::Constant(L, static_cast<Index>(lengths.size()), false);
  for (std::size_t b = 0; b < lengths.size(); ++b)
    mask.col(static_cast<Index>(b)).head(lengths[b]).setConstant(true);
  return mask;
}

/// Relative error allowed between a hand-written gradient and central differences (double).
inline constexpr double fd_tolerance = 1e-6;

/// Central differences of f at x. The step of entry (i, j) is 1e-5 · max(|x_ij|, s), with s the
/// root mean square of x (1 if x is zero): relative to the scale of the tensor, so that a
/// small-scale parameter (embeddings drawn with standard deviation 0.02, which a LayerNorm then
/// divides by about that much) is not probed with a step that is large for it, which would
/// leave an O((step/scale)²) truncation error.
inline Mat<double> fd_gradient(Mat<double>& x, const std::function<double()>& f) {
  const double rms = x.size() > 0 ? x.norm() / std::sqrt(static_cast<double>(x.size())) : 0.0;
  const double scale = rms > 0.0 ? rms : 1.0;
  Mat<double> g(x.rows(), x.cols());
  for (Index j = 0; j < x.cols(); ++j) {
    for (Index i = 0; i < x.rows(); ++i) {
      const double x0 = x(i, j);
      const double step = 1e-5 * std::max(scale, std::abs(x0));
      x(i, j) = x0 + step;
      const double fp = f();
      x(i, j) = x0 - step;
      const double fm = f();
      x(i, j) = x0;
      g(i, j) = (fp - fm) / (2 * step);
    }
  }
  return g;
}

/// ‖analytic − fd‖ / ‖fd‖; a gradient that vanishes analytically (for example the key bias
/// under softmax attention, which every score of a query shifts by the same amount) counts as
/// exact when both norms are below 1e-9, the size of the differences' rounding.
inline double gradient_error(const Mat<double>& analytic, const Mat<double>& fd) {
  const double scale = fd.norm();
  if (scale < 1e-9 && analytic.norm() < 1e-9) return 0.0;
  return (analytic - fd).norm() / scale;
}

/// Checks every parameter of `params` against central differences of `loss()` (evaluated at the
/// current values): analytic[k] is the hand-written gradient of params[k]. Returns the largest
/// error seen.
inline double check_parameters(const coulomb::nn::ParameterList<double>& params,
                               const std::function<double()>& loss,
                               const std::vector<Mat<double>>& analytic) {
  double worst = 0.0;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const auto& p = params[k];
    const Mat<double> fd = fd_gradient(*p.value, loss);
    const double err = gradient_error(analytic[k], fd);
    INFO("parameter " << p.name << " relative error " << err << " (|grad| " << fd.norm() << ")");
    CHECK(err < fd_tolerance);
    worst = std::max(worst, err);
  }
  return worst;
}

/// A batch of sequences with the given lengths, padded to `L`, random ids in [4, vocab) (pad id
/// 0 at padding), segment 1 on the second half of each sequence, labels in [0, classes).
inline coulomb::TokenBatch make_batch(const std::vector<Index>& lengths, Index L, Index vocab,
                                      Index classes, coulomb::Rng& rng) {
  coulomb::TokenBatch batch;
  const auto B = static_cast<Index>(lengths.size());
  batch.ids.setZero(L, B);
  batch.segments.setZero(L, B);
  batch.mask.setConstant(L, B, false);
  for (Index b = 0; b < B; ++b) {
    const Index n = lengths[static_cast<std::size_t>(b)];
    for (Index t = 0; t < n; ++t) {
      batch.ids(t, b) = static_cast<coulomb::TokenId>(
          4 + coulomb::uniform_index(static_cast<std::uint64_t>(vocab - 4), rng));
      batch.segments(t, b) = t >= n / 2 ? 1 : 0;
      batch.mask(t, b) = true;
    }
    batch.labels.push_back(
        static_cast<int>(coulomb::uniform_index(static_cast<std::uint64_t>(classes), rng)));
    batch.indices.push_back(b);
    batch.lengths.push_back(n);
  }
  return batch;
}

}  // namespace coulomb_nn_test

#include <coulomb/nn/loss.hpp>

namespace coulomb_nn_test {

/// Hand-written gradients of the mean cross-entropy of `model` on `batch` against central
/// differences, for every parameter of model.parameters() (frozen ones included: their
/// gradients must then be zero, which the differences of a frozen Ω are not, so the caller
/// makes Ω trainable or accepts that check). With `training`, dropout draws its masks from a
/// generator reseeded identically for every evaluation, which fixes the masks. Returns the
/// largest relative error.
template <typename Model>
double check_model_gradients(Model& model, const coulomb::TokenBatch& batch, bool training) {
  const auto loss = [&] {
    Mat<double> logits;
    coulomb::Rng dropout_rng(1234);
    model.forward(batch, logits, training, dropout_rng);
    return coulomb::nn::softmax_cross_entropy(logits, batch.labels);
  };
  Mat<double> logits, dlogits;
  coulomb::Rng dropout_rng(1234);
  model.forward(batch, logits, training, dropout_rng);
  coulomb::nn::softmax_cross_entropy(logits, batch.labels, dlogits);
  model.zero_grad();
  model.backward(dlogits);
  const auto params = model.parameters();
  std::vector<Mat<double>> analytic;
  for (const auto& p : params) analytic.push_back(*p.gradient);
  return check_parameters(params, loss, analytic);
}

}  // namespace coulomb_nn_test
