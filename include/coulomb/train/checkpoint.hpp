// SPDX-License-Identifier: MIT
/// @file train/checkpoint.hpp
/// @brief Training state in a model file (io/model_file.hpp): the AdamW moments and step count,
/// and the early-stopping tracker, under a name prefix, so that a checkpoint holds the model
/// ("model." tensors, io/parameters.hpp) and everything needed to resume training exactly.
///
/// Layout under a prefix P (default "optimizer." and "early_stopping."):
///
///     metadata P + "kind"        "adamw"
///     metadata P + "step"        steps taken, decimal
///     metadata P + "beta1", "beta2", "epsilon", "weight_decay"   the hyper-parameters
///                                                               (informative; %.17g)
///     tensors  P + "first_moment.<name>", P + "second_moment.<name>"
///
///     metadata P + "best_value" (%.17g), "best_epoch", "last_epoch",
///              "epochs_without_improvement"          early stopping
///     tensors  P + "best.<name>"                     its copy of the best parameters
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../io/model_file.hpp"
#include "../nn/parameter.hpp"
#include "adamw.hpp"
#include "early_stopping.hpp"

namespace coulomb::train {

namespace detail {

/// A double printed so that it reads back to the same value.
inline std::string exact_decimal(double x) {
  char buf[40];
  const int n = std::snprintf(buf, sizeof buf, "%.17g", x);
  return std::string(buf, static_cast<std::size_t>(n));
}

/// Metadata `key` of `file` as an integer; io_error naming the file otherwise.
template <typename S>
std::int64_t metadata_integer(const io::ModelFile<S>& file, const std::string& key,
                              const char* where) {
  const std::string& text = file.metadata_value(key);
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    throw io_error(std::string(where) + ": '" + file.source() + "': metadata '" + key +
                   "' is not an integer");
  }
  return value;
}

/// Metadata `key` of `file` as a double; io_error naming the file otherwise.
template <typename S>
double metadata_double(const io::ModelFile<S>& file, const std::string& key, const char* where) {
  const std::string& text = file.metadata_value(key);
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    throw io_error(std::string(where) + ": '" + file.source() + "': metadata '" + key +
                   "' is not a number");
  }
  return value;
}

/// The tensors of `file` whose names start with `prefix`, with the prefix removed.
template <RealScalar S>
std::vector<StateTensor<S>> tensors_with_prefix(const io::ModelFile<S>& file,
                                                std::string_view prefix) {
  std::vector<StateTensor<S>> out;
  for (const auto& t : file.tensors()) {
    if (t.name.size() > prefix.size() && std::string_view(t.name).starts_with(prefix)) {
      out.push_back({t.name.substr(prefix.size()), t.value});
    }
  }
  return out;
}

}  // namespace detail

/// Adds the state of `optimizer` to `file` under `prefix` (see the file comment). Throws
/// invalid_argument if a tensor name is already in the file.
template <RealScalar S>
void add_optimizer_state(io::ModelFile<S>& file, const AdamW<S>& optimizer,
                         std::string_view prefix = "optimizer.") {
  const std::string p(prefix);
  AdamWState<S> state = optimizer.export_state();
  for (const auto& t : state.tensors) {
    if (file.find_tensor(p + t.name) != nullptr) {
      throw invalid_argument("coulomb::train::add_optimizer_state: tensor '" + p + t.name +
                             "' is already in the file");
    }
  }
  file.set_metadata(p + "kind", "adamw");
  file.set_metadata(p + "step", std::to_string(state.step));
  file.set_metadata(p + "beta1", detail::exact_decimal(optimizer.options().beta1));
  file.set_metadata(p + "beta2", detail::exact_decimal(optimizer.options().beta2));
  file.set_metadata(p + "epsilon", detail::exact_decimal(optimizer.options().epsilon));
  file.set_metadata(p + "weight_decay", detail::exact_decimal(optimizer.options().weight_decay));
  for (auto& t : state.tensors) file.add_tensor(p + t.name, std::move(t.value));
}

/// Restores the state of `optimizer` from `file` (written by add_optimizer_state), checked
/// against `params` as AdamW::import_state. The optimizer keeps its own hyper-parameters.
/// Throws io_error naming the file when the state is missing, of another kind, malformed, or
/// does not match the trainable parameters (names or shapes); the optimizer is unchanged then.
template <RealScalar S>
void restore_optimizer_state(const io::ModelFile<S>& file, AdamW<S>& optimizer,
                             const nn::ParameterList<S>& params,
                             std::string_view prefix = "optimizer.") {
  const char* where = "coulomb::train::restore_optimizer_state";
  const std::string p(prefix);
  const std::string& kind = file.metadata_value(p + "kind");
  if (kind != "adamw") {
    throw io_error(std::string(where) + ": '" + file.source() + "': optimizer kind '" +
                   io::detail::printable_name(kind) + "', expected 'adamw'");
  }
  AdamWState<S> state;
  state.step = detail::metadata_integer(file, p + "step", where);
  state.tensors = detail::tensors_with_prefix(file, p);
  try {
    optimizer.import_state(state, params);
  } catch (const invalid_argument& e) {
    throw io_error(std::string(where) + ": '" + file.source() + "': " + e.what());
  }
}

/// Adds the state of `tracker` to `file` under `prefix` (see the file comment). Throws
/// invalid_argument if a tensor name is already in the file.
template <RealScalar S>
void add_early_stopping_state(io::ModelFile<S>& file, const EarlyStopping<S>& tracker,
                              std::string_view prefix = "early_stopping.") {
  const std::string p(prefix);
  const auto& tensors = tracker.best_parameters().tensors();
  for (const auto& t : tensors) {
    if (file.find_tensor(p + "best." + t.name) != nullptr) {
      throw invalid_argument("coulomb::train::add_early_stopping_state: tensor '" + p + "best." +
                             t.name + "' is already in the file");
    }
  }
  file.set_metadata(p + "best_value", detail::exact_decimal(tracker.best_value()));
  file.set_metadata(p + "best_epoch", std::to_string(tracker.best_epoch()));
  file.set_metadata(p + "last_epoch", std::to_string(tracker.last_epoch()));
  file.set_metadata(p + "epochs_without_improvement",
                    std::to_string(tracker.epochs_without_improvement()));
  for (const auto& t : tensors) file.add_tensor(p + "best." + t.name, t.value);
}

/// Restores `tracker` from `file` (written by add_early_stopping_state); its options are kept.
/// Throws io_error naming the file when the state is missing or inconsistent; the tracker is
/// unchanged then.
template <RealScalar S>
void restore_early_stopping_state(const io::ModelFile<S>& file, EarlyStopping<S>& tracker,
                                  std::string_view prefix = "early_stopping.") {
  const char* where = "coulomb::train::restore_early_stopping_state";
  const std::string p(prefix);
  const std::int64_t best_epoch = detail::metadata_integer(file, p + "best_epoch", where);
  const std::int64_t last_epoch = detail::metadata_integer(file, p + "last_epoch", where);
  const std::int64_t stale =
      detail::metadata_integer(file, p + "epochs_without_improvement", where);
  const std::string& best_text = file.metadata_value(p + "best_value");
  const double best_value = (best_text == "nan" || best_text == "-nan")
                                ? std::numeric_limits<double>::quiet_NaN()
                                : detail::metadata_double(file, p + "best_value", where);
  try {
    tracker.resume(best_value, static_cast<Index>(best_epoch), static_cast<Index>(last_epoch),
                   static_cast<Index>(stale), detail::tensors_with_prefix(file, p + "best."));
  } catch (const invalid_argument& e) {
    throw io_error(std::string(where) + ": '" + file.source() + "': " + e.what());
  }
}

}  // namespace coulomb::train
