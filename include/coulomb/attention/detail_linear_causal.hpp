// SPDX-License-Identifier: MIT
/// @file attention/detail_linear_causal.hpp
/// @brief Internal: causal linear attention of one task, forward, by prefix sums
/// (docs/attention.md, "Blocks and GEMMs", "Stabilizer").
///
/// Block c of C rows sees the state Sz of the blocks before it (inter-block, a GEMM) and the
/// lower triangle of its own keys (intra-block):
///   [num, den]_i = r_i Φ_Q,i Sz + Σ_{j<=i} A_ij [v_j, 1],  A_ij = (Φ_Q,i · Φ_K,j) E_ij,
/// with the key shifts s_j, the query shift M_i = max(B, max_{j<=i} s_j), r_i = e^{B − M_i}
/// and E_ij = e^{s_j − M_i} (every factor at most 1), B the shift of the incoming state.
/// With several parts per task, the key sums entering each part come from a prefix merge.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "../core/detail_products.hpp"
#include "../core/exp_kernels.hpp"
#include "../core/parallel.hpp"
#include "detail_linear_blocks.hpp"
#include "linear_workspace.hpp"

namespace coulomb::detail {

/// The shifts of a causal block whose keys are mapped (map_keys_per_row) and whose incoming
/// state has shift B: M_i = max(B, max_{j<=i} s_j) (query i's shift, shared by all of its
/// keys), r_i = e^{B − M_i}, and E_ij = e^{s_j − M_i} for j <= i (0 for padded keys).
/// Returns the shift after the block, M_{n−1}.
template <typename Scalar>
Scalar causal_shifts(Index n, Scalar B, bool any_key, BlockBuffers<Scalar>& buf) {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  buf.prefix.resize(n);
  buf.rfac.resize(n);
  Scalar M = B;
  for (Index i = 0; i < n; ++i) {
    M = std::max(M, buf.log_scale(i));
    buf.prefix(i) = M;
    buf.rfac(i) = M == neg_inf ? Scalar(0) : exp_difference(B, M);
  }
  if (any_key) {
    buf.e.resize(n, n);
    for (Index j = 0; j < n; ++j) {
      auto col = buf.e.col(j).tail(n - j);
      const Scalar sj = buf.log_scale(j);
      if (sj == neg_inf)
        col.setZero();  // a padded key; s_j − M_i would be NaN where M_i is −∞ too
      else
        col.array() = exp_flushed(sj - buf.prefix.tail(n - j).array());
    }
  }
  return M;
}

/// out = lower(X Yᵀ) ⊙ E (n × n, zero above the diagonal), E = buf.e, X and Y with n rows.
/// Yᵀ is read in place. The product runs in strips of 16 columns from the strip's first row
/// down, skipping the squares above the diagonal (3/8 of the square at n = 64).
template <typename Scalar>
void triangle_product_times_e(Index n, const Matrix<Scalar>& X, const Matrix<Scalar>& Y,
                              const BlockBuffers<Scalar>& buf, Matrix<Scalar>& out) {
  constexpr Index strip = 16;
  out.resize(n, n);
  for (Index j0 = 0; j0 < n; j0 += strip) {
    direct_product_transposed(X.data() + j0, n, n - j0, X.cols(), Y.data() + j0, n,
                              std::min(strip, n - j0), out.data() + j0 + j0 * n, n,
                              ProductInit::zero);
  }
  for (Index j = 0; j < n; ++j) {
    out.col(j).head(j).setZero();
    out.col(j).tail(n - j).array() *= buf.e.col(j).tail(n - j).array();
  }
}

/// buf.a = lower((Φ_Q Φ_Kᵀ) ⊙ E).
template <typename Scalar>
void intra_block_weights(Index n, BlockBuffers<Scalar>& buf) {
  triangle_product_times_e(n, buf.phi_q, buf.phi_k, buf, buf.a);
}

/// Exchanges a block's features and key shifts between the block buffers and a kept block.
template <typename Scalar>
void swap_features(BlockBuffers<Scalar>& buf, KeptBlock<Scalar>& kept) noexcept {
  buf.phi_q.swap(kept.phi_q);
  buf.phi_k.swap(kept.phi_k);
  buf.log_scale.swap(kept.log_scale);
}

/// The features of rows [r0, r0+n) and their key shifts into buf: from `kept` (the forward's,
/// swapped in) or mapped when it is null. Returns whether the block has a real key.
template <typename Map>
bool block_features(const LinearBlocks<Map>& ops, const LinearTask<typename Map::Scalar>& tk,
                    Index r0, Index n, BlockBuffers<typename Map::Scalar>& buf,
                    KeptBlock<typename Map::Scalar>* kept) {
  if (kept) {
    swap_features(buf, *kept);
    return kept->any_key;
  }
  const bool any_key = ops.map_keys_per_row(tk, r0, n, buf);
  ops.map_queries(tk, r0, n, buf);
  return any_key;
}

/// One causal block with the state st (the blocks before, at shift st.shift) left unchanged:
/// buf.numden = [num, den] of rows [r0, r0+n), and buf.phi_q, phi_k, vx, e, a, log_scale,
/// prefix, rfac for later use. Returns the shift after the block; *any_key tells whether the
/// block has a real key.
template <typename Map>
typename Map::Scalar causal_block(const LinearBlocks<Map>& ops,
                                  const LinearTask<typename Map::Scalar>& tk,
                                  const LinearPlan& plan, Index r0, Index n,
                                  BlockBuffers<typename Map::Scalar>& buf,
                                  const KeyState<typename Map::Scalar>& st, bool* any_key) {
  *any_key = block_features(ops, tk, r0, n, buf, nullptr);
  const auto after = causal_shifts(n, st.shift, *any_key, buf);
  const Index cols = plan.dims.dv + 1;
  buf.numden.resize(n, cols);
  direct_product(buf.phi_q.data(), n, n, plan.D, st.sz.data(), plan.D, cols, buf.numden.data(), n,
                 ProductInit::zero);
  buf.numden.array().colwise() *= buf.rfac.array();
  if (*any_key) {
    ops.load_values(tk, r0, n, plan.dims.dv, buf);
    intra_block_weights(n, buf);
    direct_product(buf.a.data(), n, n, n, buf.vx.data(), n, cols, buf.numden.data(), n,
                   ProductInit::accumulate);
  }
  return after;
}

/// buf.factor = f with f_j = e^{s_j − B'} (0 for padding), the factors of the block's keys in
/// the state at shift B' = `after`.
template <typename Scalar>
void key_factors(Index n, Scalar after, BlockBuffers<Scalar>& buf) {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  buf.factor.resize(n);
  for (Index j = 0; j < n; ++j)
    buf.factor(j) = buf.log_scale(j) == neg_inf ? Scalar(0) : std::exp(buf.log_scale(j) - after);
}

/// st ← the key sums including the block: Sz ← e^{B − B'} Sz + Φ_Kᵀ (f ⊙ [V, 1]), B' = `after`.
template <typename Scalar>
void causal_update_state(Index n, Scalar after, BlockBuffers<Scalar>& buf, KeyState<Scalar>& st) {
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  if (after == neg_inf) return;  // no real key so far
  key_factors(n, after, buf);
  if (st.shift != neg_inf && st.shift != after) st.sz *= std::exp(st.shift - after);
  buf.scaled = buf.vx.array().colwise() * buf.factor.array();
  inner_product(buf.phi_k.data(), n, buf.scaled.data(), n, n, st.sz.rows(), st.sz.cols(),
                st.sz.data(), st.sz.rows(), ProductInit::accumulate);
  st.shift = after;
}

/// Key sums that enter each part: ws.incoming[p] = ⊕ of the parts before p. The key sums of
/// parts 0 … P−2 are split into P pieces each, so that all threads share the work.
template <typename Map>
void prefix_key_states(const LinearBlocks<Map>& ops, const LinearTask<typename Map::Scalar>& tk,
                       const LinearPlan& plan, LinearWorkspaceData<typename Map::Scalar>& ws) {
  const Index P = plan.parts;
  const Index cols = plan.dims.dv + 1;
  const auto items = static_cast<std::size_t>((P - 1) * P);
  if (ws.pieces.size() < items) ws.pieces.resize(items);
  parallel_for((P - 1) * P, plan.threads, [&](Index i, int th) {
    auto& local = ws.pieces[static_cast<std::size_t>(i)];
    local.shift = LinearBlocks<Map>::neg_inf;  // accumulate_keys sizes and fills the sums
    const auto [c0, c1] = piece_range(plan, i / P, i % P, P);
    ops.accumulate_keys(tk, plan, c0, c1, ws.scratch[static_cast<std::size_t>(th)], local);
  });
  ws.incoming[0].clear(plan.D, cols);
  for (Index p = 1; p < P; ++p) {
    auto& in = ws.incoming[static_cast<std::size_t>(p)];
    in = ws.incoming[static_cast<std::size_t>(p - 1)];
    for (Index q = 0; q < P; ++q) in.merge(ws.pieces[static_cast<std::size_t>((p - 1) * P + q)]);
  }
}

/// Records what the backward of task t needs of block c (rows [r0, r0+n)), with st the state
/// entering it: its shift, and 1/den and r of the block's rows.
template <typename Scalar>
void record_block(LinearWorkspaceData<Scalar>& ws, Index t, Index c, Index r0, Index n,
                  const BlockBuffers<Scalar>& buf, const KeyState<Scalar>& st) {
  ws.block_shift(c, t) = st.shift;
  ws.inv_den.col(t).segment(r0, n) = buf.inv_den;
  ws.rfac.col(t).segment(r0, n) = buf.rfac;
}

/// The forward sweep of a task, shared by the forward and the first sweep of the backward
/// without kept features:
/// for every block, in order within each part (the parts in parallel, each from the key sums
/// entering it), causal_block and the inverse denominators, then
/// on_block(c, r0, n, buf, sc, st, any_key) with st still the state entering the block, then
/// the state update. With `kept` (the task's kept blocks), each block's features and intra-block
/// weights are kept there.
template <typename Map, typename OnBlock>
void causal_sweep(const LinearBlocks<Map>& ops, const LinearTask<typename Map::Scalar>& tk,
                  const LinearPlan& plan, LinearWorkspaceData<typename Map::Scalar>& ws, int thread,
                  KeptBlock<typename Map::Scalar>* kept, OnBlock&& on_block) {
  using Scalar = typename Map::Scalar;
  const Index dv = plan.dims.dv;
  if (plan.parts > 1) prefix_key_states(ops, tk, plan, ws);
  run_parts(plan, thread, [&](Index p, int th) {
    auto& sc = ws.scratch[static_cast<std::size_t>(th)];
    KeyState<Scalar>& st = sc.state;
    if (plan.parts == 1)
      st.clear(plan.D, dv + 1);
    else
      st = ws.incoming[static_cast<std::size_t>(p)];
    for_each_block(plan, plan.part_begin(p), plan.part_begin(p + 1), sc,
                   [&](Index c, Index r0, Index n, BlockBuffers<Scalar>& buf) {
                     bool any_key = false;
                     const Scalar after = causal_block(ops, tk, plan, r0, n, buf, st, &any_key);
                     ops.invert_denominators(tk, r0, buf.numden.col(dv), buf);
                     on_block(c, r0, n, buf, sc, st, any_key);
                     if (any_key) causal_update_state(n, after, buf, st);
                     if (kept) {
                       KeptBlock<Scalar>& kb = kept[c];
                       swap_features(buf, kb);
                       if (any_key) buf.a.swap(kb.a);
                       kb.any_key = any_key;
                     }
                   });
  });
}

/// Forward of task t; with `kept` (the task's kept blocks), its features and intra-block weights
/// are kept there with the key sums entering each block, and the rest of what the backward
/// needs recorded (record_block).
template <typename Map, typename OutBlock>
void causal_forward_task(const LinearBlocks<Map>& ops, const LinearTask<typename Map::Scalar>& tk,
                         const LinearPlan& plan, LinearWorkspaceData<typename Map::Scalar>& ws,
                         int thread, Index t, KeptBlock<typename Map::Scalar>* kept,
                         OutBlock& out) {
  const Index dv = plan.dims.dv;
  causal_sweep(ops, tk, plan, ws, thread, kept,
               [&](Index c, Index r0, Index n, auto& buf, auto&, const auto& st, bool) {
                 ops.write_outputs(buf, dv, out.middleRows(r0, n));
                 if (kept) {
                   record_block(ws, t, c, r0, n, buf, st);
                   kept[c].state = st.sz;
                 }
               });
}

}  // namespace coulomb::detail
