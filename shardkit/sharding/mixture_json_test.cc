#include "shardkit/sharding/mixture_json.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/base/hash.h"
#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

std::string ErrorOf(const std::string& text) {
  return base_testing::ErrorOf([&] { (void)MixtureStateFromJson(text); });
}

using base_testing::Resealed;

std::vector<MixSample> Samples(const Mixture& m, Index begin, Index end) {
  std::vector<MixSample> out;
  for (Index i = begin; i < end; ++i) out.push_back(m.At(i));
  return out;
}

Mixture Sample() {
  MixtureOptions o;
  o.seed = 11;
  o.block = 32;
  o.schedule = {{500, {1, 3, 1}}};
  return Mixture({40, 70, 9}, {0.5, 0.25, 1.0 / 3}, o);
}

TEST(MixtureJsonTest, StateRoundTripsAndContinuesTheUninterruptedRun) {
  const Mixture mix = Sample();
  for (const Index cut : {Index{0}, Index{7}, Index{333}, Index{640}}) {
    const std::string text = MixtureStateToJson(mix.State(cut));
    const MixtureState back = MixtureStateFromJson(text);
    EXPECT_EQ(MixtureStateToJson(back), text);
    // Delivered: the samples an uninterrupted run gives after the cut.
    EXPECT_EQ(Samples(Mixture::FromState(back), 0, 400), Samples(mix, cut, cut + 400)) << cut;
  }
}

// Issue 20: Mixture.from_state accepted edited consumed, seed, block and
// sizes (the state had no seal); new weights are arguments, not edits.
TEST(MixtureJsonTest, RegressionAnEditedStateIsRefused) {
  const std::string text = MixtureStateToJson(Sample().State(333));
  EXPECT_EQ(ErrorOf(text), "no error");
  const MixtureState s = MixtureStateFromJson(text);
  const std::string consumed = "\"consumed\": [" + std::to_string(s.consumed[0]);
  const std::vector<std::pair<std::string, std::string>> edits = {
      {consumed, "\"consumed\": [" + std::to_string(s.consumed[0] + 3)},
      {"\"seed\": 11", "\"seed\": 12"},
      {"\"block\": 32", "\"block\": 64"},
      {"\"sizes\": [40,", "\"sizes\": [41,"},
      {"\"weights\": [\"0.5\"", "\"weights\": [\"0.75\""},
      {"\"position\": 333", "\"position\": 334"}};
  for (const auto& [from, to] : edits) {
    std::string edited = text;
    const std::size_t at = edited.find(from);
    ASSERT_NE(at, std::string::npos) << from << " in " << text;
    edited.replace(at, from.size(), to);
    EXPECT_EQ(ErrorOf(edited),
              "state: checksum: does not match the state's content (the state was edited or "
              "damaged)")
        << from;
  }
  // Sealed again, an edit of what the state belongs to still does not match
  // its fingerprint (which the body re-encodes from the fields read).
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"\"seed\": 11", "\"seed\": 12"},
        {"\"sizes\": [40,", "\"sizes\": [41,"}}) {
    const std::string e = ErrorOf(Resealed(text, from, to));
    EXPECT_EQ(e.rfind("state: checksum: does not match", 0), 0u) << e;
  }
}

TEST(MixtureJsonTest, OtherVersionsAndKindsAreRefusedNamingThem) {
  const std::string text = MixtureStateToJson(Sample().State(5));
  EXPECT_EQ(ErrorOf(Resealed(text, "\"version\": 3", "\"version\": 2"))
                .rfind("state: version: a version 2 mixture state; this shardkit reads version 3 "
                       "(version 1 mixtures had other per-block orders, and version 2 states had "
                       "no checksum",
                       0),
            0u);
  EXPECT_EQ(ErrorOf(Resealed(text, "\"kind\": \"mixture\"", "\"kind\": \"loader\"")),
            "state: kind: 'loader' is not a mixture state");
  EXPECT_EQ(ErrorOf("null"), "state: expected an object, got null");
  EXPECT_EQ(ErrorOf(Resealed(text, "\"skip\"", "\"extra\": 1, \"skip\"")),
            "state: unknown key 'extra'");
}

}  // namespace
}  // namespace shardkit
