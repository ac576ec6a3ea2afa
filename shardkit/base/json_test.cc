#include "shardkit/base/json.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

std::string ErrorOf(std::string_view text) {
  return base_testing::ErrorOf([&] { (void)ParseJson(text, "state"); });
}

TEST(JsonTest, WritesWhatPythonJsonDumpsWrites) {
  Json v = Json::MakeObject();
  v.Set("a", Json::MakeArray({Json::Int(-5), Json::Uint(18446744073709551615ull), Json()}));
  v.Set("b\"\n", Json::String("caf\xc3\xa9 \xf0\x9f\x98\x80 \x7f"));
  v.Set("c", Json::MakeObject({{"t", Json::Bool(true)}, {"f", Json::Bool(false)}}));
  // json.dumps({"a": [-5, 2**64 - 1, None], "b\"\n": "café 😀 \x7f",
  //             "c": {"t": True, "f": False}})
  EXPECT_EQ(WriteJson(v),
            "{\"a\": [-5, 18446744073709551615, null], \"b\\\"\\n\": \"caf\\u00e9 "
            "\\ud83d\\ude00 \\u007f\", \"c\": {\"t\": true, \"f\": false}}");
  EXPECT_EQ(ParseJson(WriteJson(v), "x"), v);
  EXPECT_EQ(AsInt64(ParseJson("-9223372036854775808", "x"), "x"),
            std::numeric_limits<std::int64_t>::min());
  EXPECT_THROW((void)AsInt64(ParseJson("9223372036854775808", "x"), "x"), std::invalid_argument);
  EXPECT_EQ(AsUint64(ParseJson("18446744073709551615", "x"), "x"),
            std::numeric_limits<std::uint64_t>::max());
}

TEST(JsonTest, EveryShortEscapeReadsAndWritesAsPythonJson) {
  // json.dumps("\" \\ / \b \f \n \r \t \x01 \x7f")
  EXPECT_EQ(WriteJson(Json::String("\" \\ / \b \f \n \r \t \x01 \x7f")),
            R"("\" \\ / \b \f \n \r \t \u0001 \u007f")");
  // json.loads(r'"\" \\ \/ \b \f \n \r \t"')
  EXPECT_EQ(ParseJson(R"("\" \\ \/ \b \f \n \r \t")", "x"), Json::String("\" \\ / \b \f \n \r \t"));
}

TEST(JsonTest, RefusesWhatIsNotStrictJsonNamingTheParameter) {
  for (const char* text :
       {"",          " ",     "{",      "[1,]", "{\"a\" 1}", "{\"a\": 1,}", "01",
        "-",         "1e5",   "1.0",    "tru",  "nul",       "\"abc",       "\"\\x\"",
        "\"\\u12\"", "[1] 2", "{1: 2}", "NaN",  "Infinity",  "\"a\tb\""}) {
    const std::string e = ErrorOf(text);
    EXPECT_EQ(e.rfind("state: not valid JSON at byte ", 0), 0u) << text << " -> " << e;
  }
  EXPECT_EQ(ErrorOf(std::string(63, '[') + std::string(63, ']')), "no error");
  EXPECT_NE(ErrorOf(std::string(65, '[') + std::string(65, ']')).find("nested deeper than 64"),
            std::string::npos);
}

// A state with a key twice is ambiguous (Python's json keeps the last, a
// first-wins reader the first): refused naming the key, at any depth, however
// the key is spelt (escapes decode to the same key), in small and in large
// objects alike.
TEST(JsonTest, RegressionDuplicateKeysAreRefusedNamingTheKey) {
  EXPECT_EQ(ErrorOf("{\"epoch\": 1, \"epoch\": 2}"),
            "state: not valid JSON at byte 13: key \"epoch\" appears twice (ambiguous: every key "
            "must appear once)");
  EXPECT_NE(
      ErrorOf("{\"a\": [{\"b\": 1, \"c\": {\"d\": 1, \"d\": 1}}]}").find("key \"d\" appears twice"),
      std::string::npos);
  EXPECT_NE(ErrorOf("{\"a\": 1, \"\\u0061\": 2}").find("key \"a\" appears twice"),
            std::string::npos);
  // Control characters in the key stay escaped: the message is one line.
  const std::string e = ErrorOf("{\"x\\ny\": 1, \"x\\ny\": 2}");
  EXPECT_NE(e.find("key \"x\\ny\" appears twice"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // Same keys in different objects are no duplicates.
  EXPECT_EQ(ErrorOf("{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}"), "no error");
  // Large objects (a set past 16 keys): every key once parses, one key twice
  // anywhere (also among the first 16) is found.
  for (int dup : {-1, 3, 15, 16, 40000}) {
    std::string text = "{";
    for (int i = 0; i < 50000; ++i) {
      if (i) text += ", ";
      text +=
          "\"k" + std::to_string(i == dup + 1 && dup >= 0 ? dup : i) + "\": " + std::to_string(i);
    }
    text += "}";
    const std::string error = ErrorOf(text);
    if (dup < 0) {
      EXPECT_EQ(error, "no error");
      EXPECT_EQ(ParseJson(text, "state").object().size(), 50000u);
    } else {
      EXPECT_NE(error.find("key \"k" + std::to_string(dup) + "\" appears twice"), std::string::npos)
          << dup << ": " << error;
    }
  }
}

TEST(JsonTest, TypedAccessorsNameTheFieldPath) {
  const Json v = ParseJson("{\"a\": {\"b\": [1, \"x\"]}}", "state");
  const Json& b = Field(Field(v, "state", "a"), "state.a", "b");
  EXPECT_EQ(AsInt64(b.array()[0], "state.a.b[0]"), 1);
  try {
    (void)AsInt64(b.array()[1], "state.a.b[1]");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "state: a.b[1]: expected an integer, got a string");
  }
  try {
    (void)Field(v, "state", "c");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "state: missing key 'c'");
  }
  EXPECT_THROW(ExpectOnlyKeys(v, "state", {"b"}), std::invalid_argument);
  EXPECT_THROW((void)AsUint64(ParseJson("-1", "x"), "x"), std::invalid_argument);
}

}  // namespace
}  // namespace shardkit
