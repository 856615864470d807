// SPDX-License-Identifier: MIT
// Phase A of the sequence model (train/sequence_phase_a.hpp) on small MQAR and ListOps splits,
// for both choices of representations (pooled, query): the alignment energy of the collected
// representations, recomputed here from its definition's pieces, is lower at the learned Ω than
// at the initial one; the model holds the learned Ω, frozen; the same seed gives the same bits;
// the rows per Ω are what the choice says; bad input throws invalid_argument naming the problem
// and leaves Ω unchanged.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <coulomb/core/error.hpp>
#include <coulomb/data/listops.hpp>
#include <coulomb/data/mqar.hpp>
#include <coulomb/features/favor.hpp>
#include <coulomb/particles/alignment.hpp>
#include <coulomb/train/sequence_phase_a.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace train_sequence_phase_a_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::nn::AttentionKind;
using coulomb::nn::SequenceHead;
using coulomb::nn::SequenceModelConfig;
using coulomb::train::SequencePhaseAOptions;
using coulomb::train::SequencePhaseATargets;
using Map = coulomb::FavorPlus<float>;
using Model = coulomb::nn::SequenceModel<Map>;
using MatrixF = coulomb::Matrix<float>;

coulomb::data::SequenceSplits small_mqar(std::uint64_t seed) {
  coulomb::data::MqarOptions o = coulomb::data::MqarOptions::zoology(16, 3);
  o.vocabulary_size = 40;
  o.num_train = 24;
  o.num_dev = 4;
  o.num_test = 4;
  return coulomb::data::generate_mqar(o, seed);
}

coulomb::data::SequenceSplits small_listops(std::uint64_t seed) {
  coulomb::data::ListOpsOptions o;
  o.num_train = 24;
  o.num_dev = 4;
  o.num_test = 4;
  o.min_length = 6;
  o.max_length = 20;
  o.max_depth = 3;
  o.max_args = 4;
  return coulomb::data::generate_listops(o, seed);
}

SequenceModelConfig config_for(const coulomb::data::TokenSequenceDataset& train,
                               SequenceHead head) {
  SequenceModelConfig c;
  c.vocab_size = train.vocabulary_size;
  c.max_length = train.max_length();
  c.d_model = 8;
  c.num_heads = 2;
  c.d_ff = 12;
  c.num_layers = 2;
  c.head = head;
  c.num_outputs = head == SequenceHead::classification ? train.num_classes : 0;
  c.dropout = 0.0;
  c.num_features = 8;
  c.num_threads = 1;
  return c;
}

SequencePhaseAOptions options_for(SequencePhaseATargets targets) {
  SequencePhaseAOptions o;
  o.targets = targets;
  o.positions_per_sequence = 3;
  o.phase_a.num_sequences = 16;
  o.phase_a.batch_size = 5;
  o.phase_a.langevin.max_iterations = 40;
  o.phase_a.schedule.step_size = 0.5;
  o.phase_a.seed = 11;
  return o;
}

/// E(Ω) = −‖(1/n) ŶᵀΦ‖² of the rows at Ω, with the targets renumbered here (binary for two
/// classes, one-hot otherwise).
double alignment_at(const Map& prototype, const coulomb::train::SequencePhaseAInputs<float>& in,
                    const MatrixF& omega) {
  std::map<int, int> classes;
  for (const int y : in.targets) classes.emplace(y, 0);
  int next = 0;
  for (auto& [value, index] : classes) index = next++;
  Eigen::VectorXi labels(static_cast<Index>(in.targets.size()));
  for (std::size_t i = 0; i < in.targets.size(); ++i)
    labels(static_cast<Index>(i)) = classes.at(in.targets[i]);
  const MatrixF Y = classes.size() == 2
                        ? coulomb::binary_targets<float>(labels)
                        : coulomb::one_hot_targets<float>(labels, static_cast<Index>(next));
  coulomb::AlignmentEnergy<Map> energy(prototype, in.X, Y);
  return static_cast<double>(energy.evaluate(omega));
}

void check_phase_a(const coulomb::data::SequenceSplits& splits, SequenceHead head,
                   SequencePhaseATargets targets, std::uint64_t seed) {
  Model model(config_for(splits.train, head), seed);
  const SequencePhaseAOptions options = options_for(targets);
  // The representations Phase A sees: the same subsample, from the model at its initial Ω.
  coulomb::Rng root(options.phase_a.seed);
  coulomb::Rng sample_rng = root.split(0);
  const std::vector<Index> sequences = coulomb::train::detail::subsample_indices(
      splits.train.size(), options.phase_a.num_sequences, sample_rng);
  const auto inputs = coulomb::train::collect_sequence_phase_a_inputs(
      model, splits.train, std::span<const Index>(sequences), options);
  REQUIRE(static_cast<Index>(inputs.size()) == model.num_omegas());
  // Rows per Ω: heads × (sequences, target rows, or positions per sequence).
  Index per_head = 0;
  for (const Index i : sequences) {
    if (head == SequenceHead::classification)
      per_head +=
          targets == SequencePhaseATargets::query ? std::min<Index>(3, splits.train.length(i)) : 1;
    else
      for (const auto t : splits.train.sequence_targets(i))
        per_head += t != coulomb::data::no_target;
  }
  std::vector<MatrixF> initial;
  for (Index k = 0; k < model.num_omegas(); ++k) {
    const auto& in = inputs[static_cast<std::size_t>(k)];
    CHECK(in.X.rows() == model.config().num_heads * per_head);
    CHECK(static_cast<Index>(in.targets.size()) == in.X.rows());
    CHECK(in.X.allFinite());
    initial.push_back(model.omega(k));
  }

  const auto report = coulomb::train::run_sequence_phase_a(model, splits.train, options);
  CHECK(report.targets == targets);
  REQUIRE(static_cast<Index>(report.phase_a.omegas.size()) == model.num_omegas());
  CHECK_FALSE(model.omega_trainable());
  for (const auto& p : model.parameters())
    if (p.name.find("omega") != std::string::npos) CHECK_FALSE(p.trainable);
  for (Index k = 0; k < model.num_omegas(); ++k) {
    const auto ks = static_cast<std::size_t>(k);
    const double before = alignment_at(model.feature_map(0), inputs[ks], initial[ks]);
    const double after = alignment_at(model.feature_map(0), inputs[ks], model.omega(k));
    CHECK(after < before);
    CHECK(report.phase_a.omegas[ks].alignment_after < report.phase_a.omegas[ks].alignment_before);
    CHECK(report.phase_a.omegas[ks].samples == inputs[ks].X.rows());
    CHECK(model.omega(k) != initial[ks]);
  }

  // Same model seed and options: the same Ω, bit for bit.
  Model again(config_for(splits.train, head), seed);
  coulomb::train::run_sequence_phase_a(again, splits.train, options);
  for (Index k = 0; k < model.num_omegas(); ++k) CHECK(again.omega(k) == model.omega(k));
}

}  // namespace

// The call throws coulomb::invalid_argument with a message containing `text`.
#define CHECK_INVALID(call, text)                     \
  do {                                                \
    CHECK_THROWS_AS(call, coulomb::invalid_argument); \
    CHECK_THROWS_WITH(call, Contains(text));          \
  } while (false)

TEST_CASE("TrainSequencePhaseA_LowersAlignmentAndFreezesOmega", "[train][phase_a]") {
  coulomb::Rng rng = coulomb_test::test_rng("TrainSequencePhaseA_LowersAlignmentAndFreezesOmega");
  const std::uint64_t seed = rng();
  const auto mqar = small_mqar(seed);
  const auto listops = small_listops(seed);
  for (const auto targets : {SequencePhaseATargets::pooled, SequencePhaseATargets::query}) {
    INFO("targets = " << coulomb::train::to_string(targets));
    check_phase_a(mqar, SequenceHead::causal_lm, targets, seed);
    check_phase_a(listops, SequenceHead::classification, targets, seed);
  }
}

TEST_CASE("TrainSequencePhaseA_TargetsFromString", "[train][phase_a]") {
  for (const auto t : {SequencePhaseATargets::pooled, SequencePhaseATargets::query})
    CHECK(coulomb::train::sequence_phase_a_targets_from_string(coulomb::train::to_string(t)) == t);
  CHECK_THROWS_WITH(coulomb::train::sequence_phase_a_targets_from_string("pairs"),
                    Contains("pooled or query"));
}

TEST_CASE("TrainSequencePhaseA_BadInputThrows", "[train][phase_a][errors]") {
  const auto mqar = small_mqar(7);
  const auto listops = small_listops(7);
  Model model(config_for(mqar.train, SequenceHead::causal_lm), 3);
  const MatrixF omega = model.omega(0);
  const SequencePhaseAOptions good = options_for(SequencePhaseATargets::query);
  using coulomb::train::run_sequence_phase_a;

  const coulomb::data::TokenSequenceDataset empty;
  CHECK_INVALID(run_sequence_phase_a(model, empty, good), "'train' is empty");
  // ListOps has no per-token targets for the causal head.
  Model lm_on_listops(config_for(listops.train, SequenceHead::causal_lm), 3);
  CHECK_INVALID(run_sequence_phase_a(lm_on_listops, listops.train, good), "per-token targets");
  // MQAR sequences are longer than the ListOps model's max_length.
  Model small(config_for(listops.train, SequenceHead::classification), 3);
  coulomb::data::TokenSequenceDataset long_sequences;
  long_sequences.vocabulary_size = listops.train.vocabulary_size;
  long_sequences.num_classes = listops.train.num_classes;
  std::vector<coulomb::TokenId> ids(static_cast<std::size_t>(listops.train.max_length() + 1), 1);
  long_sequences.push_back(ids, 0, {});
  long_sequences.push_back(ids, 1, {});
  CHECK_INVALID(run_sequence_phase_a(small, long_sequences, good), "max_length");

  SequencePhaseAOptions bad = good;
  bad.positions_per_sequence = 0;
  CHECK_INVALID(run_sequence_phase_a(model, mqar.train, bad), "positions_per_sequence");
  bad = good;
  bad.phase_a.representation = coulomb::train::PhaseARepresentation::warmup;
  CHECK_INVALID(run_sequence_phase_a(model, mqar.train, bad), "phase_a.representation");
  bad = good;
  bad.phase_a.langevin.max_iterations = -1;
  CHECK_INVALID(run_sequence_phase_a(model, mqar.train, bad), "max_iterations");

  // One label only: the centred alignment is zero.
  coulomb::data::TokenSequenceDataset one_label;
  one_label.vocabulary_size = listops.train.vocabulary_size;
  one_label.num_classes = listops.train.num_classes;
  for (Index i = 0; i < 4; ++i) one_label.push_back(listops.train.sequence(i), 2, {});
  CHECK_INVALID(run_sequence_phase_a(small, one_label, good), "all equal");

  SequenceModelConfig softmax = config_for(mqar.train, SequenceHead::causal_lm);
  softmax.attention = AttentionKind::softmax;
  Model exact(softmax, 3);
  CHECK_INVALID(run_sequence_phase_a(exact, mqar.train, good), "softmax");

  CHECK(model.omega(0) == omega);  // nothing above changed Ω
}

#undef CHECK_INVALID

}  // namespace train_sequence_phase_a_test
