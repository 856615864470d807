// SPDX-License-Identifier: MIT
// evaluate: a saved text model (io/text_model.hpp) on a labelled TSV file, with the metrics of
// the paper's sentence benchmarks (Badiei Khuzani et al., 2026, §5).
//
//   evaluate --model model.clmb --data validation.tsv.gz [--columns auto|single|pair|glue-mrpc|
//            qqp|qqp-bundled] [--threads N] [--batch-size B] [--precision fp32|bf16] [--json OUT]
//            [--reliability-csv OUT] [--robustness] [--seed S] [--skip-malformed]
//
// The model file says which scalar type and feature map it was saved with; evaluate reads that
// first and dispatches to the matching TextClassifier<Map>. --precision bf16 runs the encoder's
// affine layers with bf16 weights and inputs and fp32 accumulation (core/precision.hpp); where
// that is not possible (no AVX512-BF16, a double model, COULOMB_DISABLE_BF16) it says so in one
// line on stderr and evaluates in fp32; the report names the precision used. The TSV file (plain or
// gzip) is encoded exactly as at training time: the vocabulary, its tokenizer options and the
// encoder options (maximum length, [CLS]) all come from the model file.
//
// Output (stdout): the model and data summary, the encoding counts (truncated sequences, empty
// texts, unknown-token rate), and one row of metrics (accuracy, MCC, F1, ECE with 15 bins, log
// loss, Brier) for the clean data and, with --robustness, for random token drop and swap at 10%
// and 20% (text/perturb.hpp, seeded by --seed). --json writes the same as a JSON object,
// --reliability-csv the 15-bin reliability diagram of the clean data.
//
// Bad input (docs/tools.md, section "evaluate"): a malformed row (wrong number of fields) or a
// label outside [0, C) stops with the file and the line (with --skip-malformed, rows with a
// wrong field count are skipped and counted instead); an empty sentence is encoded as one [UNK]
// and counted; a text of unknown words only is evaluated (its tokens are all [UNK]) and counted
// in the unknown-token rate; a text longer than the model's maximum length is truncated and
// counted; a model that was trained on sentence pairs (segment embeddings) refuses
// single-sentence data (pairs for a model without segment embeddings are evaluated, with a note
// on stderr); a file that is not a text model, or is damaged, stops with its name.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <coulomb/core/precision.hpp>
#include <coulomb/io/text_model.hpp>
#include <coulomb/metrics/evaluation.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/text/batching.hpp>
#include <coulomb/text/dataset.hpp>
#include <coulomb/text/encoder.hpp>
#include <coulomb/text/gzip.hpp>
#include <coulomb/text/perturb.hpp>

#include <nlohmann/json.hpp>

#include "common/cli.hpp"
#include "common/json.hpp"
#include "common/memory.hpp"

namespace {

using coulomb::Index;
using coulomb_examples::json_number;

struct Options {
  std::string model;
  std::string data;
  std::string columns = "auto";
  int threads = 1;
  Index batch_size = 64;
  std::string precision = "fp32";
  std::string json;
  std::string reliability_csv;
  bool robustness = false;
  std::uint64_t seed = 1;
  bool skip_malformed = false;
};

/// One row of the report.
struct Row {
  std::string name;
  coulomb::ClassificationMetrics metrics;
};

/// The columns of layout `name`; "auto" looks at the header line of `text`.
coulomb::TextColumns columns_for(const std::string& name, std::string_view text,
                                 std::string& chosen) {
  chosen = name;
  if (chosen == "auto") {
    std::string first(text.substr(0, text.find('\n')));
    if (!first.empty() && first.back() == '\r') first.pop_back();
    const std::string line = "\t" + first + "\t";
    auto has = [&](const char* column) {
      return line.find("\t" + std::string(column) + "\t") != std::string::npos;
    };
    if (has("is_duplicate"))
      chosen = "qqp";
    else if (has("#1 String"))
      chosen = "glue-mrpc";
    else if (has("question1"))
      chosen = "qqp-bundled";
    else if (has("sentence1"))
      chosen = "pair";
    else
      chosen = "single";
  }
  if (chosen == "single") return coulomb::TextColumns::sst2();
  if (chosen == "pair") return coulomb::TextColumns::mrpc();
  if (chosen == "glue-mrpc") return coulomb::TextColumns::glue_mrpc();
  if (chosen == "qqp") return coulomb::TextColumns::qqp();
  return coulomb::TextColumns::qqp_bundled();
}

/// Probabilities (n × C, double) of `model` on every sequence of `data`, in batches.
template <typename Model>
coulomb::Matrix<double> predict(Model& model, const coulomb::EncodedDataset& data,
                                Index batch_size) {
  using S = typename Model::FeatureMapType::Scalar;
  const Index n = data.size();
  const Index C = model.config().num_classes;
  coulomb::Matrix<double> probs(n, C);
  coulomb::TokenBatch batch;
  coulomb::Matrix<S> logits;
  coulomb::Matrix<double> p;
  std::vector<Index> indices;
  for (Index start = 0; start < n; start += batch_size) {
    const Index count = std::min(batch_size, n - start);
    indices.resize(static_cast<std::size_t>(count));
    for (Index k = 0; k < count; ++k) indices[static_cast<std::size_t>(k)] = start + k;
    coulomb::make_batch(data, indices, batch);
    model.infer(batch, logits);
    coulomb::nn::softmax_probabilities(logits.template cast<double>(), p);
    probs.middleRows(start, count) = p;
  }
  return probs;
}

struct Result {
  std::string model_line;
  coulomb::InferencePrecision precision = coulomb::InferencePrecision::fp32;  // the one used
  coulomb::io::TextModelHeader header;
  std::string columns;
  Index examples = 0;
  coulomb::TsvReport tsv;
  coulomb::EncodingStats stats;
  std::vector<Row> rows;
  std::vector<coulomb::ReliabilityBin> reliability;
};

template <typename Loaded>
Result evaluate(Loaded& loaded, const Options& opt, const std::string& tsv_text) {
  Result r;
  r.header = loaded.header;
  const coulomb::PrecisionChoice choice =
      loaded.model.set_inference_precision(coulomb::parse_inference_precision(opt.precision));
  if (!choice.notice.empty()) std::cerr << "evaluate: note: " << choice.notice << "\n";
  r.precision = choice.used;
  const coulomb::nn::TextClassifierConfig& c = loaded.model.config();
  {
    std::ostringstream os;
    os << (c.attention == coulomb::nn::AttentionKind::linear
               ? loaded.header.feature_map.name +
                     " linear attention (m = " + std::to_string(c.num_features) +
                     (c.shared_omega ? ", shared" : ", per-layer") + " Omega)"
               : std::string("softmax attention"))
       << ", " << coulomb::io::scalar_type_name(static_cast<std::uint8_t>(loaded.header.scalar))
       << ", " << c.num_layers << " layers, d = " << c.d_model << ", " << c.num_heads << " heads"
       << (c.tied_qk ? ", Q = K" : "") << (c.use_segments ? ", segments" : "")
       << (c.pooling == coulomb::nn::PoolingKind::pair ? ", pair head" : "")
       << (c.pair_alignment ? " with alignment" : "")
       << (c.pair_overlap ? (c.pair_alignment ? " and overlap" : " with overlap") : "")
       << ", vocabulary " << loaded.vocabulary.size() << ", max length "
       << loaded.header.encoder.max_length;
    r.model_line = os.str();
  }

  const coulomb::TextColumns columns = columns_for(opt.columns, tsv_text, r.columns);
  coulomb::TextReadOptions read;
  read.num_classes = static_cast<int>(c.num_classes);
  read.malformed =
      opt.skip_malformed ? coulomb::MalformedRows::skip : coulomb::MalformedRows::error;
  const coulomb::TextDataset data = coulomb::parse_text_dataset(tsv_text, opt.data, columns, read);
  if (data.examples.empty()) throw coulomb::io_error("'" + opt.data + "': no examples to evaluate");
  if (c.use_segments && !data.is_pair)
    throw coulomb::invalid_argument(
        "the model '" + opt.model +
        "' was trained on sentence pairs (it has segment embeddings), but --columns " + r.columns +
        " reads single sentences from '" + opt.data + "'");
  if (!c.use_segments && data.is_pair)
    std::cerr << "evaluate: note: the model has no segment embeddings; the sentence pairs of '"
              << opt.data << "' are encoded as one sequence joined by [SEP]\n";
  r.examples = data.size();
  r.tsv = data.report;
  const coulomb::TextEncoder encoder = loaded.make_encoder();
  const coulomb::EncodedDataset encoded = encoder.encode(data);
  r.stats = encoded.stats;

  auto score = [&](const std::string& name, const coulomb::EncodedDataset& d) {
    const coulomb::Matrix<double> probs = predict(loaded.model, d, opt.batch_size);
    r.rows.push_back({name, coulomb::evaluate_classification(probs, d.labels)});
    if (r.rows.size() == 1) r.reliability = coulomb::reliability_diagram(probs, d.labels);
  };
  score("clean", encoded);
  if (opt.robustness) {
    std::uint64_t stream = 0;
    for (const auto kind : {coulomb::PerturbationKind::drop, coulomb::PerturbationKind::swap}) {
      for (const double rate : {0.1, 0.2}) {
        coulomb::Rng rng = coulomb::Rng(opt.seed).split(stream++);
        const auto perturbed = coulomb::perturb_dataset(encoded, {kind, rate}, rng);
        score(std::string(kind == coulomb::PerturbationKind::drop ? "drop " : "swap ") +
                  std::to_string(static_cast<int>(std::lround(rate * 100))) + "%",
              perturbed);
      }
    }
  }
  return r;
}

void print(const Result& r, const Options& opt, std::ostream& out) {
  out << "model:     " << opt.model << "\n           " << r.model_line << "\n";
  out << "precision: " << coulomb::to_string(r.precision) << "\n";
  out << "data:      " << opt.data << " (" << r.examples << " examples, columns " << r.columns
      << ")\n";
  if (r.tsv.skipped_rows > 0) out << "skipped:   " << r.tsv.skipped_rows << " malformed rows\n";
  out << "encoding:  " << r.stats.truncated_sequences << " truncated sequences ("
      << r.stats.truncated_tokens << " tokens dropped), " << r.stats.empty_texts
      << " empty texts, unknown-token rate " << std::fixed << std::setprecision(2)
      << 100.0 * r.stats.unknown_rate() << "%\n\n";
  out << std::left << std::setw(10) << "row" << std::right;
  for (const char* h : {"accuracy", "MCC", "F1", "ECE", "LogLoss", "Brier"})
    out << std::setw(10) << h;
  out << "\n";
  out << std::setprecision(4);
  for (const auto& row : r.rows) {
    const auto& m = row.metrics;
    out << std::left << std::setw(10) << row.name << std::right;
    for (const double v : {m.accuracy, m.mcc, m.f1, m.ece, m.log_loss, m.brier})
      out << std::setw(10) << v;
    out << "\n";
  }
  out.unsetf(std::ios::floatfield);
}

void write_json(const Result& r, const Options& opt, const std::string& command) {
  using Json = nlohmann::ordered_json;
  Json metadata = Json::object();
  for (const auto& [k, v] : r.header.metadata) metadata[k] = v;
  Json rows = Json::array();
  for (const auto& row : r.rows) {
    Json named = {{"name", row.name}};
    named.update(coulomb_examples::json_metrics(row.metrics));
    rows.push_back(std::move(named));
  }
  Json reliability = Json::array();
  for (const auto& b : r.reliability)
    reliability.push_back({{"lower", json_number(b.lower)},
                           {"upper", json_number(b.upper)},
                           {"count", b.count},
                           {"mean_confidence", json_number(b.mean_confidence)},
                           {"accuracy", json_number(b.accuracy)}});
  const Json report = {
      {"command", command},
      {"model", opt.model},
      {"data", opt.data},
      {"columns", r.columns},
      {"feature_map", r.header.feature_map.name},
      {"attention", coulomb::nn::to_string(r.header.config.attention)},
      {"scalar", coulomb::io::scalar_type_name(static_cast<std::uint8_t>(r.header.scalar))},
      {"precision", coulomb::to_string(r.precision)},
      {"model_metadata", metadata},
      {"examples", r.examples},
      {"skipped_rows", r.tsv.skipped_rows},
      {"truncated_sequences", r.stats.truncated_sequences},
      {"truncated_tokens", r.stats.truncated_tokens},
      {"empty_texts", r.stats.empty_texts},
      {"unknown_token_rate", json_number(r.stats.unknown_rate())},
      {"rows", rows},
      {"reliability", reliability}};
  coulomb_examples::write_output("--json", opt.json,
                                 report.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

void write_reliability(const Result& r, const Options& opt) {
  std::ostringstream csv;
  csv << "bin,lower,upper,count,mean_confidence,accuracy\n";
  for (std::size_t i = 0; i < r.reliability.size(); ++i) {
    const auto& b = r.reliability[i];
    csv << i << ',' << json_number(b.lower) << ',' << json_number(b.upper) << ',' << b.count << ','
        << json_number(b.mean_confidence) << ',' << json_number(b.accuracy) << '\n';
  }
  coulomb_examples::write_output("--reliability-csv", opt.reliability_csv, csv.str());
}

}  // namespace

int main(int argc, char** argv) {
  coulomb_examples::keep_freed_memory();
  coulomb_examples::CommandLine cli(
      "evaluate",
      "Evaluates a saved text model (written by text_classification, or by "
      "coulomb::io::save_text_model) on a labelled TSV file, plain or gzip-compressed, encoded "
      "with the model's own vocabulary and encoder options. Prints accuracy, MCC, F1, ECE (15 "
      "bins), log loss and Brier score, the number of truncated sequences and empty texts, and "
      "with --robustness the same metrics under random token drop and swap at 10% and 20%.");
  Options opt;
  auto& app = cli.app();
  app.add_option("--model", opt.model, "Model file (coulomb text model)")
      ->type_name("FILE")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--data", opt.data, "Labelled TSV file (.tsv or .tsv.gz) with a header")
      ->type_name("FILE")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--columns", opt.columns,
                 "Column layout: auto (from the header), single (label, sentence), pair (label, "
                 "sentence1, sentence2), glue-mrpc, qqp (GLUE's QQP) or qqp-bundled (label, "
                 "question1, question2)")
      ->type_name("LAYOUT")
      ->check(CLI::IsMember({"auto", "single", "pair", "glue-mrpc", "qqp", "qqp-bundled"}))
      ->capture_default_str();
  cli.add_threads(opt.threads, "Attention threads");
  app.add_option("--batch-size", opt.batch_size, "Sequences per forward pass")
      ->check(coulomb_examples::integer_in(1, 65536))
      ->capture_default_str();
  app.add_option("--precision", opt.precision,
                 "Arithmetic of the forward: fp32 (the reference) or bf16 (the encoder's affine "
                 "layers with bf16 weights and inputs, fp32 accumulation; needs AVX512-BF16 and "
                 "a float model, otherwise fp32 with a note on stderr)")
      ->type_name("PRECISION")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--json", opt.json,
                 "Also write the report as JSON to FILE ('-': standard output, and the table "
                 "goes to stderr)")
      ->type_name("FILE");
  app.add_option("--reliability-csv", opt.reliability_csv,
                 "Write the 15-bin reliability diagram of the clean data as CSV to FILE ('-': "
                 "standard output, and the table goes to stderr)")
      ->type_name("FILE");
  app.add_flag("--robustness", opt.robustness,
               "Also evaluate under random token drop and swap at 10% and 20%");
  cli.add_seed(opt.seed, "Seed of the robustness perturbations");
  app.add_flag("--skip-malformed", opt.skip_malformed,
               "Skip (and count) rows with a wrong number of fields instead of stopping");
  if (const auto status = cli.parse(argc, argv)) return *status;
  coulomb_examples::OutputPlan plan;
  plan.input("--model", opt.model);
  plan.input("--data", opt.data);
  if (!opt.json.empty()) plan.output("--json", opt.json, true);
  if (!opt.reliability_csv.empty()) plan.output("--reliability-csv", opt.reliability_csv, true);
  if (const auto status = cli.check_paths(plan)) return *status;
  // With a report on standard output, the table goes to stderr: stdout carries only the report.
  std::ostream& table = opt.json == "-" || opt.reliability_csv == "-" ? std::cerr : std::cout;

  try {
    const std::string tsv_text = coulomb::read_text_file_auto(opt.data);  // once: pipes work
    coulomb::io::TextModelLoadOptions load;
    load.num_threads = opt.threads;
    const Result result = coulomb::io::visit_text_model(
        opt.model, [&](auto& loaded) { return evaluate(loaded, opt, tsv_text); }, load);
    print(result, opt, table);
    table.flush();
    if (!opt.json.empty()) write_json(result, opt, cli.command_line());
    if (!opt.reliability_csv.empty()) write_reliability(result, opt);
  } catch (const std::exception& e) {
    return cli.fail(e);
  }
  return 0;
}
