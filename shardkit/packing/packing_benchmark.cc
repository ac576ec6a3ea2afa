// Micro-benchmarks of the packing engine: whole-data packing of lognormal
// lengths (median 600 tokens, sigma 1, clamped to the capacity) and the
// streaming packer. The side-by-side comparison with peers is packing_peers.py.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "shardkit/packing/packing.h"
#include "shardkit/packing/packing_metadata.h"

namespace shardkit {
namespace {

const std::vector<Index>& Lognormal(Index n, Index capacity) {
  static std::vector<Index> cache;
  static Index cached_n = -1, cached_c = -1;
  if (n != cached_n || capacity != cached_c) {
    std::mt19937_64 rng(1);
    std::lognormal_distribution<double> d(std::log(600.0), 1.0);
    cache.resize(n);
    for (auto& l : cache) l = std::clamp<Index>(static_cast<Index>(d(rng)), 1, capacity);
    cached_n = n;
    cached_c = capacity;
  }
  return cache;
}

void BM_Pack(benchmark::State& state, PackAlgorithm algorithm) {
  const Index n = state.range(0), capacity = state.range(1);
  const auto& lengths = Lognormal(n, capacity);
  PackOptions o;
  o.capacity = capacity;
  o.algorithm = algorithm;
  double over = 0;
  for (auto _ : state) {
    Packing p = PackItems(lengths, o);
    over = static_cast<double>(p.num_packs()) / static_cast<double>(p.lower_bound) - 1;
    benchmark::DoNotOptimize(p.items.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["over_lower_bound_pct"] = 100 * over;
}
BENCHMARK_CAPTURE(BM_Pack, bfd, PackAlgorithm::kBestFitDecreasing)
    ->Args({10000000, 4096})
    ->Args({10000000, 8192})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Pack, ffd, PackAlgorithm::kFirstFitDecreasing)
    ->Args({10000000, 4096})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Pack, next_fit, PackAlgorithm::kNextFit)
    ->Args({10000000, 4096})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Pack, balanced, PackAlgorithm::kBalanced)
    ->Args({1000000, 4096})
    ->Unit(benchmark::kMillisecond);

// The loader's path: push one item at a time, pop packs as they close.
void BM_StreamingBfd(benchmark::State& state) {
  const Index n = 1000000, capacity = 4096;
  const auto& lengths = Lognormal(n, capacity);
  PackOptions o;
  o.capacity = capacity;
  o.buffer = state.range(0);
  for (auto _ : state) {
    StreamingPacker packer(o);
    Pack pack;
    for (Index i = 0; i < n; ++i) {
      packer.Push(i, lengths[i]);
      while (packer.Pop(&pack)) benchmark::DoNotOptimize(pack.pieces.data());
    }
    packer.Finish();
    while (packer.Pop(&pack)) benchmark::DoNotOptimize(pack.pieces.data());
    state.counters["efficiency_pct"] = 100 * packer.efficiency();
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_StreamingBfd)->Arg(256)->Arg(4096)->Unit(benchmark::kMillisecond);

// Collation of one [8, 4096] batch: metadata and tokens.
void BM_CollateBatch(benchmark::State& state) {
  std::vector<std::int32_t> tokens(1 << 20, 7);
  std::vector<Index> offsets;
  for (Index d = 0; d <= (1 << 20) / 512; ++d) offsets.push_back(d * 512);
  std::vector<PackItem> row;
  for (Index d = 0; d < 8; ++d) row.push_back({d, 500, 0, 0});
  CollateOptions o;
  o.seq_len = 4096;
  std::vector<std::int64_t> ids(8 * 4096), labels(8 * 4096), pos(8 * 4096);
  std::vector<std::int32_t> doc(8 * 4096);
  for (auto _ : state) {
    for (int r = 0; r < 8; ++r) {
      FillRowMetadata(row, o, {pos.data() + r * 4096, doc.data() + r * 4096, nullptr, nullptr});
      FillRowTokens(std::span<const PackItem>(row), tokens.data(), offsets.data(), o,
                    ids.data() + r * 4096, labels.data() + r * 4096);
    }
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * 8 * 4096 * 4);
}
BENCHMARK(BM_CollateBatch);

}  // namespace
}  // namespace shardkit
