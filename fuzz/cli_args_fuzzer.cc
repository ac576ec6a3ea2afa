// libFuzzer harness: the shardkit command line, parsed and run.
//
// Input: arguments separated by '\n' (the first one is the subcommand). Every
// subcommand except those that read files or write the demo report runs for
// real with stdout sent to /dev/null, through RunCommand, the function whose
// one-line error main() prints. A command line must succeed, or fail with
// status 2 and one line that names a flag ("--..."); anything else (a
// message without a flag or with a newline, a crash, a sanitizer report, a
// hang) is a finding. Listing flags that ask
// for output proportional to their values (--indices, --batches, --packs) are
// left out, so that the time per input stays bounded by the parsers.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!std::freopen("/dev/null", "w", stdout)) __builtin_trap();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 512) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  if (in.find('\0') != std::string_view::npos) return 0;  // argv strings hold no NUL
  std::vector<std::string> argv;
  size_t begin = 0;
  while (begin <= in.size()) {
    size_t end = in.find('\n', begin);
    if (end == std::string_view::npos) end = in.size();
    argv.emplace_back(in.substr(begin, end - begin));
    begin = end + 1;
  }
  if (argv.empty()) return 0;
  for (const std::string& a : argv) {
    // Files, stdin and outputs the caller asked to be large.
    if (a.find("--weights") == 0 || a.find("--lengths") == 0 || a.find("--images") == 0 ||
        a.find("--indices") == 0 || a.find("--batches") == 0 || a.find("--packs") == 0 ||
        a.find("--tokens") == 0 || a.find("--offsets") == 0 || a.find("--dir") == 0 ||
        a.find("--out") == 0) {
      return 0;
    }
  }
  const std::string name = argv[0];
  if (name == "demo" || name == "loader-stats" || name == "prepare" || name == "multimodal-stats" ||
      name == "image-table") {
    return 0;  // they read files (and write --svg / --output, or run Python)
  }
  // shard and audit check every entry against a bitmap up to 2^27 entries (a
  // closed form above): seconds per input under ASan, which the per-input
  // timeout of a short run would report as a hang. Those sizes are covered by
  // the tests and the sweep; here --items stays below 2^20 or above 2^28.
  if (name == "shard" || name == "audit") {
    for (size_t k = 1; k < argv.size(); ++k) {
      std::string value;
      if (argv[k] == "--items" && k + 1 < argv.size()) value = argv[k + 1];
      if (argv[k].rfind("--items=", 0) == 0) value = argv[k].substr(8);
      const unsigned long long items = std::strtoull(value.c_str(), nullptr, 10);
      if (items > (1ull << 20) && items <= (1ull << 28)) return 0;
    }
  }
  for (const shardkit::cli::Command& command : shardkit::cli::Commands()) {
    if (name != command.name) continue;
    const shardkit::cli::Outcome outcome =
        shardkit::cli::RunCommand(command, shardkit::cli::Argv(argv.begin() + 1, argv.end()));
    if (outcome.status == 0 || outcome.status == 1) {
      if (!outcome.error.empty()) __builtin_trap();
      continue;
    }
    // A rejection is one line that names a flag: never empty, never two
    // lines, never a bare library message such as "std::bad_cast".
    if (outcome.status != 2 || outcome.error.empty()) __builtin_trap();
    if (outcome.error.find('\n') != std::string::npos) __builtin_trap();
    if (outcome.error.find("--") == std::string::npos) {
      std::fprintf(stderr, "rejection without a flag: %s\n", outcome.error.c_str());
      __builtin_trap();
    }
  }
  return 0;
}
