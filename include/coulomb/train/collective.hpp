// SPDX-License-Identifier: MIT
/// @file train/collective.hpp
/// @brief The collective operations data-parallel training needs, as an interface the core
/// headers can use without MPI: the rank r and the number P of processes, an in-place sum over
/// the processes (all-reduce) of a span of float or double, and a broadcast of bytes. Phase A and
/// Phase B take a Collective through their options (nullptr: one process, the single-process
/// code path bit for bit); SingleProcess is the trivial implementation, and
/// coulomb/mpi/communicator.hpp (target coulomb::mpi) the one over MPI. Documented in
/// docs/distributed.md.
///
/// A global batch of B items is split between the processes by shard_range: process r takes
/// the items [⌊rB/P⌋, ⌊(r+1)B/P⌋), contiguous, in rank order, every item exactly once. With each
/// process's loss scaled by its share B_r/B, the sum over processes of the gradients of the
/// shard means is the gradient of the global mean, (1/B) Σ_b ∇ℓ_b = Σ_r (B_r/B)(1/B_r) Σ_{b∈r}
/// ∇ℓ_b.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../nn/parameter.hpp"

namespace coulomb::train {

/// The collective operations of a group of P processes that run the same program on the same
/// data (SPMD): every process calls the same operations in the same order with buffers of the
/// same size. An implementation must give every process the same bits from sum() (MPI's
/// all-reduce does, for the reduction algorithms Open MPI uses; the tests check it).
class Collective {
 public:
  virtual ~Collective() = default;
  /// This process's rank r in [0, size()).
  [[nodiscard]] virtual int rank() const = 0;
  /// The number P ≥ 1 of processes.
  [[nodiscard]] virtual int size() const = 0;
  /// values ← Σ over the processes of values (element by element; the same span length on
  /// every process).
  virtual void sum(std::span<float> values) = 0;
  /// values ← Σ over the processes of values (element by element).
  virtual void sum(std::span<double> values) = 0;
  /// bytes ← the bytes of process `root` (the same length on every process).
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;

  /// Reduce-scatter: `values` is cut into P consecutive parts of counts[0], …, counts[P−1]
  /// entries (the same counts on every process, summing to values.size()); afterwards this
  /// process's part, values[Σ_{q<r} counts[q], …) of counts[r] entries, holds the sum over the
  /// processes of that part, and the other parts are unspecified. The default sums the whole
  /// span; coulomb::mpi::Communicator sends each process only its part (MPI_Reduce_scatter).
  virtual void reduce_scatter(std::span<float> values, std::span<const Index> counts) {
    check_parts(values.size(), counts, "reduce_scatter");
    sum(values);
  }
  /// Reduce-scatter of doubles (as the float overload).
  virtual void reduce_scatter(std::span<double> values, std::span<const Index> counts) {
    check_parts(values.size(), counts, "reduce_scatter");
    sum(values);
  }
  /// All-gather in place: with `values` cut into parts as for reduce_scatter, every process's
  /// part is replaced by the bits of the process that owns it (part q: process q). The default
  /// broadcasts each part from its owner; coulomb::mpi::Communicator uses MPI_Allgatherv.
  virtual void all_gather(std::span<float> values, std::span<const Index> counts) {
    gather_by_broadcast(std::as_writable_bytes(values), counts, sizeof(float));
  }
  /// All-gather of doubles in place (as the float overload).
  virtual void all_gather(std::span<double> values, std::span<const Index> counts) {
    gather_by_broadcast(std::as_writable_bytes(values), counts, sizeof(double));
  }

 protected:
  Collective() = default;
  Collective(const Collective&) = default;             ///< for derived classes
  Collective& operator=(const Collective&) = default;  ///< for derived classes

  /// Throws invalid_argument unless `counts` has size() non-negative entries summing to `n`.
  void check_parts(std::size_t n, std::span<const Index> counts, const char* what) const {
    const std::string where = std::string("coulomb::train::Collective::") + what;
    coulomb::detail::require(counts.size() == static_cast<std::size_t>(size()), where.c_str(),
                             "argument 'counts' must have one entry per process (" +
                                 std::to_string(size()) + "), got " +
                                 std::to_string(counts.size()));
    Index total = 0;
    for (const Index c : counts) {
      coulomb::detail::require(c >= 0, where.c_str(), "argument 'counts' has a negative entry");
      total += c;
    }
    coulomb::detail::require(static_cast<std::size_t>(total) == n, where.c_str(),
                             "argument 'counts' sums to " + std::to_string(total) +
                                 ", the span has " + std::to_string(n) + " entries");
  }

 private:
  // The default all_gather: part q broadcast from process q (bit for bit, unlike a sum).
  void gather_by_broadcast(std::span<std::byte> bytes, std::span<const Index> counts,
                           std::size_t entry) {
    check_parts(bytes.size() / entry, counts, "all_gather");
    std::size_t at = 0;
    for (std::size_t q = 0; q < counts.size(); ++q) {
      const std::size_t n = static_cast<std::size_t>(counts[q]) * entry;
      broadcast(bytes.subspan(at, n), static_cast<int>(q));
      at += n;
    }
  }
};

/// One process: rank 0 of 1; sum() leaves the values as they are and broadcast() from root 0
/// leaves the bytes as they are. Throws invalid_argument for a broadcast from another root.
class SingleProcess final : public Collective {
 public:
  /// 0.
  [[nodiscard]] int rank() const override { return 0; }
  /// 1.
  [[nodiscard]] int size() const override { return 1; }
  /// The sum over one process: the values themselves.
  void sum(std::span<float>) override {}
  /// The sum over one process: the values themselves.
  void sum(std::span<double>) override {}
  /// Nothing to send; `root` must be 0.
  void broadcast(std::span<std::byte>, int root) override {
    coulomb::detail::require(
        root == 0, "coulomb::train::SingleProcess::broadcast",
        "argument 'root' must be 0 (the only process), got " + std::to_string(root));
  }
};

/// A half-open range [begin, end) of items.
struct ShardRange {
  Index begin = 0;  ///< first item
  Index end = 0;    ///< one past the last item

  /// end − begin.
  [[nodiscard]] Index size() const noexcept { return end - begin; }
};

/// The items of process `rank` of `processes` out of `items`: [⌊rank·items/P⌋,
/// ⌊(rank+1)·items/P⌋). The shards are contiguous, in rank order, cover every item exactly once
/// and differ in size by at most one (a process gets none when items < P). Throws
/// invalid_argument unless items ≥ 0, processes ≥ 1 and 0 ≤ rank < processes.
[[nodiscard]] inline ShardRange shard_range(Index items, int rank, int processes) {
  const char* where = "coulomb::train::shard_range";
  coulomb::detail::require(items >= 0, where,
                           "argument 'items' must be >= 0, got " + std::to_string(items));
  coulomb::detail::require(
      processes >= 1, where,
      "argument 'processes' must be at least 1, got " + std::to_string(processes));
  coulomb::detail::require(rank >= 0 && rank < processes, where,
                           "argument 'rank' must be in [0, " + std::to_string(processes) +
                               "), got " + std::to_string(rank));
  // items·rank fits: items < 2⁶³ / P for any data set a process can hold.
  const auto part = [&](Index r) { return static_cast<Index>((items * r) / processes); };
  return ShardRange{part(rank), part(static_cast<Index>(rank) + 1)};
}

/// The shard of `collective` (one process when nullptr) out of `items`.
[[nodiscard]] inline ShardRange shard_range(Index items, const Collective* collective) {
  return collective ? shard_range(items, collective->rank(), collective->size())
                    : ShardRange{0, items};
}

/// Whether `collective` spans more than one process.
[[nodiscard]] inline bool is_distributed(const Collective* collective) {
  return collective != nullptr && collective->size() > 1;
}

/// Whether `value` is the same on every process of `collective` (true for one process), with
/// the same answer on every process, from one sum of 16 doubles: the eight bytes x of the value
/// and their squares. The pieces are all equal exactly when P·Σx² = (Σx)² for every byte
/// (Cauchy–Schwarz), which doubles decide exactly for P < 2¹⁸ (both sides < 2⁵³).
[[nodiscard]] inline bool same_on_all(Collective& collective, std::uint64_t value) {
  double sums[16];
  for (int k = 0; k < 8; ++k) {
    const auto x = static_cast<double>((value >> (8 * k)) & 0xFFu);
    sums[2 * k] = x;
    sums[2 * k + 1] = x * x;
  }
  collective.sum(std::span<double>(sums));
  const auto P = static_cast<double>(collective.size());
  for (int k = 0; k < 8; ++k)
    if (P * sums[2 * k + 1] != sums[2 * k] * sums[2 * k]) return false;
  return true;
}

namespace detail {

/// A 64-bit FNV-1a hash, fed bytes in pieces (parameter_hash, the checkpoints' hash).
struct Fnv1a {
  std::uint64_t value = 0xcbf29ce484222325ULL;  ///< the hash of the bytes so far

  /// Adds `bytes` bytes at `data`.
  void add(const void* data, std::size_t bytes) noexcept {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) {
      value ^= p[i];
      value *= 0x100000001b3ULL;
    }
  }
};

}  // namespace detail

/// A 64-bit FNV-1a hash of the names, shapes and value bits of `params` (every parameter,
/// trainable or not), in list order: equal on two processes exactly when they hold the same
/// parameters bit for bit (up to hash collisions), which data-parallel training guarantees.
template <RealScalar S>
[[nodiscard]] std::uint64_t parameter_hash(const nn::ParameterList<S>& params) {
  detail::Fnv1a h;
  for (const auto& p : params) {
    h.add(p.name.data(), p.name.size());
    const std::int64_t shape[2] = {p.value->rows(), p.value->cols()};
    h.add(shape, sizeof shape);
    h.add(p.value->data(), static_cast<std::size_t>(p.value->size()) * sizeof(S));
  }
  return h.value;
}

}  // namespace coulomb::train
