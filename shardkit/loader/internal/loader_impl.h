// The machinery behind TokenLoader (shardkit/loader/loader.h): the planner,
// the producer threads, the queue of ready batches and the buffer pool. Not
// installed; users include loader.h only.
//
// Thread-safety: every member below mu_ is guarded by it; Planner runs under
// mu_ (planning is sequential), collation runs outside it in parallel.
#ifndef SHARDKIT_LOADER_INTERNAL_LOADER_IMPL_H_
#define SHARDKIT_LOADER_INTERNAL_LOADER_IMPL_H_

#include <unistd.h>

#include <condition_variable>
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
  std::vector<std::vector<PackItem>> rows;
  std::uint64_t epoch = 0;
  Index index = 0;
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
  void ProducerLoop();
  void Collate(const Plan& plan, Batch* batch) const;
  std::shared_ptr<Batch> AcquireBatch();
  // A new batch of batch_size x seq_len; std::bad_alloc becomes
  // invalid_argument naming batch_size and the bytes asked for.
  std::shared_ptr<Batch> AllocateBatch() const;
  // The full state after a batch, from the planner's snapshot.
  std::shared_ptr<const LoaderState> Publish(Index read, Index batches, PackerState packer,
                                             std::optional<TrainState> train) const;

  std::shared_ptr<const TokenSource> source_;
  LoaderOptions options_;
  CollateOptions collate_;
  Index consumers_ = 1, consumer_ = 0;
  std::optional<WhaleChoice> file_policy_;  // with shard_files
  std::unique_ptr<Planner> planner_;        // guarded by mu_

  mutable std::mutex mu_;
  std::condition_variable produced_, consumed_;
  std::vector<std::thread> threads_;
  bool started_ = false, stop_ = false, planned_all_ = false;
  Index next_plan_ = 0;  // sequence number of the next batch to plan
  Index next_out_ = 0;   // sequence number of the next batch to return
  std::exception_ptr error_;
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
