// SPDX-License-Identifier: MIT
/// @file train/parameter_snapshot.hpp
/// @brief Named copies of tensors: the unit in which training state (optimizer moments, the best
/// parameters of early stopping) is exported, imported and restored.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"
#include "detail_parameters.hpp"

namespace coulomb::train {

/// A named copy of one tensor (a parameter's value, or a piece of optimizer state).
template <RealScalar S>
struct StateTensor {
  std::string name{};  ///< the parameter's name, or a state name such as "first_moment.<name>"
  Matrix<S> value{};   ///< the tensor
};

/// Copies of the values of a list of parameters, by name. Capturing again reuses the storage
/// (no allocation when the shapes are unchanged); restoring checks names and shapes first, so
/// it either restores every parameter or changes nothing.
template <RealScalar S>
class ParameterSnapshot {
 public:
  /// Copies the value of every parameter of `params` (trainable or not). Throws
  /// invalid_argument for a parameter without a name or value, or a duplicate name; the
  /// snapshot is unchanged then.
  void capture(const nn::ParameterList<S>& params) {
    const char* where = "coulomb::train::ParameterSnapshot::capture";
    std::map<std::string_view, int> seen;
    for (const auto& p : params) {
      detail::check_parameter(p, where, false);
      if (!seen.emplace(p.name, 0).second) {
        coulomb::detail::throw_invalid(where, "parameter name '" + p.name + "' appears twice");
      }
    }
    tensors_.resize(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (tensors_[i].name != params[i].name) tensors_[i].name = params[i].name;
      tensors_[i].value = *params[i].value;
    }
  }

  /// Writes the captured values back into `params`. Throws invalid_argument, changing nothing,
  /// when the snapshot is empty, or `params` does not have exactly the captured names, or a
  /// shape differs.
  void restore(const nn::ParameterList<S>& params) const {
    const char* where = "coulomb::train::ParameterSnapshot::restore";
    if (tensors_.empty() && !params.empty()) {
      coulomb::detail::throw_invalid(where, "nothing was captured");
    }
    std::map<std::string_view, std::size_t> index;
    for (std::size_t i = 0; i < tensors_.size(); ++i) index.emplace(tensors_[i].name, i);
    std::vector<std::size_t> order;
    order.reserve(params.size());
    std::vector<char> used(tensors_.size(), 0);
    for (const auto& p : params) {
      detail::check_parameter(p, where, false);
      const auto it = index.find(p.name);
      if (it == index.end()) {
        coulomb::detail::throw_invalid(
            where, "parameter '" + p.name + "' was not captured (the parameter list changed)");
      }
      const Matrix<S>& v = tensors_[it->second].value;
      if (v.rows() != p.value->rows() || v.cols() != p.value->cols()) {
        coulomb::detail::throw_invalid(
            where, "parameter '" + p.name + "' is " +
                       detail::shape_text(p.value->rows(), p.value->cols()) +
                       ", it was captured as " + detail::shape_text(v.rows(), v.cols()));
      }
      if (used[it->second] != 0) {
        coulomb::detail::throw_invalid(where, "parameter name '" + p.name + "' appears twice");
      }
      used[it->second] = 1;
      order.push_back(it->second);
    }
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      if (used[i] == 0) {
        coulomb::detail::throw_invalid(where, "captured parameter '" + tensors_[i].name +
                                                  "' is not in the list (the parameter list "
                                                  "changed)");
      }
    }
    for (std::size_t i = 0; i < params.size(); ++i) *params[i].value = tensors_[order[i]].value;
  }

  /// The captured tensors, in the order of the captured list.
  const std::vector<StateTensor<S>>& tensors() const noexcept { return tensors_; }

  /// Replaces the captured tensors (for example with ones read from a checkpoint). Throws
  /// invalid_argument for an empty or duplicate name.
  void assign(std::vector<StateTensor<S>> tensors) {
    const char* where = "coulomb::train::ParameterSnapshot::assign";
    std::map<std::string_view, int> seen;
    for (const auto& t : tensors) {
      if (t.name.empty()) coulomb::detail::throw_invalid(where, "a tensor has an empty name");
      if (!seen.emplace(t.name, 0).second) {
        coulomb::detail::throw_invalid(where, "tensor name '" + t.name + "' appears twice");
      }
    }
    tensors_ = std::move(tensors);
  }

  /// True before the first capture.
  bool empty() const noexcept { return tensors_.empty(); }

 private:
  std::vector<StateTensor<S>> tensors_;
};

}  // namespace coulomb::train
