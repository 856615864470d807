// SPDX-License-Identifier: MIT
// The single-process side of data-parallel training (train/collective.hpp), without MPI:
// shard_range splits B items into P contiguous shards in rank order that cover each item once
// and differ in size by at most one, and refuses bad arguments; SingleProcess is rank 0 of 1,
// its sum leaves the values and its broadcast the bytes as they are, and a value is the same on
// all of one process; parameter_hash sees every bit, name and shape; GradientSum packs the
// gradients (of the token table, the rows of the batch's ids), sums, clips and unpacks them;
// the default reduce_scatter and all_gather of a Collective; ShardedAdamW on one process is
// GradientSum with AdamW bit for bit, updates only its slice of two, and reports failures and
// non-finite gradients without updating. The distributed side is
// tests/mpi/mpi_training_test.cpp (mpirun).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <coulomb/train/collective.hpp>
#include <coulomb/train/gradient_sum.hpp>
#include <coulomb/train/gradients.hpp>
#include <coulomb/train/sharded_adamw.hpp>

namespace collective_test {

using coulomb::Index;
using coulomb::train::shard_range;
using coulomb::train::ShardRange;

TEST_CASE("ShardRange_CoversEveryItemOnceInRankOrder", "[collective]") {
  for (int P = 1; P <= 7; ++P) {
    for (Index B = 0; B <= 40; ++B) {
      INFO("P = " << P << ", B = " << B);
      Index next = 0;
      for (int r = 0; r < P; ++r) {
        const ShardRange s = shard_range(B, r, P);
        CHECK(s.begin == next);
        CHECK(s.size() >= B / P);
        CHECK(s.size() <= B / P + 1);
        next = s.end;
      }
      CHECK(next == B);
    }
  }
  // The formula ⌊rB/P⌋: B = 15 over 2 processes gives 7 and 8, over 4 gives 3, 4, 4, 4.
  CHECK(shard_range(15, 0, 2).size() == 7);
  CHECK(shard_range(15, 1, 2).begin == 7);
  CHECK(shard_range(15, 0, 4).size() == 3);
  CHECK(shard_range(15, 3, 4).begin == 11);
  // Large counts do not overflow for realistic sizes.
  const Index big = Index{1} << 40;
  CHECK(shard_range(big, 2, 3).end == big);
  // No collective: everything.
  CHECK(shard_range(9, nullptr).begin == 0);
  CHECK(shard_range(9, nullptr).end == 9);
}

TEST_CASE("ShardRange_RefusesBadArguments", "[collective][errors]") {
  CHECK_THROWS_AS(shard_range(-1, 0, 2), coulomb::invalid_argument);
  CHECK_THROWS_AS(shard_range(4, 0, 0), coulomb::invalid_argument);
  CHECK_THROWS_AS(shard_range(4, 2, 2), coulomb::invalid_argument);
  CHECK_THROWS_AS(shard_range(4, -1, 2), coulomb::invalid_argument);
}

TEST_CASE("SingleProcess_IsTheIdentity", "[collective]") {
  coulomb::train::SingleProcess one;
  coulomb::train::Collective& c = one;
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  CHECK_FALSE(coulomb::train::is_distributed(&c));
  CHECK_FALSE(coulomb::train::is_distributed(nullptr));
  std::vector<float> f{1.5f, -2.0f, std::numeric_limits<float>::infinity()};
  std::vector<double> d{0.25, 3.0};
  c.sum(std::span<float>(f));
  c.sum(std::span<double>(d));
  CHECK(f[0] == 1.5f);
  CHECK(f[1] == -2.0f);
  CHECK(std::isinf(f[2]));
  CHECK(d == std::vector<double>{0.25, 3.0});
  std::vector<std::byte> bytes{std::byte{1}, std::byte{2}};
  c.broadcast(std::span<std::byte>(bytes), 0);
  CHECK(bytes == std::vector<std::byte>{std::byte{1}, std::byte{2}});
  CHECK_THROWS_AS(c.broadcast(std::span<std::byte>(bytes), 1), coulomb::invalid_argument);
  CHECK(coulomb::train::same_on_all(c, 0));
  CHECK(coulomb::train::same_on_all(c, ~std::uint64_t{0}));
}

TEST_CASE("ParameterHash_SeesValuesNamesAndShapes", "[collective]") {
  coulomb::Matrix<float> a = coulomb::Matrix<float>::Constant(2, 3, 0.5f);
  coulomb::Matrix<float> b = coulomb::Matrix<float>::Constant(3, 2, 0.5f);
  using List = coulomb::nn::ParameterList<float>;
  const auto hash = [](const List& l) { return coulomb::train::parameter_hash(l); };
  const std::uint64_t h = hash(List{{.name = "w", .value = &a}});
  CHECK(hash(List{{.name = "w", .value = &a}}) == h);
  CHECK(hash(List{{.name = "v", .value = &a}}) != h);  // name
  CHECK(hash(List{{.name = "w", .value = &b}}) != h);  // shape, same values
  a(1, 2) = std::nextafter(0.5f, 1.0f);                // one bit of one entry
  CHECK(hash(List{{.name = "w", .value = &a}}) != h);
}

/// Two processes that hold the same buffer: the sum doubles every value.
class TwoEqualProcesses final : public coulomb::train::Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void sum(std::span<float> values) override {
    for (float& v : values) v *= 2.0f;
  }
  void sum(std::span<double> values) override {
    for (double& v : values) v *= 2.0;
  }
  void broadcast(std::span<std::byte>, int) override {}
};

/// A token table (5 × 3) with gradients on rows 1 and 3 only, a dense 2 × 2 and a frozen 2 × 1.
struct GradientFixture {
  coulomb::Matrix<float> table = coulomb::Matrix<float>::Zero(5, 3), dtable = table;
  coulomb::Matrix<float> dense = coulomb::Matrix<float>::Zero(2, 2), ddense = dense;
  coulomb::Matrix<float> frozen = coulomb::Matrix<float>::Ones(2, 1), dfrozen = frozen;
  coulomb::nn::ParameterList<float> params{{"embedding.token", &table, &dtable, true, true},
                                           {"dense", &dense, &ddense, true, true},
                                           {"omega", &frozen, &dfrozen, false, false}};
  GradientFixture() {
    dtable.row(1) << 0.5f, -1.0f, 2.0f;
    dtable.row(3) << 1.5f, 0.25f, -0.75f;
    ddense << 1.0f, -2.0f, 3.0f, 0.5f;
  }
};

TEST_CASE("GradientSum_PacksTheBatchRowsAndClipsAsClipGradientNorm", "[collective]") {
  GradientFixture packed, reference;
  coulomb::train::SingleProcess one;
  coulomb::train::GradientSum<float> sum(packed.params, one);
  const std::vector<coulomb::TokenId> ids{3, 1, 3, 0, 99};  // 0: padding; 99: outside, skipped
  const auto r = sum.sum(ids, 0.75, false, 1.0);
  CHECK(sum.table_rows() == std::vector<Index>{0, 1, 3});
  CHECK(sum.buffer_size() == 3 * 3 + 4 + 2);  // three table rows, the dense, loss and flag
  CHECK(r.loss == 0.75);
  CHECK(r.failures == 0);
  CHECK(r.clipped);
  const double norm = coulomb::train::clip_gradient_norm(reference.params, 1.0);
  CHECK(r.norm == Approx(norm).epsilon(1e-12));
  CHECK(packed.dtable.isApprox(reference.dtable, 1e-6f));
  CHECK(packed.ddense.isApprox(reference.ddense, 1e-6f));
  CHECK(packed.dfrozen == reference.dfrozen);  // not summed
}

TEST_CASE("GradientSum_SumsOverTheProcesses", "[collective]") {
  GradientFixture f;
  const coulomb::Matrix<float> dtable = f.dtable, ddense = f.ddense;
  TwoEqualProcesses two;
  coulomb::train::GradientSum<float> sum(f.params, two);
  const std::vector<coulomb::TokenId> ids{1, 3};
  // No clipping: the gradients of the global batch, the loss summed.
  auto r = sum.sum(ids, 0.5, false, 0.0);
  CHECK_FALSE(r.clipped);
  CHECK(std::isnan(r.norm));
  CHECK(r.loss == 1.0);
  CHECK(f.dtable == 2.0f * dtable);
  CHECK(f.ddense == 2.0f * ddense);
  // A failure on the processes: counted, the gradients left alone.
  r = sum.sum(ids, 0.5, true, 1.0);
  CHECK(r.failures == 2);
  CHECK(f.ddense == 2.0f * ddense);
  // Only the rows of the batch are summed: row 3 of the table is not packed.
  r = sum.sum(std::vector<coulomb::TokenId>{1}, 0.0, false, 0.0);
  CHECK(f.dtable.row(1) == 4.0f * dtable.row(1));
  CHECK(f.dtable.row(3) == 2.0f * dtable.row(3));
  // A gradient that is not finite: summed and unpacked, not clipped (the caller names it).
  f.ddense(0, 0) = std::numeric_limits<float>::infinity();
  r = sum.sum(ids, 0.0, false, 1.0);
  CHECK_FALSE(r.clipped);
  CHECK(std::isinf(f.ddense(0, 0)));
  // A parameter without a gradient is refused.
  coulomb::nn::ParameterList<float> bad{{"w", &f.dense, nullptr, true, true}};
  CHECK_THROWS_AS(coulomb::train::GradientSum<float>(bad, two), coulomb::invalid_argument);
}

TEST_CASE("Collective_DefaultReduceScatterAndAllGather", "[collective]") {
  // The defaults: reduce_scatter sums the whole span, all_gather broadcasts each part from its
  // owner (here a stand-in whose broadcast keeps the bytes); counts are checked.
  TwoEqualProcesses two;
  coulomb::train::Collective& c = two;
  std::vector<float> f{1.0f, 2.0f, 3.0f};
  const std::vector<Index> counts{1, 2};
  c.reduce_scatter(std::span<float>(f), counts);
  CHECK(f == std::vector<float>{2.0f, 4.0f, 6.0f});
  c.all_gather(std::span<float>(f), counts);
  CHECK(f == std::vector<float>{2.0f, 4.0f, 6.0f});
  std::vector<double> d{-0.0, 1.0};
  c.all_gather(std::span<double>(d), std::vector<Index>{1, 1});
  CHECK(std::signbit(d[0]));  // bits, not a sum
  CHECK_THROWS_AS(c.reduce_scatter(std::span<float>(f), std::vector<Index>{1, 1}),
                  coulomb::invalid_argument);  // sums to 2, not 3
  CHECK_THROWS_AS(c.all_gather(std::span<float>(f), std::vector<Index>{3}),
                  coulomb::invalid_argument);  // one count for two processes
  CHECK_THROWS_AS(c.all_gather(std::span<float>(f), std::vector<Index>{4, -1}),
                  coulomb::invalid_argument);
}

TEST_CASE("ShardedAdamW_OneProcessIsGradientSumAndAdamW", "[collective]") {
  GradientFixture a, b;
  coulomb::train::SingleProcess one;
  coulomb::train::AdamWOptions o;
  o.check_finite = false;
  coulomb::train::ShardedAdamW<float> sharded(a.params, one, o);
  coulomb::train::GradientSum<float> sum(b.params, one);
  coulomb::train::AdamW<float> adamw(o);
  CHECK(sharded.size() == 5 * 3 + 4);  // the trainable entries; the frozen Ω is left out
  CHECK(sharded.owned().begin == 0);
  CHECK(sharded.owned().end == sharded.size());
  const std::vector<coulomb::TokenId> ids{3, 1, 0};
  const coulomb::Matrix<float> dtable = a.dtable, ddense = a.ddense;
  for (int step = 1; step <= 3; ++step) {
    sharded.zero_gradients();
    a.dtable += dtable;
    a.ddense = ddense;
    b.dtable = dtable;
    b.ddense = ddense;
    const auto r = sharded.step(ids, 0.25, false, 1.0, 0.1);
    const auto e = sum.sum(ids, 0.25, false, 1.0);
    adamw.step(b.params, 0.1);
    CHECK(r.stepped);
    CHECK(r.loss == 0.25);
    CHECK(r.norm == Approx(e.norm).epsilon(1e-12));
    CHECK(a.table == b.table);
    CHECK(a.dense == b.dense);
    CHECK(a.frozen == b.frozen);
    CHECK(a.dtable.isZero(0.0f));  // the table's batch rows are cleared for the next backward
  }
  CHECK(sharded.step_count() == 3);
  const auto state = sharded.export_state();
  const auto expected = adamw.export_state();
  REQUIRE(state.tensors.size() == expected.tensors.size());
  for (std::size_t k = 0; k < state.tensors.size(); ++k) {
    CHECK(state.tensors[k].name == expected.tensors[k].name);
    CHECK(state.tensors[k].value == expected.tensors[k].value);
  }
}

TEST_CASE("ShardedAdamW_FailuresAndNonFiniteGradientsUpdateNothing", "[collective]") {
  GradientFixture f;
  coulomb::train::SingleProcess one;
  coulomb::train::ShardedAdamW<float> sharded(f.params, one);
  const coulomb::Matrix<float> table = f.table, dense = f.dense;
  const std::vector<coulomb::TokenId> ids{1, 3};
  // A failure flag: counted, nothing updated.
  auto r = sharded.step(ids, 0.5, true, 1.0, 0.1);
  CHECK(r.failures == 1);
  CHECK_FALSE(r.stepped);
  CHECK(sharded.step_count() == 0);
  // A non-finite gradient, with and without clipping: unpacked for the caller, nothing updated.
  for (const double clip : {1.0, 0.0}) {
    sharded.zero_gradients();
    f.ddense(0, 0) = std::numeric_limits<float>::infinity();
    f.dtable(1, 2) = 2.0f;
    r = sharded.step(ids, 0.0, false, clip, 0.1);
    CHECK(r.failures == 0);
    CHECK_FALSE(r.stepped);
    CHECK(std::isinf(f.ddense(0, 0)));
    CHECK(f.dtable(1, 2) == 2.0f);
    CHECK(f.table == table);
    CHECK(f.dense == dense);
    CHECK(sharded.step_count() == 0);
  }
  // The next zero_gradients clears the unpacked table too.
  sharded.zero_gradients();
  CHECK(f.dtable.isZero(0.0f));
  CHECK_THROWS_AS(sharded.step(ids, 0.0, false, 1.0, -1.0), coulomb::invalid_argument);
}

TEST_CASE("ShardedAdamW_UpdatesOnlyItsSlice", "[collective]") {
  // Rank 0 of two (a stand-in whose sum doubles and whose broadcast keeps the bytes), a table
  // of 50 × 3 (first in the flat space) and a dense 2 × 2: rank 0's slice is the table's first
  // 64 entries (a multiple of 64 below the middle, 77); they move where they have a gradient,
  // every other entry keeps its value.
  coulomb::Matrix<float> table = coulomb::Matrix<float>::Ones(50, 3), dtable = table;
  coulomb::Matrix<float> dense = coulomb::Matrix<float>::Ones(2, 2), ddense = dense;
  coulomb::nn::ParameterList<float> params{{"embedding.token", &table, &dtable, true, false},
                                           {"dense", &dense, &ddense, true, false}};
  TwoEqualProcesses two;
  coulomb::train::ShardedAdamW<float> sharded(params, two);
  CHECK(sharded.owned().begin == 0);
  CHECK(sharded.owned().end == 64);
  sharded.zero_gradients();
  dtable.row(1).setConstant(0.5f);
  dtable.row(3).setConstant(-0.5f);
  ddense.setConstant(1.0f);
  const auto r = sharded.step(std::vector<coulomb::TokenId>{1, 3}, 0.5, false, 0.0, 0.1);
  CHECK(r.stepped);
  CHECK(r.loss == 1.0);
  for (Index x = 0; x < sharded.size(); ++x) {
    const float after = x < 150 ? table(x % 50, x / 50) : dense((x - 150) % 2, (x - 150) / 2);
    const bool moves = x < 64 && (x % 50 == 1 || x % 50 == 3);
    INFO("flat index " << x);
    if (moves)
      CHECK(after == Approx(x % 50 == 1 ? 0.9f : 1.1f).epsilon(1e-6));  // θ ∓ lr
    else
      CHECK(after == 1.0f);
  }
}

}  // namespace collective_test
