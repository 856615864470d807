// SPDX-License-Identifier: MIT
// text_classification: the paper's sentence benchmarks, one run (Badiei Khuzani et al., 2026,
// §5). A small Transformer with linear attention over a random feature map (vanilla: Ω drawn
// once and frozen; learned: Ω learned by the particle model in Phase A, then frozen) or with
// exact softmax attention is trained with cross-entropy (Phase B) and evaluated.
//
//   text_classification [--data DIR] [--task auto|single|pair|glue-mrpc|qqp]
//                       [--feature-map favor|porf-exp|porf-softplus|porf-relu|softmax-feat]
//                       [--kernel vanilla|learned] [--attention linear|softmax] [--tied-qk]
//                       [--pooling mean|pair|auto] [--pair-alignment] [--swap-pairs]
//                       [--tune-threshold] [--seed S] [--threads N] [--precision fp32|bf16]
//                       [sizes and rates, see --help] [--out DIR]
//                       [--model PATH]
//
// The data directory holds train.tsv(.gz) and validation.tsv(.gz) (the bundled data/sst2 and
// data/rotten_tomatoes; MRPC or QQP from GLUE). A seeded 10% of the training split is held out
// as the development set: early stopping and the choice of the best epoch use it alone. The
// figures printed and written are on the validation split, which selects nothing.
//
// Prints the metric table (accuracy, MCC, F1, ECE with 15 bins, log loss, Brier score) on the
// validation split and under random token drop and swap at 10% and 20%, the Phase A and Phase B
// times and the inference time per 1,000 sequences (validation forwards in --precision: bf16
// runs the encoder's affine layers in bf16 where the CPU has AVX512-BF16, and otherwise notes
// the fallback to fp32; training is always fp32); writes <out>/<run>.json (the report),
// <out>/<run>_reliability.csv and, with gnuplot, <out>/<run>_reliability.png; with --model, the
// trained model (io/text_model.hpp). The core of a run
// is examples/common/text_experiment.hpp. See docs/tools.md.
//
// Built with MPI (COULOMB_EXAMPLES_MPI), `mpirun -np P text_classification …` runs it as P
// data-parallel processes (docs/distributed.md): every process reads the data and holds the
// model, Phase A, Phase B and the evaluations are shared (common/processes.hpp); rank 0 alone
// prints and writes the files. With --checkpoint, rank 0 writes the checkpoints; with --resume,
// every process reads them (the path must be visible to every process).
//
// Test hook (for the kill-and-resume test, examples/mpi_kill_resume_test.cmake; not for use):
// the environment variable COULOMB_TEST_KILL_RANK_AT_STEP=r:n makes process r kill itself
// with SIGKILL right after Phase B's optimizer step n, when checkpoints are written.
#include <csignal>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "common/cli.hpp"
#include "common/memory.hpp"
#include "common/processes.hpp"
#include "common/text_experiment.hpp"

namespace {

namespace ce = coulomb_examples;

/// What --help says about running under mpirun.
std::string processes_help() {
  if (!ce::built_with_mpi())
    return " This build has no MPI: it runs as one process (docs/distributed.md).";
  return " It can run as P data-parallel processes with `mpirun -np P text_classification ...` "
         "(on one host or across hosts; docs/distributed.md): every process reads the data and "
         "holds the whole model, each global batch is split between them and their gradients, "
         "the Phase A alignment sums and the evaluations are summed, so every process keeps the "
         "same parameters; process 0 alone prints and writes the files, checkpoints included. "
         "--threads is per process. --resume makes every process read the checkpoints: their "
         "path must be visible to every process (a shared file system), and the run must have "
         "the same number of processes as the one that wrote them.";
}

/// The test hook COULOMB_TEST_KILL_RANK_AT_STEP=r:n (see the file comment): a checkpoint
/// observer that kills process r after Phase B's step n; empty when the variable is not set.
/// Throws coulomb::invalid_argument for a value that is not r:n.
std::function<void(const coulomb::train::CheckpointEvent&)> kill_hook(int rank) {
  const char* value = std::getenv("COULOMB_TEST_KILL_RANK_AT_STEP");
  if (value == nullptr || *value == '\0') return {};
  const std::string text(value);
  const auto colon = text.find(':');
  std::size_t used_rank = 0, used_step = 0;
  int victim = -1;
  long long step = -1;
  try {
    victim = std::stoi(text.substr(0, colon), &used_rank);
    step = std::stoll(text.substr(colon + 1), &used_step);
  } catch (const std::exception&) {
    victim = -1;
  }
  if (colon == std::string::npos || used_rank != colon || used_step != text.size() - colon - 1 ||
      victim < 0 || step < 1)
    throw coulomb::invalid_argument(
        "COULOMB_TEST_KILL_RANK_AT_STEP must be r:n (a rank and a step >= 1), got '" + text + "'");
  if (victim != rank) return {};
  return [step](const coulomb::train::CheckpointEvent& e) {
    if (e.kind == coulomb::train::CheckpointEventKind::step && e.phase == "phase_b" &&
        e.step == step)
      std::raise(SIGKILL);
  };
}

int run(int argc, char** argv, ce::Processes& processes) {
  ce::CommandLine cli(
      "text_classification",
      "Trains and evaluates the Transformer text classifier of the paper's sentence benchmarks "
      "on one dataset: linear attention over a random feature map (kernel vanilla: Omega drawn "
      "once and frozen; learned: Omega learned from the labels by the particle model in Phase A, "
      "then frozen) or exact softmax attention, trained with cross-entropy (Phase B) with early "
      "stopping on a development set held out from the training split. Prints accuracy, MCC, "
      "F1, ECE, log loss and Brier score on the validation split, also under random token drop "
      "and swap, and the timings; writes a JSON report, the reliability diagram as CSV and, "
      "with gnuplot, as PNG." +
          processes_help());
  ce::TextExperimentConfig cfg;
  cfg.data_dir = "data/rotten_tomatoes";
  std::filesystem::path out = "text_classification_out";
  auto& app = cli.app();
  app.add_option("--data", cfg.data_dir,
                 "Data directory holding train.tsv(.gz) and validation.tsv(.gz)")
      ->type_name("DIR")
      ->check(ce::existing_directory())
      ->capture_default_str();
  app.add_option("--task", cfg.task,
                 "Column layout: auto (from the header), single (label, sentence), pair (label, "
                 "sentence1, sentence2), glue-mrpc, qqp")
      ->check(CLI::IsMember({"auto", "single", "pair", "glue-mrpc", "qqp"}))
      ->capture_default_str();
  app.add_option("--feature-map", cfg.feature_map, "Feature map of linear attention")
      ->check(CLI::IsMember(ce::feature_map_names()))
      ->capture_default_str();
  app.add_option("--kernel", cfg.kernel,
                 "vanilla (Omega random, frozen) or learned (Phase A, then frozen)")
      ->check(CLI::IsMember({"vanilla", "learned"}))
      ->capture_default_str();
  app.add_option("--attention", cfg.attention, "linear (feature map) or softmax (exact)")
      ->check(CLI::IsMember({"linear", "softmax"}))
      ->capture_default_str();
  app.add_flag("--tied-qk", cfg.tied_qk, "Tie queries and keys (Q = K)");
  app.add_flag("--shared-omega", cfg.shared_omega, "One Omega for all layers");
  cli.add_seed(cfg.seed);
  cli.add_threads(cfg.threads, "Attention threads (of each process under mpirun)");
  app.add_option("--precision", cfg.precision,
                 "Arithmetic of the validation forwards: fp32, or bf16 (the encoder's affine "
                 "layers with bf16 weights and inputs, fp32 accumulation; needs AVX512-BF16, "
                 "otherwise fp32 with a note); training is always fp32")
      ->type_name("PRECISION")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--d-model", cfg.d_model, "Model width")
      ->check(ce::integer_in(2, 4096))
      ->capture_default_str();
  app.add_option("--heads", cfg.heads, "Attention heads (divide --d-model)")
      ->check(ce::integer_in(1, 256))
      ->capture_default_str();
  app.add_option("--layers", cfg.layers, "Encoder layers")
      ->check(ce::integer_in(1, 64))
      ->capture_default_str();
  app.add_option("--d-ff", cfg.d_ff, "Feed-forward width")
      ->check(ce::integer_in(1, 65536))
      ->capture_default_str();
  app.add_option("--features", cfg.features, "Random features m per feature map")
      ->check(ce::integer_in(2, 65536))
      ->capture_default_str();
  app.add_option("--pooling", cfg.pooling,
                 "Pooling: mean (over all tokens), pair (the pair head: each sentence pooled "
                 "apart, classified on [u, v, |u - v|, u * v]; sentence pairs only) or auto (pair "
                 "for sentence pairs, mean otherwise)")
      ->check(CLI::IsMember({"mean", "pair", "auto"}))
      ->capture_default_str();
  app.add_option("--pair-hidden", cfg.pair_hidden,
                 "Width of the pair head's GELU hidden layer (0: a linear classifier)")
      ->check(ce::integer_in(0, 65536))
      ->capture_default_str();
  app.add_flag("--pair-alignment", cfg.pair_alignment,
               "Pair head: also classify on how well each sentence's words find a match in the "
               "other (mean over its tokens of the best cosine similarity of token embeddings)");
  app.add_flag("--pair-overlap,!--no-pair-overlap", cfg.pair_overlap,
               "Pair head: also classify on the lexical overlap of the two sentences (the "
               "fraction of each sentence's word n-grams, n = 1, 2, 3, found in the other), "
               "standardized on the training split")
      ->capture_default_str();
  app.add_flag("--overlap-warm-start,!--no-overlap-warm-start", cfg.overlap_warm_start,
               "With --pair-overlap: start the classifier's overlap weights and bias from a "
               "logistic regression on the training split's overlap features")
      ->capture_default_str();
  app.add_option("--max-length", cfg.max_length,
                 "Longest sequence in tokens (0: 64 for single sentences, 128 for pairs)")
      ->check(ce::integer_in(0, 65536))
      ->capture_default_str();
  app.add_option("--batch-size", cfg.batch_size, "Sequences per step")
      ->check(ce::integer_in(1, 65536))
      ->capture_default_str();
  app.add_option("--epochs", cfg.epochs, "Most epochs of Phase B")
      ->check(ce::integer_in(1, 10000))
      ->capture_default_str();
  app.add_option("--patience", cfg.patience,
                 "Epochs without improvement of the development accuracy before stopping "
                 "(0: never stop early)")
      ->check(ce::integer_in(0, 10000))
      ->capture_default_str();
  app.add_flag("--freeze-embeddings", cfg.freeze_embeddings,
               "Keep the token embeddings at their random draw (not trained)");
  app.add_flag("--swap-pairs", cfg.swap_pairs,
               "Sentence pairs: train on every training pair in both orders (the development and "
               "validation splits are left as they are)");
  app.add_flag(
      "--tune-threshold", cfg.tune_threshold,
      "Binary tasks: choose the decision threshold that maximizes the development "
      "accuracy (folded into the classifier's bias; the validation split chooses nothing)");
  app.add_option("--select", cfg.select,
                 "Development-set metric that early stopping and the choice of the best epoch "
                 "watch")
      ->check(CLI::IsMember({"accuracy", "mcc", "f1", "log_loss"}))
      ->capture_default_str();
  app.add_option("--lr", cfg.learning_rate, "Peak learning rate of AdamW")
      ->check(ce::positive_number())
      ->capture_default_str();
  app.add_option("--warmup", cfg.warmup_fraction,
                 "Learning-rate warm-up as a fraction of the steps (then linear decay to 0)")
      ->check(ce::probability())
      ->capture_default_str();
  app.add_option("--weight-decay", cfg.weight_decay, "Decoupled weight decay")
      ->check(ce::non_negative_number())
      ->capture_default_str();
  app.add_option("--dropout", cfg.dropout, "Dropout rate")
      ->check(ce::probability())
      ->capture_default_str();
  app.add_option("--clip", cfg.clip_norm, "Global gradient-norm bound (0: no clipping)")
      ->check(ce::non_negative_number())
      ->capture_default_str();
  app.add_option("--min-frequency", cfg.min_frequency,
                 "Words seen fewer times in the training split become [UNK] (0: 1 for "
                 "sentence pairs, 2 for single sentences)")
      ->check(ce::integer_in(0, 1000000))
      ->capture_default_str();
  app.add_option("--dev-fraction", cfg.dev_fraction,
                 "Fraction of the training split held out for early stopping")
      ->check(ce::probability())
      ->capture_default_str();
  app.add_option("--representation", cfg.representation,
                 "Phase A representations: initial (model at initialization) or warmup (after "
                 "--phase-a-warmup-steps steps of the vanilla model)")
      ->check(CLI::IsMember({"initial", "warmup"}))
      ->capture_default_str();
  app.add_option("--phase-a-sequences", cfg.phase_a_sequences,
                 "Training sequences whose representations Phase A uses (0: all)")
      ->check(ce::integer_in(0, 100000000))
      ->capture_default_str();
  app.add_option("--phase-a-warmup-steps", cfg.phase_a_warmup_steps,
                 "Phase B steps of the warm-up (representation warmup)")
      ->check(ce::integer_in(1, 100000000))
      ->capture_default_str();
  app.add_option("--phase-a-steps", cfg.phase_a_steps, "Langevin steps per Omega")
      ->check(ce::integer_in(0, 100000000))
      ->capture_default_str();
  app.add_option("--phase-a-step-size", cfg.phase_a_step_size,
                 "Initial Langevin step size (cosine schedule to 0)")
      ->check(ce::positive_number())
      ->capture_default_str();
  app.add_option("--beta", cfg.phase_a_beta, "Inverse temperature of Phase A (inf: no noise)")
      ->check(ce::positive_number(true))
      ->capture_default_str();
  app.add_option("--radius-factor", cfg.phase_a_radius_factor,
                 "Phase A projects every particle onto the ball of radius (this factor) x the "
                 "largest initial particle norm")
      ->check(ce::number_in(1.0, 1000.0))
      ->capture_default_str();
  app.add_option("--repulsion", cfg.phase_a_repulsion, "Weight lambda of the Riesz repulsion")
      ->check(ce::non_negative_number())
      ->capture_default_str();
  app.add_option("--checkpoint", cfg.checkpoint_prefix,
                 "Write checkpoints PREFIX.phase_a.ckpt and PREFIX.phase_b.ckpt (at epoch ends "
                 "and every --checkpoint-every steps; under mpirun, process 0 writes them)");
  app.add_option("--checkpoint-every", cfg.checkpoint_every,
                 "Also checkpoint every N optimizer steps (0: at epoch ends only)")
      ->check(coulomb_examples::integer_in(0, 1000000000))
      ->capture_default_str();
  app.add_flag("--resume", cfg.resume,
               "Continue from the --checkpoint files if they exist (the same options, data and "
               "number of processes are required; the result is the uninterrupted run's; under "
               "mpirun every process reads them)");
  app.add_option("--model", cfg.model_path,
                 "Also save the trained model (vocabulary, configuration, weights, Omega) to "
                 "this file (io/text_model.hpp)")
      ->type_name("PATH");
  cli.add_out(out);
  cli.add_quiet();
  cli.add_progress();
  std::string figures_mode = "auto";
  cli.add_figures(figures_mode);
  // Everything that can be checked is checked here, before any training, by every process:
  // the command line, the data (read once), the settings, and (by rank 0, which writes them)
  // every file to be written. The processes then stop together if any of them must.
  ce::TextExperimentData data;
  std::filesystem::path json, csv, png;
  const auto check = [&]() -> std::optional<int> {
    if (const auto status = cli.parse(argc, argv)) return status;
    if (cfg.resume && cfg.checkpoint_prefix.empty())
      return cli.reject("--resume", "needs --checkpoint PREFIX (the checkpoints to resume from)");
    if (cfg.d_model % cfg.heads != 0)  // a check of the flags alone: before the data are read
      return cli.reject("--heads", "must divide --d-model (" + std::to_string(cfg.d_model) +
                                       "), got " + std::to_string(cfg.heads));
    try {
      data = ce::load_text_experiment_data(cfg.data_dir, cfg.task);
      ce::check_text_experiment(cfg, data);
    } catch (const ce::TextExperimentError& e) {
      return cli.reject(e.flag(), e.what());
    } catch (const std::exception& e) {
      return cli.fail(e);
    }
    const std::string run = ce::run_file_stem(cfg);
    json = out / (run + ".json");
    csv = out / (run + "_reliability.csv");
    png = out / (run + "_reliability.png");
    if (!processes.root()) return std::nullopt;
    ce::OutputPlan plan;
    plan.input("--data", data.train_path);
    plan.input("--data", data.validation_path);
    plan.directory("--out", out);
    plan.output("--out", json);
    plan.output("--out", csv);
    plan.output("--out", out / (run + "_reliability.gp"));
    plan.output("--out", png);
    if (!cfg.model_path.empty()) plan.output("--model", cfg.model_path);
    if (!cfg.checkpoint_prefix.empty()) {
      plan.output("--checkpoint", cfg.checkpoint_prefix + ".phase_a.ckpt");
      plan.output("--checkpoint", cfg.checkpoint_prefix + ".phase_b.ckpt");
    }
    return cli.check_paths(plan);
  };
  if (const auto status = processes.agree(check())) return *status;
  ce::Figures figures(figures_mode);
  if (processes.size() > 1 && !cli.quiet())
    std::cerr << "data-parallel run: " << processes.size() << " MPI processes, " << cfg.threads
              << (cfg.threads == 1 ? " thread" : " threads") << " each\n";

  // The work, on every process (a failure: common/processes.hpp).
  ce::TextExperimentResult r;
  try {
    ce::TextExperimentHooks hooks;
    hooks.make_progress = [&](const std::string& label, const std::string& unit) {
      return cli.make_progress(0, {.label = label, .unit = unit});
    };
    hooks.message = [&](const std::string& text) {
      if (!cli.quiet()) std::cerr << text << "\n";
    };
    hooks.collective = processes.collective();
    hooks.checkpoint_observer = kill_hook(processes.rank());
    r = ce::run_text_experiment(cfg, data, hooks);
  } catch (const std::exception& e) {
    return cli.finish(processes.fail(e));
  }
  if (!processes.root()) return 0;

  // The reports, from rank 0 alone.
  try {
    // The table first: whatever happens to the files, the results are on stdout.
    ce::print_metric_table(std::cout, r);
    std::cout.flush();
    ce::write_output("--out", json.string(), ce::json_report(r, cli.command_line()));
    ce::write_output("--out", csv.string(), ce::reliability_csv(r));
    std::cout << "report: " << json.string() << "\nreliability diagram: " << csv.string() << "\n";
    ce::plot_reliability(figures, csv, png,
                         "Reliability, " + r.config.dataset + ", " + ce::variant_name(r.config));
    if (!r.model_error.empty()) {
      std::cerr << cli.name() << ": the model was not saved: " << r.model_error << "\n";
      return cli.finish(1);
    }
    return cli.finish(figures.failed() ? 1 : 0);
  } catch (const std::exception& e) {
    return cli.finish(cli.fail(e));
  }
}

}  // namespace

int main(int argc, char** argv) {
  coulomb_examples::keep_freed_memory();
  return ce::run_as_processes("text_classification", argc, argv,
                              [](int n, char** args, ce::Processes& p) { return run(n, args, p); });
}
