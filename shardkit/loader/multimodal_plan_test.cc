#include "shardkit/loader/multimodal_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "shardkit/sharding/permutation.h"

namespace shardkit {
namespace {

SampleTable RandomTable(std::mt19937_64& rng, Index n, Index max_len, Index max_images,
                        Index max_vision) {
  std::vector<Index> lengths(static_cast<std::size_t>(n)), counts(lengths.size());
  std::vector<Index> vision;
  for (Index s = 0; s < n; ++s) {
    lengths[static_cast<std::size_t>(s)] =
        static_cast<Index>(rng() % static_cast<std::uint64_t>(max_len + 1));
    counts[static_cast<std::size_t>(s)] =
        static_cast<Index>(rng() % static_cast<std::uint64_t>(max_images + 1));
    for (Index i = 0; i < counts[static_cast<std::size_t>(s)]; ++i) {
      vision.push_back(1 + static_cast<Index>(rng() % static_cast<std::uint64_t>(max_vision)));
    }
  }
  return SampleTable::Make(lengths, counts, vision);
}

MultimodalOptions RandomOptions(std::mt19937_64& rng) {
  MultimodalOptions o;
  o.seq_len = 40 + static_cast<Index>(rng() % 100);
  o.world_size = 1 + static_cast<Index>(rng() % 6);
  o.rows_per_rank = 1 + static_cast<Index>(rng() % 3);
  if (rng() % 2) o.max_images = static_cast<Index>(rng() % 9);
  if (rng() % 2) o.max_vision_tokens = static_cast<Index>(rng() % 200);
  if (rng() % 3 == 0) o.max_images_per_sample = static_cast<Index>(rng() % 4);
  o.vision_cost = rng() % 2 ? VisionCost::kTokens : VisionCost::kSquared;
  o.mode = rng() % 2 ? MultimodalMode::kPad : MultimodalMode::kDrop;
  o.shuffle = rng() % 2;
  o.seed = rng();
  o.epoch = rng() % 3;
  return o;
}

bool Oversize(const SampleTable& t, Index s, const MultimodalOptions& o) {
  return t.lengths[static_cast<std::size_t>(s)] > o.seq_len ||
         (o.max_images && t.Images(s) > *o.max_images) ||
         (o.max_images_per_sample && t.Images(s) > *o.max_images_per_sample) ||
         (o.max_vision_tokens && t.VisionTokens(s) > *o.max_vision_tokens);
}

// Every sample each step delivers, in (step, rank, row) order; checks the
// budgets and the shape of every row on the way.
std::vector<Index> Delivered(const MultimodalPlan& plan, Index from = 0, Index to = -1) {
  const MultimodalOptions& o = plan.options();
  const SampleTable& t = plan.table();
  if (to < 0) to = plan.num_steps();
  std::vector<Index> out;
  for (Index s = from; s < to; ++s) {
    for (Index r = 0; r < o.world_size; ++r) {
      std::vector<std::vector<Index>> rows = plan.Rows(r, s);
      EXPECT_EQ(static_cast<Index>(rows.size()), o.rows_per_rank);
      for (const auto& row : rows) {
        Index len = 0, images = 0, vision = 0;
        for (Index x : row) {
          len += t.lengths[static_cast<std::size_t>(x)];
          images += t.Images(x);
          vision += t.VisionTokens(x);
          out.push_back(x);
        }
        EXPECT_LE(len, o.seq_len);
        EXPECT_LE(images, o.max_images.value_or(images));
        EXPECT_LE(vision, o.max_vision_tokens.value_or(vision));
        if (row.empty()) {
          EXPECT_EQ(s, plan.num_steps() - 1);
        }
      }
    }
  }
  return out;
}

TEST(MultimodalPlanTest, BudgetsHoldAndEveryEligibleSampleIsDeliveredOrCountedOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    MultimodalOptions o = RandomOptions(rng);
    SampleTable t = RandomTable(rng, static_cast<Index>(rng() % 200), 150, 6, 60);
    MultimodalPlan plan(t, o);
    std::vector<Index> got = Delivered(plan);
    Index delivered = static_cast<Index>(got.size());
    std::vector<Index> dropped(plan.dropped_samples().begin(), plan.dropped_samples().end());
    got.insert(got.end(), dropped.begin(), dropped.end());
    std::sort(got.begin(), got.end());
    EXPECT_TRUE(std::adjacent_find(got.begin(), got.end()) == got.end()) << trial;
    Index oversize = 0;
    for (Index s = 0; s < t.size(); ++s) oversize += Oversize(t, s, o);
    EXPECT_EQ(plan.summary().dropped, oversize);
    for (Index s : dropped) EXPECT_TRUE(Oversize(t, s, o));
    // Pad: everything; drop: everything but the samples of the dropped packs.
    EXPECT_EQ(delivered + oversize + plan.summary().dropped_samples, t.size()) << trial;
    if (o.mode == MultimodalMode::kPad) {
      EXPECT_EQ(plan.summary().dropped_samples, 0);
    }
    EXPECT_LT(plan.summary().dropped_packs, o.world_size * o.rows_per_rank);
  }
}

TEST(MultimodalPlanTest, PacksMatchNaiveFirstFitDecreasing) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    MultimodalOptions o = RandomOptions(rng);
    SampleTable t = RandomTable(rng, static_cast<Index>(rng() % 150), 100, 5, 50);
    MultimodalPlan plan(t, o);
    std::vector<Index> order(static_cast<std::size_t>(t.size()));
    std::iota(order.begin(), order.end(), Index{0});
    if (o.shuffle && t.size() > 0) {
      Permutation perm(t.size(), o.seed, o.epoch);
      for (Index k = 0; k < t.size(); ++k) order[static_cast<std::size_t>(k)] = perm.Forward(k);
    }
    std::erase_if(order, [&](Index s) { return Oversize(t, s, o); });
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
      return t.lengths[static_cast<std::size_t>(a)] > t.lengths[static_cast<std::size_t>(b)];
    });
    struct Bin {
      Index len = 0, images = 0, vision = 0;
      std::vector<Index> samples;
    };
    std::vector<Bin> bins;
    for (Index s : order) {
      auto fits = [&](const Bin& b) {
        return b.len + t.lengths[static_cast<std::size_t>(s)] <= o.seq_len &&
               (!o.max_images || b.images + t.Images(s) <= *o.max_images) &&
               (!o.max_vision_tokens || b.vision + t.VisionTokens(s) <= *o.max_vision_tokens);
      };
      auto it = std::find_if(bins.begin(), bins.end(), fits);
      if (it == bins.end()) it = bins.insert(bins.end(), Bin{});
      it->len += t.lengths[static_cast<std::size_t>(s)];
      it->images += t.Images(s);
      it->vision += t.VisionTokens(s);
      it->samples.push_back(s);
    }
    ASSERT_EQ(plan.summary().packs, static_cast<Index>(bins.size())) << trial;
    for (std::size_t p = 0; p < bins.size(); ++p) {
      std::span<const Index> got = plan.PackSamples(static_cast<Index>(p));
      EXPECT_EQ(std::vector<Index>(got.begin(), got.end()), bins[p].samples) << trial;
    }
  }
}

TEST(MultimodalPlanTest, ResumeAtRandomPointsEqualsTheUninterruptedRun) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 100; ++trial) {
    MultimodalOptions o = RandomOptions(rng);
    SampleTable t = RandomTable(rng, 50 + static_cast<Index>(rng() % 150), 120, 6, 60);
    MultimodalPlan plan(t, o);
    Index k = static_cast<Index>(rng() % static_cast<std::uint64_t>(plan.num_steps() + 1));
    MultimodalState state = MultimodalStateFromJson(MultimodalStateToJson(plan.StateAfter(k)));
    MultimodalPlan resumed(t, o, state);
    ASSERT_EQ(resumed.num_steps(), plan.num_steps() - k);
    for (Index s = 0; s < resumed.num_steps(); ++s) {
      for (Index r = 0; r < o.world_size; ++r) EXPECT_EQ(resumed.Rows(r, s), plan.Rows(r, s + k));
    }
    // Resuming the resumed plan again continues the same run.
    Index j = static_cast<Index>(rng() % static_cast<std::uint64_t>(resumed.num_steps() + 1));
    MultimodalPlan again(t, o, resumed.StateAfter(j));
    EXPECT_EQ(again.StateAfter(0), plan.StateAfter(k + j));
  }
}

TEST(MultimodalPlanTest, ElasticResumeDeliversEveryRemainingSampleExactlyOnce) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 100; ++trial) {
    MultimodalOptions o = RandomOptions(rng);
    o.mode = MultimodalMode::kPad;
    SampleTable t = RandomTable(rng, 50 + static_cast<Index>(rng() % 200), 120, 6, 60);
    std::vector<Index> got;
    std::optional<MultimodalState> state;
    for (int leg = 0; leg < 3; ++leg) {
      o.world_size = 1 + static_cast<Index>(rng() % 6);
      o.rows_per_rank = 1 + static_cast<Index>(rng() % 3);
      MultimodalPlan plan(t, o, state);
      Index k = leg == 2
                    ? plan.num_steps()
                    : static_cast<Index>(rng() % static_cast<std::uint64_t>(plan.num_steps() + 1));
      std::vector<Index> part = Delivered(plan, 0, k);
      got.insert(got.end(), part.begin(), part.end());
      state = plan.StateAfter(k);
      if (leg == 2) {
        got.insert(got.end(), plan.dropped_samples().begin(), plan.dropped_samples().end());
      }
    }
    std::sort(got.begin(), got.end());
    std::vector<Index> all(static_cast<std::size_t>(t.size()));
    std::iota(all.begin(), all.end(), Index{0});
    EXPECT_EQ(got, all) << trial;
  }
}

// The issue's mix: 1,500 VQA-style samples, 0-6 images of 64 vision tokens
// (inlined in the LM sequence), 20-300 text tokens, seq_len 1024, 18 images
// per pack. And variable tiles: 1-13 tiles of 64-256 tokens per image.
SampleTable IssueMix(std::uint64_t seed, bool tiles) {
  std::mt19937_64 rng(seed);
  std::vector<Index> lengths, counts, vision;
  for (int s = 0; s < 1500; ++s) {
    Index images = static_cast<Index>(rng() % 7), image_tokens = 0;
    for (Index i = 0; i < images; ++i) {
      Index v = 64;
      if (tiles) v = (1 + static_cast<Index>(rng() % 13)) * (64 + static_cast<Index>(rng() % 193));
      vision.push_back(v);
      image_tokens += tiles ? 64 : v;  // tiles: the LM sees 64 tokens per image
    }
    counts.push_back(images);
    lengths.push_back(20 + static_cast<Index>(rng() % 281) + image_tokens);
  }
  return SampleTable::Make(lengths, counts, vision);
}

TEST(MultimodalPlanTest, BalancesVisionCostOnTheIssueMixes) {
  for (bool tiles : {false, true}) {
    for (Index world : {4, 8}) {
      for (VisionCost cost : {VisionCost::kTokens, VisionCost::kSquared}) {
        MultimodalOptions o;
        o.seq_len = 1024, o.world_size = world, o.max_images = 18, o.vision_cost = cost;
        MultimodalPlan plan(IssueMix(1, tiles), o);
        const MultimodalSummary& s = plan.summary();
        double padding = 1 - static_cast<double>(s.tokens) /
                                 static_cast<double>(plan.num_steps() * world * o.seq_len);
        EXPECT_LE(plan.balance().mean_vision_ratio, 1.05) << tiles << " " << world;
        EXPECT_LE(plan.balance().mean_token_ratio, 1.05) << tiles << " " << world;
        EXPECT_LE(padding, 0.01) << tiles << " " << world;
        EXPECT_EQ(s.dropped, 0);
      }
    }
  }
}

TEST(MultimodalPlanTest, BadInputNamesTheParameter) {
  SampleTable t = SampleTable::Make({5, 6}, std::vector<Index>{1, 0}, {});
  auto message = [&](MultimodalOptions o) {
    try {
      MultimodalPlan plan(t, o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  MultimodalOptions o;
  o.seq_len = 0;
  EXPECT_EQ(message(o).rfind("seq_len:", 0), 0u);
  o.seq_len = 8, o.world_size = 0;
  EXPECT_EQ(message(o).rfind("world_size:", 0), 0u);
  o.world_size = 1, o.max_vision_tokens = -1;
  EXPECT_EQ(message(o).rfind("max_vision_tokens:", 0), 0u);
  EXPECT_THROW(SampleTable::Make({1, 2}, std::vector<Index>{1}, {}), std::invalid_argument);
  EXPECT_THROW(SampleTable::Make({1}, std::vector<Index>{2}, {3}), std::invalid_argument);
  EXPECT_THROW((void)ParseVisionCost("cubed"), std::invalid_argument);
  // A state of another table or epoch is refused.
  o.max_vision_tokens.reset();
  MultimodalPlan plan(t, o);
  MultimodalOptions other = o;
  other.epoch = 1;
  EXPECT_THROW(MultimodalPlan(t, other, plan.StateAfter(0)), std::invalid_argument);
  SampleTable u = SampleTable::Make({5, 7}, std::vector<Index>{1, 0}, {});
  EXPECT_THROW(MultimodalPlan(u, o, plan.StateAfter(0)), std::invalid_argument);
  EXPECT_THROW(MultimodalStateFromJson("{\"version\": 1}"), std::invalid_argument);
  EXPECT_THROW((void)plan.Rows(1, 0), std::out_of_range);
}

TEST(MultimodalPlan, HugeImageCountWithoutVisionTokensIsRefusedNotAllocated) {
  // 2^31 in one count expanded to 16 GB of 1-per-image entries (49 s) before.
  try {
    (void)SampleTable::Make({10, 20}, std::vector<Index>{1, Index{1} << 31}, {});
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("image_counts: 2147483649 images in all", 0), 0u)
        << e.what();
  }
  EXPECT_EQ(SampleTable::Make({1}, std::vector<Index>{Index{1} << 20}, {}).vision_tokens.size(),
            std::size_t{1} << 20);
}

TEST(MultimodalPlan, HugeWorldTimesRowsIsRefusedNamingTheOption) {
  SampleTable t = SampleTable::Make({3, 4}, {}, {});
  for (auto [w, r, param] : {std::tuple<Index, Index, std::string>{Index{1} << 62, 4, "world_size"},
                             {Index{1} << 25, 1, "world_size"},
                             {Index{1} << 20, 32, "rows_per_rank"},
                             {4, Index{1} << 62, "rows_per_rank"}}) {
    MultimodalOptions o;
    o.seq_len = 8;
    o.world_size = w;
    o.rows_per_rank = r;
    try {
      MultimodalPlan plan(t, o);
      ADD_FAILURE() << "accepted world_size " << w;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(param + ": ", 0), 0u) << e.what();
    }
  }
  MultimodalOptions o;
  o.seq_len = 8;
  o.world_size = Index{1} << 12;
  o.rows_per_rank = Index{1} << 12;  // 2^24 rows per step: accepted
  EXPECT_EQ(MultimodalPlan(t, o).num_steps(), 1);
}

}  // namespace
}  // namespace shardkit
