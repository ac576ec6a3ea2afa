// The global equal-steps pack plan on one core: construction (the whole
// epoch through the packer and the deal, what every rank runs at the start of
// an epoch) in documents/s, a rank's steps streamed by a Reader, and the
// loader's single pass (a Deferred plan read once: plans, counts and reads
// one rank's steps together). Rates are per CPU second (one thread; the
// figures stay honest on a loaded machine). Lengths:
// lognormal (median ~400 tokens, sigma 1.2), seq_len 4096 and 8192, W = 8,
// batch 8, the default buffer (1024). The padding over the lower bound
// ceil(tokens / seq_len) is reported as a counter (rows dealt, filler
// included).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "shardkit/loader/train_plan.h"

namespace shardkit {
namespace {

// n lognormal lengths (made once per n; the first 4M are the same for every n).
const std::vector<Index>& Lengths(Index n = 4'000'000) {
  static std::map<Index, std::vector<Index>> made;
  std::vector<Index>& v = made[n];
  if (v.empty()) {
    std::mt19937_64 rng(0);
    std::lognormal_distribution<double> length(6.0, 1.2);
    v.resize(static_cast<std::size_t>(n));
    for (auto& l : v) l = 1 + static_cast<Index>(length(rng));
  }
  return v;
}

TrainOptions Options(Index seq_len, PackAlgorithm algorithm) {
  TrainOptions o;
  o.seq_len = seq_len;
  o.batch_size = 8;
  o.world_size = 8;
  o.algorithm = algorithm;
  return o;
}

void Report(benchmark::State& state, const TrainPlan& plan, Index docs) {
  const TrainSummary& s = plan.summary();
  const double rows = static_cast<double>(s.num_steps) * 64;
  state.counters["docs/s"] = benchmark::Counter(static_cast<double>(docs) * state.iterations(),
                                                benchmark::Counter::kIsRate);
  state.counters["pad_over_bound_%"] = 100.0 * (rows - s.lower_bound) / s.lower_bound;
  state.counters["stream_over_bound_%"] =
      100.0 * (static_cast<double>(s.packs) - s.lower_bound) / s.lower_bound;
  state.counters["max_full_step_imbalance"] = s.max_full_step_imbalance;
}

void BM_TrainPlanBuild(benchmark::State& state) {
  const auto& lengths = Lengths();
  const TrainOptions o = Options(state.range(0), static_cast<PackAlgorithm>(state.range(1)));
  std::unique_ptr<TrainPlan> plan;
  for (auto _ : state) {
    plan = std::make_unique<TrainPlan>(TrainDocuments::FromSpans(lengths), o);
    benchmark::DoNotOptimize(plan->num_steps());
  }
  Report(state, *plan, static_cast<Index>(lengths.size()));
}
BENCHMARK(BM_TrainPlanBuild)
    ->ArgsProduct({{4096, 8192},
                   {static_cast<int>(PackAlgorithm::kBestFitDecreasing),
                    static_cast<int>(PackAlgorithm::kNextFit)}})
    ->ArgNames({"seq_len", "algorithm"})
    ->Unit(benchmark::kMillisecond);

// The first n lengths as n + 1 offsets (made once per n).
const std::vector<std::int64_t>& Offsets(Index n) {
  static std::map<Index, std::vector<std::int64_t>> made;
  std::vector<std::int64_t>& v = made[n];
  if (v.empty()) {
    const auto& lengths = Lengths(n);
    v.reserve(lengths.size() + 1);
    v.push_back(0);
    for (Index l : lengths) v.push_back(v.back() + l);
  }
  return v;
}

void ReportNsPerDoc(benchmark::State& state, Index docs) {
  state.counters["ns/doc"] =
      benchmark::Counter(static_cast<double>(docs) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Construction cost per document against the number of documents (the goal:
// linear, ns/doc within 1.2x from 1e6 to 1e8). 1e8 documents (800 MB of
// lengths, ~10 s a plan) only with SHARDKIT_BENCH_LARGE=1, one iteration.
void BM_TrainPlanBuildN(benchmark::State& state) {
  const auto& lengths = Lengths(state.range(0));
  const TrainOptions o = Options(4096, PackAlgorithm::kBestFitDecreasing);
  std::unique_ptr<TrainPlan> plan;
  for (auto _ : state) {
    plan = std::make_unique<TrainPlan>(TrainDocuments::FromSpans(lengths), o);
    benchmark::DoNotOptimize(plan->num_steps());
  }
  ReportNsPerDoc(state, static_cast<Index>(lengths.size()));
}

// The same from document offsets, the form a loader's token source gives the
// plan (TrainDocumentsOf: an int64 .npy or in-memory offsets; a length is two
// offsets apart, clamped), with the loader's Deferred plan read once by one
// rank (an equal-steps TokenLoader's pass). 1e8: SHARDKIT_BENCH_LARGE=1
// (1.6 GB: the lengths and the offsets).
void BM_TrainPlanBuildNOffsetsReadOnce(benchmark::State& state) {
  const auto& offsets = Offsets(state.range(0));
  const TrainOptions o = Options(4096, PackAlgorithm::kBestFitDecreasing);
  for (auto _ : state) {
    auto plan = TrainPlan::Deferred(TrainDocuments::FromOffsets(offsets), o, std::nullopt);
    auto reader = plan->ReadOnce(3, 0);
    TrainStep step;
    Index n = 0;
    while (reader->Next(&step)) n += step.tokens;
    benchmark::DoNotOptimize(n);
  }
  ReportNsPerDoc(state, static_cast<Index>(offsets.size()) - 1);
}

BENCHMARK(BM_TrainPlanBuildN)
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->ArgName("documents")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TrainPlanBuildNOffsetsReadOnce)
    ->Arg(1'000'000)
    ->Arg(10'000'000)
    ->ArgName("documents")
    ->Unit(benchmark::kMillisecond);
const bool kLarge = [] {
  const char* large = std::getenv("SHARDKIT_BENCH_LARGE");
  if (large && std::string_view(large) == "1") {
    benchmark::RegisterBenchmark("BM_TrainPlanBuildN", BM_TrainPlanBuildN)
        ->Arg(100'000'000)
        ->ArgName("documents")
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_TrainPlanBuildNOffsetsReadOnce",
                                 BM_TrainPlanBuildNOffsetsReadOnce)
        ->Arg(100'000'000)
        ->ArgName("documents")
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

// One rank reading its steps of the whole epoch (it plans every rank's).
void BM_TrainPlanReadRank(benchmark::State& state) {
  const auto& lengths = Lengths();
  const TrainOptions o = Options(state.range(0), PackAlgorithm::kBestFitDecreasing);
  TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
  for (auto _ : state) {
    auto reader = plan.Read(3);
    TrainStep step;
    Index n = 0;
    while (reader->Next(&step)) n += step.tokens;
    benchmark::DoNotOptimize(n);
  }
  Report(state, plan, static_cast<Index>(lengths.size()));
}
BENCHMARK(BM_TrainPlanReadRank)->Arg(4096)->ArgName("seq_len")->Unit(benchmark::kMillisecond);

// What an equal-steps loader plans per epoch: one pass that deals every step,
// counts the plan's totals and hands out rank 3's rows (before: the
// construction pass, then a Reader over the same steps).
void BM_TrainPlanDeferredReadOnce(benchmark::State& state) {
  const auto& lengths = Lengths();
  const TrainOptions o = Options(state.range(0), PackAlgorithm::kBestFitDecreasing);
  std::unique_ptr<TrainPlan> plan;
  for (auto _ : state) {
    plan = TrainPlan::Deferred(TrainDocuments::FromSpans(lengths), o, std::nullopt);
    auto reader = plan->ReadOnce(3, 0);
    TrainStep step;
    Index n = 0;
    while (reader->Next(&step)) n += step.tokens;
    benchmark::DoNotOptimize(n);
  }
  Report(state, *plan, static_cast<Index>(lengths.size()));
}
BENCHMARK(BM_TrainPlanDeferredReadOnce)
    ->Arg(4096)
    ->ArgName("seq_len")
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardkit
