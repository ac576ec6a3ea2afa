// TokenLoader: sharded, shuffled, packed, fixed-shape token batches from a
// TokenSource, produced by background threads, resumable exactly and
// elastically.
//
// The pipeline of one consumer (a rank, or one dataloader worker of a rank):
//   order    one global order of the documents per (seed, epoch): a keyed
//            Permutation (or sequential), the same on every consumer.
//   split    consumers C = world_size * num_workers; consumer
//            c = rank + worker * world_size reads entries c, c + C, c + 2C, ...
//            of the order (ShardPlan round robin, then workers interleaved).
//   pack     a StreamingPacker (shardkit/packing/packing.h) of capacity seq_len with
//            the chosen algorithm and buffer; long documents are split into
//            pieces of at most seq_len tokens (oversize split, the default) or
//            dropped (oversize drop, counted).
//   collate  batch_size packs -> preallocated [batch_size, seq_len] arrays:
//            input_ids, labels, position_ids, document_ids and the batch's
//            cu_seqlens (shardkit/packing/packing_metadata.h gives the conventions),
//            plus the pieces of the batch (documents, starts, rows). The last
//            batch of an epoch is padded with empty rows, never dropped.
//   prefetch num_threads background threads fill a bounded queue of `prefetch`
//            batches ahead of the consumer. Planning (order, split, pack) is
//            sequential and cheap; collation (the token copies) runs in
//            parallel. Batch k is the same for any thread count and depth.
//
// State: after every batch, a LoaderState (epoch, the remaining order, how
// many entries this consumer read, the packer's buffered items and closed
// packs). A loader built from it delivers exactly the batches that would have
// come next. MergeLoaderStates combines the states of all C consumers of a
// run into one global state from which any number of consumers continues the
// epoch: every document (piece) not yet delivered is delivered exactly once,
// none delivered before is repeated. See docs/loader.md for the guarantee and
// its limits.
//
// File sharding (shard_files): the parts of a multi-file source are assigned
// to consumers by Whale's policies (shardkit/sharding/whale.h) instead; each consumer
// reads its parts' documents (shuffled within the consumer when shuffle is
// on). Exact resume works; merging states of file-sharded runs does not (a
// replicated file belongs to no single consumer) and is refused.
//
// Thread-safety: a TokenLoader is used by one thread at a time (its own
// threads are internal); distinct loaders are independent.
#ifndef SHARDKIT_LOADER_LOADER_H_
#define SHARDKIT_LOADER_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/packing/packing.h"
#include "shardkit/packing/packing_metadata.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

struct LoaderOptions {
  Index seq_len = 0;     // tokens per row; REQUIRES >= 1
  Index batch_size = 0;  // rows per batch; REQUIRES >= 1
  Index rank = 0, world_size = 1;
  Index worker = 0, num_workers = 1;  // dataloader workers of the rank
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  PackAlgorithm algorithm = PackAlgorithm::kBestFitDecreasing;
  Oversize oversize = Oversize::kSplit;  // split | drop (error is refused)
  std::optional<Index> buffer;           // packer buffer (items); default 1024
  std::int64_t pad_token_id = 0;
  std::int64_t ignore_index = -100;
  PaddingSide padding_side = PaddingSide::kRight;
  Index num_threads = 1;  // background threads; 0: produce in the caller's thread
  Index prefetch = 2;     // batches produced ahead (queue depth); REQUIRES >= 1
  // File-level sharding with Whale's policies over the source's parts.
  bool shard_files = false;
  bool whale_unbalanced_io_slicing = false;
  bool whale_drop_last_files = false;
};

// A piece of a document: tokens [start, start + length) of it.
struct PieceRef {
  Index document = 0;
  Index start = 0;
  Index length = 0;
  friend bool operator==(const PieceRef&, const PieceRef&) = default;
};

// Everything needed to continue an epoch. Small: O(buffer + C) numbers.
struct LoaderState {
  std::uint64_t epoch = 0;
  // The remaining order of the epoch, shared by all consumers of a run:
  // first the pieces of `head` in order, then the documents at global order
  // positions [position, num_documents) except those listed in `done`
  // (sorted, all >= position; already delivered).
  std::vector<PieceRef> head;
  Index position = 0;
  std::vector<Index> done;
  // This consumer (consumers == 0: a merged state of no consumer).
  Index consumers = 0;
  Index consumer = -1;
  Index read = 0;     // entries of this consumer's list read so far
  Index batches = 0;  // batches delivered from this state's plan
  // The packer (item ids < 0 refer to head[-id - 1]).
  PackerState packer;
  // What the state was made for; a loader refuses a state that differs.
  Index num_documents = 0;
  Index seq_len = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool shard_files = false;
};

// Combines the states of all consumers of one run (one state per consumer
// 0 .. C-1, any order, all taken from the same plan) into a merged state.
// Throws invalid_argument naming `state` when a consumer is missing or
// repeated, the states disagree, or they come from file sharding.
[[nodiscard]] LoaderState MergeLoaderStates(std::span<const LoaderState> states);

// One batch; arrays are row-major [batch_size, seq_len].
struct Batch {
  Index batch_size = 0, seq_len = 0;
  std::uint64_t epoch = 0;
  Index index = 0;  // 0, 1, 2, ... within this consumer's epoch
  std::vector<std::int64_t> input_ids, labels, position_ids;
  std::vector<std::int32_t> document_ids;  // piece index within the row, -1 padding
  std::vector<std::int32_t> cu_seqlens;    // flattened batch, see packing_metadata.h
  Index max_seqlen = 0;
  // Every piece of the batch, row by row in row order: its document, its
  // first token within the document, its length and its row. Empty
  // documents are listed too (length 0) but occupy no token: document_ids
  // [b, t] = k names the k-th non-empty piece of row b.
  std::vector<std::int64_t> documents, starts, lengths;
  std::vector<std::int32_t> rows;
  Index tokens = 0;  // real (non-padding) tokens
};

class TokenLoader {
 public:
  // Validates everything here. Throws invalid_argument naming the option
  // (seq_len, batch_size, rank, world_size, worker, num_workers, buffer,
  // num_threads, prefetch, oversize) or `state` when `resume` was made for
  // another data set or configuration. `resume` is this consumer's own state
  // (same consumers and consumer) or a merged state (any consumers).
  TokenLoader(std::shared_ptr<const TokenSource> source, LoaderOptions options,
              std::optional<LoaderState> resume = std::nullopt);
  ~TokenLoader();
  TokenLoader(const TokenLoader&) = delete;
  TokenLoader& operator=(const TokenLoader&) = delete;

  // The next batch, or nullptr at the end of the epoch. Blocks until it is
  // ready. The batch stays valid while the caller holds it; its buffers are
  // reused once released. Rethrows an error of a background thread.
  [[nodiscard]] std::shared_ptr<const Batch> Next();

  // The state after the last batch Next() returned (or the starting state).
  [[nodiscard]] LoaderState State() const;

  // Entries in this consumer's list this epoch (documents or head pieces).
  [[nodiscard]] Index ListSize() const;
  [[nodiscard]] const LoaderOptions& options() const { return options_; }
  [[nodiscard]] Index consumers() const { return consumers_; }
  [[nodiscard]] Index consumer() const { return consumer_; }
  // Documents dropped so far (oversize drop), in this consumer's stream.
  [[nodiscard]] Index dropped() const;

 private:
  struct Plan;
  class ConsumerList;
  class Planner;

  void StartThreads();
  void ProducerLoop();
  void Collate(const Plan& plan, Batch* batch) const;
  std::shared_ptr<Batch> AcquireBatch();

  std::shared_ptr<const TokenSource> source_;
  LoaderOptions options_;
  CollateOptions collate_;
  Index consumers_ = 1, consumer_ = 0;
  std::unique_ptr<Planner> planner_;  // guarded by mu_

  mutable std::mutex mu_;
  std::condition_variable produced_, consumed_;
  std::vector<std::thread> threads_;
  bool started_ = false, stop_ = false, planned_all_ = false;
  Index next_plan_ = 0;  // sequence number of the next batch to plan
  Index next_out_ = 0;   // sequence number of the next batch to return
  Index in_flight_ = 0;
  std::exception_ptr error_;
  struct Ready {
    std::shared_ptr<Batch> batch;
    std::shared_ptr<const LoaderState> state;
  };
  std::map<Index, Ready> ready_;
  std::shared_ptr<const LoaderState> state_;  // after the last returned batch
  std::vector<std::shared_ptr<Batch>> pool_;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_LOADER_H_
