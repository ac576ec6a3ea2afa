// Layout arithmetic at pod scale: index maps, replica ids and per-process
// mappings for meshes of 8192 and 16384 devices (hosts of 4 devices).
#include <benchmark/benchmark.h>

#include <vector>

#include "shardkit/layout/loading_plan.h"
#include "shardkit/layout/mesh.h"
#include "shardkit/layout/named_sharding.h"

namespace shardkit {
namespace {

// The pod of state.range(0) devices on hosts of 4: a data x fsdp x model
// mesh, the batch sharding over it, and the global batch shape.
struct Pod {
  explicit Pod(const benchmark::State& state)
      : devices(state.range(0)), sharding(Sharding(devices)), shape({devices / 16 * 4, 16 * 64}) {}
  static NamedSharding Sharding(Index devices) {
    std::vector<Index> owners(devices);
    for (Index d = 0; d < devices; ++d) owners[d] = d / 4;
    Mesh mesh({{"data", devices / 256}, {"fsdp", 16}, {"model", 16}}, owners);
    return NamedSharding(mesh, ParsePartitionSpec("('data', 'fsdp'), 'model'"));
  }
  Index devices;
  NamedSharding sharding;
  std::vector<Index> shape;
};

// The pod sizes every benchmark here runs at.
void PodSizes(benchmark::internal::Benchmark* b) { b->Arg(8192)->Arg(16384); }

void BM_DevicesIndicesMap(benchmark::State& state) {
  const Pod pod(state);
  std::vector<Slice> out(pod.devices * 2);
  for (auto _ : state) {
    ArrayLayout layout = pod.sharding.Layout(pod.shape);
    layout.DevicesIndicesMap(out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * pod.devices);
}
BENCHMARK(BM_DevicesIndicesMap)->Apply(PodSizes);

void BM_ReplicaIds(benchmark::State& state) {
  const Pod pod(state);
  ArrayLayout layout = pod.sharding.Layout(pod.shape);
  std::vector<Index> out(pod.devices);
  for (auto _ : state) {
    layout.ReplicaIds(out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * pod.devices);
}
BENCHMARK(BM_ReplicaIds)->Apply(PodSizes);

// One process's view and local->global mapping, global shape given: O(its devices).
void BM_ProcessMapping(benchmark::State& state) {
  const Pod pod(state);
  const Index process = pod.devices / 4 / 3;
  for (auto _ : state) {
    ProcessLayout view = pod.sharding.Layout(pod.shape).Process(process);
    auto mapping = view.LocalToGlobal(view.local_shape());
    benchmark::DoNotOptimize(mapping.local.data());
  }
}
BENCHMARK(BM_ProcessMapping)->Apply(PodSizes);

// Global shape inference (O(mesh) per dimension: every process's tile sets).
void BM_InferGlobalShape(benchmark::State& state) {
  const Pod pod(state);
  const std::vector<Index> local = {16, 1024};
  for (auto _ : state) benchmark::DoNotOptimize(pod.sharding.InferGlobalShape(local));
}
BENCHMARK(BM_InferGlobalShape)->Apply(PodSizes);

void BM_LoadingPlanRows(benchmark::State& state) {
  const Pod pod(state);
  LoadingPlan plan(pod.sharding, pod.shape[0]);
  const Index process = pod.devices / 4 / 3;
  for (auto _ : state) benchmark::DoNotOptimize(plan.Rows(process));
}
BENCHMARK(BM_LoadingPlanRows)->Apply(PodSizes);

}  // namespace
}  // namespace shardkit
