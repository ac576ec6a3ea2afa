// Rank balance: packs over W ranks so that every rank gets exactly
// `packs_per_rank` packs per step (no rank runs an extra step) and each
// step's cost is even across ranks.
//
// Packs are ordered by decreasing cost (ties: lower pack id), cut into steps of
// W * packs_per_rank consecutive packs (similar costs together), and inside a
// step dealt to ranks by LPT with a count limit (each pack to the cheapest rank
// that still has a free slot). The last step is completed with padding packs
// (id -1, cost 0) unless drop_last, which leaves its packs out (listed in
// `dropped_packs`).
//
// Thread-safety: the free functions are pure.
#ifndef SHARDKIT_PACKING_RANK_BALANCE_H_
#define SHARDKIT_PACKING_RANK_BALANCE_H_

#include <span>
#include <string_view>
#include <tuple>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/packing/packing.h"

namespace shardkit {

enum class CostModel { kTokens, kSquaredLengths };
[[nodiscard]] CostModel ParseCostModel(std::string_view name);  // "tokens", "squared"
[[nodiscard]] std::string_view CostModelName(CostModel model);
[[nodiscard]] std::vector<std::string_view> CostModelNames();  // as above

// The cost of one pack entry (a piece) of `length` tokens: the length, or its
// square (the attention cost of a block-diagonal mask). The one cost a pack's
// cost sums, here and in TrainPlan's deal.
[[nodiscard]] double PieceCost(Index length, CostModel model);

// Cost of every pack: the sum of its entries' PieceCost.
[[nodiscard]] std::vector<double> PackCosts(const Packing& packing, CostModel model);

// One step of the rank deal, the routine BalanceRanks and TrainPlan both deal
// with (one rule): LPT with a count limit. The step's packs (costs[k], k in
// step position order) by decreasing cost (ties: lower position), each to the
// rank with the lowest cost in this step among those holding fewer than `rows`
// packs; ties go to the lower carried[rank] (the rank's cost before this step),
// then to the lower rank. BalanceRanks carries the epoch's running totals, so
// the epoch evens out too; TrainPlan deals every step on its own (a plan is
// read and resumed at any step) and carries none: every rank 0, so only ranks
// [0, min(world_size, K)) can receive a pack and the work is O(K log K) for any
// world size (O((world_size + K) log world_size) with carried costs).
// REQUIRES world_size >= 1, rows >= 1, K <= world_size * rows, carried empty
// or of world_size entries, costs and carried finite (the callers check them).
struct RankDeal {
  std::vector<Index> owner;            // the rank of each pack of the step
  std::vector<std::vector<Index>> by;  // packs of ranks [0, ranks), position order
  std::vector<double> rank_costs;      // cost of ranks [0, ranks) in this step
  // Scratch, reused from step to step.
  std::vector<Index> order;
  std::vector<std::tuple<double, double, Index>> heap;
};
void DealStep(std::span<const double> costs, Index world_size, Index rows,
              std::span<const double> carried, RankDeal* deal);

struct RankSchedule {
  Index world_size = 0;
  Index packs_per_rank = 0;
  Index num_steps = 0;
  // assignment[(step * world_size + rank) * packs_per_rank + k]: a pack id, or
  // -1 for a padding pack.
  std::vector<Index> assignment;
  std::vector<double> rank_costs;  // [num_steps * world_size]
  std::vector<Index> dropped_packs;
  Index padding_packs = 0;
  // max over steps of (heaviest rank / mean rank - 1); 0 for empty steps.
  double max_step_imbalance = 0;
  // The same over the steps without padding packs (the last step of a
  // padded schedule holds the cheapest packs and the padding).
  double max_full_step_imbalance = 0;
  // heaviest rank's total over the epoch / mean rank total - 1.
  double total_imbalance = 0;

  [[nodiscard]] Index At(Index step, Index rank, Index k) const {
    return assignment[static_cast<std::size_t>((step * world_size + rank) * packs_per_rank + k)];
  }
};

// Throws invalid_argument naming world_size (< 1), packs_per_rank (< 1) or
// costs (negative or not finite).
[[nodiscard]] RankSchedule BalanceRanks(std::span<const double> pack_costs, Index world_size,
                                        Index packs_per_rank = 1, bool drop_last = false);

}  // namespace shardkit

#endif  // SHARDKIT_PACKING_RANK_BALANCE_H_
