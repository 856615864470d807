// SPDX-License-Identifier: MIT
// feature_maps_demo: every coulomb random feature map against the kernel it estimates.
//
// For each map with a closed-form kernel, draws random input pairs, estimates the kernel with
// m = 16 ... 4096 features (i.i.d. and orthogonal draws, several redraws each) and prints the
// root-mean-square error against the exact kernel. Writes the numbers to
// <out>/kernel_error.csv and, when gnuplot is installed, the figure <out>/kernel_error.png.
// It also shows the stabilizer at work on inputs of norm 30 and the softmax-feature maps'
// row sums.
//
//   feature_maps_demo [--out DIR | DIR] [--seed S]      (default: feature_maps_demo_out, 2026)
//
// `feature_maps_demo --help` lists the options; docs/tools.md describes the common ones.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <coulomb/coulomb.hpp>

#include "common/cli.hpp"
#include "common/figure.hpp"

namespace {

using coulomb::Index;
using Mat = coulomb::Matrix<double>;

struct Row {
  std::string map;
  std::string draw;
  Index m;
  double rmse;
  double mean_abs_kernel;
};

/// Inputs of norm about `norm` in dimension d.
Mat random_rows(Index n, Index d, double norm, coulomb::Rng& rng) {
  Mat X(n, d);
  coulomb::fill_standard_normal(X, rng);
  X.rowwise().normalize();
  return norm * X;
}

template <typename Map, typename Options>
Row kernel_error(const std::string& label, Options options, Index d, Index m, double norm,
                 int redraws, coulomb::Rng& rng) {
  const Index pairs = 256;
  const Mat X = random_rows(pairs, d, norm, rng);
  const Mat Y = random_rows(pairs, d, norm, rng);
  double squared = 0.0;
  double magnitude = 0.0;
  for (int r = 0; r < redraws; ++r) {
    Map fm(d, m, rng, options);
    const Mat phi_x = fm.map(X);
    const Mat phi_y = fm.map(Y);
    // Only the matching pairs (x_i, y_i): row-wise dot products.
    const Eigen::VectorXd estimate = (phi_x.array() * phi_y.array()).rowwise().sum();
    Eigen::VectorXd exact(pairs);
    for (Index i = 0; i < pairs; ++i) exact(i) = fm.exact_kernel(X.row(i), Y.row(i))(0, 0);
    squared += (estimate - exact).squaredNorm();
    magnitude += exact.cwiseAbs().sum();
  }
  const double count = static_cast<double>(pairs) * redraws;
  return {label, coulomb::to_string(options.draw), m, std::sqrt(squared / count),
          magnitude / count};
}

template <typename Map, typename Options>
void sweep(const std::string& label, Options options, Index d, double norm, std::vector<Row>& rows,
           coulomb::Rng& rng) {
  for (coulomb::Draw draw : {coulomb::Draw::iid, coulomb::Draw::orthogonal_chi}) {
    options.draw = draw;
    for (Index m = 16; m <= 4096; m *= 4) {
      const int redraws = m <= 256 ? 8 : 2;
      rows.push_back(kernel_error<Map>(label, options, d, m, norm, redraws, rng));
    }
  }
}

/// The figure kernel_error.png from kernel_error.csv (ARG2), one curve per map and draw.
void write_plot(coulomb_examples::Figures& figures, const std::filesystem::path& dir,
                const std::vector<std::string>& labels) {
  std::ostringstream gp;
  gp << figures.terminal(1000, 640) << "set output ARG1\n"
     << "set datafile separator ','\n"
     << "set logscale xy 2\nset format y '10^{%L}'\nset logscale y 10\n"
     << "set xlabel 'number of features m'\nset ylabel 'RMSE of the kernel estimate'\n"
     << "set title 'coulomb feature maps against their exact kernels (d = 16)'\n"
     << "set key outside right noenhanced\nset grid\n"
     << "plot ";
  for (std::size_t k = 0; k < labels.size(); ++k) {
    for (const char* draw : {"iid", "orthogonal_chi"}) {
      gp << "ARG2 using "
         << "(strcol(1) eq '" << labels[k] << "' && strcol(2) eq '" << draw
         << "' ? $3 : 1/0):4 with linespoints lw 2 dt " << (draw[0] == 'i' ? 1 : 2) << " lc "
         << (k + 1) << " title '" << labels[k] << " (" << draw << ")', ";
    }
  }
  gp << "x < 0 ? 1 : 1/0 notitle\n";  // closes the list; plots nothing
  figures.draw(dir / "kernel_error.png", gp.str(), {(dir / "kernel_error.csv").string()});
}

}  // namespace

int main(int argc, char** argv) try {
  coulomb_examples::CommandLine cli(
      "feature_maps_demo",
      "Every coulomb random feature map against the kernel it estimates. For each map with a "
      "closed-form kernel (Rff, RffCosSin, FavorPlus, FavorHyperbolic, PorfRelu), draws random "
      "input pairs in d = 16, estimates the kernel with m = 16 to 4096 features (i.i.d. and "
      "orthogonal draws, several redraws each) and prints the root-mean-square error against the "
      "exact kernel; writes the table to DIR/kernel_error.csv and, with gnuplot, the figure "
      "DIR/kernel_error.png. Then shows the stabilizer on float inputs of norm 30 and the row sums "
      "of the softmax-feature maps.");
  std::filesystem::path out = "feature_maps_demo_out";
  std::uint64_t seed = 2026;
  cli.add_out(out);
  cli.add_seed(seed, "Seed of the inputs and draws of the RMSE table");
  std::string figures_mode = "auto";
  cli.add_figures(figures_mode);
  if (const auto status = cli.parse(argc, argv)) return *status;
  coulomb_examples::OutputPlan plan;
  plan.directory("--out", out);
  for (const char* name : {"kernel_error.csv", "kernel_error.gp", "kernel_error.png"})
    plan.output("--out", out / name);
  if (const auto status = cli.check_paths(plan)) return *status;
  coulomb_examples::Figures figures(figures_mode);

  coulomb::Rng rng(seed);
  const Index d = 16;

  std::cout << "coulomb " << coulomb::version_string()
            << " — random feature maps against their exact kernels\n"
            << "d = " << d << ", 256 random pairs per redraw; inputs of norm 1 (Gaussian: 2)\n\n";

  std::vector<Row> rows;
  sweep<coulomb::Rff<double>>("Rff", coulomb::RffOptions{.bandwidth = 1.5}, d, 2.0, rows, rng);
  sweep<coulomb::RffCosSin<double>>("RffCosSin", coulomb::RffOptions{.bandwidth = 1.5}, d, 2.0,
                                    rows, rng);
  sweep<coulomb::FavorPlus<double>>("FavorPlus", coulomb::FavorOptions{}, d, 1.0, rows, rng);
  sweep<coulomb::FavorHyperbolic<double>>("FavorHyperbolic", coulomb::FavorOptions{}, d, 1.0, rows,
                                          rng);
  sweep<coulomb::PorfRelu<double>>("PorfRelu", coulomb::PorfOptions{}, d, 1.0, rows, rng);

  std::cout << std::left << std::setw(17) << "map" << std::setw(16) << "draw" << std::right
            << std::setw(7) << "m" << std::setw(13) << "RMSE" << std::setw(13) << "mean |k|"
            << "\n";
  std::ostringstream csv;
  csv << "map,draw,m,rmse,mean_abs_kernel\n";
  for (const Row& r : rows) {
    std::cout << std::left << std::setw(17) << r.map << std::setw(16) << r.draw << std::right
              << std::setw(7) << r.m << std::setw(13) << std::setprecision(4) << std::scientific
              << r.rmse << std::setw(13) << std::defaultfloat << r.mean_abs_kernel << "\n";
    csv << r.map << "," << r.draw << "," << r.m << "," << std::setprecision(10) << r.rmse << ","
        << r.mean_abs_kernel << "\n";
  }
  coulomb_examples::write_output("--out", (out / "kernel_error.csv").string(), csv.str());
  std::cout << "\ntable: " << (out / "kernel_error.csv").string() << "\n";
  write_plot(figures, out, {"Rff", "RffCosSin", "FavorPlus", "FavorHyperbolic", "PorfRelu"});

  // The stabilizer: inputs of norm 30 in float, where exp(ωᵀx − ‖x‖²/2) underflows. Compare
  // the row-normalized features (what attention uses) with a double-precision reference.
  {
    coulomb::Rng r(7);
    coulomb::FavorPlus<double> reference(d, 256, r);
    coulomb::FavorPlus<float> fm(reference.omega().cast<float>());
    const Mat Xd = random_rows(64, d, 30.0, r);
    const coulomb::Matrix<float> X = Xd.cast<float>();
    const auto row_normalized = [](const Mat& phi) {
      Mat p = phi;
      for (Index i = 0; i < p.rows(); ++i) p.row(i) /= p.row(i).sum();
      return p;
    };
    const Mat truth = row_normalized(reference.map(Xd, coulomb::Stabilizer::per_row));
    const Mat raw = row_normalized(fm.map(X, coulomb::Stabilizer::none).cast<double>());
    const Mat stable = row_normalized(fm.map(X, coulomb::Stabilizer::per_row).cast<double>());
    std::cout << "\nFAVOR+ in float, 64 inputs of norm 30, row-normalized features against a "
                 "double reference:\n"
              << "  largest error without the stabilizer: " << (raw - truth).cwiseAbs().maxCoeff()
              << (raw.allFinite() ? "" : " (non-finite entries)") << "\n"
              << "  largest error with the per-row stabilizer: "
              << (stable - truth).cwiseAbs().maxCoeff() << "\n";
  }
  // softmax features: rows sum to one.
  {
    coulomb::Rng r(8);
    coulomb::SoftmaxFeatJoint<double> fm(d, 64, r);
    const Mat X = random_rows(3, d, 5.0, r);
    std::cout << "softmax([Ωx, −Ωx]) row sums: " << fm.map(X).rowwise().sum().transpose() << "\n";
  }
  return cli.finish(figures.failed() ? 1 : 0);
} catch (const std::exception& e) {
  std::cerr << "feature_maps_demo: " << e.what() << "\n";
  return 1;
}
