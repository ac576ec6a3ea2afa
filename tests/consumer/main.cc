// A C++ program that shards a data set, packs documents and loads packed
// batches with a checkpoint: after two batches the loader's state is saved as
// JSON, and a new loader built from that JSON delivers exactly the batches
// the first one would have delivered next. docs/cpp.md shows this file; the
// test tests/consumer builds it against the installed package
// (find_package) and configures it through add_subdirectory.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/packing/packing.h"
#include "shardkit/sharding/shard_plan.h"

using shardkit::Index;

int main() {
  // 1. Sharding: 10 items over 4 ranks, padded like torch's DistributedSampler.
  shardkit::ShardOptions shard_options;
  shard_options.remainder = shardkit::Remainder::kPad;
  shardkit::ShardPlan plan(10, 4, shard_options);
  shardkit::Shard shard = plan.GetShard(3);  // rank 3: O(1) memory, shard[k] is O(1)
  if (!plan.Audit().exactly_once || shard.size() != 3) return 1;

  // 2. Packing: documents of these lengths into rows of 8 tokens.
  std::vector<Index> lengths = {5, 3, 8, 2, 7, 1};
  shardkit::PackOptions pack_options;
  pack_options.capacity = 8;
  shardkit::Packing packing = shardkit::PackItems(lengths, pack_options);
  if (packing.num_packs() != packing.lower_bound) return 2;

  // 3. Loading: 40 documents of tokens in memory (or TokenSource::Open on
  //    .npy files), packed into batches of 2 rows x 8 tokens.
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> offsets = {0};
  for (Index d = 0; d < 40; ++d) {
    for (Index t = 0; t < 1 + (d * 7) % 11; ++t) tokens.push_back(static_cast<std::int32_t>(t));
    offsets.push_back(static_cast<std::int64_t>(tokens.size()));
  }
  auto source = shardkit::TokenSource::FromMemory(tokens.data(), shardkit::TokenDType::kInt32,
                                                  static_cast<Index>(tokens.size()), offsets.data(),
                                                  static_cast<Index>(offsets.size()));
  shardkit::LoaderOptions options;
  options.seq_len = 8;
  options.batch_size = 2;
  options.seed = 1234;

  // The uninterrupted run, for comparison.
  std::vector<std::vector<std::int64_t>> all;
  {
    shardkit::TokenLoader loader(source, options);
    while (auto batch = loader.Next()) all.push_back(batch->documents);
  }

  // Two batches, then a checkpoint: the state as JSON in a file.
  {
    shardkit::TokenLoader loader(source, options);
    for (int i = 0; i < 2; ++i) (void)loader.Next();
    std::ofstream("loader_state.json") << shardkit::LoaderStateToJson(loader.State());
  }

  // A new process: read the checkpoint and continue.
  std::stringstream text;
  text << std::ifstream("loader_state.json").rdbuf();
  shardkit::LoaderState state = shardkit::LoaderStateFromJson(text.str());  // checked
  shardkit::TokenLoader resumed(source, options, state);  // refuses another data set
  std::vector<std::vector<std::int64_t>> rest;
  while (auto batch = resumed.Next()) rest.push_back(batch->documents);
  if (rest != std::vector<std::vector<std::int64_t>>(all.begin() + 2, all.end())) return 3;

  std::printf("consumer ok: %zu batches, resumed after 2 from %zu bytes of JSON\n", all.size(),
              text.str().size());
  return 0;
}
