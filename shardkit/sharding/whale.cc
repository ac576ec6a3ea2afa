#include "shardkit/sharding/whale.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace shardkit {

bool ParseWhaleBool(std::string_view name, std::string_view value) {
  std::string lower(value);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower.empty() || lower == "false" || lower == "0" || lower == "no" || lower == "off") {
    return false;
  }
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
  ThrowInvalid(name, "'" + std::string(value) +
                         "' is not a boolean (expected 1/0, true/false, yes/no or on/off, any "
                         "case; empty is false)");
}

WhalePolicy WhalePolicyFrom(const WhaleEnvLookup& env) {
  WhalePolicy policy;
  const std::string unbalanced(kWhaleUnbalancedIoSlicing), drop(kWhaleDropLastFiles);
  if (auto v = env(unbalanced)) policy.unbalanced_io_slicing = ParseWhaleBool(unbalanced, *v);
  if (auto v = env(drop)) policy.drop_last_files = ParseWhaleBool(drop, *v);
  return policy;
}

WhalePolicy WhalePolicyFromEnvironment() {
  return WhalePolicyFrom([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

WhalePolicy ParseWhalePolicy(std::string_view param, std::string_view name) {
  if (name == "default") return {};
  if (name == "unbalanced") return {true, false};
  if (name == "drop_last") return {false, true};
  ThrowInvalid(param, "'" + std::string(name) +
                          "' is not a Whale policy (expected default, unbalanced or drop_last)");
}

WhaleChoice WhaleSlicing(Index num_files, Index world_size, bool unbalanced_io_slicing,
                         bool drop_last_files) {
  CheckAtLeast("num_files", num_files, 0);
  CheckAtLeast("world_size", world_size, 1);
  WhaleChoice choice;
  if (num_files < world_size) {
    choice.remainder = Remainder::kReplicate;
    choice.shuffle = true;
    choice.reason = "fewer files than workers: every worker reads every file, shuffled";
    if (unbalanced_io_slicing || drop_last_files) {
      choice.warning =
          "WHALE_UNBALANCED_IO_SLICING / WHALE_DROP_LAST_FILES are ignored "
          "when there are fewer files than workers";
    }
  } else if (num_files % world_size == 0) {
    choice.remainder = Remainder::kUneven;
    choice.reason = "files divide evenly: one equal share per worker";
  } else if (unbalanced_io_slicing) {
    choice.remainder = Remainder::kUneven;
    choice.reason = "WHALE_UNBALANCED_IO_SLICING: some workers read one more file";
    choice.warning =
        "uneven shares with epoch-based stopping can hang: the workers with one more "
        "file run extra steps while the others wait in a collective. Stop by step "
        "count, or give every rank the same number of steps (EvalPlan-style equal "
        "steps with masked padding)";
  } else if (drop_last_files) {
    choice.remainder = Remainder::kDrop;
    choice.reason = "WHALE_DROP_LAST_FILES: even split, the surplus files are dropped";
  } else {
    choice.remainder = Remainder::kReplicate;
    choice.shuffle = true;
    choice.reason =
        "files do not divide evenly (Whale's default): every worker reads "
        "every file, shuffled";
  }
  return choice;
}

ShardPlan WhalePlan(Index num_files, Index world_size, bool unbalanced_io_slicing,
                    bool drop_last_files, std::uint64_t seed, std::uint64_t epoch) {
  WhaleChoice choice = WhaleSlicing(num_files, world_size, unbalanced_io_slicing, drop_last_files);
  ShardOptions options;
  options.remainder = choice.remainder;
  options.shuffle = choice.shuffle;
  options.seed = seed;
  options.epoch = epoch;
  return ShardPlan(num_files, world_size, std::move(options));
}

}  // namespace shardkit
