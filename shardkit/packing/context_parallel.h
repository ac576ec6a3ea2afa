// Context parallelism (CP): one packed row split over C ranks, per-document
// head-tail (the THD convention of TransformerEngine's
// thd_get_partitioned_indices and of torch's per-document head-tail load
// balancer).
//
// A row's pieces (documents or pieces of documents, in row order, lengths
// l_0, l_1, ...; zero-length pieces take no token and no sequence) are laid
// out in the padded row of seq_len tokens: piece i padded at its end to
// P_i = RoundUp(l_i, g) tokens (g, the granularity: a multiple of 2C, 2C by
// default), pieces back to back, then the row's padding run of
// R = seq_len - sum P_i tokens as one more sequence when R > 0 (R is a
// multiple of g since seq_len is). Every sequence of padded length P is cut
// into 2C chunks of P / 2C tokens; CP rank r holds chunks r and 2C - 1 - r, in
// that order, sequence after sequence: a slice of L = seq_len / C slots, where
// sequence i takes slots [cu_seqlens_padded[i] / C, cu_seqlens_padded[i+1] / C).
// For slot j of rank r:
//   padded_index  its position in the padded row: over the C * L slots of all
//                 ranks a bijection onto [0, seq_len) (the rearrange index of
//                 torch's load balancer on the padded row; restore_index is
//                 its inverse)
//   cp_index      its token's position in the unpadded row (the pieces back
//                 to back from 0, the row a loader without CP delivers with
//                 right padding); -1 on padding
//   position_ids  the token's position within its piece; 0 on padding
//   document_ids  the piece's index among the row's non-empty pieces; -1 on
//                 padding
// cu_seqlens_padded = [0, P_0, P_0 + P_1, ..., seq_len] (int32, the padding run
// included), max_seqlen = the largest P_i (the padding run included). The local
// cu_seqlens of every rank are cu_seqlens_padded / C: each rank holds P_i / C
// slots of piece i (its real tokens first within each chunk, padding after).
//
// Why it balances: with chunks of c tokens, the causal work (keys attended by
// the queries) of chunk k is c^2 k + c (c + 1) / 2, so chunks r and 2C - 1 - r
// cost 2C c^2 + c on every rank: per-document head-tail is exactly balanced
// on the padded row, and within the padding on the real tokens.
//
// Thread-safety: pure functions over caller-owned buffers.
#ifndef SHARDKIT_PACKING_CONTEXT_PARALLEL_H_
#define SHARDKIT_PACKING_CONTEXT_PARALLEL_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/packing/packing.h"
#include "shardkit/packing/packing_metadata.h"

namespace shardkit {

// How a row is split over the CP ranks. Parse throws invalid_argument naming
// cp_strategy.
//   head_tail  every piece split per document head-tail (above): the layout of
//              TransformerEngine's THD attention and ring attention.
//   balanced   short pieces may instead stay whole on one CP rank (PlanCpRow
//              below): better balanced and less padding, for attention over
//              all-gathered K/V (varlen, flex, SDPA per document); not
//              TransformerEngine's THD CP layout whenever a piece is whole.
//   ptrr       per-token (block) round-robin, blind to documents (CpPtrr*
//              below): no padding inside documents; for all-gathered K/V.
enum class CpStrategy { kHeadTail, kBalanced, kPtrr };
[[nodiscard]] CpStrategy ParseCpStrategy(std::string_view name);
[[nodiscard]] std::string_view CpStrategyName(CpStrategy strategy);

struct ContextParallelOptions {
  Index size = 1;  // C, CP ranks per row; REQUIRES >= 1
  // g: pad each piece to a multiple of g; unset: 2C. REQUIRES a positive
  // multiple of 2C when set.
  std::optional<Index> granularity;
  CpStrategy strategy = CpStrategy::kHeadTail;
};

// Throws invalid_argument naming cp_size (< 1, or > seq_len / 2 when > 1),
// cp_granularity (not a positive multiple of 2 * cp_size) or seq_len (not a
// multiple of the granularity).
void ValidateContextParallel(const ContextParallelOptions& cp, Index seq_len);

// The granularity g in force: options.granularity, or 2C when unset; 1 when
// C = 1 and no granularity is set (no padding: the row as without CP).
[[nodiscard]] Index CpGranule(const ContextParallelOptions& cp);

// RoundUp(length, granule). REQUIRES length >= 0, granule >= 1 (unchecked).
[[nodiscard]] constexpr Index CpPaddedLength(Index length, Index granule) {
  return (length + granule - 1) / granule * granule;
}

// Sum of the pieces' padded lengths: the row fits iff it is <= seq_len.
[[nodiscard]] Index CpPaddedTokens(std::span<const Piece> pieces, Index granule);

// The two chunks CP rank r holds of a sequence of padded length P, as
// (first position, length) pairs: chunks r and 2C - 1 - r of P / 2C tokens;
// for C = 1 the whole sequence (then P need not be even).
struct CpChunk {
  Index start = 0, length = 0;
};
[[nodiscard]] constexpr std::array<CpChunk, 2> CpChunks(Index P, Index C, Index r) {
  if (C == 1) return {CpChunk{0, P}, CpChunk{P, 0}};
  const Index c = P / (2 * C);
  return {CpChunk{r * c, c}, CpChunk{(2 * C - 1 - r) * c, c}};
}

// The balanced strategy's layout of one row. With strategy head_tail, C = 1,
// or when no choice below beats it, every piece is split and the row is laid
// out exactly as at the top of this file (`whole` false). Otherwise the
// pieces split head-tail (owner -1) come first on every rank, as above, S =
// split_padded tokens of the padded row, S / C slots per rank; then each CP
// rank r holds its whole pieces (owner r), back to back in row order and
// unpadded, then padding up to L = seq_len / C slots. In the padded row
// (padded_index, cu_seqlens_padded) rank r's tail slots [S / C, L) are
// positions S + r (L - S / C) + (j - S / C), a run per rank: sequences are
// the split pieces padded, then for each rank its whole pieces and its
// padding run (when not empty). The local cu_seqlens of rank r are those of
// the split pieces divided by C, then its whole pieces, then its padding.
//
// The rule: the busiest rank's causal work decides. Let M be the row's causal
// work over C (the even share). For each threshold M / 2^k, k = 0 .. 10, the
// pieces whose own work l (l + 1) / 2 is at most the threshold are candidates;
// the rest are split head-tail; the candidates, longest first, each go whole
// to the least-loaded rank (by causal work, split pieces counted) that has
// room for it (LPT); a candidate no rank has room for is split instead
// (taking P / C slots of every rank), and a threshold where that leaves a
// rank without room is dropped.
// The layout with the least busiest-rank work wins, all-split on ties (so a
// row of long documents keeps the THD layout). O(pieces (log pieces + 11 C)).
struct CpRowPlan {
  std::vector<std::int32_t> owner;  // per piece, in order: -1 split (and empty pieces), else rank
  bool whole = false;               // some piece is whole
  Index split_padded = 0;           // S: the split pieces' padded tokens
  std::vector<double> work;         // balanced only: C entries, causal work per rank
};
// REQUIRES as CollateCpRow (seq_len the row's).
void PlanCpRow(std::span<const Piece> pieces, Index seq_len, const ContextParallelOptions& cp,
               CpRowPlan* plan);

// PTRR (per-token round-robin, cp_strategy "ptrr"): the unpadded row (pieces
// back to back from 0, the row's padding after, seq_len positions) is cut
// into blocks of B = g / 2C tokens (g the granularity; B = 1 by default),
// dealt in passes of C blocks: in pass p CP rank r takes block p C + r when p
// is even and p C + C - 1 - r when p is odd (the mirrored pass evens out the
// order within a pass). Rank r's slot j holds row position CpPtrrPosition;
// every rank holds seq_len / C slots (seq_len is a multiple of 2 C B). The
// padded row is the unpadded row (no piece is padded): padded_index = the row
// position, cu_seqlens_padded = the pieces' boundaries then the padding run;
// the local cu_seqlens cut a rank's slots where the piece changes.
[[nodiscard]] constexpr Index CpPtrrPosition(Index j, Index r, Index C, Index B) {
  const Index pass = j / B;
  const Index k = pass % 2 == 0 ? r : C - 1 - r;
  return (pass * C + k) * B + j % B;
}
// The inverse: (rank, slot) of row position t, as r * L + j.
[[nodiscard]] constexpr Index CpPtrrSlot(Index t, Index C, Index B, Index L) {
  const Index pass = t / (C * B), k = t % (C * B) / B;
  const Index r = pass % 2 == 0 ? k : C - 1 - k;
  return r * L + pass * B + t % B;
}
// Rank r's slots holding row positions below t.
[[nodiscard]] constexpr Index CpPtrrCount(Index t, Index r, Index C, Index B) {
  const Index pass = t / (C * B), rest = t % (C * B);
  const Index k = pass % 2 == 0 ? r : C - 1 - r;
  return pass * B + std::clamp<Index>(rest - k * B, 0, B);
}

// One rank's outputs for one row, L = seq_len / C elements each; a null
// pointer is not written.
struct CpRowOutput {
  std::int64_t* input_ids = nullptr;
  std::int64_t* labels = nullptr;  // the unpadded row's labels at cp_index
  std::int64_t* position_ids = nullptr;
  std::int32_t* document_ids = nullptr;
  std::int64_t* cp_index = nullptr;
  std::int64_t* padded_index = nullptr;
};

// Collates CP rank `cp_rank`'s slice of one row as defined at the top of this
// file. labels follow packing_metadata.h at cp_index (the token, ignore_index
// on the first token of every piece and on padding); input_ids hold
// pad_token_id on padding. `copy(piece, out)` writes the piece's `length`
// tokens as int64 to out[0 .. length); it is called with sub-pieces (item,
// start within the document, length) covering the rank's real tokens, at most
// two per piece, so only this rank's tokens are read.
// REQUIRES options and cp validated (seq_len = options.seq_len), padding side
// right, 0 <= cp_rank < C, CpPaddedTokens(pieces, CpGranule(cp)) <= seq_len.
template <typename CopyTokens>
void CollateCpRow(std::span<const Piece> pieces, const CollateOptions& options,
                  const ContextParallelOptions& cp, Index cp_rank, const CpRowOutput& out,
                  CopyTokens&& copy);

// The inverse of cp_index over all C ranks: for every position t of the
// unpadded row, restore[t] = r * L + j when slot j of rank r holds token t
// (the restore index of torch's load balancer: the ranks' slices
// concatenated, gathered at restore, give the row back), -1 for t at or
// past RowTokens(pieces) (the row's padding). Writes seq_len entries.
// REQUIRES as CollateCpRow.
void FillCpRestoreIndex(std::span<const Piece> pieces, Index seq_len,
                        const ContextParallelOptions& cp, std::int64_t* restore);

// The row's cu_seqlens_padded (see above) appended to *out with every entry
// shifted by `base` (for a batch flattened row-major: base = row * seq_len;
// the caller writes the leading 0 once); returns max_seqlen of the row.
// REQUIRES as CollateCpRow.
Index AppendCpCuSeqlensPadded(std::span<const Piece> pieces, Index seq_len,
                              const ContextParallelOptions& cp, std::int32_t base,
                              std::vector<std::int32_t>* out);

// CP rank cp_rank's local cu_seqlens of the row (the sequences of its slice:
// cu_seqlens_padded / C for head_tail, PlanCpRow above for balanced), shifted
// by `base` (row * seq_len / C), appended to *out (the leading 0 the
// caller's). REQUIRES as CollateCpRow.
void AppendCpCuSeqlensLocal(std::span<const Piece> pieces, Index seq_len,
                            const ContextParallelOptions& cp, Index cp_rank, std::int32_t base,
                            std::vector<std::int32_t>* out);

// How a row's tokens could be split over C ranks, for comparing the causal
// work per rank (docs/loader.md):
//   contiguous         the unpadded row cut into C runs of seq_len / C slots
//   head_tail          the unpadded row cut into 2C chunks, rank r takes
//                      chunks r and 2C - 1 - r, blind to documents (torch's
//                      _HeadTailLoadBalancer)
//   document_head_tail the layout above (per piece, padded to the granule)
//   balanced           PlanCpRow's layout (short pieces whole, LPT)
//   ptrr               CpPtrrPosition's layout (block round-robin, mirrored)
enum class CpSplit { kContiguous, kHeadTail, kDocumentHeadTail, kBalanced, kPtrr };
inline constexpr std::size_t kNumCpSplits = 5;
// "contiguous", "head_tail", "document_head_tail", "balanced"; Parse throws
// invalid_argument naming `cp_split`.
[[nodiscard]] CpSplit ParseCpSplit(std::string_view name);
[[nodiscard]] std::string_view CpSplitName(CpSplit split);
[[nodiscard]] std::vector<std::string_view> CpSplitNames();

// The causal attention work of each CP rank for one row: the sum over the
// rank's real tokens of (position in the piece + 1), the keys a causal query
// attends within its document. C entries. REQUIRES as CollateCpRow (for
// contiguous and head_tail: RowTokens(pieces) <= seq_len and seq_len a
// multiple of 2C).
[[nodiscard]] std::vector<double> CpRankWork(std::span<const Piece> pieces, Index seq_len,
                                             const ContextParallelOptions& cp, CpSplit split);

// The padding inside the row's documents under cp.strategy: sum of
// RoundUp(l, g) - l over the split pieces (whole pieces are not padded); the
// rest of the row's padding is its padding run(s). REQUIRES as CollateCpRow.
[[nodiscard]] Index CpDocumentPadding(std::span<const Piece> pieces, Index seq_len,
                                      const ContextParallelOptions& cp);

// The checks behind CpRankWork's REQUIRES, for rows from a user: seq_len in
// [1, kMaxCpRowTokens], cp valid for seq_len, lengths >= 0, and the row fits
// (padded for document_head_tail; seq_len a multiple of 2C for the others).
// Throws invalid_argument naming cp_size, cp_granularity, seq_len or lengths.
inline constexpr Index kMaxCpRowTokens = Index{1} << 28;
void ValidateCpRow(std::span<const Piece> pieces, Index seq_len, const ContextParallelOptions& cp,
                   CpSplit split);

// The per-CP-rank work the plan balances rows by: the largest entry of
// CpRankWork(..., kDocumentHeadTail) (head_tail, computed in O(pieces * C))
// or of kBalanced (balanced: PlanCpRow's work).
[[nodiscard]] double CpRowCost(std::span<const Piece> pieces, Index seq_len,
                               const ContextParallelOptions& cp);

// ---------------------------------------------------------------------------
// Implementation.

template <typename CopyTokens>
void CollateCpRow(std::span<const Piece> pieces, const CollateOptions& options,
                  const ContextParallelOptions& cp, Index cp_rank, const CpRowOutput& out,
                  CopyTokens&& copy) {
  const Index C = cp.size;
  const Index g = CpGranule(cp);
  // Fills slots [at, at + n) with padding whose padded-row positions start at
  // `padded` and are consecutive.
  auto pad = [&](Index at, Index n, Index padded) {
    for (Index k = 0; k < n; ++k) {
      if (out.input_ids) out.input_ids[at + k] = options.pad_token_id;
      if (out.labels) out.labels[at + k] = options.ignore_index;
      if (out.position_ids) out.position_ids[at + k] = 0;
      if (out.document_ids) out.document_ids[at + k] = -1;
      if (out.cp_index) out.cp_index[at + k] = -1;
      if (out.padded_index) out.padded_index[at + k] = padded + k;
    }
  };
  thread_local CpRowPlan plan;
  if (cp.strategy != CpStrategy::kPtrr || C == 1) PlanCpRow(pieces, options.seq_len, cp, &plan);
  // Writes the real tokens [lo, lo + n) of piece p (unpadded-row start
  // `unpadded`, index `doc`) at slots [at, at + n), padded-row positions from
  // `padded_at`.
  auto real = [&](const Piece& p, Index lo, Index n, Index at, Index unpadded, std::int32_t doc,
                  Index padded_at) {
    if (n <= 0) return;
    if (out.input_ids) {
      copy(Piece{p.item, n, 0, p.start + lo}, out.input_ids + at);
      if (out.labels) {
        std::memcpy(out.labels + at, out.input_ids + at, static_cast<std::size_t>(n) * 8);
      }
    } else if (out.labels) {
      copy(Piece{p.item, n, 0, p.start + lo}, out.labels + at);
    }
    if (out.labels && lo == 0) out.labels[at] = options.ignore_index;
    for (Index q = 0; q < n; ++q) {
      if (out.position_ids) out.position_ids[at + q] = lo + q;
      if (out.document_ids) out.document_ids[at + q] = doc;
      if (out.cp_index) out.cp_index[at + q] = unpadded + lo + q;
      if (out.padded_index) out.padded_index[at + q] = padded_at + q;
    }
  };
  if (cp.strategy == CpStrategy::kPtrr && C > 1) {
    // Blocks of B slots, each a run of row positions; a piece cursor follows
    // the increasing positions.
    const Index B = g / (2 * C), L = options.seq_len / C;
    std::size_t i = 0;
    Index begin = 0;  // row position of pieces[i]
    std::int32_t doc = 0;
    for (Index j = 0; j < L; j += B) {
      Index t = CpPtrrPosition(j, cp_rank, C, B);
      const Index end = t + B;
      Index at = j;
      while (t < end) {
        while (i < pieces.size() && begin + pieces[i].length <= t) {
          if (pieces[i].length > 0) ++doc;
          begin += pieces[i].length;
          ++i;
        }
        if (i == pieces.size()) {  // the row's padding
          pad(at, end - t, t);
          break;
        }
        const Index n = std::min(end, begin + pieces[i].length) - t;
        real(pieces[i], t - begin, n, at, begin, doc, t);
        at += n;
        t += n;
      }
    }
    return;
  }
  Index slot = 0;      // next local slot
  Index padded = 0;    // padded-row start of the current sequence
  Index unpadded = 0;  // unpadded-row start of the current piece
  std::int32_t doc = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.length == 0) continue;
    const Index l = p.length;
    if (plan.owner[i] < 0) {
      const Index P = CpPaddedLength(l, g);
      for (const CpChunk& chunk : CpChunks(P, C, cp_rank)) {
        const Index lo = chunk.start, c = chunk.length;  // piece positions of the chunk
        const Index n = std::max<Index>(0, std::min(c, l - lo));
        real(p, lo, n, slot, unpadded, doc, padded + lo);
        pad(slot + n, c - n, padded + lo + n);
        slot += c;
      }
      padded += P;
    }
    unpadded += l;
    ++doc;
  }
  if (!plan.whole) {
    // The row's padding run, a sequence of its own, split by the same rule.
    const Index R = options.seq_len - padded;
    for (const CpChunk& chunk : CpChunks(R, C, cp_rank)) {
      pad(slot, chunk.length, padded + chunk.start);
      slot += chunk.length;
    }
    return;
  }
  // This rank's whole pieces, then its padding: padded-row run from `tail`.
  const Index head = slot;  // S / C
  const Index tail = padded + cp_rank * (options.seq_len / C - head);
  unpadded = 0;
  doc = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.length == 0) continue;
    if (plan.owner[i] == cp_rank) {
      real(p, 0, p.length, slot, unpadded, doc, tail + slot - head);
      slot += p.length;
    }
    unpadded += p.length;
    ++doc;
  }
  pad(slot, options.seq_len / C - slot, tail + slot - head);
}

}  // namespace shardkit

#endif  // SHARDKIT_PACKING_CONTEXT_PARALLEL_H_
