#include "shardkit/loader/mixture_loader.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/sharding/mixture_json.h"

namespace shardkit {

namespace {

constexpr std::uint64_t kWindowDomain = 0x4d49585749ULL;  // "MIXWI"

void CheckSamples(Index samples) {
  if (samples < 1) ThrowInvalid("samples", "must be >= 1 per epoch, got " + Str(samples));
  if (samples > kMaxWindowSamples) {
    ThrowInvalid("samples",
                 Str(samples) +
                     " per epoch: listing a window takes 16 bytes per sample; at most 2^31 (" +
                     Str(kMaxWindowSamples) + ")");
  }
}

void CheckSources(std::span<const std::shared_ptr<const TokenSource>> sources) {
  if (sources.empty()) ThrowInvalid("sources", "no sources; give at least one");
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (sources[k] == nullptr) {
      ThrowInvalid("sources", "source " + Str(static_cast<Index>(k)) + " is None");
    }
  }
}

// Document i of a window view: sample window.first + i of the order. The
// plan and the collating threads read the window in runs (the packer's
// buffer spans neighbouring chunks), so each thread keeps the last chunks of
// kChunk samples it filled, kWays of them by chunk number (keyed by the
// view's serial number, never reused), and a sample costs a lookup in them.
class ChunkCache {
 public:
  static constexpr Index kChunk = 1024;
  static constexpr Index kWays = 4;
  struct Way {
    std::uint64_t owner = 0;
    Index chunk = -1;
    Index sources[kChunk];
    Index items[kChunk];
  };
  Way ways[kWays];
};

TokenSource::Locator WindowLocator(std::shared_ptr<const MixtureOrder> order,
                                   MixtureWindow window) {
  static std::atomic<std::uint64_t> serial{0};
  const std::uint64_t id = serial.fetch_add(1) + 1;
  return [order = std::move(order), window, id](Index i, Index* source, Index* item) {
    thread_local ChunkCache cache;
    const Index chunk = i / ChunkCache::kChunk;
    ChunkCache::Way& way = cache.ways[chunk % ChunkCache::kWays];
    if (way.owner != id || way.chunk != chunk) {
      const Index begin = chunk * ChunkCache::kChunk;
      const Index end = std::min(window.count, begin + ChunkCache::kChunk);
      order->Fill(window.first + begin, window.first + end, way.sources, way.items);
      way.owner = id;
      way.chunk = chunk;
    }
    const std::size_t j = static_cast<std::size_t>(i % ChunkCache::kChunk);
    *source = way.sources[j];
    *item = way.items[j];
  };
}

}  // namespace

Mixture MixtureOfSources(std::span<const std::shared_ptr<const TokenSource>> sources,
                         std::vector<double> weights, MixtureOptions options) {
  CheckSources(sources);
  std::vector<Index> sizes;
  options.tokens.clear();
  for (const auto& source : sources) {
    sizes.push_back(source->num_documents());
    if (options.by == MixBy::kTokens || options.schedule_unit == MixBy::kTokens) {
      options.tokens.push_back(source->num_tokens());
    }
  }
  return Mixture(std::move(sizes), std::move(weights), std::move(options));
}

MixtureWindow MixtureEpochWindow(const Mixture& mixture, Index samples, std::uint64_t epoch) {
  CheckSamples(samples);
  if (epoch > static_cast<std::uint64_t>(std::numeric_limits<Index>::max() / samples)) {
    ThrowInvalid("epoch", std::to_string(epoch) + " x " + Str(samples) +
                              " samples per epoch overflows a 64-bit position");
  }
  const Index first = static_cast<Index>(epoch) * samples;
  MixtureWindow w;
  w.first = std::min(first, mixture.size());
  w.count = std::min(samples, mixture.size() - w.first);
  return w;
}

void MixtureWindowSamples(const Mixture& mixture, MixtureWindow window, Index* sources,
                          Index* items) {
  if (window.first < 0 || window.count < 0 || window.first > mixture.size() ||
      window.count > mixture.size() - window.first) {
    ThrowOutOfRange("window", "[" + Str(window.first) + ", +" + Str(window.count) +
                                  ") is outside the mixture's [0, " + Str(mixture.size()) + ")");
  }
  mixture.Fill(window.first, window.first + window.count, sources, items);
}

std::shared_ptr<const TokenSource> MixtureSource(
    std::vector<std::shared_ptr<const TokenSource>> sources, const Mixture& mixture,
    MixtureWindow window) {
  return MixtureSource(std::move(sources), MixtureOrder(mixture, 1), window);
}

std::shared_ptr<const TokenSource> MixtureSource(
    std::vector<std::shared_ptr<const TokenSource>> sources, const MixtureOrder& order,
    MixtureWindow window) {
  CheckSources(sources);
  const Mixture& mixture = order.current();
  if (static_cast<Index>(sources.size()) != mixture.num_sources()) {
    ThrowInvalid("sources", Str(static_cast<Index>(sources.size())) + " sources for a mixture of " +
                                Str(mixture.num_sources()));
  }
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (sources[k]->num_documents() != mixture.sizes()[k]) {
      ThrowInvalid("sources", "source " + Str(static_cast<Index>(k)) + " has " +
                                  Str(sources[k]->num_documents()) +
                                  " documents but the mixture's size is " +
                                  Str(mixture.sizes()[k]));
    }
  }
  order.CheckWindow(window.first, window.first + window.count);
  // The identity: the window and the plans of the pieces it reads (which
  // determine its samples), not the samples themselves (O(K), whatever the
  // window's size).
  Hasher h(kWindowDomain);
  h.Add(static_cast<std::uint64_t>(window.first));
  h.Add(static_cast<std::uint64_t>(window.count));
  const auto& pieces = order.pieces();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Index b = order.begin(i);
    const Index e = i + 1 < pieces.size() ? order.begin(i + 1) : order.size();
    if (e <= window.first || b >= window.first + window.count) continue;
    h.Add(static_cast<std::uint64_t>(b));
    h.AddBytes(WriteJson(MixturePlanJson(pieces[i])));
  }
  std::uint64_t identity = h.Finish();
  if (identity == 0) identity = 1;  // 0 means "no view"
  return TokenSource::Select(std::move(sources), window.count,
                             WindowLocator(std::make_shared<const MixtureOrder>(order), window),
                             identity);
}

// ---------------------------------------------------------------------------
// MixtureOrder

namespace {

Index PieceBegin(const Mixture& m) { return m.options().origin + m.options().skip; }

Index PieceEnd(const Mixture& m) {
  const Index b = PieceBegin(m);
  return m.size() > std::numeric_limits<Index>::max() - b ? std::numeric_limits<Index>::max()
                                                          : b + m.size();
}

}  // namespace

MixtureOrder::MixtureOrder(Mixture mixture, Index samples) : samples_(samples) {
  CheckSamples(samples);
  pieces_.push_back(std::move(mixture));
}

MixtureOrder::MixtureOrder(std::vector<Mixture> pieces, Index samples)
    : pieces_(std::move(pieces)), samples_(samples) {
  CheckSamples(samples);
  if (pieces_.empty()) ThrowInvalid("state", "a mixture order needs at least one mixture");
  for (std::size_t i = 1; i < pieces_.size(); ++i) {
    const Mixture& a = pieces_[i - 1];
    const Mixture& b = pieces_[i];
    if (b.sizes() != a.sizes()) {
      ThrowInvalid("state", "mixture " + Str(static_cast<Index>(i)) +
                                " has other sources than the one before it");
    }
    if (PieceBegin(b) <= PieceBegin(a) || PieceBegin(b) > PieceEnd(a)) {
      ThrowInvalid("state", "mixture " + Str(static_cast<Index>(i)) + " begins at " +
                                Str(PieceBegin(b)) + ", outside (" + Str(PieceBegin(a)) + ", " +
                                Str(PieceEnd(a)) + "] (the mixture before it)");
    }
  }
}

Index MixtureOrder::begin(std::size_t piece) const { return PieceBegin(pieces_[piece]); }

Index MixtureOrder::size() const { return PieceEnd(pieces_.back()); }

MixtureWindow MixtureOrder::Window(std::uint64_t epoch) const {
  if (epoch > static_cast<std::uint64_t>(std::numeric_limits<Index>::max() / samples_)) {
    ThrowInvalid("epoch", std::to_string(epoch) + " x " + Str(samples_) +
                              " samples per epoch overflows a 64-bit position");
  }
  const Index first = static_cast<Index>(epoch) * samples_;
  if (first < start()) {
    ThrowInvalid("epoch", std::to_string(epoch) + " begins at sample " + Str(first) +
                              ", before this loader's order (from sample " + Str(start()) +
                              ", where its weights changed)");
  }
  MixtureWindow w;
  w.first = std::min(first, size());
  w.count = std::min(samples_, size() - w.first);
  return w;
}

void MixtureOrder::CheckWindow(Index begin, Index end) const {
  if (begin < start() || end < begin || end > size()) {
    ThrowOutOfRange("window", "[" + Str(begin) + ", " + Str(end) + ") is outside the order's [" +
                                  Str(start()) + ", " + Str(size()) + ")");
  }
}

void MixtureOrder::Fill(Index begin, Index end, Index* sources, Index* items) const {
  CheckWindow(begin, end);
  for (std::size_t i = 0; i < pieces_.size() && begin < end; ++i) {
    const Index b = PieceBegin(pieces_[i]);
    const Index e = i + 1 < pieces_.size() ? PieceBegin(pieces_[i + 1]) : PieceEnd(pieces_[i]);
    if (begin >= e) continue;
    const Index stop = std::min(end, e);
    pieces_[i].Fill(begin - b, stop - b, sources, items);
    sources += stop - begin;
    items += stop - begin;
    begin = stop;
  }
}

void MixtureOrder::Take(std::span<const Index> positions, Index* sources, Index* items) const {
  for (std::size_t j = 0; j < positions.size(); ++j) {
    if (positions[j] < start() || positions[j] >= size()) {
      ThrowOutOfRange("position", "entry " + Str(static_cast<Index>(j)) + " is " +
                                      Str(positions[j]) + ", outside the order's [" + Str(start()) +
                                      ", " + Str(size()) + ")");
    }
  }
  std::vector<Index> local, where;
  std::vector<Index> s, t;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const Index b = PieceBegin(pieces_[i]);
    const Index e = i + 1 < pieces_.size() ? PieceBegin(pieces_[i + 1]) : PieceEnd(pieces_[i]);
    local.clear();
    where.clear();
    for (std::size_t j = 0; j < positions.size(); ++j) {
      if (positions[j] >= b && positions[j] < e) {
        local.push_back(positions[j] - b);
        where.push_back(static_cast<Index>(j));
      }
    }
    if (local.empty()) continue;
    s.resize(local.size());
    t.resize(local.size());
    pieces_[i].Take(local, s.data(), t.data());
    for (std::size_t j = 0; j < local.size(); ++j) {
      sources[where[j]] = s[j];
      items[where[j]] = t[j];
    }
  }
}

MixtureState MixtureOrder::StateAt(Index at) const {
  if (at < start() || at > size()) {
    ThrowOutOfRange("position", Str(at) + " is outside the order's [" + Str(start()) + ", " +
                                    Str(size()) + "]");
  }
  std::size_t i = pieces_.size() - 1;
  while (i > 0 && PieceBegin(pieces_[i]) > at) --i;
  return pieces_[i].State(at - PieceBegin(pieces_[i]));
}

MixtureOrder MixtureOrder::Changed(Index at, const Mixture& like, Index keep_from) const {
  Mixture next = Mixture::Continue(StateAt(at), like.weights(), like.options());
  std::vector<Mixture> pieces;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    if (PieceBegin(pieces_[i]) >= at) break;  // replaced by the change
    const Index e = i + 1 < pieces_.size() ? PieceBegin(pieces_[i + 1]) : PieceEnd(pieces_[i]);
    if (e <= keep_from && e < at) continue;  // wholly before what is kept
    pieces.push_back(pieces_[i]);
  }
  pieces.push_back(std::move(next));
  return MixtureOrder(std::move(pieces), samples_);
}

Index DefaultMixtureSamples(const Mixture& mixture) {
  if (mixture.bounded()) return std::clamp<Index>(mixture.size(), 1, kMaxWindowSamples);
  Index total = 0;
  for (Index n : mixture.sizes()) total = CheckedAdd("sizes", total, n);
  return std::clamp<Index>(total, 1, kMaxWindowSamples);
}

void MixtureDelivery::Add(const Batch& batch, std::span<const Index> window_sources) {
  Add(batch, window_sources, 0, static_cast<Index>(window_sources.size()));
}

void MixtureDelivery::Add(const Batch& batch, std::span<const Index> window_sources, Index first,
                          Index end) {
  for (std::size_t k = 0; k < batch.documents.size(); ++k) {
    const Index d = batch.documents[k];
    if (d < 0 || d >= static_cast<Index>(window_sources.size())) {
      ThrowOutOfRange("batch", "document " + Str(d) + " is outside the window's " +
                                   Str(static_cast<Index>(window_sources.size())));
    }
    if (d < first || d >= end) continue;
    const std::size_t s = static_cast<std::size_t>(window_sources[static_cast<std::size_t>(d)]);
    if (tokens.size() <= s) {
      tokens.resize(s + 1, 0);
      documents.resize(s + 1, 0);
    }
    tokens[s] += batch.lengths[k];
    documents[s] += batch.starts[k] == 0 ? 1 : 0;
  }
}

std::vector<double> MixtureDelivery::Realised(MixBy by) const {
  const std::vector<Index>& v = by == MixBy::kTokens ? tokens : documents;
  Index total = 0;
  for (Index x : v) total += x;
  std::vector<double> out(v.size(), 0.0);
  for (std::size_t i = 0; i < v.size() && total > 0; ++i) {
    out[i] = static_cast<double>(v[i]) / static_cast<double>(total);
  }
  return out;
}

std::vector<double> TargetShares(const Mixture& mixture) {
  double total = 0;
  for (double w : mixture.weights()) total += w;
  std::vector<double> out;
  for (double w : mixture.weights()) out.push_back(total > 0 ? w / total : 0.0);
  return out;
}

// ---------------------------------------------------------------------------
// The mixture loader's state

namespace {

// Version 3: sealed (a checksum over the whole state), the loader state of
// version 3 inside. Version 2 had no checksum; version 1 states were made with
// the mixture's earlier per-block orders.
constexpr int kMixtureLoaderStateVersion = 3;

Json ParseMixtureLoaderJson(std::string_view text) {
  Json j = ParseJson(text, "state");
  ExpectType(j, "state", Json::Type::kObject);
  if (AsString(Field(j, "state", "kind"), "state.kind") != "mixture_loader") {
    ThrowInvalid("state", "not a mixture loader state");
  }
  ExpectStateVersion(j, "state", kMixtureLoaderStateVersion, "mixture loader",
                     "version 1 mixtures had other per-block orders and version 2 states had no "
                     "checksum, so such a state cannot be resumed exactly");
  ExpectOnlyKeys(j, "state",
                 {"version", "kind", "epoch", "samples", "mixture", "loader", "checksum"});
  return j;
}

std::uint64_t StateEpoch(const LoaderState& s) { return s.train ? s.train->epoch : s.epoch; }

// Whether `order` holds the window of `epoch` = previous of `next` (next >= 1).
bool HoldsEpoch(const MixtureOrder& order, std::uint64_t epoch, std::uint64_t next) {
  return next > 0 &&
         static_cast<Index>(epoch) <= std::numeric_limits<Index>::max() / order.samples() &&
         static_cast<Index>(epoch) * order.samples() >= order.start();
}

}  // namespace

bool IsMixtureLoaderState(std::string_view text) {
  try {
    const Json j = ParseJson(text, "state");
    if (j.type() != Json::Type::kObject) return false;
    const Json* kind = j.Find("kind");
    return kind && kind->type() == Json::Type::kString && kind->string_value() == "mixture_loader";
  } catch (const std::invalid_argument&) {
    return false;
  }
}

namespace {

// Every field but "checksum", in the order of the format: `mixture` is the
// list of the plans of the order's pieces from the state's window on.
Json MixtureLoaderBody(Json mixture, Index samples, const LoaderState& loader) {
  Json j = Json::MakeObject();
  j.Set("version", Json::Int(kMixtureLoaderStateVersion));
  j.Set("kind", Json::String("mixture_loader"));
  j.Set("epoch", Json::Uint(StateEpoch(loader)));
  j.Set("samples", Json::Int(samples));
  j.Set("mixture", std::move(mixture));
  j.Set("loader", ParseJson(LoaderStateToJson(loader), "state"));
  return j;
}

}  // namespace

std::string MixtureLoaderStateToJson(const MixtureOrder& order, const LoaderState& loader) {
  // The pieces from the state's window on (older ones are not needed), or
  // from the window before for the start of an epoch (an equal-steps end
  // state is made for that window: the reader checks its stream against it).
  const std::uint64_t epoch = StateEpoch(loader);
  const bool start = loader.train && loader.train->position == 0;
  const MixtureWindow w =
      order.Window(start && HoldsEpoch(order, epoch - 1, epoch) ? epoch - 1 : epoch);
  Json pieces = Json::MakeArray();
  const auto& all = order.pieces();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i + 1 < all.size() && order.begin(i + 1) <= w.first) continue;
    pieces.Push(MixturePlanJson(all[i]));
  }
  return SealState(MixtureLoaderBody(std::move(pieces), order.samples(), loader));
}

MixtureLoaderState MixtureLoaderStateFromJson(std::string_view text) {
  const Json j = ParseMixtureLoaderJson(text);
  MixtureLoaderState s;
  s.samples = AsInt64(Field(j, "state", "samples"), "state.samples");
  const Json::Array& pieces = AsArray(Field(j, "state", "mixture"), "state.mixture");
  Json plans = Json::MakeArray();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    plans.Push(CanonicalMixturePlan(pieces[i], "state.mixture[" + std::to_string(i) + "]"));
  }
  s.loader = LoaderStateFromJson(WriteJson(Field(j, "state", "loader")));
  // The seal, before anything of the order is built or used.
  CheckStateSeal(j, "state", MixtureLoaderBody(std::move(plans), s.samples, s.loader));
  if (AsUint64(Field(j, "state", "epoch"), "state.epoch") != StateEpoch(s.loader)) {
    ThrowAtPath("state.epoch", "differs from the loader state's epoch");
  }
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    s.pieces.push_back(MixtureFromPlanJson(pieces[i], "state.mixture[" + std::to_string(i) + "]"));
  }
  if (s.samples < 1 || s.samples > kMaxWindowSamples) {
    ThrowAtPath("state.samples", "must be in [1, 2^31], got " + Str(s.samples));
  }
  const MixtureOrder order(s.pieces, s.samples);  // the pieces hold together
  // The epoch's window is in the order (a state whose window begins before
  // its first piece was read, then failed in the writer: fuzzed).
  try {
    (void)order.Window(StateEpoch(s.loader));
  } catch (const std::invalid_argument& e) {
    ThrowInvalid("state", e.what());
  }
  return s;
}

std::string MergeMixtureLoaderStates(std::span<const std::string> texts) {
  if (texts.empty()) ThrowInvalid("state", "no states to merge");
  std::vector<LoaderState> loaders;
  std::string mixture;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const Json j = ParseMixtureLoaderJson(texts[i]);
    std::string order =
        WriteJson(Field(j, "state", "mixture")) + " " + WriteJson(Field(j, "state", "samples"));
    if (i == 0) {
      mixture = std::move(order);
    } else if (order != mixture) {
      ThrowInvalid("state",
                   "states come from mixture loaders of different orders (weights "
                   "or their changes differ)");
    }
    loaders.push_back(LoaderStateFromJson(WriteJson(Field(j, "state", "loader"))));
  }
  const MixtureLoaderState first = MixtureLoaderStateFromJson(texts[0]);
  const LoaderState merged = MergeLoaderStates(loaders);
  return MixtureLoaderStateToJson(MixtureOrder(first.pieces, first.samples), merged);
}

// ---------------------------------------------------------------------------
// Resume

namespace {

bool SameSchedule(const std::vector<SchedulePoint>& a, const std::vector<SchedulePoint>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const SchedulePoint& x, const SchedulePoint& y) {
                      return x.position == y.position && x.weights == y.weights;
                    });
}

void CheckSameRun(const Mixture& state, const Mixture& mixture, Index state_samples,
                  std::optional<Index> samples) {
  const MixtureOptions& a = state.options();
  const MixtureOptions& b = mixture.options();
  if (state.sizes() != mixture.sizes()) {
    ThrowInvalid("sources",
                 "the state's mixture has other sources (document counts) than "
                 "this loader's");
  }
  if (a.by != b.by) {
    ThrowInvalid("by", "the state's mixture is by " + std::string(MixByName(a.by)) +
                           ", this loader's by " + std::string(MixByName(b.by)));
  }
  if (!a.tokens.empty() && !b.tokens.empty() && a.tokens != b.tokens) {
    ThrowInvalid("sources", "the state's mixture has other token counts than this loader's");
  }
  if (a.seed != b.seed) {
    ThrowInvalid("seed", "the state's mixture has seed " + std::to_string(a.seed) +
                             ", this loader's " + std::to_string(b.seed));
  }
  const auto flags = [&](const Mixture& m) {
    std::vector<bool> r = m.options().repeat;
    if (r.empty()) r.assign(static_cast<std::size_t>(m.num_sources()), true);
    return r;
  };
  if (flags(state) != flags(mixture)) {
    ThrowInvalid("repeat", "the state's mixture repeats other sources than this loader's");
  }
  if (samples.has_value() && state_samples != *samples) {
    ThrowInvalid("samples", "the state's loader reads " + Str(state_samples) +
                                " samples per epoch, this loader " + Str(*samples));
  }
}

bool SamePlan(const Mixture& state, const Mixture& mixture) {
  const MixtureOptions& a = state.options();
  const MixtureOptions& b = mixture.options();
  return state.weights() == mixture.weights() && SameSchedule(a.schedule, b.schedule) &&
         a.schedule_unit == b.schedule_unit && a.interpolation == b.interpolation &&
         a.block == b.block;
}

TrainOptions PackingOptions(const LoaderOptions& o, std::uint64_t epoch) {
  TrainOptions t = LoaderTrainOptions(o);
  t.shuffle = false;  // the mixture is the order
  t.epoch = epoch;
  return t;
}

// The window's documents as the loader's plan reads them (its stream
// fingerprint covers the view's data fingerprint).
TrainDocuments DocumentsOf(const TokenSource* source) {
  return TrainDocumentsOf(*source, FingerprintData(*source).hash);
}

}  // namespace

MixtureResume ResumeMixtureLoader(const std::vector<std::shared_ptr<const TokenSource>>& sources,
                                  const Mixture& mixture, std::optional<Index> samples,
                                  const LoaderOptions& options, std::string_view text) {
  if (!IsMixtureLoaderState(text)) {
    // A plain loader state: an order of this mixture alone (the loader checks
    // the state's fingerprint against the window).
    return MixtureResume{MixtureOrder(mixture, samples.value_or(DefaultMixtureSamples(mixture))),
                         LoaderStateFromJson(text)};
  }
  MixtureLoaderState s = MixtureLoaderStateFromJson(text);
  CheckSameRun(s.pieces.back(), mixture, s.samples, samples);
  MixtureOrder old(std::move(s.pieces), s.samples);
  const bool same = SamePlan(old.current(), mixture);
  const std::uint64_t epoch = StateEpoch(s.loader);
  const MixtureWindow window = old.Window(epoch);
  if (s.loader.train && s.loader.train->position == 0) {
    // Nothing of the epoch's stream taken: the start of epoch `epoch` (also
    // the end state of the epoch before, made for that epoch's window), so
    // the whole window is the order's from here, with its own stream. The
    // state's stream must be one of those two windows' first (the state is
    // bound to its data like any other).
    auto stream_of = [&](std::uint64_t e) {
      const auto view = MixtureSource(sources, old, old.Window(e));
      return TrainPlan::Deferred(DocumentsOf(view.get()), PackingOptions(options, e), std::nullopt)
          ->stream();
    };
    bool bound = s.loader.train->stream == stream_of(epoch);
    if (!bound && HoldsEpoch(old, epoch - 1, epoch)) {
      bound = s.loader.train->stream == stream_of(epoch - 1);
    }
    if (!bound) {
      ThrowInvalid("state",
                   "was saved for another data set or mixture: the data differs (its stream "
                   "fingerprint is neither epoch " +
                       std::to_string(epoch) + "'s window's nor the epoch before's)");
    }
    MixtureOrder order = same ? old : old.Changed(window.first, mixture, window.first);
    const auto view = MixtureSource(sources, order, order.Window(epoch));
    const auto plan =
        TrainPlan::Deferred(DocumentsOf(view.get()), PackingOptions(options, epoch), std::nullopt);
    LoaderState loader = s.loader;
    loader.train->stream = plan->stream();
    return MixtureResume{std::move(order), std::move(loader), !same, 0, window.first};
  }
  if (same) return MixtureResume{old, s.loader};

  // A change of weights: keep the window's documents read so far.
  const auto before = MixtureSource(sources, old, window);
  Index read = 0;
  if (s.loader.train) {
    if (!options.equal_steps) {
      ThrowInvalid("state", "was saved by an equal-steps loader; this loader packs per rank");
    }
    const auto plan = TrainPlan::Deferred(DocumentsOf(before.get()), PackingOptions(options, epoch),
                                          *s.loader.train);
    read = plan->DocumentsReadAt(s.loader.train->position);
  } else {
    if (options.equal_steps) {
      ThrowInvalid("state", "was saved by a loader packing per rank; this loader has equal steps");
    }
    const DataFingerprint data = FingerprintData(*before);
    if (s.loader.num_documents != data.documents || s.loader.num_tokens != data.tokens ||
        s.loader.data_hash != data.hash) {
      ThrowInvalid("state",
                   "was saved for another window of the mixture (its data fingerprint "
                   "differs from epoch " +
                       std::to_string(epoch) + "'s window)");
    }
    if (s.loader.consumers > 1) {
      ThrowInvalid("state", "is consumer " + Str(s.loader.consumer) + "'s of " +
                                Str(s.loader.consumers) +
                                "; changing the weights needs the states of every consumer "
                                "(a list) or their merge");
    }
    if (s.loader.consumers == 1) {
      const LoaderState one[1] = {s.loader};
      s.loader = MergeLoaderStates(one);
    }
    ValidateLoaderState(s.loader);
    // Order positions (= window documents: the mixture is the order) before
    // `position`, and every done one, were read; none after the last done.
    read = s.loader.position;
    if (!s.loader.done.empty()) read = std::max(read, s.loader.done.back() + 1);
  }
  const Index at = window.first + read;
  MixtureOrder next = old.Changed(at, mixture, window.first);
  const auto after = MixtureSource(sources, next, next.Window(epoch));
  LoaderState loader = s.loader;
  if (loader.train) {
    const auto plan =
        TrainPlan::Deferred(DocumentsOf(after.get()), PackingOptions(options, epoch), std::nullopt);
    loader.train->stream = plan->stream();
  } else {
    const DataFingerprint data = FingerprintData(*after);
    loader.num_documents = data.documents;
    loader.num_tokens = data.tokens;
    loader.data_hash = data.hash;
  }
  return MixtureResume{std::move(next), std::move(loader), true, read, at};
}

// ---------------------------------------------------------------------------
// MixtureLoader

namespace {

LoaderOptions CheckedMixtureOptions(LoaderOptions o) {
  if (o.shuffle) {
    ThrowInvalid("shuffle",
                 "not an option of a mixture loader (the mixture is the order); give false");
  }
  if (o.shard_files) {
    ThrowInvalid("shard_files",
                 "not an option of a mixture loader (the mixture is the order; each source is "
                 "a (tokens, offsets) pair or a directory)");
  }
  if (o.equal_steps && o.mode == TrainMode::kContinuous) {
    ThrowInvalid("mode",
                 "'continuous' is not supported with a mixture (each epoch is its own window of "
                 "the mixture); use 'pad' or 'drop'");
  }
  return o;
}

// The sources as the loader reads them: pread unless the options say mmap
// (LoaderOptions::read: a mixture reads each source in a permuted order).
std::vector<std::shared_ptr<const TokenSource>> ReadSources(
    std::vector<std::shared_ptr<const TokenSource>> sources, ReadMode read) {
  const ReadMode mode = read == ReadMode::kAuto ? ReadMode::kPread : read;
  for (auto& source : sources) {
    if (source != nullptr) source = source->WithReads(mode);
  }
  return sources;
}

}  // namespace

MixtureLoader::MixtureLoader(std::vector<std::shared_ptr<const TokenSource>> sources,
                             std::vector<double> weights, MixtureOptions mixture,
                             LoaderOptions options, std::optional<Index> samples)
    : sources_(ReadSources(std::move(sources), options.read)),
      requested_(MixtureOfSources(sources_, std::move(weights), std::move(mixture))),
      samples_given_(samples),
      options_(CheckedMixtureOptions(std::move(options))),
      order_(requested_, samples.value_or(DefaultMixtureSamples(requested_))),
      loader_(std::make_shared<TokenLoader>(
          [this](std::uint64_t epoch) {
            return MixtureSource(sources_, order_, order_.Window(epoch));
          },
          options_)) {}

MixtureLoader::~MixtureLoader() = default;

std::optional<MixtureBatch> MixtureLoader::Next(std::optional<std::uint64_t> generation) {
  const Index pass = generation ? static_cast<Index>(*generation) : loader_->pass();
  std::shared_ptr<const Batch> batch = loader_->Next(pass);
  if (!batch) return std::nullopt;
  MixtureBatch out;
  out.sources.resize(batch->documents.size());
  out.items.resize(batch->documents.size());
  const MixtureWindow w = order_.Window(batch->epoch);
  std::vector<Index> positions(batch->documents.begin(), batch->documents.end());
  for (Index& p : positions) p += w.first;
  order_.Take(positions, out.sources.data(), out.items.data());
  out.batch = std::move(batch);
  return out;
}

void MixtureLoader::SetEpoch(std::uint64_t epoch) { loader_->SetEpoch(epoch); }

void MixtureLoader::Load(std::string_view text) {
  MixtureResume r = ResumeMixtureLoader(sources_, requested_, samples_given_, options_, text);
  // The loader reads its windows from order_ (its EpochSource): the new order
  // first, the old one back if the loader refuses the state.
  MixtureOrder previous = std::move(order_);
  order_ = std::move(r.order);
  try {
    loader_->Restore(std::move(r.loader));
  } catch (...) {
    order_ = std::move(previous);
    throw;
  }
  last_resume_ = LastResume{r.changed, r.read, r.at};
}

void MixtureLoader::Load(std::span<const std::string> texts) {
  if (texts.empty()) ThrowInvalid("state", "no states; give the state of every consumer");
  Load(MergeMixtureLoaderStates(texts));
}

std::string MixtureLoader::State() const {
  return MixtureLoaderStateToJson(order_, loader_->State());
}

std::string MixtureLoader::StateAt(Index steps) const {
  const TrainPlan* plan = loader_->train_plan();
  if (plan == nullptr) ThrowInvalid("equal_steps", "the loader packs per rank; it has no plan");
  LoaderState s;
  s.train = plan->StateAt(steps);
  return MixtureLoaderStateToJson(order_, s);
}

std::uint64_t MixtureLoader::epoch() const { return loader_->options().epoch; }
std::uint64_t MixtureLoader::BeginPass() {
  return static_cast<std::uint64_t>(loader_->BeginPass());
}
std::uint64_t MixtureLoader::pass_epoch() const { return loader_->epoch(); }
std::uint64_t MixtureLoader::generation() const {
  return static_cast<std::uint64_t>(loader_->pass());
}
std::shared_ptr<const TokenLoader> MixtureLoader::loader() const { return loader_; }
std::shared_ptr<const TokenSource> MixtureLoader::view() const { return loader_->shared_source(); }

void MixtureLoader::Locate(std::uint64_t epoch, std::span<const Index> documents, Index* sources,
                           Index* items) const {
  const MixtureWindow w = order_.Window(epoch);
  std::vector<Index> positions(documents.begin(), documents.end());
  for (std::size_t j = 0; j < positions.size(); ++j) {
    if (positions[j] < 0 || positions[j] >= w.count) {
      ThrowOutOfRange("documents", "entry " + Str(static_cast<Index>(j)) + " is " +
                                       Str(positions[j]) + ", outside the window's " +
                                       Str(w.count));
    }
    positions[j] += w.first;
  }
  order_.Take(positions, sources, items);
}

}  // namespace shardkit
