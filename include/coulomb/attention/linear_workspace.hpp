// SPDX-License-Identifier: MIT
/// @file attention/linear_workspace.hpp
/// @brief The buffers of linear attention: the key sums Sz = Σ_j e^{−B} φ(k_j) [v_jᵀ, 1] with
/// their shift B, the per-block buffers, and LinearAttentionWorkspace, which holds them all
/// between calls (docs/attention.md, "Workspace").
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "../core/detail_products.hpp"
#include "../features/feature_map.hpp"
#include "layout.hpp"

namespace coulomb {

template <FeatureMap Map>
class LinearAttention;

namespace detail {

/// Key sums of a run of keys: Sz = Σ_j e^{−shift} φ(k_j) [v_jᵀ, 1] (D × (d_v+1)), where every
/// φ(k_j) is the unbiased feature; shift = −∞ means "no key yet" (Sz = 0).
template <typename Scalar>
struct KeyState {
  Matrix<Scalar> sz;
  Scalar shift = -std::numeric_limits<Scalar>::infinity();

  void clear(Index rows, Index cols) {
    sz.setZero(rows, cols);
    shift = -std::numeric_limits<Scalar>::infinity();
  }

  /// Brings the state to the shift max(shift, b) and returns e^{b − new shift}, the factor of
  /// a block whose features carry the shift b (b finite).
  Scalar absorb(Scalar b) {
    if (shift == -std::numeric_limits<Scalar>::infinity()) {
      shift = b;
      return Scalar(1);
    }
    if (b > shift) {
      sz *= std::exp(shift - b);
      shift = b;
      return Scalar(1);
    }
    return std::exp(b - shift);
  }

  /// this ⊕ other: the key sums of both runs, at the larger shift.
  void merge(const KeyState& other) {
    if (other.shift == -std::numeric_limits<Scalar>::infinity()) return;
    const Scalar alpha = absorb(other.shift);
    sz += alpha * other.sz;
  }
};

/// e^{a − b} for a <= b, with e^{−∞ − (−∞)} = 1.
template <typename Scalar>
Scalar exp_difference(Scalar a, Scalar b) {
  return a == b ? Scalar(1) : std::exp(a - b);
}

/// Buffers of one block of rows.
template <typename Scalar>
struct BlockBuffers {
  Matrix<Scalar> phi_q;              // C × D
  Matrix<Scalar> phi_k;              // C × D
  Matrix<Scalar> vx;                 // C × (d_v+1): [V, 1]
  Matrix<Scalar> numden;             // C × (d_v+1): [numerators, denominator]
  Matrix<Scalar> gx;                 // C × (d_v+1): [∂L/∂num, ∂L/∂den]
  Matrix<Scalar> dphi;               // C × D
  Matrix<Scalar> dx;                 // C × d_k
  BackwardWorkspace<Scalar> map_ws;  // the feature map's ∂L/∂Z, C × m
  Matrix<Scalar> a;                  // C × C (causal): A = (Φ_Q Φ_Kᵀ) ⊙ E, lower triangle
  Matrix<Scalar> w;       // C × C (causal): W = ([dnum, dden] [V, 1]ᵀ) ⊙ E, lower triangle
  Matrix<Scalar> e;       // C × C (causal): E_ij = e^{s_j − M_i}, lower triangle
  Matrix<Scalar> scaled;  // C × (d_v+1) (causal): rows of [V, 1] or of gx times a factor
  Vector<Scalar> log_scale;
  Vector<Scalar> factor;
  Vector<Scalar> inv_den;
  Vector<Scalar> prefix;  // causal: M_i, the shift of query i
  Vector<Scalar> rfac;    // causal: r_i = e^{B − M_i}, the factor of the incoming state
};

/// The features of one block kept from a forward for the backward
/// (AttentionOptions::keep_features). The matrices are swapped with the block buffers, never
/// copied.
template <typename Scalar>
struct KeptBlock {
  Matrix<Scalar> phi_q;      // n × D: Φ(s·Q) with per-row shifts
  Matrix<Scalar> phi_k;      // n × D: Φ(s·K); non-causal at the block's shift, padded rows 0
  Scalar shift = 0;          // non-causal: the block's key shift b (−∞: no real key)
  Vector<Scalar> log_scale;  // causal: the keys' shifts per row (−∞ at padding)
  Matrix<Scalar> a;          // causal: the intra-block weights A (when any_key)
  Matrix<Scalar> state;      // causal: the key sums Sz entering the block
  bool any_key = false;      // causal: whether the block has a real key
};

/// The small operands of one non-causal task packed for the product kernel
/// (core/detail_products.hpp): the key sums Sz and their gradient ∂L/∂Sz, as each product
/// reads them.
template <typename Scalar>
struct TaskPacks {
  PackedOperand<Scalar> sz;     // Sz (D × (d_v+1)): [num, den] = Φ_Q Sz
  PackedOperand<Scalar> sz_t;   // Szᵀ: dΦ_Q = gx Szᵀ
  PackedOperand<Scalar> dsz_t;  // ∂L/∂Szᵀ: dΦ_K = α [V, 1] ∂L/∂Szᵀ
  PackedOperand<Scalar> dsz_num;  // ∂L/∂S, the first d_v columns of ∂L/∂Sz: dV = α Φ_K ∂L/∂S
};

/// Per-thread buffers.
template <typename Scalar>
struct LinearScratch {
  BlockBuffers<Scalar> full;  // blocks of C rows
  BlockBuffers<Scalar> tail;  // the last, shorter block (so that no buffer changes size)
  Matrix<Scalar> domega_block;
  std::vector<Matrix<Scalar>> domega;  // per feature map
  KeyState<Scalar> state;
  Matrix<Scalar> dsz;
};

/// Everything a LinearAttentionWorkspace holds.
template <typename Scalar>
struct LinearWorkspaceData {
  std::vector<LinearScratch<Scalar>> scratch;  // per thread
  std::vector<KeyState<Scalar>> saved;         // per task: non-causal key sums
  std::vector<TaskPacks<Scalar>> packs;        // per task: non-causal sums packed
  std::vector<KeyState<Scalar>> parts;         // per part: local key sums
  std::vector<KeyState<Scalar>> pieces;        // key sums of the pieces of the parts
  std::vector<KeyState<Scalar>> incoming;      // per part: key sums of the earlier parts
  std::vector<Matrix<Scalar>> part_grad;       // per part: gradient sums
  std::vector<Matrix<Scalar>> part_grad_in;    // per part: gradient sums of later parts
  std::vector<Scalar> part_ref;                // reference shift of part_grad
  std::vector<Scalar> part_ref_in;             // reference shift of part_grad_in
  std::vector<char> part_has_in;
  std::vector<Matrix<Scalar>> piece_grad;  // gradient sums of the pieces of the parts
  std::vector<Scalar> piece_ref;
  std::vector<char> piece_has;
  Matrix<Scalar> inv_den;      // L × tasks (causal backward): 1 / denominators
  Matrix<Scalar> rfac;         // L × tasks (causal backward): r_i
  Matrix<Scalar> block_shift;  // blocks × tasks (causal backward): state shift entering a block
  std::vector<KeptBlock<Scalar>> kept;  // tasks × blocks (keep_features)
  ForwardRecord forward;                // the last non-causal forward, whose key sums are in saved
  bool kept_valid = false;              // kept holds the features of the last forward
};

}  // namespace detail

/// Reusable buffers of LinearAttention (for any feature map of scalar type `Scalar`). Once a
/// workspace has seen a call of a given shape, later calls of that shape allocate nothing in
/// the attention code. A workspace also carries the key sums of the last non-causal forward,
/// which `backward` uses. One workspace per concurrent caller.
template <RealScalar Scalar>
class LinearAttentionWorkspace {
 public:
  /// An empty workspace; the first call of each shape sizes it.
  LinearAttentionWorkspace() = default;

 private:
  template <FeatureMap Map>
  friend class LinearAttention;

  detail::LinearWorkspaceData<Scalar> data_;
};

}  // namespace coulomb
