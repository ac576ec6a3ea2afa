#include "shardkit/packing/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/errors.h"

namespace shardkit {

namespace {

constexpr EnumNames<CpSplit, kNumCpSplits> kCpSplits{
    "cp_split", "split", {"contiguous", "head_tail", "document_head_tail", "balanced", "ptrr"}};
constexpr EnumNames<CpStrategy, 3> kCpStrategies{
    "cp_strategy", "strategy", {"head_tail", "balanced", "ptrr"}};

bool IsPtrr(const ContextParallelOptions& cp) {
  return cp.strategy == CpStrategy::kPtrr && cp.size > 1;
}

// The PTRR block size B = g / 2C.
Index PtrrBlock(const ContextParallelOptions& cp) { return CpGranule(cp) / (2 * cp.size); }

// Keys attended by the causal queries at positions [a, b) of one document:
// sum of (q + 1).
double CausalWork(Index a, Index b) {
  if (b <= a) return 0;
  const double x = static_cast<double>(a), y = static_cast<double>(b);
  return (y * (y + 1) - x * (x + 1)) / 2;
}

}  // namespace

void PlanCpRow(std::span<const Piece> pieces, Index seq_len, const ContextParallelOptions& cp,
               CpRowPlan* plan) {
  const Index C = cp.size, g = CpGranule(cp), L = seq_len / C;
  const std::size_t n = pieces.size(), ranks = static_cast<std::size_t>(C);
  plan->owner.assign(n, -1);
  plan->whole = false;
  if (cp.strategy != CpStrategy::kBalanced) {  // every piece split; no work needed
    plan->work.clear();
    plan->split_padded = CpPaddedTokens(pieces, g);
    return;
  }
  plan->work.assign(ranks, 0.0);
  // Each piece's head-tail work per rank, and the all-split layout.
  thread_local std::vector<double> split_work;
  split_work.assign(n * ranks, 0.0);
  Index all_padded = 0;
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Index l = pieces[i].length;
    if (l == 0) continue;
    const Index P = CpPaddedLength(l, g);
    all_padded += P;
    total += CausalWork(0, l);
    for (Index r = 0; r < C; ++r) {
      double w = 0;
      for (const CpChunk& chunk : CpChunks(P, C, r)) {
        w += CausalWork(chunk.start, std::min(l, chunk.start + chunk.length));
      }
      split_work[i * ranks + static_cast<std::size_t>(r)] = w;
      plan->work[static_cast<std::size_t>(r)] += w;
    }
  }
  plan->split_padded = all_padded;
  if (C == 1) return;
  double best = *std::max_element(plan->work.begin(), plan->work.end());
  const double share = total / static_cast<double>(C);  // no layout's busiest rank does less
  if (best <= share) return;
  // Non-empty pieces by length, shortest first: a threshold's candidates are a prefix.
  thread_local std::vector<std::size_t> order;
  order.clear();
  for (std::size_t i = 0; i < n; ++i) {
    if (pieces[i].length > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return pieces[a].length < pieces[b].length;
  });
  // suffix[j * C + r]: rank r's head-tail work of the pieces order[j ..],
  // suffix_padded[j] their padded tokens (a threshold's split pieces).
  thread_local std::vector<double> suffix;
  thread_local std::vector<Index> suffix_padded;
  const std::size_t m = order.size();
  suffix.assign((m + 1) * ranks, 0.0);
  suffix_padded.assign(m + 1, 0);
  for (std::size_t j = m; j-- > 0;) {
    for (std::size_t r = 0; r < ranks; ++r) {
      suffix[j * ranks + r] = suffix[(j + 1) * ranks + r] + split_work[order[j] * ranks + r];
    }
    suffix_padded[j] = suffix_padded[j + 1] + CpPaddedLength(pieces[order[j]].length, g);
  }
  thread_local std::vector<std::int32_t> to_rank;  // by position in order
  thread_local std::vector<double> work;
  thread_local std::vector<Index> room;
  std::size_t tried = 0;
  for (int k = 0; k <= 10; ++k) {
    const double threshold = std::ldexp(share, -k);
    std::size_t count = 0;
    while (count < m && CausalWork(0, pieces[order[count]].length) <= threshold) ++count;
    if (count == 0) break;  // smaller thresholds take nothing either
    if (count == tried) continue;
    tried = count;
    work.assign(suffix.begin() + static_cast<std::ptrdiff_t>(count * ranks),
                suffix.begin() + static_cast<std::ptrdiff_t>((count + 1) * ranks));
    const Index split = suffix_padded[count];
    room.assign(ranks, L - split / C);
    to_rank.resize(count);
    Index split_now = split;
    bool fits = true;
    for (std::size_t j = count; j-- > 0;) {  // longest candidate first
      const std::size_t i = order[j];
      const Index l = pieces[i].length;
      std::size_t to = ranks;
      for (std::size_t r = 0; r < ranks; ++r) {
        if (room[r] >= l && (to == ranks || work[r] < work[to])) to = r;
      }
      if (to == ranks) {
        // No rank has room: split it, which takes P / C slots of every rank.
        const Index share_slots = CpPaddedLength(l, g) / C;
        for (std::size_t r = 0; r < ranks; ++r) {
          room[r] -= share_slots;
          fits = fits && room[r] >= 0;
          work[r] += split_work[i * ranks + r];
        }
        if (!fits) break;
        split_now += CpPaddedLength(l, g);
        to_rank[j] = -1;
        continue;
      }
      to_rank[j] = static_cast<std::int32_t>(to);
      work[to] += CausalWork(0, l);
      room[to] -= l;
    }
    if (!fits) continue;
    const double most = *std::max_element(work.begin(), work.end());
    if (most < best) {
      best = most;
      plan->owner.assign(n, -1);
      for (std::size_t j = 0; j < count; ++j) plan->owner[order[j]] = to_rank[j];
      plan->work = work;
      plan->split_padded = split_now;
      plan->whole = true;
    }
  }
}

SHARDKIT_ENUM_PARSE_AND_NAME(CpStrategy, kCpStrategies, ParseCpStrategy, CpStrategyName)

SHARDKIT_ENUM_PARSE_AND_NAMES(CpSplit, kCpSplits, ParseCpSplit, CpSplitName, CpSplitNames)

void ValidateContextParallel(const ContextParallelOptions& cp, Index seq_len) {
  CheckAtLeast("cp_size", cp.size, 1);
  if (cp.size > 1 && cp.size > seq_len / 2) {  // also keeps 2 x cp_size from overflowing
    ThrowInvalid("cp_size", Str(cp.size) + " leaves fewer than 2 tokens of seq_len " +
                                Str(seq_len) + " to each context-parallel rank");
  }
  if (cp.granularity && (*cp.granularity < 1 || *cp.granularity % (2 * cp.size) != 0)) {
    ThrowInvalid(
        "cp_granularity",
        Str(*cp.granularity) + " is not a positive multiple of 2 x cp_size = " + Str(2 * cp.size));
  }
  const Index g = CpGranule(cp);
  if (g > 1 && seq_len % g != 0) {
    ThrowInvalid("seq_len", Str(seq_len) + " is not a multiple of " + Str(g) +
                                " (the context-parallel granularity: 2 x cp_size, or "
                                "cp_granularity)");
  }
}

Index CpGranule(const ContextParallelOptions& cp) {
  if (cp.granularity) return *cp.granularity;
  return cp.size > 1 ? 2 * cp.size : 1;
}

Index CpPaddedTokens(std::span<const Piece> pieces, Index granule) {
  Index sum = 0;
  for (const Piece& p : pieces) sum += CpPaddedLength(p.length, granule);
  return sum;
}

void FillCpRestoreIndex(std::span<const Piece> pieces, Index seq_len,
                        const ContextParallelOptions& cp, std::int64_t* restore) {
  const Index C = cp.size, L = seq_len / C, g = CpGranule(cp);
  if (IsPtrr(cp)) {
    const Index tokens = RowTokens(pieces), B = PtrrBlock(cp);
    for (Index t = 0; t < seq_len; ++t) restore[t] = t < tokens ? CpPtrrSlot(t, C, B, L) : -1;
    return;
  }
  thread_local CpRowPlan plan;
  PlanCpRow(pieces, seq_len, cp, &plan);
  std::fill(restore, restore + seq_len, std::int64_t{-1});
  Index slot = 0;      // the current split piece's first local slot (the same on every rank)
  Index unpadded = 0;  // the current piece's first position in the unpadded row
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.length == 0 || plan.owner[i] >= 0) {
      unpadded += p.length;
      continue;
    }
    const Index P = CpPaddedLength(p.length, g);
    for (Index r = 0; r < C; ++r) {
      Index at = slot;
      for (const CpChunk& chunk : CpChunks(P, C, r)) {
        const Index real = std::max<Index>(0, std::min(chunk.length, p.length - chunk.start));
        for (Index q = 0; q < real; ++q) restore[unpadded + chunk.start + q] = r * L + at + q;
        at += chunk.length;
      }
    }
    slot += P / C;
    unpadded += p.length;
  }
  if (!plan.whole) return;
  std::vector<Index> at(static_cast<std::size_t>(C), slot);  // each rank's next tail slot
  unpadded = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (plan.owner[i] >= 0) {
      const Index r = plan.owner[i];
      Index& to = at[static_cast<std::size_t>(r)];
      for (Index q = 0; q < p.length; ++q) restore[unpadded + q] = r * L + to + q;
      to += p.length;
    }
    unpadded += p.length;
  }
}

Index AppendCpCuSeqlensPadded(std::span<const Piece> pieces, Index seq_len,
                              const ContextParallelOptions& cp, std::int32_t base,
                              std::vector<std::int32_t>* out) {
  const Index C = cp.size, g = CpGranule(cp);
  Index at = 0, longest = 0;
  auto close = [&](Index end) {
    longest = std::max(longest, end - at);
    at = end;
    out->push_back(base + static_cast<std::int32_t>(at));
  };
  if (IsPtrr(cp)) {  // the unpadded row: pieces, then the padding run
    for (const Piece& p : pieces) {
      if (p.length > 0) close(at + p.length);
    }
    if (at < seq_len) close(seq_len);
    return longest;
  }
  thread_local CpRowPlan plan;
  PlanCpRow(pieces, seq_len, cp, &plan);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].length > 0 && plan.owner[i] < 0) close(at + CpPaddedLength(pieces[i].length, g));
  }
  if (!plan.whole) {
    if (at < seq_len) close(seq_len);
    return longest;
  }
  const Index S = at, tail = seq_len / C - S / C;  // each rank's tail slots
  for (Index r = 0; r < C; ++r) {
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      if (plan.owner[i] == r) close(at + pieces[i].length);
    }
    if (at < S + (r + 1) * tail) close(S + (r + 1) * tail);
  }
  return longest;
}

void AppendCpCuSeqlensLocal(std::span<const Piece> pieces, Index seq_len,
                            const ContextParallelOptions& cp, Index cp_rank, std::int32_t base,
                            std::vector<std::int32_t>* out) {
  const Index C = cp.size, g = CpGranule(cp), L = seq_len / C;
  Index at = 0;
  auto close = [&](Index end) {
    at = end;
    out->push_back(base + static_cast<std::int32_t>(at));
  };
  if (IsPtrr(cp)) {  // the rank's slots of each piece, then of the padding
    const Index B = PtrrBlock(cp);
    Index end = 0;
    for (const Piece& p : pieces) {
      if (p.length == 0) continue;
      end += p.length;
      const Index slots = CpPtrrCount(end, cp_rank, C, B);
      if (slots > at) close(slots);
    }
    if (at < L) close(L);
    return;
  }
  thread_local CpRowPlan plan;
  PlanCpRow(pieces, seq_len, cp, &plan);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].length > 0 && plan.owner[i] < 0) {
      close(at + CpPaddedLength(pieces[i].length, g) / C);
    }
  }
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (plan.owner[i] == cp_rank) close(at + pieces[i].length);
  }
  if (at < L) close(L);
}

std::vector<double> CpRankWork(std::span<const Piece> pieces, Index seq_len,
                               const ContextParallelOptions& cp, CpSplit split) {
  const Index C = cp.size;
  std::vector<double> work(static_cast<std::size_t>(C), 0.0);
  if (split == CpSplit::kPtrr) {
    ContextParallelOptions ptrr = cp;
    ptrr.strategy = CpStrategy::kPtrr;
    if (C == 1) return {CpRowCost(pieces, seq_len, cp)};
    const Index B = PtrrBlock(ptrr);
    Index begin = 0;
    for (const Piece& p : pieces) {
      // The piece's row positions [begin, begin + l), block by block.
      for (Index t = begin; t < begin + p.length;) {
        const Index block_end = std::min(begin + p.length, (t / B + 1) * B);
        const Index pass = t / (C * B), k = t % (C * B) / B;
        const Index r = pass % 2 == 0 ? k : C - 1 - k;  // the block's owner
        work[static_cast<std::size_t>(r)] += CausalWork(t - begin, block_end - begin);
        t = block_end;
      }
      begin += p.length;
    }
    return work;
  }
  if (split == CpSplit::kBalanced) {
    ContextParallelOptions balanced = cp;
    balanced.strategy = CpStrategy::kBalanced;
    thread_local CpRowPlan plan;
    PlanCpRow(pieces, seq_len, balanced, &plan);
    return plan.work;
  }
  if (split == CpSplit::kDocumentHeadTail) {
    const Index g = CpGranule(cp);
    for (const Piece& p : pieces) {
      const Index P = CpPaddedLength(p.length, g);
      for (Index r = 0; r < C; ++r) {
        for (const CpChunk& chunk : CpChunks(P, C, r)) {
          work[static_cast<std::size_t>(r)] +=
              CausalWork(chunk.start, std::min(p.length, chunk.start + chunk.length));
        }
      }
    }
    return work;
  }
  // Document-blind splits: rank of each run of the unpadded row.
  const Index parts = split == CpSplit::kContiguous ? C : 2 * C;
  const Index width = seq_len / parts;
  auto owner = [&](Index part) {
    if (split == CpSplit::kContiguous) return part;
    return part < C ? part : 2 * C - 1 - part;
  };
  Index row_at = 0;
  for (const Piece& p : pieces) {
    // The piece covers row positions [row_at, row_at + length): walk the parts it meets.
    Index q = 0;
    while (q < p.length) {
      const Index part = (row_at + q) / width;
      const Index part_end = std::min(p.length, (part + 1) * width - row_at);
      work[static_cast<std::size_t>(owner(part))] += CausalWork(q, part_end);
      q = part_end;
    }
    row_at += p.length;
  }
  return work;
}

Index CpDocumentPadding(std::span<const Piece> pieces, Index seq_len,
                        const ContextParallelOptions& cp) {
  if (IsPtrr(cp)) return 0;
  thread_local CpRowPlan plan;
  PlanCpRow(pieces, seq_len, cp, &plan);
  Index padding = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (plan.owner[i] < 0)
      padding += CpPaddedLength(pieces[i].length, CpGranule(cp)) - pieces[i].length;
  }
  return padding;
}

void ValidateCpRow(std::span<const Piece> pieces, Index seq_len, const ContextParallelOptions& cp,
                   CpSplit split) {
  if (seq_len < 1 || seq_len > kMaxCpRowTokens) {
    ThrowInvalid("seq_len", Str(seq_len) + " is outside [1, 2^28]");
  }
  ValidateContextParallel(cp, seq_len);
  for (const Piece& p : pieces) {
    if (p.length < 0 || p.length > seq_len) {
      ThrowInvalid("lengths", Str(p.length) + " is outside [0, seq_len = " + Str(seq_len) + "]");
    }
  }
  if (split == CpSplit::kDocumentHeadTail || split == CpSplit::kBalanced ||
      split == CpSplit::kPtrr) {
    const Index padded = CpPaddedTokens(pieces, CpGranule(cp));
    if (padded > seq_len) {
      ThrowInvalid("lengths", "the row holds " + Str(padded) +
                                  " tokens with every document padded to " + Str(CpGranule(cp)) +
                                  ", more than seq_len " + Str(seq_len));
    }
    return;
  }
  if (seq_len % (2 * cp.size) != 0) {
    ThrowInvalid("seq_len",
                 Str(seq_len) + " is not a multiple of 2 x cp_size = " + Str(2 * cp.size));
  }
  if (RowTokens(pieces) > seq_len) {
    ThrowInvalid("lengths", "the row holds " + Str(RowTokens(pieces)) +
                                " tokens, more than seq_len " + Str(seq_len));
  }
}

double CpRowCost(std::span<const Piece> pieces, Index seq_len, const ContextParallelOptions& cp) {
  if (IsPtrr(cp)) {
    const std::vector<double> work = CpRankWork(pieces, seq_len, cp, CpSplit::kPtrr);
    return *std::max_element(work.begin(), work.end());
  }
  if (cp.strategy == CpStrategy::kBalanced && cp.size > 1) {
    thread_local CpRowPlan plan;
    PlanCpRow(pieces, seq_len, cp, &plan);
    return *std::max_element(plan.work.begin(), plan.work.end());
  }
  // Every rank does 1/C of a piece's work on the padded layout (the two
  // chunks cost 2C c^2 + c on every rank); a rank does less by the work of
  // the padding positions in its chunks, which only the last chunks hold. So
  // the busiest rank's work is the even share minus the least deficit: O(1)
  // per long piece, no per-rank sum per piece. Every term is an integer
  // below 2^53, so this equals CpRankWork's maximum exactly.
  const Index C = cp.size;
  const Index g = CpGranule(cp);
  thread_local std::vector<double> deficit;
  deficit.assign(static_cast<std::size_t>(C), 0.0);
  double even = 0;
  if (C == 1) {
    for (const Piece& p : pieces) even += CausalWork(0, p.length);
    return even;
  }
  const Index chunks_per_granule = g / (2 * C);
  for (const Piece& p : pieces) {
    const Index l = p.length;
    const Index granules = (l + g - 1) / g;
    const Index P = granules * g;
    const Index c = granules * chunks_per_granule;  // P / 2C
    // A rank's share, P (P + 1) / 2 / C = c (P + 1): exact.
    even += static_cast<double>(c) * static_cast<double>(P + 1);
    if (P == l) continue;                    // no padding (or an empty piece)
    for (Index k = l / c; k < 2 * C; ++k) {  // the chunks holding padding
      const Index lo = std::max(k * c, l), hi = (k + 1) * c;
      deficit[static_cast<std::size_t>(k < C ? k : 2 * C - 1 - k)] += CausalWork(lo, hi);
    }
  }
  return even - *std::min_element(deficit.begin(), deficit.end());
}

}  // namespace shardkit
