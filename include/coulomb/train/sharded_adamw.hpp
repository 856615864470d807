// SPDX-License-Identifier: MIT
/// @file train/sharded_adamw.hpp
/// @brief The data-parallel optimizer step with the AdamW state sharded over the P processes
/// (ZeRO stage 1): the trainable parameters, flattened into one index space (the token table
/// first, then the others in list order), are cut into P contiguous slices, and process r keeps
/// the two moments of its slice only and updates only its slice:
///
///     buffer_r = [ g_r in flat order; of the token table only the rows of the batch's ids ]
///     reduce-scatter(buffer)       process r receives Σ_q buffer_q of its slice
///     sum([‖slice‖², ℓ_r, f_r])    the global norm, the loss, the failures (3 doubles)
///     AdamW on the slice           with g clipped to c/‖g‖ as GradientSum does
///     all-gather(θ)                every process gets every slice's new values
///
/// The result is that of GradientSum followed by AdamW::step on every process up to the order
/// of the sums (the reduce-scatter and the norm's partial sums): with two processes each sum
/// is a + b either way, so only the last bits of the clipping factor can differ. Per process,
/// AdamW's work and its memory are 1/P of the full step's; the all-gather moves every
/// parameter (the token table's rows all change at every step: their moments decay), which
/// costs about what the sharded work saves on a fast link but keeps the memory traffic of
/// each process at half. Documented in docs/distributed.md ("Sharded optimizer state").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/tokens.hpp"
#include "../nn/parameter.hpp"
#include "adamw.hpp"
#include "collective.hpp"
#include "gradient_sum.hpp"
#include "gradients.hpp"

namespace coulomb::train {

/// What ShardedAdamW::step gives back; the same on every process.
struct ShardedAdamWResult {
  double loss = 0.0;   ///< Σ_r ℓ_r: the loss of the global batch
  Index failures = 0;  ///< the processes that flagged a failure (nothing was updated then)
  double norm = std::numeric_limits<double>::quiet_NaN();  ///< ‖g‖ of the sum before clipping
                                                           ///< (NaN without clipping)
  bool stepped = false;  ///< whether the parameters were updated: false after a failure, or
                         ///< when a gradient or the norm was not finite (see step())
};

/// AdamW over the processes of a Collective with each process holding the moments of its slice
/// of the parameters (see the file comment). The parameters and the collective must outlive it;
/// every process constructs it with the same parameter list and calls the same methods in the
/// same order.
template <RealScalar S>
class ShardedAdamW {
 public:
  /// Over the trainable parameters of `params`; of the trainable parameter named `sparse_table`
  /// (if any; "" for none) only the rows of the ids given to step() are summed. Throws
  /// invalid_argument for invalid options, or a trainable parameter without a name, value or
  /// gradient of its shape, or a duplicate name.
  ShardedAdamW(const nn::ParameterList<S>& params, Collective& collective,
               const AdamWOptions& options = {}, std::string_view sparse_table = "embedding.token")
      : params_(params), collective_(&collective), options_(options) {
    const char* where = "coulomb::train::ShardedAdamW";
    options_.validate();
    std::vector<std::string_view> names;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].trainable) continue;
      detail::check_parameter(params_[i], where, true);
      names.push_back(params_[i].name);
      if (!sparse_table.empty() && table_ == no_table && params_[i].name == sparse_table)
        table_ = i;
    }
    std::sort(names.begin(), names.end());
    if (const auto d = std::adjacent_find(names.begin(), names.end()); d != names.end())
      coulomb::detail::throw_invalid(where,
                                     "parameter name '" + std::string(*d) + "' appears twice");
    // The flat index space: the table first, then every other trainable parameter.
    if (table_ != no_table) add_piece(table_);
    table_size_ = total_;
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (params_[i].trainable && i != table_) add_piece(i);
    // Slice boundaries at multiples of 64 entries inside a tensor: the alignment of AdamW's
    // blocks, so that a slice's blocks take the same vector path.
    const int P = collective_->size();
    bounds_.assign(static_cast<std::size_t>(P) + 1, total_);
    bounds_[0] = 0;
    for (int q = 1; q < P; ++q) {
      const Index x = shard_range(total_, q, P).begin;
      Index b = total_;
      for (const Piece& piece : pieces_) {
        if (x < piece.begin + piece.size) {
          b = piece.begin + (x - piece.begin) / align * align;
          break;
        }
      }
      bounds_[static_cast<std::size_t>(q)] = std::max(b, bounds_[static_cast<std::size_t>(q) - 1]);
    }
    const auto r = static_cast<std::size_t>(collective_->rank());
    owned_ = ShardRange{bounds_[r], bounds_[r + 1]};
    m_.setZero(owned_.size());
    v_.setZero(owned_.size());
    table_gradient_.setZero(std::max<Index>(std::min(owned_.end, table_size_) - owned_.begin, 0));
    for (std::size_t q = 0; q + 1 < bounds_.size(); ++q) {
      table_counts_.push_back(std::min(bounds_[q + 1], table_size_) -
                              std::min(bounds_[q], table_size_));
      dense_counts_.push_back(std::max(bounds_[q + 1], table_size_) -
                              std::max(bounds_[q], table_size_));
    }
    dense_.resize(total_ - table_size_);
  }

  /// The hyper-parameters.
  const AdamWOptions& options() const noexcept { return options_; }
  /// Number of steps taken (0 before the first).
  std::int64_t step_count() const noexcept { return step_; }
  /// The trainable entries in all (the flat index space).
  Index size() const noexcept { return total_; }
  /// This process's slice [begin, end) of the flat index space.
  ShardRange owned() const noexcept { return owned_; }
  /// The entries of the last step's buffer (gradients; of the table, the batch's rows).
  Index buffer_size() const noexcept { return fused_.size(); }

  /// Sets to zero every gradient the next backward adds to: every parameter's gradient but the
  /// token table's, of which step() leaves only zeros behind (the whole table the first time).
  /// This replaces the model's zero_grad(), which would clear the whole table at every step.
  void zero_gradients() {
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (i != table_ || !table_clean_) params_[i].gradient->setZero();
    table_clean_ = table_ != no_table;
  }

  /// One step (t = step_count() + 1) with learning rate `learning_rate` (finite, ≥ 0): packs
  /// this process's gradients (of the token table, the rows of `ids`: every id of the global
  /// batch; the table's gradient is left zero), `loss_share` and `failed`, sums them over the
  /// processes, and unless a process failed, clips to `clip_norm` (when > 0) and updates this
  /// process's slice, then gathers every slice's parameters on every process. When `stepped`
  /// is false with no failure (a summed gradient, or with clipping the norm, not finite),
  /// nothing was updated and the summed gradients are unpacked into the parameters' gradients
  /// on every process, for the caller to name the culprit (require_finite_parameters,
  /// clip_gradient_norm) as after GradientSum::sum.
  ShardedAdamWResult step(std::span<const TokenId> ids, double loss_share, bool failed,
                          double clip_norm, double learning_rate) {
    const char* where = "coulomb::train::ShardedAdamW::step";
    coulomb::detail::require(learning_rate >= 0.0 && std::isfinite(learning_rate), where,
                             "argument 'learning_rate' must be finite and non-negative, got " +
                                 std::to_string(learning_rate));
    pack(ids);
    // This process's part of the buffer: the entries of its slice.
    const Index lo = position(owned_.begin);
    const Index hi = position(owned_.end);
    collective_->reduce_scatter(
        std::span<S>(fused_.data(), static_cast<std::size_t>(fused_.size())),
        std::span<const Index>(counts_));
    const bool check = !(clip_norm > 0.0);
    double small[4] = {detail::sum_of_squares(fused_.data() + lo, hi - lo), loss_share,
                       failed ? 1.0 : 0.0, check && !slice_finite(lo, hi) ? 1.0 : 0.0};
    collective_->sum(std::span<double>(small));
    ShardedAdamWResult result;
    result.loss = small[1];
    result.failures = static_cast<Index>(std::lround(small[2]));
    if (result.failures > 0) return result;
    const double norm = std::sqrt(small[0]);
    if ((check && small[3] > 0.0) || (!check && !std::isfinite(norm))) {
      unpack_all();
      return result;
    }
    if (!check) {
      if (norm > clip_norm) fused_.segment(lo, hi - lo) *= static_cast<S>(clip_norm / norm);
      result.norm = norm;
    }
    result.stepped = true;
    update(learning_rate);
    gather();
    return result;
  }

  /// The state as AdamW::export_state gives it for the same parameters (step count, then
  /// "first_moment.<name>" and "second_moment.<name>" in name order): collective, every process
  /// gets all of it (each slice's moments from its owner).
  AdamWState<S> export_state() {
    AdamWState<S> state;
    state.step = step_;
    if (step_ == 0) return state;
    Vector<S> m(total_), v(total_);
    const auto parts = slice_counts();
    m.segment(owned_.begin, owned_.size()) = m_;
    v.segment(owned_.begin, owned_.size()) = v_;
    collective_->all_gather(std::span<S>(m.data(), static_cast<std::size_t>(total_)), parts);
    collective_->all_gather(std::span<S>(v.data(), static_cast<std::size_t>(total_)), parts);
    std::vector<const Piece*> by_name;
    for (const Piece& piece : pieces_) by_name.push_back(&piece);
    std::sort(by_name.begin(), by_name.end(), [&](const Piece* a, const Piece* b) {
      return params_[a->param].name < params_[b->param].name;
    });
    for (const Piece* piece : by_name) {
      const auto& p = params_[piece->param];
      for (const bool first : {true, false}) {
        const Vector<S>& flat = first ? m : v;
        Matrix<S> t =
            flat.segment(piece->begin, piece->size).reshaped(p.value->rows(), p.value->cols());
        state.tensors.push_back(
            {std::string(first ? AdamW<S>::first_moment_prefix : AdamW<S>::second_moment_prefix) +
                 p.name,
             std::move(t)});
      }
    }
    return state;
  }

  /// Replaces the state by `state` (of every parameter, as export_state or AdamW::export_state
  /// give it), checked as AdamW::import_state checks it: this process keeps its slice. Throws
  /// invalid_argument as AdamW::import_state, leaving the optimizer unchanged.
  void import_state(const AdamWState<S>& state) {
    AdamW<S> full(options_);
    full.import_state(state, params_);
    Vector<S> m = Vector<S>::Zero(owned_.size());
    Vector<S> v = Vector<S>::Zero(owned_.size());
    if (state.step > 0) {
      for (const Piece& piece : pieces_) {
        const Index a = std::max(owned_.begin, piece.begin);
        const Index e = std::min(owned_.end, piece.begin + piece.size);
        if (a >= e) continue;
        const std::string& name = params_[piece.param].name;
        m.segment(a - owned_.begin, e - a) =
            full.first_moment(name)->reshaped().segment(a - piece.begin, e - a);
        v.segment(a - owned_.begin, e - a) =
            full.second_moment(name)->reshaped().segment(a - piece.begin, e - a);
      }
    }
    m_ = std::move(m);
    v_ = std::move(v);
    step_ = state.step;
  }

 private:
  struct Piece {
    std::size_t param = 0;  // index in params_
    Index begin = 0;        // first flat index
    Index size = 0;         // entries
  };

  void add_piece(std::size_t i) {
    pieces_.push_back(Piece{i, total_, params_[i].value->size()});
    total_ += params_[i].value->size();
  }

  std::vector<Index> slice_counts() const {
    std::vector<Index> c;
    for (std::size_t q = 0; q + 1 < bounds_.size(); ++q) c.push_back(bounds_[q + 1] - bounds_[q]);
    return c;
  }

  /// The number of buffer entries before flat index x (the buffer holds the table's batch rows
  /// column by column, then every other entry).
  Index position(Index x) const {
    if (x >= table_size_) return table_entries() + (x - table_size_);
    const Index rows = params_[table_].value->rows();
    const Index j = x / rows;
    const auto below = std::lower_bound(rows_.begin(), rows_.end(), x % rows) - rows_.begin();
    return j * static_cast<Index>(rows_.size()) + static_cast<Index>(below);
  }

  Index table_entries() const {
    return table_ == no_table ? 0
                              : static_cast<Index>(rows_.size()) * params_[table_].value->cols();
  }

  /// fused_ ← this process's gradients in flat order, counts_ ← every process's part; the
  /// table's packed rows are zeroed in its gradient.
  void pack(std::span<const TokenId> ids) {
    rows_.clear();
    if (table_ != no_table)
      detail::distinct_table_rows(ids, params_[table_].gradient->rows(), seen_, rows_);
    fused_.resize(table_entries() + (total_ - table_size_));
    Index at = 0;
    if (table_ != no_table) {
      Matrix<S>& g = *params_[table_].gradient;
      for (Index j = 0; j < g.cols(); ++j)
        for (const Index r : rows_) {
          fused_(at++) = g(r, j);
          g(r, j) = S(0);
        }
    }
    for (const Piece& piece : pieces_) {
      if (piece.param == table_) continue;
      fused_.segment(at, piece.size) = params_[piece.param].gradient->reshaped();
      at += piece.size;
    }
    counts_.clear();
    for (std::size_t q = 0; q + 1 < bounds_.size(); ++q)
      counts_.push_back(position(bounds_[q + 1]) - position(bounds_[q]));
  }

  bool slice_finite(Index lo, Index hi) const {
    return fused_.segment(lo, hi - lo).array().isFinite().all();
  }

  /// The summed buffer of every process, unpacked into the gradients (the table's batch rows;
  /// its other rows are zero already).
  void unpack_all() {
    collective_->all_gather(std::span<S>(fused_.data(), static_cast<std::size_t>(fused_.size())),
                            std::span<const Index>(counts_));
    Index at = 0;
    if (table_ != no_table) {
      Matrix<S>& g = *params_[table_].gradient;
      for (Index j = 0; j < g.cols(); ++j)
        for (const Index r : rows_) g(r, j) = fused_(at++);
    }
    for (const Piece& piece : pieces_) {
      if (piece.param == table_) continue;
      params_[piece.param].gradient->reshaped() = fused_.segment(at, piece.size);
      at += piece.size;
    }
    table_clean_ = false;  // the table's gradient holds the batch rows now
  }

  /// AdamW on this process's slice, its gradients at fused_[lo, …) (clipped).
  void update(double learning_rate) {
    const std::int64_t t = step_ + 1;
    const detail::AdamWStep<S> adamw(options_, t, learning_rate);  // as AdamW::step

    // The table's slice: its batch rows scattered into a dense gradient kept zero elsewhere.
    const Index table_end = std::min(owned_.end, table_size_);
    touched_.clear();
    if (owned_.begin < table_end) {
      const Index rows = params_[table_].value->rows();
      Index at = position(owned_.begin);
      for (Index j = owned_.begin / rows; j * rows < table_end; ++j)
        for (const Index r : rows_) {
          const Index x = j * rows + r;
          if (x < owned_.begin) continue;
          if (x >= table_end) break;
          table_gradient_(x - owned_.begin) = fused_(at++);
          touched_.push_back(x - owned_.begin);
        }
    }
    // dense_ ← the current values (a part the all-gather does not overwrite stays as it is).
    for (const Piece& piece : pieces_)
      if (piece.param != table_)
        dense_.segment(piece.begin - table_size_, piece.size) =
            params_[piece.param].value->reshaped();
    Index dense_at = position(std::max(owned_.begin, table_size_));
    for (const Piece& piece : pieces_) {
      const Index a = std::max(owned_.begin, piece.begin);
      const Index e = std::min(owned_.end, piece.begin + piece.size);
      if (a >= e) continue;
      const auto& p = params_[piece.param];
      const bool decay = p.decay && options_.weight_decay != 0.0;
      const bool is_table = piece.param == table_;
      const S* g0 =
          is_table ? table_gradient_.data() + (a - owned_.begin) : fused_.data() + dense_at;
      S* theta0 = p.value->data() + (a - piece.begin);
      S* m0 = m_.data() + (a - owned_.begin);
      S* v0 = v_.data() + (a - owned_.begin);
      for (Index at = 0; at < e - a; at += block) {
        const Index n = std::min(block, e - a - at);
        adamw.apply(theta0 + at, g0 + at, m0 + at, v0 + at, n, decay);
        if (!is_table)
          dense_.segment(a - table_size_ + at, n) = Eigen::Map<const Vector<S>>(theta0 + at, n);
      }
      if (!is_table) dense_at += e - a;
    }
    for (const Index x : touched_) table_gradient_(x) = S(0);
    step_ = t;
  }

  /// Every process's slices of the parameters: the table in place, the rest through dense_.
  void gather() {
    if (table_ != no_table && table_size_ > 0)
      collective_->all_gather(
          std::span<S>(params_[table_].value->data(), static_cast<std::size_t>(table_size_)),
          std::span<const Index>(table_counts_));
    if (dense_.size() == 0) return;
    collective_->all_gather(std::span<S>(dense_.data(), static_cast<std::size_t>(dense_.size())),
                            std::span<const Index>(dense_counts_));
    for (const Piece& piece : pieces_) {
      if (piece.param == table_) continue;
      params_[piece.param].value->reshaped() =
          dense_.segment(piece.begin - table_size_, piece.size);
    }
  }

  static constexpr std::size_t no_table = static_cast<std::size_t>(-1);
  static constexpr Index block = 1024;  // AdamW::step's block
  static constexpr Index align = 64;    // slice boundaries inside a tensor

  nn::ParameterList<S> params_;
  Collective* collective_;
  AdamWOptions options_;
  std::size_t table_ = no_table;  // the token table in params_
  std::vector<Piece> pieces_;     // the trainable parameters in flat order
  Index total_ = 0;               // trainable entries
  Index table_size_ = 0;          // the table's entries (flat [0, table_size_))
  std::vector<Index> bounds_;     // slice q: [bounds_[q], bounds_[q + 1])
  ShardRange owned_{};            // this process's slice
  Vector<S> m_, v_;               // the moments of the slice
  std::int64_t step_ = 0;
  Vector<S> fused_;                  // the buffer summed over the processes
  std::vector<Index> counts_;        // each process's part of fused_
  std::vector<Index> rows_;          // the table's rows with ids in the batch
  std::vector<unsigned char> seen_;  // which ids are in the batch
  Vector<S> table_gradient_;         // the slice's table gradient (zero but for a step)
  std::vector<Index> touched_;       // its non-zero entries during a step
  Vector<S> dense_;                  // the non-table parameters, flat, for the all-gather
  std::vector<Index> table_counts_;  // each process's part of the table
  std::vector<Index> dense_counts_;  // each process's part of dense_
  bool table_clean_ = false;         // the table's gradient is all zero
};

}  // namespace coulomb::train
