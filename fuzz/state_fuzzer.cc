// libFuzzer harness: the state codec (shardkit/loader/loader_state.h) and
// what trusts its result: the loader's and the streaming packer's resume.
//
// Input: one byte of options, then the JSON text of a state. The options
// byte: bit 0 reads the text as a StreamingPacker state (else a loader
// state, a list of them or an equal-steps train_plan state); bits 1-2 the
// packer algorithm (next_fit, ffd, bfd, balanced); bit 3 oversize drop
// (else split); bit 4 one background thread (else none; loader) or
// max_images 2 (packer); bits 5-6 the batch size - 1 (loader) or the
// capacity (packer: 16, 32, 64, 100); bit 7 a buffer of 8 items (loader
// and packer) and max_sequences 3 (packer).
//
// Every text goes through the real reader. Loader states are also read a
// second time sealed again (their checksum recomputed), so that a mutated
// state reaches the structural checks, which are what keeps a resumed loader
// inside its documents (older versions are refused naming the version). Accepted states must
// round-trip through the writer, and a loader (or packer) built from one must
// deliver only pieces of its documents, with their own tokens, no token
// twice, and a state its own reader accepts again. Refusals must be
// std::invalid_argument.
//
// The delivery oracle (docs/loader.md "State and resume"): a consumer's state
// that a loader accepts must be a checkpoint of an uninterrupted run, the run
// of that consumer (under the options byte's packing options or any other
// algorithm, batch size, buffer and oversize, which a state does not record)
// that passes through it, the writer's text equal, after `batches` batches;
// the resumed loader must deliver exactly that run's remaining batches (the
// same options), or nothing that run delivered before the state and, both
// splitting, every other token of its share once (other options). An
// equal-steps state of this data's stream (pad, split) must resume inside the
// epoch's packs, and the packs before its position (the pack stream does not
// depend on the batch shape) with what the loader delivers hold every token
// once. A state accepted that no run passes through is a finding: for a sealed
// state that means any edit must be refused (the input's own text; a state
// the harness sealed again after its mutation is a forgery the seal cannot
// see, held to the structural checks above).
//
// The data set is fixed (Documents() below: 40 documents of 0 to 96 tokens,
// token p of document d is d * 1000 + p); fuzz/corpus/state/ holds states
// saved from it by fuzz/make_state_corpus.py.
//
// A mixture loader's state (kind "mixture_loader", whatever the options byte)
// goes through its own reader, must round-trip, and is resumed over three
// sources that are each the data set (item i of any source is document i),
// with its own weights or, with bit 3, weights 1:2:1 (a change at the read
// point): the loader must deliver only pieces of its window's documents, with
// those documents' tokens, no token of the window twice, and a state its
// reader accepts. Windows above kMaxWindow samples are read, not run.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/json.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/mixture_loader.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/packing/packing.h"

namespace {

using shardkit::Index;
using shardkit::Json;

constexpr Index kDocuments = 40;
constexpr Index kMaxSeqLen = 512;    // larger states are read, not run
constexpr Index kMaxConsumers = 64;  // likewise
constexpr Index kMaxBatches = 4096;
constexpr Index kMaxWindow = 4096;

Index DocumentLength(Index d) { return (d * 37 + 11) % 97; }

struct Data {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> offsets{0};
  std::shared_ptr<const shardkit::TokenSource> source;
};

const Data& Documents() {
  static const Data* data = [] {
    auto* d = new Data;
    for (Index doc = 0; doc < kDocuments; ++doc) {
      for (Index p = 0; p < DocumentLength(doc); ++p) {
        d->tokens.push_back(static_cast<std::int32_t>(doc * 1000 + p));
      }
      d->offsets.push_back(static_cast<std::int64_t>(d->tokens.size()));
    }
    d->source = shardkit::TokenSource::FromMemory(
        d->tokens.data(), shardkit::TokenDType::kInt32, static_cast<Index>(d->tokens.size()),
        d->offsets.data(), static_cast<Index>(d->offsets.size()));
    return d;
  }();
  return *data;
}

// Tokens delivered so far, one flag per token of the data set.
struct Delivered {
  std::vector<bool> seen = std::vector<bool>(Documents().tokens.size(), false);
  void Mark(Index doc, Index start, Index length) {
    for (Index p = start; p < start + length; ++p) {
      const auto at = static_cast<std::size_t>(Documents().offsets[doc] + p);
      if (seen[at]) __builtin_trap();  // a token delivered twice
      seen[at] = true;
    }
  }
};

// Every piece of the batch is a piece of a document, and the row holds that
// piece's own tokens.
// `delivered` null: tokens may repeat (a mixture window holds a document of
// the data set once per sample that drew it).
void CheckBatch(const shardkit::Batch& b, Delivered* delivered) {
  const auto& data = Documents();
  const std::size_t pieces = b.documents.size();
  if (b.starts.size() != pieces || b.lengths.size() != pieces || b.rows.size() != pieces) {
    __builtin_trap();
  }
  if (b.input_ids.size() != static_cast<std::size_t>(b.batch_size * b.seq_len)) __builtin_trap();
  for (Index row = 0; row < b.batch_size; ++row) {
    // The row's non-empty pieces, in order; document_ids[t] = k names the k-th.
    std::vector<std::size_t> row_pieces;
    Index tokens = 0;
    for (std::size_t i = 0; i < pieces; ++i) {
      if (b.rows[i] != row) continue;
      const Index doc = b.documents[i], start = b.starts[i], length = b.lengths[i];
      if (doc < 0 || doc >= kDocuments || start < 0 || length < 0 || length > DocumentLength(doc) ||
          start > DocumentLength(doc) - length) {
        __builtin_trap();
      }
      if (delivered != nullptr) delivered->Mark(doc, start, length);
      tokens += length;
      if (length > 0) row_pieces.push_back(i);
    }
    if (tokens > b.seq_len) __builtin_trap();
    std::vector<Index> used(row_pieces.size(), 0);
    Index real = 0;
    for (Index t = 0; t < b.seq_len; ++t) {
      const auto at = static_cast<std::size_t>(row * b.seq_len + t);
      const std::int32_t k = b.document_ids[at];
      if (k < 0) continue;
      if (static_cast<std::size_t>(k) >= row_pieces.size()) __builtin_trap();
      const std::size_t i = row_pieces[static_cast<std::size_t>(k)];
      const Index p = b.starts[i] + used[static_cast<std::size_t>(k)]++;
      if (used[static_cast<std::size_t>(k)] > b.lengths[i]) __builtin_trap();
      if (b.input_ids[at] !=
          data.tokens[static_cast<std::size_t>(data.offsets[b.documents[i]] + p)]) {
        __builtin_trap();  // another document's tokens
      }
      ++real;
    }
    if (real != tokens) __builtin_trap();
  }
}

// A batch as its pieces: (document, start, length, row) each.
// What parse(text) returns, or nothing when it refuses the text (an
// invalid_argument: the outcome every harness accepts).
template <typename Parse>
auto Parsed(Parse parse, std::string_view text) -> std::optional<decltype(parse(text))> {
  try {
    return parse(text);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

using Pieces = std::vector<std::array<Index, 4>>;

Pieces PiecesOf(const shardkit::Batch& b) {
  Pieces out;
  for (std::size_t i = 0; i < b.documents.size(); ++i) {
    out.push_back({b.documents[i], b.starts[i], b.lengths[i], b.rows[i]});
  }
  return out;
}

// Runs a loader from `state` (or from the start of its epoch) to the end of
// its epoch; the batches it delivered, or nullopt when it refused the state.
std::optional<std::vector<Pieces>> RunLoader(shardkit::LoaderOptions options,
                                             const std::optional<shardkit::LoaderState>& state,
                                             Delivered* delivered) {
  std::optional<shardkit::TokenLoader> loader;
  try {
    loader.emplace(Documents().source, options, state);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  std::vector<Pieces> batches;
  for (Index n = 0; n < kMaxBatches; ++n) {
    const auto batch = loader->Next();
    if (!batch) break;
    CheckBatch(*batch, delivered);
    batches.push_back(PiecesOf(*batch));
  }
  // The loader's own state reads back.
  const std::string text = shardkit::LoaderStateToJson(loader->State());
  (void)shardkit::LoaderStateFromJson(text);
  return batches;
}

bool Runnable(const shardkit::LoaderState& s) {
  if (s.train) return true;
  return s.num_documents == kDocuments && s.seq_len >= 1 && s.seq_len <= kMaxSeqLen &&
         s.consumers <= kMaxConsumers;
}

// The delivery oracle of a consumer's state: an accepted state must be a
// checkpoint of an uninterrupted run of that consumer, the one that passes
// through it after `batches` batches, under the options of the options byte
// or other packing options (algorithm, batch size, buffer, oversize, which the
// state does not record). The options of that run (the byte's first), or
// nullopt when no run passes through the state.
std::optional<shardkit::LoaderOptions> Origin(const shardkit::LoaderOptions& o,
                                              const shardkit::LoaderState& s) {
  shardkit::LoaderState want = s;
  std::vector<shardkit::LoaderOptions> candidates{o};
  for (int algorithm = 0; algorithm < 4; ++algorithm) {
    for (Index batch = 1; batch <= 4; ++batch) {
      for (bool buffer : {false, true}) {
        for (bool drop : {false, true}) {
          shardkit::LoaderOptions c = o;
          c.algorithm = static_cast<shardkit::PackAlgorithm>(algorithm);
          c.batch_size = batch;
          c.buffer = buffer ? std::optional<Index>(8) : std::nullopt;
          c.oversize = drop ? shardkit::Oversize::kDrop : shardkit::Oversize::kSplit;
          candidates.push_back(c);
        }
      }
    }
  }
  for (shardkit::LoaderOptions c : candidates) {
    c.num_threads = 0;
    shardkit::TokenLoader fresh(Documents().source, c);
    Index k = 0;
    while (k < s.batches && fresh.Next()) ++k;
    if (k != s.batches) continue;
    const shardkit::LoaderState at = fresh.State();
    // A version-1 state (upgraded) does not know the data's token count
    // and hash; everything else must be the run's.
    if (!want.num_tokens) want.num_tokens = at.num_tokens;
    if (!want.data_hash) want.data_hash = at.data_hash;
    if (shardkit::LoaderStateToJson(at) == shardkit::LoaderStateToJson(want)) return c;
  }
  return std::nullopt;
}

bool SamePacking(const shardkit::LoaderOptions& a, const shardkit::LoaderOptions& b) {
  return a.algorithm == b.algorithm && a.batch_size == b.batch_size && a.buffer == b.buffer &&
         a.oversize == b.oversize;
}

// Every token of the batches, once each (traps on a token twice).
void MarkAll(const std::vector<Pieces>& batches, Delivered* delivered) {
  for (const Pieces& b : batches) {
    for (const auto& p : b) delivered->Mark(p[0], p[1], p[2]);
  }
}

// A consumer's state that the loader accepted (it delivered `after`): the
// rule of docs/loader.md "State and resume". The same options as the run that
// passes through the state: exactly that run's remaining batches. Other
// packing options: nothing that run delivered before the state again, no
// token twice, and (both splitting long documents) every token of the
// consumer's share once.
void CheckConsumerDelivery(const shardkit::LoaderOptions& o, const shardkit::LoaderState& s,
                           const std::vector<Pieces>& after) {
  const std::optional<shardkit::LoaderOptions> origin = Origin(o, s);
  if (!origin) __builtin_trap();  // accepted, but no uninterrupted run passes through it
  shardkit::LoaderOptions c = *origin;
  c.num_threads = 0;
  const std::vector<Pieces> run = *RunLoader(c, std::nullopt, nullptr);
  const auto k = static_cast<std::size_t>(s.batches);
  if (SamePacking(c, o)) {
    if (run.size() - k != after.size()) __builtin_trap();
    for (std::size_t i = 0; i < after.size(); ++i) {
      if (after[i] != run[k + i]) __builtin_trap();  // not the run's remaining batches
    }
    return;
  }
  Delivered delivered;
  MarkAll(std::vector<Pieces>(run.begin(), run.begin() + static_cast<std::ptrdiff_t>(k)),
          &delivered);
  MarkAll(after, &delivered);
  if (c.oversize == shardkit::Oversize::kSplit && o.oversize == shardkit::Oversize::kSplit) {
    Delivered whole;
    MarkAll(run, &whole);
    if (whole.seen != delivered.seen) __builtin_trap();  // a token of the share lost
  }
}

// An equal-steps state with this data's stream: the pack stream does not
// depend on the batch shape, so with one row per step (world 1, batch 1)
// step p is pack p. The packs before the state's position and the batches
// the loader delivered from it hold every token once (mode pad, split).
void CheckTrainDelivery(const shardkit::LoaderOptions& o, const shardkit::LoaderState& t,
                        const std::vector<Pieces>& after) {
  if (o.oversize != shardkit::Oversize::kSplit || t.train->position < 0) return;
  shardkit::LoaderOptions one = o;
  one.batch_size = 1;
  one.world_size = 1;
  one.rank = 0;
  one.num_threads = 0;
  const std::vector<Pieces> packs = *RunLoader(one, std::nullopt, nullptr);
  const auto p = static_cast<std::size_t>(t.train->position);
  if (p > packs.size()) __builtin_trap();  // accepted a position past the epoch's packs
  Delivered delivered;
  MarkAll(std::vector<Pieces>(packs.begin(), packs.begin() + static_cast<std::ptrdiff_t>(p)),
          &delivered);
  MarkAll(after, &delivered);
  for (bool seen : delivered.seen) {
    if (!seen) __builtin_trap();  // a token never delivered
  }
}

// `as_given`: the state is the input's own text, not one the harness sealed
// again after a mutation (a forged seal, which only the structural checks
// can catch); only such a state must be a checkpoint of a real run.
void RunState(const shardkit::LoaderOptions& base, const shardkit::LoaderState& s, bool as_given) {
  shardkit::LoaderOptions o = base;
  o.epoch = s.epoch;
  if (s.train) {
    // An equal-steps state: the plan refuses another stream, so give it this
    // data's stream and let the position be whatever the input says.
    o.equal_steps = true;
    o.seq_len = 32;
    shardkit::TokenLoader fresh(Documents().source, o);
    shardkit::LoaderState t = s;
    t.train->stream = fresh.train_plan()->StateAt(0).stream;
    Delivered delivered;
    const auto after = RunLoader(o, t, &delivered);
    if (after && o.mode == shardkit::TrainMode::kPad && t.train->epoch == o.epoch) {
      CheckTrainDelivery(o, t, *after);
    }
    return;
  }
  o.seq_len = s.seq_len;
  o.shuffle = s.shuffle;
  o.seed = s.seed;
  o.shard_files = s.shard_files;
  if (s.consumers > 0) {
    o.world_size = s.consumers;
    o.rank = s.consumer >= 0 && s.consumer < s.consumers ? s.consumer : 0;
    Delivered delivered;
    const auto after = RunLoader(o, s, &delivered);
    if (after && as_given && !s.shard_files) CheckConsumerDelivery(o, s, *after);
    return;
  }
  // A merged state: every consumer of a new run, no token twice among them.
  if (s.shard_files) return;
  Delivered delivered;
  for (Index world : {Index{1}, Index{3}}) {
    delivered = Delivered();
    o.world_size = world;
    for (o.rank = 0; o.rank < world; ++o.rank) (void)RunLoader(o, s, &delivered);
  }
}

// A loader state of this version sealed again (shardkit/base/json.h: its
// checksum recomputed over the other fields as they are), so that a mutated
// state reaches the checks behind the seal (the fingerprint, the structural
// checks). Anything else is returned as it is.
std::optional<std::string> Resealed(const Json& state) {
  if (state.type() != Json::Type::kObject) return std::nullopt;
  const Json* version = state.Find("version");
  if (!version || version->type() != Json::Type::kInt || version->negative() ||
      version->magnitude() != static_cast<std::uint64_t>(shardkit::kLoaderStateVersion)) {
    return std::nullopt;
  }
  Json body = Json::MakeObject();
  for (const auto& [key, value] : state.object()) {
    if (key != "checksum") body.Set(key, value);
  }
  return shardkit::SealState(body);
}

// The loader options of the options byte but oversize (bit 3), which the
// mixture loader reads as "new weights".
shardkit::LoaderOptions LoaderOptionsOf(std::uint8_t flags) {
  shardkit::LoaderOptions o;
  o.equal_steps = false;  // per rank; RunState turns the plan on
  o.algorithm = static_cast<shardkit::PackAlgorithm>((flags >> 1) & 3);
  o.num_threads = (flags & 16) ? 1 : 0;
  o.batch_size = ((flags >> 5) & 3) + 1;
  if (flags & 128) o.buffer = 8;
  return o;
}

void FuzzLoaderStates(std::uint8_t flags, std::string_view text) {
  shardkit::LoaderOptions o = LoaderOptionsOf(flags);
  o.oversize = (flags & 8) ? shardkit::Oversize::kDrop : shardkit::Oversize::kSplit;

  std::vector<std::string> texts{std::string(text)};
  try {
    const Json parsed = shardkit::ParseJson(text, "state");
    if (auto u = Resealed(parsed)) texts.push_back(*u);
    if (parsed.type() == Json::Type::kArray) {
      Json list = Json::MakeArray();
      bool any = false;
      for (const Json& s : parsed.array()) {
        auto u = Resealed(s);
        any = any || u.has_value();
        list.Push(u ? shardkit::ParseJson(*u, "state") : s);
      }
      if (any) texts.push_back(shardkit::WriteJson(list));
    }
  } catch (const std::invalid_argument&) {
  }

  for (std::size_t i = 0; i < texts.size(); ++i) {
    const std::string& t = texts[i];
    std::vector<shardkit::LoaderState> states;
    try {
      states = shardkit::LoaderStatesFromJson(t);
    } catch (const std::invalid_argument&) {
      continue;
    }
    for (const shardkit::LoaderState& s : states) {
      // The writer's text reads back to the same text.
      const std::string once = shardkit::LoaderStateToJson(s);
      const std::string twice = shardkit::LoaderStateToJson(shardkit::LoaderStateFromJson(once));
      if (once != twice) __builtin_trap();
      if (Runnable(s)) RunState(o, s, i == 0);
    }
    if (states.size() > 1) {
      bool runnable = true;
      for (const auto& s : states) runnable = runnable && Runnable(s) && !s.train;
      try {
        const shardkit::LoaderState merged = shardkit::MergeLoaderStates(states);
        const std::string once = shardkit::LoaderStateToJson(merged);
        if (shardkit::LoaderStateToJson(shardkit::LoaderStateFromJson(once)) != once) {
          __builtin_trap();
        }
        if (runnable) RunState(o, merged, i == 0);
      } catch (const std::invalid_argument&) {
      }
    }
  }
}

void FuzzPackerState(std::uint8_t flags, std::string_view text) {
  const auto parsed = Parsed(shardkit::PackerStateFromJson, text);
  if (!parsed) return;
  const shardkit::PackerState& state = *parsed;
  const std::string once = shardkit::PackerStateToJson(state);
  if (shardkit::PackerStateToJson(shardkit::PackerStateFromJson(once)) != once) __builtin_trap();

  shardkit::PackOptions o;
  o.algorithm = static_cast<shardkit::PackAlgorithm>((flags >> 1) & 3);
  o.oversize = (flags & 8) ? shardkit::Oversize::kDrop : shardkit::Oversize::kSplit;
  if (flags & 16) o.max_images = 2;
  static constexpr Index kCapacities[] = {16, 32, 64, 100};
  o.capacity = kCapacities[(flags >> 5) & 3];
  if (flags & 128) {
    o.buffer = 8;
    o.max_sequences = 3;
  }
  try {
    shardkit::PackerStateFits(state, o);
  } catch (const std::invalid_argument&) {
  }
  std::optional<shardkit::StreamingPacker> packer;
  try {
    packer.emplace(o, state);
  } catch (const std::invalid_argument&) {
    return;
  }
  // New items (ids the state cannot hold) after the restored ones; every
  // pack that comes out obeys every budget.
  constexpr Index kFirstNew = Index{1} << 40;
  for (Index i = 0; i < 24; ++i) {
    packer->Push(kFirstNew + i, DocumentLength(i) * (i % 3), o.max_images ? i % 2 : 0);
  }
  packer->Finish();
  shardkit::Pack pack;
  Index popped = 0;
  while (packer->Pop(&pack)) {
    if (++popped > (Index{1} << 20)) __builtin_trap();
    Index tokens = 0, images = 0;
    for (const shardkit::Piece& p : pack.pieces) {
      if (p.length < 0 || p.start < 0 || p.images < 0) __builtin_trap();
      tokens += p.length;
      images += p.images;
    }
    if (tokens > o.capacity || tokens != pack.tokens) __builtin_trap();
    if (o.max_images && images > *o.max_images) __builtin_trap();
    if (o.max_sequences && static_cast<Index>(pack.pieces.size()) > *o.max_sequences) {
      __builtin_trap();
    }
  }
  if (packer->pending() != 0) __builtin_trap();
  (void)shardkit::PackerStateFromJson(shardkit::PackerStateToJson(packer->State()));
}

// Three sources, each the data set.
const std::vector<std::shared_ptr<const shardkit::TokenSource>>& MixtureSources() {
  static const auto* sources =
      new std::vector<std::shared_ptr<const shardkit::TokenSource>>(3, Documents().source);
  return *sources;
}

void FuzzMixtureLoaderState(std::uint8_t flags, std::string_view text) {
  const auto parsed = Parsed(shardkit::MixtureLoaderStateFromJson, text);
  if (!parsed) return;
  const shardkit::MixtureLoaderState& state = *parsed;
  const shardkit::MixtureOrder order(state.pieces, state.samples);  // FromJson checked it
  const std::string once = shardkit::MixtureLoaderStateToJson(order, state.loader);
  const shardkit::MixtureLoaderState back = shardkit::MixtureLoaderStateFromJson(once);
  if (shardkit::MixtureLoaderStateToJson(shardkit::MixtureOrder(back.pieces, back.samples),
                                         back.loader) != once) {
    __builtin_trap();
  }
  if (state.samples > kMaxWindow) return;
  const shardkit::LoaderState& ls = state.loader;
  if (!ls.train && (ls.seq_len < 1 || ls.seq_len > kMaxSeqLen || ls.consumers > kMaxConsumers)) {
    return;
  }

  // The run asked for: the state's current plan (or new weights), fresh.
  shardkit::MixtureOptions mo = order.current().options();
  mo.origin = 0;
  mo.start.clear();
  mo.skip = 0;
  std::vector<double> weights = order.current().weights();
  if (flags & 8) {  // 1:2:1 (for three sources): a change at the read point
    weights.assign(weights.size(), 1.0);
    weights[1 % weights.size()] = 2.0;
  }
  shardkit::LoaderOptions o = LoaderOptionsOf(flags);  // oversize split: bit 3 is the weights
  o.shuffle = false;
  o.seed = order.current().options().seed;  // a mixture loader's seed is its mixture's
  if (ls.train) {
    o.equal_steps = true;
    o.seq_len = 32;
  } else {
    o.seq_len = ls.seq_len;
    if (ls.consumers > 0) {
      o.world_size = ls.consumers;
      o.rank = ls.consumer >= 0 && ls.consumer < ls.consumers ? ls.consumer : 0;
    }
  }
  std::optional<shardkit::MixtureResume> resume;
  std::shared_ptr<const shardkit::TokenSource> view;
  shardkit::MixtureWindow window;
  std::optional<shardkit::TokenLoader> loader;
  try {
    const shardkit::Mixture requested =
        shardkit::MixtureOfSources(MixtureSources(), weights, std::move(mo));
    resume.emplace(
        shardkit::ResumeMixtureLoader(MixtureSources(), requested, std::nullopt, o, text));
    o.epoch = resume->loader.train ? resume->loader.train->epoch : resume->loader.epoch;
    window = resume->order.Window(o.epoch);
    if (window.count > kMaxWindow) return;
    view = shardkit::MixtureSource(MixtureSources(), resume->order, window);
    loader.emplace(view, o, resume->loader);
  } catch (const std::invalid_argument&) {
    return;
  } catch (const std::out_of_range&) {
    return;
  }
  // Window document w is item items[w] (document items[w] of the data set).
  std::vector<Index> sources(static_cast<std::size_t>(window.count));
  std::vector<Index> items(static_cast<std::size_t>(window.count));
  resume->order.Fill(window.first, window.first + window.count, sources.data(), items.data());
  std::vector<std::vector<bool>> seen(items.size());
  for (std::size_t w = 0; w < items.size(); ++w) {
    if (items[w] < 0 || items[w] >= kDocuments) __builtin_trap();
    seen[w].assign(static_cast<std::size_t>(DocumentLength(items[w])), false);
  }
  for (Index n = 0; n < kMaxBatches; ++n) {
    const auto batch = loader->Next();
    if (!batch) break;
    shardkit::Batch as_data = *batch;
    for (std::size_t i = 0; i < as_data.documents.size(); ++i) {
      const Index w = as_data.documents[i];
      if (w < 0 || w >= window.count) __builtin_trap();  // outside the window
      as_data.documents[i] = items[static_cast<std::size_t>(w)];
      for (Index p = batch->starts[i]; p < batch->starts[i] + batch->lengths[i]; ++p) {
        if (p < 0 || p >= static_cast<Index>(seen[static_cast<std::size_t>(w)].size())) {
          __builtin_trap();
        }
        if (seen[static_cast<std::size_t>(w)][static_cast<std::size_t>(p)]) __builtin_trap();
        seen[static_cast<std::size_t>(w)][static_cast<std::size_t>(p)] = true;
      }
    }
    CheckBatch(as_data, nullptr);
  }
  const std::string saved = shardkit::MixtureLoaderStateToJson(resume->order, loader->State());
  if (!shardkit::IsMixtureLoaderState(saved)) __builtin_trap();
  (void)shardkit::MixtureLoaderStateFromJson(saved);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;
  const std::uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (shardkit::IsMixtureLoaderState(text)) {
    FuzzMixtureLoaderState(flags, text);
  } else if (flags & 1) {
    FuzzPackerState(flags, text);
  } else {
    FuzzLoaderStates(flags, text);
  }
  return 0;
}
