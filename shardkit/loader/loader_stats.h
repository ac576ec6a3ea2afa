// Loader statistics: what a run of TokenLoaders over every rank (or some)
// delivered, its padding, its balance across ranks and whether it provably
// covered the data set. The CLI (`shardkit loader-stats`) prints these; the
// rules live here.
//
// Thread-safety: plain values and pure functions.
#ifndef SHARDKIT_LOADER_LOADER_STATS_H_
#define SHARDKIT_LOADER_LOADER_STATS_H_

#include <array>
#include <optional>
#include <span>

#include "shardkit/base/index.h"
#include "shardkit/loader/loader.h"

namespace shardkit {

// What one rank (all its dataloader workers) delivered.
struct RankLoadStats {
  Index rank = 0;
  Index batches = 0;
  Index tokens = 0;   // real (non-padding) tokens
  Index slots = 0;    // batch_size * seq_len per batch
  Index pieces = 0;   // document pieces, empty documents included
  Index dropped = 0;  // documents dropped (oversize drop)
  double seconds = 0;

  // Counts one batch.
  void Add(const Batch& batch);
  // Padding share of this rank's slots (0 when it has none).
  [[nodiscard]] double padding() const;
};

// How the run was made: what the coverage verdict may conclude from.
struct LoadRunScope {
  Index data_tokens = 0;     // tokens of the data set
  bool all_ranks = true;     // every rank of the world ran
  bool whole_epoch = true;   // from the start of the epoch, not stopped early
  bool shard_files = false;  // file sharding (Whale's policies may replicate or drop files)
  // Equal steps: the plan's summary and mode. Drop mode may drop the final
  // partial step (plan->dropped_tokens), continuous mode ends with rows of
  // the next epoch: neither run is complete then.
  std::optional<TrainSummary> plan;
  TrainMode mode = TrainMode::kPad;
};

struct LoadSummary {
  Index batches = 0, tokens = 0, slots = 0, pieces = 0, dropped = 0;
  double padding = 0;  // 1 - tokens / slots
  Index min_batches = 0, max_batches = 0;
  Index batch_imbalance = 0;   // max - min batches per rank
  double token_imbalance = 0;  // max / min tokens per rank - 1 (0 when min is 0)
  // Every token of a non-empty data set delivered exactly once: all ranks, the whole
  // epoch, no file sharding, nothing dropped (no document, and with equal steps
  // no final step), not continuous, and the delivered tokens add up to the data
  // set's (each batch's pieces are disjoint by construction).
  bool complete = false;
};

// REQUIRES: ranks non-empty.
[[nodiscard]] LoadSummary SummarizeLoad(std::span<const RankLoadStats> ranks,
                                        const LoadRunScope& scope);

// Context parallelism (`loader-stats --cp C`): how the causal attention work
// of a plan's rows spreads over its CP ranks (TrainOptions::cp) under each
// CpSplit (shardkit/packing/context_parallel.h), row by row: max / mean of
// CpRankWork over the C ranks, averaged over the rows and at worst, and the
// padding the per-document split adds.
struct CpWorkSummary {
  Index cp_size = 1;
  Index rows = 0;              // rows with at least one real token
  Index tokens = 0;            // their real tokens
  Index padding = 0;           // per-document head-tail padding inside the documents
  Index balanced_padding = 0;  // the same with cp_strategy balanced (whole pieces unpadded)
  std::array<double, kNumCpSplits> mean_ratio{};   // by CpSplit
  std::array<double, kNumCpSplits> worst_ratio{};  // by CpSplit
};

// Every row of every rank of every step of `plan` (this epoch's steps;
// continuous: the steps that start in it).
[[nodiscard]] CpWorkSummary SummarizeCpWork(const TrainPlan& plan);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_LOADER_STATS_H_
