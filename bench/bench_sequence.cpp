// SPDX-License-Identifier: MIT
// Benchmark (issue 22, items 5 and 6): the sequence model (nn/sequence_model.hpp) as
// examples/sequence_tasks builds it by default: float, d_model 64, 2 heads (d_head 32),
// 2 layers, d_ff 128, dropout 0.1, rotary positions, m = 64 FAVOR+ features per layer (one Ω
// per layer, frozen) or exact softmax attention; batch 32; AdamW (weight decay 0.01) with the
// global gradient norm clipped at 1.
//
//   Train/listops/{linear,softmax}/L  one training step of ListOps's model: forward with
//       dropout (classification head, mean pooling, 10 classes, the ListOps vocabulary),
//       cross-entropy, zero_grad, backward, clipping, AdamW step. Every one of the 32 sequences
//       has L tokens drawn uniformly from the ListOps vocabulary (the generator's trees cannot be
//       asked for one exact length; the cost depends only on B, L and the mask).
//   Train/mqar/{linear,softmax}/L     the same for MQAR's model: the causal language-model head
//       over the 8,192-word vocabulary at the query rows only, fused with its loss
//       (nn::sequence_loss_backward: the logits in cache-sized chunks), on a batch of
//       data::generate_mqar at length L with 64 key-value pairs (the largest count of Zoology's
//       grid), so 32 · 64 = 2,048 rows of 8,192 logits.
//   Inference/listops/{linear,softmax}/L  SequenceModel::infer (the evaluation forward's logits)
//                                         of ListOps's model, B = 32.
//   Head/mqar/{fused,unfused,eigen_gemm}  MQAR's head and loss alone (2,048 × 64 against the
//       8,192-word vocabulary, one thread): fused with the loss, unfused, and one product X W by
//       Eigen's GEMM as the reference of the same run (BM_Head).
// Counters: tokens_per_s (B·L per step or forward, as the PyTorch peer counts them) and loss.
// L ∈ {64, 128, 256, 512, 1024, 2000, 4096} for ListOps (softmax up to 2000: quadratic), 512
// and 2000 for MQAR; the arguments are L and threads (1 and 2: OpenMP and Eigen's threads, and
// SequenceModelConfig::num_threads, as bench_model sets them).
//
//   build/bench/bench_sequence --benchmark_format=json > sequence.json
//   build/bench/bench_sequence --parameters     (compare with torch_seq_peer.py --parameters)
//   build/bench/bench_sequence --peak-memory    (one training step per L, each in a fresh
//                                                process; VmHWM in MiB, one thread)
//   python3 bench/report_sequence.py sequence.json --torch torch_sequence.json
//       --memory memory.txt
//
// Every buffer is reused across iterations, and two untimed steps size and touch everything
// first. Freed memory is kept in the process (mallopt, as the tools do and as the PyTorch peer
// is run), so no step pays for page faults of the one before.
#include <benchmark/benchmark.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <coulomb/core/random.hpp>
#include <coulomb/data/listops.hpp>
#include <coulomb/data/mqar.hpp>
#include <coulomb/features/favor.hpp>
#include <coulomb/nn/loss.hpp>
#include <coulomb/nn/sequence_batch.hpp>
#include <coulomb/nn/sequence_loss.hpp>
#include <coulomb/nn/sequence_model.hpp>
#include <coulomb/train/adamw.hpp>
#include <coulomb/train/gradients.hpp>

#include "bench_common.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;  // the environment, passed on to the child processes

namespace {

using coulomb_bench::set_threads;
using coulomb_bench::status_kib;

namespace nn = coulomb::nn;
using coulomb::Index;
using Mat = coulomb::Matrix<float>;
using Model = nn::SequenceModel<coulomb::FavorPlus<float>>;

constexpr Index batch_size = 32;
constexpr Index mqar_pairs = 64;
constexpr Index mqar_vocabulary = 8192;
constexpr double learning_rate = 1e-3;

enum class Task { listops, mqar };

/// sequence_tasks' default model for a task at length L (rotary positions: the parameters do
/// not depend on L).
nn::SequenceModelConfig model_config(Task task, nn::AttentionKind attention, Index L, int threads) {
  nn::SequenceModelConfig c;
  c.vocab_size = task == Task::listops ? coulomb::data::ListOpsVocabulary::size : mqar_vocabulary;
  c.max_length = L;
  c.d_model = 64;
  c.num_heads = 2;
  c.d_ff = 128;
  c.num_layers = 2;
  c.head = task == Task::listops ? nn::SequenceHead::classification : nn::SequenceHead::causal_lm;
  c.num_outputs = task == Task::listops ? 10 : 0;  // 0: the vocabulary
  c.positions = nn::PositionKind::rotary;
  c.dropout = 0.1;
  c.attention = attention;
  c.num_features = 64;
  c.num_threads = threads;
  return c;
}

/// 32 sequences of length L: ListOps-vocabulary tokens and labels, or an MQAR split.
nn::SequenceBatch make_batch(Task task, Index L) {
  nn::SequenceBatch batch;
  if (task == Task::mqar) {
    coulomb::data::MqarOptions o = coulomb::data::MqarOptions::zoology(L, mqar_pairs);
    o.vocabulary_size = mqar_vocabulary;
    o.num_train = batch_size;
    o.num_dev = 0;
    o.num_test = 0;
    const auto splits = coulomb::data::generate_mqar(o, 5);
    std::vector<Index> idx(static_cast<std::size_t>(batch_size));
    std::iota(idx.begin(), idx.end(), Index{0});
    nn::make_sequence_batch(splits.train, idx, batch, L);
    return batch;
  }
  coulomb::Rng rng(7);
  const auto vocab = static_cast<std::uint64_t>(coulomb::data::ListOpsVocabulary::size);
  batch.ids.resize(L, batch_size);
  batch.mask.setConstant(L, batch_size, true);
  for (Index b = 0; b < batch_size; ++b)
    for (Index t = 0; t < L; ++t)
      batch.ids(t, b) = static_cast<coulomb::TokenId>(1 + coulomb::uniform_index(vocab - 1, rng));
  for (Index b = 0; b < batch_size; ++b)
    batch.labels.push_back(static_cast<int>(coulomb::uniform_index(10, rng)));
  return batch;
}

/// One training step as sequence_tasks runs it, with everything it reuses.
struct Trainer {
  Model model;
  nn::ParameterList<float> params;
  coulomb::train::AdamW<float> optimizer;
  nn::SequenceBatch batch;
  Mat logits, dlogits;
  coulomb::Rng dropout_rng{11};

  Trainer(Task task, nn::AttentionKind attention, Index L, int threads)
      : model(model_config(task, attention, L, threads), 1),
        params(model.parameters()),
        optimizer(adamw_options()),
        batch(make_batch(task, L)) {}

  static coulomb::train::AdamWOptions adamw_options() {
    coulomb::train::AdamWOptions o;
    o.weight_decay = 0.01;
    return o;
  }

  // The evaluation's inference (SequenceModel::infer), with the same logits as forward.
  void infer() {
    if (model.config().head == nn::SequenceHead::classification)
      model.infer(batch.ids, batch.mask, logits);
    else
      model.infer_rows(batch.ids, batch.mask, batch.rows, logits);
  }

  void forward(bool training) {
    if (model.config().head == nn::SequenceHead::classification)
      model.forward(batch.ids, batch.mask, logits, training, dropout_rng);
    else
      model.forward_rows(batch.ids, batch.mask, batch.rows, logits, training, dropout_rng);
  }

  double step() {
    model.zero_grad();
    const double loss =
        nn::sequence_loss_backward(model, batch, 1.0, true, dropout_rng, logits, dlogits);
    coulomb::train::clip_gradient_norm(params, 1.0);
    optimizer.step(params, learning_rate);
    return loss;
  }
};

// Arguments: L, threads.
template <Task T, nn::AttentionKind A>
void BM_Train(benchmark::State& state) {
  const Index L = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  set_threads(threads);
  auto trainer = std::make_unique<Trainer>(T, A, L, threads);
  double loss = trainer->step();  // size and touch every buffer, create AdamW's moments
  loss = trainer->step();
  for (auto _ : state) {
    loss = trainer->step();
    benchmark::DoNotOptimize(loss);
    benchmark::ClobberMemory();
  }
  state.counters["B"] = static_cast<double>(batch_size);
  // Rows of logits a step computes: one per sequence, or one per target.
  state.counters["rows"] =
      static_cast<double>(T == Task::listops ? trainer->batch.size() : trainer->batch.rows.size());
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(batch_size * L), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["loss"] = loss;
}

// Arguments: L, threads.
template <nn::AttentionKind A>
void BM_Inference(benchmark::State& state) {
  const Index L = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  set_threads(threads);
  auto trainer = std::make_unique<Trainer>(Task::listops, A, L, threads);
  trainer->infer();
  trainer->infer();
  for (auto _ : state) {
    trainer->infer();
    benchmark::DoNotOptimize(trainer->logits.data());
    benchmark::ClobberMemory();
  }
  state.counters["B"] = static_cast<double>(batch_size);
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(batch_size * L), benchmark::Counter::kIsIterationInvariantRate);
}

// ---- MQAR's head and loss alone ------------------------------------------------------------

enum class Head { fused, unfused, gemm };

/// The language-model head of Train/mqar with its loss: 2,048 rows (32 sequences × 64 queries)
/// of d_model 64 against the 8,192-word vocabulary, one thread. fused: Linear::
/// cross_entropy_backward (three products of X W's size); unfused: forward, softmax_cross_entropy
/// and backward on the whole 2,048 × 8,192 logits; gemm: one product X W by Eigen's GEMM, the
/// reference that the other two are compared with in the same run (GFLOP_per_s counts
/// 2·n·d·C per product: three for fused and unfused, one for gemm).
template <Head H>
void BM_Head(benchmark::State& state) {
  const Index n = batch_size * mqar_pairs, d = 64, C = mqar_vocabulary;
  set_threads(1);
  coulomb::Rng rng(13);
  nn::Linear<float> head(d, C);
  head.initialize(rng);
  head.set_num_threads(1);
  Mat X(n, d), logits(n, C), dlogits, dX;
  coulomb::fill_standard_normal(X, rng);
  std::vector<int> labels(static_cast<std::size_t>(n));
  for (auto& y : labels)
    y = static_cast<int>(coulomb::uniform_index(static_cast<std::uint64_t>(C), rng));
  auto run = [&] {
    if constexpr (H == Head::fused) {
      benchmark::DoNotOptimize(head.cross_entropy_backward(X, labels, dX));
    } else if constexpr (H == Head::unfused) {
      head.forward(X, logits);
      benchmark::DoNotOptimize(nn::softmax_cross_entropy(logits, labels, dlogits));
      head.backward(X, dlogits, dX);
    } else {
      logits.noalias() = X * head.weight();
    }
  };
  run();
  run();
  for (auto _ : state) {
    head.zero_grad();
    run();
    benchmark::DoNotOptimize(logits.data());
    benchmark::DoNotOptimize(dX.data());
    benchmark::ClobberMemory();
  }
  const double products = H == Head::gemm ? 1.0 : 3.0;
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(products * 2.0 * static_cast<double>(n * d * C) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

const std::vector<int> listops_lengths{64, 128, 256, 512, 1024, 2000, 4096};
const std::vector<int> mqar_lengths{512, 2000};
constexpr int softmax_longest = 2000;

/// Rows (L, threads) for the lengths up to `longest`, 1 and 2 threads.
void add_shapes(benchmark::internal::Benchmark* b, const std::vector<int>& lengths, int longest) {
  b->ArgNames({"L", "threads"});
  for (const int threads : {1, 2})
    for (const int L : lengths)
      if (L <= longest) b->Args({L, threads});
  b->Unit(benchmark::kMillisecond);
  b->UseRealTime();
}

void register_all() {
  using K = nn::AttentionKind;
  add_shapes(
      benchmark::RegisterBenchmark("Train/listops/linear", BM_Train<Task::listops, K::linear>),
      listops_lengths, INT_MAX);
  add_shapes(
      benchmark::RegisterBenchmark("Train/listops/softmax", BM_Train<Task::listops, K::softmax>),
      listops_lengths, softmax_longest);
  add_shapes(benchmark::RegisterBenchmark("Train/mqar/linear", BM_Train<Task::mqar, K::linear>),
             mqar_lengths, INT_MAX);
  add_shapes(benchmark::RegisterBenchmark("Train/mqar/softmax", BM_Train<Task::mqar, K::softmax>),
             mqar_lengths, softmax_longest);
  for (auto* b : {benchmark::RegisterBenchmark("Head/mqar/fused", BM_Head<Head::fused>),
                  benchmark::RegisterBenchmark("Head/mqar/unfused", BM_Head<Head::unfused>),
                  benchmark::RegisterBenchmark("Head/mqar/eigen_gemm", BM_Head<Head::gemm>)})
    b->Unit(benchmark::kMillisecond)->UseRealTime();
  add_shapes(benchmark::RegisterBenchmark("Inference/listops/linear", BM_Inference<K::linear>),
             listops_lengths, INT_MAX);
  add_shapes(benchmark::RegisterBenchmark("Inference/listops/softmax", BM_Inference<K::softmax>),
             listops_lengths, softmax_longest);
}

int print_parameters() {
  for (const Task task : {Task::listops, Task::mqar}) {
    for (const auto attention : {nn::AttentionKind::linear, nn::AttentionKind::softmax}) {
      Model model(model_config(task, attention, 512, 1), 1);
      Index trainable = 0, frozen = 0;
      for (const auto& p : model.parameters())
        (p.trainable ? trainable : frozen) += p.value->size();
      std::printf("%-7s %-7s: %ld parameters (%ld trainable, %ld frozen: Omega)\n",
                  task == Task::listops ? "listops" : "mqar", nn::to_string(attention),
                  static_cast<long>(trainable + frozen), static_cast<long>(trainable),
                  static_cast<long>(frozen));
    }
  }
  return 0;
}

/// The child of --peak-memory: one training step (the first, which also creates AdamW's
/// moments) of one model; prints "task attention L VmHWM_MiB before_MiB".
int peak_one(const std::string& spec) {
  char task[16] = {}, attention[16] = {};
  long L = 0;
  if (std::sscanf(spec.c_str(), "%15[a-z]/%15[a-z]/%ld", task, attention, &L) != 3) return 2;
  set_threads(1);
  const long before = status_kib("VmRSS");
  Trainer trainer(std::strcmp(task, "mqar") == 0 ? Task::mqar : Task::listops,
                  std::strcmp(attention, "softmax") == 0 ? nn::AttentionKind::softmax
                                                         : nn::AttentionKind::linear,
                  L, 1);
  const double loss = trainer.step();
  std::printf("%s %s %ld %.1f %.1f %.4f\n", task, attention, L, status_kib("VmHWM") / 1024.0,
              before / 1024.0, loss);
  return 0;
}

/// --peak-memory: each (attention, L) of ListOps's training step in a fresh process.
int peak_memory() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  std::printf("# task attention L VmHWM_MiB RSS_before_model_MiB loss (one step, one thread)\n");
  for (const char* attention : {"linear", "softmax"}) {
    for (const int L : listops_lengths) {
      if (std::strcmp(attention, "softmax") == 0 && L > softmax_longest) continue;
      // The child writes its line to the same standard output; an argument vector, no shell.
      std::string arg = std::string("--peak-one=listops/") + attention + "/" + std::to_string(L);
      char* args[] = {self, arg.data(), nullptr};
      std::fflush(stdout);
      pid_t pid = 0;
      if (posix_spawn(&pid, self, nullptr, nullptr, args, environ) != 0) return 1;
      int status = 0;
      if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);  // keep freed memory: as the tools (examples/common/memory.hpp)
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--parameters") == 0) return print_parameters();
    if (std::strcmp(argv[i], "--peak-memory") == 0) return peak_memory();
    if (std::strncmp(argv[i], "--peak-one=", 11) == 0) return peak_one(argv[i] + 11);
  }
  {
    Model model(model_config(Task::listops, nn::AttentionKind::linear, 512, 1), 1);
    benchmark::AddCustomContext("listops_parameters", std::to_string(model.num_parameters()));
  }
#ifdef _OPENMP
  benchmark::AddCustomContext("openmp", "yes");
#else
  benchmark::AddCustomContext("openmp", "no (one thread only)");
#endif
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
