#include "shardkit/packing/context_parallel.h"

#include <algorithm>
#include <string>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/errors.h"

namespace shardkit {

namespace {

constexpr EnumNames<CpSplit, 3> kCpSplits{"cp_split",
                                          "split",
                                          {{{CpSplit::kContiguous, "contiguous"},
                                            {CpSplit::kHeadTail, "head_tail"},
                                            {CpSplit::kDocumentHeadTail, "document_head_tail"}}}};

constexpr EnumNames<CpStrategy, 1> kCpStrategies{
    "cp_strategy", "strategy", {{{CpStrategy::kHeadTail, "head_tail"}}}};

// Keys attended by the causal queries at positions [a, b) of one document:
// sum of (q + 1).
double CausalWork(Index a, Index b) {
  if (b <= a) return 0;
  const double x = static_cast<double>(a), y = static_cast<double>(b);
  return (y * (y + 1) - x * (x + 1)) / 2;
}

}  // namespace

CpStrategy ParseCpStrategy(std::string_view name) { return kCpStrategies.Parse(name); }
std::string_view CpStrategyName(CpStrategy strategy) { return kCpStrategies.Name(strategy); }

CpSplit ParseCpSplit(std::string_view name) { return kCpSplits.Parse(name); }
std::string_view CpSplitName(CpSplit split) { return kCpSplits.Name(split); }
std::vector<std::string_view> CpSplitNames() { return kCpSplits.Names(); }

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

Index CpPaddedTokens(std::span<const PackItem> pieces, Index granule) {
  Index sum = 0;
  for (const PackItem& p : pieces) sum += CpPaddedLength(p.length, granule);
  return sum;
}

void FillCpRestoreIndex(std::span<const PackItem> pieces, Index seq_len,
                        const ContextParallelOptions& cp, std::int64_t* restore) {
  const Index C = cp.size, L = seq_len / C, g = CpGranule(cp);
  std::fill(restore, restore + seq_len, std::int64_t{-1});
  Index slot = 0;      // the current piece's first local slot (the same on every rank)
  Index unpadded = 0;  // the current piece's first position in the unpadded row
  for (const PackItem& p : pieces) {
    if (p.length == 0) continue;
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
}

Index AppendCpCuSeqlensPadded(std::span<const PackItem> pieces, Index seq_len, Index granule,
                              std::int32_t base, std::vector<std::int32_t>* out) {
  Index at = 0, longest = 0;
  for (const PackItem& p : pieces) {
    if (p.length == 0) continue;
    const Index P = CpPaddedLength(p.length, granule);
    at += P;
    longest = std::max(longest, P);
    out->push_back(base + static_cast<std::int32_t>(at));
  }
  if (at < seq_len) {
    longest = std::max(longest, seq_len - at);
    out->push_back(base + static_cast<std::int32_t>(seq_len));
  }
  return longest;
}

std::vector<double> CpRankWork(std::span<const PackItem> pieces, Index seq_len,
                               const ContextParallelOptions& cp, CpSplit split) {
  const Index C = cp.size;
  std::vector<double> work(static_cast<std::size_t>(C), 0.0);
  if (split == CpSplit::kDocumentHeadTail) {
    const Index g = CpGranule(cp);
    for (const PackItem& p : pieces) {
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
  for (const PackItem& p : pieces) {
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

void ValidateCpRow(std::span<const PackItem> pieces, Index seq_len,
                   const ContextParallelOptions& cp, CpSplit split) {
  if (seq_len < 1 || seq_len > kMaxCpRowTokens) {
    ThrowInvalid("seq_len", Str(seq_len) + " is outside [1, 2^28]");
  }
  ValidateContextParallel(cp, seq_len);
  for (const PackItem& p : pieces) {
    if (p.length < 0 || p.length > seq_len) {
      ThrowInvalid("lengths", Str(p.length) + " is outside [0, seq_len = " + Str(seq_len) + "]");
    }
  }
  if (split == CpSplit::kDocumentHeadTail) {
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

double CpRowCost(std::span<const PackItem> pieces, const ContextParallelOptions& cp) {
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
    for (const PackItem& p : pieces) even += CausalWork(0, p.length);
    return even;
  }
  const Index chunks_per_granule = g / (2 * C);
  for (const PackItem& p : pieces) {
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
