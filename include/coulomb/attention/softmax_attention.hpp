// SPDX-License-Identifier: MIT
/// @file attention/softmax_attention.hpp
/// @brief Exact softmax attention, the quality and speed reference of linear attention:
/// forward and backward, causal and not, multi-head, batched, with a padding mask.
/// Documented in docs/attention.md.
///
/// For one sequence and one head, with scores s_ij = s²·q_iᵀk_j (s = d_k^{-1/4} by default, so
/// s² = 1/√d_k; Vaswani et al., *Attention Is All You Need*, NeurIPS 2017):
///   out_i = Σ_j P_ij v_j,  P_ij = exp(s_ij − ℓ_i),  ℓ_i = log Σ_j exp(s_ij)  (log-sum-exp),
/// with j over the real (unpadded) keys, and j <= i when causal. Queries are processed in
/// blocks of rows; a block's scores (rows × L) are formed by one GEMM, exponentiated in place
/// after subtracting the row maximum, and multiplied by V. The forward keeps ℓ per row, so the
/// backward recomputes P = exp(s − ℓ) without a second maximum:
///   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ⊙ (dP − δ) with δ_i = dO_i·out_i,
///   dQ = s² dS K,  dK = s² dSᵀ Q.
/// A query with no key to attend to (padded, or all its keys padded) gets ℓ = +∞, so its
/// output and gradients are zero.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/parallel.hpp"
#include "attention_base.hpp"
#include "layout.hpp"
#include "softmax_recurrent.hpp"

namespace coulomb {

/// Reusable buffers of SoftmaxAttention; also holds the log-sum-exp rows of the last forward,
/// which backward uses.
template <RealScalar Scalar>
class SoftmaxAttentionWorkspace {
 public:
  /// An empty workspace; the first call of each shape sizes it.
  SoftmaxAttentionWorkspace() = default;

 private:
  template <RealScalar S>
  friend class SoftmaxAttention;

  struct Scratch {
    Matrix<Scalar> p;   // block rows × L: scores, then probabilities
    Matrix<Scalar> dp;  // block rows × L
    Vector<Scalar> row_max, row_sum, delta;
  };
  std::vector<Scratch> scratch_;
  std::vector<Matrix<Scalar>> part_dk_, part_dv_;
  Matrix<Scalar> lse_;             // L × tasks
  detail::ForwardRecord forward_;  // the last forward, whose ℓ are in lse_
};

/// Exact softmax attention with the layout, options and interface of LinearAttention.
template <RealScalar ScalarT>
class SoftmaxAttention
    : public AttentionBase<SoftmaxAttention<ScalarT>, ScalarT, SoftmaxAttentionWorkspace<ScalarT>> {
  using Base =
      AttentionBase<SoftmaxAttention<ScalarT>, ScalarT, SoftmaxAttentionWorkspace<ScalarT>>;
  friend Base;

 public:
  using typename Base::ConstRef;
  using typename Base::MatrixType;
  using typename Base::Scalar;
  using typename Base::VectorType;

  using Cache = SoftmaxAttentionCache<Scalar>;  ///< running state of causal decoding

  /// Softmax attention with the given options (omega_gradient is ignored).
  explicit SoftmaxAttention(AttentionOptions options = {})
      : Base("coulomb::SoftmaxAttention::constructor", options) {}

  /// Starts causal decoding of `batch` sequences: empty caches (softmax_recurrent.hpp).
  void reset(Cache& cache, Index batch = 1) const {
    detail::require(batch >= 1, "coulomb::SoftmaxAttention::reset",
                    "argument 'batch' must be at least 1, got " + std::to_string(batch));
    const auto B = static_cast<std::size_t>(batch);
    cache.batch_ = batch;
    cache.position_ = 0;
    cache.keys_.assign(B, MatrixType());
    cache.values_.assign(B, MatrixType());
    cache.count_.assign(B, 0);
  }

  /// One decoding step: q, k (B × H·d_k) and v (B × H·d_v) hold the next token of every
  /// sequence; out (resized to B × H·d_v) receives its causal output, equal to the batch causal
  /// forward at this position up to rounding. Time and memory grow with the position.
  void step(const ConstRef& q, const ConstRef& k, const ConstRef& v, MatrixType& out,
            Cache& cache) const {
    step_impl(q, k, v, nullptr, out, cache);
  }

  /// The same, where valid(b) = false marks a padding token of sequence b: its cache is left
  /// unchanged and its output is zero.
  void step(const ConstRef& q, const ConstRef& k, const ConstRef& v,
            const Eigen::Array<bool, Eigen::Dynamic, 1>& valid, MatrixType& out,
            Cache& cache) const {
    detail::require(valid.size() == q.rows(), "coulomb::SoftmaxAttention::step",
                    "argument 'valid' has " + std::to_string(valid.size()) + " entries, expected " +
                        std::to_string(q.rows()) + " (the rows of q)");
    step_impl(q, k, v, valid.data(), out, cache);
  }

 private:
  static constexpr const char* class_name = "coulomb::SoftmaxAttention";
  static constexpr Scalar inf = std::numeric_limits<Scalar>::infinity();

  struct Plan : detail::AttentionSchedule {
    Scalar s2 = 1;              // score scale s²
    bool check_scores = false;  // the scores may overflow: check them (see scores_may_overflow)
  };

  Plan make_plan(const std::string& where, const detail::AttentionDims& dims) const {
    Plan p;
    // 128 query rows per block: fewer rows make the two GEMMs per block too thin, even though
    // the block of scores (128 × L) then outgrows the L2 cache at large L (measured in
    // docs/benchmarks.md, "Attention").
    static_cast<detail::AttentionSchedule&>(p) =
        detail::attention_schedule(this->options_, dims, 128);
    const double s = detail::attention_input_scale(where, this->options_, dims.dk);
    p.s2 = static_cast<Scalar>(s * s);
    return p;
  }

  void prepare(SoftmaxAttentionWorkspace<Scalar>& ws, const Plan& plan) const {
    const auto T = static_cast<std::size_t>(plan.threads);
    if (ws.scratch_.size() < T) ws.scratch_.resize(T);
    for (std::size_t i = 0; i < T; ++i) {
      auto& sc = ws.scratch_[i];
      if (sc.p.rows() != plan.block || sc.p.cols() != plan.dims.length) {
        sc.p.resize(plan.block, plan.dims.length);
        sc.dp.resize(plan.block, plan.dims.length);
      }
    }
  }

  /// Whether s²·qᵀk may overflow: |s² qᵀk| <= s² d_k max|q| max|k|, against an eighth of the
  /// largest value. Only then are the scores checked, so ordinary inputs pay one pass over Q
  /// and K.
  static bool scores_may_overflow(const Plan& plan, const ConstRef& Q, const ConstRef& K) {
    if (Q.size() == 0) return false;
    const double bound = static_cast<double>(plan.s2) * static_cast<double>(plan.dims.dk) *
                         static_cast<double>(Q.cwiseAbs().maxCoeff()) *
                         static_cast<double>(K.cwiseAbs().maxCoeff());
    return bound > 0.125 * static_cast<double>(std::numeric_limits<Scalar>::max());
  }

  /// Scores of query rows [r0, r0+n) against keys [0, kend) into sc.p, with −∞ for keys a
  /// query must not see; returns the block view. With plan.check_scores, throws
  /// numerical_error naming 'Q' and 'K' when a score is not finite.
  template <typename DQ, typename DK>
  auto scores(const Plan& plan, const Eigen::MatrixBase<DQ>& q, const Eigen::MatrixBase<DK>& k,
              const bool* valid, Index r0, Index n, Index kend,
              typename SoftmaxAttentionWorkspace<Scalar>::Scratch& sc) const {
    auto S = sc.p.topLeftCorner(n, kend);
    S.noalias() = plan.s2 * q.middleRows(r0, n) * k.topRows(kend).transpose();
    if (plan.check_scores && !coulomb::detail::all_finite(S)) {
      std::ostringstream os;
      os << "coulomb::SoftmaxAttention: the scores s^2 q^T k overflow "
         << (std::is_same_v<Scalar, float> ? "float" : "double")
         << ": arguments 'Q' and 'K' are too large (largest |q| = "
         << static_cast<double>(q.cwiseAbs().maxCoeff())
         << ", largest |k| = " << static_cast<double>(k.cwiseAbs().maxCoeff())
         << "); scale them down";
      throw numerical_error(os.str());
    }
    if (this->options_.causal) {
      for (Index j = r0 + 1; j < kend; ++j) S.col(j).head(std::min(j - r0, n)).setConstant(-inf);
    }
    if (valid) {
      for (Index j = 0; j < kend; ++j)
        if (!valid[j]) S.col(j).setConstant(-inf);
    }
    return S;
  }

  /// S ← exp(S − shift) on the entries a query may see, exact zeros elsewhere (vectorized
  /// exp clamps its argument, so exp(−∞) is not relied upon); rows with shift +∞ (queries with
  /// nothing to attend to) become zero. Adds the row sums to *row_sum if given.
  template <typename Block>
  void exponentiate(Block& S, const Eigen::Ref<const VectorType>& shift, const bool* valid,
                    Index r0, VectorType* row_sum) const {
    const Index n = S.rows();
    for (Index j = 0; j < S.cols(); ++j) {
      if (valid && !valid[j]) {
        S.col(j).setZero();
        continue;
      }
      S.col(j).array() = (S.col(j).array() - shift.array()).exp();
      if (this->options_.causal && j > r0) S.col(j).head(std::min(j - r0, n)).setZero();
      if (row_sum) *row_sum += S.col(j);
    }
    for (Index i = 0; i < n; ++i) {
      if (shift(i) == inf) {
        S.row(i).setZero();
        if (row_sum) (*row_sum)(i) = 0;
      }
    }
  }

  /// Queries and keys of any width d_k.
  static Index required_head_dim() noexcept { return 0; }

  void step_impl(const ConstRef& q, const ConstRef& k, const ConstRef& v, const bool* valid,
                 MatrixType& out, Cache& cache) const {
    const std::string where = "coulomb::SoftmaxAttention::step";
    detail::require(cache.batch_ >= 1 && q.rows() == cache.batch_, where,
                    "argument 'q' has " + std::to_string(q.rows()) +
                        " rows, expected the batch of the cache (" + std::to_string(cache.batch_) +
                        "; call reset(cache, batch) first)");
    const auto dims = detail::check_attention_inputs<Scalar>(where, q, k, v, cache.batch_, nullptr,
                                                             this->num_heads(), 0);
    for (std::size_t b = 0; b < cache.keys_.size(); ++b) {
      if (cache.count_[b] == 0) continue;
      detail::require(cache.keys_[b].cols() == q.cols() && cache.values_[b].cols() == v.cols(),
                      where,
                      "arguments 'k' and 'v' have " + std::to_string(k.cols()) + " and " +
                          std::to_string(v.cols()) + " columns, expected " +
                          std::to_string(cache.keys_[b].cols()) + " and " +
                          std::to_string(cache.values_[b].cols()) + " as in earlier steps");
    }
    const double s = detail::attention_input_scale(where, this->options_, dims.dk);
    detail::softmax_recurrent_step(dims, static_cast<Scalar>(s * s), q, k, v, valid, out,
                                   cache.keys_, cache.values_, cache.count_, cache.scores_);
    ++cache.position_;
  }

  void forward_impl(const detail::AttentionDims& dims, const ConstRef& Q, const ConstRef& K,
                    const ConstRef& V, const PaddingMask* mask, MatrixType& Out,
                    SoftmaxAttentionWorkspace<Scalar>& ws) const {
    Plan plan = make_plan("coulomb::SoftmaxAttention::forward", dims);
    plan.check_scores = scores_may_overflow(plan, Q, K);
    Out.resize(dims.batch * dims.length, dims.heads * dims.dv);
    ws.forward_.valid = false;
    prepare(ws, plan);
    ws.lse_.resize(dims.length, dims.tasks());
    const Index units = dims.tasks() * plan.parts;
    // Work units: (task, part); part p takes the query blocks p, p + P, p + 2P, ... (so that
    // causal blocks, which grow with their position, are shared evenly).
    detail::parallel_for(units, plan.threads, [&](Index u, int thread) {
      const Index t = u / plan.parts;
      const Index part = u % plan.parts;
      const auto tk = detail::attention_task<Scalar>(Q, K, V, mask, dims, t);
      const bool* valid = tk.valid;
      auto out = tk.block_of(Out, dims.dv);
      auto& sc = ws.scratch_[static_cast<std::size_t>(thread)];
      auto lse = ws.lse_.col(t);
      for (Index qb = part; qb < plan.blocks; qb += plan.parts) {
        const Index r0 = qb * plan.block;
        const Index n = plan.rows(qb);
        const Index kend = this->options_.causal ? r0 + n : dims.length;
        auto S = scores(plan, tk.q, tk.k, valid, r0, n, kend, sc);
        sc.row_max = S.col(0);
        for (Index j = 1; j < kend; ++j) sc.row_max = sc.row_max.cwiseMax(S.col(j));
        // Queries without any key (or padded) get the shift +∞: their row becomes 0.
        for (Index i = 0; i < n; ++i)
          if (sc.row_max(i) == -inf || (valid && !valid[r0 + i])) sc.row_max(i) = inf;
        sc.row_sum.setZero(n);
        exponentiate(S, sc.row_max, valid, r0, &sc.row_sum);
        out.middleRows(r0, n).noalias() = S * tk.v.topRows(kend);
        for (Index i = 0; i < n; ++i) {
          const Scalar l = sc.row_sum(i);
          if (l > 0) {
            out.row(r0 + i) /= l;
            lse(r0 + i) = sc.row_max(i) + std::log(l);
          } else {
            out.row(r0 + i).setZero();
            lse(r0 + i) = inf;
          }
        }
      }
    });
    ws.forward_.set(dims, mask);
  }

  void backward_impl(const detail::AttentionDims& dims, const ConstRef& Q, const ConstRef& K,
                     const ConstRef& V, const PaddingMask* mask, const ConstRef& Out,
                     const ConstRef& dOut, AttentionGradients<Scalar>& grads,
                     SoftmaxAttentionWorkspace<Scalar>& ws) const {
    const std::string where = "coulomb::SoftmaxAttention::backward";
    ws.forward_.require_matches(where, dims, mask);
    Plan plan = make_plan(where, dims);
    plan.check_scores = scores_may_overflow(plan, Q, K);
    prepare(ws, plan);
    grads.dQ.resize(Q.rows(), Q.cols());
    grads.dK.setZero(K.rows(), K.cols());
    grads.dV.setZero(V.rows(), V.cols());
    grads.dOmega.clear();
    const auto P = static_cast<std::size_t>(plan.parts);
    if (plan.parts > 1 && ws.part_dk_.size() < P) {
      ws.part_dk_.resize(P);
      ws.part_dv_.resize(P);
    }
    auto run_task = [&](Index t, Index part, int thread) {
      const auto tk = detail::attention_task<Scalar>(Q, K, V, mask, dims, t);
      const auto& q = tk.q;
      const auto& k = tk.k;
      const bool* valid = tk.valid;
      const auto out = tk.block_of(Out, dims.dv);
      const auto dout = tk.block_of(dOut, dims.dv);
      auto dq = tk.block_of(grads.dQ, dims.dk);
      auto& sc = ws.scratch_[static_cast<std::size_t>(thread)];
      const auto lse = ws.lse_.col(t);
      // dK and dV: the gradient blocks themselves, or the part's own sums (reduced later).
      const bool own = plan.parts > 1;
      if (own) {
        ws.part_dk_[static_cast<std::size_t>(part)].setZero(dims.length, dims.dk);
        ws.part_dv_[static_cast<std::size_t>(part)].setZero(dims.length, dims.dv);
      }
      auto dk_all = tk.block_of(grads.dK, dims.dk);
      auto dv_all = tk.block_of(grads.dV, dims.dv);
      for (Index qb = part; qb < plan.blocks; qb += plan.parts) {
        const Index r0 = qb * plan.block;
        const Index n = plan.rows(qb);
        const Index kend = this->options_.causal ? r0 + n : dims.length;
        auto S = scores(plan, q, k, valid, r0, n, kend, sc);
        exponentiate(S, lse.segment(r0, n), valid, r0, nullptr);
        auto dP = sc.dp.topLeftCorner(n, kend);
        dP.noalias() = dout.middleRows(r0, n) * tk.v.topRows(kend).transpose();
        sc.delta = dout.middleRows(r0, n).cwiseProduct(out.middleRows(r0, n)).rowwise().sum();
        for (Index j = 0; j < kend; ++j)
          dP.col(j).array() = S.col(j).array() * (dP.col(j).array() - sc.delta.array());
        dq.middleRows(r0, n).noalias() = plan.s2 * dP * k.topRows(kend);
        if (own) {
          ws.part_dk_[static_cast<std::size_t>(part)].topRows(kend).noalias() +=
              plan.s2 * dP.transpose() * q.middleRows(r0, n);
          ws.part_dv_[static_cast<std::size_t>(part)].topRows(kend).noalias() +=
              S.transpose() * dout.middleRows(r0, n);
        } else {
          dk_all.topRows(kend).noalias() += plan.s2 * dP.transpose() * q.middleRows(r0, n);
          dv_all.topRows(kend).noalias() += S.transpose() * dout.middleRows(r0, n);
        }
      }
    };
    if (plan.parts == 1) {
      detail::parallel_for(dims.tasks(), plan.threads,
                           [&](Index t, int thread) { run_task(t, 0, thread); });
    } else {
      for (Index t = 0; t < dims.tasks(); ++t) {
        detail::parallel_for(plan.parts, plan.threads,
                             [&](Index part, int thread) { run_task(t, part, thread); });
        const auto tk = detail::attention_task<Scalar>(Q, K, V, mask, dims, t);
        auto dk_all = tk.block_of(grads.dK, dims.dk);
        auto dv_all = tk.block_of(grads.dV, dims.dv);
        for (std::size_t p = 0; p < P; ++p) {
          dk_all += ws.part_dk_[p];
          dv_all += ws.part_dv_[p];
        }
      }
    }
  }
};

}  // namespace coulomb
