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

// Runs a loader from `state` to the end of its epoch.
void RunLoader(shardkit::LoaderOptions options, const shardkit::LoaderState& state,
               Delivered* delivered) {
  std::optional<shardkit::TokenLoader> loader;
  try {
    loader.emplace(Documents().source, options, state);
  } catch (const std::invalid_argument&) {
    return;
  }
  for (Index n = 0; n < kMaxBatches; ++n) {
    const auto batch = loader->Next();
    if (!batch) break;
    CheckBatch(*batch, delivered);
  }
  // The loader's own state reads back.
  const std::string text = shardkit::LoaderStateToJson(loader->State());
  (void)shardkit::LoaderStateFromJson(text);
}

bool Runnable(const shardkit::LoaderState& s) {
  if (s.train) return true;
  return s.num_documents == kDocuments && s.seq_len >= 1 && s.seq_len <= kMaxSeqLen &&
         s.consumers <= kMaxConsumers;
}

void RunState(const shardkit::LoaderOptions& base, const shardkit::LoaderState& s) {
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
    RunLoader(o, t, &delivered);
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
    RunLoader(o, s, &delivered);
    return;
  }
  // A merged state: every consumer of a new run, no token twice among them.
  if (s.shard_files) return;
  Delivered delivered;
  for (Index world : {Index{1}, Index{3}}) {
    delivered = Delivered();
    o.world_size = world;
    for (o.rank = 0; o.rank < world; ++o.rank) RunLoader(o, s, &delivered);
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

  for (const std::string& t : texts) {
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
      if (Runnable(s)) RunState(o, s);
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
        if (runnable) RunState(o, merged);
      } catch (const std::invalid_argument&) {
      }
    }
  }
}

void FuzzPackerState(std::uint8_t flags, std::string_view text) {
  shardkit::PackerState state;
  try {
    state = shardkit::PackerStateFromJson(text);
  } catch (const std::invalid_argument&) {
    return;
  }
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
    for (const shardkit::PackItem& p : pack.pieces) {
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
  shardkit::MixtureLoaderState state;
  try {
    state = shardkit::MixtureLoaderStateFromJson(text);
  } catch (const std::invalid_argument&) {
    return;
  }
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
