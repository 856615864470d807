// SPDX-License-Identifier: MIT
// Phase A and Phase B of the text classifier (train/phase_a.hpp, train/phase_b.hpp) on a small
// synthetic token task (label = whether token X occurs): the trainer learns it with linear
// (FAVOR+) and softmax attention; a frozen Ω stays bit-identical through Phase B; the same seed
// gives the same bits; the best epoch is restored; divergence is reported with the step and the
// parameter; Phase A lowers the Hamiltonian, changes Ω, keeps it in the ball and freezes it; the
// whole pipeline is reproducible; callbacks see every step and change nothing; the evaluation
// does not depend on the batch size; bad options are refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <coulomb/features/favor.hpp>
#include <coulomb/particles/callbacks.hpp>
#include <coulomb/particles/langevin.hpp>
#include <coulomb/train/phase_a.hpp>
#include <coulomb/train/phase_b.hpp>

#include "test_support.hpp"
#include "train_token_task.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace train_text_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::EncodedDataset;
using coulomb::Index;
using coulomb::nn::AttentionKind;
using coulomb::nn::TextClassifierConfig;
using coulomb::train::PhaseAOptions;
using coulomb::train::PhaseARepresentation;
using coulomb::train::PhaseBOptions;
using Model = coulomb::nn::TextClassifier<coulomb::FavorPlus<float>>;

using coulomb_train_test::marker;
using coulomb_train_test::small_config;
using coulomb_train_test::token_task;
using coulomb_train_test::vocab;

PhaseBOptions fast_options(std::uint64_t seed) {
  PhaseBOptions o;
  o.epochs = 12;
  o.batch_size = 16;
  o.schedule.learning_rate = 1e-2;
  o.schedule.warmup_fraction = 0.05;
  o.early_stopping.patience = 0;
  o.seed = seed;
  return o;
}

PhaseAOptions phase_a_options(std::uint64_t seed, PhaseARepresentation representation) {
  PhaseAOptions o;
  o.representation = representation;
  o.num_sequences = 96;
  o.warmup.steps = 20;
  o.warmup.training.batch_size = 16;
  o.warmup.training.schedule.learning_rate = 1e-2;
  o.langevin.max_iterations = 60;
  o.schedule.step_size = 0.5;
  o.repulsion = 1e-3;
  o.seed = seed;
  return o;
}

/// A copy of the parameter called `name`.
coulomb::Matrix<float> value_of(Model& model, const std::string& name) {
  for (const auto& p : model.parameters())
    if (p.name == name) return *p.value;
  FAIL("no parameter " << name);
  return {};
}

/// Whether two models hold exactly the same parameters (names, shapes and bits).
bool same_parameters(Model& a, Model& b) {
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (std::size_t k = 0; k < pa.size(); ++k) {
    if (pa[k].name != pb[k].name) return false;
    if (!(*pa[k].value == *pb[k].value)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("PhaseB_LearnsTokenPresence_LinearAndSoftmax", "[train][phase_b]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseB_LearnsTokenPresence");
  const EncodedDataset train = token_task(256, rng);
  const EncodedDataset valid = token_task(128, rng);
  PhaseBOptions options = fast_options(3);
  options.epochs = 6;  // 96 steps
  for (const AttentionKind attention : {AttentionKind::linear, AttentionKind::softmax}) {
    INFO("attention " << (attention == AttentionKind::linear ? "linear (FAVOR+)" : "softmax"));
    Model model(small_config(attention), 11);
    const double before = coulomb::train::evaluate_model(model, valid).metrics.accuracy;
    const auto history = coulomb::train::run_phase_b(model, train, valid, options);
    const auto after = coulomb::train::evaluate_model(model, valid).metrics;
    INFO("accuracy before " << before << ", after " << after.accuracy);
    CHECK(after.accuracy >= 0.95);
    CHECK(history.epochs.back().train_loss < 0.5 * history.epochs.front().train_loss);
    CHECK(history.steps == 6 * 16);
    CHECK(history.tokens_per_second() > 0.0);
  }
}

TEST_CASE("PhaseB_FrozenOmegaStaysBitIdentical", "[train][phase_b]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseB_FrozenOmega");
  const EncodedDataset train = token_task(96, rng);
  const EncodedDataset valid = token_task(32, rng);
  TextClassifierConfig config = small_config();
  config.num_layers = 2;
  config.dropout = 0.1;
  Model model(config, 5);
  REQUIRE_FALSE(model.omega_trainable());
  const coulomb::Matrix<float> omega0 = model.omega(0);
  const coulomb::Matrix<float> omega1 = model.omega(1);
  const coulomb::Matrix<float> w_q = value_of(model, "encoder.0.attention.w_q");
  PhaseBOptions options = fast_options(1);
  options.epochs = 2;
  coulomb::train::run_phase_b(model, train, valid, options);
  CHECK(model.omega(0) == omega0);
  CHECK(model.omega(1) == omega1);
  CHECK(model.feature_map(0).omega() == omega0);
  CHECK(model.feature_map(1).omega() == omega1);
  CHECK_FALSE(value_of(model, "encoder.0.attention.w_q") == w_q);  // the rest did train
}

TEST_CASE("PhaseB_SameSeedSameBits", "[train][phase_b]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseB_SameSeed");
  const EncodedDataset train = token_task(96, rng);
  const EncodedDataset valid = token_task(32, rng);
  TextClassifierConfig config = small_config();
  config.dropout = 0.2;
  PhaseBOptions options = fast_options(9);
  options.epochs = 2;
  Model a(config, 2);
  Model b(config, 2);
  Model c(config, 2);
  const auto ha = coulomb::train::run_phase_b(a, train, valid, options);
  const auto hb = coulomb::train::run_phase_b(b, train, valid, options);
  CHECK(same_parameters(a, b));
  REQUIRE(ha.epochs.size() == hb.epochs.size());
  for (std::size_t e = 0; e < ha.epochs.size(); ++e) {
    CHECK(ha.epochs[e].train_loss == hb.epochs[e].train_loss);
    CHECK(ha.epochs[e].validation_loss == hb.epochs[e].validation_loss);
  }
  options.seed = 10;  // another batch order and other dropout masks
  coulomb::train::run_phase_b(c, train, valid, options);
  CHECK_FALSE(same_parameters(a, c));
}

TEST_CASE("PhaseB_QuietReporterPrintsNoEpochLines", "[train][phase_b][progress]") {
  // Phase B reports every epoch through ProgressReporter::message; a reporter in mode off with
  // messages off (a tool's -q) prints nothing, one with messages on prints a line per epoch.
  coulomb::Rng rng = coulomb_test::test_rng("PhaseB_Quiet");
  const EncodedDataset train = token_task(32, rng);
  const EncodedDataset valid = token_task(16, rng);
  PhaseBOptions options = fast_options(3);
  options.epochs = 2;
  for (const bool messages : {false, true}) {
    std::ostringstream out;
    coulomb::train::ProgressReporter progress(
        out, 0, {.mode = coulomb::train::ProgressMode::off, .messages = messages});
    options.progress = &progress;
    Model model(small_config(), 1);
    (void)coulomb::train::run_phase_b(model, train, valid, options);
    if (messages)
      CHECK_THAT(out.str(), Contains("epoch 1/2: train loss") && Contains("epoch 2/2"));
    else
      CHECK(out.str().empty());
  }
}

TEST_CASE("PhaseB_RestoresTheBestEpoch", "[train][phase_b]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseB_RestoresBest");
  const EncodedDataset train = token_task(96, rng);
  const EncodedDataset valid = token_task(48, rng);
  PhaseBOptions options = fast_options(4);
  options.epochs = 6;
  options.early_stopping.patience = 2;
  options.early_stopping.metric = coulomb::train::ValidationMetric::log_loss;
  options.schedule.learning_rate = 3e-2;  // noisy enough that the last epoch is often not the best
  Model model(small_config(), 8);
  const auto history = coulomb::train::run_phase_b(model, train, valid, options);
  REQUIRE(history.best_epoch >= 0);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& e : history.epochs) best = std::min(best, e.validation_loss);
  const auto& chosen = history.epochs[static_cast<std::size_t>(history.best_epoch)];
  CHECK(chosen.validation_loss == best);
  CHECK(history.best_metric == best);
  // The model holds the parameters of that epoch: evaluating it gives the recorded figures.
  const auto now = coulomb::train::evaluate_model(model, valid).metrics;
  CHECK(now.log_loss == chosen.validation_loss);
  CHECK(now.accuracy == chosen.validation_accuracy);
  // Stopping: at most `patience` epochs after the best one.
  CHECK(static_cast<Index>(history.epochs.size()) <=
        history.best_epoch + 1 + options.early_stopping.patience);
}

TEST_CASE("PhaseB_DivergenceNamesStepAndParameter", "[train][phase_b][errors]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseB_Divergence");
  const EncodedDataset train = token_task(64, rng);
  const EncodedDataset valid = token_task(16, rng);
  PhaseBOptions options = fast_options(1);
  options.epochs = 1;
  {
    Model model(small_config(), 3);
    for (auto& p : model.parameters())
      if (p.name == "classifier.bias") (*p.value)(1, 0) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THROWS_AS(coulomb::train::run_phase_b(model, train, valid, options),
                    coulomb::numerical_error);
    CHECK_THROWS_WITH(coulomb::train::run_phase_b(model, train, valid, options),
                      Contains("step 1") && Contains("'classifier.bias'"));
  }
  {
    // A rate this large overflows the parameters' magnitudes within a few steps: training must
    // stop with a numerical_error and leave finite parameters (those of the last finite step).
    Model model(small_config(), 3);
    options.schedule.learning_rate = 1e36;
    options.schedule.warmup_steps = 0;
    options.clip_norm = 0.0;
    options.optimizer.weight_decay = 0.0;
    CHECK_THROWS_AS(coulomb::train::run_phase_b(model, train, valid, options),
                    coulomb::numerical_error);
    CHECK_NOTHROW(coulomb::train::require_finite_parameters(model.parameters(), -1,
                                                            coulomb::train::FiniteCheck::values));
  }
}

TEST_CASE("PhaseB_EvaluationIndependentOfBatchSize", "[train][evaluation]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseB_Evaluation");
  const EncodedDataset data = token_task(50, rng);
  Model model(small_config(), 6);
  coulomb::train::Evaluator<float> big({.batch_size = 128});
  coulomb::train::Evaluator<float> small({.batch_size = 7});
  const coulomb::Matrix<float> p = big.probabilities(model, data);
  const coulomb::Matrix<float>& q = small.probabilities(model, data);
  REQUIRE(p.rows() == 50);
  REQUIRE(p.cols() == 2);
  CHECK((p.rowwise().sum().array() - 1.0f).abs().maxCoeff() < 1e-5f);
  CHECK((p - q).cwiseAbs().maxCoeff() < 1e-5f);
  const auto e = big.evaluate(model, data);
  CHECK(e.metrics.count == 50);
  CHECK(e.metrics.accuracy == coulomb::accuracy(p, std::span<const int>(data.labels)));
}

TEST_CASE("PhaseA_LowersEnergyChangesOmegaStaysInBall", "[train][phase_a]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseA_LowersEnergy");
  const EncodedDataset train = token_task(128, rng);
  for (const auto representation : {PhaseARepresentation::initial, PhaseARepresentation::warmup}) {
    INFO("representation " << coulomb::train::to_string(representation));
    TextClassifierConfig config = small_config();
    config.num_layers = 2;
    Model model(config, 21);
    const coulomb::Matrix<float> omega0 = model.omega(0);
    const auto report =
        coulomb::train::run_phase_a(model, train, phase_a_options(2, representation));
    REQUIRE(report.omegas.size() == 2);
    CHECK(report.sequences == 96);
    CHECK(report.warmup_steps == (representation == PhaseARepresentation::warmup ? 20 : 0));
    for (const auto& r : report.omegas) {
      INFO("omega " << r.omega << ": H " << r.energy_before << " -> " << r.energy_after
                    << ", alignment " << r.normalized_alignment_before << " -> "
                    << r.normalized_alignment_after);
      CHECK(r.samples == 2 * 96);  // two heads per layer
      CHECK(r.energy_after < r.energy_before);
      CHECK(r.relative_change > 1e-3);
      const coulomb::BallProjection ball{r.radius};
      CHECK(ball.contains(model.omega(r.omega)));
    }
    CHECK(report.energy_after < report.energy_before);
    CHECK_FALSE(model.omega(0) == omega0);
    CHECK(model.feature_map(0).omega() == model.omega(0));
    CHECK_FALSE(model.omega_trainable());
  }
}

TEST_CASE("PhaseA_SharedOmegaStacksEveryLayer", "[train][phase_a]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseA_Shared");
  const EncodedDataset train = token_task(64, rng);
  TextClassifierConfig config = small_config();
  config.num_layers = 2;
  config.shared_omega = true;
  Model model(config, 4);
  PhaseAOptions options = phase_a_options(3, PhaseARepresentation::initial);
  options.num_sequences = 0;  // all of them
  const auto report = coulomb::train::run_phase_a(model, train, options);
  REQUIRE(report.omegas.size() == 1);
  CHECK(report.sequences == 64);
  CHECK(report.omegas[0].samples == 2 * 2 * 64);  // layers × heads × sequences
  CHECK(report.omegas[0].energy_after < report.omegas[0].energy_before);
}

TEST_CASE("PhaseAB_PipelineIsSeedReproducible", "[train][phase_a][phase_b]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseAB_Reproducible");
  const EncodedDataset train = token_task(96, rng);
  const EncodedDataset valid = token_task(32, rng);
  TextClassifierConfig config = small_config();
  config.dropout = 0.1;
  auto run = [&](Model& model, std::uint64_t seed) {
    PhaseAOptions a = phase_a_options(seed, PhaseARepresentation::warmup);
    a.langevin.beta = 1e4;  // with Langevin noise
    a.langevin.batch_size = 64;
    a.warmup.training.seed = seed + 1;
    coulomb::train::run_phase_a(model, train, a);
    PhaseBOptions b = fast_options(seed + 2);
    b.epochs = 1;
    coulomb::train::run_phase_b(model, train, valid, b);
  };
  Model a(config, 1);
  Model b(config, 1);
  Model c(config, 1);
  run(a, 7);
  run(b, 7);
  run(c, 8);
  CHECK(same_parameters(a, b));
  CHECK_FALSE(same_parameters(a, c));
}

namespace {

/// A run_phase_b callback that records what it is shown.
struct PhaseBRecorder {
  Index total = -1;
  std::vector<Index> steps{};
  std::vector<double> losses{};
  std::vector<Index> epochs{};
  Index ended_with_steps = -1;

  void begin_training(Index total_steps) { total = total_steps; }
  void step_taken(const coulomb::train::PhaseBStep& s) {
    steps.push_back(s.step);
    losses.push_back(s.loss);
  }
  void epoch_finished(const coulomb::train::EpochRecord& e) { epochs.push_back(e.epoch); }
  void end_training(const coulomb::train::PhaseBHistory& h) { ended_with_steps = h.steps; }
};

}  // namespace

TEST_CASE("PhaseAB_CallbacksSeeEveryStepAndChangeNothing", "[train][phase_a][phase_b]") {
  // run_phase_a hands its callbacks to every Ω's Langevin run; run_phase_b calls each hook a
  // callback has. Neither changes a bit of the result.
  coulomb::Rng rng = coulomb_test::test_rng("PhaseAB_Callbacks");
  const EncodedDataset train = token_task(64, rng);
  const EncodedDataset valid = token_task(16, rng);
  TextClassifierConfig config = small_config();
  config.num_layers = 2;
  config.dropout = 0.1;
  const PhaseAOptions a = phase_a_options(5, PhaseARepresentation::initial);
  PhaseBOptions b = fast_options(6);
  b.epochs = 2;

  Model plain(config, 3);
  const auto plain_a = coulomb::train::run_phase_a(plain, train, a);
  const auto plain_b = coulomb::train::run_phase_b(plain, train, valid, b);

  Model observed(config, 3);
  coulomb::EnergyLog log;
  const auto observed_a = coulomb::train::run_phase_a(observed, train, a, log);
  PhaseBRecorder recorder;
  const auto observed_b = coulomb::train::run_phase_b(observed, train, valid, b, recorder);
  CHECK(same_parameters(plain, observed));

  // Two Ω, 60 steps each; the energies are those before each step, so the first one of each
  // run is the report's H before.
  REQUIRE(log.energy.size() == 2 * 60);
  REQUIRE(observed_a.omegas.size() == 2);
  CHECK(log.energy[0] == Approx(observed_a.omegas[0].energy_before).epsilon(1e-4));
  CHECK(log.energy[60] == Approx(observed_a.omegas[1].energy_before).epsilon(1e-4));
  CHECK(observed_a.energy_after == plain_a.energy_after);

  CHECK(recorder.total == plain_b.steps);
  REQUIRE(recorder.steps.size() == static_cast<std::size_t>(plain_b.steps));
  for (std::size_t i = 0; i < recorder.steps.size(); ++i)
    CHECK(recorder.steps[i] == static_cast<Index>(i) + 1);
  CHECK(recorder.epochs == std::vector<Index>{0, 1});
  CHECK(recorder.ended_with_steps == observed_b.steps);
  double first_epoch_loss = 0.0;
  for (Index i = 0; i < observed_b.epochs[0].steps; ++i)
    first_epoch_loss += recorder.losses[static_cast<std::size_t>(i)];
  CHECK(first_epoch_loss / static_cast<double>(observed_b.epochs[0].steps) ==
        Approx(observed_b.epochs[0].train_loss).epsilon(1e-12));
}

TEST_CASE("PhaseAB_BadOptionsAreRefused", "[train][errors]") {
  coulomb::Rng rng = coulomb_test::test_rng("PhaseAB_BadOptions");
  const EncodedDataset train = token_task(16, rng);
  PhaseBOptions b;
  b.epochs = 0;
  CHECK_THROWS_WITH(b.validate(), Contains("'epochs'"));
  b = PhaseBOptions{};
  b.schedule.final_learning_rate = 1.0;
  CHECK_THROWS_WITH(b.validate(), Contains("'schedule.final_learning_rate'"));
  b = PhaseBOptions{};
  b.clip_norm = -1.0;
  CHECK_THROWS_AS(b.validate(), coulomb::invalid_argument);
  PhaseAOptions a;
  a.schedule.step_size = 0.0;
  CHECK_THROWS_WITH(a.validate(), Contains("'schedule.step_size'"));
  a = PhaseAOptions{};
  a.projection.radius_factor = 0.5;
  CHECK_THROWS_WITH(a.validate(), Contains("'projection.radius_factor'"));
  CHECK_THROWS_WITH(coulomb::train::phase_a_representation_from_string("final"),
                    Contains("initial or warmup"));
  Model softmax(small_config(AttentionKind::softmax), 1);
  CHECK_THROWS_WITH(coulomb::train::run_phase_a(softmax, train, PhaseAOptions{}),
                    Contains("softmax attention"));
  Model linear(small_config(), 1);
  const EncodedDataset empty;
  CHECK_THROWS_WITH(coulomb::train::run_phase_b(linear, empty, empty, PhaseBOptions{}),
                    Contains("'train' is empty"));
}

}  // namespace train_text_test
