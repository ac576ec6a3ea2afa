// Whale compatibility: the file-slicing policy of Alibaba PAI Whale, chosen by
// its environment switches, expressed as a ShardPlan.
//
// Whale's rules when the number of files N does not divide by the number of
// master workers W:
//   - default: no split; every worker gets every file, shuffled (replicate);
//   - WHALE_UNBALANCED_IO_SLICING=true: some workers get one more file (uneven);
//   - WHALE_DROP_LAST_FILES=true: even split, the surplus files are dropped;
//   - both set: unbalanced wins;
//   - N < W: replicate whatever the switches say.
// When N divides by W every policy is the same even split (round robin).
//
// Thread-safety: pure functions.
#ifndef SHARDKIT_SHARDING_WHALE_H_
#define SHARDKIT_SHARDING_WHALE_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "shardkit/sharding/shard_plan.h"

namespace shardkit {

struct WhaleChoice {
  Remainder remainder = Remainder::kUneven;
  bool shuffle = false;
  std::string reason;   // which rule chose it, in words
  std::string warning;  // non-empty when the choice has a known hazard
};

// Reads a Whale BOOL switch: true/false, 1/0, yes/no, on/off (any case); an
// empty value is false. Throws invalid_argument naming `name`, the value and
// every accepted spelling.
[[nodiscard]] bool ParseWhaleBool(std::string_view name, std::string_view value);

// Whale's two switches. This is the one place they are read: whale_plan, the
// TokenLoader's file sharding and `shardkit loader-stats --shard-files` all
// take their policy from WhalePolicyFrom / WhalePolicyFromEnvironment unless
// the caller sets it explicitly.
struct WhalePolicy {
  bool unbalanced_io_slicing = false;  // WHALE_UNBALANCED_IO_SLICING
  bool drop_last_files = false;        // WHALE_DROP_LAST_FILES
  friend bool operator==(const WhalePolicy&, const WhalePolicy&) = default;
};
inline constexpr std::string_view kWhaleUnbalancedIoSlicing = "WHALE_UNBALANCED_IO_SLICING";
inline constexpr std::string_view kWhaleDropLastFiles = "WHALE_DROP_LAST_FILES";

// Looks an environment variable up; nullopt when it is not set.
using WhaleEnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The switches as `env` sets them (unset or empty: false). Throws
// invalid_argument naming the variable (ParseWhaleBool).
[[nodiscard]] WhalePolicy WhalePolicyFrom(const WhaleEnvLookup& env);
// WhalePolicyFrom over the process environment (getenv).
[[nodiscard]] WhalePolicy WhalePolicyFromEnvironment();

// A policy by name, for command lines: "default" (neither switch),
// "unbalanced" (WHALE_UNBALANCED_IO_SLICING), "drop_last"
// (WHALE_DROP_LAST_FILES). Throws invalid_argument naming `param`.
[[nodiscard]] WhalePolicy ParseWhalePolicy(std::string_view param, std::string_view name);

// Applies Whale's rules. REQUIRES: num_files >= 0, world_size >= 1 (throws
// invalid_argument naming the parameter otherwise).
[[nodiscard]] WhaleChoice WhaleSlicing(Index num_files, Index world_size,
                                       bool unbalanced_io_slicing, bool drop_last_files);

// The ShardPlan equivalent to Whale's choice; `seed` and `epoch` key the
// per-rank shuffles of replicate.
[[nodiscard]] ShardPlan WhalePlan(Index num_files, Index world_size, bool unbalanced_io_slicing,
                                  bool drop_last_files, std::uint64_t seed = 0,
                                  std::uint64_t epoch = 0);

}  // namespace shardkit

#endif  // SHARDKIT_SHARDING_WHALE_H_
