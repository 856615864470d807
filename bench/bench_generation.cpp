// SPDX-License-Identifier: MIT
// Benchmark (issue 22): recurrent generation with the sequence model (nn/sequence_model.hpp,
// causal_lm head), float, one thread, one sequence: the time of one step (one new token through
// embeddings, rotary positions, 2 layers and the token head) after a context of c tokens,
// c ∈ {256, 1024, 4096}, for
//   Step/linear   causal linear attention with FAVOR+ (m = 64): a state of O(m·d_head) per
//                 head and layer, so the time per token should not depend on c;
//   Step/softmax  causal softmax attention from a cache of c keys and values (the reference):
//                 the time per token grows with c.
// Model: d_model 64, 4 heads, 2 layers, d_ff 256, vocabulary 1,024, rotary positions,
// max_length 8192. The state after the first c − 1 tokens is built once, outside the timing
// loop; each iteration copies it (timing paused) and takes the step of token c, which attends to
// c tokens. (The softmax cache doubles its capacity when full, at powers of two: the measured step
// never reallocates, as all but a logarithmic number of steps of a real generation.) Counters:
// tokens_per_s (steps per second) and state_scalars (the attention states' size,
// SequenceDecodingState::num_scalars).
//
//   build/bench/bench_generation --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include <coulomb/features/favor.hpp>
#include <coulomb/nn/sequence_model.hpp>

namespace {

using Model = coulomb::nn::SequenceModel<coulomb::FavorPlus<float>>;

Model make_model(coulomb::nn::AttentionKind kind) {
  coulomb::nn::SequenceModelConfig c;
  c.vocab_size = 1024;
  c.max_length = 8192;
  c.d_model = 64;
  c.num_heads = 4;
  c.d_ff = 256;
  c.num_layers = 2;
  c.head = coulomb::nn::SequenceHead::causal_lm;
  c.num_outputs = 0;
  c.positions = coulomb::nn::PositionKind::rotary;
  c.attention = kind;
  c.num_features = 64;
  c.num_threads = 1;
  return Model(c, 1);
}

void step_after_context(benchmark::State& st, coulomb::nn::AttentionKind kind) {
  const auto context = static_cast<coulomb::Index>(st.range(0));
  Model model = make_model(kind);
  Model::DecodingState prefilled;
  model.reset(prefilled, 1);
  coulomb::Matrix<float> logits;
  std::vector<coulomb::TokenId> token{1};
  for (coulomb::Index t = 0; t + 1 < context; ++t) {
    token[0] = static_cast<coulomb::TokenId>(1 + (t * 37) % 1000);
    model.step(token, logits, prefilled);
  }
  token[0] = 2;
  Model::DecodingState state = prefilled;
  model.step(token, logits, state);  // untimed: sizes the step's buffers
  for (auto _ : st) {
    st.PauseTiming();
    state = prefilled;
    st.ResumeTiming();
    model.step(token, logits, state);
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
  }
  st.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["state_scalars"] = static_cast<double>(prefilled.num_scalars());
}

void linear_step(benchmark::State& st) {
  step_after_context(st, coulomb::nn::AttentionKind::linear);
}
void softmax_step(benchmark::State& st) {
  step_after_context(st, coulomb::nn::AttentionKind::softmax);
}

BENCHMARK(linear_step)
    ->Name("Step/linear")
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(softmax_step)
    ->Name("Step/softmax")
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  Eigen::setNbThreads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
