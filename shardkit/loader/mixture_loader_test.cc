#include "shardkit/loader/mixture_loader.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/loader/loader.h"

namespace shardkit {
namespace {

// A source in memory whose tokens name their document: token k of document d
// of source s is s * 1e6 + d * 1000 + k, so a batch's tokens prove where they
// came from.
struct Source {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> offsets = {0};
  std::shared_ptr<const TokenSource> view;
};

Source MakeSource(std::mt19937_64& rng, Index s, Index docs, Index max_len) {
  Source src;
  for (Index d = 0; d < docs; ++d) {
    const Index len = 1 + static_cast<Index>(rng() % static_cast<std::uint64_t>(max_len));
    for (Index k = 0; k < len; ++k) {
      src.tokens.push_back(static_cast<std::int32_t>(s * 1000000 + d * 1000 + k));
    }
    src.offsets.push_back(static_cast<std::int64_t>(src.tokens.size()));
  }
  src.view = TokenSource::FromMemory(src.tokens.data(), TokenDType::kInt32,
                                     static_cast<Index>(src.tokens.size()), src.offsets.data(),
                                     static_cast<Index>(src.offsets.size()));
  return src;
}

struct Corpus {
  std::vector<Source> sources;
  std::vector<std::shared_ptr<const TokenSource>> views() const {
    std::vector<std::shared_ptr<const TokenSource>> out;
    for (const auto& s : sources) out.push_back(s.view);
    return out;
  }
};

Corpus MakeCorpus(std::mt19937_64& rng, const std::vector<Index>& docs, Index max_len) {
  Corpus c;
  for (std::size_t s = 0; s < docs.size(); ++s) {
    c.sources.push_back(MakeSource(rng, static_cast<Index>(s), docs[s], max_len));
  }
  return c;
}

// Every piece a loader delivers: (document, start, length), and the tokens
// of each piece checked against the sample the document stands for.
struct Delivered {
  std::map<Index, Index> tokens_of;  // view document -> tokens delivered
  Index batches = 0;
};

void Drain(TokenLoader& loader, const std::vector<Index>& sources, const std::vector<Index>& items,
           Delivered* out, Index max_batches = -1) {
  while (max_batches < 0 || out->batches < max_batches) {
    const auto b = loader.Next();
    if (b == nullptr) return;
    ++out->batches;
    Index t = 0;
    for (std::size_t k = 0; k < b->documents.size(); ++k) {
      const Index d = b->documents[k], start = b->starts[k], len = b->lengths[k];
      const Index row = b->rows[k];
      if (k == 0 || b->rows[k - 1] != row) t = 0;
      for (Index i = 0; i < len; ++i) {
        const std::int64_t want = sources[d] * 1000000 + items[d] * 1000 + start + i;
        ASSERT_EQ(b->input_ids[row * b->seq_len + t + i], want) << "document " << d;
      }
      t += len;
      out->tokens_of[d] += len;
    }
  }
}

TEST(MixtureLoaderTest, EveryRankDeliversTheWindowInMixtureOrderExactlyOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 8; ++trial) {
    const Corpus corpus = MakeCorpus(rng, {40, 300, 7}, 60);
    MixtureOptions mo;
    mo.seed = rng();
    mo.block = 64;
    mo.by = trial % 2 == 0 ? MixBy::kTokens : MixBy::kSamples;
    const Mixture mix = MixtureOfSources(corpus.views(), {2, 5, 1}, mo);
    const Index samples = 500;
    const std::uint64_t epoch = static_cast<std::uint64_t>(trial % 3);
    const MixtureWindow window = MixtureEpochWindow(mix, samples, epoch);
    ASSERT_EQ(window.first, static_cast<Index>(epoch) * samples);
    ASSERT_EQ(window.count, samples);
    const auto view = MixtureSource(corpus.views(), mix, window);
    std::vector<Index> sources(samples), items(samples);
    MixtureWindowSamples(mix, window, sources.data(), items.data());
    const bool equal = trial % 4 < 2;
    const Index world = 1 + trial % 4;
    Delivered all;
    std::vector<Index> batches;
    for (Index rank = 0; rank < world; ++rank) {
      LoaderOptions o;
      o.seq_len = 48;
      o.batch_size = 3;
      o.rank = rank;
      o.world_size = world;
      o.shuffle = false;  // the mixture is the order
      o.equal_steps = equal;
      o.num_threads = trial % 2;
      TokenLoader loader(view, o);
      Delivered mine;
      Drain(loader, sources, items, &mine);
      batches.push_back(mine.batches);
      for (const auto& [d, n] : mine.tokens_of) all.tokens_of[d] += n;
    }
    if (equal) {
      for (Index b : batches) ASSERT_EQ(b, batches[0]) << "equal steps";
    }
    // Every sample of the window is delivered whole, exactly once.
    ASSERT_EQ(static_cast<Index>(all.tokens_of.size()), samples);
    for (Index d = 0; d < samples; ++d) {
      ASSERT_EQ(all.tokens_of[d], corpus.sources[sources[d]].offsets[items[d] + 1] -
                                      corpus.sources[sources[d]].offsets[items[d]]);
    }
    // The per-source counts of every whole block of the window are the
    // mixture's; every source walks its items once per epoch of that source.
    std::vector<Index> counts(3);
    for (Index b = window.first / 64; (b + 1) * 64 <= window.first + samples; ++b) {
      if (b * 64 < window.first) continue;
      mix.BlockCounts(b, counts.data());
      for (Index s = 0; s < 3; ++s) {
        Index seen = 0;
        for (Index i = b * 64; i < (b + 1) * 64; ++i) seen += sources[i - window.first] == s;
        ASSERT_EQ(seen, counts[s]);
      }
    }
    const std::vector<Index> before = mix.Consumed(window.first);
    std::vector<Index> walked = before;
    for (Index d = 0; d < samples; ++d) {
      ASSERT_EQ(items[d], mix.SourceItem(sources[d], walked[sources[d]]++));
    }
  }
}

TEST(MixtureLoaderTest, ResumeEqualsUninterruptedAndAnotherMixturesStateIsRefused) {
  std::mt19937_64 rng(9);
  const Corpus corpus = MakeCorpus(rng, {30, 80}, 40);
  MixtureOptions mo;
  mo.seed = 3;
  const Mixture mix = MixtureOfSources(corpus.views(), {1, 1}, mo);
  const MixtureWindow window = MixtureEpochWindow(mix, 400, 1);
  const auto view = MixtureSource(corpus.views(), mix, window);
  std::vector<Index> sources(400), items(400);
  MixtureWindowSamples(mix, window, sources.data(), items.data());
  for (const bool equal : {true, false}) {
    LoaderOptions o;
    o.seq_len = 32;
    o.batch_size = 2;
    o.world_size = 2;
    o.rank = 1;
    o.shuffle = false;
    o.equal_steps = equal;
    TokenLoader whole(view, o);
    std::vector<std::vector<std::int64_t>> expected;
    while (auto b = whole.Next()) expected.push_back(b->input_ids);
    TokenLoader first(view, o);
    for (int i = 0; i < 5; ++i) ASSERT_NE(first.Next(), nullptr);
    const LoaderState state = first.State();
    TokenLoader rest(view, o, state);
    std::size_t k = 5;
    while (auto b = rest.Next()) {
      ASSERT_LT(k, expected.size());
      ASSERT_EQ(b->input_ids, expected[k++]);
    }
    ASSERT_EQ(k, expected.size());
    // The same corpus mixed with other weights (or another window) is
    // another data set: its loader refuses the state.
    MixtureOptions other = mo;
    other.seed = 4;
    const Mixture mix2 = MixtureOfSources(corpus.views(), {1, 1}, other);
    const auto view2 = MixtureSource(corpus.views(), mix2, window);
    EXPECT_THROW(TokenLoader(view2, o, state), std::invalid_argument);
    const auto view3 = MixtureSource(corpus.views(), mix, MixtureEpochWindow(mix, 400, 2));
    EXPECT_THROW(TokenLoader(view3, o, state), std::invalid_argument);
  }
}

TEST(MixtureLoaderTest, WindowsAndBadInput) {
  std::mt19937_64 rng(1);
  const Corpus corpus = MakeCorpus(rng, {5, 9}, 10);
  MixtureOptions mo;
  mo.repeat = {false, true};
  mo.block = 2;
  const Mixture bounded = MixtureOfSources(corpus.views(), {1, 1}, mo);
  ASSERT_TRUE(bounded.bounded());
  const MixtureWindow last = MixtureEpochWindow(bounded, 4, 100);
  EXPECT_EQ(last.first, bounded.size());
  EXPECT_EQ(last.count, 0);
  EXPECT_EQ(MixtureSource(corpus.views(), bounded, last)->num_documents(), 0);
  auto message = [](auto f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { (void)MixtureEpochWindow(bounded, 0, 0); }).rfind("samples:", 0), 0u);
  EXPECT_EQ(message([&] {
              (void)MixtureEpochWindow(bounded, Index{1} << 40, 1 << 30);
            }).rfind("epoch:", 0),
            0u);
  EXPECT_EQ(message([&] { (void)MixtureOfSources({}, {1}, {}); }).rfind("sources:", 0), 0u);
  EXPECT_EQ(message([&] {
              (void)MixtureSource({corpus.sources[0].view}, bounded, {0, 1});
            }).rfind("sources:", 0),
            0u);
  EXPECT_EQ(
      message([&] {
        (void)MixtureSource({corpus.sources[1].view, corpus.sources[0].view}, bounded, {0, 1});
      }).rfind("sources:", 0),
      0u);
  EXPECT_EQ(message([&] {
              (void)MixtureSource(corpus.views(), bounded, {0, bounded.size() + 1});
            }).rfind("window:", 0),
            0u);
  EXPECT_EQ(message([&] {
              (void)TokenSource::Gather(corpus.views(), {0, 14}, 1);
            }).rfind("documents: entry 1 is 14", 0),
            0u);
  EXPECT_EQ(message([&] { (void)TokenSource::Gather({}, {}, 1); }).rfind("sources:", 0), 0u);
  // A gathered view reads its sources' documents, repeats allowed.
  const auto g = TokenSource::Gather(corpus.views(), {6, 0, 6}, 1);
  EXPECT_EQ(g->num_documents(), 3);
  EXPECT_EQ(g->DocumentLength(0), corpus.sources[1].offsets[2] - corpus.sources[1].offsets[1]);
  std::vector<std::int32_t> out(static_cast<std::size_t>(g->DocumentLength(2)));
  g->Copy(2, 0, g->DocumentLength(2), out.data());
  EXPECT_EQ(out[0], 1000000 + 1000);
}

}  // namespace
}  // namespace shardkit
