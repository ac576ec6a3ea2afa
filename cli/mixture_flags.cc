// The mixture's order flags (cli/mixture_flags.h).
#include "cli/mixture_flags.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cli/commands.h"

namespace shardkit::cli {

void AddMixtureFlags(Args& args, const std::string& prefix, MixBy by) {
  const bool tokens = by == MixBy::kTokens;
  args.Flag("by", "NAME",
            prefix + (tokens ? "tokens (default; weights are token shares) | samples"
                             : "samples (default) | tokens (weights are shares of tokens)"))
      .Flag("block", "B", prefix + "samples per block (default: the smallest valid, at least 1024)")
      .Flag("schedule", "P:W,..;..",
            prefix + "weights from position P on, e.g. '100000:1,0;200000:1,1'")
      .Flag("linear", "", prefix + "move the weights linearly between schedule points")
      .Flag("schedule-unit", "NAME",
            prefix + "samples (default) | tokens: schedule positions count tokens")
      .Flag("no-repeat", "K0,K1,...", prefix + "sources that stop the mixture when they run out");
}

MixtureOptions ReadMixtureFlags(const Args& args, Index num_sources, MixBy by) {
  MixtureOptions o;
  try {
    o.by = args.Has("by") ? ParseMixBy(*args.Str("by")) : by;
    o.schedule_unit = ParseMixBy(args.Str("schedule-unit", "samples"), "schedule-unit");
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--") + e.what());
  }
  o.block = args.Int("block");
  if (auto s = args.Str("schedule")) o.schedule = ParseSchedule(*s);
  if (args.Has("linear")) o.interpolation = Interpolation::kLinear;
  if (args.Has("no-repeat")) {
    o.repeat.assign(static_cast<std::size_t>(num_sources), true);
    for (std::int64_t k : args.IntList("no-repeat")) {
      if (k < 0 || k >= num_sources) {
        throw UsageError("--no-repeat: source " + std::to_string(k) + " is outside [0, " +
                         std::to_string(num_sources) + ")");
      }
      o.repeat[static_cast<std::size_t>(k)] = false;
    }
  }
  return o;
}

}  // namespace shardkit::cli
