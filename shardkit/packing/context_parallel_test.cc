#include "shardkit/packing/context_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

// A random row: pieces whose padded lengths fit seq_len (some of zero length,
// some split pieces with start > 0).
struct Row {
  std::vector<PackItem> pieces;
  Index seq_len = 0;
};

Row RandomRow(std::mt19937_64& rng, Index C, Index g) {
  Row row;
  // A multiple of g and of 2C (the document-blind splits need the latter).
  const Index unit = g % (2 * C) == 0 ? g : g * 2 * C;
  row.seq_len = unit * std::uniform_int_distribution<Index>(1, 12)(rng);
  Index room = row.seq_len;
  Index item = 0;
  while (room > 0 && std::uniform_int_distribution<int>(0, 5)(rng) != 0) {
    const Index len = std::uniform_int_distribution<Index>(0, room)(rng);
    if (CpPaddedLength(len, g) > room) continue;
    const Index start = std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 7 : 0;
    row.pieces.push_back(PackItem{item++, len, 0, start});
    room -= CpPaddedLength(len, g);
  }
  return row;
}

// The token of document d at position t (what `copy` writes).
std::int64_t Token(Index d, Index t) { return 1000 * (d + 1) + t; }

struct Slice {
  std::vector<std::int64_t> input_ids, labels, position_ids, cp_index, padded_index;
  std::vector<std::int32_t> document_ids;
};

// Every (item, position) `copy` was asked for, for all collations so far.
std::vector<std::pair<Index, Index>>* copied = nullptr;

Slice Collate(const Row& row, const ContextParallelOptions& cp, Index r) {
  const Index L = row.seq_len / cp.size;
  Slice s;
  s.input_ids.assign(L, -7);
  s.labels.assign(L, -7);
  s.position_ids.assign(L, -7);
  s.cp_index.assign(L, -7);
  s.padded_index.assign(L, -7);
  s.document_ids.assign(L, -7);
  CollateOptions o;
  o.seq_len = row.seq_len;
  o.pad_token_id = -1;
  CpRowOutput out{s.input_ids.data(),    s.labels.data(),   s.position_ids.data(),
                  s.document_ids.data(), s.cp_index.data(), s.padded_index.data()};
  CollateCpRow(row.pieces, o, cp, r, out, [](const PackItem& p, std::int64_t* dst) {
    for (Index k = 0; k < p.length; ++k) {
      dst[k] = Token(p.item, p.start + k);
      if (copied) copied->push_back({p.item, p.start + k});
    }
  });
  return s;
}

// cu_seqlens_padded written from the rule (each non-empty piece rounded up to
// the granule, then the row's padding run).
std::vector<Index> CuPadded(const Row& row, Index g) {
  std::vector<Index> cu = {0};
  for (const PackItem& p : row.pieces) {
    if (p.length == 0) continue;
    Index padded = p.length;
    while (padded % g != 0) ++padded;
    cu.push_back(cu.back() + padded);
  }
  if (cu.back() < row.seq_len) cu.push_back(row.seq_len);
  return cu;
}

// TransformerEngine's thd_get_partitioned_indices, transcribed from its rule:
// for local token t, find its sequence i by the local boundaries cu / C; with
// s = the local length and idx = t - cu[i] / C, the global index is
// cu[i] + idx + (s / 2) * (idx < s / 2 ? rank : 2 * C - 2 - rank).
std::vector<Index> TransformerEngineIndices(const std::vector<Index>& cu, Index total, Index C,
                                            Index rank) {
  std::vector<Index> out;
  for (Index t = 0; t < total / C; ++t) {
    std::size_t i = 0;
    while (cu[i + 1] / C <= t) ++i;
    const Index s = (cu[i + 1] - cu[i]) / C;
    const Index idx = t - cu[i] / C;
    const Index offset = idx < s / 2 ? rank : 2 * C - 2 - rank;
    out.push_back(cu[i] + idx + (s / 2) * offset);
  }
  return out;
}

// torch's per-document head-tail layout: for each rank, document after
// document, chunk `rank` then chunk 2C - 1 - rank of 2C equal chunks.
std::vector<Index> TorchPerDocumentIndices(const std::vector<Index>& cu, Index C, Index rank) {
  std::vector<Index> out;
  for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
    const Index chunk = (cu[i + 1] - cu[i]) / (2 * C);
    for (const Index k : {rank, 2 * C - 1 - rank}) {
      for (Index j = 0; j < chunk; ++j) out.push_back(cu[i] + k * chunk + j);
    }
  }
  return out;
}

constexpr Index kSizes[] = {1, 2, 3, 4, 8};

constexpr CpStrategy kStrategies[] = {CpStrategy::kHeadTail, CpStrategy::kBalanced,
                                      CpStrategy::kPtrr};

// Calls check(cp, row, trial) on `trials` random rows of each strategy and
// size C (cp{C, none, strategy}); when `granular`, every third trial's
// granularity is 4 C.
template <typename Check>
void ForRandomRows(std::mt19937_64& rng, int trials, bool granular, Check&& check) {
  for (const CpStrategy strategy : kStrategies) {
    for (const Index C : kSizes) {
      for (int trial = 0; trial < trials; ++trial) {
        ContextParallelOptions cp{C, std::nullopt, strategy};
        if (granular && trial % 3 == 0) cp.granularity = 4 * C;
        const Row row = RandomRow(rng, C, CpGranule(cp));
        check(cp, row, trial);
      }
    }
  }
}

TEST(ContextParallel, SlicesAreDisjointAndCoverEveryRealTokenOnce) {
  std::mt19937_64 rng(1);
  ForRandomRows(rng, 200, true, [&](const ContextParallelOptions& cp, const Row& row, int trial) {
    const Index C = cp.size;
    const Index tokens = RowTokens(row.pieces);
    std::vector<int> seen(static_cast<std::size_t>(tokens), 0);
    std::vector<int> padded_seen(static_cast<std::size_t>(row.seq_len), 0);
    Index padding = 0;
    std::vector<std::pair<Index, Index>> reads;
    copied = &reads;
    for (Index r = 0; r < C; ++r) {
      const Slice s = Collate(row, cp, r);
      for (std::size_t j = 0; j < s.cp_index.size(); ++j) {
        ASSERT_GE(s.padded_index[j], 0);
        ASSERT_LT(s.padded_index[j], row.seq_len);
        ++padded_seen[static_cast<std::size_t>(s.padded_index[j])];
        if (s.cp_index[j] < 0) {
          ++padding;
          EXPECT_EQ(s.document_ids[j], -1);
          EXPECT_EQ(s.input_ids[j], -1);
          EXPECT_EQ(s.labels[j], -100);
          continue;
        }
        ASSERT_LT(s.cp_index[j], tokens);
        ++seen[static_cast<std::size_t>(s.cp_index[j])];
      }
    }
    copied = nullptr;
    // The ranks together read every real token of the row once: each rank
    // reads only its own tokens.
    std::vector<std::pair<Index, Index>> expect;
    for (const PackItem& p : row.pieces) {
      for (Index k = 0; k < p.length; ++k) expect.push_back({p.item, p.start + k});
    }
    std::sort(reads.begin(), reads.end());
    std::sort(expect.begin(), expect.end());
    EXPECT_EQ(reads, expect);
    for (int count : seen) ASSERT_EQ(count, 1) << "C=" << C << " trial " << trial;
    for (int count : padded_seen) ASSERT_EQ(count, 1);  // padded_index: a permutation
    EXPECT_EQ(padding, row.seq_len - tokens);
  });
}

TEST(ContextParallel, IndexMatchesTransformerEngineAndTorchPerDocumentLayout) {
  std::mt19937_64 rng(2);
  for (const Index C : kSizes) {
    for (int trial = 0; trial < 200; ++trial) {
      // TransformerEngine and torch need every sequence a multiple of 2C,
      // also for C = 1 (whose default granularity, 1, pads nothing).
      ContextParallelOptions cp{C, 2 * C};
      if (trial % 4 == 0) cp.granularity = 8 * C;
      const Index g = CpGranule(cp);
      const Row row = RandomRow(rng, C, g);
      const std::vector<Index> cu = CuPadded(row, g);
      std::vector<std::int32_t> ours = {0};
      (void)AppendCpCuSeqlensPadded(row.pieces, row.seq_len, cp, 0, &ours);
      ASSERT_EQ(std::vector<Index>(ours.begin(), ours.end()), cu);
      for (Index r = 0; r < C; ++r) {
        const Slice s = Collate(row, cp, r);
        const std::vector<Index> got(s.padded_index.begin(), s.padded_index.end());
        EXPECT_EQ(got, TransformerEngineIndices(cu, row.seq_len, C, r)) << "C=" << C << " r=" << r;
        EXPECT_EQ(got, TorchPerDocumentIndices(cu, C, r)) << "C=" << C << " r=" << r;
      }
    }
  }
}

TEST(ContextParallel, SliceIsTheUnpaddedRowAtCpIndex) {
  std::mt19937_64 rng(3);
  ForRandomRows(rng, 200, false, [&](const ContextParallelOptions& cp, const Row& row, int) {
    const Index C = cp.size;
    // The unpadded row, written out piece by piece.
    std::vector<std::int64_t> token, position, label;
    std::vector<std::int32_t> doc;
    std::int32_t d = 0;
    for (const PackItem& p : row.pieces) {
      if (p.length == 0) continue;
      for (Index k = 0; k < p.length; ++k) {
        token.push_back(Token(p.item, p.start + k));
        position.push_back(k);
        label.push_back(k == 0 ? -100 : Token(p.item, p.start + k));
        doc.push_back(d);
      }
      ++d;
    }
    std::vector<std::int64_t> inverse(token.size(), -1);  // flat slot of each token
    const Index L = row.seq_len / C;
    for (Index r = 0; r < C; ++r) {
      const Slice s = Collate(row, cp, r);
      for (Index j = 0; j < L; ++j) {
        const std::int64_t t = s.cp_index[static_cast<std::size_t>(j)];
        if (t < 0) continue;
        const std::size_t ut = static_cast<std::size_t>(t);
        EXPECT_EQ(s.input_ids[static_cast<std::size_t>(j)], token[ut]);
        EXPECT_EQ(s.labels[static_cast<std::size_t>(j)], label[ut]);
        EXPECT_EQ(s.position_ids[static_cast<std::size_t>(j)], position[ut]);
        EXPECT_EQ(s.document_ids[static_cast<std::size_t>(j)], doc[ut]);
        inverse[ut] = r * L + j;
      }
    }
    // The inverse is a permutation of the real tokens onto distinct slots,
    // and FillCpRestoreIndex gives it (-1 past the real tokens).
    std::vector<std::int64_t> sorted = inverse;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
    EXPECT_TRUE(sorted.empty() || sorted.front() >= 0);
    std::vector<std::int64_t> restore(static_cast<std::size_t>(row.seq_len), -7);
    FillCpRestoreIndex(row.pieces, row.seq_len, cp, restore.data());
    inverse.resize(static_cast<std::size_t>(row.seq_len), -1);
    EXPECT_EQ(restore, inverse);
  });
}

TEST(ContextParallel, LocalSequencesAreThePaddedBoundariesOverC) {
  std::mt19937_64 rng(4);
  for (const Index C : kSizes) {
    for (int trial = 0; trial < 100; ++trial) {
      const ContextParallelOptions cp{C, std::nullopt};
      const Index g = CpGranule(cp);
      const Row row = RandomRow(rng, C, g);
      const std::vector<Index> cu = CuPadded(row, g);
      for (Index r = 0; r < C; ++r) {
        const Slice s = Collate(row, cp, r);
        std::vector<std::int32_t> local = {0};
        AppendCpCuSeqlensLocal(row.pieces, row.seq_len, cp, r, 0, &local);
        std::vector<Index> over_c;
        for (const Index b : cu) over_c.push_back(b / C);
        EXPECT_EQ(std::vector<Index>(local.begin(), local.end()), over_c);
        // Every real slot of local sequence i belongs to piece i, and real
        // slots come before the padding of each chunk.
        for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
          for (Index j = cu[i] / C; j < cu[i + 1] / C; ++j) {
            const std::int32_t doc = s.document_ids[static_cast<std::size_t>(j)];
            EXPECT_TRUE(doc == -1 || doc == static_cast<std::int32_t>(i));
          }
        }
      }
    }
  }
}

// Brute force: the causal work of rank r's real tokens under the layout.
TEST(ContextParallel, RankWorkMatchesTheTokensEachRankHolds) {
  std::mt19937_64 rng(5);
  ForRandomRows(rng, 100, false, [&](const ContextParallelOptions& cp, const Row& row, int) {
    const Index C = cp.size;
    const CpStrategy strategy = cp.strategy;
    const std::vector<double> work =
        CpRankWork(row.pieces, row.seq_len, cp,
                   strategy == CpStrategy::kBalanced ? CpSplit::kBalanced
                   : strategy == CpStrategy::kPtrr   ? CpSplit::kPtrr
                                                     : CpSplit::kDocumentHeadTail);
    // The per-document layout: sum of (position + 1) over the rank's real slots.
    for (Index r = 0; r < C; ++r) {
      const Slice s = Collate(row, cp, r);
      double expect = 0;
      for (std::size_t j = 0; j < s.cp_index.size(); ++j) {
        if (s.cp_index[j] >= 0) expect += static_cast<double>(s.position_ids[j] + 1);
      }
      EXPECT_EQ(work[static_cast<std::size_t>(r)], expect);
    }
    EXPECT_EQ(CpRowCost(row.pieces, row.seq_len, cp), *std::max_element(work.begin(), work.end()));
    // Document-blind splits: the owner of unpadded row position t.
    std::vector<double> contiguous(static_cast<std::size_t>(C)), blind(static_cast<std::size_t>(C));
    Index t = 0;
    const Index width = row.seq_len / (2 * C);
    for (const PackItem& p : row.pieces) {
      for (Index k = 0; k < p.length; ++k, ++t) {
        contiguous[static_cast<std::size_t>(t / (2 * width))] += static_cast<double>(k + 1);
        const Index chunk = t / width;
        blind[static_cast<std::size_t>(chunk < C ? chunk : 2 * C - 1 - chunk)] +=
            static_cast<double>(k + 1);
      }
    }
    EXPECT_EQ(CpRankWork(row.pieces, row.seq_len, cp, CpSplit::kContiguous), contiguous);
    EXPECT_EQ(CpRankWork(row.pieces, row.seq_len, cp, CpSplit::kHeadTail), blind);
  });
}

// Both strategies: every sequence of cu_seqlens_padded holds one piece (its
// tokens in order from the sequence's start, then padding) or only padding,
// every local sequence of every rank holds real tokens of at most one piece,
// and max_seqlen is the longest sequence.
TEST(ContextParallel, EverySequenceOfThePaddedRowAndOfEachSliceHoldsOnePiece) {
  std::mt19937_64 rng(6);
  ForRandomRows(rng, 200, true, [&](const ContextParallelOptions& cp, const Row& row, int) {
    const Index C = cp.size;
    std::vector<std::int32_t> cu = {0};
    const Index longest = AppendCpCuSeqlensPadded(row.pieces, row.seq_len, cp, 0, &cu);
    ASSERT_EQ(cu.back(), row.seq_len);
    Index most = 0;
    for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
      ASSERT_LT(cu[i], cu[i + 1]);
      most = std::max<Index>(most, cu[i + 1] - cu[i]);
    }
    EXPECT_EQ(longest, most);
    // (document, position) at each padded-row position; (-1, -1) padding.
    std::vector<std::pair<Index, Index>> at(static_cast<std::size_t>(row.seq_len));
    for (Index r = 0; r < C; ++r) {
      const Slice s = Collate(row, cp, r);
      std::vector<std::int32_t> local = {0};
      AppendCpCuSeqlensLocal(row.pieces, row.seq_len, cp, r, 0, &local);
      ASSERT_EQ(local.back(), row.seq_len / C);
      for (std::size_t i = 0; i + 1 < local.size(); ++i) {
        ASSERT_LT(local[i], local[i + 1]);
        std::int32_t doc = -1;
        for (Index j = local[i]; j < local[i + 1]; ++j) {
          const std::int32_t d = s.document_ids[static_cast<std::size_t>(j)];
          if (d < 0) continue;
          if (doc < 0) doc = d;
          EXPECT_EQ(d, doc) << "rank " << r << " local sequence " << i;
        }
      }
      for (std::size_t j = 0; j < s.padded_index.size(); ++j) {
        at[static_cast<std::size_t>(s.padded_index[j])] = {s.document_ids[j], s.position_ids[j]};
        if (s.document_ids[j] < 0) at[static_cast<std::size_t>(s.padded_index[j])] = {-1, -1};
      }
    }
    for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
      const Index doc = at[static_cast<std::size_t>(cu[i])].first;
      bool padding = doc < 0;
      for (Index t = cu[i]; t < cu[i + 1]; ++t) {
        const auto [d, position] = at[static_cast<std::size_t>(t)];
        if (d < 0) {
          padding = true;
          continue;
        }
        EXPECT_FALSE(padding) << "a token after padding in sequence " << i;
        EXPECT_EQ(d, doc);
        EXPECT_EQ(position, t - cu[i]);
      }
    }
  });
}

// balanced: never busier than head-tail, the head-tail layout itself when no
// piece is whole, and whole pieces fit their rank.
TEST(ContextParallel, BalancedIsNeverBusierThanHeadTailAndIsItWithoutWholePieces) {
  std::mt19937_64 rng(7);
  for (const Index C : kSizes) {
    for (int trial = 0; trial < 300; ++trial) {
      const ContextParallelOptions balanced{C, std::nullopt, CpStrategy::kBalanced};
      const ContextParallelOptions head_tail{C, std::nullopt, CpStrategy::kHeadTail};
      const Row row = RandomRow(rng, C, CpGranule(balanced));
      const std::vector<double> b =
          CpRankWork(row.pieces, row.seq_len, balanced, CpSplit::kBalanced);
      const std::vector<double> h =
          CpRankWork(row.pieces, row.seq_len, head_tail, CpSplit::kDocumentHeadTail);
      EXPECT_LE(*std::max_element(b.begin(), b.end()), *std::max_element(h.begin(), h.end()));
      CpRowPlan plan;
      PlanCpRow(row.pieces, row.seq_len, balanced, &plan);
      if (C == 1) {
        EXPECT_FALSE(plan.whole);
      }
      if (!plan.whole) {
        EXPECT_EQ(b, h);
        for (Index r = 0; r < C; ++r) {
          EXPECT_EQ(Collate(row, balanced, r).padded_index,
                    Collate(row, head_tail, r).padded_index);
        }
      }
    }
  }
}

TEST(ContextParallel, BalancedKeepsShortDocumentsWholeOnTheLeastLoadedRank) {
  // Two ranks, seq_len 20, documents 5, 5, 2: head-tail pads them to 8, 8, 4
  // and rank 0's chunks hold the padding: work 7 / 26. Balanced: every
  // document's work (15, 15, 3) is at most the even share 33 / 2, so all are
  // whole candidates, longest first to the least-loaded rank (ties: the
  // lower): 5 -> rank 0, 5 -> rank 1, 2 -> rank 0: 18 / 15.
  const std::vector<PackItem> pieces = {{0, 5, 0, 0}, {1, 5, 0, 0}, {2, 2, 0, 0}};
  const ContextParallelOptions cp{2, std::nullopt, CpStrategy::kBalanced};
  EXPECT_EQ(CpRankWork(pieces, 20, cp, CpSplit::kDocumentHeadTail), (std::vector<double>{7, 26}));
  CpRowPlan plan;
  PlanCpRow(pieces, 20, cp, &plan);
  EXPECT_TRUE(plan.whole);
  EXPECT_EQ(plan.work, (std::vector<double>{18, 15}));
  EXPECT_EQ(plan.owner, (std::vector<std::int32_t>{1, 0, 0}));
  std::vector<std::int32_t> cu = {0}, local0 = {0}, local1 = {0};
  EXPECT_EQ(AppendCpCuSeqlensPadded(pieces, 20, cp, 0, &cu), 5);
  EXPECT_EQ(cu, (std::vector<std::int32_t>{0, 5, 7, 10, 15, 20}));
  AppendCpCuSeqlensLocal(pieces, 20, cp, 0, 0, &local0);
  AppendCpCuSeqlensLocal(pieces, 20, cp, 1, 0, &local1);
  EXPECT_EQ(local0, (std::vector<std::int32_t>{0, 5, 7, 10}));
  EXPECT_EQ(local1, (std::vector<std::int32_t>{0, 5, 10}));
}

// PTRR as the literature deals it: blocks of B tokens handed out one by one,
// rank 0, 1, ..., C - 1, then back C - 1, ..., 0, and so on; each rank's
// slots are its blocks in the order dealt.
TEST(ContextParallel, PtrrDealsBlocksRoundRobinWithMirroredPasses) {
  std::mt19937_64 rng(8);
  for (const Index C : {2, 3, 4, 8}) {
    for (const Index B : {1, 2, 5}) {
      const ContextParallelOptions cp{C, 2 * C * B, CpStrategy::kPtrr};
      const Row row = RandomRow(rng, C, 2 * C * B);
      std::vector<std::vector<Index>> dealt(static_cast<std::size_t>(C));
      Index r = 0, step = 1;
      for (Index block = 0; block * B < row.seq_len; ++block) {
        for (Index q = 0; q < B; ++q) dealt[static_cast<std::size_t>(r)].push_back(block * B + q);
        if (r + step < 0 || r + step >= C) {
          step = -step;  // the mirrored pass starts on the rank that ended the last
        } else {
          r += step;
        }
      }
      for (Index rank = 0; rank < C; ++rank) {
        const Slice s = Collate(row, cp, rank);
        EXPECT_EQ(std::vector<Index>(s.padded_index.begin(), s.padded_index.end()),
                  dealt[static_cast<std::size_t>(rank)])
            << "C=" << C << " B=" << B << " rank " << rank;
      }
    }
  }
}

TEST(ContextParallel, PerDocumentHeadTailBalancesEqualPaddedWork) {
  // One document of 8C tokens: the padded layout has no padding, and every
  // rank's two chunks cost 2C c^2 + c with c = 4.
  for (const Index C : kSizes) {
    const std::vector<PackItem> pieces = {PackItem{0, 8 * C, 0, 0}};
    const std::vector<double> work = CpRankWork(
        pieces, 8 * C, ContextParallelOptions{C, std::nullopt}, CpSplit::kDocumentHeadTail);
    for (double w : work) EXPECT_EQ(w, static_cast<double>(2 * C * 16 + 4));
  }
}

TEST(ContextParallel, RejectsBadOptionsNamingThem) {
  // "" when the options are valid.
  auto message = [](const ContextParallelOptions& cp, Index seq_len) -> std::string {
    const std::string e = base_testing::ErrorOf([&] { ValidateContextParallel(cp, seq_len); });
    return e == "no error" ? "" : e;
  };
  EXPECT_EQ(message({0, std::nullopt}, 8).rfind("cp_size: ", 0), 0u);
  EXPECT_EQ(message({Index{1} << 62, std::nullopt}, 16).rfind("cp_size: ", 0), 0u);  // 2C overflows
  EXPECT_EQ(message({9, std::nullopt}, 16).rfind("cp_size: 9", 0), 0u);
  EXPECT_EQ(message({2, 6}, 24).rfind("cp_granularity: 6", 0), 0u);
  EXPECT_EQ(message({2, -4}, 24).rfind("cp_granularity: -4", 0), 0u);
  EXPECT_EQ(message({4, std::nullopt}, 12).rfind("seq_len: 12", 0), 0u);
  EXPECT_EQ(message({2, 16}, 24).rfind("seq_len: 24", 0), 0u);
  EXPECT_EQ(message({1, std::nullopt}, 7), "");
  EXPECT_EQ(message({2, 0}, 8).rfind("cp_granularity: 0", 0), 0u);
  EXPECT_EQ(message({3, std::nullopt}, 18), "");
  EXPECT_THROW((void)ParseCpSplit("ring"), std::invalid_argument);
  EXPECT_THROW((void)ParseCpStrategy("ring"), std::invalid_argument);
  for (std::string_view name : CpSplitNames()) EXPECT_EQ(CpSplitName(ParseCpSplit(name)), name);
}

}  // namespace
}  // namespace shardkit
