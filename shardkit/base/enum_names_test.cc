#include "shardkit/base/enum_names.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/json.h"
#include "shardkit/base/testing.h"
#include "shardkit/loader/image_decode.h"
#include "shardkit/loader/source_formats.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/loader/train_plan.h"
#include "shardkit/packing/context_parallel.h"
#include "shardkit/packing/packing.h"
#include "shardkit/packing/packing_metadata.h"
#include "shardkit/packing/rank_balance.h"
#include "shardkit/sharding/mixture.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit {
namespace {

using base_testing::ErrorOf;
using Names = std::vector<std::string_view>;

enum class Fruit { kApple, kPear, kPlum };
constexpr EnumNames<Fruit, 3> kFruits{"fruit", "kind", {"apple", "pear", "plum"}};

TEST(EnumNamesTest, AValueIsNamedByItsPositionAndParsedBack) {
  static_assert(kFruits.Name(Fruit::kPlum) == "plum");
  EXPECT_EQ(kFruits.Name(Fruit::kApple), "apple");
  EXPECT_EQ(kFruits.Name(Fruit::kPear), "pear");
  EXPECT_EQ(kFruits.Name(static_cast<Fruit>(3)), "?");
  EXPECT_EQ(kFruits.Name(static_cast<Fruit>(-1)), "?");
  EXPECT_EQ(kFruits.Parse("apple"), Fruit::kApple);
  EXPECT_EQ(kFruits.Parse("pear"), Fruit::kPear);
  EXPECT_EQ(kFruits.Parse("plum"), Fruit::kPlum);
  EXPECT_EQ(kFruits.Names(), (Names{"apple", "pear", "plum"}));
}

TEST(EnumNamesTest, AnUnknownNameIsOneLineNamingTheParameterAndEveryName) {
  EXPECT_EQ(ErrorOf([] { (void)kFruits.Parse("Pear"); }),
            "fruit: unknown kind 'Pear' (expected apple, pear or plum)");
  EXPECT_EQ(ErrorOf([] { (void)kFruits.Parse("a\nb"); }),
            "fruit: unknown kind 'a\\x0ab' (expected apple, pear or plum)");
}

// Every enum's names, spelled here by value (not read from its table): the
// tables name by position, so a table out of the enum's order fails here.
// Each name parses back to its value; the names joined by spaces.
template <typename E>
std::string Spelled(std::string_view (*name)(E), E (*parse)(std::string_view),
                    std::initializer_list<E> values) {
  std::string out;
  for (E value : values) {
    EXPECT_EQ(parse(name(value)), value) << name(value);
    out += (out.empty() ? "" : " ") + std::string(name(value));
  }
  return out;
}

std::string Joined(const Names& names) {
  std::string out;
  for (std::string_view n : names) out += (out.empty() ? "" : " ") + std::string(n);
  return out;
}

TEST(EnumNamesTest, EveryPublicEnumNamesEachValueAsDocumented) {
  EXPECT_EQ(
      Spelled(SplitName, ParseSplit, {Split::kRoundRobin, Split::kContiguous, Split::kBalanced}),
      "round_robin contiguous balanced");
  EXPECT_EQ(Joined(SplitNames()), "round_robin contiguous balanced");
  EXPECT_EQ(Spelled(RemainderName, ParseRemainder,
                    {Remainder::kUneven, Remainder::kDrop, Remainder::kPad, Remainder::kReplicate}),
            "uneven drop pad replicate");
  EXPECT_EQ(Joined(RemainderNames()), "uneven drop pad replicate");
  EXPECT_EQ(Spelled(PackAlgorithmName, ParsePackAlgorithm,
                    {PackAlgorithm::kNextFit, PackAlgorithm::kFirstFitDecreasing,
                     PackAlgorithm::kBestFitDecreasing, PackAlgorithm::kBalanced,
                     PackAlgorithm::kHistogram}),
            "next_fit ffd bfd balanced histogram");
  EXPECT_EQ(Joined(PackAlgorithmNames()), "next_fit ffd bfd balanced histogram");
  EXPECT_EQ(
      Spelled(OversizeName, ParseOversize, {Oversize::kDrop, Oversize::kError, Oversize::kSplit}),
      "drop error split");
  EXPECT_EQ(Joined(OversizeNames()), "drop error split");
  EXPECT_EQ(Spelled(PackCompatName, ParsePackCompat, {PackCompat::kNone, PackCompat::kTrl}),
            "none trl");
  EXPECT_EQ(Joined(PackCompatNames()), "none trl");
  EXPECT_EQ(Spelled(PaddingSideName, ParsePaddingSide, {PaddingSide::kRight, PaddingSide::kLeft}),
            "right left");
  EXPECT_EQ(
      Spelled(CostModelName, ParseCostModel, {CostModel::kTokens, CostModel::kSquaredLengths}),
      "tokens squared");
  EXPECT_EQ(Joined(CostModelNames()), "tokens squared");
  EXPECT_EQ(Spelled(CpSplitName, ParseCpSplit,
                    {CpSplit::kContiguous, CpSplit::kHeadTail, CpSplit::kDocumentHeadTail,
                     CpSplit::kBalanced, CpSplit::kPtrr}),
            "contiguous head_tail document_head_tail balanced ptrr");
  EXPECT_EQ(Joined(CpSplitNames()), "contiguous head_tail document_head_tail balanced ptrr");
  EXPECT_EQ(Spelled(CpStrategyName, ParseCpStrategy,
                    {CpStrategy::kHeadTail, CpStrategy::kBalanced, CpStrategy::kPtrr}),
            "head_tail balanced ptrr");
  EXPECT_EQ(Spelled(InterpolationName, ParseInterpolation,
                    {Interpolation::kStep, Interpolation::kLinear}),
            "step linear");
  EXPECT_EQ(MixByName(MixBy::kSamples), "samples");
  EXPECT_EQ(MixByName(MixBy::kTokens), "tokens");
  EXPECT_EQ(ParseMixBy("samples", "schedule_unit"), MixBy::kSamples);
  EXPECT_EQ(ParseMixBy("tokens", "schedule_unit"), MixBy::kTokens);
  EXPECT_EQ(Spelled(TrainModeName, ParseTrainMode,
                    {TrainMode::kPad, TrainMode::kContinuous, TrainMode::kDrop}),
            "pad continuous drop");
  EXPECT_EQ(Joined(TrainModeNames()), "pad continuous drop");
  EXPECT_EQ(Spelled(SourceFormatName, ParseSourceFormat,
                    {SourceFormat::kNpy, SourceFormat::kMegatron, SourceFormat::kOlmo,
                     SourceFormat::kArrow}),
            "npy megatron olmo arrow");
  EXPECT_EQ(
      Spelled(TokenDTypeName, ParseTokenDType,
              {TokenDType::kUint16, TokenDType::kInt32, TokenDType::kUint32, TokenDType::kUint8,
               TokenDType::kInt8, TokenDType::kInt16, TokenDType::kInt64, TokenDType::kUint64}),
      "uint16 int32 uint32 uint8 int8 int16 int64 uint64");
  EXPECT_EQ(
      Spelled(ReadModeName, ParseReadMode, {ReadMode::kAuto, ReadMode::kMmap, ReadMode::kPread}),
      "auto mmap pread");
  EXPECT_EQ(ImageFormatName(ImageFormat::kJpeg), "jpeg");
  EXPECT_EQ(ImageFormatName(ImageFormat::kPng), "png");
  EXPECT_EQ(ImageFormatName(ImageFormat::kWebp), "webp");
  EXPECT_EQ(Json::TypeName(Json::Type::kNull), "null");
  EXPECT_EQ(Json::TypeName(Json::Type::kBool), "a boolean");
  EXPECT_EQ(Json::TypeName(Json::Type::kInt), "an integer");
  EXPECT_EQ(Json::TypeName(Json::Type::kString), "a string");
  EXPECT_EQ(Json::TypeName(Json::Type::kArray), "a list");
  EXPECT_EQ(Json::TypeName(Json::Type::kObject), "an object");
}

}  // namespace
}  // namespace shardkit
