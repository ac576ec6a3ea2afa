#include "shardkit/packing/packing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>

#include "shardkit/base/testing.h"
#include "shardkit/packing/internal/histogram.h"
#include "shardkit/packing/internal/pattern_lp.h"
#include "shardkit/packing/internal/wikipedia512_histogram.h"
#include "shardkit/packing/rank_balance.h"

namespace shardkit {
namespace {

// ---------------------------------------------------------------------------
// Plain reference implementations of the textbook definitions: O(n * packs),
// no sorting tricks, no trees. The engine must agree with them.

struct RefBin {
  Index tokens = 0, images = 0, count = 0, stamp = 0;
  std::vector<Index> items;
};

struct Budget {
  Index capacity;
  Index max_images = -1;
  Index max_sequences = -1;
};

bool Fits(const RefBin& b, Index len, Index img, const Budget& budget) {
  return b.tokens + len <= budget.capacity &&
         (budget.max_images < 0 || b.images + img <= budget.max_images) &&
         (budget.max_sequences < 0 || b.count < budget.max_sequences);
}

std::vector<Index> RefDecreasing(const std::vector<Index>& len) {
  std::vector<Index> order(len.size());
  std::iota(order.begin(), order.end(), Index{0});
  std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) { return len[a] > len[b]; });
  return order;
}

std::vector<std::vector<Index>> Finish(std::vector<RefBin>& bins) {
  std::vector<std::vector<Index>> out;
  for (auto& b : bins) out.push_back(b.items);
  return out;
}

void Put(RefBin& b, Index u, Index len, Index img, Index stamp) {
  b.tokens += len;
  b.images += img;
  ++b.count;
  b.stamp = stamp;
  b.items.push_back(u);
}

std::vector<std::vector<Index>> RefNextFit(const std::vector<Index>& len,
                                           const std::vector<Index>& img, const Budget& budget) {
  std::vector<RefBin> bins;
  for (size_t u = 0; u < len.size(); ++u) {
    const Index k = img.empty() ? 0 : img[u];
    if (bins.empty() || !Fits(bins.back(), len[u], k, budget)) bins.emplace_back();
    Put(bins.back(), static_cast<Index>(u), len[u], k, 0);
  }
  return Finish(bins);
}

std::vector<std::vector<Index>> RefFirstFitDecreasing(const std::vector<Index>& len,
                                                      const std::vector<Index>& img,
                                                      const Budget& budget) {
  std::vector<RefBin> bins;
  for (Index u : RefDecreasing(len)) {
    const Index k = img.empty() ? 0 : img[u];
    size_t b = 0;
    while (b < bins.size() && !Fits(bins[b], len[u], k, budget)) ++b;
    if (b == bins.size()) bins.emplace_back();
    Put(bins[b], u, len[u], k, 0);
  }
  return Finish(bins);
}

// Best fit in decreasing order: each item into the fitting pack of least
// key(pack) (a new pack when none fits).
template <typename Key>
std::vector<std::vector<Index>> RefBestFit(const std::vector<Index>& len,
                                           const std::vector<Index>& img, const Budget& budget,
                                           Key key) {
  std::vector<RefBin> bins;
  Index stamp = 0;
  for (Index u : RefDecreasing(len)) {
    const Index k = img.empty() ? 0 : img[u];
    Index best = -1;
    decltype(key(RefBin{})) best_key{};
    for (size_t b = 0; b < bins.size(); ++b) {
      if (!Fits(bins[b], len[u], k, budget)) continue;
      const auto bin_key = key(bins[b]);
      if (best < 0 || bin_key < best_key) {
        best = static_cast<Index>(b);
        best_key = bin_key;
      }
    }
    if (best < 0) {
      best = static_cast<Index>(bins.size());
      bins.emplace_back();
    }
    Put(bins[best], u, len[u], k, ++stamp);
  }
  return Finish(bins);
}

// Best fit: least remaining tokens; ties: least remaining images (image rooms
// above the data's total count are alike), then the most recently filled.
std::vector<std::vector<Index>> RefBestFitDecreasing(const std::vector<Index>& len,
                                                     const std::vector<Index>& img,
                                                     const Budget& budget) {
  const Index total_images = std::accumulate(img.begin(), img.end(), Index{0});
  return RefBestFit(len, img, budget, [&](const RefBin& bin) {
    const Index image_room =
        budget.max_images < 0 ? 0 : std::min(budget.max_images - bin.images, total_images);
    return std::make_tuple(budget.capacity - bin.tokens, image_room, -bin.stamp);
  });
}

// TRL's bfd (trl.data_utils._pack_bfd) as a textbook definition: the same
// best fit, but among packs with equal room the one that reached that room
// first (its last placement is the oldest).
std::vector<std::vector<Index>> RefTrlBestFit(const std::vector<Index>& len, Index capacity,
                                              Index max_sequences = -1) {
  return RefBestFit(len, {}, Budget{capacity, -1, max_sequences}, [&](const RefBin& bin) {
    return std::make_pair(capacity - bin.tokens, bin.stamp);
  });
}

std::vector<std::vector<Index>> Packs(const Packing& p) {
  std::vector<std::vector<Index>> out;
  for (Index b = 0; b < p.num_packs(); ++b) {
    out.emplace_back(p.items.begin() + p.offsets[b], p.items.begin() + p.offsets[b + 1]);
  }
  return out;
}

PackOptions Options(Index capacity, PackAlgorithm algorithm) {
  PackOptions o;
  o.capacity = capacity;
  o.algorithm = algorithm;
  return o;
}

// Random data of many shapes: uniform, lognormal, heavy-tailed mixtures, all
// equal, many zeros, lengths at the capacity.
std::vector<Index> RandomLengths(std::mt19937_64& rng, Index n, Index capacity, int shape) {
  std::vector<Index> out(n);
  std::lognormal_distribution<double> lognormal(std::log(capacity / 8.0 + 1), 1.0);
  std::uniform_int_distribution<Index> uniform(0, capacity);
  std::uniform_int_distribution<int> coin(0, 9);
  for (auto& l : out) {
    switch (shape) {
      case 0:
        l = uniform(rng);
        break;
      case 1:
        l = std::min<Index>(capacity, static_cast<Index>(lognormal(rng)));
        break;
      case 2:
        l = coin(rng) == 0 ? capacity - uniform(rng) / 8 : uniform(rng) / 16;
        break;
      case 3:
        l = capacity / 3 + 1;
        break;
      case 4:
        l = coin(rng) < 5 ? 0 : uniform(rng);
        break;
      default:
        l = coin(rng) < 3 ? capacity : 1 + uniform(rng) / 2;
        break;
    }
  }
  return out;
}

// One random input: a capacity in [1, max_capacity], fewer than max_items
// items, their lengths up to spread x capacity in RandomLengths' shape
// trial % 6 (the draws in that order).
struct Trial {
  Index capacity;
  std::vector<Index> len;
};
Trial RandomTrial(std::mt19937_64& rng, int trial, Index max_capacity, Index max_items,
                  Index spread = 1) {
  const Index capacity = 1 + static_cast<Index>(rng() % max_capacity);
  const Index n = static_cast<Index>(rng() % max_items);
  return {capacity, RandomLengths(rng, n, spread * capacity, trial % 6)};
}

// Checks a packing against its input: every item is packed exactly once
// (split items: pieces cover [0, length) exactly) or dropped, no budget is
// exceeded, totals and bounds are consistent.
void ExpectValid(const Packing& p, const std::vector<Index>& len, const std::vector<Index>& img,
                 const PackOptions& o) {
  ASSERT_EQ(p.num_items, static_cast<Index>(len.size()));
  ASSERT_EQ(p.offsets.front(), 0);
  ASSERT_EQ(p.offsets.back(), static_cast<Index>(p.items.size()));
  std::map<Index, std::vector<std::pair<Index, Index>>> pieces;  // item -> (start, length)
  Index tokens = 0, images = 0;
  for (Index b = 0; b < p.num_packs(); ++b) {
    ASSERT_LT(p.offsets[b], p.offsets[b + 1]) << "empty pack " << b;
    Index t = 0, im = 0, c = 0;
    for (Index e = p.offsets[b]; e < p.offsets[b + 1]; ++e) {
      t += p.lengths[e];
      im += p.images.empty() ? 0 : p.images[e];
      ++c;
      pieces[p.items[e]].push_back({p.starts[e], p.lengths[e]});
    }
    EXPECT_LE(t, o.capacity) << "pack " << b;
    if (o.max_images) {
      EXPECT_LE(im, *o.max_images) << "pack " << b;
    }
    if (o.max_sequences) {
      EXPECT_LE(c, *o.max_sequences) << "pack " << b;
    }
    EXPECT_EQ(t, p.PackTokens(b));
    tokens += t;
    images += im;
  }
  EXPECT_EQ(tokens, p.tokens);
  EXPECT_EQ(images, p.image_count);
  std::vector<bool> dropped(len.size(), false);
  for (Index d : p.dropped_items) {
    ASSERT_FALSE(dropped[d]) << "dropped twice: " << d;
    dropped[d] = true;
    const bool oversize =
        len[d] > o.capacity || (o.max_images && !img.empty() && img[d] > *o.max_images);
    const bool empty_under_trl = o.compat == PackCompat::kTrl && len[d] == 0;
    EXPECT_TRUE(oversize || empty_under_trl) << "item " << d << " was dropped but fits";
    EXPECT_NE(o.oversize, Oversize::kError);
  }
  Index split = 0;
  for (size_t i = 0; i < len.size(); ++i) {
    auto it = pieces.find(static_cast<Index>(i));
    if (dropped[i]) {
      EXPECT_EQ(it, pieces.end()) << "item " << i << " dropped and packed";
      continue;
    }
    ASSERT_NE(it, pieces.end()) << "item " << i << " lost";
    auto parts = it->second;
    std::sort(parts.begin(), parts.end());
    Index at = 0;
    for (auto [start, length] : parts) {
      EXPECT_EQ(start, at) << "item " << i << " pieces overlap or leave a gap";
      at += length;
    }
    EXPECT_EQ(at, len[i]) << "item " << i;
    if (parts.size() > 1) {
      ++split;
      EXPECT_EQ(o.oversize, Oversize::kSplit);
      EXPECT_TRUE(img.empty() || img[i] == 0) << "an item with images was split";
    }
    if (parts.size() == 1) {
      EXPECT_EQ(parts[0].first, 0);
    }
  }
  EXPECT_EQ(split, p.split_items);
  EXPECT_LE(p.lower_bound, p.num_packs());
  EXPECT_GE(p.lower_bound, (p.tokens + o.capacity - 1) / o.capacity);
}

// ---------------------------------------------------------------------------

// PackItems under `algorithm` gives the packs of `reference`, the textbook
// definition written above, on 300 random inputs, a third of them under a
// sequence budget.
void ExpectTextbookPacks(std::uint64_t seed, PackAlgorithm algorithm,
                         decltype(&RefFirstFitDecreasing) reference) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    auto [capacity, len] = RandomTrial(rng, trial, 200, 300);
    Budget budget{capacity};
    PackOptions o = Options(capacity, algorithm);
    if (trial % 3 == 1) {
      o.max_sequences = budget.max_sequences = 1 + static_cast<Index>(rng() % 5);
    }
    EXPECT_EQ(Packs(PackItems(len, o)), reference(len, {}, budget)) << trial;
  }
}

TEST(PackItemsTest, FirstFitDecreasingEqualsTextbookDefinition) {
  ExpectTextbookPacks(1, PackAlgorithm::kFirstFitDecreasing, RefFirstFitDecreasing);
}

TEST(PackItemsTest, BestFitDecreasingEqualsTextbookDefinition) {
  ExpectTextbookPacks(2, PackAlgorithm::kBestFitDecreasing, RefBestFitDecreasing);
}

TEST(PackItemsTest, MultiResourceFitsEqualReferenceWithImageBudgets) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    auto [capacity, len] = RandomTrial(rng, trial, 300, 200);
    const Index max_images = static_cast<Index>(rng() % 6);
    std::vector<Index> img(len.size());
    for (auto& k : img) k = static_cast<Index>(rng() % (max_images + 1));
    Budget budget{capacity, max_images};
    PackOptions o = Options(capacity, PackAlgorithm::kFirstFitDecreasing);
    o.max_images = max_images;
    if (trial % 2) o.max_sequences = budget.max_sequences = 2 + static_cast<Index>(rng() % 4);
    EXPECT_EQ(Packs(PackItems(len, o, img)), RefFirstFitDecreasing(len, img, budget)) << trial;
    o.algorithm = PackAlgorithm::kBestFitDecreasing;
    EXPECT_EQ(Packs(PackItems(len, o, img)), RefBestFitDecreasing(len, img, budget)) << trial;
  }
}

TEST(PackItemsTest, NextFitPreservesInputOrder) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    auto [capacity, len] = RandomTrial(rng, trial, 100, 200);
    Budget budget{capacity};
    PackOptions o = Options(capacity, PackAlgorithm::kNextFit);
    Packing p = PackItems(len, o);
    EXPECT_EQ(Packs(p), RefNextFit(len, {}, budget));
    std::vector<Index> flat = p.items, sorted = p.items;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(flat, sorted);
  }
}

TEST(PackItemsTest, NoItemLostOrRepeatedAndNoBudgetExceeded) {
  std::mt19937_64 rng(5);
  const PackAlgorithm algorithms[] = {PackAlgorithm::kNextFit, PackAlgorithm::kFirstFitDecreasing,
                                      PackAlgorithm::kBestFitDecreasing, PackAlgorithm::kBalanced};
  for (int trial = 0; trial < 800; ++trial) {
    // Lengths up to 3x the capacity, so oversize items occur.
    auto [capacity, len] = RandomTrial(rng, trial, 500, 400, 3);
    PackOptions o = Options(capacity, algorithms[trial % 4]);
    o.oversize = trial % 5 == 0 ? Oversize::kDrop : Oversize::kSplit;
    std::vector<Index> img;
    if (trial % 3 == 0) {
      o.max_images = static_cast<Index>(rng() % 5);
      img.resize(len.size());
      for (auto& k : img) k = rng() % 3 == 0 ? static_cast<Index>(rng() % 7) : 0;
    }
    if (trial % 4 == 1) o.max_sequences = 1 + static_cast<Index>(rng() % 8);
    if (trial % 7 == 2) o.buffer = 1 + static_cast<Index>(rng() % 50);
    Packing p = PackItems(len, o, img);
    ExpectValid(p, len, img, o);
    if (HasFailure()) FAIL() << "trial " << trial;
  }
}

TEST(PackItemsTest, SameInputGivesSamePacks) {
  std::mt19937_64 rng(6);
  for (int trial = 0; trial < 40; ++trial) {
    auto len = RandomLengths(rng, 1000, 512, trial % 6);
    for (auto algorithm :
         {PackAlgorithm::kNextFit, PackAlgorithm::kFirstFitDecreasing,
          PackAlgorithm::kBestFitDecreasing, PackAlgorithm::kBalanced, PackAlgorithm::kHistogram}) {
      PackOptions o = Options(512, algorithm);
      Packing a = PackItems(len, o), b = PackItems(len, o);
      EXPECT_EQ(a.items, b.items);
      EXPECT_EQ(a.offsets, b.offsets);
    }
  }
}

TEST(PackItemsTest, BalancedNeverUsesMorePacksThanBestFitAndEvensLoads) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const Index capacity = 50 + static_cast<Index>(rng() % 500);
    auto len = RandomLengths(rng, static_cast<Index>(rng() % 500), capacity, trial % 6);
    PackOptions o = Options(capacity, PackAlgorithm::kBalanced);
    std::vector<Index> img;
    if (trial % 2) {
      o.max_images = 1 + static_cast<Index>(rng() % 4);
      img.resize(len.size());
      for (auto& k : img) k = static_cast<Index>(rng() % 3);
    }
    Packing balanced = PackItems(len, o, img);
    ExpectValid(balanced, len, img, o);
    o.algorithm = PackAlgorithm::kBestFitDecreasing;
    Packing bfd = PackItems(len, o, img);
    EXPECT_LE(balanced.num_packs(), bfd.num_packs()) << trial;
  }
  // Loads evened out. 9, 8, ..., 0 into capacity 20: 3 packs (the lower
  // bound); by hand, LPT (ties: the pack that reached the load first) gives
  // {9,4,1,0} {8,5,2} {7,6,3} = 14, 15, 16, where bfd fills 20, 20, 5.
  std::vector<Index> len = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  Packing p = PackItems(len, Options(20, PackAlgorithm::kBalanced));
  ASSERT_EQ(p.num_packs(), 3);
  EXPECT_EQ(Packs(p), (std::vector<std::vector<Index>>{{0, 5, 8, 9}, {1, 4, 7}, {2, 3, 6}}));
  Packing b = PackItems(len, Options(20, PackAlgorithm::kBestFitDecreasing));
  EXPECT_EQ(b.PackTokens(0), 20);
  EXPECT_EQ(b.PackTokens(2), 5);
}

TEST(PackItemsTest, OversizeDropCountsAndListsDroppedItems) {
  std::vector<Index> len = {5, 11, 3, 20, 10};
  Packing p = PackItems(len, Options(10, PackAlgorithm::kBestFitDecreasing));
  EXPECT_EQ(p.dropped_items, (std::vector<Index>{1, 3}));
  EXPECT_EQ(p.dropped(), 2);
  EXPECT_EQ(p.tokens, 18);
  ExpectValid(p, len, {}, Options(10, PackAlgorithm::kBestFitDecreasing));
}

TEST(PackItemsTest, OversizeErrorNamesTheItem) {
  std::vector<Index> len = {5, 11};
  PackOptions o = Options(10, PackAlgorithm::kBestFitDecreasing);
  o.oversize = Oversize::kError;
  try {
    (void)PackItems(len, o);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "lengths: item 1 has 11 tokens, more than capacity 10 (oversize=error)");
  }
}

TEST(PackItemsTest, OversizeSplitCutsCapacitySizedPiecesButNeverImages) {
  std::vector<Index> len = {25, 4, 30}, img = {0, 1, 1};
  PackOptions o = Options(10, PackAlgorithm::kBestFitDecreasing);
  o.oversize = Oversize::kSplit;
  o.max_images = 2;
  Packing p = PackItems(len, o, img);
  ExpectValid(p, len, img, o);
  EXPECT_EQ(p.split_items, 1);
  EXPECT_EQ(p.dropped_items, (std::vector<Index>{2}));  // has an image
  // 25 -> [0,10) [10,20) as their own packs, [20,25) packed with item 1.
  EXPECT_EQ(p.num_packs(), 3);
  EXPECT_EQ(p.tokens, 29);
}

TEST(PackItemsTest, EdgeCases) {
  PackOptions o = Options(8, PackAlgorithm::kBestFitDecreasing);
  Packing empty = PackItems({}, o);
  EXPECT_EQ(empty.num_packs(), 0);
  EXPECT_EQ(empty.lower_bound, 0);
  EXPECT_EQ(empty.efficiency(), 1.0);
  std::vector<Index> zeros(5, 0);
  for (auto a :
       {PackAlgorithm::kNextFit, PackAlgorithm::kFirstFitDecreasing,
        PackAlgorithm::kBestFitDecreasing, PackAlgorithm::kBalanced, PackAlgorithm::kHistogram}) {
    Packing z = PackItems(zeros, Options(8, a));
    EXPECT_EQ(z.num_packs(), 1) << PackAlgorithmName(a);
    EXPECT_EQ(z.lower_bound, 1);
  }
  // Capacity 2^61, tokens 2^62: the sparse room index, no overflow.
  const Index huge = Index{1} << 61;
  std::vector<Index> big = {huge / 2, huge / 2, huge / 4, huge / 4 * 3};
  for (auto a : {PackAlgorithm::kFirstFitDecreasing, PackAlgorithm::kBestFitDecreasing,
                 PackAlgorithm::kBalanced}) {
    Packing p = PackItems(big, Options(huge, a));
    EXPECT_EQ(p.num_packs(), 2) << PackAlgorithmName(a);
    ExpectValid(p, big, {}, Options(huge, a));
  }
  // A token total that does not fit 64 bits is an error, not a wrap.
  std::vector<Index> overflow = {Index{1} << 62, Index{1} << 62, Index{1} << 62};
  EXPECT_THROW((void)PackItems(overflow, Options(Index{1} << 62, PackAlgorithm::kNextFit)),
               std::invalid_argument);
}

TEST(PackItemsTest, BadInputNamesTheValue) {
  const auto message = base_testing::ErrorOf<std::invalid_argument>;
  std::vector<Index> len = {1, -3};
  EXPECT_EQ(message([&] { (void)PackItems(len, Options(0, PackAlgorithm::kNextFit)); }),
            "capacity: must be at least 1, got 0");
  EXPECT_EQ(message([&] { (void)PackItems(len, Options(5, PackAlgorithm::kNextFit)); }),
            "lengths: item 1 has negative length -3");
  std::vector<Index> ok = {1, 2}, img = {1};
  PackOptions o = Options(5, PackAlgorithm::kNextFit);
  o.max_images = 1;
  EXPECT_EQ(message([&] { (void)PackItems(ok, o, img); }),
            "images: has 1 entries but lengths has 2");
  EXPECT_EQ(message([&] { (void)PackItems(ok, o); }),
            "max_images: is set (1) but no images were given");
  o.buffer = 0;
  EXPECT_EQ(message([&] { (void)PackItems(ok, o); }), "buffer: must be at least 1, got 0");
  EXPECT_EQ(message([] { (void)ParsePackAlgorithm("best"); }),
            "algorithm: unknown algorithm 'best' (expected next_fit, ffd, bfd, balanced or "
            "histogram)");
}

TEST(PackItemsTest, LowerBoundOnLognormalIsNearlyReached) {
  std::mt19937_64 rng(8);
  std::lognormal_distribution<double> d(std::log(600.0), 0.8);
  std::vector<Index> len(200000);
  for (auto& l : len) l = std::clamp<Index>(static_cast<Index>(d(rng)), 1, 4096);
  for (auto a : {PackAlgorithm::kFirstFitDecreasing, PackAlgorithm::kBestFitDecreasing,
                 PackAlgorithm::kBalanced}) {
    Packing p = PackItems(len, Options(4096, a));
    // 200k items: within 0.05% (8 packs of ~40k here); bench/ shows 0.01% at 1M+.
    EXPECT_LE(p.num_packs(), p.lower_bound + p.lower_bound / 2000 + 1) << PackAlgorithmName(a);
  }
}

// ---------------------------------------------------------------------------
// compat trl

TEST(CompatTrlTest, EqualsBestFitWithOldestTies) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 400; ++trial) {
    auto [capacity, len] = RandomTrial(rng, trial, 200, 300);
    for (auto& l : len) l = std::max<Index>(l, 1);  // TRL drops empty items
    PackOptions o = Options(capacity, PackAlgorithm::kBestFitDecreasing);
    o.compat = PackCompat::kTrl;
    Index max_sequences = -1;
    if (trial % 4 == 3) o.max_sequences = max_sequences = 1 + static_cast<Index>(rng() % 4);
    Packing p = PackItems(len, o);
    ExpectValid(p, len, {}, o);
    EXPECT_EQ(Packs(p), RefTrlBestFit(len, capacity, max_sequences)) << trial;
  }
}

TEST(CompatTrlTest, TiesGoToTheOldestPackAndEmptyItemsAreDropped) {
  // Two packs with room 4 when the 3 comes: TRL takes the first, the default
  // the most recently filled.
  std::vector<Index> len = {6, 6, 3, 0};
  PackOptions o = Options(10, PackAlgorithm::kBestFitDecreasing);
  EXPECT_EQ(Packs(PackItems(len, o)), (std::vector<std::vector<Index>>{{0}, {1, 2, 3}}));
  o.compat = PackCompat::kTrl;
  Packing p = PackItems(len, o);
  EXPECT_EQ(Packs(p), (std::vector<std::vector<Index>>{{0, 2}, {1}}));
  EXPECT_EQ(p.dropped_items, (std::vector<Index>{3}));
}

TEST(CompatTrlTest, SplitPiecesAreOrderedWithTheItemsAsBfdSplit) {
  // The example of TRL's pack_dataset docstring (trl 1.16.0), bfd_split at
  // seq_length 4 over input_ids of lengths 5, 2, 3, 1: rows [1, 2, 3, 4],
  // [8, 9, 10, 5], [6, 7, 11], i.e. item 0's first piece alone, item 2 with
  // item 0's last token, items 1 and 3.
  std::vector<Index> len = {5, 2, 3, 1};
  PackOptions o = Options(4, PackAlgorithm::kBestFitDecreasing);
  o.oversize = Oversize::kSplit;
  o.compat = PackCompat::kTrl;
  Packing p = PackItems(len, o);
  ExpectValid(p, len, {}, o);
  EXPECT_EQ(Packs(p), (std::vector<std::vector<Index>>{{0}, {2, 0}, {1, 3}}));
  EXPECT_EQ(p.starts, (std::vector<Index>{0, 0, 4, 0, 0}));
  // Its bfd example (the 5 is truncated by TRL; here every item fits): rows
  // [1, 2, 3, 4] [8, 9, 10, 11] [6, 7] are items {0}, {2, 3}, {1}.
  std::vector<Index> fits = {4, 2, 3, 1};
  o.oversize = Oversize::kDrop;
  EXPECT_EQ(Packs(PackItems(fits, o)), (std::vector<std::vector<Index>>{{0}, {2, 3}, {1}}));
}

TEST(CompatTrlTest, BufferPacksEveryBatchOnItsOwn) {
  std::mt19937_64 rng(32);
  auto len = RandomLengths(rng, 250, 100, 1);
  for (auto& l : len) l = std::max<Index>(l, 1);
  PackOptions o = Options(100, PackAlgorithm::kBestFitDecreasing);
  o.compat = PackCompat::kTrl;
  o.buffer = 64;
  Packing p = PackItems(len, o);
  ExpectValid(p, len, {}, o);
  std::vector<std::vector<Index>> expected;
  for (size_t begin = 0; begin < len.size(); begin += 64) {
    std::vector<Index> batch(len.begin() + begin, len.begin() + std::min(len.size(), begin + 64));
    for (auto pack : RefTrlBestFit(batch, 100)) {
      for (auto& item : pack) item += static_cast<Index>(begin);
      expected.push_back(pack);
    }
  }
  EXPECT_EQ(Packs(p), expected);
  o.algorithm = PackAlgorithm::kFirstFitDecreasing;
  EXPECT_THROW(ValidatePackOptions(o), std::invalid_argument);
  o.algorithm = PackAlgorithm::kBestFitDecreasing;
  EXPECT_THROW(StreamingPacker{o}, std::invalid_argument);
}

// ---------------------------------------------------------------------------
// Histogram packing

TEST(HistogramTest, NoItemLostOrRepeatedAndNoBudgetExceeded) {
  std::mt19937_64 rng(21);
  for (int trial = 0; trial < 600; ++trial) {
    auto [capacity, len] = RandomTrial(rng, trial, 400, 500, 2);
    for (auto algorithm : {PackAlgorithm::kHistogram, PackAlgorithm::kBalanced}) {
      PackOptions o = Options(capacity, algorithm);
      o.oversize = trial % 4 == 0 ? Oversize::kDrop : Oversize::kSplit;
      if (trial % 3 != 0) o.max_sequences = 1 + static_cast<Index>(rng() % 6);
      if (trial % 11 == 5) o.buffer = 1 + static_cast<Index>(rng() % 60);
      Packing p = PackItems(len, o);
      ExpectValid(p, len, {}, o);
      if (HasFailure()) FAIL() << "trial " << trial << " " << PackAlgorithmName(algorithm);
      EXPECT_EQ(p.items, PackItems(len, o).items) << "not deterministic, trial " << trial;
    }
  }
}

TEST(HistogramTest, ExactTriplesByHand) {
  // 5+3+2 fills 10 exactly: three such packs, units of each length in input
  // order, longest first within a pack.
  std::vector<Index> len = {5, 3, 2, 5, 3, 2, 5, 3, 2};
  PackOptions o = Options(10, PackAlgorithm::kHistogram);
  o.max_sequences = 3;
  EXPECT_EQ(Packs(PackItems(len, o)),
            (std::vector<std::vector<Index>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
  // One item per pack: every item alone.
  o.max_sequences = 1;
  EXPECT_EQ(PackItems(len, o).num_packs(), 9);
  // Edges: nothing, zeros only.
  EXPECT_EQ(PackItems({}, o).num_packs(), 0);
  std::vector<Index> zeros(7, 0);
  o.max_sequences = 3;
  EXPECT_EQ(PackItems(zeros, o).num_packs(), 3);
  o.max_sequences.reset();
  EXPECT_EQ(PackItems(zeros, o).num_packs(), 1);
}

TEST(HistogramTest, RejectsImagesAndHugeCapacities) {
  PackOptions o = Options(10, PackAlgorithm::kHistogram);
  o.max_images = 2;
  EXPECT_THROW(ValidatePackOptions(o), std::invalid_argument);
  o = Options(Index{1} << 20, PackAlgorithm::kHistogram);
  EXPECT_THROW(ValidatePackOptions(o), std::invalid_argument);
}

// The Wikipedia-512 histogram (1/128 of every count, 127k items): under 3
// sequences per pack, bfd is about 12% over the lower bound; histogram
// packing stays within 0.5% of it, and balanced takes it.
TEST(HistogramTest, BeatsBestFitUnderASequenceBudgetOnWikipedia) {
  std::vector<Index> len;
  Index tokens = 0;
  for (Index l = 1; l <= 512; ++l) {
    for (Index c = 0; c < internal::kWikipedia512Histogram[l - 1] / 128; ++c) {
      len.push_back(l);
      tokens += l;
    }
  }
  std::mt19937_64 rng(22);
  std::shuffle(len.begin(), len.end(), rng);
  const Index bound = (tokens + 511) / 512;
  PackOptions o = Options(512, PackAlgorithm::kHistogram);
  o.max_sequences = 3;
  Packing h = PackItems(len, o);
  ExpectValid(h, len, {}, o);
  EXPECT_EQ(h.lower_bound, bound);
  EXPECT_LE(h.num_packs(), bound + bound / 200);
  o.algorithm = PackAlgorithm::kBestFitDecreasing;
  Packing bfd = PackItems(len, o);
  EXPECT_GT(bfd.num_packs(), bound + bound / 20);
  o.algorithm = PackAlgorithm::kBalanced;
  EXPECT_EQ(PackItems(len, o).num_packs(), h.num_packs());
}

// ---------------------------------------------------------------------------
// The pattern LP behind histogram packing under a count budget

// Every multiset of at most k of `lengths` (indices) with sum <= capacity,
// by brute force: a[i] copies of lengths[i].
void EveryPattern(const std::vector<Index>& lengths, Index capacity, Index k, size_t from,
                  std::vector<Index>* a, Index used, Index items,
                  const std::function<void(const std::vector<Index>&)>& visit) {
  if (from == lengths.size()) {
    visit(*a);
    return;
  }
  for (Index m = 0; items + m <= k && used + m * lengths[from] <= capacity; ++m) {
    (*a)[from] = m;
    EveryPattern(lengths, capacity, k, from + 1, a, used + m * lengths[from], items + m, visit);
    if (lengths[from] == 0 && items + m >= k) break;
  }
  (*a)[from] = 0;
}

// The LP's answer is checked by its certificate, not by the solver's own
// pricing: the basis patterns are patterns, x >= 0 covers every count
// exactly, no pattern (all of them enumerated) has duals summing to more than
// 1, and sum x = sum n_l y_l (so x is optimal). Both pricers (k <= 3, k >= 4).
TEST(PatternLpTest, OptimumHasACertificateOverEveryPattern) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 400; ++trial) {
    const Index capacity = 1 + static_cast<Index>(rng() % 40);
    const Index k = 1 + static_cast<Index>(rng() % 6);
    std::vector<Index> lengths;
    for (Index l = 0; l <= capacity; ++l) {
      if (rng() % (capacity + 1) < 6) lengths.push_back(l);
    }
    if (lengths.empty()) lengths.push_back(capacity / 2);
    std::vector<Index> counts;
    for (size_t i = 0; i < lengths.size(); ++i) {
      counts.push_back(1 + static_cast<Index>(rng() % (trial % 2 ? 5 : 500)));
    }
    const auto lp = internal::SolvePatternLp(lengths, counts, capacity, k, Index{1} << 30);
    ASSERT_TRUE(lp.has_value()) << "trial " << trial;
    ASSERT_TRUE(lp->optimal) << "trial " << trial;
    const size_t d = lengths.size();
    ASSERT_EQ(lp->patterns.size(), d);
    std::vector<double> covered(d, 0.0);
    double sum_x = 0;
    for (size_t j = 0; j < d; ++j) {
      const auto& pattern = lp->patterns[j];
      ASSERT_LE(static_cast<Index>(pattern.size()), k);
      ASSERT_LE(std::accumulate(pattern.begin(), pattern.end(), Index{0}), capacity);
      ASSERT_GE(lp->x[j], 0.0);
      sum_x += lp->x[j];
      for (Index l : pattern) {
        const auto at = std::find(lengths.begin(), lengths.end(), l);
        ASSERT_NE(at, lengths.end());
        covered[at - lengths.begin()] += lp->x[j];
      }
    }
    double dual_objective = 0;
    for (size_t i = 0; i < d; ++i) {
      EXPECT_NEAR(covered[i], static_cast<double>(counts[i]), 1e-6 * counts[i])
          << "trial " << trial;
      dual_objective += lp->duals[i] * static_cast<double>(counts[i]);
    }
    EXPECT_NEAR(lp->objective, sum_x, 1e-9 * sum_x);
    EXPECT_NEAR(sum_x, dual_objective, 1e-7 * sum_x) << "trial " << trial;
    std::vector<Index> a(d, 0);
    double worst = 0;
    EveryPattern(lengths, capacity, k, 0, &a, 0, 0, [&](const std::vector<Index>& m) {
      double v = 0;
      for (size_t i = 0; i < d; ++i) v += static_cast<double>(m[i]) * lp->duals[i];
      worst = std::max(worst, v);
    });
    EXPECT_LE(worst, 1 + 1e-7) << "trial " << trial << ": a pattern prices out";
    // The LP bounds every packing from below; the lower bound bounds the LP.
    Index tokens = 0, items = 0;
    for (size_t i = 0; i < d; ++i) {
      tokens += lengths[i] * counts[i];
      items += counts[i];
    }
    EXPECT_GE(sum_x, static_cast<double>(tokens) / static_cast<double>(capacity) - 1e-6);
    EXPECT_GE(sum_x, static_cast<double>(items) / static_cast<double>(k) - 1e-6);
    if (HasFailure()) FAIL() << "trial " << trial;
  }
}

TEST(PatternLpTest, RefusesWhatItCannotSolveInItsLimit) {
  std::vector<Index> lengths(internal::kPatternLpMaxLengths + 1), counts(lengths.size(), 1);
  std::iota(lengths.begin(), lengths.end(), 0);
  EXPECT_FALSE(internal::SolvePatternLp(lengths, counts, 4096, 3, Index{1} << 40).has_value());
  lengths.resize(100);
  counts.resize(100);
  EXPECT_FALSE(internal::SolvePatternLp(lengths, counts, 4096, 3, 1000).has_value());
  EXPECT_TRUE(internal::SolvePatternLp({}, {}, 10, 3, 0).value().optimal);
}

// Fewest packs of `len` under capacity and k items per pack, by exhaustive
// search (items by decreasing length; a pack state already tried for this
// item is skipped).
Index BruteForcePacks(std::vector<Index> len, Index capacity, Index k) {
  std::sort(len.begin(), len.end(), std::greater<>());
  Index best = static_cast<Index>(len.size());
  std::vector<std::pair<Index, Index>> bins;  // (load, items)
  std::function<void(size_t)> go = [&](size_t i) {
    if (static_cast<Index>(bins.size()) >= best) return;
    if (i == len.size()) {
      best = static_cast<Index>(bins.size());
      return;
    }
    std::vector<std::pair<Index, Index>> tried;
    for (size_t j = 0; j < bins.size(); ++j) {  // (go() grows and shrinks bins)
      const auto b = bins[j];
      if (b.first + len[i] > capacity || b.second + 1 > k) continue;
      if (std::find(tried.begin(), tried.end(), b) != tried.end()) continue;
      tried.push_back(b);
      bins[j] = {b.first + len[i], b.second + 1};
      go(i + 1);
      bins[j] = b;
    }
    bins.push_back({len[i], 1});
    go(i + 1);
    bins.pop_back();
  };
  go(0);
  return best;
}

// `distinct` lengths of 0 to capacity tokens, drawn by `rng` (repeats allowed).
std::vector<Index> RandomPool(std::mt19937_64& rng, Index distinct, Index capacity) {
  std::vector<Index> pool;
  for (Index i = 0; i < distinct; ++i) pool.push_back(static_cast<Index>(rng() % (capacity + 1)));
  return pool;
}

// `n` lengths drawn from `pool` by `rng`.
std::vector<Index> DrawnFrom(std::mt19937_64& rng, const std::vector<Index>& pool, Index n) {
  std::vector<Index> len;
  for (Index i = 0; i < n; ++i) len.push_back(pool[rng() % pool.size()]);
  return len;
}

// Small random inputs against the exhaustive optimum: histogram packing is
// valid, never below the optimum (a check of the check), and at most one
// pack above it; it finds the optimum in nearly every case.
TEST(HistogramTest, SmallInputsAgainstTheBruteForceOptimum) {
  std::mt19937_64 rng(32);
  int trials = 0, optimal = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const Index capacity = 4 + static_cast<Index>(rng() % 30);
    const Index n = 1 + static_cast<Index>(rng() % 11);
    const Index distinct = 1 + static_cast<Index>(rng() % 4);
    const std::vector<Index> pool = RandomPool(rng, distinct, capacity);
    std::vector<Index> len = DrawnFrom(rng, pool, n);
    PackOptions o = Options(capacity, PackAlgorithm::kHistogram);
    o.max_sequences = 2 + static_cast<Index>(rng() % 3);
    const Packing p = PackItems(len, o);
    ExpectValid(p, len, {}, o);
    const Index opt = BruteForcePacks(len, capacity, *o.max_sequences);
    EXPECT_GE(p.num_packs(), opt) << "trial " << trial;
    EXPECT_LE(p.num_packs(), opt + 1) << "trial " << trial;
    EXPECT_EQ(PackItems(len, o).items, p.items) << "not deterministic, trial " << trial;
    ++trials;
    optimal += p.num_packs() == opt;
    if (HasFailure()) FAIL() << "trial " << trial;
  }
  std::printf("histogram packing optimal in %d of %d small cases\n", optimal, trials);
  EXPECT_GE(optimal, trials * 95 / 100);
}

// Many items of few lengths (the LP's case: n far above the distinct
// lengths): every item once, budgets hold, the same packs twice, never fewer
// packs than ceil(LP) (a check of the check) nor more than ceil(LP) +
// k x distinct (floor leaves less than one pack of each basis pattern, at
// most k units each); balanced never more than bfd or histogram packing.
TEST(HistogramTest, LpRoundingOnManyItemsOfFewLengths) {
  std::mt19937_64 rng(33);
  int at_lp = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const Index capacity = 16 + static_cast<Index>(rng() % 600);
    const Index k = 2 + static_cast<Index>(rng() % 4);
    const Index distinct = 2 + static_cast<Index>(rng() % 30);
    const std::vector<Index> pool = RandomPool(rng, distinct, capacity);
    const Index n = 2000 + static_cast<Index>(rng() % 20000);
    std::vector<Index> len = DrawnFrom(rng, pool, n);
    PackOptions o = Options(capacity, PackAlgorithm::kHistogram);
    o.max_sequences = k;
    const Packing p = PackItems(len, o);
    ExpectValid(p, len, {}, o);
    EXPECT_EQ(PackItems(len, o).items, p.items) << "not deterministic, trial " << trial;
    std::vector<Index> count(static_cast<size_t>(capacity) + 1, 0), lengths, counts;
    for (Index l : len) ++count[l];
    EXPECT_EQ(internal::HistogramPacks(count, o), p.num_packs());
    for (Index l = 0; l <= capacity; ++l) {
      if (count[l] > 0) {
        lengths.push_back(l);
        counts.push_back(count[l]);
      }
    }
    const auto lp = internal::SolvePatternLp(lengths, counts, capacity, k, Index{1} << 32);
    ASSERT_TRUE(lp && lp->optimal);
    const Index ceil_lp = static_cast<Index>(std::ceil(lp->objective - 1e-6));
    EXPECT_GE(p.num_packs(), ceil_lp) << "trial " << trial;
    EXPECT_LE(p.num_packs(), ceil_lp + k * static_cast<Index>(lengths.size())) << "trial " << trial;
    at_lp += p.num_packs() == ceil_lp;
    // balanced takes the fewer of bfd and histogram packing.
    o.algorithm = PackAlgorithm::kBestFitDecreasing;
    const Index bfd = PackItems(len, o).num_packs();
    o.algorithm = PackAlgorithm::kBalanced;
    EXPECT_LE(PackItems(len, o).num_packs(), std::min(bfd, p.num_packs())) << "trial " << trial;
    if (HasFailure()) FAIL() << "trial " << trial;
  }
  std::printf("histogram packing at ceil(LP) in %d of 60 cases\n", at_lp);
  EXPECT_GE(at_lp, 50);
}

// The full Wikipedia-512 histogram (16.3M sequences) from its counts: at 3
// sequences per pack the LP rounding reaches 8,143,829 packs, the LP optimum
// (8,143,828.86; HiGHS, run offline on the same histogram, agrees) rounded
// up, so no packing has fewer; NNLSHP needs 8,155,059. At 12, at most
// LPFHP's 8,149,619.
TEST(HistogramTest, WikipediaCountsBeatNnlshpAtThreeAndLpfhpAtTwelve) {
  std::vector<Index> count(513, 0);
  for (Index l = 1; l <= 512; ++l) count[l] = internal::kWikipedia512Histogram[l - 1];
  PackOptions o = Options(512, PackAlgorithm::kHistogram);
  o.max_sequences = 3;
  EXPECT_EQ(internal::HistogramPacks(count, o), 8143829);
  o.max_sequences = 12;
  EXPECT_LE(internal::HistogramPacks(count, o), 8149619);
}

// A sparse histogram (few units, most of the 65537 lengths absent) made each
// completion search scan every length for every waste: 2,000 random lengths at
// capacity 65536 and 3 sequences per pack took 11 s (balanced 14 s), 10^6
// items 111 s; the search now visits only the lengths present. The packs are
// unchanged (the same rule; compared with main's packs on 300 random inputs
// when this changed): here each item exactly once, no pack over capacity or
// over 3 sequences, and a count near the lower bound. The time bound is loose
// (a loaded machine): the fixed search takes about 0.01 s.
TEST(HistogramTest, RegressionSparseHistogramAtCapacity65536IsNotQuadraticInCapacity) {
  std::mt19937_64 rng(11);
  std::vector<Index> lengths(2000);
  for (Index& l : lengths) l = 1 + static_cast<Index>(rng() % 65536);
  for (PackAlgorithm a : {PackAlgorithm::kHistogram, PackAlgorithm::kBalanced}) {
    PackOptions o = Options(65536, a);
    o.max_sequences = 3;
    const auto start = std::chrono::steady_clock::now();
    const Packing p = PackItems(lengths, o);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 3.0) << PackAlgorithmName(a);
    std::vector<int> seen(lengths.size(), 0);
    for (Index k = 0; k < p.num_packs(); ++k) {
      EXPECT_LE(p.PackTokens(k), 65536);
      EXPECT_LE(p.offsets[k + 1] - p.offsets[k], 3);
      for (Index e = p.offsets[k]; e < p.offsets[k + 1]; ++e) {
        ++seen[static_cast<std::size_t>(p.items[e])];
        EXPECT_EQ(p.lengths[e], lengths[static_cast<std::size_t>(p.items[e])]);
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 2000);
    EXPECT_LE(p.num_packs(), p.lower_bound + p.lower_bound / 50);
  }
}

// oversize split of five items of 2^40 tokens at capacity 4096 listed 2^30
// pieces: it allocated until bad_alloc (67 s). The entries are counted first
// and refused beyond kMaxPackEntries, naming lengths, the count and capacity.
TEST(PackItemsTest, RegressionSplitIntoBillionsOfPiecesIsRefusedBeforeAllocating) {
  const std::vector<Index> lengths(5, Index{1} << 40);
  for (PackAlgorithm a :
       {PackAlgorithm::kBestFitDecreasing, PackAlgorithm::kNextFit, PackAlgorithm::kHistogram}) {
    PackOptions o = Options(4096, a);
    o.oversize = Oversize::kSplit;
    for (const bool buffered : {false, true}) {
      if (buffered) o.buffer = 16;
      try {
        (void)PackItems(lengths, o);
        ADD_FAILURE() << "accepted";
      } catch (const std::invalid_argument& e) {
        const std::string m = e.what();
        EXPECT_EQ(m.rfind("lengths: oversize split cuts the 5 items (5497558138880 tokens) into "
                          "more than 268435456 pieces of at most capacity 4096 tokens",
                          0),
                  0u)
            << m;
      }
    }
  }
  // At the bound itself: accepted (2^28 entries would be 8 GB; one item of
  // 2^20 pieces shows the count is of pieces, not items).
  PackOptions o = Options(16, PackAlgorithm::kBestFitDecreasing);
  o.oversize = Oversize::kSplit;
  EXPECT_EQ(PackItems(std::vector<Index>{Index{16} << 20}, o).num_packs(), Index{1} << 20);
}

// ---------------------------------------------------------------------------
// Streaming

std::vector<Pack> Drain(StreamingPacker& packer) {
  std::vector<Pack> out;
  Pack p;
  while (packer.Pop(&p)) out.push_back(p);
  return out;
}

bool SamePacks(const std::vector<Pack>& a, const std::vector<Pack>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].tokens != b[i].tokens || a[i].pieces.size() != b[i].pieces.size()) return false;
    for (size_t j = 0; j < a[i].pieces.size(); ++j) {
      const auto &x = a[i].pieces[j], &y = b[i].pieces[j];
      if (x.item != y.item || x.length != y.length || x.start != y.start) return false;
    }
  }
  return true;
}

TEST(StreamingPackerTest, EqualsWholeDataModeWithTheSameBuffer) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 100; ++trial) {
    auto len = RandomLengths(rng, static_cast<Index>(rng() % 500), 300, trial % 6);
    PackOptions o = Options(256, static_cast<PackAlgorithm>(trial % 5));  // histogram too
    o.buffer = 1 + static_cast<Index>(rng() % 64);
    o.oversize = Oversize::kSplit;
    Packing whole = PackItems(len, o);
    ExpectValid(whole, len, {}, o);
    StreamingPacker packer(o);
    std::vector<Pack> packs;
    for (size_t i = 0; i < len.size(); ++i) {
      packer.Push(static_cast<Index>(i), len[i]);
      if (o.algorithm != PackAlgorithm::kNextFit) {
        EXPECT_LT(packer.buffered(), *o.buffer);
      }
      for (auto& p : Drain(packer)) packs.push_back(p);
    }
    packer.Finish();
    for (auto& p : Drain(packer)) packs.push_back(p);
    ASSERT_EQ(static_cast<Index>(packs.size()), whole.num_packs());
    for (Index b = 0; b < whole.num_packs(); ++b) {
      auto entries = whole.Entries(b);
      ASSERT_EQ(entries.size(), packs[b].pieces.size());
      for (size_t j = 0; j < entries.size(); ++j) {
        EXPECT_EQ(entries[j].item, packs[b].pieces[j].item);
        EXPECT_EQ(entries[j].start, packs[b].pieces[j].start);
      }
    }
    EXPECT_NEAR(packer.efficiency(), whole.efficiency(), 1e-12);
  }
}

// The streaming packer's best-fit repack under the token and count budgets
// (a path of its own, without the general placement's allocations) gives the
// packs of the general placement, internal::Place: a packer with an image
// budget that never binds (every image count 0) takes the general path.
TEST(StreamingPackerTest, BestFitRepackMatchesTheGeneralPlacement) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 400; ++trial) {
    const Index capacity = std::vector<Index>{1, 7, 64, 500, 4096}[rng() % 5];
    PackOptions o = Options(capacity, PackAlgorithm::kBestFitDecreasing);
    if (rng() % 4) o.buffer = std::vector<Index>{1, 2, 3, 16, 100, 1024}[rng() % 6];
    if (rng() % 4 == 0) o.max_sequences = 1 + static_cast<Index>(rng() % 5);
    o.oversize = rng() % 3 == 0 ? Oversize::kDrop : Oversize::kSplit;
    PackOptions general = o;
    general.max_images = Index{1} << 40;
    StreamingPacker fast(o), slow(general);
    std::lognormal_distribution<double> lognormal(std::log(capacity / 4.0 + 1), 1.2);
    const Index n = static_cast<Index>(rng() % 3000);
    SCOPED_TRACE("capacity " + std::to_string(capacity) + ", n " + std::to_string(n));
    auto same = [&](StreamingPacker& a, StreamingPacker& b) {
      Pack x, y;
      while (a.Pop(&x)) {
        ASSERT_TRUE(b.Pop(&y));
        ASSERT_EQ(x.pieces.size(), y.pieces.size());
        for (std::size_t j = 0; j < x.pieces.size(); ++j) {
          EXPECT_EQ(x.pieces[j].item, y.pieces[j].item);
          EXPECT_EQ(x.pieces[j].start, y.pieces[j].start);
          EXPECT_EQ(x.pieces[j].length, y.pieces[j].length);
        }
        EXPECT_EQ(x.tokens, y.tokens);
      }
      EXPECT_FALSE(b.Pop(&y));
      EXPECT_EQ(a.buffered(), b.buffered());
    };
    for (Index i = 0; i < n; ++i) {
      Index len = static_cast<Index>(lognormal(rng));
      if (rng() % 15 == 0) len = 0;
      if (rng() % 25 == 0) len = capacity * static_cast<Index>(1 + rng() % 3) + 1;
      fast.Push(i, len);
      slow.Push(i, len);
      if (rng() % 8 == 0) same(fast, slow);
    }
    fast.Finish();
    slow.Finish();
    same(fast, slow);
    EXPECT_EQ(fast.dropped_items(), slow.dropped_items());
    EXPECT_EQ(fast.State().packs_closed, slow.State().packs_closed);
    EXPECT_EQ(fast.State().tokens_closed, slow.State().tokens_closed);
  }
}

TEST(StreamingPackerTest, RestoredStateContinuesExactly) {
  std::mt19937_64 rng(10);
  for (int trial = 0; trial < 100; ++trial) {
    auto len = RandomLengths(rng, 300, 200, trial % 6);
    PackOptions o = Options(128, static_cast<PackAlgorithm>(trial % 5));  // histogram too
    o.buffer = 1 + static_cast<Index>(rng() % 40);
    o.oversize = Oversize::kSplit;
    const size_t cut = rng() % len.size();
    StreamingPacker original(o), first(o);
    std::vector<Pack> expected, resumed;
    for (size_t i = 0; i < len.size(); ++i) original.Push(static_cast<Index>(i), len[i]);
    original.Finish();
    expected = Drain(original);
    for (size_t i = 0; i < cut; ++i) first.Push(static_cast<Index>(i), len[i]);
    // Pop a few packs before the checkpoint; the rest stay pending.
    Pack p;
    for (int k = 0; k < 2 && first.Pop(&p); ++k) resumed.push_back(p);
    StreamingPacker second(o, first.State());
    for (size_t i = cut; i < len.size(); ++i) second.Push(static_cast<Index>(i), len[i]);
    second.Finish();
    for (auto& q : Drain(second)) resumed.push_back(q);
    EXPECT_TRUE(SamePacks(expected, resumed)) << trial;
    EXPECT_EQ(second.State().items_seen, static_cast<Index>(len.size()));
  }
}

TEST(StreamingPackerTest, RejectsAStateThatDoesNotFit) {
  PackOptions o = Options(10, PackAlgorithm::kBestFitDecreasing);
  o.buffer = 4;
  PackerState s;
  s.buffered = {{1, 11, 0, 0}};
  EXPECT_THROW(StreamingPacker(o, s), std::invalid_argument);
  s.buffered.assign(4, PackItem{1, 1, 0, 0});
  EXPECT_THROW(StreamingPacker(o, s), std::invalid_argument);
  StreamingPacker packer(o);
  EXPECT_THROW(packer.Push(0, -1), std::invalid_argument);
}

TEST(StreamingPackerTest, RegressionLongItemIsOneRunNotOnePendingPackPerPiece) {
  // An item split into k full pieces put k packs into the state, so every
  // snapshot copied them all (1M/2M/4M tokens at capacity 64: 17/39/258 s in
  // the loader). The pieces are now one run, popped a pack at a time, and a
  // state taken anywhere in the run restores to the same packs.
  for (PackAlgorithm a : {PackAlgorithm::kNextFit, PackAlgorithm::kBestFitDecreasing}) {
    PackOptions o = Options(64, a);
    o.buffer = 4;
    o.oversize = Oversize::kSplit;
    StreamingPacker packer(o);
    packer.Push(0, 10);
    packer.Push(1, 64 * 100000 + 7);
    packer.Push(2, 30);
    EXPECT_EQ(packer.pending(), 100000);  // item 0 and the tail of item 1 are still open
    EXPECT_LE(packer.State().pending.size(), 2u);
    Pack p;
    std::vector<Pack> popped;
    for (Index k = 0; k < 50000; ++k) {
      ASSERT_TRUE(packer.Pop(&p));
      popped.push_back(p);
    }
    const PackerState middle = packer.State();
    EXPECT_LE(middle.pending.size(), 2u);
    StreamingPacker restored(o, middle);
    EXPECT_EQ(restored.pending(), packer.pending());
    for (StreamingPacker* s : {&packer, &restored}) {
      s->Finish();
      std::vector<Pack> rest = Drain(*s);
      if (s == &packer) {
        popped.insert(popped.end(), rest.begin(), rest.end());
      } else {
        EXPECT_TRUE(SamePacks(
            rest, std::vector<Pack>(popped.end() - static_cast<std::ptrdiff_t>(rest.size()),
                                    popped.end())));
      }
    }
    // Every piece of item 1 once, in order, each a full pack; then the rest.
    Index next_start = 0;
    for (const Pack& pack : popped) {
      for (const PackItem& piece : pack.pieces) {
        if (piece.item != 1) continue;
        EXPECT_EQ(piece.start, next_start);
        next_start += piece.length;
        if (piece.length == 64) EXPECT_EQ(pack.pieces.size(), 1u);
      }
      EXPECT_LE(pack.tokens, 64);
    }
    EXPECT_EQ(next_start, 64 * 100000 + 7);
    EXPECT_EQ(packer.State().packs_closed, static_cast<Index>(popped.size()));
  }
}

std::string StateError(const PackOptions& o, const PackerState& s) {
  return base_testing::ErrorOf([&] { StreamingPacker restored(o, s); });
}

TEST(StreamingPackerTest, RegressionStateWithPendingPacksOverCapacityNegativeOrDuplicateIsRefused) {
  // The pending packs of a state were taken as they came: over capacity,
  // negative lengths, repeated pieces and wrapping start + length all passed.
  for (PackAlgorithm a : {PackAlgorithm::kNextFit, PackAlgorithm::kBestFitDecreasing}) {
    PackOptions o = Options(10, a);
    o.buffer = 4;
    o.oversize = Oversize::kSplit;
    PackerState good;
    good.buffered = {{7, 3, 0, 0}};
    good.pending = {Pack{{{1, 6, 0, 0}, {2, 4, 0, 0}}, 0, 0}, Pack{{{3, 10, 0, 0}}, 0, 0}};
    EXPECT_EQ(StateError(o, good), "no error");
    StreamingPacker restored(o, good);
    Pack first;
    ASSERT_TRUE(restored.Pop(&first));
    EXPECT_EQ(first.tokens, 10);  // recomputed from the pieces

    PackerState over = good;
    over.pending[0].pieces.push_back({4, 1, 0, 0});
    EXPECT_EQ(StateError(o, over), "state: pending[0]: holds 11 tokens, more than capacity 10");
    PackerState negative = good;
    negative.pending[1].pieces[0].length = -5;
    EXPECT_EQ(StateError(o, negative).rfind("state: pending item 3 (start 0, length -5", 0), 0u);
    PackerState duplicate = good;
    duplicate.pending.push_back(good.pending[1]);
    EXPECT_EQ(StateError(o, duplicate),
              "state: item 3 is listed twice (pieces at start 0 and 0 overlap)");
    PackerState buffered_twice = good;
    buffered_twice.pending[1].pieces[0] = {7, 3, 0, 0};
    EXPECT_NE(StateError(o, buffered_twice).find("item 7 is listed twice"), std::string::npos);
    PackerState overlap = good;
    overlap.pending[1].pieces = {{1, 4, 0, 5}};  // item 1 tokens [5, 9) overlap [0, 6)
    EXPECT_NE(StateError(o, overlap).find("item 1 is listed twice"), std::string::npos);
    PackerState wrap = good;
    wrap.pending[1].pieces = {{5, 8, 0, std::numeric_limits<Index>::max() - 2}};
    EXPECT_NE(StateError(o, wrap).find("does not fit a pack"), std::string::npos);
    PackerState run = good;
    run.pending[1].pieces = {{3, 35, 0, 0}};  // a run must be whole packs
    EXPECT_NE(StateError(o, run).find("pending[1]: holds 35 tokens, more than capacity 10"),
              std::string::npos)
        << StateError(o, run);
    run.pending[1].pieces = {{3, 40, 0, 0}};
    EXPECT_EQ(StateError(o, run), "no error");
    PackOptions drop = o;
    drop.oversize = Oversize::kDrop;
    EXPECT_NE(StateError(drop, run).find("holds 40 tokens, more than capacity 10"),
              std::string::npos)
        << StateError(drop, run);
    PackerState counter = good;
    counter.items_seen = -1;
    EXPECT_EQ(StateError(o, counter), "state: items_seen = -1 is negative");
  }
}

// ---------------------------------------------------------------------------
// Cross-rank balance

TEST(BalanceRanksTest, EveryRankGetsTheSameNumberOfPacksPerStepAndEveryPackOnce) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const Index packs = static_cast<Index>(rng() % 200);
    const Index world = 1 + static_cast<Index>(rng() % 9);
    const Index per_rank = 1 + static_cast<Index>(rng() % 4);
    const bool drop_last = trial % 2;
    std::vector<double> costs(packs);
    for (auto& c : costs) c = static_cast<double>(rng() % 1000);
    RankSchedule s = BalanceRanks(costs, world, per_rank, drop_last);
    ASSERT_EQ(static_cast<Index>(s.assignment.size()), s.num_steps * world * per_rank);
    std::vector<int> seen(packs, 0);
    Index padding = 0;
    for (Index step = 0; step < s.num_steps; ++step) {
      for (Index r = 0; r < world; ++r) {
        double cost = 0;
        for (Index k = 0; k < per_rank; ++k) {
          const Index p = s.At(step, r, k);
          if (p < 0) {
            ++padding;
            continue;
          }
          ++seen[p];
          cost += costs[p];
        }
        EXPECT_DOUBLE_EQ(cost, s.rank_costs[step * world + r]);
      }
    }
    EXPECT_EQ(padding, s.padding_packs);
    for (Index d : s.dropped_packs) ++seen[d];
    for (Index p = 0; p < packs; ++p) EXPECT_EQ(seen[p], 1) << "pack " << p;
    if (drop_last) {
      EXPECT_EQ(s.padding_packs, 0);
      EXPECT_EQ(s.num_steps, packs / (world * per_rank));
    } else {
      EXPECT_EQ(s.num_steps, (packs + world * per_rank - 1) / (world * per_rank));
      EXPECT_LT(s.padding_packs, world * per_rank);
    }
  }
}

TEST(BalanceRanksTest, StepsAreEvenWhenCostsAllowIt) {
  // 8 packs of cost 10,10,9,9,...: two ranks, two packs each per step.
  std::vector<double> costs = {10, 1, 9, 2, 8, 3, 7, 4};
  RankSchedule s = BalanceRanks(costs, 2, 2);
  ASSERT_EQ(s.num_steps, 2);
  // Step 0 holds 10, 9, 8, 7: {10, 7} and {9, 8} -> 17 and 17.
  EXPECT_DOUBLE_EQ(s.rank_costs[0], 17);
  EXPECT_DOUBLE_EQ(s.rank_costs[1], 17);
  EXPECT_DOUBLE_EQ(s.max_step_imbalance, 0);
  EXPECT_THROW((void)BalanceRanks(costs, 0), std::invalid_argument);
  std::vector<double> bad = {1, -1};
  EXPECT_THROW((void)BalanceRanks(bad, 2), std::invalid_argument);
}

// Regression: pack --world 9223372036854775807 failed with "cannot create
// std::vector larger than max_size()", and --world 100000000 over 3 packs
// allocated gigabytes of padding before answering.
TEST(BalanceRanksTest, HugeWorldOverFewPacksIsRefusedNamingWorldSize) {
  const std::vector<double> costs = {3, 2, 1};
  for (Index world : {Index{100000000}, std::numeric_limits<Index>::max()}) {
    try {
      (void)BalanceRanks(costs, world, 1);
      FAIL() << world;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("world_size: ", 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(BalanceRanks(costs, 1000, 1).padding_packs, 997);  // small worlds still pad
}

TEST(PackCostsTest, SquaredLengthsIsTheAttentionCost) {
  std::vector<Index> len = {3, 4, 5};
  Packing p = PackItems(len, Options(100, PackAlgorithm::kNextFit));
  EXPECT_EQ(PackCosts(p, CostModel::kTokens), (std::vector<double>{12}));
  EXPECT_EQ(PackCosts(p, CostModel::kSquaredLengths), (std::vector<double>{50}));
}

}  // namespace
}  // namespace shardkit
