// SPDX-License-Identifier: MIT
/// @file data/listops.hpp
/// @brief ListOps (Nangia & Bowman, *ListOps: A Diagnostic Dataset for Latent Tree Learning*,
/// NAACL SRW 2018), generated as the Long Range Arena does it (Tay et al., *Long Range Arena:
/// A Benchmark for Efficient Transformers*, ICLR 2021; lra_benchmarks/data/listops.py).
///
/// An example is a prefix expression over the digits 0–9 with the operators MAX, MIN, MED
/// (median; of an even count, the floor of the mean of the two middle values, as LRA's
/// int(np.median)) and SM (sum modulo 10), written with its brackets, for example
/// `[MAX 2 9 [MIN 4 7 ] 0 ]`; the label (10 classes) is its value. The trees come from LRA's
/// branching process: a node at depth d < max_depth (the root has depth 1) is an operator with
/// probability operator_probability (LRA: 0.25), otherwise a uniform digit; an operator has
/// a uniform number of arguments in [2, max_args] and a uniform operator. Its length counts
/// the tokens: one per operator (with its opening bracket), digit and closing bracket.
///
/// LRA keeps a tree when min < length < max (500, 2000), drawing trees until enough distinct
/// ones are found. Here each tree is generated depth-first into its tokens and abandoned as
/// soon as its length can no longer stay within max_length (the tokens written plus one per
/// unstarted argument and pending bracket already exceed it), and the root is drawn as an
/// operator when min_length > 1 (a single digit would be rejected). Both change only the work,
/// not the distribution: the kept trees follow LRA's process conditioned on the length range
/// exactly (docs/tasks.md compares the lengths with the exact distribution). Brackets are kept
/// as tokens (an early LRA input pipeline's tokenizer dropped them, leaving the structure
/// ambiguous).
///
/// Determinism: only integer draws from coulomb::Rng (bounded integers by multiply-and-shift
/// with rejection, and a comparison of 64 random bits with p·2⁶⁴), so a seed gives the same
/// sequences on every platform. Split k (0 train, 1 dev, 2 test) is drawn from Rng(seed).split(k),
/// so the dev and test splits do not depend on the size of the training split.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/check.hpp"
#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../core/random.hpp"
#include "token_sequences.hpp"

namespace coulomb::data {

/// The fixed vocabulary of ListOps. The special ids are those of text/vocabulary.hpp
/// (Vocabulary::pad_id = 0, cls_id = 3), so padded batches and [CLS] pooling work unchanged;
/// ids 1 and 2 ([UNK], [SEP]) are reserved and never generated.
struct ListOpsVocabulary {
  static constexpr TokenId pad = 0;          ///< padding, [PAD]
  static constexpr TokenId unk = 1;          ///< [UNK]: reserved, never generated
  static constexpr TokenId sep = 2;          ///< [SEP]: reserved, never generated
  static constexpr TokenId cls = 3;          ///< [CLS]: first token when ListOpsOptions::add_cls
  static constexpr TokenId first_digit = 4;  ///< the digit d has id first_digit + d
  static constexpr TokenId op_min = 14;      ///< `[MIN`: the smallest argument
  static constexpr TokenId op_max = 15;      ///< `[MAX`: the largest argument
  static constexpr TokenId op_median = 16;   ///< `[MED`: the median (floor of the middle mean)
  static constexpr TokenId op_sum_mod = 17;  ///< `[SM`: the sum of the arguments modulo 10
  static constexpr TokenId close = 18;       ///< `]`: closes the innermost operator
  static constexpr TokenId size = 19;        ///< number of ids; every id lies in [0, size)

  /// The id of digit d (0 ≤ d ≤ 9).
  static constexpr TokenId digit(int d) noexcept { return first_digit + d; }
  /// True for the ten digit ids.
  static constexpr bool is_digit(TokenId id) noexcept {
    return id >= first_digit && id < first_digit + 10;
  }
  /// True for the four operator ids.
  static constexpr bool is_operator(TokenId id) noexcept {
    return id >= op_min && id <= op_sum_mod;
  }
  /// The token's text in LRA's files ("[MAX", "7", "]", …; "[PAD]" and the like for the
  /// special ids), or an empty view for an id outside [0, size).
  static constexpr std::string_view name(TokenId id) noexcept {
    constexpr std::string_view names[] = {"[PAD]", "[UNK]", "[SEP]", "[CLS]", "0", "1", "2",
                                          "3",     "4",     "5",     "6",     "7", "8", "9",
                                          "[MIN",  "[MAX",  "[MED",  "[SM",   "]"};
    return id >= 0 && id < size ? names[id] : std::string_view{};
  }
};

/// Options of generate_listops. The defaults are the project's smaller protocol (sizes and
/// lengths chosen in docs/tasks.md for about 2 hours per results table on 2 cores); lra() is
/// LRA's.
struct ListOpsOptions {
  Index num_train = 10'000;  ///< sequences of the training split
  Index num_dev = 1'000;     ///< sequences of the development split
  Index num_test = 1'000;    ///< sequences of the test split
  /// Fewest tokens of an expression (inclusive; [CLS] not counted). At most max_length.
  Index min_length = 100;
  /// Most tokens of an expression (inclusive; [CLS] not counted).
  Index max_length = 500;
  /// Largest tree depth, the root at depth 1 and digits counted, as LRA's max_depth: brackets
  /// nest at most max_depth − 1 deep. At least 1.
  int max_depth = 10;
  /// Most arguments of an operator (at least 2, the fewest).
  int max_args = 10;
  /// Probability that a node at a depth below max_depth is an operator, in (0, 1] (LRA: 0.25).
  double operator_probability = 0.25;
  /// Start every sequence with [CLS] (for a model that pools it, as LRA's does).
  bool add_cls = false;
  /// Give up (coulomb::error) after this many rejected trees in a row (too short, too long or
  /// repeated; at least 1): a length range the process almost never reaches, or fewer distinct
  /// trees than requested. LRA's protocol rejects 2 trees per kept one on average.
  Index max_rejections_in_a_row = 1'000'000;

  /// LRA's protocol: 96,000 / 2,000 / 2,000 sequences whose lengths satisfy 500 < length < 2000
  /// (LRA's bounds are exclusive: here 501 to 1999), depth ≤ 10, ≤ 10 arguments, and [CLS].
  static ListOpsOptions lra() {
    ListOpsOptions o;
    o.num_train = 96'000;
    o.num_dev = 2'000;
    o.num_test = 2'000;
    o.min_length = 501;
    o.max_length = 1'999;
    o.add_cls = true;
    return o;
  }
};

namespace detail {

// Most tokens a tree of depth ≤ max_depth with ≤ max_args arguments per operator can have
// (T(1) = 1, T(d) = 2 + max_args·T(d − 1)), saturated at `cap`.
inline Index listops_longest(int max_depth, int max_args, Index cap) noexcept {
  Index longest = 1;
  for (int d = 2; d <= max_depth && longest < cap; ++d)
    longest = longest > (cap - 2) / max_args ? cap : 2 + max_args * longest;
  return std::min(longest, cap);
}

// Throws invalid_argument, naming the field, unless `o` describes a task that can be generated.
inline void validate_listops(const ListOpsOptions& o, const char* where) {
  auto name = [](const char* field) { return std::string("argument 'options.") + field + "' "; };
  coulomb::detail::require(o.num_train >= 0, where, name("num_train") + "must be >= 0");
  coulomb::detail::require(o.num_dev >= 0, where, name("num_dev") + "must be >= 0");
  coulomb::detail::require(o.num_test >= 0, where, name("num_test") + "must be >= 0");
  coulomb::detail::require(o.max_rejections_in_a_row >= 1, where,
                           name("max_rejections_in_a_row") + "must be at least 1");
  coulomb::detail::require(
      o.min_length >= 1, where,
      name("min_length") + "must be at least 1, got " + std::to_string(o.min_length));
  coulomb::detail::require(
      o.max_length >= o.min_length, where,
      name("max_length") + "= " + std::to_string(o.max_length) +
          " is smaller than options.min_length = " + std::to_string(o.min_length));
  coulomb::detail::require(
      o.max_depth >= 1, where,
      name("max_depth") + "must be at least 1, got " + std::to_string(o.max_depth));
  coulomb::detail::require(
      o.max_args >= 2, where,
      name("max_args") + "must be at least 2, got " + std::to_string(o.max_args));
  coulomb::detail::require(o.operator_probability > 0.0 && o.operator_probability <= 1.0, where,
                           name("operator_probability") + "must lie in (0, 1], got " +
                               std::to_string(o.operator_probability));
  const Index longest = listops_longest(o.max_depth, o.max_args, o.min_length);
  coulomb::detail::require(
      longest >= o.min_length, where,
      name("min_length") + "= " + std::to_string(o.min_length) +
          " is longer than any tree of depth options.max_depth = " + std::to_string(o.max_depth) +
          " with options.max_args = " + std::to_string(o.max_args) + " can be (" +
          std::to_string(longest) + " tokens)");
}

// Counts of the arguments of one operator by value (0–9).
using ListOpsCounts = std::array<Index, 10>;

// The value of operator `op` applied to arguments with the value counts `counts` (at least one
// argument): MIN, MAX, MED (the floor of the mean of the two middle values of an even count, as
// LRA's int(np.median)) or SM (the sum modulo 10).
inline int listops_apply(TokenId op, const ListOpsCounts& counts) noexcept {
  Index n = 0;
  Index sum = 0;
  for (std::size_t v = 0; v < 10; ++v) {
    n += counts[v];
    sum += static_cast<Index>(v) * counts[v];
  }
  // The k-th smallest argument (0-based).
  auto order_statistic = [&counts](Index k) {
    std::size_t v = 0;
    for (Index below = counts[0]; below <= k; below += counts[v]) ++v;
    return static_cast<int>(v);
  };
  switch (op) {
    case ListOpsVocabulary::op_min:
      return order_statistic(0);
    case ListOpsVocabulary::op_max:
      return order_statistic(n - 1);
    case ListOpsVocabulary::op_median:
      return (order_statistic((n - 1) / 2) + order_statistic(n / 2)) / 2;
    default:
      return static_cast<int>(sum % 10);
  }
}

// Samples LRA's trees depth-first into their tokens and values, abandoning a tree once it must
// exceed max_length.
class ListOpsSampler {
 public:
  explicit ListOpsSampler(const ListOpsOptions& o)
      : min_length_(o.min_length),
        max_length_(o.max_length),
        max_depth_(o.max_depth),
        always_operator_(o.operator_probability >= 1.0),
        // p·2⁶⁴ is exact (ldexp) and below 2⁶⁴ for p < 1, so the comparison is integer only.
        operator_threshold_(
            always_operator_ ? 0
                             : static_cast<std::uint64_t>(std::ldexp(o.operator_probability, 64))),
        arg_count_(static_cast<std::uint32_t>(o.max_args - 1)) {}

  // Writes one tree's tokens into `out` and returns its value, or −1 if its length falls
  // outside [min_length, max_length] (then `out` holds a prefix or the whole short tree).
  template <std::uniform_random_bit_generator G>
  int try_sample(G& rng, std::vector<TokenId>& out) {
    out.clear();
    open_.clear();
    // A root digit has length 1: when min_length > 1 it would be rejected, so it is not drawn.
    if (max_depth_ == 1 || (min_length_ == 1 && !is_operator_draw(rng))) {
      const int digit = draw_digit(rng);
      out.push_back(ListOpsVocabulary::digit(digit));
      return digit;
    }
    Index pending = 0;  // tokens still needed at least: one per unstarted argument and bracket
    open_operator(rng, out, pending);
    for (;;) {
      if (static_cast<Index>(out.size()) + pending > max_length_) return -1;
      Frame& top = open_.back();
      if (top.remaining == 0) {
        out.push_back(ListOpsVocabulary::close);
        --pending;
        const int value = listops_apply(top.op, top.counts);
        open_.pop_back();
        if (open_.empty()) return static_cast<Index>(out.size()) >= min_length_ ? value : -1;
        ++open_.back().counts[static_cast<std::size_t>(value)];
        continue;
      }
      --top.remaining;
      --pending;
      // The child's depth is the number of open operators + 1 (the root has depth 1).
      if (static_cast<int>(open_.size()) + 1 < max_depth_ && is_operator_draw(rng)) {
        open_operator(rng, out, pending);
      } else {
        const int digit = draw_digit(rng);
        out.push_back(ListOpsVocabulary::digit(digit));
        ++top.counts[static_cast<std::size_t>(digit)];
      }
    }
  }

 private:
  struct Frame {
    TokenId op;            // the operator's id
    int remaining;         // arguments still to start
    ListOpsCounts counts;  // values of the finished arguments
  };

  template <std::uniform_random_bit_generator G>
  bool is_operator_draw(G& rng) {
    return always_operator_ || coulomb::detail::random_bits64(rng) < operator_threshold_;
  }

  template <std::uniform_random_bit_generator G>
  int draw_digit(G& rng) {
    return static_cast<int>(digit_(rng));
  }

  template <std::uniform_random_bit_generator G>
  void open_operator(G& rng, std::vector<TokenId>& out, Index& pending) {
    const TokenId op = ListOpsVocabulary::op_min + static_cast<TokenId>(operator_(rng));
    const int args = 2 + static_cast<int>(arg_count_(rng));
    out.push_back(op);
    open_.push_back(Frame{op, args, {}});
    pending += args + 1;
  }

  Index min_length_;
  Index max_length_;
  int max_depth_;
  bool always_operator_;
  std::uint64_t operator_threshold_;
  UniformBelow arg_count_;  // the max_args − 1 argument counts 2 … max_args
  UniformBelow digit_{10};
  UniformBelow operator_{4};
  std::vector<Frame> open_;  // the open operators, innermost last
};

}  // namespace detail

/// The value of a ListOps expression given as token ids (a leading [CLS] and trailing [PAD]s
/// are skipped): the class label. Throws invalid_argument, naming the position, for a token
/// outside the vocabulary, a bracket that does not match, an operator without arguments, or
/// anything but exactly one expression.
inline int listops_value(std::span<const TokenId> tokens) {
  using V = ListOpsVocabulary;
  const char* where = "coulomb::data::listops_value";
  // The open operators, innermost last, with the value counts of their finished arguments.
  std::vector<std::pair<TokenId, detail::ListOpsCounts>> open;
  int result = -1;  // value of the complete expression, once there is one
  const std::size_t first = !tokens.empty() && tokens[0] == V::cls ? 1 : 0;
  std::size_t last = tokens.size();
  while (last > first && tokens[last - 1] == V::pad) --last;
  auto fail = [&](std::size_t t, const std::string& what) {
    coulomb::detail::throw_invalid(
        where, "argument 'tokens': " + what + " at position " + std::to_string(t));
  };
  // Hands a value to the enclosing operator, or makes it the result.
  auto give = [&](std::size_t t, int value) {
    if (!open.empty()) {
      ++open.back().second[static_cast<std::size_t>(value)];
    } else {
      if (result >= 0) fail(t, "a second expression ends");
      result = value;
    }
  };
  for (std::size_t t = first; t < last; ++t) {
    const TokenId id = tokens[t];
    if (V::is_digit(id)) {
      give(t, id - V::first_digit);
    } else if (V::is_operator(id)) {
      open.emplace_back(id, detail::ListOpsCounts{});
    } else if (id == V::close) {
      if (open.empty()) fail(t, "a ']' closes no operator");
      const auto [op, counts] = open.back();
      open.pop_back();
      bool any = false;
      for (const Index c : counts) any = any || c > 0;
      if (!any) fail(t, "an operator without arguments ends");
      give(t, detail::listops_apply(op, counts));
    } else {
      fail(t, "the id " + std::to_string(id) + " is not a digit, an operator or ']'");
    }
  }
  if (!open.empty()) fail(last, "the expression ends with an operator open");
  if (result < 0) fail(last, "no expression");
  return result;
}

/// Generates the train, dev and test splits of ListOps from `seed` (see the file comment):
/// sequences of ids of ListOpsVocabulary, labels in [0, 10), no targets. No sequence occurs
/// twice in the three splits together (LRA keeps distinct trees too). Throws invalid_argument,
/// naming the field, for options that cannot be generated, and coulomb::error after
/// options.max_rejections_in_a_row rejected trees in a row.
inline SequenceSplits generate_listops(const ListOpsOptions& options, std::uint64_t seed) {
  const char* where = "coulomb::data::generate_listops";
  detail::validate_listops(options, where);
  const auto rejection_limit = static_cast<std::uint64_t>(options.max_rejections_in_a_row);
  SequenceSplits out;
  detail::ListOpsSampler sampler(options);
  std::vector<TokenId> tree;
  std::vector<TokenId> sequence;
  const Index sizes[] = {options.num_train, options.num_dev, options.num_test};
  // Reserved for lengths averaging the middle of the range (LRA's: 1,035 of 501–1,999), up to
  // 2²⁷ ids (512 MB); beyond, the vector grows.
  const auto middle = static_cast<std::size_t>(options.min_length / 2 + options.max_length / 2 + 1);
  auto prepare = [&](TokenSequenceDataset& d, std::uint64_t k) {
    d.num_classes = 10;
    d.vocabulary_size = ListOpsVocabulary::size;
    d.ids.reserve(std::min(static_cast<std::size_t>(sizes[k]), (std::size_t{1} << 27) / middle) *
                  middle);
  };
  auto draw = [&](Rng& rng) -> std::optional<detail::SequenceDraw> {
    const int label = sampler.try_sample(rng, tree);
    if (label < 0) return std::nullopt;
    sequence.clear();
    if (options.add_cls) sequence.push_back(ListOpsVocabulary::cls);
    sequence.insert(sequence.end(), tree.begin(), tree.end());
    return detail::SequenceDraw{sequence, label, {}};
  };
  auto too_many = [&] {
    return "trees in a row had a length outside [options.min_length, options.max_length] = [" +
           std::to_string(options.min_length) + ", " + std::to_string(options.max_length) +
           "] or repeated an earlier one (options.max_rejections_in_a_row)";
  };
  detail::generate_splits(out, sizes, seed, rejection_limit, where, prepare, draw, too_many);
  return out;
}

/// LRA's text form of a ListOps sequence, tokens separated by one space, for example
/// `[MAX 2 9 [MIN 4 7 ] 0 ]` ([CLS] and [PAD] are left out). Throws invalid_argument for an
/// id that is not a digit, an operator, ']', [CLS] or [PAD].
inline std::string listops_text(std::span<const TokenId> tokens) {
  using V = ListOpsVocabulary;
  std::string text;
  text.reserve(2 * tokens.size());
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const TokenId id = tokens[t];
    if (id == V::cls || id == V::pad) continue;
    coulomb::detail::require(
        V::is_digit(id) || V::is_operator(id) || id == V::close, "coulomb::data::listops_text",
        "argument 'tokens' holds the id " + std::to_string(id) + " at position " +
            std::to_string(t) + ", which is not a ListOps token");
    if (!text.empty()) text += ' ';
    text += V::name(id);
  }
  return text;
}

/// A split as a TSV file's content in LRA's layout: the header `Source<TAB>Target`, then one
/// line per sequence with listops_text and the label. text/dataset.hpp reads it with the
/// columns {label "Target", text_a "Source"} and 10 classes (docs/tasks.md).
inline std::string listops_tsv(const TokenSequenceDataset& split) {
  std::string tsv = "Source\tTarget\n";
  for (Index i = 0; i < split.size(); ++i) {
    tsv += listops_text(split.sequence(i));
    tsv += '\t';
    tsv += std::to_string(split.labels[static_cast<std::size_t>(i)]);
    tsv += '\n';
  }
  return tsv;
}

}  // namespace coulomb::data
