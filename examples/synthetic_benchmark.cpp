// SPDX-License-Identifier: MIT
// synthetic_benchmark: the synthetic classification experiment of Badiei Khuzani et al. (2026),
// §5 — learned particles against fixed random Fourier features and Sinha & Duchi's importance
// sampling, with a linear classifier on the features.
//
// Tasks (binary, generated here): two concentric rings (d = 2), a 4×4 checkerboard (d = 2), XOR
// of the signs of two coordinates among 8 (6 distractor dimensions), and a Gaussian mixture
// with unequal bandwidths (d = 3: four narrow blobs against one broad Gaussian). Label noise
// flips each training label with probability 0, 0.1, 0.2 or 0.3; test labels are clean.
//
// Every method hands random Fourier features (1/√N)[cos Ωx, sin Ωx] with N frequencies (the
// "feature budget") to the same classifier: ridge regression with an intercept, its penalty
// chosen by 3-fold cross-validation on the training split (baselines/ridge.hpp). Methods:
//   fixed_rff   Ω ~ N(0, σ⁻² I), σ chosen by 3-fold cross-validation on the training split
//               (for each budget, jointly with the ridge penalty);
//   importance  Sinha & Duchi (2016): a pool of 2048 frequencies from the same Gaussian,
//               χ²-constrained weights maximizing the alignment, N frequencies sampled from
//               them; ρ chosen on a validation split of the training data;
//   learned     Phase A: TiltedLangevin (particles/tilted_langevin.hpp) with its defaults on
//               H_N = uncentred alignment + λ·Riesz (Coulomb exponent s = d − 2, log energy in
//               2-D), base measure N(0, σ⁻² I), started from the fixed-RFF draw (the same Ω, so
//               the two are paired), stopped at the energy plateau; the sampler (tamed
//               unadjusted, or Metropolis-adjusted with independence jumps) and β ∈ {4, 16}
//               chosen per task, noise rate and seed by the validation accuracy averaged over
//               the 4 folds of the training data (--samplers, --betas; --steps and --lambdas
//               may add to the grid). Importance sampling's own draw is a candidate too
//               (--keep), and the chosen moving candidate replaces it only when it is better
//               by 3 paired standard errors (--selection-margin): where learning does not
//               pay on the training data, "learned" is importance sampling's draw;
//   repulsion      the learned method with the Coulomb repulsion on, λ_rel = 0.01 (the default
//                  learner has none: it never helped on the development splits);
//   no_noise       the learned method without noise and entropy (ablation).
// No hyperparameter ever sees the test set.
//
// Writes <out>/runs.csv (every run), <out>/summary.md (mean ± sd tables, paired comparisons,
// retention acc(64)/acc(256)), and, with gnuplot, <out>/accuracy_vs_budget.png,
// <out>/particles_checkerboard.png and <out>/energy_checkerboard.png.
//
//   synthetic_benchmark [--out DIR] [--seeds S] [--threads T] [--quick] [--task T1,T2]
//                       [--noise R1,R2] [--n-train N] [--iterations N] [--betas B1,B2]
//                       [--steps S1,S2] [--lambdas L1,L2] [--budgets N1,N2]
//                       [--tuning-budget N] [--selection-folds K]
//                       [--selection accuracy|squared-error] [--progress MODE]
//                       [--progress-json FILE] [--quiet]
//
// --quick runs one seed at noise 0.1 only (a smoke test). Progress (jobs done, the running mean
// of learned − fixed_rff at N = 64, ETA) and one line per finished job go to stderr; see
// `synthetic_benchmark --help` and docs/tools.md.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <numbers>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <Eigen/Eigenvalues>

#include <coulomb/coulomb.hpp>
#include <coulomb/train/progress.hpp>

#include "common/cli.hpp"
#include "common/figure.hpp"

namespace {

using coulomb::Index;
using Mat = coulomb::Matrix<double>;
using Vec = coulomb::Vector<double>;
using Labels = Eigen::VectorXi;
/// The particle model and the features run in float: Eigen 3.4 vectorizes sin and cos for float
/// only, which makes them several times faster than in double, and the classifier's solve is
/// in double anyway.
using Real = float;
using MatR = coulomb::Matrix<Real>;
using VecR = coulomb::Vector<Real>;
using Map = coulomb::RffCosSin<Real>;

// ---------------------------------------------------------------------------------------------
// Tasks
// ---------------------------------------------------------------------------------------------

enum class Task { rings, checkerboard, xor8, mixture };
const std::vector<Task> all_tasks{Task::rings, Task::checkerboard, Task::xor8, Task::mixture};

const char* task_name(Task t) {
  switch (t) {
    case Task::rings:
      return "rings";
    case Task::checkerboard:
      return "checkerboard";
    case Task::xor8:
      return "xor8";
    case Task::mixture:
      return "mixture";
  }
  return "?";
}

struct Data {
  MatR X;
  Labels y;
};

/// n samples of a task with clean labels.
Data generate(Task task, Index n, coulomb::Rng& rng) {
  struct {
    Mat X;
    Labels y;
  } data;
  data.y.resize(n);
  switch (task) {
    case Task::rings: {  // radius 1 (label 0) or 2 (label 1), radial noise 0.25
      data.X.resize(n, 2);
      for (Index i = 0; i < n; ++i) {
        data.y(i) = coulomb::uniform01(rng) < 0.5;
        const double r = (data.y(i) ? 2.0 : 1.0) + 0.25 * coulomb::standard_normal(rng);
        const double a = 2.0 * std::numbers::pi * coulomb::uniform01(rng);
        data.X(i, 0) = r * std::cos(a);
        data.X(i, 1) = r * std::sin(a);
      }
      break;
    }
    case Task::checkerboard: {  // 6×6 unit cells on [−3, 3]²
      data.X.resize(n, 2);
      coulomb::fill_uniform(data.X, -3.0, 3.0, rng);
      for (Index i = 0; i < n; ++i) {
        const auto cell = static_cast<long>(std::floor(data.X(i, 0)) + std::floor(data.X(i, 1)));
        data.y(i) = static_cast<int>(((cell % 2) + 2) % 2);
      }
      break;
    }
    case Task::xor8: {  // sign(x₀) xor sign(x₁) on [−1, 1]^8
      data.X.resize(n, 8);
      coulomb::fill_uniform(data.X, -1.0, 1.0, rng);
      for (Index i = 0; i < n; ++i) data.y(i) = (data.X(i, 0) > 0.0) != (data.X(i, 1) > 0.0);
      break;
    }
    case Task::mixture: {  // label 1: blobs N(c, 0.3²I), c = (±1, ±1, 0); label 0: N(0, 1.2²I)
      data.X.resize(n, 3);
      Vec z(3);
      for (Index i = 0; i < n; ++i) {
        data.y(i) = coulomb::uniform01(rng) < 0.5;
        coulomb::fill_standard_normal(z, rng);
        if (data.y(i)) {
          const auto c = coulomb::uniform_index(4, rng);
          data.X.row(i) = 0.3 * z.transpose();
          data.X(i, 0) += (c & 1) ? 1.0 : -1.0;
          data.X(i, 1) += (c & 2) ? 1.0 : -1.0;
        } else {
          data.X.row(i) = 1.2 * z.transpose();
        }
      }
      break;
    }
  }
  return {data.X.cast<Real>(), data.y};
}

/// Flips each label with probability `rate`.
Labels flip_labels(const Labels& y, double rate, coulomb::Rng& rng) {
  Labels out = y;
  for (Index i = 0; i < y.size(); ++i)
    if (coulomb::uniform01(rng) < rate) out(i) = 1 - out(i);
  return out;
}

Data subset(const Data& d, const std::vector<Index>& rows) {
  return {d.X(rows, Eigen::all), d.y(rows)};
}

// ---------------------------------------------------------------------------------------------
// Methods
// ---------------------------------------------------------------------------------------------

const std::vector<std::string> method_names{"fixed_rff", "importance", "learned", "repulsion",
                                            "no_noise"};
const std::vector<std::string> baseline_names{"fixed_rff", "importance", "repulsion", "no_noise"};
const std::vector<double> ridge_alphas{1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};

struct Score {
  double accuracy;           ///< on the test (or validation) set
  double alpha;              ///< the ridge penalty chosen by cross-validation
  double squared_error;      ///< mean (f(x) − t)² on that set, t = ±1 the ridge's targets
  std::vector<int> correct;  ///< per point of that set: 1 when its label is predicted
};

/// Test accuracy of the ridge classifier (penalty by CV on the training split) on the Fourier
/// features of Ω.
Score classify(const MatR& omega, const Data& train, const Data& test,
               const std::vector<Index>& folds) {
  const MatR phi_train = coulomb::fourier_features(omega, train.X);
  const coulomb::RidgeClassifier ridge =
      coulomb::fit_ridge_cross_validated(phi_train, train.y, ridge_alphas, folds);
  const MatR phi_test = coulomb::fourier_features(omega, test.X);
  const Vec t = 2.0 * test.y.cast<double>().array() - 1.0;
  // One decision pass gives the accuracy (RidgeClassifier::accuracy's rule: label 1 when the
  // decision is > 0), the per-point outcomes and the squared error.
  const Vec f = ridge.decision_function(phi_test);
  std::vector<int> correct(static_cast<std::size_t>(f.size()));
  Index hits = 0;
  for (Index i = 0; i < f.size(); ++i)
    hits += correct[static_cast<std::size_t>(i)] = (f(i) > 0.0) == (test.y(i) == 1);
  return {static_cast<double>(hits) / static_cast<double>(f.size()), ridge.alpha(),
          (f - t).squaredNorm() / static_cast<double>(t.size()), std::move(correct)};
}

/// Hyperparameters of Phase A, in TiltedLangevin's scale-free units (docs/particles.md).
struct PhaseA {
  double lambda_rel = 0.0;  ///< λ relative to the gradient balance at the start
  double beta = coulomb::TiltedLangevinOptions{}.beta;  ///< relative inverse temperature
  double step = coulomb::TiltedLangevinOptions{}.step;  ///< h, in units of the base measure
  bool noise = true;                                    ///< false: the "no noise" ablation
  /// The sampler: false = tamed unadjusted Langevin, true = Metropolis-adjusted steps with
  /// independence jumps to the base draw (TiltedLangevinOptions::metropolis, jump_period).
  bool exact = coulomb::TiltedLangevinOptions{}.metropolis;
  /// Where the particles start: false = the fixed-RFF draw, true = importance sampling's draw
  /// at the same budget (with its chosen ρ).
  bool from_importance = false;
  /// No Langevin step: the start itself (a candidate of the selection with --keep).
  bool zero_steps = false;
};

struct PhaseASettings {
  Index iterations = 1000;  ///< largest number of steps (EnergyPlateau stops earlier)
  Index batch = 0;          ///< 0: full batch (the learner's default)
  /// Steps between independence jumps of the exact sampler.
  Index jump_period = 5;
};

/// The Riesz options of the experiment: Coulomb exponent s = d − 2 (log energy for d = 2),
/// softening 0.05/σ (a twentieth of the draw's scale).
coulomb::RieszOptions riesz_options(Index d, double sigma) {
  return {.s = static_cast<double>(d - 2), .softening = 0.05 / sigma};
}

/// λ = λ_rel times the gradient balance of alignment and repulsion at Ω₀ (full batch).
double absolute_lambda(const Data& data, const MatR& omega0, double sigma, double lambda_rel) {
  if (lambda_rel <= 0) return 0.0;
  coulomb::AlignmentEnergy<Map> alignment(Map(omega0, VecR()), data.X,
                                          coulomb::binary_targets<Real>(data.y), {.centre = false});
  return coulomb::balanced_repulsion_weight(alignment, riesz_options(data.X.cols(), sigma), omega0,
                                            lambda_rel);
}

/// Runs Phase A (TiltedLangevin on the uncentred alignment + λ·Riesz, base draw N(0, σ⁻²I),
/// stopped by the energy plateau) from Ω₀ on (X, y); returns the learned particles.
template <typename... Callbacks>
MatR run_phase_a(const Data& data, const MatR& omega0, double sigma, const PhaseA& p,
                 const PhaseASettings& s, std::uint64_t seed, Callbacks&&... callbacks) {
  if (p.zero_steps) return omega0;
  coulomb::AlignmentEnergy<Map> alignment(Map(omega0, VecR()), data.X,
                                          coulomb::binary_targets<Real>(data.y), {.centre = false});
  const coulomb::RieszOptions riesz = riesz_options(data.X.cols(), sigma);
  const double lambda =
      p.lambda_rel > 0 ? coulomb::balanced_repulsion_weight(alignment, riesz, omega0, p.lambda_rel)
                       : 0.0;
  coulomb::Hamiltonian<coulomb::AlignmentEnergy<Map>> hamiltonian(alignment, lambda, riesz);
  coulomb::TiltedLangevin langevin({.max_iterations = s.iterations,
                                    .beta = p.beta,
                                    .step = p.step,
                                    .base_scale = 1.0 / sigma,
                                    .batch_size = s.batch,
                                    .seed = seed,
                                    .noise = p.noise,
                                    .metropolis = p.exact,
                                    .jump_period = p.exact ? s.jump_period : 0});
  coulomb::EnergyPlateau plateau;
  MatR omega = omega0;
  langevin.optimize(hamiltonian, omega, plateau, callbacks...);
  return omega;
}

// ---------------------------------------------------------------------------------------------
// One job: a task, a noise rate and a seed; every method at every budget.
// ---------------------------------------------------------------------------------------------

struct Run {
  Task task;
  double noise;
  int seed;
  std::string method;
  Index budget;
  /// Test accuracy; for the "tuning" rows, the chosen learned configuration's validation score
  /// averaged over the selection folds (importance sampling's when there is no grid).
  double accuracy;
  double bandwidth;   ///< σ of the initial Gaussian draw (CV for fixed RFF at this budget)
  double alpha;       ///< ridge penalty chosen by CV
  std::string hyper;  ///< chosen hyperparameters, for the CSV
  double seconds;
};

struct Config {
  Index n_train = 1000;
  Index n_test = 2000;
  std::vector<Index> budgets{16, 32, 64, 128, 256};
  std::vector<double> noise{0.0, 0.1, 0.2, 0.3};
  std::vector<Task> tasks = all_tasks;
  int seeds = 5;
  int threads = 2;
  Index pool = 2048;
  Index tuning_budget = 64;
  PhaseASettings phase_a;
  // One value each: the learner's defaults, no tuning. Several values: chosen on the
  // validation split of the training data at the tuning budget (the development study).
  std::vector<double> lambda_rel{0.0};
  double repulsion_rel = 0.01;  ///< λ_rel of the "repulsion" variant
  // The rule of docs/results.md: sampler and β chosen on the validation split.
  std::vector<double> betas{4.0, coulomb::TiltedLangevinOptions{}.beta};
  std::vector<double> steps{coulomb::TiltedLangevinOptions{}.step};
  std::vector<std::string> samplers{"ula", "mala"};
  std::vector<double> rhos{0.5, 4.0, 32.0};
  /// Starts of the learner's candidates: "rff" (the fixed draw) and/or "importance" (importance
  /// sampling's draw); several: chosen with the rest on the validation split.
  std::vector<std::string> starts{"rff"};
  /// Starts whose zero-step candidate (the start itself, no Langevin step) joins the choice,
  /// placed before the moving candidates; the first is the reference of selection_margin.
  std::vector<std::string> keep{"importance"};
  int first_seed = 0;  ///< seeds first_seed … first_seed + seeds − 1
  /// With --keep: a candidate that moves replaces the first kept start only when its validation
  /// accuracy is higher by at least this many paired standard errors (0: the best score wins).
  double selection_margin = 3.0;
  /// Folds of the 4-fold split of the training data over which the tuning averages the
  /// validation score (1: the single 75 % / 25 % split).
  Index selection_folds = 4;
  /// What the tuning maximizes on the validation folds: "accuracy", or "squared-error" (minus
  /// the ridge's mean squared error on the ±1 targets: smoother than the accuracy).
  std::string selection = "accuracy";
  double selection_score(const Score& s) const {
    return selection == "accuracy" ? s.accuracy : -s.squared_error;
  }
  std::filesystem::path out = "synthetic_benchmark_out";
};

/// Bandwidth grid: the median pairwise distance times 2^{−4}, 2^{−3.5}, …, 2^0.
std::vector<double> bandwidth_grid(const MatR& X, coulomb::Rng& rng) {
  const double median = coulomb::median_pairwise_distance(X, 2000, rng);
  std::vector<double> grid;
  for (int k = 0; k <= 8; ++k) grid.push_back(median * std::pow(2.0, -4.0 + 0.5 * k));
  return grid;
}

std::vector<Run> run_job(const Config& cfg, Task task, double noise, int seed) {
  const std::uint64_t job_seed = 1000003ULL * static_cast<std::uint64_t>(task) +
                                 7919ULL * static_cast<std::uint64_t>(std::lround(noise * 100)) +
                                 static_cast<std::uint64_t>(seed);
  coulomb::Rng rng(job_seed);
  // The clean data depend on the task and seed only, so noise rates share their inputs.
  coulomb::Rng data_rng(static_cast<std::uint64_t>(seed) * 7777ULL +
                        static_cast<std::uint64_t>(task));
  Data train = generate(task, cfg.n_train, data_rng);
  const Data test = generate(task, cfg.n_test, data_rng);
  train.y = flip_labels(train.y, noise, rng);
  const Index d = train.X.cols();

  const std::vector<Index> folds = coulomb::k_fold_assignment(cfg.n_train, 3, rng);
  const std::vector<double> bandwidths = bandwidth_grid(train.X, rng);

  // Tuning on the training data only, at the tuning budget: each candidate of the learned method
  // and of importance sampling is scored by its validation score averaged over the first
  // `selection_folds` folds of a 4-fold split of the training data (fit on the other three).
  const std::vector<Index> split = coulomb::k_fold_assignment(cfg.n_train, 4, rng);
  auto fold_rows = [&](Index fold, bool held_out) {
    std::vector<Index> rows;
    for (Index i = 0; i < cfg.n_train; ++i)
      if ((split[static_cast<std::size_t>(i)] == fold) == held_out) rows.push_back(i);
    return rows;
  };
  // Fold 0 draws its ridge folds and its tuning stream from the job's stream (as the single
  // split did before --selection-folds); the other folds from streams of their own.
  const std::vector<Index> fit_folds0 = coulomb::k_fold_assignment(
      cfg.n_train - static_cast<Index>(std::count(split.begin(), split.end(), Index{0})), 3, rng);

  std::vector<Run> runs;
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto seconds_since = [&](auto t0) { return std::chrono::duration<double>(now() - t0).count(); };

  PhaseA best_phase;
  double best_lambda_rel = 0.0;
  double best_rho = cfg.rhos.front();
  {
    const auto t0 = now();
    std::vector<PhaseA> candidates;
    for (const std::string& start : cfg.keep) {
      PhaseA keep;
      keep.from_importance = start == "importance";
      keep.zero_steps = true;
      candidates.push_back(keep);
    }
    for (const std::string& start : cfg.starts) {
      const bool from_is = start == "importance";
      for (double lr : cfg.lambda_rel)
        for (double beta : cfg.betas)
          for (double step : cfg.steps)
            for (const std::string& sampler : cfg.samplers)
              candidates.push_back({lr, beta, step, true, sampler == "mala", from_is, false});
    }
    const bool grid = candidates.size() > 1;  // one configuration: nothing to choose
    std::vector<double> learned_score(candidates.size(), 0.0), is_score(cfg.rhos.size(), 0.0);
    // Per validation point (over the folds), whether each candidate predicts it: for the margin.
    std::vector<std::vector<int>> learned_correct(candidates.size());
    auto add_score = [&](std::size_t c, const Score& score) {
      learned_score[c] += cfg.selection_score(score);
      learned_correct[c].insert(learned_correct[c].end(), score.correct.begin(),
                                score.correct.end());
    };
    coulomb::Rng tune_rng = rng.split(1);
    double bandwidth0 = 0.0;
    // What the candidates started from importance sampling's draw need once ρ is chosen.
    struct FoldContext {
      Data fit, val;
      std::vector<Index> fit_folds;
      double bandwidth;
      Map pool;
    };
    std::vector<FoldContext> contexts;
    for (Index fold = 0; fold < cfg.selection_folds; ++fold) {
      Data fit = subset(train, fold_rows(fold, false));  // moved into `contexts` at the end
      Data val = subset(train, fold_rows(fold, true));
      coulomb::Rng fold_rng =
          fold == 0
              ? tune_rng
              : coulomb::Rng(job_seed ^ 0x5EEDF01DULL).split(static_cast<std::uint64_t>(fold));
      const std::vector<Index> fit_folds =
          fold == 0 ? fit_folds0 : coulomb::k_fold_assignment(fit.X.rows(), 3, fold_rng);
      const coulomb::BandwidthSelection sel = coulomb::select_rff_bandwidth(
          fit.X, fit.y, bandwidths, ridge_alphas, cfg.tuning_budget, fit_folds, fold_rng);
      if (fold == 0) bandwidth0 = sel.bandwidth;
      MatR omega0(cfg.tuning_budget, d);
      coulomb::fill_standard_normal(omega0, fold_rng);
      omega0 /= static_cast<Real>(sel.bandwidth);
      if (grid)
        for (std::size_t c = 0; c < candidates.size(); ++c) {
          if (candidates[c].from_importance) continue;  // after ρ is chosen, below
          const MatR omega =
              run_phase_a(fit, omega0, sel.bandwidth, candidates[c], cfg.phase_a, job_seed + 17);
          add_score(c, classify(omega, fit, val, fit_folds));
        }
      Map pool(d, cfg.pool, fold_rng, {.bandwidth = sel.bandwidth});
      for (std::size_t r = 0; r < cfg.rhos.size(); ++r) {
        coulomb::ImportanceSampling<Map> is(pool, fit.X, coulomb::binary_targets<Real>(fit.y),
                                            {.rho = cfg.rhos[r]});
        is_score[r] += cfg.selection_score(
            classify(is.sample_particles(cfg.tuning_budget, fold_rng), fit, val, fit_folds));
      }
      contexts.push_back(
          {std::move(fit), std::move(val), fit_folds, sel.bandwidth, std::move(pool)});
    }
    const auto best_r = static_cast<std::size_t>(
        std::max_element(is_score.begin(), is_score.end()) - is_score.begin());
    best_rho = cfg.rhos[best_r];
    // Candidates started from importance sampling's draw (the chosen ρ), from a stream of
    // their own so that the other methods' draws do not depend on --starts.
    const bool any_from_is = std::any_of(candidates.begin(), candidates.end(),
                                         [](const PhaseA& p) { return p.from_importance; });
    if (grid && any_from_is)
      for (Index fold = 0; fold < cfg.selection_folds; ++fold) {
        const FoldContext& f = contexts[static_cast<std::size_t>(fold)];
        coulomb::Rng start_rng =
            coulomb::Rng(job_seed ^ 0x15D1A7ULL).split(static_cast<std::uint64_t>(fold));
        coulomb::ImportanceSampling<Map> is(f.pool, f.fit.X, coulomb::binary_targets<Real>(f.fit.y),
                                            {.rho = best_rho});
        const MatR start = is.sample_particles(cfg.tuning_budget, start_rng);
        for (std::size_t c = 0; c < candidates.size(); ++c) {
          if (!candidates[c].from_importance) continue;
          const MatR omega =
              run_phase_a(f.fit, start, f.bandwidth, candidates[c], cfg.phase_a, job_seed + 17);
          add_score(c, classify(omega, f.fit, f.val, f.fit_folds));
        }
      }
    // The first best (ties keep the earlier candidate, as the single split did).
    auto best_c = static_cast<std::size_t>(
        std::max_element(learned_score.begin(), learned_score.end()) - learned_score.begin());
    // The margin: moving must beat the kept start by selection_margin paired standard errors
    // of the validation accuracy (the per-point differences of the two candidates).
    const auto keep =
        static_cast<std::size_t>(std::find_if(candidates.begin(), candidates.end(),
                                              [](const PhaseA& p) { return p.zero_steps; }) -
                                 candidates.begin());
    // Recorded in the tuning row: the best candidate's validation advantage over the kept draw
    // and its paired standard error (so other margins can be read off one run).
    double advantage = 0.0, advantage_se = 0.0;
    if (grid && keep < candidates.size() && best_c != keep) {
      const std::vector<int>& a = learned_correct[best_c];
      const std::vector<int>& b = learned_correct[keep];
      const auto n = static_cast<double>(a.size());
      double sq = 0.0;
      for (std::size_t i = 0; i < a.size(); ++i) advantage += a[i] - b[i];
      advantage /= n;
      for (std::size_t i = 0; i < a.size(); ++i)
        sq += (a[i] - b[i] - advantage) * (a[i] - b[i] - advantage);
      advantage_se = n > 1 ? std::sqrt(sq / (n - 1) / n) : 0.0;
      if (advantage <= 0.0 || advantage < cfg.selection_margin * advantage_se) best_c = keep;
    }
    best_phase = candidates[best_c];
    best_lambda_rel = best_phase.lambda_rel;
    const double n_folds = static_cast<double>(cfg.selection_folds);
    std::ostringstream h;
    h << "lambda_rel=" << best_lambda_rel << ";beta=" << best_phase.beta
      << ";step=" << best_phase.step << ";sampler=" << (best_phase.exact ? "mala" : "ula")
      << ";start=" << (best_phase.from_importance ? "importance" : "rff")
      << ";zero_steps=" << best_phase.zero_steps << ";advantage=" << advantage
      << ";advantage_se=" << advantage_se << ";rho=" << best_rho << ";folds=" << cfg.selection_folds
      << ";selection=" << cfg.selection;
    runs.push_back({task, noise, seed, "tuning", cfg.tuning_budget,
                    (grid ? learned_score[best_c] : is_score[best_r]) / n_folds, bandwidth0, 0.0,
                    h.str(), seconds_since(t0)});
  }

  for (Index budget : cfg.budgets) {
    coulomb::Rng budget_rng = rng.split(static_cast<std::uint64_t>(budget));
    auto t0 = now();
    const coulomb::BandwidthSelection sel = coulomb::select_rff_bandwidth(
        train.X, train.y, bandwidths, ridge_alphas, budget, folds, budget_rng);
    const double sigma = sel.bandwidth;
    MatR omega0(budget, d);
    coulomb::fill_standard_normal(omega0, budget_rng);
    omega0 /= static_cast<Real>(sigma);
    const Score fixed = classify(omega0, train, test, folds);
    runs.push_back({task, noise, seed, "fixed_rff", budget, fixed.accuracy, sigma, fixed.alpha, "",
                    seconds_since(t0)});

    t0 = now();
    MatR is_omega;
    double is_seconds = 0.0;
    {
      Map pool(d, cfg.pool, budget_rng, {.bandwidth = sigma});
      coulomb::ImportanceSampling<Map> is(pool, train.X, coulomb::binary_targets<Real>(train.y),
                                          {.rho = best_rho});
      is_omega = is.sample_particles(budget, budget_rng);
      is_seconds = seconds_since(t0);
      const Score score = classify(is_omega, train, test, folds);
      std::ostringstream h;
      h << "rho=" << best_rho;
      runs.push_back({task, noise, seed, "importance", budget, score.accuracy, sigma, score.alpha,
                      h.str(), seconds_since(t0)});
    }

    // The ablations take the chosen start and sampler but always move (with zero steps chosen
    // they would repeat the start).
    const bool from_is = best_phase.from_importance;
    const PhaseA variants[3] = {best_phase,
                                {cfg.repulsion_rel, best_phase.beta, best_phase.step, true,
                                 best_phase.exact, from_is, false},
                                {best_lambda_rel, best_phase.beta, best_phase.step, false,
                                 best_phase.exact, from_is, false}};
    for (int v = 0; v < 3; ++v) {
      t0 = now();
      const MatR omega = run_phase_a(train, from_is ? is_omega : omega0, sigma, variants[v],
                                     cfg.phase_a, job_seed + 31 * budget);
      std::ostringstream h;
      h << "lambda_rel=" << variants[v].lambda_rel << ";beta=" << variants[v].beta
        << ";step=" << variants[v].step << ";noise=" << variants[v].noise
        << ";start=" << (from_is ? "importance" : "rff")
        << ";zero_steps=" << variants[v].zero_steps;
      const Score score = classify(omega, train, test, folds);
      // A learner started from importance sampling's draw includes the time of that draw.
      runs.push_back({task, noise, seed, method_names[static_cast<std::size_t>(2 + v)], budget,
                      score.accuracy, sigma, score.alpha, h.str(),
                      seconds_since(t0) + (from_is ? is_seconds : 0.0)});
    }
  }
  return runs;
}

// ---------------------------------------------------------------------------------------------
// Statistics and the report
// ---------------------------------------------------------------------------------------------

struct Stats {
  double mean = 0.0;
  double sd = 0.0;
  Index n = 0;
};

Stats stats(const std::vector<double>& x) {
  Stats s;
  s.n = static_cast<Index>(x.size());
  if (x.empty()) return s;
  for (double v : x) s.mean += v;
  s.mean /= static_cast<double>(x.size());
  if (x.size() > 1) {
    for (double v : x) s.sd += (v - s.mean) * (v - s.mean);
    s.sd = std::sqrt(s.sd / static_cast<double>(x.size() - 1));
  }
  return s;
}

/// Continued fraction of the regularized incomplete beta function (modified Lentz).
double beta_continued_fraction(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::abs(d) < tiny) d = tiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m < 300; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + aa * d;
    c = 1.0 + aa / c;
    if (std::abs(d) < tiny) d = tiny;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + aa * d;
    c = 1.0 + aa / c;
    if (std::abs(d) < tiny) d = tiny;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-15) break;
  }
  return h;
}

/// I_x(a, b), the regularized incomplete beta function.
double incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(a, b, x) / a;
  return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

/// Two-sided p-value of Student's t with `dof` degrees of freedom.
double t_test_p(double t, double dof) {
  if (!std::isfinite(t)) return 0.0;
  return incomplete_beta(0.5 * dof, 0.5, dof / (dof + t * t));
}

/// Two-sided exact sign test: P(a count at least as extreme as `wins` of `trials` fair coins).
double sign_test_p(Index wins, Index trials) {
  if (trials == 0) return 1.0;
  const Index k = std::min(wins, trials - wins);
  double p = 0.0;
  for (Index i = 0; i <= k; ++i)
    p += std::exp(std::lgamma(trials + 1.0) - std::lgamma(i + 1.0) - std::lgamma(trials - i + 1.0) -
                  static_cast<double>(trials) * std::log(2.0));
  return std::min(1.0, 2.0 * p);
}

struct Paired {
  double mean_diff = 0.0;
  double sd_diff = 0.0;
  double t = 0.0;
  double p_t = 1.0;
  Index wins = 0, ties = 0, losses = 0;
  double p_sign = 1.0;
};

Paired paired(const std::vector<double>& a, const std::vector<double>& b) {
  Paired r;
  std::vector<double> diff;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff.push_back(a[i] - b[i]);
    if (a[i] > b[i])
      ++r.wins;
    else if (a[i] < b[i])
      ++r.losses;
    else
      ++r.ties;
  }
  const Stats s = stats(diff);
  r.mean_diff = s.mean;
  r.sd_diff = s.sd;
  if (s.n > 1) {
    r.t = s.sd > 0 ? s.mean / (s.sd / std::sqrt(static_cast<double>(s.n)))
                   : (s.mean == 0 ? 0.0 : std::copysign(INFINITY, s.mean));
    r.p_t = s.mean == 0 && s.sd == 0 ? 1.0 : t_test_p(r.t, static_cast<double>(s.n - 1));
  }
  r.p_sign = sign_test_p(r.wins, r.wins + r.losses);
  return r;
}

/// Key of a cell: task, noise, method, budget.
using Key = std::tuple<std::string, double, std::string, Index>;

std::string fmt(double v, int digits = 3) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

void write_csv(const std::filesystem::path& path, const std::vector<Run>& runs) {
  std::ostringstream f;
  f << "task,noise,seed,method,budget,test_accuracy,bandwidth,ridge_alpha,hyperparameters,"
       "seconds\n";
  for (const Run& r : runs)
    f << task_name(r.task) << ',' << r.noise << ',' << r.seed << ',' << r.method << ',' << r.budget
      << ',' << std::setprecision(6) << r.accuracy << ',' << r.bandwidth << ',' << r.alpha << ','
      << r.hyper << ',' << r.seconds << '\n';
  coulomb_examples::write_output("--out", path.string(), f.str());
}

void write_report(const Config& cfg, const std::vector<Run>& runs, double wall_seconds,
                  const std::string& command) {
  std::map<Key, std::vector<double>> cells;  // in seed order (runs are sorted by job)
  for (const Run& r : runs)
    if (r.method != "tuning")
      cells[{task_name(r.task), r.noise, r.method, r.budget}].push_back(r.accuracy);

  std::ostringstream md;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  md << "# Synthetic benchmark\n\n"
     << "Generated by `" << command << "` on " << date << ", " << cfg.threads
     << " threads, wall time " << fmt(wall_seconds, 1) << " s. n_train = " << cfg.n_train
     << ", n_test = " << cfg.n_test << " (clean labels), " << cfg.seeds
     << " seeds; test accuracy of a ridge classifier on (1/√N)[cos Ωx, sin Ωx].\n\n";

  // 0. Overview: mean over tasks and seeds per noise rate, method and budget.
  md << "## Overview: test accuracy averaged over the tasks and seeds\n\n| noise | method |";
  for (Index b : cfg.budgets) md << " N = " << b << " |";
  md << "\n|---:|---|";
  for (std::size_t i = 0; i < cfg.budgets.size(); ++i) md << "---:|";
  md << "\n";
  for (double noise : cfg.noise)
    for (const std::string& m : method_names) {
      md << "| " << noise << " | " << m << " |";
      for (Index b : cfg.budgets) {
        std::vector<double> all;
        for (Task task : cfg.tasks) {
          const auto& c = cells[{task_name(task), noise, m, b}];
          all.insert(all.end(), c.begin(), c.end());
        }
        md << " " << fmt(stats(all).mean) << " |";
      }
      md << "\n";
    }
  md << "\n";

  // 1. Mean ± sd per task × noise × method × budget.
  md << "## Test accuracy, mean ± sd over seeds\n\n";
  for (Task task : cfg.tasks) {
    md << "### " << task_name(task) << "\n\n| noise | method |";
    for (Index b : cfg.budgets) md << " N = " << b << " |";
    md << "\n|---:|---|";
    for (std::size_t i = 0; i < cfg.budgets.size(); ++i) md << "---:|";
    md << "\n";
    for (double noise : cfg.noise)
      for (const std::string& m : method_names) {
        md << "| " << noise << " | " << m << " |";
        for (Index b : cfg.budgets) {
          const Stats s = stats(cells[{task_name(task), noise, m, b}]);
          md << " " << fmt(s.mean) << " ± " << fmt(s.sd) << " |";
        }
        md << "\n";
      }
    md << "\n";
  }

  // 2. Paired comparisons of learned against each baseline, per task and noise rate, pooled
  //    over budgets and seeds, and per budget pooled over tasks, noise rates and seeds.
  md << "## Paired comparison: learned − baseline\n\n"
     << "Differences of test accuracy on the same (task, noise, seed, budget), so the same data "
        "and, for fixed_rff and the ablations, the same initial draw. t: paired t-test; sign: "
        "exact two-sided sign test over non-tied pairs.\n\n"
     << "| task | noise | baseline | mean diff | sd | t | p (t) | wins/ties/losses | p (sign) |\n"
     << "|---|---:|---|---:|---:|---:|---:|---|---:|\n";
  for (Task task : cfg.tasks)
    for (double noise : cfg.noise)
      for (const std::string& base : baseline_names) {
        std::vector<double> a, b;
        for (Index budget : cfg.budgets) {
          const auto& la = cells[{task_name(task), noise, "learned", budget}];
          const auto& lb = cells[{task_name(task), noise, base, budget}];
          a.insert(a.end(), la.begin(), la.end());
          b.insert(b.end(), lb.begin(), lb.end());
        }
        const Paired p = paired(a, b);
        md << "| " << task_name(task) << " | " << noise << " | " << base << " | "
           << fmt(p.mean_diff, 4) << " | " << fmt(p.sd_diff, 4) << " | " << fmt(p.t, 2) << " | "
           << std::setprecision(2) << std::scientific << p.p_t << std::defaultfloat << " | "
           << p.wins << "/" << p.ties << "/" << p.losses << " | " << std::setprecision(2)
           << std::scientific << p.p_sign << std::defaultfloat << " |\n";
      }
  md << "\nPer budget, pooled over tasks, noise rates and seeds:\n\n"
     << "| budget | baseline | mean diff | sd | t | p (t) | wins/ties/losses | p (sign) |\n"
     << "|---:|---|---:|---:|---:|---:|---|---:|\n";
  for (Index budget : cfg.budgets)
    for (const std::string& base : baseline_names) {
      std::vector<double> a, b;
      for (Task task : cfg.tasks)
        for (double noise : cfg.noise) {
          const auto& la = cells[{task_name(task), noise, "learned", budget}];
          const auto& lb = cells[{task_name(task), noise, base, budget}];
          a.insert(a.end(), la.begin(), la.end());
          b.insert(b.end(), lb.begin(), lb.end());
        }
      const Paired p = paired(a, b);
      md << "| " << budget << " | " << base << " | " << fmt(p.mean_diff, 4) << " | "
         << fmt(p.sd_diff, 4) << " | " << fmt(p.t, 2) << " | " << std::setprecision(2)
         << std::scientific << p.p_t << std::defaultfloat << " | " << p.wins << "/" << p.ties << "/"
         << p.losses << " | " << std::setprecision(2) << std::scientific << p.p_sign
         << std::defaultfloat << " |\n";
    }

  // 3. Retention acc(N)/acc(256) for N = 64 (the paper's statistic) and N = 16.
  auto retention = [&](Index small, Index large) {
    if (std::find(cfg.budgets.begin(), cfg.budgets.end(), small) == cfg.budgets.end() ||
        std::find(cfg.budgets.begin(), cfg.budgets.end(), large) == cfg.budgets.end())
      return;
    md << "\n## Retention: accuracy at N = " << small << " divided by accuracy at N = " << large
       << "\n\nMean over seeds of the per-seed ratio.\n\n| task | noise |";
    for (const std::string& m : method_names) md << " " << m << " |";
    md << "\n|---|---:|";
    for (std::size_t i = 0; i < method_names.size(); ++i) md << "---:|";
    md << "\n";
    std::map<std::string, std::vector<double>> overall;
    for (Task task : cfg.tasks)
      for (double noise : cfg.noise) {
        md << "| " << task_name(task) << " | " << noise << " |";
        for (const std::string& m : method_names) {
          const auto& a_small = cells[{task_name(task), noise, m, small}];
          const auto& a_large = cells[{task_name(task), noise, m, large}];
          std::vector<double> ratio;
          for (std::size_t i = 0; i < a_small.size() && i < a_large.size(); ++i)
            ratio.push_back(a_small[i] / a_large[i]);
          overall[m].insert(overall[m].end(), ratio.begin(), ratio.end());
          md << " " << fmt(stats(ratio).mean) << " |";
        }
        md << "\n";
      }
    md << "| all | all |";
    for (const std::string& m : method_names) md << " **" << fmt(stats(overall[m]).mean) << "** |";
    md << "\n";
  };
  retention(64, 256);
  retention(16, 256);

  // 4. Chosen hyperparameters and time per method.
  md << "\n## Time per run (seconds, mean over runs)\n\n| method | seconds |\n|---|---:|\n";
  std::map<std::string, std::vector<double>> times;
  for (const Run& r : runs) times[r.method].push_back(r.seconds);
  for (const auto& [m, t] : times) md << "| " << m << " | " << fmt(stats(t).mean, 4) << " |\n";
  coulomb_examples::write_output("--out", (cfg.out / "summary.md").string(), md.str());
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

/// accuracy_vs_budget.png: one panel per task, accuracy (mean ± sd) against N at noise 0.1.
void figure_accuracy(coulomb_examples::Figures& figures, const Config& cfg,
                     const std::vector<Run>& runs, double noise) {
  std::map<Key, std::vector<double>> cells;
  for (const Run& r : runs)
    cells[{task_name(r.task), r.noise, r.method, r.budget}].push_back(r.accuracy);
  const auto dat = cfg.out / "accuracy_vs_budget.dat";
  std::ostringstream f;
  for (Task task : cfg.tasks) {
    for (const std::string& m : method_names) {
      f << "# " << task_name(task) << " " << m << "\n";
      for (Index b : cfg.budgets) {
        const Stats s = stats(cells[{task_name(task), noise, m, b}]);
        f << b << " " << s.mean << " " << s.sd << "\n";
      }
      f << "\n\n";
    }
  }
  coulomb_examples::write_output("--out", dat.string(), f.str());
  std::ostringstream g;
  const std::size_t nm = method_names.size();
  g << figures.terminal(1200, 900) << "set output ARG1\n"
    << "set multiplot layout 2,2 title 'Test accuracy against the feature budget N (training-label "
       "noise "
    << noise << ", mean ± sd over " << cfg.seeds << " seeds)'\n"
    << "set logscale x 2\nset xlabel 'N (frequencies; 2N features)'\nset ylabel 'test accuracy'\n"
    << "set key bottom right\nset grid\nset xrange [12:340]\n";
  for (std::size_t t = 0; t < cfg.tasks.size(); ++t) {
    g << "set title '" << task_name(cfg.tasks[t]) << "'\nplot ";
    for (std::size_t m = 0; m < nm; ++m) {
      static const char* colours[] = {"#444444", "#1b9e77", "#1f78b4", "#d95f02", "#b15928"};
      g << "ARG2 index " << t * nm + m << " using ($1*"
        << (1.0 + 0.03 * (static_cast<double>(m) - 2.0)) << "):2:3 with yerrorlines lw 2 lc rgb '"
        << colours[m % 5] << "' dt " << (m < 3 ? 1 : 2) << " title '" << method_names[m]
        << "' noenhanced" << (m + 1 < nm ? ", " : "\n");
    }
  }
  g << "unset multiplot\n";
  figures.draw(cfg.out / "accuracy_vs_budget.png", g.str(), {dat.string()});
}

/// "min distance …, … distinct sites, …% near (±π, ±π)": the smallest pairwise distance of a
/// 2-D particle cloud, the number of particles farther than 0.05 from every earlier one (the
/// number of distinct sites they occupy), and the share within 0.3 of the checkerboard's four
/// spectral peaks.
std::string cloud_summary(const MatR& omega) {
  double min_distance = std::numeric_limits<double>::infinity();
  Index near = 0;
  Index sites = 0;
  for (Index k = 0; k < omega.rows(); ++k) {
    double nearest = std::numeric_limits<double>::infinity();
    for (Index l = 0; l < k; ++l)
      nearest = std::min(nearest, static_cast<double>((omega.row(k) - omega.row(l)).norm()));
    min_distance = std::min(min_distance, nearest);
    sites += nearest > 0.05;
    const double a = std::abs(static_cast<double>(omega(k, 0))) - std::numbers::pi;
    const double b = std::abs(static_cast<double>(omega(k, 1))) - std::numbers::pi;
    near += std::hypot(a, b) < 0.3;
  }
  std::ostringstream os;
  os << "min distance " << fmt(min_distance, 3) << ", " << sites << " distinct sites, "
     << fmt(100.0 * static_cast<double>(near) / static_cast<double>(omega.rows()), 0)
     << "% near (±π, ±π)";
  return os.str();
}

/// The particle cloud before and after Phase A on the checkerboard (with and without
/// repulsion), and the energy terms against the iterations.
void figure_particles(coulomb_examples::Figures& figures, const Config& cfg) {
  coulomb::Rng rng(4242);
  const Data data = generate(Task::checkerboard, cfg.n_train, rng);
  Data train = data;
  train.y = flip_labels(data.y, 0.1, rng);
  const std::vector<Index> folds = coulomb::k_fold_assignment(cfg.n_train, 3, rng);
  const Index budget = 128;
  const coulomb::BandwidthSelection sel = coulomb::select_rff_bandwidth(
      train.X, train.y, bandwidth_grid(train.X, rng), ridge_alphas, budget, folds, rng);
  MatR omega0(budget, 2);
  coulomb::fill_standard_normal(omega0, rng);
  omega0 /= static_cast<Real>(sel.bandwidth);
  // The learner's defaults (β = 16, h = 0.05) with a visible repulsion (λ_rel = 0.1), and the
  // noiseless runs with and without repulsion, where the collapse is plainest.
  const double lambda_rel = 0.1;
  coulomb::EnergyLog log_with, log_without;
  const MatR noisy =
      run_phase_a(train, omega0, sel.bandwidth, {lambda_rel}, cfg.phase_a, 5, log_with);
  run_phase_a(train, omega0, sel.bandwidth, {0.0}, cfg.phase_a, 5, log_without);
  PhaseA cold{lambda_rel};
  cold.noise = false;
  const MatR with = run_phase_a(train, omega0, sel.bandwidth, cold, cfg.phase_a, 5);
  cold.lambda_rel = 0.0;
  const MatR without = run_phase_a(train, omega0, sel.bandwidth, cold, cfg.phase_a, 5);
  const double lambda = absolute_lambda(train, omega0, sel.bandwidth, lambda_rel);
  const std::vector<std::pair<const MatR*, std::string>> panels{
      {&omega0, "initial draw N(0, σ^{-2}I), σ = " + fmt(sel.bandwidth, 2)},
      {&noisy, "after Phase A, λ_{rel} = " + fmt(lambda_rel, 2) + ", β = 16"},
      {&with, "after Phase A, λ_{rel} = " + fmt(lambda_rel, 2) + ", no noise"},
      {&without, "after Phase A, λ = 0 (no repulsion), no noise"}};

  const auto dat = cfg.out / "particles_checkerboard.dat";
  std::ostringstream f;
  double r = 0.0;
  for (const auto& [m, title] : panels) {
    for (Index k = 0; k < m->rows(); ++k) f << (*m)(k, 0) << " " << (*m)(k, 1) << "\n";
    f << "\n\n";
    r = std::max(r, 1.1 * static_cast<double>(m->cwiseAbs().maxCoeff()));
  }
  coulomb_examples::write_output("--out", dat.string(), f.str());
  std::ostringstream g;
  g << figures.terminal(1100, 1100) << "set output ARG1\n"
    << "set multiplot layout 2,2 title 'Checkerboard, N = " << budget
    << " particles (frequencies ω ∈ R^2), label noise 0.1, at most " << cfg.phase_a.iterations
    << " Langevin steps; red circles: the peaks (±π, ±π) of the label spectrum'\n"
    << "set size ratio -1\nset xrange [" << -r << ":" << r << "]\nset yrange [" << -r << ":" << r
    << "]\nset xlabel 'ω_1'\nset ylabel 'ω_2'\nset grid\nunset key\n"
    << "set object 1 circle at  pi,pi size 0.3 fs empty border rgb 'red' lw 2 front\n"
    << "set object 2 circle at -pi,pi size 0.3 fs empty border rgb 'red' lw 2 front\n"
    << "set object 3 circle at pi,-pi size 0.3 fs empty border rgb 'red' lw 2 front\n"
    << "set object 4 circle at -pi,-pi size 0.3 fs empty border rgb 'red' lw 2 front\n";
  const char* colours[] = {"#7570b3", "#1b9e77", "#66a61e", "#d95f02"};
  for (std::size_t p = 0; p < panels.size(); ++p)
    g << "set title \"" << panels[p].second << "\\n"
      << cloud_summary(*panels[p].first) << "\"\nplot ARG2 index " << p
      << " with points pt 7 ps 0.7 lc rgb '" << colours[p] << "'\n";
  g << "unset multiplot\n";
  figures.draw(cfg.out / "particles_checkerboard.png", g.str(), {dat.string()});

  const auto edat = cfg.out / "energy_checkerboard.dat";
  std::ostringstream e;
  e << "# iteration alignment repulsion lambda*repulsion total alignment(lambda=0)\n";
  // Both runs stop at their own energy plateau: the lines end where each stopped ("-": missing).
  for (std::size_t t = 0; t < std::max(log_with.energy.size(), log_without.energy.size()); ++t) {
    e << t + 1;
    if (t < log_with.energy.size())
      e << " " << log_with.alignment[t] << " " << log_with.repulsion[t] << " "
        << lambda * log_with.repulsion[t] << " " << log_with.energy[t];
    else
      e << " - - - -";
    if (t < log_without.energy.size())
      e << " " << log_without.alignment[t];
    else
      e << " -";
    e << "\n";
  }
  coulomb_examples::write_output("--out", edat.string(), e.str());
  std::ostringstream h;
  h << figures.terminal(900, 600) << "set output ARG1\n"
    << "set title 'Energy terms during Phase A (checkerboard, N = " << budget
    << ", TiltedLangevin β = 16, h = 0.05, λ = " << fmt(lambda, 4)
    << ", full batch, stopped at the energy plateau)'\n"
    << "set datafile missing '-'\n"
    << "set xlabel 'iteration'\nset ylabel 'energy'\nset grid\nset key top right\n"
    << "plot ARG2 using 1:2 with lines lw 2 title 'alignment E (λ > 0)', "
    << "'' using 1:4 with lines lw 2 title 'λ·W (repulsion)', "
    << "'' using 1:5 with lines lw 2 title 'H = E + λW', "
    << "'' using 1:6 with lines lw 2 dt 2 title 'alignment E (λ = 0)'\n";
  figures.draw(cfg.out / "energy_checkerboard.png", h.str(), {edat.string()});
}

}  // namespace

int main(int argc, char** argv) try {
  Config cfg;
  coulomb_examples::CommandLine cli(
      "synthetic_benchmark",
      "The synthetic classification experiment of Badiei Khuzani et al. (2026), section 5: "
      "learned particles (Phase A: TiltedLangevin on alignment + lambda * Riesz "
      "repulsion) against fixed random Fourier features and Sinha & Duchi's importance sampling, "
      "and the ablations without repulsion and without noise, with a ridge classifier on "
      "(1/sqrt(N))[cos Wx, sin Wx] for feature budgets N = 16 to 256. Four tasks (rings, "
      "checkerboard, xor8, mixture), training-label noise 0, 0.1, 0.2 and 0.3, seeds F to F+S-1 "
      "(F = 0 unless --first-seed); every hyperparameter is chosen without the test set. Writes "
      "DIR/runs.csv, DIR/summary.md "
      "(mean +- sd tables, paired comparisons, retention) and, with gnuplot, three figures. The "
      "numbers are the same bits for any thread count.");
  std::vector<std::string> task_names;
  bool quick = false;
  cli.add_out(cfg.out);
  cli.app()
      .add_option("--seeds", cfg.seeds, "Seeds per task and noise rate (F to F+S-1)")
      ->check(coulomb_examples::integer_in(1, 1000))
      ->capture_default_str();
  cli.app()
      .add_option("--first-seed", cfg.first_seed,
                  "First seed F (seeds other than the published table's, for development "
                  "studies)")
      ->check(coulomb_examples::integer_in(0, 1000000))
      ->capture_default_str();
  cli.add_threads(cfg.threads, "Worker threads (one job at a time each)");
  cli.app().add_flag("--quick", quick,
                     "Smoke test: one seed (unless --seeds is given) at noise 0.1 (unless --noise "
                     "is given)");
  cli.app()
      .add_option("--task", task_names, "Tasks to run (default: all four)")
      ->delimiter(',')
      ->check(CLI::IsMember({"rings", "checkerboard", "xor8", "mixture"}));
  cli.app()
      .add_option("--noise", cfg.noise, "Training-label noise rates (flip probabilities)")
      ->delimiter(',')
      ->check(coulomb_examples::probability())
      ->capture_default_str();
  cli.app()
      .add_option("--n-train", cfg.n_train, "Training samples per task")
      ->check(coulomb_examples::integer_in(40, 1000000))
      ->capture_default_str();
  cli.app()
      .add_option("--iterations", cfg.phase_a.iterations,
                  "Largest number of Langevin steps of a Phase A run (the energy plateau stops "
                  "it earlier)")
      ->check(coulomb_examples::integer_in(1, 1000000))
      ->capture_default_str();
  cli.app()
      .add_option("--betas", cfg.betas,
                  "Relative inverse temperatures of TiltedLangevin (several: chosen on a "
                  "validation split of the training data)")
      ->delimiter(',')
      ->check(coulomb_examples::positive_number())
      ->capture_default_str();
  cli.app()
      .add_option("--steps", cfg.steps,
                  "Steps h of TiltedLangevin, in units of the base measure (several: chosen on a "
                  "validation split of the training data)")
      ->delimiter(',')
      ->check(coulomb_examples::positive_number())
      ->capture_default_str();
  cli.app()
      .add_option("--samplers", cfg.samplers,
                  "Samplers of TiltedLangevin: ula (tamed unadjusted Langevin) or mala "
                  "(Metropolis-adjusted steps with independence jumps, exact on the tilted law); "
                  "several: chosen on a validation split of the training data")
      ->delimiter(',')
      ->check(CLI::IsMember({"ula", "mala"}))
      ->capture_default_str();
  cli.app()
      .add_option("--starts", cfg.starts,
                  "Where the learner's particles start: rff (the fixed-RFF draw) or importance "
                  "(importance sampling's draw at the same budget); several: chosen on a "
                  "validation split of the training data")
      ->delimiter(',')
      ->check(CLI::IsMember({"rff", "importance"}))
      ->capture_default_str();
  cli.app()
      .add_option("--keep", cfg.keep,
                  "Starts (rff, importance) whose draw itself, without a Langevin step, joins "
                  "the learner's candidates on the validation split (none: no such candidate)")
      ->delimiter(',')
      ->check(CLI::IsMember({"rff", "importance", "none"}))
      ->capture_default_str();
  cli.app()
      .add_option("--selection-margin", cfg.selection_margin,
                  "With --keep: the learner replaces the first kept draw only by a candidate "
                  "whose validation accuracy is higher by this many paired standard errors (0: "
                  "the best score wins)")
      ->check(coulomb_examples::non_negative_number())
      ->capture_default_str();
  cli.app()
      .add_option("--jump-period", cfg.phase_a.jump_period,
                  "Steps between the independence jumps of the mala sampler")
      ->check(coulomb_examples::integer_in(1, 1000000))
      ->capture_default_str();
  cli.app()
      .add_option("--lambdas", cfg.lambda_rel,
                  "Repulsion strengths relative to the gradient balance at the start (several: "
                  "chosen on a validation split of the training data)")
      ->delimiter(',')
      ->check(coulomb_examples::non_negative_number())
      ->capture_default_str();
  cli.app()
      .add_option("--budgets", cfg.budgets, "Feature budgets N")
      ->delimiter(',')
      ->check(coulomb_examples::integer_in(1, 100000))
      ->capture_default_str();
  cli.app()
      .add_option("--tuning-budget", cfg.tuning_budget,
                  "Feature budget at which the learned method and importance sampling are tuned")
      ->check(coulomb_examples::integer_in(1, 100000))
      ->capture_default_str();
  cli.app()
      .add_option("--selection-folds", cfg.selection_folds,
                  "Folds of a 4-fold split of the training data over which the choices of the "
                  "learned method and of importance sampling average the validation accuracy (1: "
                  "one 75 %/25 % split)")
      ->check(coulomb_examples::integer_in(1, 4))
      ->capture_default_str();
  cli.app()
      .add_option("--selection", cfg.selection,
                  "What those choices maximize on the validation folds: accuracy, or "
                  "squared-error (minus the ridge classifier's mean squared error on the +-1 "
                  "targets)")
      ->check(CLI::IsMember({"accuracy", "squared-error"}))
      ->capture_default_str();
  cli.add_progress();
  cli.add_quiet();
  std::string figures_mode = "auto";
  cli.add_figures(figures_mode);
  if (const auto status = cli.parse(argc, argv)) return *status;
  if (const auto twice = coulomb_examples::repeated_entry(task_names))
    return cli.reject("--task", "'" + *twice + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.noise))
    return cli.reject("--noise", "'" + fmt(*twice, 2) + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.betas))
    return cli.reject("--betas", "'" + fmt(*twice, 2) + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.steps))
    return cli.reject("--steps", "'" + fmt(*twice, 2) + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.lambda_rel))
    return cli.reject("--lambdas", "'" + fmt(*twice, 2) + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.budgets))
    return cli.reject("--budgets", "'" + std::to_string(*twice) + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.samplers))
    return cli.reject("--samplers", "'" + *twice + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.starts))
    return cli.reject("--starts", "'" + *twice + "' is listed twice");
  if (const auto twice = coulomb_examples::repeated_entry(cfg.keep))
    return cli.reject("--keep", "'" + *twice + "' is listed twice");
  if (std::find(cfg.keep.begin(), cfg.keep.end(), "none") != cfg.keep.end()) {
    if (cfg.keep.size() > 1) return cli.reject("--keep", "'none' goes alone");
    cfg.keep.clear();
  }
  if (quick) {
    if (cli.app().count("--seeds") == 0) cfg.seeds = 1;
    if (cli.app().count("--noise") == 0) cfg.noise = {0.1};
  }
  if (!task_names.empty()) {
    cfg.tasks.clear();
    for (Task task : all_tasks)
      if (std::find(task_names.begin(), task_names.end(), task_name(task)) != task_names.end())
        cfg.tasks.push_back(task);
  }
  const std::string command = cli.command_line();
  coulomb_examples::OutputPlan plan;
  plan.directory("--out", cfg.out);
  for (const char* name :
       {"runs.csv", "summary.md", "accuracy_vs_budget.dat", "accuracy_vs_budget.gp",
        "accuracy_vs_budget.png", "particles_checkerboard.dat", "particles_checkerboard.gp",
        "particles_checkerboard.png", "energy_checkerboard.dat", "energy_checkerboard.gp",
        "energy_checkerboard.png"})
    plan.output("--out", cfg.out / name);
  if (const auto status = cli.check_paths(plan)) return *status;
  coulomb_examples::Figures figures(figures_mode);

  struct Job {
    Task task;
    double noise;
    int seed;
  };
  std::vector<Job> jobs;
  for (Task t : cfg.tasks)
    for (double noise : cfg.noise)
      for (int s = 0; s < cfg.seeds; ++s) jobs.push_back({t, noise, cfg.first_seed + s});
  std::vector<std::vector<Run>> results(jobs.size());
  std::atomic<std::size_t> next_job{0};
  std::size_t done = 0;  // under `print`
  std::mutex print;
  const auto start = std::chrono::steady_clock::now();
  // Progress on stderr: jobs done, the running mean over finished jobs of learned − fixed_rff
  // at N = 64, jobs per second and ETA; and one line per finished job with its accuracies.
  const auto progress = cli.make_progress(
      static_cast<Index>(jobs.size()),
      {.label = "synthetic_benchmark", .unit = "jobs", .line_every_seconds = 10.0});
  double gain_sum = 0.0;
  auto worker = [&] {
    for (std::size_t j = next_job++; j < jobs.size(); j = next_job++) {
      results[j] = run_job(cfg, jobs[j].task, jobs[j].noise, jobs[j].seed);
      const std::lock_guard<std::mutex> lock(print);
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::ostringstream line;
      line << "[" << ++done << "/" << jobs.size() << ", " << fmt(elapsed, 0) << " s] "
           << task_name(jobs[j].task) << " noise " << jobs[j].noise << " seed " << jobs[j].seed
           << ":";
      double learned = 0.0, fixed = 0.0;
      for (const Run& r : results[j])
        if (r.budget == 64 && r.method != "tuning") {
          line << " " << r.method << " " << fmt(r.accuracy);
          if (r.method == "learned") learned = r.accuracy;
          if (r.method == "fixed_rff") fixed = r.accuracy;
        }
      gain_sum += learned - fixed;
      if (!cli.quiet()) progress->message(line.str());
      progress->update(static_cast<Index>(done),
                       {{"learned-fixed_rff@64", gain_sum / static_cast<double>(done)}});
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < cfg.threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  progress->finish();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::vector<Run> runs;
  for (const auto& r : results) runs.insert(runs.end(), r.begin(), r.end());
  write_csv(cfg.out / "runs.csv", runs);
  write_report(cfg, runs, wall, command);
  std::cout << "wrote " << (cfg.out / "runs.csv").string() << " and "
            << (cfg.out / "summary.md").string() << " (" << fmt(wall, 1) << " s)\n";
  if (figures.wanted()) {
    const double fig_noise = std::find(cfg.noise.begin(), cfg.noise.end(), 0.1) != cfg.noise.end()
                                 ? 0.1
                                 : cfg.noise.front();
    figure_accuracy(figures, cfg, runs, fig_noise);
    figure_particles(figures, cfg);
  }
  return cli.finish(figures.failed() ? 1 : 0);
} catch (const std::exception& e) {
  std::cerr << "synthetic_benchmark: " << e.what() << "\n";
  return 1;
}
