#include "shardkit/eval/eval_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

struct Config {
  Index n, w, b, d;
  Split split;
};

// The reference: lmms-eval's islice for round_robin, tfds even_splits for
// contiguous, written out here independently of ShardPlan.
std::vector<Index> ReferenceItems(Index n, Index w, Index r, Split split) {
  std::vector<Index> out;
  if (split == Split::kRoundRobin) {
    for (Index i = r; i < n; i += w) out.push_back(i);
  } else {
    const Index q = n / w, extra = n % w;
    const Index begin = r * q + std::min(r, extra);
    const Index size = q + (r < extra ? 1 : 0);
    for (Index i = begin; i < begin + size; ++i) out.push_back(i);
  }
  return out;
}

void CheckPlan(const Config& c) {
  SCOPED_TRACE(testing::Message() << "N=" << c.n << " W=" << c.w << " B=" << c.b << " D=" << c.d
                                  << " split=" << SplitName(c.split));
  EvalOptions o;
  o.devices = c.d;
  o.split = c.split;
  EvalPlan plan(c.n, c.w, c.b, o);
  const Index per_rank_max = (c.n + c.w - 1) / c.w;
  const Index steps = (per_rank_max + c.b - 1) / c.b;
  ASSERT_EQ(plan.num_steps(), steps);
  ASSERT_EQ(plan.TotalPadding(), steps * c.w * c.b - c.n);
  std::vector<int> seen(c.n, 0);
  std::vector<std::vector<double>> outputs(c.w);
  std::vector<Index> idx(c.b);
  std::unique_ptr<bool[]> mask(new bool[c.b]);
  for (Index r = 0; r < c.w; ++r) {
    const std::vector<Index> want = ReferenceItems(c.n, c.w, r, c.split);
    ASSERT_EQ(plan.Real(r), static_cast<Index>(want.size()));
    std::vector<Index> real;
    for (Index s = 0; s < plan.num_steps(); ++s) {
      plan.Batch(r, s, idx.data(), mask.get());
      for (Index j = 0; j < c.b; ++j) {
        ASSERT_GE(idx[j], 0);  // padded slots hold a valid index too
        ASSERT_LT(idx[j], c.n);
        if (mask[j]) {
          ++seen[idx[j]];
          real.push_back(idx[j]);
          ASSERT_EQ(s * c.b + j, static_cast<Index>(real.size()) - 1) << "real slots first";
        }
        outputs[r].push_back(mask[j] ? 3.0 * idx[j] + 1 : -1.0);
      }
    }
    ASSERT_EQ(real, want);
    ASSERT_EQ(plan.Padding(r), steps * c.b - static_cast<Index>(want.size()));
  }
  for (Index i = 0; i < c.n; ++i) ASSERT_EQ(seen[i], 1) << "item " << i;
  const std::vector<double> ordered = plan.Unshard(outputs);
  ASSERT_EQ(static_cast<Index>(ordered.size()), c.n);
  for (Index i = 0; i < c.n; ++i) ASSERT_EQ(ordered[i], 3.0 * i + 1);
  for (Index i = 0; i < c.n; i += 1 + c.n / 7) {
    const auto slot = plan.Locate(i);
    plan.Batch(slot.rank, slot.step, idx.data(), mask.get());
    ASSERT_TRUE(mask[slot.slot]);
    ASSERT_EQ(idx[slot.slot], i);
  }
}

TEST(EvalPlanTest, EveryItemExactlyOnceInEqualStepsOverRandomConfigs) {
  std::mt19937_64 rng(2024);
  for (int t = 0; t < 400; ++t) {
    const Index d = Index{1} << (rng() % 4);
    Config c{static_cast<Index>(rng() % 300), 1 + static_cast<Index>(rng() % 12),
             d * (1 + static_cast<Index>(rng() % 9)), d,
             rng() % 2 ? Split::kRoundRobin : Split::kContiguous};
    CheckPlan(c);
  }
}

TEST(EvalPlanTest, EdgesHoldExactlyOnce) {
  for (Split split : {Split::kRoundRobin, Split::kContiguous}) {
    CheckPlan({0, 1, 1, 1, split});  // nothing to evaluate: zero steps
    CheckPlan({0, 5, 4, 2, split});
    CheckPlan({3, 8, 4, 1, split});  // fewer items than ranks
    CheckPlan({1, 1, 1, 1, split});  // world 1
    CheckPlan({17, 1, 4, 4, split});
    CheckPlan({64, 8, 8, 8, split});  // no padding at all
    CheckPlan({65, 8, 8, 8, split});  // one item more: a whole extra step
  }
}

TEST(EvalPlanTest, FlaxFullEvalCaseGivesTwoStepsOnEveryHost) {
  // Flax "full eval": 4097 examples on 8 hosts, per-host batch 512 (8 devices
  // x 64). Evenly split, the first host holds 513 examples: 2 batches there
  // and 1 elsewhere if each host batches its own share; shardkit runs 2 on all.
  for (Split split : {Split::kRoundRobin, Split::kContiguous}) {
    EvalOptions o;
    o.devices = 8;
    o.split = split;
    EvalPlan plan(4097, 8, 512, o);
    EXPECT_EQ(plan.num_steps(), 2);
    EXPECT_EQ(plan.device_batch(), 64);
    EXPECT_EQ(plan.Real(0), 513);
    for (Index r = 1; r < 8; ++r) EXPECT_EQ(plan.Real(r), 512);
    EXPECT_EQ(plan.TotalPadding(), 2 * 8 * 512 - 4097);
  }
}

TEST(EvalPlanTest, HugeCountsDoNotOverflow) {
  const Index n = std::numeric_limits<Index>::max() - 5;
  EvalPlan plan(n, 7, 1);
  const Index q = n / 7 + (n % 7 != 0);
  EXPECT_EQ(plan.num_steps(), q);
  Index idx;
  bool mask;
  plan.Batch(6, plan.num_steps() - 1, &idx, &mask);
  EXPECT_GE(idx, 0);
  EXPECT_THROW(EvalPlan(n, 2, Index{1} << 62), std::invalid_argument);  // 2^63 slots
}

// Regression: eval-plan --batch 9223372036854775807 said "--items: ...
// overflows"; the batch is what makes the slot count overflow.
TEST(EvalPlanTest, HugeBatchOverflowNamesBatchSize) {
  try {
    EvalPlan plan(10, 2, std::numeric_limits<Index>::max());
    FAIL() << "accepted 2^63-1 slots per step on 2 ranks";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("batch_size: 9223372036854775807", 0), 0u) << what;
  }
}

// Regression: EvalPlan(3, 2^40, 1).source_rows() walked every one of 2^40
// ranks (no answer); only ranks [0, min(W, M)) hold items.
TEST(EvalPlanTest, RegressionSourceRowsOfAHugeWorldWalkOnlyTheRanksHoldingItems) {
  for (Split split : {Split::kRoundRobin, Split::kContiguous}) {
    EvalOptions o;
    o.split = split;
    EvalPlan plan(3, Index{1} << 62, 1, o);
    // One step of one slot per rank: item i sits on rank i, row i.
    EXPECT_EQ(plan.SourceRows(), (std::vector<Index>{0, 1, 2}));
  }
  // One row per item: a window too large to list is refused naming num_items
  // (it was "cannot create std::vector larger than max_size()").
  // (2^62 rows are past max_size(): refused before any allocation, also under
  // ASan, which aborts on a huge one; test_sweep_regressions.py asks for 2^50.)
  for (Index n : {Index{1} << 62, (Index{1} << 62) + 12345}) {
    try {
      (void)EvalPlan(n, 3, 4).SourceRows();
      ADD_FAILURE() << "listed " << n << " rows";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("num_items: " + std::to_string(n) + " items need", 0),
                0u)
          << e.what();
    }
  }
  // Against the listed slots of every rank where W > M is small enough to list.
  for (Index w : {5, 64}) {
    EvalPlan plan(4, w, 2);
    std::vector<Index> want(4, -1);
    const Index per_rank = plan.num_steps() * plan.batch_size();
    for (Index r = 0; r < w; ++r) {
      for (Index step = 0; step < plan.num_steps(); ++step) {
        std::vector<Index> idx(static_cast<size_t>(plan.batch_size()));
        std::unique_ptr<bool[]> mask(new bool[plan.batch_size()]);
        plan.Batch(r, step, idx.data(), mask.get());
        for (Index j = 0; j < plan.batch_size(); ++j) {
          if (mask[j]) want[idx[j]] = r * per_rank + step * plan.batch_size() + j;
        }
      }
    }
    EXPECT_EQ(plan.SourceRows(), want) << "W=" << w;
  }
}

TEST(EvalPlanTest, MinDeviceBatchRaisesThePerDeviceBatchAsFlaxPads) {
  EvalOptions o;
  o.devices = 4;
  o.min_device_batch = 16;
  EvalPlan plan(100, 2, 8, o);  // 2 per device, raised to 16
  EXPECT_EQ(plan.device_batch(), 16);
  EXPECT_EQ(plan.batch_size(), 64);
  EXPECT_EQ(plan.num_steps(), 1);
  o.min_device_batch = 1;  // below B / D: no effect
  EXPECT_EQ(EvalPlan(100, 2, 8, o).batch_size(), 8);
}

TEST(EvalPlanTest, PadForDevicesFollowsPadShardUnpad) {
  // flax.jax_utils.pad_shard_unpad: db = ceil(n / d), at least min_device_batch.
  for (Index n = 0; n < 50; ++n) {
    for (Index d = 1; d < 9; ++d) {
      for (Index m : {0, 3, 8}) {
        DevicePadding p = PadForDevices(n, d, m);
        Index db = (n + d - 1) / d;
        if (db < m) db = m;
        EXPECT_EQ(p.device_batch, db);
        EXPECT_EQ(p.padding, db * d - n);
      }
    }
  }
  EXPECT_THROW((void)PadForDevices(-1, 2), std::invalid_argument);
  EXPECT_THROW((void)PadForDevices(4, 0), std::invalid_argument);
}

TEST(EvalPlanTest, ShuffledPlansStillCoverEveryItemOnce) {
  EvalOptions o;
  o.shuffle = true;
  o.seed = 7;
  EvalPlan plan(1000, 3, 16, o);
  std::set<Index> seen;
  std::vector<Index> idx(16);
  std::unique_ptr<bool[]> mask(new bool[16]);
  std::vector<std::vector<Index>> outs(3);
  for (Index r = 0; r < 3; ++r) {
    for (Index s = 0; s < plan.num_steps(); ++s) {
      plan.Batch(r, s, idx.data(), mask.get());
      for (Index j = 0; j < 16; ++j) {
        if (mask[j]) {
          EXPECT_TRUE(seen.insert(idx[j]).second);
        }
        outs[r].push_back(idx[j]);
      }
    }
  }
  EXPECT_EQ(seen.size(), 1000u);
  std::vector<Index> ordered = plan.Unshard(outs);
  for (Index i = 0; i < 1000; ++i) ASSERT_EQ(ordered[i], i);
}

TEST(EvalPlanTest, BadInputNamesTheParameter) {
  auto message = [](auto f) { return base_testing::ErrorOf<std::exception>(f); };
  EXPECT_EQ(message([] { EvalPlan(10, 2, 0); }).rfind("batch_size: ", 0), 0u);
  EvalOptions o;
  o.devices = 3;
  EXPECT_EQ(message([&] { EvalPlan(10, 2, 8, o); }).rfind("devices: 3 devices do not divide", 0),
            0u);
  EXPECT_THROW(EvalPlan(10, 2, 8, o), std::invalid_argument);
  EXPECT_THROW(EvalPlan(-1, 2, 8), std::invalid_argument);
  EXPECT_THROW(EvalPlan(10, 0, 8), std::invalid_argument);
  o.devices = 1;
  o.split = Split::kBalanced;
  EXPECT_THROW(EvalPlan(10, 2, 8, o), std::invalid_argument);
  EvalPlan plan(10, 2, 4);
  Index idx[4];
  bool mask[4];
  EXPECT_THROW(plan.Batch(2, 0, idx, mask), std::out_of_range);
  EXPECT_THROW(plan.Batch(-1, 0, idx, mask), std::out_of_range);
  EXPECT_EQ(message([&] { plan.Batch(2, 0, idx, mask); }).rfind("rank: 2 is outside [0, 2)", 0),
            0u);
  EXPECT_THROW(plan.Batch(0, 2, idx, mask), std::out_of_range);
  EXPECT_THROW((void)plan.Real(5), std::out_of_range);
  std::vector<std::vector<int>> wrong = {std::vector<int>(8), std::vector<int>(7)};
  EXPECT_EQ(message([&] {
              (void)plan.Unshard(wrong);
            }).rfind("outputs_by_rank: rank 1 has 7 rows, expected 8", 0),
            0u);
  std::vector<std::vector<int>> one = {std::vector<int>(8)};
  EXPECT_THROW((void)plan.Unshard(one), std::invalid_argument);
  EXPECT_THROW((void)plan.Locate(10), std::out_of_range);
  EXPECT_THROW((void)StepsForCount(5, 0), std::invalid_argument);
  EXPECT_THROW((void)StepsForCount(-1, 2), std::invalid_argument);
}

TEST(EvalPlanTest, FingerprintSeparatesEveryParameter) {
  std::set<std::uint64_t> prints;
  prints.insert(EvalPlan(100, 4, 8).Fingerprint());
  prints.insert(EvalPlan(101, 4, 8).Fingerprint());
  prints.insert(EvalPlan(100, 5, 8).Fingerprint());
  prints.insert(EvalPlan(100, 4, 16).Fingerprint());
  EvalOptions o;
  o.devices = 2;
  prints.insert(EvalPlan(100, 4, 8, o).Fingerprint());
  o = {};
  o.split = Split::kContiguous;
  prints.insert(EvalPlan(100, 4, 8, o).Fingerprint());
  o = {};
  o.shuffle = true;
  prints.insert(EvalPlan(100, 4, 8, o).Fingerprint());
  o.seed = 1;
  prints.insert(EvalPlan(100, 4, 8, o).Fingerprint());
  o.epoch = 1;
  prints.insert(EvalPlan(100, 4, 8, o).Fingerprint());
  EXPECT_EQ(prints.size(), 9u);
  EXPECT_EQ(EvalPlan(100, 4, 8).Fingerprint(), EvalPlan(100, 4, 8).Fingerprint());
}

TEST(EvalPlanTest, CompareFingerprintsNamesTheOddRanks) {
  EXPECT_EQ(CompareFingerprints({5, 5, 5}), "");
  EXPECT_EQ(CompareFingerprints({}), "");
  const std::string m = CompareFingerprints({5, 5, 6, 5});
  EXPECT_NE(m.find("plan fingerprint mismatch: 1 of 4 ranks"), std::string::npos) << m;
  EXPECT_NE(m.find("ranks 2 ("), std::string::npos) << m;
}

// Regression: a mismatch named only fingerprints (and "EvalPlan" for a
// training plan); it now names the kind and the parameter that differs.
TEST(EvalPlanTest, ComparePlanDescriptionsNamesTheKindAndTheParameter) {
  const std::string a = "TrainPlan(num_documents=9, seq_len=16, batch_size=2, shuffle=False)";
  const std::string b = "TrainPlan(num_documents=9, seq_len=16, batch_size=3, shuffle=False)";
  EXPECT_EQ(ComparePlanDescriptions({a, a}), "");
  EXPECT_EQ(ComparePlanDescriptions({a, a, b, b}),
            "TrainPlan mismatch: rank 2 has batch_size=3 where rank 0 has batch_size=2 (ranks "
            "that differ from rank 0: 2, 3); every rank must build the TrainPlan with the same "
            "parameters and shardkit version");
  const std::string w = "EvalPlan(num_items=5, window=[0, 3), split=round_robin)";
  const std::string x = "EvalPlan(num_items=5, window=[1, 3), split=round_robin, seed=4)";
  const std::string m = ComparePlanDescriptions({w, x});
  EXPECT_NE(m.find("rank 1 has window=[1, 3), seed=4 where rank 0 has window=[0, 3), no seed"),
            std::string::npos)
      << m;
  EXPECT_NE(ComparePlanDescriptions({a, w}).find("rank 1 has an EvalPlan where rank 0 has a "
                                                 "TrainPlan"),
            std::string::npos);
  EXPECT_EQ(CompareFingerprints({5, 6}).find("EvalPlan"), std::string::npos);
}

// Every rank of a random mesh (1-4 axes, random data axes, any rank order)
// builds EvalPlan(N, roles, B): replicas run identical steps, and unsharding
// every rank's outputs through ReplicaSources yields each item exactly once,
// taken from the reporter (least rank) of its replica group.
TEST(EvalPlanTest, RolesGiveReplicasIdenticalStepsAndUnshardCountsEachItemOnce) {
  std::mt19937_64 rng(29);
  const char* names[] = {"dp", "tp", "pp", "cp"};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<MeshAxis> axes;
    const int num_axes = 1 + static_cast<int>(rng() % 4);
    Index size = 1;
    for (int a = 0; a < num_axes; ++a) {
      axes.push_back({names[a], 1 + static_cast<Index>(rng() % 3)});
      size *= axes.back().size;
    }
    std::vector<std::string> data;
    for (int a = 0; a < num_axes; ++a) {
      if (rng() % 2) data.push_back(names[a]);
    }
    std::shuffle(data.begin(), data.end(), rng);
    std::vector<Index> owners(size);
    std::iota(owners.begin(), owners.end(), Index{0});
    std::shuffle(owners.begin(), owners.end(), rng);
    const Mesh mesh(axes, owners);
    const Index n = static_cast<Index>(rng() % 40), b = 1 + static_cast<Index>(rng() % 4);
    SCOPED_TRACE(testing::Message()
                 << "trial " << trial << " mesh " << mesh.ToString() << " N=" << n << " B=" << b);
    std::vector<EvalPlan> plans;
    std::vector<Index> dp_rank_by_rank;
    for (Index g = 0; g < size; ++g) {
      plans.emplace_back(n, DataRoles(mesh, data, g), b);
      dp_rank_by_rank.push_back(plans.back().roles()->dp_rank());
    }
    const Index dp_size = plans[0].world_size();
    ASSERT_EQ(dp_size, plans[0].roles()->dp_size());
    const std::vector<Index> sources = ReplicaSources(dp_rank_by_rank, dp_size);
    ASSERT_EQ(static_cast<Index>(sources.size()), dp_size);
    // Outputs: rank g writes item * 1000 + g, so the row says who produced it.
    std::vector<std::vector<Index>> outputs(size);
    const Index steps = plans[0].num_steps();
    for (Index g = 0; g < size; ++g) {
      const EvalPlan& p = plans[g];
      ASSERT_EQ(p.Fingerprint(), plans[0].Fingerprint());
      const DataRoles& r = *p.roles();
      EXPECT_EQ(r.reports(), sources[r.dp_rank()] == g);
      EXPECT_EQ(r.reporter(), sources[r.dp_rank()]);
      std::vector<Index> idx(b), mine, theirs(b);
      std::unique_ptr<bool[]> mask(new bool[b]), other(new bool[b]);
      for (Index s = 0; s < steps; ++s) {
        p.Batch(r.dp_rank(), s, idx.data(), mask.get());
        for (Index peer : r.replica_group()) {  // the same step on every replica
          plans[peer].Batch(plans[peer].roles()->dp_rank(), s, theirs.data(), other.get());
          ASSERT_EQ(theirs, idx);
        }
        for (Index i : idx) outputs[g].push_back(i * 1000 + g);
      }
    }
    std::vector<std::vector<Index>> by_dp_rank;
    for (Index d = 0; d < dp_size; ++d) by_dp_rank.push_back(outputs[sources[d]]);
    const std::vector<Index> items = plans[0].Unshard(by_dp_rank);
    ASSERT_EQ(static_cast<Index>(items.size()), n);
    for (Index i = 0; i < n; ++i) {
      EXPECT_EQ(items[i] / 1000, i);
      const Index producer = items[i] % 1000;
      EXPECT_TRUE(plans[producer].roles()->reports()) << "item " << i << " from rank " << producer;
    }
  }
}

TEST(EvalPlanTest, ReplicaSourcesRejectsInconsistentRolesNamingDpRanks) {
  const std::vector<Index> fine = {0, 0, 1, 1};
  EXPECT_EQ(ReplicaSources(fine, 2), (std::vector<Index>{0, 2}));
  const std::vector<Index> swapped = {1, 0, 0, 1};
  EXPECT_EQ(ReplicaSources(swapped, 2), (std::vector<Index>{1, 0}));
  auto message = [](const std::vector<Index>& v, Index dp_size) {
    return base_testing::ErrorOf([&] { static_cast<void>(ReplicaSources(v, dp_size)); });
  };
  EXPECT_EQ(message({0, 0, 0, 0}, 2),
            "dp_ranks: no rank has dp_rank 1 of 2 (did every rank build its roles from the "
            "same mesh?)");
  EXPECT_EQ(message({0, 3}, 2), "dp_ranks: rank 1 has dp_rank 3, outside [0, 2)");
  EXPECT_EQ(message({0, -1}, 2), "dp_ranks: rank 1 has dp_rank -1, outside [0, 2)");
  EXPECT_EQ(message({0}, 2),
            "dp_ranks: 1 ranks cannot hold 2 data-parallel ranks (every dp_rank needs a rank)");
  EXPECT_EQ(message({}, 0).rfind("dp_size", 0), 0u);
}

TEST(EvalPlanTest, StepsForCountIsTheCeilingOfTheLargestShare) {
  EXPECT_EQ(StepsForCount(0, 4), 0);
  EXPECT_EQ(StepsForCount(1, 4), 1);
  EXPECT_EQ(StepsForCount(8, 4), 2);
  EXPECT_EQ(StepsForCount(9, 4), 3);
}

// lm-eval / lmms-eval read --limit 0 as "every document" (`int(limit) if limit
// else None`) and islice from an offset beyond the data yields nothing; the
// harness window gives exactly their items, the strict default refuses or
// gives none. Reference: islice(range(N), r + offset, stop, W) written out.
std::vector<Index> HarnessItems(Index n, Index w, Index r, Index offset,
                                std::optional<Index> limit) {
  const std::optional<Index> stop =
      limit && *limit != 0 ? std::optional<Index>(offset + *limit) : std::nullopt;
  std::vector<Index> out;
  for (Index i = r + offset; i < n && (!stop || i < *stop); i += w) out.push_back(i);
  return out;
}

TEST(EvalPlanTest, HarnessWindowGivesLmEvalItemsForLimitZeroAndOffsetBeyondTheData) {
  std::mt19937_64 rng(13);
  for (int t = 0; t < 300; ++t) {
    const Index n = static_cast<Index>(rng() % 40), w = 1 + static_cast<Index>(rng() % 5);
    const Index b = 1 + static_cast<Index>(rng() % 4);
    EvalOptions o;
    o.window = WindowRule::kHarness;
    o.offset = static_cast<Index>(rng() % 50);
    if (rng() % 3) o.limit = static_cast<Index>(rng() % 45);
    const EvalPlan plan(n, w, b, o);
    Index total = 0;
    for (Index r = 0; r < w; ++r) {
      std::vector<Index> real;
      std::vector<Index> idx(static_cast<size_t>(b));
      std::unique_ptr<bool[]> mask(new bool[static_cast<size_t>(b)]);
      for (Index s = 0; s < plan.num_steps(); ++s) {
        plan.Batch(r, s, idx.data(), mask.get());
        for (Index j = 0; j < b; ++j) {
          if (mask[j]) real.push_back(idx[j]);
        }
      }
      const auto want = HarnessItems(n, w, r, o.offset, o.limit);
      EXPECT_EQ(real, want) << "n=" << n << " w=" << w << " r=" << r << " offset=" << o.offset
                            << " limit=" << (o.limit ? *o.limit : -1);
      total += static_cast<Index>(want.size());
    }
    EXPECT_EQ(plan.window_size(), total);
    // Unshard maps every window item back in order.
    std::vector<std::vector<Index>> outputs(static_cast<size_t>(w));
    for (Index r = 0; r < w; ++r) {
      std::vector<Index> idx(static_cast<size_t>(b));
      std::unique_ptr<bool[]> mask(new bool[static_cast<size_t>(b)]);
      for (Index s = 0; s < plan.num_steps(); ++s) {
        plan.Batch(r, s, idx.data(), mask.get());
        outputs[static_cast<size_t>(r)].insert(outputs[static_cast<size_t>(r)].end(), idx.begin(),
                                               idx.end());
      }
    }
    const std::vector<Index> items = plan.Unshard(outputs);
    ASSERT_EQ(static_cast<Index>(items.size()), plan.window_size());
    for (Index i = 0; i < plan.window_size(); ++i) {
      EXPECT_EQ(items[static_cast<size_t>(i)], plan.window_begin() + i);
      const auto slot = plan.Locate(plan.window_begin() + i);
      EXPECT_EQ(slot.rank, i % w);
    }
  }
}

TEST(EvalPlanTest, StrictWindowRefusesOffsetBeyondTheDataAndReadsLimitZeroAsNone) {
  EvalOptions o;
  o.offset = 11;
  try {
    EvalPlan(10, 2, 4, o);
    ADD_FAILURE() << "offset 11 of 10 items accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("offset: 11", 0), 0u) << e.what();
  }
  o.offset = 3;
  o.limit = 0;
  const EvalPlan none(10, 2, 4, o);
  EXPECT_EQ(none.window_size(), 0);
  EXPECT_EQ(none.num_steps(), 0);
  o.window = WindowRule::kHarness;
  const EvalPlan all(10, 2, 4, o);
  EXPECT_EQ(all.window_begin(), 3);
  EXPECT_EQ(all.window_size(), 7);
  EXPECT_NE(all.Fingerprint(), EvalPlan(10, 2, 4).Fingerprint());
  EXPECT_EQ(EvalPlan(10, 2, 4).Fingerprint(), EvalPlan(10, 2, 4, EvalOptions{}).Fingerprint());
  o.limit = -1;
  EXPECT_THROW(EvalPlan(10, 2, 4, o), std::invalid_argument);
  o.limit.reset();
  o.offset = -1;
  EXPECT_THROW(EvalPlan(10, 2, 4, o), std::invalid_argument);
  EXPECT_THROW((void)ParseWindowRule("lenient"), std::invalid_argument);
}

}  // namespace
}  // namespace shardkit
