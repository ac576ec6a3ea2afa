// A user's C++ program against the installed (or add_subdirectory'd) core:
// shard a data set, pack documents, and load packed batches from memory.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "shardkit/loader/loader.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/packing/packing.h"
#include "shardkit/sharding/shard_plan.h"

int main() {
  using shardkit::Index;
  shardkit::ShardOptions shard_options;
  shard_options.remainder = shardkit::Remainder::kPad;
  shardkit::ShardPlan plan(10, 4, shard_options);
  if (!plan.Audit().exactly_once || plan.Count(3) != 3) return 1;

  std::vector<Index> lengths = {5, 3, 8, 2, 7, 1};
  shardkit::PackOptions pack_options;
  pack_options.capacity = 8;
  shardkit::Packing packing = shardkit::PackItems(lengths, pack_options);
  if (packing.num_packs() != packing.lower_bound) return 2;

  std::vector<std::int32_t> tokens(26);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i);
  std::vector<std::int64_t> offsets = {0, 5, 8, 16, 18, 25, 26};
  auto source = shardkit::TokenSource::FromMemory(tokens.data(), shardkit::TokenDType::kInt32, 26,
                                                  offsets.data(), 7);
  shardkit::LoaderOptions options;
  options.seq_len = 8;
  options.batch_size = 2;
  shardkit::TokenLoader loader(source, options);
  Index documents = 0;
  while (auto batch = loader.Next()) documents += static_cast<Index>(batch->documents.size());
  if (documents != 6) return 3;
  std::puts("consumer ok");
  return 0;
}
