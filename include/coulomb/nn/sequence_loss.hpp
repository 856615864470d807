// SPDX-License-Identifier: MIT
/// @file nn/sequence_loss.hpp
/// @brief The training pass of a sequence model on a batch: forward, the mean softmax
/// cross-entropy (per sequence for the classification head, at the rows with a target for a
/// per-token head), and its gradient added to the parameters' gradients. Documented in
/// docs/model.md ("The sequence model").
#pragma once

#include <cmath>
#include <limits>
#include <span>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "loss.hpp"
#include "sequence_batch.hpp"
#include "sequence_model_config.hpp"

namespace coulomb::nn {

/// Adds the gradient of scale × loss to every parameter gradient of `model` (a SequenceModel;
/// the caller zeroes the gradients first) and returns the loss, the mean softmax cross-entropy of
/// `batch`: of its labels for the classification head (forward, softmax_cross_entropy, backward
/// with `logits` and `dlogits` as buffers), of its targets at its rows for a per-token head
/// (SequenceModel::forward_backward_rows: the logits are never held whole). Dropout masks come
/// from `rng` when `training`. Returns NaN, adding nothing, when a logit is not finite.
template <typename Model, typename Scalar>
double sequence_loss_backward(Model& model, const SequenceBatch& batch, double scale, bool training,
                              Rng& rng, Matrix<Scalar>& logits, Matrix<Scalar>& dlogits) {
  if (model.config().head != SequenceHead::classification) {
    return static_cast<double>(model.forward_backward_rows(
        batch.ids, batch.mask, batch.rows, std::span<const int>(batch.targets),
        static_cast<Scalar>(scale), training, rng));
  }
  model.forward(batch.ids, batch.mask, logits, training, rng);
  if (!detail::all_finite(logits)) return std::numeric_limits<double>::quiet_NaN();
  const double loss = static_cast<double>(
      softmax_cross_entropy(logits, std::span<const int>(batch.labels), dlogits));
  if (!std::isfinite(loss)) return loss;
  if (scale != 1.0) dlogits *= static_cast<Scalar>(scale);
  model.backward(dlogits);
  return loss;
}

}  // namespace coulomb::nn
