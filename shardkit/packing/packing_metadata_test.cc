#include "shardkit/packing/packing_metadata.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

namespace shardkit {
namespace {

using I64 = std::vector<std::int64_t>;
using I32 = std::vector<std::int32_t>;
using U8 = std::vector<std::uint8_t>;

// Three documents in a flat token array: doc 0 = 10 11 12, doc 1 = 20 21,
// doc 2 = 30 31 32 33 34.
const std::vector<std::int32_t> kTokens = {10, 11, 12, 20, 21, 30, 31, 32, 33, 34};
const std::vector<std::int64_t> kOffsets = {0, 3, 5, 10};

struct Row {
  I64 input_ids, labels, position_ids;
  I32 document_ids;
  U8 attention_mask, block_mask;
};

Row Collate(const std::vector<PackItem>& pieces, const CollateOptions& o) {
  const size_t n = static_cast<size_t>(o.seq_len);
  Row r{I64(n, 99), I64(n, 99), I64(n, 99), I32(n, 99), U8(n, 99), U8(n * n, 99)};
  FillRowMetadata(
      pieces, o,
      {r.position_ids.data(), r.document_ids.data(), r.attention_mask.data(), r.block_mask.data()});
  FillRowTokens(std::span<const PackItem>(pieces), kTokens.data(), kOffsets.data(), o,
                r.input_ids.data(), r.labels.data());
  return r;
}

TEST(CollateTest, HandMadeRowRightPadding) {
  CollateOptions o;
  o.seq_len = 7;
  Row r = Collate({{0, 3, 0, 0}, {1, 2, 0, 0}}, o);
  EXPECT_EQ(r.input_ids, (I64{10, 11, 12, 20, 21, 0, 0}));
  EXPECT_EQ(r.labels, (I64{-100, 11, 12, -100, 21, -100, -100}));
  EXPECT_EQ(r.position_ids, (I64{0, 1, 2, 0, 1, 0, 0}));
  EXPECT_EQ(r.document_ids, (I32{0, 0, 0, 1, 1, -1, -1}));
  EXPECT_EQ(r.attention_mask, (U8{1, 1, 1, 1, 1, 0, 0}));
  // Causal block-diagonal mask, row by row.
  const U8 expected = {1, 0, 0, 0, 0, 0, 0,  //
                       1, 1, 0, 0, 0, 0, 0,  //
                       1, 1, 1, 0, 0, 0, 0,  //
                       0, 0, 0, 1, 0, 0, 0,  //
                       0, 0, 0, 1, 1, 0, 0,  //
                       0, 0, 0, 0, 0, 0, 0,  //
                       0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(r.block_mask, expected);
}

TEST(CollateTest, HandMadeRowLeftPaddingAndSplitPiece) {
  CollateOptions o;
  o.seq_len = 6;
  o.padding_side = PaddingSide::kLeft;
  o.pad_token_id = 7;
  o.causal = false;
  // The second half of doc 2 (tokens 32 33 34, start 2) after doc 1.
  Row r = Collate({{1, 2, 0, 0}, {2, 3, 0, 2}}, o);
  EXPECT_EQ(r.input_ids, (I64{7, 20, 21, 32, 33, 34}));
  EXPECT_EQ(r.labels, (I64{-100, -100, 21, -100, 33, 34}));
  EXPECT_EQ(r.position_ids, (I64{0, 0, 1, 0, 1, 2}));
  EXPECT_EQ(r.document_ids, (I32{-1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(r.attention_mask, (U8{0, 1, 1, 1, 1, 1}));
  // Non-causal: a full block per document.
  EXPECT_EQ(r.block_mask[1 * 6 + 2], 1);
  EXPECT_EQ(r.block_mask[3 * 6 + 5], 1);
  EXPECT_EQ(r.block_mask[2 * 6 + 3], 0);
  EXPECT_EQ(r.block_mask[0], 0);
}

TEST(CollateTest, CuSeqlensCoverTheFlattenedBatch) {
  CollateOptions o;
  o.seq_len = 8;
  std::vector<PackItem> a = {{0, 3, 0, 0}, {1, 2, 0, 0}}, b = {{2, 5, 0, 0}, {0, 3, 0, 0}},
                        c = {{1, 0, 0, 0}};
  std::vector<std::span<const PackItem>> rows = {a, b, c};
  std::vector<std::int32_t> cu;
  EXPECT_EQ(BatchCuSeqlens(rows, o, &cu), 8);
  // Row 0: 3, 2, pad 3; row 1: 5, 3 (full); row 2: only padding (8).
  EXPECT_EQ(cu, (I32{0, 3, 5, 8, 13, 16, 24}));
  o.padding_side = PaddingSide::kLeft;
  EXPECT_EQ(BatchCuSeqlens(rows, o, &cu), 8);
  EXPECT_EQ(cu, (I32{0, 3, 6, 8, 13, 16, 24}));
}

TEST(CollateTest, ImageMapPointsEveryImageAtItsSample) {
  std::vector<PackItem> a = {{4, 3, 2, 0}, {9, 2, 0, 0}, {5, 1, 1, 0}}, b = {{6, 4, 1, 0}};
  std::vector<std::span<const PackItem>> rows = {a, b};
  auto map = ImageMap(rows);
  ASSERT_EQ(map.size(), 4u);
  EXPECT_EQ(map[0].item, 4);
  EXPECT_EQ(map[1].item, 4);
  EXPECT_EQ(map[1].sequence, 0);
  EXPECT_EQ(map[2].item, 5);
  EXPECT_EQ(map[2].sequence, 2);
  EXPECT_EQ(map[3].row, 1);
  EXPECT_EQ(map[3].sequence, 0);
}

// Random rows against a reconstruction written directly from the definition.
TEST(CollateTest, RandomRowsMatchTheDefinition) {
  std::mt19937_64 rng(3);
  std::vector<std::int32_t> tokens(1000);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 50000);
  std::vector<std::int64_t> offsets = {0};
  while (offsets.back() < 900) offsets.push_back(offsets.back() + static_cast<Index>(rng() % 40));
  const Index docs = static_cast<Index>(offsets.size()) - 1;
  for (int trial = 0; trial < 500; ++trial) {
    CollateOptions o;
    o.seq_len = 1 + static_cast<Index>(rng() % 64);
    o.padding_side = trial % 2 ? PaddingSide::kLeft : PaddingSide::kRight;
    std::vector<PackItem> pieces;
    Index used = 0;
    while (true) {
      const Index d = static_cast<Index>(rng() % docs);
      const Index size = offsets[d + 1] - offsets[d];
      const Index start = size ? static_cast<Index>(rng() % (size + 1)) : 0;
      const Index length = size - start;
      if (used + length > o.seq_len || rng() % 5 == 0) break;
      pieces.push_back({d, length, 0, start});
      used += length;
    }
    // The definition: concatenate, then pad.
    I64 ids, labels, pos;
    I32 doc;
    std::int32_t k = 0;
    for (const auto& p : pieces) {
      if (p.length == 0) continue;
      for (Index t = 0; t < p.length; ++t) {
        ids.push_back(tokens[offsets[p.item] + p.start + t]);
        labels.push_back(t == 0 ? -100 : ids.back());
        pos.push_back(t);
        doc.push_back(k);
      }
      ++k;
    }
    const size_t pad = static_cast<size_t>(o.seq_len) - ids.size();
    auto padded = [&](auto v, auto fill) {
      decltype(v) out;
      if (o.padding_side == PaddingSide::kLeft) out.assign(pad, fill);
      out.insert(out.end(), v.begin(), v.end());
      if (o.padding_side == PaddingSide::kRight) out.insert(out.end(), pad, fill);
      return out;
    };
    const size_t n = static_cast<size_t>(o.seq_len);
    I64 got_ids(n), got_labels(n), got_pos(n);
    I32 got_doc(n);
    FillRowMetadata(pieces, o, {got_pos.data(), got_doc.data(), nullptr, nullptr});
    FillRowTokens(std::span<const PackItem>(pieces), tokens.data(), offsets.data(), o,
                  got_ids.data(), got_labels.data());
    EXPECT_EQ(got_ids, padded(ids, std::int64_t{0})) << trial;
    EXPECT_EQ(got_labels, padded(labels, std::int64_t{-100})) << trial;
    EXPECT_EQ(got_pos, padded(pos, std::int64_t{0})) << trial;
    EXPECT_EQ(got_doc, padded(doc, std::int32_t{-1})) << trial;
  }
}

TEST(CollateTest, BadOptionsNameTheValue) {
  CollateOptions o;
  try {
    ValidateCollateOptions(o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "seq_len: must be at least 1, got 0");
  }
  EXPECT_THROW((void)ParsePaddingSide("middle"), std::invalid_argument);
}

}  // namespace
}  // namespace shardkit
