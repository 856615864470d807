// SPDX-License-Identifier: MIT
// sequence_tasks: trains the sequence model (nn/sequence_model.hpp) on the generated tasks of
// issue 22 for one variant and one seed, and appends one row per task to <out>/runs.csv:
//   - ListOps, reduced protocol (data/listops.hpp defaults: 10,000 / 1,000 / 1,000 sequences of
//     100–500 tokens): the classification head (mean pooling), accuracy over the 10 values;
//   - MQAR (data/mqar.hpp, one cell of Zoology's grid: --mqar-length, --mqar-pairs): the causal
//     language-model head, trained and scored at the query positions only.
// Each task trains with AdamW (warm-up, cosine decay, gradient clipping), keeps the parameters
// of the epoch with the best development accuracy, and reports the test accuracy there. A
// restart with the same --out skips the (task, cell, variant, seed) rows already in runs.csv,
// so a grid driven by a script resumes. Kernels: vanilla (Ω drawn once and frozen) or learned
// (Phase A of train/sequence_phase_a.hpp on the representations chosen by --phase-a, from the
// model at initialization or, with --phase-a-after E, after E epochs of training with the drawn
// Ω; then Ω frozen; issue 22, item 4). A runs.csv of the earlier layout
// (without the phase_a column) is read as vanilla rows and rewritten in the new layout.
//
// Built with MPI (common/processes.hpp), it runs as P data-parallel processes under mpirun
// (docs/distributed.md, "sequence_tasks under mpirun"): every process generates the same splits
// and model from the seeds and walks the same global batches; process r trains on its shard
// shard_range(B, r, P) of each, the gradients are summed in one fused buffer per step
// (train/gradient_sum.hpp) and clipped there, and every process takes the same AdamW step. The
// development and test accuracies are sharded by evaluation batch, their counts summed exactly.
// Phase A (learned kernel) runs on every process alike (the same seed, the same Ω). Rank 0
// alone prints and writes runs.csv.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <coulomb/core/random.hpp>
#include <coulomb/data/listops.hpp>
#include <coulomb/data/mqar.hpp>
#include <coulomb/features/registry.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/sequence_batch.hpp>
#include <coulomb/nn/sequence_loss.hpp>
#include <coulomb/nn/sequence_model.hpp>
#include <coulomb/train/adamw.hpp>
#include <coulomb/train/collective.hpp>
#include <coulomb/train/gradient_sum.hpp>
#include <coulomb/train/gradients.hpp>
#include <coulomb/train/parameter_snapshot.hpp>
#include <coulomb/train/schedule.hpp>
#include <coulomb/train/sequence_phase_a.hpp>

#include "common/cli.hpp"
#include "common/memory.hpp"
#include "common/paper_stats.hpp"
#include "common/processes.hpp"

namespace {

namespace fs = std::filesystem;
namespace nn = coulomb::nn;
namespace paper = coulomb_examples::paper;
namespace train = coulomb::train;
using coulomb::Index;
using Matrix = coulomb::Matrix<float>;

/// What the command line sets.
struct Options {
  std::vector<std::string> tasks{"listops", "mqar"};
  std::string attention = "linear";  // linear | softmax
  std::string feature_map = "favor";
  std::string kernel = "vanilla";
  std::string phase_a = "pooled";  // learned kernel: the representations of Phase A
  Index phase_a_steps = 300;
  Index phase_a_sequences = 256;
  double phase_a_step_size = 1.0;
  Index phase_a_after = 0;  // epochs trained with the drawn Ω before Phase A
  Index features = 64;
  std::uint64_t seed = 1;
  std::uint64_t data_seed = 1;
  Index epochs = 10;
  Index max_steps = 0;  // 0: epochs × batches
  Index batch_size = 32;
  Index bucket_batches = 0;  // length bucketing: windows of this many batches (0: off)
  double learning_rate = 1e-3;
  double warmup_fraction = 0.05;
  double weight_decay = 0.01;
  double clip_norm = 1.0;
  Index d_model = 64, num_heads = 2, d_ff = 128, num_layers = 2;
  double dropout = 0.1;
  std::string positions = "rotary";
  Index key_conv = 0;
  int threads = 1;
  Index listops_train = 10'000, listops_dev = 1'000, listops_test = 1'000;
  Index listops_min_length = 100, listops_max_length = 500;
  Index mqar_length = 64, mqar_pairs = 4, mqar_vocabulary = 8'192;
  Index mqar_train = 20'000, mqar_dev = 1'000, mqar_test = 3'000;
};

/// One generated task with the model head it needs.
struct Task {
  std::string name, cell;
  coulomb::data::SequenceSplits splits;
  nn::SequenceHead head = nn::SequenceHead::classification;
  Index num_outputs = 2;
  Index vocabulary = 0;
  Index max_length = 0;
};

/// What one training run gives.
struct RunResult {
  double test_accuracy = 0, dev_accuracy = 0;
  Index best_epoch = 0, epochs = 0, steps = 0, parameters = 0;
  double train_seconds = 0, tokens_per_second = 0, eval_seconds = 0;
  // Phase A (learned kernel; NaN for vanilla): wall time and the normalized alignment A ∈ [0, 1]
  // of Cortes et al. at the initial and the learned Ω, averaged over the Ω of the model.
  double phase_a_seconds = std::numeric_limits<double>::quiet_NaN();
  double alignment_before = std::numeric_limits<double>::quiet_NaN();
  double alignment_after = std::numeric_limits<double>::quiet_NaN();
};

const std::vector<std::string> key_names{"task",   "cell",    "attention", "feature_map",
                                         "kernel", "phase_a", "features",  "seed"};
const std::vector<std::string> value_names{
    "test_accuracy", "dev_accuracy", "best_epoch",       "epochs",
    "steps",         "parameters",   "train_s",          "tokens_per_s",
    "eval_s",        "phase_a_s",    "alignment_before", "alignment_after"};
// The layout before Phase A existed (no phase_a key, no Phase A values): read as vanilla rows.
const std::size_t phase_a_key = static_cast<std::size_t>(
    std::find(key_names.begin(), key_names.end(), "phase_a") - key_names.begin());
const std::size_t old_value_count = 9;  // test_accuracy … eval_s

/// Reads `csv` into `table`: in this layout, or in the layout without Phase A (its rows get
/// phase_a = none and NaN Phase A values; the next append rewrites the file in this layout).
std::size_t load_runs(paper::RunTable& table, const std::string& csv) {
  std::ifstream in(csv);
  std::string first;
  if (!in || !std::getline(in, first)) return table.load(csv);
  std::vector<std::string> old_keys = key_names;
  old_keys.erase(old_keys.begin() + static_cast<std::ptrdiff_t>(phase_a_key));
  const std::vector<std::string> old_values(
      value_names.begin(), value_names.begin() + static_cast<std::ptrdiff_t>(old_value_count));
  std::string joined;
  for (const std::string& name : old_keys) joined += (joined.empty() ? "" : ",") + name;
  for (const std::string& name : old_values) joined += "," + name;
  if (first != joined) return table.load(csv);
  paper::RunTable old(old_keys, old_values);
  const std::size_t count = old.load(csv);
  for (paper::RunRow row : old.rows()) {
    row.keys.insert(row.keys.begin() + static_cast<std::ptrdiff_t>(phase_a_key), "none");
    row.values.resize(value_names.size(), std::numeric_limits<double>::quiet_NaN());
    table.add(std::move(row));
  }
  return count;
}

/// The cell of a task (its size parameters), a key of runs.csv.
/// Length bucketing changes the batches, so a bucketed run is a cell of its own.
std::string cell_of(const std::string& name, const Options& o) {
  const std::string bucket =
      o.bucket_batches > 0 ? "-bucket" + std::to_string(o.bucket_batches) : "";
  if (name == "listops")
    return "len" + std::to_string(o.listops_min_length) + "-" +
           std::to_string(o.listops_max_length) + bucket;
  return "L" + std::to_string(o.mqar_length) + "-P" + std::to_string(o.mqar_pairs) + "-V" +
         std::to_string(o.mqar_vocabulary) + bucket;
}

Task make_task(const std::string& name, const Options& o) {
  Task t;
  t.name = name;
  t.cell = cell_of(name, o);
  if (name == "listops") {
    coulomb::data::ListOpsOptions lo;
    lo.num_train = o.listops_train;
    lo.num_dev = o.listops_dev;
    lo.num_test = o.listops_test;
    lo.min_length = o.listops_min_length;
    lo.max_length = o.listops_max_length;
    t.splits = coulomb::data::generate_listops(lo, o.data_seed);
    t.head = nn::SequenceHead::classification;
    t.num_outputs = t.splits.train.num_classes;
  } else {
    coulomb::data::MqarOptions mo =
        coulomb::data::MqarOptions::zoology(o.mqar_length, o.mqar_pairs);
    mo.vocabulary_size = o.mqar_vocabulary;
    mo.num_train = o.mqar_train;
    mo.num_dev = o.mqar_dev;
    mo.num_test = o.mqar_test;
    t.splits = coulomb::data::generate_mqar(mo, o.data_seed);
    t.head = nn::SequenceHead::causal_lm;
    t.num_outputs = 0;  // the vocabulary: the answers are tokens
  }
  t.vocabulary = t.splits.train.vocabulary_size;
  t.max_length = std::max(
      {t.splits.train.max_length(), t.splits.dev.max_length(), t.splits.test.max_length()});
  return t;
}

nn::SequenceModelConfig model_config(const Options& o, const Task& t) {
  nn::SequenceModelConfig c;
  c.vocab_size = t.vocabulary;
  c.max_length = t.max_length;
  c.d_model = o.d_model;
  c.num_heads = o.num_heads;
  c.d_ff = o.d_ff;
  c.num_layers = o.num_layers;
  c.head = t.head;
  c.num_outputs = t.num_outputs;
  c.positions = o.positions == "learned"      ? nn::PositionKind::learned
                : o.positions == "sinusoidal" ? nn::PositionKind::sinusoidal
                                              : nn::PositionKind::rotary;
  c.key_conv = o.key_conv;
  c.dropout = o.dropout;
  c.attention = o.attention == "softmax" ? nn::AttentionKind::softmax : nn::AttentionKind::linear;
  c.num_features = o.features;
  c.num_threads = o.threads;
  return c;
}

/// Logits of a batch: per sequence (classification) or at the rows with a target.
template <typename Model>
void batch_logits(Model& model, const nn::SequenceBatch& batch, Matrix& logits, bool training,
                  coulomb::Rng& rng) {
  if (model.config().head == nn::SequenceHead::classification)
    model.forward(batch.ids, batch.mask, logits, training, rng);
  else
    model.forward_rows(batch.ids, batch.mask, batch.rows, logits, training, rng);
}

/// The logits of batch_logits for evaluation, by inference (SequenceModel::infer, the same
/// logits as the evaluation forward).
template <typename Model>
void infer_batch_logits(Model& model, const nn::SequenceBatch& batch, Matrix& logits) {
  if (model.config().head == nn::SequenceHead::classification)
    model.infer(batch.ids, batch.mask, logits);
  else
    model.infer_rows(batch.ids, batch.mask, batch.rows, logits);
}

/// The targets of the logits of batch_logits.
std::span<const int> batch_targets(nn::SequenceHead head, const nn::SequenceBatch& batch) {
  return head == nn::SequenceHead::classification ? std::span<const int>(batch.labels)
                                                  : std::span<const int>(batch.targets);
}

/// Accuracy on a split: per sequence (classification) or per query position (MQAR). With P > 1
/// processes (`collective`), process r scores the batches shard_range(batches, r, P) and the
/// counts are summed: the accuracy of one process exactly.
template <typename Model>
double accuracy(Model& model, const coulomb::data::TokenSequenceDataset& split, Index batch_size,
                train::Collective* collective) {
  nn::SequenceBatch batch;
  Matrix logits;
  double correct = 0, total = 0;
  std::vector<Index> idx;
  const Index batches = (split.size() + batch_size - 1) / batch_size;
  const train::ShardRange mine = train::is_distributed(collective)
                                     ? train::shard_range(batches, collective)
                                     : train::ShardRange{0, batches};
  for (Index k = mine.begin; k < mine.end; ++k) {
    const Index first = k * batch_size;
    idx.resize(static_cast<std::size_t>(std::min(batch_size, split.size() - first)));
    std::iota(idx.begin(), idx.end(), first);
    nn::make_sequence_batch(split, idx, batch);
    infer_batch_logits(model, batch, logits);
    const auto y = batch_targets(model.config().head, batch);
    for (Index r = 0; r < logits.rows(); ++r) {
      Index best = 0;
      logits.row(r).maxCoeff(&best);
      correct += best == y[static_cast<std::size_t>(r)] ? 1 : 0;
      total += 1;
    }
  }
  if (train::is_distributed(collective)) {
    double counts[2] = {correct, total};  // integers below 2⁵³: summed exactly
    collective->sum(std::span<double>(counts));
    correct = counts[0];
    total = counts[1];
  }
  return total > 0 ? correct / total : 0.0;
}

/// The optimizer step of process r of P > 1 (see the file comment): its shard of the global
/// batch, padded to the batch's length, with its loss scaled by its share of the batch's
/// targets (so that the summed gradient is the global mean's); the gradients summed in one
/// fused buffer and clipped there; then the same AdamW step on every process. Dropout masks of
/// step t come from (seed, r, t). Non-finite logits or losses on any process make every process
/// throw the same numerical_error.
template <typename Model>
class DataParallelStep {
 public:
  DataParallelStep(Model& model, const nn::ParameterList<float>& params,
                   train::Collective& collective, std::uint64_t seed)
      : model_(&model),
        params_(params),
        collective_(&collective),
        sum_(params, collective),
        rank_rng_(
            coulomb::Rng(seed).split(1).split(static_cast<std::uint64_t>(collective.rank()))) {}

  /// Step `step` (0-based) on the global batch `batch` of the sequences `idx` of `data`; returns
  /// the global batch's loss.
  double operator()(const coulomb::data::TokenSequenceDataset& data, std::span<const Index> idx,
                    const nn::SequenceBatch& batch, Index step, double clip_norm,
                    train::AdamW<float>& optimizer, double lr) {
    const nn::SequenceHead head = model_->config().head;
    const auto targets = static_cast<double>(batch_targets(head, batch).size());
    const train::ShardRange shard = train::shard_range(batch.size(), collective_);
    model_->zero_grad();
    double loss_share = 0.0;
    bool failed = false;
    if (shard.size() > 0) {
      nn::make_sequence_batch(data,
                              idx.subspan(static_cast<std::size_t>(shard.begin),
                                          static_cast<std::size_t>(shard.size())),
                              shard_, batch.length());
      const auto y = batch_targets(head, shard_);
      coulomb::Rng rank_rng = rank_rng_;  // the masks of step t: from (seed, rank, t) alone
      coulomb::Rng rng = rank_rng.split(static_cast<std::uint64_t>(step));
      if (!y.empty()) {
        const double share = static_cast<double>(y.size()) / targets;
        try {
          const double loss =
              nn::sequence_loss_backward(*model_, shard_, share, true, rng, logits_, dlogits_);
          failed = !std::isfinite(loss);
          if (!failed) loss_share = share * loss;
        } catch (const coulomb::invalid_argument& e) {
          // The attention refuses non-finite inputs: a divergence, reported on every process.
          if (std::string(e.what()).find("non-finite") == std::string::npos) throw;
          failed = true;
        }
      }
    }  // a process without a shard (or failed) sends zero gradients and its flag
    const auto r = sum_.sum(std::span<const coulomb::TokenId>(
                                batch.ids.data(), static_cast<std::size_t>(batch.ids.size())),
                            loss_share, failed, clip_norm);
    if (r.failures > 0)
      throw coulomb::numerical_error(
          "step " + std::to_string(step + 1) + ": the logits or the loss are not finite on " +
          std::to_string(r.failures) + " of " + std::to_string(collective_->size()) + " processes");
    // A norm that is not finite: clip_gradient_norm names the parameter.
    if (!r.clipped) train::clip_gradient_norm(params_, clip_norm);
    optimizer.step(params_, lr);
    return r.loss;
  }

 private:
  Model* model_;
  nn::ParameterList<float> params_;
  train::Collective* collective_;
  train::GradientSum<float> sum_;
  coulomb::Rng rank_rng_;  // split(t) gives this process's masks of step t
  nn::SequenceBatch shard_;
  Matrix logits_, dlogits_;
};

template <typename Map>
RunResult train_task(const Options& o, const Task& task, const coulomb_examples::CommandLine& cli,
                     train::Collective* collective) {
  const bool distributed = train::is_distributed(collective);
  const bool root = collective == nullptr || collective->rank() == 0;
  using Clock = std::chrono::steady_clock;
  nn::SequenceModel<Map> model(model_config(o, task), o.seed);
  RunResult result;
  // Phase A on the representations of the model as it is (at initialization, or after
  // --phase-a-after epochs), then Ω frozen. Ω is not a trained parameter in either case, so the
  // optimizer's state stays valid across the change.
  auto phase_a = [&] {
    coulomb::train::SequencePhaseAOptions pa;
    pa.targets = coulomb::train::sequence_phase_a_targets_from_string(o.phase_a);
    pa.phase_a.num_sequences = o.phase_a_sequences;
    pa.phase_a.langevin.max_iterations = o.phase_a_steps;
    pa.phase_a.schedule.step_size = o.phase_a_step_size;
    pa.phase_a.seed = o.seed;
    const auto report = coulomb::train::run_sequence_phase_a(model, task.splits.train, pa);
    result.phase_a_seconds = report.phase_a.seconds;
    double before = 0, after = 0;
    for (const auto& r : report.phase_a.omegas) {
      before += r.normalized_alignment_before;
      after += r.normalized_alignment_after;
    }
    const auto K = static_cast<double>(report.phase_a.omegas.size());
    result.alignment_before = before / K;
    result.alignment_after = after / K;
    if (!cli.quiet())
      std::cerr << "sequence_tasks: Phase A (" << o.phase_a << ", "
                << report.phase_a.omegas.front().samples << " rows per Omega): alignment "
                << result.alignment_before << " -> " << result.alignment_after << ", "
                << result.phase_a_seconds << " s\n";
  };
  if (o.kernel == "learned" && o.phase_a_after == 0) phase_a();
  auto params = model.parameters();
  result.parameters = model.num_parameters();
  const auto& train = task.splits.train;
  const Index batches = (train.size() + o.batch_size - 1) / o.batch_size;
  const Index total =
      o.max_steps > 0 ? std::min(o.max_steps, o.epochs * batches) : o.epochs * batches;
  const auto warmup =
      static_cast<Index>(std::lround(o.warmup_fraction * static_cast<double>(total)));
  const auto schedule = coulomb::train::LearningRateSchedule::warmup_cosine(
      o.learning_rate, std::min(warmup, total), std::max<Index>(total, 1));
  schedule.validate();
  // Phase A runs at the start of epoch --phase-a-after only if --max-steps leaves that epoch any
  // step: refused before training, not after it.
  if (o.kernel == "learned" && o.phase_a_after > 0 && total <= o.phase_a_after * batches)
    throw std::invalid_argument("--max-steps " + std::to_string(o.max_steps) +
                                " ends the training before Phase A (--phase-a-after " +
                                std::to_string(o.phase_a_after) + " epochs of " +
                                std::to_string(batches) + " steps)");
  coulomb::train::AdamWOptions adam;
  adam.weight_decay = o.weight_decay;
  coulomb::train::AdamW<float> optimizer(adam);
  coulomb::train::ParameterSnapshot<float> best;
  coulomb::train::ProgressOptions po;
  po.label = task.name + " " + task.cell;
  po.unit = "tokens";
  const auto progress = root ? cli.make_progress(total, po) : nullptr;

  coulomb::Rng dropout_rng = coulomb::Rng(o.seed).split(1);
  std::optional<DataParallelStep<nn::SequenceModel<Map>>> parallel;
  if (distributed) parallel.emplace(model, params, *collective, o.seed);
  std::vector<Index> order(static_cast<std::size_t>(train.size()));
  nn::SequenceBatch batch;
  Matrix logits, dlogits;
  Index step = 0;
  double tokens = 0, train_seconds = 0, eval_seconds = 0;
  result.dev_accuracy = -1;
  for (Index epoch = 0; epoch < o.epochs && step < total; ++epoch) {
    if (o.kernel == "learned" && o.phase_a_after > 0 && epoch == o.phase_a_after) {
      phase_a();
      // The best epoch so far was kept with the drawn Ω: development accuracy is compared
      // from here on with the learned one only.
      result.dev_accuracy = -1;
    }
    std::iota(order.begin(), order.end(), Index(0));
    coulomb::Rng shuffle_rng =
        coulomb::Rng(o.seed).split(2).split(static_cast<std::uint64_t>(epoch));
    coulomb::shuffle(std::span<Index>(order), shuffle_rng);
    if (o.bucket_batches > 0)
      nn::group_by_length(
          std::span<Index>(order), [&](Index i) { return train.length(i); }, o.batch_size,
          o.bucket_batches, shuffle_rng);
    const auto start = Clock::now();
    for (Index first = 0; first < train.size() && step < total; first += o.batch_size) {
      const auto count = std::min(o.batch_size, train.size() - first);
      const std::span<const Index> idx(order.data() + first, static_cast<std::size_t>(count));
      nn::make_sequence_batch(train, idx, batch);
      const double lr = schedule(step);
      double loss = 0;
      if (parallel) {
        loss = (*parallel)(train, idx, batch, step, o.clip_norm, optimizer, lr);
      } else {
        model.zero_grad();
        loss = nn::sequence_loss_backward(model, batch, 1.0, true, dropout_rng, logits, dlogits);
        if (!std::isfinite(loss))
          throw coulomb::numerical_error("step " + std::to_string(step + 1) +
                                         ": the logits or the loss are not finite");
        coulomb::train::clip_gradient_norm(params, o.clip_norm);
        optimizer.step(params, lr);
      }
      ++step;
      tokens += static_cast<double>(batch.length() * batch.size());
      if (progress) progress->update(step, tokens, {{"loss", loss}, {"lr", lr}});
    }
    train_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    const auto eval_start = Clock::now();
    const double dev = accuracy(model, task.splits.dev, 64, collective);
    eval_seconds += std::chrono::duration<double>(Clock::now() - eval_start).count();
    if (dev > result.dev_accuracy) {
      result.dev_accuracy = dev;
      result.best_epoch = epoch + 1;
      best.capture(params);
    }
    result.epochs = epoch + 1;
    if (progress) {
      std::ostringstream line;
      line << "epoch " << epoch + 1 << ": dev accuracy " << 100 * dev << " % (best "
           << 100 * result.dev_accuracy << " % at epoch " << result.best_epoch << ")";
      progress->message(line.str());
    }
  }
  if (progress) progress->finish();
  best.restore(params);
  const auto eval_start = Clock::now();
  result.test_accuracy = accuracy(model, task.splits.test, 64, collective);
  eval_seconds += std::chrono::duration<double>(Clock::now() - eval_start).count();
  result.steps = step;
  result.train_seconds = train_seconds;
  result.eval_seconds = eval_seconds;
  result.tokens_per_second = train_seconds > 0 ? tokens / train_seconds : 0.0;
  return result;
}

RunResult run(const Options& o, const Task& task, const coulomb_examples::CommandLine& cli,
              train::Collective* collective) {
  if (o.attention == "softmax")
    return train_task<coulomb::FavorPlus<float>>(o, task, cli, collective);
  return coulomb::dispatch_feature_map<float>(o.feature_map, [&](auto tag) {
    return train_task<typename decltype(tag)::type>(o, task, cli, collective);
  });
}

std::vector<std::string> feature_map_keys() {
  return {coulomb::feature_map_names.begin(), coulomb::feature_map_names.end()};
}

/// What --help says about running under mpirun.
std::string processes_help() {
  if (!coulomb_examples::built_with_mpi())
    return " This build has no MPI: it runs as one process (docs/distributed.md).";
  return " It can run as P data-parallel processes with `mpirun -np P sequence_tasks ...` (on "
         "one host or across hosts; docs/distributed.md): every process generates the same "
         "data and model from the seeds, each global batch (--batch-size) is split between "
         "them and their gradients are summed, so every process keeps the same parameters; the "
         "accuracies are counted over the processes; Phase A runs on every process alike. "
         "Process 0 alone prints and writes runs.csv. --threads is per process.";
}

int run(int argc, char** argv, coulomb_examples::Processes& processes) {
  coulomb_examples::CommandLine cli(
      "sequence_tasks",
      "Trains the sequence model on ListOps (reduced protocol, classification) and MQAR (one cell "
      "of Zoology's grid, causal language model scored at the query positions) for one variant "
      "and seed, and appends one row per task to <out>/runs.csv (a restart skips the rows "
      "already there): test accuracy at the epoch of the best development accuracy, training "
      "time and tokens per second." +
          processes_help());
  Options o;
  fs::path out = "sequence_tasks_out";
  auto& app = cli.app();
  app.add_option("--task", o.tasks, "Tasks to train, in order")
      ->check(CLI::IsMember({"listops", "mqar"}))
      ->capture_default_str();
  app.add_option("--attention", o.attention, "Attention: linear (a feature map) or softmax")
      ->check(CLI::IsMember({"linear", "softmax"}))
      ->capture_default_str();
  app.add_option("--map", o.feature_map, "Feature map of linear attention")
      ->check(CLI::IsMember(feature_map_keys()))
      ->capture_default_str();
  app.add_option("--kernel", o.kernel,
                 "Kernel: vanilla (Ω drawn once from the seed and frozen) or learned (Phase A on "
                 "the model at initialization or after --phase-a-after epochs, see --phase-a, "
                 "then Ω frozen)")
      ->check(CLI::IsMember({"vanilla", "learned"}))
      ->capture_default_str();
  app.add_option("--phase-a", o.phase_a,
                 "Representations and targets of Phase A (learned kernel): pooled (mean of the "
                 "keys per sequence with its label; for MQAR the mean of the keys up to each "
                 "query with its answer) or query (the queries at the answer positions with "
                 "the answer; for ListOps at 8 evenly spaced positions with the label)")
      ->check(CLI::IsMember({"pooled", "query"}))
      ->capture_default_str();
  app.add_option("--phase-a-after", o.phase_a_after,
                 "Epochs trained with the drawn Omega before Phase A (0: Phase A on the model at "
                 "initialization); the best epoch is then chosen among the later ones, and the "
                 "phase_a column of runs.csv reads e.g. pooled+after1")
      ->check(coulomb_examples::integer_in(0, 10'000))
      ->capture_default_str();
  app.add_option("--phase-a-steps", o.phase_a_steps, "Langevin steps of Phase A per Ω")
      ->check(coulomb_examples::integer_in(0, 1'000'000))
      ->capture_default_str();
  app.add_option("--phase-a-sequences", o.phase_a_sequences,
                 "Training sequences whose representations Phase A aligns (0: all)")
      ->check(coulomb_examples::integer_in(0, 10'000'000))
      ->capture_default_str();
  app.add_option("--phase-a-step-size", o.phase_a_step_size,
                 "First step size of Phase A's cosine schedule")
      ->check(coulomb_examples::positive_number())
      ->capture_default_str();
  app.add_option("--features", o.features, "Feature budget m (particles per feature map)")
      ->check(coulomb_examples::integer_in(1, 4096))
      ->capture_default_str();
  cli.add_seed(o.seed, "Seed of the model, its Ω, dropout and the batch order");
  app.add_option("--data-seed", o.data_seed, "Seed of the generated splits")->capture_default_str();
  app.add_option("--epochs", o.epochs, "Epochs (the best by development accuracy is kept)")
      ->check(coulomb_examples::integer_in(1, 10'000))
      ->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "Stop after this many steps (0: all epochs)")
      ->check(coulomb_examples::integer_in(0, 100'000'000))
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Sequences per step")
      ->check(coulomb_examples::integer_in(1, 4096))
      ->capture_default_str();
  app.add_option("--bucket-batches", o.bucket_batches,
                 "Length bucketing: sort the shuffled order by length in windows of this many "
                 "batches and visit the batches in a random order, which cuts the padding of "
                 "ListOps (0: off; runs.csv's cell gets -bucketN)")
      ->check(coulomb_examples::integer_in(0, 1'000'000))
      ->capture_default_str();
  app.add_option("--lr", o.learning_rate, "Peak learning rate of AdamW")
      ->check(coulomb_examples::positive_number())
      ->capture_default_str();
  app.add_option("--warmup", o.warmup_fraction, "Warm-up, as a fraction of the steps")
      ->check(coulomb_examples::number_in(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "Decoupled weight decay of AdamW")
      ->check(coulomb_examples::non_negative_number())
      ->capture_default_str();
  app.add_option("--clip", o.clip_norm, "Largest global gradient norm")
      ->check(coulomb_examples::positive_number())
      ->capture_default_str();
  app.add_option("--d-model", o.d_model, "Model width d")
      ->check(coulomb_examples::integer_in(2, 4096))
      ->capture_default_str();
  app.add_option("--heads", o.num_heads, "Attention heads")
      ->check(coulomb_examples::integer_in(1, 256))
      ->capture_default_str();
  app.add_option("--d-ff", o.d_ff, "Feed-forward width")
      ->check(coulomb_examples::integer_in(1, 65'536))
      ->capture_default_str();
  app.add_option("--layers", o.num_layers, "Encoder layers")
      ->check(coulomb_examples::integer_in(1, 64))
      ->capture_default_str();
  app.add_option("--dropout", o.dropout, "Dropout rate")
      ->check(coulomb_examples::number_in(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--positions", o.positions, "Positions: rotary, sinusoidal or learned")
      ->check(CLI::IsMember({"rotary", "sinusoidal", "learned"}))
      ->capture_default_str();
  app.add_option("--key-conv", o.key_conv,
                 "Width of the short causal convolution of the keys (0: none; 2 lets a key "
                 "carry the token before it)")
      ->check(coulomb_examples::integer_in(0, 64))
      ->capture_default_str();
  cli.add_threads(o.threads, "Threads of the attention and the affine layers");
  app.add_option("--listops-train", o.listops_train, "ListOps training sequences")
      ->check(coulomb_examples::integer_in(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--listops-dev", o.listops_dev, "ListOps development sequences")
      ->check(coulomb_examples::integer_in(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--listops-test", o.listops_test, "ListOps test sequences")
      ->check(coulomb_examples::integer_in(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--listops-min-length", o.listops_min_length, "Shortest ListOps expression")
      ->check(coulomb_examples::integer_in(1, 100'000))
      ->capture_default_str();
  app.add_option("--listops-max-length", o.listops_max_length, "Longest ListOps expression")
      ->check(coulomb_examples::integer_in(1, 100'000))
      ->capture_default_str();
  app.add_option("--mqar-length", o.mqar_length, "MQAR sequence length L")
      ->check(coulomb_examples::integer_in(4, 100'000))
      ->capture_default_str();
  app.add_option("--mqar-pairs", o.mqar_pairs, "MQAR key-value pairs P")
      ->check(coulomb_examples::integer_in(1, 10'000))
      ->capture_default_str();
  app.add_option("--mqar-vocabulary", o.mqar_vocabulary, "MQAR vocabulary V")
      ->check(coulomb_examples::integer_in(4, 1'000'000))
      ->capture_default_str();
  app.add_option("--mqar-train", o.mqar_train, "MQAR training sequences")
      ->check(coulomb_examples::integer_in(1, 10'000'000))
      ->capture_default_str();
  app.add_option("--mqar-dev", o.mqar_dev, "MQAR development sequences")
      ->check(coulomb_examples::integer_in(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--mqar-test", o.mqar_test, "MQAR test sequences")
      ->check(coulomb_examples::integer_in(1, 1'000'000))
      ->capture_default_str();
  cli.add_out(out);
  cli.add_progress();
  cli.add_quiet();
  // The checks before any work, on every process (the output paths on rank 0, which writes
  // them); the processes then stop together if any of them must.
  const auto check = [&]() -> std::optional<int> {
    if (const auto status = cli.parse(argc, argv)) return status;
    if (const auto twice = coulomb_examples::repeated_entry(o.tasks))
      return cli.reject("--task", "'" + *twice + "' is listed twice");
    if (o.d_model % o.num_heads != 0)
      return cli.reject("--heads", std::to_string(o.num_heads) + " does not divide --d-model " +
                                       std::to_string(o.d_model));
    if (o.positions == "rotary" && (o.d_model / o.num_heads) % 2 != 0)
      return cli.reject("--positions",
                        "rotary positions need an even head width, --d-model / "
                        "--heads = " +
                            std::to_string(o.d_model / o.num_heads));
    if (o.kernel == "learned" && o.attention == "softmax")
      return cli.reject("--kernel", "learned needs linear attention (softmax has no Omega)");
    if (o.phase_a_after > 0 && o.kernel != "learned")
      return cli.reject("--phase-a-after", "needs --kernel learned");
    if (o.phase_a_after >= o.epochs)
      return cli.reject("--phase-a-after", std::to_string(o.phase_a_after) +
                                               " epochs leave no epoch after Phase A (--epochs " +
                                               std::to_string(o.epochs) + ")");
    if (o.listops_min_length > o.listops_max_length)
      return cli.reject("--listops-min-length", "is larger than --listops-max-length");
    if (4 * o.mqar_pairs > o.mqar_length)
      return cli.reject("--mqar-pairs",
                        "4 x pairs must be at most --mqar-length (the pairs and "
                        "every key asked once, in two-token slots)");

    if (!processes.root()) return std::nullopt;
    coulomb_examples::OutputPlan plan;
    plan.directory("--out", out);
    plan.output("--out", out / "runs.csv");
    return cli.check_paths(plan);
  };
  if (const auto status = processes.agree(check())) return *status;
  if (processes.size() > 1 && !cli.quiet())
    std::cerr << "sequence_tasks: data-parallel run: " << processes.size() << " MPI processes, "
              << o.threads << (o.threads == 1 ? " thread" : " threads") << " each\n";

  try {
    paper::RunTable table(key_names, value_names);
    const std::string csv = (out / "runs.csv").string();
    // Rank 0 reads runs.csv and decides what to skip (below); the others follow it.
    const std::size_t found = processes.root() ? load_runs(table, csv) : 0;
    const std::string map = o.attention == "softmax" ? "none" : o.feature_map;
    Index trained = 0;
    for (const auto& name : o.tasks) {
      const std::string cell = cell_of(name, o);
      const std::vector<std::string> keys{
          name,
          cell,
          o.attention,
          map,
          o.kernel,
          o.kernel != "learned" ? "none"
          : o.phase_a_after > 0 ? o.phase_a + "+after" + std::to_string(o.phase_a_after)
                                : o.phase_a,
          o.attention == "softmax" ? "0" : std::to_string(o.features),
          std::to_string(o.seed)};
      double skip = processes.root() && table.contains(keys) ? 1.0 : 0.0;
      if (auto* collective = processes.collective())
        collective->sum(std::span<double>(&skip, 1));  // rank 0's decision on every process
      if (skip > 0.0) {
        if (!cli.quiet())
          std::cerr << "sequence_tasks: " << name << " " << cell << " is in " << csv << " already ("
                    << found << " rows read); skipped\n";
        continue;
      }
      if (!cli.quiet()) std::cerr << "sequence_tasks: generating " << name << " " << cell << "\n";
      const Task task = make_task(name, o);
      const RunResult r = run(o, task, cli, processes.collective());
      paper::RunRow row;
      row.keys = keys;
      row.values = {r.test_accuracy,
                    r.dev_accuracy,
                    static_cast<double>(r.best_epoch),
                    static_cast<double>(r.epochs),
                    static_cast<double>(r.steps),
                    static_cast<double>(r.parameters),
                    r.train_seconds,
                    r.tokens_per_second,
                    r.eval_seconds,
                    r.phase_a_seconds,
                    r.alignment_before,
                    r.alignment_after};
      if (processes.root()) table.append(csv, std::move(row));
      ++trained;
      if (!cli.quiet())
        std::cerr << "sequence_tasks: " << name << " " << task.cell << ": test accuracy "
                  << 100 * r.test_accuracy << " % (dev " << 100 * r.dev_accuracy << " % at epoch "
                  << r.best_epoch << "), " << r.train_seconds << " s, " << r.tokens_per_second
                  << " tokens/s\n";
    }
    if (!cli.quiet())
      std::cerr << "sequence_tasks: " << trained << " run(s) appended to " << csv << "\n";
    return cli.finish(0);
  } catch (const std::exception& e) {
    return cli.finish(processes.fail(e));
  }
}

}  // namespace

int main(int argc, char** argv) {
  coulomb_examples::keep_freed_memory();
  return coulomb_examples::run_as_processes(
      "sequence_tasks", argc, argv,
      [](int n, char** args, coulomb_examples::Processes& p) { return run(n, args, p); });
}
