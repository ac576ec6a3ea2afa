#include "shardkit/sharding/mixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

using u128 = unsigned __int128;

std::vector<MixSample> Sequence(const Mixture& m, Index n) {
  std::vector<Index> s(n), it(n);
  m.Fill(0, n, s.data(), it.data());
  std::vector<MixSample> out(n);
  for (Index i = 0; i < n; ++i) out[i] = {s[i], it[i]};
  return out;
}

// Cumulative rounding, written from the spec over exact rationals: sources
// [0, i) together have round(tau * (q_0 + ... + q_{i-1}) / total) samples
// (halves up).
std::vector<Index> Reference(Index tau, const MixSegment& seg) {
  const std::size_t k = seg.q.size();
  std::vector<Index> out(k);
  u128 share = 0;
  Index before = 0;
  for (std::size_t i = 0; i < k; ++i) {
    share += seg.q[i];
    const u128 twice = 2 * static_cast<u128>(tau) * share;  // 2 x the exact quota
    const auto upto = static_cast<Index>((twice + seg.total) / (2 * static_cast<u128>(seg.total)));
    out[i] = seg.counts[i] + upto - before;
    before = upto;
  }
  return out;
}

MixtureOptions Seeded(std::uint64_t seed) {
  MixtureOptions o;
  o.seed = seed;
  return o;
}

MixtureOptions Blocked(Index block) {
  MixtureOptions o;
  o.block = block;
  return o;
}

std::vector<double> RandomWeights(std::mt19937_64& rng, Index k) {
  std::vector<double> w(k);
  bool any = false;
  for (auto& x : w) {
    const int kind = static_cast<int>(rng() % 5);
    x = kind == 0   ? 0.0
        : kind == 1 ? static_cast<double>(rng() % 7 + 1)
        : kind == 2 ? std::ldexp(1.0, -static_cast<int>(rng() % 12))
                    : std::uniform_real_distribution<double>(0.01, 1)(rng);
    any = any || x > 0;
  }
  if (!any) w[rng() % k] = 1;
  return w;
}

// The sizes of 1 to max_sources sources, each of 1 to max_size items, drawn
// by `rng`.
std::vector<Index> RandomSizes(std::mt19937_64& rng, Index max_sources, Index max_size) {
  std::vector<Index> sizes(1 + static_cast<Index>(rng() % max_sources));
  for (auto& n : sizes) n = 1 + static_cast<Index>(rng() % max_size);
  return sizes;
}

// Default options but for a seed drawn by `rng`.
MixtureOptions SeededOptions(std::mt19937_64& rng) {
  MixtureOptions o;
  o.seed = rng();
  return o;
}

TEST(MixtureTest, BlockCountsAreTheCumulativeRoundingOfTheSharesAndErrorStaysBelowOne) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<Index> sizes = RandomSizes(rng, trial < 20 ? 1000 : 12, 50);
    const Index k = static_cast<Index>(sizes.size());
    MixtureOptions o = SeededOptions(rng);
    Mixture m(sizes, RandomWeights(rng, k), o);
    ASSERT_EQ(m.segments().size(), 1u);
    const MixSegment& seg = m.segments()[0];
    std::vector<Index> cum(k), counts(k);
    for (Index b = 0; b < 40; ++b) {
      const Index bb = trial % 2 ? b : b * 1000003;
      m.Cumulative(bb, cum.data());
      ASSERT_EQ(cum, Reference(bb * m.block(), seg)) << "trial " << trial << " block " << bb;
      m.BlockCounts(bb, counts.data());
      Index total = 0;
      for (Index i = 0; i < k; ++i) {
        ASSERT_GE(counts[i], 0);
        total += counts[i];
        const long double target = static_cast<long double>(bb * m.block()) * seg.q[i] / seg.total;
        ASSERT_LT(std::fabs(static_cast<long double>(cum[i]) - target), 1.0L);
        if (seg.q[i] == 0) {
          ASSERT_EQ(counts[i], 0);
        }
      }
      ASSERT_EQ(total, m.block());
    }
  }
}

TEST(MixtureTest, RandomAccessEqualsSequentialAndConsumedCountsTheSequence) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const std::vector<Index> sizes = RandomSizes(rng, 6, 40);
    const Index k = static_cast<Index>(sizes.size());
    MixtureOptions o = SeededOptions(rng);
    auto w = RandomWeights(rng, k);
    if (trial % 4 == 1) {
      o.schedule.push_back({static_cast<Index>(rng() % 3000), RandomWeights(rng, k)});
      o.schedule.push_back(
          {o.schedule[0].position + 1 + static_cast<Index>(rng() % 3000), RandomWeights(rng, k)});
      o.interpolation = trial % 8 == 1 ? Interpolation::kLinear : Interpolation::kStep;
    }
    if (trial % 3 == 0) o.block = Mixture(sizes, w, o).block() + static_cast<Index>(rng() % 50);
    const Mixture m(sizes, w, o);
    const Index n = 6000;
    const auto seq = Sequence(m, n);
    std::vector<Index> seen(k, 0);
    for (Index i = 0; i < n; ++i) {
      if (i % 97 == 0 || i % m.block() == 0) {
        ASSERT_EQ(m.Consumed(i), seen) << "trial " << trial << " position " << i;
        ASSERT_EQ(m.At(i), seq[i]);
      }
      const auto [source, item] = seq[i];
      ASSERT_EQ(item, m.SourceItem(source, seen[source]));
      ++seen[source];
    }
    // Determinism: another object with the same parameters gives the same.
    ASSERT_EQ(Sequence(Mixture(sizes, w, o), n), seq);
  }
}

// The order inside a block is a keyed rotation of its slots: every source's
// positions in a block are evenly spread (the gaps between consecutive ones
// take at most three lengths, the third the sum of the other two), so every
// stretch of a block holds each source within a few samples of its share.
TEST(MixtureTest, EverySourceIsSpreadEvenlyOverEachBlock) {
  std::mt19937_64 rng(21);
  std::set<Index> multipliers;
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<Index> sizes = RandomSizes(rng, 12, 10000);
    const Index k = static_cast<Index>(sizes.size());
    MixtureOptions o = SeededOptions(rng);
    o.block = 1 + static_cast<Index>(rng() % 5000);
    const auto w = RandomWeights(rng, k);
    try {
      (void)Mixture(sizes, w, o);
    } catch (const std::invalid_argument&) {
      o.block.reset();  // too small for the shares
    }
    const Mixture m(sizes, w, o);
    const Index b = static_cast<Index>(rng() % 1000);
    std::vector<Index> s(m.block()), it(m.block()), counts(k);
    m.Fill(b * m.block(), (b + 1) * m.block(), s.data(), it.data());
    m.BlockCounts(b, counts.data());
    for (Index i = 0; i < k; ++i) {
      std::vector<Index> at;
      for (Index j = 0; j < m.block(); ++j) {
        if (s[j] == i) at.push_back(j);
      }
      ASSERT_EQ(static_cast<Index>(at.size()), counts[i]);
      std::set<Index> gaps;
      for (std::size_t g = 1; g < at.size(); ++g) gaps.insert(at[g] - at[g - 1]);
      ASSERT_LE(gaps.size(), 3u) << "trial " << trial << " source " << i;
      if (gaps.size() == 3) {
        ASSERT_EQ(*gaps.rbegin(), *gaps.begin() + *std::next(gaps.begin()));
      }
      // No clumps: the largest gap is at most 4 x the mean gap (the
      // ratios' continued fractions have terms 1 and 2).
      if (at.size() >= 2 && counts[i] * 4 <= m.block()) {
        EXPECT_LE(*gaps.rbegin(), 4 * CeilDiv(m.block(), counts[i]))
            << "trial " << trial << " source " << i << " block " << m.block() << " count "
            << counts[i] << " gaps " << *gaps.begin() << " " << *gaps.rbegin();
      }
    }
  }
}

TEST(MixtureTest, EverySourceWalksEachEpochExactlyOnce) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    const std::vector<Index> sizes = RandomSizes(rng, 5, 300);
    const Index k = static_cast<Index>(sizes.size());
    const Mixture m(sizes, RandomWeights(rng, k));
    const auto seq = Sequence(m, 20000);
    std::vector<std::vector<Index>> per(k);
    for (const auto& s : seq) per[s.source].push_back(s.item);
    for (Index i = 0; i < k; ++i) {
      for (std::size_t e = 0; e + sizes[i] <= per[i].size(); e += sizes[i]) {
        std::set<Index> items(per[i].begin() + e, per[i].begin() + e + sizes[i]);
        ASSERT_EQ(static_cast<Index>(items.size()), sizes[i]);
        ASSERT_EQ(*items.begin(), 0);
        ASSERT_EQ(*items.rbegin(), sizes[i] - 1);
      }
    }
  }
}

TEST(MixtureTest, NonRepeatingSourceStopsTheMixtureAfterItsLastItem) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<Index> sizes = {1 + static_cast<Index>(rng() % 5000), 10, 1 + Index(rng() % 300)};
    std::vector<double> w = {1 + double(rng() % 5), 1, double(rng() % 3)};
    MixtureOptions o;
    o.repeat = {false, true, trial % 2 == 0};
    o.seed = rng();
    const Mixture m(sizes, w, o);
    ASSERT_TRUE(m.bounded());
    const auto seq = Sequence(m, m.size());
    std::vector<std::vector<Index>> per(3);
    for (const auto& s : seq) per[s.source].push_back(s.item);
    // Source 0 (and source 2 when it does not repeat) at most once each;
    // the one that ran out is complete.
    bool complete = false;
    for (Index i : {Index{0}, Index{2}}) {
      if (o.repeat[i]) continue;
      std::set<Index> items(per[i].begin(), per[i].end());
      ASSERT_EQ(items.size(), per[i].size()) << "source " << i << " repeated an item";
      complete = complete || static_cast<Index>(items.size()) == sizes[i];
    }
    ASSERT_TRUE(complete);
    EXPECT_THROW((void)m.At(m.size()), std::out_of_range);
    EXPECT_EQ(m.Consumed(m.size())[0], static_cast<Index>(per[0].size()));
  }
}

TEST(MixtureTest, OnlyANonRepeatingSourceBoundsTheMixture) {
  // A block that does not divide 2^62 (96) left size() just below kMaxSamples:
  // bounded() said true for a mixture that never stops.
  for (const Index block : {64, 96, 1000}) {
    MixtureOptions o;
    o.block = block;
    const Mixture endless({10, 20}, {1, 2}, o);
    EXPECT_FALSE(endless.bounded()) << block;
    EXPECT_EQ(endless.size(), Mixture::kMaxSamples / block * block);
    o.repeat = {true, false};
    const Mixture ends({10, 20}, {1, 2}, o);
    EXPECT_TRUE(ends.bounded()) << block;
    EXPECT_EQ(ends.Consumed(ends.size())[1], 20);
  }
}

TEST(MixtureTest, ResumeWithChangedWeightsNeitherRepeatsNorSkips) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 40; ++trial) {
    const std::vector<Index> sizes = RandomSizes(rng, 5, 200);
    const Index k = static_cast<Index>(sizes.size());
    MixtureOptions o = SeededOptions(rng);
    const Mixture first(sizes, RandomWeights(rng, k), o);
    const Index cut = static_cast<Index>(rng() % 5000);
    const MixtureState state = first.State(cut);
    // Unchanged: exactly the samples an unbroken run gives.
    const Mixture same = Mixture::FromState(state);
    const auto whole = Sequence(first, cut + 3000);
    const auto tail = Sequence(same, 3000);
    ASSERT_TRUE(std::equal(tail.begin(), tail.end(), whole.begin() + cut));
    // Changed weights: every source continues its own walk.
    auto w2 = RandomWeights(rng, k);
    const Mixture changed = Mixture::FromState(state, w2);
    std::vector<Index> next = state.consumed;
    for (const auto& s : Sequence(changed, 4000)) {
      ASSERT_EQ(s.item, first.SourceItem(s.source, next[s.source]));
      ++next[s.source];
    }
    ASSERT_EQ(changed.Consumed(4000), next);
    ASSERT_EQ(changed.State(0).position, cut);
  }
}

TEST(MixtureTest, ElasticResumeDeliversEachPositionToExactlyOneRank) {
  // The mixture is one global order: ranks take positions round robin. W1
  // ranks read up to position P, W2 ranks continue from the state.
  const Mixture m({100, 37, 5}, {0.5, 0.3, 0.2}, Seeded(4));
  const Index total = 3000, P = 1234, w1 = 3, w2 = 5;
  std::vector<MixSample> got;
  for (Index r = 0; r < w1; ++r) {
    for (Index i = r; i < P; i += w1) got.push_back(m.At(i));
  }
  const Mixture rest = Mixture::FromState(m.State(P));
  for (Index r = 0; r < w2; ++r) {
    for (Index i = r; i < total - P; i += w2) got.push_back(rest.At(i));
  }
  auto want = Sequence(m, total);
  auto key = [](const MixSample& s) { return std::pair(s.source, s.item); };
  std::map<std::pair<Index, Index>, Index> a, b;
  for (const auto& s : got) ++a[key(s)];
  for (const auto& s : want) ++b[key(s)];
  EXPECT_EQ(a, b);
}

TEST(MixtureTest, StepScheduleChangesSharesAtTheNextBlockBoundary) {
  MixtureOptions o;
  o.block = 100;
  o.schedule = {{250, {0, 1}}};
  const Mixture m({1000, 1000}, {1, 0}, o);
  ASSERT_EQ(m.segments().size(), 2u);
  EXPECT_EQ(m.segments()[1].begin, 300);
  const auto seq = Sequence(m, 600);
  for (Index i = 0; i < 600; ++i) ASSERT_EQ(seq[i].source, i < 300 ? 0 : 1) << i;
}

TEST(MixtureTest, LinearScheduleMovesSharesInSteps) {
  MixtureOptions o;
  o.interpolation = Interpolation::kLinear;
  o.block = 1000;
  o.schedule = {{160000, {0, 1}}};
  const Mixture m({1000, 1000}, {1, 0}, o);
  ASSERT_EQ(m.segments().size(), static_cast<std::size_t>(Mixture::kLinearSteps) + 1);
  // Step s (of 16, 10000 samples each) gives source 1 the share at its
  // middle, (2s + 1) / 32; each step's counts are that share rounded.
  for (Index s = 0; s < Mixture::kLinearSteps; ++s) {
    const Index got = m.Consumed((s + 1) * 10000)[1] - m.Consumed(s * 10000)[1];
    const double want = 10000.0 * double(2 * s + 1) / 32.0;
    EXPECT_LT(std::fabs(double(got) - want), 2.0) << "step " << s;
  }
  EXPECT_EQ(m.Consumed(170000)[0], m.Consumed(160000)[0]);
}

// A schedule in tokens: a point at token position T takes effect at the
// first block boundary where the nominal tokens drawn (each source's count x
// its mean length) reach T, checked here from Consumed and the means, over
// random configurations (by samples or tokens, step or linear), and a resume
// from a random position lands every later point on the same boundary.
TEST(MixtureTest, TokenScheduleChangesAtTheFirstBoundaryWhereNominalTokensReachThePoint) {
  std::mt19937_64 rng(31);
  int changes = 0;
  for (int trial = 0; trial < 80; ++trial) {
    const Index k = 1 + static_cast<Index>(rng() % 5);
    std::vector<Index> sizes(k);
    MixtureOptions o;
    o.seed = rng();
    o.schedule_unit = MixBy::kTokens;
    o.by = trial % 2 == 0 ? MixBy::kSamples : MixBy::kTokens;
    for (Index i = 0; i < k; ++i) {
      sizes[i] = 1 + static_cast<Index>(rng() % 500);
      // Mean lengths up to 3000 (by tokens up to 50, so that every share
      // fits a block of 1024).
      const Index longest = o.by == MixBy::kSamples ? 3000 : 50;
      o.tokens.push_back(sizes[i] * (1 + static_cast<Index>(rng() % longest)));
    }
    o.block = o.by == MixBy::kSamples ? 64 * (1 + static_cast<Index>(rng() % 8)) : 1024;
    Index t = 0;
    for (int p = 0; p < 3; ++p) {
      // More than a block's worth of tokens apart (blocks <= 512 samples of
      // mean length <= 3000), so no two points land on one boundary.
      t += 1600000 + static_cast<Index>(rng() % 3000000);
      std::vector<double> w(k);
      for (auto& x : w) x = static_cast<double>(1 + rng() % 4);
      o.schedule.push_back({t, w});
    }
    o.interpolation = trial % 5 == 4 ? Interpolation::kLinear : Interpolation::kStep;
    std::vector<double> w0(k, 1.0);
    Mixture m(sizes, w0, o);
    auto nominal = [&](const Mixture& mix, Index position) {
      const std::vector<Index> c = mix.Consumed(position);
      long double total = 0;
      for (Index i = 0; i < k; ++i) {
        total += static_cast<long double>(c[i]) * o.tokens[i] / static_cast<long double>(sizes[i]);
      }
      return total;
    };
    // The points after the mixture's origin each begin a segment where the
    // (global) nominal tokens first reach them.
    auto check = [&](const Mixture& mix) {
      const long double origin = nominal(mix, 0);
      std::vector<Index> later;
      for (const SchedulePoint& p : o.schedule) {
        if (static_cast<long double>(p.position) > origin) later.push_back(p.position);
      }
      ASSERT_EQ(mix.segments().size(), later.size() + 1) << "trial " << trial;
      for (std::size_t j = 1; j < mix.segments().size(); ++j) {
        const Index begin = mix.segments()[j].begin - mix.options().skip;
        const auto target = static_cast<long double>(later[j - 1]);
        ASSERT_GE(nominal(mix, begin), target) << "trial " << trial << " point " << j;
        ASSERT_LT(nominal(mix, begin - mix.block()), target) << "trial " << trial << " point " << j;
        ++changes;
      }
    };
    if (o.interpolation == Interpolation::kStep) {
      check(m);
    } else {
      // 16 steps between points, each its own segment.
      ASSERT_GE(m.segments().size(), 2u);
      for (std::size_t j = 1; j < m.segments().size(); ++j) {
        ASSERT_GT(m.segments()[j].begin, m.segments()[j - 1].begin);
      }
      continue;
    }
    // Resume from a random position: unchanged, the same samples; with the
    // weights restated (a new plan from there, re-blocked at the position),
    // the later points still take effect where the global nominal tokens
    // reach them.
    const Index at = static_cast<Index>(rng() % (m.segments().back().begin + 2 * m.block()));
    const MixtureState state = m.State(at);
    const Mixture same = Mixture::FromState(state);
    const Index n = 3000;
    std::vector<Index> s1(n), i1(n), s2(n), i2(n);
    m.Fill(at, at + n, s1.data(), i1.data());
    same.Fill(0, n, s2.data(), i2.data());
    ASSERT_EQ(s1, s2);
    ASSERT_EQ(i1, i2);
    const Mixture changed = Mixture::FromState(state, w0);
    ASSERT_EQ(changed.options().skip, 0);
    check(changed);
  }
  EXPECT_GE(changes, 100);
  // Needs the sources' tokens whatever `by` is.
  MixtureOptions bad;
  bad.schedule_unit = MixBy::kTokens;
  bad.schedule = {{100, {1.0, 0.0}}};
  try {
    Mixture({10, 20}, {1, 1}, bad);
    ADD_FAILURE() << "accepted a token schedule without lengths";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("lengths: a schedule in tokens needs", 0), 0u)
        << e.what();
  }
}

TEST(MixtureTest, TokenWeightsBecomeSampleSharesByMeanLength) {
  MixtureOptions o;
  o.by = MixBy::kTokens;
  o.tokens = {1000 * 100, 1000 * 10};  // mean lengths 100 and 10
  o.block = 1100;
  const Mixture m({1000, 1000}, {1, 1}, o);
  std::vector<Index> c(2);
  m.BlockCounts(0, c.data());
  // Equal tokens: 100 samples of 100 tokens per 1000 samples of 10.
  EXPECT_EQ(c[0], 100);
  EXPECT_EQ(c[1], 1000);
}

TEST(MixtureTest, EdgesSingleSourceZeroWeightsEmptySourcesHugeSizes) {
  const Mixture one({7}, {3});
  for (Index i = 0; i < 50; ++i) EXPECT_EQ(one.At(i).source, 0);
  const Mixture zero({5, 0, 9}, {1, 0, 0});
  const auto seq = Sequence(zero, 3000);
  for (const auto& s : seq) EXPECT_EQ(s.source, 0);
  const Index huge = (Index{1} << 62) + 12345;
  const Mixture big({huge, huge - 1}, {1, 2}, Seeded(1));
  const Index far = Mixture::kMaxSamples - 5;
  const auto c = big.Consumed(far);
  EXPECT_EQ(c[0] + c[1], far);
  const MixSample s = big.At(far);
  EXPECT_GE(s.item, 0);
  EXPECT_LT(s.item, big.sizes()[s.source]);
  // Extreme ratio: the default block grows to fit the smallest share.
  const Mixture extreme({10, 10}, {1, 1e-7});
  EXPECT_GE(extreme.block(), 10000000);
  std::vector<Index> bc(2);
  extreme.BlockCounts(3, bc.data());
  EXPECT_GE(bc[1], 1);
}

TEST(MixtureTest, FillAgreesWithAtAcrossChunksAndBlockSizes) {
  // Small blocks take the table path of Fill, blocks over 2^20 the sample by
  // sample path; chunks start and end inside blocks.
  for (const auto& [sizes, weights] :
       std::vector<std::pair<std::vector<Index>, std::vector<double>>>{{{7, 300, 2}, {2, 5, 1}},
                                                                       {{10, 10}, {1, 1e-7}}}) {
    const Mixture m(sizes, weights, Seeded(12));
    const Index base = 3 * m.block() - 1500;
    std::vector<Index> s(3000), it(3000);
    m.Fill(base, base + 3000, s.data(), it.data());
    for (Index j = 0; j < 3000; j += 150) {
      ASSERT_EQ(m.At(base + j), (MixSample{s[j], it[j]})) << m.block() << " " << j;
    }
    std::vector<Index> s2(1000), it2(1000);
    m.Fill(base + 1000, base + 2000, s2.data(), it2.data());
    ASSERT_TRUE(std::equal(s2.begin(), s2.end(), s.begin() + 1000));
    ASSERT_TRUE(std::equal(it2.begin(), it2.end(), it.begin() + 1000));
  }
}

// Fill lists each source's items once per run of consecutive blocks (up to
// 2^15 samples) and carries every source's cursor from block to block: long
// fills, cut into chunks that start and end anywhere, equal At (closed forms
// and Permutation::Forward, no Fill) at every position, across runs, epochs
// of small sources (several per run), schedule segments, the cut last block
// of a bounded mixture and resumed plans.
TEST(MixtureTest, LongFillsEqualLookupsAcrossRunsOfBlocks) {
  std::mt19937_64 rng(77);
  int checked = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const Index k = 1 + static_cast<Index>(rng() % (trial % 3 == 0 ? 120 : 9));
    std::vector<Index> sizes(k);
    for (auto& n : sizes) {
      n = trial % 4 == 0 ? 1 + static_cast<Index>(rng() % 40)
                         : 1 + static_cast<Index>(rng() % 30000);
    }
    MixtureOptions o;
    o.seed = rng();
    auto w = RandomWeights(rng, k);
    if (trial % 3 == 1) {
      o.schedule.push_back({static_cast<Index>(rng() % 50000), RandomWeights(rng, k)});
      o.interpolation = trial % 6 == 1 ? Interpolation::kLinear : Interpolation::kStep;
      o.schedule.push_back(
          {o.schedule[0].position + 1 + static_cast<Index>(rng() % 50000), RandomWeights(rng, k)});
    }
    if (trial % 4 == 2) {
      o.repeat.assign(k, true);
      o.repeat[rng() % k] = false;
    }
    if (trial % 5 == 3) o.block = 1024 * (1 + static_cast<Index>(rng() % 8));
    Mixture m = [&] {
      try {
        return Mixture(sizes, w, o);
      } catch (const std::invalid_argument&) {  // a fixed block too small for the shares
        o.block.reset();
        return Mixture(sizes, w, o);
      }
    }();
    if (m.block() > (Index{1} << 15)) continue;
    if (trial % 7 == 5 && m.size() > 1000) m = Mixture::FromState(m.State(m.size() / 3 + 17));
    const Index window = std::min<Index>(m.size(), 60000 + static_cast<Index>(rng() % 60000));
    const Index begin =
        trial % 4 == 2 ? m.size() - window : static_cast<Index>(rng() % (Index{1} << 20));
    std::vector<Index> s(window), it(window);
    for (Index at = 0; at < window;) {
      const Index chunk = std::min<Index>(window - at, 1 + static_cast<Index>(rng() % 50000));
      m.Fill(begin + at, begin + at + chunk, s.data() + at, it.data() + at);
      at += chunk;
    }
    for (Index j = 0; j < window; j += 1 + static_cast<Index>(trial % 3)) {
      ASSERT_EQ(m.At(begin + j), (MixSample{s[j], it[j]}))
          << "trial " << trial << " position " << begin + j << " block " << m.block();
    }
    ++checked;
  }
  EXPECT_GE(checked, 16);
}

// At and Take (one lookup: the block's counts, the slot's source, the rank
// among the source's samples of the block by the cheapest count) against
// Fill of a window around random positions, over random configurations:
// K from 1 to 300, zero and extreme weights, schedules, fixed large blocks
// (all three rank counts), positions near the end of a 2^62-sample mixture,
// resumed plans (skip, origin).
// Regression (sweep): Mixture([10, 20], [0, 1], block=2^53 + 1) was accepted,
// and a lookup inside a block scans up to half of it: blocks are bounded by
// kMaxBlock, given (`block`) or needed by a tiny share (`weights`, `schedule`).
TEST(MixtureTest, RegressionBlocksAboveTheBoundAreRefusedNamingWhatSetThem) {
  auto refused = [](const std::vector<double>& w, MixtureOptions o, const std::string& prefix) {
    try {
      Mixture m({10, 20}, w, o);
      ADD_FAILURE() << "accepted a block of " << m.block();
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    }
  };
  MixtureOptions o;
  o.block = (Index{1} << 53) + 1;
  refused({0.0, 1.0}, o, "block: must be in [1, 2^28], got 9007199254740993");
  o.block = Mixture::kMaxBlock + 1;
  refused({1.0, 1.0}, o, "block: must be in [1, 2^28], got 268435457");
  // Integral weights are exact shares: 1 of 2^40 + 1 needs a block of 2^40 + 1.
  refused({1.0, std::ldexp(1.0, 40)}, {}, "weights: the smallest positive share (1 of");
  MixtureOptions scheduled;
  scheduled.schedule.push_back({100, {1.0, std::ldexp(1.0, 40)}});
  refused({1.0, 1.0}, scheduled, "schedule: the smallest positive share (1 of");
  scheduled.interpolation = Interpolation::kLinear;
  refused({1.0, 1.0}, scheduled, "schedule: the smallest positive share");
  // The bound itself is accepted: 1 of 2^28 shares, and a lookup at the end
  // of the first block (the longest scan) equals the sequence there.
  Mixture m({10, 20}, {1.0, std::ldexp(1.0, 28) - 1}, {});
  EXPECT_EQ(m.block(), Mixture::kMaxBlock);
  const Index last = Mixture::kMaxBlock - 1;
  Index source, item;
  m.Fill(last, last + 1, &source, &item);
  EXPECT_EQ(m.At(last), (MixSample{source, item}));
  o.block = Mixture::kMaxBlock;
  EXPECT_EQ(Mixture({10, 20}, {0.0, 1.0}, o).block(), Mixture::kMaxBlock);
}

TEST(MixtureTest, LookupsEqualFillAtRandomPositionsOverManyConfigurations) {
  std::mt19937_64 rng(2024);
  int checked = 0;
  for (int trial = 0; trial < 90; ++trial) {
    const Index k =
        trial % 10 == 0 ? 1 : 1 + static_cast<Index>(rng() % (trial % 3 == 0 ? 300 : 8));
    std::vector<Index> sizes(k);
    for (auto& n : sizes) {
      n = trial % 7 == 0 ? (Index{1} << 62) - static_cast<Index>(rng() % 1000)
                         : 1 + static_cast<Index>(rng() % 5000);
    }
    MixtureOptions o;
    o.seed = rng();
    auto w = RandomWeights(rng, k);
    if (trial % 11 == 5 && k <= 8) w[0] = 1e-4;  // an extreme ratio: a large block
    if (trial % 4 == 1) {
      o.schedule.push_back({static_cast<Index>(rng() % 100000), RandomWeights(rng, k)});
      o.schedule.push_back(
          {o.schedule[0].position + 1 + static_cast<Index>(rng() % 100000), RandomWeights(rng, k)});
      o.interpolation = trial % 8 == 1 ? Interpolation::kLinear : Interpolation::kStep;
    }
    Index natural;
    try {
      natural = Mixture(sizes, w, o).block();
    } catch (const std::invalid_argument& e) {
      // A share below 1 / 2^28 (K = 300 sources, a linear ramp) needs a block
      // above kMaxBlock: refused; such blocks were skipped here anyway.
      ASSERT_NE(std::string(e.what()).find("needs blocks of"), std::string::npos) << e.what();
      continue;
    }
    if (natural > (Index{1} << 16)) continue;  // keep the test quick
    if (trial % 5 == 2) o.block = natural * (1 + static_cast<Index>(rng() % 16));
    if (trial % 6 == 3) {
      o.repeat.assign(k, true);
      o.repeat[rng() % k] = false;
    }
    Mixture m(sizes, w, o);
    if (trial % 9 == 4 && m.size() > 10 && !o.block.has_value()) {
      // A resumed plan: unchanged (skip) or with new weights (origin, start;
      // a block fixed for the old shares may be too small for new ones).
      const Index at = static_cast<Index>(rng() % (m.size() / 2));
      m = trial % 2 == 0 ? Mixture::FromState(m.State(at))
                         : Mixture::FromState(m.State(at), RandomWeights(rng, k));
    }
    if (m.size() == 0) continue;
    ++checked;
    std::vector<Index> scattered;  // one position per probe: Take's sparse path
    std::vector<MixSample> expected;
    for (int probe = 0; probe < 8; ++probe) {
      const Index window = std::min<Index>(m.size(), 1 + static_cast<Index>(rng() % 700));
      const Index begin =
          probe % 3 == 0 ? m.size() - window : static_cast<Index>(rng() % (m.size() - window + 1));
      std::vector<Index> s(window), it(window);
      m.Fill(begin, begin + window, s.data(), it.data());
      std::vector<Index> positions;
      for (Index j = 0; j < window; j += 1 + static_cast<Index>(rng() % 13)) {
        positions.push_back(begin + j);
        ASSERT_EQ(m.At(begin + j), (MixSample{s[j], it[j]}))
            << "trial " << trial << " position " << begin + j << " block " << m.block();
      }
      scattered.push_back(positions.back());
      expected.push_back({s[positions.back() - begin], it[positions.back() - begin]});
      std::vector<Index> ts(positions.size()), ti(positions.size());
      m.Take(positions, ts.data(), ti.data());
      for (std::size_t j = 0; j < positions.size(); ++j) {
        ASSERT_EQ(ts[j], s[positions[j] - begin]) << "trial " << trial;
        ASSERT_EQ(ti[j], it[positions[j] - begin]) << "trial " << trial;
      }
    }
    std::vector<Index> ts(scattered.size()), ti(scattered.size());
    m.Take(scattered, ts.data(), ti.data());
    for (std::size_t j = 0; j < scattered.size(); ++j) {
      ASSERT_EQ((MixSample{ts[j], ti[j]}), expected[j]) << "trial " << trial;
    }
  }
  EXPECT_GE(checked, 60);  // most configurations have small enough blocks
  // Take checks every position before writing; an empty list is fine.
  const Mixture m({5, 7}, {1, 2});
  std::vector<Index> s(2, -9), it(2, -9);
  const std::vector<Index> bad = {0, m.size()};
  EXPECT_THROW(m.Take(bad, s.data(), it.data()), std::out_of_range);
  EXPECT_EQ(s[0], -9);
  m.Take({}, s.data(), it.data());
}

TEST(MixtureTest, BadInputNamesTheParameter) {
  auto message = [](auto f) { return base_testing::ErrorOf<std::exception>(f); };
  EXPECT_EQ(message([] { Mixture({}, {}); }).rfind("sizes:", 0), 0u);
  EXPECT_EQ(message([] { Mixture({-1}, {1}); }).rfind("sizes:", 0), 0u);
  EXPECT_EQ(message([] { Mixture({3, 0}, {1, 1}); }).rfind("sizes:", 0), 0u);
  EXPECT_EQ(message([] { Mixture({3}, {1, 1}); }).rfind("weights:", 0), 0u);
  EXPECT_EQ(message([] { Mixture({3, 3}, {0, 0}); }).rfind("weights:", 0), 0u);
  EXPECT_EQ(message([] { Mixture({3, 3}, {1, NAN}); }).rfind("weights:", 0), 0u);
  EXPECT_EQ(message([] { Mixture({3, 3}, {1, -1}); }).rfind("weights:", 0), 0u);
  EXPECT_EQ(message([] {
              Mixture({3, 3}, {1, 1}, Blocked(1));
            }).rfind("block: 1 is too small", 0),
            0u);
  EXPECT_EQ(message([] { Mixture({3, 3}, {1, 1}, Blocked(0)); }).rfind("block:", 0), 0u);
  MixtureOptions bad_schedule;
  bad_schedule.schedule = {{10, {1, 1}}, {10, {1, 2}}};
  EXPECT_EQ(message([&] { Mixture({3, 3}, {1, 1}, bad_schedule); }).rfind("schedule:", 0), 0u);
  MixtureOptions tokens;
  tokens.by = MixBy::kTokens;
  EXPECT_EQ(message([&] { Mixture({3, 3}, {1, 1}, tokens); }).rfind("lengths:", 0), 0u);
  EXPECT_EQ(message([] { (void)ParseMixBy("bytes"); }).rfind("by:", 0), 0u);
  EXPECT_EQ(message([] { (void)Mixture({3}, {1}).At(-1); }).rfind("position:", 0), 0u);
  MixtureOptions start;
  start.repeat = {false};
  start.start = {4};
  EXPECT_EQ(message([&] { Mixture({3}, {1}, start); }).rfind("start:", 0), 0u);
}

}  // namespace
}  // namespace shardkit
