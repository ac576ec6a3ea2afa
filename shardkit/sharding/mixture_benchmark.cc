// Micro-benchmarks of the mixture: construction (time to the first sample),
// a full pass through Fill, and single lookups through At.
#include <benchmark/benchmark.h>

#include <vector>

#include "shardkit/sharding/mixture.h"

namespace shardkit {
namespace {

// K sources of 1e6 items each, weights 1, 2, ..., K.
Mixture Make(Index k) {
  std::vector<Index> sizes(k, 1000000);
  std::vector<double> weights(k);
  for (Index i = 0; i < k; ++i) weights[i] = static_cast<double>(i + 1);
  return Mixture(sizes, weights);
}

// Construction plus the first sample: what a rank pays before step one.
void BM_MixtureFirstSample(benchmark::State& state) {
  for (auto _ : state) {
    const Mixture m = Make(state.range(0));
    benchmark::DoNotOptimize(m.At(0));
  }
}
BENCHMARK(BM_MixtureFirstSample)->Arg(10)->Arg(100)->Arg(1000);

// Consecutive samples through Fill in chunks of 64Ki.
void BM_MixtureFill(benchmark::State& state) {
  const Mixture m = Make(state.range(0));
  std::vector<Index> sources(1 << 16), items(1 << 16);
  Index first = 0;
  for (auto _ : state) {
    m.Fill(first, first + (1 << 16), sources.data(), items.data());
    benchmark::DoNotOptimize(items.data());
    first += 1 << 16;
    if (first > Index{1} << 40) first = 0;
  }
  state.SetItemsProcessed(state.iterations() * (1 << 16));
}
BENCHMARK(BM_MixtureFill)->Arg(10)->Arg(100)->Arg(1000);

// The full pass of bench/mixture_vs_megatron.py: weights 1..K normalised
// (shares rounded to 2^-40, so block counts vary from block to block),
// consecutive chunks of 1Mi samples into the same two buffers.
void BM_MixtureFillPass(benchmark::State& state) {
  const Index k = state.range(0);
  std::vector<double> weights(k);
  for (Index i = 0; i < k; ++i) weights[i] = static_cast<double>(i + 1) / (k * (k + 1) / 2.0);
  const Mixture m(std::vector<Index>(k, 1000000), weights);
  constexpr Index kChunk = Index{1} << 20;
  std::vector<Index> sources(kChunk), items(kChunk);
  Index first = 0;
  for (auto _ : state) {
    m.Fill(first, first + kChunk, sources.data(), items.data());
    benchmark::DoNotOptimize(items.data());
    first += kChunk;
    if (first > Index{1} << 40) first = 0;
  }
  state.SetItemsProcessed(state.iterations() * kChunk);
}
BENCHMARK(BM_MixtureFillPass)->Arg(2)->Arg(10)->Arg(100);

// One sample at a time at scattered positions (each computes its block).
void BM_MixtureAt(benchmark::State& state) {
  const Mixture m = Make(state.range(0));
  Index p = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.At(p));
    p = (p + 1000003) % (Index{1} << 40);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MixtureAt)->Arg(10)->Arg(100)->Arg(1000);

// 4096 positions at stride 7 per call through Take: a block's counts are
// computed once for the positions that fall in it.
void BM_MixtureTakeStrided(benchmark::State& state) {
  const Mixture m = Make(state.range(0));
  std::vector<Index> positions(4096), sources(4096), items(4096);
  Index first = 0;
  for (auto _ : state) {
    for (Index j = 0; j < 4096; ++j) positions[j] = first + 7 * j;
    m.Take(positions, sources.data(), items.data());
    benchmark::DoNotOptimize(items.data());
    first = (first + Index{1000003} * 4096) % (Index{1} << 40);
  }
  state.SetItemsProcessed(state.iterations() * 4096);
}
BENCHMARK(BM_MixtureTakeStrided)->Arg(10)->Arg(100)->Arg(1000);

}  // namespace
}  // namespace shardkit
