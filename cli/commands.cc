// The subcommand table and the one place where an error becomes the single
// stderr line of the shardkit command (main.cc prints it; the fuzz harness
// checks it).
#include "cli/commands.h"

#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <stdexcept>
#include <string>

#include "cli/args.h"

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
      {"multimodal-stats",
       "image-text samples: steps, padding, vision work per rank before/after balancing",
       RunMultimodalStats},
      {"image-table",
       "the sample table of image-text data (tar shards, datasets folder) "
       "(python -m shardkit image-table)",
       RunImageTable},
      {"prepare", "raw text to Megatron .bin/.idx or .npy token files (python -m shardkit prepare)",
       RunPrepare},
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
      {"compat", "--compat"},
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
      {"mode", "--mode"},
      {"cp_size", "--cp"},
      {"cp_granularity", "--cp-granularity"},
      {"token_dtype", "--token-dtype"},
      {"directory", "--dir"},
      {"tokens", "--tokens"},
      {"offsets", "--offsets"},
      {"path", "--source"},
      {"format", "--format"},
      {"state", "--resume"},  // a state read with --resume (written ones never fail so)
      {"axes", "--mesh"},
      {"data_axes", "--data-axes"},
      {"broadcast_axes", "--broadcast-axes"},
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
      // loader-stats --mixture
      {"samples", "--samples"},
      // multimodal-stats
      {"table", "--table"},
      {"tar", "--tar"},
      {"text", "--text"},
      {"vision_rule", "--vision-rule"},
      {"rows_per_rank", "--batch"},
      {"max_vision_tokens", "--max-vision-tokens"},
      {"max_images_per_sample", "--max-images-per-sample"},
      {"vision_cost", "--vision-cost"},
      {"svg", "--svg"},
  };
  size_t colon = message.find(':');
  if (colon == std::string::npos) return message;
  auto it = flags.find(message.substr(0, colon));
  return it == flags.end() ? message : it->second + message.substr(colon);
}

// One line: a value echoed into a message may hold a newline or a control
// character; they print escaped.
std::string OneLine(const std::string& message) {
  std::string out;
  for (unsigned char c : message) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

Outcome RunCommand(const Command& command, const Argv& argv) {
  try {
    return {command.run(argv), ""};
  } catch (const UsageError& e) {
    return {2, OneLine(e.what())};
  } catch (const std::invalid_argument& e) {
    return {2, OneLine(ToFlag(e.what()))};
  } catch (const std::out_of_range& e) {
    return {2, OneLine(ToFlag(e.what()))};
  } catch (const std::bad_alloc&) {
    // Sizes are bounded up front; this is the last resort. Name the flags
    // that set sizes so the user knows what to reduce.
    std::string flags;
    for (const std::string& a : argv) {
      if (a.rfind("--", 0) == 0) flags += (flags.empty() ? "" : " ") + a.substr(0, a.find('='));
    }
    return {2, "out of memory for the sizes given (" + (flags.empty() ? "no flags" : flags) + ")"};
  } catch (const std::exception& e) {
    return {2, OneLine(e.what())};
  }
}

void PrintUsage(std::FILE* to) {
  std::fprintf(to, "usage: shardkit <command> [flags]   (shardkit <command> --help)\n\n");
  std::fprintf(to, "Distributes data across the ranks of a multi-host job, exactly.\n\n");
  for (const Command& c : Commands()) std::fprintf(to, "  %-13s %s\n", c.name, c.summary);
}

}  // namespace shardkit::cli
