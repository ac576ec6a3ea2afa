// The machinery behind TrainPlan::Reader and a Deferred plan: the reader's
// stream and deal (Reader::Impl), and the once-only construction (Lazy).
// Not installed; users include train_plan.h only.
//
// Thread-safety: a Reader::Impl is used by one thread; Lazy's members are
// the synchronisation of a Deferred plan's construction.
#ifndef SHARDKIT_LOADER_INTERNAL_TRAIN_READER_H_
#define SHARDKIT_LOADER_INTERNAL_TRAIN_READER_H_

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>

#include "shardkit/loader/internal/pack_stream.h"
#include "shardkit/loader/internal/train_deal.h"
#include "shardkit/loader/internal/train_tally.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit {

namespace internal {
// A mapped, checked shared host plan file (host_plan.cc).
class HostPlanFile;
// Rank's step `step` from the file into *out; false past its last step.
bool ReadHostStep(const HostPlanFile& file, Index rank, Index step, TrainStep* out);
}  // namespace internal

struct TrainPlan::Lazy {
  std::once_flag once;
  std::atomic<bool> built{false};
  std::atomic<Index> dealt{0};  // steps the ReadOnce reader has dealt
};

struct TrainPlan::Reader::Impl {
  const TrainPlan* plan;
  Index rank;
  internal::PackStream stream;
  Index step = 0;
  internal::Deal deal;
  std::unique_ptr<internal::Tally> tally;              // ReadOnce: the construction pass's totals
  std::shared_ptr<const internal::HostPlanFile> host;  // ReadShared: the host's file

  Impl(const TrainPlan* p, Index r)
      : plan(p),
        rank(r),
        stream(&p->documents_, p->options_, p->options_.mode == TrainMode::kContinuous,
               p->compact_.get()) {}

  void SeekTo(Index first) {
    const Index c = std::min<Index>(first / plan->checkpoint_stride_,
                                    static_cast<Index>(plan->checkpoints_.size()) - 1);
    if (tally) {
      // Every step from the plan's start is dealt and counted.
      stream.Restore(*plan->checkpoints_[0]);
      while (step < first && Advance()) ++step;
      return;
    }
    if (c >= 0) {
      stream.Restore(*plan->checkpoints_[static_cast<std::size_t>(c)]);
      step = c * plan->checkpoint_stride_;
    }
    const Index R = plan->options_.world_size * plan->rows_per_rank_;
    if (first > step) {
      (void)stream.Skip(CheckedMul("step", first - step, R));
      step = first;
    }
  }

  bool Advance() {
    const TrainOptions& o = plan->options_;
    if (tally) {
      if (!tally->Step(&stream, &deal)) {
        if (!published) {
          published = true;
          plan->Publish(tally->End(&stream));
        }
        return false;
      }
      if (plan->lazy_) plan->lazy_->dealt.store(tally->steps(), std::memory_order_release);
      return true;
    }
    const bool continuous = o.mode == TrainMode::kContinuous;
    if (!continuous && step >= plan->num_steps()) return false;
    const Index R = o.world_size * plan->rows_per_rank_;
    const Index K = internal::Gather(&stream, R, &deal);
    if (K == 0) return false;
    internal::DealPacks(o.world_size, plan->rows_per_rank_, o.cost, o.seq_len, o.cp, &deal);
    return true;
  }
  bool published = false;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_INTERNAL_TRAIN_READER_H_
