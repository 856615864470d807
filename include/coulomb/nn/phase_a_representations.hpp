// SPDX-License-Identifier: MIT
/// @file nn/phase_a_representations.hpp
/// @brief The Phase A representations of a text classifier: for every encoder layer, the masked
/// mean of each sequence's keys as the feature map sees them, and the stacking of the heads as
/// rows. Documented in docs/model.md (section "Phase A representations").
///
/// Badiei Khuzani et al., *A Coulomb Particle Model for Learning Kernel Attention in
/// Transformers*, 2026, §4: the particles Ω of a layer are learned by the particle model on
/// sequence representations with the sequences' labels. For sequence b and head h of a layer
/// with input scale s = d_head^{-1/4}:
///   r_{b,h} = s · (1/n_b) Σ_{t : mask(t,b)} k_{b·L+t, h},
/// the pooled keys k = x W_K + b_K (the queries when Q = K) of head h, scaled as attention
/// scales them before the map. The heads of a layer share its Ω, so their rows are stacked
/// (split_heads) into one sample of d_head-vectors.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/tokens.hpp"
#include "../features/feature_map.hpp"
#include "pooling.hpp"
#include "text_classifier.hpp"

namespace coulomb::nn {

/// The Phase A representations of `batch` (see the file comment): out[l], for every encoder
/// layer l, is B × d, row b, columns [h·d_head, (h+1)·d_head), holding r_{b,h}. Runs an
/// evaluation forward of `model` (no dropout), which replaces the state a backward would use.
/// Throws as TextClassifier::forward for a batch that does not fit the model.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
void phase_a_representations(TextClassifier<Map>& model, const TokenBatch& batch,
                             std::vector<Matrix<S>>& out) {
  Matrix<S> logits;
  model.forward(batch, logits);
  MaskedMeanPool<S> pool;
  out.resize(static_cast<std::size_t>(model.num_layers()));
  for (Index l = 0; l < model.num_layers(); ++l) {
    const auto& attention = model.layer(l).attention();
    Matrix<S>& r = out[static_cast<std::size_t>(l)];
    pool.forward(attention.keys(), batch.mask, r);
    r *= attention.input_scale();
  }
}

/// phase_a_representations as a new vector.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
std::vector<Matrix<S>> phase_a_representations(TextClassifier<Map>& model,
                                               const TokenBatch& batch) {
  std::vector<Matrix<S>> out;
  phase_a_representations(model, batch, out);
  return out;
}

/// Writes the heads of R (B × H·d_head, head h in columns [h·d_head, (h+1)·d_head)) as rows of
/// `out` (d_head columns): head h goes to rows [first_row + h·head_stride, first_row +
/// h·head_stride + B). With first_row = 0 and head_stride = B this is split_heads; Phase A uses
/// it to place each batch directly in the sample of its Ω. Throws invalid_argument if R's
/// columns are not a multiple of `num_heads`, or if `out` does not have d_head columns and the
/// rows written.
template <typename D, typename O>
void split_heads_into(const Eigen::MatrixBase<D>& representations, Index num_heads,
                      Eigen::MatrixBase<O>& out, Index first_row, Index head_stride) {
  const char* where = "coulomb::nn::split_heads";
  if (!(num_heads >= 1 && representations.cols() % num_heads == 0))
    detail::throw_invalid(
        where, "argument 'representations' has " + std::to_string(representations.cols()) +
                   " columns, not a multiple of num_heads = " + std::to_string(num_heads));
  const Index B = representations.rows();
  const Index dh = representations.cols() / num_heads;
  const Index last = first_row + (num_heads - 1) * head_stride + B;
  if (!(out.cols() == dh && first_row >= 0 && head_stride >= 0 && last <= out.rows()))
    detail::throw_invalid(where, "argument 'out' is " + std::to_string(out.rows()) + "x" +
                                     std::to_string(out.cols()) + ", expected " +
                                     std::to_string(dh) + " columns and at least " +
                                     std::to_string(last) + " rows");
  for (Index h = 0; h < num_heads; ++h)
    out.middleRows(first_row + h * head_stride, B) = representations.middleCols(h * dh, dh);
}

/// Rows of every head stacked: from R (B × H·d_head) to (H·B) × d_head, where rows
/// [h·B, (h+1)·B) are head h. Throws invalid_argument if R's columns are not a multiple of
/// `num_heads`.
template <typename D>
Matrix<typename D::Scalar> split_heads(const Eigen::MatrixBase<D>& representations,
                                       Index num_heads) {
  const Index dh = num_heads >= 1 ? representations.cols() / num_heads : 0;
  Matrix<typename D::Scalar> out(num_heads >= 1 ? num_heads * representations.rows() : 0, dh);
  split_heads_into(representations, num_heads, out, 0, representations.rows());
  return out;
}

}  // namespace coulomb::nn
