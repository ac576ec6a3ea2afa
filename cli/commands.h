// The shardkit subcommands. Each lives in its own cmd_<name>.cc, parses its
// flags with Args, calls the library and prints; main.cc dispatches and turns
// every error into one line on stderr and an exit status:
//   0 success, 1 a check failed (audit), 2 bad input.
#ifndef SHARDKIT_CLI_COMMANDS_H_
#define SHARDKIT_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace shardkit::cli {

using Argv = std::vector<std::string>;

int RunShard(const Argv& argv);
int RunAudit(const Argv& argv);
int RunPack(const Argv& argv);
int RunEvalPlan(const Argv& argv);
int RunDemo(const Argv& argv);
int RunLoaderStats(const Argv& argv);
int RunLayout(const Argv& argv);
int RunMix(const Argv& argv);

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Argv& argv);
};

// Every subcommand, in the order `shardkit --help` lists them.
const std::vector<Command>& Commands();

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_COMMANDS_H_
