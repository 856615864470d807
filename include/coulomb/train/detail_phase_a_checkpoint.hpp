// SPDX-License-Identifier: MIT
/// @file train/detail_phase_a_checkpoint.hpp
/// @brief Internal: the checkpoints of a Phase A run (train/phase_a.hpp). Stages: "warmup"
/// (its warm-up, a Phase B run whose checkpoints also carry Phase A's stage and fingerprint),
/// "langevin" (after the warm-up and after each Ω's Langevin run: the model, the reports of the
/// Ω done, and every Ω as it was before its run) and "done". A Langevin run is not interrupted:
/// resuming repeats the run of the Ω in progress from its start. The layout is in
/// docs/file_format.md ("Training checkpoints"). With several processes (options.collective),
/// rank 0 writes and every process resumes from the same file (train/resume.hpp).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../features/feature_map.hpp"
#include "../io/model_file.hpp"
#include "../io/parameters.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/encoder.hpp"
#include "checkpoint.hpp"
#include "collective.hpp"
#include "detail_phase_b_checkpoint.hpp"
#include "detail_record_codec.hpp"
#include "parameter_snapshot.hpp"
#include "phase_a_options.hpp"
#include "resume.hpp"

namespace coulomb::train::detail {

/// What a Phase A checkpoint holds under "phase_a." besides the report, the Ω lines and the
/// tensors.
struct PhaseARecord {
  std::string stage = "warmup";  ///< "warmup", "langevin" or "done"
  double seconds = 0.0;          ///< wall time of every session so far
};

/// The fields of a PhaseARecord.
template <>
struct RecordLayout<PhaseARecord> {
  /// The fields.
  static constexpr auto fields = std::make_tuple(field("stage", &PhaseARecord::stage),
                                                 field("seconds", &PhaseARecord::seconds));
};

/// Tells a checkpoint observer about every Langevin step of Ω number `omega`.
struct LangevinStepObserver {
  const CheckpointOptions* options = nullptr;  ///< whose observer (nullptr: none)
  Index omega = 0;                             ///< the Ω being learned

  /// Notifies the observer; never stops the run.
  template <typename Opt, typename F, typename M, typename Step>
  bool step_taken(const Opt&, F&, const M&, const Step& step) {
    if (options != nullptr) {
      notify(*options, CheckpointEvent{CheckpointEventKind::step, "phase_a", "langevin",
                                       static_cast<Index>(step.iteration) + 1, omega});
    }
    return false;
  }
};

/// The checkpoints of one Phase A run: its fingerprint (taken with Ω frozen, as Phase A runs),
/// the checkpoint it resumes from, and writing.
template <RealScalar S, FeatureMap Map>
class PhaseACheckpoints {
 public:
  /// Reads the checkpoint to resume from when options.checkpoint asks for one (io_error naming
  /// every field of the options, model or data that differs from the run that wrote it). With
  /// several processes (options.collective), every process reads it: io_error on every process
  /// when some of them do not find it, when any of them cannot resume from it, or when they do
  /// not all read the same bits.
  PhaseACheckpoints(const PhaseAOptions& options, nn::TextClassifier<Map>& model,
                    const EncodedDataset& train, const char* where)
      : options_(options.checkpoint),
        model_(model),
        start_(std::chrono::steady_clock::now()),
        where_(where),
        collective_(options.collective) {
    if (!enabled()) return;
    fingerprint_.add_model(model);
    fingerprint_.add_dataset("data.train", train);
    fingerprint_.add_record("phase_a.", options);
    add_processes(fingerprint_, collective_);
    if (!options_.resume || !checkpoint_found(options_.path, collective_, where)) return;
    resume_together(collective_, options_.path, where, [this](bool hashed) {
      read();
      return hashed ? checkpoint_hash(*saved_) : std::uint64_t{0};
    });
  }

  /// Whether checkpoints are written.
  bool enabled() const noexcept { return options_.enabled(); }
  /// The stage to resume: "start" (nothing to resume), "warmup", "langevin" or "done".
  const std::string& stage() const noexcept { return stage_; }
  /// Wall time of every session so far.
  double seconds() const { return earlier_seconds_ + seconds_since(start_); }

  /// A finished run: the final model and its report.
  PhaseAReport finished(PhaseAReport report) const {
    io::load_parameters(*saved_, model_.parameters(), "model.");
    restore_report(model_.num_omegas(), report);
    report.seconds = seconds();
    return report;
  }

  // ---- the warm-up

  /// The warm-up's checkpoint options: Phase A's, resuming when the warm-up was in progress.
  CheckpointOptions warmup_options() const {
    CheckpointOptions o;
    if (!enabled()) return o;
    o.path = options_.path;
    o.every_steps = options_.every_steps;
    o.at_epoch_end = options_.at_epoch_end;
    o.observer = options_.observer;
    o.resume = stage_ == "warmup";
    return o;
  }

  /// What the warm-up adds to its checkpoints: Phase A's stage "warmup" and fingerprint, and
  /// the weights from before the warm-up (`initial`, when they are to be put back).
  PhaseBCheckpointContext<S> warmup_context(const ParameterSnapshot<S>* initial) {
    PhaseBCheckpointContext<S> context;
    context.kind = "phase_a";
    context.stage = "warmup";
    context.add = [this, initial](io::ModelFile<S>& file) {
      begin(file, "warmup");
      if (initial == nullptr) return;
      for (const auto& t : initial->tensors())
        file.add_tensor("phase_a.initial." + t.name, t.value);
    };
    return context;
  }

  /// The weights from before the warm-up: saved in the checkpoint of a warm-up in progress,
  /// else the model's now.
  ParameterSnapshot<S> initial_weights() const {
    ParameterSnapshot<S> before;
    if (stage_ == "warmup")
      before.assign(tensors_with_prefix(*saved_, "phase_a.initial."));
    else
      before.capture(model_.parameters());
    return before;
  }

  /// The warm-up's wall time in the sessions before a resume (0 for a fresh warm-up).
  double earlier_warmup_seconds() const {
    if (stage_ != "warmup") return 0.0;
    return read_value<double>(*saved_, "phase_b.seconds", where_,
                              FieldFlags::optional | FieldFlags::duration);
  }

  // ---- the Langevin stage

  /// Resuming stage "langevin": the saved model with every Ω back at its start (the
  /// representations come from the model before any Langevin run) and the reports of the Ω
  /// learned so far. Returns the first Ω to learn (0 otherwise). Keeps every Ω's start when
  /// checkpoints are written.
  Index begin_langevin(PhaseAReport& report) {
    const Index K = model_.num_omegas();
    if (stage_ == "langevin") {
      first_omega_ = read_value<Index>(*saved_, "phase_a.next_omega", where_);
      if (first_omega_ < 0 || first_omega_ > K) {
        throw io_error(std::string(where_) + ": '" + options_.path +
                       "': metadata 'phase_a.next_omega' is " + std::to_string(first_omega_) +
                       ", outside [0, " + std::to_string(K) + "]");
      }
      io::load_parameters(*saved_, model_.parameters(), "model.");
      for (Index k = 0; k < K; ++k) {
        const Matrix<S>& s0 = saved_->tensor("phase_a.start_omega." + std::to_string(k));
        if (s0.rows() != model_.omega(k).rows() || s0.cols() != model_.omega(k).cols()) {
          throw io_error(std::string(where_) + ": '" + options_.path +
                         "': tensor 'phase_a.start_omega." + std::to_string(k) +
                         "' does not have the shape of Omega");
        }
        if (k < first_omega_) learned_.push_back(model_.omega(k));
        model_.set_omega(k, s0);
      }
      restore_report(first_omega_, report);
    }
    if (enabled())
      for (Index k = 0; k < K; ++k) start_omegas_.push_back(model_.omega(k));
    return first_omega_;
  }

  /// Once the representations are collected: the Ω learned before a resume are put back, and
  /// a fresh Langevin stage is saved.
  void langevin_ready(const PhaseAReport& report) {
    for (Index k = 0; k < first_omega_; ++k)
      model_.set_omega(k, learned_[static_cast<std::size_t>(k)]);
    learned_.clear();
    if (stage_ != "langevin") save("langevin", 0, report);
  }

  /// The observer of Ω k's Langevin steps.
  LangevinStepObserver step_observer(Index k) const {
    return LangevinStepObserver{options_.observer ? &options_ : nullptr, k};
  }

  /// Writes a checkpoint of stage "langevin" or "done": the model, the report, and (stage
  /// langevin) every Ω's start.
  void save(std::string_view stage, Index next_omega, const PhaseAReport& report) {
    if (!enabled()) return;
    io::ModelFile<S> file(options_.path);
    begin(file, stage);
    file.set_metadata("phase_a.next_omega", std::to_string(next_omega));
    write_record(file, "phase_a.", report);
    for (const PhaseAOmegaReport& r : report.omegas)
      file.set_metadata("phase_a.report.omega." + std::to_string(r.omega), record_line(r));
    io::add_parameters(file, model_.parameters(), "model.");
    if (stage == "langevin") {
      for (std::size_t k = 0; k < start_omegas_.size(); ++k)
        file.add_tensor("phase_a.start_omega." + std::to_string(k), start_omegas_[k]);
    }
    const Index K = model_.num_omegas();
    save_checkpoint(options_, file,
                    CheckpointEvent{CheckpointEventKind::saved, "phase_a", stage, 0,
                                    next_omega < K ? next_omega : -1},
                    collective_);
  }

 private:
  /// Reads and checks the checkpoint to resume from.
  void read() {
    saved_.emplace(load_checkpoint<S>(options_.path, "phase_a", where_));
    fingerprint_.check(*saved_, where_);
    PhaseARecord record;
    read_record(*saved_, "phase_a.", record, where_);
    if (record.stage != "warmup" && record.stage != "langevin" && record.stage != "done") {
      throw io_error(std::string(where_) + ": '" + options_.path +
                     "': metadata 'phase_a.stage' is '" + io::detail::printable_name(record.stage) +
                     "', expected warmup, langevin or done");
    }
    stage_ = record.stage;
    earlier_seconds_ = record.seconds;
  }

  /// The kind, layout, fingerprint, stage and wall time of every checkpoint.
  void begin(io::ModelFile<S>& file, std::string_view stage) const {
    begin_checkpoint(file, "phase_a");
    fingerprint_.write(file);
    write_record(file, "phase_a.", PhaseARecord{std::string(stage), seconds()});
  }

  /// The report's counts and the reports of the first `count` Ω (their sums accumulated in
  /// the order of the run) from the checkpoint.
  void restore_report(Index count, PhaseAReport& report) const {
    read_record(*saved_, "phase_a.", report, where_);
    for (Index k = 0; k < count; ++k) {
      const std::string key = "phase_a.report.omega." + std::to_string(k);
      PhaseAOmegaReport r;
      if (!parse_record_line(saved_->metadata_value(key), r) || r.omega != k) {
        throw io_error(std::string(where_) + ": '" + saved_->source() + "': metadata '" + key +
                       "' is not the report of Omega " + std::to_string(k));
      }
      report.add(r);
    }
  }

  const CheckpointOptions& options_;
  nn::TextClassifier<Map>& model_;
  std::chrono::steady_clock::time_point start_;
  const char* where_;
  Collective* collective_;
  RunFingerprint fingerprint_;
  std::optional<io::ModelFile<S>> saved_;
  std::string stage_ = "start";
  double earlier_seconds_ = 0.0;
  Index first_omega_ = 0;
  std::vector<Matrix<S>> learned_;       // the Ω learned before a resume, while x is collected
  std::vector<Matrix<S>> start_omegas_;  // every Ω before its Langevin run (with checkpoints)
};

}  // namespace coulomb::train::detail
