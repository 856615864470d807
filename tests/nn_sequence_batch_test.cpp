// SPDX-License-Identifier: MIT
// Batches of the generated tasks for the sequence model (nn/sequence_batch.hpp): the ids, mask,
// labels and target rows of MQAR and ListOps batches against the datasets they come from, next-
// token targets, bad arguments; and a causal model that fits one MQAR batch by gradient steps
// on its query positions.
#include <catch2/catch.hpp>

#include <vector>

#include <coulomb/data/listops.hpp>
#include <coulomb/data/mqar.hpp>
#include <coulomb/features/favor.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/sequence_batch.hpp>
#include <coulomb/nn/sequence_model.hpp>

#include "test_support.hpp"

// Everything in a namespace of its own, so that the unity build (tests/CMakeLists.txt) can
// compile this file together with others.
namespace nn_sequence_batch_test {

namespace {

using Catch::Matchers::Contains;
using coulomb::Index;
using coulomb::nn::SequenceBatch;
using coulomb::nn::TokenTargets;
using coulomb_test::Mat;

coulomb::data::MqarOptions small_mqar() {
  coulomb::data::MqarOptions o;
  o.num_train = 16;
  o.num_dev = 2;
  o.num_test = 2;
  o.vocabulary_size = 32;
  o.length = 16;
  o.num_pairs = 3;
  return o;
}

}  // namespace

TEST_CASE("NnSequenceBatch_RowsAndTargetsFollowTheDataset", "[nn][sequence][batch]") {
  const auto mqar = coulomb::data::generate_mqar(small_mqar(), 1);
  const std::vector<Index> pick{3, 0, 7};
  SequenceBatch batch;
  coulomb::nn::make_sequence_batch(mqar.train, pick, batch, 20);
  REQUIRE(batch.length() == 20);
  REQUIRE(batch.size() == 3);
  std::size_t r = 0;
  for (Index b = 0; b < 3; ++b) {
    const auto seq = mqar.train.sequence(pick[static_cast<std::size_t>(b)]);
    const auto tgt = mqar.train.sequence_targets(pick[static_cast<std::size_t>(b)]);
    for (Index t = 0; t < 20; ++t) {
      const bool real = t < static_cast<Index>(seq.size());
      CHECK(batch.mask(t, b) == real);
      CHECK(batch.ids(t, b) == (real ? seq[static_cast<std::size_t>(t)] : 0));
      if (real && tgt[static_cast<std::size_t>(t)] != coulomb::data::no_target) {
        REQUIRE(r < batch.rows.size());
        CHECK(batch.rows[r] == b * 20 + t);
        CHECK(batch.targets[r] == tgt[static_cast<std::size_t>(t)]);
        ++r;
      }
    }
  }
  CHECK(r == batch.rows.size());
  CHECK(batch.rows.size() == 3 * 3);  // every key asked once

  // Next-token targets of ListOps, and its labels.
  coulomb::data::ListOpsOptions lo;
  lo.num_train = 4;
  lo.num_dev = 1;
  lo.num_test = 1;
  lo.min_length = 5;
  lo.max_length = 30;
  const auto listops = coulomb::data::generate_listops(lo, 2);
  const std::vector<Index> all{0, 1, 2, 3};
  coulomb::nn::make_sequence_batch(listops.train, all, batch);
  CHECK(batch.rows.empty());  // ListOps has one label per sequence, no token targets
  coulomb::nn::make_sequence_batch(listops.train, all, batch, 0, TokenTargets::next_token);
  Index expected_rows = 0;
  for (Index b = 0; b < 4; ++b) {
    CHECK(batch.labels[static_cast<std::size_t>(b)] ==
          listops.train.labels[static_cast<std::size_t>(b)]);
    expected_rows += listops.train.length(b) - 1;
  }
  CHECK(static_cast<Index>(batch.rows.size()) == expected_rows);
  for (std::size_t k = 0; k < batch.rows.size(); ++k) {
    const Index row = batch.rows[k];
    CHECK(batch.targets[k] == batch.ids(row % batch.length() + 1, row / batch.length()));
  }

  CHECK_THROWS_WITH(coulomb::nn::make_sequence_batch(mqar.train, std::vector<Index>{}, batch),
                    Contains("'indices'"));
  CHECK_THROWS_WITH(coulomb::nn::make_sequence_batch(mqar.train, std::vector<Index>{16}, batch),
                    Contains("outside"));
  CHECK_THROWS_WITH(coulomb::nn::make_sequence_batch(mqar.train, pick, batch, 8),
                    Contains("pad_to"));
}

TEST_CASE("NnSequenceModel_FitsAnMqarBatch", "[nn][sequence][batch]") {
  // Plain gradient steps on one batch of MQAR's query positions: the loss falls to a small
  // fraction of its start (the causal model, its rows and the batch's targets agree).
  const auto mqar = coulomb::data::generate_mqar(small_mqar(), 3);
  const std::vector<Index> pick{0, 1, 2, 3};
  SequenceBatch batch;
  coulomb::nn::make_sequence_batch(mqar.train, pick, batch);
  coulomb::nn::SequenceModelConfig c;
  c.vocab_size = 32;
  c.max_length = 16;
  c.d_model = 16;
  c.num_heads = 2;
  c.d_ff = 32;
  c.num_layers = 2;
  c.head = coulomb::nn::SequenceHead::causal_lm;
  c.num_outputs = 0;
  c.dropout = 0.0;
  c.num_features = 16;
  c.num_threads = 1;
  coulomb::nn::SequenceModel<coulomb::FavorPlus<double>> model(c, 4);
  coulomb::Rng rng(5);
  Mat<double> logits, dlogits;
  double first = 0.0;
  double last = 0.0;
  for (int step = 0; step < 150; ++step) {
    model.forward_rows(batch.ids, batch.mask, batch.rows, logits, true, rng);
    last = coulomb::nn::softmax_cross_entropy(logits, batch.targets, dlogits);
    if (step == 0) first = last;
    model.zero_grad();
    model.backward(dlogits);
    for (const auto& p : model.parameters())
      if (p.trainable) *p.value -= 0.5 * *p.gradient;
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.1 * first);
}

}  // namespace nn_sequence_batch_test
