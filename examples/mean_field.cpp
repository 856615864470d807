// SPDX-License-Identifier: MIT
// mean_field: the mean-field behaviour of the particle model, shown numerically.
//
// Badiei Khuzani et al. (2026), §3: as the number N of particles grows, the empirical measure
// of Langevin dynamics on H_N follows a McKean–Vlasov equation, so at a fixed time, with β and
// λ fixed, every statistic of the particle cloud converges to a deterministic limit and its
// fluctuation across random seeds shrinks like 1/√N. This example runs the same dynamics (the
// learner TiltedLangevin with its defaults β = 16, h = 0.05 and the base draw N(0, I); same
// data, same λ, same number of steps) for N = 32, 128, 512 and 2048 particles and several seeds
// (β_eff = β/s, with s measured on the starting draw, converges as N grows), and reports
//   - the energy H_N(Ω_T) (the alignment per particle plus λ times the pair energy per pair);
//   - a histogram statistic: the distribution of the particle norms ‖ω_k‖ in 12 bins on [0, R],
//     its total-variation distance to the pooled histogram of the largest N, and the fraction
//     of particles in the modal band 1.5 ≤ ‖ω‖ < 2.5;
// with their spread across seeds. Writes <out>/mean_field.csv, <out>/mean_field.md and, with
// gnuplot, <out>/mean_field.png.
//
//   mean_field [--out DIR | DIR] [--seeds S] [--sizes N1,N2,...] [--progress MODE]
//              [--progress-json FILE] [--quiet]      (defaults: mean_field_out, 8, 32,128,512,2048)
//
// Progress (one line per simulation, particle-steps per second, ETA) goes to stderr; see
// `mean_field --help` and docs/tools.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <coulomb/coulomb.hpp>
#include <coulomb/train/progress.hpp>

#include "common/cli.hpp"
#include "common/figure.hpp"

namespace {

using coulomb::Index;
using Real = float;  // Eigen 3.4 vectorizes sin/cos/log for float: the N = 2048 runs stay fast
using MatR = coulomb::Matrix<Real>;
using VecR = coulomb::Vector<Real>;
using Map = coulomb::RffCosSin<Real>;

constexpr double radius = 6.0;  // the histogram's range (norms beyond go to the last bin)
constexpr int bins = 12;
constexpr Index steps = 200;  // Langevin steps of every simulation

/// Two-dimensional XOR with Gaussian inputs: label 1 when x₀x₁ > 0.
void make_xor(Index n, coulomb::Rng& rng, MatR& X, Eigen::VectorXi& labels) {
  coulomb::Matrix<double> x(n, 2);
  coulomb::fill_standard_normal(x, rng);
  X = x.cast<Real>();
  labels.resize(n);
  for (Index i = 0; i < n; ++i) labels(i) = x(i, 0) * x(i, 1) > 0.0;
}

struct Outcome {
  double energy;
  std::vector<double> histogram;  // fractions of particles per bin of ‖ω‖
};

Outcome simulate(const MatR& X, const Eigen::VectorXi& labels, Index n_particles,
                 std::uint64_t seed) {
  coulomb::Rng rng(seed);
  const Map map(2, n_particles, rng);  // ω ~ N(0, I)
  coulomb::AlignmentEnergy<Map> alignment(map, X, coulomb::binary_targets<Real>(labels));
  coulomb::Hamiltonian<coulomb::AlignmentEnergy<Map>> hamiltonian(alignment, 0.05,
                                                                  {.s = 0.0, .softening = 0.1});
  coulomb::TiltedLangevin langevin({.max_iterations = steps, .base_scale = 1.0, .seed = seed + 1});
  MatR omega = map.omega();
  langevin.optimize(hamiltonian, omega);
  Outcome out{static_cast<double>(hamiltonian.evaluate(omega)), std::vector<double>(bins, 0.0)};
  for (Index k = 0; k < n_particles; ++k) {
    const double r = static_cast<double>(omega.row(k).norm());
    const int b = std::min(bins - 1, static_cast<int>(r / radius * bins));
    out.histogram[static_cast<std::size_t>(b)] += 1.0 / static_cast<double>(n_particles);
  }
  return out;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double sd(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0.0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}
double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] - b[i]);
  return 0.5 * s;
}

}  // namespace

int main(int argc, char** argv) try {
  coulomb_examples::CommandLine cli(
      "mean_field",
      "The mean-field behaviour of the particle model, shown numerically (Badiei Khuzani et "
      "al., 2026, section 3): the same Langevin dynamics on H_N (2-D XOR, n = 400, "
      "lambda = 0.05, TiltedLangevin with beta = 16 and h = 0.05, 200 steps) run with N particles "
      "for each N of --sizes and "
      "--seeds seeds each. Reports the final energy H_N and the histogram of the particle norms, "
      "whose fluctuation across seeds shrinks like 1/sqrt(N); writes DIR/mean_field.csv, "
      "DIR/mean_field.md and, with gnuplot, DIR/mean_field.png.");
  std::filesystem::path out = "mean_field_out";
  int seeds = 8;
  std::vector<Index> sizes{32, 128, 512, 2048};
  cli.add_out(out);
  cli.app()
      .add_option("--seeds", seeds, "Seeds per number of particles (>= 2: the tables show sds)")
      ->check(coulomb_examples::integer_in(2, 1000))
      ->capture_default_str();
  cli.app()
      .add_option("--sizes", sizes,
                  "Numbers of particles N, increasing; the largest is the reference histogram")
      ->delimiter(',')
      ->check(coulomb_examples::integer_in(2, 1 << 20))
      ->capture_default_str();
  cli.add_progress();
  cli.add_quiet();
  std::string figures_mode = "auto";
  cli.add_figures(figures_mode);
  if (const auto status = cli.parse(argc, argv)) return *status;
  if (sizes.size() < 2 || std::adjacent_find(sizes.begin(), sizes.end(), [](Index a, Index b) {
                            return a >= b;
                          }) != sizes.end())
    return cli.reject("--sizes", "must list at least two strictly increasing numbers");
  coulomb_examples::OutputPlan plan;
  plan.directory("--out", out);
  for (const char* name :
       {"mean_field.csv", "mean_field.md", "mean_field.dat", "mean_field.gp", "mean_field.png"})
    plan.output("--out", out / name);
  if (const auto status = cli.check_paths(plan)) return *status;
  coulomb_examples::Figures figures(figures_mode);

  const auto start = std::chrono::steady_clock::now();
  coulomb::Rng data_rng(99);
  MatR X;
  Eigen::VectorXi labels;
  make_xor(400, data_rng, X, labels);

  // Progress over the simulations; the throughput and the ETA count particle-steps (N · 200
  // per simulation), since the large N dominate the time.
  Index total_items = 0;
  for (Index n : sizes) total_items += n * steps * seeds;
  const auto progress =
      cli.make_progress(static_cast<Index>(sizes.size()) * seeds, {.label = "mean_field",
                                                                   .unit = "particle-steps",
                                                                   .line_every_seconds = 10.0,
                                                                   .total_items = total_items});
  std::vector<std::vector<Outcome>> runs(sizes.size());
  Index done = 0;
  double items = 0.0;
  for (std::size_t s = 0; s < sizes.size(); ++s)
    for (int seed = 0; seed < seeds; ++seed) {
      runs[s].push_back(simulate(X, labels, sizes[s], 1000ULL * sizes[s] + seed));
      items += static_cast<double>(sizes[s] * steps);
      progress->update(++done, items,
                       {{"N", static_cast<double>(sizes[s])}, {"H_N", runs[s].back().energy}});
    }
  progress->finish();

  // Reference histogram: all seeds of the largest N pooled.
  std::vector<double> reference(bins, 0.0);
  for (const Outcome& o : runs.back())
    for (int b = 0; b < bins; ++b) reference[b] += o.histogram[b] / seeds;

  std::ostringstream csv, md, dat;
  csv << "N,seed,energy,tv_to_reference";
  for (int b = 0; b < bins; ++b) csv << ",bin" << b;
  csv << "\n";
  md << "| N | H_N mean | H_N sd over " << seeds
     << " seeds | TV(histogram, pooled N = " << sizes.back()
     << ") mean | modal-band fraction mean | its sd |\n|---:|---:|---:|---:|---:|---:|\n";
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    std::vector<double> energy, tv, inner;
    for (int seed = 0; seed < seeds; ++seed) {
      const Outcome& o = runs[s][static_cast<std::size_t>(seed)];
      energy.push_back(o.energy);
      tv.push_back(total_variation(o.histogram, reference));
      inner.push_back(o.histogram[3] + o.histogram[4]);  // 1.5 ≤ ‖ω‖ < 2.5
      csv << sizes[s] << "," << seed << "," << o.energy << "," << tv.back();
      for (double h : o.histogram) csv << "," << h;
      csv << "\n";
    }
    md << "| " << sizes[s] << " | " << std::setprecision(5) << mean(energy) << " | "
       << std::setprecision(3) << sd(energy) << " | " << mean(tv) << " | " << mean(inner) << " | "
       << sd(inner) << " |\n";
    dat << sizes[s] << " " << mean(energy) << " " << sd(energy) << " " << mean(tv) << " " << sd(tv)
        << " " << sd(inner) << "\n";
    std::cout << "N = " << std::setw(4) << sizes[s] << ": H_N = " << std::setprecision(5)
              << mean(energy) << " ± " << std::setprecision(3) << sd(energy)
              << ", TV to the pooled histogram " << mean(tv) << "\n";
  }
  dat << "\n\n";
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    for (int b = 0; b < bins; ++b) {
      double m = 0.0;
      for (const Outcome& o : runs[s]) m += o.histogram[b] / seeds;
      dat << (b + 0.5) * radius / bins << " " << m << "\n";
    }
    dat << "\n\n";
  }
  coulomb_examples::write_output("--out", (out / "mean_field.csv").string(), csv.str());
  coulomb_examples::write_output("--out", (out / "mean_field.md").string(), md.str());
  coulomb_examples::write_output("--out", (out / "mean_field.dat").string(), dat.str());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "wrote " << (out / "mean_field.csv").string() << " and "
            << (out / "mean_field.md").string() << " in " << std::setprecision(3) << seconds
            << " s\n";

  double anchor = 0.0;  // sd of H_N at the smallest N, to anchor the 1/√N guide line
  {
    std::vector<double> e;
    for (const Outcome& o : runs.front()) e.push_back(o.energy);
    anchor = sd(e);
  }
  std::ostringstream g;
  g << figures.terminal(1500, 480)
    << "set output ARG1\nset multiplot layout 1,3 title 'Mean-field behaviour: the same Langevin "
       "dynamics "
       "(TiltedLangevin, λ = 0.05, β = 16, h = 0.05, 200 steps) with N particles, "
    << seeds << " seeds each'\n"
    << "set grid\nset logscale x 2\nset xrange [20:3300]\nset xlabel 'N'\n"
    << "set title 'energy H_N at the end (mean ± sd over seeds)'\nset ylabel 'H_N'\n"
    << "plot ARG2 index 0 using 1:2:3 with yerrorlines lw 2 pt 7 notitle\n"
    << "set logscale y\nset title 'fluctuations across seeds'\nset ylabel 'sd, or mean TV "
       "distance'\n"
    << "plot ARG2 index 0 using 1:3 with linespoints lw 2 pt 7 title 'sd of H_N', '' "
    << "index 0 using 1:6 with linespoints lw 2 pt 5 title 'sd of the fraction with 1.5 ≤ ‖ω‖ < "
       "2.5', "
    << "'' index 0 using 1:4 with linespoints lw 2 pt 9 title 'mean TV distance to the pooled "
       "N = "
    << sizes.back() << " histogram', " << anchor << "*sqrt(" << sizes.front()
    << ".0/x) with lines dt 2 lc rgb 'gray' title '∝ 1/√N'\n"
    << "unset logscale\nset xrange [0:" << radius
    << "]\nset xlabel '‖ω‖'\nset ylabel 'fraction "
       "of particles'\n"
    << "set title 'histogram of the particle norms (mean over seeds)'\nplot ";
  for (std::size_t s = 0; s < sizes.size(); ++s)
    g << "ARG2 index " << s + 1 << " using 1:2 with linespoints lw 2 title 'N = " << sizes[s] << "'"
      << (s + 1 < sizes.size() ? ", " : "\n");
  g << "unset multiplot\n";
  figures.draw(out / "mean_field.png", g.str(), {(out / "mean_field.dat").string()});
  return cli.finish(figures.failed() ? 1 : 0);
} catch (const std::exception& e) {
  std::cerr << "mean_field: " << e.what() << "\n";
  return 1;
}
