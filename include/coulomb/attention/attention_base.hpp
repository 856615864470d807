// SPDX-License-Identifier: MIT
/// @file attention/attention_base.hpp
/// @brief The interface shared by LinearAttention and SoftmaxAttention: their types, options
/// and the overload set of forward and backward, written once (docs/attention.md).
///
/// A CRTP base, as FeatureMapBase is for the feature maps. The overloads below check the
/// arguments (layout.hpp) and call Derived's
///   forward_impl(dims, Q, K, V, mask, Out, ws) and
///   backward_impl(dims, Q, K, V, mask, Out, dOut, grads, ws),
/// where mask is a `const PaddingMask*` (nullptr without a mask). Derived also provides
/// `class_name` (for error messages) and required_head_dim() (the d_k the inputs must have, 0
/// for any).
#pragma once

#include <string>

#include <Eigen/Core>

#include "../core/config.hpp"
#include "layout.hpp"

namespace coulomb {

/// The public interface of an attention module `Derived` (LinearAttention, SoftmaxAttention)
/// of scalar type `ScalarT` whose reusable buffers are a `WorkspaceT`.
template <typename Derived, RealScalar ScalarT, typename WorkspaceT>
class AttentionBase {
 public:
  using Scalar = ScalarT;                         ///< float or double
  using MatrixType = Matrix<Scalar>;              ///< dense column-major matrix
  using VectorType = Vector<Scalar>;              ///< dense column vector
  using ConstRef = Eigen::Ref<const MatrixType>;  ///< how inputs are taken (no copy)
  using Workspace = WorkspaceT;                   ///< reusable buffers
  using Gradients = AttentionGradients<Scalar>;   ///< what backward fills

  /// The options.
  const AttentionOptions& options() const noexcept { return options_; }
  /// Number of heads H.
  Index num_heads() const noexcept { return options_.num_heads; }

  /// Out = attention(Q, K, V) for `batch` sequences of equal length (layout in layout.hpp).
  /// Out is resized to (B·L) × (H·d_v). The workspace keeps what backward needs.
  void forward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, MatrixType& Out,
               Workspace& ws, Index batch = 1) const {
    checked_forward(Q, K, V, batch, nullptr, Out, ws);
  }

  /// The same with a padding mask (L × B; true = token, false = padding); B = mask.cols().
  void forward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, const PaddingMask& mask,
               MatrixType& Out, Workspace& ws) const {
    checked_forward(Q, K, V, batch_of(mask), &mask, Out, ws);
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
  /// same Q, K, V (and mask) with the same workspace (and, for linear attention, unchanged
  /// feature maps). Fills grads.dQ, dK, dV, and grads.dOmega (one per feature map) when the
  /// module computes ∂L/∂Ω (linear attention with options().omega_gradient); clears it
  /// otherwise.
  void backward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, const ConstRef& Out,
                const ConstRef& dOut, Gradients& grads, Workspace& ws, Index batch = 1) const {
    checked_backward(Q, K, V, batch, nullptr, Out, dOut, grads, ws);
  }

  /// The same with a padding mask.
  void backward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, const PaddingMask& mask,
                const ConstRef& Out, const ConstRef& dOut, Gradients& grads, Workspace& ws) const {
    checked_backward(Q, K, V, batch_of(mask), &mask, Out, dOut, grads, ws);
  }

 protected:
  /// Checks the options; `where` names the derived constructor in error messages.
  AttentionBase(const std::string& where, const AttentionOptions& options) : options_(options) {
    detail::check_attention_options(where, options_);
  }

  AttentionOptions options_;  ///< the options, fixed at construction

 private:
  const Derived& derived() const noexcept { return static_cast<const Derived&>(*this); }

  void checked_forward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, Index batch,
                       const PaddingMask* mask, MatrixType& Out, Workspace& ws) const {
    const auto dims = detail::check_attention_inputs<Scalar>(
        std::string(Derived::class_name) + "::forward", Q, K, V, batch, mask, num_heads(),
        derived().required_head_dim());
    derived().forward_impl(dims, Q, K, V, mask, Out, ws);
  }

  void checked_backward(const ConstRef& Q, const ConstRef& K, const ConstRef& V, Index batch,
                        const PaddingMask* mask, const ConstRef& Out, const ConstRef& dOut,
                        Gradients& grads, Workspace& ws) const {
    const std::string where = std::string(Derived::class_name) + "::backward";
    const auto dims = detail::check_attention_inputs<Scalar>(
        where, Q, K, V, batch, mask, num_heads(), derived().required_head_dim());
    detail::check_attention_outputs<Scalar>(where, dims, Out, dOut);
    derived().backward_impl(dims, Q, K, V, mask, Out, dOut, grads, ws);
  }

  static Index batch_of(const PaddingMask& mask) noexcept {
    return mask.cols() > 0 ? mask.cols() : 1;
  }
};

}  // namespace coulomb
