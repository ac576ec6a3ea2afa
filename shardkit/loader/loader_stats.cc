#include "shardkit/loader/loader_stats.h"

#include <algorithm>
#include <vector>

namespace shardkit {

void RankLoadStats::Add(const Batch& batch) {
  ++batches;
  tokens += batch.tokens;
  slots += batch.batch_size * batch.seq_len;
  pieces += static_cast<Index>(batch.documents.size());
}

double RankLoadStats::padding() const {
  return slots > 0 ? 1.0 - static_cast<double>(tokens) / static_cast<double>(slots) : 0.0;
}

LoadSummary SummarizeLoad(std::span<const RankLoadStats> ranks, const LoadRunScope& scope) {
  LoadSummary s;
  if (ranks.empty()) return s;
  s.min_batches = ranks.front().batches;
  Index min_tokens = ranks.front().tokens, max_tokens = 0;
  for (const RankLoadStats& r : ranks) {
    s.batches += r.batches;
    s.tokens += r.tokens;
    s.slots += r.slots;
    s.pieces += r.pieces;
    s.dropped += r.dropped;
    s.min_batches = std::min(s.min_batches, r.batches);
    s.max_batches = std::max(s.max_batches, r.batches);
    min_tokens = std::min(min_tokens, r.tokens);
    max_tokens = std::max(max_tokens, r.tokens);
  }
  s.padding =
      s.slots > 0 ? 1.0 - static_cast<double>(s.tokens) / static_cast<double>(s.slots) : 0.0;
  s.batch_imbalance = s.max_batches - s.min_batches;
  s.token_imbalance =
      min_tokens > 0 ? static_cast<double>(max_tokens) / static_cast<double>(min_tokens) - 1 : 0.0;
  s.complete =
      scope.data_tokens > 0 && scope.all_ranks && scope.whole_epoch && !scope.shard_files &&
      s.dropped == 0 && s.tokens == scope.data_tokens &&
      (!scope.plan || (scope.plan->dropped_tokens == 0 && scope.mode != TrainMode::kContinuous));
  return s;
}

CpWorkSummary SummarizeCpWork(const TrainPlan& plan) {
  const TrainOptions& o = plan.options();
  CpWorkSummary s;
  s.cp_size = o.cp.size;
  const Index granule = CpGranule(o.cp);
  const auto reader = plan.Read(-1, 0);
  std::vector<TrainStep> all;
  for (Index step = 0; step < plan.num_steps() && reader->NextAll(&all); ++step) {
    for (const TrainStep& t : all) {
      for (const auto& row : t.rows) {
        const Index tokens = RowTokens(row);
        if (tokens == 0) continue;
        ++s.rows;
        s.tokens += tokens;
        s.padding += CpPaddedTokens(row, granule) - tokens;
        ContextParallelOptions balanced = o.cp;
        balanced.strategy = CpStrategy::kBalanced;
        s.balanced_padding += CpDocumentPadding(row, o.seq_len, balanced);
        for (const CpSplit split :
             {CpSplit::kContiguous, CpSplit::kHeadTail, CpSplit::kDocumentHeadTail,
              CpSplit::kBalanced, CpSplit::kPtrr}) {
          const std::vector<double> work = CpRankWork(row, o.seq_len, o.cp, split);
          double total = 0, most = 0;
          for (double w : work) {
            total += w;
            most = std::max(most, w);
          }
          const double ratio = most / (total / static_cast<double>(o.cp.size));
          const std::size_t k = static_cast<std::size_t>(split);
          s.mean_ratio[k] += ratio;
          s.worst_ratio[k] = std::max(s.worst_ratio[k], ratio);
        }
      }
    }
  }
  if (s.rows > 0) {
    for (double& m : s.mean_ratio) m /= static_cast<double>(s.rows);
  }
  return s;
}

}  // namespace shardkit
