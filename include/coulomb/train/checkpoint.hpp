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

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../io/model_file.hpp"
#include "../nn/parameter.hpp"
#include "adamw.hpp"
#include "detail_record_codec.hpp"
#include "early_stopping.hpp"

namespace coulomb::train {

namespace detail {

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

/// What a checkpoint reads back of an AdamW optimizer besides its moments.
struct AdamWRecord {
  std::string kind = "adamw";  ///< the optimizer
  std::int64_t step = 0;       ///< steps taken
};

/// The fields of an AdamWRecord.
template <>
struct RecordLayout<AdamWRecord> {
  /// The fields.
  static constexpr auto fields =
      std::make_tuple(field("kind", &AdamWRecord::kind), field("step", &AdamWRecord::step));
};

/// The hyper-parameters of AdamW as a checkpoint records them (informative: not read back).
template <>
struct RecordLayout<AdamWOptions> {
  using O = AdamWOptions;  ///< the record
  /// The fields.
  static constexpr auto fields =
      std::make_tuple(field("beta1", &O::beta1), field("beta2", &O::beta2),
                      field("epsilon", &O::epsilon), field("weight_decay", &O::weight_decay));
};

/// The fields of an EarlyStoppingState.
template <>
struct RecordLayout<EarlyStoppingState> {
  using E = EarlyStoppingState;  ///< the record
  /// The fields.
  static constexpr auto fields =
      std::make_tuple(field("best_value", &E::best_value), field("best_epoch", &E::best_epoch),
                      field("last_epoch", &E::last_epoch),
                      field("epochs_without_improvement", &E::epochs_without_improvement));
};

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
  detail::write_record(file, p, detail::AdamWRecord{"adamw", state.step});
  detail::write_record(file, p, optimizer.options());
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
  detail::AdamWRecord record;
  detail::read_record(file, p, record, where);
  if (record.kind != "adamw") {
    throw io_error(std::string(where) + ": '" + file.source() + "': optimizer kind '" +
                   io::detail::printable_name(record.kind) + "', expected 'adamw'");
  }
  AdamWState<S> state;
  state.step = record.step;
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
  detail::write_record(file, p, tracker.state());
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
  EarlyStoppingState state;
  detail::read_record(file, p, state, where);
  try {
    tracker.resume(state, detail::tensors_with_prefix(file, p + "best."));
  } catch (const invalid_argument& e) {
    throw io_error(std::string(where) + ": '" + file.source() + "': " + e.what());
  }
}

}  // namespace coulomb::train
