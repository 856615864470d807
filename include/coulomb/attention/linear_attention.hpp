// SPDX-License-Identifier: MIT
/// @file attention/linear_attention.hpp
/// @brief Linear ("kernelized") attention with any FeatureMap: non-causal and causal,
/// multi-head, batched, with a padding mask; forward, backward (Q, K, V and Ω) and a recurrent
/// step for causal decoding. Documented in docs/attention.md.
///
/// For one sequence and one head, with φ the feature map applied to s·q and s·k
/// (s = d_k^{-1/4} by default):
///   non-causal: out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z,  S = Σ_j φ(k_j) v_jᵀ,  z = Σ_j φ(k_j);
///   causal:     the same with the sums over j <= i (prefix sums).
/// Katharopoulos et al., *Transformers are RNNs*, ICML 2020 (causal prefix sums, the recurrent
/// form); Choromanski et al., *Rethinking Attention with Performers*, ICLR 2021 (FAVOR+);
/// Badiei Khuzani et al., *A Coulomb Particle Model for Learning Kernel Attention in
/// Transformers*, 2026, §4 (the attention in which the learned kernel is used).
///
/// Both forms cost O(L·D·(d_k + d_v)) time and O(D·d_v) state per task. The keys and values
/// are stored together as [V, 1], so S and z form one D×(d_v+1) matrix Sz and every step is a
/// GEMM on a block of C rows (AttentionOptions::block_size). This header holds the class; the
/// algorithms are in detail_linear_noncausal.hpp, detail_linear_causal.hpp (prefix sums),
/// detail_linear_causal_backward.hpp, linear_recurrent.hpp (the decoding step) and
/// detail_linear_blocks.hpp (what they share), the buffers in linear_workspace.hpp.
///
/// Stabilizer (docs/stabilizer.md, docs/attention.md, section "Stabilizer"): for a stabilizable
/// map the queries use Stabilizer::per_row (a shift per query, which cancels in the ratio); the
/// keys that enter one output share one shift, and every factor e^{shift − larger shift} is at
/// most 1. A denominator below the smallest normal number counts as zero and gives a zero
/// output (and zero gradients).
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../features/feature_map.hpp"
#include "attention_base.hpp"
#include "detail_feature_map_set.hpp"
#include "detail_linear_blocks.hpp"
#include "detail_linear_causal.hpp"
#include "detail_linear_causal_backward.hpp"
#include "detail_linear_noncausal.hpp"
#include "layout.hpp"
#include "linear_recurrent.hpp"
#include "linear_workspace.hpp"

namespace coulomb {

/// Linear attention over a FeatureMap. One map may be shared by all heads, or each head may
/// have its own (same d_k and m). See docs/attention.md.
///
/// **Who owns the feature map.** By default the attention owns its maps: the constructors
/// taking `Map` or `std::vector<Map>` copy them in (or move them, with std::move), so a later
/// set_omega or redraw on the caller's map does not reach the attention. Change Ω through
/// feature_map(i). To share one map with the caller instead, construct from std::ref(map):
/// the attention then uses that very map (which must outlive it), and every change to it is
/// seen. std::cref(map) does not compile, because it could only copy.
template <FeatureMap Map>
class LinearAttention : public AttentionBase<LinearAttention<Map>, typename Map::Scalar,
                                             LinearAttentionWorkspace<typename Map::Scalar>> {
  using Base = AttentionBase<LinearAttention<Map>, typename Map::Scalar,
                             LinearAttentionWorkspace<typename Map::Scalar>>;
  friend Base;

 public:
  using typename Base::ConstRef;
  using typename Base::MatrixType;
  using typename Base::Scalar;
  using State = LinearAttentionState<Scalar>;  ///< running state of causal decoding

  /// Whether the map honours the Stabilizer (feature_map_traits), so shifts are used.
  static constexpr bool stabilized = feature_map_traits<Map>::is_stabilizable;

  /// One feature map shared by all heads, owned by the attention: a copy of `map`, or `map`
  /// itself when moved in (LinearAttention(std::move(map), options)).
  explicit LinearAttention(Map map, AttentionOptions options = {})
      : LinearAttention(one_map(std::move(map)), options) {}

  /// One map for all heads (maps.size() == 1) or one per head (maps.size() == num_heads), all
  /// with the same input_dim() and output_dim(); owned by the attention.
  explicit LinearAttention(std::vector<Map> maps, AttentionOptions options = {})
      : Base(constructor_name, options), maps_(std::move(maps)) {
    check_maps();
  }

  /// One feature map shared by all heads, borrowed from the caller: `map.get()` itself is used
  /// by every call, so set_omega or redraw on it reach the attention. It must outlive the
  /// attention (and its copies, which borrow it too).
  explicit LinearAttention(std::reference_wrapper<Map> map, AttentionOptions options = {})
      : Base(constructor_name, options), maps_(map.get()) {
    check_maps();
  }

  /// Not allowed: a const map can only be copied, which std::cref would hide. Borrow with
  /// std::ref, or pass the map itself to own a copy.
  LinearAttention(std::reference_wrapper<const Map> map, AttentionOptions options = {}) = delete;

  /// Query/key width per head d_k (the maps' input_dim()).
  Index head_dim() const noexcept { return maps_[0].input_dim(); }
  /// The factor s applied to queries and keys before the map.
  Scalar input_scale() const noexcept { return scale_; }
  /// Number of feature maps (1 or num_heads()).
  Index num_maps() const noexcept { return maps_.size(); }
  /// Whether the maps are borrowed from the caller (constructed from std::ref) rather than
  /// owned.
  bool borrows_maps() const noexcept { return maps_.borrowed(); }
  /// Feature map i (i < num_maps()).
  const Map& feature_map(Index i = 0) const { return maps_[checked_map_index(i)]; }
  /// Feature map i, mutable: set_omega or redraw it between calls (not between a forward and
  /// its backward). This is the map the attention uses, owned or borrowed.
  Map& feature_map(Index i = 0) { return maps_[checked_map_index(i)]; }
  /// The feature map of head h.
  const Map& map_of_head(Index h) const { return blocks().map_of_head(h); }

  /// Starts causal decoding of `batch` sequences: empty key sums.
  void reset(State& state, Index batch = 1) const {
    detail::require(batch >= 1, "coulomb::LinearAttention::reset",
                    "argument 'batch' must be at least 1, got " + std::to_string(batch));
    auto& st = state.data_;
    st.batch = batch;
    st.position = 0;
    st.keys.resize(static_cast<std::size_t>(batch * this->num_heads()));
    for (auto& k : st.keys) {
      k.sz.resize(0, 0);
      k.shift = -std::numeric_limits<Scalar>::infinity();
    }
  }

  /// One decoding step: q, k (B × H·d_k) and v (B × H·d_v) hold the next token of every
  /// sequence; out (resized to B × H·d_v) receives its causal output, equal to the batch
  /// causal forward at this position.
  void step(const ConstRef& q, const ConstRef& k, const ConstRef& v, MatrixType& out,
            State& state) const {
    step_impl(q, k, v, nullptr, out, state);
  }

  /// The same, where valid(b) = false marks a padding token of sequence b: its state is left
  /// unchanged and its output is zero.
  void step(const ConstRef& q, const ConstRef& k, const ConstRef& v,
            const Eigen::Array<bool, Eigen::Dynamic, 1>& valid, MatrixType& out,
            State& state) const {
    detail::require(valid.size() == q.rows(), "coulomb::LinearAttention::step",
                    "argument 'valid' has " + std::to_string(valid.size()) + " entries, expected " +
                        std::to_string(q.rows()) + " (the rows of q)");
    step_impl(q, k, v, valid.data(), out, state);
  }

 private:
  static constexpr const char* class_name = "coulomb::LinearAttention";
  static constexpr const char* constructor_name = "coulomb::LinearAttention::constructor";

  Index required_head_dim() const noexcept { return head_dim(); }

  static std::vector<Map> one_map(Map&& map) {
    std::vector<Map> maps;
    maps.reserve(1);
    maps.push_back(std::move(map));
    return maps;
  }

  void check_maps() {
    const std::string where = constructor_name;
    const Index n = maps_.size();
    detail::require(n == 1 || n == this->num_heads(), where,
                    "argument 'maps' has " + std::to_string(n) +
                        " feature maps, expected 1 (shared) or num_heads = " +
                        std::to_string(this->num_heads()));
    for (Index i = 1; i < n; ++i) {
      detail::require(maps_[i].input_dim() == maps_[0].input_dim() &&
                          maps_[i].output_dim() == maps_[0].output_dim(),
                      where,
                      "argument 'maps': map " + std::to_string(i) + " has input_dim " +
                          std::to_string(maps_[i].input_dim()) + " and output_dim " +
                          std::to_string(maps_[i].output_dim()) + ", map 0 has " +
                          std::to_string(maps_[0].input_dim()) + " and " +
                          std::to_string(maps_[0].output_dim()));
    }
    scale_ = static_cast<Scalar>(detail::attention_input_scale(where, this->options_, head_dim()));
  }

  Index checked_map_index(Index i) const {
    if (i < 0 || i >= maps_.size())
      throw std::out_of_range(
          "coulomb::LinearAttention::feature_map: argument 'i' = " + std::to_string(i) +
          " is not below num_maps() = " + std::to_string(maps_.size()));
    return i;
  }

  detail::LinearBlocks<Map> blocks() const {
    return detail::LinearBlocks<Map>(maps_, scale_, this->options_.omega_gradient);
  }

  /// Whether the forward keeps its features for the backward (keep_features).
  bool keeps_features() const noexcept { return this->options_.keep_features; }

  detail::LinearPlan make_plan(const detail::AttentionDims& dims) const {
    return detail::LinearPlan{
        detail::attention_schedule(this->options_, dims, this->options_.causal ? 64 : 256),
        maps_[0].output_dim(), maps_[0].num_particles()};
  }

  void prepare(detail::LinearWorkspaceData<Scalar>& ws, const detail::LinearPlan& plan,
               bool for_backward) const {
    const auto T = static_cast<std::size_t>(plan.threads);
    if (ws.scratch.size() < T) ws.scratch.resize(T);
    const auto P = static_cast<std::size_t>(plan.parts);
    if (ws.parts.size() < P) {
      ws.parts.resize(P);
      ws.incoming.resize(P);
      ws.part_grad.resize(P);
      ws.part_grad_in.resize(P);
      ws.part_ref.resize(P);
      ws.part_ref_in.resize(P);
      ws.part_has_in.resize(P);
    }
    if (for_backward && this->options_.omega_gradient) {
      for (std::size_t i = 0; i < T; ++i) {
        auto& acc = ws.scratch[i].domega;
        acc.resize(static_cast<std::size_t>(maps_.size()));
        for (auto& g : acc) g.setZero(plan.m, plan.dims.dk);
      }
    }
  }

  /// Sizes what a causal forward records for its backward (detail::record_block).
  static void size_causal_record(detail::LinearWorkspaceData<Scalar>& ws,
                                 const detail::LinearPlan& plan) {
    const Index tasks = plan.dims.tasks();
    ws.inv_den.resize(plan.dims.length, tasks);
    ws.rfac.resize(plan.dims.length, tasks);
    ws.block_shift.resize(plan.blocks, tasks);
  }

  void forward_impl(const detail::AttentionDims& dims, const ConstRef& Q, const ConstRef& K,
                    const ConstRef& V, const PaddingMask* mask, MatrixType& Out,
                    LinearAttentionWorkspace<Scalar>& workspace) const {
    const detail::LinearPlan plan = make_plan(dims);
    const bool causal = this->options_.causal;
    auto& ws = workspace.data_;
    Out.resize(dims.batch * dims.length, dims.heads * dims.dv);
    ws.forward.valid = false;
    ws.kept_valid = false;
    prepare(ws, plan, false);
    const auto tasks = static_cast<std::size_t>(dims.tasks());
    if (!causal && ws.saved.size() < tasks) ws.saved.resize(tasks);
    if (!causal && ws.packs.size() < tasks) ws.packs.resize(tasks);
    const bool keep = keeps_features();
    if (keep && ws.kept.size() < tasks * static_cast<std::size_t>(plan.blocks))
      ws.kept.resize(tasks * static_cast<std::size_t>(plan.blocks));
    if (keep && causal) size_causal_record(ws, plan);
    const detail::LinearBlocks<Map> ops = blocks();
    detail::run_tasks(plan, [&](Index t, int thread) {
      const auto tk = ops.task(detail::attention_task<Scalar>(Q, K, V, mask, dims, t));
      auto out = tk.block_of(Out, dims.dv);
      auto* kept = detail::kept_blocks(ws, plan, t, keep);
      if (causal)
        detail::causal_forward_task(ops, tk, plan, ws, thread, t, kept, out);
      else
        detail::noncausal_forward_task(ops, tk, plan, ws, thread, t, kept, out);
    });
    ws.forward.set(dims, mask);
    ws.kept_valid = keep;
  }

  void backward_impl(const detail::AttentionDims& dims, const ConstRef& Q, const ConstRef& K,
                     const ConstRef& V, const PaddingMask* mask, const ConstRef& Out,
                     const ConstRef& dOut, AttentionGradients<Scalar>& grads,
                     LinearAttentionWorkspace<Scalar>& workspace) const {
    const std::string where = "coulomb::LinearAttention::backward";
    const bool causal = this->options_.causal;
    auto& ws = workspace.data_;
    if (!causal) ws.forward.require_matches(where, dims, mask);
    const detail::LinearPlan plan = make_plan(dims);
    prepare(ws, plan, true);
    // Invalid while the kept features are swapped in and out: a backward that throws midway
    // leaves them mixed with the buffers, and a later backward then maps again. A causal
    // backward of other sizes than the last forward maps again too.
    const bool kept_ok = ws.kept_valid && keeps_features() && ws.forward.matches(dims, mask);
    ws.kept_valid = false;
    grads.dQ.resize(Q.rows(), Q.cols());
    grads.dK.resize(K.rows(), K.cols());
    grads.dV.resize(V.rows(), V.cols());
    if (causal) size_causal_record(ws, plan);
    const detail::LinearBlocks<Map> ops = blocks();
    detail::run_tasks(plan, [&](Index t, int thread) {
      const auto tk = ops.task(detail::attention_task<Scalar>(Q, K, V, mask, dims, t));
      detail::TaskGradients<Scalar> views(tk, dims, Out, dOut, grads);
      auto* kept = detail::kept_blocks(ws, plan, t, kept_ok);
      if (causal)
        detail::causal_backward_task(ops, tk, plan, ws, thread, t, kept, views);
      else
        detail::noncausal_backward_task(ops, tk, plan, ws, thread, t, kept, views);
    });
    ws.kept_valid = kept_ok;
    if (this->options_.omega_gradient) {
      grads.dOmega.resize(static_cast<std::size_t>(maps_.size()));
      for (std::size_t i = 0; i < grads.dOmega.size(); ++i) {
        grads.dOmega[i] = ws.scratch[0].domega[i];
        for (int th = 1; th < plan.threads; ++th)
          grads.dOmega[i] += ws.scratch[static_cast<std::size_t>(th)].domega[i];
      }
    } else {
      grads.dOmega.clear();
    }
    // A map outside coulomb may not refuse a non-finite dPhi: never return NaN gradients.
    const auto finite = [](const MatrixType& g) { return detail::all_finite(g); };
    if (!finite(grads.dQ) || !finite(grads.dK) || !finite(grads.dV) ||
        !std::all_of(grads.dOmega.begin(), grads.dOmega.end(), finite)) {
      throw numerical_error(std::string(where) + ": the gradients overflow " +
                            (std::is_same_v<Scalar, float> ? "float" : "double") +
                            ": arguments 'Q' and 'K' (or 'dOut') are too large; scale them down");
    }
  }

  void step_impl(const ConstRef& q, const ConstRef& k, const ConstRef& v, const bool* valid,
                 MatrixType& out, State& state) const {
    const std::string where = "coulomb::LinearAttention::step";
    auto& st = state.data_;
    detail::require(st.batch >= 1 && q.rows() == st.batch, where,
                    "argument 'q' has " + std::to_string(q.rows()) +
                        " rows, expected the batch of the state (" + std::to_string(st.batch) +
                        "; call reset(state, batch) first)");
    const auto dims = detail::check_attention_inputs<Scalar>(where, q, k, v, st.batch, nullptr,
                                                             this->num_heads(), head_dim());
    const Index D = maps_[0].output_dim();
    for (auto& ks : st.keys) {
      if (ks.sz.rows() == 0) {
        ks.sz.setZero(D, dims.dv + 1);
      } else {
        detail::require(ks.sz.cols() == dims.dv + 1, where,
                        "argument 'v' has " + std::to_string(v.cols()) + " columns, expected " +
                            std::to_string(dims.heads * (ks.sz.cols() - 1)) +
                            " as in earlier steps");
      }
    }
    detail::recurrent_step(blocks(), dims, q, k, v, valid, out, st);
  }

  detail::FeatureMapSet<Map> maps_;
  Scalar scale_ = 1;
};

}  // namespace coulomb
