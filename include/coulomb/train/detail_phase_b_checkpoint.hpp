// SPDX-License-Identifier: MIT
/// @file train/detail_phase_b_checkpoint.hpp
/// @brief Internal: the checkpoints of a Phase B run (train/phase_b.hpp): what they hold besides
/// the tensors (PhaseBRecord, one field list for writing and reading), the run's fingerprint,
/// and writing and resuming. The layout is in docs/file_format.md ("Training checkpoints").
/// With several processes (options.collective), rank 0 writes and every process resumes from
/// the same file (train/resume.hpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../features/feature_map.hpp"
#include "../io/model_file.hpp"
#include "../io/parameters.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/encoder.hpp"
#include "checkpoint.hpp"
#include "collective.hpp"
#include "detail_phase_b_step.hpp"
#include "detail_record_codec.hpp"
#include "early_stopping.hpp"
#include "phase_b_options.hpp"
#include "resume.hpp"

namespace coulomb::train::detail {

/// The run a Phase B run is part of (Phase A's warm-up), for its checkpoints: the kind and
/// stage written, and what the outer run adds to every checkpoint (its stage and fingerprint).
template <RealScalar S>
struct PhaseBCheckpointContext {
  std::string_view kind = "phase_b";   ///< "checkpoint.kind" written and required
  std::string_view stage = "running";  ///< the stage reported to the observer while training
  std::function<void(io::ModelFile<S>&)> add{};  ///< adds the outer run's state
};

/// Where a Phase B run stands: the epoch to run next (or in progress), and with mid_epoch, what
/// its first `steps` batches did.
struct PhaseBPosition {
  Index epoch = 0;             ///< epoch to run, or in progress
  bool mid_epoch = false;      ///< `steps` batches of `epoch` are done
  Index steps = 0;             ///< its optimizer steps so far
  double learning_rate = 0.0;  ///< the rate of its last step
  double loss_sum = 0.0;       ///< sum of its step losses
  Index tokens = 0;            ///< its training tokens
  /// Wall time of its batches over every session (all of it training time: the evaluation
  /// comes after the last batch), so that a resumed epoch's times cover the epoch.
  double seconds = 0.0;
};

/// The fields of a PhaseBPosition.
template <>
struct RecordLayout<PhaseBPosition> {
  using P = PhaseBPosition;  ///< the record
  /// The fields; "epoch_seconds" came later (a checkpoint without it resumes, counting 0 s).
  static constexpr auto fields = std::make_tuple(
      field("epoch", &P::epoch), field("mid_epoch", &P::mid_epoch), field("epoch_steps", &P::steps),
      field("epoch_learning_rate", &P::learning_rate), field("epoch_loss_sum", &P::loss_sum),
      field("epoch_tokens", &P::tokens),
      field("epoch_seconds", &P::seconds, FieldFlags::optional | FieldFlags::duration));
};

/// What a Phase B checkpoint holds under "phase_b." besides the tensors and the epoch lines.
struct PhaseBRecord {
  std::string status = "running";  ///< "running" or "done"
  PhaseBPosition position{};       ///< where the run stands
  PhaseBHistory totals{};          ///< the history's totals (its epochs: the blob)
  RngState dropout_rng{};          ///< the generator of the dropout masks
};

/// The fields of a PhaseBRecord.
template <>
struct RecordLayout<PhaseBRecord> {
  using R = PhaseBRecord;  ///< the record
  /// The fields.
  static constexpr auto fields =
      std::make_tuple(field("status", &R::status), field("", &R::position), field("", &R::totals),
                      field("dropout_rng", &R::dropout_rng));
};

/// A Phase B run read back from its checkpoint.
struct ResumedPhaseB {
  PhaseBHistory history{};    ///< so far; `seconds` holds the earlier sessions' wall time
  PhaseBPosition position{};  ///< where to continue
  bool finished = false;      ///< the run had ended (status "done")
};

/// The checkpoints of one Phase B run: its fingerprint, writing and resuming. Holds references
/// to the run's stepper (whose parameters are the model's) and tracker (`stop` is null without
/// validation).
template <RealScalar S, FeatureMap Map>
class PhaseBCheckpoints {
 public:
  PhaseBCheckpoints(const PhaseBCheckpointContext<S>* context, const PhaseBOptions& options,
                    nn::TextClassifier<Map>& model, const EncodedDataset& train,
                    const EncodedDataset& validation, PhaseBStepper<S, Map>& stepper,
                    EarlyStopping<S>* stop)
      : options_(options.checkpoint),
        context_(context),
        kind_(context != nullptr ? context->kind : std::string_view("phase_b")),
        running_(context != nullptr ? context->stage : std::string_view("running")),
        stepper_(stepper),
        stop_(stop),
        collective_(options.collective) {
    if (!enabled()) return;
    fingerprint_.add_model(model);
    fingerprint_.add_dataset("data.train", train);
    fingerprint_.add_dataset("data.validation", validation);
    fingerprint_.add_record("phase_b.", options);
    add_processes(fingerprint_, collective_);
  }

  /// Whether checkpoints are written.
  bool enabled() const noexcept { return options_.enabled(); }

  /// Tells the observer about step `steps`; true when a checkpoint is due after it.
  bool step_taken(Index steps) const {
    notify(options_, CheckpointEvent{CheckpointEventKind::step, kind_, running_, steps, -1});
    return options_.every_steps > 0 && steps % options_.every_steps == 0;
  }

  /// Whether a checkpoint is due at the end of an epoch that is not the last.
  bool at_epoch_end() const noexcept { return enabled() && options_.at_epoch_end; }

  /// Writes a checkpoint of status "running" or "done" (history.seconds: the wall time of every
  /// session so far).
  void save(std::string_view status, const PhaseBPosition& at, const PhaseBHistory& history) {
    io::ModelFile<S> file(options_.path);
    begin_checkpoint(file, kind_);
    fingerprint_.write(file);
    if (context_ != nullptr && context_->add) context_->add(file);
    PhaseBRecord record{std::string(status), at, history, stepper_.dropout_rng().state()};
    record.totals.epochs.clear();
    write_record(file, "phase_b.", record);
    file.add_blob("phase_b.history", record_lines(history.epochs));
    io::add_parameters(file, stepper_.parameters(), "model.");
    add_optimizer_state(file, stepper_.gather_optimizer());
    stepper_.optimizer_written();
    if (stop_ != nullptr) add_early_stopping_state(file, *stop_);
    const std::string_view stage = context_ != nullptr ? context_->stage
                                   : status == "done"  ? std::string_view("done")
                                                       : running_;
    save_checkpoint(options_, file,
                    CheckpointEvent{CheckpointEventKind::saved, kind_, stage, history.steps, -1},
                    collective_);
  }

  /// With resume set and a checkpoint on disk: checks that it belongs to this run (io_error
  /// naming every differing field, the file, or a position outside this run of `per_epoch`
  /// batches per epoch and `total` steps), restores the model, the optimizer, the tracker and
  /// the dropout generator (all checked before any is changed), and returns the state. With
  /// several processes, every process reads the file: io_error on every process when some of
  /// them do not find it, when any of them cannot resume from it (its message, "process r of
  /// P: …"), or when they do not all read the same bits.
  std::optional<ResumedPhaseB> resume(Index epochs, Index per_epoch, Index total,
                                      const char* where) {
    if (!enabled() || !options_.resume || !checkpoint_found(options_.path, collective_, where))
      return std::nullopt;
    std::optional<ResumedPhaseB> r;
    resume_together(collective_, options_.path, where,
                    [&](bool hashed) { return read(epochs, per_epoch, total, where, hashed, r); });
    return r;
  }

 private:
  /// resume() on this process: `out` ← the state; returns, when `hashed`, the hash of the
  /// file's contents and of the restored parameters (else 0).
  std::uint64_t read(Index epochs, Index per_epoch, Index total, const char* where, bool hashed,
                     std::optional<ResumedPhaseB>& out) {
    const io::ModelFile<S> file = load_checkpoint<S>(options_.path, kind_, where);
    fingerprint_.check(file, where);
    PhaseBRecord record;
    read_record(file, "phase_b.", record, where);
    if (record.status != "running" && record.status != "done") {
      throw io_error(std::string(where) + ": '" + options_.path +
                     "': metadata 'phase_b.status' is '" +
                     io::detail::printable_name(record.status) + "', expected running or done");
    }
    ResumedPhaseB r{std::move(record.totals), record.position, record.status == "done"};
    r.history.epochs = parse_record_lines<EpochRecord>(
        file.blob("phase_b.history"), file.source(), "blob 'phase_b.history'", where,
        [](const EpochRecord& e) { return e.epoch >= 0 && e.steps >= 0; });
    const PhaseBPosition& at = r.position;
    if (at.epoch < 0 || at.epoch > epochs || at.steps < 0 || at.steps > per_epoch ||
        r.history.steps < 0 || r.history.steps > total) {
      throw io_error(std::string(where) + ": '" + options_.path +
                     "': the position in the checkpoint (epoch " + std::to_string(at.epoch) +
                     ", step " + std::to_string(r.history.steps) + ") is outside this run");
    }
    // The optimizer and the tracker are checked against the names and shapes of the
    // parameters, and load_parameters checks every tensor before it copies any: a checkpoint
    // that does not fit leaves the model unchanged.
    const nn::ParameterList<S>& params = stepper_.parameters();
    restore_optimizer_state(file, stepper_.optimizer(), params);
    if (stop_ != nullptr) restore_early_stopping_state(file, *stop_);
    io::load_parameters(file, params, "model.");
    stepper_.dropout_rng().set_state(record.dropout_rng);
    stepper_.optimizer_restored();
    out = std::move(r);
    return hashed ? checkpoint_hash(file) ^ (parameter_hash(params) * 0x9E3779B97F4A7C15ULL)
                  : std::uint64_t{0};
  }

  const CheckpointOptions& options_;
  const PhaseBCheckpointContext<S>* context_;
  std::string_view kind_;
  std::string_view running_;
  PhaseBStepper<S, Map>& stepper_;
  EarlyStopping<S>* stop_;
  Collective* collective_;
  RunFingerprint fingerprint_;
};

}  // namespace coulomb::train::detail
