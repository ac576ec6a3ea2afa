// The deal of a train plan's step: the step's packs gathered from the pack
// stream, dealt to ranks by DealStep (packing/rank_balance.h, the deal
// BalanceRanks uses: one deal routine, one cost function, one tie-break),
// and one rank's rows of it. Not installed; users include train_plan.h only.
//
// Thread-safety: functions of their arguments.
#ifndef SHARDKIT_LOADER_INTERNAL_TRAIN_DEAL_H_
#define SHARDKIT_LOADER_INTERNAL_TRAIN_DEAL_H_

#include <cstdint>
#include <vector>

#include "shardkit/loader/internal/pack_stream.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit::internal {

// One global step: the packs taken and the rank of each.
struct Deal {
  std::vector<Pack> packs;
  std::vector<std::uint64_t> epochs;
  std::vector<Index> indices;  // stream index of each pack
  std::vector<double> costs;
  RankDeal dealt;  // the ranks of the packs (by: ranks [0, min(W, K)), stream order)
  double total = 0;
  double imbalance = 0;
};

// Fills deal->packs with up to R packs of the stream; returns how many.
Index Gather(PackStream* stream, Index R, Deal* deal);

// The step's packs dealt to ranks by DealStep (rank_balance.h, BalanceRanks' deal),
// each step on its own (nothing carried: a plan is read and resumed at any
// step), at most `rows` packs per rank.
void DealPacks(Index W, Index rows, CostModel model, Index seq_len,
               const ContextParallelOptions& cp, Deal* deal);

// `rank`'s rows of the dealt step: its packs, then empty filler rows up to
// `rows`.
void FillStep(const Deal& deal, Index rank, Index rows, Index step, TrainStep* out);

}  // namespace shardkit::internal

#endif  // SHARDKIT_LOADER_INTERNAL_TRAIN_DEAL_H_
