// SPDX-License-Identifier: MIT
/// @file attention/detail_linear_causal_backward.hpp
/// @brief Internal: the backward of causal linear attention of one task (docs/attention.md,
/// "Backward").
///
/// The state Sz_c entering block c is a prefix sum, and its gradient a suffix sum:
///   sweep A, forward in the blocks, with Sz_c (the forward's, recorded with keep_features, or
///     the running state again):
///     dΦ_Q = diag(r) gx Sz_cᵀ + W Φ_K,  W = lower(gx [V, 1]ᵀ) ⊙ E;
///   sweep B, backward in the blocks, carrying acc = ∂L/∂Sz of the later blocks:
///     dΦ_K = diag(f) [V, 1] accᵀ + Wᵀ Φ_Q,  dV = diag(f) Φ_K acc_S + Aᵀ dnum,
///     acc ← e^{B_c − B_{c+1}} acc + Φ_Qᵀ diag(r) gx,
/// with gx_i = [∂L/∂num_i, ∂L/∂den_i] and f_j = e^{s_j − B_{c+1}}.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "../core/parallel.hpp"
#include "detail_linear_blocks.hpp"
#include "detail_linear_causal.hpp"
#include "linear_workspace.hpp"

namespace coulomb::detail {

/// buf.w = lower([dnum, dden] [V, 1]ᵀ) ⊙ E.
template <typename Scalar>
void weighted_value_gradients(Index n, BlockBuffers<Scalar>& buf) {
  triangle_product_times_e(n, buf.gx, buf.vx, buf, buf.w);
}

/// Moves acc (at shift ref, the state after this block) to the shift B entering the block and
/// adds the block's queries: acc ← e^{B − ref} acc + Φ_Qᵀ diag(r) [dnum, dden]; ref ← B.
template <typename Scalar>
void accumulate_state_gradient(BlockBuffers<Scalar>& buf, Scalar B, Matrix<Scalar>& acc,
                               Scalar& ref, bool& has) {
  buf.scaled = buf.gx.array().colwise() * buf.rfac.array();
  const Index n = buf.phi_q.rows();
  ProductInit init = ProductInit::accumulate;
  if (has) {
    const Scalar f = exp_difference(B, ref);
    if (f != Scalar(1)) acc *= f;
  } else {
    acc.resize(buf.phi_q.cols(), buf.scaled.cols());
    init = ProductInit::zero;
    has = true;
  }
  inner_product(buf.phi_q.data(), n, buf.scaled.data(), n, n, acc.rows(), acc.cols(), acc.data(),
                acc.rows(), init);
  ref = B;
}

/// The gradient of the state from the queries after each part (parts > 1; the query features
/// from `kept` when it is not null): parts 1 … P−1 are
/// split into P pieces each; every piece sums its blocks' Φ_Qᵀ diag(r) [dnum, dden] (reference
/// shifts as in sweep B), the pieces give each part's sum, then suffix sums give what enters
/// each part from the parts after it (ws.part_grad_in, ws.part_ref_in, ws.part_has_in).
template <typename Map, typename Col>
void suffix_state_gradients(const LinearBlocks<Map>& ops,
                            const LinearTask<typename Map::Scalar>& tk, const LinearPlan& plan,
                            LinearWorkspaceData<typename Map::Scalar>& ws,
                            const TaskGradients<typename Map::Scalar>& views, const Col& inv_den,
                            const Col& rfac, const Col& block_shift,
                            KeptBlock<typename Map::Scalar>* kept) {
  using Scalar = typename Map::Scalar;
  constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  const Index P = plan.parts;
  const auto items = static_cast<std::size_t>((P - 1) * P);
  if (ws.piece_grad.size() < items) {
    ws.piece_grad.resize(items);
    ws.piece_ref.resize(items);
    ws.piece_has.resize(items);
  }
  parallel_for((P - 1) * P, plan.threads, [&](Index i, int th) {
    const auto ui = static_cast<std::size_t>(i);
    Scalar ref = neg_inf;
    bool has = false;
    const auto [c0, c1] = piece_range(plan, 1 + i / P, i % P, P);
    for_each_block<true>(
        plan, c0, c1, ws.scratch[static_cast<std::size_t>(th)],
        [&](Index c, Index r0, Index n, BlockBuffers<Scalar>& buf) {
          if (kept)
            buf.phi_q.swap(kept[c].phi_q);
          else
            ops.map_queries(tk, r0, n, buf);
          buf.inv_den = inv_den.segment(r0, n);
          buf.rfac = rfac.segment(r0, n);
          ops.output_gradients(views.G.middleRows(r0, n), views.out.middleRows(r0, n), buf);
          accumulate_state_gradient(buf, block_shift(c), ws.piece_grad[ui], ref, has);
          if (kept) buf.phi_q.swap(kept[c].phi_q);
        });
    ws.piece_ref[ui] = ref;
    ws.piece_has[ui] = has ? 1 : 0;
  });
  for (Index p = 1; p < P; ++p) {
    Matrix<Scalar>& acc = ws.part_grad[static_cast<std::size_t>(p)];
    Scalar ref = neg_inf;
    bool has = false;
    for (Index q = P - 1; q >= 0; --q) {
      const auto ui = static_cast<std::size_t>((p - 1) * P + q);
      if (!ws.piece_has[ui]) continue;
      if (has) {
        acc *= exp_difference(ws.piece_ref[ui], ref);
        acc += ws.piece_grad[ui];
      } else {
        acc = ws.piece_grad[ui];
        has = true;
      }
      ref = ws.piece_ref[ui];
    }
    ws.part_ref[static_cast<std::size_t>(p)] = ref;
  }
  ws.part_has_in[static_cast<std::size_t>(P - 1)] = 0;
  for (Index p = P - 2; p >= 0; --p) {
    const auto up = static_cast<std::size_t>(p);
    Matrix<Scalar>& in = ws.part_grad_in[up];
    in = ws.part_grad[up + 1];
    ws.part_ref_in[up] = ws.part_ref[up + 1];
    if (ws.part_has_in[up + 1]) {
      in += exp_difference(ws.part_ref_in[up], ws.part_ref_in[up + 1]) * ws.part_grad_in[up + 1];
    }
    ws.part_has_in[up] = 1;
  }
}

/// dQ of a block (rows [r0, r0+n)) from the key sums S entering it: dΦ_Q = diag(r) gx Sᵀ + W Φ_K,
/// W = lower(gx [V, 1]ᵀ) ⊙ E (into buf.w, with [V, 1] into buf.vx, when the block has a key).
template <typename Map, typename DQ>
void query_gradients(const LinearBlocks<Map>& ops, const LinearTask<typename Map::Scalar>& tk,
                     const LinearPlan& plan, Index r0, Index n,
                     const Matrix<typename Map::Scalar>& S, bool any_key,
                     BlockBuffers<typename Map::Scalar>& buf,
                     LinearScratch<typename Map::Scalar>& sc, DQ&& dQ) {
  const Index dv = plan.dims.dv;
  buf.scaled = buf.gx.array().colwise() * buf.rfac.array();
  buf.dphi.resize(n, plan.D);
  direct_product_transposed(buf.scaled.data(), n, n, dv + 1, S.data(), plan.D, plan.D,
                            buf.dphi.data(), n, ProductInit::zero);
  if (any_key) {
    ops.load_values(tk, r0, n, dv, buf);
    weighted_value_gradients(n, buf);
    direct_product(buf.w.data(), n, n, n, buf.phi_k.data(), n, plan.D, buf.dphi.data(), n,
                   ProductInit::accumulate);
  }
  ops.map_backward(tk, tk.q.middleRows(r0, n), buf.phi_q, buf, sc, dQ);
}

/// dK and dV of a block with a real key, with buf.vx = [V, 1], buf.w = W and buf.a = A, acc
/// (when `has`) at the shift `after` of the state after the block:
///   dΦ_K = diag(f) [V, 1] accᵀ + Wᵀ Φ_Q,  dV = diag(f) Φ_K acc_S + Aᵀ dnum
/// (W and A read in place), then dK through the map.
template <typename Map, typename DK, typename DV>
void key_gradients(const LinearBlocks<Map>& ops, const LinearTask<typename Map::Scalar>& tk,
                   const LinearPlan& plan, Index r0, Index n, typename Map::Scalar after,
                   const Matrix<typename Map::Scalar>& acc, bool has,
                   BlockBuffers<typename Map::Scalar>& buf, LinearScratch<typename Map::Scalar>& sc,
                   DK& dK, DV& dV) {
  const Index dv = plan.dims.dv;
  const Index D = plan.D;
  if (has) {
    key_factors(n, after, buf);
    buf.scaled = buf.vx.array().colwise() * buf.factor.array();
    buf.dphi.resize(n, D);
    direct_product_transposed(buf.scaled.data(), n, n, dv + 1, acc.data(), D, D, buf.dphi.data(), n,
                              ProductInit::zero);
    direct_product(buf.phi_k.data(), n, n, D, acc.data(), D, dv, dV.data(), dV.outerStride(),
                   ProductInit::zero);
    dV.array().colwise() *= buf.factor.array();
  } else {
    buf.dphi.setZero(n, D);
    dV.setZero();
  }
  inner_product(buf.w.data(), n, buf.phi_q.data(), n, n, n, D, buf.dphi.data(), n,
                ProductInit::accumulate);
  inner_product(buf.a.data(), n, buf.gx.data(), n, n, n, dv, dV.data(), dV.outerStride(),
                ProductInit::accumulate);
  ops.zero_padded_rows(tk, r0, buf.dphi);
  ops.zero_padded_rows(tk, r0, dV);
  ops.map_backward(tk, tk.k.middleRows(r0, n), buf.phi_k, buf, sc, dK);
}

/// Backward of task t (column t of ws.inv_den, ws.rfac and ws.block_shift). With `kept` (the
/// task's blocks kept by its forward with the key sums entering each, the forward having also
/// recorded those columns), both sweeps take features, states and intra-block weights from the
/// forward; without, sweep A runs the forward sweep again and records the columns, and
/// sweep B maps again. Both ways do the same arithmetic in the same order.
template <typename Map>
void causal_backward_task(const LinearBlocks<Map>& ops, const LinearTask<typename Map::Scalar>& tk,
                          const LinearPlan& plan, LinearWorkspaceData<typename Map::Scalar>& ws,
                          int thread, Index t, KeptBlock<typename Map::Scalar>* kept,
                          TaskGradients<typename Map::Scalar>& views) {
  using Scalar = typename Map::Scalar;
  using Buffers = BlockBuffers<Scalar>;
  auto inv_den = ws.inv_den.col(t);
  auto rfac = ws.rfac.col(t);
  auto block_shift = ws.block_shift.col(t);
  const Index dv = plan.dims.dv;

  // Sweep A: dΦ_Q, hence dQ, from the state entering each block.
  const auto queries = [&](Index r0, Index n, Buffers& buf, LinearScratch<Scalar>& sc,
                           const Matrix<Scalar>& S, bool any_key) {
    ops.output_gradients(views.G.middleRows(r0, n), views.out.middleRows(r0, n), buf);
    query_gradients(ops, tk, plan, r0, n, S, any_key, buf, sc, views.dQ.middleRows(r0, n));
  };
  if (kept) {
    run_parts(plan, thread, [&](Index p, int th) {
      auto& sc = ws.scratch[static_cast<std::size_t>(th)];
      for_each_block(plan, plan.part_begin(p), plan.part_begin(p + 1), sc,
                     [&](Index c, Index r0, Index n, Buffers& buf) {
                       KeptBlock<Scalar>& kb = kept[c];
                       swap_features(buf, kb);
                       buf.inv_den = inv_den.segment(r0, n);
                       causal_shifts(n, block_shift(c), kb.any_key, buf);
                       queries(r0, n, buf, sc, kb.state, kb.any_key);
                       swap_features(buf, kb);
                     });
    });
  } else {
    causal_sweep(ops, tk, plan, ws, thread, nullptr,
                 [&](Index c, Index r0, Index n, Buffers& buf, LinearScratch<Scalar>& sc,
                     const KeyState<Scalar>& st, bool any_key) {
                   record_block(ws, t, c, r0, n, buf, st);
                   queries(r0, n, buf, sc, st.sz, any_key);
                 });
  }

  if (plan.parts > 1)
    suffix_state_gradients(ops, tk, plan, ws, views, inv_den, rfac, block_shift, kept);

  // Sweep B: acc = ∂L/∂Sz of the later blocks at the shift `ref` of the state after the
  // current block; dΦ_K and dV, hence dK and dV.
  run_parts(plan, thread, [&](Index p, int th) {
    auto& sc = ws.scratch[static_cast<std::size_t>(th)];
    Matrix<Scalar>& acc = sc.dsz;
    Scalar ref = LinearBlocks<Map>::neg_inf;
    bool has = false;
    if (plan.parts > 1 && ws.part_has_in[static_cast<std::size_t>(p)]) {
      acc = ws.part_grad_in[static_cast<std::size_t>(p)];
      ref = ws.part_ref_in[static_cast<std::size_t>(p)];
      has = true;
    }
    for_each_block<true>(
        plan, plan.part_begin(p), plan.part_begin(p + 1), sc,
        [&](Index c, Index r0, Index n, Buffers& buf) {
          auto dk_rows = views.dK.middleRows(r0, n);
          auto dv_rows = views.dV.middleRows(r0, n);
          KeptBlock<Scalar>* kb = kept ? kept + c : nullptr;
          const bool any_key = block_features(ops, tk, r0, n, buf, kb);
          buf.inv_den = inv_den.segment(r0, n);
          ops.output_gradients(views.G.middleRows(r0, n), views.out.middleRows(r0, n), buf);
          const Scalar after = causal_shifts(n, block_shift(c), any_key, buf);
          if (!any_key) {
            dk_rows.setZero();
            dv_rows.setZero();
          } else {
            ops.load_values(tk, r0, n, dv, buf);
            weighted_value_gradients(n, buf);
            if (kb)
              buf.a.swap(kb->a);
            else
              intra_block_weights(n, buf);
            key_gradients(ops, tk, plan, r0, n, after, acc, has, buf, sc, dk_rows, dv_rows);
            if (kb) buf.a.swap(kb->a);
          }
          accumulate_state_gradient(buf, block_shift(c), acc, ref, has);
          if (kb) swap_features(buf, *kb);
        });
  });
}

}  // namespace coulomb::detail
