// SPDX-License-Identifier: MIT
/// @file attention/detail_feature_map_set.hpp
/// @brief Internal: the feature maps of a LinearAttention, owned or borrowed (docs/attention.md,
/// "Who owns the feature map").
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "../core/config.hpp"

namespace coulomb::detail {

/// Either the maps the attention owns (copied or moved in), or one map it borrows from the
/// caller (constructed from std::ref), never both. Copies of a borrowing set borrow the same map.
template <typename Map>
class FeatureMapSet {
 public:
  explicit FeatureMapSet(std::vector<Map> owned) : owned_(std::move(owned)) {}
  explicit FeatureMapSet(Map& borrowed) noexcept : borrowed_(&borrowed) {}

  Index size() const noexcept { return borrowed_ ? 1 : static_cast<Index>(owned_.size()); }
  bool borrowed() const noexcept { return borrowed_ != nullptr; }

  const Map& operator[](Index i) const {
    return borrowed_ ? *borrowed_ : owned_[static_cast<std::size_t>(i)];
  }
  Map& operator[](Index i) { return borrowed_ ? *borrowed_ : owned_[static_cast<std::size_t>(i)]; }

 private:
  std::vector<Map> owned_;
  Map* borrowed_ = nullptr;
};

}  // namespace coulomb::detail
