// The mixture loader's order stage: building epoch windows of a mixture of
// K in-memory sources (the gathered view: a Fill of the window plus the view's
// token total and identity), and packed batches over such a view against the
// same loader over one source. CPU time is the per-core figure.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "shardkit/loader/loader.h"
#include "shardkit/loader/mixture_loader.h"

namespace shardkit {
namespace {

struct Corpus {
  std::vector<std::vector<std::int32_t>> tokens;
  std::vector<std::vector<std::int64_t>> offsets;
  std::vector<std::shared_ptr<const TokenSource>> sources;
};

// K sources of `docs` documents each, lengths uniform in [64, 960].
const Corpus& MakeCorpus(Index k, Index docs) {
  static std::vector<std::unique_ptr<Corpus>> cache;
  for (const auto& c : cache) {
    if (static_cast<Index>(c->sources.size()) == k &&
        static_cast<Index>(c->offsets[0].size()) == docs + 1) {
      return *c;
    }
  }
  auto c = std::make_unique<Corpus>();
  std::mt19937_64 rng(1);
  for (Index s = 0; s < k; ++s) {
    std::vector<std::int64_t> off = {0};
    for (Index d = 0; d < docs; ++d) off.push_back(off.back() + 64 + rng() % 897);
    std::vector<std::int32_t> tok(static_cast<std::size_t>(off.back()), 7);
    c->tokens.push_back(std::move(tok));
    c->offsets.push_back(std::move(off));
    c->sources.push_back(TokenSource::FromMemory(
        c->tokens.back().data(), TokenDType::kInt32, static_cast<Index>(c->tokens.back().size()),
        c->offsets.back().data(), static_cast<Index>(c->offsets.back().size())));
  }
  cache.push_back(std::move(c));
  return *cache.back();
}

// One epoch window of 1M samples over K sources (by tokens, weights 1..K).
void BM_MixtureWindowSource(benchmark::State& state) {
  const Index k = state.range(0);
  const Corpus& c = MakeCorpus(k, 20000);
  std::vector<double> weights(k);
  for (Index i = 0; i < k; ++i) weights[i] = static_cast<double>(i + 1);
  MixtureOptions o;
  o.by = MixBy::kTokens;
  const Mixture mix = MixtureOfSources(c.sources, weights, o);
  const Index samples = 1000000;
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    auto view = MixtureSource(c.sources, mix, MixtureEpochWindow(mix, samples, epoch++));
    benchmark::DoNotOptimize(view->num_tokens());
  }
  state.SetItemsProcessed(state.iterations() * samples);
}
BENCHMARK(BM_MixtureWindowSource)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond);

// Packed [8, 2048] batches in the calling thread, per rank (equal_steps off):
// over a 3-source mixture's window (arg 1) or over one source (arg 0).
void BM_MixtureLoaderBatches(benchmark::State& state) {
  const Corpus& c = MakeCorpus(3, 20000);
  std::shared_ptr<const TokenSource> source = c.sources[0];
  if (state.range(0) == 1) {
    const Mixture mix = MixtureOfSources(c.sources, {5, 3, 2}, {});
    source = MixtureSource(c.sources, mix, MixtureEpochWindow(mix, 20000, 0));
  }
  LoaderOptions o;
  o.equal_steps = false;
  o.seq_len = 2048;
  o.batch_size = 8;
  o.shuffle = false;
  o.num_threads = 0;
  Index tokens = 0;
  auto loader = std::make_unique<TokenLoader>(source, o);
  for (auto _ : state) {
    auto batch = loader->Next();
    if (batch == nullptr) {
      loader = std::make_unique<TokenLoader>(source, o);
      batch = loader->Next();
    }
    tokens += batch->tokens;
  }
  state.SetItemsProcessed(tokens);
}
BENCHMARK(BM_MixtureLoaderBatches)->Arg(0)->Arg(1);

// Resuming an equal-steps mixture loader in the middle of a 200k-sample window
// of 3 sources (8 ranks x 8 rows of 2048 tokens) to its first batch: with the
// same weights (arg 0: the state as it is) or with new ones (arg 1: the read
// point replayed, both windows gathered, the state rebased). Both then replay
// the packer to the state's position, as every resume does.
void BM_MixtureLoaderResume(benchmark::State& state) {
  const Corpus& c = MakeCorpus(3, 20000);
  const Mixture mix = MixtureOfSources(c.sources, {5, 3, 2}, {});
  const Mixture changed = MixtureOfSources(c.sources, {1, 1, 8}, {});
  const Index samples = 200000;
  const MixtureOrder order(mix, samples);
  LoaderOptions o;
  o.seq_len = 2048;
  o.batch_size = 8;
  o.world_size = 8;
  o.shuffle = false;
  o.equal_steps = true;
  o.num_threads = 0;
  const auto view = MixtureSource(c.sources, order, order.Window(0));
  std::string text;
  {
    TokenLoader first(view, o);
    const Index half = first.train_plan()->num_steps() / 2;
    LoaderState at = first.State();
    at.train = first.train_plan()->StateAt(half);
    text = MixtureLoaderStateToJson(order, at);
  }
  const Mixture& use = state.range(0) == 1 ? changed : mix;
  for (auto _ : state) {
    const MixtureResume r = ResumeMixtureLoader(c.sources, use, samples, o, text);
    TokenLoader loader(MixtureSource(c.sources, r.order, r.order.Window(0)), o, r.loader);
    benchmark::DoNotOptimize(loader.Next());
  }
}
BENCHMARK(BM_MixtureLoaderResume)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardkit
