#include "shardkit/loader/train_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/internal/pack_stream.h"
#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

namespace {

using loader_testing::PlanOptions;

// The oracle of the pack stream: the documents in the global order through a
// StreamingPacker of the packing area, written out here from the definition.
struct Stream {
  std::vector<std::vector<PackItem>> packs;
  std::vector<Index> dropped;
};

Stream Oracle(const std::vector<Index>& lengths, const std::vector<Index>& images,
              const TrainOptions& o, std::uint64_t epoch) {
  PackOptions p;
  p.capacity = o.seq_len;
  p.algorithm = o.algorithm;
  p.buffer = o.buffer;
  p.max_images = o.max_images;
  p.max_sequences = o.max_sequences;
  p.oversize = o.oversize;
  StreamingPacker packer(p);
  const Index n = static_cast<Index>(lengths.size());
  Permutation order(n, o.seed, epoch);
  Stream s;
  Pack pack;
  for (Index k = 0; k < n; ++k) {
    const Index d = o.shuffle ? order.Forward(k) : k;
    packer.Push(d, lengths[d], images.empty() ? 0 : images[d]);
    while (packer.Pop(&pack)) s.packs.push_back(pack.pieces);
  }
  packer.Finish();
  while (packer.Pop(&pack)) s.packs.push_back(pack.pieces);
  s.dropped = packer.dropped_items();
  return s;
}

// Every piece of every non-dropped document exactly once in `pieces`.
::testing::AssertionResult Tiles(const std::vector<Index>& lengths,
                                 const std::vector<Index>& dropped,
                                 const std::vector<PackItem>& pieces) {
  std::vector<std::vector<std::pair<Index, Index>>> by(lengths.size());
  for (const PackItem& p : pieces) {
    if (p.item < 0 || p.item >= static_cast<Index>(lengths.size())) {
      return ::testing::AssertionFailure() << "piece of document " << p.item;
    }
    by[p.item].push_back({p.start, p.length});
  }
  std::vector<char> is_dropped(lengths.size(), 0);
  for (Index d : dropped) is_dropped[d] = 1;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    auto& list = by[d];
    if (is_dropped[d]) {
      if (!list.empty()) return ::testing::AssertionFailure() << "dropped " << d << " delivered";
      continue;
    }
    if (list.empty()) return ::testing::AssertionFailure() << "document " << d << " missing";
    std::sort(list.begin(), list.end());
    Index at = 0;
    for (auto [start, length] : list) {
      if (start != at) return ::testing::AssertionFailure() << "document " << d << " gap/overlap";
      if (length == 0 && lengths[d] != 0) {
        return ::testing::AssertionFailure() << "document " << d << " empty piece";
      }
      at += length;
    }
    if (at != lengths[d]) return ::testing::AssertionFailure() << "document " << d << " short";
  }
  return ::testing::AssertionSuccess();
}

struct Config {
  std::vector<Index> lengths, images;
  TrainOptions options;
};

Config RandomConfig(std::mt19937_64& rng) {
  Config c;
  const Index n = static_cast<Index>(rng() % 400);
  const Index seq_len = std::vector<Index>{1, 5, 16, 64, 200}[rng() % 5];
  std::lognormal_distribution<double> lognormal(std::log(seq_len / 3.0 + 1), 1.0);
  const bool with_images = rng() % 4 == 0;
  for (Index d = 0; d < n; ++d) {
    Index len = static_cast<Index>(lognormal(rng));
    if (rng() % 12 == 0) len = 0;
    if (rng() % 20 == 0)
      len = seq_len * static_cast<Index>(1 + rng() % 4) + static_cast<Index>(rng() % 3);
    c.lengths.push_back(len);
    if (with_images) c.images.push_back(static_cast<Index>(rng() % 3));
  }
  TrainOptions& o = c.options;
  o.seq_len = seq_len;
  o.batch_size = static_cast<Index>(1 + rng() % 3);
  o.world_size = std::vector<Index>{1, 2, 3, 4, 7, 16}[rng() % 6];
  o.micro_batches = static_cast<Index>(1 + rng() % 2);
  o.mode = static_cast<TrainMode>(rng() % 3);
  o.shuffle = rng() % 4 != 0;
  o.seed = rng() % 1000;
  o.epoch = rng() % 3;
  o.algorithm = static_cast<PackAlgorithm>(rng() % 4);
  if (rng() % 3) o.buffer = std::vector<Index>{1, 2, 7, 64}[rng() % 4];
  if (with_images && rng() % 2) o.max_images = static_cast<Index>(1 + rng() % 4);
  if (rng() % 5 == 0) o.max_sequences = static_cast<Index>(1 + rng() % 4);
  o.oversize = rng() % 3 == 0 ? Oversize::kDrop : Oversize::kSplit;
  o.cost = rng() % 2 ? CostModel::kTokens : CostModel::kSquaredLengths;
  return c;
}

TrainPlan Make(const Config& c) {
  return TrainPlan(TrainDocuments::FromSpans(c.lengths, c.images), c.options);
}

std::string Describe(const Config& c) { return Make(c).Describe(); }

// Everything delivered by a plan's steps, per rank and step, from Step().
std::vector<std::vector<TrainStep>> AllSteps(const TrainPlan& plan, Index steps) {
  std::vector<std::vector<TrainStep>> out(steps);
  for (Index s = 0; s < steps; ++s) {
    for (Index r = 0; r < plan.options().world_size; ++r) out[s].push_back(plan.Step(r, s));
  }
  return out;
}

TEST(TrainPlanTest, EqualStepsEveryPieceExactlyOnceOverRandomConfigurations) {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 300; ++trial) {
    Config c = RandomConfig(rng);
    SCOPED_TRACE(Describe(c));
    TrainPlan plan = Make(c);
    const TrainOptions& o = c.options;
    const Stream stream = Oracle(c.lengths, c.images, o, o.epoch);
    const Index P = static_cast<Index>(stream.packs.size());
    const Index rows = o.batch_size * o.micro_batches;
    const Index R = o.world_size * rows;
    const Index expected_steps = o.mode == TrainMode::kDrop ? P / R : (P + R - 1) / R;
    ASSERT_EQ(plan.num_steps(), expected_steps);
    auto steps = AllSteps(plan, plan.num_steps());
    std::vector<PackItem> delivered;
    std::vector<Index> seen_packs;
    Index filler = 0;
    for (Index s = 0; s < plan.num_steps(); ++s) {
      for (Index r = 0; r < o.world_size; ++r) {
        const TrainStep& t = steps[s][r];
        ASSERT_EQ(static_cast<Index>(t.rows.size()), rows) << "step " << s << " rank " << r;
        Index tokens = 0;
        for (std::size_t k = 0; k < t.rows.size(); ++k) {
          if (t.row_packs[k] < 0) {
            ++filler;
            EXPECT_TRUE(t.rows[k].empty());
            EXPECT_EQ(o.mode, TrainMode::kPad);
            EXPECT_EQ(s, plan.num_steps() - 1) << "filler before the last step";
            continue;
          }
          Index row_tokens = 0;
          for (const PackItem& p : t.rows[k]) row_tokens += p.length;
          EXPECT_LE(row_tokens, o.seq_len);
          tokens += row_tokens;
          if (t.row_epochs[k] != o.epoch) {
            EXPECT_EQ(o.mode, TrainMode::kContinuous);
            EXPECT_EQ(s, plan.num_steps() - 1);
            continue;
          }
          ASSERT_LT(t.row_packs[k], P);
          EXPECT_EQ(t.rows[k], stream.packs[t.row_packs[k]]);
          seen_packs.push_back(t.row_packs[k]);
          delivered.insert(delivered.end(), t.rows[k].begin(), t.rows[k].end());
        }
        EXPECT_EQ(t.tokens, tokens);
      }
    }
    std::sort(seen_packs.begin(), seen_packs.end());
    const Index dealt = static_cast<Index>(seen_packs.size());
    for (Index g = 0; g < dealt; ++g) ASSERT_EQ(seen_packs[g], g);
    if (o.mode == TrainMode::kDrop) {
      ASSERT_EQ(P - dealt, P % R);
      EXPECT_EQ(plan.summary().dropped_packs, P % R);
      for (Index g = dealt; g < P; ++g) {
        delivered.insert(delivered.end(), stream.packs[g].begin(), stream.packs[g].end());
      }
    } else {
      ASSERT_EQ(dealt, P);
    }
    EXPECT_EQ(filler, o.mode == TrainMode::kPad ? plan.num_steps() * R - P : 0);
    EXPECT_EQ(plan.summary().filler_rows, filler);
    EXPECT_EQ(plan.summary().dropped, static_cast<Index>(stream.dropped.size()));
    EXPECT_TRUE(Tiles(c.lengths, stream.dropped, delivered));
    const TrainAudit audit = plan.Audit();
    EXPECT_TRUE(audit.exactly_once) << audit.error;
    EXPECT_TRUE(audit.equal_steps);
    EXPECT_TRUE(audit.filler_last_only);
    EXPECT_EQ(audit.filler_rows, filler);
  }
}

TEST(TrainPlanTest, ReaderStepAndRebuiltPlanAgree) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    Config c = RandomConfig(rng);
    SCOPED_TRACE(Describe(c));
    TrainPlan a = Make(c), b = Make(c);
    EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
    const Index steps = a.num_steps() + (c.options.mode == TrainMode::kContinuous ? 3 : 0);
    if (a.summary().stream_packs == 0) continue;
    for (Index r = 0; r < c.options.world_size; ++r) {
      auto reader = b.Read(r);
      TrainStep t;
      for (Index s = 0; s < steps; ++s) {
        ASSERT_TRUE(reader->Next(&t));
        const TrainStep u = a.Step(r, s);
        EXPECT_EQ(t.rows, u.rows);
        EXPECT_EQ(t.row_packs, u.row_packs);
        EXPECT_EQ(t.row_epochs, u.row_epochs);
      }
      if (c.options.mode != TrainMode::kContinuous) {
        EXPECT_FALSE(reader->Next(&t));
      }
    }
  }
}

// A Deferred plan read once (the loader's single pass, a worker reading
// every stride-th step from `first`) gives the rank the steps of the plan
// constructed up front and learns the same totals, whether they are asked
// before its reader starts, or only once it has reached the end; also when
// it continues from a state.
TEST(TrainPlanTest, DeferredPlanReadOnceMatchesTheConstructedPlan) {
  std::mt19937_64 rng(33);
  for (int trial = 0; trial < 200; ++trial) {
    Config c = RandomConfig(rng);
    const TrainDocuments docs = TrainDocuments::FromSpans(c.lengths, c.images);
    std::optional<TrainState> state;
    {
      TrainPlan start = Make(c);
      if (start.num_steps() > 0 && rng() % 3 == 0) {
        state = start.StateAt(static_cast<Index>(rng() % start.num_steps()));
      }
    }
    const TrainPlan whole = state ? TrainPlan(docs, c.options, *state) : TrainPlan(docs, c.options);
    SCOPED_TRACE(whole.Describe());
    const Index rank = static_cast<Index>(rng() % c.options.world_size);
    const Index first = static_cast<Index>(rng() % 3), stride = 1 + static_cast<Index>(rng() % 3);
    auto deferred = TrainPlan::Deferred(docs, c.options, state);
    EXPECT_EQ(deferred->Fingerprint(), whole.Fingerprint());
    if (rng() % 4 == 0) EXPECT_EQ(deferred->num_steps(), whole.num_steps());  // asked first
    auto reader = deferred->ReadOnce(rank, first);
    TrainStep t;
    Index s = first;
    while (reader->Next(&t)) {
      ASSERT_LT(s, whole.num_steps());
      EXPECT_EQ(t.step, s);
      const TrainStep u = whole.Step(rank, s);
      EXPECT_EQ(t.rows, u.rows);
      EXPECT_EQ(t.row_packs, u.row_packs);
      EXPECT_EQ(t.row_epochs, u.row_epochs);
      EXPECT_EQ(t.tokens, u.tokens);
      EXPECT_EQ(t.filler_rows, u.filler_rows);
      EXPECT_EQ(deferred->StateAt(s), whole.StateAt(s));
      ++s;
      for (Index k = 1; k < stride && reader->Skip(); ++k) ++s;
    }
    EXPECT_GE(s, whole.num_steps());
    EXPECT_FALSE(reader->Next(&t));
    loader_testing::ExpectSameSummary(deferred->summary(), whole.summary());
    EXPECT_EQ(deferred->StateAt(deferred->num_steps()), whole.StateAt(whole.num_steps()));
    // Random access on a deferred plan (built, or completed by its reader).
    if (whole.num_steps() > 0) {
      const Index k = static_cast<Index>(rng() % whole.num_steps());
      EXPECT_EQ(deferred->Step(rank, k).rows, whole.Step(rank, k).rows);
    }
  }
}

// The lengths read from offsets (what the loader passes for a source of one
// part with int64 offsets), from an array, or through a call per document:
// the same plan, step by step, and the same stream fingerprint.
TEST(TrainPlanTest, DocumentsFromOffsetsArraysOrCallsGiveTheSamePlan) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 150; ++trial) {
    Config c = RandomConfig(rng);
    c.images.clear();
    c.options.max_images.reset();
    std::vector<std::int64_t> offsets = {0};
    for (Index l : c.lengths) offsets.push_back(offsets.back() + l);
    TrainDocuments calls;
    calls.count = static_cast<Index>(c.lengths.size());
    calls.length = [&c](Index d) { return c.lengths[static_cast<std::size_t>(d)]; };
    const TrainPlan spans(TrainDocuments::FromSpans(c.lengths), c.options);
    const TrainPlan from_offsets(TrainDocuments::FromOffsets(offsets), c.options);
    const TrainPlan from_calls(calls, c.options);
    SCOPED_TRACE(spans.Describe());
    ASSERT_EQ(from_offsets.num_documents(), spans.num_documents());
    EXPECT_EQ(from_offsets.stream(), spans.stream());
    EXPECT_EQ(from_calls.stream(), spans.stream());
    ASSERT_EQ(from_offsets.num_steps(), spans.num_steps());
    ASSERT_EQ(from_calls.num_steps(), spans.num_steps());
    auto a = spans.Read(-1), b = from_offsets.Read(-1), d = from_calls.Read(-1);
    std::vector<TrainStep> x, y, z;
    while (a->NextAll(&x)) {
      ASSERT_TRUE(b->NextAll(&y));
      ASSERT_TRUE(d->NextAll(&z));
      for (std::size_t r = 0; r < x.size(); ++r) {
        EXPECT_EQ(x[r].rows, y[r].rows);
        EXPECT_EQ(x[r].rows, z[r].rows);
      }
      if (c.options.mode == TrainMode::kContinuous && a->step() >= spans.num_steps()) break;
    }
    const TrainAudit audit = from_offsets.Audit();
    EXPECT_TRUE(audit.exactly_once) << audit.error;
  }
  EXPECT_EQ(TrainDocuments::FromOffsets(std::vector<std::int64_t>{0}).count, 0);
  try {
    (void)TrainDocuments::FromOffsets({});
    ADD_FAILURE() << "an empty offsets span was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("offsets"), std::string::npos) << e.what();
  }
}

// From 2^21 documents on (internal::CompactLengths::kFrom) a shuffled plan
// reads its lengths from a 2-byte copy its first stream makes, lengths of
// 65535 tokens or more escaped to the documents themselves: every pack
// delivered is the oracle's (the documents in the keyed order through a
// StreamingPacker) for lengths from spans with image counts, from offsets and
// from a call per document; a step replayed from a checkpoint and a deferred
// plan read once give the same rows; a continuous plan's packs of the next
// epoch too.
TEST(TrainPlanTest, LargeShuffledCorporaDeliverTheOraclesPacks) {
  const Index n = internal::CompactLengths::kFrom + 4321;
  std::mt19937_64 rng(77);
  std::vector<Index> lengths(static_cast<std::size_t>(n)), images(lengths.size());
  for (auto& l : lengths) {
    const auto r = rng() % 1000;
    l = r < 3   ? static_cast<Index>(65534 + rng() % 3)  // around the escape
        : r < 5 ? static_cast<Index>(65536 + rng() % 200000)
                : static_cast<Index>(rng() % 400);
  }
  for (auto& i : images) i = static_cast<Index>(rng() % 3);
  std::vector<std::int64_t> offsets = {0};
  for (Index l : lengths) offsets.push_back(offsets.back() + l);
  TrainDocuments calls;
  calls.count = n;
  calls.length = [&lengths](Index d) { return lengths[static_cast<std::size_t>(d)]; };

  struct Case {
    const char* name;
    TrainDocuments docs;
    bool images;
    TrainMode mode;
  };
  const Case cases[] = {
      {"spans with images", TrainDocuments::FromSpans(lengths, images), true, TrainMode::kPad},
      {"offsets", TrainDocuments::FromOffsets(offsets), false, TrainMode::kContinuous},
      {"calls", calls, false, TrainMode::kDrop},
  };
  for (const Case& c : cases) {
    TrainOptions o = PlanOptions(4096, 4, 8);
    o.seed = 1234;
    o.epoch = 1;
    o.mode = c.mode;
    if (c.images) o.max_images = 5;
    const TrainPlan plan(c.docs, o);
    SCOPED_TRACE(std::string(c.name) + ": " + plan.Describe());
    ASSERT_GT(plan.num_steps(), 2);
    const std::vector<Index> no_images;
    const Stream oracle = Oracle(lengths, c.images ? images : no_images, o, o.epoch);
    const Stream next =
        c.mode == TrainMode::kContinuous ? Oracle(lengths, no_images, o, o.epoch + 1) : Stream{};
    const Index P = static_cast<Index>(oracle.packs.size());
    // Every step's rows per rank (Read(-1)); each pack against the oracle's.
    std::vector<std::vector<TrainStep>> steps;
    std::vector<char> seen(static_cast<std::size_t>(P), 0);
    Index this_epoch = 0, next_epoch = 0;
    auto all = plan.Read(-1);
    std::vector<TrainStep> step;
    for (Index k = 0; k < plan.num_steps() && all->NextAll(&step); ++k) {
      for (const TrainStep& t : step) {
        for (std::size_t j = 0; j < t.rows.size(); ++j) {
          const Index g = t.row_packs[j];
          if (g < 0) continue;  // filler
          if (t.row_epochs[j] == o.epoch) {
            ASSERT_LT(g, P);
            ASSERT_FALSE(seen[static_cast<std::size_t>(g)]) << "pack " << g << " twice";
            seen[static_cast<std::size_t>(g)] = 1;
            ASSERT_EQ(t.rows[j], oracle.packs[static_cast<std::size_t>(g)]) << "pack " << g;
            ++this_epoch;
          } else {
            ASSERT_EQ(t.row_epochs[j], o.epoch + 1);
            ASSERT_LT(g, static_cast<Index>(next.packs.size()));
            ASSERT_EQ(t.rows[j], next.packs[static_cast<std::size_t>(g)]) << "next epoch's " << g;
            ++next_epoch;
          }
        }
      }
      steps.push_back(step);
    }
    const Index R = 8 * 4;
    EXPECT_EQ(this_epoch, c.mode == TrainMode::kDrop ? P / R * R : P);
    EXPECT_EQ(next_epoch, c.mode == TrainMode::kContinuous ? plan.summary().next_epoch_rows : 0);
    EXPECT_EQ(plan.summary().dropped, static_cast<Index>(oracle.dropped.size()));
    // A step in the middle, replayed from the nearest checkpoint.
    const Index mid = plan.num_steps() / 2 + 1;
    for (Index r = 0; r < 8; ++r) EXPECT_EQ(plan.Step(r, mid).rows, steps[mid][r].rows);
    // A deferred plan read once by rank 5.
    auto deferred = TrainPlan::Deferred(c.docs, o, std::nullopt);
    auto reader = deferred->ReadOnce(5, 0);
    TrainStep t;
    Index s = 0;
    for (; s < plan.num_steps() && reader->Next(&t); ++s) {
      ASSERT_EQ(t.rows, steps[s][5].rows) << "step " << s;
    }
    EXPECT_EQ(s, plan.num_steps());
  }
}

// Calls check(config, plan, k, resumed) for `trials` random plans with steps
// (drawn from `seed`), each resumed from its state at a random step k.
void ForRandomResumes(
    std::uint64_t seed, int trials,
    const std::function<void(const Config&, TrainPlan&, Index, TrainPlan&)>& check) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    Config c = RandomConfig(rng);
    TrainPlan plan = Make(c);
    if (plan.num_steps() == 0) continue;
    SCOPED_TRACE(plan.Describe());
    const Index k = static_cast<Index>(rng() % plan.num_steps());  // num_steps: next epoch
    TrainPlan resumed(TrainDocuments::FromSpans(c.lengths, c.images), c.options, plan.StateAt(k));
    check(c, plan, k, resumed);
  }
}

TEST(TrainPlanTest, ResumeAtRandomStepsEqualsTheUninterruptedRun) {
  ForRandomResumes(21, 150, [](const Config& c, TrainPlan& plan, Index k, TrainPlan& resumed) {
    ASSERT_EQ(resumed.num_steps(), plan.num_steps() - k);
    for (Index s = 0; s < resumed.num_steps(); ++s) {
      for (Index r = 0; r < c.options.world_size; ++r) {
        EXPECT_EQ(resumed.Step(r, s).rows, plan.Step(r, k + s).rows);
      }
    }
    EXPECT_EQ(resumed.summary().end, plan.summary().end);
  });
}

// Regression: a resumed plan numbered its steps from 0 and counted only the
// rest of the epoch, so a learning-rate schedule keyed on the step jumped back.
TEST(TrainPlanTest, ResumedPlanKeepsTheEpochsStepNumbersAndCount) {
  ForRandomResumes(22, 150, [](const Config& c, TrainPlan& plan, Index k, TrainPlan& resumed) {
    EXPECT_EQ(resumed.first_step(), plan.first_step() + k);
    EXPECT_EQ(resumed.epoch_steps(), plan.epoch_steps());
    const Index R = c.options.world_size * plan.rows_per_rank();
    EXPECT_EQ(resumed.first_step(), resumed.options().position / R);
  });
}

TEST(TrainPlanTest, ElasticResumeDeliversTheRestOfTheEpochExactlyOnce) {
  std::mt19937_64 rng(33);
  for (int trial = 0; trial < 150; ++trial) {
    Config c = RandomConfig(rng);
    c.options.mode = rng() % 2 ? TrainMode::kPad : TrainMode::kContinuous;
    TrainPlan first = Make(c);
    if (first.num_steps() == 0) continue;
    SCOPED_TRACE(first.Describe());
    const Index k = static_cast<Index>(rng() % first.num_steps());
    std::vector<PackItem> delivered;
    auto take = [&](const TrainPlan& plan, Index from, Index to) {
      for (Index s = from; s < to; ++s) {
        for (Index r = 0; r < plan.options().world_size; ++r) {
          const TrainStep t = plan.Step(r, s);
          for (std::size_t j = 0; j < t.rows.size(); ++j) {
            if (t.row_epochs[j] != c.options.epoch) continue;
            delivered.insert(delivered.end(), t.rows[j].begin(), t.rows[j].end());
          }
        }
      }
    };
    take(first, 0, k);
    Config d = c;
    d.options.world_size = static_cast<Index>(1 + rng() % 9);
    d.options.batch_size = static_cast<Index>(1 + rng() % 4);
    d.options.micro_batches = 1;
    TrainPlan second(TrainDocuments::FromSpans(d.lengths, d.images), d.options, first.StateAt(k));
    take(second, 0, second.num_steps());
    const Stream stream = Oracle(c.lengths, c.images, c.options, c.options.epoch);
    EXPECT_TRUE(Tiles(c.lengths, stream.dropped, delivered));
  }
}

TEST(TrainPlanTest, DocumentsReadAtIsAllThatTheFirstPacksDependOn) {
  // Replace every document from DocumentsReadAt(p) on: the first p packs
  // stay the same (what a mixture loader resumed with new weights relies on).
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 40; ++trial) {
    const Index n = static_cast<Index>(rng() % 300);
    std::vector<Index> lengths(static_cast<std::size_t>(n));
    for (auto& l : lengths) l = static_cast<Index>(rng() % 90);
    TrainOptions o = PlanOptions(16 + static_cast<Index>(rng() % 64), 1, 1);
    o.shuffle = trial % 2 == 0;
    o.seed = rng();
    o.buffer = 1 + static_cast<Index>(rng() % 40);
    o.algorithm = trial % 3 == 0 ? PackAlgorithm::kNextFit : PackAlgorithm::kBestFitDecreasing;
    o.oversize = trial % 5 == 0 ? Oversize::kDrop : Oversize::kSplit;
    const TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
    const Index packs = plan.summary().stream_packs;
    const Index p =
        packs == 0 ? 0 : static_cast<Index>(rng() % static_cast<std::uint64_t>(packs + 1));
    const Index read = plan.DocumentsReadAt(p);
    ASSERT_GE(read, 0);
    ASSERT_LE(read, n);
    EXPECT_EQ(plan.DocumentsReadAt(0), 0);
    EXPECT_EQ(plan.DocumentsReadAt(packs), n);  // the whole epoch read by its last pack
    if (p > 0) EXPECT_LE(plan.DocumentsReadAt(p - 1), read);
    // The documents in order from `read` on, replaced (shuffle off: order
    // positions are documents; shuffle on: replace whichever comes later).
    std::vector<Index> other = lengths;
    const Permutation order(n, o.seed, o.epoch);
    for (Index j = read; j < n; ++j) {
      const Index d = o.shuffle ? order.Forward(j) : j;
      other[static_cast<std::size_t>(d)] = static_cast<Index>(rng() % 200);
    }
    const TrainPlan changed(TrainDocuments::FromSpans(other), o);
    ASSERT_GE(changed.summary().stream_packs, p);
    for (Index s = 0; s < p; ++s) {
      const TrainStep a = plan.Step(0, s), b = changed.Step(0, s);
      ASSERT_EQ(a.rows.size(), b.rows.size());
      for (std::size_t r = 0; r < a.rows.size(); ++r) {
        ASSERT_EQ(a.rows[r].size(), b.rows[r].size()) << "trial " << trial << " pack " << s;
        for (std::size_t i = 0; i < a.rows[r].size(); ++i) {
          ASSERT_EQ(a.rows[r][i].item, b.rows[r][i].item);
          ASSERT_EQ(a.rows[r][i].start, b.rows[r][i].start);
          ASSERT_EQ(a.rows[r][i].length, b.rows[r][i].length);
        }
      }
    }
    EXPECT_THROW((void)plan.DocumentsReadAt(packs + 1), std::out_of_range);
    EXPECT_THROW((void)plan.DocumentsReadAt(-1), std::out_of_range);
  }
}

TEST(TrainPlanTest, ContinuousStepsCrossIntoTheNextEpochWithoutFiller) {
  std::vector<Index> lengths;
  std::mt19937_64 rng(5);
  for (int d = 0; d < 103; ++d) lengths.push_back(static_cast<Index>(1 + rng() % 60));
  TrainOptions o = PlanOptions(64, 3, 4);
  o.mode = TrainMode::kContinuous;
  o.epoch = 2;
  TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
  ASSERT_GT(plan.num_steps(), 1);
  EXPECT_EQ(plan.summary().filler_rows, 0);
  // The plan of the end state continues the stream: its step j is step
  // num_steps + j of this plan.
  const TrainState end = plan.summary().end;
  EXPECT_EQ(end.epoch, 3u);
  EXPECT_EQ(end.position, plan.summary().next_epoch_rows);
  TrainPlan next(TrainDocuments::FromSpans(lengths), o, end);
  for (Index j = 0; j < 5; ++j) {
    for (Index r = 0; r < 4; ++r) {
      const TrainStep t = plan.Step(r, plan.num_steps() + j);
      EXPECT_EQ(t.rows, next.Step(r, j).rows);
      EXPECT_EQ(t.filler_rows, 0);
    }
  }
  // Over two epochs every document twice: once per epoch.
  std::map<std::uint64_t, std::vector<PackItem>> by_epoch;
  for (Index s = 0; s < plan.num_steps() + next.num_steps(); ++s) {
    for (Index r = 0; r < 4; ++r) {
      const TrainStep t = plan.Step(r, s);
      for (std::size_t k = 0; k < t.rows.size(); ++k) {
        by_epoch[t.row_epochs[k]].insert(by_epoch[t.row_epochs[k]].end(), t.rows[k].begin(),
                                         t.rows[k].end());
      }
    }
  }
  EXPECT_TRUE(Tiles(lengths, {}, by_epoch[2]));
  EXPECT_TRUE(Tiles(lengths, {}, by_epoch[3]));
}

TEST(TrainPlanTest, StepsAreBalancedOnLognormalLengths) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<double> length(6.0, 1.2);
  std::vector<Index> lengths;
  for (int d = 0; d < 20000; ++d) lengths.push_back(1 + static_cast<Index>(length(rng)));
  for (CostModel cost : {CostModel::kTokens, CostModel::kSquaredLengths}) {
    TrainOptions o = PlanOptions(2048, 4, 8);
    o.cost = cost;
    TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
    // Rows are nearly full, so the token cost is nearly even by itself; the
    // deal must not make it worse than one short row on one rank.
    if (cost == CostModel::kTokens) {
      EXPECT_LT(plan.summary().max_full_step_imbalance, 0.01);
    }
    // Squared cost: the deal must beat dealing rows in stream order.
    double round_robin_max = 0, dealt_max = 0;
    double worst = 0;
    for (Index s = 0; s + 1 < plan.num_steps(); ++s) {
      std::vector<double> rr(8, 0.0);
      std::vector<TrainStep> all;
      for (Index r = 0; r < 8; ++r) all.push_back(plan.Step(r, s));
      std::vector<std::pair<Index, double>> packs;
      for (const TrainStep& t : all) {
        for (std::size_t k = 0; k < t.rows.size(); ++k) {
          double c = 0;
          for (const PackItem& p : t.rows[k]) {
            c += cost == CostModel::kTokens ? p.length : double(p.length) * p.length;
          }
          packs.push_back({t.row_packs[k], c});
        }
      }
      std::sort(packs.begin(), packs.end());
      double total = 0;
      for (std::size_t j = 0; j < packs.size(); ++j) {
        rr[j / 4] += packs[j].second;
        total += packs[j].second;
      }
      round_robin_max += *std::max_element(rr.begin(), rr.end()) / (total / 8) - 1;
      worst = std::max(worst, all[0].imbalance);
      dealt_max += all[0].imbalance;
      double heaviest = 0;
      for (const TrainStep& t : all) heaviest = std::max(heaviest, t.cost);
      EXPECT_NEAR(all[0].imbalance, heaviest / (total / 8) - 1, 1e-9);
    }
    EXPECT_LE(dealt_max, round_robin_max);
    EXPECT_LE(worst, plan.summary().max_step_imbalance + 1e-12);
  }
}

// One deal (issue 21): every step of a plan gives each rank the packs
// BalanceRanks gives it when dealt the step's packs (in stream order, costs
// from the rows' piece lengths) as one step, and the same rank costs: both
// deal through DealStep, TrainPlan each step on its own (BalanceRanks' first
// step carries nothing either). Short
// documents and small rows make equal pack costs, so the tie-breaks count.
TEST(TrainPlanTest, EveryStepIsDealtAsBalanceRanksDealsTheStepsPacks) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<Index> length(1, 12);
  std::vector<Index> lengths;
  for (int d = 0; d < 400; ++d) lengths.push_back(length(rng));
  for (CostModel cost : {CostModel::kTokens, CostModel::kSquaredLengths}) {
    for (TrainMode mode : {TrainMode::kPad, TrainMode::kDrop}) {
      TrainOptions o = PlanOptions(12, 3, 5);
      o.cost = cost;
      o.mode = mode;
      TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
      ASSERT_GT(plan.num_steps(), 2);
      for (Index s = 0; s < plan.num_steps(); ++s) {
        std::vector<TrainStep> ranks;
        std::vector<std::pair<Index, double>> packs;  // (stream index, cost)
        for (Index r = 0; r < o.world_size; ++r) {
          ranks.push_back(plan.Step(r, s));
          const TrainStep& t = ranks.back();
          for (std::size_t k = 0; k < t.rows.size(); ++k) {
            if (t.row_packs[k] < 0) continue;
            double c = 0;
            for (const PackItem& p : t.rows[k]) {
              c += cost == CostModel::kTokens ? double(p.length) : double(p.length) * p.length;
            }
            packs.push_back({t.row_packs[k], c});
          }
        }
        std::sort(packs.begin(), packs.end());
        std::vector<double> costs;
        for (const auto& [g, c] : packs) costs.push_back(c);
        const RankSchedule dealt = BalanceRanks(costs, o.world_size, o.batch_size);
        ASSERT_EQ(dealt.num_steps, 1) << "step " << s;
        for (Index r = 0; r < o.world_size; ++r) {
          // The same packs (a rank's rows are in stream order, its
          // BalanceRanks slots in decreasing cost), fillers last.
          std::vector<Index> expected;
          for (Index k = 0; k < o.batch_size; ++k) {
            const Index id = dealt.At(0, r, k);
            if (id >= 0) expected.push_back(packs[id].first);
          }
          std::sort(expected.begin(), expected.end());
          expected.resize(static_cast<std::size_t>(o.batch_size), -1);
          EXPECT_EQ(ranks[r].row_packs, expected) << "step " << s << " rank " << r;
          EXPECT_DOUBLE_EQ(ranks[r].cost, dealt.rank_costs[r]) << "step " << s << " rank " << r;
        }
      }
    }
  }
}

TEST(TrainPlanTest, EdgesEmptyFewerPacksThanRanksOneRankHugeWorld) {
  TrainOptions o = PlanOptions(8, 2);
  {
    TrainPlan plan(TrainDocuments::FromSpans({}), o);
    EXPECT_EQ(plan.num_steps(), 0);
    EXPECT_TRUE(plan.Audit().exactly_once);
    EXPECT_THROW((void)plan.Step(0, 0), std::out_of_range);
    o.mode = TrainMode::kContinuous;
    TrainPlan cont(TrainDocuments::FromSpans({}), o);
    EXPECT_EQ(cont.num_steps(), 0);
    EXPECT_THROW((void)cont.Step(0, 0), std::out_of_range);
    o.mode = TrainMode::kPad;
  }
  std::vector<Index> three = {3, 8, 20};  // 20 splits into 8, 8, 4
  o.world_size = 1;
  {
    TrainPlan plan(TrainDocuments::FromSpans(three), o);
    const TrainAudit a = plan.Audit();
    EXPECT_TRUE(a.exactly_once) << a.error;
    EXPECT_EQ(plan.summary().split_documents, 1);
  }
  o.world_size = Index{1} << 40;
  o.batch_size = 1;
  {
    TrainPlan plan(TrainDocuments::FromSpans(three), o);
    EXPECT_EQ(plan.num_steps(), 1);
    const Index packs = plan.summary().packs;
    EXPECT_EQ(plan.summary().filler_rows, o.world_size - packs);
    EXPECT_EQ(plan.Step(o.world_size - 1, 0).filler_rows, 1);
    EXPECT_TRUE(plan.Step(o.world_size - 1, 0).rows[0].empty());
    EXPECT_EQ(plan.Step(0, 0).filler_rows, 0);
    const TrainAudit a = plan.Audit();
    EXPECT_TRUE(a.exactly_once) << a.error;
    o.mode = TrainMode::kDrop;
    TrainPlan dropped(TrainDocuments::FromSpans(three), o);
    EXPECT_EQ(dropped.num_steps(), 0);
    EXPECT_EQ(dropped.summary().dropped_packs, packs);
    EXPECT_EQ(dropped.summary().dropped_tokens, 31);
  }
}

TEST(TrainPlanTest, BadInputNamesTheParameter) {
  std::vector<Index> lengths = {5, 6, 7};
  auto docs = TrainDocuments::FromSpans(lengths);
  auto expect = [&](TrainOptions o, const std::string& prefix, std::vector<Index> l = {5, 6, 7}) {
    const std::string e =
        loader_testing::ErrorOf([&] { TrainPlan p(TrainDocuments::FromSpans(l), o); });
    EXPECT_EQ(e.rfind(prefix + ": ", 0), 0u) << prefix << ": " << e;
  };
  TrainOptions ok = PlanOptions(8, 2, 2);
  // One option out of its domain at a time: the error names that option.
  const std::vector<std::pair<std::string, std::function<void(TrainOptions&)>>> bad = {
      {"seq_len", [](TrainOptions& o) { o.seq_len = 0; }},
      {"batch_size", [](TrainOptions& o) { o.batch_size = 0; }},
      {"world_size", [](TrainOptions& o) { o.world_size = 0; }},
      {"micro_batches", [](TrainOptions& o) { o.micro_batches = 0; }},
      {"buffer", [](TrainOptions& o) { o.buffer = 0; }},
      {"oversize", [](TrainOptions& o) { o.oversize = Oversize::kError; }},
      {"max_images", [](TrainOptions& o) { o.max_images = 2; }},
      {"position", [](TrainOptions& o) { o.position = 99; }},
      {"position", [](TrainOptions& o) { o.position = -1; }},
      // world * batch * seq_len rows of tokens overflow an Index.
      {"batch_size",
       [](TrainOptions& o) {
         o.world_size = Index{1} << 40;
         o.batch_size = Index{1} << 20;
         o.seq_len = Index{1} << 10;
       }},
  };
  for (const auto& [param, edit] : bad) {
    TrainOptions o = ok;
    edit(o);
    expect(o, param);
  }
  expect(ok, "lengths", {5, -1});
  const Index big = std::numeric_limits<Index>::max() / 2 + 1;
  expect(ok, "lengths", {big, big});
  EXPECT_THROW((void)ParseTrainMode("even"), std::invalid_argument);
  TrainPlan plan(docs, ok);
  EXPECT_THROW((void)plan.Step(2, 0), std::out_of_range);
  EXPECT_THROW((void)plan.Step(0, plan.num_steps()), std::out_of_range);
  EXPECT_THROW((void)plan.StateAt(plan.num_steps() + 1), std::out_of_range);
  // A state of another stream (another seq_len) is refused; another world
  // size is fine.
  TrainState state = plan.StateAt(0);
  TrainOptions other = ok;
  other.seq_len = 9;
  EXPECT_THROW(TrainPlan(docs, other, state), std::invalid_argument);
  other = ok;
  other.world_size = 3;
  EXPECT_NO_THROW(TrainPlan(docs, other, state));
  // Regression: a pad state loaded into a continuous plan was accepted (mode
  // was not in the stream) and its rows repeated tokens of the steps before
  // the state; continuous mode is another stream, drop the same as pad.
  other = ok;
  other.mode = TrainMode::kContinuous;
  EXPECT_THROW(TrainPlan(docs, other, state), std::invalid_argument);
  EXPECT_THROW(TrainPlan(docs, ok, TrainPlan(docs, other).StateAt(0)), std::invalid_argument);
  other.mode = TrainMode::kDrop;
  EXPECT_NO_THROW(TrainPlan(docs, other, state));
  std::vector<Index> changed = {5, 6, 8};
  EXPECT_THROW(TrainPlan(TrainDocuments::FromSpans(changed), ok, state), std::invalid_argument);
}

using loader_testing::Resealed;

std::string StateError(const std::string& text) {
  return loader_testing::ErrorOf([&] { (void)TrainStateFromJson(text); });
}

TEST(TrainPlanTest, StateJsonRoundTripsAndRejectsOtherObjects) {
  const TrainState s{7, 123456789012345, 0xfedcba9876543210ULL};
  const std::string text = TrainStateToJson(s);
  EXPECT_EQ(text,
            "{\"version\": 3, \"kind\": \"train_plan\", \"epoch\": 7, \"position\": "
            "123456789012345, \"stream\": \"fedcba9876543210\", \"checksum\": \"" +
                HexDigest(StateChecksum(
                    ParseJson(text.substr(0, text.find(", \"checksum\"")) + "}", "t"))) +
                "\"}");
  EXPECT_EQ(TrainStateFromJson(text), s);
  // Keys in another order, other whitespace: the same state.
  const Json j = ParseJson(text, "t");
  Json reordered = Json::MakeObject();
  for (auto it = j.object().rbegin(); it != j.object().rend(); ++it)
    reordered.Set(it->first, it->second);
  EXPECT_EQ(TrainStateFromJson(" " + WriteJson(reordered) + "\n"), s);
  const std::string sealed = TrainStateToJson({0, 0, 0});
  for (const std::string& bad :
       {std::string(""), std::string("{}"), std::string("[]"),
        Resealed(sealed, "\"kind\": \"train_plan\"", "\"kind\": \"loader\""),
        Resealed(sealed, "\"position\": 0", "\"position\": -1"),
        Resealed(sealed, ", \"position\": 0", ""),
        Resealed(sealed, "\"stream\": \"0000000000000000\"", "\"stream\": \"xyz\""),
        Resealed(sealed, "\"stream\": \"0000000000000000\"", "\"stream\": \"0\""),
        Resealed(sealed, "\"position\": 0", "\"position\": 0, \"extra\": 1"), sealed + " x"}) {
    EXPECT_EQ(StateError(bad).rfind("state: ", 0), 0u) << bad << ": " << StateError(bad);
  }
}

// Issue 20: the equal-steps state was unsealed (an edited position loaded
// silently), read by a hand-written parser (a duplicate key: the last won) and
// version 1 had the same layout as any relabelled text.
TEST(TrainPlanTest, RegressionTheStateIsSealedAndReadByTheStrictReader) {
  const std::string text = TrainStateToJson({2, 5, 0x1234});
  std::string edited = text;
  edited.replace(edited.find("\"position\": 5"), 13, "\"position\": 8");
  EXPECT_EQ(StateError(edited),
            "state: checksum: does not match the state's content (the state was edited or "
            "damaged)");
  std::string twice = text;
  twice.replace(twice.find("\"position\": 5"), 13, "\"position\": 8, \"position\": 5");
  EXPECT_EQ(StateError(twice).rfind("state: not valid JSON", 0), 0u) << StateError(twice);
  EXPECT_NE(StateError(twice).find("key \"position\" appears twice"), std::string::npos)
      << StateError(twice);
  // Older versions are refused naming the version and what changed (version
  // 2's stream was another hash: hand-mixed words, not base/hash.h's
  // Hasher), never read as a state of another data set.
  for (const auto& [v, why] : {std::pair<int, std::string>{1, "version 1 had no checksum"},
                               {2, "version 2's stream fingerprint was another hash"}}) {
    const std::string e =
        StateError(Resealed(text, "\"version\": 3", "\"version\": " + std::to_string(v)));
    EXPECT_EQ(e.rfind("state: version: a version " + std::to_string(v) +
                          " train_plan state; this shardkit reads version 3 (",
                      0),
              0u)
        << e;
    EXPECT_NE(e.find(why), std::string::npos) << e;
  }
  // The old unsealed text is refused naming the version, not read.
  EXPECT_EQ(StateError("{\"version\": 1, \"kind\": \"train_plan\", \"epoch\": 0, \"position\": "
                       "0, \"stream\": \"0000000000000000\"}")
                .rfind("state: version: a version 1", 0),
            0u);
}

// Issue 20: a continuous-mode state with position 2^62 replayed the stream for
// ever before checking it (10^8: over a minute); now refused in O(1).
TEST(TrainPlanTest, RegressionAHugePositionIsRefusedBeforeAnyReplay) {
  const std::vector<Index> lengths = {5, 6, 7, 30, 2, 9, 1};
  const auto docs = TrainDocuments::FromSpans(lengths);
  TrainOptions o = PlanOptions(8, 2, 2);
  o.mode = TrainMode::kContinuous;
  const Index packs = TrainPlan(docs, o).summary().stream_packs;
  for (const Index huge : {Index{1} << 62, Index{100000000}, std::numeric_limits<Index>::max()}) {
    TrainOptions x = o;
    x.position = huge;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(loader_testing::ErrorOf([&] { TrainPlan p(docs, x); }).rfind("position: ", 0), 0u);
    const std::string from_state = loader_testing::ErrorOf([&] {
      TrainPlan p(docs, o,
                  TrainStateFromJson(TrainStateToJson({0, huge, TrainPlan(docs, o).stream()})));
    });
    EXPECT_EQ(from_state.rfind("state: position: ", 0), 0u) << from_state;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  }
  // Past the end of the epoch's stream by one: refused, also in continuous
  // mode (which would otherwise run on into the next epoch); at the end: fine.
  for (const TrainMode mode : {TrainMode::kContinuous, TrainMode::kPad}) {
    TrainOptions x = o;
    x.mode = mode;
    x.position = packs + 1;
    EXPECT_EQ(loader_testing::ErrorOf([&] { TrainPlan p(docs, x); }),
              "position: " + std::to_string(packs + 1) + " is outside [0, " +
                  std::to_string(packs) + "] (the packs of epoch 0's stream)");
    x.position = packs;
    EXPECT_EQ(loader_testing::ErrorOf([&] { TrainPlan p(docs, x); }), "no error");
  }
}

// Issue 20: epoch 2^64 - 1 wrapped to 0 at the next epoch.
TEST(TrainPlanTest, RegressionAnEpochWithoutASuccessorIsRefused) {
  const std::vector<Index> lengths = {5, 6, 7, 30, 2};
  const auto docs = TrainDocuments::FromSpans(lengths);
  TrainOptions o = PlanOptions(8, 2);
  o.epoch = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(loader_testing::ErrorOf([&] {
              TrainPlan p(docs, o);
            }).rfind("epoch: 18446744073709551615 has no successor", 0),
            0u);
  EXPECT_EQ(StateError(TrainStateToJson({o.epoch, 0, 0}))
                .rfind("state: epoch: 18446744073709551615 has no successor", 0),
            0u);
  o.epoch = kMaxEpoch;
  const TrainPlan last(docs, o);
  EXPECT_EQ(last.summary().end.epoch, std::numeric_limits<std::uint64_t>::max());
}

// Issue 20: the stream fingerprint covers what identifies the documents beyond
// their lengths (a token source's content), so a state of another data set of
// the same lengths is refused saying the data differs.
TEST(TrainPlanTest, AStateOfOtherDataWithTheSameLengthsIsRefused) {
  const std::vector<Index> lengths = {5, 6, 7, 30, 2};
  auto a = TrainDocuments::FromSpans(lengths);
  auto b = TrainDocuments::FromSpans(lengths);
  a.identity = 1;
  b.identity = 2;
  TrainOptions o = PlanOptions(8, 1);
  const TrainPlan whole(a, o);
  const TrainState state = whole.StateAt(1);
  // On its own documents the state delivers the rest of the uninterrupted run.
  const TrainPlan rest(a, o, state);
  ASSERT_EQ(rest.num_steps(), whole.num_steps() - 1);
  for (Index s = 0; s < rest.num_steps(); ++s)
    EXPECT_EQ(rest.Step(0, s).rows, whole.Step(0, s + 1).rows);
  const std::string e = loader_testing::ErrorOf([&] { TrainPlan p(b, o, state); });
  EXPECT_EQ(e.rfind("state: was saved for another data set or packing configuration: the data "
                    "differs",
                    0),
            0u)
      << e;
}

TEST(TrainPlanTest, FingerprintCoversTheParameters) {
  std::vector<Index> lengths = {5, 6, 7, 30, 2};
  TrainOptions o = PlanOptions(8, 2, 2);
  auto fp = [&](TrainOptions x) {
    return TrainPlan(TrainDocuments::FromSpans(lengths), x).Fingerprint();
  };
  const std::uint64_t base = fp(o);
  TrainOptions x = o;
  x.seed = 1;
  EXPECT_NE(fp(x), base);
  x = o;
  x.world_size = 3;
  EXPECT_NE(fp(x), base);
  x = o;
  x.mode = TrainMode::kDrop;
  EXPECT_NE(fp(x), base);
  x = o;
  x.epoch = 1;
  EXPECT_NE(fp(x), base);
  EXPECT_EQ(fp(o), base);
}

// The stream fingerprint hashes every document's length and image count in
// blocks (Hasher::AddArray): a change of any one of them, on either side of a
// block boundary, changes it; the same documents give the same stream.
TEST(TrainPlanTest, StreamCoversEveryLengthAndImageCount) {
  std::mt19937_64 rng(21);
  const Index n = static_cast<Index>(Hasher::kArrayBlock) + 37;
  std::vector<Index> lengths(static_cast<std::size_t>(n)), images(lengths.size());
  for (Index& l : lengths) l = 1 + static_cast<Index>(rng() % 50);
  for (Index& i : images) i = static_cast<Index>(rng() % 3);
  TrainOptions o;
  o.seq_len = 64;
  o.batch_size = 2;
  auto stream = [&](const std::vector<Index>& l, const std::vector<Index>& i) {
    return TrainPlan(TrainDocuments::FromSpans(l, i), o).stream();
  };
  const std::uint64_t base = stream(lengths, images);
  EXPECT_EQ(stream(lengths, images), base);
  for (const Index d : {Index{0}, n / 2, static_cast<Index>(Hasher::kArrayBlock), n - 1}) {
    std::vector<Index> l = lengths, i = images;
    l[static_cast<std::size_t>(d)] += 1;
    EXPECT_NE(stream(l, images), base) << d;
    i[static_cast<std::size_t>(d)] += 1;
    EXPECT_NE(stream(lengths, i), base) << d;
  }
  // Two documents swapped: the same multiset of lengths, another stream.
  std::vector<Index> swapped = lengths;
  std::size_t j = 1;
  while (swapped[j] == swapped[0]) ++j;
  std::swap(swapped[0], swapped[j]);
  EXPECT_NE(stream(swapped, images), base);
}

}  // namespace
}  // namespace shardkit
