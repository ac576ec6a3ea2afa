// The option tables (option_fields.h) against the structs they describe: each
// struct's fields are counted by aggregate initialisation, so a field added to
// an options struct without its line in the table (or a part visited twice)
// fails here, before an edge silently drops it.
#include "shardkit/loader/option_fields.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <string>
#include <utility>

namespace shardkit {
namespace {

// Converts to any field type (by reference, so no conversion is ambiguous);
// only used in unevaluated initialisations.
struct AnyField {
  template <typename T>
  operator T&() const&& noexcept;
};

template <typename T, std::size_t... I>
constexpr bool InitializableWith(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), AnyField{})...}; };
}

// The number of elements of aggregate T: its direct bases, then its fields.
template <typename T, std::size_t N = 0>
constexpr std::size_t AggregateElements() {
  if constexpr (N > 64 || !InitializableWith<T>(std::make_index_sequence<N + 1>{})) {
    return N;
  } else {
    return AggregateElements<T, N + 1>();
  }
}

// The names the table visits, each once.
template <typename Options>
std::set<std::string> Visited() {
  Options options{};
  std::set<std::string> names;
  std::size_t visits = 0;
  VisitOptions(options, [&](const char* name, auto&) {
    names.insert(name);
    ++visits;
  });
  EXPECT_EQ(names.size(), visits) << "a name is visited twice";
  return names;
}

TEST(OptionFieldsTest, PaddingOptionsTableVisitsEveryField) {
  EXPECT_EQ(Visited<PaddingOptions>().size(), AggregateElements<PaddingOptions>());
}

TEST(OptionFieldsTest, CollateOptionsAreSeqLenAndTheirPaddingOptions) {
  // One base (PaddingOptions) plus its own fields.
  const std::size_t own = AggregateElements<CollateOptions>() - 1;
  EXPECT_EQ(Visited<CollateOptions>().size(), own + Visited<PaddingOptions>().size());
  for (const std::string& name : Visited<PaddingOptions>()) {
    EXPECT_TRUE(Visited<CollateOptions>().contains(name)) << name;
  }
}

TEST(OptionFieldsTest, TrainOptionsTableVisitsEveryField) {
  // TrainOptions::cp is visited as its fields (cp_size, cp_strategy, cp_granularity).
  const std::size_t fields =
      AggregateElements<TrainOptions>() - 1 + AggregateElements<decltype(TrainOptions::cp)>();
  EXPECT_EQ(Visited<TrainOptions>().size(), fields);
}

TEST(OptionFieldsTest, LoaderOptionsAreTheTrainAndPaddingOptionsPlusTheirOwn) {
  // Two bases (TrainOptions, PaddingOptions) plus the loader's own fields.
  const std::size_t own = AggregateElements<LoaderOptions>() - 2;
  const auto loader = Visited<LoaderOptions>();
  const auto train = Visited<TrainOptions>();
  const auto padding = Visited<PaddingOptions>();
  EXPECT_EQ(loader.size(), train.size() + padding.size() + own);
  for (const auto* part : {&train, &padding}) {
    for (const std::string& name : *part) EXPECT_TRUE(loader.contains(name)) << name;
  }
}

TEST(OptionFieldsTest, PackOptionsTableVisitsEveryField) {
  EXPECT_EQ(Visited<PackOptions>().size(), AggregateElements<PackOptions>());
}

TEST(OptionFieldsTest, TrainPackOptionsCarriesEveryPackerFieldOfThePlan) {
  // Every TrainOptions field set apart from its default: each PackOptions
  // field but the packer-only ones must change (a field the mapping forgot
  // keeps its default and fails here), to the plan's value.
  TrainOptions t;
  t.seq_len = 96;
  t.algorithm = PackAlgorithm::kNextFit;
  t.max_images = 3;
  t.max_sequences = 5;
  t.oversize = Oversize::kSplit;  // the packer's default is drop
  t.buffer = 7;
  const PackOptions p = TrainPackOptions(t);
  const PackOptions d;
  std::set<std::string> carried;
  VisitOptions(p, [&](const char* name, const auto& field) {
    VisitOptions(d, [&](const char* default_name, const auto& default_field) {
      if constexpr (std::is_same_v<decltype(field), decltype(default_field)>) {
        if (std::string(name) == default_name && !(field == default_field)) carried.insert(name);
      }
    });
  });
  std::set<std::string> expected = Visited<PackOptions>();
  for (std::string_view only : kPackerOnlyFields) expected.erase(std::string(only));
  EXPECT_EQ(carried, expected);
  EXPECT_EQ(p.capacity, 96);
  EXPECT_EQ(p.algorithm, PackAlgorithm::kNextFit);
  EXPECT_EQ(p.max_images, 3);
  EXPECT_EQ(p.max_sequences, 5);
  EXPECT_EQ(p.oversize, Oversize::kSplit);
  EXPECT_EQ(p.buffer, 7);
  EXPECT_EQ(p.compat, PackCompat::kNone);
}

TEST(OptionFieldsTest, MultimodalOptionsTableVisitsEveryField) {
  EXPECT_EQ(Visited<MultimodalOptions>().size(), AggregateElements<MultimodalOptions>());
}

TEST(OptionFieldsTest, ItemSplitOptionsTableVisitsEveryField) {
  EXPECT_EQ(Visited<ItemSplitOptions>().size(), AggregateElements<ItemSplitOptions>());
}

TEST(OptionFieldsTest, ShardAndEvalOptionsAreTheItemSplitPlusTheirOwn) {
  // One base (ItemSplitOptions) plus each struct's own fields.
  const auto split = Visited<ItemSplitOptions>();
  const auto shard = Visited<ShardOptions>();
  const auto eval = Visited<EvalOptions>();
  EXPECT_EQ(shard.size(), split.size() + AggregateElements<ShardOptions>() - 1);
  EXPECT_EQ(eval.size(), split.size() + AggregateElements<EvalOptions>() - 1);
  for (const std::string& name : split) {
    EXPECT_TRUE(shard.contains(name)) << name;
    EXPECT_TRUE(eval.contains(name)) << name;
  }
}

TEST(OptionFieldsTest, TheLoaderCollatesWithItsOwnPaddingOptions) {
  // The loader's collation options are its PaddingOptions part and seq_len:
  // every padding field set through the table arrives unchanged.
  LoaderOptions o;
  o.seq_len = 16;
  VisitOptions(OptionsPart<PaddingOptions>(o), [](const char*, auto& field) {
    using T = std::remove_cvref_t<decltype(field)>;
    if constexpr (std::is_same_v<T, bool>) {
      field = !field;
    } else if constexpr (std::is_same_v<T, PaddingSide>) {
      field = PaddingSide::kLeft;
    } else {
      field = field + 7;
    }
  });
  const CollateOptions c = MakeCollateOptions(o.seq_len, o);
  EXPECT_EQ(c.seq_len, 16);
  EXPECT_EQ(c.padding_side, PaddingSide::kLeft);
  EXPECT_EQ(c.pad_token_id, 7);
  EXPECT_EQ(c.ignore_index, -93);
  EXPECT_FALSE(c.causal);
}

}  // namespace
}  // namespace shardkit
