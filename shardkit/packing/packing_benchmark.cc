// Micro-benchmarks of the packing engine: whole-data packing of lognormal
// lengths (median 600 tokens, sigma 1, clamped to the capacity), the
// Wikipedia-512 histogram of Krell et al. (16.3M sequences) under sequence
// budgets, a multimodal mix under an image budget, and the streaming packer.
// The side-by-side comparison with peers is bench/packing_peers.py.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "shardkit/packing/internal/wikipedia512_histogram.h"
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
// Packs `lengths` (with `images`) under `o` once per iteration; reports the
// items per second and the packs over the lower bound. The last packing.
Packing PackEachIteration(benchmark::State& state, std::span<const Index> lengths,
                          const PackOptions& o, std::span<const Index> images = {}) {
  Packing p;
  for (auto _ : state) {
    p = PackItems(lengths, o, images);
    benchmark::DoNotOptimize(p.items.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<Index>(lengths.size()));
  state.counters["over_lower_bound_pct"] =
      100 * (static_cast<double>(p.num_packs()) / static_cast<double>(p.lower_bound) - 1);
  return p;
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

// A count budget far from the token bound: lognormal lengths (median 600),
// capacity 4096, at most 4 sequences per pack (the count sets the lower
// bound; balanced runs its LPT search).
void BM_CountBudget(benchmark::State& state, PackAlgorithm algorithm) {
  const Index n = state.range(0);
  const auto& lengths = Lognormal(n, 4096);
  PackOptions o;
  o.capacity = 4096;
  o.algorithm = algorithm;
  o.max_sequences = 4;
  const Packing p = PackEachIteration(state, lengths, o);
  state.counters["packs"] = static_cast<double>(p.num_packs());
}
BENCHMARK_CAPTURE(BM_CountBudget, bfd, PackAlgorithm::kBestFitDecreasing)
    ->Arg(3000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CountBudget, histogram, PackAlgorithm::kHistogram)
    ->Arg(3000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_CountBudget, balanced, PackAlgorithm::kBalanced)
    ->Arg(3000000)
    ->Unit(benchmark::kMillisecond);

// The Wikipedia-512 lengths, one item per sequence of the histogram, in a
// fixed shuffled order.
const std::vector<Index>& Wikipedia() {
  static const std::vector<Index> lengths = [] {
    std::vector<Index> out;
    for (Index l = 1; l <= 512; ++l) {
      out.insert(out.end(), static_cast<size_t>(internal::kWikipedia512Histogram[l - 1]), l);
    }
    std::shuffle(out.begin(), out.end(), std::mt19937_64(1));
    return out;
  }();
  return lengths;
}

double LoadVariation(const Packing& p) {
  double sum = 0, squares = 0;
  for (Index b = 0; b < p.num_packs(); ++b) {
    const double t = static_cast<double>(p.PackTokens(b));
    sum += t;
    squares += t * t;
  }
  const double n = static_cast<double>(std::max<Index>(1, p.num_packs()));
  const double mean = sum / n;
  return mean > 0 ? std::sqrt(std::max(0.0, squares / n - mean * mean)) / mean : 0;
}

// range(0): max sequences per pack (0: no count budget).
void BM_Wikipedia(benchmark::State& state, PackAlgorithm algorithm) {
  const auto& lengths = Wikipedia();
  PackOptions o;
  o.capacity = 512;
  o.algorithm = algorithm;
  if (state.range(0) > 0) o.max_sequences = state.range(0);
  const Packing p = PackEachIteration(state, lengths, o);
  state.counters["packs"] = static_cast<double>(p.num_packs());
  state.counters["load_cv"] = LoadVariation(p);
  state.counters["efficiency_pct"] = 100 * p.efficiency();
}
// The count budgets BM_Wikipedia runs at: 3 and 12 sequences per pack.
void SequenceBudgets(benchmark::internal::Benchmark* b) {
  b->Arg(3)->Arg(12)->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_Wikipedia, next_fit, PackAlgorithm::kNextFit)->Apply(SequenceBudgets);
BENCHMARK_CAPTURE(BM_Wikipedia, ffd, PackAlgorithm::kFirstFitDecreasing)->Apply(SequenceBudgets);
BENCHMARK_CAPTURE(BM_Wikipedia, bfd, PackAlgorithm::kBestFitDecreasing)->Apply(SequenceBudgets);
BENCHMARK_CAPTURE(BM_Wikipedia, histogram, PackAlgorithm::kHistogram)->Apply(SequenceBudgets);
BENCHMARK_CAPTURE(BM_Wikipedia, balanced, PackAlgorithm::kBalanced)->Apply(SequenceBudgets)->Arg(0);

// Multimodal mix: gamma(2, 300) + 16 token lengths, 0-4 images per sample,
// capacity 4096, at most 18 images per pack.
void BM_Multimodal(benchmark::State& state, PackAlgorithm algorithm) {
  const Index n = state.range(0);
  std::mt19937_64 rng(2);
  std::gamma_distribution<double> gamma(2.0, 300.0);
  std::vector<Index> lengths(n), images(n);
  for (Index i = 0; i < n; ++i) {
    lengths[i] = std::min<Index>(4096, 16 + static_cast<Index>(gamma(rng)));
    images[i] = static_cast<Index>(rng() % 5);
  }
  PackOptions o;
  o.capacity = 4096;
  o.algorithm = algorithm;
  o.max_images = 18;
  const Packing p = PackEachIteration(state, lengths, o, images);
  state.counters["efficiency_pct"] = 100 * p.efficiency();
  state.counters["load_cv"] = LoadVariation(p);
}
BENCHMARK_CAPTURE(BM_Multimodal, balanced, PackAlgorithm::kBalanced)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Multimodal, bfd, PackAlgorithm::kBestFitDecreasing)
    ->Arg(100000)
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
  std::vector<Piece> row;
  for (Index d = 0; d < 8; ++d) row.push_back({d, 500, 0, 0});
  CollateOptions o;
  o.seq_len = 4096;
  std::vector<std::int64_t> ids(8 * 4096), labels(8 * 4096), pos(8 * 4096);
  std::vector<std::int32_t> doc(8 * 4096);
  for (auto _ : state) {
    for (int r = 0; r < 8; ++r) {
      FillRowMetadata(row, o, {pos.data() + r * 4096, doc.data() + r * 4096, nullptr, nullptr});
      FillRowTokens(std::span<const Piece>(row), tokens.data(), offsets.data(), o,
                    ids.data() + r * 4096, labels.data() + r * 4096);
    }
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * 8 * 4096 * 4);
}
BENCHMARK(BM_CollateBatch);

}  // namespace
}  // namespace shardkit
