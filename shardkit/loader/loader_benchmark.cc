// Packed [8, 4096] token batches from a memory-mapped .npy file, one core
// (num_threads = 0: read, pack and collate in the calling thread), against a
// plain memcpy of the same output bytes. CPU time is the per-core figure.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "shardkit/loader/loader.h"
#include "shardkit/loader/npy.h"

namespace shardkit {
namespace {

constexpr Index kSeqLen = 4096;
constexpr Index kBatch = 8;
// input_ids, labels, position_ids (int64) and document_ids (int32) per slot.
constexpr Index kBytesPerSlot = 8 + 8 + 8 + 4;

// 20M int32 tokens in lognormal documents (median ~400 tokens), written once.
std::shared_ptr<const TokenSource> Source() {
  static std::shared_ptr<const TokenSource> source = [] {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::temp_directory_path() / ("shardkit_loader_bench_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::mt19937_64 rng(0);
    std::lognormal_distribution<double> length(6.0, 1.2);
    std::vector<std::int64_t> offsets = {0};
    while (offsets.back() < 20'000'000) {
      offsets.push_back(offsets.back() + 1 + std::min<std::int64_t>(32767, length(rng)));
    }
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(offsets.back()));
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 50000);
    auto write = [](const fs::path& p, const char* descr, const void* data, Index count,
                    Index size) {
      std::ofstream out(p, std::ios::binary);
      out << NpyHeaderBytes(descr, count);
      out.write(static_cast<const char*>(data), count * size);
    };
    write(dir / "t.npy", "<i4", tokens.data(), static_cast<Index>(tokens.size()), 4);
    write(dir / "o.npy", "<i8", offsets.data(), static_cast<Index>(offsets.size()), 8);
    auto s = TokenSource::Open((dir / "t.npy").string(), (dir / "o.npy").string());
    fs::remove_all(dir);  // the mappings stay valid
    return s;
  }();
  return source;
}

// Loader options of [kBatch, kSeqLen] batches on `world_size` ranks (rank 0).
LoaderOptions BenchOptions(Index world_size = 1) {
  LoaderOptions o;
  o.equal_steps = false;  // per rank; the equal-steps runs turn it on
  o.seq_len = kSeqLen;
  o.batch_size = kBatch;
  o.world_size = world_size;
  return o;
}

// `documents` per iteration as a rate counter.
benchmark::Counter DocumentRate(const benchmark::State& state, Index documents) {
  return benchmark::Counter(
      static_cast<double>(documents) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_LoaderPackedBatches(benchmark::State& state) {
  auto source = Source();
  LoaderOptions o = BenchOptions();
  o.shuffle = state.range(0) != 0;
  o.num_threads = 0;
  auto loader = std::make_unique<TokenLoader>(source, o);
  Index tokens = 0, batches = 0;
  for (auto _ : state) {
    auto batch = loader->Next();
    if (!batch) {
      state.PauseTiming();
      loader = std::make_unique<TokenLoader>(source, o);
      state.ResumeTiming();
      batch = loader->Next();
    }
    tokens += batch->tokens;
    ++batches;
    benchmark::DoNotOptimize(batch->input_ids.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(batches * kBatch * kSeqLen * kBytesPerSlot);
}
BENCHMARK(BM_LoaderPackedBatches)->Arg(0)->Arg(1)->ArgName("shuffle");

// One rank's whole epoch (rank 0 of 8, [8, 4096] batches, shuffled), the
// loader built and drained per iteration: the equal-steps plan (every rank
// plans all 8 ranks' steps) against the per-rank plan (it packs its own
// eighth). threads = 0: everything in the calling thread, tokens per CPU
// second; threads > 0: background threads, tokens per wall second (real
// time; the process's CPU time is reported beside as cpu_tokens/s).
void BM_LoaderRankEpoch(benchmark::State& state) {
  auto source = Source();
  LoaderOptions o = BenchOptions(8);
  o.rank = 0;
  o.equal_steps = state.range(0) != 0;
  o.num_threads = state.range(1);
  Index tokens = 0;
  for (auto _ : state) {
    TokenLoader loader(source, o);
    while (auto batch = loader.Next()) {
      tokens += batch->tokens;
      benchmark::DoNotOptimize(batch->input_ids.data());
    }
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LoaderRankEpoch)
    ->ArgsProduct({{1, 0}, {0}})
    ->ArgNames({"equal_steps", "threads"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LoaderRankEpoch)
    ->ArgsProduct({{1, 0}, {1, 2}})
    ->ArgNames({"equal_steps", "threads"})
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The planning alone of BM_LoaderRankEpoch/equal_steps:1 (what the loader's
// planning thread does per epoch: rank 0's steps of the global plan, every
// rank's packs dealt), from the same offsets. With threads, a batch costs
// max(this, collation / threads) of wall time when cores allow.
void BM_LoaderRankPlanOnly(benchmark::State& state) {
  auto source = Source();
  LoaderOptions o = BenchOptions(8);
  const std::int64_t* offsets = source->ContiguousOffsets();
  const auto docs =
      TrainDocuments::FromOffsets({offsets, static_cast<std::size_t>(source->num_documents()) + 1});
  for (auto _ : state) {
    auto plan = TrainPlan::Deferred(docs, LoaderTrainOptions(o), std::nullopt);
    auto reader = plan->ReadOnce(0, 0);
    TrainStep step;
    Index n = 0;
    while (reader->Next(&step)) n += step.tokens;
    benchmark::DoNotOptimize(n);
  }
  state.counters["docs/s"] = DocumentRate(state, source->num_documents());
}
BENCHMARK(BM_LoaderRankPlanOnly)->Unit(benchmark::kMillisecond);

// The memory-bandwidth baselines beside the loader's bytes written (28 per
// slot): memcpy of one 256 MiB buffer into another (streaming: far larger
// than the caches), and of one batch's 917 KB into another buffer again and
// again (in cache, as the loader's pooled batch buffers are). The earlier
// baseline (917 KB pieces between 56 MiB buffers) measured 2.3-2.7x below
// numpy's copy of the same bytes and made the loader look faster than memcpy.
// Copies one buffer of `bytes` into another at every iteration.
void MemcpyLoop(benchmark::State& state, std::size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void BM_MemcpyStreaming(benchmark::State& state) { MemcpyLoop(state, std::size_t{256} << 20); }
BENCHMARK(BM_MemcpyStreaming)->Unit(benchmark::kMillisecond);

void BM_MemcpyBatchBytesInCache(benchmark::State& state) {
  MemcpyLoop(state, static_cast<std::size_t>(kBatch * kSeqLen * kBytesPerSlot));
}
BENCHMARK(BM_MemcpyBatchBytesInCache);

// The data fingerprint a loader computes once at construction (a hash of
// every document length): documents per second.
void BM_FingerprintData(benchmark::State& state) {
  auto source = Source();
  for (auto _ : state) benchmark::DoNotOptimize(FingerprintData(*source).hash);
  state.counters["documents/s"] = DocumentRate(state, source->num_documents());
}
BENCHMARK(BM_FingerprintData)->Unit(benchmark::kMillisecond);

// The same over 1e7 documents in memory (80 MB of offsets, far larger than
// the caches: what opening a large source costs): bytes of offsets per second.
void BM_FingerprintDataLarge(benchmark::State& state) {
  constexpr Index kDocuments = 10'000'000;
  static const auto data = [] {
    std::mt19937_64 rng(0);
    std::vector<std::int64_t> offsets = {0};
    offsets.reserve(kDocuments + 1);
    for (Index d = 0; d < kDocuments; ++d) offsets.push_back(offsets.back() + 1 + rng() % 3);
    return offsets;
  }();
  static const std::vector<std::int32_t> tokens(static_cast<std::size_t>(data.back()), 7);
  auto source = TokenSource::FromMemory(tokens.data(), TokenDType::kInt32, data.back(), data.data(),
                                        static_cast<Index>(data.size()));
  for (auto _ : state) benchmark::DoNotOptimize(FingerprintData(*source).hash);
  state.SetBytesProcessed(state.iterations() * kDocuments * 8);
}
BENCHMARK(BM_FingerprintDataLarge)->Unit(benchmark::kMillisecond);

// A checkpoint of a loader mid-epoch (default buffer 1024): State(), the JSON
// text, and reading it back with every check.
void BM_LoaderStateJsonRoundTrip(benchmark::State& state) {
  auto source = Source();
  LoaderOptions o = BenchOptions();
  o.num_threads = 0;
  TokenLoader loader(source, o);
  for (int i = 0; i < 10; ++i) (void)loader.Next();
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = LoaderStateToJson(loader.State());
    bytes = text.size();
    benchmark::DoNotOptimize(LoaderStateFromJson(text).read);
  }
  state.counters["json_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_LoaderStateJsonRoundTrip)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace shardkit
