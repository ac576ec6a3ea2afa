// Micro-benchmarks of the permutation and of one rank's shuffled epoch.
#include <benchmark/benchmark.h>

#include <vector>

#include "shardkit/sharding/permutation.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit {
namespace {

// One index at a time through Forward (cycle walking per call).
void BM_PermutationForward(benchmark::State& state) {
  Permutation perm(state.range(0), 1, 0);
  Index p = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(perm.Forward(p));
    if (++p == perm.size()) p = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PermutationForward)->Arg(100000000)->Arg(Index{1} << 40);

// Blocks of 64Ki positions through Fill.
void BM_PermutationFill(benchmark::State& state) {
  Permutation perm(state.range(0), 1, 0);
  std::vector<Index> out(1 << 16);
  Index first = 0;
  for (auto _ : state) {
    perm.Fill(first, 1, 1 << 16, out.data());
    benchmark::DoNotOptimize(out.data());
    first = (first + (1 << 16)) % (perm.size() - (1 << 16));
  }
  state.SetItemsProcessed(state.iterations() * (1 << 16));
}
BENCHMARK(BM_PermutationFill)->Arg(100000000)->Arg((Index{1} << 26) + 1)->Arg(Index{1} << 40);

// One rank's shuffled epoch, N = 1e8 over W = 8, in chunks of 64Ki.
void BM_ShuffledEpochOneRank(benchmark::State& state) {
  ShardOptions o;
  o.shuffle = true;
  o.remainder = Remainder::kPad;
  ShardPlan plan(100000000, 8, o);
  Shard shard = plan.GetShard(3);
  std::vector<Index> out(1 << 16);
  for (auto _ : state) {
    for (Index begin = 0; begin < shard.size(); begin += 1 << 16) {
      Index end = std::min<Index>(shard.size(), begin + (1 << 16));
      shard.Fill(begin, end, out.data());
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * shard.size());
}
BENCHMARK(BM_ShuffledEpochOneRank)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardkit
