#include "shardkit/packing/packing_metadata.h"

#include <algorithm>
#include <string>

namespace shardkit {

PaddingSide ParsePaddingSide(std::string_view name) {
  if (name == "right") return PaddingSide::kRight;
  if (name == "left") return PaddingSide::kLeft;
  ThrowInvalid("padding_side", "unknown side '" + std::string(name) + "' (expected right or left)");
}

std::string_view PaddingSideName(PaddingSide side) {
  return side == PaddingSide::kRight ? "right" : "left";
}

void ValidateCollateOptions(const CollateOptions& options) {
  CheckAtLeast("seq_len", options.seq_len, 1);
}

Index RowTokens(std::span<const PackItem> pieces) {
  Index sum = 0;
  for (const PackItem& p : pieces) sum += p.length;
  return sum;
}

Index RowStart(std::span<const PackItem> pieces, const CollateOptions& options) {
  return options.padding_side == PaddingSide::kRight ? 0 : options.seq_len - RowTokens(pieces);
}

void FillRowMetadata(std::span<const PackItem> pieces, const CollateOptions& options,
                     const RowBuffers& out) {
  const Index n = options.seq_len;
  const Index begin = RowStart(pieces, options);
  const Index end = begin + RowTokens(pieces);
  // Padding first, then every piece over its span.
  for (Index t = 0; t < n; ++t) {
    if (t >= begin && t < end) continue;
    if (out.position_ids) out.position_ids[t] = 0;
    if (out.document_ids) out.document_ids[t] = -1;
    if (out.attention_mask) out.attention_mask[t] = 0;
  }
  if (out.block_mask) std::fill(out.block_mask, out.block_mask + n * n, std::uint8_t{0});
  Index t = begin;
  std::int32_t doc = 0;
  for (const PackItem& p : pieces) {
    if (p.length == 0) continue;
    for (Index k = 0; k < p.length; ++k) {
      if (out.position_ids) out.position_ids[t + k] = k;
      if (out.document_ids) out.document_ids[t + k] = doc;
      if (out.attention_mask) out.attention_mask[t + k] = 1;
    }
    if (out.block_mask) {
      for (Index i = t; i < t + p.length; ++i) {
        const Index last = options.causal ? i + 1 : t + p.length;
        std::fill(out.block_mask + i * n + t, out.block_mask + i * n + last, std::uint8_t{1});
      }
    }
    t += p.length;
    ++doc;
  }
}

Index BatchCuSeqlens(std::span<const std::span<const PackItem>> rows, const CollateOptions& options,
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
    for (const PackItem& p : row) {
      if (p.length > 0) add(p.length);
    }
    if (padding > 0 && options.padding_side == PaddingSide::kRight) add(padding);
  }
  return max_len;
}

std::vector<ImageSlot> ImageMap(std::span<const std::span<const PackItem>> rows) {
  std::vector<ImageSlot> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    Index sequence = 0;
    for (const PackItem& p : rows[r]) {
      for (Index k = 0; k < p.images; ++k) {
        out.push_back({static_cast<Index>(r), p.length > 0 ? sequence : -1, p.item});
      }
      if (p.length > 0) ++sequence;
    }
  }
  return out;
}

}  // namespace shardkit
