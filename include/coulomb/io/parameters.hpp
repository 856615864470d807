// SPDX-License-Identifier: MIT
/// @file io/parameters.hpp
/// @brief Saving and loading a model's parameters (an nn::ParameterList) by name with shape
/// checks, and checking a file's configuration metadata against the model's.
///
/// A model file stores every parameter of the model, trainable or not (a frozen Ω is part of
/// the model), as a tensor named by the parameter's dotted name, optionally behind a prefix
/// ("model." in a checkpoint that also holds "optimizer." tensors). Loading matches tensors to
/// parameters by name, never by position, checks every shape before it changes anything, and
/// says exactly what differs:
///
///     coulomb::io::load_parameters: 'model.clmb': tensor 'encoder.0.ffn.w1' has shape 64×256
///     in the file, the model expects 64×128
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../nn/parameter.hpp"
#include "model_file.hpp"

namespace coulomb::io {

/// Options of load_parameters.
struct LoadParametersOptions {
  /// Accept tensors in the file under the prefix that match no parameter of the model. Off by
  /// default: such a tensor means the file was written by a different model, so loading
  /// throws io_error naming it.
  bool allow_unused_tensors = false;
};

/// Adds the value of every parameter of `params` (trainable or not) to `file` as the tensor
/// `prefix + name`. Throws invalid_argument for a parameter without a value, or a name that
/// is empty or already in the file; `file` is unchanged then.
template <RealScalar S>
void add_parameters(ModelFile<S>& file, const nn::ParameterList<S>& params,
                    std::string_view prefix = {}) {
  const char* where = "coulomb::io::add_parameters";
  std::map<std::string, int, std::less<>> seen;
  for (const auto& p : params) {
    const std::string name = std::string(prefix) + p.name;
    if (p.value == nullptr) {
      throw invalid_argument(std::string(where) + ": parameter '" + p.name + "' has no value");
    }
    if (p.name.empty()) throw invalid_argument(std::string(where) + ": a parameter has no name");
    if (file.find_tensor(name) != nullptr || !seen.emplace(name, 0).second) {
      throw invalid_argument(std::string(where) + ": tensor '" + name +
                             "' is already in the file (duplicate parameter name)");
    }
  }
  for (const auto& p : params) file.add_tensor(std::string(prefix) + p.name, *p.value);
}

/// Copies the tensors `prefix + name` of `file` into the values of `params` (trainable or not).
/// Everything is checked before anything is copied, so on error the model is unchanged. Throws
/// io_error naming the file when a parameter has no tensor, when a tensor's shape differs from
/// its parameter's ("tensor 'x' has shape 64×256 in the file, the model expects 64×128"), or,
/// unless options.allow_unused_tensors, when a tensor under the prefix matches no parameter;
/// invalid_argument for a parameter without a value or a duplicate parameter name.
template <RealScalar S>
void load_parameters(const ModelFile<S>& file, const nn::ParameterList<S>& params,
                     std::string_view prefix = {}, const LoadParametersOptions& options = {}) {
  const char* where = "coulomb::io::load_parameters";
  auto fail = [&](const std::string& what) {
    throw io_error(std::string(where) + ": '" + file.source() + "': " + what);
  };
  std::map<std::string, int, std::less<>> wanted;
  std::vector<const Matrix<S>*> sources;
  sources.reserve(params.size());
  for (const auto& p : params) {
    if (p.value == nullptr) {
      throw invalid_argument(std::string(where) + ": parameter '" + p.name + "' has no value");
    }
    const std::string name = std::string(prefix) + p.name;
    if (!wanted.emplace(name, 0).second) {
      throw invalid_argument(std::string(where) + ": parameter name '" + p.name +
                             "' appears twice in the list");
    }
    const Matrix<S>* t = file.find_tensor(name);
    if (t == nullptr) {
      fail("the model's parameter '" + p.name + "' has no tensor '" + name +
           "' in the file (a file of another model?)");
    }
    if (t->rows() != p.value->rows() || t->cols() != p.value->cols()) {
      fail("tensor '" + name + "' has shape " + std::to_string(t->rows()) + "×" +
           std::to_string(t->cols()) + " in the file, the model expects " +
           std::to_string(p.value->rows()) + "×" + std::to_string(p.value->cols()));
    }
    sources.push_back(t);
  }
  if (!options.allow_unused_tensors) {
    for (const auto& t : file.tensors()) {
      if (std::string_view(t.name).substr(0, prefix.size()) == prefix &&
          wanted.find(t.name) == wanted.end()) {
        fail("tensor '" + t.name +
             "' matches no parameter of the model (a file of another model?)");
      }
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) *params[i].value = *sources[i];
}

/// Throws io_error naming the file unless its metadata `key` equals `expected`, for example the
/// configuration of the model about to be loaded: "metadata 'model.width' is '64' in the file,
/// expected '128'", or "has no metadata 'model.width'".
template <RealScalar S>
void require_metadata(const ModelFile<S>& file, std::string_view key, std::string_view expected) {
  const std::string* v = file.find_metadata(key);
  std::string msg = "coulomb::io::require_metadata: '" + file.source() + "': ";
  if (v == nullptr) {
    throw io_error(msg + "the file has no metadata '" + std::string(key) + "' (expected '" +
                   std::string(expected) + "')");
  }
  if (*v != expected) {
    throw io_error(msg + "metadata '" + std::string(key) + "' is '" + detail::printable_name(*v) +
                   "' in the file, expected '" + detail::printable_name(expected) +
                   "' (a file of another configuration)");
  }
}

/// Checks every entry of `expected` as the other overload, and reports all mismatches in one
/// io_error (one per line after the first).
template <RealScalar S, typename Map>
void require_metadata(const ModelFile<S>& file, const Map& expected) {
  std::string problems;
  std::size_t count = 0;
  for (const auto& [key, value] : expected) {
    try {
      require_metadata(file, key, value);
    } catch (const io_error& e) {
      const std::string_view what(e.what());
      const std::string_view prefix = "coulomb::io::require_metadata: '";
      // Keep only the part after "where: 'source': ".
      const std::size_t cut = prefix.size() + file.source().size() + 3;
      problems += "\n  ";
      problems += what.substr(std::min(cut, what.size()));
      ++count;
    }
  }
  if (count > 0) {
    throw io_error("coulomb::io::require_metadata: '" + file.source() +
                   "': " + std::to_string(count) + " configuration mismatch" +
                   (count > 1 ? "es" : "") + ":" + problems);
  }
}

}  // namespace coulomb::io
