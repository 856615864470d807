// SPDX-License-Identifier: MIT
/// @file attention/detail_linear_blocks.hpp
/// @brief Internal: the operations on one block of C rows that every form of linear attention
/// shares (features of the queries and keys with their shifts, [V, 1], the inverse
/// denominators, the gradients of the numerators and denominators, the map's backward), and
/// the loops over tasks, parts and blocks (docs/attention.md, "Blocks and GEMMs", "Threads").
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/detail_products.hpp"
#include "../core/error.hpp"
#include "../core/parallel.hpp"
#include "../features/feature_map.hpp"
#include "detail_feature_map_set.hpp"
#include "layout.hpp"
#include "linear_workspace.hpp"

namespace coulomb::detail {

/// A task of linear attention: its views and the index of the feature map of its head.
template <typename Scalar>
struct LinearTask : AttentionTask<Scalar> {
  Index map_index;
};

/// The sizes fixed for one call of linear attention.
struct LinearPlan : AttentionSchedule {
  Index D = 0;  // feature columns
  Index m = 0;  // particles
};

/// The blocks of one task in a backward call: its outputs, their gradients G = ∂L/∂Out, and
/// the gradients the backward fills.
template <typename Scalar>
struct TaskGradients {
  Eigen::Block<const Eigen::Ref<const Matrix<Scalar>>> out, G;
  Eigen::Block<Matrix<Scalar>> dQ, dK, dV;

  TaskGradients(const LinearTask<Scalar>& tk, const AttentionDims& dims,
                const Eigen::Ref<const Matrix<Scalar>>& Out,
                const Eigen::Ref<const Matrix<Scalar>>& dOut, AttentionGradients<Scalar>& grads)
      : out(tk.block_of(Out, dims.dv)),
        G(tk.block_of(dOut, dims.dv)),
        dQ(tk.block_of(grads.dQ, dims.dk)),
        dK(tk.block_of(grads.dK, dims.dk)),
        dV(tk.block_of(grads.dV, dims.dv)) {}
};

/// Runs task_body(t, thread) for every task: tasks in parallel with one part each, or one task
/// after the other with its parts in parallel.
template <typename Body>
void run_tasks(const LinearPlan& plan, Body&& task_body) {
  if (plan.parts == 1) {
    parallel_for(plan.dims.tasks(), plan.threads,
                 [&](Index t, int thread) { task_body(t, thread); });
  } else {
    for (Index t = 0; t < plan.dims.tasks(); ++t) task_body(t, 0);
  }
}

/// Runs part_body(p, thread) for the parts of one task: inline on `thread` when there is one
/// part, in parallel otherwise.
template <typename Body>
void run_parts(const LinearPlan& plan, int thread, Body&& part_body) {
  if (plan.parts == 1)
    part_body(Index(0), thread);
  else
    parallel_for(plan.parts, plan.threads, part_body);
}

/// Blocks [c0, c1) of piece q (of `pieces`) of part p: the part's blocks split evenly.
inline std::pair<Index, Index> piece_range(const LinearPlan& plan, Index p, Index q, Index pieces) {
  const Index b0 = plan.part_begin(p);
  const Index len = plan.part_begin(p + 1) - b0;
  return {b0 + q * len / pieces, b0 + (q + 1) * len / pieces};
}

/// The buffers of sc for a block of n rows (the last, shorter block has its own).
template <typename Scalar>
BlockBuffers<Scalar>& block_buffers(LinearScratch<Scalar>& sc, const LinearPlan& plan, Index n) {
  return n == plan.block ? sc.full : sc.tail;
}

/// Calls body(c, r0, n, buf) for the blocks c of [c0, c1), in order, or in reverse order when
/// `Reverse`: r0 = c·C is the block's first row, n its rows, buf the buffers of sc for n rows.
template <bool Reverse = false, typename Scalar, typename Body>
void for_each_block(const LinearPlan& plan, Index c0, Index c1, LinearScratch<Scalar>& sc,
                    Body&& body) {
  for (Index i = 0; i < c1 - c0; ++i) {
    const Index c = Reverse ? c1 - 1 - i : c0 + i;
    const Index n = plan.rows(c);
    body(c, c * plan.block, n, block_buffers(sc, plan, n));
  }
}

/// The block operations of linear attention over the maps `maps` with input scale s.
template <typename Map>
class LinearBlocks {
 public:
  using Scalar = typename Map::Scalar;
  using MatrixType = Matrix<Scalar>;
  using VectorType = Vector<Scalar>;
  using Task = LinearTask<Scalar>;
  using Buffers = BlockBuffers<Scalar>;
  using Scratch = LinearScratch<Scalar>;
  /// Whether the map honours the Stabilizer, so that shifts are used.
  static constexpr bool stabilized = feature_map_traits<Map>::is_stabilizable;
  static constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();

  LinearBlocks(const FeatureMapSet<Map>& maps, Scalar scale, bool omega_gradient) noexcept
      : maps_(maps), scale_(scale), omega_gradient_(omega_gradient) {}

  /// The index of the feature map of head h.
  Index map_index(Index h) const noexcept { return maps_.size() == 1 ? 0 : h; }
  /// The feature map of head h.
  const Map& map_of_head(Index h) const { return maps_[map_index(h)]; }
  /// The input scale s.
  Scalar scale() const noexcept { return scale_; }

  /// A task of a call: its views and its map.
  Task task(const AttentionTask<Scalar>& views) const { return Task{views, map_index(views.head)}; }

  /// Φ(s·X) into Phi (with the shifts into *log_scale when it is not null). The attention
  /// checked its inputs: with s <= 1, s·X is finite too and maps of coulomb skip that check.
  template <typename Rows>
  void map_rows(const Map& fm, const Rows& X, MatrixType& Phi, Stabilizer stabilizer,
                Vector<Scalar>* log_scale) const {
    const auto sX = scale_ * X;
    if constexpr (requires { fm.map_finite_input(sX, Phi, stabilizer, log_scale); }) {
      if (scale_ <= Scalar(1)) {
        fm.map_finite_input(sX, Phi, stabilizer, log_scale);
        return;
      }
    }
    if (log_scale)
      fm.map(sX, Phi, stabilizer, *log_scale);
    else
      fm.map(sX, Phi, stabilizer);
  }

  /// Φ(s·Q) of rows [r0, r0+n) into buf.phi_q (per-row shifts, which cancel in the ratio).
  void map_queries(const Task& tk, Index r0, Index n, Buffers& buf) const {
    map_rows(maps_[tk.map_index], tk.q.middleRows(r0, n), buf.phi_q,
             stabilized ? Stabilizer::per_row : Stabilizer::none, nullptr);
  }

  /// Φ(s·K) of rows [r0, r0+n) into buf.phi_k with one shift b shared by the block's real
  /// tokens; returns b, or −∞ when the block has none. Padded rows are zeroed if
  /// `zero_padded`, and otherwise left with their own per-row shift (finite, unused).
  Scalar map_keys(const Task& tk, Index r0, Index n, Buffers& buf, bool zero_padded) const {
    const Map& fm = maps_[tk.map_index];
    const bool* valid = tk.valid ? tk.valid + r0 : nullptr;
    const Index n_valid = valid ? static_cast<Index>(std::count(valid, valid + n, true)) : n;
    if (n_valid == 0) return neg_inf;
    Scalar b = 0;
    if (n_valid == n) {
      if constexpr (stabilized) {
        map_rows(fm, tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::global, &buf.log_scale);
        b = buf.log_scale(0);
      } else {
        map_rows(fm, tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::none, nullptr);
      }
      return b;
    }
    // Padding in the block: the shift must be the largest over the real tokens only.
    buf.factor.resize(n);
    if constexpr (stabilized) {
      map_rows(fm, tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::per_row, &buf.log_scale);
      check_key_shifts(valid, buf.log_scale);
      b = neg_inf;
      for (Index i = 0; i < n; ++i)
        if (valid[i]) b = std::max(b, buf.log_scale(i));
      for (Index i = 0; i < n; ++i)
        buf.factor(i) = valid[i] ? std::exp(buf.log_scale(i) - b) : Scalar(zero_padded ? 0 : 1);
    } else {
      map_rows(fm, tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::none, nullptr);
      if (!zero_padded) return b;
      for (Index i = 0; i < n; ++i) buf.factor(i) = valid[i] ? Scalar(1) : Scalar(0);
    }
    buf.phi_k.array().colwise() *= buf.factor.array();
    return b;
  }

  /// Φ(s·K) of rows [r0, r0+n) into buf.phi_k with a shift per row, buf.log_scale = s_j
  /// (−∞ for padding; 0 for maps without shifts). Returns whether the block has a real key.
  bool map_keys_per_row(const Task& tk, Index r0, Index n, Buffers& buf) const {
    const Map& fm = maps_[tk.map_index];
    if constexpr (stabilized) {
      map_rows(fm, tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::per_row, &buf.log_scale);
      check_key_shifts(tk.valid ? tk.valid + r0 : nullptr, buf.log_scale);
    } else {
      map_rows(fm, tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::none, nullptr);
      buf.log_scale.setZero(n);
    }
    if (!tk.valid) return n > 0;
    bool any = false;
    for (Index i = 0; i < n; ++i) {
      if (tk.valid[r0 + i])
        any = true;
      else
        buf.log_scale(i) = neg_inf;
    }
    return any;
  }

  /// buf.vx = [V rows, 1].
  static void load_values(const Task& tk, Index r0, Index n, Index dv, Buffers& buf) {
    buf.vx.resize(n, dv + 1);
    buf.vx.leftCols(dv) = tk.v.middleRows(r0, n);
    buf.vx.col(dv).setOnes();
  }

  /// buf.inv_den_i = 1/den_i, or 0 for a padded query or a denominator below the smallest
  /// normal number (the zero-denominator guard).
  template <typename D>
  static void invert_denominators(const Task& tk, Index r0, const Eigen::MatrixBase<D>& den,
                                  Buffers& buf) {
    const Scalar tiny = std::numeric_limits<Scalar>::min();
    buf.inv_den = (den.array().abs() >= tiny).select(den.array().inverse(), Scalar(0));
    if (tk.valid) {
      for (Index i = 0; i < den.size(); ++i)
        if (!tk.valid[r0 + i]) buf.inv_den(i) = 0;
    }
  }

  /// Out rows = num / den of the block; throws numerical_error naming 'Q' and 'K' unless the
  /// numerators, denominators and outputs are finite: finite features whose sums over the
  /// keys overflow (PORF-relu or softplus features of inputs of norm ~1e30 in float) would
  /// otherwise give ∞/∞ = NaN, or ∞ as a denominator a silent 0.
  template <typename Rows>
  static void write_outputs(const Buffers& buf, Index dv, Rows&& out) {
    out = (buf.numden.leftCols(dv).array().colwise() * buf.inv_den.array()).matrix();
    if (all_finite(buf.numden) && all_finite(out)) return;
    throw numerical_error(std::string("coulomb::LinearAttention::forward: the attention sums "
                                      "phi(q)^T sum_j phi(k_j) [v_j, 1] overflow ") +
                          (std::is_same_v<Scalar, float> ? "float" : "double") +
                          ": arguments 'Q' and 'K' are too large for the feature map " +
                          Map::name() + "; scale them down");
  }

  /// Throws numerical_error naming 'K' when a real key's per-row shift is −∞: its squared norm
  /// overflows, so its unbiased features are all 0 and it would silently count as padding
  /// (−∞ is the "no key" mark of the shifts). `valid` (or nullptr) marks the real rows.
  static void check_key_shifts(const bool* valid, const VectorType& log_scale) {
    for (Index i = 0; i < log_scale.size(); ++i) {
      if (log_scale(i) == neg_inf && (!valid || valid[i])) {
        throw numerical_error(std::string("coulomb::LinearAttention: the squared norm of a key "
                                          "overflows ") +
                              (std::is_same_v<Scalar, float> ? "float" : "double") +
                              ": argument 'K' is too large (key " + std::to_string(i) +
                              " of its block); scale it down");
      }
    }
  }

  /// buf.gx = [∂L/∂num, ∂L/∂den] of rows [r0, r0+n): ∂L/∂num_i = G_i / den_i and
  /// ∂L/∂den_i = −(G_i · out_i) / den_i (out_i = num_i / den_i).
  template <typename DG, typename DO>
  static void output_gradients(const Eigen::MatrixBase<DG>& G, const Eigen::MatrixBase<DO>& out,
                               Buffers& buf) {
    const Index n = G.rows();
    const Index dv = G.cols();
    buf.gx.resize(n, dv + 1);
    auto dden = buf.gx.col(dv);
    dden.setZero();
    for (Index c = 0; c < dv; ++c) {
      dden.array() -= G.col(c).array() * out.col(c).array();
      buf.gx.col(c).array() = G.col(c).array() * buf.inv_den.array();
    }
    dden.array() *= buf.inv_den.array();
  }

  /// dX rows = s · ∂L/∂(sX) through the map, from buf.dphi = ∂L/∂Φ; accumulates ∂L/∂Ω into
  /// sc.domega.
  template <typename DX, typename Rows>
  void map_backward(const Task& tk, const Eigen::MatrixBase<DX>& X, const MatrixType& phi,
                    Buffers& buf, Scratch& sc, Rows&& dX) const {
    const Map& fm = maps_[tk.map_index];
    // Maps derived from FeatureMapBase take a reusable workspace; a user's map that satisfies
    // FeatureMap without that overload gets the allocating one.
    constexpr bool has_workspace = requires {
      fm.backward_input(scale_ * X, phi, buf.dphi, buf.dx, buf.map_ws);
    };
    try {
      if (omega_gradient_) {
        if constexpr (has_workspace)
          fm.backward(scale_ * X, phi, buf.dphi, buf.dx, sc.domega_block, buf.map_ws);
        else
          fm.backward(scale_ * X, phi, buf.dphi, buf.dx, sc.domega_block);
        sc.domega[static_cast<std::size_t>(tk.map_index)] += sc.domega_block;
      } else {
        if constexpr (has_workspace)
          fm.backward_input(scale_ * X, phi, buf.dphi, buf.dx, buf.map_ws);
        else
          fm.backward_input(scale_ * X, phi, buf.dphi, buf.dx);
      }
    } catch (const invalid_argument& e) {
      // The arguments are this class's own buffers: the map refused a non-finite dPhi. 1/den of
      // a denominator just above the guard's threshold, times key sums that are not small, can
      // overflow float although every output is finite (queries and keys whose norms span
      // many orders of magnitude).
      throw numerical_error(std::string("coulomb::LinearAttention::backward: the gradient of "
                                        "the features overflows ") +
                            (std::is_same_v<Scalar, float> ? "float" : "double") +
                            ": a denominator is tiny against its key sums (arguments 'Q' and "
                            "'K' span too many orders of magnitude; use double or scale them): " +
                            e.what());
    }
    dX = scale_ * buf.dx;
  }

  /// Zeroes the rows of `rows` that are padding.
  template <typename Rows>
  static void zero_padded_rows(const Task& tk, Index r0, Rows&& rows) {
    if (!tk.valid) return;
    for (Index i = 0; i < rows.rows(); ++i)
      if (!tk.valid[r0 + i]) rows.row(i).setZero();
  }

  /// Key sums of blocks [c0, c1) added to st. With `kept` (the task's kept blocks), the key
  /// features and shifts are kept there. A state without keys (shift −∞) need not be zero: the
  /// first block with a real key overwrites it, and a state that gets none is zeroed.
  void accumulate_keys(const Task& tk, const LinearPlan& plan, Index c0, Index c1, Scratch& sc,
                       KeyState<Scalar>& st, KeptBlock<Scalar>* kept = nullptr) const {
    st.sz.resize(plan.D, plan.dims.dv + 1);
    for_each_block(plan, c0, c1, sc, [&](Index c, Index r0, Index n, Buffers& buf) {
      const Scalar b = map_keys(tk, r0, n, buf, true);
      if (kept) kept[c].shift = b;
      if (b == neg_inf) return;
      load_values(tk, r0, n, plan.dims.dv, buf);
      const bool first = st.shift == neg_inf;  // 0 + a·b is the same chain as a·b
      const Scalar alpha = st.absorb(b);
      if (alpha != Scalar(1)) buf.vx *= alpha;
      inner_product(buf.phi_k.data(), n, buf.vx.data(), n, n, plan.D, plan.dims.dv + 1,
                    st.sz.data(), plan.D, first ? ProductInit::zero : ProductInit::accumulate);
      if (kept) buf.phi_k.swap(kept[c].phi_k);
    });
    if (st.shift == neg_inf) st.sz.setZero();
  }

 private:
  const FeatureMapSet<Map>& maps_;
  Scalar scale_;
  bool omega_gradient_;
};

}  // namespace coulomb::detail
