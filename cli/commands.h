// The shardkit subcommands. Each lives in its own cmd_<name>.cc, parses its
// flags with Args, calls the library and prints; main.cc dispatches and turns
// every error into one line on stderr and an exit status:
//   0 success, 1 a check failed (audit), 2 bad input.
#ifndef SHARDKIT_CLI_COMMANDS_H_
#define SHARDKIT_CLI_COMMANDS_H_

#include <cstdio>
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
int RunPrepare(const Argv& argv);
int RunMultimodalStats(const Argv& argv);
int RunImageTable(const Argv& argv);

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Argv& argv);
};

// Every subcommand, in the order `shardkit --help` lists them.
const std::vector<Command>& Commands();

// What a command ended with: its exit status and, when it failed with an
// error, the one line (no newline, control characters escaped) that names
// the flag and the value; main() prints it as "shardkit <command>: <error>".
struct Outcome {
  int status = 0;
  std::string error;
};
[[nodiscard]] Outcome RunCommand(const Command& command, const Argv& argv);

// The list of subcommands (shardkit --help).
void PrintUsage(std::FILE* to);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_COMMANDS_H_
