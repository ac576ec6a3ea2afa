// shardkit: the command-line client of the shardkit library.
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"

namespace shardkit::cli {

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"shard", "which items each rank (and dataloader worker) gets", RunShard},
      {"audit", "prove exactly-once coverage of a plan and report its balance", RunAudit},
      {"mix", "a mixture of sources: realised vs target proportions, epochs, schedule", RunMix},
      {"pack", "pack variable-length items into fixed-capacity sequences", RunPack},
      {"eval-plan", "equal-step fixed-shape evaluation batches with masks", RunEvalPlan},
      {"loader-stats", "run the token loader over a data set: tokens/s, padding, balance",
       RunLoaderStats},
      {"layout", "which slice of a global array each device and process holds", RunLayout},
      {"demo", "a tour of shardkit on the embedded data set, with an HTML report", RunDemo},
  };
  return commands;
}

namespace {

// The library names parameters as the Python API does; users typed flags.
std::string ToFlag(const std::string& message) {
  static const std::map<std::string, std::string> flags = {
      {"num_items", "--items"},
      {"world_size", "--world"},
      {"rank", "--rank"},
      {"offset", "--offset"},
      {"limit", "--limit"},
      {"weights", "--weights"},
      {"split", "--split"},
      {"remainder", "--remainder"},
      {"num_workers", "--workers"},
      {"worker", "--worker"},
      {"seed", "--seed"},
      {"epoch", "--epoch"},
      {"capacity", "--capacity"},
      {"algorithm", "--algorithm"},
      {"lengths", "--lengths"},
      {"images", "--images"},
      {"max_images", "--max-images"},
      {"buffer", "--buffer"},
      {"oversize", "--oversize"},
      {"max_sequences", "--max-sequences"},
      {"cost", "--cost"},
      {"packs_per_rank", "--packs-per-rank"},
      {"batch_size", "--batch"},
      {"devices", "--devices"},
      {"min_device_batch", "--min-device-batch"},
      // loader-stats
      {"seq_len", "--seq-len"},
      {"num_threads", "--threads"},
      {"prefetch", "--prefetch"},
      {"token_dtype", "--token-dtype"},
      {"directory", "--dir"},
      {"tokens", "--tokens"},
      {"offsets", "--offsets"},
      {"axes", "--mesh"},
      {"owners", "--owners"},
      {"spec", "--spec"},
      {"shape", "--shape"},
      // mix
      {"sizes", "--sizes"},
      {"by", "--by"},
      {"block", "--block"},
      {"schedule", "--schedule"},
      {"interpolation", "--linear"},
      {"repeat", "--no-repeat"},
      {"start", "--start"},
      {"stop", "--stop"},
      {"windows", "--windows"},
  };
  size_t colon = message.find(':');
  if (colon == std::string::npos) return message;
  auto it = flags.find(message.substr(0, colon));
  return it == flags.end() ? message : it->second + message.substr(colon);
}

void PrintUsage(std::FILE* to) {
  std::fprintf(to, "usage: shardkit <command> [flags]   (shardkit <command> --help)\n\n");
  std::fprintf(to, "Distributes data across the ranks of a multi-host job, exactly.\n\n");
  for (const Command& c : Commands()) std::fprintf(to, "  %-13s %s\n", c.name, c.summary);
}

}  // namespace
}  // namespace shardkit::cli

int main(int argc, char** argv) {
  using namespace shardkit::cli;
  if (argc < 2) {
    PrintUsage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintUsage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("shardkit %s\n", SHARDKIT_VERSION);
    return 0;
  }
  for (const Command& command : Commands()) {
    if (name != command.name) continue;
    try {
      return command.run(Argv(argv + 2, argv + argc));
    } catch (const UsageError& e) {
      std::fprintf(stderr, "shardkit %s: %s\n", command.name, e.what());
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "shardkit %s: %s\n", command.name, ToFlag(e.what()).c_str());
    } catch (const std::out_of_range& e) {
      std::fprintf(stderr, "shardkit %s: %s\n", command.name, ToFlag(e.what()).c_str());
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "shardkit %s: out of memory\n", command.name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shardkit %s: %s\n", command.name, e.what());
    }
    return 2;
  }
  std::fprintf(stderr, "shardkit: unknown command '%s' (see shardkit --help)\n", name.c_str());
  return 2;
}
