// The flags of `shardkit loader-stats` (cli/cmd_loader.cc): declaring them,
// reading them into the core's LoaderOptions (the flag of a field is its
// name, shardkit/loader/option_fields.h), opening the run's source, and the
// --mixture flags (cli/loader_mixture.cc). Parsing only: the rules are the
// core's (TokenLoader, MixtureLoader).
#ifndef SHARDKIT_CLI_LOADER_FLAGS_H_
#define SHARDKIT_CLI_LOADER_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/loader_report.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/source_formats.h"
#include "shardkit/loader/token_source.h"

namespace shardkit::cli {

// Every flag of loader-stats (the defaults shown are the core's).
void DeclareLoaderFlags(Args& args);
// The LoaderOptions fields given as flags (renames and negations listed in
// loader_flags.cc; --rank, --cp and the Whale switches are the command's).
void ReadLoaderOptionFlags(const Args& args, LoaderOptions* o);
// The source of a run (--tokens/--offsets, --dir, --source), or nullptr with
// the mixture's sources opened into `mix` (--mixture). Throws UsageError for
// flags that do not go together.
std::shared_ptr<const TokenSource> OpenRunSource(const Args& args, OpenSourceOptions& open_options,
                                                 MixtureRun& mix);
// --mixture SRC0,SRC1,...: each a directory or TOKENS:OFFSETS, opened.
std::vector<std::shared_ptr<const TokenSource>> OpenMixtureSources(
    const std::string& spec, const OpenSourceOptions& options);
// --mixture: the core MixtureLoader of the --weights/--by/--block/--schedule/
// --linear/--schedule-unit/--no-repeat/--samples flags over mix.sources,
// resumed with --resume (o.epoch becomes the state's epoch); returns the
// epoch's window, the source the consumers read.
std::shared_ptr<const TokenSource> SetUpMixture(const Args& args, LoaderOptions& o,
                                                MixtureRun& mix);
// The text of a file; UsageError naming `flag` when it cannot be read.
std::string ReadText(const std::string& flag, const std::string& path);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_LOADER_FLAGS_H_
