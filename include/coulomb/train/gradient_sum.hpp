// SPDX-License-Identifier: MIT
/// @file train/gradient_sum.hpp
/// @brief The sum over P data-parallel processes (train/collective.hpp) of the gradients of one
/// optimizer step, in one fused buffer, with global-norm clipping done on the sum:
///
///     buffer_r = [ g_r of every trainable θ, in list order | ℓ_r | f_r ]
///     buffer   = Σ_r buffer_r                                  (one Collective::sum)
///     g ← g · min(1, c/‖g‖)  with ‖g‖ from the buffer            (c = clip_norm > 0)
///
/// where g_r is process r's gradient of its shard's loss scaled by its share (so that Σ_r g_r is
/// the gradient of the global batch's mean loss), ℓ_r its loss share and f_r its failure flag
/// (1 when its logits or loss were not finite). Every process gets the same bits from the sum,
/// so every process then takes the same optimizer step.
///
/// Of a token table (the trainable parameter named `sparse_table`, "embedding.token" by default)
/// only the rows of the global batch's ids can have a non-zero gradient on any process, and
/// every process knows the whole batch: only those rows are packed. For a batch of short
/// sentences that is a tenth of the table, which is most of a text model's parameters.
/// Documented in docs/distributed.md ("What is synchronised").
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/tokens.hpp"
#include "../nn/parameter.hpp"
#include "collective.hpp"
#include "gradients.hpp"

namespace coulomb::train {

namespace detail {

/// rows ← the distinct ids of `ids` in [0, table_rows), in increasing order (`seen`: workspace).
/// Ids outside the table are skipped: the model's forward has checked those of this process's
/// shard, and those of the others' shards are left to their own errors.
inline void distinct_table_rows(std::span<const TokenId> ids, Index table_rows,
                                std::vector<unsigned char>& seen, std::vector<Index>& rows) {
  rows.clear();
  seen.assign(static_cast<std::size_t>(table_rows), 0);
  for (const TokenId id : ids)
    if (id >= 0 && static_cast<std::size_t>(id) < seen.size())
      seen[static_cast<std::size_t>(id)] = 1;
  for (std::size_t r = 0; r < seen.size(); ++r)
    if (seen[r]) rows.push_back(static_cast<Index>(r));
}

}  // namespace detail

/// What GradientSum::sum gives back; the same on every process.
struct GradientSumResult {
  double loss = 0.0;   ///< Σ_r ℓ_r: the loss of the global batch
  Index failures = 0;  ///< the processes that flagged a failure (the gradients are then left
                       ///< as they were before the sum)
  double norm = std::numeric_limits<double>::quiet_NaN();  ///< ‖g‖ of the sum before clipping
                                                           ///< (NaN when not clipped)
  bool clipped = false;  ///< whether ‖g‖ was finite and the gradients were clipped to clip_norm;
                         ///< false with clip_norm ≤ 0 or a non-finite norm: then the caller
                         ///< checks and clips the unpacked gradients as one process would
};

/// The fused sum of a parameter list's gradients over the processes of a Collective (see the
/// file comment). Holds the buffer; the parameters and the collective must outlive it.
template <RealScalar S>
class GradientSum {
 public:
  /// Sums the trainable gradients of `params` over `collective`; of the trainable parameter
  /// named `sparse_table` (if any; "" for none), only the rows of the ids given to sum(). Throws
  /// invalid_argument for a trainable parameter without a value or gradient of its shape.
  GradientSum(const nn::ParameterList<S>& params, Collective& collective,
              std::string_view sparse_table = "embedding.token")
      : params_(params), collective_(&collective) {
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].trainable) continue;
      detail::check_parameter(params_[i], "coulomb::train::GradientSum", true);
      if (!sparse_table.empty() && table_ == no_table && params_[i].name == sparse_table)
        table_ = i;
    }
  }

  /// Packs this process's gradients (of the token table, the rows of `ids`: every id of the
  /// global batch, padding included; ids outside the table are skipped), `loss_share` and
  /// `failed` into the buffer, sums it over the processes and, unless some process failed,
  /// clips it to `clip_norm` (when > 0 and the norm is finite) and unpacks it into the
  /// gradients. Every process must call it with the same ids.
  GradientSumResult sum(std::span<const TokenId> ids, double loss_share, bool failed,
                        double clip_norm) {
    batch_rows(ids);
    Index n = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].trainable) continue;
      n += i == table_ ? static_cast<Index>(rows_.size()) * params_[i].gradient->cols()
                       : params_[i].gradient->size();
    }
    fused_.resize(n + 2);
    Index at = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      if (!p.trainable) continue;
      if (i == table_) {
        for (Index j = 0; j < p.gradient->cols(); ++j)
          for (const Index r : rows_) fused_(at++) = (*p.gradient)(r, j);
        continue;
      }
      fused_.segment(at, p.gradient->size()) = p.gradient->reshaped();
      at += p.gradient->size();
    }
    fused_(n) = static_cast<S>(loss_share);
    fused_(n + 1) = failed ? S(1) : S(0);
    collective_->sum(std::span<S>(fused_.data(), static_cast<std::size_t>(fused_.size())));
    GradientSumResult result;
    result.loss = static_cast<double>(fused_(n));
    result.failures = static_cast<Index>(std::lround(static_cast<double>(fused_(n + 1))));
    if (result.failures > 0) return result;
    // The norm from the buffer, which holds every non-zero gradient entry in fewer entries than
    // the gradients; scaled there before unpacking.
    if (clip_norm > 0.0) {
      const double norm = std::sqrt(detail::sum_of_squares(fused_.data(), n));
      if (std::isfinite(norm)) {
        if (norm > clip_norm) fused_.head(n) *= static_cast<S>(clip_norm / norm);
        result.norm = norm;
        result.clipped = true;
      }
    }
    at = 0;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i];
      if (!p.trainable) continue;
      if (i == table_) {
        for (Index j = 0; j < p.gradient->cols(); ++j)
          for (const Index r : rows_) (*p.gradient)(r, j) = fused_(at++);
        continue;
      }
      p.gradient->reshaped() = fused_.segment(at, p.gradient->size());
      at += p.gradient->size();
    }
    return result;
  }

  /// The entries of the last sum's buffer (gradients, loss share, failure flag).
  [[nodiscard]] Index buffer_size() const noexcept { return fused_.size(); }
  /// The token table's rows packed by the last sum, in increasing order (empty without a table).
  [[nodiscard]] const std::vector<Index>& table_rows() const noexcept { return rows_; }

 private:
  /// rows_ ← the distinct ids of `ids` inside the table, in increasing order.
  void batch_rows(std::span<const TokenId> ids) {
    rows_.clear();
    if (table_ == no_table) return;
    detail::distinct_table_rows(ids, params_[table_].gradient->rows(), seen_, rows_);
  }

  static constexpr std::size_t no_table = static_cast<std::size_t>(-1);
  nn::ParameterList<S> params_;
  Collective* collective_;
  std::size_t table_ = no_table;     // the token table in params_
  Vector<S> fused_;                  // the buffer summed over the processes
  std::vector<Index> rows_;          // the table's rows with ids in the batch
  std::vector<unsigned char> seen_;  // which ids are in the batch
};

}  // namespace coulomb::train
