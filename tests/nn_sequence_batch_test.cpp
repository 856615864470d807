// SPDX-License-Identifier: MIT
// Batches of the generated tasks for the sequence model (nn/sequence_batch.hpp): the ids, mask,
// labels and target rows of MQAR and ListOps batches against the datasets they come from, next-
// token targets, bad arguments; and a causal model that fits one MQAR batch by gradient steps
// on its query positions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include <coulomb/core/random.hpp>

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

// Length bucketing: a permutation of the order whose batches are windows of the order sorted by
// length, visited in a shuffled order, the short last batch last; the same seed gives the same
// order; with one window the batches' length ranges do not overlap and the padding falls.
TEST_CASE("NnSequenceBatch_GroupByLengthKeepsEveryEntryAndCutsPadding", "[nn][sequence][batch]") {
  const Index n = 1000, bs = 32;
  coulomb::Rng lengths_rng(7);
  std::vector<Index> length(static_cast<std::size_t>(n));
  for (auto& l : length) l = 100 + static_cast<Index>(coulomb::uniform_index(401, lengths_rng));
  const auto length_of = [&](Index i) { return length[static_cast<std::size_t>(i)]; };
  std::vector<Index> shuffled(static_cast<std::size_t>(n));
  std::iota(shuffled.begin(), shuffled.end(), Index{0});
  coulomb::Rng order_rng(3);
  coulomb::shuffle(std::span<Index>(shuffled), order_rng);
  const auto padded = [&](const std::vector<Index>& order) {
    Index tokens = 0;
    for (Index first = 0; first < n; first += bs) {
      Index longest = 0;
      const Index end = std::min(n, first + bs);
      for (Index j = first; j < end; ++j)
        longest = std::max(longest, length_of(order[static_cast<std::size_t>(j)]));
      tokens += longest * (end - first);
    }
    return tokens;
  };
  const auto batch_range = [&](const std::vector<Index>& order, Index k) {
    Index lo = 1 << 30, hi = 0;
    for (Index j = k * bs; j < std::min(n, (k + 1) * bs); ++j) {
      lo = std::min(lo, length_of(order[static_cast<std::size_t>(j)]));
      hi = std::max(hi, length_of(order[static_cast<std::size_t>(j)]));
    }
    return std::pair{lo, hi};
  };

  SECTION("one window") {
    std::vector<Index> order = shuffled;
    coulomb::Rng rng(11);
    coulomb::nn::group_by_length(std::span<Index>(order), length_of, bs, 1000, rng);
    std::vector<Index> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<Index> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), Index{0});
    CHECK(sorted == all);
    const Index full = n / bs;
    for (Index a = 0; a < full; ++a)
      for (Index b = a + 1; b < full; ++b) {
        const auto [alo, ahi] = batch_range(order, a);
        const auto [blo, bhi] = batch_range(order, b);
        CHECK((ahi <= blo || bhi <= alo));
      }
    // The short last batch holds the longest sequences and stays last.
    const auto [last_lo, last_hi] = batch_range(order, full);
    for (Index k = 0; k < full; ++k) CHECK(batch_range(order, k).second <= last_lo);
    // The batches are visited in a shuffled order, not by length.
    bool increasing = true;
    for (Index k = 1; k < full; ++k)
      increasing = increasing && batch_range(order, k - 1).first <= batch_range(order, k).first;
    CHECK_FALSE(increasing);
    INFO("padded tokens " << padded(shuffled) << " -> " << padded(order));
    CHECK(padded(order) < padded(shuffled) * 7 / 10);
    std::vector<Index> again = shuffled;
    coulomb::Rng same(11);
    coulomb::nn::group_by_length(std::span<Index>(again), length_of, bs, 1000, same);
    CHECK(again == order);
    std::vector<Index> other = shuffled;
    coulomb::Rng different(12);
    coulomb::nn::group_by_length(std::span<Index>(other), length_of, bs, 1000, different);
    CHECK(other != order);
  }

  SECTION("windows of two batches") {
    std::vector<Index> order = shuffled;
    coulomb::Rng rng(5);
    coulomb::nn::group_by_length(std::span<Index>(order), length_of, bs, 2, rng);
    // Every full batch comes from one window of 64 entries of the shuffled order, sorted.
    std::vector<Index> window_of(static_cast<std::size_t>(n));
    for (Index j = 0; j < n; ++j)
      window_of[static_cast<std::size_t>(shuffled[static_cast<std::size_t>(j)])] = j / (2 * bs);
    for (Index k = 0; k < n / bs; ++k) {
      const Index first = order[static_cast<std::size_t>(k * bs)];
      for (Index j = k * bs; j < (k + 1) * bs; ++j) {
        const Index i = order[static_cast<std::size_t>(j)];
        CHECK(window_of[static_cast<std::size_t>(i)] == window_of[static_cast<std::size_t>(first)]);
        if (j > k * bs) CHECK(length_of(order[static_cast<std::size_t>(j - 1)]) <= length_of(i));
      }
    }
    // The short last batch is the tail of the last window, sorted, still last.
    for (Index j = (n / bs) * bs; j < n; ++j)
      CHECK(window_of[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] ==
            (n - 1) / (2 * bs));
  }

  SECTION("equal lengths keep the shuffled batches") {
    std::vector<Index> order = shuffled;
    coulomb::Rng rng(9);
    coulomb::nn::group_by_length(
        std::span<Index>(order), [](Index) { return Index{5}; }, bs, 4, rng);
    for (Index k = 0; k < n / bs; ++k) {
      const Index first = order[static_cast<std::size_t>(k * bs)];
      const auto at =
          static_cast<Index>(std::find(shuffled.begin(), shuffled.end(), first) - shuffled.begin());
      REQUIRE(at % bs == 0);
      for (Index j = 0; j < bs; ++j)
        CHECK(order[static_cast<std::size_t>(k * bs + j)] ==
              shuffled[static_cast<std::size_t>(at + j)]);
    }
  }

  SECTION("bad arguments") {
    std::vector<Index> order = shuffled;
    coulomb::Rng rng(1);
    CHECK_THROWS_WITH(coulomb::nn::group_by_length(std::span<Index>(order), length_of, 0, 4, rng),
                      Contains("batch_size") && Contains("group_by_length"));
    CHECK_THROWS_WITH(coulomb::nn::group_by_length(std::span<Index>(order), length_of, bs, 0, rng),
                      Contains("window_batches"));
  }
}

}  // namespace nn_sequence_batch_test
