// ShardPlan: which rank, and which dataloader worker of that rank, gets which
// item of a data set, as a pure function of the plan's parameters.
//
// The pipeline, each stage a function of the previous one:
//   window    items [offset, min(N, offset + limit)); M = its size. Everything
//             after the window works on window positions p in [0, M).
//   order     sequential (p -> p) or shuffle: one keyed Permutation of [0, M)
//             per (seed, epoch), the same on every rank.
//   split     round_robin: rank r takes positions r, r + W, r + 2W, ...
//             contiguous:  rank r takes one block; the first M % W ranks get
//                          one more item (tfds even_splits, HF contiguous).
//             balanced:    items go to ranks by weight so that the heaviest
//                          rank's load is small (LPT; see Balance below).
//   remainder uneven:    lists differ in length by at most one (or by
//                          weight for balanced).
//             drop:      every rank gets floor(M / W); the tail of the order
//                          goes to nobody and is counted in Dropped().
//             pad:       every rank gets ceil(M / W); padded entries repeat
//                          the head of the order (torch DistributedSampler) and
//                          are the trailing Padding(rank) entries of the list.
//             replicate: every rank gets the whole window, in its own order,
//                          always shuffled per rank (seed, rank, epoch; Whale):
//                          the plan's shuffle option is set to true.
//   workers   a rank's list is dealt to K workers interleaved: worker k takes
//             entries k, k + K, ...; reading workers in turn gives the rank's
//             order back.
//
// Everything but `balanced` is O(1) memory and O(1) per index; `balanced`
// stores one position per item (its weights are O(M) anyway).
//
// Thread-safety: a ShardPlan and its Shards are immutable; share freely.
#ifndef SHARDKIT_SHARDING_SHARD_PLAN_H_
#define SHARDKIT_SHARDING_SHARD_PLAN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

enum class Split { kRoundRobin, kContiguous, kBalanced };
enum class Remainder { kUneven, kDrop, kPad, kReplicate };

// Names as written in the CLI and Python ("round_robin", "pad", ...). Parse
// throws invalid_argument naming `split` / `remainder` and the value.
[[nodiscard]] Split ParseSplit(std::string_view name);
[[nodiscard]] Remainder ParseRemainder(std::string_view name);
[[nodiscard]] std::string_view SplitName(Split split);
[[nodiscard]] std::string_view RemainderName(Remainder remainder);
// Every name Parse accepts, in the order of the name table (the CLI's help
// lists these).
[[nodiscard]] std::vector<std::string_view> SplitNames();
[[nodiscard]] std::vector<std::string_view> RemainderNames();

// The window, order and split of the items over ranks: the options a
// ShardPlan and an EvalPlan (shardkit/eval/eval_plan.h) share, each default
// written once here; both contain it, and an EvalPlan hands it to its item
// plan whole.
struct ItemSplitOptions {
  Split split = Split::kRoundRobin;
  Index offset = 0;
  std::optional<Index> limit;  // an upper bound on the window size
  bool shuffle = false;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
};

struct ShardOptions : ItemSplitOptions {
  Remainder remainder = Remainder::kUneven;
  // One non-negative finite weight per item of [0, num_items) (bytes, tokens,
  // measured cost). Required by `balanced`; otherwise only reported as loads.
  std::vector<double> weights;
  // balanced: keep every rank's item count within one of the others.
  bool equal_counts = false;
};

// Where an item went: the rank and the entry of that rank's list.
struct Location {
  Index rank = -1;  // -1: the item was dropped
  Index entry = -1;
};

// Ranks that carry the same load: `ranks` ranks with `load` each.
struct LoadGroup {
  double load = 0;
  Index ranks = 0;
};

// Per-rank lists (Counts(), Loads(), the audit's per-rank loads) are built for
// at most this many ranks; beyond it they are refused naming world_size (a
// tiny plan over 2^62 ranks asked for a list of 2^62 entries). LoadGroups()
// and Load(rank) describe any world size.
inline constexpr Index kMaxRankList = Index{1} << 20;

struct AuditReport {
  // True when coverage is exactly what the policy states: every window item
  // in exactly one real entry (uneven, pad), or exactly once except the
  // counted dropped tail (drop), or exactly once on every rank (replicate).
  bool exactly_once = false;
  std::string method;  // "enumerated" (every entry listed) or "arithmetic"
  std::string detail;  // what was checked, or what failed
  Index window_size = 0;
  Index delivered = 0;  // real (unpadded) entries over all ranks
  Index padding = 0;    // padded entries over all ranks
  Index dropped = 0;
  Index duplicates = 0;  // real entries naming an item seen before
  Index missing = 0;     // items no rank received (besides `dropped`)
  Index min_count = 0;   // list lengths, padding included
  Index max_count = 0;
  Index max_imbalance = 0;  // max_count - min_count
  // With weights: the distinct loads and how many ranks carry each
  // (ascending by load; never empty for a weighted plan, empty without
  // weights), each rank's load (sum of its real items' weights; listed only
  // for world_size <= kMaxRankList, else empty), the lower bound
  // max(max weight, total / W) and max_load / lower_bound - 1.
  std::vector<LoadGroup> load_groups;
  std::vector<double> loads;
  double max_load = 0, lower_bound = 0, load_imbalance = 0;
};

class Shard;

class ShardPlan {
 public:
  // Validates everything here and nowhere else. Throws invalid_argument
  // naming the parameter: num_items < 0, world_size < 1, offset outside
  // [0, num_items], limit < 0, weights of the wrong length / negative / NaN /
  // infinite, balanced without weights, balanced with replicate.
  ShardPlan(Index num_items, Index world_size, ShardOptions options = {});

  [[nodiscard]] Index num_items() const { return num_items_; }
  [[nodiscard]] Index world_size() const { return world_; }
  [[nodiscard]] const ShardOptions& options() const { return *options_; }
  [[nodiscard]] Index window_begin() const { return options_->offset; }
  [[nodiscard]] Index window_end() const { return options_->offset + window_; }
  [[nodiscard]] Index window_size() const { return window_; }

  // One line for people, the same in the CLI and Python's repr:
  // "10 items, window [0, 10) over 4 ranks; split round_robin, remainder
  // uneven, order sequential" (or "order shuffled (seed S, epoch E)"; with
  // weights, "; weighted").
  [[nodiscard]] std::string Describe() const;

  // Length of rank's list, padding included. Throws out_of_range for a rank
  // outside [0, world_size).
  [[nodiscard]] Index Count(Index rank) const;
  // Trailing padded entries of rank's list.
  [[nodiscard]] Index Padding(Index rank) const;
  // Throws invalid_argument naming world_size above kMaxRankList ranks.
  [[nodiscard]] std::vector<Index> Counts() const;
  // Window items delivered to no rank (remainder drop).
  [[nodiscard]] Index Dropped() const { return dropped_; }

  // The global item at entry `entry` of rank's list. Throws out_of_range.
  [[nodiscard]] Index ItemAt(Index rank, Index entry) const;
  // Where global item `item` went (the real entry, never a padded one);
  // rank -1 when it was dropped. Throws out_of_range for an item outside the
  // window, invalid_argument for replicate (every rank has every item).
  [[nodiscard]] Location Locate(Index item) const;

  // Rank's list, or the part of it that dataloader worker `worker` of
  // `num_workers` reads. Throws out_of_range / invalid_argument.
  [[nodiscard]] Shard GetShard(Index rank, Index worker = 0, Index num_workers = 1) const;

  // Rank's load: the sum of its real items' weights in the rank's order (the
  // window's total in window order for replicate, where every rank holds the
  // whole window); 0 without weights. Throws out_of_range for a bad rank.
  [[nodiscard]] double Load(Index rank) const;
  // Each rank's load; empty without weights. Throws invalid_argument naming
  // world_size above kMaxRankList ranks (see LoadGroups).
  [[nodiscard]] std::vector<double> Loads() const;
  // The distinct loads, ascending, and how many ranks carry each; empty
  // without weights. Work and size are bounded by the window, not by W: only
  // ranks [0, min(W, M)) can hold items (replicate: one group of W ranks).
  [[nodiscard]] std::vector<LoadGroup> LoadGroups() const;

  // Proves coverage. Lists every entry when the plan has at most
  // `enumerate_limit` entries (a bitmap of the window), otherwise checks the
  // counts by arithmetic and round-trips a sample of entries through Locate.
  [[nodiscard]] AuditReport Audit(Index enumerate_limit = Index{1} << 27) const;

 private:
  friend class Shard;
  struct Balanced;  // per-rank position lists of the balanced split

  // Real entries of rank (Count - Padding).
  Index RealCount(Index rank) const;
  // Window position of real entry `entry` of rank (order not yet applied),
  // for every split but balanced: first_[rank] + entry * step.
  Index ProgressionStart(Index rank) const;
  Index ProgressionStep() const;
  void CheckRank(Index rank) const;
  void CheckListable(const char* what) const;
  // Loads of ranks [0, min(W, M)); every later rank's is 0 (non-replicate).
  std::vector<double> PrefixLoads() const;
  double WindowTotal() const;
  Permutation RankOrder(Index rank) const;

  Index num_items_;
  Index world_;
  Index window_ = 0;
  Index quotient_ = 0;   // M / W
  Index remainder_ = 0;  // M % W
  Index dropped_ = 0;
  std::shared_ptr<const ShardOptions> options_;
  std::shared_ptr<const Balanced> balanced_;
  Permutation order_;  // over [0, M), keyed by (seed, epoch)
};

// One rank's (or one worker's) list: O(1) random access, chunked export.
// Entries [size() - padding(), size()) are padding.
class Shard {
 public:
  [[nodiscard]] Index size() const { return size_; }
  [[nodiscard]] Index padding() const { return padding_; }
  [[nodiscard]] Index rank() const { return rank_; }
  [[nodiscard]] Index worker() const { return worker_; }
  [[nodiscard]] Index num_workers() const { return num_workers_; }
  [[nodiscard]] bool IsPadding(Index k) const { return k >= size_ - padding_; }

  // The global item of entry k. At() throws out_of_range naming k; operator[]
  // REQUIRES 0 <= k < size() and does not check.
  [[nodiscard]] Index At(Index k) const;
  [[nodiscard]] Index operator[](Index k) const;

  // out[i] = (*this)[begin + i] for begin <= begin + i < end, in blocks.
  // Throws out_of_range unless 0 <= begin <= end <= size().
  void Fill(Index begin, Index end, Index* out) const;

 private:
  friend class ShardPlan;
  Shard(const ShardPlan& plan, Index rank, Index worker, Index num_workers);
  // Window position (before order, wrapped for padding) of entry k.
  std::uint64_t Position(Index k) const;

  ShardPlan plan_;
  Permutation order_;  // the plan's order, or the rank's own for replicate
  Index rank_, worker_, num_workers_;
  Index size_ = 0, padding_ = 0;
  // For all splits but balanced, entry k sits at window position
  // start_ + k * step_ (before wrapping padded positions into [0, M)).
  std::uint64_t start_ = 0, step_ = 0;
};

}  // namespace shardkit

#endif  // SHARDKIT_SHARDING_SHARD_PLAN_H_
