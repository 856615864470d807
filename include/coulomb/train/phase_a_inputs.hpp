// SPDX-License-Identifier: MIT
/// @file train/phase_a_inputs.hpp
/// @brief The inputs x of Phase A (train/phase_a.hpp): the model's sequence representations,
/// grouped by the Ω that sees them, with their labels (Badiei Khuzani et al., 2026, §4).
///
/// Representations (nn::phase_a_representations): for sequence b and head h of layer l,
/// r_{l,b,h} = d_head^{-1/4} · masked mean of the keys of head h — the inputs the layer's
/// feature map sees, pooled per sequence. Each layer's map is shared by its heads, so the heads
/// are samples of the same kernel: the rows of every head are stacked (nn::split_heads) and the
/// sequence's label is repeated once per head. With one Ω per layer, layer l's Ω is learned on
/// layer l's rows (H·n samples); with one shared Ω, on the rows of every layer stacked (N·H·n
/// samples). Every layer's representations come from one evaluation pass of the model.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../nn/phase_a_representations.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/batching.hpp"
#include "../text/encoder.hpp"

namespace coulomb::train {

/// The Phase A inputs of `model` on the sequences `indices` of `data`: for every Ω k of the
/// model, X[k] stacks the head rows (split_heads) of every layer that uses Ω k (layer after
/// layer, head after head), and labels[k] holds the matching labels (the sequence labels
/// repeated per head and layer). Runs evaluation forwards (no dropout). Throws invalid_argument
/// for a model with softmax attention, an empty `indices`, or data the model refuses.
template <FeatureMap Map, RealScalar S = typename Map::Scalar>
void collect_phase_a_inputs(nn::TextClassifier<Map>& model, const EncodedDataset& data,
                            std::span<const Index> indices, Index batch_size,
                            std::vector<Matrix<S>>& X, std::vector<std::vector<int>>& labels) {
  const char* where = "coulomb::train::collect_phase_a_inputs";
  coulomb::detail::require(model.config().attention == nn::AttentionKind::linear, where,
                           "the model uses softmax attention, which has no Omega to learn");
  coulomb::detail::require(!indices.empty(), where, "argument 'indices' is empty");
  coulomb::detail::require(
      batch_size >= 1, where,
      "argument 'batch_size' must be at least 1, got " + std::to_string(batch_size));
  const Index n = static_cast<Index>(indices.size());
  const Index layers = model.num_layers();
  const Index H = model.config().num_heads;
  const Index dh = model.config().d_model / H;
  const Index K = model.num_omegas();
  // Layer l's heads go to block slot[l] of X[omega_index(l)]: H·n rows per layer, head after
  // head, each batch straight to its rows.
  std::vector<Index> slot(static_cast<std::size_t>(layers));
  std::vector<Index> layers_of(static_cast<std::size_t>(K), 0);
  for (Index l = 0; l < layers; ++l)
    slot[static_cast<std::size_t>(l)] = layers_of[static_cast<std::size_t>(model.omega_index(l))]++;
  X.assign(static_cast<std::size_t>(K), Matrix<S>());
  labels.assign(static_cast<std::size_t>(K), std::vector<int>());
  for (Index k = 0; k < K; ++k)
    X[static_cast<std::size_t>(k)].resize(layers_of[static_cast<std::size_t>(k)] * H * n, dh);
  std::vector<Matrix<S>> reps;
  TokenBatch batch;
  for (Index start = 0; start < n; start += batch_size) {
    const Index count = std::min(batch_size, n - start);
    make_batch(data,
               indices.subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(count)),
               batch);
    nn::phase_a_representations(model, batch, reps);
    for (Index l = 0; l < layers; ++l) {
      const auto k = static_cast<std::size_t>(model.omega_index(l));
      nn::split_heads_into(reps[static_cast<std::size_t>(l)], H, X[k],
                           slot[static_cast<std::size_t>(l)] * H * n + start, n);
    }
  }
  for (Index l = 0; l < layers; ++l) {
    auto& y = labels[static_cast<std::size_t>(model.omega_index(l))];
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < n; ++i)
        y.push_back(data.labels[static_cast<std::size_t>(indices[static_cast<std::size_t>(i)])]);
  }
}

namespace detail {

/// `count` distinct indices of [0, n) drawn uniformly from `rng` (all of them when count ≥ n),
/// in increasing order.
inline std::vector<Index> subsample_indices(Index n, Index count, Rng& rng) {
  std::vector<Index> all(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
  if (count <= 0 || count >= n) return all;
  partial_shuffle(std::span<Index>(all), static_cast<std::size_t>(count), rng);
  all.resize(static_cast<std::size_t>(count));
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace detail

}  // namespace coulomb::train
