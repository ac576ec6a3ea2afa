// Packed-sequence metadata: how the pieces of a pack become one row of a
// fixed-shape [batch, seq_len] batch, and the boundary information attention
// and the loss need.
//
// A row holds the pack's pieces back to back, then padding (right padding,
// the default) or padding first (left). For every token position t of a row:
//   input_ids[t]     the token, or pad_token_id on padding
//   labels[t]        input_ids[t], except ignore_index (-100) on padding and on
//                    the first token of every piece (in the shift-inside-the-
//                    model convention of Hugging Face, label t is predicted
//                    from position t - 1, which belongs to another document)
//   position_ids[t]  0, 1, 2, ... restarting at every piece; 0 on padding
//   document_ids[t]  the piece's index within the row (0, 1, ...), -1 on
//                    padding: segment ids of a block-diagonal mask
//   attention_mask[t] 1 on real tokens, 0 on padding (padding-free form: no
//                    square mask; position_ids / cu_seqlens carry the
//                    boundaries)
//   block_mask[t][u] (dense form, [seq_len, seq_len]) 1 iff t and u are real
//                    tokens of the same piece (and u <= t when causal)
//   cu_seqlens       int32 offsets of the sequences of the whole batch
//                    flattened row-major (flash-attention varlen): a real
//                    sequence per non-empty piece, and one sequence per padding
//                    run, so the last offset is batch * seq_len.
// Zero-length pieces occupy no token and no sequence.
//
// Thread-safety: pure functions over caller-owned buffers; different rows may
// be filled from different threads.
#ifndef SHARDKIT_PACKING_PACKING_METADATA_H_
#define SHARDKIT_PACKING_PACKING_METADATA_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/packing/packing.h"

namespace shardkit {

enum class PaddingSide { kRight, kLeft };
[[nodiscard]] PaddingSide ParsePaddingSide(std::string_view name);  // "right", "left"
[[nodiscard]] std::string_view PaddingSideName(PaddingSide side);

// What fills a row around its tokens, each default written once here: a
// loader's options contain these (LoaderOptions derives from PaddingOptions,
// loader.h), so its collation reads them with no field copied.
struct PaddingOptions {
  PaddingSide padding_side = PaddingSide::kRight;
  std::int64_t pad_token_id = 0;
  std::int64_t ignore_index = -100;
  bool causal = true;  // block_mask: lower-triangular within each piece
};

struct CollateOptions : PaddingOptions {
  Index seq_len = 0;  // row length; REQUIRES >= 1
};

// The collation options of rows of `seq_len` tokens filled as `padding` says.
[[nodiscard]] inline CollateOptions MakeCollateOptions(Index seq_len,
                                                       const PaddingOptions& padding) {
  CollateOptions o;
  static_cast<PaddingOptions&>(o) = padding;
  o.seq_len = seq_len;
  return o;
}

// Throws invalid_argument naming seq_len when it is < 1.
void ValidateCollateOptions(const CollateOptions& options);

// Sum of the pieces' lengths; the row overflows when it exceeds seq_len.
[[nodiscard]] Index RowTokens(std::span<const Piece> pieces);

// Output of one row, each of seq_len elements (block_mask: seq_len^2); a null
// pointer is not filled.
struct RowBuffers {
  std::int64_t* position_ids = nullptr;
  std::int32_t* document_ids = nullptr;
  std::uint8_t* attention_mask = nullptr;
  std::uint8_t* block_mask = nullptr;
};

// First real token of the row: 0 for right padding, seq_len - RowTokens for
// left padding. REQUIRES RowTokens(pieces) <= options.seq_len.
[[nodiscard]] Index RowStart(std::span<const Piece> pieces, const CollateOptions& options);

// Every output of one row, each seq_len elements (block_mask seq_len^2); a
// null pointer is not written.
struct RowOutput {
  std::int64_t* input_ids = nullptr;
  std::int64_t* labels = nullptr;
  std::int64_t* position_ids = nullptr;
  std::int32_t* document_ids = nullptr;
  std::uint8_t* attention_mask = nullptr;
  std::uint8_t* block_mask = nullptr;
};

// Collates one row as defined at the top of this file: the one collation of
// shardkit (the TokenLoader's batches, the Python collator and the functions
// below all call it). `copy(piece, out)` writes the piece's `length` tokens,
// as int64, to out[0 .. length). Padding is written with one fill per run and
// every piece with one pass, so the cost is the token copy.
// REQUIRES RowTokens(pieces) <= options.seq_len; options validated.
template <typename CopyTokens>
void CollateRow(std::span<const Piece> pieces, const CollateOptions& options, const RowOutput& out,
                CopyTokens&& copy) {
  const Index n = options.seq_len;
  const Index begin = RowStart(pieces, options);
  const Index end = begin + RowTokens(pieces);
  for (const auto& [lo, hi] : {std::pair<Index, Index>{0, begin}, {end, n}}) {
    if (out.input_ids) std::fill(out.input_ids + lo, out.input_ids + hi, options.pad_token_id);
    if (out.labels) std::fill(out.labels + lo, out.labels + hi, options.ignore_index);
    if (out.position_ids) std::fill(out.position_ids + lo, out.position_ids + hi, 0);
    if (out.document_ids) std::fill(out.document_ids + lo, out.document_ids + hi, -1);
    if (out.attention_mask) std::fill(out.attention_mask + lo, out.attention_mask + hi, 0);
  }
  if (out.block_mask) std::fill(out.block_mask, out.block_mask + n * n, std::uint8_t{0});
  Index t = begin;
  std::int32_t doc = 0;
  for (const Piece& p : pieces) {
    if (p.length == 0) continue;
    const Index len = p.length;
    if (out.input_ids) {
      copy(p, out.input_ids + t);
      if (out.labels) {
        std::memcpy(out.labels + t, out.input_ids + t, static_cast<std::size_t>(len) * 8);
      }
    } else if (out.labels) {
      copy(p, out.labels + t);
    }
    if (out.labels) out.labels[t] = options.ignore_index;
    if (out.position_ids) {
      for (Index k = 0; k < len; ++k) out.position_ids[t + k] = k;
    }
    if (out.document_ids) std::fill(out.document_ids + t, out.document_ids + t + len, doc);
    if (out.attention_mask) {
      std::fill(out.attention_mask + t, out.attention_mask + t + len, std::uint8_t{1});
    }
    if (out.block_mask) {
      for (Index i = t; i < t + len; ++i) {
        const Index last = options.causal ? i + 1 : t + len;
        std::fill(out.block_mask + i * n + t, out.block_mask + i * n + last, std::uint8_t{1});
      }
    }
    t += len;
    ++doc;
  }
}

// Fills the token-independent metadata of one row (CollateRow without tokens).
// REQUIRES RowTokens(pieces) <= options.seq_len; options validated.
void FillRowMetadata(std::span<const Piece> pieces, const CollateOptions& options,
                     const RowBuffers& out);

// Fills input_ids and labels of one row from a flat token array: the tokens
// of item d are tokens[offsets[d], offsets[d + 1]) and a piece takes
// [offsets[item] + start, ... + length). Either output may be null.
// REQUIRES RowTokens(pieces) <= options.seq_len and every piece inside its
// item's tokens (ValidateCollation).
template <typename Token, typename Offset>
void FillRowTokens(std::span<const Piece> pieces, const Token* tokens, const Offset* offsets,
                   const CollateOptions& options, std::int64_t* input_ids, std::int64_t* labels) {
  RowOutput out;
  out.input_ids = input_ids;
  out.labels = labels;
  CollateRow(pieces, options, out, [&](const Piece& p, std::int64_t* dst) {
    const Token* src = tokens + static_cast<Index>(offsets[p.item]) + p.start;
    for (Index k = 0; k < p.length; ++k) dst[k] = static_cast<std::int64_t>(src[k]);
  });
}

// Checks rows of pieces against a flat token array before collation: offsets
// (num_items + 1 entries) non-decreasing within [0, num_tokens] (else
// invalid_argument naming offsets), every piece inside its item's tokens with
// start + length checked for overflow (naming packs), every row at most
// seq_len tokens and rows * seq_len below 2^31 for the int32 cu_seqlens
// (naming seq_len).
void ValidateCollation(std::span<const std::vector<Piece>> rows,
                       std::span<const std::int64_t> offsets, Index num_tokens,
                       const CollateOptions& options);

// The batch-level cu_seqlens (see above) for rows of pieces, written to *out
// (cleared first); returns max_seqlen. REQUIRES each row fits and
// rows * seq_len < 2^31.
Index BatchCuSeqlens(std::span<const std::span<const Piece>> rows, const CollateOptions& options,
                     std::vector<std::int32_t>* out);

// Where each image of a batch goes: images are numbered in row order, then
// piece order, then image order within the item (a piece of a split item
// never has images).
struct ImageSlot {
  Index row = 0;       // row of the batch
  Index sequence = 0;  // piece index within the row (its document_id); -1 for
                       // an item of zero tokens
  Index item = 0;      // the caller's item id (the sample)
};
[[nodiscard]] std::vector<ImageSlot> ImageMap(std::span<const std::span<const Piece>> rows);

}  // namespace shardkit

#endif  // SHARDKIT_PACKING_PACKING_METADATA_H_
