// LoadingPlan: which rows of each step's global batch every host must read.
//
// A global batch of B rows is an array whose dimension 0 is split by a
// NamedSharding. Host (process) p must load the rows its devices hold, in
// the order make_array_from_process_local_data expects them: the sorted
// distinct dimension-0 slices of its devices, concatenated. Rows(p) gives
// them as merged half-open ranges; local row j of p's data is the j-th row
// of those ranges. HostsOf(row) is the inverse: the processes holding a
// global row (several when dimension 0 is replicated across processes).
//
// Composed with a ShardPlan: the global batch of step t is entries
// [t * B, (t + 1) * B) of one Shard (typically ShardPlan(N, 1, shuffle).shard(0),
// the same on every host); host p reads items order[t * B + r] for its rows r
// and nothing else.
//
// Thread-safety: immutable; share freely.
#ifndef SHARDKIT_LAYOUT_LOADING_PLAN_H_
#define SHARDKIT_LAYOUT_LOADING_PLAN_H_

#include <span>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/layout/named_sharding.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit {

class LoadingPlan {
 public:
  // Throws invalid_argument naming `batch_size` when it is negative or not
  // divisible by the partitions of dimension 0 (naming the axes). O(mesh).
  LoadingPlan(NamedSharding sharding, Index batch_size);

  [[nodiscard]] Index batch_size() const { return batch_size_; }
  // Rows each device holds (B / partitions of dimension 0).
  [[nodiscard]] Index shard_rows() const { return shard_rows_; }

  // The rows `process` loads, merged and ascending. O(its devices).
  // Throws out_of_range naming `process` when it owns no device.
  [[nodiscard]] std::vector<Slice> Rows(Index process) const;
  // Total rows of Rows(process).
  [[nodiscard]] Index NumRows(Index process) const;
  // The processes holding global row `row`, ascending. O(1).
  // Throws out_of_range naming `row` outside [0, batch_size).
  [[nodiscard]] std::span<const Index> HostsOf(Index row) const;

  // Whole global batches of `order`: order.size() / batch_size (0 when B = 0).
  [[nodiscard]] Index NumSteps(const Shard& order) const;
  // items[j] = order[step * B + r_j] for the j-th row r_j of Rows(process),
  // padding[j] = whether that entry is padding. Buffers of NumRows(process).
  // Throws out_of_range naming `step` outside [0, NumSteps(order)) or
  // `process`.
  void Items(const Shard& order, Index step, Index process, Index* items, bool* padding) const;

 private:
  NamedSharding sharding_;
  Index batch_size_ = 0;
  Index shard_rows_ = 0;
  std::vector<Index> tile_offsets_;  // CSR: tile of dimension 0 -> hosts
  std::vector<Index> tile_hosts_;
};

}  // namespace shardkit

#endif  // SHARDKIT_LAYOUT_LOADING_PLAN_H_
