// shardkit: the command-line client of the shardkit library.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"

namespace {

// A command's output that did not reach its destination (a full disk, a
// closed pipe) is a failure, not a success: one line on stderr, status 2.
int CheckStdout(const char* command, int status) {
  errno = 0;
  std::cout.flush();
  bool failed = !std::cout.good();
  int err = errno;
  if (std::fflush(stdout) != 0) {
    failed = true;
    if (!err) err = errno;
  }
  if (!failed && !std::ferror(stdout)) return status;
  std::fprintf(stderr, "shardkit %s: stdout: write error%s%s\n", command, err ? ": " : "",
               err ? std::strerror(err) : "");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardkit::cli;
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported
  // naming the flag, instead of the kernel's SIGXFSZ killing the process (as
  // Python does at startup).
  ::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintUsage(stdout);
    return CheckStdout("--help", 0);
  }
  if (name == "--version") {
    std::printf("shardkit %s\n", SHARDKIT_VERSION);
    return CheckStdout("--version", 0);
  }
  for (const Command& command : Commands()) {
    if (name != command.name) continue;
    const Outcome outcome = RunCommand(command, Argv(argv + 2, argv + argc));
    if (!outcome.error.empty()) {
      std::cout.flush();
      std::fprintf(stderr, "shardkit %s: %s\n", command.name, outcome.error.c_str());
    }
    return CheckStdout(command.name, outcome.status);
  }
  std::fprintf(stderr, "shardkit: unknown command '%s' (see shardkit --help)\n", name.c_str());
  return 2;
}
