// PackStream: a train plan's pack stream, the epoch's documents in global
// order (Permutation of the seed and epoch, or identity) through one
// StreamingPacker, with its checkpoint (TrainPlan::Checkpoint). Not installed;
// users include train_plan.h only.
//
// Thread-safety: a PackStream is a value used by one thread; the documents it
// reads are immutable.
#ifndef SHARDKIT_LOADER_INTERNAL_PACK_STREAM_H_
#define SHARDKIT_LOADER_INTERNAL_PACK_STREAM_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <string_view>
#include <vector>

#include "shardkit/loader/train_plan.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

struct TrainPlan::Checkpoint {
  std::uint64_t epoch = 0;
  Index pushed = 0;  // documents of the epoch's order pushed
  bool finished = false;
  Index popped = 0;  // packs of the epoch's stream taken
  Index dropped = 0;
  PackerState packer;
};

namespace internal {

// A compact copy of a corpus's document lengths for the shuffled reads of a
// large plan: 2 bytes a document (kEscape: 65535 tokens or more, read from
// the documents), in one 2 MB-aligned buffer advised into transparent huge
// pages (madvise MADV_HUGEPAGE, where the system has them). Over 1e8
// documents the 800 MB of int64 lengths or offsets become 200 MB: a hundred
// 2 MB pages (the TLB covers them) and 32 lengths a cache line instead of 8.
// The same values as the documents', so the plan is the same bit for bit.
class CompactLengths {
 public:
  static constexpr std::uint16_t kEscape = 0xFFFF;
  // Made from this many documents on, for shuffled plans: below it the
  // lengths mostly stay in the caches.
  static constexpr Index kFrom = Index{1} << 21;

  // One sequential pass over docs' lengths.
  explicit CompactLengths(const TrainDocuments& docs);
  ~CompactLengths();
  CompactLengths(const CompactLengths&) = delete;
  CompactLengths& operator=(const CompactLengths&) = delete;

  [[nodiscard]] const std::uint16_t* data() const { return data_; }

 private:
  std::uint16_t* data_ = nullptr;
};

// A plan's CompactLengths, made once by the first stream that gathers (so a
// plan whose streams never read the lengths in shuffled order, a rank that
// reads a shared host plan's file, never holds one). Thread-safe.
class LazyCompactLengths {
 public:
  [[nodiscard]] const CompactLengths* Get(const TrainDocuments& docs) const {
    std::call_once(once_, [&] { made_ = std::make_unique<CompactLengths>(docs); });
    return made_.get();
  }

 private:
  mutable std::once_flag once_;
  mutable std::unique_ptr<CompactLengths> made_;
};

class PackStream {
 public:
  // compact: the plan's compact copy of the lengths (read when shuffled),
  // or null.
  PackStream(const TrainDocuments* docs, const TrainOptions& o, bool continuous,
             const LazyCompactLengths* compact = nullptr)
      : docs_(docs),
        options_(TrainPackOptions(o)),
        shuffle_(o.shuffle),
        seed_(o.seed),
        continuous_(continuous),
        granule_(CpGranule(o.cp)),
        lengths_(docs->length_data    ? reinterpret_cast<const char*>(docs->length_data)
                 : docs->offsets_data ? reinterpret_cast<const char*>(docs->offsets_data)
                                      : docs->pointer_bytes),
        lazy_compact_(shuffle_ ? compact : nullptr),
        order_(docs->count, o.seed, o.epoch),
        epoch_(o.epoch),
        packer_(options_) {}

  void Restore(const TrainPlan::Checkpoint& c) {
    epoch_ = c.epoch;
    order_ = Permutation(docs_->count, seed_, epoch_);
    pushed_ = c.pushed;
    finished_ = c.finished;
    popped_ = c.popped;
    dropped_ = c.dropped;
    packer_ = StreamingPacker(options_, c.packer);
    block_.clear();
    block_at_ = 0;
    block_size_ = kBlock;
  }
  [[nodiscard]] TrainPlan::Checkpoint Save() const {
    return {epoch_, pushed_, finished_, popped_, dropped_, packer_.State()};
  }

  // Whether the current epoch's stream has another pack (packs ahead as
  // needed; takes nothing).
  bool HasPackInEpoch() {
    while (packer_.pending() == 0) {
      if (pushed_ < docs_->count) {
        PushNext();
      } else if (!finished_) {
        packer_.Finish();
        finished_ = true;
      } else {
        return false;
      }
    }
    return true;
  }

  // The next pack of the stream; false at the end of the epoch (pad, drop)
  // or when the corpus yields no pack at all (continuous).
  bool Next(Pack* pack, std::uint64_t* epoch, Index* index) {
    while (!HasPackInEpoch()) {
      if (!continuous_ || popped_ == 0) return false;
      StartEpoch(epoch_ + 1);
    }
    (void)packer_.Pop(pack);
    if (granule_ > 1) {
      // The packer saw padded lengths; the pieces get their real ones back
      // (only a document's last piece holds its padding).
      pack->tokens = 0;
      for (Piece& p : pack->pieces) {
        p.length = std::min(p.length, docs_->Length(p.item) - p.start);
        pack->tokens += p.length;
      }
    }
    *epoch = epoch_;
    *index = popped_++;
    return true;
  }

  // Takes up to n packs of the current epoch's stream (never beyond its end,
  // also in continuous mode); returns how many there were.
  Index SkipInEpoch(Index n) {
    Index k = 0;
    for (; k < n && HasPackInEpoch(); ++k) {
      Pack pack;
      (void)packer_.Pop(&pack);
      ++popped_;
    }
    return k;
  }

  // Takes n packs (no output); returns how many there were.
  Index Skip(Index n) {
    Pack pack;
    std::uint64_t e;
    Index g, k = 0;
    for (; k < n && Next(&pack, &e, &g); ++k) {
    }
    return k;
  }

  [[nodiscard]] std::uint64_t epoch() const { return epoch_; }
  [[nodiscard]] Index popped() const { return popped_; }
  [[nodiscard]] Index pushed() const { return pushed_; }
  [[nodiscard]] Index dropped() const { return dropped_; }
  [[nodiscard]] Index split_items() const { return packer_.State().split_items; }
  void set_dropped_sink(std::vector<Index>* sink) { dropped_sink_ = sink; }
  [[nodiscard]] const LazyCompactLengths* compact() const { return lazy_compact_; }

  // The whole stream of one epoch: its packs, dropped and split documents.
  struct EpochTotals {
    Index packs = 0, dropped = 0, split_items = 0;
  };
  // The totals of `epoch`'s stream, which must be over (this stream has left
  // it: continuous) or be the current epoch (then it is run to its end).
  EpochTotals Totals(std::uint64_t epoch) {
    if (epoch_ != epoch) return left_;
    while (HasPackInEpoch()) {
      Pack pack;
      (void)packer_.Pop(&pack);
      ++popped_;
    }
    return {popped_, dropped_, split_items()};
  }

 private:
  void StartEpoch(std::uint64_t epoch) {
    if (epoch_ + 1 == epoch && !left_set_) {
      left_ = {popped_, dropped_, split_items()};  // the first epoch left
      left_set_ = true;
    }
    epoch_ = epoch;
    order_ = Permutation(docs_->count, seed_, epoch_);
    pushed_ = 0;
    finished_ = false;
    popped_ = 0;
    dropped_ = 0;
    packer_ = StreamingPacker(options_);
    block_.clear();
    block_at_ = 0;
    block_size_ = kBlock;
  }

  // The next document of the order. Ids come in blocks from
  // Permutation::Fill. Without a compact copy of the lengths (below
  // CompactLengths::kFrom documents, an array the caches mostly hold, or
  // unshuffled) the length of the document kAhead places ahead is prefetched
  // as documents are pushed. With one (shuffled, from kFrom documents on) a
  // block's lengths and image counts are gathered from it at once, kAhead
  // reads prefetched ahead, in blocks that start at kBlock ids (a reader
  // restored at a checkpoint reads a few) and double up to kMaxBlock (their
  // arrays stay in L2). In the 8-byte arrays every shuffled read had missed
  // the TLB (204 ns/document at 1e8 against 67 at 1e6; 100 with the ids
  // first counting-sorted by their high bits, which the copy made slower).
  // The ids and the lengths, and so the plan, are the same either way.
  static constexpr Index kBlock = 512, kMaxBlock = 4096, kAhead = 24;
  void PushNext() {
    if (block_at_ == static_cast<Index>(block_.size())) FillBlock();
    const std::size_t j = static_cast<std::size_t>(block_at_++);
    ++pushed_;
    const Index d = block_[j];
    if (lazy_compact_) {
      packer_.Push(d, CpPaddedLength(block_length_[j], granule_), block_images_[j]);
    } else {
      if (j + kAhead < block_.size()) Prefetch(block_[j + kAhead]);
      packer_.Push(d, CpPaddedLength(docs_->Length(d), granule_), docs_->Images(d));
    }
    if (!packer_.dropped_items().empty()) {
      std::vector<Index> dropped = packer_.TakeDropped();
      dropped_ += static_cast<Index>(dropped.size());
      if (dropped_sink_)
        dropped_sink_->insert(dropped_sink_->end(), dropped.begin(), dropped.end());
    }
  }
  [[gnu::noinline]] void FillBlock() {
    const Index n = std::min(block_size_, docs_->count - pushed_);
    const std::size_t un = static_cast<std::size_t>(n);
    block_.resize(un);
    if (shuffle_) {
      order_.Fill(pushed_, 1, n, block_.data());
    } else {
      std::iota(block_.begin(), block_.end(), pushed_);
    }
    block_at_ = 0;
    const Index* ids = block_.data();
    if (!lazy_compact_) {
      for (Index j = 0; j < std::min(kAhead, n); ++j) Prefetch(ids[j]);
      return;
    }
    if (!compact_) compact_ = lazy_compact_->Get(*docs_);
    block_size_ = std::min(2 * block_size_, kMaxBlock);
    block_length_.resize(un);
    block_images_.resize(un);
    const std::uint16_t* compact = compact_->data();
    const Index* images_data = docs_->images_data;
    const bool images = images_data || docs_->images;
    for (Index j = 0; j < n; ++j) {
      if (j + kAhead < n) {
        __builtin_prefetch(compact + ids[j + kAhead]);
        if (images_data) __builtin_prefetch(images_data + ids[j + kAhead]);
      }
      const Index d = ids[j];
      const std::uint16_t c = compact[d];
      block_length_[static_cast<std::size_t>(j)] =
          c != CompactLengths::kEscape ? Index{c} : docs_->Length(d);
      block_images_[static_cast<std::size_t>(j)] = images ? docs_->Images(d) : 0;
    }
  }
  void Prefetch(Index d) const {
    // One array of lengths or offsets (offsets[d + 1] is mostly on the
    // same line). Note: with a third conditional prefetch here GCC 12 emitted
    // none at all (the planner ran 1.6x slower).
    if (lengths_) __builtin_prefetch(lengths_ + 8 * d);
    if (docs_->images_data) __builtin_prefetch(docs_->images_data + d);
  }

  const TrainDocuments* docs_;
  PackOptions options_;
  bool shuffle_;
  std::uint64_t seed_;
  bool continuous_;
  Index granule_;  // CP granularity: documents packed padded to it
  // length_data, offsets_data or pointer_bytes: 8 bytes per document (prefetched)
  const char* lengths_;
  // The lengths' compact copy (shuffled plans from CompactLengths::kFrom
  // documents on: blocks are gathered from it), or null; compact_ once got.
  const LazyCompactLengths* lazy_compact_;
  const CompactLengths* compact_ = nullptr;
  Permutation order_;
  std::uint64_t epoch_;
  Index pushed_ = 0;
  bool finished_ = false;
  Index popped_ = 0;
  Index dropped_ = 0;
  StreamingPacker packer_;
  std::vector<Index>* dropped_sink_ = nullptr;
  std::vector<Index> block_;         // ids of order positions [pushed_ - block_at_, ...)
  std::vector<Index> block_length_;  // their lengths and image counts (compact_ set)
  std::vector<Index> block_images_;
  Index block_size_ = kBlock;  // of the next block (doubles along a pass)
  Index block_at_ = 0;
  EpochTotals left_;  // of the first epoch this stream left (continuous)
  bool left_set_ = false;
};

// Throws invalid_argument naming `param` when the epoch's stream has fewer
// packs than options.position (after taking them from *stream).
// Reaching `position` replays the epoch's stream, never beyond its end (a
// position past it is refused: in continuous mode the stream would go on
// into the next epochs for ever). TrainPlan::Prepare has bounded position by
// MaxPacks first.
void SkipToPosition(const TrainDocuments* docs, const TrainOptions& o, PackStream* stream,
                    std::string_view param);

}  // namespace internal

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_INTERNAL_PACK_STREAM_H_
