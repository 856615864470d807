// SPDX-License-Identifier: MIT
// examples/common/text_experiment.hpp: one cell of the paper's sentence benchmarks (Badiei
// Khuzani et al., 2026, §5) — one (dataset, feature map, kernel, attention, Q = K, seed) — as a
// function that other programs (text_classification, a multi-seed driver) call:
//
//   1. read <data>/train.tsv(.gz) and <data>/validation.tsv(.gz) (columns detected from the
//      header: SST-2/Rotten Tomatoes `label sentence`, MRPC `label sentence1 sentence2`, GLUE's
//      MRPC and QQP layouts);
//   2. hold out a seeded fraction of the training split as the development set; build the
//      vocabulary from the rest of the training split only; encode every split;
//   3. build a TextClassifier<Map> for the feature map named on the command line;
//   4. learned kernel: Phase A (train/phase_a.hpp) learns Ω and freezes it; vanilla: Ω stays at
//      its random draw, frozen; softmax attention: no Ω;
//   5. Phase B (train/phase_b.hpp) with early stopping on the development set;
//   6. the metrics on the validation split (never used for any choice: the development set is
//      the only data that selects anything), under token drop and swap at 10% and 20%, the
//      reliability diagram, and the timings.
//
// With TextExperimentHooks::collective (P processes, docs/distributed.md), steps 4 to 6 are
// data-parallel: every process runs the same cell on the same data and gets the same result;
// rank 0 alone reports progress and notes and saves the model.
//
// Reports: print_metric_table (stdout), json_report, reliability_csv and plot_reliability
// (common/figure.hpp). load_text_experiment_data and check_text_experiment find bad inputs and
// settings before any training (TextExperimentError names the flag).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <coulomb/coulomb.hpp>
#include <coulomb/io/text_model.hpp>
#include <coulomb/text/gzip.hpp>
#include <coulomb/train/overlap_head.hpp>
#include <coulomb/train/phase_a.hpp>
#include <coulomb/train/phase_b.hpp>
#include <coulomb/train/progress.hpp>

#include <nlohmann/json.hpp>

#include "figure.hpp"
#include "json.hpp"

namespace coulomb_examples {

/// Names of the feature maps the experiment can use (those of io/text_model.hpp).
inline const std::vector<std::string>& feature_map_names() {
  static const std::vector<std::string> names(coulomb::io::feature_map_names.begin(),
                                              coulomb::io::feature_map_names.end());
  return names;
}

/// Everything that defines one run.
struct TextExperimentConfig {
  std::filesystem::path data_dir{};   ///< holds train.tsv(.gz) and validation.tsv(.gz)
  std::string dataset{};              ///< name in reports (default: the directory's name)
  std::string task = "auto";          ///< auto | single | pair | glue-mrpc | qqp (column layout)
  std::string feature_map = "favor";  ///< see feature_map_names()
  std::string kernel = "vanilla";     ///< vanilla | learned
  std::string attention = "linear";   ///< linear | softmax
  bool tied_qk = false;               ///< Q = K
  bool shared_omega = false;          ///< one Ω for all layers
  std::uint64_t seed = 1;             ///< model, split, batches, dropout, Phase A
  int threads = 1;                    ///< attention threads
  /// fp32 | bf16: the arithmetic of the validation forwards (core/precision.hpp); training is fp32
  std::string precision = "fp32";

  coulomb::Index d_model = 64;
  coulomb::Index heads = 4;
  coulomb::Index layers = 2;
  coulomb::Index d_ff = 128;
  coulomb::Index features = 64;  ///< m
  /// mean | pair | auto (the pair head for sentence pairs, mean otherwise): nn::PoolingKind.
  /// auto by default: on MRPC the pair head beat mean pooling on every seed measured.
  std::string pooling = "auto";
  coulomb::Index pair_hidden = 0;  ///< hidden width of the pair head (0: none)
  bool freeze_embeddings = false;  ///< keep the token embeddings at their random draw
  bool pair_alignment = false;     ///< pair head: add the alignment features (nn::PairAlignment)
  /// pair head: add the lexical overlap features (on by default for sentence pairs)
  bool pair_overlap = true;
  /// with pair_overlap: start the classifier's overlap rows from a logistic regression on the
  /// overlap features of the training split (train::fit_overlap_head)
  bool overlap_warm_start = true;
  /// Sentence pairs: train on every training pair in both orders (with_swapped_pairs); the
  /// development and validation splits are left as they are.
  bool swap_pairs = false;
  /// Binary tasks: choose the decision threshold on the development set (after Phase B) and
  /// fold it into the classifier's bias.
  bool tune_threshold = false;
  coulomb::Index max_length = 0;  ///< 0: 64 for single sentences, 128 for pairs
  coulomb::Index batch_size = 32;
  coulomb::Index epochs = 10;
  coulomb::Index patience = 2;
  /// What early stopping and the choice of the best epoch watch on the development set:
  /// accuracy | mcc | f1 | log_loss (train::ValidationMetric).
  std::string select = "accuracy";
  double learning_rate = 1e-3;
  double warmup_fraction = 0.1;
  double weight_decay = 0.01;
  double dropout = 0.3;
  double clip_norm = 1.0;
  /// Words seen fewer times in the training split become [UNK]. 0: 1 for sentence pairs, 2 for
  /// single sentences (on MRPC's 3,300 training pairs, 2 cost 0.2–7 points of accuracy).
  coulomb::Index min_frequency = 0;
  double dev_fraction = 0.1;  ///< fraction of the training split held out for early stopping

  // Phase A (kernel = learned).
  std::string representation = "initial";  ///< initial | warmup
  coulomb::Index phase_a_sequences = 2048;
  coulomb::Index phase_a_warmup_steps = 200;
  coulomb::Index phase_a_steps = 300;
  double phase_a_step_size = 1.0;
  double phase_a_beta = std::numeric_limits<double>::infinity();
  double phase_a_repulsion = 1e-3;
  double phase_a_riesz_s = -1.0;
  double phase_a_softening = 0.1;
  double phase_a_radius = 0.0;         ///< 0: phase_a_radius_factor × the largest initial ‖ω‖
  double phase_a_radius_factor = 1.0;  ///< see phase_a_radius

  std::vector<double> perturbation_rates{0.1, 0.2};  ///< robustness rows (drop and swap)
  std::string model_path{};  ///< save the trained model here (io/text_model.hpp; empty: not)
  /// Checkpoints (train/resume.hpp): PREFIX.phase_a.ckpt and PREFIX.phase_b.ckpt (empty: none).
  std::string checkpoint_prefix{};
  coulomb::Index checkpoint_every = 0;  ///< also every this many steps (0: epoch ends only)
  bool resume = false;                  ///< continue from the checkpoints if they exist
};

/// One row of the metric table.
struct MetricRow {
  std::string name;                        ///< "validation", "drop 10%", …
  coulomb::ClassificationMetrics metrics;  ///< on the validation split
};

/// What one run produced.
struct TextExperimentResult {
  TextExperimentConfig config{};
  std::string columns{};  ///< the column layout read
  coulomb::Index vocab_size = 0;
  coulomb::Index train_size = 0, dev_size = 0, validation_size = 0;
  coulomb::EncodingStats train_stats{}, validation_stats{};
  coulomb::Index parameters = 0;
  std::optional<coulomb::train::PhaseAReport> phase_a{};
  coulomb::train::PhaseBHistory phase_b{};
  double phase_a_seconds = 0.0;
  double phase_b_seconds = 0.0;
  double inference_ms_per_1000 = 0.0;  ///< evaluation forward time per 1,000 sequences
  /// the precision of the validation forwards, as granted (bf16 may fall back to fp32)
  coulomb::InferencePrecision inference_precision = coulomb::InferencePrecision::fp32;
  double dev_accuracy = 0.0;  ///< at the best epoch
  double threshold = 0.5;     ///< decision threshold on p(class 1) (tune_threshold; else 0.5)
  /// With the overlap warm start: the validation metrics of the logistic regression on the
  /// overlap features alone (the model as Phase B starts, without the encoder's rows)
  std::optional<coulomb::ClassificationMetrics> overlap_regression{};
  std::vector<MetricRow> rows{};                       ///< validation, then the perturbed rows
  std::vector<coulomb::ReliabilityBin> reliability{};  ///< 15 bins, on the validation split
  double seconds = 0.0;                                ///< whole run
  int processes = 1;  ///< data-parallel processes (TextExperimentHooks::collective)
  /// Why the model could not be saved to config.model_path (empty: saved, or not asked for).
  std::string model_error{};
};

/// Optional hooks: progress reporters for the two phases (may return nullptr), one-line notes,
/// and the processes of a data-parallel run.
struct TextExperimentHooks {
  std::function<std::unique_ptr<coulomb::train::ProgressReporter>(const std::string& label,
                                                                  const std::string& unit)>
      make_progress{};
  std::function<void(const std::string&)> message{};  ///< one-line notes (stderr)
  /// The processes that run the experiment together (not owned; nullptr: this process alone):
  /// Phase A, Phase B and every evaluation are data-parallel over them (docs/distributed.md).
  /// Every process must call run_text_experiment with the same configuration and data. Only
  /// rank 0 calls make_progress and message and saves the model; every process returns the
  /// same result.
  coulomb::train::Collective* collective = nullptr;
  /// Told of every step and checkpoint of Phase A and Phase B when checkpoints are written
  /// (CheckpointOptions::observer; may be empty), on every process.
  std::function<void(const coulomb::train::CheckpointEvent&)> checkpoint_observer{};
};

/// An input or setting of a run that cannot work, found before any training: the command-line
/// flag it concerns and what is wrong (the tools print "<flag>: <what>", exit status 105).
class TextExperimentError : public coulomb::invalid_argument {
 public:
  /// `flag` ("--data", "--dev-fraction", …) and the message.
  TextExperimentError(std::string flag, const std::string& what)
      : coulomb::invalid_argument(what), flag_(std::move(flag)) {}
  /// The flag the problem concerns.
  const std::string& flag() const noexcept { return flag_; }

 private:
  std::string flag_;
};

/// The two splits of a dataset, each read once and checked (load_text_experiment_data).
struct TextExperimentData {
  std::filesystem::path train_path{}, validation_path{};
  std::string columns_name{};  ///< the layout read: single, pair, glue-mrpc or qqp
  coulomb::TextColumns columns{};
  coulomb::TextDataset train{};       ///< the whole training split (the development set is cut
                                      ///< from it per run)
  coulomb::TextDataset validation{};  ///< the validation split
};

/// The dataset's name in reports: cfg.dataset, or the name of the data directory.
inline std::string dataset_name(const TextExperimentConfig& cfg) {
  if (!cfg.dataset.empty()) return cfg.dataset;
  std::filesystem::path p = cfg.data_dir;
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

/// The name of a run's files, "<dataset>_<kernel>-<map>[_qk]_seed<S>" (softmax attention:
/// "<dataset>_softmax[_qk]_seed<S>").
inline std::string run_file_stem(const TextExperimentConfig& cfg) {
  return dataset_name(cfg) + "_" +
         (cfg.attention == "softmax" ? std::string("softmax")
                                     : cfg.kernel + "-" + cfg.feature_map) +
         (cfg.tied_qk ? "_qk" : "") + "_seed" + std::to_string(cfg.seed);
}

namespace detail {

/// The file <dir>/<stem>.tsv.gz or <dir>/<stem>.tsv, whichever exists (the first of `stems`);
/// any file but a directory (a FIFO or a link to one is read like a file).
inline std::filesystem::path find_split(const std::filesystem::path& dir,
                                        const std::vector<std::string>& stems) {
  for (const auto& stem : stems) {
    for (const char* ext : {".tsv.gz", ".tsv"}) {
      const auto p = dir / (stem + ext);
      std::error_code ec;
      const auto status = std::filesystem::status(p, ec);
      if (std::filesystem::exists(status) && !std::filesystem::is_directory(status)) return p;
    }
  }
  throw TextExperimentError("--data", "no " + stems.front() + ".tsv.gz or " + stems.front() +
                                          ".tsv in '" + dir.string() + "'");
}

/// The layout `task` names, or (auto) the one the header line of `text` shows.
inline std::string layout_of(const std::string& task, std::string_view text) {
  if (task != "auto") return task;
  std::string first_line(text.substr(0, text.find('\n')));
  if (!first_line.empty() && first_line.back() == '\r') first_line.pop_back();
  auto has = [&](const std::string& column) {
    const std::string line = "\t" + first_line + "\t";
    return line.find("\t" + column + "\t") != std::string::npos;
  };
  if (has("is_duplicate")) return "qqp";
  if (has("#1 String")) return "glue-mrpc";
  if (has("sentence1") || has("question1")) return "pair";
  return "single";
}

/// The columns of a layout name.
inline coulomb::TextColumns columns_of(const std::string& layout) {
  if (layout == "single") return coulomb::TextColumns::sst2();
  if (layout == "pair") return coulomb::TextColumns::mrpc();
  if (layout == "glue-mrpc") return coulomb::TextColumns::glue_mrpc();
  if (layout == "qqp") return coulomb::TextColumns::qqp();
  throw TextExperimentError("--task", "unknown task '" + layout + "'");
}

/// "class 0: 12, class 1: 0" for messages.
inline std::string class_count_text(const coulomb::TextDataset& d) {
  std::string out;
  const auto counts = d.class_counts();
  for (std::size_t c = 0; c < counts.size(); ++c)
    out += (c ? ", class " : "class ") + std::to_string(c) + ": " + std::to_string(counts[c]);
  return out;
}

}  // namespace detail

/// Reads the training and validation splits of `data_dir` (train.tsv(.gz) and validation.tsv(.gz)
/// or dev.tsv(.gz)), each file exactly once (pipes and FIFOs work), gzip detected by content,
/// the layout from `task` or (auto) from the training file's header. Throws TextExperimentError
/// (flag --data) for a missing or unreadable file, a split without examples, unlabelled rows, or
/// a training split with fewer than two classes (naming the class counts).
inline TextExperimentData load_text_experiment_data(const std::filesystem::path& data_dir,
                                                    const std::string& task = "auto") {
  TextExperimentData data;
  data.train_path = detail::find_split(data_dir, {"train"});
  data.validation_path = detail::find_split(data_dir, {"validation", "dev"});
  try {
    const std::string train_text = coulomb::read_text_file_auto(data.train_path.string());
    data.columns_name = detail::layout_of(task, train_text);
    data.columns = detail::columns_of(data.columns_name);
    coulomb::TextReadOptions read_options;
    if (data.columns_name == "qqp") read_options.malformed = coulomb::MalformedRows::skip;
    data.train = coulomb::parse_text_dataset(train_text, data.train_path.string(), data.columns,
                                             read_options);
    data.validation =
        coulomb::parse_text_dataset(coulomb::read_text_file_auto(data.validation_path.string()),
                                    data.validation_path.string(), data.columns, read_options);
  } catch (const TextExperimentError&) {
    throw;
  } catch (const coulomb::error& e) {
    throw TextExperimentError("--data", e.what());
  }
  for (const auto* d : {&data.train, &data.validation}) {
    const auto& path = d == &data.train ? data.train_path : data.validation_path;
    if (d->examples.empty())
      throw TextExperimentError("--data", "'" + path.string() + "' holds no examples");
    if (!d->is_labelled)
      throw TextExperimentError("--data", "'" + path.string() + "' has no label column");
  }
  const auto counts = data.train.class_counts();
  if (std::count_if(counts.begin(), counts.end(), [](coulomb::Index c) { return c > 0; }) < 2)
    throw TextExperimentError("--data", "the training split '" + data.train_path.string() +
                                            "' holds examples of one class only (" +
                                            detail::class_count_text(data.train) +
                                            "): a classifier needs at least two");
  return data;
}

/// Checks the settings of `cfg` against `data` before any work: the development split leaves
/// examples on both sides, --swap-pairs and --pooling pair have sentence pairs. Throws
/// TextExperimentError naming the flag. (The model's own configuration is checked when the model
/// is built, before any training.)
inline void check_text_experiment(const TextExperimentConfig& cfg, const TextExperimentData& data) {
  const auto n = data.train.size();
  const auto n_dev =
      static_cast<coulomb::Index>(std::llround(cfg.dev_fraction * static_cast<double>(n)));
  if (n_dev <= 0 || n_dev >= n)
    throw TextExperimentError(
        "--dev-fraction", "holds out " + std::to_string(n_dev) + " of the " + std::to_string(n) +
                              " training examples of '" + data.train_path.string() +
                              "', which leaves an empty development or training set");
  if (cfg.swap_pairs && !data.columns.is_pair())
    throw TextExperimentError(
        "--swap-pairs",
        "needs a sentence-pair dataset, '" + data.train_path.string() + "' holds single sentences");
  if (cfg.pooling == "pair" && !data.columns.is_pair())
    throw TextExperimentError("--pooling", "'pair' needs a sentence-pair dataset, '" +
                                               data.train_path.string() +
                                               "' holds single sentences");
}

/// Runs one cell with feature map type `Map` (float); see the file comment.
template <typename Map>
TextExperimentResult run_text_experiment_with(const TextExperimentConfig& cfg,
                                              const TextExperimentData& data,
                                              const TextExperimentHooks& hooks = {}) {
  using coulomb::Index;
  using Model = coulomb::nn::TextClassifier<Map>;
  const auto start = std::chrono::steady_clock::now();
  coulomb::train::Collective* const collective = hooks.collective;
  // Rank 0 alone reports and writes files (the others compute the same result).
  const bool root = collective == nullptr || collective->rank() == 0;
  auto note = [&](const std::string& text) {
    if (root && hooks.message) hooks.message(text);
  };
  const auto make_progress = [&](const std::string& label, const std::string& unit) {
    return root && hooks.make_progress ? hooks.make_progress(label, unit) : nullptr;
  };
  TextExperimentResult result;
  result.config = cfg;
  result.processes = collective == nullptr ? 1 : collective->size();
  double earlier_seconds = 0.0;  // of the sessions before a resume (Phase A and B reports)
  result.config.dataset = dataset_name(cfg);

  // ---- data (read and checked by load_text_experiment_data)
  check_text_experiment(cfg, data);
  const coulomb::TextDataset& full_train = data.train;
  const coulomb::TextDataset& validation = data.validation;
  const coulomb::TextColumns& columns = data.columns;
  result.columns = data.columns_name;
  if (result.config.max_length <= 0) result.config.max_length = columns.is_pair() ? 128 : 64;
  if (result.config.min_frequency <= 0) result.config.min_frequency = columns.is_pair() ? 1 : 2;

  // Development set: a seeded fraction of the training split (stream 100 of the seed).
  coulomb::Rng split_rng = coulomb::Rng(cfg.seed).split(100);
  std::vector<Index> order(static_cast<std::size_t>(full_train.size()));
  for (Index i = 0; i < full_train.size(); ++i) order[static_cast<std::size_t>(i)] = i;
  coulomb::shuffle_in_place(order, split_rng);
  const auto n_dev =
      static_cast<Index>(std::llround(cfg.dev_fraction * static_cast<double>(full_train.size())));
  coulomb::TextDataset train, dev;
  for (coulomb::TextDataset* d : {&train, &dev}) {
    d->source = full_train.source;
    d->is_pair = full_train.is_pair;
    d->is_labelled = full_train.is_labelled;
    d->num_classes = full_train.num_classes;
  }
  std::vector<char> in_dev(order.size(), 0);
  for (Index k = 0; k < n_dev; ++k)
    in_dev[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = 1;
  for (Index i = 0; i < full_train.size(); ++i)
    (in_dev[static_cast<std::size_t>(i)] ? dev : train)
        .examples.push_back(full_train.examples[static_cast<std::size_t>(i)]);

  coulomb::VocabularyOptions vocab_options;
  vocab_options.min_frequency = result.config.min_frequency;
  const coulomb::Vocabulary vocab = coulomb::build_vocabulary(train, vocab_options);
  const coulomb::TextEncoder encoder(vocab,
                                     {.max_length = result.config.max_length, .add_cls = false});
  const coulomb::EncodedDataset train_ids =
      encoder.encode(cfg.swap_pairs ? coulomb::with_swapped_pairs(train) : train);
  const coulomb::EncodedDataset dev_ids = encoder.encode(dev);
  const coulomb::EncodedDataset valid_ids = encoder.encode(validation);
  result.vocab_size = vocab.size();
  result.train_size = train_ids.size();
  result.dev_size = dev_ids.size();
  result.validation_size = valid_ids.size();
  result.train_stats = train_ids.stats;
  result.validation_stats = valid_ids.stats;
  {
    std::ostringstream os;
    os << result.config.dataset << ": " << result.columns << " layout, train " << train_ids.size()
       << " (" << train_ids.stats.truncated_sequences << " truncated), development "
       << dev_ids.size() << ", validation " << valid_ids.size() << " ("
       << valid_ids.stats.truncated_sequences << " truncated); vocabulary " << vocab.size();
    note(os.str());
  }

  // ---- model
  coulomb::nn::TextClassifierConfig mc;
  mc.vocab_size = vocab.size();
  mc.max_length = result.config.max_length;
  mc.d_model = cfg.d_model;
  mc.num_heads = cfg.heads;
  mc.d_ff = cfg.d_ff;
  mc.num_layers = cfg.layers;
  mc.num_classes = full_train.num_classes;
  mc.dropout = cfg.dropout;
  mc.attention = cfg.attention == "softmax" ? coulomb::nn::AttentionKind::softmax
                                            : coulomb::nn::AttentionKind::linear;
  mc.num_features = cfg.features;
  mc.shared_omega = cfg.shared_omega;
  mc.train_omega = false;
  mc.tied_qk = cfg.tied_qk;
  mc.use_segments = full_train.is_pair;
  const bool pair_head = cfg.pooling == "pair" || (cfg.pooling == "auto" && full_train.is_pair);
  mc.pooling = pair_head ? coulomb::nn::PoolingKind::pair : coulomb::nn::PoolingKind::mean;
  mc.pair_hidden = pair_head ? cfg.pair_hidden : 0;
  mc.pair_alignment = pair_head && cfg.pair_alignment;
  mc.pair_overlap = pair_head && cfg.pair_overlap;
  mc.num_threads = cfg.threads;
  coulomb::Rng seeds(cfg.seed);
  const std::uint64_t model_seed = seeds();
  const std::uint64_t phase_a_seed = seeds();
  const std::uint64_t phase_b_seed = seeds();
  const std::uint64_t perturb_seed = seeds();
  Model model(mc, model_seed);
  model.set_token_embedding_trainable(!cfg.freeze_embeddings);
  if (mc.pair_overlap) {
    if (cfg.overlap_warm_start && mc.pair_hidden == 0) {
      coulomb::train::fit_overlap_head(model, train_ids);
      // The regression alone, for the report: the classifier without the encoder's rows.
      Model alone = model;
      for (auto& p : alone.parameters())
        if (p.name == "classifier.weight")
          p.value->topRows(p.value->rows() - coulomb::pair_overlap_features).setZero();
      coulomb::train::Evaluator<float> evaluator(
          {.batch_size = 128, .metrics = {}, .collective = collective});
      result.overlap_regression = evaluator.evaluate(alone, valid_ids).metrics;
    } else {
      const coulomb::PairOverlapMoments moments = coulomb::pair_overlap_moments(train_ids);
      model.set_overlap_standardization(moments.mean, moments.sd);
    }
  }
  result.parameters = model.num_parameters();
  // The model file's size is known now: check its directory and free space before the training.
  if (root && !cfg.model_path.empty())
    coulomb::check_output_path(cfg.model_path, "--model",
                               static_cast<std::uintmax_t>(result.parameters) * sizeof(float) +
                                   static_cast<std::uintmax_t>(vocab.size()) * 32 + 65536);

  // ---- Phase A
  const bool learned =
      cfg.kernel == "learned" && mc.attention == coulomb::nn::AttentionKind::linear;
  coulomb::train::PhaseBOptions b;
  b.epochs = cfg.epochs;
  b.batch_size = cfg.batch_size;
  b.schedule.learning_rate = cfg.learning_rate;
  b.optimizer.weight_decay = cfg.weight_decay;
  b.schedule.warmup_fraction = cfg.warmup_fraction;
  b.clip_norm = cfg.clip_norm;
  b.early_stopping.patience = cfg.patience;
  for (const auto m :
       {coulomb::train::ValidationMetric::accuracy, coulomb::train::ValidationMetric::mcc,
        coulomb::train::ValidationMetric::f1, coulomb::train::ValidationMetric::log_loss})
    if (cfg.select == coulomb::train::to_string(m)) b.early_stopping.metric = m;
  b.seed = phase_b_seed;
  b.collective = collective;
  if (!cfg.checkpoint_prefix.empty()) {
    b.checkpoint.path = cfg.checkpoint_prefix + ".phase_b.ckpt";
    b.checkpoint.every_steps = cfg.checkpoint_every;
    b.checkpoint.resume = cfg.resume;
    b.checkpoint.observer = hooks.checkpoint_observer;
  }
  if (learned) {
    coulomb::train::PhaseAOptions a;
    a.representation = coulomb::train::phase_a_representation_from_string(cfg.representation);
    a.num_sequences = cfg.phase_a_sequences;
    a.warmup.steps = cfg.phase_a_warmup_steps;
    a.warmup.training = b;
    a.warmup.training.seed = phase_a_seed ^ 0x5851F42D4C957F2DULL;
    a.warmup.training.checkpoint = {};
    if (!cfg.checkpoint_prefix.empty()) {
      a.checkpoint.path = cfg.checkpoint_prefix + ".phase_a.ckpt";
      a.checkpoint.every_steps = cfg.checkpoint_every;
      a.checkpoint.resume = cfg.resume;
      a.checkpoint.observer = hooks.checkpoint_observer;
    }
    a.langevin.max_iterations = cfg.phase_a_steps;
    a.langevin.beta = cfg.phase_a_beta;
    a.schedule.step_size = cfg.phase_a_step_size;
    a.repulsion = cfg.phase_a_repulsion;
    a.riesz.s = cfg.phase_a_riesz_s;
    a.riesz.softening = cfg.phase_a_softening;
    a.projection.radius = cfg.phase_a_radius;
    a.projection.radius_factor = cfg.phase_a_radius_factor;
    a.seed = phase_a_seed;
    a.collective = collective;
    const std::unique_ptr<coulomb::train::ProgressReporter> progress =
        make_progress("phase A", "steps");
    a.progress = progress.get();
    const auto phase_a_start = std::chrono::steady_clock::now();
    result.phase_a = coulomb::train::run_phase_a(model, train_ids, a);
    // After a resume the report counts the earlier sessions too; the total must as well.
    earlier_seconds +=
        result.phase_a->seconds -
        std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_a_start).count();
    result.phase_a_seconds = result.phase_a->seconds;
    std::ostringstream os;
    os << "phase A (" << cfg.representation << "): H " << result.phase_a->energy_before << " -> "
       << result.phase_a->energy_after << " in " << result.phase_a_seconds << " s";
    for (const auto& r : result.phase_a->omegas)
      os << "; Omega " << r.omega << " alignment " << r.normalized_alignment_before << " -> "
         << r.normalized_alignment_after << ", change " << r.relative_change;
    note(os.str());
  }

  // ---- Phase B
  {
    const std::unique_ptr<coulomb::train::ProgressReporter> progress =
        make_progress("phase B", "tokens");
    b.progress = progress.get();
    b.validation_name = "development";
    const auto phase_b_start = std::chrono::steady_clock::now();
    result.phase_b = coulomb::train::run_phase_b(model, train_ids, dev_ids, b);
    earlier_seconds +=
        result.phase_b.seconds -
        std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_b_start).count();
    result.phase_b_seconds = result.phase_b.seconds;
    if (result.phase_b.best_epoch >= 0)
      result.dev_accuracy =
          result.phase_b.epochs[static_cast<std::size_t>(result.phase_b.best_epoch)]
              .validation_accuracy;
  }

  // ---- decision threshold (binary tasks, with --tune-threshold): the threshold t on the
  // probability of class 1 that maximizes the development accuracy (ties: the one nearest 0.5),
  // folded into the classifier's bias so that argmax predicts class 1 exactly when p_1 > t (and
  // the saved model predicts the same). Chosen on the development set only.
  if (cfg.tune_threshold && mc.num_classes == 2) {
    coulomb::train::Evaluator<float> dev_eval(
        {.batch_size = 128, .metrics = {}, .collective = collective});
    const coulomb::Matrix<float> dev_probs = dev_eval.probabilities(model, dev_ids);
    std::vector<std::pair<double, int>> scored;
    for (Index i = 0; i < dev_probs.rows(); ++i)
      scored.emplace_back(static_cast<double>(dev_probs(i, 1)),
                          dev_ids.labels[static_cast<std::size_t>(i)]);
    std::sort(scored.begin(), scored.end());
    // Threshold below every p_1: everything is class 1; moving it past scored[k] makes that
    // example class 0.
    Index correct = 0;
    for (const auto& e : scored) correct += e.second == 1 ? 1 : 0;
    Index best_correct = -1;
    double best_t = 0.5;
    auto consider = [&](double t, Index c) {
      if (c > best_correct || (c == best_correct && std::abs(t - 0.5) < std::abs(best_t - 0.5))) {
        best_correct = c;
        best_t = t;
      }
    };
    const std::size_t n = scored.size();
    for (std::size_t k = 0; k <= n; ++k) {
      if (k > 0) correct += scored[k - 1].second == 0 ? 1 : -1;
      if (k > 0 && k < n && scored[k].first == scored[k - 1].first) continue;
      const double lo = k == 0 ? 0.0 : scored[k - 1].first;
      const double hi = k == n ? 1.0 : scored[k].first;
      consider(lo <= 0.5 && 0.5 < hi ? 0.5 : 0.5 * (lo + hi), correct);
    }
    best_t = std::clamp(best_t, 1e-4, 1.0 - 1e-4);
    result.threshold = best_t;
    for (auto& p : model.parameters())
      if (p.name == "classifier.bias")
        (*p.value)(1, 0) -= static_cast<float>(std::log(best_t / (1.0 - best_t)));
    std::ostringstream os;
    os << "decision threshold on p(class 1): " << best_t << " (development accuracy "
       << static_cast<double>(best_correct) / static_cast<double>(n) << ")";
    note(os.str());
  }

  // ---- evaluation on the validation split (reported, never used for a choice), in the
  // requested precision; bf16 falls back to fp32 with a note where it cannot run
  const coulomb::PrecisionChoice precision =
      model.set_inference_precision(coulomb::parse_inference_precision(cfg.precision));
  if (!precision.notice.empty()) note(precision.notice);
  result.inference_precision = precision.used;
  coulomb::train::Evaluator<float> evaluator(
      {.batch_size = 128, .metrics = {}, .collective = collective});
  const auto t0 = std::chrono::steady_clock::now();
  const coulomb::Matrix<float> probs = evaluator.probabilities(model, valid_ids);
  const double infer = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.inference_ms_per_1000 =
      1e6 * infer / static_cast<double>(std::max<Index>(valid_ids.size(), 1));
  const std::span<const int> labels(valid_ids.labels);
  result.rows.push_back({"validation", coulomb::evaluate_classification(probs, labels)});
  result.reliability =
      coulomb::reliability_diagram(probs, labels, coulomb::default_calibration_bins);
  std::uint64_t stream = 0;
  for (const auto kind : {coulomb::PerturbationKind::drop, coulomb::PerturbationKind::swap}) {
    for (const double rate : cfg.perturbation_rates) {
      coulomb::Rng rng = coulomb::Rng(perturb_seed).split(stream++);
      const coulomb::EncodedDataset perturbed =
          coulomb::perturb_dataset(valid_ids, coulomb::Perturbation{kind, rate}, rng);
      const auto e = evaluator.evaluate(model, perturbed);
      std::ostringstream name;
      name << (kind == coulomb::PerturbationKind::drop ? "drop " : "swap ")
           << std::llround(rate * 100) << "%";
      result.rows.push_back({name.str(), e.metrics});
    }
  }
  model.set_inference_precision(coulomb::InferencePrecision::fp32);
  if (root && !cfg.model_path.empty()) {
    coulomb::io::TextModelMetadata meta;
    meta["dataset"] = result.config.dataset;
    meta["kernel"] = cfg.kernel;
    meta["seed"] = std::to_string(cfg.seed);
    if (result.phase_a)
      meta["phase_a_representation"] = coulomb::train::to_string(result.phase_a->representation);
    // A failing save (a disk that filled up during the training) is reported by the tool after
    // the results, which are not lost; the previous file stays as it was (atomic write).
    try {
      coulomb::io::save_text_model(cfg.model_path, model, vocab, encoder.options(), meta);
      note("model saved to " + cfg.model_path);
    } catch (const coulomb::io_error& e) {
      result.model_error = e.what();
    }
  }

  result.seconds = earlier_seconds +
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

#ifdef COULOMB_EXAMPLES_TEXT_EXPERIMENT_INSTANCES
// The instantiations, one per registered map, are compiled once, in
// examples/common/text_experiment_instances.cpp (the static library coulomb_text_experiment, which
// defines this macro for the programs linking it): they cost minutes of optimized compilation, and
// two programs use them.
extern template TextExperimentResult run_text_experiment_with<coulomb::FavorPlus<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
extern template TextExperimentResult run_text_experiment_with<coulomb::Porf<float, coulomb::Exp>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
extern template TextExperimentResult
run_text_experiment_with<coulomb::Porf<float, coulomb::Softplus>>(const TextExperimentConfig&,
                                                                  const TextExperimentData&,
                                                                  const TextExperimentHooks&);
extern template TextExperimentResult run_text_experiment_with<coulomb::Porf<float, coulomb::Relu>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
extern template TextExperimentResult run_text_experiment_with<coulomb::Rff<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
extern template TextExperimentResult run_text_experiment_with<coulomb::RffCosSin<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
extern template TextExperimentResult run_text_experiment_with<coulomb::SoftmaxFeat<float>>(
    const TextExperimentConfig&, const TextExperimentData&, const TextExperimentHooks&);
#endif

/// Runs one cell on `data` (load_text_experiment_data of cfg.data_dir), choosing the feature map
/// type from cfg.feature_map through io::dispatch_feature_map (softmax attention uses no map;
/// FAVOR+ stands in as the type). Throws TextExperimentError for a setting that cannot work
/// (before any training) and invalid_argument for an unknown map name.
inline TextExperimentResult run_text_experiment(const TextExperimentConfig& cfg,
                                                const TextExperimentData& data,
                                                const TextExperimentHooks& hooks = {}) {
  if (cfg.attention == "softmax")
    return run_text_experiment_with<coulomb::FavorPlus<float>>(cfg, data, hooks);
  return coulomb::io::dispatch_feature_map<float>(cfg.feature_map, [&](auto tag) {
    using Map = typename decltype(tag)::type;
    return run_text_experiment_with<Map>(cfg, data, hooks);
  });
}

/// Reads cfg.data_dir (load_text_experiment_data), then runs one cell on it.
inline TextExperimentResult run_text_experiment(const TextExperimentConfig& cfg,
                                                const TextExperimentHooks& hooks = {}) {
  return run_text_experiment(cfg, load_text_experiment_data(cfg.data_dir, cfg.task), hooks);
}

/// The name of the model variant: "softmax", "FAVOR+" or "Kernel-FAVOR+", with " Q=K".
inline std::string variant_name(const TextExperimentConfig& cfg) {
  std::string name;
  if (cfg.attention == "softmax") {
    name = "softmax";
  } else {
    const auto record = coulomb::find_feature_map(cfg.feature_map);
    const std::string_view map = !record                 ? std::string_view(cfg.feature_map)
                                 : record->label.empty() ? record->key
                                                         : record->label;
    name = (cfg.kernel == "learned" ? "Kernel-" : "") + std::string(map);
  }
  if (cfg.tied_qk) name += " Q=K";
  return name;
}

/// Prints the metric table and the timings.
inline void print_metric_table(std::ostream& out, const TextExperimentResult& r) {
  out << r.config.dataset << ", " << variant_name(r.config) << ", seed " << r.config.seed << "\n";
  out << std::left << std::setw(12) << "split" << std::right;
  for (const char* h : {"accuracy", "MCC", "F1", "ECE", "LogLoss", "Brier"})
    out << std::setw(10) << h;
  out << "\n" << std::fixed << std::setprecision(4);
  for (const auto& row : r.rows) {
    const auto& m = row.metrics;
    out << std::left << std::setw(12) << row.name << std::right << std::setw(10) << m.accuracy
        << std::setw(10) << m.mcc << std::setw(10) << m.f1 << std::setw(10) << m.ece
        << std::setw(10) << m.log_loss << std::setw(10) << m.brier << "\n";
  }
  out << std::setprecision(2);
  out << "development accuracy (best epoch " << r.phase_b.best_epoch + 1
      << "): " << std::setprecision(4) << r.dev_accuracy << std::setprecision(2) << "\n";
  if (r.overlap_regression)
    out << "the overlap regression alone (validation): accuracy " << std::setprecision(4)
        << r.overlap_regression->accuracy << ", MCC " << r.overlap_regression->mcc << ", F1 "
        << r.overlap_regression->f1 << std::setprecision(2) << "\n";
  if (r.config.tune_threshold)
    out << "decision threshold on p(class 1), chosen on the development set: "
        << std::setprecision(4) << r.threshold << std::setprecision(2) << "\n";
  out << "phase A " << r.phase_a_seconds << " s, phase B " << r.phase_b_seconds << " s ("
      << r.phase_b.steps << " steps, " << std::setprecision(0) << r.phase_b.tokens_per_second()
      << " tokens/s";
  if (r.processes > 1) out << ", " << r.processes << " processes";
  out << "), inference " << std::setprecision(1) << r.inference_ms_per_1000
      << " ms per 1,000 sequences"
      << (r.inference_precision == coulomb::InferencePrecision::bf16 ? " (bf16)" : "") << "\n";
  out.unsetf(std::ios::floatfield);
  out << std::setprecision(6);
}

/// The JSON report of a run (nlohmann-json, keys in this order). `command` is recorded.
inline std::string json_report(const TextExperimentResult& r, const std::string& command) {
  using Json = nlohmann::ordered_json;
  const auto& c = r.config;
  Json config = {{"feature_map", c.feature_map},
                 {"kernel", c.kernel},
                 {"attention", c.attention},
                 {"tied_qk", c.tied_qk},
                 {"shared_omega", c.shared_omega},
                 {"seed", c.seed},  // an exact integer: a double would round seeds above 2^53
                 {"d_model", c.d_model},
                 {"heads", c.heads},
                 {"layers", c.layers},
                 {"d_ff", c.d_ff},
                 {"features", c.features},
                 {"pooling", c.pooling},
                 {"pair_hidden", c.pair_hidden},
                 {"freeze_embeddings", c.freeze_embeddings},
                 {"pair_alignment", c.pair_alignment},
                 {"pair_overlap", c.pair_overlap},
                 {"overlap_warm_start", c.overlap_warm_start},
                 {"swap_pairs", c.swap_pairs},
                 {"tune_threshold", c.tune_threshold},
                 {"max_length", c.max_length},
                 {"batch_size", c.batch_size},
                 {"epochs", c.epochs},
                 {"patience", c.patience},
                 {"select", c.select},
                 {"learning_rate", json_number(c.learning_rate)},
                 {"warmup_fraction", json_number(c.warmup_fraction)},
                 {"weight_decay", json_number(c.weight_decay)},
                 {"dropout", json_number(c.dropout)},
                 {"min_frequency", c.min_frequency},
                 {"dev_fraction", json_number(c.dev_fraction)},
                 {"threads", c.threads},
                 {"phase_a_representation", c.representation},
                 {"phase_a_steps", c.phase_a_steps},
                 {"phase_a_step_size", json_number(c.phase_a_step_size)},
                 {"phase_a_beta", json_number(c.phase_a_beta)},
                 {"phase_a_repulsion", json_number(c.phase_a_repulsion)},
                 {"phase_a_radius_factor", json_number(c.phase_a_radius_factor)}};
  Json metrics = Json::object();
  for (const auto& row : r.rows) metrics[row.name] = json_metrics(row.metrics);
  Json phase_a = nullptr;
  if (r.phase_a) {
    const auto& a = *r.phase_a;
    Json omegas = Json::array();
    for (const auto& o : a.omegas)
      omegas.push_back({{"samples", o.samples},
                        {"radius", json_number(o.radius)},
                        {"normalized_alignment_before", json_number(o.normalized_alignment_before)},
                        {"normalized_alignment_after", json_number(o.normalized_alignment_after)},
                        {"relative_change", json_number(o.relative_change)}});
    phase_a = {{"representation", coulomb::train::to_string(a.representation)},
               {"sequences", a.sequences},
               {"warmup_steps", a.warmup_steps},
               {"langevin_steps", a.langevin_steps},
               {"energy_before", json_number(a.energy_before)},
               {"energy_after", json_number(a.energy_after)},
               {"alignment_before", json_number(a.alignment_before)},
               {"alignment_after", json_number(a.alignment_after)},
               {"repulsion_before", json_number(a.repulsion_before)},
               {"repulsion_after", json_number(a.repulsion_after)},
               {"omegas", omegas}};
  }
  Json epochs = Json::array();
  for (const auto& e : r.phase_b.epochs)
    epochs.push_back({{"epoch", e.epoch},
                      {"train_loss", json_number(e.train_loss)},
                      {"development_accuracy", json_number(e.validation_accuracy)},
                      {"development_loss", json_number(e.validation_loss)},
                      {"tokens_per_second", json_number(e.tokens_per_second)},
                      {"seconds", json_number(e.seconds)}});
  Json reliability = Json::array();
  for (const auto& bin : r.reliability)
    reliability.push_back({{"lower", json_number(bin.lower)},
                           {"upper", json_number(bin.upper)},
                           {"count", bin.count},
                           {"confidence", json_number(bin.mean_confidence)},
                           {"accuracy", json_number(bin.accuracy)}});
  Json report = {{"command", command},
                 {"dataset", c.dataset},
                 {"columns", r.columns},
                 {"variant", variant_name(c)},
                 {"config", config},
                 {"data",
                  {{"vocabulary", r.vocab_size},
                   {"train", r.train_size},
                   {"development", r.dev_size},
                   {"validation", r.validation_size},
                   {"train_truncated", r.train_stats.truncated_sequences},
                   {"validation_truncated", r.validation_stats.truncated_sequences},
                   {"validation_unknown_rate", json_number(r.validation_stats.unknown_rate())}}},
                 {"parameters", r.parameters},
                 {"metrics", metrics},
                 {"timing",
                  {{"phase_a_seconds", json_number(r.phase_a_seconds)},
                   {"phase_b_seconds", json_number(r.phase_b_seconds)},
                   {"phase_b_tokens_per_second", json_number(r.phase_b.tokens_per_second())},
                   {"inference_ms_per_1000_sequences", json_number(r.inference_ms_per_1000)},
                   {"inference_precision", coulomb::to_string(r.inference_precision)},
                   {"total_seconds", json_number(r.seconds)}}},
                 {"phase_a", phase_a},
                 {"phase_b",
                  {{"best_epoch", r.phase_b.best_epoch},
                   {"development_accuracy", json_number(r.dev_accuracy)},
                   {"threshold", json_number(r.threshold)},
                   {"overlap_regression",
                    r.overlap_regression ? json_metrics(*r.overlap_regression) : Json(nullptr)},
                   {"steps", r.phase_b.steps},
                   {"stopped_early", r.phase_b.stopped_early},
                   {"epochs", epochs}}},
                 {"reliability", reliability}};
  // A data-parallel run: the timings are those of P processes (a one-process report is as before).
  if (r.processes > 1) report["timing"]["processes"] = r.processes;
  // Invalid UTF-8 in a path or a name is replaced, never an exception after the training.
  return report.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

/// The reliability diagram as CSV: lower,upper,count,mean_confidence,accuracy.
inline std::string reliability_csv(const TextExperimentResult& r) {
  std::ostringstream os;
  os << "lower,upper,count,mean_confidence,accuracy\n" << std::setprecision(10);
  for (const auto& b : r.reliability)
    os << b.lower << "," << b.upper << "," << b.count << "," << b.mean_confidence << ","
       << b.accuracy << "\n";
  return os.str();
}

/// Draws the reliability diagram `png` from the CSV `csv` (common/figure.hpp); the title is
/// passed to gnuplot as an argument, so any dataset name is safe. Returns whether it was drawn.
inline bool plot_reliability(Figures& figures, const std::filesystem::path& csv,
                             const std::filesystem::path& png, const std::string& title) {
  std::ostringstream g;
  g << figures.terminal(640, 560) << "set output ARG1\n"
    << "set datafile separator ','\n"
    << "set title ARG3 noenhanced\n"
    << "set xlabel 'confidence'\nset ylabel 'accuracy'\nset xrange [0:1]\nset yrange [0:1]\n"
    << "set key top left\nset grid\nset style fill solid 0.6 border -1\n"
    << "plot ARG2 skip 1 using (($1+$2)/2):($3 > 0 ? $5 : 1/0):($2-$1) "
    << "with boxes lc rgb '#1f78b4' title 'accuracy per bin', "
    << "'' skip 1 using ($3 > 0 ? $4 : 1/0):($3 > 0 ? $5 : 1/0) with points pt 7 lc rgb "
       "'#d95f02' title 'bin: (mean confidence, accuracy)', "
    << "x with lines dt 2 lc rgb '#444444' title 'perfect calibration'\n";
  return figures.draw(png, g.str(), {csv.string(), title});
}

}  // namespace coulomb_examples
