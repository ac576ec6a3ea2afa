#include "shardkit/base/errors.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

using base_testing::ErrorOf;

TEST(ErrorsTest, RangeChecksNameTheParameterTheValueAndTheInterval) {
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckIndex("rank", 4, 0, 4); }),
            "rank: 4 is outside [0, 4)");
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckIndex("rank", -1, 0, 4, " (world_size=4)"); }),
            "rank: -1 is outside [0, 4) (world_size=4)");
  EXPECT_EQ(ErrorOf([] { CheckInRange("rank", 7, 0, 4); }), "rank: 7 is outside [0, 4)");
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckPosition("position", 5, 0, 4); }),
            "position: 5 is outside [0, 4]");
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckPosition("step", -1, 0, 4, " (steps)"); }),
            "step: -1 is outside [0, 4] (steps)");
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckSlice(-2, 3, 10); }),
            "start: -2 is outside [0, 10]");
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckSlice(11, 11, 10); }),
            "start: 11 is outside [0, 10]");
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckSlice(4, 3, 10); }), "stop: 3 is outside [4, 10]");
  EXPECT_EQ(ErrorOf<std::out_of_range>([] { CheckSlice(4, 11, 10); }),
            "stop: 11 is outside [4, 10]");
}

TEST(ErrorsTest, RangeChecksAcceptTheirBounds) {
  EXPECT_EQ(ErrorOf<std::exception>([] { CheckIndex("i", 0, 0, 1); }), "no error");
  EXPECT_EQ(ErrorOf<std::exception>([] { CheckInRange("i", 3, 0, 4); }), "no error");
  EXPECT_EQ(ErrorOf<std::exception>([] { CheckPosition("p", 4, 0, 4); }), "no error");
  EXPECT_EQ(ErrorOf<std::exception>([] { CheckPosition("p", 0, 0, 0); }), "no error");
  EXPECT_EQ(ErrorOf<std::exception>([] { CheckSlice(0, 0, 0); }), "no error");
  EXPECT_EQ(ErrorOf<std::exception>([] { CheckSlice(10, 10, 10); }), "no error");
  EXPECT_EQ(ErrorOf<std::exception>([] { CheckSlice(0, 10, 10); }), "no error");
}

}  // namespace
}  // namespace shardkit
