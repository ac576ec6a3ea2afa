#include "shardkit/packing/packing_metadata.h"

#include <algorithm>
#include <string>

#include "shardkit/base/enum_names.h"

namespace shardkit {

namespace {
constexpr EnumNames<PaddingSide, 2> kPaddingSides{"padding_side", "side", {"right", "left"}};
}  // namespace

SHARDKIT_ENUM_PARSE_AND_NAME(PaddingSide, kPaddingSides, ParsePaddingSide, PaddingSideName)

void ValidateCollateOptions(const CollateOptions& options) {
  CheckAtLeast("seq_len", options.seq_len, 1);
}

Index RowTokens(std::span<const Piece> pieces) {
  Index sum = 0;
  for (const Piece& p : pieces) sum += p.length;
  return sum;
}

Index RowStart(std::span<const Piece> pieces, const CollateOptions& options) {
  return options.padding_side == PaddingSide::kRight ? 0 : options.seq_len - RowTokens(pieces);
}

void FillRowMetadata(std::span<const Piece> pieces, const CollateOptions& options,
                     const RowBuffers& out) {
  RowOutput row;
  row.position_ids = out.position_ids;
  row.document_ids = out.document_ids;
  row.attention_mask = out.attention_mask;
  row.block_mask = out.block_mask;
  CollateRow(pieces, options, row, [](const Piece&, std::int64_t*) {});
}

void ValidateCollation(std::span<const std::vector<Piece>> rows,
                       std::span<const std::int64_t> offsets, Index num_tokens,
                       const CollateOptions& options) {
  ValidateCollateOptions(options);
  if (offsets.empty()) ThrowInvalid("offsets", "empty (needs num_items + 1 entries)");
  const Index items = static_cast<Index>(offsets.size()) - 1;
  if (offsets[0] < 0)
    ThrowInvalid("offsets", "entry 0 (" + std::to_string(offsets[0]) + ") is negative");
  for (Index d = 0; d < items; ++d) {
    if (offsets[d + 1] < offsets[d] || offsets[d + 1] > num_tokens) {
      ThrowInvalid("offsets", "entry " + std::to_string(d + 1) + " (" +
                                  std::to_string(offsets[d + 1]) +
                                  ") is decreasing or past the end of tokens");
    }
  }
  if (static_cast<double>(rows.size()) * static_cast<double>(options.seq_len) >= 2147483647.0) {
    ThrowInvalid("seq_len", "batch * seq_len must stay below 2^31 (int32 cu_seqlens)");
  }
  Index entry = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    Index used = 0;
    for (const Piece& p : rows[r]) {
      Index end = 0;
      if (p.item < 0 || p.item >= items || p.start < 0 || p.length < 0 ||
          __builtin_add_overflow(p.start, p.length, &end) ||
          end > offsets[p.item + 1] - offsets[p.item]) {
        ThrowInvalid("packs", "entry " + std::to_string(entry) + " (item " +
                                  std::to_string(p.item) + ") lies outside the tokens of its item");
      }
      used = CheckedAdd("seq_len", used, p.length);
      ++entry;
    }
    if (used > options.seq_len) {
      ThrowInvalid("seq_len", "pack " + std::to_string(r) + " holds " + std::to_string(used) +
                                  " tokens, more than seq_len " + std::to_string(options.seq_len));
    }
  }
}

Index BatchCuSeqlens(std::span<const std::span<const Piece>> rows, const CollateOptions& options,
                     std::vector<std::int32_t>* out) {
  out->clear();
  out->push_back(0);
  Index at = 0, max_len = 0;
  auto add = [&](Index length) {
    at += length;
    out->push_back(static_cast<std::int32_t>(at));
    max_len = std::max(max_len, length);
  };
  for (const auto& row : rows) {
    const Index padding = options.seq_len - RowTokens(row);
    if (padding > 0 && options.padding_side == PaddingSide::kLeft) add(padding);
    for (const Piece& p : row) {
      if (p.length > 0) add(p.length);
    }
    if (padding > 0 && options.padding_side == PaddingSide::kRight) add(padding);
  }
  return max_len;
}

std::vector<ImageSlot> ImageMap(std::span<const std::span<const Piece>> rows) {
  std::vector<ImageSlot> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    Index sequence = 0;
    for (const Piece& p : rows[r]) {
      for (Index k = 0; k < p.images; ++k) {
        out.push_back({static_cast<Index>(r), p.length > 0 ? sequence : -1, p.item});
      }
      if (p.length > 0) ++sequence;
    }
  }
  return out;
}

}  // namespace shardkit
