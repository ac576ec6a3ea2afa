// Flags that several commands share (header-only): the shuffle group, declared
// once here with its help text, and the reading of any options struct that
// has a table in the core (shardkit/loader/option_fields.h) from its flags.
#ifndef SHARDKIT_CLI_FLAGS_H_
#define SHARDKIT_CLI_FLAGS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "cli/args.h"
#include "shardkit/loader/option_fields.h"

namespace shardkit::cli {

// Declares the shuffle switch described by `help` (--shuffle, or --no-shuffle
// for options that shuffle by default: `on`), --seed S and --epoch E (each 0
// by default), in that order.
inline void AddShuffleFlags(Args& args, const std::string& help, bool on = false) {
  args.Flag(on ? "no-shuffle" : "shuffle", "", help)
      .Flag("seed", "S", "shuffle seed (default 0)")
      .Flag("epoch", "E", "shuffle epoch (default 0)");
}

// Declares the flags of ItemSplitOptions (shardkit/sharding/shard_plan.h;
// shard, audit, eval-plan): --split (described by `split`), --offset,
// --limit, then the shuffle group.
inline void AddItemSplitFlags(Args& args, const std::string& split, const std::string& shuffle) {
  args.Flag("split", "NAME", split)
      .Flag("offset", "O", "skip the first O items (window start)")
      .Flag("limit", "L", "at most L items after the offset");
  AddShuffleFlags(args, shuffle);
}

// How a command names the flags of an options struct's fields: a field's
// flag is its name in the core's table (shardkit/loader/option_fields.h) with
// '-' for '_', except
//   renamed  {field, flag}: the true renames (batch_size is --batch);
//   negated  {bool field, switch}: the switch turns a field that is on by
//            default off (--no-shuffle, --per-rank);
//   own      fields the command reads by a rule of its own (a file of
//            weights, the ranks to run), or does not offer.
using FieldFlag = std::pair<std::string_view, std::string_view>;
struct FlagNames {
  std::span<const FieldFlag> renamed;
  std::span<const FieldFlag> negated;
  std::span<const std::string_view> own;
};

// The flag of field `name` under `names`, or "" for a field the command reads
// itself.
inline std::string FieldFlagName(std::string_view name, const FlagNames& names) {
  if (std::find(names.own.begin(), names.own.end(), name) != names.own.end()) return "";
  for (auto [field, flag] : names.renamed) {
    if (field == name) return std::string(flag);
  }
  std::string flag(name);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

// Reads the fields of `options` given as flags through the core's table; a
// field without its flag keeps its value (the core's default). Integers are
// read as Args reads them (UsageError naming the flag), enum names by the
// core's parser (invalid_argument naming the option).
template <typename Options>
void ReadOptionFlags(const Args& args, Options* options, const FlagNames& names) {
  VisitOptions(*options, [&](const char* name, auto& field) {
    using T = std::decay_t<decltype(field)>;
    for (auto [negated, flag] : names.negated) {
      if (negated != name) continue;
      // The switch turns the field off; without it the core's default holds.
      if constexpr (std::is_same_v<T, bool>) {
        if (args.Has(std::string(flag))) field = false;
      }
      return;
    }
    const std::string flag = FieldFlagName(name, names);
    if (flag.empty() || !args.Has(flag)) return;
    if constexpr (std::is_same_v<T, bool>) {
      field = true;
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      field = args.Uint(flag, field);
    } else if constexpr (std::is_same_v<T, Index> || std::is_same_v<T, std::optional<Index>>) {
      field = *args.Int(flag);
    } else if constexpr (std::is_enum_v<T>) {
      field = ParseOptionField(*args.Str(flag), &field);
    } else {
      // Any other type (ShardOptions::weights) is read by the command: list it in `own`.
      throw UsageError("--" + flag + ": read by the command, not by its options table");
    }
  });
}

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_FLAGS_H_
