// SPDX-License-Identifier: MIT
// Checkpoints and resuming of Phase A and Phase B (train/resume.hpp): a child process running
// both phases is killed with SIGKILL at seeded random steps of every stage (warm-up, Langevin,
// Phase B mid-epoch) and while a checkpoint is being written, and resumed until done; it ends
// with the bits of the uninterrupted run, and every kill leaves the last reported checkpoint on
// disk. Resuming Phase B from many of its checkpoints in turn gives the same bits; checkpointing
// itself changes nothing; the same seed and thread count give the same bits; 1 and 2 attention
// threads agree within the tolerance of docs/training.md; a checkpoint of another run (options,
// data, model, phase) is refused with a message naming what differs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#define COULOMB_TRAIN_RESUME_POSIX 1
#endif

#include <coulomb/features/favor.hpp>
#include <coulomb/io/model_file.hpp>
#include <coulomb/io/parameters.hpp>
#include <coulomb/train/phase_a.hpp>
#include <coulomb/train/phase_b.hpp>
#include <coulomb/train/resume.hpp>

#include "scratch_dir.hpp"
#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace train_resume_test {

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using coulomb::EncodedDataset;
using coulomb::Index;
using coulomb::io_error;
using coulomb::train::CheckpointEvent;
using coulomb::train::CheckpointEventKind;
using coulomb::train::CheckpointOptions;
using coulomb::train::PhaseAOptions;
using coulomb::train::PhaseAReport;
using coulomb::train::PhaseBHistory;
using coulomb::train::PhaseBOptions;
using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<float>>;
using coulomb_test::ScratchDir;

/// `n` sequences of 2 to 8 tokens from [3, 16); label 1 when token 2 occurs (about half of
/// them get it once).
EncodedDataset marker_task(Index n, coulomb::Rng& rng) {
  EncodedDataset data;
  std::vector<coulomb::TokenId> ids;
  std::vector<std::uint8_t> segments;
  for (Index i = 0; i < n; ++i) {
    const auto length = static_cast<std::size_t>(2 + coulomb::uniform_index(7, rng));
    ids.resize(length);
    for (auto& id : ids) id = static_cast<coulomb::TokenId>(3 + coulomb::uniform_index(13, rng));
    const int label = static_cast<int>(coulomb::uniform_index(2, rng));
    if (label == 1) ids[coulomb::uniform_index(length, rng)] = 2;
    segments.assign(length, 0);
    data.push_back(ids, segments, label);
  }
  return data;
}

struct Task {
  EncodedDataset train, validation;
};

Task make_task() {
  coulomb::Rng rng(20261203);
  Task t;
  t.train = marker_task(48, rng);
  t.validation = marker_task(24, rng);
  return t;
}

/// Two layers with one Ω each (two Langevin runs in Phase A), dropout on (its generator is
/// part of the state).
coulomb::nn::TextClassifierConfig tiny_config(int threads = 1) {
  coulomb::nn::TextClassifierConfig c;
  c.vocab_size = 16;
  c.max_length = 8;
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 16;
  c.num_layers = 2;
  c.num_classes = 2;
  c.dropout = 0.1;
  c.num_features = 6;
  c.num_threads = threads;
  return c;
}

/// Warm-up of 9 steps (8-sequence batches: 6 per epoch, so it crosses an epoch end), two
/// noisy minibatch Langevin runs of 12 steps.
PhaseAOptions phase_a_options() {
  PhaseAOptions o;
  o.representation = coulomb::train::PhaseARepresentation::warmup;
  o.num_sequences = 32;
  o.batch_size = 16;
  o.warmup.steps = 9;
  o.warmup.training.batch_size = 8;
  o.warmup.training.schedule.learning_rate = 5e-3;
  o.warmup.training.seed = 5;
  o.langevin.max_iterations = 12;
  o.schedule.step_size = 0.2;
  o.langevin.beta = 1e4;
  o.langevin.batch_size = 24;
  o.seed = 7;
  return o;
}

/// Four epochs of 6 steps with validation and early stopping (patience 2).
PhaseBOptions phase_b_options() {
  PhaseBOptions o;
  o.epochs = 4;
  o.batch_size = 8;
  o.schedule.learning_rate = 1e-2;
  o.schedule.warmup_fraction = 0.2;
  o.early_stopping.patience = 2;
  o.early_stopping.metric = coulomb::train::ValidationMetric::log_loss;
  o.seed = 11;
  return o;
}

struct RunResult {
  PhaseAReport a;
  PhaseBHistory b;
};

/// Phase A then Phase B on a fresh model (seed 3) with the given checkpoint options.
RunResult run_pipeline(Model& model, const Task& task, const CheckpointOptions& ck_a,
                       const CheckpointOptions& ck_b) {
  PhaseAOptions a = phase_a_options();
  a.checkpoint = ck_a;
  PhaseBOptions b = phase_b_options();
  b.checkpoint = ck_b;
  RunResult r;
  r.a = coulomb::train::run_phase_a(model, task.train, a);
  r.b = coulomb::train::run_phase_b(model, task.train, task.validation, b);
  return r;
}

/// Whether two matrices hold the same bits.
bool same_bits(const coulomb::Matrix<float>& x, const coulomb::Matrix<float>& y) {
  return x.rows() == y.rows() && x.cols() == y.cols() &&
         (x.size() == 0 ||
          std::memcmp(x.data(), y.data(), static_cast<std::size_t>(x.size()) * sizeof(float)) == 0);
}

/// The parameters of a model as a model file (tensors "model.<name>").
coulomb::io::ModelFile<float> parameters_file(Model& model) {
  coulomb::io::ModelFile<float> f;
  coulomb::io::add_parameters(f, model.parameters(), "model.");
  return f;
}

/// Names of the tensors that differ in bits (all of them if the lists differ).
std::vector<std::string> differing_tensors(const coulomb::io::ModelFile<float>& x,
                                           const coulomb::io::ModelFile<float>& y) {
  std::vector<std::string> out;
  if (x.tensors().size() != y.tensors().size()) return {"(the tensor lists differ)"};
  for (std::size_t k = 0; k < x.tensors().size(); ++k) {
    if (x.tensors()[k].name != y.tensors()[k].name ||
        !same_bits(x.tensors()[k].value, y.tensors()[k].value))
      out.push_back(x.tensors()[k].name);
  }
  return out;
}

/// The deterministic part of a run's history (no wall times) as text, for comparisons.
std::string history_text(const RunResult& r) {
  std::string s = "A: " + std::to_string(r.a.sequences) + " " + std::to_string(r.a.warmup_steps);
  for (const auto& o : r.a.omegas)
    s += " | " + coulomb::train::detail::exact_decimal(o.energy_before) + " " +
         coulomb::train::detail::exact_decimal(o.energy_after) + " " +
         coulomb::train::detail::exact_decimal(o.relative_change);
  s += " sums " + coulomb::train::detail::exact_decimal(r.a.energy_after);
  s += "\nB: steps " + std::to_string(r.b.steps) + " tokens " + std::to_string(r.b.tokens) +
       " best " + std::to_string(r.b.best_epoch) + " " +
       coulomb::train::detail::exact_decimal(r.b.best_metric) +
       (r.b.stopped_early ? " stopped early" : "");
  for (const auto& e : r.b.epochs)
    s += "\n  epoch " + std::to_string(e.epoch) + " steps " + std::to_string(e.steps) + " loss " +
         coulomb::train::detail::exact_decimal(e.train_loss) + " lr " +
         coulomb::train::detail::exact_decimal(e.learning_rate) + " val " +
         coulomb::train::detail::exact_decimal(e.validation_metric) +
         (e.improved ? " improved" : "");
  return s;
}

}  // namespace

#ifdef COULOMB_TRAIN_RESUME_POSIX

namespace {

/// What a child reports through its pipe for every checkpoint it saved.
struct SavedMessage {
  char phase[8];
  char stage[12];
  std::int64_t step;
  std::int64_t omega;
};

/// When a child kills itself: at the first event of this kind, phase and stage with at least
/// `min_step` steps (and of Ω `omega` when ≥ 0).
struct KillRule {
  CheckpointEventKind kind = CheckpointEventKind::step;
  std::string phase, stage;
  Index min_step = 0;
  Index omega = -1;
  std::string description;
};

/// The checkpoint a reported save must have left, checked against the file on disk.
bool file_matches(const std::string& path, const SavedMessage& m) {
  const auto f = coulomb::io::load_model_file<float>(path);
  const std::string phase(m.phase);
  const std::string stage(m.stage);
  if (f.metadata_value("checkpoint.kind") != phase) return false;
  if (phase == "phase_b") {
    return f.metadata_value("phase_b.steps") == std::to_string(m.step) &&
           f.metadata_value("phase_b.status") == (stage == "done" ? "done" : "running");
  }
  if (f.metadata_value("phase_a.stage") != stage) return false;
  if (stage == "warmup") return f.metadata_value("phase_b.steps") == std::to_string(m.step);
  if (stage == "langevin") return f.metadata_value("phase_a.next_omega") == std::to_string(m.omega);
  return true;
}

}  // namespace

TEST_CASE("TrainResume_SigkillAtRandomPointsEndsWithTheUninterruptedModel",
          "[train][resume][sigkill]") {
  // One thread: the kill test forks, and an OpenMP runtime does not survive fork() once it
  // has started its threads. The thread count is the same for the reference and every child.
  ScratchDir dir("sigkill");
  const std::string path_a = dir.file("phase_a.ckpt");
  const std::string path_b = dir.file("phase_b.ckpt");
  const std::string result_path = dir.file("result.clmb");
  const Task task = make_task();

  Model reference(tiny_config(), 3);
  const RunResult expected = run_pipeline(reference, task, {}, {});
  const auto expected_file = parameters_file(reference);
  REQUIRE(expected.b.steps >= 18);  // Phase B reaches the last kill point

  // Seeded random kill points, one or more in every stage, in the order the run reaches them.
  coulomb::Rng rng = coulomb_test::test_rng("TrainResume_Sigkill");
  auto pick = [&](Index lo, Index hi) {
    return lo +
           static_cast<Index>(coulomb::uniform_index(static_cast<std::uint64_t>(hi - lo + 1), rng));
  };
  const std::vector<KillRule> rules = {
      {CheckpointEventKind::step, "phase_a", "warmup", pick(2, 5), -1, "warm-up, epoch 0"},
      {CheckpointEventKind::writing, "phase_a", "warmup", 6, -1,
       "while writing a warm-up checkpoint"},
      {CheckpointEventKind::step, "phase_a", "warmup", pick(7, 9), -1, "warm-up, epoch 1"},
      {CheckpointEventKind::step, "phase_a", "langevin", pick(1, 11), 0, "Langevin run of Omega 0"},
      {CheckpointEventKind::step, "phase_a", "langevin", pick(1, 11), 1, "Langevin run of Omega 1"},
      {CheckpointEventKind::step, "phase_b", "running", pick(1, 5), -1, "Phase B, epoch 0"},
      {CheckpointEventKind::step, "phase_b", "running", pick(7, 11), -1, "Phase B, epoch 1"},
      {CheckpointEventKind::writing, "phase_b", "running", 12, -1,
       "while writing a Phase B checkpoint"},
      {CheckpointEventKind::step, "phase_b", "running", pick(13, 17), -1, "Phase B, epoch 2"},
  };

  std::vector<std::string> killed_in;
  std::vector<SavedMessage> saved;  // every checkpoint reported as saved, over all rounds
  bool completed = false;
  for (std::size_t round = 0; round <= rules.size() && !completed; ++round) {
    const KillRule* rule = round < rules.size() ? &rules[round] : nullptr;
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(pipe_fds[0]);
      const int out = pipe_fds[1];
      auto observer = [rule, out](const CheckpointEvent& e) {
        if (e.kind == CheckpointEventKind::saved) {
          SavedMessage m{};
          std::snprintf(m.phase, sizeof m.phase, "%.*s", static_cast<int>(e.phase.size()),
                        e.phase.data());
          std::snprintf(m.stage, sizeof m.stage, "%.*s", static_cast<int>(e.stage.size()),
                        e.stage.data());
          m.step = e.step;
          m.omega = e.omega;
          if (write(out, &m, sizeof m) != static_cast<ssize_t>(sizeof m)) _exit(5);
        }
        if (rule != nullptr && e.kind == rule->kind && e.phase == rule->phase &&
            e.stage == rule->stage && e.step >= rule->min_step &&
            (rule->omega < 0 || e.omega == rule->omega)) {
          kill(getpid(), SIGKILL);
        }
      };
      try {
        CheckpointOptions ck;
        ck.every_steps = 2;
        ck.resume = true;
        ck.observer = observer;
        CheckpointOptions ck_a = ck;
        ck_a.path = path_a;
        CheckpointOptions ck_b = ck;
        ck_b.path = path_b;
        Model model(tiny_config(), 3);
        const RunResult r = run_pipeline(model, task, ck_a, ck_b);
        auto f = parameters_file(model);
        f.set_metadata("history", history_text(r));
        coulomb::io::save_model_file(result_path, f);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        _exit(3);
      } catch (...) {
        _exit(4);
      }
      _exit(0);
    }
    close(pipe_fds[1]);
    SavedMessage m{};
    while (read(pipe_fds[0], &m, sizeof m) == static_cast<ssize_t>(sizeof m)) saved.push_back(m);
    close(pipe_fds[0]);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    if (rule == nullptr) {
      REQUIRE(WIFEXITED(status));
      REQUIRE(WEXITSTATUS(status) == 0);
      completed = true;
      break;
    }
    INFO("round " << round << ": kill " << rule->description << " (step " << rule->min_step
                  << "); the child " << (WIFEXITED(status) ? "exited with " : "died of signal ")
                  << (WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status)));
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    killed_in.push_back(rule->description);
    // The last checkpoint reported as saved (by this child or an earlier one) is the one on
    // disk, intact, whatever the kill interrupted (a write included).
    REQUIRE_FALSE(saved.empty());
    const SavedMessage& last = saved.back();
    const std::string& path = std::string(last.phase) == "phase_a" ? path_a : path_b;
    INFO("last saved: " << last.phase << " " << last.stage << " step " << last.step << " omega "
                        << last.omega);
    CHECK(file_matches(path, last));
  }
  REQUIRE(completed);
  CHECK(killed_in.size() == rules.size());

  const auto got = coulomb::io::load_model_file<float>(result_path);
  coulomb::io::ModelFile<float> got_parameters;
  for (const auto& t : got.tensors()) got_parameters.add_tensor(t.name, t.value);
  INFO("tensors that differ from the uninterrupted run:");
  for (const auto& name : differing_tensors(got_parameters, expected_file)) INFO(name);
  CHECK(got_parameters == expected_file);
  CHECK(got.metadata_value("history") == history_text(expected));
}

#endif  // COULOMB_TRAIN_RESUME_POSIX

TEST_CASE("TrainResume_PhaseBFromEveryKindOfCheckpointGivesTheSameBits", "[train][resume]") {
  // Phase B with a checkpoint after every step; copies of several of them (mid-epoch, at an
  // epoch end, the final one) are each resumed into a fresh model: every resumed run ends with
  // the bits and the history of the uninterrupted one.
  ScratchDir dir("phase_b_each");
  const Task task = make_task();
  PhaseBOptions options = phase_b_options();
  options.epochs = 3;

  Model reference(tiny_config(), 3);
  RunResult expected;
  expected.b = coulomb::train::run_phase_b(reference, task.train, task.validation, options);
  const auto expected_file = parameters_file(reference);

  Model checkpointed(tiny_config(), 3);
  std::vector<std::string> copies;
  options.checkpoint.path = dir.file("b.ckpt");
  options.checkpoint.every_steps = 1;
  options.checkpoint.observer = [&](const CheckpointEvent& e) {
    if (e.kind != CheckpointEventKind::saved) return;
    const std::string copy = dir.file("copy" + std::to_string(copies.size()));
    fs::copy_file(options.checkpoint.path, copy);
    copies.push_back(copy);
  };
  RunResult with;
  with.b = coulomb::train::run_phase_b(checkpointed, task.train, task.validation, options);
  // Writing checkpoints changes nothing.
  CHECK(parameters_file(checkpointed) == expected_file);
  CHECK(history_text(with) == history_text(expected));
  // 18 steps, one checkpoint each, two epoch ends, the final one.
  REQUIRE(copies.size() == 21);

  options.checkpoint.observer = nullptr;
  options.checkpoint.resume = true;
  for (const std::size_t k : {std::size_t{0}, std::size_t{4}, std::size_t{6}, std::size_t{7},
                              std::size_t{13}, std::size_t{20}}) {
    INFO("resumed from checkpoint " << k);
    fs::copy_file(copies[k], options.checkpoint.path, fs::copy_options::overwrite_existing);
    Model model(tiny_config(), 99);  // other initial values: everything comes from the checkpoint
    RunResult resumed;
    resumed.b = coulomb::train::run_phase_b(model, task.train, task.validation, options);
    CHECK(parameters_file(model) == expected_file);
    CHECK(history_text(resumed) == history_text(expected));
  }
}

TEST_CASE("TrainResume_SameSeedAndThreadsGiveIdenticalBits", "[train][resume]") {
  const Task task = make_task();
  Model first(tiny_config(), 3);
  Model second(tiny_config(), 3);
  const RunResult r1 = run_pipeline(first, task, {}, {});
  const RunResult r2 = run_pipeline(second, task, {}, {});
  CHECK(parameters_file(first) == parameters_file(second));
  CHECK(history_text(r1) == history_text(r2));
  // A different seed of the model gives a different model (the comparison can fail).
  Model other(tiny_config(), 4);
  (void)run_pipeline(other, task, {}, {});
  CHECK_FALSE(parameters_file(other) == parameters_file(first));
}

TEST_CASE("TrainResume_OneAndTwoThreadsAgreeWithinTolerance", "[train][resume][threads]") {
  // With OpenMP the attention runs its (sequence, head) tasks on the threads; the thread count
  // reorders floating-point sums only where work is split or reduced across threads (sequences
  // longer than a block with fewer tasks than threads, the gradient of a trainable Ω). The
  // tolerance (docs/training.md, "Checkpoints and resuming"): every parameter within 1e-3 of
  // the largest magnitude of its tensor after the whole pipeline (float, 33 Adam steps, two
  // Langevin runs). Measured: 0, with and without OpenMP (Ω is frozen in Phase B); 2.1e-5
  // with OpenMP when Ω is trained end to end.
  const Task task = make_task();
  Model one(tiny_config(1), 3);
  Model two(tiny_config(2), 3);
  (void)run_pipeline(one, task, {}, {});
  (void)run_pipeline(two, task, {}, {});
  const auto p1 = one.parameters();
  const auto p2 = two.parameters();
  REQUIRE(p1.size() == p2.size());
  double worst = 0.0;
  std::string worst_name;
  for (std::size_t k = 0; k < p1.size(); ++k) {
    const double scale = std::max(1e-6, static_cast<double>(p1[k].value->cwiseAbs().maxCoeff()));
    const double diff =
        static_cast<double>((*p1[k].value - *p2[k].value).cwiseAbs().maxCoeff()) / scale;
    if (diff > worst) {
      worst = diff;
      worst_name = p1[k].name;
    }
  }
#ifdef _OPENMP
  INFO("OpenMP build");
#else
  INFO("no OpenMP: the thread count is not used, the bits must agree");
  CHECK(worst == 0.0);
#endif
  INFO("largest relative difference " << worst << " in " << worst_name);
  CHECK(worst <= 1e-3);
}

TEST_CASE("TrainResume_CheckpointOfAnotherRunIsRefusedNamingTheField", "[train][resume]") {
  ScratchDir dir("mismatch");
  const Task task = make_task();
  PhaseBOptions options = phase_b_options();
  options.epochs = 1;
  options.checkpoint.path = dir.file("b.ckpt");
  options.checkpoint.every_steps = 2;
  {
    Model model(tiny_config(), 3);
    (void)coulomb::train::run_phase_b(model, task.train, task.validation, options);
  }
  options.checkpoint.resume = true;
  auto refused = [&](Model& model, const EncodedDataset& train, const PhaseBOptions& o) {
    const auto before = parameters_file(model);
    std::string message;
    try {
      (void)coulomb::train::run_phase_b(model, train, task.validation, o);
    } catch (const io_error& e) {
      message = e.what();
    }
    CHECK(parameters_file(model) == before);  // refused before anything changed
    return message;
  };

  Model model(tiny_config(), 3);
  PhaseBOptions other_rate = options;
  other_rate.schedule.learning_rate = 2e-2;
  CHECK_THAT(refused(model, task.train, other_rate),
             Contains("cannot resume") && Contains("phase_b.learning_rate is '0.01' in the "
                                                   "checkpoint, '0.02' in this run"));

  PhaseBOptions other_seed = options;
  other_seed.seed = 12;
  other_seed.batch_size = 6;
  const std::string two = refused(model, task.train, other_seed);
  CHECK_THAT(two, Contains("2 fields differ") && Contains("phase_b.seed is '11'") &&
                      Contains("phase_b.batch_size is '8'"));

  EncodedDataset relabelled = task.train;
  relabelled.labels[0] = 1 - relabelled.labels[0];
  CHECK_THAT(refused(model, relabelled, options), Contains("data.train.labels_crc32c"));

  auto config = tiny_config();
  config.d_ff = 12;
  Model wider(config, 3);
  CHECK_THAT(refused(wider, task.train, options),
             Contains("model.config.d_ff is '16' in the checkpoint, '12' in this run"));

  // A Phase B checkpoint where Phase A expects its own, and a damaged checkpoint.
  PhaseAOptions a = phase_a_options();
  a.checkpoint.path = options.checkpoint.path;
  a.checkpoint.resume = true;
  CHECK_THROWS_WITH(coulomb::train::run_phase_a(model, task.train, a),
                    Contains("is a phase_b checkpoint, expected a phase_a one"));
  {
    std::fstream f(options.checkpoint.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5A');
  }
  CHECK_THROWS_AS(coulomb::train::run_phase_b(model, task.train, task.validation, options),
                  io_error);
  // Without resume the damaged checkpoint is simply replaced.
  options.checkpoint.resume = false;
  CHECK_NOTHROW(coulomb::train::run_phase_b(model, task.train, task.validation, options));
  CHECK(coulomb::io::load_model_file<float>(options.checkpoint.path)
            .metadata_value("phase_b.status") == "done");
}

namespace {

/// Pauses the calling thread (a slow step, so that a session's share of the time is known).
void nap(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

/// `file` without its metadata `key`: a checkpoint as a build without that key wrote it.
coulomb::io::ModelFile<float> without_metadata(const coulomb::io::ModelFile<float>& file,
                                               const std::string& key) {
  coulomb::io::ModelFile<float> out(file.source());
  for (const auto& [k, v] : file.metadata())
    if (k != key) out.set_metadata(k, v);
  for (const auto& b : file.blobs()) out.add_blob(b.name, b.bytes);
  for (const auto& t : file.tensors()) out.add_tensor(t.name, t.value);
  return out;
}

}  // namespace

TEST_CASE("TrainResume_PhaseBTimesOfAResumedEpochCoverEverySession", "[train][resume][time]") {
  // The first session naps in steps 7 to 9 (the first three of epoch 1); its checkpoint after
  // step 9 is resumed. The resumed epoch's time includes the earlier session's part (its tokens
  // do), and the history agrees with itself: each epoch's tokens / tokens_per_second is its
  // train time, their sum is history.train_seconds, the epochs fit in history.seconds.
  constexpr double pause = 0.1;
  ScratchDir dir("phase_b_times");
  const Task task = make_task();
  PhaseBOptions options = phase_b_options();
  options.epochs = 2;  // 6 steps each
  options.checkpoint.path = dir.file("b.ckpt");
  options.checkpoint.every_steps = 1;
  const std::string mid_epoch = dir.file("mid_epoch.ckpt");
  options.checkpoint.observer = [&](const CheckpointEvent& e) {
    if (e.kind == CheckpointEventKind::step && e.step >= 7 && e.step <= 9) nap(pause);
    if (e.kind == CheckpointEventKind::saved && e.step == 9)
      fs::copy_file(options.checkpoint.path, mid_epoch);
  };
  Model uninterrupted(tiny_config(), 3);
  (void)coulomb::train::run_phase_b(uninterrupted, task.train, task.validation, options);
  REQUIRE(fs::exists(mid_epoch));

  options.checkpoint.observer = nullptr;
  options.checkpoint.resume = true;
  const auto epoch_tokens = static_cast<double>(task.train.ids.size());
  auto check_history = [&](const PhaseBHistory& h) {
    REQUIRE(h.epochs.size() == 2);
    CHECK(h.tokens == static_cast<Index>(2 * epoch_tokens));
    double train_sum = 0.0;
    double wall_sum = 0.0;
    for (const auto& e : h.epochs) {
      REQUIRE(e.tokens_per_second > 0.0);
      const double train_seconds = epoch_tokens / e.tokens_per_second;
      CHECK(e.seconds >= train_seconds * (1.0 - 1e-12));  // the evaluation comes on top
      train_sum += train_seconds;
      wall_sum += e.seconds;
    }
    CHECK(train_sum == Approx(h.train_seconds).epsilon(1e-12));
    CHECK(h.seconds >= wall_sum * (1.0 - 1e-12));
    // The resumed epoch holds the three pauses of the first session.
    CHECK(epoch_tokens / h.epochs[1].tokens_per_second >= 3 * pause);
    CHECK(h.train_seconds >= 3 * pause);
  };
  {
    INFO("resumed from the mid-epoch checkpoint");
    fs::copy_file(mid_epoch, options.checkpoint.path, fs::copy_options::overwrite_existing);
    Model model(tiny_config(), 99);
    check_history(coulomb::train::run_phase_b(model, task.train, task.validation, options));
    CHECK(parameters_file(model) == parameters_file(uninterrupted));
  }
  {
    // A checkpoint written before "phase_b.epoch_seconds" existed resumes to the same bits,
    // counting 0 s for the earlier part of the epoch.
    INFO("resumed from the mid-epoch checkpoint without phase_b.epoch_seconds");
    const auto saved = coulomb::io::load_model_file<float>(mid_epoch);
    REQUIRE(saved.find_metadata("phase_b.epoch_seconds") != nullptr);
    coulomb::io::save_model_file(options.checkpoint.path,
                                 without_metadata(saved, "phase_b.epoch_seconds"));
    Model model(tiny_config(), 99);
    const PhaseBHistory h =
        coulomb::train::run_phase_b(model, task.train, task.validation, options);
    CHECK(parameters_file(model) == parameters_file(uninterrupted));
    REQUIRE(h.epochs.size() == 2);
    CHECK(h.epochs[1].tokens_per_second > 0.0);
  }
}

TEST_CASE("TrainResume_PhaseAWarmupTimeCoversEverySession", "[train][resume][time]") {
  // The first session naps in the first three warm-up steps; its checkpoint after step 3 is
  // resumed: the warm-up time includes those pauses, and Phase A's time includes the warm-up.
  constexpr double pause = 0.1;
  ScratchDir dir("phase_a_times");
  const Task task = make_task();
  PhaseAOptions options = phase_a_options();
  options.checkpoint.path = dir.file("a.ckpt");
  options.checkpoint.every_steps = 1;
  const std::string in_warmup = dir.file("warmup.ckpt");
  options.checkpoint.observer = [&](const CheckpointEvent& e) {
    if (e.stage != "warmup") return;
    if (e.kind == CheckpointEventKind::step && e.step <= 3) nap(pause);
    if (e.kind == CheckpointEventKind::saved && e.step == 3)
      fs::copy_file(options.checkpoint.path, in_warmup);
  };
  Model uninterrupted(tiny_config(), 3);
  const PhaseAReport full = coulomb::train::run_phase_a(uninterrupted, task.train, options);
  CHECK(full.warmup_seconds >= 3 * pause);
  REQUIRE(fs::exists(in_warmup));

  options.checkpoint.observer = nullptr;
  options.checkpoint.resume = true;
  fs::copy_file(in_warmup, options.checkpoint.path, fs::copy_options::overwrite_existing);
  Model model(tiny_config(), 3);
  const PhaseAReport resumed = coulomb::train::run_phase_a(model, task.train, options);
  CHECK(parameters_file(model) == parameters_file(uninterrupted));
  CHECK(resumed.warmup_steps == full.warmup_steps);
  CHECK(resumed.warmup_seconds >= 3 * pause);
  CHECK(resumed.seconds >= resumed.warmup_seconds);
}

namespace {

/// A copy of the fixture tests/data/train_checkpoint_layout1_<name>.ckpt in `dir`: a checkpoint
/// that the build before the record codec (layout 1, commit 58f422e) wrote while running this
/// file's pipeline (tiny_config, model seed 3, phase_a_options, phase_b_options) with a
/// checkpoint after every step.
std::string layout1_checkpoint(const ScratchDir& dir, const std::string& name) {
  const std::string path = dir.file(name + ".ckpt");
  fs::copy_file(fs::path(COULOMB_TEST_DATA_DIR) / ("train_checkpoint_layout1_" + name + ".ckpt"),
                path);
  return path;
}

/// The numbers of a line of text (exact decimals separated by spaces; "nan" for NaN).
std::vector<double> numbers(const std::string& text) {
  std::vector<double> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find_first_of(" \n", start);
    if (end == std::string::npos) end = text.size();
    out.push_back(std::strtod(text.substr(start, end - start).c_str(), nullptr));
    start = end + 1;
  }
  return out;
}

/// Line `k` of the checkpoint blob "phase_b.history", as numbers.
std::vector<double> history_line(const coulomb::io::ModelFile<float>& file, std::size_t k) {
  const std::string& text = file.blob("phase_b.history");
  std::size_t start = 0;
  for (std::size_t i = 0; i < k; ++i) start = text.find('\n', start) + 1;
  return numbers(text.substr(start, text.find('\n', start) - start));
}

/// Whether `e` holds the numbers of a history line, bit for bit (NaN as NaN).
bool same_epoch(const coulomb::train::EpochRecord& e, const std::vector<double>& v) {
  auto same = [](double x, double y) { return std::isnan(x) ? std::isnan(y) : x == y; };
  return v.size() == 10 && same(static_cast<double>(e.epoch), v[0]) &&
         same(static_cast<double>(e.steps), v[1]) && same(e.train_loss, v[2]) &&
         same(e.learning_rate, v[3]) && same(e.validation_accuracy, v[4]) &&
         same(e.validation_loss, v[5]) && same(e.validation_metric, v[6]) &&
         same(e.improved ? 1.0 : 0.0, v[7]) && same(e.tokens_per_second, v[8]) &&
         same(e.seconds, v[9]);
}

}  // namespace

TEST_CASE("TrainResume_CheckpointsOfTheFirstLayoutStillResume", "[train][resume]") {
  // Fixtures written before the record codec: each resumes in this build. A finished Phase B
  // returns the history and the parameters of the file; the others run to their end and keep
  // what the file recorded (their later steps are this build's own arithmetic).
  ScratchDir dir("layout1");
  const Task task = make_task();
  {
    INFO("Phase B, finished");
    PhaseBOptions options = phase_b_options();
    options.checkpoint.path = layout1_checkpoint(dir, "phase_b_done");
    options.checkpoint.resume = true;
    const auto saved = coulomb::io::load_model_file<float>(options.checkpoint.path);
    Model model(tiny_config(), 99);
    const PhaseBHistory h =
        coulomb::train::run_phase_b(model, task.train, task.validation, options);
    CHECK(h.steps == 24);
    CHECK(h.tokens == std::stoll(saved.metadata_value("phase_b.tokens")));
    CHECK(h.best_epoch == std::stoll(saved.metadata_value("phase_b.best_epoch")));
    CHECK(h.best_metric ==
          std::strtod(saved.metadata_value("phase_b.best_metric").c_str(), nullptr));
    CHECK_FALSE(h.stopped_early);
    REQUIRE(h.epochs.size() == 4);
    for (std::size_t k = 0; k < 4; ++k) CHECK(same_epoch(h.epochs[k], history_line(saved, k)));
    for (const auto& p : model.parameters()) {
      INFO("parameter " << p.name);
      CHECK(same_bits(*p.value, saved.tensor("model." + p.name)));
    }
  }
  {
    INFO("Phase B, epoch 2 after 2 of its 6 steps");
    PhaseBOptions options = phase_b_options();
    options.checkpoint.path = layout1_checkpoint(dir, "phase_b_mid_epoch");
    options.checkpoint.resume = true;
    const auto saved = coulomb::io::load_model_file<float>(options.checkpoint.path);
    Model model(tiny_config(), 99);
    const PhaseBHistory h =
        coulomb::train::run_phase_b(model, task.train, task.validation, options);
    REQUIRE(h.epochs.size() >= 3);
    CHECK(same_epoch(h.epochs[0], history_line(saved, 0)));
    CHECK(same_epoch(h.epochs[1], history_line(saved, 1)));
    CHECK(h.epochs[2].steps == 6);
    CHECK(h.steps == 6 * static_cast<Index>(h.epochs.size()));
  }
  {
    INFO("Phase A, Langevin stage: Omega 0 learned, Omega 1 not yet");
    PhaseAOptions options = phase_a_options();
    options.checkpoint.path = layout1_checkpoint(dir, "phase_a_langevin");
    options.checkpoint.resume = true;
    const auto saved = coulomb::io::load_model_file<float>(options.checkpoint.path);
    Model model(tiny_config(), 99);
    const PhaseAReport r = coulomb::train::run_phase_a(model, task.train, options);
    CHECK(r.sequences == 32);
    CHECK(r.warmup_steps == 9);
    REQUIRE(r.omegas.size() == 2);
    const std::vector<double> omega0 = numbers(saved.metadata_value("phase_a.report.omega.0"));
    REQUIRE(omega0.size() == 12);
    const auto& o = r.omegas[0];
    CHECK(o.omega == 0);
    CHECK(static_cast<double>(o.samples) == omega0[1]);
    CHECK(o.radius == omega0[2]);
    CHECK(o.energy_before == omega0[3]);
    CHECK(o.energy_after == omega0[4]);
    CHECK(o.relative_change == omega0[11]);
    CHECK(same_bits(model.omega(0), saved.tensor("model.encoder.0.attention.omega")));
    CHECK(r.omegas[1].omega == 1);
    CHECK(r.omegas[1].samples == 64);
    CHECK_FALSE(model.omega_trainable());
  }
  {
    INFO("Phase A, warm-up: epoch 1 after 2 of its 3 steps");
    PhaseAOptions options = phase_a_options();
    options.checkpoint.path = layout1_checkpoint(dir, "phase_a_warmup");
    options.checkpoint.resume = true;
    Model model(tiny_config(), 99);
    const PhaseAReport r = coulomb::train::run_phase_a(model, task.train, options);
    CHECK(r.warmup_steps == 9);
    CHECK(r.sequences == 32);
    CHECK(r.omegas.size() == 2);
  }
}

}  // namespace train_resume_test
