// TrainPlan: training with equal steps. One global pack plan, dealt to ranks.
//
// A data-parallel training loop runs a collective every step, so every rank
// must run the same number of steps, yet every document must be trained on
// exactly once per epoch. Packing per rank cannot promise both (ranks end up
// with different pack counts). The plan packs globally and then deals:
//
//   order   the epoch's documents in one global order: the keyed Permutation
//           of (seed, epoch) (shardkit/sharding/permutation.h), or 0..N-1.
//   pack    one StreamingPacker (shardkit/packing/packing.h) of capacity
//           seq_len over that order (any algorithm, buffer and budget:
//           tokens, images, sequences; oversize split or drop-and-count).
//           Its packs, in the order they close, are the epoch's pack stream:
//           pack g = 0, 1, 2, ... It depends on the documents and the packing
//           options only, never on the world size or the batch shape.
//   deal    global step s takes the R = world_size * rows_per_rank packs
//           [position + s R, position + (s + 1) R) of the stream
//           (rows_per_rank = batch_size * micro_batches) and deals them so
//           that every rank gets exactly rows_per_rank rows: packs by
//           decreasing cost (ties: lower stream index), each to the cheapest
//           rank with a free row (ties: lower rank); a rank's rows are then in
//           stream order, filler rows last. Cost: tokens, or the sum of the
//           squared piece lengths (attention work with a block-diagonal mask).
//
// Modes, at the end of the epoch's stream (P packs):
//   pad         num_steps = ceil((P - position) / R); the last step is
//               completed with filler rows (no piece; the loader masks them).
//               Only the last step can hold filler.
//   drop        num_steps = floor((P - position) / R); the packs of the final
//               partial step are dropped and counted (dropped_packs,
//               dropped_tokens), never silently.
//   continuous  no epoch boundary: the pack stream of epoch e + 1 follows the
//               one of epoch e (each epoch's packer is finished at its end),
//               so no step holds filler. num_steps counts the steps that start
//               inside this epoch's stream; the last of them may end with the
//               first packs of the following epoch(s). Step s exists for
//               every s >= 0 (the stream never ends) unless the corpus yields
//               no pack at all.
//
// State: the position of a run is (epoch, position), position = the number of
// packs of that epoch's stream already dealt. It is the same on every rank
// and does not depend on the world size or batch shape, so a plan built from
// it with another world size, batch size or worker count continues the epoch
// with every remaining piece exactly once (elastic resume by arithmetic).
// Reaching pack `position` replays the packer from the start of the epoch:
// O(documents before it) at planning speed (docs/benchmarks.md).
//
// Cost: construction runs the whole epoch through the packer and the deal
// once (it needs P to know num_steps) in O(N log buffer) time and
// O(buffer + world_size * rows_per_rank) memory plus at most kCheckpoints
// packer checkpoints (a shuffled plan of 2^21 documents or more also keeps a
// copy of the lengths, 2 bytes a document, for its shuffled reads);
// Step(rank, s) replays from the nearest checkpoint at or before s
// (O(N / kCheckpoints) packed documents). A Reader streams the steps of one
// rank in order at planning speed.
//
// A loader reading one rank's steps builds its plan Deferred and reads it
// with ReadOnce: one pass deals and counts every step and hands out the
// rank's rows, in the same memory. Every plan first hashes and checks every
// length (its stream fingerprint) unless its documents are lengths_bound (a
// mixture window, whose data fingerprint binds them): a Deferred plan of
// such documents is made in O(1) and reads only the packer's buffer and the
// first step's packs before that step; num_steps is known at the epoch's end.
//
// Thread-safety: a TrainPlan is immutable after construction (share freely;
// a Deferred plan completes itself once, under a once flag);
// a Reader is used by one thread at a time. The lengths a plan reads
// (TrainDocuments) must outlive it and its readers.
#ifndef SHARDKIT_LOADER_TRAIN_PLAN_H_
#define SHARDKIT_LOADER_TRAIN_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/packing/context_parallel.h"
#include "shardkit/packing/packing.h"
#include "shardkit/packing/rank_balance.h"

namespace shardkit {

struct HostPlanOptions;  // host_plan.h
struct HostPlanInfo;
namespace internal {
class LazyCompactLengths;  // internal/pack_stream.h
}  // namespace internal

enum class TrainMode { kPad, kContinuous, kDrop };
// "pad", "continuous", "drop"; Parse throws invalid_argument naming `mode`.
[[nodiscard]] TrainMode ParseTrainMode(std::string_view name);
[[nodiscard]] std::string_view TrainModeName(TrainMode mode);
[[nodiscard]] std::vector<std::string_view> TrainModeNames();  // every name, in enum order

// The documents a plan reads: document d has length(d) tokens and images(d)
// images (images empty: none). REQUIRES: both defined on [0, count).
struct TrainDocuments {
  Index count = 0;
  std::function<Index(Index)> length;
  std::function<Index(Index)> images;
  // Optional: the same values as arrays (FromSpans and FromOffsets set them).
  // The plan then reads them directly, with no call per document, and
  // prefetches ahead of the shuffled order (a large corpus's lengths do not
  // fit the caches). offsets_data: count + 1 offsets, length(d) =
  // offsets_data[d + 1] - offsets_data[d] (used when length_data is null).
  const Index* length_data = nullptr;
  const Index* images_data = nullptr;
  const std::int64_t* offsets_data = nullptr;
  Index offsets_limit = 0;  // offsets_data's values are clamped to [0, offsets_limit]
  // Or a Megatron index's byte pointers (count little-endian int64, not
  // aligned): offset d = pointer[d] >> pointer_shift, offset count =
  // offsets_limit, clamped as offsets_data's (FromSequencePointers).
  const char* pointer_bytes = nullptr;
  int pointer_shift = 0;
  // What identifies the documents beyond their lengths: for a token source,
  // its data fingerprint (FingerprintData(source).hash, loader_state.h, which
  // hashes a sample of the tokens); 0 when only the lengths are known. Mixed
  // into the stream fingerprint, so a state of another data set with the
  // same lengths is refused.
  std::uint64_t identity = 0;
  // Set when `identity` (non-zero) binds every length (a selected view's
  // data fingerprint, TrainDocumentsOf) and each length is in [0,
  // length_bound]: the stream fingerprint then hashes the count and the
  // identity instead of every length, and the plan reads no length before
  // its first step (Prepare is O(1); the epoch's lengths are read as the
  // pack stream reaches them). The position bound is then
  // count * (1 + length_bound / seq_len).
  bool lengths_bound = false;
  Index length_bound = 0;

  // Document d's length and images, from the arrays when set.
  [[nodiscard]] Index Length(Index d) const {
    if (length_data) return length_data[d];
    if (offsets_data) {
      // Clamped: a mapped offsets file may have changed since it was checked
      // (token_source.h); the length is then in [0, offsets_limit].
      return std::max<Index>(0, std::clamp<Index>(offsets_data[d + 1], 0, offsets_limit) -
                                    std::clamp<Index>(offsets_data[d], 0, offsets_limit));
    }
    if (pointer_bytes) {
      const Index next = d + 1 == count ? offsets_limit : Pointer(d + 1);
      return std::max<Index>(0, next - Pointer(d));
    }
    return length(d);
  }
  // Offset d < count of pointer_bytes, clamped to [0, offsets_limit].
  [[nodiscard]] Index Pointer(Index d) const {
    std::int64_t v;
    std::memcpy(&v, pointer_bytes + 8 * d, 8);
    return std::clamp<Index>(v >> pointer_shift, 0, offsets_limit);
  }
  [[nodiscard]] Index Images(Index d) const {
    if (images_data) return images_data[d];
    return images ? images(d) : 0;
  }

  // A view of caller-owned arrays (images may be empty); they must outlive
  // every plan made from this. Throws invalid_argument naming `images` when
  // its size differs from lengths'.
  static TrainDocuments FromSpans(std::span<const Index> lengths,
                                  std::span<const Index> images = {});
  // A view of caller-owned document offsets (num_documents + 1 entries, in
  // [0, limit]); lengths are offsets[d + 1] - offsets[d] with each offset
  // clamped to [0, limit] and the difference to >= 0, so offsets that change
  // under the plan (a mapped file edited in place) give lengths in
  // [0, limit], never negative or past the tokens. Throws invalid_argument
  // naming `offsets` when the span is empty or `limit` is negative.
  static TrainDocuments FromOffsets(std::span<const std::int64_t> offsets,
                                    Index limit = std::numeric_limits<Index>::max());
  // A view of a Megatron index's byte pointers (TokenSource::
  // ContiguousSequencePointers: `count` documents of one sequence each,
  // `limit` tokens in all); lengths clamped as FromOffsets'. The bytes must
  // outlive every plan made from this.
  static TrainDocuments FromSequencePointers(const char* pointers, int shift, Index count,
                                             Index limit);
};

struct TrainOptions {
  Index seq_len = 0;        // tokens per row (pack capacity); REQUIRES >= 1
  Index batch_size = 0;     // rows per micro-batch; REQUIRES >= 1
  Index world_size = 1;     // data-parallel ranks; REQUIRES >= 1
  Index micro_batches = 1;  // micro-batches (gradient accumulation) per step
  TrainMode mode = TrainMode::kPad;
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  Index position = 0;  // packs of the epoch's stream already dealt (resume)
  PackAlgorithm algorithm = PackAlgorithm::kBestFitDecreasing;
  std::optional<Index> buffer;           // packer buffer (items); default 1024
  std::optional<Index> max_images;       // images per row
  std::optional<Index> max_sequences;    // pieces per row
  Oversize oversize = Oversize::kSplit;  // split | drop (error is refused)
  CostModel cost = CostModel::kTokens;
  // Context parallelism (shardkit/packing/context_parallel.h): with a
  // granularity g > 1 (cp.size > 1, or cp.granularity set) the packer packs
  // every document at its padded length RoundUp(length, g), so a row padded
  // per piece still fits seq_len (CpPaddedTokens(row, g) <= seq_len; seq_len
  // a multiple of g; split pieces are seq_len long, multiples of g); the
  // pieces a plan delivers carry their real lengths. The stream depends on g
  // only (in the stream fingerprint when g > 1), so a run resumes with another
  // CP size under the same cp.granularity. With cost kSquaredLengths the deal
  // balances CpRowCost (the causal work of the busiest CP rank of the row)
  // instead of the squared lengths. Defaults: no CP, the plan as before.
  ContextParallelOptions cp;
};

// The packer options of the plan's pack stream: capacity seq_len, algorithm,
// buffer, max_images, max_sequences, oversize (every PackOptions field that
// TrainOptions has by name, option_fields.h; compat stays none). The one
// mapping from a TrainOptions to the packing engine (the per-rank loader
// packs with it too).
[[nodiscard]] PackOptions TrainPackOptions(const TrainOptions& options);

// Where a run stands: the same on every rank, independent of world size and
// batch shape. `stream` fingerprints the pack stream's inputs (the documents'
// lengths and TrainDocuments::identity, the packing options); a plan refuses
// a state made for another stream, naming `state` and saying the data (or its
// packing) differs, and a position beyond what the epoch's stream can hold
// (one pack per document plus one per seq_len tokens) in O(1), before it
// replays anything.
struct TrainState {
  std::uint64_t epoch = 0;
  Index position = 0;
  std::uint64_t stream = 0;
  friend bool operator==(const TrainState&, const TrainState&) = default;
};

// The state as one small sealed JSON object, the same on every rank:
//   {"version": 3, "kind": "train_plan", "epoch": E, "position": P,
//    "stream": "<16 hex digits>", "checksum": "<16 hex digits>"}
// "checksum" seals the other fields (shardkit/base/json.h: StateChecksum), so
// an edited epoch, position or stream is refused before use. FromJson reads
// with the strict reader of base/json.h (keys in any order, any whitespace; a
// duplicate key, an unknown or missing one, another kind, a version other
// than 3, a negative position, an epoch above kMaxEpoch or a checksum that
// does not match are refused with invalid_argument naming `state`). Older
// versions are refused naming the version: 1 (no checksum; its stream hashed
// the lengths only), 2 (its stream was another hash of the same fields, so
// its value would not match this shardkit's plan of the same data).
inline constexpr int kTrainStateVersion = 3;
[[nodiscard]] std::string TrainStateToJson(const TrainState& state);
[[nodiscard]] TrainState TrainStateFromJson(std::string_view json);

// One rank's rows of one step.
struct TrainStep {
  Index step = 0;
  // rows_per_rank rows; a row's pieces: item = document, start, length,
  // images. A filler row is empty (pad mode, last step only).
  std::vector<std::vector<Piece>> rows;
  std::vector<std::uint64_t> row_epochs;  // epoch of each row's pack
  std::vector<Index> row_packs;           // stream index of each row's pack; -1 filler
  Index tokens = 0;                       // real tokens of this rank in this step
  Index filler_rows = 0;
  double cost = 0;       // this rank's cost
  double imbalance = 0;  // the step's heaviest rank cost / mean - 1 (0 if empty)
};

// What a plan is and what it delivers, from the construction pass.
struct TrainSummary {
  Index num_steps = 0;
  Index packs = 0;            // packs of this epoch's stream dealt by the plan
  Index stream_packs = 0;     // packs of the whole epoch's stream (P)
  Index tokens = 0;           // tokens in the packs dealt by the plan
  Index pieces = 0;           // pieces in the packs dealt by the plan
  Index split_documents = 0;  // documents cut into pieces (whole epoch)
  Index dropped = 0;          // documents dropped as oversize (whole epoch)
  Index dropped_packs = 0;    // drop mode: packs of the final partial step
  Index dropped_tokens = 0;
  Index filler_rows = 0;      // pad mode: rows of the last step without a pack
  Index next_epoch_rows = 0;  // continuous: rows of the last step from later epochs
  // ceil(tokens / seq_len): no plan of these tokens uses fewer rows.
  Index lower_bound = 0;
  double max_step_imbalance = 0;       // over all steps
  double max_full_step_imbalance = 0;  // over steps without filler
  double mean_step_imbalance = 0;      // over steps without filler
  TrainState end;                      // the state after the last step
};

// The checks of an audit: the plan replayed from the start of the epoch's
// stream, every piece of every rank of every step accounted.
struct TrainAudit {
  bool exactly_once = false;  // every piece of every non-dropped document once
  bool equal_steps = false;   // every rank every step exactly rows_per_rank rows
  bool filler_last_only = false;
  Index steps = 0, world_size = 0, rows_per_rank = 0;
  Index documents = 0, dropped = 0;  // dropped: documents (oversize drop)
  Index dropped_packs = 0, dropped_tokens = 0;
  Index filler_rows = 0, tokens = 0, lower_bound = 0;
  // (rows dealt - lower_bound) / lower_bound: padding over the lower bound
  // (filler rows included); 0 without tokens.
  double padding_over_bound = 0;
  double max_full_step_imbalance = 0, max_step_imbalance = 0;
  std::string error;  // the first violation, in words; empty when all hold
};

class TrainPlan {
 public:
  static constexpr Index kCheckpoints = 64;

  // Validates and runs the construction pass. Throws invalid_argument naming
  // seq_len, batch_size, world_size, micro_batches, buffer, max_images,
  // max_sequences, oversize (error is refused), epoch (above kMaxEpoch),
  // position (outside [0, P]: beyond the bound of TrainState's comment in
  // O(1), before the replay; else after a replay that stays in the epoch),
  // lengths / images (a negative value, or totals that overflow an Index),
  // or batch_size when a step's slots overflow an Index.
  TrainPlan(TrainDocuments documents, TrainOptions options);
  // Continues from a state: options.epoch and options.position are taken
  // from it. Throws invalid_argument naming `state` when it was made for
  // another stream (documents, their identity, or packing options: "the data
  // differs"), and "state: epoch: ..." / "state: position: ..." as above.
  TrainPlan(TrainDocuments documents, TrainOptions options, const TrainState& state);
  // For a loader, which reads one rank's steps once, in order: validates
  // (and checks `state`) as the constructors do, and leaves the construction
  // pass to the reader of ReadOnce, which deals and counts every step as it
  // goes, so that the epoch is planned once instead of twice (once to count
  // the steps, once to read them). num_steps(), summary() and StateAt() are
  // known when that reader has reached the end (StateAt(s) also for every
  // step s it has dealt); asked before, they run the construction pass then,
  // once. Read() and Step() run it first. Thread-safe between the reader and
  // those calls.
  [[nodiscard]] static std::unique_ptr<TrainPlan> Deferred(TrainDocuments documents,
                                                           TrainOptions options,
                                                           const std::optional<TrainState>& state);
  ~TrainPlan();
  TrainPlan(TrainPlan&&) noexcept;
  TrainPlan& operator=(TrainPlan&&) noexcept;

  [[nodiscard]] const TrainOptions& options() const { return options_; }
  [[nodiscard]] Index num_documents() const { return documents_.count; }
  [[nodiscard]] Index num_steps() const;
  [[nodiscard]] Index rows_per_rank() const { return rows_per_rank_; }
  // The step of the epoch that this plan's step 0 is: floor(position / R),
  // R = world_size * rows_per_rank (0 from the epoch's start). A resumed run
  // numbers its steps first_step(), first_step() + 1, ... and counts
  // epoch_steps() = first_step() + num_steps() in its epoch, so a schedule
  // keyed on the step neither jumps back nor shortens. Resumed on the same
  // world size and batch shape these are the uninterrupted run's numbers;
  // on another shape the packs before the state count as floor(position / R)
  // steps (continuous mode: also an epoch entered a few packs in).
  [[nodiscard]] Index first_step() const {
    return options_.position / (options_.world_size * rows_per_rank_);
  }
  [[nodiscard]] Index epoch_steps() const { return first_step() + num_steps(); }
  [[nodiscard]] const TrainSummary& summary() const;

  // The state before step s (s = num_steps: the state after the plan).
  // Throws out_of_range naming `step` outside [0, num_steps].
  [[nodiscard]] TrainState StateAt(Index step) const;
  // The stream fingerprint of this plan's documents and packing options.
  [[nodiscard]] std::uint64_t stream() const { return stream_; }

  // The documents of the epoch's order the pack stream has read when
  // `position` packs of it have been taken (the packer reads a document only
  // when it needs one to close a pack). A stream whose first
  // DocumentsReadAt(p) documents are the same, in the same order, has the
  // same first p packs and the same packer state after them: what a mixture
  // loader resumed with new weights keeps (mixture_loader.h). Replays the
  // packer from the epoch's start: O(documents read). Throws out_of_range
  // naming `position` outside [0, P] (P: packs of the epoch's stream).
  [[nodiscard]] Index DocumentsReadAt(Index position) const;

  // Rank's rows of step s. Throws out_of_range naming `rank` or `step`
  // (outside [0, num_steps); continuous: any s >= 0 when the stream is not
  // empty).
  [[nodiscard]] TrainStep Step(Index rank, Index step) const;

  // Streams the steps of one rank (rank < 0: every rank's step in
  // `all`), from step `first`.
  class Reader;
  [[nodiscard]] std::unique_ptr<Reader> Read(Index rank, Index first = 0) const;
  // The steps of one rank from step `first`, dealing and counting every step
  // from the plan's start (steps before `first` included) and stopping after
  // the plan's last step (also in continuous mode); when it reaches the end,
  // a Deferred plan learns its totals from it. One such reader per plan.
  // Throws out_of_range naming `rank`, or `step` for a negative `first`.
  [[nodiscard]] std::unique_ptr<Reader> ReadOnce(Index rank, Index first) const;
  // ReadOnce through the host's shared plan (host_plan.h): local rank 0
  // runs the one pass and writes every rank's steps to a sealed shared-memory
  // file; the other local ranks map it (no planning). Delivers exactly what
  // ReadOnce delivers, and the plan learns its totals (num_steps, summary)
  // from the file. `info` (optional) says how the steps were obtained. Throws
  // as ReadOnce, invalid_argument naming local_rank (negative) or naming the
  // file when local rank 0's file does not appear within the timeout, or
  // when it cannot be written.
  [[nodiscard]] std::unique_ptr<Reader> ReadShared(Index rank, Index first,
                                                   const HostPlanOptions& host,
                                                   HostPlanInfo* info = nullptr) const;

  // A hash of the whole plan (stream, world size, batch shape, mode, cost,
  // epoch, position, library version): ranks compare it once at start.
  [[nodiscard]] std::uint64_t Fingerprint() const;
  // The parameters in words, for error messages.
  [[nodiscard]] std::string Describe() const;

  // Replays the plan and checks it against the documents (O(pieces) memory:
  // a check, not a hot path). Continuous plans are checked over this epoch.
  [[nodiscard]] TrainAudit Audit() const;

  struct Checkpoint;  // internal

 private:
  friend class Reader;
  struct Lazy;  // a Deferred plan's once-only construction
  TrainPlan(TrainDocuments documents, TrainOptions options, const TrainState* state, bool deferred);
  void Prepare();  // validation, the stream fingerprint and max_packs_
  void CheckPositionBound() const;
  void Construct() const;
  void EnsureBuilt() const;
  void Publish(TrainSummary summary) const;

  TrainDocuments documents_;
  TrainOptions options_;
  Index rows_per_rank_ = 1;
  std::uint64_t stream_ = 0;
  Index max_packs_ = 0;  // an upper bound on the packs of an epoch's stream
  // What errors about the epoch and position name: the arguments, or the
  // state's fields when the plan continues from a state.
  std::string_view epoch_param_ = "epoch";
  std::string_view position_param_ = "position";
  // Written once: by the constructor, or for a Deferred plan under Lazy's
  // once flag (by Construct or Publish).
  mutable TrainSummary summary_;
  mutable Index checkpoint_stride_ = 1;                                 // steps between checkpoints
  mutable std::vector<std::shared_ptr<const Checkpoint>> checkpoints_;  // step k * stride
  std::unique_ptr<Lazy> lazy_;
  // The lengths' compact copy the streams read in shuffled order (from
  // CompactLengths::kFrom documents on, made on first use), or null.
  std::shared_ptr<const internal::LazyCompactLengths> compact_;
};

class TrainPlan::Reader {
 public:
  ~Reader();
  // The next step of the rank; false after the last step (continuous: never,
  // unless the stream is empty). all: every rank's step (rank = -1 reader).
  bool Next(TrainStep* step);
  // Passes over the next step (dealt, not copied out); false after the last.
  bool Skip();
  bool NextAll(std::vector<TrainStep>* all);
  [[nodiscard]] Index step() const;  // the step Next returns next

 private:
  friend class TrainPlan;
  struct Impl;
  explicit Reader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_TRAIN_PLAN_H_
