// EnumNames: the one table behind every enum's Name / Parse pair (split,
// remainder, algorithm, oversize, padding side, cost model, token dtype).
// The names stand in the order the enum declares its values, which are the
// defaults 0, 1, ..., N - 1: a value's name is the name at its position.
//
//   enum class Split { kRoundRobin, kContiguous, kBalanced };
//   constexpr EnumNames<Split, 3> kSplits{
//       "split", "split", {"round_robin", "contiguous", "balanced"}};
//   kSplits.Name(Split::kBalanced) == "balanced"
//   kSplits.Parse("x") throws invalid_argument
//     "split: unknown split 'x' (expected round_robin, contiguous or balanced)"
//
// The value is quoted with control characters escaped and long values cut,
// so an error stays one line. SHARDKIT_ENUM_PARSE_AND_NAME (and _NAMES)
// define the public functions a header declares from a table.
//
// Thread-safety: constexpr data.
#ifndef SHARDKIT_BASE_ENUM_NAMES_H_
#define SHARDKIT_BASE_ENUM_NAMES_H_

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit {

// `text` for an error message: at most 64 characters, control characters as
// \xNN, in single quotes.
[[nodiscard]] std::string QuoteForMessage(std::string_view text);

// REQUIRES: E's values are 0, 1, ..., N - 1 and names[i] names E(i).
template <typename E, std::size_t N>
struct EnumNames {
  std::string_view param;                 // the parameter errors name ("split")
  std::string_view noun;                  // what a value is called ("split", "policy")
  std::array<std::string_view, N> names;  // by value

  // "?" for a value outside the enum.
  [[nodiscard]] constexpr std::string_view Name(E value) const {
    const auto i = static_cast<std::size_t>(value);
    return i < N ? names[i] : "?";
  }

  // Every name, in declaration order (the `--help` and error lists).
  [[nodiscard]] std::vector<std::string_view> Names() const { return {names.begin(), names.end()}; }

  [[nodiscard]] E Parse(std::string_view name) const {
    for (std::size_t i = 0; i < N; ++i) {
      if (names[i] == name) return static_cast<E>(i);
    }
    std::string expected;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) expected += i + 1 == N ? " or " : ", ";
      expected += names[i];
    }
    ThrowInvalid(param, "unknown " + std::string(noun) + " " + QuoteForMessage(name) +
                            " (expected " + expected + ")");
  }
};

}  // namespace shardkit

// Defines, at namespace scope, `E ParseFn(std::string_view name)` and
// `std::string_view NameFn(E value)` by `table` (the pair the header declares).
#define SHARDKIT_ENUM_PARSE_AND_NAME(E, table, ParseFn, NameFn)  \
  E ParseFn(std::string_view name) { return table.Parse(name); } \
  std::string_view NameFn(E value) { return table.Name(value); }

// The same and `std::vector<std::string_view> NamesFn()`, every name in order.
#define SHARDKIT_ENUM_PARSE_AND_NAMES(E, table, ParseFn, NameFn, NamesFn) \
  SHARDKIT_ENUM_PARSE_AND_NAME(E, table, ParseFn, NameFn)                 \
  std::vector<std::string_view> NamesFn() { return table.Names(); }

#endif  // SHARDKIT_BASE_ENUM_NAMES_H_
