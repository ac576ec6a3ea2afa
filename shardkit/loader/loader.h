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
//   prefetch num_threads background threads collate into a bounded queue of
//            `prefetch` batches ahead of the consumer; with num_threads >= 1 one
//            more thread plans (order, split, pack; sequential, lengths only)
//            ahead of them, so planning overlaps collation (the token copies,
//            in parallel). Batch k is the same for any thread count and depth.
//
// State: after every batch, a LoaderState (shardkit/loader/loader_state.h:
// epoch, the remaining order, how many entries this consumer read, the
// packer's buffered items and closed packs, and the fingerprint of the data
// and plan; LoaderStateToJson / LoaderStateFromJson write and read it). A
// loader built from it delivers exactly the batches that would have come next. MergeLoaderStates
// combines the states of all C consumers of a run into one global state from which any number of
// consumers continues the epoch: every document (piece) not yet delivered is delivered exactly
// once, none delivered before is repeated. See docs/loader.md for the guarantee and its limits.
//
// File sharding (shard_files): the parts of a multi-file source are assigned
// to consumers by Whale's policies (shardkit/sharding/whale.h) instead; each consumer
// reads its parts' documents (shuffled within the consumer when shuffle is
// on). Exact resume works; merging states of file-sharded runs does not (a
// replicated file belongs to no single consumer) and is refused.
//
// Thread-safety: Next() and State() may be called from several threads; calls
// are serialised and each batch goes to exactly one caller, every caller
// seeing the end once the epoch is out (its own threads, queue and buffer pool
// are internal, in internal/loader_impl.h); distinct loaders are independent.
#ifndef SHARDKIT_LOADER_LOADER_H_
#define SHARDKIT_LOADER_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/loader/train_plan.h"
#include "shardkit/packing/packing.h"
#include "shardkit/packing/packing_metadata.h"
#include "shardkit/packing/rank_balance.h"
#include "shardkit/sharding/whale.h"

namespace shardkit {

namespace internal {
class LoaderImpl;
}  // namespace internal

// The most tokens one batch may hold (batch_size x seq_len): each token takes
// 28 bytes in the batch buffers, so this is 7.5 GB a buffer. Larger requests
// are refused naming both numbers rather than failing to allocate.
inline constexpr Index kMaxBatchTokens = Index{1} << 28;

// The loader's options are the plan's (TrainOptions: seq_len, batch_size,
// world_size, mode, shuffle, seed, epoch, the packing options, cost, cp), each
// default written once there, plus what only a loader has. A LoaderOptions is
// a TrainOptions: the equal-steps plan, the per-rank packer (TrainPackOptions)
// and the mixture loader's plans read the same fields, with no copy to forget
// one. REQUIRES the plan-only fields at their defaults (micro_batches 1,
// position 0, no max_images: the loader's steps are micro-batches, its
// position is its state, and token sources carry no images); max_sequences
// caps the pieces of a row on both paths.
// The row filling (pad_token_id, ignore_index, padding_side, causal) is the
// collation's own PaddingOptions (packing_metadata.h), contained, not copied.
struct LoaderOptions : TrainOptions, PaddingOptions {
  Index rank = 0;
  Index worker = 0, num_workers = 1;  // dataloader workers of the rank
  Index num_threads = 1;  // collating threads (+1 planning); 0: all in the caller's thread
  Index prefetch = 2;     // batches produced ahead (queue depth); REQUIRES >= 1
  // File-level sharding with Whale's policies over the source's parts. The
  // switches are explicit here; callers that follow Whale's environment read
  // them with WhalePolicyFromEnvironment (shardkit/sharding/whale.h).
  // REQUIRES !equal_steps: file sharding packs per rank, and the core is the
  // one place that decides it (refused naming shard_files; the Python
  // TokenLoader, the torch datasets and the CLI forward both switches as
  // given, none turns equal steps off for it).
  bool shard_files = false;
  bool whale_unbalanced_io_slicing = false;
  bool whale_drop_last_files = false;
  // Equal steps (train_plan.h): the batches follow the global TrainPlan of
  // these options, so every rank yields the same number of batches per epoch
  // and every piece is in exactly one batch of one rank; worker k of K yields
  // the rank's steps k, k + K, ... (Batch::index is the step). Not with
  // shard_files (see above).
  // On by default, the default of a training loader written here once: the
  // Python TokenLoader, the torch datasets and the CLI read it from here, and
  // equal_steps=False / --per-rank turn it off (the per-rank packer).
  bool equal_steps = true;
  // Also fill Batch::block_mask (packing_metadata.h's dense block-diagonal
  // mask, [batch_size, seq_len, seq_len] bytes), causal within each piece.
  bool block_mask = false;
  // Context parallelism (TrainOptions::cp, shardkit/packing/context_parallel.h):
  // with cp.size C > 1 the loader delivers CP rank cp_rank's slice of every
  // row (the CP ranks of a group are replicas for the plan: same rank, same
  // rows) and reads only that rank's tokens. REQUIRES equal_steps (the plan
  // packs every document padded to the granularity, so a padded row fits
  // seq_len), padding_side right, no block_mask; 0 <= cp_rank < C.
  Index cp_rank = 0;
  // The shared host plan (host_plan.h; REQUIRES equal_steps): the host's
  // process with local_rank 0 and worker 0 plans the epoch once and writes
  // every rank's steps to a sealed file in /dev/shm; the host's other ranks
  // and workers map it instead of planning. The batches are the same as
  // without it. local_rank: this process's rank on its host; -1 reads
  // LOCAL_RANK (torchrun; 0 when unset). SHARDKIT_SHARE_PLAN_DIR and
  // SHARDKIT_SHARE_PLAN_TIMEOUT (seconds, default 600) set the directory and
  // how long the others wait for the file.
  bool share_plan = false;
  Index local_rank = -1;
  // How the documents' lengths and tokens are read from their files
  // (token_source.h's ReadMode): "pread" reads each with pread(2) and maps
  // nothing (a sparse reader's resident set stays at what it read), "mmap"
  // from the memory maps; "auto" is pread for a mixture loader's sources
  // (read at random: its first batch maps most of each file otherwise), mmap
  // for one source. The batches are the same whichever is chosen.
  ReadMode read = ReadMode::kAuto;
};

// The loader's options as its plan reads them: the TrainOptions part of
// `options` (a slice, not a copy field by field).
[[nodiscard]] inline const TrainOptions& LoaderTrainOptions(const LoaderOptions& options) {
  return options;
}

// The state a consumer of a run resumes from, given the states a run saved
// (one per consumer, as `shardkit loader-stats --save-state` and the torch
// DataLoader write them, or a single merged state): its own state when
// `states` holds one for consumer `consumer` of `consumers` (exact resume:
// the same batches as the uninterrupted run); the state itself when `states`
// is one merged state (consumers 0); otherwise the merge of all of them
// (MergeLoaderStates: elastic, any world size or worker count). One rule for
// the Python loader, the torch adapter and the CLI. Throws invalid_argument
// naming `state` when `states` is empty or the merge refuses them.
[[nodiscard]] LoaderState ResumeStateFor(std::span<const LoaderState> states, Index consumers,
                                         Index consumer);

// Combines the states of all consumers of one run (one state per consumer
// 0 .. C-1, any order, all taken from the same plan) into a merged state.
// Throws invalid_argument naming `state` when a consumer is missing or
// repeated, the states disagree, or they come from file sharding.
[[nodiscard]] LoaderState MergeLoaderStates(std::span<const LoaderState> states);

// One batch; arrays are row-major [batch_size, seq_len]. With context
// parallelism (cp.size C > 1) seq_len here is the slice's width
// options.seq_len / C and every [batch_size, seq_len] array is the CP rank's
// slice (CollateCpRow), plus cp_index and cu_seqlens_padded; cu_seqlens are
// the local ones (cu_seqlens_padded / C) and max_seqlen the full rows' (the
// longest padded sequence); tokens and row_tokens count the slice's real
// tokens, while documents / starts / lengths / rows list the full rows'
// pieces (the same on every CP rank).
struct Batch {
  Index batch_size = 0, seq_len = 0;
  std::uint64_t epoch = 0;
  Index index = 0;  // 0, 1, 2, ... within this consumer's epoch
  // The step of the epoch, which a resume keeps counting: equal steps,
  // TrainPlan::first_step() + the plan's step (index is the plan's step);
  // per rank, index (it continues from the state's `batches`).
  Index step = 0;
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
  // Real tokens of each row [batch_size]: 0 for a filler row, whose labels
  // are all ignore_index (normalise a loss by real tokens, not rows).
  std::vector<std::int32_t> row_tokens;
  // With LoaderOptions::block_mask: [batch_size, seq_len, seq_len], 1 iff
  // tokens t and u are real tokens of the same piece (and u <= t if causal).
  std::vector<std::uint8_t> block_mask;
  // With context parallelism: each slot's position in its full (unpadded)
  // row, -1 on padding [batch_size, seq_len]; and the THD cu_seqlens_padded
  // of the full rows flattened row-major (last entry batch_size x
  // options.seq_len).
  std::vector<std::int64_t> cp_index;
  std::vector<std::int32_t> cu_seqlens_padded;
};

// Epochs, one rule: the epoch is part of the state. A pass is the batches
// from where the loader stands to the end of that epoch; when a pass runs
// out the loader moves itself to the start of the next epoch (equal steps:
// the plan's end state, so continuous mode goes on in the next epoch's
// stream; per rank: epoch + 1 from its start), and State() names it, so the
// next pass is the next epoch without the caller rebuilding anything.
// SetEpoch(e) moves to the start of epoch e unless the loader already stands
// in e (just resumed, or the previous pass ran out into e): then it keeps its
// position, so both "Restore(s); SetEpoch(s.epoch)" and a loop calling
// SetEpoch every epoch continue exactly.
class TokenLoader {
 public:
  // The source epoch e reads (a mixture loader gives each epoch its own
  // window of the mixture: shardkit/loader/mixture_loader.h); by default
  // every epoch reads the source given.
  using EpochSource = std::function<std::shared_ptr<const TokenSource>(std::uint64_t epoch)>;

  // Validates everything here. Throws invalid_argument naming the option
  // (seq_len, batch_size, rank, world_size, worker, num_workers, buffer,
  // num_threads, prefetch, oversize) or `state` when `resume` was made for
  // another data set or configuration (its fingerprint differs) or does not
  // hold together (ValidateLoaderState, and every piece must lie in its
  // document). `resume` is this consumer's own state (same consumers and
  // consumer) or a merged state (any consumers).
  TokenLoader(std::shared_ptr<const TokenSource> source, LoaderOptions options,
              std::optional<LoaderState> resume = std::nullopt);
  // The same with a source per epoch: `source` is called for the epoch the
  // loader starts in (options.epoch, or the state's) and for every later one.
  TokenLoader(EpochSource source, LoaderOptions options,
              std::optional<LoaderState> resume = std::nullopt);
  // In a child process after fork() (see Next), the parent's machinery is
  // left alone (its threads do not exist there): never blocks.
  ~TokenLoader();
  TokenLoader(const TokenLoader&) = delete;
  TokenLoader& operator=(const TokenLoader&) = delete;

  // The next batch of the current pass, or nullptr when it is over (the
  // loader then stands at the start of the next epoch). Blocks until it is
  // ready. The batch stays valid while the caller holds it; its buffers are
  // reused once released. Rethrows an error of a background thread (an
  // allocation that failed there is an invalid_argument naming batch_size).
  // In a child process after fork() it continues from the state after the
  // last batch the parent returned, on threads of its own.
  [[nodiscard]] std::shared_ptr<const Batch> Next();
  // Passes shared by several threads: BeginPass() names the pass that starts
  // (and forgets which epoch last ran out); Next(pass) returns nullptr once
  // that pass is over (its epoch ran out, or SetEpoch / Restore moved the
  // loader), so every thread of a pass sees its end, and only the first to
  // see it moves the loader to the next epoch.
  [[nodiscard]] Index BeginPass();
  [[nodiscard]] std::shared_ptr<const Batch> Next(Index pass);
  // The current pass, as BeginPass would name it, without beginning one (it
  // changes each time the loader moves: a pass runs out, SetEpoch, Restore).
  [[nodiscard]] Index pass() const;

  // Moves to the start of `epoch` (see above). Throws invalid_argument
  // naming `epoch` above kMaxEpoch. REQUIRES no Next() running.
  void SetEpoch(std::uint64_t epoch);
  // Continues from `state` (this consumer's own, or a merged one), or from
  // ResumeStateFor(states, consumers(), consumer()): the rules of the
  // constructor. REQUIRES no Next() running.
  void Restore(LoaderState state);
  void Restore(std::span<const LoaderState> states);

  // The epoch the next batch comes from (State().epoch).
  [[nodiscard]] std::uint64_t standing_epoch() const;
  // The epoch of the current pass; once a pass ran out (and until the next
  // begins, SetEpoch moves or Restore), the epoch it ran, so SetEpoch(epoch()
  // + 1) after a pass is the next epoch too.
  [[nodiscard]] std::uint64_t epoch() const;

  // The state after the last batch Next() returned (or the starting state).
  [[nodiscard]] LoaderState State() const;

  // Entries in this consumer's list this epoch (documents or head pieces).
  [[nodiscard]] Index ListSize() const;
  // The options of the epoch the loader stands in (options.epoch is that
  // epoch). This reference, source(), file_policy() and train_plan() belong to
  // the current epoch: valid until the loader moves to another (a pass runs
  // out, SetEpoch, Restore).
  [[nodiscard]] const LoaderOptions& options() const;
  [[nodiscard]] Index consumers() const;
  [[nodiscard]] Index consumer() const;
  // The source of the epoch the loader stands in; shared_source() is the same
  // source, kept alive by the pointer (a mixture's window view).
  [[nodiscard]] const TokenSource& source() const;
  [[nodiscard]] std::shared_ptr<const TokenSource> shared_source() const;
  // Documents dropped so far (oversize drop), in this consumer's stream
  // (equal steps: in the epoch's stream).
  [[nodiscard]] Index dropped() const;
  // With shard_files: the Whale rule applied to the parts (which one, why,
  // and its warning); nullopt without file sharding.
  [[nodiscard]] const std::optional<WhaleChoice>& file_policy() const;
  // Equal steps: the plan of the epoch the loader stands in (null
  // otherwise); valid until the loader moves to another epoch. Its
  // StateAt(n) is the state of a rank after n batches, whichever worker
  // produced them.
  [[nodiscard]] const TrainPlan* train_plan() const;

 private:
  // The epoch's machinery (internal/loader_impl.h), the pass and the epoch
  // that last ran out, behind one mutex; defined in loader.cc.
  class Epochs;
  std::unique_ptr<Epochs> epochs_;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_LOADER_H_
