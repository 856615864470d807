// SPDX-License-Identifier: MIT
/// @file nn/layers.hpp
/// @brief The dense building blocks of the Transformer classifier, each with a forward and a
/// hand-written backward pass: Linear, LayerNorm, GELU and Dropout. Documented in
/// docs/model.md.
///
/// Layout: a batch of n tokens of width d is a column-major n×d matrix (one token per row, the
/// layout of attention/layout.hpp). Conventions shared by every layer of nn/:
/// - `forward` resizes its outputs; a layer with state (LayerNorm, Dropout) keeps what its
///   backward needs, so `backward` must follow the `forward` of the same input;
/// - `backward` adds the gradients of the layer's parameters to their gradient matrices
///   (`zero_grad()` clears them) and writes the gradient of the input;
/// - buffers are members and keep their size, so calls of a stable shape allocate nothing
///   in nn/ (Eigen's GEMM may still use its own blocking buffers for large products);
/// - vectors that are parameters (biases, gains) are k×1 matrices, as ParameterRef expects.
///
/// GELU is the tanh form of Hendrycks & Gimpel (*Gaussian Error Linear Units*, 2016), the one
/// of BERT and GPT-2: gelu(x) = x/2 · (1 + tanh(√(2/π) (x + 0.044715 x³))). LayerNorm: Ba, Kiros
/// & Hinton, *Layer Normalization*, 2016. Dropout: Srivastava et al., JMLR 2014 (inverted: the
/// kept entries are scaled by 1/(1 − p), so evaluation is the identity).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/detail_products.hpp"
#include "../core/parallel.hpp"
#include "../core/precision.hpp"
#include "../core/random.hpp"
#include "detail_bf16_products.hpp"
#include "detail_layer_types.hpp"
#include "detail_linear_cross_entropy.hpp"
#include "parameter.hpp"

namespace coulomb {

namespace detail {

/// Fills `w` with the Xavier/Glorot uniform distribution U(−a, a), a = √(6 / (rows + cols)).
template <typename Scalar, std::uniform_random_bit_generator G>
void nn_xavier_uniform(Matrix<Scalar>& w, G& rng) {
  const double a = std::sqrt(6.0 / static_cast<double>(w.rows() + w.cols()));
  fill_uniform(w, -a, a, rng);
}

/// Fills `w` with N(0, stddev²) draws.
template <typename Scalar, std::uniform_random_bit_generator G>
void nn_normal(Matrix<Scalar>& w, double stddev, G& rng) {
  fill_standard_normal(w, rng);
  w *= static_cast<Scalar>(stddev);
}

/// Throws unless `dim` >= 1; names the argument.
inline void nn_require_dim(Index dim, const char* where, const char* name) {
  require(dim >= 1, where,
          std::string("argument '") + name + "' must be at least 1, got " + std::to_string(dim));
}

}  // namespace detail

namespace nn {

/// Affine layer Y = X W + 1 bᵀ with W ∈ R^{in×out} (weight) and b ∈ R^{out} (bias, out×1).
/// W is stored input-major (in × out), so the forward is one GEMM on the row-per-token layout.
template <RealScalar Scalar>
class Linear : public detail::LayerTypes<Scalar> {
 public:
  /// An empty layer (0 × 0); assign a sized one before use.
  Linear() = default;

  /// A layer from `input_dim` to `output_dim` features with zero weight and bias (call
  /// initialize). Throws invalid_argument for a dimension below 1.
  Linear(Index input_dim, Index output_dim) {
    const char* where = "coulomb::nn::Linear::constructor";
    detail::nn_require_dim(input_dim, where, "input_dim");
    detail::nn_require_dim(output_dim, where, "output_dim");
    w_.setZero(input_dim, output_dim);
    dw_.setZero(input_dim, output_dim);
    b_.setZero(output_dim, 1);
    db_.setZero(output_dim, 1);
  }

  /// Xavier-uniform weight, U(−a, a) with a = √(6 / (in + out)); zero bias.
  template <std::uniform_random_bit_generator G>
  void initialize(G& rng) {
    detail::nn_xavier_uniform(w_, rng);
    b_.setZero();
  }

  /// Number of input features.
  Index input_dim() const noexcept { return w_.rows(); }
  /// Number of output features.
  Index output_dim() const noexcept { return w_.cols(); }

  /// Threads of the products (0: all OpenMP threads, 1 without OpenMP). With T > 1 and at
  /// least min_rows_per_thread rows per range, every product is split into T row ranges, one
  /// per thread: Y and dX by rows, ∂L/∂W as a sum of T partial products added in a fixed order
  /// (Eigen's own parallel GEMM does not pay at the thin shapes of a Transformer layer:
  /// docs/benchmarks.md). Results depend on T only through the rounding of ∂L/∂W, and are the
  /// same for the same T.
  void set_num_threads(int threads) {
    detail::require(threads >= 0, "coulomb::nn::Linear::set_num_threads",
                    "argument 'threads' must be >= 0, got " + std::to_string(threads));
    threads_ = threads;
  }
  /// The threads set by set_num_threads (default 1).
  int num_threads() const noexcept { return threads_; }
  /// Fewest rows per thread for which the products are split.
  static constexpr Index min_rows_per_thread = 256;

  /// Y = X W + 1 bᵀ (Y resized to n × out). X must have input_dim() columns; Y must not
  /// alias X. Each entry is b_j followed by the multiply-adds of X(r, p) W(p, j) for
  /// p = 0, …, in−1 in order (detail::tall_small_product), whatever the threads.
  void forward(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y) const {
    detail::require_cols(X, input_dim(), "coulomb::nn::Linear::forward", "X");
    Y.resize(X.rows(), output_dim());
    for_row_ranges(X.rows(), [&](Index r0, Index n, int) {
      detail::tall_small_product(X.data() + r0, X.outerStride(), n, input_dim(), w_.data(),
                                 Index{1}, w_.rows(), output_dim(), Y.data() + r0, Y.rows(),
                                 detail::ProductInit::bias, b_.data());
    });
  }

  /// Y = X W + 1 bᵀ in `precision`: as forward(X, Y) for fp32; for bf16 (float layers on a CPU
  /// with AVX512-BF16, core/precision.hpp; otherwise this is forward(X, Y)) each entry is b_j
  /// plus the products of X and W rounded to bf16, summed in fp32
  /// (detail::bf16_tall_small_product). W is packed anew on every call, so a changed weight is
  /// always the one used.
  void forward(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y,
               InferencePrecision precision) const {
    if constexpr (std::is_same_v<Scalar, float>) {
      if (precision == InferencePrecision::bf16 && detail::bf16_kernel_usable()) {
        detail::require_cols(X, input_dim(), "coulomb::nn::Linear::forward", "X");
        Y.resize(X.rows(), output_dim());
        detail::pack_bf16_pairs(w_.data(), w_.rows(), input_dim(), output_dim(), w_bf16_);
        for_row_ranges(X.rows(), [&](Index r0, Index n, int) {
          detail::bf16_tall_small_product(X.data() + r0, X.outerStride(), n, input_dim(),
                                          w_bf16_.data(), output_dim(), Y.data() + r0, Y.rows(),
                                          b_.data());
        });
        return;
      }
    }
    forward(X, Y);
  }

  /// Given dY = ∂L/∂Y for the input X of the forward: ∂L/∂W += Xᵀ dY, ∂L/∂b += dYᵀ 1, and
  /// dX = dY Wᵀ (overwritten; must not alias dY).
  void backward(const ConstMatrixRef<Scalar>& X, const ConstMatrixRef<Scalar>& dY,
                Matrix<Scalar>& dX) {
    backward_params(X, dY);
    dX.resize(dY.rows(), input_dim());
    input_gradient(dY, dX, detail::ProductInit::zero);
  }

  /// As backward, but adds dY Wᵀ to dX (which must already be n × in): for an input that
  /// feeds several layers (the query, key and value projections).
  void backward_add(const ConstMatrixRef<Scalar>& X, const ConstMatrixRef<Scalar>& dY,
                    Matrix<Scalar>& dX) {
    backward_params(X, dY);
    detail::require_shape(dX, dY.rows(), input_dim(), "coulomb::nn::Linear::backward_add", "dX");
    input_gradient(dY, dX, detail::ProductInit::accumulate);
  }

  /// out += X[r0 : r0 + n]ᵀ dY[r0 : r0 + n] by the inner-product kernel (core/detail_products.hpp).
  static void add_weight_gradient(const ConstMatrixRef<Scalar>& X, const ConstMatrixRef<Scalar>& dY,
                                  Index r0, Index n, Matrix<Scalar>& out) {
    detail::inner_product(X.data() + r0, X.outerStride(), dY.data() + r0, dY.outerStride(), n,
                          X.cols(), dY.cols(), out.data(), out.rows(),
                          detail::ProductInit::accumulate);
  }

  /// Only the parameter gradients: ∂L/∂W += Xᵀ dY, ∂L/∂b += dYᵀ 1.
  void backward_params(const ConstMatrixRef<Scalar>& X, const ConstMatrixRef<Scalar>& dY) {
    const char* where = "coulomb::nn::Linear::backward";
    detail::require_cols(X, input_dim(), where, "X");
    detail::require_shape(dY, X.rows(), output_dim(), where, "dY");
    const int T = split_threads(X.rows());
    if (T == 1) {
      add_weight_gradient(X, dY, Index(0), X.rows(), dw_);
    } else {
      if (partial_.size() < static_cast<std::size_t>(T))
        partial_.resize(static_cast<std::size_t>(T));
      for_row_ranges(X.rows(), [&](Index r0, Index n, int i) {
        Matrix<Scalar>& part = partial_[static_cast<std::size_t>(i)];
        part.setZero(input_dim(), output_dim());
        add_weight_gradient(X, dY, r0, n, part);
      });
      for (int i = 0; i < T; ++i) dw_ += partial_[static_cast<std::size_t>(i)];
    }
    db_.col(0).noalias() += dY.colwise().sum().transpose();
  }

  /// The mean softmax cross-entropy of the logits Y = X W + 1 bᵀ against `labels` (one per row
  /// of X, each in [0, output_dim())), and with dY = scale · ∂loss/∂Y: ∂L/∂W += Xᵀ dY,
  /// ∂L/∂b += dYᵀ 1 and dX = dY Wᵀ (resized to n × in). The same as forward,
  /// softmax_cross_entropy, scaling and backward up to float round-off, but Y is never held
  /// whole: it is computed once, in blocks of rows of at most 16 MiB, and used chunk by chunk
  /// (detail_linear_cross_entropy.hpp), for a head with thousands of outputs. Returns the loss; if
  /// a logit is not finite, returns NaN and changes nothing. Throws invalid_argument for an empty X
  /// or one of another width, or labels of another count or out of range.
  Scalar cross_entropy_backward(const ConstMatrixRef<Scalar>& X, std::span<const int> labels,
                                Matrix<Scalar>& dX, Scalar scale = Scalar(1)) {
    const char* where = "coulomb::nn::Linear::cross_entropy_backward";
    detail::require_cols(X, input_dim(), where, "X");
    const Index n = X.rows();
    detail::require(n >= 1, where, "argument 'X' has no rows");
    detail::nn_check_labels(labels, n, output_dim(), where, "X");
    const Index d = input_dim(), C = output_dim();
    const int T = split_threads(n);
    const auto threads = static_cast<std::size_t>(T);
    if (workspaces_.size() < threads) workspaces_.resize(threads);
    if (partial_.size() < threads) partial_.resize(threads);
    if (partial_bias_.size() < threads) partial_bias_.resize(threads);
    lse_.resize(n);
    label_logit_.resize(n);
    dx_.resize(n, d);
    detail::pack_cross_entropy_weight(w_.data(), d, C, packs_);
    const Scalar coefficient = scale / static_cast<Scalar>(n);
    const Index block = detail::cross_entropy_block_rows<Scalar>(C);
    // Each thread's gradients go to its own buffers and reach ∂W and ∂b only once every logit
    // is known to be finite, so a failure changes nothing.
    std::vector<char> finite(threads, 1);
    for_row_ranges(n, [&](Index r0, Index rows, int i) {
      const auto t = static_cast<std::size_t>(i);
      partial_[t].setZero(d, C);
      partial_bias_[t].setZero(C, 1);
      for (Index q = r0; q < r0 + rows; q += block) {
        const Index nb = std::min(block, r0 + rows - q);
        if (!detail::cross_entropy_block(
                X.data() + q, X.outerStride(), nb, d, b_.data(), C,
                labels.subspan(static_cast<std::size_t>(q), static_cast<std::size_t>(nb)), packs_,
                coefficient, lse_.data() + q, label_logit_.data() + q, partial_[t].data(),
                partial_bias_[t].data(), dx_.data() + q, n, workspaces_[t])) {
          finite[t] = 0;
          return;
        }
      }
    });
    double total = 0.0;
    for (Index r = 0; r < n; ++r) total += static_cast<double>(lse_(r) - label_logit_(r));
    const bool ok = std::all_of(finite.begin(), finite.end(), [](char f) { return f != 0; });
    if (!ok || !std::isfinite(total)) return std::numeric_limits<Scalar>::quiet_NaN();
    for (std::size_t t = 0; t < threads; ++t) {
      dw_ += partial_[t];
      db_ += partial_bias_[t];
    }
    dX.swap(dx_);  // dX is overwritten; its old buffer is the next call's
    return static_cast<Scalar>(total / static_cast<double>(n));
  }

  /// Sets the parameter gradients to zero.
  void zero_grad() {
    dw_.setZero();
    db_.setZero();
  }

  /// Appends `prefix + weight_name` (decayed) and `prefix + bias_name` (not decayed).
  void append_parameters(ParameterList<Scalar>& list, const std::string& prefix,
                         const char* weight_name = "weight", const char* bias_name = "bias") {
    list.push_back({prefix + weight_name, &w_, &dw_, true, true});
    list.push_back({prefix + bias_name, &b_, &db_, true, false});
  }

  /// The weight W (in × out).
  const Matrix<Scalar>& weight() const noexcept { return w_; }
  /// The weight W, mutable.
  Matrix<Scalar>& weight() noexcept { return w_; }
  /// The bias b (out × 1).
  const Matrix<Scalar>& bias() const noexcept { return b_; }
  /// The bias b, mutable.
  Matrix<Scalar>& bias() noexcept { return b_; }
  /// ∂L/∂W accumulated since the last zero_grad().
  const Matrix<Scalar>& weight_gradient() const noexcept { return dw_; }
  /// ∂L/∂b accumulated since the last zero_grad().
  const Matrix<Scalar>& bias_gradient() const noexcept { return db_; }

 private:
  /// Row ranges the products of `rows` rows are split into: the threads set (0: all OpenMP
  /// threads). A set count splits the same way without OpenMP (the ranges then run one after
  /// the other), so a given setting gives the same bits with and without OpenMP.
  int split_threads(Index rows) const noexcept {
    const int T = threads_ > 0 ? threads_ : coulomb::detail::resolve_threads(0);
    if (T <= 1 || rows < 2 * min_rows_per_thread) return 1;
    return static_cast<int>(std::min<Index>(T, rows / min_rows_per_thread));
  }

  /// dX = dY Wᵀ (init zero) or dX += dY Wᵀ (init accumulate), by row ranges.
  void input_gradient(const ConstMatrixRef<Scalar>& dY, Matrix<Scalar>& dX,
                      detail::ProductInit init) const {
    for_row_ranges(dY.rows(), [&](Index r0, Index n, int) {
      detail::tall_small_product(dY.data() + r0, dY.outerStride(), n, output_dim(), w_.data(),
                                 w_.rows(), Index{1}, input_dim(), dX.data() + r0, dX.rows(), init,
                                 static_cast<const Scalar*>(nullptr));
    });
  }

  /// body(r0, n, i) for T contiguous row ranges [r0, r0 + n) of `rows`, range i on thread i
  /// (one range on the calling thread when the products are not split).
  template <typename Body>
  void for_row_ranges(Index rows, Body&& body) const {
    const int T = split_threads(rows);
    if (T == 1) {
      body(Index(0), rows, 0);
      return;
    }
    coulomb::detail::parallel_for(T, T, [&](Index i, int) {
      const Index r0 = rows * i / T;
      const Index r1 = rows * (i + 1) / T;
      body(r0, r1 - r0, static_cast<int>(i));
    });
  }

  Matrix<Scalar> w_, b_, dw_, db_;
  mutable std::vector<std::uint32_t> w_bf16_;  // W packed as bf16 pairs (bf16 forward)
  std::vector<Matrix<Scalar>> partial_;        // per thread: Xᵀ dY of its rows
  std::vector<Matrix<Scalar>> partial_bias_;   // per thread: dYᵀ 1 (cross_entropy_backward)
  std::vector<detail::CrossEntropyWorkspace<Scalar>> workspaces_;  // per thread
  detail::CrossEntropyPacks<Scalar> packs_;                        // W, packed per call
  Matrix<Scalar> dx_;                                              // dX until it is complete
  Eigen::Array<Scalar, Eigen::Dynamic, 1> lse_, label_logit_;      // per row
  int threads_ = 1;
};

/// Layer normalization over the features of each token (row):
///   y = (x − μ) / √(σ² + ε) ⊙ γ + β,  μ, σ² the mean and (biased) variance of the row,
/// with gain γ (initialized to 1) and bias β (initialized to 0), both dim × 1.
template <RealScalar Scalar>
class LayerNorm : public detail::LayerTypes<Scalar> {
 public:
  /// An empty layer; assign a sized one before use.
  LayerNorm() = default;

  /// Normalization over `dim` features with ε = `epsilon` (> 0); γ = 1, β = 0. Throws
  /// invalid_argument for dim < 1 or ε not positive and finite.
  explicit LayerNorm(Index dim, double epsilon = 1e-5) : epsilon_(static_cast<Scalar>(epsilon)) {
    const char* where = "coulomb::nn::LayerNorm::constructor";
    detail::nn_require_dim(dim, where, "dim");
    detail::require_positive(epsilon, where, "epsilon");
    gain_.setOnes(dim, 1);
    bias_.setZero(dim, 1);
    dgain_.setZero(dim, 1);
    dbias_.setZero(dim, 1);
  }

  /// Resets γ = 1 and β = 0.
  void initialize() {
    gain_.setOnes();
    bias_.setZero();
  }

  /// Number of features.
  Index dim() const noexcept { return gain_.rows(); }
  /// ε.
  Scalar epsilon() const noexcept { return epsilon_; }

  /// Y = LayerNorm(X) (resized to n × dim; must not alias X). Keeps the normalized input and
  /// 1/√(σ² + ε) of each row for backward.
  void forward(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y) {
    detail::require_cols(X, dim(), "coulomb::nn::LayerNorm::forward", "X");
    normalize(X, Y, kept_, true);
  }

  /// What apply() writes besides Y, reused across calls: the rows' statistics, and the
  /// normalized rows of one block of rows at a time.
  struct Workspace {
    Matrix<Scalar> xhat;  ///< (x − μ) / √(σ² + ε): forward's of every row; apply's of a block
    Vector<Scalar> mean;  ///< μ of each row
    Vector<Scalar> rstd;  ///< 1/√(σ² + ε) of each row
  };

  /// Y = LayerNorm(X) as forward computes it, bit for bit, without keeping anything for
  /// backward (inference; `ws` holds the intermediates). Y is resized and must not alias X.
  void apply(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y, Workspace& ws) const {
    detail::require_cols(X, dim(), "coulomb::nn::LayerNorm::apply", "X");
    normalize(X, Y, ws, false);
  }

  /// Given dY = ∂L/∂Y of the last forward: ∂L/∂γ += Σ_rows dY ⊙ x̂, ∂L/∂β += Σ_rows dY, and
  ///   dX = r ⊙ (g − mean_row(g) − x̂ ⊙ mean_row(g ⊙ x̂)),  g = dY ⊙ γ,  r = 1/√(σ² + ε)
  /// (overwritten; must not alias dY). Throws invalid_argument if dY does not have the shape of
  /// the last forward's output.
  void backward(const ConstMatrixRef<Scalar>& dY, Matrix<Scalar>& dX) {
    detail::require_shape(dY, kept_.xhat.rows(), dim(), "coulomb::nn::LayerNorm::backward", "dY");
    const Index n = dY.rows();
    const Index d = dim();
    const Scalar inv_d = Scalar(1) / static_cast<Scalar>(d);
    dX.resize(n, d);
    sum_g_.resize(n);
    sum_gx_.resize(n);
    // ∂L/∂γ and ∂L/∂β over whole columns (their sums keep the order of the rows).
    for (Index j = 0; j < d; ++j) {
      dgain_(j, 0) += dY.col(j).dot(kept_.xhat.col(j));
      dbias_(j, 0) += dY.col(j).sum();
    }
    // dX in blocks of rows, as in forward.
    for (Index r0 = 0; r0 < n; r0 += row_block) {
      const Index m = std::min(row_block, n - r0);
      auto sum_g = sum_g_.segment(r0, m);
      auto sum_gx = sum_gx_.segment(r0, m);
      sum_g.setZero();
      sum_gx.setZero();
      for (Index j = 0; j < d; ++j) {
        auto g = dX.col(j).segment(r0, m);
        g = dY.col(j).segment(r0, m) * gain_(j, 0);
        sum_g += g;
        sum_gx.array() += g.array() * kept_.xhat.col(j).segment(r0, m).array();
      }
      sum_g *= inv_d;
      sum_gx *= inv_d;
      const auto rstd = kept_.rstd.segment(r0, m).array();
      for (Index j = 0; j < d; ++j) {
        auto g = dX.col(j).segment(r0, m).array();
        g = rstd * (g - sum_g.array() - kept_.xhat.col(j).segment(r0, m).array() * sum_gx.array());
      }
    }
  }

  /// Sets the parameter gradients to zero.
  void zero_grad() {
    dgain_.setZero();
    dbias_.setZero();
  }

  /// Appends `prefix + "gain"` and `prefix + "bias"` (neither decayed).
  void append_parameters(ParameterList<Scalar>& list, const std::string& prefix) {
    list.push_back({prefix + "gain", &gain_, &dgain_, true, false});
    list.push_back({prefix + "bias", &bias_, &dbias_, true, false});
  }

  /// γ (dim × 1).
  const Matrix<Scalar>& gain() const noexcept { return gain_; }
  /// γ, mutable.
  Matrix<Scalar>& gain() noexcept { return gain_; }
  /// β (dim × 1).
  const Matrix<Scalar>& bias() const noexcept { return bias_; }
  /// β, mutable.
  Matrix<Scalar>& bias() noexcept { return bias_; }
  /// ∂L/∂γ accumulated since the last zero_grad().
  const Matrix<Scalar>& gain_gradient() const noexcept { return dgain_; }
  /// ∂L/∂β accumulated since the last zero_grad().
  const Matrix<Scalar>& bias_gradient() const noexcept { return dbias_; }

 private:
  // Y = LayerNorm(X), with the rows' statistics into ws (forward's kept_, or apply's), and x̂
  // of every row (`keep`, for backward) or of one block at a time.
  void normalize(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y, Workspace& ws,
                 bool keep) const {
    const Index n = X.rows();
    const Index d = dim();
    const Scalar inv_d = Scalar(1) / static_cast<Scalar>(d);
    ws.mean.resize(n);
    ws.rstd.resize(n);
    // Without `keep`, x̂ of a block is a copy of its rows of X with a leading dimension that is
    // not a power of two: X's (the rows of a batch, often 2^k) puts a block's d columns in the
    // same cache sets, so its later passes would miss the cache (docs/benchmarks.md).
    ws.xhat.resize(keep ? n : std::min(n, row_block) + 16, d);
    Y.resize(n, d);
    // Blocks of rows, so that a block's statistics stay in the L1 cache over the d columns;
    // every entry is computed as over whole columns (the same operations in the same order).
    for (Index r0 = 0; r0 < n; r0 += row_block) {
      const Index m = std::min(row_block, n - r0);
      const auto xhat_of = [&](Index j) { return ws.xhat.col(j).segment(keep ? r0 : 0, m); };
      auto mean = ws.mean.segment(r0, m);
      auto rstd = ws.rstd.segment(r0, m);
      mean.setZero();
      for (Index j = 0; j < d; ++j) {
        if (keep) {
          mean += X.col(j).segment(r0, m);
        } else {
          auto xhat = xhat_of(j);
          xhat = X.col(j).segment(r0, m);
          mean += xhat;
        }
      }
      mean *= inv_d;
      rstd.setZero();
      for (Index j = 0; j < d; ++j) {
        auto xhat = xhat_of(j);
        if (keep)
          xhat = X.col(j).segment(r0, m) - mean;
        else
          xhat -= mean;
        rstd.array() += xhat.array().square();
      }
      rstd = (rstd.array() * inv_d + epsilon_).rsqrt();
      for (Index j = 0; j < d; ++j) {
        auto xhat = xhat_of(j).array();
        xhat *= rstd.array();
        Y.col(j).segment(r0, m).array() = xhat * gain_(j, 0) + bias_(j, 0);
      }
    }
  }

  Matrix<Scalar> gain_, bias_, dgain_, dbias_;
  // Rows per block of forward and backward: a multiple of every SIMD width, so the blocks
  // split the columns where the vectorized loops over whole columns would.
  static constexpr Index row_block = 512;
  Workspace kept_;  // forward's x̂ and statistics, for backward
  Vector<Scalar> sum_g_, sum_gx_;
  Scalar epsilon_ = Scalar(1e-5);
};

/// GELU, tanh form: gelu(x) = x/2 · (1 + tanh(u)), u = √(2/π) (x + 0.044715 x³), applied
/// entrywise. Its derivative is
///   gelu′(x) = (1 + t)/2 + x/2 · (1 − t²) · √(2/π) (1 + 3 · 0.044715 x²),  t = tanh(u).
/// No parameters; backward recomputes t from the forward's input, unless the forward kept it.
template <RealScalar Scalar>
class Gelu : public detail::LayerTypes<Scalar> {
 public:
  /// Y = gelu(X) (resized to the shape of X).
  void forward(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y) { forward(X, Y, false); }

  /// Y = gelu(X) (resized to the shape of X). With `keep_tanh`, t = tanh(u) is kept for the
  /// next backward, which then does not compute it again (training; it costs one more matrix
  /// of X's shape); the values are the same either way, bit for bit.
  void forward(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y, bool keep_tanh) {
    kept_ = keep_tanh;
    if (!keep_tanh) {
      apply(X, Y);
      return;
    }
    Y.resize(X.rows(), X.cols());
    tanh_.resize(X.rows(), X.cols());
    for (Index j = 0; j < X.cols(); ++j) {
      const auto x = X.col(j).array();
      tanh_.col(j).array() = (c0 * (x + c1 * x.cube())).tanh();
      Y.col(j).array() = Scalar(0.5) * x * (Scalar(1) + tanh_.col(j).array());
    }
  }

  /// Y = gelu(X) as forward computes it, without keeping anything (inference). Y is resized.
  static void apply(const ConstMatrixRef<Scalar>& X, Matrix<Scalar>& Y) {
    Y.resize(X.rows(), X.cols());
    for (Index j = 0; j < X.cols(); ++j) {
      const auto x = X.col(j).array();
      Y.col(j).array() = Scalar(0.5) * x * (Scalar(1) + (c0 * (x + c1 * x.cube())).tanh());
    }
  }

  /// dX = dY ⊙ gelu′(X) for the forward's input X (resized; may alias dY). Uses the tanh kept
  /// by the last forward when it kept one for an input of X's shape.
  void backward(const ConstMatrixRef<Scalar>& X, const ConstMatrixRef<Scalar>& dY,
                Matrix<Scalar>& dX) {
    detail::require_shape(dY, X.rows(), X.cols(), "coulomb::nn::Gelu::backward", "dY");
    dX.resize(X.rows(), X.cols());
    const bool kept = kept_ && tanh_.rows() == X.rows() && tanh_.cols() == X.cols();
    for (Index j = 0; j < X.cols(); ++j) {
      const auto x = X.col(j).array();
      if (kept) {
        dX.col(j).array() = derivative(x, tanh_.col(j).array(), dY.col(j).array());
      } else {
        t_ = (c0 * (x + c1 * x.cube())).tanh();
        dX.col(j).array() = derivative(x, t_.array(), dY.col(j).array());
      }
    }
  }

 private:
  // dY ⊙ gelu′(x) given t = tanh(u).
  template <typename AX, typename AT, typename AD>
  static auto derivative(const AX& x, const AT& t, const AD& dy) {
    return dy * (Scalar(0.5) * (Scalar(1) + t) +
                 Scalar(0.5) * x * (Scalar(1) - t.square()) * c0 * (Scalar(1) + c3 * x.square()));
  }

  static constexpr Scalar c0 = static_cast<Scalar>(0.79788456080286535588);  // √(2/π)
  static constexpr Scalar c1 = static_cast<Scalar>(0.044715);
  static constexpr Scalar c3 = static_cast<Scalar>(3 * 0.044715);
  Vector<Scalar> t_;     // tanh(u) of one column (backward without a kept tanh)
  Matrix<Scalar> tanh_;  // tanh(u) of the last forward with keep_tanh
  bool kept_ = false;    // the last forward kept tanh_
};

/// Inverted dropout with rate p: in training, each entry is kept with probability 1 − p and
/// scaled by 1/(1 − p), or set to 0; in evaluation it is the identity. The mask of the last
/// training forward is kept for backward. The draws come from the generator passed to forward,
/// one uniform01 per entry in column-major order, so a given generator state gives the same
/// mask.
template <RealScalar Scalar>
class Dropout : public detail::LayerTypes<Scalar> {
 public:
  /// Dropout with rate `rate` in [0, 1). Throws invalid_argument otherwise.
  explicit Dropout(double rate = 0.0) : rate_(rate) {
    if (!(std::isfinite(rate) && rate >= 0.0 && rate < 1.0))
      detail::throw_invalid("coulomb::nn::Dropout::constructor",
                            "argument 'rate' must be in [0, 1), got " + std::to_string(rate));
  }

  /// The rate p.
  double rate() const noexcept { return rate_; }

  /// Whether the last forward applied a mask (training with p > 0).
  bool active() const noexcept { return active_; }

  /// The mask of the last forward (entries 0 or 1/(1 − p)); meaningful when active().
  const Matrix<Scalar>& mask() const noexcept { return mask_; }

  /// X ← X ⊙ mask in place. With `training` and p > 0 a new mask is drawn from `rng`;
  /// otherwise X is unchanged and backward is the identity.
  template <std::uniform_random_bit_generator G>
  void forward(Matrix<Scalar>& X, bool training, G& rng) {
    active_ = training && rate_ > 0.0;
    if (!active_) return;
    const auto keep = static_cast<Scalar>(1.0 / (1.0 - rate_));
    mask_.resize(X.rows(), X.cols());
    // uniform01(rng) < p compared in integers: uniform01 is u·2⁻⁵³ for the top 53 bits u of
    // a draw, and u·2⁻⁵³ < p ⇔ u < ⌈p·2⁵³⌉, so the mask is the same, bit for bit.
    const auto threshold = static_cast<std::uint64_t>(std::ceil(rate_ * 0x1.0p53));
    Scalar* mask = mask_.data();  // column-major: the same entry order as (j, i) loops
    // The mask value is keep's bit pattern and-ed with all ones or all zeros, so no compiler
    // turns the choice into a branch (mispredicted on about a fraction p of the entries). The
    // values are +0 or keep.
    using Bits = std::conditional_t<sizeof(Scalar) == 8, std::uint64_t, std::uint32_t>;
    static_assert(sizeof(Bits) == sizeof(Scalar));
    const Bits keep_bits = std::bit_cast<Bits>(keep);
    Scalar* x = X.data();
    const Index size = mask_.size();
    // The draws are serial (each depends on the generator's last state); the rest is not. So
    // the draws of a block go to a small buffer first and the block's mask and product are
    // then one vectorizable loop. A generator that can be copied without throwing draws from
    // a local copy, written back at the end: compilers otherwise store its state to memory
    // after every draw, as they cannot rule out that the stores to X or the mask change it.
    // The draws and their order are those of one draw per entry, so the mask is the same.
    const auto apply = [&](auto& g) {
      constexpr Index block = 256;
      std::array<std::uint64_t, block> bits;
      for (Index k0 = 0; k0 < size; k0 += block) {
        const Index n = std::min(block, size - k0);
        for (Index k = 0; k < n; ++k) bits[static_cast<std::size_t>(k)] = detail::random_bits64(g);
        Scalar* m = mask + k0;
        Scalar* xs = x + k0;
        for (Index k = 0; k < n; ++k) {
          const Bits kept =
              static_cast<Bits>((bits[static_cast<std::size_t>(k)] >> 11) >= threshold);
          m[k] = std::bit_cast<Scalar>(keep_bits & (Bits(0) - kept));
          xs[k] *= m[k];
        }
      }
    };
    constexpr bool copy_generator = noexcept(std::declval<G&>()()) &&
                                    std::is_nothrow_copy_constructible_v<G> &&
                                    std::is_nothrow_copy_assignable_v<G>;
    if constexpr (copy_generator) {
      G local(rng);
      apply(local);
      rng = local;
    } else {
      apply(rng);
    }
  }

  /// dX ← dX ⊙ mask in place (identity when the last forward was not active). Throws
  /// invalid_argument if dX does not have the shape of the last forward's input.
  void backward(Matrix<Scalar>& dX) const {
    if (!active_) return;
    detail::require_shape(dX, mask_.rows(), mask_.cols(), "coulomb::nn::Dropout::backward", "dX");
    dX.array() *= mask_.array();
  }

 private:
  Matrix<Scalar> mask_;
  double rate_ = 0.0;
  bool active_ = false;
};

}  // namespace nn
}  // namespace coulomb
