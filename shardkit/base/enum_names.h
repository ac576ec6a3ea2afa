// EnumNames: the one table behind every enum's Name / Parse pair (split,
// remainder, algorithm, oversize, padding side, cost model, token dtype).
//
//   constexpr EnumNames<Split, 3> kSplits{"split", "split",
//       {{{Split::kRoundRobin, "round_robin"}, {Split::kContiguous, "contiguous"},
//         {Split::kBalanced, "balanced"}}}};
//   kSplits.Name(Split::kBalanced) == "balanced"
//   kSplits.Parse("x") throws invalid_argument
//     "split: unknown split 'x' (expected round_robin, contiguous or balanced)"
//
// The value is quoted with control characters escaped and long values cut,
// so an error stays one line.
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

template <typename E, std::size_t N>
struct EnumNames {
  struct Entry {
    E value;
    std::string_view name;
  };
  std::string_view param;  // the parameter errors name ("split")
  std::string_view noun;   // what a value is called ("split", "policy")
  std::array<Entry, N> entries;

  [[nodiscard]] constexpr std::string_view Name(E value) const {
    for (const Entry& e : entries) {
      if (e.value == value) return e.name;
    }
    return "?";
  }

  // Every name, in table order (the `--help` and error lists).
  [[nodiscard]] std::vector<std::string_view> Names() const {
    std::vector<std::string_view> names;
    for (const Entry& e : entries) names.push_back(e.name);
    return names;
  }

  [[nodiscard]] E Parse(std::string_view name) const {
    for (const Entry& e : entries) {
      if (e.name == name) return e.value;
    }
    std::string expected;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) expected += i + 1 == N ? " or " : ", ";
      expected += entries[i].name;
    }
    ThrowInvalid(param, "unknown " + std::string(noun) + " " + QuoteForMessage(name) +
                            " (expected " + expected + ")");
  }
};

}  // namespace shardkit

#endif  // SHARDKIT_BASE_ENUM_NAMES_H_
