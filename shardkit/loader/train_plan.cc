#include "shardkit/loader/train_plan.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/internal/pack_stream.h"
#include "shardkit/loader/internal/train_deal.h"
#include "shardkit/loader/internal/train_reader.h"
#include "shardkit/loader/internal/train_tally.h"
#include "shardkit/loader/option_fields.h"

namespace shardkit {

namespace {

constexpr char kTrainPlanVersion[] = "shardkit-train-1";
// Hasher domains of the stream fingerprint and the plan fingerprint, and the
// tag of a context-parallel size or granule in them.
constexpr std::uint64_t kStreamDomain = 0x5452414953544d32ULL;  // "TRAISTM2"
constexpr std::uint64_t kPlanDomain = 0x5452414950314e32ULL;    // "TRAIP1N2"
constexpr std::uint64_t kCpTag = 0x4350000000000000ULL;         // "CP"
// Continuous mode packs another stream (documents cut to fill rows); pad and
// drop pack the same one.
constexpr std::uint64_t kContinuousTag = 0x434f4e54494e5545ULL;  // "CONTINUE"
// Tags a stream whose lengths are bound by the documents' identity.
constexpr std::uint64_t kBoundTag = 0x424f554e444c454eULL;  // "BOUNDLEN"

std::string Str(std::uint64_t v) { return std::to_string(v); }

}  // namespace

using internal::Deal;
using internal::DealPacks;
using internal::FillStep;
using internal::Gather;
using internal::PackStream;
using internal::SkipToPosition;
using internal::Tally;

PackOptions TrainPackOptions(const TrainOptions& o) {
  // By name through the two tables (option_fields.h): a new packing field
  // of both structs is carried without a line here.
  constexpr std::pair<std::string_view, std::string_view> kRenamed[] = {{"seq_len", "capacity"}};
  PackOptions p;
  AssignFieldsByName(o, &p, kRenamed);
  return p;
}

namespace {
constexpr EnumNames<TrainMode, 3> kTrainModes{"mode", "mode", {"pad", "continuous", "drop"}};
}  // namespace

SHARDKIT_ENUM_PARSE_AND_NAMES(TrainMode, kTrainModes, ParseTrainMode, TrainModeName, TrainModeNames)

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
  // The shuffled reads of a large corpus's lengths go to a compact copy,
  // made by the first stream that reads them (internal::CompactLengths).
  if (options_.shuffle && documents_.count >= internal::CompactLengths::kFrom) {
    compact_ = std::make_shared<internal::LazyCompactLengths>();
  }
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
  PackStream stream(&documents_, options_, continuous, compact_.get());
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
  PackStream stream(&documents_, options_, false, compact_.get());
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
  // sequential pass, the lengths (and image counts) hashed a block at a time
  // through Hasher::AddArray.
  Hasher h(kStreamDomain);
  h.AddBytes(kTrainPlanVersion);
  h.Add(static_cast<std::uint64_t>(documents_.count));
  h.Add(static_cast<std::uint64_t>(o.seq_len));
  h.Add(o.shuffle ? 1 : 0);
  h.Add(o.seed);
  h.Add(static_cast<std::uint64_t>(o.algorithm));
  h.Add(static_cast<std::uint64_t>(o.buffer.value_or(-1)));
  h.Add(static_cast<std::uint64_t>(o.max_images.value_or(-1)));
  h.Add(static_cast<std::uint64_t>(o.max_sequences.value_or(-1)));
  h.Add(static_cast<std::uint64_t>(o.oversize));
  const Index granule = CpGranule(o.cp);
  // Only when g > 1, so plans without context parallelism keep one stream.
  if (granule > 1) h.Add(kCpTag ^ static_cast<std::uint64_t>(granule));
  // Only for continuous mode, so pad and drop states keep resuming each other
  // (a pad state loaded into a continuous loader delivered tokens twice).
  if (o.mode == TrainMode::kContinuous) h.Add(kContinuousTag);
  if (documents_.lengths_bound && documents_.identity != 0 && !documents_.images) {
    // The identity binds every length (train_plan.h): O(1), no pass. Every
    // document has at most 1 + length_bound / seq_len pieces.
    CheckAtLeast("length_bound", documents_.length_bound, 0);
    if (granule > 1) (void)CheckedAdd("lengths", documents_.length_bound, granule - 1);
    h.Add(kBoundTag);
    h.Add(documents_.identity);
    stream_ = h.Finish();
    if (__builtin_mul_overflow(documents_.count, 1 + documents_.length_bound / o.seq_len,
                               &max_packs_)) {
      max_packs_ = std::numeric_limits<Index>::max();
    }
    return;
  }
  Index total = 0, total_images = 0;
  std::uint64_t lengths[Hasher::kArrayBlock], images[Hasher::kArrayBlock];
  constexpr Index kBlock = static_cast<Index>(Hasher::kArrayBlock);
  for (Index begin = 0; begin < documents_.count; begin += kBlock) {
    const Index n = std::min(kBlock, documents_.count - begin);
    for (Index i = 0; i < n; ++i) {
      const Index d = begin + i;
      const Index len = documents_.Length(d);
      if (len < 0) {
        ThrowInvalid("lengths", "document " + Str(d) + " has negative length " + Str(len));
      }
      total = CheckedAdd("lengths", total, len);
      if (granule > 1) (void)CheckedAdd("lengths", len, granule - 1);  // its padded length
      lengths[i] = static_cast<std::uint64_t>(len);
      if (documents_.images) {
        const Index img = documents_.Images(d);
        if (img < 0) {
          ThrowInvalid("images", "document " + Str(d) + " has a negative image count " + Str(img));
        }
        total_images = CheckedAdd("images", total_images, img);
        images[i] = static_cast<std::uint64_t>(img);
      }
    }
    h.AddArray(lengths, static_cast<std::size_t>(n));
    if (documents_.images) h.AddArray(images, static_cast<std::size_t>(n));
  }
  // The data's identity beyond its lengths (a token source's content hash).
  if (documents_.identity != 0) h.Add(documents_.identity);
  stream_ = h.Finish();
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
  PackStream stream(&documents_, o, continuous, compact_.get());
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

TrainPlan::Reader::Reader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TrainPlan::Reader::~Reader() = default;

Index TrainPlan::Reader::step() const { return impl_->step; }

bool TrainPlan::Reader::Next(TrainStep* out) {
  if (impl_->host) {
    if (!internal::ReadHostStep(*impl_->host, impl_->rank, impl_->step, out)) return false;
    ++impl_->step;
    return true;
  }
  if (!impl_->Advance()) return false;
  FillStep(impl_->deal, impl_->rank, impl_->plan->rows_per_rank_, impl_->step++, out);
  return true;
}

bool TrainPlan::Reader::Skip() {
  if (impl_->host) {
    if (impl_->step >= impl_->plan->num_steps()) {
      TrainStep none;
      return internal::ReadHostStep(*impl_->host, impl_->rank, impl_->step, &none);
    }
    ++impl_->step;
    return true;
  }
  if (!impl_->Advance()) return false;
  ++impl_->step;
  return true;
}

bool TrainPlan::Reader::NextAll(std::vector<TrainStep>* all) {
  if (impl_->host) {
    const Index W = impl_->plan->options_.world_size;
    all->resize(static_cast<std::size_t>(W));
    for (Index r = 0; r < W; ++r) {
      if (!internal::ReadHostStep(*impl_->host, r, impl_->step,
                                  &(*all)[static_cast<std::size_t>(r)])) {
        return false;
      }
    }
    ++impl_->step;
    return true;
  }
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
  Hasher h(kPlanDomain);
  h.Add(stream_);
  h.Add(static_cast<std::uint64_t>(options_.world_size));
  h.Add(static_cast<std::uint64_t>(options_.batch_size));
  h.Add(static_cast<std::uint64_t>(options_.micro_batches));
  h.Add(static_cast<std::uint64_t>(options_.mode));
  h.Add(static_cast<std::uint64_t>(options_.cost));
  h.Add(options_.epoch);
  h.Add(static_cast<std::uint64_t>(options_.position));
  if (options_.cp.size > 1) h.Add(kCpTag ^ static_cast<std::uint64_t>(options_.cp.size));
  return h.Finish();
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
  if (o.cp.strategy != CpStrategy::kHeadTail) {
    s += ", cp_strategy=" + std::string(CpStrategyName(o.cp.strategy));
  }
  s += ", oversize=" + std::string(OversizeName(o.oversize)) +
       ", cost=" + std::string(CostModelName(o.cost));
  s += o.shuffle ? ", shuffle=True, seed=" + Str(o.seed) : std::string(", shuffle=False");
  s += ", epoch=" + Str(o.epoch);
  if (o.position) s += ", position=" + Str(o.position);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(stream_));
  return s + ", stream=" + buf + ", version=" + kTrainPlanVersion + ")";
}

}  // namespace shardkit
