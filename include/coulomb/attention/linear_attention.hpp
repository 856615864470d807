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
/// GEMM. Sequences are processed in blocks of C rows (`AttentionOptions::block_size`): a block
/// of features (C×D) lives only while it is used, so memory does not grow with L·D (unless
/// AttentionOptions::keep_features keeps them from a non-causal forward for its backward). Causal
/// attention is computed block by block: the state of the previous blocks (inter-block, a GEMM)
/// plus the lower-triangular product inside the block (intra-block). Its backward recomputes
/// the running states in a forward sweep (gradients of the queries) and accumulates the
/// gradient of the state in a reverse sweep (gradients of the keys and values); no L×D×d_v
/// tensor is stored.
///
/// Stabilizer (docs/stabilizer.md, docs/attention.md, section "Stabilizer"): for a stabilizable map
/// the queries use Stabilizer::per_row (a shift per query, which cancels in the ratio); the keys
/// that enter one output share one shift. Non-causal: one shift b per key block, and the key
/// sums carry the largest shift B seen so far (rescaled by e^{B_old − B} when a block brings a
/// larger one). Causal: keys are mapped with per-row shifts s_j and query i uses the prefix
/// maximum M_i = max(B, max_{j<=i} s_j), so a later key of the same block never pushes the
/// keys query i sees into underflow; every factor e^{s_j − M_i}, e^{B − M_i} is at most 1.
/// Padded keys are left out of the shifts. A denominator below the smallest normal number
/// counts as zero and gives a zero output (and zero gradients).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../features/detail_exp.hpp"
#include "../features/feature_map.hpp"
#include "detail_parallel.hpp"
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

/// The features of one block kept from a non-causal forward for the backward
/// (AttentionOptions::keep_features). The matrices are swapped with the block buffers, never
/// copied.
template <typename Scalar>
struct KeptBlock {
  Matrix<Scalar> phi_q;  // n × D: Φ(s·Q) with per-row shifts
  Matrix<Scalar> phi_k;  // n × D: Φ(s·K) at the block's shift, padded rows 0
  Scalar shift = 0;      // the block's key shift b (−∞: no real key, phi_k unused)
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

  std::vector<detail::LinearScratch<Scalar>> scratch_;
  std::vector<detail::KeyState<Scalar>> saved_;     // per task: non-causal key sums
  std::vector<detail::KeyState<Scalar>> parts_;     // per part: local key sums
  std::vector<detail::KeyState<Scalar>> pieces_;    // key sums of the pieces of the parts
  std::vector<detail::KeyState<Scalar>> incoming_;  // per part: key sums of the earlier parts
  std::vector<Matrix<Scalar>> part_grad_;           // per part: gradient sums
  std::vector<Matrix<Scalar>> part_grad_in_;        // per part: gradient sums of later parts
  std::vector<Scalar> part_ref_;                    // reference shift of part_grad_
  std::vector<Scalar> part_ref_in_;                 // reference shift of part_grad_in_
  std::vector<char> part_has_in_;
  std::vector<Matrix<Scalar>> piece_grad_;  // gradient sums of the pieces of the parts
  std::vector<Scalar> piece_ref_;
  std::vector<char> piece_has_;
  Matrix<Scalar> inv_den_;      // L × tasks (causal backward): 1 / denominators
  Matrix<Scalar> rfac_;         // L × tasks (causal backward): r_i
  Matrix<Scalar> block_shift_;  // (blocks + 1) × tasks (causal backward): state shift entering
                                // each block, and the final one
  std::vector<detail::KeptBlock<Scalar>> kept_;  // tasks × blocks (keep_features)
  detail::AttentionDims saved_dims_;
  bool saved_valid_ = false;
  bool kept_valid_ = false;  // kept_ holds the features of the last forward
  bool saved_masked_ = false;
};

/// Linear attention over a FeatureMap. One map may be shared by all heads, or each head may
/// have its own (same d_k and m). See docs/attention.md.
template <FeatureMap Map>
class LinearAttention {
 public:
  using Scalar = typename Map::Scalar;                 ///< float or double (the map's)
  using MatrixType = Matrix<Scalar>;                   ///< dense column-major matrix
  using VectorType = Vector<Scalar>;                   ///< dense column vector
  using ConstRef = Eigen::Ref<const MatrixType>;       ///< how inputs are taken (no copy)
  using Workspace = LinearAttentionWorkspace<Scalar>;  ///< reusable buffers
  using Gradients = AttentionGradients<Scalar>;        ///< what backward fills

  /// Whether the map honours the Stabilizer (feature_map_traits), so shifts are used.
  static constexpr bool stabilized = feature_map_traits<Map>::is_stabilizable;

  /// Running state of causal decoding for a batch: per (sequence, head) the key sums Sz
  /// (D × (d_v+1)) and their shift. Filled by reset() and step().
  class State {
   public:
    /// Sequences in the batch.
    Index batch() const noexcept { return batch_; }
    /// Tokens consumed since reset().
    Index position() const noexcept { return position_; }

   private:
    friend class LinearAttention;
    Index batch_ = 0;
    Index position_ = 0;
    std::vector<detail::KeyState<Scalar>> keys_;
    MatrixType phi_q_, phi_k_, numden_;
    VectorType log_scale_;
  };

  /// One feature map shared by all heads.
  explicit LinearAttention(const Map& map, AttentionOptions options = {})
      : LinearAttention(std::vector<Map>{map}, options) {}

  /// One map for all heads (maps.size() == 1) or one per head (maps.size() == num_heads), all
  /// with the same input_dim() and output_dim().
  explicit LinearAttention(std::vector<Map> maps, AttentionOptions options = {})
      : maps_(std::move(maps)), options_(options) {
    const std::string where = "coulomb::LinearAttention::constructor";
    detail::check_attention_options(where, options_);
    const Index n = static_cast<Index>(maps_.size());
    detail::require(n == 1 || n == options_.num_heads, where,
                    "argument 'maps' has " + std::to_string(n) +
                        " feature maps, expected 1 (shared) or num_heads = " +
                        std::to_string(options_.num_heads));
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
    scale_ = static_cast<Scalar>(detail::attention_input_scale(where, options_, head_dim()));
  }

  /// The options.
  const AttentionOptions& options() const noexcept { return options_; }
  /// Number of heads H.
  Index num_heads() const noexcept { return options_.num_heads; }
  /// Query/key width per head d_k (the maps' input_dim()).
  Index head_dim() const noexcept { return maps_[0].input_dim(); }
  /// The factor s applied to queries and keys before the map.
  Scalar input_scale() const noexcept { return scale_; }
  /// Number of feature maps (1 or num_heads()).
  Index num_maps() const noexcept { return static_cast<Index>(maps_.size()); }
  /// Feature map i (i < num_maps()).
  const Map& feature_map(Index i = 0) const { return maps_.at(static_cast<std::size_t>(i)); }
  /// Feature map i, mutable: set_omega or redraw it between calls (not between a forward and
  /// its backward).
  Map& feature_map(Index i = 0) { return maps_.at(static_cast<std::size_t>(i)); }
  /// The feature map of head h.
  const Map& map_of_head(Index h) const { return maps_[maps_.size() == 1 ? 0 : h]; }

  /// Out = attention(Q, K, V) for `batch` sequences of equal length (layout in layout.hpp).
  /// Out is resized to (B·L) × (H·d_v). The workspace keeps what backward needs.
  void forward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, MatrixType& Out,
               Workspace& ws, Index batch = 1) const {
    forward_impl(Q, K, V, batch, nullptr, Out, ws);
  }

  /// The same with a padding mask (L × B; true = token, false = padding); B = mask.cols().
  void forward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, const PaddingMask& mask,
               MatrixType& Out, Workspace& ws) const {
    forward_impl(Q, K, V, mask.cols() > 0 ? mask.cols() : 1, &mask, Out, ws);
  }

  /// Out as a new matrix (allocates a workspace; for tests and one-off use).
  MatrixType forward(const ConstRef& Q, const ConstRef& K, const ConstRef& V,
                     Index batch = 1) const {
    MatrixType Out;
    Workspace ws;
    forward(Q, K, V, Out, ws, batch);
    return Out;
  }

  /// Gradients of a loss L given dOut = ∂L/∂Out, where Out is the output of forward() on the
  /// same Q, K, V (and mask) with the same workspace and unchanged feature maps. Fills
  /// grads.dQ, dK, dV and, if options().omega_gradient, grads.dOmega (one per map).
  void backward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, const ConstRef& Out,
                const ConstRef& dOut, Gradients& grads, Workspace& ws, Index batch = 1) const {
    backward_impl(Q, K, V, batch, nullptr, Out, dOut, grads, ws);
  }

  /// The same with a padding mask.
  void backward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, const PaddingMask& mask,
                const ConstRef& Out, const ConstRef& dOut, Gradients& grads, Workspace& ws) const {
    backward_impl(Q, K, V, mask.cols() > 0 ? mask.cols() : 1, &mask, Out, dOut, grads, ws);
  }

  /// Starts causal decoding of `batch` sequences: empty key sums.
  void reset(State& state, Index batch = 1) const {
    detail::require(batch >= 1, "coulomb::LinearAttention::reset",
                    "argument 'batch' must be at least 1, got " + std::to_string(batch));
    state.batch_ = batch;
    state.position_ = 0;
    state.keys_.resize(static_cast<std::size_t>(batch * num_heads()));
    for (auto& k : state.keys_) {
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
  static constexpr Scalar neg_inf = -std::numeric_limits<Scalar>::infinity();
  using Buffers = detail::BlockBuffers<Scalar>;
  using Scratch = detail::LinearScratch<Scalar>;
  using KeyState = detail::KeyState<Scalar>;
  using KeptBlock = detail::KeptBlock<Scalar>;

  /// One (sequence, head) task: views of its rows and columns.
  struct Task {
    ConstRef q, k, v;
    const bool* valid;  // L entries, or nullptr
    Index row0, head;
    Index map_index;
  };

  /// Sizes fixed for one call.
  struct Plan {
    detail::AttentionDims dims;
    Index D = 0;       // feature columns
    Index m = 0;       // particles
    Index block = 0;   // C
    Index blocks = 0;  // ⌈L / C⌉
    Index parts = 1;   // P
    int threads = 1;   // T
    Index rows(Index c) const { return std::min(block, dims.length - c * block); }
    Index part_begin(Index p) const { return p * blocks / parts; }
  };

  Task task(const ConstRef& Q, const ConstRef& K, const ConstRef& V, const PaddingMask* mask,
            const Plan& plan, Index t) const {
    const auto& d = plan.dims;
    const Index b = t / d.heads;
    const Index h = t % d.heads;
    const Index r0 = b * d.length;
    return Task{Q.block(r0, h * d.dk, d.length, d.dk),
                K.block(r0, h * d.dk, d.length, d.dk),
                V.block(r0, h * d.dv, d.length, d.dv),
                mask ? mask->data() + b * d.length : nullptr,
                r0,
                h,
                maps_.size() == 1 ? 0 : h};
  }

  Plan make_plan(const detail::AttentionDims& dims) const {
    Plan p;
    p.dims = dims;
    p.D = maps_[0].output_dim();
    p.m = maps_[0].num_particles();
    p.block = options_.block_size > 0 ? options_.block_size : (options_.causal ? 64 : 256);
    p.blocks = dims.length == 0 ? 0 : (dims.length + p.block - 1) / p.block;
    p.threads = detail::resolve_threads(options_.num_threads);
    Index parts = options_.sequence_parts;
    if (parts == 0) parts = dims.tasks() >= p.threads ? 1 : p.threads;
    p.parts = std::max<Index>(1, std::min(parts, p.blocks));
    return p;
  }

  void prepare(Workspace& ws, const Plan& plan, bool for_backward) const {
    const auto T = static_cast<std::size_t>(plan.threads);
    if (ws.scratch_.size() < T) ws.scratch_.resize(T);
    const auto P = static_cast<std::size_t>(plan.parts);
    if (ws.parts_.size() < P) {
      ws.parts_.resize(P);
      ws.incoming_.resize(P);
      ws.part_grad_.resize(P);
      ws.part_grad_in_.resize(P);
      ws.part_ref_.resize(P);
      ws.part_ref_in_.resize(P);
      ws.part_has_in_.resize(P);
    }
    if (for_backward && options_.omega_gradient) {
      for (std::size_t i = 0; i < T; ++i) {
        auto& acc = ws.scratch_[i].domega;
        acc.resize(maps_.size());
        for (auto& g : acc) g.setZero(plan.m, plan.dims.dk);
      }
    }
  }

  Buffers& buffers(Scratch& sc, const Plan& plan, Index n) const {
    return n == plan.block ? sc.full : sc.tail;
  }

  // ---- blocks ---------------------------------------------------------------------------

  /// Φ(s·Q) of rows [r0, r0+n) into buf.phi_q (per-row shifts, which cancel in the ratio).
  void map_queries(const Task& tk, Index r0, Index n, Buffers& buf) const {
    maps_[tk.map_index].map(scale_ * tk.q.middleRows(r0, n), buf.phi_q,
                            stabilized ? Stabilizer::per_row : Stabilizer::none);
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
        fm.map(scale_ * tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::global, buf.log_scale);
        b = buf.log_scale(0);
      } else {
        fm.map(scale_ * tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::none);
      }
      return b;
    }
    // Padding in the block: the shift must be the largest over the real tokens only.
    buf.factor.resize(n);
    if constexpr (stabilized) {
      fm.map(scale_ * tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::per_row, buf.log_scale);
      check_key_shifts(valid, buf.log_scale);
      b = neg_inf;
      for (Index i = 0; i < n; ++i)
        if (valid[i]) b = std::max(b, buf.log_scale(i));
      for (Index i = 0; i < n; ++i)
        buf.factor(i) = valid[i] ? std::exp(buf.log_scale(i) - b) : Scalar(zero_padded ? 0 : 1);
    } else {
      fm.map(scale_ * tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::none);
      if (!zero_padded) return b;
      for (Index i = 0; i < n; ++i) buf.factor(i) = valid[i] ? Scalar(1) : Scalar(0);
    }
    buf.phi_k.array().colwise() *= buf.factor.array();
    return b;
  }

  /// buf.vx = [V rows, 1].
  void load_values(const Task& tk, Index r0, Index n, Index dv, Buffers& buf) const {
    buf.vx.resize(n, dv + 1);
    buf.vx.leftCols(dv) = tk.v.middleRows(r0, n);
    buf.vx.col(dv).setOnes();
  }

  /// buf.inv_den_i = 1/den_i, or 0 for a padded query or a denominator below the smallest
  /// normal number (the zero-denominator guard).
  template <typename D>
  void invert_denominators(const Task& tk, Index r0, const Eigen::MatrixBase<D>& den,
                           Buffers& buf) const {
    const Scalar tiny = std::numeric_limits<Scalar>::min();
    buf.inv_den = (den.array().abs() >= tiny).select(den.array().inverse(), Scalar(0));
    if (tk.valid) {
      for (Index i = 0; i < den.size(); ++i)
        if (!tk.valid[r0 + i]) buf.inv_den(i) = 0;
    }
  }

  /// Throws numerical_error naming 'Q' and 'K' unless the numerators, denominators and outputs
  /// of a block are finite: finite features whose sums over the keys overflow (PORF-relu or
  /// softplus features of inputs of norm ~1e30 in float) would otherwise give ∞/∞ = NaN, or
  /// ∞ as a denominator a silent 0. Costs a pass over C × (d_v + 1) numbers per block.
  template <typename Rows>
  void check_block_outputs(const Buffers& buf, const Rows& out) const {
    if (coulomb::detail::all_finite(buf.numden) && coulomb::detail::all_finite(out)) return;
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
  void output_gradients(const Eigen::MatrixBase<DG>& G, const Eigen::MatrixBase<DO>& out,
                        Buffers& buf) const {
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

  /// dX rows = s · ∂L/∂(sX) through the map; accumulates ∂L/∂Ω into sc.domega.
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
      if (options_.omega_gradient) {
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
  /// features and shifts are kept there.
  void accumulate_keys(const Task& tk, const Plan& plan, Index c0, Index c1, Scratch& sc,
                       KeyState& st, KeptBlock* kept = nullptr) const {
    for (Index c = c0; c < c1; ++c) {
      const Index r0 = c * plan.block;
      const Index n = plan.rows(c);
      Buffers& buf = buffers(sc, plan, n);
      const Scalar b = map_keys(tk, r0, n, buf, true);
      if (kept) kept[c].shift = b;
      if (b == neg_inf) continue;
      load_values(tk, r0, n, plan.dims.dv, buf);
      const Scalar alpha = st.absorb(b);
      st.sz.noalias() += alpha * buf.phi_k.transpose() * buf.vx;
      if (kept) buf.phi_k.swap(kept[c].phi_k);
    }
  }

  /// Whether the forward keeps its features for the backward (keep_features, non-causal).
  bool keeps_features() const noexcept { return options_.keep_features && !options_.causal; }

  /// The kept blocks of task t, or nullptr when the forward does not keep features.
  KeptBlock* kept_blocks(Workspace& ws, const Plan& plan, Index t) const {
    return keeps_features() ? ws.kept_.data() + t * plan.blocks : nullptr;
  }

  // ---- scheduling -------------------------------------------------------------------------

  /// Runs task_body(t, thread, parts) for every task: tasks in parallel with one part each,
  /// or one task after the other with its parts in parallel.
  template <typename Body>
  void run_tasks(const Plan& plan, Body&& task_body) const {
    if (plan.parts == 1) {
      detail::parallel_for(plan.dims.tasks(), plan.threads,
                           [&](Index t, int thread) { task_body(t, thread); });
    } else {
      for (Index t = 0; t < plan.dims.tasks(); ++t) task_body(t, 0);
    }
  }

  /// Runs part_body(p, thread) for the parts of one task: inline on `thread` when there is
  /// one part, in parallel otherwise.
  template <typename Body>
  void run_parts(const Plan& plan, int thread, Body&& part_body) const {
    if (plan.parts == 1)
      part_body(Index(0), thread);
    else
      detail::parallel_for(plan.parts, plan.threads, part_body);
  }

  /// Blocks [c0, c1) of piece q (of `pieces`) of part p: the parts' blocks split evenly.
  std::pair<Index, Index> piece_range(const Plan& plan, Index p, Index q, Index pieces) const {
    const Index b0 = plan.part_begin(p);
    const Index len = plan.part_begin(p + 1) - b0;
    return {b0 + q * len / pieces, b0 + (q + 1) * len / pieces};
  }

  /// Key sums that enter each part: incoming_[p] = ⊕ of the parts before p. The key sums of
  /// parts 0 … P−2 are split into P pieces each, so that all threads share the work.
  void prefix_key_states(const Task& tk, const Plan& plan, Workspace& ws) const {
    const Index P = plan.parts;
    const Index cols = plan.dims.dv + 1;
    const auto items = static_cast<std::size_t>((P - 1) * P);
    if (ws.pieces_.size() < items) ws.pieces_.resize(items);
    detail::parallel_for((P - 1) * P, plan.threads, [&](Index i, int th) {
      auto& local = ws.pieces_[static_cast<std::size_t>(i)];
      local.clear(plan.D, cols);
      const auto [c0, c1] = piece_range(plan, i / P, i % P, P);
      accumulate_keys(tk, plan, c0, c1, ws.scratch_[static_cast<std::size_t>(th)], local);
    });
    ws.incoming_[0].clear(plan.D, cols);
    for (Index p = 1; p < P; ++p) {
      auto& in = ws.incoming_[static_cast<std::size_t>(p)];
      in = ws.incoming_[static_cast<std::size_t>(p - 1)];
      for (Index q = 0; q < P; ++q) in.merge(ws.pieces_[static_cast<std::size_t>((p - 1) * P + q)]);
    }
  }

  // ---- forward ----------------------------------------------------------------------------

  void forward_impl(const ConstRef& Q, const ConstRef& K, const ConstRef& V, Index batch,
                    const PaddingMask* mask, MatrixType& Out, Workspace& ws) const {
    const std::string where = "coulomb::LinearAttention::forward";
    const auto dims = detail::check_attention_inputs<Scalar>(where, Q, K, V, batch, mask,
                                                             num_heads(), head_dim());
    const Plan plan = make_plan(dims);
    Out.resize(dims.batch * dims.length, dims.heads * dims.dv);
    ws.saved_valid_ = false;
    ws.kept_valid_ = false;
    prepare(ws, plan, false);
    if (!options_.causal && ws.saved_.size() < static_cast<std::size_t>(dims.tasks()))
      ws.saved_.resize(static_cast<std::size_t>(dims.tasks()));
    const bool keep = keeps_features();
    if (keep && ws.kept_.size() < static_cast<std::size_t>(dims.tasks() * plan.blocks))
      ws.kept_.resize(static_cast<std::size_t>(dims.tasks() * plan.blocks));
    run_tasks(plan, [&](Index t, int thread) {
      const Task tk = task(Q, K, V, mask, plan, t);
      auto out = Out.block(tk.row0, tk.head * dims.dv, dims.length, dims.dv);
      if (options_.causal)
        causal_forward_task(tk, plan, ws, thread, out);
      else
        noncausal_forward_task(tk, plan, ws, thread, t, out);
    });
    if (!options_.causal) {
      ws.saved_dims_ = dims;
      ws.saved_masked_ = mask != nullptr;
      ws.saved_valid_ = true;
      ws.kept_valid_ = keep;
    }
  }

  template <typename OutBlock>
  void noncausal_forward_task(const Task& tk, const Plan& plan, Workspace& ws, int thread, Index t,
                              OutBlock& out) const {
    const Index dv = plan.dims.dv;
    KeyState& total = ws.saved_[static_cast<std::size_t>(t)];
    KeptBlock* kept = kept_blocks(ws, plan, t);
    if (plan.parts == 1) {
      total.clear(plan.D, dv + 1);
      accumulate_keys(tk, plan, 0, plan.blocks, ws.scratch_[static_cast<std::size_t>(thread)],
                      total, kept);
    } else {
      detail::parallel_for(plan.parts, plan.threads, [&](Index p, int th) {
        auto& local = ws.parts_[static_cast<std::size_t>(p)];
        local.clear(plan.D, dv + 1);
        accumulate_keys(tk, plan, plan.part_begin(p), plan.part_begin(p + 1),
                        ws.scratch_[static_cast<std::size_t>(th)], local, kept);
      });
      total = ws.parts_[0];
      for (Index p = 1; p < plan.parts; ++p) total.merge(ws.parts_[static_cast<std::size_t>(p)]);
    }
    run_parts(plan, thread, [&](Index p, int th) {
      Scratch& sc = ws.scratch_[static_cast<std::size_t>(th)];
      for (Index c = plan.part_begin(p); c < plan.part_begin(p + 1); ++c) {
        const Index r0 = c * plan.block;
        const Index n = plan.rows(c);
        Buffers& buf = buffers(sc, plan, n);
        map_queries(tk, r0, n, buf);
        buf.numden.noalias() = buf.phi_q * total.sz;
        invert_denominators(tk, r0, buf.numden.col(dv), buf);
        out.middleRows(r0, n) =
            (buf.numden.leftCols(dv).array().colwise() * buf.inv_den.array()).matrix();
        check_block_outputs(buf, out.middleRows(r0, n));
        if (kept) buf.phi_q.swap(kept[c].phi_q);
      }
    });
  }

  /// Φ(s·K) of rows [r0, r0+n) into buf.phi_k with a shift per row, buf.log_scale = s_j
  /// (−∞ for padding; 0 for maps without shifts). Returns whether the block has a real key.
  bool map_keys_per_row(const Task& tk, Index r0, Index n, Buffers& buf) const {
    const Map& fm = maps_[tk.map_index];
    if constexpr (stabilized) {
      fm.map(scale_ * tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::per_row, buf.log_scale);
      check_key_shifts(tk.valid ? tk.valid + r0 : nullptr, buf.log_scale);
    } else {
      fm.map(scale_ * tk.k.middleRows(r0, n), buf.phi_k, Stabilizer::none);
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

  /// The shifts of a causal block whose keys are mapped (map_keys_per_row) and whose incoming
  /// state has shift B: M_i = max(B, max_{j<=i} s_j) (query i's shift, shared by all of its
  /// keys), r_i = e^{B − M_i}, and E_ij = e^{s_j − M_i} for j <= i (0 for padded keys).
  /// Returns the shift after the block, M_{n−1}.
  Scalar causal_shifts(Index n, Scalar B, bool any_key, Buffers& buf) const {
    buf.prefix.resize(n);
    buf.rfac.resize(n);
    Scalar M = B;
    for (Index i = 0; i < n; ++i) {
      M = std::max(M, buf.log_scale(i));
      buf.prefix(i) = M;
      buf.rfac(i) = M == neg_inf ? Scalar(0) : detail::exp_difference(B, M);
    }
    if (any_key) {
      buf.e.resize(n, n);
      for (Index j = 0; j < n; ++j) {
        auto col = buf.e.col(j).tail(n - j);
        const Scalar sj = buf.log_scale(j);
        if (sj == neg_inf)
          col.setZero();  // a padded key; s_j − M_i would be NaN where M_i is −∞ too
        else
          col.array() = detail::exp_flushed(sj - buf.prefix.tail(n - j).array());
      }
    }
    return M;
  }

  /// One causal block with the state st (the blocks before, at shift st.shift) left
  /// unchanged: buf.numden = [num, den] of rows [r0, r0+n),
  ///   [num, den]_i = r_i Φ_Q,i Sz + Σ_{j<=i} A_ij [v_j, 1],  A_ij = (Φ_Q,i · Φ_K,j) E_ij,
  /// and buf.phi_q, phi_k, vx, e, a, log_scale, prefix, rfac for later use. Returns the shift
  /// after the block; *any_key tells whether the block has a real key.
  Scalar causal_block(const Task& tk, const Plan& plan, Index r0, Index n, Buffers& buf,
                      const KeyState& st, bool* any_key) const {
    *any_key = map_keys_per_row(tk, r0, n, buf);
    map_queries(tk, r0, n, buf);
    const Scalar after = causal_shifts(n, st.shift, *any_key, buf);
    buf.numden.noalias() = buf.phi_q * st.sz;
    buf.numden.array().colwise() *= buf.rfac.array();
    if (*any_key) {
      load_values(tk, r0, n, plan.dims.dv, buf);
      intra_block_weights(n, buf);
      buf.numden.noalias() += buf.a.template triangularView<Eigen::Lower>() * buf.vx;
    }
    return after;
  }

  /// buf.a = lower((Φ_Q Φ_Kᵀ) ⊙ E).
  void intra_block_weights(Index n, Buffers& buf) const {
    buf.a.resize(n, n);
    buf.a.template triangularView<Eigen::Lower>() = buf.phi_q * buf.phi_k.transpose();
    for (Index j = 0; j < n; ++j)
      buf.a.col(j).tail(n - j).array() *= buf.e.col(j).tail(n - j).array();
  }

  /// st ← the key sums including the block: Sz ← e^{B − B'} Sz + Φ_Kᵀ (f ⊙ [V, 1]) with
  /// f_j = e^{s_j − B'} (0 for padding), B' = `after`.
  void causal_update_state(Index n, Scalar after, Buffers& buf, KeyState& st) const {
    if (after == neg_inf) return;  // no real key so far
    buf.factor.resize(n);
    for (Index j = 0; j < n; ++j)
      buf.factor(j) = buf.log_scale(j) == neg_inf ? Scalar(0) : std::exp(buf.log_scale(j) - after);
    if (st.shift != neg_inf && st.shift != after) st.sz *= std::exp(st.shift - after);
    buf.scaled = buf.vx.array().colwise() * buf.factor.array();
    st.sz.noalias() += buf.phi_k.transpose() * buf.scaled;
    st.shift = after;
  }

  template <typename OutBlock>
  void causal_forward_task(const Task& tk, const Plan& plan, Workspace& ws, int thread,
                           OutBlock& out) const {
    const Index dv = plan.dims.dv;
    if (plan.parts > 1) prefix_key_states(tk, plan, ws);
    run_parts(plan, thread, [&](Index p, int th) {
      Scratch& sc = ws.scratch_[static_cast<std::size_t>(th)];
      KeyState& st = sc.state;
      if (plan.parts == 1)
        st.clear(plan.D, dv + 1);
      else
        st = ws.incoming_[static_cast<std::size_t>(p)];
      for (Index c = plan.part_begin(p); c < plan.part_begin(p + 1); ++c) {
        const Index r0 = c * plan.block;
        const Index n = plan.rows(c);
        Buffers& buf = buffers(sc, plan, n);
        bool any_key = false;
        const Scalar after = causal_block(tk, plan, r0, n, buf, st, &any_key);
        invert_denominators(tk, r0, buf.numden.col(dv), buf);
        out.middleRows(r0, n) =
            (buf.numden.leftCols(dv).array().colwise() * buf.inv_den.array()).matrix();
        check_block_outputs(buf, out.middleRows(r0, n));
        if (any_key) causal_update_state(n, after, buf, st);
      }
    });
  }

  // ---- backward ---------------------------------------------------------------------------

  void backward_impl(const ConstRef& Q, const ConstRef& K, const ConstRef& V, Index batch,
                     const PaddingMask* mask, const ConstRef& Out, const ConstRef& dOut,
                     Gradients& grads, Workspace& ws) const {
    const std::string where = "coulomb::LinearAttention::backward";
    const auto dims = detail::check_attention_inputs<Scalar>(where, Q, K, V, batch, mask,
                                                             num_heads(), head_dim());
    detail::check_attention_outputs<Scalar>(where, dims, Out, dOut);
    if (!options_.causal) {
      detail::require(
          ws.saved_valid_ && ws.saved_dims_ == dims && ws.saved_masked_ == (mask != nullptr), where,
          "argument 'ws' holds no forward pass of these inputs; call forward(Q, K, "
          "V, ...) with the same workspace first");
    }
    const Plan plan = make_plan(dims);
    prepare(ws, plan, true);
    // Invalid while the kept features are swapped in and out: a backward that throws midway
    // leaves them mixed with the buffers, and a later backward then maps again.
    const bool kept_ok = ws.kept_valid_ && keeps_features();
    ws.kept_valid_ = false;
    grads.dQ.resize(Q.rows(), Q.cols());
    grads.dK.resize(K.rows(), K.cols());
    grads.dV.resize(V.rows(), V.cols());
    if (options_.causal) {
      ws.inv_den_.resize(dims.length, dims.tasks());
      ws.rfac_.resize(dims.length, dims.tasks());
      ws.block_shift_.resize(plan.blocks + 1, dims.tasks());
    }
    run_tasks(plan, [&](Index t, int thread) {
      const Task tk = task(Q, K, V, mask, plan, t);
      if (options_.causal)
        causal_backward_task(tk, plan, ws, thread, t, Out, dOut, grads);
      else
        noncausal_backward_task(tk, plan, ws, thread, t, kept_ok, Out, dOut, grads);
    });
    ws.kept_valid_ = kept_ok;
    if (options_.omega_gradient) {
      grads.dOmega.resize(maps_.size());
      for (std::size_t i = 0; i < maps_.size(); ++i) {
        grads.dOmega[i] = ws.scratch_[0].domega[i];
        for (int th = 1; th < plan.threads; ++th)
          grads.dOmega[i] += ws.scratch_[static_cast<std::size_t>(th)].domega[i];
      }
    } else {
      grads.dOmega.clear();
    }
    // A map outside coulomb may not refuse a non-finite dPhi: never return NaN gradients.
    const auto finite = [](const MatrixType& g) { return coulomb::detail::all_finite(g); };
    if (!finite(grads.dQ) || !finite(grads.dK) || !finite(grads.dV) ||
        !std::all_of(grads.dOmega.begin(), grads.dOmega.end(), finite)) {
      throw numerical_error(std::string(where) + ": the gradients overflow " +
                            (std::is_same_v<Scalar, float> ? "float" : "double") +
                            ": arguments 'Q' and 'K' (or 'dOut') are too large; scale them down");
    }
  }

  void noncausal_backward_task(const Task& tk, const Plan& plan, Workspace& ws, int thread, Index t,
                               bool kept_ok, const ConstRef& Out, const ConstRef& dOut,
                               Gradients& grads) const {
    const Index dv = plan.dims.dv;
    const Index dk = plan.dims.dk;
    const Index L = plan.dims.length;
    const KeyState& st = ws.saved_[static_cast<std::size_t>(t)];
    const auto out = Out.block(tk.row0, tk.head * dv, L, dv);
    const auto G = dOut.block(tk.row0, tk.head * dv, L, dv);
    // The forward's features when it kept them (swapped in and back out, so that another
    // backward of the same forward finds them again), else mapped again.
    KeptBlock* kept = kept_ok ? kept_blocks(ws, plan, t) : nullptr;

    // Queries: dΦ_Q = [dnum, dden] Szᵀ, and ∂L/∂Sz = Σ_i Φ_Q,iᵀ [dnum_i, dden_i].
    run_parts(plan, thread, [&](Index p, int th) {
      Scratch& sc = ws.scratch_[static_cast<std::size_t>(th)];
      MatrixType& dsz = plan.parts == 1 ? sc.dsz : ws.part_grad_[static_cast<std::size_t>(p)];
      dsz.setZero(plan.D, dv + 1);
      for (Index c = plan.part_begin(p); c < plan.part_begin(p + 1); ++c) {
        const Index r0 = c * plan.block;
        const Index n = plan.rows(c);
        Buffers& buf = buffers(sc, plan, n);
        if (kept)
          buf.phi_q.swap(kept[c].phi_q);
        else
          map_queries(tk, r0, n, buf);
        buf.factor.noalias() = buf.phi_q * st.sz.col(dv);  // denominators
        invert_denominators(tk, r0, buf.factor, buf);
        output_gradients(G.middleRows(r0, n), out.middleRows(r0, n), buf);
        buf.dphi.noalias() = buf.gx * st.sz.transpose();
        dsz.noalias() += buf.phi_q.transpose() * buf.gx;
        map_backward(tk, tk.q.middleRows(r0, n), buf.phi_q, buf, sc,
                     grads.dQ.block(tk.row0 + r0, tk.head * dk, n, dk));
        if (kept) buf.phi_q.swap(kept[c].phi_q);
      }
    });
    const MatrixType* dsz_total = &ws.scratch_[static_cast<std::size_t>(thread)].dsz;
    if (plan.parts > 1) {
      for (Index p = 1; p < plan.parts; ++p)
        ws.part_grad_[0] += ws.part_grad_[static_cast<std::size_t>(p)];
      dsz_total = &ws.part_grad_[0];
    }
    const MatrixType& dsz = *dsz_total;

    // Keys: dΦ_K = α [V, 1] ∂L/∂Szᵀ, dV = α Φ_K ∂L/∂S, with α = e^{b − B} for a block of
    // shift b under the total shift B.
    run_parts(plan, thread, [&](Index p, int th) {
      Scratch& sc = ws.scratch_[static_cast<std::size_t>(th)];
      for (Index c = plan.part_begin(p); c < plan.part_begin(p + 1); ++c) {
        const Index r0 = c * plan.block;
        const Index n = plan.rows(c);
        Buffers& buf = buffers(sc, plan, n);
        auto dK = grads.dK.block(tk.row0 + r0, tk.head * dk, n, dk);
        auto dV = grads.dV.block(tk.row0 + r0, tk.head * dv, n, dv);
        // Kept key features have their padded rows at 0, recomputed ones at their own shift:
        // either way those rows get dΦ = 0 and contribute nothing.
        const Scalar b = kept ? kept[c].shift : map_keys(tk, r0, n, buf, false);
        if (b == neg_inf) {
          dK.setZero();
          dV.setZero();
          continue;
        }
        if (kept) buf.phi_k.swap(kept[c].phi_k);
        const Scalar alpha = detail::exp_difference(b, st.shift);
        load_values(tk, r0, n, dv, buf);
        buf.dphi.noalias() = alpha * buf.vx * dsz.transpose();
        dV.noalias() = alpha * buf.phi_k * dsz.leftCols(dv);
        zero_padded_rows(tk, r0, buf.dphi);
        zero_padded_rows(tk, r0, dV);
        map_backward(tk, tk.k.middleRows(r0, n), buf.phi_k, buf, sc, dK);
        if (kept) buf.phi_k.swap(kept[c].phi_k);
      }
    });
  }

  void causal_backward_task(const Task& tk, const Plan& plan, Workspace& ws, int thread, Index t,
                            const ConstRef& Out, const ConstRef& dOut, Gradients& grads) const {
    const Index dv = plan.dims.dv;
    const Index dk = plan.dims.dk;
    const Index L = plan.dims.length;
    const auto out = Out.block(tk.row0, tk.head * dv, L, dv);
    const auto G = dOut.block(tk.row0, tk.head * dv, L, dv);
    auto inv_den = ws.inv_den_.col(t);
    auto rfac = ws.rfac_.col(t);
    auto block_shift = ws.block_shift_.col(t);

    // Sweep A, forward in the blocks: recompute the running state Sz (shift B) and the
    // outputs' denominators; dΦ_Q = diag(r) [dnum, dden] Szᵀ + W Φ_K with
    // W = lower([dnum, dden] [V, 1]ᵀ) ⊙ E.
    if (plan.parts > 1) prefix_key_states(tk, plan, ws);
    run_parts(plan, thread, [&](Index p, int th) {
      Scratch& sc = ws.scratch_[static_cast<std::size_t>(th)];
      KeyState& st = sc.state;
      if (plan.parts == 1)
        st.clear(plan.D, dv + 1);
      else
        st = ws.incoming_[static_cast<std::size_t>(p)];
      for (Index c = plan.part_begin(p); c < plan.part_begin(p + 1); ++c) {
        const Index r0 = c * plan.block;
        const Index n = plan.rows(c);
        Buffers& buf = buffers(sc, plan, n);
        block_shift(c) = st.shift;
        bool any_key = false;
        const Scalar after = causal_block(tk, plan, r0, n, buf, st, &any_key);
        invert_denominators(tk, r0, buf.numden.col(dv), buf);
        inv_den.segment(r0, n) = buf.inv_den;
        rfac.segment(r0, n) = buf.rfac;
        output_gradients(G.middleRows(r0, n), out.middleRows(r0, n), buf);
        buf.scaled = buf.gx.array().colwise() * buf.rfac.array();
        buf.dphi.noalias() = buf.scaled * st.sz.transpose();
        if (any_key) {
          weighted_value_gradients(n, buf);
          buf.dphi.noalias() += buf.w.template triangularView<Eigen::Lower>() * buf.phi_k;
        }
        map_backward(tk, tk.q.middleRows(r0, n), buf.phi_q, buf, sc,
                     grads.dQ.block(tk.row0 + r0, tk.head * dk, n, dk));
        if (any_key) causal_update_state(n, after, buf, st);
        if (c + 1 == plan.blocks) block_shift(plan.blocks) = st.shift;
      }
    });

    // The gradient of the state from the queries after each part (parts > 1): parts 1 … P−1
    // are split into P pieces each; every piece sums its blocks' Φ_Qᵀ diag(r) [dnum, dden]
    // (reference shifts as in sweep B), the pieces give each part's sum, then suffix sums
    // give what enters each part from the parts after it.
    if (plan.parts > 1) {
      const Index P = plan.parts;
      const auto items = static_cast<std::size_t>((P - 1) * P);
      if (ws.piece_grad_.size() < items) {
        ws.piece_grad_.resize(items);
        ws.piece_ref_.resize(items);
        ws.piece_has_.resize(items);
      }
      detail::parallel_for((P - 1) * P, plan.threads, [&](Index i, int th) {
        Scratch& sc = ws.scratch_[static_cast<std::size_t>(th)];
        const auto ui = static_cast<std::size_t>(i);
        Scalar ref = neg_inf;
        bool has = false;
        const auto [c0, c1] = piece_range(plan, 1 + i / P, i % P, P);
        for (Index c = c1 - 1; c >= c0; --c) {
          const Index r0 = c * plan.block;
          const Index n = plan.rows(c);
          Buffers& buf = buffers(sc, plan, n);
          map_queries(tk, r0, n, buf);
          buf.inv_den = inv_den.segment(r0, n);
          buf.rfac = rfac.segment(r0, n);
          output_gradients(G.middleRows(r0, n), out.middleRows(r0, n), buf);
          accumulate_state_gradient(buf, block_shift(c), ws.piece_grad_[ui], ref, has);
        }
        ws.piece_ref_[ui] = ref;
        ws.piece_has_[ui] = has ? 1 : 0;
      });
      for (Index p = 1; p < P; ++p) {
        MatrixType& acc = ws.part_grad_[static_cast<std::size_t>(p)];
        Scalar ref = neg_inf;
        bool has = false;
        for (Index q = P - 1; q >= 0; --q) {
          const auto ui = static_cast<std::size_t>((p - 1) * P + q);
          if (!ws.piece_has_[ui]) continue;
          if (has) {
            acc *= detail::exp_difference(ws.piece_ref_[ui], ref);
            acc += ws.piece_grad_[ui];
          } else {
            acc = ws.piece_grad_[ui];
            has = true;
          }
          ref = ws.piece_ref_[ui];
        }
        ws.part_ref_[static_cast<std::size_t>(p)] = ref;
      }
      ws.part_has_in_[static_cast<std::size_t>(plan.parts - 1)] = 0;
      for (Index p = plan.parts - 2; p >= 0; --p) {
        const auto up = static_cast<std::size_t>(p);
        MatrixType& in = ws.part_grad_in_[up];
        in = ws.part_grad_[up + 1];
        ws.part_ref_in_[up] = ws.part_ref_[up + 1];
        if (ws.part_has_in_[up + 1]) {
          in += detail::exp_difference(ws.part_ref_in_[up], ws.part_ref_in_[up + 1]) *
                ws.part_grad_in_[up + 1];
        }
        ws.part_has_in_[up] = 1;
      }
    }

    // Sweep B, backward in the blocks, carrying acc = ∂L/∂Sz of the later blocks at the
    // shift `ref` of the state after the current block: with f_j = e^{s_j − ref},
    //   dΦ_K = diag(f) [V, 1] accᵀ + Wᵀ Φ_Q,   dV = diag(f) Φ_K acc_S + Aᵀ dnum.
    run_parts(plan, thread, [&](Index p, int th) {
      Scratch& sc = ws.scratch_[static_cast<std::size_t>(th)];
      MatrixType& acc = sc.dsz;
      Scalar ref = neg_inf;
      bool has = false;
      if (plan.parts > 1 && ws.part_has_in_[static_cast<std::size_t>(p)]) {
        acc = ws.part_grad_in_[static_cast<std::size_t>(p)];
        ref = ws.part_ref_in_[static_cast<std::size_t>(p)];
        has = true;
      }
      for (Index c = plan.part_begin(p + 1) - 1; c >= plan.part_begin(p); --c) {
        const Index r0 = c * plan.block;
        const Index n = plan.rows(c);
        Buffers& buf = buffers(sc, plan, n);
        auto dK = grads.dK.block(tk.row0 + r0, tk.head * dk, n, dk);
        auto dV = grads.dV.block(tk.row0 + r0, tk.head * dv, n, dv);
        map_queries(tk, r0, n, buf);
        buf.inv_den = inv_den.segment(r0, n);
        output_gradients(G.middleRows(r0, n), out.middleRows(r0, n), buf);
        const bool any_key = map_keys_per_row(tk, r0, n, buf);
        const Scalar after = causal_shifts(n, block_shift(c), any_key, buf);
        if (!any_key) {
          dK.setZero();
          dV.setZero();
        } else {
          load_values(tk, r0, n, dv, buf);
          if (has) {
            buf.factor.resize(n);
            for (Index j = 0; j < n; ++j)
              buf.factor(j) =
                  buf.log_scale(j) == neg_inf ? Scalar(0) : std::exp(buf.log_scale(j) - after);
            buf.scaled = buf.vx.array().colwise() * buf.factor.array();
            buf.dphi.noalias() = buf.scaled * acc.transpose();
            dV.noalias() = buf.phi_k * acc.leftCols(dv);
            dV.array().colwise() *= buf.factor.array();
          } else {
            buf.dphi.setZero(n, plan.D);
            dV.setZero();
          }
          weighted_value_gradients(n, buf);
          buf.dphi.noalias() +=
              buf.w.template triangularView<Eigen::Lower>().transpose() * buf.phi_q;
          intra_block_weights(n, buf);
          dV.noalias() +=
              buf.a.template triangularView<Eigen::Lower>().transpose() * buf.gx.leftCols(dv);
          zero_padded_rows(tk, r0, buf.dphi);
          zero_padded_rows(tk, r0, dV);
          map_backward(tk, tk.k.middleRows(r0, n), buf.phi_k, buf, sc, dK);
        }
        accumulate_state_gradient(buf, block_shift(c), acc, ref, has);
      }
    });
  }

  /// buf.w = lower([dnum, dden] [V, 1]ᵀ) ⊙ E.
  void weighted_value_gradients(Index n, Buffers& buf) const {
    buf.w.resize(n, n);
    buf.w.template triangularView<Eigen::Lower>() = buf.gx * buf.vx.transpose();
    for (Index j = 0; j < n; ++j)
      buf.w.col(j).tail(n - j).array() *= buf.e.col(j).tail(n - j).array();
  }

  /// Moves acc (at shift ref, the state after this block) to the shift B entering the block
  /// and adds the block's queries: acc ← e^{B − ref} acc + Φ_Qᵀ diag(r) [dnum, dden]; ref ← B.
  void accumulate_state_gradient(Buffers& buf, Scalar B, MatrixType& acc, Scalar& ref,
                                 bool& has) const {
    buf.scaled = buf.gx.array().colwise() * buf.rfac.array();
    if (has) {
      const Scalar f = detail::exp_difference(B, ref);
      if (f != Scalar(1)) acc *= f;
      acc.noalias() += buf.phi_q.transpose() * buf.scaled;
    } else {
      acc.noalias() = buf.phi_q.transpose() * buf.scaled;
      has = true;
    }
    ref = B;
  }

  // ---- recurrent step -----------------------------------------------------------------------

  void step_impl(const ConstRef& q, const ConstRef& k, const ConstRef& v, const bool* valid,
                 MatrixType& out, State& state) const {
    const std::string where = "coulomb::LinearAttention::step";
    detail::require(state.batch_ >= 1 && q.rows() == state.batch_, where,
                    "argument 'q' has " + std::to_string(q.rows()) +
                        " rows, expected the batch of the state (" + std::to_string(state.batch_) +
                        "; call reset(state, batch) first)");
    const auto dims = detail::check_attention_inputs<Scalar>(where, q, k, v, state.batch_, nullptr,
                                                             num_heads(), head_dim());
    const Index B = state.batch_;
    const Index H = num_heads();
    const Index dk = dims.dk;
    const Index dv = dims.dv;
    const Index D = maps_[0].output_dim();
    for (auto& ks : state.keys_) {
      if (ks.sz.rows() == 0) {
        ks.sz.setZero(D, dv + 1);
      } else {
        detail::require(ks.sz.cols() == dv + 1, where,
                        "argument 'v' has " + std::to_string(v.cols()) + " columns, expected " +
                            std::to_string(H * (ks.sz.cols() - 1)) + " as in earlier steps");
      }
    }
    out.resize(B, H * dv);
    const Scalar tiny = std::numeric_limits<Scalar>::min();
    for (Index h = 0; h < H; ++h) {
      const Map& fm = map_of_head(h);
      const Stabilizer stab = stabilized ? Stabilizer::per_row : Stabilizer::none;
      fm.map(scale_ * q.middleCols(h * dk, dk), state.phi_q_, stab);
      fm.map(scale_ * k.middleCols(h * dk, dk), state.phi_k_, stab, state.log_scale_);
      if constexpr (stabilized) check_key_shifts(valid, state.log_scale_);
      for (Index b = 0; b < B; ++b) {
        auto o = out.block(b, h * dv, 1, dv);
        if (valid && !valid[b]) {
          o.setZero();
          continue;
        }
        KeyState& ks = state.keys_[static_cast<std::size_t>(b * H + h)];
        const Scalar alpha = ks.absorb(state.log_scale_(b));
        ks.sz.leftCols(dv).noalias() +=
            (alpha * state.phi_k_.row(b).transpose()) * v.block(b, h * dv, 1, dv);
        ks.sz.col(dv) += alpha * state.phi_k_.row(b).transpose();
        state.numden_.noalias() = state.phi_q_.row(b) * ks.sz;
        const Scalar den = state.numden_(0, dv);
        const Scalar inv = std::abs(den) >= tiny ? Scalar(1) / den : Scalar(0);
        o = inv * state.numden_.leftCols(dv);
      }
    }
    ++state.position_;
  }

  std::vector<Map> maps_;
  AttentionOptions options_;
  Scalar scale_ = 1;
};

}  // namespace coulomb
