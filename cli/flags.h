// Flag groups that several commands declare alike (header-only): each group
// is declared once here with its help text, and read into any options struct
// with the matching fields.
#ifndef SHARDKIT_CLI_FLAGS_H_
#define SHARDKIT_CLI_FLAGS_H_

#include <string>

#include "cli/args.h"

namespace shardkit::cli {

// Declares --shuffle (described by `help`), --seed S and --epoch E (each 0
// by default), in that order.
inline void AddShuffleFlags(Args& args, const std::string& help) {
  args.Flag("shuffle", "", help)
      .Flag("seed", "S", "shuffle seed (default 0)")
      .Flag("epoch", "E", "shuffle epoch (default 0)");
}

// The flags AddShuffleFlags declared, into any options with `shuffle`, `seed`
// and `epoch` fields.
template <typename Options>
void ReadShuffleFlags(const Args& args, Options& options) {
  options.shuffle = args.Has("shuffle");
  options.seed = args.Uint("seed", 0);
  options.epoch = args.Uint("epoch", 0);
}

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_FLAGS_H_
