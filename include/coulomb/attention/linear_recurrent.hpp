// SPDX-License-Identifier: MIT
/// @file attention/linear_recurrent.hpp
/// @brief The recurrent form of causal linear attention, for decoding one token at a time
/// (docs/attention.md, "Recurrent decoding"): per (sequence, head) the state
///   S_t = S_{t−1} + φ(k_t) v_tᵀ,  z_t = z_{t−1} + φ(k_t),  out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t,
/// stored as Sz = [S, z] (D × (d_v+1)) with a shift, O(D·d_v) memory whatever the position.
/// Katharopoulos et al., *Transformers are RNNs*, ICML 2020 (the recurrent form).
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "../features/feature_map.hpp"
#include "detail_linear_blocks.hpp"
#include "layout.hpp"
#include "linear_workspace.hpp"

namespace coulomb {

namespace detail {

/// Everything a LinearAttentionState holds.
template <typename Scalar>
struct DecodingState {
  Index batch = 0;
  Index position = 0;
  std::vector<KeyState<Scalar>> keys;  // per (sequence, head), b·H + h
  Matrix<Scalar> phi_q, phi_k, numden;
  Vector<Scalar> log_scale;
};

/// One decoding step of every sequence (inputs checked by the caller; `valid` or nullptr):
/// adds the token's key to Sz at its own shift (rescaling Sz when the shift grows) and writes
/// its output φ(q)ᵀ S / φ(q)ᵀ z, or 0 for padding and for a denominator below the smallest
/// normal number.
template <typename Map>
void recurrent_step(const LinearBlocks<Map>& ops, const AttentionDims& dims,
                    const Eigen::Ref<const Matrix<typename Map::Scalar>>& q,
                    const Eigen::Ref<const Matrix<typename Map::Scalar>>& k,
                    const Eigen::Ref<const Matrix<typename Map::Scalar>>& v, const bool* valid,
                    Matrix<typename Map::Scalar>& out, DecodingState<typename Map::Scalar>& state) {
  using Scalar = typename Map::Scalar;
  constexpr bool stabilized = LinearBlocks<Map>::stabilized;
  const Index B = state.batch;
  const Index H = dims.heads;
  const Index dk = dims.dk;
  const Index dv = dims.dv;
  out.resize(B, H * dv);
  const Scalar tiny = std::numeric_limits<Scalar>::min();
  const Scalar s = ops.scale();
  for (Index h = 0; h < H; ++h) {
    const Map& fm = ops.map_of_head(h);
    const Stabilizer stab = stabilized ? Stabilizer::per_row : Stabilizer::none;
    fm.map(s * q.middleCols(h * dk, dk), state.phi_q, stab);
    fm.map(s * k.middleCols(h * dk, dk), state.phi_k, stab, state.log_scale);
    if constexpr (stabilized) LinearBlocks<Map>::check_key_shifts(valid, state.log_scale);
    for (Index b = 0; b < B; ++b) {
      auto o = out.block(b, h * dv, 1, dv);
      if (valid && !valid[b]) {
        o.setZero();
        continue;
      }
      KeyState<Scalar>& ks = state.keys[static_cast<std::size_t>(b * H + h)];
      const Scalar alpha = ks.absorb(state.log_scale(b));
      ks.sz.leftCols(dv).noalias() +=
          (alpha * state.phi_k.row(b).transpose()) * v.block(b, h * dv, 1, dv);
      ks.sz.col(dv) += alpha * state.phi_k.row(b).transpose();
      state.numden.noalias() = state.phi_q.row(b) * ks.sz;
      const Scalar den = state.numden(0, dv);
      const Scalar inv = std::abs(den) >= tiny ? Scalar(1) / den : Scalar(0);
      o = inv * state.numden.leftCols(dv);
    }
  }
  ++state.position;
}

}  // namespace detail

/// Running state of causal decoding for a batch: per (sequence, head) the key sums Sz
/// (D × (d_v+1)) and their shift. Filled by LinearAttention::reset and LinearAttention::step.
template <RealScalar Scalar>
class LinearAttentionState {
 public:
  /// Sequences in the batch.
  Index batch() const noexcept { return data_.batch; }
  /// Tokens consumed since reset().
  Index position() const noexcept { return data_.position; }
  /// Key sums held, in scalars: B·H·(D·(d_v + 1) + 1) once the first token is in, whatever the
  /// position (the shift of each (sequence, head) counts as one).
  Index num_scalars() const noexcept {
    Index total = 0;
    for (const auto& k : data_.keys) total += k.sz.size() + (k.sz.size() > 0 ? 1 : 0);
    return total;
  }

 private:
  template <FeatureMap Map>
  friend class LinearAttention;

  detail::DecodingState<Scalar> data_;
};

}  // namespace coulomb
