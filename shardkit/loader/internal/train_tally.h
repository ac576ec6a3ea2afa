// Tally: a train plan's construction pass one step at a time, with the
// plan's totals. Not installed; users include train_plan.h only.
//
// Thread-safety: a Tally is used by one thread.
#ifndef SHARDKIT_LOADER_INTERNAL_TRAIN_TALLY_H_
#define SHARDKIT_LOADER_INTERNAL_TRAIN_TALLY_H_

#include <algorithm>
#include <cstdint>

#include "shardkit/loader/internal/pack_stream.h"
#include "shardkit/loader/internal/train_deal.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit::internal {

// The construction pass one step at a time, with the plan's totals: the
// construction (TrainPlan::Construct) and a deferred plan's reader deal the
// same steps and keep the same totals.
class Tally {
 public:
  Tally(const TrainOptions& o, Index rows_per_rank, std::uint64_t stream)
      : o_(o),
        rows_per_rank_(rows_per_rank),
        R_(o.world_size * rows_per_rank),
        stream_(stream),
        continuous_(o.mode == TrainMode::kContinuous) {}

  // Gathers and deals the plan's next step into *deal; false when the plan
  // has no further step (its stream is over, or drop mode's partial step,
  // which is counted).
  bool Step(PackStream* stream, Deal* deal) {
    if (done_) return false;
    if (continuous_ && (stream->epoch() != o_.epoch || !stream->HasPackInEpoch())) {
      done_ = true;
      return false;
    }
    const Index K = Gather(stream, R_, deal);
    if (K == 0) {
      done_ = true;
      return false;
    }
    if (K < R_ && o_.mode == TrainMode::kDrop) {
      s_.dropped_packs = K;
      for (const Pack& p : deal->packs) s_.dropped_tokens += p.tokens;
      done_ = true;
      return false;
    }
    DealPacks(o_.world_size, rows_per_rank_, o_.cost, o_.seq_len, o_.cp, deal);
    for (std::size_t k = 0; k < deal->packs.size(); ++k) {
      if (deal->epochs[k] != o_.epoch) {
        ++s_.next_epoch_rows;
        continue;
      }
      ++s_.packs;
      s_.tokens += deal->packs[k].tokens;
      s_.pieces += static_cast<Index>(deal->packs[k].pieces.size());
    }
    s_.filler_rows += R_ - K;
    s_.max_step_imbalance = std::max(s_.max_step_imbalance, deal->imbalance);
    if (K == R_) {
      s_.max_full_step_imbalance = std::max(s_.max_full_step_imbalance, deal->imbalance);
      imbalance_sum_ += deal->imbalance;
      ++full_steps_;
    } else {
      done_ = true;  // pad: the last step
    }
    ++s_.num_steps;
    return true;
  }

  [[nodiscard]] bool done() const { return done_; }
  [[nodiscard]] Index steps() const { return s_.num_steps; }

  // The summary once Step has returned false: the end state and the totals
  // of the whole epoch's stream (run to its end when the plan stopped
  // before, as drop mode does).
  TrainSummary End(PackStream* stream) const {
    TrainSummary s = s_;
    s.mean_step_imbalance = full_steps_ ? imbalance_sum_ / static_cast<double>(full_steps_) : 0.0;
    s.lower_bound = (s.tokens + o_.seq_len - 1) / o_.seq_len;
    if (!continuous_) {
      s.end = {o_.epoch + 1, 0, stream_};
    } else if (s.num_steps == 0) {
      s.end = {o_.epoch + 1, 0, stream_};
    } else {
      // Where the continuous stream stands: the next pack to deal.
      std::uint64_t e = stream->epoch();
      Index p = stream->popped();
      if (!stream->HasPackInEpoch()) {
        ++e;
        p = 0;
      }
      s.end = {e, p, stream_};
    }
    const PackStream::EpochTotals t = stream->Totals(o_.epoch);
    s.stream_packs = t.packs;
    s.dropped = t.dropped;
    s.split_documents = t.split_items;
    return s;
  }

 private:
  const TrainOptions& o_;
  Index rows_per_rank_, R_;
  std::uint64_t stream_;
  bool continuous_;
  bool done_ = false;
  TrainSummary s_;
  double imbalance_sum_ = 0;
  Index full_steps_ = 0;
};

}  // namespace shardkit::internal

#endif  // SHARDKIT_LOADER_INTERNAL_TRAIN_TALLY_H_
