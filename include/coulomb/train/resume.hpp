// SPDX-License-Identifier: MIT
/// @file train/resume.hpp
/// @brief Checkpoints of Phase A and Phase B (train/phase_a.hpp, train/phase_b.hpp): the options
/// (where, how often, resume or not), the events a program or a test can observe, the
/// fingerprint of a run (its options, the model's configuration and feature map, the data) that
/// a checkpoint records and that resuming checks field by field, and the helpers that write a
/// checkpoint atomically through the model-file container (io/model_file.hpp). Documented in
/// docs/training.md (section "Checkpoints and resuming"); the layout in docs/file_format.md.
///
/// Guarantee: a run that is killed at any moment (SIGKILL included) and resumed from its last
/// checkpoint with the same options, data and thread count ends with exactly the bits of the
/// run that was never interrupted. A checkpoint is replaced atomically (temporary file, fsync,
/// rename), so a crash while one is written leaves the previous one intact.
///
/// Data-parallel runs (a Collective of P > 1 processes, docs/distributed.md): rank 0 alone
/// writes the checkpoints, and every process learns whether the write succeeded (one sum), so
/// that a failure makes every process throw the same exception; resuming, every process reads
/// the same file (which must be visible to every process, e.g. on a shared file system), and the
/// processes check that they all found it, all read it, and all hold the same state afterwards.
/// The number of processes is part of the run's fingerprint (the dropout masks depend on it).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/atomic_file.hpp"
#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "../features/feature_map.hpp"
#include "../io/crc32c.hpp"
#include "../io/model_file.hpp"
#include "../io/text_model.hpp"
#include "../nn/text_classifier.hpp"
#include "../text/encoder.hpp"
#include "checkpoint.hpp"
#include "collective.hpp"
#include "detail_record_codec.hpp"

namespace coulomb::train {

/// What a checkpoint observer is told about.
enum class CheckpointEventKind {
  step,  ///< a training step (Phase B, the warm-up) or a Langevin step (Phase A) was taken
  /// A checkpoint is being written: its first bytes are in the temporary file (with several
  /// processes, only on rank 0, which writes).
  writing,
  /// A checkpoint was written and renamed over the checkpoint path (with several processes, on
  /// every process, once every process knows that rank 0's write succeeded).
  saved,
};

/// One event of a run with checkpoints (see CheckpointOptions::observer).
struct CheckpointEvent {
  CheckpointEventKind kind = CheckpointEventKind::step;  ///< what happened
  std::string_view phase{};  ///< "phase_a" or "phase_b" (the kind of the checkpoint file)
  /// Phase A: "warmup", "langevin" or "done"; Phase B: "running" or "done".
  std::string_view stage{};
  Index step = 0;    ///< optimizer steps so far (warm-up, Phase B) or Langevin steps of this Ω
  Index omega = -1;  ///< the Ω being learned (Phase A, stage "langevin"), else −1
};

/// Options of the checkpoints of one phase (PhaseAOptions::checkpoint,
/// PhaseBOptions::checkpoint). Phase A and Phase B need different paths.
struct CheckpointOptions {
  /// The checkpoint file ("": no checkpoints). It is replaced atomically at every checkpoint.
  std::string path{};
  /// Write a checkpoint after every this many optimizer steps (≥ 0; 0: not by steps). Applies to
  /// Phase B and to the warm-up of Phase A.
  Index every_steps = 0;
  /// Write a checkpoint at the end of every epoch (after the validation and early stopping) that
  /// is not the last one.
  bool at_epoch_end = true;
  /// Continue from `path` if that file exists (else start from the beginning); false: start
  /// from the beginning and overwrite it. Resuming checks that the checkpoint was written by the
  /// same run (options, model configuration, feature map, data) and throws io_error naming
  /// every field that differs.
  bool resume = false;
  /// Called at every step and checkpoint (see CheckpointEventKind), for logging or tests; may
  /// be empty. Whatever it does (even killing the process) cannot damage a saved checkpoint.
  std::function<void(const CheckpointEvent&)> observer{};

  /// Whether checkpoints are written (a path is set).
  bool enabled() const noexcept { return !path.empty(); }

  /// Throws invalid_argument, naming the field, for a negative every_steps.
  void validate() const {
    coulomb::detail::require(every_steps >= 0, "coulomb::train::CheckpointOptions",
                             "argument 'every_steps' must be >= 0 (0: not by steps), got " +
                                 std::to_string(every_steps));
  }
};

/// The identity of a training run as (field, value) pairs: what a checkpoint records so that
/// resuming with other options, another model or other data is refused with a message naming
/// each field that differs. Values are exact (doubles with 17 significant digits).
class RunFingerprint {
 public:
  /// Adds a field with a text value (later fields with the same name are also kept and
  /// checked, but names should be unique).
  void add(std::string field, std::string value) {
    fields_.emplace_back(std::move(field), std::move(value));
  }
  /// Adds an integer field.
  void add_integer(std::string field, std::int64_t value) {
    add(std::move(field), std::to_string(value));
  }
  /// Adds a floating-point field, printed so that it reads back exactly.
  void add_double(std::string field, double value) {
    add(std::move(field), detail::exact_decimal(value));
  }
  /// Adds a Boolean field ("true" / "false").
  void add_bool(std::string field, bool value) { add(std::move(field), value ? "true" : "false"); }

  /// Adds a field that checkpoints written before it existed lack, meaning `missing`: it is
  /// written only when `value` differs from `missing` (so that such runs write the same
  /// checkpoints as before), and a checkpoint without it has the value `missing`.
  void add_defaulted(std::string field, std::string value, std::string missing) {
    defaults_.emplace_back(field, std::move(missing));
    add(std::move(field), std::move(value));
  }

  /// Adds every recorded field of `record` (a type with a detail::RecordLayout) as
  /// "<prefix><name>", its value written as a checkpoint writes it.
  template <typename Record>
  void add_record(const std::string& prefix, const Record& record) {
    detail::for_each_field<Record>([&](const auto& f) {
      if (!f.when(record)) return;
      const auto& value = f.get(record);
      using T = std::remove_cvref_t<decltype(value)>;
      if constexpr (detail::LaidOutRecord<T>) {
        add_record(prefix + std::string(f.name), value);
      } else {
        add(prefix + std::string(f.name), detail::value_text(value, f.flags));
      }
    });
  }

  /// Adds a dataset under `prefix`: its size, token count, classes, pair flag and CRC-32C
  /// checksums of its ids, segments, sequence lengths and labels.
  void add_dataset(const std::string& prefix, const EncodedDataset& data) {
    add_integer(prefix + ".sequences", data.size());
    add_integer(prefix + ".tokens", static_cast<std::int64_t>(data.ids.size()));
    add_integer(prefix + ".num_classes", data.num_classes);
    add_bool(prefix + ".is_pair", data.is_pair);
    add(prefix + ".ids_crc32c", crc_text(std::span<const TokenId>(data.ids)));
    add(prefix + ".segments_crc32c", crc_text(std::span<const std::uint8_t>(data.segments)));
    std::vector<std::uint64_t> offsets(data.offsets.begin(), data.offsets.end());
    add(prefix + ".offsets_crc32c", crc_text(std::span<const std::uint64_t>(offsets)));
    add(prefix + ".labels_crc32c", crc_text(std::span<const int>(data.labels)));
  }

  /// Adds the configuration of a text classifier (every field, "model.config.<field>") and its
  /// feature map ("model.scalar", "model.feature_map", with its Draw policy and ε when the map
  /// has a stable name, io/text_model.hpp).
  template <FeatureMap Map, RealScalar S = typename Map::Scalar>
  void add_model(const nn::TextClassifier<Map>& model) {
    for (const auto& [key, value] : io::detail::config_entries(model.config()))
      add("model." + key, value);
    add("model.scalar", io::scalar_type_name(static_cast<std::uint8_t>(io::scalar_type_of<S>())));
    if (model.config().attention != nn::AttentionKind::linear) return;
    if constexpr (io::is_named_feature_map_v<Map>) {
      const io::FeatureMapSpec spec = io::feature_map_spec(model.feature_map(0));
      add("model.feature_map", spec.name);
      add("model.feature_map.draw", coulomb::to_string(spec.draw));
      add_double("model.feature_map.epsilon", spec.epsilon);
    } else {
      add("model.feature_map", "unnamed");
    }
  }

  /// The fields, in the order they were added.
  const std::vector<std::pair<std::string, std::string>>& fields() const noexcept {
    return fields_;
  }

  /// Writes every field as the metadata "fingerprint.<field>" of `file`.
  template <RealScalar S>
  void write(io::ModelFile<S>& file) const {
    for (const auto& [field, value] : fields_) {
      const std::string* missing = default_of(field);
      if (missing != nullptr && *missing == value) continue;
      file.set_metadata("fingerprint." + field, value);
    }
  }

  /// Throws io_error naming the checkpoint and every field whose value in `file` differs from
  /// this run's (or that the file lacks), one per line: "phase_b.learning_rate is '0.001' in
  /// the checkpoint, '0.002' in this run".
  template <RealScalar S>
  void check(const io::ModelFile<S>& file, std::string_view where) const {
    std::string problems;
    std::size_t count = 0;
    for (const auto& [field, value] : fields_) {
      const std::string* saved = file.find_metadata("fingerprint." + field);
      if (saved == nullptr) saved = default_of(field);
      if (saved != nullptr && *saved == value) continue;
      ++count;
      problems += "\n  " + field;
      if (saved == nullptr) {
        problems += " is missing from the checkpoint, '" + value + "' in this run";
      } else {
        problems += " is '" + io::detail::printable_name(*saved) + "' in the checkpoint, '" +
                    value + "' in this run";
      }
    }
    if (count > 0) {
      throw io_error(
          std::string(where) + ": '" + file.source() +
          "': cannot resume: the checkpoint was written by a different run (" +
          std::to_string(count) + " field" + (count > 1 ? "s differ" : " differs") +
          "; use the same options and data, or start afresh without resuming):" + problems);
    }
  }

 private:
  template <typename T>
  static std::string crc_text(std::span<const T> values) {
    const auto bytes = std::as_bytes(values);
    char buf[16];
    const int n = std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(io::crc32c(bytes)));
    return std::string(buf, static_cast<std::size_t>(n));
  }

  /// The value a checkpoint without `field` has (add_defaulted), else nullptr.
  const std::string* default_of(const std::string& field) const {
    for (const auto& [name, missing] : defaults_)
      if (name == field) return &missing;
    return nullptr;
  }

  std::vector<std::pair<std::string, std::string>> fields_;
  std::vector<std::pair<std::string, std::string>> defaults_;  // add_defaulted's fields
};

namespace detail {

/// Format version of the checkpoint layout on top of the model-file container.
inline constexpr std::string_view checkpoint_layout_version = "1";

/// Whether a checkpoint exists at `path` (a regular file, or a link to one).
inline bool checkpoint_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

/// Seconds of wall time since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Sets the metadata every checkpoint has: "checkpoint.kind" and "checkpoint.layout".
template <RealScalar S>
void begin_checkpoint(io::ModelFile<S>& file, std::string_view kind) {
  file.set_metadata("checkpoint.kind", std::string(kind));
  file.set_metadata("checkpoint.layout", std::string(checkpoint_layout_version));
}

/// Reads the checkpoint at `path` and checks its kind and layout version: io_error naming the
/// file when it is not a checkpoint, of another kind ("a phase_b checkpoint where a phase_a one
/// was expected": Phase A and Phase B need different paths) or of another layout.
template <RealScalar S>
io::ModelFile<S> load_checkpoint(const std::string& path, std::string_view kind,
                                 std::string_view where) {
  io::ModelFile<S> file = io::load_model_file<S>(path);
  const std::string* found = file.find_metadata("checkpoint.kind");
  if (found == nullptr) {
    throw io_error(std::string(where) + ": '" + path +
                   "' is a model file but not a training checkpoint (no metadata "
                   "'checkpoint.kind')");
  }
  if (*found != kind) {
    throw io_error(std::string(where) + ": '" + path + "' is a " +
                   io::detail::printable_name(*found) + " checkpoint, expected a " +
                   std::string(kind) +
                   " one (Phase A and Phase B need different checkpoint paths)");
  }
  const std::string& layout = file.metadata_value("checkpoint.layout");
  if (layout != checkpoint_layout_version) {
    throw io_error(std::string(where) + ": '" + path + "' has checkpoint layout " +
                   io::detail::printable_name(layout) + ", this build reads layout " +
                   std::string(checkpoint_layout_version));
  }
  return file;
}

/// Calls the observer of `options`, if any.
inline void notify(const CheckpointOptions& options, const CheckpointEvent& event) {
  if (options.observer) options.observer(event);
}

/// With several processes (`collective` of P > 1; nothing otherwise, where `failure` is
/// rethrown as it is): every process passes what it caught at the same point of the run
/// (nullptr: nothing), and when any process failed, every process throws the same exception:
/// the class (io_error, numerical_error, invalid_argument, else coulomb::error) and message of
/// the failure of the lowest failing rank r, prefixed "process r of P: ". Two sums over the
/// processes and, on a failure, a broadcast of its message; no process is left waiting.
inline void agree_on_failure(Collective* collective, std::exception_ptr failure) {
  if (!is_distributed(collective)) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  enum Kind : int { none = 0, io = 1, numerical = 2, invalid = 3, other = 4 };
  int kind = none;
  std::string message;
  if (failure) {
    try {
      std::rethrow_exception(failure);
    } catch (const io_error& e) {
      kind = io, message = e.what();
    } catch (const numerical_error& e) {
      kind = numerical, message = e.what();
    } catch (const invalid_argument& e) {
      kind = invalid, message = e.what();
    } catch (const std::exception& e) {
      kind = other, message = e.what();
    } catch (...) {
      kind = other, message = "an exception that is not a std::exception";
    }
  }
  const int P = collective->size();
  const int rank = collective->rank();
  // Slot r: the kind of rank r's failure (0: none); slot P: the length of the first one's text.
  std::vector<double> kinds(static_cast<std::size_t>(P) + 1, 0.0);
  kinds[static_cast<std::size_t>(rank)] = static_cast<double>(kind);
  collective->sum(std::span<double>(kinds));
  int first = -1;
  for (int r = 0; r < P && first < 0; ++r)
    if (kinds[static_cast<std::size_t>(r)] != 0.0) first = r;
  if (first < 0) return;
  const int first_kind = static_cast<int>(kinds[static_cast<std::size_t>(first)]);
  double length[1] = {rank == first ? static_cast<double>(message.size()) : 0.0};
  collective->sum(std::span<double>(length));
  std::vector<std::byte> bytes(static_cast<std::size_t>(length[0]));
  if (rank == first)
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(message[i]);
  collective->broadcast(std::span<std::byte>(bytes), first);
  std::string text = "process " + std::to_string(first) + " of " + std::to_string(P) + ": ";
  for (const std::byte b : bytes) text += static_cast<char>(b);
  switch (first_kind) {
    case io:
      throw io_error(text);
    case numerical:
      throw numerical_error(text);
    case invalid:
      throw invalid_argument(text);
    default:
      throw error(text);
  }
}

/// Whether a checkpoint exists at `path`, the same answer on every process of `collective`
/// (one sum). Throws io_error on every process, naming the processes that see it and those that
/// do not, when only some of them see it.
inline bool checkpoint_found(const std::string& path, Collective* collective,
                             std::string_view where) {
  const bool here = checkpoint_exists(path);
  if (!is_distributed(collective)) return here;
  const int P = collective->size();
  std::vector<double> seen(static_cast<std::size_t>(P), 0.0);
  seen[static_cast<std::size_t>(collective->rank())] = here ? 1.0 : 0.0;
  collective->sum(std::span<double>(seen));
  std::string with, without;
  int count = 0;
  for (int r = 0; r < P; ++r) {
    const bool found = seen[static_cast<std::size_t>(r)] != 0.0;
    count += found ? 1 : 0;
    std::string& list = found ? with : without;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  if (count == 0) return false;
  if (count == P) return true;
  throw io_error(std::string(where) + ": cannot resume: the checkpoint '" + path +
                 "' exists on process" + (count > 1 ? "es " : " ") + with + " but not on process" +
                 (P - count > 1 ? "es " : " ") + without + " of " + std::to_string(P) +
                 " (every process reads the checkpoint: its path must be visible to every "
                 "process, e.g. on a shared file system)");
}

/// A 64-bit FNV-1a hash of the encoded contents of `file` (its metadata, blobs and tensors).
template <RealScalar S>
std::uint64_t checkpoint_hash(const io::ModelFile<S>& file) {
  Fnv1a h;
  io::detail::encode_model_file(
      file, [&h](std::span<const std::byte> bytes) { h.add(bytes.data(), bytes.size()); });
  return h.value;
}

/// Resuming from the checkpoint at `path` on every process of `collective` together: calls
/// `read(hashed)` (which reads the checkpoint and restores from it, and returns a hash of what
/// it read and of the state it restored when `hashed`, else anything), and throws the same
/// exception on every process when any of them failed (agree_on_failure), or io_error on every
/// process when their hashes differ. With one process, `read(false)`, whose exceptions pass.
template <typename Read>
void resume_together(Collective* collective, const std::string& path, std::string_view where,
                     Read&& read) {
  const bool shared = is_distributed(collective);
  std::uint64_t state = 0;
  std::exception_ptr failure;
  try {
    state = read(shared);
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_failure(collective, failure);
  if (!shared || same_on_all(*collective, state)) return;
  throw io_error(std::string(where) + ": cannot resume: the " + std::to_string(collective->size()) +
                 " processes read different checkpoints at '" + path +
                 "' (their hashes differ): every process must read the same file, e.g. on a "
                 "shared file system");
}

/// The fingerprint field of the number of processes (absent from the checkpoints of one
/// process, which were written before it existed).
inline void add_processes(RunFingerprint& fingerprint, const Collective* collective) {
  fingerprint.add_defaulted("processes",
                            std::to_string(collective != nullptr ? collective->size() : 1), "1");
}

/// Writes `file` atomically at options.path (numerical_error for a non-finite tensor, io_error
/// when it cannot be written; the previous checkpoint is intact in both cases). Tells the
/// observer "writing" once the first bytes are in the temporary file, then "saved". With
/// several processes (`collective`), rank 0 alone writes, and every process then throws the same
/// exception when the write failed (agree_on_failure), else tells its observer "saved".
template <RealScalar S>
void save_checkpoint(const CheckpointOptions& options, const io::ModelFile<S>& file,
                     CheckpointEvent event, Collective* collective = nullptr) {
  const char* where = "coulomb::train::save_checkpoint";
  std::exception_ptr failure;
  if (collective == nullptr || collective->rank() == 0) {
    try {
      io::detail::require_finite_tensors(file, where, options.path);
      bool told = false;
      coulomb::write_file_atomically(
          options.path,
          [&](auto& sink) {
            io::detail::encode_model_file(file, [&](std::span<const std::byte> bytes) {
              sink(bytes);
              if (!told) {
                told = true;
                event.kind = CheckpointEventKind::writing;
                notify(options, event);
              }
            });
          },
          where);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_on_failure(collective, failure);
  event.kind = CheckpointEventKind::saved;
  notify(options, event);
}

}  // namespace detail

}  // namespace coulomb::train
