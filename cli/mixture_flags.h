// The mixture's order flags (--by, --block, --schedule, --linear,
// --schedule-unit, --no-repeat) of `shardkit mix` and `shardkit loader-stats
// --mixture`: declared once and read once into the core's MixtureOptions
// (shardkit/sharding/mixture.h). Parsing only: the mixture's rules are the
// core's.
#ifndef SHARDKIT_CLI_MIXTURE_FLAGS_H_
#define SHARDKIT_CLI_MIXTURE_FLAGS_H_

#include <string>

#include "cli/args.h"
#include "shardkit/base/index.h"
#include "shardkit/sharding/mixture.h"

namespace shardkit::cli {

// Declares the order flags, each help text after `prefix` (loader-stats:
// "with --mixture: "); `by` is the --by default the command reads.
void AddMixtureFlags(Args& args, const std::string& prefix, MixBy by);

// The order flags into MixtureOptions for `num_sources` sources (by as
// declared; seed and tokens are the caller's). Throws UsageError naming the
// flag for a --no-repeat source outside [0, num_sources) and a name --by or
// --schedule-unit does not take.
[[nodiscard]] MixtureOptions ReadMixtureFlags(const Args& args, Index num_sources, MixBy by);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_MIXTURE_FLAGS_H_
