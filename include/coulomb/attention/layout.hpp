// SPDX-License-Identifier: MIT
/// @file attention/layout.hpp
/// @brief The data layout, options and gradient container shared by linear attention and exact
/// softmax attention (docs/attention.md); the padding mask is core/tokens.hpp's PaddingMask.
///
/// A batch of B sequences of length L, with H heads of query/key width d_k and value width
/// d_v, is stored in three column-major matrices, as the projections of a Transformer produce
/// them:
///   Q, K ∈ R^{(B·L)×(H·d_k)},  V ∈ R^{(B·L)×(H·d_v)},  Out ∈ R^{(B·L)×(H·d_v)}.
/// Sequence b occupies rows [b·L, (b+1)·L); head h occupies columns [h·d_k, (h+1)·d_k) of Q and
/// K and [h·d_v, (h+1)·d_v) of V and Out. Each (sequence, head) pair is an independent
/// attention problem ("task").
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/parallel.hpp"
#include "../core/tokens.hpp"

namespace coulomb {

/// Options of LinearAttention and SoftmaxAttention.
struct AttentionOptions {
  /// Number of heads H; the columns of Q, K (and V) are split into H equal blocks.
  Index num_heads = 1;
  /// Causal attention: position i attends to positions j <= i only.
  bool causal = false;
  /// Factor s applied to queries and keys before the feature map (linear attention) or the
  /// dot product (softmax attention: scores s²·qᵀk). Unset: s = d_k^{-1/4}, so that
  /// exp((s q)ᵀ(s k)) = exp(qᵀk/√d_k), the kernel of standard softmax attention.
  std::optional<double> input_scale{};
  /// Rows per block of the blocked algorithms. 0 chooses a default (linear attention: 256
  /// non-causal, 64 causal; softmax attention: 128). Results do not depend on it beyond
  /// rounding.
  Index block_size = 0;
  /// Threads (OpenMP). 0 uses omp_get_max_threads(). Without OpenMP everything runs on the
  /// calling thread.
  int num_threads = 0;
  /// Contiguous parts each sequence is split into, so that several threads can work on one
  /// (sequence, head) task. 0 chooses: 1 when there are at least as many tasks as threads,
  /// the number of threads otherwise. Results do not depend on it beyond rounding.
  Index sequence_parts = 0;
  /// Linear attention only: also compute ∂L/∂Ω in backward (false: frozen-kernel mode, which
  /// saves one GEMM per feature map).
  bool omega_gradient = true;
  /// Linear attention: the forward keeps the features Φ(Q) and Φ(K) of every block in the
  /// workspace (2·B·H·L·m numbers) so that the backward reuses them instead of mapping the
  /// queries and keys again (causal: in both of its sweeps). Results are the same bit for bit;
  /// memory then grows with L·m. The backward then takes Q and K to be those of the last
  /// forward (causal: when its sizes and mask are the forward's; otherwise it maps again). Off
  /// by default (the forward alone needs O(C·m) per thread); nn::TextClassifier and
  /// nn::SequenceModel, which train, turn it on.
  bool keep_features = false;
};

/// Gradients of a scalar loss with respect to the attention inputs, filled by `backward`.
/// dQ, dK, dV have the shapes of Q, K, V; dOmega has one m×d_k matrix per feature map of a
/// LinearAttention (empty for SoftmaxAttention, or when `omega_gradient` is false).
template <typename Scalar>
struct AttentionGradients {
  Matrix<Scalar> dQ;                   ///< ∂L/∂Q
  Matrix<Scalar> dK;                   ///< ∂L/∂K
  Matrix<Scalar> dV;                   ///< ∂L/∂V
  std::vector<Matrix<Scalar>> dOmega;  ///< ∂L/∂Ω, one per feature map
};

namespace detail {

/// Sizes of one attention call.
struct AttentionDims {
  Index batch = 0;   ///< B
  Index length = 0;  ///< L
  Index heads = 0;   ///< H
  Index dk = 0;      ///< query/key width per head
  Index dv = 0;      ///< value width per head
  Index tasks() const noexcept { return batch * heads; }
  bool operator==(const AttentionDims&) const = default;
};

/// How one call is cut into work: tasks into blocks of rows, each task into parts for the
/// threads (AttentionOptions::block_size, sequence_parts, num_threads).
struct AttentionSchedule {
  AttentionDims dims;  ///< the sizes of the call
  Index block = 0;     ///< rows per block C
  Index blocks = 0;    ///< ⌈L / C⌉
  Index parts = 1;     ///< parts per task P
  int threads = 1;     ///< threads T
  /// Rows of block c.
  Index rows(Index c) const noexcept { return std::min(block, dims.length - c * block); }
  /// First block of part p (p = parts: one past the last block).
  Index part_begin(Index p) const noexcept { return p * blocks / parts; }
};

/// The schedule of a call of sizes `dims`; `default_block` is used when options.block_size is
/// 0. Parts: as set, or 1 when there are at least as many tasks as threads and one per thread
/// otherwise; never more than the blocks.
inline AttentionSchedule attention_schedule(const AttentionOptions& options,
                                            const AttentionDims& dims, Index default_block) {
  AttentionSchedule s;
  s.dims = dims;
  s.block = options.block_size > 0 ? options.block_size : default_block;
  s.blocks = dims.length == 0 ? 0 : (dims.length + s.block - 1) / s.block;
  s.threads = resolve_threads(options.num_threads);
  Index parts = options.sequence_parts;
  if (parts == 0) parts = dims.tasks() >= s.threads ? 1 : s.threads;
  s.parts = std::max<Index>(1, std::min(parts, s.blocks));
  return s;
}

/// One (sequence, head) task t = b·H + h of a call: views of its rows of Q, K and V.
template <typename Scalar>
struct AttentionTask {
  Eigen::Ref<const Matrix<Scalar>> q;  ///< L × d_k
  Eigen::Ref<const Matrix<Scalar>> k;  ///< L × d_k
  Eigen::Ref<const Matrix<Scalar>> v;  ///< L × d_v
  const bool* valid;                   ///< the task's L mask entries, or nullptr
  Index row0;                          ///< b·L, the task's first row
  Index head;                          ///< h

  /// The task's L × width block of a (B·L) × (H·width) matrix (Out, dOut, a gradient).
  template <typename M>
  auto block_of(M& matrix, Index width) const {
    return matrix.block(row0, head * width, q.rows(), width);
  }
};

/// The views of task t.
template <typename Scalar>
AttentionTask<Scalar> attention_task(const Eigen::Ref<const Matrix<Scalar>>& Q,
                                     const Eigen::Ref<const Matrix<Scalar>>& K,
                                     const Eigen::Ref<const Matrix<Scalar>>& V,
                                     const PaddingMask* mask, const AttentionDims& d, Index t) {
  const Index b = t / d.heads;
  const Index h = t % d.heads;
  const Index r0 = b * d.length;
  return AttentionTask<Scalar>{Q.block(r0, h * d.dk, d.length, d.dk),
                               K.block(r0, h * d.dk, d.length, d.dk),
                               V.block(r0, h * d.dv, d.length, d.dv),
                               mask ? mask->data() + b * d.length : nullptr,
                               r0,
                               h};
}

/// Checks the shapes and values of Q, K, V (and the mask) and returns the sizes. `expected_dk`
/// is the feature map's input dimension, or 0 when any d_k is allowed.
template <typename Scalar>
AttentionDims check_attention_inputs(const std::string& where,
                                     const Eigen::Ref<const Matrix<Scalar>>& Q,
                                     const Eigen::Ref<const Matrix<Scalar>>& K,
                                     const Eigen::Ref<const Matrix<Scalar>>& V, Index batch,
                                     const PaddingMask* mask, Index heads, Index expected_dk) {
  AttentionDims dims;
  require(batch >= 1, where, "argument 'batch' must be at least 1, got " + std::to_string(batch));
  require(Q.rows() % batch == 0, where,
          "argument 'Q' has " + std::to_string(Q.rows()) +
              " rows, not a multiple of batch = " + std::to_string(batch));
  dims.batch = batch;
  dims.length = Q.rows() / batch;
  dims.heads = heads;
  require(Q.cols() % heads == 0 && Q.cols() > 0, where,
          "argument 'Q' has " + std::to_string(Q.cols()) +
              " columns, not a positive multiple of num_heads = " + std::to_string(heads));
  dims.dk = Q.cols() / heads;
  if (expected_dk > 0) {
    require(dims.dk == expected_dk, where,
            "argument 'Q' has " + std::to_string(Q.cols()) + " columns = " + std::to_string(heads) +
                " heads x " + std::to_string(dims.dk) + ", expected num_heads x input_dim() = " +
                std::to_string(heads) + " x " + std::to_string(expected_dk));
  }
  require_shape(K, Q.rows(), Q.cols(), where, "K");
  require(V.rows() == Q.rows(), where,
          "argument 'V' has " + std::to_string(V.rows()) + " rows, expected " +
              std::to_string(Q.rows()) + " (the rows of Q)");
  require(V.cols() % heads == 0 && V.cols() > 0, where,
          "argument 'V' has " + std::to_string(V.cols()) +
              " columns, not a positive multiple of num_heads = " + std::to_string(heads));
  dims.dv = V.cols() / heads;
  if (mask) require_shape(*mask, dims.length, batch, where, "mask");
  require_finite(Q, where, "Q");
  require_finite(K, where, "K");
  require_finite(V, where, "V");
  return dims;
}

/// What a workspace records of the last forward, so that backward refuses a workspace that
/// holds no forward of its inputs.
struct ForwardRecord {
  AttentionDims dims;   ///< the sizes of the forward
  bool masked = false;  ///< whether it had a padding mask
  bool valid = false;   ///< whether a forward completed since the workspace was last reset

  /// Records a completed forward.
  void set(const AttentionDims& forward_dims, const PaddingMask* mask) noexcept {
    dims = forward_dims;
    masked = mask != nullptr;
    valid = true;
  }

  /// Whether the recorded forward had these sizes and mask.
  bool matches(const AttentionDims& backward_dims, const PaddingMask* mask) const noexcept {
    return valid && dims == backward_dims && masked == (mask != nullptr);
  }

  /// Throws invalid_argument naming 'ws' unless the recorded forward had these sizes and mask.
  void require_matches(const std::string& where, const AttentionDims& backward_dims,
                       const PaddingMask* mask) const {
    require(matches(backward_dims, mask), where,
            "argument 'ws' holds no forward pass of these inputs; call forward(Q, K, V, ...) "
            "with the same workspace first");
  }
};

/// Checks Out and dOut of a backward call against the forward sizes.
template <typename Scalar>
void check_attention_outputs(const std::string& where, const AttentionDims& dims,
                             const Eigen::Ref<const Matrix<Scalar>>& Out,
                             const Eigen::Ref<const Matrix<Scalar>>& dOut) {
  const Index rows = dims.batch * dims.length;
  const Index cols = dims.heads * dims.dv;
  require_shape(Out, rows, cols, where, "Out");
  require_shape(dOut, rows, cols, where, "dOut");
  require_finite(Out, where, "Out");
  require_finite(dOut, where, "dOut");
}

/// The input scale s of the options (d_k^{-1/4} when unset), checked.
inline double attention_input_scale(const std::string& where, const AttentionOptions& options,
                                    Index dk) {
  if (!options.input_scale) return std::pow(static_cast<double>(dk), -0.25);
  require_positive(*options.input_scale, where, "options.input_scale");
  return *options.input_scale;
}

/// Checks the options that do not depend on the inputs.
inline void check_attention_options(const std::string& where, const AttentionOptions& options) {
  require(
      options.num_heads >= 1, where,
      "argument 'options.num_heads' must be at least 1, got " + std::to_string(options.num_heads));
  require(options.block_size >= 0, where,
          "argument 'options.block_size' must be >= 0, got " + std::to_string(options.block_size));
  require(
      options.num_threads >= 0, where,
      "argument 'options.num_threads' must be >= 0, got " + std::to_string(options.num_threads));
  require(options.sequence_parts >= 0, where,
          "argument 'options.sequence_parts' must be >= 0, got " +
              std::to_string(options.sequence_parts));
  if (options.input_scale) require_positive(*options.input_scale, where, "options.input_scale");
}

}  // namespace detail

}  // namespace coulomb
