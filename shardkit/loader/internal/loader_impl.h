// The machinery behind TokenLoader (shardkit/loader/loader.h): the planner,
// the planning and collating threads, the queues of planned and ready batches
// and the buffer pool. Not installed; users include loader.h only.
//
// With num_threads = 0 the caller's thread plans and collates each batch in
// Next(). With num_threads >= 1, one more thread plans: it runs the Planner
// (sequential: batch k is the same for any thread count) outside mu_ and
// queues up to max(8, 2 (prefetch + num_threads)) planned batches (a plan is
// the rows' piece lists, small beside a batch); num_threads threads
// collate them in parallel, batch seq only while seq < next_out_ + prefetch
// (the buffer pool stays at prefetch batches plus those the caller holds).
// So planning overlaps collation: per batch the wall time is bounded by
// max(plan, collate / num_threads) when cores allow, not by their sum (the
// equal-steps plan deals every rank's packs: docs/benchmarks.md).
//
// Thread-safety: every member below mu_ is guarded by it. planner_ is used by
// one thread only: the planning thread, or with num_threads = 0 the caller's
// thread under mu_; what the accessors read of it (base, list size, train
// plan) is immutable after construction or thread-safe (TrainPlan).
#ifndef SHARDKIT_LOADER_INTERNAL_LOADER_IMPL_H_
#define SHARDKIT_LOADER_INTERNAL_LOADER_IMPL_H_

#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "shardkit/loader/loader.h"

namespace shardkit::internal {

// One planned batch: rows of resolved pieces (item = document).
struct Plan {
  std::vector<std::vector<Piece>> rows;
  std::uint64_t epoch = 0;
  Index index = 0;
  Index step = 0;  // Batch::step
};

// Where the planner stands after a batch: what LoaderImpl::Publish turns into
// the LoaderState a consumer sees after that batch.
struct PlannerSnapshot {
  Index read = 0, batches = 0;
  PackerState packer;
  std::optional<TrainState> train;
};

// A batch planned and not yet collated: sequence number `seq`.
struct Planned {
  Plan plan;
  PlannerSnapshot snapshot;
  Index seq = 0;
};

class Planner;

class LoaderImpl {
 public:
  LoaderImpl(std::shared_ptr<const TokenSource> source, LoaderOptions options,
             std::optional<LoaderState> resume);
  ~LoaderImpl();
  LoaderImpl(const LoaderImpl&) = delete;
  LoaderImpl& operator=(const LoaderImpl&) = delete;

  std::shared_ptr<const Batch> Next();
  LoaderState State() const;
  Index ListSize() const;
  const LoaderOptions& options() const { return options_; }
  const std::shared_ptr<const TokenSource>& source() const { return source_; }
  // fork(): true in a child process of the one that built this loader;
  // threads_started() says whether the parent's threads ran. In the child,
  // last_state() is read without the mutex (the parent's threads may have
  // held it; they never write state_, only Next does).
  bool forked() const { return ::getpid() != pid_; }
  bool threads_started() const { return !threads_.empty(); }
  void AdoptProcess() { pid_ = ::getpid(); }
  std::shared_ptr<const LoaderState> last_state() const { return state_; }
  Index consumers() const { return consumers_; }
  Index consumer() const { return consumer_; }
  const std::optional<WhaleChoice>& file_policy() const { return file_policy_; }
  Index dropped() const;
  const TrainPlan* train_plan() const;

 private:
  void StartThreads();
  void PlannerLoop();
  void CollatorLoop();
  // Records a failure of batch `seq` (the consumer rethrows it once every
  // batch before it has been returned). REQUIRES: mu_ held.
  void Fail(std::exception_ptr error, Index seq);
  // What every collate path sets first: the batch's epoch, index and step,
  // and its piece lists and token count emptied.
  static void StartBatch(const Plan& plan, Batch* batch);
  // Copies the plan's rows into `batch`, checking the files of its documents
  // unchanged before the copy and after it (token_source.h).
  void Collate(const Plan& plan, Batch* batch) const;
  // The copy itself: whole rows, or with context parallelism the CP rank's
  // slice of every row.
  void CollateRows(const Plan& plan, Batch* batch) const;
  void CollateContextParallel(const Plan& plan, Batch* batch) const;
  std::shared_ptr<Batch> AcquireBatch();
  // A new batch of batch_size x seq_len; std::bad_alloc becomes
  // invalid_argument naming batch_size and the bytes asked for.
  std::shared_ptr<Batch> AllocateBatch() const;
  // The full state after a batch, from the planner's snapshot.
  std::shared_ptr<const LoaderState> Publish(PlannerSnapshot snapshot) const;

  std::shared_ptr<const TokenSource> source_;
  LoaderOptions options_;
  CollateOptions collate_;
  Index consumers_ = 1, consumer_ = 0;
  std::optional<WhaleChoice> file_policy_;  // with shard_files
  std::unique_ptr<Planner> planner_;        // one thread at a time: see above

  mutable std::mutex mu_;
  // produced_: a batch is ready (or the end, or an error): the consumer waits.
  // room_: a planned batch was taken (or stop): the planning thread waits.
  // work_: a batch was planned or returned (or the end, or stop): the
  // collating threads wait. One waiter is woken per event where one suffices
  // (a wake-up is a context switch, per batch).
  std::condition_variable produced_, room_, work_;
  std::vector<std::thread> threads_;
  bool started_ = false, stop_ = false, planned_all_ = false;
  Index next_plan_ = 0;          // sequence number of the next batch to plan
  Index next_out_ = 0;           // sequence number of the next batch to return
  std::deque<Planned> planned_;  // planned, not yet taken by a collating thread
  Index plan_ahead_ = 8;         // the most batches planned ahead
  std::exception_ptr error_;
  Index error_seq_ = 0;  // the batch that failed, when error_
  struct Ready {
    std::shared_ptr<Batch> batch;
    std::shared_ptr<const LoaderState> state;
  };
  std::map<Index, Ready> ready_;
  std::shared_ptr<const LoaderState> state_;  // after the last returned batch
  std::vector<std::shared_ptr<Batch>> pool_;
  pid_t pid_ = ::getpid();
};

}  // namespace shardkit::internal

#endif  // SHARDKIT_LOADER_INTERNAL_LOADER_IMPL_H_
