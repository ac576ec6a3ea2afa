#include "shardkit/loader/loader.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "shardkit/base/hash.h"
#include "shardkit/base/piece.h"
#include "shardkit/loader/host_plan.h"
#include "shardkit/loader/internal/loader_impl.h"
#include "shardkit/sharding/permutation.h"
#include "shardkit/sharding/shard_plan.h"
#include "shardkit/sharding/whale.h"

namespace shardkit {

namespace {

// The remaining order of an epoch: head pieces, then the global order
// positions [position, D) without `done`. Suffix lookups are incremental for
// non-decreasing j (the way a consumer reads), O(1) amortised.
class RemainingOrder {
 public:
  RemainingOrder(const std::vector<Piece>* head, Index position, const std::vector<Index>* done,
                 Index num_documents)
      : head_(head), position_(position), done_(done), num_documents_(num_documents) {}

  [[nodiscard]] Index head_size() const { return static_cast<Index>(head_->size()); }
  [[nodiscard]] Index size() const {
    return head_size() + num_documents_ - position_ - static_cast<Index>(done_->size());
  }
  // The global order position of suffix entry j (0-based among the suffix).
  Index SuffixPosition(Index j) {
    if (j < last_j_) idx_ = 0;
    last_j_ = j;
    Index p = position_ + j + static_cast<Index>(idx_);
    while (idx_ < done_->size() && (*done_)[idx_] <= p) {
      ++idx_;
      ++p;
    }
    return p;
  }

 private:
  const std::vector<Piece>* head_;
  Index position_;
  const std::vector<Index>* done_;
  Index num_documents_;
  Index last_j_ = 0;
  std::size_t idx_ = 0;
};

void CheckFingerprint(const LoaderState& a, const LoaderState& b, const char* what) {
  const bool data_known = a.data_hash && b.data_hash;
  if (a.num_documents != b.num_documents || a.seq_len != b.seq_len || a.shuffle != b.shuffle ||
      a.seed != b.seed || a.shard_files != b.shard_files ||
      (data_known && (a.num_tokens != b.num_tokens || a.data_hash != b.data_hash))) {
    std::string detail = "num_documents " + Str(a.num_documents) + " vs " + Str(b.num_documents);
    if (data_known) {
      detail += ", num_tokens " + Str(*a.num_tokens) + " vs " + Str(*b.num_tokens) +
                ", data_hash " + HexDigest(*a.data_hash) + " vs " + HexDigest(*b.data_hash);
    }
    detail += ", seq_len " + Str(a.seq_len) + " vs " + Str(b.seq_len) +
              "; shuffle, seed and shard_files must match too";
    ThrowInvalid("state", std::string(what) + " (" + detail + ")");
  }
}

}  // namespace

namespace {

// The document piece a packer piece stands for (images 0, as head pieces
// carry none): itself, or its part of the head piece it refers to.
Piece Resolve(const Piece& item, const std::vector<Piece>& head) {
  if (item.item >= 0) return Piece{.item = item.item, .length = item.length, .start = item.start};
  const Piece& ref = head[static_cast<std::size_t>(-item.item - 1)];
  return Piece{.item = ref.item, .length = item.length, .start = ref.start + item.start};
}

// Points a row's outputs (RowOutput, CpRowOutput) at the batch's arrays from
// `offset` on.
template <typename Out>
Out RowAt(Batch* batch, Index offset) {
  Out out;
  out.input_ids = batch->input_ids.data() + offset;
  out.labels = batch->labels.data() + offset;
  out.position_ids = batch->position_ids.data() + offset;
  out.document_ids = batch->document_ids.data() + offset;
  return out;
}

// Appends the pieces of row `row` to the batch's piece lists.
void AddPieces(std::span<const Piece> pieces, Index row, Batch* batch) {
  for (const Piece& p : pieces) {
    batch->documents.push_back(p.item);
    batch->starts.push_back(p.start);
    batch->lengths.push_back(p.length);
    batch->rows.push_back(static_cast<std::int32_t>(row));
  }
}

}  // namespace

namespace internal {

// ---------------------------------------------------------------------------
// A consumer's list: entry k -> a head piece or a document.

class ConsumerList {
 public:
  ConsumerList(const TokenSource& source, const LoaderOptions& o, Index consumers, Index consumer,
               const LoaderState& base)
      : base_(base),
        order_(source.num_documents(), o.seed, base.epoch),
        remaining_(&base_.head, base_.position, &base_.done, source.num_documents()),
        shuffle_(o.shuffle),
        consumers_(consumers),
        consumer_(consumer),
        files_(o.shard_files) {
    if (!files_) {
      const Index s = remaining_.size();
      size_ = s > consumer ? (s - consumer - 1) / consumers + 1 : 0;
      return;
    }
    ShardPlan plan = WhalePlan(source.num_parts(), consumers, o.whale_unbalanced_io_slicing,
                               o.whale_drop_last_files, o.seed, base.epoch);
    Shard shard = plan.GetShard(consumer);
    Index total = 0;
    for (Index k = 0; k < shard.size(); ++k) {
      const Index part = shard[k];
      part_first_.push_back(source.PartBegin(part));
      part_offset_.push_back(total);
      total += source.PartBegin(part + 1) - source.PartBegin(part);
    }
    part_offset_.push_back(total);
    size_ = total;
    file_order_ =
        Permutation(total, o.seed ^ Mix64(static_cast<std::uint64_t>(consumer) + 1), base.epoch);
  }

  [[nodiscard]] Index size() const { return size_; }

  // Entry k: sets *head_index (>= 0 for a head piece) or returns a document.
  Index Entry(Index k, Index* head_index) {
    *head_index = -1;
    if (files_) {
      const Index j = shuffle_ ? file_order_.Forward(k) : k;
      auto it = std::upper_bound(part_offset_.begin(), part_offset_.end(), j) - 1;
      const std::size_t f = static_cast<std::size_t>(it - part_offset_.begin());
      return part_first_[f] + (j - part_offset_[f]);
    }
    const Index i = consumer_ + k * consumers_;
    if (i < remaining_.head_size()) {
      *head_index = i;
      return -1;
    }
    const Index p = remaining_.SuffixPosition(i - remaining_.head_size());
    return shuffle_ ? order_.Forward(p) : p;
  }

 private:
  const LoaderState& base_;
  Permutation order_;
  RemainingOrder remaining_;
  bool shuffle_;
  Index consumers_, consumer_;
  bool files_;
  Index size_ = 0;
  std::vector<Index> part_first_, part_offset_;
  Permutation file_order_{0, 0, 0};
};

// ---------------------------------------------------------------------------
// The sequential part: read entries, push them into the packer, pop packs.

// The lengths files a planner reads, checked unchanged since they were
// opened (token_source.h) before they are read in each batch. One file (or
// a view: its sources) is checked once per batch; a source of many files
// checks each part the first time the batch reads one of its lengths, so a
// batch costs one fstat per part it reads, not one per file of the source.
class LengthsGuard {
 public:
  explicit LengthsGuard(const TokenSource& source)
      : source_(source),
        parts_(source.selected_from().empty() && source.num_parts() > 1 ? source.num_parts() : 0),
        checked_in_(parts_ > 0 ? std::make_unique<std::atomic<std::uint64_t>[]>(
                                     static_cast<std::size_t>(parts_))
                               : nullptr) {}

  // Begins a batch's reads.
  void NextBatch() {
    if (parts_ == 0) {
      source_.CheckLengthsUnchanged();
    } else {
      batch_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // DocumentLength(d), its part's lengths file checked first in this batch.
  // Atomic: the plan's length calls may come from a user's thread too
  // (TokenLoader::train_plan()).
  Index Length(Index d) const {
    if (parts_ > 0) {
      const Index part = source_.PartIndex(d);
      std::atomic<std::uint64_t>& last = checked_in_[static_cast<std::size_t>(part)];
      const std::uint64_t batch = batch_.load(std::memory_order_relaxed);
      if (last.load(std::memory_order_relaxed) != batch) {
        source_.CheckLengthsUnchanged(part);
        last.store(batch, std::memory_order_relaxed);
      }
    }
    return source_.DocumentLength(d);
  }

 private:
  const TokenSource& source_;
  Index parts_;                                               // 0: checked whole once per batch
  std::unique_ptr<std::atomic<std::uint64_t>[]> checked_in_;  // per part: a batch number
  std::atomic<std::uint64_t> batch_{1};
};

class Planner {
 public:
  Planner(const TokenSource& source, const LoaderOptions& o, Index consumers, Index consumer,
          LoaderState base, Index read, Index batches, std::optional<PackerState> packer)
      : source_(source),
        lengths_(source),
        batch_size_(o.batch_size),
        base_(std::move(base)),
        list_(source, o, consumers, consumer, base_),
        packer_(MakePacker(o, std::move(packer))),
        read_(read),
        batches_(batches) {
    lengths_.NextBatch();  // the constructor's reads (the list, the plan's preparation)
    if (o.equal_steps) {
      StartTrainPlan(o);
      return;
    }
    if (read_ < 0 || read_ > list_.size()) {
      ThrowInvalid("state", "read = " + Str(read_) + " is outside [0, " + Str(list_.size()) +
                                "] (this consumer's list)");
    }
  }

  // Equal steps: the global plan from base_.train (or the epoch's start);
  // this worker reads the rank's steps worker, worker + K, ...
  void StartTrainPlan(const LoaderOptions& o) {
    TrainOptions t = LoaderTrainOptions(o);
    t.epoch = base_.epoch;
    // The plan's stream fingerprint covers the data (its content sample).
    TrainDocuments docs = TrainDocumentsOf(source_, base_.data_hash.value_or(0));
    if (docs.length) docs.length = [this](Index d) { return lengths_.Length(d); };
    // One pass plans the epoch: the reader deals every step (this worker's
    // and the others'), counts the plan's totals as it goes and hands out
    // this rank's rows; the plan learns num_steps when it reaches the end.
    train_ = TrainPlan::Deferred(std::move(docs), t, base_.train);
    base_.epoch = train_->options().epoch;
    stride_ = o.num_workers;
    if (o.share_plan) {
      // One planner per host: local rank 0's worker 0 (host_plan.h).
      HostPlanOptions host = HostPlanOptionsFromEnvironment();
      host.local_rank = o.local_rank * o.num_workers + o.worker;
      reader_ = train_->ReadShared(o.rank, o.worker, host);
    } else {
      reader_ = train_->ReadOnce(o.rank, o.worker);
    }
    ReadAhead();
  }

  // Reads this worker's next step into ahead_: a state names the step a
  // consumer stands before, so the planner knows it exists (or that the plan
  // is over) before it hands out the batch before it.
  void ReadAhead() {
    has_ahead_ = reader_->Next(&ahead_);
    next_step_ = has_ahead_ ? ahead_.step : train_->num_steps();
  }

  static PackOptions Options(const LoaderOptions& o) {
    return TrainPackOptions(LoaderTrainOptions(o));
  }
  static StreamingPacker MakePacker(const LoaderOptions& o, std::optional<PackerState> state) {
    if (state) return StreamingPacker(Options(o), std::move(*state));
    return StreamingPacker(Options(o));
  }

  // Plans the next batch; false at the end of the epoch. The plan reads
  // lengths from the source's mapped offsets / index files: one changed
  // since it was opened is refused first (token_source.h).
  bool Next(Plan* plan) {
    lengths_.NextBatch();
    if (train_) return NextStep(plan);
    while (packer_.pending() < batch_size_) {
      if (read_ < list_.size()) {
        Index head_index;
        const Index doc = list_.Entry(read_++, &head_index);
        if (head_index >= 0) {
          packer_.Push(-(head_index + 1), base_.head[static_cast<std::size_t>(head_index)].length);
        } else {
          packer_.Push(doc, lengths_.Length(doc));
        }
      } else if (!finished_) {
        packer_.Finish();
        finished_ = true;
      } else {
        break;
      }
    }
    if (packer_.pending() == 0) return false;
    plan->rows.clear();
    Pack pack;
    while (static_cast<Index>(plan->rows.size()) < batch_size_ && packer_.Pop(&pack)) {
      std::vector<Piece> row = std::move(pack.pieces);
      for (Piece& piece : row) {
        const Piece ref = Resolve(piece, base_.head);
        piece.item = ref.item;
        piece.start = ref.start;
      }
      plan->rows.push_back(std::move(row));
    }
    plan->epoch = base_.epoch;
    plan->index = batches_++;
    plan->step = plan->index;
    return true;
  }

  bool NextStep(Plan* plan) {
    if (!has_ahead_) return false;
    plan->rows = std::move(ahead_.rows);
    plan->epoch = base_.epoch;
    plan->index = ahead_.step;
    plan->step = train_->first_step() + ahead_.step;
    bool more = true;
    for (Index k = 1; k < stride_ && more; ++k) more = reader_->Skip();  // other workers' steps
    if (more) {
      ReadAhead();
    } else {
      has_ahead_ = false;
      next_step_ = train_->num_steps();
    }
    ++batches_;
    return true;
  }

  [[nodiscard]] PlannerSnapshot Take() const {
    if (train_) return {0, batches_, {}, train_->StateAt(next_step_)};
    return {read_, batches_, packer_.State(), std::nullopt};
  }
  [[nodiscard]] const LoaderState& base() const { return base_; }
  [[nodiscard]] Index list_size() const { return train_ ? train_->num_steps() : list_.size(); }
  [[nodiscard]] Index dropped() const {
    return train_ ? train_->summary().dropped : packer_.State().dropped;
  }
  [[nodiscard]] const TrainPlan* train() const { return train_.get(); }

 private:
  const TokenSource& source_;
  LengthsGuard lengths_;  // before train_: the plan's length calls go through it
  Index batch_size_;
  LoaderState base_;  // the plan part and fingerprint; list_ points into it
  ConsumerList list_;
  StreamingPacker packer_;
  Index read_, batches_;
  bool finished_ = false;
  std::unique_ptr<TrainPlan> train_;  // equal steps
  std::unique_ptr<TrainPlan::Reader> reader_;
  TrainStep ahead_;  // this worker's next step, when has_ahead_
  bool has_ahead_ = false;
  Index stride_ = 1, next_step_ = 0;
};

// ---------------------------------------------------------------------------

LoaderImpl::LoaderImpl(std::shared_ptr<const TokenSource> source, LoaderOptions options,
                       std::optional<LoaderState> resume)
    : source_(std::move(source)), options_(std::move(options)) {
  const LoaderOptions& o = options_;
  CheckAtLeast("seq_len", o.seq_len, 1);
  CheckAtLeast("batch_size", o.batch_size, 1);
  CheckAtLeast("world_size", o.world_size, 1);
  CheckAtLeast("num_workers", o.num_workers, 1);
  CheckAtLeast("num_threads", o.num_threads, 0);
  CheckAtLeast("prefetch", o.prefetch, 1);
  if (o.num_threads > 256) ThrowInvalid("num_threads", "at most 256, got " + Str(o.num_threads));
  CheckInRange("rank", o.rank, 0, o.world_size);
  CheckInRange("worker", o.worker, 0, o.num_workers);
  CheckEpoch("epoch", o.epoch);
  // The plan's fields a loader has no use for (LoaderOptions).
  if (o.micro_batches != 1) {
    ThrowInvalid("micro_batches", "must be 1 for a loader (each batch is one micro-batch), got " +
                                      Str(o.micro_batches));
  }
  if (o.position != 0) {
    ThrowInvalid("position",
                 "must be 0 for a loader (it resumes from a state), got " + Str(o.position));
  }
  if (o.max_images) ThrowInvalid("max_images", "token sources carry no images");
  if (o.oversize == Oversize::kError) {
    ThrowInvalid("oversize",
                 "'error' is not supported by the loader (a long document would "
                 "stop the epoch half-way); use split or drop");
  }
  const Index batch_tokens = CheckedMul("batch_size", o.batch_size, o.seq_len);
  if (batch_tokens > kMaxBatchTokens) {
    ThrowInvalid("batch_size", "batch_size x seq_len = " + Str(o.batch_size) + " x " +
                                   Str(o.seq_len) + " = " + Str(batch_tokens) +
                                   " tokens per batch is more than " + Str(kMaxBatchTokens) +
                                   " (2^28, 7.5 GB of buffers); lower batch_size or seq_len");
  }
  if (o.block_mask) {
    (void)CheckedMul("block_mask", batch_tokens, o.seq_len);
  }
  ValidatePackOptions(Planner::Options(o));
  ValidateContextParallel(o.cp, o.seq_len);
  CheckInRange("cp_rank", o.cp_rank, 0, o.cp.size, " (cp_size=" + Str(o.cp.size) + ")");
  if (o.cp.size > 1 || o.cp.granularity) {
    if (!o.equal_steps) {
      ThrowInvalid("cp_size", Str(o.cp.size) +
                                  " needs equal_steps (the global plan packs every "
                                  "document padded for the context-parallel split)");
    }
    if (o.padding_side != PaddingSide::kRight) {
      ThrowInvalid("padding_side",
                   "must be right with context parallelism (cp_size=" + Str(o.cp.size) + ")");
    }
    if (o.block_mask) {
      ThrowInvalid("block_mask", "is not delivered with context parallelism (cp_size=" +
                                     Str(o.cp.size) + "); use cp_index and cu_seqlens_padded");
    }
  }
  if (o.share_plan && !o.equal_steps) {
    ThrowInvalid("share_plan",
                 "needs equal_steps (the host shares the global plan; a per-rank "
                 "loader plans only its own documents)");
  }
  if (o.local_rank < -1) {
    ThrowInvalid("local_rank", "must be >= 0 (or -1: LOCAL_RANK), got " + Str(o.local_rank));
  }
  if (o.share_plan && o.local_rank == -1)
    options_.local_rank = HostPlanOptionsFromEnvironment().local_rank;
  consumers_ = CheckedMul("num_workers", o.world_size, o.num_workers);
  consumer_ = o.rank + o.worker * o.world_size;
  collate_ = MakeCollateOptions(o.seq_len, o);
  if (o.equal_steps && o.shard_files) {
    ThrowInvalid("shard_files",
                 "file sharding gives ranks different amounts of data; it cannot be combined "
                 "with equal_steps (the global plan deals documents, not files); turn "
                 "equal_steps off to shard files");
  }
  if (o.shard_files) {
    // Validates the Whale switches against the part count now.
    file_policy_ = WhaleSlicing(source_->num_parts(), consumers_, o.whale_unbalanced_io_slicing,
                                o.whale_drop_last_files);
  }

  const DataFingerprint data = FingerprintData(*source_);
  LoaderState base;
  base.epoch = o.epoch;
  base.num_documents = data.documents;
  base.num_tokens = data.tokens;
  base.data_hash = data.hash;
  base.seq_len = o.seq_len;
  base.shuffle = o.shuffle;
  base.seed = o.seed;
  base.shard_files = o.shard_files;
  Index read = 0, batches = 0;
  std::optional<PackerState> packer;
  if (resume && (o.equal_steps != resume->train.has_value())) {
    ThrowInvalid("state", o.equal_steps ? "was saved by a per-rank loader (equal_steps off); "
                                          "this loader follows the equal-steps plan"
                                        : "is an equal-steps (train_plan) state; this loader "
                                          "packs per rank (equal_steps off)");
  }
  if (resume && resume->train) {
    // The plan checks the state's stream fingerprint (documents and packing).
    base.train = resume->train;
    base.epoch = resume->train->epoch;
  } else if (resume) {
    const LoaderState& s = *resume;
    CheckFingerprint(s, base,
                     "was saved for another data set or configuration (the data differs, or "
                     "the options do)");
    ValidateLoaderState(s);
    // Every piece must lie inside its document: collation copies without
    // checks. (ValidateLoaderState has checked start + length for overflow.)
    for (std::size_t i = 0; i < s.head.size(); ++i) {
      const Piece& p = s.head[i];
      if (p.start + p.length > source_->DocumentLength(p.item)) {
        ThrowInvalid("state", "head[" + std::to_string(i) + "]: piece (document " + Str(p.item) +
                                  ", start " + Str(p.start) + ", length " + Str(p.length) +
                                  ") lies outside its document of " +
                                  Str(source_->DocumentLength(p.item)) + " tokens");
      }
    }
    auto check_piece = [&](const Piece& p, const char* where) {
      const Piece ref = Resolve(p, s.head);
      if (ref.start + ref.length > source_->DocumentLength(ref.item)) {
        ThrowInvalid("state", std::string(where) + " item " + Str(p.item) + " (start " +
                                  Str(p.start) + ", length " + Str(p.length) +
                                  ") lies outside its document of " +
                                  Str(source_->DocumentLength(ref.item)) + " tokens");
      }
    };
    if (s.consumers != 0) {
      if (s.consumers != consumers_ || s.consumer != consumer_) {
        ThrowInvalid("state", "was saved by consumer " + Str(s.consumer) + " of " +
                                  Str(s.consumers) + "; this loader is consumer " + Str(consumer_) +
                                  " of " + Str(consumers_) +
                                  " (merge the states of all consumers to change the world "
                                  "size or worker count)");
      }
      for (const Pack& pack : s.packer.pending) {
        for (const Piece& p : pack.pieces) check_piece(p, "packed");
      }
      for (const Piece& p : s.packer.buffered) check_piece(p, "buffered");
      read = s.read;
      batches = s.batches;
      packer = s.packer;
    } else if (s.shard_files) {
      ThrowInvalid("state", "a merged state cannot come from file sharding");
    }
    base.epoch = s.epoch;
    base.head = s.head;
    base.position = s.position;
    base.done = s.done;
  }
  planner_ = std::make_unique<Planner>(*source_, o, consumers_, consumer_, std::move(base), read,
                                       batches, std::move(packer));
  state_ = Publish(planner_->Take());
  // The first buffers on the caller's thread: a size the machine cannot hold
  // is an error here, not an abort in a background thread.
  pool_.push_back(AllocateBatch());
}

const TrainPlan* LoaderImpl::train_plan() const {
  std::lock_guard lock(mu_);
  return planner_->train();
}

LoaderImpl::~LoaderImpl() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  room_.notify_all();
  work_.notify_all();
  produced_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<const LoaderState> LoaderImpl::Publish(PlannerSnapshot snapshot) const {
  auto state = std::make_shared<LoaderState>(planner_->base());
  state->consumers = consumers_;
  state->consumer = consumer_;
  state->read = snapshot.read;
  state->batches = snapshot.batches;
  state->packer = std::move(snapshot.packer);
  state->train = std::move(snapshot.train);
  if (state->train) state->epoch = state->train->epoch;
  return state;
}

Index LoaderImpl::ListSize() const {
  std::lock_guard lock(mu_);
  return planner_->list_size();
}

Index LoaderImpl::dropped() const {
  std::lock_guard lock(mu_);
  if (planner_->train()) return planner_->dropped();
  return state_->packer.dropped;
}

LoaderState LoaderImpl::State() const {
  std::lock_guard lock(mu_);
  return *state_;
}

std::shared_ptr<Batch> LoaderImpl::AcquireBatch() {
  for (auto& b : pool_) {
    if (b.use_count() == 1) return b;
  }
  pool_.push_back(AllocateBatch());
  return pool_.back();
}

std::shared_ptr<Batch> LoaderImpl::AllocateBatch() const {
  const Index width = options_.seq_len / options_.cp.size;
  const std::size_t n = static_cast<std::size_t>(options_.batch_size * width);
  try {
    auto b = std::make_shared<Batch>();
    b->batch_size = options_.batch_size;
    b->seq_len = width;
    if (options_.cp.size > 1) b->cp_index.resize(n);
    b->input_ids.resize(n);
    b->labels.resize(n);
    b->position_ids.resize(n);
    b->document_ids.resize(n);
    b->row_tokens.resize(static_cast<std::size_t>(options_.batch_size));
    if (options_.block_mask) b->block_mask.resize(n * static_cast<std::size_t>(options_.seq_len));
    return b;
  } catch (const std::bad_alloc&) {
    ThrowInvalid("batch_size", "cannot allocate the buffers of a batch of batch_size x seq_len = " +
                                   Str(options_.batch_size) + " x " + Str(options_.seq_len) +
                                   " tokens (" + std::to_string(n * 28) + " bytes): out of memory");
  }
}

void LoaderImpl::StartBatch(const Plan& plan, Batch* batch) {
  batch->epoch = plan.epoch;
  batch->index = plan.index;
  batch->step = plan.step;
  batch->documents.clear();
  batch->starts.clear();
  batch->lengths.clear();
  batch->rows.clear();
  batch->tokens = 0;
}

void LoaderImpl::Collate(const Plan& plan, Batch* batch) const {
  // The copies below read the mapped files of the batch's documents: one
  // check of each per batch that it has not changed since it was opened (a
  // truncated one would raise SIGBUS).
  thread_local std::vector<Index> documents;  // reused: no allocation per batch
  thread_local std::vector<const MappedFile*> files;
  documents.clear();
  files.clear();
  for (const auto& row : plan.rows) {
    for (const Piece& p : row) documents.push_back(p.item);
  }
  source_->DocumentFiles(documents, &files);
  TokenSource::CheckFiles(files);
  if (options_.cp.size > 1) {
    CollateContextParallel(plan, batch);
  } else {
    CollateRows(plan, batch);
  }
  // And once after: a write(2) stamps the modification time before it copies
  // its bytes, so a batch that read any byte written during the copy is
  // refused here instead of delivered.
  TokenSource::CheckFiles(files);
}

void LoaderImpl::CollateRows(const Plan& plan, Batch* batch) const {
  const Index L = options_.seq_len;
  StartBatch(plan, batch);
  std::vector<std::span<const Piece>> rows(static_cast<std::size_t>(options_.batch_size));
  for (Index b = 0; b < options_.batch_size; ++b) {
    std::span<const Piece> pieces;
    if (b < static_cast<Index>(plan.rows.size())) pieces = plan.rows[static_cast<std::size_t>(b)];
    rows[static_cast<std::size_t>(b)] = pieces;
    const Index offset = b * L;
    RowOutput out = RowAt<RowOutput>(batch, offset);
    if (options_.block_mask) out.block_mask = batch->block_mask.data() + offset * L;
    CollateRow(pieces, collate_, out, [this](const Piece& p, std::int64_t* dst) {
      source_->Copy(p.item, p.start, p.length, dst);
    });
    AddPieces(pieces, b, batch);
    const Index used = RowTokens(pieces);
    batch->tokens += used;
    batch->row_tokens[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(used);
  }
  batch->max_seqlen = BatchCuSeqlens(rows, collate_, &batch->cu_seqlens);
}

void LoaderImpl::CollateContextParallel(const Plan& plan, Batch* batch) const {
  const Index L = options_.seq_len, width = batch->seq_len;
  const ContextParallelOptions& cp = options_.cp;
  StartBatch(plan, batch);
  batch->cu_seqlens_padded.assign(1, 0);
  batch->cu_seqlens.assign(1, 0);
  batch->max_seqlen = 0;
  for (Index b = 0; b < options_.batch_size; ++b) {
    std::span<const Piece> pieces;
    if (b < static_cast<Index>(plan.rows.size())) pieces = plan.rows[static_cast<std::size_t>(b)];
    const Index offset = b * width;
    CpRowOutput out = RowAt<CpRowOutput>(batch, offset);
    out.cp_index = batch->cp_index.data() + offset;
    CollateCpRow(pieces, collate_, cp, options_.cp_rank, out,
                 [this](const Piece& p, std::int64_t* dst) {
                   source_->Copy(p.item, p.start, p.length, dst);
                 });
    AddPieces(pieces, b, batch);
    std::int32_t used = 0;
    for (Index j = offset; j < offset + width; ++j) used += batch->cp_index[j] >= 0 ? 1 : 0;
    batch->tokens += used;
    batch->row_tokens[static_cast<std::size_t>(b)] = used;
    batch->max_seqlen = std::max(
        batch->max_seqlen, AppendCpCuSeqlensPadded(pieces, L, cp, static_cast<std::int32_t>(b * L),
                                                   &batch->cu_seqlens_padded));
    AppendCpCuSeqlensLocal(pieces, L, cp, options_.cp_rank, static_cast<std::int32_t>(b * width),
                           &batch->cu_seqlens);
  }
}

void LoaderImpl::StartThreads() {
  started_ = true;
  plan_ahead_ = std::max<Index>(8, 2 * (options_.prefetch + options_.num_threads));
  // Named for top, perf and py-spy (at most 15 characters).
  threads_.emplace_back([this] { PlannerLoop(); });
  ::pthread_setname_np(threads_.back().native_handle(), "shardkit-plan");
  for (Index i = 0; i < options_.num_threads; ++i) {
    threads_.emplace_back([this] { CollatorLoop(); });
    ::pthread_setname_np(threads_.back().native_handle(), "shardkit-copy");
  }
}

void LoaderImpl::Fail(std::exception_ptr error, Index seq) {
  if (!error_ || seq < error_seq_) {
    error_ = std::move(error);
    error_seq_ = seq;
  }
  produced_.notify_all();
}

// The one planning thread: plans batch after batch outside mu_ (it alone uses
// planner_) until plan_ahead_ batches wait, then sleeps until the collating
// threads have taken half of them (one wake-up per plan_ahead_ / 2 batches;
// plans are small beside the batch buffers).
void LoaderImpl::PlannerLoop() {
  const std::size_t ahead = static_cast<std::size_t>(plan_ahead_);
  std::unique_lock lock(mu_);
  while (true) {
    room_.wait(lock, [&] { return stop_ || planned_.size() <= ahead / 2; });
    while (!stop_ && planned_.size() < ahead) {
      lock.unlock();
      Planned next;
      bool more = false;
      std::exception_ptr failed;
      try {
        more = planner_->Next(&next.plan);
        if (more) next.snapshot = planner_->Take();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (failed || !more) {
        if (failed) Fail(failed, next_plan_);
        planned_all_ = true;
        produced_.notify_all();
        work_.notify_all();
        return;
      }
      next.seq = next_plan_++;
      const bool startable = next.seq - next_out_ < options_.prefetch;
      planned_.push_back(std::move(next));
      if (startable) work_.notify_one();
    }
    if (stop_) return;
  }
}

// A collating thread: takes the oldest planned batch once it is inside the
// prefetch window, fills a buffer outside mu_, and hands it to the consumer.
void LoaderImpl::CollatorLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    work_.wait(lock, [this] {
      return stop_ || (planned_all_ && planned_.empty()) ||
             (!planned_.empty() && planned_.front().seq - next_out_ < options_.prefetch);
    });
    if (stop_ || planned_.empty()) return;
    Planned job = std::move(planned_.front());
    planned_.pop_front();
    if (planned_.size() == static_cast<std::size_t>(plan_ahead_) / 2) room_.notify_one();
    if (!planned_.empty() && planned_.front().seq - next_out_ < options_.prefetch) {
      work_.notify_one();  // the next batch can start too
    }
    // Anything thrown from here on (an allocation) goes to the consumer's
    // Next(), never out of this thread (that would terminate the process).
    std::exception_ptr failed;
    std::shared_ptr<Batch> batch;
    std::shared_ptr<const LoaderState> state;
    try {
      batch = AcquireBatch();
      lock.unlock();
      state = Publish(std::move(job.snapshot));
      Collate(job.plan, batch.get());
    } catch (...) {
      failed = std::current_exception();
    }
    if (!lock.owns_lock()) lock.lock();
    if (failed) {
      Fail(failed, job.seq);
      continue;
    }
    const bool awaited = job.seq == next_out_;
    ready_[job.seq] = {std::move(batch), std::move(state)};
    if (awaited) produced_.notify_one();
  }
}

std::shared_ptr<const Batch> LoaderImpl::Next() {
  std::unique_lock lock(mu_);
  if (options_.num_threads == 0) {
    Plan plan;
    if (!planner_->Next(&plan)) return nullptr;
    PlannerSnapshot snap = planner_->Take();
    std::shared_ptr<Batch> batch = AcquireBatch();
    Collate(plan, batch.get());
    state_ = Publish(std::move(snap));
    return batch;
  }
  if (!started_) StartThreads();
  // Batches come out in sequence order; a failure is reported when every
  // batch before the one that failed has been returned.
  produced_.wait(lock, [this] {
    return ready_.count(next_out_) > 0 || (error_ && next_out_ >= error_seq_) ||
           (planned_all_ && next_out_ == next_plan_);
  });
  auto it = ready_.find(next_out_);
  if (it == ready_.end()) {
    if (error_) std::rethrow_exception(error_);
    return nullptr;
  }
  Ready r = std::move(it->second);
  ready_.erase(it);
  ++next_out_;
  // Another caller of Next() may be waiting for this (now later) batch or for
  // the end: a collator only wakes one waiter, and the end is announced once.
  produced_.notify_all();
  state_ = std::move(r.state);
  if (!planned_.empty() && planned_.front().seq - next_out_ < options_.prefetch) {
    work_.notify_one();  // the window moved: one more batch can start
  }
  return r.batch;
}

}  // namespace internal

// ---------------------------------------------------------------------------
// TokenLoader: the epoch's LoaderImpl, replaced when a pass runs out, on
// SetEpoch and on Restore.

class TokenLoader::Epochs {
 public:
  Epochs(EpochSource source, LoaderOptions options)
      : source_(std::move(source)), options_(std::move(options)) {}

  // The loader of `epoch` from its start, or of the state's epoch from `resume`.
  std::shared_ptr<internal::LoaderImpl> Make(std::uint64_t epoch,
                                             std::optional<LoaderState> resume) const {
    if (resume) epoch = resume->train ? resume->train->epoch : resume->epoch;
    CheckEpoch("epoch", epoch);
    LoaderOptions o = options_;
    o.epoch = epoch;
    std::shared_ptr<const TokenSource> source = source_(epoch);
    // auto leaves the source as it reads (a mixture loader's are pread's).
    if (o.read != ReadMode::kAuto && source != nullptr) {
      source = source->WithReads(o.read);
    }
    return std::make_shared<internal::LoaderImpl>(std::move(source), std::move(o),
                                                  std::move(resume));
  }

  // The current epoch's loader (rebuilt first in a child process after fork()).
  std::shared_ptr<internal::LoaderImpl> Current() {
    std::lock_guard lock(mu_);
    FollowFork();
    return impl_;
  }

  Index BeginPass() {
    std::lock_guard lock(mu_);
    FollowFork();
    ran_out_.reset();
    return pass_;
  }

  Index pass() {
    std::lock_guard lock(mu_);
    return pass_;
  }

  // The next batch of pass `pass`; at its end, the first caller to see it
  // moves the loader to the start of the next epoch.
  std::shared_ptr<const Batch> Next(Index pass) {
    std::shared_ptr<internal::LoaderImpl> impl;
    {
      std::lock_guard lock(mu_);
      FollowFork();
      if (pass != pass_) return nullptr;
      impl = impl_;
    }
    std::shared_ptr<const Batch> batch = impl->Next();
    if (batch) return batch;
    std::lock_guard lock(mu_);
    if (impl_ != impl) return nullptr;  // another caller moved it already
    const std::uint64_t finished = impl->options().epoch;
    if (const TrainPlan* plan = impl->train_plan()) {
      // The plan's end state: (epoch + 1, 0), the next epoch from its start
      // (whose source may be another data set: a mixture's next window), or
      // where continuous mode stands in the next epoch's stream.
      LoaderState end;
      end.train = plan->StateAt(plan->num_steps());
      if (end.train->position == 0) {
        Replace(Make(end.train->epoch, std::nullopt));
      } else {
        Replace(Make(0, std::move(end)));
      }
    } else {
      Replace(Make(finished + 1, std::nullopt));
    }
    ran_out_ = finished;
    return nullptr;
  }

  void Start(std::uint64_t epoch, std::optional<LoaderState> resume) {
    auto impl = Make(epoch, std::move(resume));
    std::lock_guard lock(mu_);
    Replace(std::move(impl));
  }

  void SetEpoch(std::uint64_t epoch) {
    CheckEpoch("epoch", epoch);
    {
      std::lock_guard lock(mu_);
      FollowFork();
      if (impl_->options().epoch == epoch) return;
    }
    Start(epoch, std::nullopt);
  }

  std::uint64_t epoch() {
    std::lock_guard lock(mu_);
    FollowFork();
    return ran_out_ ? *ran_out_ : impl_->options().epoch;
  }

  // In a child process the parent's threads are gone: their machinery is
  // leaked (joining or destroying it would block).
  ~Epochs() {
    if (impl_ && impl_->forked() && impl_->threads_started()) {
      (void)new std::shared_ptr<internal::LoaderImpl>(std::move(impl_));
    }
  }

 private:
  // REQUIRES mu_ held.
  void Replace(std::shared_ptr<internal::LoaderImpl> impl) {
    impl_ = std::move(impl);
    ++pass_;
    ran_out_.reset();
  }

  // A loader whose threads had started is rebuilt in the child from the
  // state after its last returned batch. REQUIRES mu_ held.
  void FollowFork() {
    if (!impl_->forked()) return;
    if (!impl_->threads_started()) {
      impl_->AdoptProcess();  // nothing ran but this thread: usable as it is
      return;
    }
    auto* parents = new std::shared_ptr<internal::LoaderImpl>(std::move(impl_));  // leaked
    impl_ = std::make_shared<internal::LoaderImpl>((*parents)->source(), (*parents)->options(),
                                                   *(*parents)->last_state());
  }

  const EpochSource source_;
  const LoaderOptions options_;
  std::mutex mu_;  // guards impl_, pass_ and ran_out_
  std::shared_ptr<internal::LoaderImpl> impl_;
  Index pass_ = 0;
  std::optional<std::uint64_t> ran_out_;
};

TokenLoader::TokenLoader(std::shared_ptr<const TokenSource> source, LoaderOptions options,
                         std::optional<LoaderState> resume)
    : TokenLoader([source](std::uint64_t) { return source; }, std::move(options),
                  std::move(resume)) {
  if (!source) ThrowInvalid("source", "is null");
}

TokenLoader::TokenLoader(EpochSource source, LoaderOptions options,
                         std::optional<LoaderState> resume) {
  const std::uint64_t epoch = options.epoch;
  epochs_ = std::make_unique<Epochs>(std::move(source), std::move(options));
  epochs_->Start(epoch, std::move(resume));
}

TokenLoader::~TokenLoader() = default;

std::shared_ptr<const Batch> TokenLoader::Next() { return epochs_->Current()->Next(); }
Index TokenLoader::BeginPass() { return epochs_->BeginPass(); }
std::shared_ptr<const Batch> TokenLoader::Next(Index pass) { return epochs_->Next(pass); }
Index TokenLoader::pass() const { return epochs_->pass(); }
void TokenLoader::SetEpoch(std::uint64_t epoch) { epochs_->SetEpoch(epoch); }
void TokenLoader::Restore(LoaderState state) { epochs_->Start(0, std::move(state)); }
void TokenLoader::Restore(std::span<const LoaderState> states) {
  Restore(ResumeStateFor(states, consumers(), consumer()));
}
std::uint64_t TokenLoader::standing_epoch() const { return State().epoch; }
std::uint64_t TokenLoader::epoch() const { return epochs_->epoch(); }
LoaderState TokenLoader::State() const { return epochs_->Current()->State(); }
Index TokenLoader::ListSize() const { return epochs_->Current()->ListSize(); }
const LoaderOptions& TokenLoader::options() const { return epochs_->Current()->options(); }
Index TokenLoader::consumers() const { return epochs_->Current()->consumers(); }
Index TokenLoader::consumer() const { return epochs_->Current()->consumer(); }
const TokenSource& TokenLoader::source() const { return *epochs_->Current()->source(); }
std::shared_ptr<const TokenSource> TokenLoader::shared_source() const {
  return epochs_->Current()->source();
}
const TrainPlan* TokenLoader::train_plan() const { return epochs_->Current()->train_plan(); }
Index TokenLoader::dropped() const { return epochs_->Current()->dropped(); }
const std::optional<WhaleChoice>& TokenLoader::file_policy() const {
  return epochs_->Current()->file_policy();
}

LoaderState ResumeStateFor(std::span<const LoaderState> states, Index consumers, Index consumer) {
  if (states.empty()) ThrowInvalid("state", "no states given");
  for (const LoaderState& s : states) {
    if (!s.train && s.consumers == consumers && s.consumer == consumer) return s;
  }
  return MergeLoaderStates(states);
}

// ---------------------------------------------------------------------------

LoaderState MergeLoaderStates(std::span<const LoaderState> states) {
  if (states.empty()) ThrowInvalid("state", "no states to merge");
  const LoaderState& first = states[0];
  if (first.train) {
    // Equal steps: every rank's state is the same global position.
    for (const LoaderState& st : states) {
      if (!st.train || !(*st.train == *first.train)) {
        ThrowInvalid("state",
                     "equal-steps states differ (ranks stopped at different steps or hold "
                     "different plans); pass the state of one rank");
      }
    }
    return first;
  }
  if (first.consumers == 0) {
    if (states.size() == 1) {
      ValidateLoaderState(first);
      return first;
    }
    ThrowInvalid("state", "a merged state cannot be merged with others");
  }
  if (first.shard_files) {
    ThrowInvalid("state",
                 "states of a file-sharded loader cannot be merged (a file belongs "
                 "to one consumer; resume on the same world size instead)");
  }
  const Index C = first.consumers;
  if (static_cast<Index>(states.size()) != C) {
    ThrowInvalid("state", "got " + Str(static_cast<Index>(states.size())) +
                              " states but they were saved by " + Str(C) +
                              " consumers; pass one state per consumer");
  }
  std::vector<const LoaderState*> by(static_cast<std::size_t>(C), nullptr);
  for (const LoaderState& s : states) {
    ValidateLoaderState(s);
    CheckFingerprint(s, first, "states come from different configurations");
    if (s.consumers != C || s.epoch != first.epoch || s.position != first.position ||
        s.head != first.head || s.done != first.done) {
      ThrowInvalid("state", "states come from different epochs or plans (epoch " +
                                Str(static_cast<Index>(s.epoch)) + " vs " +
                                Str(static_cast<Index>(first.epoch)) + ")");
    }
    if (s.consumer < 0 || s.consumer >= C || by[static_cast<std::size_t>(s.consumer)]) {
      ThrowInvalid("state",
                   "consumer " + Str(s.consumer) + " is repeated or outside [0, " + Str(C) + ")");
    }
    by[static_cast<std::size_t>(s.consumer)] = &s;
  }
  const Index D = first.num_documents;
  for (const Piece& p : first.head) {
    if (p.item < 0 || p.item >= D ||
        !PieceWithin(p.start, p.length, std::numeric_limits<Index>::max())) {
      ThrowInvalid("state", "head piece (document " + Str(p.item) + ", start " + Str(p.start) +
                                ", length " + Str(p.length) + ") is not a piece of a document");
    }
  }
  if (first.position < 0 || first.position > D) {
    ThrowInvalid("state", "position " + Str(first.position) + " is outside [0, " + Str(D) + "]");
  }
  RemainingOrder order(&first.head, first.position, &first.done, D);
  const Index S = order.size();
  const Index H = order.head_size();
  // Every entry before q was read by its consumer (round robin).
  Index q = S;
  for (Index c = 0; c < C; ++c) {
    const LoaderState& s = *by[static_cast<std::size_t>(c)];
    const Index list_size = S > c ? (S - c - 1) / C + 1 : 0;
    if (s.read < 0 || s.read > list_size) {
      ThrowInvalid("state", "consumer " + Str(c) + " read " + Str(s.read) +
                                " entries, its list holds " + Str(list_size));
    }
    q = std::min(q, s.read == list_size ? S : c + s.read * C);
  }
  // Entries at or after q that some consumer read.
  std::vector<Index> read_after;
  for (Index c = 0; c < C; ++c) {
    const LoaderState& s = *by[static_cast<std::size_t>(c)];
    Index k = q > c ? (q - c + C - 1) / C : 0;
    for (; k < s.read; ++k) read_after.push_back(c + k * C);
  }
  std::sort(read_after.begin(), read_after.end());

  LoaderState merged;
  merged.epoch = first.epoch;
  merged.num_documents = D;
  merged.num_tokens = first.num_tokens;
  merged.data_hash = first.data_hash;
  merged.seq_len = first.seq_len;
  merged.shuffle = first.shuffle;
  merged.seed = first.seed;
  merged.shard_files = false;
  // Pieces read but not delivered: the packers' closed packs, then buffers.
  auto check = [&](const Piece& p) {
    if (p.item < -H || p.item >= D) {
      ThrowInvalid("state", "consumer item " + Str(p.item) + " is not a document or head piece");
    }
    // Resolve adds the head piece's start: the piece must lie inside it.
    const Index limit = p.item < 0 ? first.head[static_cast<std::size_t>(-p.item - 1)].length
                                   : std::numeric_limits<Index>::max();
    if (!PieceWithin(p.start, p.length, limit)) {
      ThrowInvalid("state", "consumer item " + Str(p.item) + " (start " + Str(p.start) +
                                ", length " + Str(p.length) + ") is not a piece of it");
    }
  };
  for (Index c = 0; c < C; ++c) {
    const LoaderState& s = *by[static_cast<std::size_t>(c)];
    for (const Pack& pack : s.packer.pending) {
      for (const Piece& p : pack.pieces) check(p);
    }
    for (const Piece& p : s.packer.buffered) check(p);
    for (const Pack& pack : s.packer.pending) {
      for (const Piece& p : pack.pieces) {
        // A run of full rows becomes one head piece per row (head pieces
        // are at most seq_len tokens).
        const Piece whole = Resolve(p, first.head);
        const Index row = std::max<Index>(first.seq_len, 1);
        for (Index at = 0; at < whole.length || at == 0; at += row) {
          merged.head.push_back(Piece{.item = whole.item,
                                      .length = std::min(row, whole.length - at),
                                      .start = whole.start + at});
        }
      }
    }
    for (const Piece& p : s.packer.buffered) merged.head.push_back(Resolve(p, first.head));
  }
  // Head entries nobody read.
  for (Index i = q; i < H; ++i) {
    if (!std::binary_search(read_after.begin(), read_after.end(), i)) {
      merged.head.push_back(first.head[static_cast<std::size_t>(i)]);
    }
  }
  const Index s0 = std::max(q, H);
  if (s0 >= S) {
    merged.position = D;
    return merged;
  }
  merged.position = order.SuffixPosition(s0 - H);
  for (Index p : first.done) {
    if (p >= merged.position) merged.done.push_back(p);
  }
  for (Index i : read_after) {
    if (i >= s0) merged.done.push_back(order.SuffixPosition(i - H));
  }
  std::sort(merged.done.begin(), merged.done.end());
  return merged;
}

}  // namespace shardkit
