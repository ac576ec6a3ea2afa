// EvalPlan: full-dataset evaluation in equal, fixed-shape steps on every rank.
//
// SPMD evaluation needs every rank to run the same number of steps with the
// same batch shape, yet every item must be evaluated exactly once. The items
// are split over W ranks by a ShardPlan (remainder uneven: rank r holds c_r
// real items, max c_r = ceil(N / W)); every rank then runs
//     num_steps = ceil(ceil(N / W) / B)
// steps of B slots, the fewest that cover the fullest rank. Slot j of step s
// on rank r is entry e = s * B + j of the rank's list: a real item when
// e < c_r, else a padded slot. A padded slot holds a valid item index (the
// rank's entry e mod c_r, or the window's first item for a rank without
// items), so loading it never fails, and its mask is false. The padding is
// num_steps * W * B - N slots, all marked.
//
// Devices: with D local devices the host batch is viewed as [D, B / D]
// (device d holds slots [d * B/D, (d + 1) * B/D)); B must be divisible by D.
// min_device_batch raises the per-device batch to at least that many slots,
// as Flax's pad_shard_unpad pads a short host batch; the effective batch size
// is then D * max(B / D, min_device_batch).
//
// unshard: rank r's outputs, one row per slot of every step in order
// (num_steps * batch_size rows), concatenated over ranks 0..W-1, map back to
// one row per item in item order: SourceRows()[i] is the row holding window
// item i. Padded rows are dropped.
//
// Data roles (layout/data_roles.h): under tensor, pipeline, context or expert
// parallelism the plan's ranks are the data-parallel ranks. EvalPlan(N, roles,
// B) is EvalPlan(N, roles.dp_size(), B) that remembers the roles: the ranks of
// one replica group run the same steps (Batch(roles.dp_rank(), s)) and hold
// the same outputs. When every rank's outputs are gathered, only the least rank
// of each replica group counts (ReplicaSources below; in sums, only the ranks
// with roles.reports()), so no item is counted twice.
// Window: offset and limit choose items [offset, min(N, offset + limit)) of
// the N items, as ShardPlan's window; everything above (counts, steps,
// padding, unshard) is about the M window items, and indices are item
// numbers (offset + position). Two readings of the arguments:
//   strict  (the default, ShardPlan's): offset > N is an error naming offset,
//           limit 0 means no items.
//   harness (lm-eval / lmms-eval, for their --offset / --limit passed
//           through): limit 0 (or none) means every item from offset, and an
//           offset beyond N an empty window (their islice yields nothing).
// Negative values are errors in both.
//
// The fingerprint hashes the parameters and the library version; ranks
// compare it with one collective before the first step (see dist.h and the
// engine helpers) so that ranks with different plans fail instead of hanging.
//
// Thread-safety: immutable after construction; share freely.
#ifndef SHARDKIT_EVAL_EVAL_PLAN_H_
#define SHARDKIT_EVAL_EVAL_PLAN_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/layout/data_roles.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit {

// The version string folded into every fingerprint: a plan made by another
// release of shardkit may assign items differently.
inline constexpr char kEvalPlanVersion[] = "shardkit-eval-1";

// How offset and limit read (see the window above): "strict" | "harness";
// Parse throws invalid_argument naming `window`.
enum class WindowRule { kStrict, kHarness };
[[nodiscard]] WindowRule ParseWindowRule(std::string_view name);
[[nodiscard]] std::string_view WindowRuleName(WindowRule rule);

// The items' window, order and split (ItemSplitOptions, shard_plan.h; split
// round_robin as lmms-eval, or contiguous) plus what only an evaluation has.
struct EvalOptions : ItemSplitOptions {
  Index devices = 1;                      // local devices per rank; divides batch_size
  std::optional<Index> min_device_batch;  // unset: no minimum (Flax's None)
  WindowRule window = WindowRule::kStrict;
};

class EvalPlan {
 public:
  // Throws invalid_argument naming the parameter: num_items < 0,
  // world_size < 1, batch_size < 1, devices < 1, devices not dividing
  // batch_size, min_device_batch < 0, split balanced, offset < 0 (or > N
  // under the strict window), limit < 0, or a step count whose slots
  // (num_steps * world_size * batch_size) overflow an Index.
  EvalPlan(Index num_items, Index world_size, Index batch_size, EvalOptions options = {});
  // The plan over roles.dp_size() data-parallel ranks, remembering `roles`
  // (they do not enter the fingerprint: replicas and data-parallel ranks hold
  // equal plans). Throws as above.
  EvalPlan(Index num_items, const DataRoles& roles, Index batch_size, EvalOptions options = {});

  [[nodiscard]] Index num_items() const { return plan_.num_items(); }
  // The items evaluated: [window_begin, window_begin + window_size).
  [[nodiscard]] Index window_begin() const { return plan_.window_begin(); }
  [[nodiscard]] Index window_size() const { return plan_.window_size(); }
  [[nodiscard]] Index world_size() const { return plan_.world_size(); }
  // The effective host batch: devices * device_batch.
  [[nodiscard]] Index batch_size() const { return batch_; }
  [[nodiscard]] Index devices() const { return options_.devices; }
  [[nodiscard]] Index device_batch() const { return batch_ / options_.devices; }
  [[nodiscard]] const EvalOptions& options() const { return options_; }
  [[nodiscard]] Index num_steps() const { return steps_; }
  // The roles the plan was built from, if any.
  [[nodiscard]] const std::optional<DataRoles>& roles() const { return roles_; }

  // Real (unpadded) slots of rank over all steps. Throws out_of_range.
  [[nodiscard]] Index Real(Index rank) const;
  // Padded slots of rank: num_steps * batch_size - Real(rank).
  [[nodiscard]] Index Padding(Index rank) const;
  // Padded slots over all ranks: num_steps * world_size * batch_size - M.
  [[nodiscard]] Index TotalPadding() const;
  // TotalPadding / (num_steps * world_size * batch_size); 0 for no slots.
  [[nodiscard]] double PaddingFraction() const;

  // Fills indices[0, batch_size) and mask[0, batch_size) with the slots of
  // rank's step. Throws out_of_range for rank outside [0, world_size) or step
  // outside [0, num_steps).
  void Batch(Index rank, Index step, Index* indices, bool* mask) const;

  // Where item `item` is evaluated. Throws out_of_range outside the window.
  struct Slot {
    Index rank, step, slot;
  };
  [[nodiscard]] Slot Locate(Index item) const;

  // Row of the rank-concatenated outputs that holds window item i (item
  // window_begin + i), for every window item:
  // row = rank * num_steps * batch_size + step * batch_size + slot.
  [[nodiscard]] std::vector<Index> SourceRows() const;
  // Throws invalid_argument naming outputs_by_rank unless there is one entry
  // per rank and each equals num_steps * batch_size.
  void CheckOutputRows(const std::vector<Index>& rows_by_rank) const;

  // Gathers per-item values back into item order, padded slots dropped.
  // REQUIRES nothing; throws as CheckOutputRows.
  template <typename T>
  [[nodiscard]] std::vector<T> Unshard(const std::vector<std::vector<T>>& outputs_by_rank) const {
    std::vector<Index> rows;
    for (const auto& o : outputs_by_rank) rows.push_back(static_cast<Index>(o.size()));
    CheckOutputRows(rows);
    std::vector<T> out;
    out.reserve(static_cast<size_t>(window_size()));
    const Index per_rank = steps_ * batch_;
    for (Index row : SourceRows()) out.push_back(outputs_by_rank[row / per_rank][row % per_rank]);
    return out;
  }

  // A hash of (version, num_items, world_size, batch_size, options, and the
  // window when it is not every item).
  [[nodiscard]] std::uint64_t Fingerprint() const;
  // The parameters in words, for error messages.
  [[nodiscard]] std::string Describe() const;

 private:
  void CheckRank(Index rank) const;

  ShardPlan plan_;
  EvalOptions options_;
  Index batch_ = 0;
  Index steps_ = 0;
  std::optional<DataRoles> roles_;
};

// Which rank's outputs stand for each data-parallel rank when every rank of a
// job gathers its outputs: entry g of dp_rank_by_rank is the dp_rank of rank g
// (gathered from every rank). Returns, for each d in [0, dp_size), the least
// rank g with dp_rank d: the replica group's reporter (DataRoles::reporter()).
// The other members of the group hold the same outputs and are skipped, so no
// item counts twice. Throws invalid_argument naming `dp_ranks` when a value
// lies outside [0, dp_size) or some data-parallel rank has no rank (the ranks
// built their roles from different meshes).
[[nodiscard]] std::vector<Index> ReplicaSources(std::span<const Index> dp_rank_by_rank,
                                                Index dp_size);

// Steps for dynamic counts: when a filter decides at load time how many items
// each rank keeps, the ranks agree on ceil(max(counts) / batch_size) after
// one collective (an all-reduce max of the local count). Throws
// invalid_argument naming batch_size (< 1) or counts (a negative count).
[[nodiscard]] Index StepsForCount(Index max_count, Index batch_size);

// Flax's pad_shard_unpad rule for one host batch of n rows over `devices`:
// per-device batch max(ceil(n / devices), min_device_batch). Throws
// invalid_argument naming n, devices or min_device_batch.
struct DevicePadding {
  Index device_batch = 0;
  Index padding = 0;  // devices * device_batch - n
};
[[nodiscard]] DevicePadding PadForDevices(Index n, Index devices, Index min_device_batch = 0);

// Compares fingerprints gathered from every rank (entry r from rank r).
// Returns an empty string when all agree, else a message naming the ranks
// whose fingerprint differs from rank 0's.
[[nodiscard]] std::string CompareFingerprints(const std::vector<std::uint64_t>& by_rank);

// Compares the plans of every rank by their Describe() text (entry r from
// rank r, "Kind(name=value, name=value, ...)", as EvalPlan and TrainPlan
// write it). Returns "" when all texts agree, else one line that names the
// plan kind and, for the first rank that differs from rank 0, each parameter
// whose value differs:
//   "TrainPlan mismatch: rank 1 has batch_size=3 where rank 0 has
//    batch_size=2 (ranks that differ from rank 0: 1); every rank must build
//    the TrainPlan with the same parameters and shardkit version"
// (a parameter only one of them has reads "no name"; another kind: "rank 1
// has a TrainPlan where rank 0 has an EvalPlan").
[[nodiscard]] std::string ComparePlanDescriptions(const std::vector<std::string>& by_rank);

}  // namespace shardkit

#endif  // SHARDKIT_EVAL_EVAL_PLAN_H_
