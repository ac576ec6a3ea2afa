#include "shardkit/loader/mixture_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shardkit/base/testing.h"
#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/loader.h"

namespace shardkit {
namespace {

// A source in memory whose tokens name their document: token k of document d
// of source s is s * 1e6 + d * 1000 + k, so a batch's tokens prove where they
// came from.
using Source = loader_testing::TestCorpus;
using loader_testing::RowOptions;

Source MakeSource(std::mt19937_64& rng, Index s, Index docs, Index max_len) {
  return loader_testing::RandomCorpus(rng, docs, 1, max_len, [s](Index d, Index k) {
    return static_cast<std::int32_t>(s * 1000000 + d * 1000 + k);
  });
}

struct Corpus {
  std::vector<Source> sources;
  std::vector<std::shared_ptr<const TokenSource>> views() const {
    std::vector<std::shared_ptr<const TokenSource>> out;
    for (const auto& s : sources) out.push_back(s.source);
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

// `o` with shuffle off: the loader reads a mixture's window in its order.
LoaderOptions InOrder(LoaderOptions o) {
  o.shuffle = false;
  return o;
}

// Two sources, of 30 and 80 documents of up to 40 tokens, drawn from `seed`.
Corpus TwoSources(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  return MakeCorpus(rng, {30, 80}, 40);
}

// The mixture of the corpus's sources with `weights` and seed `seed` (and
// `block` samples a block, when given).
Mixture SeededMixture(const Corpus& corpus, const std::vector<double>& weights, std::uint64_t seed,
                      std::optional<Index> block = std::nullopt) {
  MixtureOptions mo;
  mo.seed = seed;
  mo.block = block;
  return MixtureOfSources(corpus.views(), weights, mo);
}

// Every piece a loader delivers: (document, start, length), and the tokens
// of each piece checked against the sample the document stands for.
struct Delivered {
  std::map<Index, Index> tokens_of;  // view document -> tokens delivered
  Index batches = 0;
};

// Every batch of `loader` (at most max_batches when >= 0), each piece's
// tokens checked against the sample its document stands for (the window's
// `sources` and `items`), then given to on_piece(document, start, length).
// Returns the batches.
Index ForEachPiece(TokenLoader& loader, const std::vector<Index>& sources,
                   const std::vector<Index>& items, Index max_batches,
                   const std::function<void(Index, Index, Index)>& on_piece) {
  Index n = 0;
  while (max_batches < 0 || n < max_batches) {
    const auto b = loader.Next();
    if (b == nullptr) break;
    ++n;
    Index t = 0;
    for (std::size_t k = 0; k < b->documents.size(); ++k) {
      const Index d = b->documents[k], start = b->starts[k], len = b->lengths[k];
      const Index row = b->rows[k];
      if (k == 0 || b->rows[k - 1] != row) t = 0;
      for (Index i = 0; i < len; ++i) {
        const std::int64_t want = sources[d] * 1000000 + items[d] * 1000 + start + i;
        EXPECT_EQ(b->input_ids[row * b->seq_len + t + i], want) << "document " << d;
      }
      t += len;
      on_piece(d, start, len);
    }
  }
  return n;
}

void Drain(TokenLoader& loader, const std::vector<Index>& sources, const std::vector<Index>& items,
           Delivered* out) {
  out->batches += ForEachPiece(loader, sources, items, -1,
                               [out](Index d, Index, Index len) { out->tokens_of[d] += len; });
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
      LoaderOptions o = RowOptions(48, 3);
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
  const Corpus corpus = TwoSources(9);
  MixtureOptions mo;
  mo.seed = 3;
  const Mixture mix = MixtureOfSources(corpus.views(), {1, 1}, mo);
  const MixtureWindow window = MixtureEpochWindow(mix, 400, 1);
  const auto view = MixtureSource(corpus.views(), mix, window);
  std::vector<Index> sources(400), items(400);
  MixtureWindowSamples(mix, window, sources.data(), items.data());
  for (const bool equal : {true, false}) {
    LoaderOptions o = InOrder(RowOptions(32, 2, 2, 1));
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

// The pieces of window documents delivered: document -> (start, length).
using Pieces = std::map<Index, std::vector<std::pair<Index, Index>>>;

// Every batch of `loader` (at most max_batches), its tokens checked against
// the window's (sources, items), into *pieces. Returns the batches.
Index Collect(TokenLoader& loader, const std::vector<Index>& sources,
              const std::vector<Index>& items, Pieces* pieces, Index max_batches = -1) {
  return ForEachPiece(loader, sources, items, max_batches,
                      [pieces](Index d, Index start, Index len) {
                        (*pieces)[d].push_back({start, len});
                      });
}

std::vector<double> RandomWeights(std::mt19937_64& rng, Index k) {
  std::vector<double> w(static_cast<std::size_t>(k));
  bool any = false;
  for (auto& x : w) {
    x = static_cast<double>(rng() % 4 == 0 ? 0 : 1 + rng() % 9);
    any = any || x > 0;
  }
  if (!any) w[rng() % w.size()] = 1;
  return w;
}

// Resume with changed weights, over random corpora, weights, windows, loader
// shapes and resume points: what was read stays, every source continues its
// walk (nothing repeated or skipped), the rest of the window follows the new
// weights, every piece is delivered exactly once across the change (also on
// another world size), and unchanged weights give the uninterrupted run.
TEST(MixtureLoaderTest, ResumeWithChangedWeightsKeepsWhatWasReadAndContinuesEverySource) {
  std::mt19937_64 rng(2026);
  int changed_runs = 0, ended_runs = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const Index k = 1 + static_cast<Index>(rng() % 4);
    std::vector<Index> docs;
    for (Index s = 0; s < k; ++s) docs.push_back(3 + static_cast<Index>(rng() % 120));
    const Corpus corpus = MakeCorpus(rng, docs, 1 + static_cast<Index>(rng() % 90));
    MixtureOptions mo;
    mo.seed = rng();
    mo.by = trial % 3 == 0 ? MixBy::kTokens : MixBy::kSamples;
    if (rng() % 2) mo.block = 64 + static_cast<Index>(rng() % 3) * 32;
    if (trial % 4 == 1) {
      mo.repeat.assign(static_cast<std::size_t>(k), true);
      mo.repeat[rng() % mo.repeat.size()] = false;
    }
    std::vector<double> w0 = RandomWeights(rng, k);
    // A non-repeating source with weight 0 would never end the run; keep it simple.
    for (Index s = 0; s < k; ++s) {
      if (!mo.repeat.empty() && !mo.repeat[s] && w0[s] == 0) w0[s] = 1;
    }
    Mixture mix0 = MixtureOfSources(corpus.views(), w0, mo);
    const Index samples =
        mix0.bounded() && rng() % 2 ? mix0.size() : 40 + static_cast<Index>(rng() % 300);
    SCOPED_TRACE("trial " + std::to_string(trial) + " samples " + std::to_string(samples));
    const MixtureOrder order0(mix0, samples);
    std::uint64_t epoch = mix0.bounded() ? 0 : rng() % 3;
    MixtureWindow w_old = order0.Window(epoch);
    std::vector<Index> src_old(w_old.count), itm_old(w_old.count);
    order0.Fill(w_old.first, w_old.first + w_old.count, src_old.data(), itm_old.data());
    const auto view_old = MixtureSource(corpus.views(), order0, w_old);

    const bool equal = trial % 2 == 0;
    LoaderOptions o;
    o.seq_len = 16 + static_cast<Index>(rng() % 64);
    o.batch_size = 1 + static_cast<Index>(rng() % 3);
    o.world_size = 1 + static_cast<Index>(rng() % 3);
    o.shuffle = false;
    o.seed = mo.seed;
    o.equal_steps = equal;
    o.num_threads = trial % 3 == 2 ? 1 : 0;
    o.buffer = 1 + static_cast<Index>(rng() % 16);
    o.epoch = epoch;
    // Phase 1: every rank reads some batches.
    Pieces pieces;
    std::vector<LoaderState> states;
    const Index steps = static_cast<Index>(rng() % 6);
    for (Index r = 0; r < o.world_size; ++r) {
      LoaderOptions ro = o;
      ro.rank = r;
      TokenLoader loader(view_old, ro);
      const Index n = equal ? steps : static_cast<Index>(rng() % 6);
      (void)Collect(loader, src_old, itm_old, &pieces, n);
      states.push_back(loader.State());
    }
    const LoaderState state = equal ? states[0] : MergeLoaderStates(states);
    const std::string text = MixtureLoaderStateToJson(order0, state);
    if (equal && state.train->epoch != epoch) {
      // The epoch ran out: the state is the next epoch's start.
      ASSERT_EQ(state.train->position, 0);
      epoch = state.train->epoch;
      w_old = order0.Window(epoch);
      src_old.assign(w_old.count, 0);
      itm_old.assign(w_old.count, 0);
      order0.Fill(w_old.first, w_old.first + w_old.count, src_old.data(), itm_old.data());
      pieces.clear();
    }

    // Phase 2: new weights (sometimes the same) and another loader shape.
    const bool same = trial % 5 == 4;
    std::vector<double> w1 = same ? w0 : RandomWeights(rng, k);
    for (Index s = 0; s < k; ++s) {
      if (!mo.repeat.empty() && !mo.repeat[s] && w1[s] == 0) w1[s] = 1;
    }
    MixtureOptions mo1 = mo;
    if (!same && rng() % 3 == 0) mo1.block.reset();
    const Mixture mix1 = MixtureOfSources(corpus.views(), w1, mo1);
    LoaderOptions o1 = o;
    o1.world_size = 1 + static_cast<Index>(rng() % 4);
    o1.batch_size = 1 + static_cast<Index>(rng() % 3);
    SCOPED_TRACE("trial " + std::to_string(trial));
    const MixtureResume resume = ResumeMixtureLoader(corpus.views(), mix1, samples, o1, text);
    const bool changed = w1 != w0 || mo1.block != mo.block;
    ASSERT_EQ(resume.changed, changed) << trial;
    changed_runs += changed;
    const MixtureWindow w_new = resume.order.Window(epoch);
    ASSERT_EQ(w_new.first, w_old.first);
    std::vector<Index> src(w_new.count), itm(w_new.count);
    resume.order.Fill(w_new.first, w_new.first + w_new.count, src.data(), itm.data());
    const Index read = changed ? resume.read : w_old.count;
    ASSERT_LE(read, std::min(w_old.count, w_new.count));
    // What was read is kept: the old window's documents before the read point.
    for (Index d = 0; d < read; ++d) {
      ASSERT_EQ(src[d], src_old[d]);
      ASSERT_EQ(itm[d], itm_old[d]);
    }
    for (const auto& [d, list] : pieces) ASSERT_LT(d, read) << "delivered past the read point";
    const auto view_new = MixtureSource(corpus.views(), resume.order, w_new);
    std::vector<Index> batches;
    for (Index r = 0; r < o1.world_size; ++r) {
      LoaderOptions ro = o1;
      ro.rank = r;
      TokenLoader loader(view_new, ro, resume.loader);
      batches.push_back(Collect(loader, src, itm, &pieces));
    }
    if (equal) {
      for (Index b : batches) ASSERT_EQ(b, batches[0]) << "equal steps after the change";
    }
    // Every document of the new window tiled exactly once, across the change.
    ASSERT_EQ(static_cast<Index>(pieces.size()), w_new.count);
    for (auto& [d, list] : pieces) {
      std::sort(list.begin(), list.end());
      Index at = 0;
      for (const auto& [start, len] : list) {
        ASSERT_EQ(start, at) << "document " << d << ": a gap or a piece twice";
        at += len;
      }
      const auto& off = corpus.sources[src[d]].offsets;
      ASSERT_EQ(at, off[itm[d] + 1] - off[itm[d]]);
    }
    // Every source continues its walk: the c-th item taken from source s is
    // its walk's c-th (a keyed permutation per epoch of the source), from
    // its count before the window, across the change.
    std::vector<Index> walked = mix0.Consumed(w_old.first);
    for (Index d = 0; d < w_new.count; ++d) {
      ASSERT_EQ(itm[d], mix0.SourceItem(src[d], walked[src[d]]++)) << "trial " << trial;
    }
    for (Index s = 0; s < k; ++s) {
      if (!mo.repeat.empty() && !mo.repeat[s]) {
        ASSERT_LE(walked[s], docs[s]) << "no repeat";
      }
    }
    // A bounded run read to its end: a non-repeating source ran out, every
    // one of its documents delivered exactly once.
    if (w_new.first + w_new.count == resume.order.size() && resume.order.size() < Index{1} << 62 &&
        w_new.first == 0) {
      bool out = false;
      for (Index s = 0; s < k; ++s) out = out || (!mo.repeat[s] && walked[s] == docs[s]);
      ASSERT_TRUE(out) << "the run ended before a non-repeating source ran out";
      ++ended_runs;
    }
    // After the change, the new weights: at every block boundary of the new
    // mixture, each source within one sample of start + tau * w / sum(w)
    // (by samples, integral weights: the shares are exact).
    if (changed && mo.by == MixBy::kSamples) {
      const Index block = resume.order.current().block();
      double total = 0;
      for (double x : w1) total += x;
      std::vector<Index> seen(static_cast<std::size_t>(k), 0);
      for (Index tau = 0; read + tau <= w_new.count; ++tau) {
        if (tau % block == 0) {
          for (Index s = 0; s < k; ++s) {
            const double target = static_cast<double>(tau) * w1[s] / total;
            ASSERT_LT(std::abs(static_cast<double>(seen[s]) - target), 1.0)
                << "trial " << trial << " source " << s << " at " << tau;
          }
        }
        if (read + tau < w_new.count) ++seen[src[read + tau]];
      }
    }
    // Unchanged: the uninterrupted run, byte for byte.
    if (!changed && equal && state.train->position > 0) {
      ASSERT_EQ(resume.loader.train, state.train);
    }
  }
  EXPECT_GT(changed_runs, 30);
  EXPECT_GT(ended_runs, 0);
}

TEST(MixtureLoaderTest, UnchangedWeightsResumeTheUninterruptedRunByteForByte) {
  std::mt19937_64 rng(5);
  const Corpus corpus = MakeCorpus(rng, {30, 80, 12}, 40);
  const Mixture mix = SeededMixture(corpus, {3, 1, 2}, 8, 64);
  const MixtureOrder order(mix, 300);
  for (const bool equal : {true, false}) {
    LoaderOptions o = InOrder(RowOptions(32, 2, 1));
    o.seed = 8;
    o.equal_steps = equal;
    o.epoch = 1;
    const auto view = MixtureSource(corpus.views(), order, order.Window(1));
    TokenLoader whole(view, o);
    std::vector<std::vector<std::int64_t>> expected;
    while (auto b = whole.Next()) expected.push_back(b->input_ids);
    TokenLoader first(view, o);
    for (int i = 0; i < 4; ++i) ASSERT_NE(first.Next(), nullptr);
    const std::string text = MixtureLoaderStateToJson(order, first.State());
    ASSERT_TRUE(IsMixtureLoaderState(text));
    const MixtureResume r = ResumeMixtureLoader(corpus.views(), mix, 300, o, text);
    ASSERT_FALSE(r.changed);
    TokenLoader rest(MixtureSource(corpus.views(), r.order, r.order.Window(1)), o, r.loader);
    std::size_t k = 4;
    while (auto b = rest.Next()) {
      ASSERT_LT(k, expected.size());
      ASSERT_EQ(b->input_ids, expected[k++]);
    }
    ASSERT_EQ(k, expected.size());
    // The JSON round-trips.
    const MixtureLoaderState back = MixtureLoaderStateFromJson(text);
    EXPECT_EQ(MixtureLoaderStateToJson(MixtureOrder(back.pieces, back.samples), back.loader), text);
  }
}

// Regression (state fuzzer): a state whose epoch's window begins before its
// order's first piece (origin moved past 0) was read, then the writer threw
// from MixtureOrder::Window; the reader refuses it naming state and epoch.
TEST(MixtureLoaderTest, RegressionAStateWhoseWindowIsBeforeItsOrderIsRefused) {
  const Corpus corpus = TwoSources(12);
  const Mixture mix = SeededMixture(corpus, {1, 2}, 3);
  const MixtureOrder order(mix, 100);
  LoaderOptions o = InOrder(RowOptions(32, 2));
  TokenLoader loader(MixtureSource(corpus.views(), order, order.Window(0)), o);
  ASSERT_NE(loader.Next(), nullptr);
  std::string text = MixtureLoaderStateToJson(order, loader.State());
  ASSERT_NO_THROW((void)MixtureLoaderStateFromJson(text));
  // Sealed again: the check behind the seal refuses it.
  text = loader_testing::Resealed(text, "\"origin\": 0", "\"origin\": 1");
  try {
    (void)MixtureLoaderStateFromJson(text);
    ADD_FAILURE() << "accepted a window before the order";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("state: epoch: 0 begins at sample 0, before this "
                                          "loader's order (from sample 1",
                                          0),
              0u)
        << e.what();
  }
}

// Issue 20: at an epoch-boundary checkpoint (an equal-steps state at position
// 0) ResumeMixtureLoader overwrote the state's stream fingerprint without
// checking it, so any well-typed edit was accepted (3 added to start[0]
// delivered items (0,2),(0,8) instead of (0,5),(0,9)). The state is sealed,
// and its stream must be its window's.
TEST(MixtureLoaderTest, RegressionAnEpochBoundaryStateIsSealedAndBoundToItsWindow) {
  const Corpus corpus = TwoSources(21);
  const Mixture mix = SeededMixture(corpus, {1, 2}, 4);
  const MixtureOrder order(mix, 60);
  LoaderOptions o = InOrder(RowOptions(32, 2));
  o.equal_steps = true;
  // Epoch 1 uninterrupted: what a resume at its start must deliver.
  LoaderOptions o1 = o;
  o1.epoch = 1;
  std::vector<Index> sources(60), items(60);
  order.Fill(60, 120, sources.data(), items.data());
  TokenLoader fresh(MixtureSource(corpus.views(), order, order.Window(1)), o1);
  Delivered expected;
  Drain(fresh, sources, items, &expected);
  ASSERT_GT(expected.batches, 0);
  // The end state of epoch 0 (made for epoch 0's window), and the start
  // state of epoch 1 (its own window's).
  TokenLoader epoch0(MixtureSource(corpus.views(), order, order.Window(0)), o);
  while (epoch0.Next() != nullptr) {
  }
  TokenLoader start1(MixtureSource(corpus.views(), order, order.Window(1)), o1);
  for (const LoaderState& state : {epoch0.State(), start1.State()}) {
    ASSERT_TRUE(state.train.has_value());
    ASSERT_EQ(state.train->epoch, 1u);
    ASSERT_EQ(state.train->position, 0);
    const std::string text = MixtureLoaderStateToJson(order, state);
    const MixtureResume r = ResumeMixtureLoader(corpus.views(), mix, 60, o1, text);
    TokenLoader rest(MixtureSource(corpus.views(), r.order, r.order.Window(1)), o1, r.loader);
    Delivered got;
    Drain(rest, sources, items, &got);
    EXPECT_EQ(got.tokens_of, expected.tokens_of);
    EXPECT_EQ(got.batches, expected.batches);
    // An edit: refused by the seal; sealed again, by the stream.
    const std::size_t at = text.find("\"start\": [0, 0]");
    ASSERT_NE(at, std::string::npos) << text;
    std::string edited = text;
    edited.replace(at, 15, "\"start\": [3, 0]");
    EXPECT_EQ(loader_testing::ErrorOf(
                  [&] { (void)ResumeMixtureLoader(corpus.views(), mix, 60, o1, edited); }),
              "state: checksum: does not match the state's content (the state was edited or "
              "damaged)");
    const std::string resealed =
        loader_testing::Resealed(text, "\"start\": [0, 0]", "\"start\": [3, 0]");
    const std::string e = loader_testing::ErrorOf(
        [&] { (void)ResumeMixtureLoader(corpus.views(), mix, 60, o1, resealed); });
    EXPECT_EQ(e.rfind("state: was saved for another data set or mixture: the data differs", 0), 0u)
        << e;
  }
}

TEST(MixtureLoaderTest, ResumeRefusesAnotherRunAndOneConsumerOfMany) {
  const Corpus corpus = TwoSources(6);
  MixtureOptions mo;
  mo.seed = 8;
  const Mixture mix = MixtureOfSources(corpus.views(), {1, 1}, mo);
  const MixtureOrder order(mix, 200);
  LoaderOptions o = InOrder(RowOptions(32, 2, 2));
  const auto view = MixtureSource(corpus.views(), order, order.Window(0));
  TokenLoader one(view, o);
  ASSERT_NE(one.Next(), nullptr);
  const std::string text = MixtureLoaderStateToJson(order, one.State());
  auto message = [](auto f) { return base_testing::ErrorOf<std::exception>(f); };
  const Mixture other = MixtureOfSources(corpus.views(), {1, 3}, mo);
  EXPECT_EQ(message([&] {
              (void)ResumeMixtureLoader(corpus.views(), other, 200, o, text);
            }).rfind("state: is consumer 0's of 2", 0),
            0u);
  MixtureOptions seeded = mo;
  seeded.seed = 9;
  const Mixture reseeded = MixtureOfSources(corpus.views(), {1, 3}, seeded);
  EXPECT_EQ(message([&] {
              (void)ResumeMixtureLoader(corpus.views(), reseeded, 200, o, text);
            }).rfind("seed:", 0),
            0u);
  EXPECT_EQ(message([&] {
              (void)ResumeMixtureLoader(corpus.views(), other, 201, o, text);
            }).rfind("samples:", 0),
            0u);
  LoaderOptions eq = o;
  eq.equal_steps = true;
  EXPECT_EQ(message([&] {
              (void)ResumeMixtureLoader(corpus.views(), other, 200, eq, text);
            }).rfind("state:", 0),
            0u);
  EXPECT_EQ(message([&] { (void)MixtureLoaderStateFromJson("{\"kind\": 1}"); }).rfind("state", 0),
            0u);
  // An epoch before the order's first piece is not held.
  const MixtureOrder later = order.Changed(250, other, 200).Changed(450, mix, 400);
  EXPECT_EQ(later.pieces().size(), 2u);
  EXPECT_EQ(later.start(), 250);
  EXPECT_EQ(message([&] { (void)later.Window(1); }).rfind("epoch: 1 begins at sample 200", 0), 0u);
  EXPECT_EQ(later.Window(2).first, 400);
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
  auto message = [](auto f) { return base_testing::ErrorOf<std::exception>(f); };
  EXPECT_EQ(message([&] { (void)MixtureEpochWindow(bounded, 0, 0); }).rfind("samples:", 0), 0u);
  // A window holds 8 bytes per sample: more than 2^31 per epoch is refused,
  // given or read from a state, instead of failing to allocate.
  EXPECT_EQ(message([&] {
              (void)MixtureEpochWindow(bounded, kMaxWindowSamples + 1, 0);
            }).rfind("samples:", 0),
            0u);
  EXPECT_EQ(message([&] { (void)MixtureOrder(bounded, Index{1} << 40); }).rfind("samples:", 0), 0u);
  {
    LoaderState st;
    st.train = TrainState{};
    // Sealed again (the seal alone would refuse the edit): the bound.
    const std::string text =
        loader_testing::Resealed(MixtureLoaderStateToJson(MixtureOrder(bounded, 4), st),
                                 "\"samples\": 4", "\"samples\": 1099511627776");
    EXPECT_EQ(message([&] { (void)MixtureLoaderStateFromJson(text); }).rfind("state", 0), 0u);
    EXPECT_NE(message([&] { (void)MixtureLoaderStateFromJson(text); }).find("2^31"),
              std::string::npos);
  }
  EXPECT_EQ(message([&] {
              (void)MixtureEpochWindow(bounded, kMaxWindowSamples, std::uint64_t{1} << 33);
            }).rfind("epoch:", 0),
            0u);
  EXPECT_EQ(message([&] { (void)MixtureOfSources({}, {1}, {}); }).rfind("sources:", 0), 0u);
  EXPECT_EQ(message([&] {
              (void)MixtureSource({corpus.sources[0].source}, bounded, {0, 1});
            }).rfind("sources:", 0),
            0u);
  EXPECT_EQ(
      message([&] {
        (void)MixtureSource({corpus.sources[1].source, corpus.sources[0].source}, bounded, {0, 1});
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

// A resume that changed the weights at window document `read`: the pieces of
// documents before it (old weights) and from it on (new ones) count apart, and
// the two ranges together count what one delivery over everything counts.
TEST(MixtureLoaderTest, DeliveryOfARangeCountsOnlyTheDocumentsInIt) {
  const std::vector<Index> window_sources = {0, 1, 1, 2, 0};
  Batch batch;
  batch.documents = {0, 1, 2, 3, 4, 1};
  batch.starts = {0, 0, 0, 0, 0, 7};  // the last piece continues document 1
  batch.lengths = {10, 20, 30, 40, 50, 5};
  MixtureDelivery all, before, after;
  all.Add(batch, window_sources);
  before.Add(batch, window_sources, 0, 2);
  after.Add(batch, window_sources, 2, 5);
  EXPECT_EQ(before.tokens, (std::vector<Index>{10, 25}));
  EXPECT_EQ(before.documents, (std::vector<Index>{1, 1}));
  EXPECT_EQ(after.tokens, (std::vector<Index>{50, 30, 40}));
  EXPECT_EQ(after.documents, (std::vector<Index>{1, 1, 1}));
  EXPECT_EQ(all.tokens, (std::vector<Index>{60, 55, 40}));
  EXPECT_EQ(all.documents, (std::vector<Index>{2, 2, 1}));
  EXPECT_EQ(after.Realised(MixBy::kTokens),
            (std::vector<double>{50.0 / 120, 30.0 / 120, 40.0 / 120}));
  batch.documents[0] = 5;  // outside the window: refused whatever the range
  EXPECT_THROW(before.Add(batch, window_sources, 0, 2), std::out_of_range);
}

// ---------------------------------------------------------------------------
// MixtureLoader: the assembly in the core

LoaderOptions MixtureLoaderOptions(bool equal_steps, Index world_size = 1, Index rank = 0) {
  LoaderOptions o = InOrder(RowOptions(48, 2, world_size, rank));
  o.equal_steps = equal_steps;
  o.num_threads = 0;
  return o;
}

// Every batch's tokens against the (source, item) the loader names for each
// piece: the corpus's tokens spell their source and document, so a wrong
// sample or a wrong token is caught without the mixture code.
struct MixtureRun {
  std::vector<std::vector<std::int64_t>> ids;  // per batch: input_ids
  std::vector<std::vector<Index>> sources, items, documents;
};

MixtureRun DrainMixture(MixtureLoader& loader, Index max_batches = -1) {
  MixtureRun run;
  while (max_batches < 0 || static_cast<Index>(run.ids.size()) < max_batches) {
    const auto mb = loader.Next();
    if (!mb) break;
    const Batch& b = *mb->batch;
    EXPECT_EQ(mb->sources.size(), b.documents.size());
    Index t = 0;
    for (std::size_t k = 0; k < b.documents.size(); ++k) {
      const Index row = b.rows[k];
      if (k == 0 || b.rows[k - 1] != row) t = 0;
      for (Index i = 0; i < b.lengths[k]; ++i) {
        const std::int64_t want = mb->sources[k] * 1000000 + mb->items[k] * 1000 + b.starts[k] + i;
        EXPECT_EQ(b.input_ids[static_cast<std::size_t>(row * b.seq_len + t + i)], want);
      }
      t += b.lengths[k];
    }
    run.ids.push_back(b.input_ids);
    run.sources.push_back(mb->sources);
    run.items.push_back(mb->items);
    run.documents.push_back(b.documents);
  }
  return run;
}

TEST(MixtureLoaderTest, TheCoreLoaderDeliversWhatTheAssembledPartsDeliverEpochAfterEpoch) {
  std::mt19937_64 rng(11);
  for (const bool equal_steps : {true, false}) {
    const Corpus corpus = MakeCorpus(rng, {30, 90, 12}, 70);
    MixtureOptions mo;
    mo.seed = 5;
    mo.block = 32;
    const std::vector<double> weights = {3, 5, 2};
    const Index samples = 150;
    MixtureLoader loader(corpus.views(), weights, mo, MixtureLoaderOptions(equal_steps), samples);
    EXPECT_EQ(loader.samples(), samples);
    // The oracle: the parts, assembled by hand for each epoch, and the
    // window's samples from the mixture itself.
    const Mixture mix = MixtureOfSources(corpus.views(), weights, mo);
    for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
      ASSERT_EQ(loader.epoch(), epoch);
      const MixtureWindow w = MixtureEpochWindow(mix, samples, epoch);
      std::vector<Index> src(static_cast<std::size_t>(w.count)), item(src.size());
      MixtureWindowSamples(mix, w, src.data(), item.data());
      LoaderOptions o = MixtureLoaderOptions(equal_steps);
      o.epoch = epoch;
      TokenLoader oracle(MixtureSource(corpus.views(), mix, w), o);
      const MixtureRun run = DrainMixture(loader);
      ASSERT_FALSE(run.ids.empty());
      for (std::size_t b = 0; b < run.ids.size(); ++b) {
        const auto want = oracle.Next();
        ASSERT_NE(want, nullptr) << "epoch " << epoch << " batch " << b;
        EXPECT_EQ(run.ids[b], want->input_ids);
        EXPECT_EQ(run.documents[b], want->documents);
        for (std::size_t k = 0; k < run.documents[b].size(); ++k) {
          const auto d = static_cast<std::size_t>(run.documents[b][k]);
          EXPECT_EQ(run.sources[b][k], src[d]);
          EXPECT_EQ(run.items[b][k], item[d]);
        }
      }
      EXPECT_EQ(oracle.Next(), nullptr) << "epoch " << epoch;
    }
  }
}

TEST(MixtureLoaderTest, ASelectedWindowReadsTheDocumentsOfAGatheredCopy) {
  std::mt19937_64 rng(12);
  const Corpus corpus = MakeCorpus(rng, {50, 20, 80}, 40);
  MixtureOptions mo;
  mo.seed = 9;
  const Mixture mix = MixtureOfSources(corpus.views(), {1, 2, 3}, mo);
  const MixtureWindow w = MixtureEpochWindow(mix, 400, 1);
  std::vector<Index> src(static_cast<std::size_t>(w.count)), item(src.size());
  MixtureWindowSamples(mix, w, src.data(), item.data());
  const std::vector<Index> begin = {0, 50, 70};
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < src.size(); ++i) {
    ids.push_back(begin[static_cast<std::size_t>(src[i])] + item[i]);
  }
  const auto gathered = TokenSource::Gather(corpus.views(), ids, 1);
  const auto view = MixtureSource(corpus.views(), mix, w);
  ASSERT_EQ(view->num_documents(), gathered->num_documents());
  EXPECT_EQ(view->num_tokens(), gathered->num_tokens());
  for (Index d = view->num_documents() - 1; d >= 0; --d) {  // backwards: not only runs
    ASSERT_EQ(view->DocumentLength(d), gathered->DocumentLength(d));
    std::vector<std::int32_t> a(static_cast<std::size_t>(view->DocumentLength(d)));
    std::vector<std::int32_t> b(a.size());
    view->Copy(d, 0, static_cast<Index>(a.size()), a.data());
    gathered->Copy(d, 0, static_cast<Index>(b.size()), b.data());
    ASSERT_EQ(a, b) << "document " << d;
  }
  // The fingerprint binds the window: another window, other weights, or a
  // source whose tokens differ give another hash.
  const auto fp = FingerprintData(*view).hash;
  EXPECT_EQ(FingerprintData(*MixtureSource(corpus.views(), mix, w)).hash, fp);
  EXPECT_NE(
      FingerprintData(*MixtureSource(corpus.views(), mix, MixtureEpochWindow(mix, 400, 2))).hash,
      fp);
  const Mixture other = MixtureOfSources(corpus.views(), {1, 2, 4}, mo);
  EXPECT_NE(FingerprintData(*MixtureSource(corpus.views(), other, w)).hash, fp);
  std::mt19937_64 rng2(12);
  Corpus changed = MakeCorpus(rng2, {50, 20, 80}, 40);  // the same lengths
  Source edited;
  for (Index d = 0; d < 80; ++d) {
    const Index len = changed.sources[2].source->DocumentLength(d);
    edited.Add(len, [d](Index k) { return static_cast<std::int32_t>(7 + d + k); });
  }
  edited.Seal();
  changed.sources[2] = std::move(edited);
  EXPECT_NE(FingerprintData(*MixtureSource(changed.views(), mix, w)).hash, fp);
}

TEST(MixtureLoaderTest, AWindowsPlanReadsNoLengthBeforeItsFirstStepAndPlansAsAPassWould) {
  // The window's data fingerprint binds every length (its identity and its
  // sources' LengthsDigest), so an equal-steps plan of it reads no length to
  // be made and only the packer's buffer's worth before its first step. The
  // oracle: the plan of the same documents that reads every length first
  // (lengths_bound off), step for step, rank for rank.
  std::mt19937_64 rng(21);
  const Corpus corpus = MakeCorpus(rng, {300, 120, 500}, 50);
  MixtureOptions mo;
  mo.seed = 4;
  const Mixture mix = MixtureOfSources(corpus.views(), {1, 2, 3}, mo);
  const auto view = MixtureSource(corpus.views(), mix, MixtureEpochWindow(mix, 700, 1));
  TrainDocuments bound = TrainDocumentsOf(*view, FingerprintData(*view).hash);
  ASSERT_TRUE(bound.lengths_bound);
  Index longest = 0;
  for (const auto& s : corpus.views()) longest = std::max(longest, s->num_tokens());
  EXPECT_EQ(bound.length_bound, longest);
  auto reads = std::make_shared<std::atomic<Index>>(0);
  const TokenSource* v = view.get();
  bound.length = [v, reads](Index d) {
    ++*reads;
    return v->DocumentLength(d);
  };
  TrainDocuments all = bound;
  all.lengths_bound = false;
  TrainOptions t = loader_testing::PlanOptions(64, 2, 3);
  t.shuffle = false;
  t.buffer = 16;
  const auto deferred = TrainPlan::Deferred(bound, t, std::nullopt);
  EXPECT_EQ(reads->load(), 0);
  TrainStep first;
  ASSERT_TRUE(deferred->ReadOnce(1, 0)->Next(&first));
  EXPECT_LT(reads->load(), 100) << "of " << view->num_documents();
  const TrainPlan whole(all, t);
  EXPECT_GE(reads->load(), view->num_documents());  // the pass
  const TrainPlan lazy(bound, t);
  ASSERT_EQ(lazy.num_steps(), whole.num_steps());
  // The same summary; its end state carries each plan's own stream.
  TrainSummary want = whole.summary();
  EXPECT_EQ(want.end.stream, whole.stream());
  want.end.stream = lazy.stream();
  loader_testing::ExpectSameSummary(lazy.summary(), want);
  for (Index s = 0; s < whole.num_steps(); ++s) {
    for (Index r = 0; r < 3; ++r) {
      const TrainStep a = lazy.Step(r, s), b = whole.Step(r, s);
      ASSERT_EQ(a.rows.size(), b.rows.size());
      for (std::size_t i = 0; i < a.rows.size(); ++i) {
        ASSERT_EQ(a.rows[i].size(), b.rows[i].size()) << s << " " << r;
        for (std::size_t j = 0; j < a.rows[i].size(); ++j) {
          EXPECT_EQ(a.rows[i][j].item, b.rows[i][j].item);
          EXPECT_EQ(a.rows[i][j].start, b.rows[i][j].start);
          EXPECT_EQ(a.rows[i][j].length, b.rows[i][j].length);
        }
      }
    }
  }
  // A position past what the window can hold is refused before any replay.
  TrainOptions far = t;
  far.position = Index{1} << 40;
  EXPECT_NE(loader_testing::ErrorOf([&] { (void)TrainPlan(bound, far); }).find("more packs than"),
            std::string::npos);
}

TEST(MixtureLoaderTest, AWindowsStreamBindsEveryLengthOfItsSourcesNotOnlyTheSampledOnes) {
  // Source 0 has 10,000 documents of 4 tokens; in the edited copy document
  // 5 is one token longer and document 6 one shorter (same totals, same
  // tokens): neither is among the 4096 documents FingerprintData samples
  // (floor(k * 10000 / 4096): 4 and 7 are). The window's stream differs.
  auto corpus_with = [](bool edited) {
    Corpus c;
    Source big;
    for (Index d = 0; d < 10000; ++d) {
      big.Add(4, [d](Index k) { return static_cast<std::int32_t>(d * 10 + k); });
    }
    if (edited) big.offsets[6] += 1;
    big.Seal();
    c.sources.push_back(std::move(big));
    std::mt19937_64 rng(5);
    c.sources.push_back(MakeSource(rng, 1, 50, 30));
    return c;
  };
  const Corpus a = corpus_with(false), b = corpus_with(true);
  MixtureOptions mo;
  mo.seed = 2;
  const Mixture mix = MixtureOfSources(a.views(), {1, 1}, mo);
  const MixtureWindow w = MixtureEpochWindow(mix, 5000, 0);
  const auto va = MixtureSource(a.views(), mix, w), vb = MixtureSource(b.views(), mix, w);
  const std::uint64_t fa = FingerprintData(*va).hash, fb = FingerprintData(*vb).hash;
  EXPECT_NE(fa, fb);
  TrainOptions t = loader_testing::PlanOptions(64, 2, 2);
  t.shuffle = false;
  EXPECT_NE(TrainPlan::Deferred(TrainDocumentsOf(*va, fa), t, std::nullopt)->stream(),
            TrainPlan::Deferred(TrainDocumentsOf(*vb, fb), t, std::nullopt)->stream());
}

TEST(MixtureLoaderTest, StateResumesTheUninterruptedRunAndAChangeOfWeightsContinues) {
  std::mt19937_64 rng(13);
  const Corpus corpus = MakeCorpus(rng, {40, 60, 25}, 60);
  MixtureOptions mo;
  mo.seed = 3;
  const std::vector<double> weights = {1, 1, 1};
  for (const bool equal_steps : {true, false}) {
    MixtureLoader full(corpus.views(), weights, mo, MixtureLoaderOptions(equal_steps));
    const MixtureRun all = DrainMixture(full);
    MixtureLoader first(corpus.views(), weights, mo, MixtureLoaderOptions(equal_steps));
    const MixtureRun head = DrainMixture(first, 3);
    const std::string state = first.State();
    EXPECT_TRUE(IsMixtureLoaderState(state));
    MixtureLoader resumed(corpus.views(), weights, mo, MixtureLoaderOptions(equal_steps));
    resumed.Load(state);
    ASSERT_TRUE(resumed.last_resume().has_value());
    EXPECT_FALSE(resumed.last_resume()->changed);
    const MixtureRun tail = DrainMixture(resumed);
    ASSERT_EQ(head.ids.size() + tail.ids.size(), all.ids.size());
    for (std::size_t b = 0; b < tail.ids.size(); ++b) {
      EXPECT_EQ(tail.ids[b], all.ids[head.ids.size() + b]) << "batch " << b;
    }
    // Other weights: the loader continues from the state's read point.
    MixtureLoader reweighted(corpus.views(), {5, 1, 1}, mo, MixtureLoaderOptions(equal_steps));
    reweighted.Load(state);
    ASSERT_TRUE(reweighted.last_resume()->changed);
    EXPECT_EQ(reweighted.order().pieces().size(), 2u);
    (void)DrainMixture(reweighted);  // the tokens match the samples named
    // A broken state leaves the loader as it was.
    std::string edited = state;
    edited[edited.find("\"samples\"") + 10] = '9';
    EXPECT_THROW(reweighted.Load(edited), std::invalid_argument);
  }
}

TEST(MixtureLoaderTest, ConcurrentPassesOfOneGenerationAllEndWithItsEpoch) {
  std::mt19937_64 rng(15);
  const Corpus corpus = MakeCorpus(rng, {30, 50}, 60);
  for (const bool equal_steps : {true, false}) {
    MixtureLoader one(corpus.views(), {1, 2}, MixtureOptions{}, MixtureLoaderOptions(equal_steps));
    const Index batches = static_cast<Index>(DrainMixture(one).ids.size());
    LoaderOptions o = MixtureLoaderOptions(equal_steps);
    o.num_threads = 2;
    MixtureLoader loader(corpus.views(), {1, 2}, MixtureOptions{}, o);
    const std::uint64_t g = loader.BeginPass();
    EXPECT_EQ(g, loader.generation());
    std::atomic<Index> seen{0};
    std::vector<std::thread> passes;
    for (int t = 0; t < 3; ++t) {
      passes.emplace_back([&] {
        while (const auto b = loader.Next(g)) {
          EXPECT_EQ(b->batch->epoch, 0u);
          ++seen;
        }
      });
    }
    for (auto& t : passes) t.join();
    EXPECT_EQ(seen.load(), batches);  // each batch to one pass, none of epoch 1
    EXPECT_EQ(loader.epoch(), 1u);    // moved on once
    EXPECT_EQ(loader.generation(), g + 1);
    // The pass epoch: the one that ran out, until the next pass begins.
    EXPECT_EQ(loader.pass_epoch(), 0u);
    EXPECT_EQ(loader.BeginPass(), g + 1);
    EXPECT_EQ(loader.pass_epoch(), 1u);
    const auto next = loader.Next(g + 1);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->batch->epoch, 1u);
    // SetEpoch / Load move the loader: the ran-out epoch no longer names it.
    while (loader.Next(g + 1)) {
    }
    EXPECT_EQ(loader.pass_epoch(), 1u);
    loader.SetEpoch(5);
    EXPECT_EQ(loader.pass_epoch(), 5u);
  }
}

TEST(MixtureLoaderTest, TheMixtureRulesAreTheCoresNamingTheParameter) {
  std::mt19937_64 rng(14);
  const Corpus corpus = MakeCorpus(rng, {10, 10}, 20);
  auto message = [](auto f) { return base_testing::ErrorOf<std::exception>(f); };
  auto open = [&](LoaderOptions o, std::optional<Index> samples = std::nullopt) {
    MixtureLoader l(corpus.views(), {1, 1}, MixtureOptions{}, o, samples);
  };
  LoaderOptions shuffled = MixtureLoaderOptions(true);
  shuffled.shuffle = true;
  EXPECT_EQ(message([&] { open(shuffled); }).rfind("shuffle:", 0), 0u);
  LoaderOptions files = MixtureLoaderOptions(false);
  files.shard_files = true;
  EXPECT_EQ(message([&] { open(files); }).rfind("shard_files:", 0), 0u);
  LoaderOptions continuous = MixtureLoaderOptions(true);
  continuous.mode = TrainMode::kContinuous;
  EXPECT_EQ(message([&] { open(continuous); }).rfind("mode:", 0), 0u);
  EXPECT_EQ(message([&] { open(MixtureLoaderOptions(true), 0); }).rfind("samples:", 0), 0u);
  EXPECT_EQ(message([&] {
              MixtureLoader l({}, {}, MixtureOptions{}, MixtureLoaderOptions(true));
            }).rfind("sources:", 0),
            0u);
  // Default samples per epoch: the sum of the sources' sizes (both repeat).
  MixtureOptions by_tokens;
  by_tokens.by = MixBy::kTokens;
  MixtureLoader l(corpus.views(), {1, 1}, by_tokens, MixtureLoaderOptions(true));
  EXPECT_EQ(l.samples(), 20);
  // By tokens, the mixture's sizes are the sources' token totals.
  EXPECT_EQ(l.mixture().options().tokens,
            (std::vector<Index>{corpus.sources[0].source->num_tokens(),
                                corpus.sources[1].source->num_tokens()}));
  // set_epoch moves to another window, and stays where it stands.
  l.SetEpoch(2);
  EXPECT_EQ(l.epoch(), 2u);
  const std::uint64_t g = l.generation();
  l.SetEpoch(2);
  EXPECT_EQ(l.generation(), g);
}

TEST(MixtureLoaderTest, LoadingEveryConsumersStateIsLoadingTheirMerge) {
  std::mt19937_64 rng(16);
  const Corpus corpus = MakeCorpus(rng, {30, 40}, 40);
  std::vector<std::string> states;
  for (Index r = 0; r < 2; ++r) {
    MixtureLoader l(corpus.views(), {1, 1}, MixtureOptions{}, MixtureLoaderOptions(false, 2, r));
    (void)DrainMixture(l, 2 + r);
    states.push_back(l.State());
  }
  auto resumed = [&](auto load) {
    MixtureLoader l(corpus.views(), {1, 2}, MixtureOptions{}, MixtureLoaderOptions(false));
    load(l);
    return DrainMixture(l).ids;
  };
  const auto merged = resumed([&](MixtureLoader& l) { l.Load(MergeMixtureLoaderStates(states)); });
  EXPECT_FALSE(merged.empty());
  EXPECT_EQ(resumed([&](MixtureLoader& l) { l.Load(std::span<const std::string>(states)); }),
            merged);
  MixtureLoader l(corpus.views(), {1, 1}, MixtureOptions{}, MixtureLoaderOptions(false));
  EXPECT_EQ(base_testing::ErrorOf<std::invalid_argument>([&] {
              l.Load(std::span<const std::string>());
            }).rfind("state:", 0),
            0u);
}

}  // namespace
}  // namespace shardkit
