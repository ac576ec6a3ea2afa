// Layout arithmetic at pod scale: index maps, replica ids and per-process
// mappings for meshes of 8192 and 16384 devices (hosts of 4 devices).
#include <benchmark/benchmark.h>

#include <vector>

#include "shardkit/layout/loading_plan.h"
#include "shardkit/layout/mesh.h"
#include "shardkit/layout/named_sharding.h"

namespace shardkit {
namespace {

NamedSharding PodSharding(Index devices) {
  std::vector<Index> owners(devices);
  for (Index d = 0; d < devices; ++d) owners[d] = d / 4;
  Mesh mesh({{"data", devices / 256}, {"fsdp", 16}, {"model", 16}}, owners);
  return NamedSharding(mesh, ParsePartitionSpec("('data', 'fsdp'), 'model'"));
}

std::vector<Index> PodShape(Index devices) { return {devices / 16 * 4, 16 * 64}; }

void BM_DevicesIndicesMap(benchmark::State& state) {
  const Index devices = state.range(0);
  NamedSharding sharding = PodSharding(devices);
  const std::vector<Index> shape = PodShape(devices);
  std::vector<Slice> out(devices * 2);
  for (auto _ : state) {
    ArrayLayout layout = sharding.Layout(shape);
    layout.DevicesIndicesMap(out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * devices);
}
BENCHMARK(BM_DevicesIndicesMap)->Arg(8192)->Arg(16384);

void BM_ReplicaIds(benchmark::State& state) {
  const Index devices = state.range(0);
  NamedSharding sharding = PodSharding(devices);
  ArrayLayout layout = sharding.Layout(PodShape(devices));
  std::vector<Index> out(devices);
  for (auto _ : state) {
    layout.ReplicaIds(out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * devices);
}
BENCHMARK(BM_ReplicaIds)->Arg(8192)->Arg(16384);

// One process's view and local->global mapping, global shape given: O(its devices).
void BM_ProcessMapping(benchmark::State& state) {
  const Index devices = state.range(0);
  NamedSharding sharding = PodSharding(devices);
  const std::vector<Index> shape = PodShape(devices);
  const Index process = devices / 4 / 3;
  for (auto _ : state) {
    ProcessLayout view = sharding.Layout(shape).Process(process);
    auto mapping = view.LocalToGlobal(view.local_shape());
    benchmark::DoNotOptimize(mapping.local.data());
  }
}
BENCHMARK(BM_ProcessMapping)->Arg(8192)->Arg(16384);

// Global shape inference (O(mesh) per dimension: every process's tile sets).
void BM_InferGlobalShape(benchmark::State& state) {
  const Index devices = state.range(0);
  NamedSharding sharding = PodSharding(devices);
  const std::vector<Index> local = {16, 1024};
  for (auto _ : state) benchmark::DoNotOptimize(sharding.InferGlobalShape(local));
}
BENCHMARK(BM_InferGlobalShape)->Arg(8192)->Arg(16384);

void BM_LoadingPlanRows(benchmark::State& state) {
  const Index devices = state.range(0);
  LoadingPlan plan(PodSharding(devices), devices / 16 * 4);
  const Index process = devices / 4 / 3;
  for (auto _ : state) benchmark::DoNotOptimize(plan.Rows(process));
}
BENCHMARK(BM_LoadingPlanRows)->Arg(8192)->Arg(16384);

}  // namespace
}  // namespace shardkit
