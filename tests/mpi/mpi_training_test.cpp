// SPDX-License-Identifier: MIT
// Data-parallel training over MPI (coulomb/mpi/communicator.hpp, train/collective.hpp), run by
// ctest as `mpirun -np 2 mpi_training_tests` (and with one process): Phase B on P processes
// gives the parameters of one process on the same global batches within float round-off (and
// its summed gradient the global batch's); the parameters are bit for bit the same on every
// process (hash), also with dropout, where each process draws its own masks; a P-process run
// is deterministic; a divergence makes every process throw; the sharded evaluation gives one
// process's metrics bit for bit; Phase A gives every process the same Ω bit for bit, equal to
// one process's within round-off; a run stopped after a checkpoint and resumed by every
// process ends with the uninterrupted run's bits, and the failures of checkpoints (a write, a
// file only some processes find or can read, another number of processes) give every process
// the same error. Every test case makes the same collective calls on every process,
// so that a failing check cannot leave a process waiting (ctest's TIMEOUT bounds a hang anyway).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <coulomb/features/favor.hpp>
#include <coulomb/mpi/communicator.hpp>
#include <coulomb/train/phase_a.hpp>
#include <coulomb/train/phase_b.hpp>
#include <coulomb/train/sharded_adamw.hpp>

#include "../test_support.hpp"
#include "../train_token_task.hpp"

namespace mpi_training_test {

namespace {

using coulomb::EncodedDataset;
using coulomb::Index;
using coulomb::nn::TextClassifierConfig;
using coulomb::train::PhaseAOptions;
using coulomb::train::PhaseARepresentation;
using coulomb::train::PhaseBOptions;
using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<float>>;

/// The processes of the run (set by main).
coulomb::mpi::Communicator* world = nullptr;

/// Largest |θ_P − θ_1| over every parameter entry, relative to the largest |θ_1| of that
/// parameter (at least 1), allowed after the Phase B run of MpiPhaseB_MatchesSingleProcess:
/// the gradients are summed in another order, AdamW divides by √v, and 35 steps compound the
/// differences. Measured (2 processes, float, seeds default and 1–6): 2.7e-7 to 1.8e-6.
constexpr double phase_b_tolerance = 2e-5;

/// The same for Ω after MpiPhaseA_OmegaIdenticalOnEveryRank (relative to max |Ω_1|). Measured
/// (2 processes, float): 2.5e-7 (initial), 6.7e-7 (after the warm-up).
constexpr double phase_a_tolerance = 2e-5;

using coulomb_train_test::marker;
using coulomb_train_test::small_config;
using coulomb_train_test::token_task;
using coulomb_train_test::vocab;

PhaseBOptions phase_b_options(std::uint64_t seed) {
  PhaseBOptions o;
  o.epochs = 5;
  o.batch_size = 15;  // shards of 7 and 8 sequences with two processes; the last batch has 6
  o.schedule.learning_rate = 1e-2;
  o.schedule.warmup_fraction = 0.1;
  o.early_stopping.patience = 0;
  o.early_stopping.restore_best = false;
  o.seed = seed;
  return o;
}

/// max over parameters of max |a − b| / max(1, max |b|).
double largest_difference(Model& a, Model& b) {
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  double worst = 0.0;
  for (std::size_t k = 0; k < pa.size(); ++k) {
    const double scale = std::max(1.0, static_cast<double>(pb[k].value->cwiseAbs().maxCoeff()));
    const double d = static_cast<double>((*pa[k].value - *pb[k].value).cwiseAbs().maxCoeff());
    worst = std::max(worst, d / scale);
  }
  return worst;
}

}  // namespace

TEST_CASE("MpiShard_RangesCoverTheBatch", "[mpi]") {
  // The shards of the processes of this run cover a batch exactly once, in rank order.
  const int P = world->size();
  for (const Index B : {Index{0}, Index{1}, Index{15}, Index{16}}) {
    Index next = 0;
    for (int r = 0; r < P; ++r) {
      const coulomb::train::ShardRange s = coulomb::train::shard_range(B, r, P);
      CHECK(s.begin == next);
      CHECK(s.size() >= B / P);
      CHECK(s.size() <= B / P + 1);
      next = s.end;
    }
    CHECK(next == B);
  }
}

TEST_CASE("MpiCollective_SumsAndBroadcasts", "[mpi]") {
  // Σ_r (r + 1)·(i + 1) = (i + 1)·P(P + 1)/2, exactly in float and double; the broadcast gives
  // every process rank 0's bytes.
  const int P = world->size();
  const int r = world->rank();
  std::vector<float> f(5);
  std::vector<double> d(5);
  for (std::size_t i = 0; i < f.size(); ++i) {
    f[i] = static_cast<float>((r + 1) * static_cast<int>(i + 1));
    d[i] = static_cast<double>(f[i]);
  }
  world->sum(std::span<float>(f));
  world->sum(std::span<double>(d));
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double expected = static_cast<double>(i + 1) * P * (P + 1) / 2.0;
    CHECK(static_cast<double>(f[i]) == expected);
    CHECK(d[i] == expected);
  }
  std::vector<std::byte> bytes(7, static_cast<std::byte>(r + 10));
  world->broadcast(std::span<std::byte>(bytes), 0);
  for (const std::byte b : bytes) CHECK(b == std::byte{10});
  CHECK(coulomb::train::same_on_all(*world, 12345));
  CHECK(coulomb::train::same_on_all(*world, static_cast<std::uint64_t>(r)) == (P == 1));
  CHECK(coulomb::train::same_on_all(*world, static_cast<std::uint64_t>(r) << 60) == (P == 1));
  // Pieces that differ but sum alike (rank 0: bytes 1, 3; rank 1: bytes 2, 2) are told apart.
  CHECK(coulomb::train::same_on_all(*world, r == 0 ? 0x0301u : 0x0202u) == (P == 1));
}

TEST_CASE("MpiPhaseB_MatchesSingleProcess", "[mpi][phase_b]") {
  // Every process trains one model alone (collective nullptr) and one with the others, on the
  // same global batches (batch order and evaluation are the same on every process): the two
  // agree within float round-off, bit for bit with one process.
  coulomb::Rng rng = coulomb_test::test_rng("MpiPhaseB_MatchesSingleProcess");
  const EncodedDataset train = token_task(96, rng);
  const EncodedDataset valid = token_task(32, rng);
  PhaseBOptions options = phase_b_options(4);
  Model initial(small_config(), 7);
  Model alone(small_config(), 7);
  Model together(small_config(), 7);
  const auto h1 = coulomb::train::run_phase_b(alone, train, valid, options);
  options.collective = world;
  const auto hp = coulomb::train::run_phase_b(together, train, valid, options);

  REQUIRE(h1.steps == 35);  // 7 batches (the last of 6 sequences) × 5 epochs
  CHECK(hp.steps == h1.steps);
  CHECK(largest_difference(alone, initial) > 1e-2);  // it trained
  const double difference = largest_difference(together, alone);
  if (world->rank() == 0)
    std::printf("MpiPhaseB_MatchesSingleProcess: %d processes, largest relative difference %.3g\n",
                world->size(), difference);
  CHECK(difference <= phase_b_tolerance);
  if (world->size() == 1) CHECK(difference == 0.0);
  REQUIRE(hp.epochs.size() == h1.epochs.size());
  for (std::size_t e = 0; e < h1.epochs.size(); ++e) {
    CHECK(hp.epochs[e].train_loss == Approx(h1.epochs[e].train_loss).epsilon(1e-4));
    CHECK(hp.epochs[e].validation_loss == Approx(h1.epochs[e].validation_loss).epsilon(1e-4));
  }
}

TEST_CASE("MpiPhaseB_SummedGradientIsTheGlobalBatchGradient", "[mpi][phase_b]") {
  // One step without clipping on a batch of 15 (uneven shards): after the sum over the
  // processes every gradient is that of one process on the whole batch, to float round-off.
  coulomb::Rng rng = coulomb_test::test_rng("MpiPhaseB_SummedGradient");
  const EncodedDataset train = token_task(40, rng);
  coulomb::Batcher batcher(train, coulomb::BatcherOptions{.batch_size = 15, .shuffle = false});
  coulomb::TokenBatch batch;
  batcher.start_epoch(0);
  REQUIRE(batcher.next(batch));
  PhaseBOptions options = phase_b_options(2);
  options.clip_norm = 0.0;
  Model alone(small_config(), 5);
  Model together(small_config(), 5);
  using Stepper = coulomb::train::detail::PhaseBStepper<float, coulomb::FavorPlus<float>>;
  Stepper one(alone, options, 10, coulomb::Rng(1));
  const double loss_one = one.step(batch);
  options.collective = world;
  options.shard_optimizer = false;  // the gradients hold the sum after the step
  Stepper all(together, options, 10, coulomb::Rng(1));
  const double loss_all = all.step(batch);
  CHECK(loss_all == Approx(loss_one).epsilon(1e-5));
  const auto pa = alone.parameters();
  const auto pb = together.parameters();
  double worst = 0.0;
  for (std::size_t k = 0; k < pa.size(); ++k) {
    if (!pa[k].trainable) continue;
    const double scale = std::max(1e-3, static_cast<double>(pa[k].gradient->norm()));
    const double d = static_cast<double>((*pb[k].gradient - *pa[k].gradient).norm()) / scale;
    INFO(pa[k].name << ": relative difference " << d);
    CHECK(d <= 1e-5);
    worst = std::max(worst, d);
  }
  if (world->rank() == 0)
    std::printf("MpiPhaseB_SummedGradient: largest relative difference %.3g\n", worst);
}

TEST_CASE("MpiShardedAdamW_MatchesGradientSumAndAdamW", "[mpi][sharded]") {
  // Synthetic parameters (a token table of 100 × 24 whose gradient is non-zero on the batch's
  // rows only, and dense tensors of uneven sizes) and gradients that differ per process: 6
  // steps of ShardedAdamW against GradientSum + AdamW::step on a copy, with clipping active,
  // without clipping, and with the table summed densely (no sparse table): the parameters on
  // every process and the moments equal within round-off (bit for bit but for the clipping
  // factor's last bits), and the state exported and imported continues the same run.
  const int r = world->rank();
  for (const std::string table : {"embedding.token", ""}) {
    for (const double clip : {0.05, 0.0}) {
      INFO("table '" << table << "', clip " << clip);
      const std::vector<std::pair<Index, Index>> shapes{{100, 24}, {5, 3}, {1030, 1}, {7, 9}};
      const std::vector<std::string> names{"embedding.token", "a", "b", "c"};
      std::vector<coulomb::Matrix<float>> va, ga, vb, gb;
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        coulomb::Rng rng(100 + k);
        coulomb::Matrix<float> x(shapes[k].first, shapes[k].second);
        coulomb::fill_standard_normal(x, rng);
        va.push_back(x);
        vb.push_back(x);
        ga.push_back(coulomb::Matrix<float>::Zero(x.rows(), x.cols()));
        gb.push_back(coulomb::Matrix<float>::Zero(x.rows(), x.cols()));
      }
      coulomb::nn::ParameterList<float> pa, pb;
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        pa.push_back({names[k], &va[k], &ga[k], true, k != 1});
        pb.push_back({names[k], &vb[k], &gb[k], true, k != 1});
      }
      coulomb::train::AdamWOptions o;
      o.check_finite = false;
      coulomb::train::ShardedAdamW<float> sharded(pa, *world, o, table);
      coulomb::train::GradientSum<float> sum(pb, *world, table);
      coulomb::train::AdamW<float> full(o);
      auto gradients = [&](int step) {
        coulomb::Rng rng(1000 + 10 * static_cast<std::uint64_t>(step) +
                         static_cast<std::uint64_t>(r));
        std::vector<coulomb::TokenId> ids;
        for (int i = 0; i < 12; ++i)
          ids.push_back(static_cast<coulomb::TokenId>((7 * i + 3 * step) % 100));
        sharded.zero_gradients();
        for (std::size_t k = 0; k < shapes.size(); ++k) {
          coulomb::Matrix<float> g(shapes[k].first, shapes[k].second);
          coulomb::fill_standard_normal(g, rng);
          if (k == 0) {  // the table: the rows of this process's ids only
            coulomb::Matrix<float> sparse = coulomb::Matrix<float>::Zero(g.rows(), g.cols());
            for (int i = 6 * (r % 2); i < 6 * (r % 2) + 6; ++i)
              sparse.row(ids[static_cast<std::size_t>(i)]) += g.row(i);
            g = sparse;
          }
          ga[k] += g;
          gb[k] = g;
        }
        return ids;
      };
      for (int step = 1; step <= 6; ++step) {
        const auto ids = gradients(step);
        const double lr = 0.01 * step;
        const auto ra = sharded.step(ids, 0.5, false, clip, lr);
        const auto rb = sum.sum(ids, 0.5, false, clip);
        full.step(pb, lr);
        REQUIRE(ra.stepped);
        CHECK(ra.loss == rb.loss);
        if (clip > 0.0) CHECK(ra.norm == Approx(rb.norm).epsilon(1e-12));
        if (step == 3) {
          // Through the state: a new optimizer takes this one's state and continues it.
          const auto state = sharded.export_state();
          const auto expected = full.export_state();
          REQUIRE(state.tensors.size() == expected.tensors.size());
          for (std::size_t k = 0; k < state.tensors.size(); ++k) {
            CHECK(state.tensors[k].name == expected.tensors[k].name);
            CHECK((state.tensors[k].value - expected.tensors[k].value).cwiseAbs().maxCoeff() <=
                  1e-6f);
          }
          coulomb::train::ShardedAdamW<float> again(pa, *world, o, table);
          again.import_state(state);
          CHECK(again.step_count() == 3);
          std::swap(sharded, again);
        }
      }
      double worst = 0.0;
      for (std::size_t k = 0; k < shapes.size(); ++k) {
        const double d = static_cast<double>((va[k] - vb[k]).cwiseAbs().maxCoeff()) /
                         std::max(1.0, static_cast<double>(vb[k].cwiseAbs().maxCoeff()));
        worst = std::max(worst, d);
        CHECK(coulomb::train::same_on_all(*world, coulomb::train::parameter_hash(pa)));
      }
      CHECK(worst <= 1e-6);
      if (clip == 0.0 && world->size() <= 2) CHECK(worst == 0.0);  // a + b: the same sums
      CHECK(sharded.step_count() == 6);
      // The sparse table's gradient is left zero: the next backward adds to zeros.
      if (!table.empty()) CHECK(ga[0].isZero(0.0f));
    }
  }
}

TEST_CASE("MpiPhaseB_ShardedMatchesUnsharded", "[mpi][phase_b][sharded]") {
  // Phase B with the AdamW state sharded (the default) against the same run summing the whole
  // gradient and repeating the AdamW step on every process: 2 epochs of 7 steps, with dropout
  // and clipping; the same parameters within round-off, identical on every process.
  coulomb::Rng rng = coulomb_test::test_rng("MpiPhaseB_ShardedMatchesUnsharded");
  const EncodedDataset train = token_task(96, rng);
  TextClassifierConfig config = small_config();
  config.dropout = 0.1;
  PhaseBOptions options = phase_b_options(11);
  options.batch_size = 15;
  options.clip_norm = 0.5;
  options.collective = world;
  Model a(config, 6);
  Model b(config, 6);
  using Stepper = coulomb::train::detail::PhaseBStepper<float, coulomb::FavorPlus<float>>;
  Stepper sharded(a, options, 14, coulomb::Rng(3));
  PhaseBOptions unsharded = options;
  unsharded.shard_optimizer = false;
  Stepper whole(b, unsharded, 14, coulomb::Rng(3));
  coulomb::Batcher batcher(train,
                           coulomb::BatcherOptions{.batch_size = 15, .shuffle = true, .seed = 5});
  coulomb::TokenBatch batch;
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    batcher.start_epoch(epoch);
    while (batcher.next(batch))
      CHECK(sharded.step(batch) == Approx(whole.step(batch)).epsilon(1e-6));
  }
  CHECK(sharded.steps() == whole.steps());
  const double difference = largest_difference(a, b);
  if (world->rank() == 0)
    std::printf("MpiPhaseB_ShardedMatchesUnsharded: largest relative difference %.3g\n",
                difference);
  CHECK(difference <= 1e-6);
  CHECK(coulomb::train::same_on_all(*world, coulomb::train::parameter_hash(a.parameters())));
}

TEST_CASE("MpiPhaseB_ParametersIdenticalOnEveryRank", "[mpi][phase_b]") {
  // With dropout every process draws other masks for its own sequences, yet after the summed
  // gradient and the same AdamW step every process holds the same bits; a second run with the
  // same seed and the same number of processes gives the same bits again.
  coulomb::Rng rng = coulomb_test::test_rng("MpiPhaseB_ParametersIdentical");
  const EncodedDataset train = token_task(96, rng);
  const EncodedDataset valid = token_task(32, rng);
  TextClassifierConfig config = small_config();
  config.dropout = 0.2;
  PhaseBOptions options = phase_b_options(9);
  options.epochs = 3;
  options.batch_size = 16;
  options.collective = world;
  Model a(config, 3);
  Model b(config, 3);
  Model initial(config, 3);
  coulomb::train::run_phase_b(a, train, valid, options);
  coulomb::train::run_phase_b(b, train, valid, options);
  const std::uint64_t hash = coulomb::train::parameter_hash(a.parameters());
  CHECK(coulomb::train::same_on_all(*world, hash));
  CHECK(coulomb::train::parameter_hash(b.parameters()) == hash);
  CHECK(coulomb::train::parameter_hash(initial.parameters()) != hash);
}

TEST_CASE("MpiPhaseB_DivergenceThrowsOnEveryRank", "[mpi][phase_b][errors]") {
  // A rate this large overflows within a few steps; every process throws numerical_error at
  // the same step (none is left waiting in a sum) and keeps finite parameters.
  coulomb::Rng rng = coulomb_test::test_rng("MpiPhaseB_Divergence");
  const EncodedDataset train = token_task(64, rng);
  const EncodedDataset valid = token_task(16, rng);
  PhaseBOptions options = phase_b_options(1);
  options.epochs = 1;
  options.schedule.learning_rate = 1e36;
  options.schedule.warmup_steps = 0;
  options.clip_norm = 0.0;
  options.optimizer.weight_decay = 0.0;
  options.collective = world;
  Model model(small_config(), 3);
  CHECK_THROWS_AS(coulomb::train::run_phase_b(model, train, valid, options),
                  coulomb::numerical_error);
  CHECK_NOTHROW(coulomb::train::require_finite_parameters(model.parameters(), -1,
                                                          coulomb::train::FiniteCheck::values));
  CHECK(coulomb::train::same_on_all(*world, coulomb::train::parameter_hash(model.parameters())));
}

/// A directory of checkpoints that every process of the run names alike (rank 0's process id,
/// broadcast; the processes of one machine share it): made by rank 0 and removed at the end.
class SharedTemporaryDirectory {
 public:
  SharedTemporaryDirectory() {
    std::uint64_t id = world->rank() == 0 ? static_cast<std::uint64_t>(::getpid()) : 0;
    // The broadcast comes after rank 0 made the directory, so every process finds it.
    const std::string base = "coulomb_mpi_checkpoints_" + std::to_string(world->size()) + "_";
    if (world->rank() == 0) {
      path_ = std::filesystem::temp_directory_path() / (base + std::to_string(id));
      std::filesystem::create_directories(path_);
    }
    world->broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&id, 1)), 0);
    path_ = std::filesystem::temp_directory_path() / (base + std::to_string(id));
  }
  SharedTemporaryDirectory(const SharedTemporaryDirectory&) = delete;
  SharedTemporaryDirectory& operator=(const SharedTemporaryDirectory&) = delete;
  ~SharedTemporaryDirectory() {
    double done[1] = {1.0};
    world->sum(std::span<double>(done));  // every process is done with the files
    std::error_code ec;
    if (world->rank() == 0) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// Thrown by a checkpoint observer to stop a run, as a killed job stops.
struct Interrupted {};

/// Phase B of the resume tests: 2 epochs of 3 batches of 16 (6 steps), dropout (whose masks
/// depend on the rank and the step), validation with early stopping, checkpoints every 2 steps.
struct ResumeSetup {
  ResumeSetup() : rng(coulomb_test::test_rng("MpiPhaseB_Resume")) {
    train = token_task(48, rng);
    valid = token_task(16, rng);
    config = small_config();
    config.dropout = 0.2;
    options = phase_b_options(11);
    options.epochs = 2;
    options.batch_size = 16;
    options.early_stopping.patience = 2;
    options.early_stopping.restore_best = true;
    options.collective = world;
  }
  coulomb::Rng rng;
  EncodedDataset train;
  EncodedDataset valid;
  TextClassifierConfig config;
  PhaseBOptions options;
};

TEST_CASE("MpiPhaseB_ResumeEqualsUninterrupted", "[mpi][phase_b][checkpoint]") {
  // A run with checkpoints every 2 steps, stopped at step 5 on every process (after the
  // checkpoint of step 4, which rank 0 wrote), then resumed from that checkpoint by every
  // process: its final parameters are those of the run never interrupted (and never
  // checkpointed), bit for bit, on every process.
  ResumeSetup s;
  const SharedTemporaryDirectory dir;
  Model uninterrupted(s.config, 4);
  const auto h_full = coulomb::train::run_phase_b(uninterrupted, s.train, s.valid, s.options);
  REQUIRE(h_full.steps == 6);
  const std::uint64_t expected = coulomb::train::parameter_hash(uninterrupted.parameters());

  PhaseBOptions options = s.options;
  options.checkpoint.path = dir.file("phase_b.ckpt");
  options.checkpoint.every_steps = 2;
  Index saved = 0;
  options.checkpoint.observer = [&](const coulomb::train::CheckpointEvent& e) {
    if (e.kind == coulomb::train::CheckpointEventKind::saved) saved = e.step;
    if (e.kind == coulomb::train::CheckpointEventKind::step && e.step == 5) throw Interrupted{};
  };
  Model first(s.config, 4);
  CHECK_THROWS_AS(coulomb::train::run_phase_b(first, s.train, s.valid, options), Interrupted);
  CHECK(saved == 4);  // every process was told of rank 0's checkpoint
  CHECK(std::filesystem::exists(options.checkpoint.path));
  CHECK(std::filesystem::exists(options.checkpoint.path + ".tmp") == false);

  options.checkpoint.resume = true;
  std::vector<Index> steps;  // the steps the resumed run takes: 5 and 6, not from the start
  options.checkpoint.observer = [&](const coulomb::train::CheckpointEvent& e) {
    if (e.kind == coulomb::train::CheckpointEventKind::step) steps.push_back(e.step);
  };
  Model resumed(s.config, 4);
  const auto h = coulomb::train::run_phase_b(resumed, s.train, s.valid, options);
  CHECK(steps == std::vector<Index>{5, 6});
  options.checkpoint.observer = nullptr;
  CHECK(h.steps == h_full.steps);
  CHECK(h.best_epoch == h_full.best_epoch);
  const std::uint64_t hash = coulomb::train::parameter_hash(resumed.parameters());
  CHECK(hash == expected);
  CHECK(coulomb::train::same_on_all(*world, hash));
  CHECK(hash != coulomb::train::parameter_hash(first.parameters()));  // first stopped early

  // Resuming the finished run returns its final parameters at once.
  Model again(s.config, 4);
  coulomb::train::run_phase_b(again, s.train, s.valid, options);
  CHECK(coulomb::train::parameter_hash(again.parameters()) == expected);

  if (world->size() > 1) {
    // The number of processes is part of the run: one process alone refuses the checkpoint of
    // P, naming both (no collective call here: each process tries on its own).
    PhaseBOptions alone = options;
    alone.collective = nullptr;
    Model model(s.config, 4);
    const std::string P = std::to_string(world->size());
    CHECK_THROWS_WITH(
        coulomb::train::run_phase_b(model, s.train, s.valid, alone),
        Catch::Contains("processes is '" + P + "' in the checkpoint, '1' in this run"));
  }
}

TEST_CASE("MpiPhaseB_CheckpointFailuresOnEveryRank", "[mpi][phase_b][checkpoint][errors]") {
  // Failures of the checkpoints make every process throw the same io_error, none is left
  // waiting: a checkpoint rank 0 cannot write; a checkpoint that only some processes find; one
  // that one process cannot read.
  ResumeSetup s;
  const SharedTemporaryDirectory dir;
  const int P = world->size();
  const std::string processes = " of " + std::to_string(P) + ": ";
  PhaseBOptions options = s.options;
  options.checkpoint.every_steps = 2;

  options.checkpoint.path = dir.file("no-such-directory/phase_b.ckpt");
  Model unwritable(s.config, 4);
  CHECK_THROWS_AS(coulomb::train::run_phase_b(unwritable, s.train, s.valid, options),
                  coulomb::io_error);
  if (P > 1) {
    CHECK_THROWS_WITH(
        coulomb::train::run_phase_b(unwritable, s.train, s.valid, options),
        Catch::Contains("process 0" + processes) && Catch::Contains("no-such-directory"));
  }

  // A checkpoint of the run (stopped after its first one, at step 2).
  const std::string good = dir.file("phase_b.ckpt");
  options.checkpoint.path = good;
  options.checkpoint.observer = [](const coulomb::train::CheckpointEvent& e) {
    if (e.kind == coulomb::train::CheckpointEventKind::saved) throw Interrupted{};
  };
  Model first(s.config, 4);
  CHECK_THROWS_AS(coulomb::train::run_phase_b(first, s.train, s.valid, options), Interrupted);
  options.checkpoint.observer = nullptr;
  options.checkpoint.resume = true;
  if (P == 1) return;

  // Rank 0 finds its checkpoint, the others look elsewhere and find none.
  options.checkpoint.path = world->rank() == 0 ? good : dir.file("elsewhere.ckpt");
  Model some(s.config, 4);
  CHECK_THROWS_WITH(coulomb::train::run_phase_b(some, s.train, s.valid, options),
                    Catch::Contains("exists on process 0 but not on process") &&
                        Catch::Contains("visible to every process"));

  // The last rank reads a damaged copy (its first half): every process throws its io_error.
  const std::string damaged = dir.file("damaged.ckpt");
  if (world->rank() == 0) {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(damaged, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  double written[1] = {1.0};
  world->sum(std::span<double>(written));  // the copy exists before anyone reads it
  options.checkpoint.path = world->rank() == P - 1 ? damaged : good;
  Model one(s.config, 4);
  CHECK_THROWS_AS(coulomb::train::run_phase_b(one, s.train, s.valid, options), coulomb::io_error);
  Model other(s.config, 4);
  CHECK_THROWS_WITH(coulomb::train::run_phase_b(other, s.train, s.valid, options),
                    Catch::Contains("process " + std::to_string(P - 1) + processes) &&
                        Catch::Contains("damaged.ckpt"));
}

TEST_CASE("MpiPhaseA_ResumeEqualsUninterrupted", "[mpi][phase_a][checkpoint]") {
  // Phase A with a warm-up, stopped during the warm-up (after its checkpoint of step 4) and
  // resumed by every process: the same model as the run never interrupted, bit for bit.
  coulomb::Rng rng = coulomb_test::test_rng("MpiPhaseA_Resume");
  const EncodedDataset train = token_task(48, rng);
  const SharedTemporaryDirectory dir;
  PhaseAOptions options;
  options.representation = PhaseARepresentation::warmup;
  options.num_sequences = 32;
  options.warmup.steps = 6;
  options.warmup.training.batch_size = 16;
  options.warmup.training.schedule.learning_rate = 1e-2;
  options.langevin.max_iterations = 10;
  options.schedule.step_size = 0.05;
  options.repulsion = 1e-3;
  options.seed = 3;
  options.collective = world;
  TextClassifierConfig config = small_config();
  config.dropout = 0.2;
  Model uninterrupted(config, 5);
  coulomb::train::run_phase_a(uninterrupted, train, options);
  const std::uint64_t expected = coulomb::train::parameter_hash(uninterrupted.parameters());

  options.checkpoint.path = dir.file("phase_a.ckpt");
  options.checkpoint.every_steps = 2;
  options.checkpoint.observer = [](const coulomb::train::CheckpointEvent& e) {
    if (e.kind == coulomb::train::CheckpointEventKind::step && e.stage == "warmup" && e.step == 5)
      throw Interrupted{};
  };
  Model first(config, 5);
  CHECK_THROWS_AS(coulomb::train::run_phase_a(first, train, options), Interrupted);
  options.checkpoint.resume = true;
  Index first_step = -1;  // the first warm-up step of the resumed run: 5, not 1
  options.checkpoint.observer = [&](const coulomb::train::CheckpointEvent& e) {
    if (e.kind == coulomb::train::CheckpointEventKind::step && e.stage == "warmup" &&
        first_step < 0)
      first_step = e.step;
  };
  Model resumed(config, 5);
  coulomb::train::run_phase_a(resumed, train, options);
  CHECK(first_step == 5);
  const std::uint64_t hash = coulomb::train::parameter_hash(resumed.parameters());
  CHECK(hash == expected);
  CHECK(coulomb::train::same_on_all(*world, hash));
}

TEST_CASE("MpiEvaluation_ShardedEqualsSingleProcess", "[mpi][evaluation]") {
  // The processes share the batches of the evaluation and sum the probabilities: every process
  // gets one process's probabilities and metrics bit for bit, also when some process has no
  // batch (one batch of 64 for 37 sequences).
  coulomb::Rng rng = coulomb_test::test_rng("MpiEvaluation_Sharded");
  const EncodedDataset valid = token_task(37, rng);
  Model model(small_config(), 12);
  for (const Index batch_size : {Index{8}, Index{64}}) {
    INFO("batch size " << batch_size);
    coulomb::train::EvaluationOptions options;
    options.batch_size = batch_size;
    coulomb::train::Evaluator<float> alone(options);
    options.collective = world;
    coulomb::train::Evaluator<float> together(options);
    const coulomb::Matrix<float> p1 = alone.probabilities(model, valid);
    const coulomb::Matrix<float> pp = together.probabilities(model, valid);
    CHECK(pp == p1);
    const auto e1 = alone.evaluate(model, valid).metrics;
    const auto ep = together.evaluate(model, valid).metrics;
    CHECK(ep.accuracy == e1.accuracy);
    CHECK(ep.log_loss == e1.log_loss);
    CHECK(ep.mcc == e1.mcc);
    CHECK(ep.f1 == e1.f1);
    CHECK(ep.ece == e1.ece);
    CHECK(ep.brier == e1.brier);
  }
}

TEST_CASE("MpiPhaseA_OmegaIdenticalOnEveryRank", "[mpi][phase_a]") {
  // Phase A (a data-parallel warm-up, then Langevin dynamics on the alignment summed over the
  // processes' rows): Ω is the same bit for bit on every process and equals one process's Ω
  // within round-off; with the initial representations (no warm-up) too.
  coulomb::Rng rng = coulomb_test::test_rng("MpiPhaseA_Omega");
  const EncodedDataset train = token_task(96, rng);
  for (const PhaseARepresentation representation :
       {PhaseARepresentation::initial, PhaseARepresentation::warmup}) {
    const bool warm = representation == PhaseARepresentation::warmup;
    INFO("representation " << (warm ? "warmup" : "initial"));
    PhaseAOptions options;
    options.representation = representation;
    options.num_sequences = 64;
    options.warmup.steps = 12;
    options.warmup.training.batch_size = 15;
    options.warmup.training.schedule.learning_rate = 1e-2;
    options.langevin.max_iterations = 40;
    // A step small enough for the dynamics to be stable: at 0.5 the warmed-up representations
    // make them amplify round-off (1e-7 after 5 steps, 1e-3 after 20, O(1) after 40, measured),
    // as any change of summation order would.
    options.schedule.step_size = 0.05;
    options.repulsion = 1e-3;
    options.seed = 6;
    TextClassifierConfig config = small_config();
    config.num_layers = 2;  // one Ω per layer (shared_omega is false)
    Model initial(config, 8);
    Model alone(config, 8);
    Model together(config, 8);
    const auto r1 = coulomb::train::run_phase_a(alone, train, options);
    options.collective = world;
    const auto rp = coulomb::train::run_phase_a(together, train, options);
    REQUIRE(alone.num_omegas() == 2);
    double worst = 0.0;
    for (Index k = 0; k < alone.num_omegas(); ++k) {
      const coulomb::Matrix<float>& o1 = alone.omega(k);
      const coulomb::Matrix<float>& op = together.omega(k);
      CHECK_FALSE(o1 == initial.omega(k));  // it moved
      coulomb::Matrix<float> copy = op;
      const coulomb::nn::ParameterList<float> as_list{{.name = "omega", .value = &copy}};
      CHECK(coulomb::train::same_on_all(*world, coulomb::train::parameter_hash(as_list)));
      const double scale = static_cast<double>(o1.cwiseAbs().maxCoeff());
      worst = std::max(worst, static_cast<double>((op - o1).cwiseAbs().maxCoeff()) / scale);
    }
    if (world->rank() == 0)
      std::printf("MpiPhaseA_Omega (%s): largest relative difference %.3g\n",
                  warm ? "warmup" : "initial", worst);
    CHECK(worst <= phase_a_tolerance);
    if (world->size() == 1) CHECK(worst == 0.0);
    CHECK(
        coulomb::train::same_on_all(*world, coulomb::train::parameter_hash(together.parameters())));
    REQUIRE(rp.omegas.size() == r1.omegas.size());
    for (std::size_t k = 0; k < r1.omegas.size(); ++k) {
      CHECK(rp.omegas[k].samples == r1.omegas[k].samples);
      CHECK(rp.omegas[k].energy_after == Approx(r1.omegas[k].energy_after).epsilon(1e-3));
    }
  }
}

TEST_CASE("MpiPhaseA_MinibatchesRefused", "[mpi][phase_a][errors]") {
  PhaseAOptions options;
  options.langevin.batch_size = 16;
  options.collective = world;
  if (world->size() > 1) CHECK_THROWS_AS(options.validate(), coulomb::invalid_argument);
  options.collective = nullptr;
  CHECK_NOTHROW(options.validate());
}

}  // namespace mpi_training_test

int main(int argc, char* argv[]) {
  // MPI first (it may take its own arguments), then Catch; the exit status is non-zero on every
  // process when a check failed on any.
  coulomb::mpi::Environment environment(&argc, &argv);
  coulomb::mpi::Communicator world;
  mpi_training_test::world = &world;
  Catch::Session session;
  const int parse_status = session.applyCommandLine(argc, argv);
  if (parse_status != 0) return parse_status;
  if (world.rank() == 0)
    std::printf("mpi_training_tests: %d processes, base seed %llu\n", world.size(),
                static_cast<unsigned long long>(coulomb_test::base_seed()));
  const int failures = session.run();
  double any = failures > 0 ? 1.0 : 0.0;
  world.sum(std::span<double>(&any, 1));
  return any > 0.0 ? 1 : 0;
}
