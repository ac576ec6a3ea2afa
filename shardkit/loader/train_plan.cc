#include "shardkit/loader/train_plan.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

namespace {

constexpr char kTrainPlanVersion[] = "shardkit-train-1";

std::string Str(std::uint64_t v) { return std::to_string(v); }

bool SamePieces(const std::vector<PackItem>& a, const std::vector<PackItem>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const PackItem& x, const PackItem& y) {
                      return x.item == y.item && x.length == y.length && x.images == y.images &&
                             x.start == y.start;
                    });
}

// The deal cost of one pack: its tokens, the sum of its squared piece
// lengths, or (squared, with CP) the causal work of its busiest CP rank.
double PackCost(const Pack& pack, CostModel model, const ContextParallelOptions& cp) {
  // Tokens: the pack's total, which the packer keeps (an integer below
  // 2^53, so the same double as the sum of its pieces).
  if (model == CostModel::kTokens) return static_cast<double>(pack.tokens);
  if (cp.size > 1) return CpRowCost(pack.pieces, cp);
  double c = 0;
  for (const PackItem& p : pack.pieces) c += PieceCost(p.length, model);
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------
// The pack stream: the epoch's documents in global order through one packer.

struct TrainPlan::Checkpoint {
  std::uint64_t epoch = 0;
  Index pushed = 0;  // documents of the epoch's order pushed
  bool finished = false;
  Index popped = 0;  // packs of the epoch's stream taken
  Index dropped = 0;
  PackerState packer;
};

struct TrainPlan::Lazy {
  std::once_flag once;
  std::atomic<bool> built{false};
  std::atomic<Index> dealt{0};  // steps the ReadOnce reader has dealt
};

namespace {

class PackStream {
 public:
  PackStream(const TrainDocuments* docs, const TrainOptions& o, bool continuous)
      : docs_(docs),
        options_(TrainPackOptions(o)),
        shuffle_(o.shuffle),
        seed_(o.seed),
        continuous_(continuous),
        granule_(CpGranule(o.cp)),
        lengths_(docs->length_data    ? reinterpret_cast<const char*>(docs->length_data)
                 : docs->offsets_data ? reinterpret_cast<const char*>(docs->offsets_data)
                                      : docs->pointer_bytes),
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
      for (PackItem& p : pack->pieces) {
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
  }

  // The next document of the order: ids come in blocks of kBlock from
  // Permutation::Fill, and the length of the document kAhead places ahead is
  // prefetched (random reads of a large array would otherwise stall).
  static constexpr Index kBlock = 512, kAhead = 24;
  void PushNext() {
    if (block_at_ == static_cast<Index>(block_.size())) {
      const Index n = std::min(kBlock, docs_->count - pushed_);
      block_.resize(static_cast<std::size_t>(n));
      if (shuffle_) {
        order_.Fill(pushed_, 1, n, block_.data());
      } else {
        std::iota(block_.begin(), block_.end(), pushed_);
      }
      block_at_ = 0;
      for (Index j = 0; j < std::min(kAhead, n); ++j) Prefetch(block_[static_cast<std::size_t>(j)]);
    }
    if (block_at_ + kAhead < static_cast<Index>(block_.size())) {
      Prefetch(block_[static_cast<std::size_t>(block_at_ + kAhead)]);
    }
    const Index d = block_[static_cast<std::size_t>(block_at_++)];
    ++pushed_;
    packer_.Push(d, CpPaddedLength(docs_->Length(d), granule_), docs_->Images(d));
    if (!packer_.dropped_items().empty()) {
      std::vector<Index> dropped = packer_.TakeDropped();
      dropped_ += static_cast<Index>(dropped.size());
      if (dropped_sink_)
        dropped_sink_->insert(dropped_sink_->end(), dropped.begin(), dropped.end());
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
  Permutation order_;
  std::uint64_t epoch_;
  Index pushed_ = 0;
  bool finished_ = false;
  Index popped_ = 0;
  Index dropped_ = 0;
  StreamingPacker packer_;
  std::vector<Index>* dropped_sink_ = nullptr;
  std::vector<Index> block_;  // ids of order positions [pushed_ - block_at_, ...)
  Index block_at_ = 0;
  EpochTotals left_;  // of the first epoch this stream left (continuous)
  bool left_set_ = false;
};

// One global step: the packs taken and the rank of each.
struct Deal {
  std::vector<Pack> packs;
  std::vector<std::uint64_t> epochs;
  std::vector<Index> indices;  // stream index of each pack
  std::vector<double> costs;
  RankDeal dealt;  // the ranks of the packs (by: ranks [0, min(W, K)), stream order)
  double total = 0;
  double imbalance = 0;
};

// Fills deal->packs with up to R packs of the stream; returns how many.
Index Gather(PackStream* stream, Index R, Deal* deal) {
  deal->packs.clear();
  deal->epochs.clear();
  deal->indices.clear();
  Pack pack;
  std::uint64_t e;
  Index g;
  while (static_cast<Index>(deal->packs.size()) < R && stream->Next(&pack, &e, &g)) {
    deal->packs.push_back(std::move(pack));
    deal->epochs.push_back(e);
    deal->indices.push_back(g);
  }
  return static_cast<Index>(deal->packs.size());
}

// The step's packs dealt to ranks by DealStep (rank_balance.h, BalanceRanks' deal),
// each step on its own (nothing carried: a plan is read and resumed at any
// step), at most `rows` packs per rank.
void DealPacks(Index W, Index rows, CostModel model, const ContextParallelOptions& cp, Deal* deal) {
  const Index K = static_cast<Index>(deal->packs.size());
  deal->costs.assign(static_cast<std::size_t>(K), 0.0);
  deal->total = 0;
  for (Index k = 0; k < K; ++k) {
    const Pack& pack = deal->packs[static_cast<std::size_t>(k)];
    const double c = PackCost(pack, model, cp);
    deal->costs[static_cast<std::size_t>(k)] = c;
    deal->total += c;
  }
  DealStep(deal->costs, W, rows, {}, &deal->dealt);
  double heaviest = 0;
  for (double c : deal->dealt.rank_costs) heaviest = std::max(heaviest, c);
  const double mean = deal->total / static_cast<double>(W);
  deal->imbalance = mean > 0 ? heaviest / mean - 1.0 : 0.0;
}

void FillStep(const Deal& deal, Index rank, Index rows, Index step, TrainStep* out) {
  out->step = step;
  out->rows.clear();
  out->row_epochs.clear();
  out->row_packs.clear();
  out->tokens = 0;
  out->cost = 0;
  out->imbalance = deal.imbalance;
  if (rank < static_cast<Index>(deal.dealt.by.size())) {
    const std::size_t ur = static_cast<std::size_t>(rank);
    out->cost = deal.dealt.rank_costs[ur];
    for (Index k : deal.dealt.by[ur]) {
      const std::size_t uk = static_cast<std::size_t>(k);
      out->rows.push_back(deal.packs[uk].pieces);
      out->row_epochs.push_back(deal.epochs[uk]);
      out->row_packs.push_back(deal.indices[uk]);
      out->tokens += deal.packs[uk].tokens;
    }
  }
  out->filler_rows = rows - static_cast<Index>(out->rows.size());
  const std::uint64_t e = deal.epochs.empty() ? 0 : deal.epochs.back();
  while (static_cast<Index>(out->rows.size()) < rows) {
    out->rows.emplace_back();
    out->row_epochs.push_back(e);
    out->row_packs.push_back(-1);
  }
}

// Throws invalid_argument naming `position` when the epoch's stream has
// fewer packs than options.position (after taking them from *stream).
// Reaching `position` replays the epoch's stream, never beyond its end (a
// position past it is refused: in continuous mode the stream would go on
// into the next epochs for ever). TrainPlan::Prepare has bounded position by
// MaxPacks first.
void SkipToPosition(const TrainDocuments* docs, const TrainOptions& o, PackStream* stream,
                    std::string_view param) {
  if (stream->SkipInEpoch(o.position) != o.position) {
    PackStream count(docs, o, false);
    const Index p = count.SkipInEpoch(std::numeric_limits<Index>::max());
    ThrowAtPath(param, Str(o.position) + " is outside [0, " + Str(p) + "] (the packs of epoch " +
                           Str(o.epoch) + "'s stream)");
  }
}

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
    DealPacks(o_.world_size, rows_per_rank_, o_.cost, o_.cp, deal);
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

}  // namespace

// ---------------------------------------------------------------------------

PackOptions TrainPackOptions(const TrainOptions& o) {
  PackOptions p;
  p.capacity = o.seq_len;
  p.algorithm = o.algorithm;
  p.max_images = o.max_images;
  p.max_sequences = o.max_sequences;
  p.oversize = o.oversize;
  p.buffer = o.buffer;
  return p;
}

namespace {
constexpr EnumNames<TrainMode, 3> kTrainModes{"mode",
                                              "mode",
                                              {{{TrainMode::kPad, "pad"},
                                                {TrainMode::kContinuous, "continuous"},
                                                {TrainMode::kDrop, "drop"}}}};
}  // namespace

TrainMode ParseTrainMode(std::string_view name) { return kTrainModes.Parse(name); }
std::string_view TrainModeName(TrainMode mode) { return kTrainModes.Name(mode); }
std::vector<std::string_view> TrainModeNames() {
  std::vector<std::string_view> names;
  for (const auto& entry : kTrainModes.entries) names.push_back(entry.name);
  return names;
}

TrainDocuments TrainDocuments::FromSpans(std::span<const Index> lengths,
                                         std::span<const Index> images) {
  if (!images.empty() && images.size() != lengths.size()) {
    ThrowInvalid("images", "has " + Str(static_cast<Index>(images.size())) + " entries, lengths " +
                               Str(static_cast<Index>(lengths.size())));
  }
  TrainDocuments d;
  d.count = static_cast<Index>(lengths.size());
  d.length = [lengths](Index i) { return lengths[static_cast<std::size_t>(i)]; };
  d.length_data = lengths.data();
  if (!images.empty()) {
    d.images = [images](Index i) { return images[static_cast<std::size_t>(i)]; };
    d.images_data = images.data();
  }
  return d;
}

TrainDocuments TrainDocuments::FromOffsets(std::span<const std::int64_t> offsets, Index limit) {
  if (offsets.empty()) {
    ThrowInvalid("offsets", "is empty (num_documents + 1 entries, the first one included)");
  }
  CheckAtLeast("offsets", limit, 0);
  TrainDocuments d;
  d.count = static_cast<Index>(offsets.size()) - 1;
  d.offsets_data = offsets.data();
  d.offsets_limit = limit;
  d.length = [d](Index i) { return d.Length(i); };
  return d;
}

TrainDocuments TrainDocuments::FromSequencePointers(const char* pointers, int shift, Index count,
                                                    Index limit) {
  CheckAtLeast("count", count, 0);
  CheckAtLeast("limit", limit, 0);
  TrainDocuments d;
  d.count = count;
  d.pointer_bytes = pointers;
  d.pointer_shift = shift;
  d.offsets_limit = limit;
  d.length = [d](Index i) { return d.Length(i); };
  return d;
}

TrainPlan::TrainPlan(TrainDocuments documents, TrainOptions options)
    : TrainPlan(std::move(documents), std::move(options), nullptr, false) {}

TrainPlan::TrainPlan(TrainDocuments documents, TrainOptions options, const TrainState& state)
    : TrainPlan(std::move(documents), std::move(options), &state, false) {}

std::unique_ptr<TrainPlan> TrainPlan::Deferred(TrainDocuments documents, TrainOptions options,
                                               const std::optional<TrainState>& state) {
  return std::unique_ptr<TrainPlan>(
      new TrainPlan(std::move(documents), std::move(options), state ? &*state : nullptr, true));
}

TrainPlan::TrainPlan(TrainDocuments documents, TrainOptions options, const TrainState* state,
                     bool deferred)
    : documents_(std::move(documents)), options_(std::move(options)) {
  if (state) {
    options_.epoch = state->epoch;
    options_.position = state->position;
    epoch_param_ = "state.epoch";
    position_param_ = "state.position";
  }
  Prepare();
  if (state && state->stream != stream_) {
    ThrowInvalid("state",
                 "was saved for another data set or packing configuration: the data differs "
                 "or its packing does (stream fingerprint " +
                     HexDigest(state->stream) + " vs this plan's " + HexDigest(stream_) +
                     "; the documents (lengths and content), seq_len, shuffle, seed, algorithm, "
                     "buffer, budgets and oversize must match; world size and batch shape may "
                     "change)");
  }
  CheckPositionBound();
  if (!deferred) {
    Construct();
    return;
  }
  // The stream at `position`, checked, is checkpoint 0: the reader starts there.
  const bool continuous = options_.mode == TrainMode::kContinuous;
  PackStream stream(&documents_, options_, continuous);
  SkipToPosition(&documents_, options_, &stream, position_param_);
  checkpoints_.push_back(std::make_shared<const Checkpoint>(stream.Save()));
  lazy_ = std::make_unique<Lazy>();
}

Index TrainPlan::DocumentsReadAt(Index position) const {
  // The plan's first checkpoint is the stream at its own position (a Deferred
  // plan's is made by its constructor): no replay for that one.
  if (!checkpoints_.empty()) {
    const Checkpoint& c = *checkpoints_.front();
    if (c.epoch == options_.epoch && c.popped == position) return c.pushed;
  }
  PackStream stream(&documents_, options_, false);
  if (position < 0 || stream.Skip(position) != position) {
    PackStream count(&documents_, options_, false);
    const Index p = count.Skip(std::numeric_limits<Index>::max());
    ThrowOutOfRange("position", Str(position) + " is outside [0, " + Str(p) +
                                    "] (the packs of epoch " + Str(options_.epoch) + "'s stream)");
  }
  return stream.pushed();
}

TrainPlan::~TrainPlan() = default;
TrainPlan::TrainPlan(TrainPlan&&) noexcept = default;
TrainPlan& TrainPlan::operator=(TrainPlan&&) noexcept = default;

void TrainPlan::Prepare() {
  const TrainOptions& o = options_;
  CheckAtLeast("seq_len", o.seq_len, 1);
  CheckAtLeast("batch_size", o.batch_size, 1);
  CheckAtLeast("world_size", o.world_size, 1);
  CheckAtLeast("micro_batches", o.micro_batches, 1);
  if (o.position < 0) ThrowAtPath(position_param_, "must not be negative, got " + Str(o.position));
  CheckEpoch(epoch_param_, o.epoch);
  CheckAtLeast("num_documents", documents_.count, 0);
  if (o.oversize == Oversize::kError) {
    ThrowInvalid("oversize",
                 "'error' is not supported by a train plan (a long document would stop the epoch "
                 "half-way); use split or drop");
  }
  ValidatePackOptions(TrainPackOptions(o));
  ValidateContextParallel(o.cp, o.seq_len);
  if (o.max_images && !documents_.images) {
    ThrowInvalid("max_images", "is set but no images were given");
  }
  rows_per_rank_ = CheckedMul("batch_size", o.batch_size, o.micro_batches);
  const Index R = CheckedMul("world_size", o.world_size, rows_per_rank_);
  (void)CheckedMul("batch_size", R, o.seq_len);

  // The stream fingerprint and the validation of every length: one
  // sequential pass, order-independent.
  std::uint64_t h = 0x5452414953544d31ULL;
  auto add = [&h](std::uint64_t v) { h = Mix64(h ^ Mix64(v + 0x9e3779b97f4a7c15ULL)); };
  for (const char* c = kTrainPlanVersion; *c; ++c) add(static_cast<unsigned char>(*c));
  add(static_cast<std::uint64_t>(documents_.count));
  add(static_cast<std::uint64_t>(o.seq_len));
  add(o.shuffle ? 1 : 0);
  add(o.seed);
  add(static_cast<std::uint64_t>(o.algorithm));
  add(static_cast<std::uint64_t>(o.buffer.value_or(-1)));
  add(static_cast<std::uint64_t>(o.max_images.value_or(-1)));
  add(static_cast<std::uint64_t>(o.max_sequences.value_or(-1)));
  add(static_cast<std::uint64_t>(o.oversize));
  const Index granule = CpGranule(o.cp);
  if (granule > 1) add(0x4350000000000000ULL ^ static_cast<std::uint64_t>(granule));
  std::uint64_t content = 0;
  Index total = 0, total_images = 0;
  for (Index d = 0; d < documents_.count; ++d) {
    const Index len = documents_.Length(d);
    if (len < 0) ThrowInvalid("lengths", "document " + Str(d) + " has negative length " + Str(len));
    total = CheckedAdd("lengths", total, len);
    if (granule > 1) (void)CheckedAdd("lengths", len, granule - 1);  // its padded length
    Index img = 0;
    if (documents_.images) {
      img = documents_.Images(d);
      if (img < 0) {
        ThrowInvalid("images", "document " + Str(d) + " has a negative image count " + Str(img));
      }
      total_images = CheckedAdd("images", total_images, img);
    }
    content +=
        Mix64(static_cast<std::uint64_t>(d) * 0x9e3779b97f4a7c15ULL ^
              Mix64(static_cast<std::uint64_t>(len) ^ (static_cast<std::uint64_t>(img) << 40)));
  }
  add(content);
  // The data's identity beyond its lengths (a token source's content hash).
  if (documents_.identity != 0) add(documents_.identity);
  stream_ = h;
  // Every pack holds at least one piece, and a document gives at most
  // 1 + length / seq_len pieces: the epoch's stream has at most this many.
  max_packs_ = documents_.count;
  if (__builtin_add_overflow(max_packs_, total / o.seq_len, &max_packs_)) {
    max_packs_ = std::numeric_limits<Index>::max();
  }
}

void TrainPlan::CheckPositionBound() const {
  // O(1), before any replay: a position from outside (a state, an argument)
  // beyond what the epoch's stream can hold is refused here, not after
  // replaying the stream (in continuous mode, for ever).
  if (options_.position > max_packs_) {
    ThrowAtPath(position_param_, Str(options_.position) + " is more packs than epoch " +
                                     Str(options_.epoch) + "'s stream can hold (at most " +
                                     Str(max_packs_) +
                                     ": one per document plus one per seq_len tokens)");
  }
}

// The construction pass: the whole epoch through the packer and the deal,
// with the totals and checkpoints.
void TrainPlan::Construct() const {
  const TrainOptions& o = options_;
  const bool continuous = o.mode == TrainMode::kContinuous;
  PackStream stream(&documents_, o, continuous);
  SkipToPosition(&documents_, o, &stream, position_param_);
  Tally tally(o, rows_per_rank_, stream_);
  Deal deal;
  checkpoint_stride_ = 1;
  checkpoints_.clear();
  for (Index step = 0;; ++step) {
    if (tally.done() || (continuous && (stream.epoch() != o.epoch || !stream.HasPackInEpoch()))) {
      break;
    }
    if (step % checkpoint_stride_ == 0) {
      if (static_cast<Index>(checkpoints_.size()) == kCheckpoints) {
        std::vector<std::shared_ptr<const Checkpoint>> kept;
        for (std::size_t i = 0; i < checkpoints_.size(); i += 2) kept.push_back(checkpoints_[i]);
        checkpoints_ = std::move(kept);
        checkpoint_stride_ *= 2;
      }
      if (step % checkpoint_stride_ == 0) {
        checkpoints_.push_back(std::make_shared<const Checkpoint>(stream.Save()));
      }
    }
    if (!tally.Step(&stream, &deal)) break;
  }
  summary_ = tally.End(&stream);
}

TrainState TrainPlan::StateAt(Index step) const {
  // A deferred plan knows every step its reader has dealt, before its end.
  if (lazy_ && !lazy_->built.load(std::memory_order_acquire) && step >= 0 &&
      step < lazy_->dealt.load(std::memory_order_acquire)) {
    return {options_.epoch, options_.position + step * options_.world_size * rows_per_rank_,
            stream_};
  }
  CheckPosition("step", step, 0, num_steps());
  if (step == num_steps()) return summary_.end;
  return {options_.epoch, options_.position + step * options_.world_size * rows_per_rank_, stream_};
}

// ---------------------------------------------------------------------------
// Reader

struct TrainPlan::Reader::Impl {
  const TrainPlan* plan;
  Index rank;
  PackStream stream;
  Index step = 0;
  Deal deal;
  std::unique_ptr<Tally> tally;  // ReadOnce: the construction pass's totals

  Impl(const TrainPlan* p, Index r)
      : plan(p),
        rank(r),
        stream(&p->documents_, p->options_, p->options_.mode == TrainMode::kContinuous) {}

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
    const Index K = Gather(&stream, R, &deal);
    if (K == 0) return false;
    DealPacks(o.world_size, plan->rows_per_rank_, o.cost, o.cp, &deal);
    return true;
  }
  bool published = false;
};

TrainPlan::Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TrainPlan::Reader::~Reader() = default;

Index TrainPlan::Reader::step() const { return impl_->step; }

bool TrainPlan::Reader::Next(TrainStep* out) {
  if (!impl_->Advance()) return false;
  FillStep(impl_->deal, impl_->rank, impl_->plan->rows_per_rank_, impl_->step++, out);
  return true;
}

bool TrainPlan::Reader::Skip() {
  if (!impl_->Advance()) return false;
  ++impl_->step;
  return true;
}

bool TrainPlan::Reader::NextAll(std::vector<TrainStep>* all) {
  if (!impl_->Advance()) return false;
  const Index W = impl_->plan->options_.world_size;
  all->resize(static_cast<std::size_t>(W));
  for (Index r = 0; r < W; ++r) {
    FillStep(impl_->deal, r, impl_->plan->rows_per_rank_, impl_->step,
             &(*all)[static_cast<std::size_t>(r)]);
  }
  ++impl_->step;
  return true;
}

std::unique_ptr<TrainPlan::Reader> TrainPlan::Read(Index rank, Index first) const {
  EnsureBuilt();
  if (rank < -1 || rank >= options_.world_size) {
    ThrowOutOfRange("rank", Str(rank) + " is outside [0, " + Str(options_.world_size) + ")");
  }
  const bool continuous = options_.mode == TrainMode::kContinuous;
  if (first < 0 || (!continuous && first > num_steps())) {
    ThrowOutOfRange("step", Str(first) + " is outside [0, " + Str(num_steps()) + "]");
  }
  auto impl = std::make_unique<Reader::Impl>(this, rank);
  impl->SeekTo(first);
  return std::unique_ptr<Reader>(new Reader(std::move(impl)));
}

std::unique_ptr<TrainPlan::Reader> TrainPlan::ReadOnce(Index rank, Index first) const {
  CheckIndex("rank", rank, 0, options_.world_size);
  if (first < 0) ThrowOutOfRange("step", Str(first) + " is negative");
  auto impl = std::make_unique<Reader::Impl>(this, rank);
  impl->tally = std::make_unique<Tally>(options_, rows_per_rank_, stream_);
  impl->SeekTo(first);
  return std::unique_ptr<Reader>(new Reader(std::move(impl)));
}

void TrainPlan::EnsureBuilt() const {
  if (!lazy_ || lazy_->built.load(std::memory_order_acquire)) return;
  std::call_once(lazy_->once, [this] { Construct(); });
  lazy_->built.store(true, std::memory_order_release);
}

void TrainPlan::Publish(TrainSummary summary) const {
  if (!lazy_) return;
  std::call_once(lazy_->once, [&] { summary_ = std::move(summary); });
  lazy_->built.store(true, std::memory_order_release);
}

Index TrainPlan::num_steps() const {
  EnsureBuilt();
  return summary_.num_steps;
}

const TrainSummary& TrainPlan::summary() const {
  EnsureBuilt();
  return summary_;
}

TrainStep TrainPlan::Step(Index rank, Index step) const {
  CheckIndex("rank", rank, 0, options_.world_size);
  const bool continuous = options_.mode == TrainMode::kContinuous;
  if (step < 0 || (!continuous && step >= num_steps()) ||
      (continuous && summary_.stream_packs == 0)) {
    ThrowOutOfRange("step", Str(step) + " is outside [0, " + Str(num_steps()) + ")");
  }
  auto reader = Read(rank, std::min(step, continuous ? step : num_steps()));
  TrainStep out;
  if (!reader->Next(&out)) {
    ThrowOutOfRange("step", Str(step) + " is outside [0, " + Str(num_steps()) + ")");
  }
  return out;
}

std::uint64_t TrainPlan::Fingerprint() const {
  std::uint64_t h = 0x5452414950314e31ULL;
  auto add = [&h](std::uint64_t v) { h = Mix64(h ^ Mix64(v + 0x9e3779b97f4a7c15ULL)); };
  add(stream_);
  add(static_cast<std::uint64_t>(options_.world_size));
  add(static_cast<std::uint64_t>(options_.batch_size));
  add(static_cast<std::uint64_t>(options_.micro_batches));
  add(static_cast<std::uint64_t>(options_.mode));
  add(static_cast<std::uint64_t>(options_.cost));
  add(options_.epoch);
  add(static_cast<std::uint64_t>(options_.position));
  if (options_.cp.size > 1)
    add(0x4350000000000000ULL ^ static_cast<std::uint64_t>(options_.cp.size));
  return h;
}

std::string TrainPlan::Describe() const {
  const TrainOptions& o = options_;
  std::string s = "TrainPlan(num_documents=" + Str(documents_.count) +
                  ", seq_len=" + Str(o.seq_len) + ", batch_size=" + Str(o.batch_size) +
                  ", world_size=" + Str(o.world_size) +
                  ", mode=" + std::string(TrainModeName(o.mode)) +
                  ", algorithm=" + std::string(PackAlgorithmName(o.algorithm));
  if (o.micro_batches != 1) s += ", micro_batches=" + Str(o.micro_batches);
  if (o.buffer) s += ", buffer=" + Str(*o.buffer);
  if (o.max_images) s += ", max_images=" + Str(*o.max_images);
  if (o.max_sequences) s += ", max_sequences=" + Str(*o.max_sequences);
  if (o.cp.size > 1) s += ", cp_size=" + Str(o.cp.size);
  if (o.cp.granularity) s += ", cp_granularity=" + Str(*o.cp.granularity);
  s += ", oversize=" + std::string(OversizeName(o.oversize)) +
       ", cost=" + std::string(CostModelName(o.cost));
  s += o.shuffle ? ", shuffle=True, seed=" + Str(o.seed) : std::string(", shuffle=False");
  s += ", epoch=" + Str(o.epoch);
  if (o.position) s += ", position=" + Str(o.position);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(stream_));
  return s + ", stream=" + buf + ", version=" + kTrainPlanVersion + ")";
}

// ---------------------------------------------------------------------------
// State codec

namespace {

// Every field of a train state but "checksum", in the order of the format.
Json TrainStateBody(const TrainState& s) {
  Json d = Json::MakeObject();
  d.Set("version", Json::Int(kTrainStateVersion));
  d.Set("kind", Json::String("train_plan"));
  d.Set("epoch", Json::Uint(s.epoch));
  d.Set("position", Json::Int(s.position));
  d.Set("stream", Json::String(HexDigest(s.stream)));
  return d;
}

}  // namespace

std::string TrainStateToJson(const TrainState& state) { return SealState(TrainStateBody(state)); }

TrainState TrainStateFromJson(std::string_view json) {
  const Json d = ParseJson(json, "state");
  ExpectType(d, "state", Json::Type::kObject);
  ExpectOnlyKeys(d, "state", {"version", "kind", "epoch", "position", "stream", "checksum"});
  const std::string& kind = AsString(Field(d, "state", "kind"), "state.kind");
  if (kind != "train_plan") ThrowAtPath("state.kind", "'" + kind + "' is not a train_plan state");
  ExpectStateVersion(d, "state", kTrainStateVersion, "train_plan",
                     "version 1 had no checksum, and its stream fingerprint covered the "
                     "document lengths only, not the data");
  TrainState s;
  s.epoch = AsUint64(Field(d, "state", "epoch"), "state.epoch");
  s.position = AsInt64(Field(d, "state", "position"), "state.position");
  s.stream = ReadHexField(d, "state", "stream");
  CheckStateSeal(d, "state", TrainStateBody(s));
  if (s.position < 0) ThrowAtPath("state.position", "must not be negative, got " + Str(s.position));
  CheckEpoch("state.epoch", s.epoch);
  return s;
}

// ---------------------------------------------------------------------------
// Audit

TrainAudit TrainPlan::Audit() const {
  const TrainOptions& o = options_;
  TrainAudit a;
  a.steps = num_steps();
  a.world_size = o.world_size;
  a.rows_per_rank = rows_per_rank_;
  a.documents = documents_.count;
  a.equal_steps = true;
  a.filler_last_only = true;
  auto fail = [&a](const std::string& what) {
    if (a.error.empty()) a.error = what;
  };
  // The whole stream of the epoch, on its own.
  std::vector<std::vector<PackItem>> packs;
  std::vector<Index> dropped_docs;
  {
    PackStream whole(&documents_, o, false);
    whole.set_dropped_sink(&dropped_docs);
    Pack pack;
    std::uint64_t e;
    Index g;
    while (whole.Next(&pack, &e, &g)) packs.push_back(std::move(pack.pieces));
  }
  const Index P = static_cast<Index>(packs.size());
  a.dropped = static_cast<Index>(dropped_docs.size());
  // Every piece of every document exactly once in the stream, dropped
  // documents in none.
  {
    std::vector<std::vector<std::pair<Index, Index>>> by_doc(
        static_cast<std::size_t>(documents_.count));
    const Index granule = CpGranule(o.cp);
    for (const auto& pack : packs) {
      // Every row fits seq_len with each piece padded to the CP granularity.
      if (CpPaddedTokens(pack, granule) > o.seq_len) {
        fail("a pack of " + Str(CpPaddedTokens(pack, granule)) + " padded tokens exceeds seq_len");
      }
      for (const PackItem& p : pack) {
        if (p.item < 0 || p.item >= documents_.count) {
          fail("a piece names document " + Str(p.item));
          continue;
        }
        by_doc[static_cast<std::size_t>(p.item)].push_back({p.start, p.length});
      }
    }
    std::vector<char> dropped(static_cast<std::size_t>(documents_.count), 0);
    for (Index d : dropped_docs) dropped[static_cast<std::size_t>(d)] = 1;
    for (Index d = 0; d < documents_.count; ++d) {
      auto& list = by_doc[static_cast<std::size_t>(d)];
      if (dropped[static_cast<std::size_t>(d)]) {
        if (!list.empty()) fail("dropped document " + Str(d) + " was packed");
        continue;
      }
      std::sort(list.begin(), list.end());
      const Index len = documents_.Length(d);
      Index at = 0;
      bool ok = !list.empty();
      for (auto [start, length] : list) {
        if (start != at || length < 0 || (length == 0 && len != 0)) ok = false;
        at = start + length;
      }
      if (!ok || at != len) fail("document " + Str(d) + " is not covered exactly once");
    }
  }
  // The plan's rows: stream packs [position, position + dealt) in order, each
  // once, with the stream's pieces.
  // Every rank's rows from the deal itself: ranks past the ones that got a
  // pack hold filler only (counted, not listed: W may be huge).
  auto reader = Read(-1, 0);
  Reader::Impl& in = *reader->impl_;
  std::vector<char> seen(static_cast<std::size_t>(P), 0);
  Index dealt = 0;
  for (; in.step < a.steps && in.Advance(); ++in.step) {
    const Index s = in.step;
    const Deal& deal = in.deal;
    const Index used = static_cast<Index>(deal.dealt.by.size());
    Index listed = 0;
    for (Index r = 0; r < used; ++r) {
      const auto& mine = deal.dealt.by[static_cast<std::size_t>(r)];
      listed += static_cast<Index>(mine.size());
      if (static_cast<Index>(mine.size()) > rows_per_rank_) {
        a.equal_steps = false;
        fail("rank " + Str(r) + " got " + Str(static_cast<Index>(mine.size())) + " packs in step " +
             Str(s));
      }
      for (Index k : mine) {
        const std::size_t uk = static_cast<std::size_t>(k);
        if (deal.dealt.owner[uk] != r) fail("pack owner mismatch in step " + Str(s));
        const Index g = deal.indices[uk];
        if (deal.epochs[uk] != o.epoch) continue;  // continuous: a later epoch
        if (g < o.position || g >= P || seen[static_cast<std::size_t>(g)]) {
          fail("pack " + Str(g) + " dealt twice or outside [position, packs)");
          continue;
        }
        seen[static_cast<std::size_t>(g)] = 1;
        ++dealt;
        if (!SamePieces(deal.packs[uk].pieces, packs[static_cast<std::size_t>(g)])) {
          fail("pack " + Str(g) + " changed");
        }
        for (const PackItem& p : deal.packs[uk].pieces) a.tokens += p.length;
      }
    }
    if (listed != static_cast<Index>(deal.packs.size()))
      fail("a pack of step " + Str(s) + " has no rank");
    const Index filler = o.world_size * rows_per_rank_ - listed;
    a.filler_rows += filler;
    if (filler > 0 && (o.mode != TrainMode::kPad || s != a.steps - 1)) {
      a.filler_last_only = false;
      fail("filler rows in step " + Str(s));
    }
  }
  if (in.step != a.steps) fail("the plan ended after " + Str(in.step) + " steps");
  for (Index g = o.position; g < o.position + dealt && g < P; ++g) {
    if (!seen[static_cast<std::size_t>(g)]) fail("pack " + Str(g) + " was skipped");
  }
  const Index tail = P - o.position - dealt;
  if (o.mode == TrainMode::kDrop) {
    a.dropped_packs = tail;
    for (Index g = P - tail; g < P; ++g) {
      for (const PackItem& p : packs[static_cast<std::size_t>(g)]) a.dropped_tokens += p.length;
    }
    if (tail >= o.world_size * rows_per_rank_) fail("drop mode dropped a whole step");
  } else if (tail != 0) {
    fail(Str(tail) + " packs of the epoch were not dealt");
  }
  a.lower_bound = (a.tokens + o.seq_len - 1) / o.seq_len;
  const Index rows_dealt = a.steps * o.world_size * rows_per_rank_;
  a.padding_over_bound =
      a.lower_bound ? static_cast<double>(rows_dealt - a.lower_bound) / a.lower_bound : 0.0;
  a.max_step_imbalance = summary_.max_step_imbalance;
  a.max_full_step_imbalance = summary_.max_full_step_imbalance;
  a.exactly_once = a.error.empty();
  return a;
}

}  // namespace shardkit
