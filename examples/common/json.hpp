// SPDX-License-Identifier: MIT
// The pieces of JSON the tools' reports share (nlohmann-json, linked to the examples only; the
// library's own JSON-lines progress log is core/json.hpp): numbers that JSON cannot hold
// written as null, and one row of classification metrics.
#pragma once

#include <cmath>

#include <coulomb/metrics/evaluation.hpp>

#include <nlohmann/json.hpp>

namespace coulomb_examples {

/// A number for JSON: null when not finite (JSON has no NaN or infinity).
inline nlohmann::ordered_json json_number(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

/// The metrics of one row as a JSON object: count, accuracy, mcc, f1, ece, log_loss, brier.
inline nlohmann::ordered_json json_metrics(const coulomb::ClassificationMetrics& m) {
  return {{"count", m.count},
          {"accuracy", json_number(m.accuracy)},
          {"mcc", json_number(m.mcc)},
          {"f1", json_number(m.f1)},
          {"ece", json_number(m.ece)},
          {"log_loss", json_number(m.log_loss)},
          {"brier", json_number(m.brier)}};
}

}  // namespace coulomb_examples
