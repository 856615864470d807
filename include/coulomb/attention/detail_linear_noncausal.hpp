// SPDX-License-Identifier: MIT
/// @file attention/detail_linear_noncausal.hpp
/// @brief Internal: non-causal linear attention of one task, forward and backward
/// (docs/attention.md, "Blocks and GEMMs", "Backward").
///
///   forward:  Sz = Σ_j φ(k_j) [v_jᵀ, 1] (per key block, at the largest shift B so far),
///             [num, den]_i = φ(q_i)ᵀ Sz, out_i = num_i / den_i;
///   backward: dΦ_Q = gx Szᵀ, ∂L/∂Sz = Σ_i Φ_Q,iᵀ gx_i, dΦ_K = α [V, 1] (∂L/∂Sz)ᵀ,
///             dV = α Φ_K ∂L/∂S, with gx_i = [∂L/∂num_i, ∂L/∂den_i] and α = e^{b − B} for a
///             key block of shift b.
#pragma once

#include <cstddef>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "../core/detail_products.hpp"
#include "../core/parallel.hpp"
#include "detail_linear_blocks.hpp"
#include "linear_workspace.hpp"

namespace coulomb::detail {

/// The kept blocks of task t, or nullptr when the forward does not keep features.
template <typename Scalar>
KeptBlock<Scalar>* kept_blocks(LinearWorkspaceData<Scalar>& ws, const LinearPlan& plan, Index t,
                               bool keeps_features) {
  return keeps_features ? ws.kept.data() + t * plan.blocks : nullptr;
}

/// Forward of task t: the key sums into ws.saved[t] (kept for the backward), then the outputs.
template <typename Map, typename OutBlock>
void noncausal_forward_task(const LinearBlocks<Map>& ops,
                            const LinearTask<typename Map::Scalar>& tk, const LinearPlan& plan,
                            LinearWorkspaceData<typename Map::Scalar>& ws, int thread, Index t,
                            KeptBlock<typename Map::Scalar>* kept, OutBlock& out) {
  using Buffers = BlockBuffers<typename Map::Scalar>;
  const Index dv = plan.dims.dv;
  auto& total = ws.saved[static_cast<std::size_t>(t)];
  if (plan.parts == 1) {
    total.shift = LinearBlocks<Map>::neg_inf;  // accumulate_keys sizes and fills the sums
    ops.accumulate_keys(tk, plan, 0, plan.blocks, ws.scratch[static_cast<std::size_t>(thread)],
                        total, kept);
  } else {
    parallel_for(plan.parts, plan.threads, [&](Index p, int th) {
      auto& local = ws.parts[static_cast<std::size_t>(p)];
      local.shift = LinearBlocks<Map>::neg_inf;  // accumulate_keys sizes and fills the sums
      ops.accumulate_keys(tk, plan, plan.part_begin(p), plan.part_begin(p + 1),
                          ws.scratch[static_cast<std::size_t>(th)], local, kept);
    });
    total = ws.parts[0];
    for (Index p = 1; p < plan.parts; ++p) total.merge(ws.parts[static_cast<std::size_t>(p)]);
  }
  auto& packs = ws.packs[static_cast<std::size_t>(t)];
  packs.sz.pack(total.sz);
  run_parts(plan, thread, [&](Index p, int th) {
    auto& sc = ws.scratch[static_cast<std::size_t>(th)];
    for_each_block(plan, plan.part_begin(p), plan.part_begin(p + 1), sc,
                   [&](Index c, Index r0, Index n, Buffers& buf) {
                     ops.map_queries(tk, r0, n, buf);
                     buf.numden.resize(n, dv + 1);
                     packs.sz.product(buf.phi_q, buf.numden);
                     ops.invert_denominators(tk, r0, buf.numden.col(dv), buf);
                     ops.write_outputs(buf, dv, out.middleRows(r0, n));
                     if (kept) buf.phi_q.swap(kept[c].phi_q);
                   });
  });
}

/// Backward of task t from the key sums ws.saved[t] of its forward; with `kept`, the forward's
/// features (swapped in and back out, so that another backward of the same forward finds them
/// again), else the features mapped again.
template <typename Map>
void noncausal_backward_task(const LinearBlocks<Map>& ops,
                             const LinearTask<typename Map::Scalar>& tk, const LinearPlan& plan,
                             LinearWorkspaceData<typename Map::Scalar>& ws, int thread, Index t,
                             KeptBlock<typename Map::Scalar>* kept,
                             TaskGradients<typename Map::Scalar>& views) {
  using Scalar = typename Map::Scalar;
  using Buffers = BlockBuffers<Scalar>;
  const Index dv = plan.dims.dv;
  const KeyState<Scalar>& st = ws.saved[static_cast<std::size_t>(t)];
  auto& packs = ws.packs[static_cast<std::size_t>(t)];
  packs.sz_t.pack_transposed(st.sz);

  // Queries: dΦ_Q = [dnum, dden] Szᵀ, and ∂L/∂Sz = Σ_i Φ_Q,iᵀ [dnum_i, dden_i].
  run_parts(plan, thread, [&](Index p, int th) {
    auto& sc = ws.scratch[static_cast<std::size_t>(th)];
    Matrix<Scalar>& dsz = plan.parts == 1 ? sc.dsz : ws.part_grad[static_cast<std::size_t>(p)];
    dsz.setZero(plan.D, dv + 1);
    for_each_block(plan, plan.part_begin(p), plan.part_begin(p + 1), sc,
                   [&](Index c, Index r0, Index n, Buffers& buf) {
                     if (kept)
                       buf.phi_q.swap(kept[c].phi_q);
                     else
                       ops.map_queries(tk, r0, n, buf);
                     buf.factor.noalias() = buf.phi_q * st.sz.col(dv);  // denominators
                     ops.invert_denominators(tk, r0, buf.factor, buf);
                     ops.output_gradients(views.G.middleRows(r0, n), views.out.middleRows(r0, n),
                                          buf);
                     buf.dphi.resize(n, plan.D);
                     packs.sz_t.product(buf.gx, buf.dphi);
                     inner_product(buf.phi_q.data(), n, buf.gx.data(), n, n, plan.D, dv + 1,
                                   dsz.data(), plan.D, ProductInit::accumulate);
                     ops.map_backward(tk, tk.q.middleRows(r0, n), buf.phi_q, buf, sc,
                                      views.dQ.middleRows(r0, n));
                     if (kept) buf.phi_q.swap(kept[c].phi_q);
                   });
  });
  const Matrix<Scalar>* dsz_total = &ws.scratch[static_cast<std::size_t>(thread)].dsz;
  if (plan.parts > 1) {
    for (Index p = 1; p < plan.parts; ++p)
      ws.part_grad[0] += ws.part_grad[static_cast<std::size_t>(p)];
    dsz_total = &ws.part_grad[0];
  }
  const Matrix<Scalar>& dsz = *dsz_total;
  packs.dsz_t.pack_transposed(dsz);
  packs.dsz_num.pack(dsz.data(), Index{1}, dsz.rows(), dsz.rows(), dv);

  // Keys: dΦ_K = α [V, 1] ∂L/∂Szᵀ, dV = α Φ_K ∂L/∂S, with α = e^{b − B} for a block of
  // shift b under the total shift B.
  run_parts(plan, thread, [&](Index p, int th) {
    auto& sc = ws.scratch[static_cast<std::size_t>(th)];
    for_each_block(plan, plan.part_begin(p), plan.part_begin(p + 1), sc,
                   [&](Index c, Index r0, Index n, Buffers& buf) {
                     auto dk_rows = views.dK.middleRows(r0, n);
                     auto dv_rows = views.dV.middleRows(r0, n);
                     // Kept key features have their padded rows at 0, recomputed ones at their
                     // own shift: either way those rows get dΦ = 0 and contribute nothing.
                     const Scalar b = kept ? kept[c].shift : ops.map_keys(tk, r0, n, buf, false);
                     if (b == LinearBlocks<Map>::neg_inf) {
                       dk_rows.setZero();
                       dv_rows.setZero();
                       return;
                     }
                     if (kept) buf.phi_k.swap(kept[c].phi_k);
                     const Scalar alpha = exp_difference(b, st.shift);
                     ops.load_values(tk, r0, n, dv, buf);
                     buf.dphi.resize(n, plan.D);
                     packs.dsz_t.product(buf.vx, buf.dphi);
                     packs.dsz_num.product(buf.phi_k, dv_rows);
                     if (alpha != Scalar(1)) {
                       buf.dphi *= alpha;
                       dv_rows *= alpha;
                     }
                     ops.zero_padded_rows(tk, r0, buf.dphi);
                     ops.zero_padded_rows(tk, r0, dv_rows);
                     ops.map_backward(tk, tk.k.middleRows(r0, n), buf.phi_k, buf, sc, dk_rows);
                     if (kept) buf.phi_k.swap(kept[c].phi_k);
                   });
  });
}

}  // namespace coulomb::detail
