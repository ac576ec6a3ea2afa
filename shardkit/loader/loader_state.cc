#include "shardkit/loader/loader_state.h"

#include <algorithm>
#include <string>
#include <utility>

#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

namespace {

constexpr std::uint64_t kDataDomain = 0x736b2d6461746101ULL;  // "sk-data"
constexpr std::uint64_t kPlanDomain = 0x736b2d706c616e02ULL;  // "sk-plan"

std::string At(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}
std::string Dot(std::string_view path, std::string_view key) {
  return std::string(path) + "." + std::string(key);
}

// ---- writing ---------------------------------------------------------------

Json PieceJson(const Piece& p) {
  return Json::MakeArray(
      {Json::Int(p.item), Json::Int(p.start), Json::Int(p.length), Json::Int(p.images)});
}

Json PackerJson(const PackerState& s, bool with_version) {
  Json out = Json::MakeObject();
  if (with_version) out.Set("version", Json::Int(kPackerStateVersion));
  Json buffered = Json::MakeArray(), pending = Json::MakeArray();
  for (const Piece& p : s.buffered) buffered.Push(PieceJson(p));
  for (const Pack& pack : s.pending) {
    Json l = Json::MakeArray();
    for (const Piece& p : pack.pieces) l.Push(PieceJson(p));
    pending.Push(std::move(l));
  }
  out.Set("buffered", std::move(buffered));
  out.Set("pending", std::move(pending));
  out.Set("items_seen", Json::Int(s.items_seen));
  out.Set("dropped", Json::Int(s.dropped));
  out.Set("split_items", Json::Int(s.split_items));
  out.Set("packs_closed", Json::Int(s.packs_closed));
  out.Set("tokens_closed", Json::Int(s.tokens_closed));
  return out;
}

// Every field but "checksum", in the order of the format.
Json LoaderBody(const LoaderState& s) {
  Json d = Json::MakeObject();
  d.Set("version", Json::Int(kLoaderStateVersion));
  d.Set("epoch", Json::Uint(s.epoch));
  Json head = Json::MakeArray();
  for (const Piece& p : s.head) {
    head.Push(Json::MakeArray({Json::Int(p.item), Json::Int(p.start), Json::Int(p.length)}));
  }
  d.Set("head", std::move(head));
  d.Set("position", Json::Int(s.position));
  Json done = Json::MakeArray();
  for (Index p : s.done) done.Push(Json::Int(p));
  d.Set("done", std::move(done));
  d.Set("consumers", Json::Int(s.consumers));
  d.Set("consumer", Json::Int(s.consumer));
  d.Set("read", Json::Int(s.read));
  d.Set("batches", Json::Int(s.batches));
  d.Set("packer", PackerJson(s.packer, false));
  d.Set("num_documents", Json::Int(s.num_documents));
  d.Set("num_tokens", Json::Int(s.num_tokens.value_or(0)));
  d.Set("data_hash", Json::String(HexDigest(s.data_hash.value_or(0))));
  d.Set("seq_len", Json::Int(s.seq_len));
  d.Set("shuffle", Json::Bool(s.shuffle));
  d.Set("seed", Json::Uint(s.seed));
  d.Set("shard_files", Json::Bool(s.shard_files));
  d.Set("fingerprint", Json::String(HexDigest(PlanFingerprint(s))));
  return d;
}

// ---- reading ---------------------------------------------------------------

Index ReadIndex(const Json& obj, std::string_view path, std::string_view key) {
  return AsInt64(Field(obj, path, key), Dot(path, key));
}

Index ReadCount(const Json& obj, std::string_view path, std::string_view key) {
  const Index v = ReadIndex(obj, path, key);
  if (v < 0) ThrowAtPath(Dot(path, key), "must not be negative, got " + Str(v));
  return v;
}

Piece ReadPiece(const Json& v, const std::string& path) {
  const Json::Array& a = AsArray(v, path);
  if (a.size() != 4) {
    ThrowAtPath(path, "a piece is 4 integers [item, start, length, images], got " +
                          Str(static_cast<Index>(a.size())));
  }
  Piece p;
  p.item = AsInt64(a[0], path + ".item");
  p.start = AsInt64(a[1], path + ".start");
  p.length = AsInt64(a[2], path + ".length");
  p.images = AsInt64(a[3], path + ".images");
  if (p.start < 0 || p.length < 0 || p.images < 0) {
    ThrowAtPath(path, "start " + Str(p.start) + ", length " + Str(p.length) + " and images " +
                          Str(p.images) + " must not be negative");
  }
  Index end;
  if (__builtin_add_overflow(p.start, p.length, &end)) {
    ThrowAtPath(path, "start " + Str(p.start) + " + length " + Str(p.length) + " overflows");
  }
  return p;
}

// A head piece: [document, start, length].
Piece ReadHeadPiece(const Json& v, const std::string& path) {
  const Json::Array& a = AsArray(v, path);
  if (a.size() != 3) ThrowAtPath(path, "a head piece is 3 integers [document, start, length]");
  const Index document = AsInt64(a[0], path + ".document");
  const Index start = AsInt64(a[1], path + ".start");
  return Piece{.item = document, .length = AsInt64(a[2], path + ".length"), .start = start};
}

PackerState ReadPacker(const Json& obj, const std::string& path) {
  PackerState s;
  s.buffered = ReadList(Field(obj, path, "buffered"), Dot(path, "buffered"), ReadPiece);
  const std::string pending_path = Dot(path, "pending");
  const Json::Array& pending = AsArray(Field(obj, path, "pending"), pending_path);
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const std::string pack_path = At(pending_path, i);
    const Json::Array& pieces = AsArray(pending[i], pack_path);
    Pack pack;
    for (std::size_t j = 0; j < pieces.size(); ++j) {
      pack.pieces.push_back(ReadPiece(pieces[j], At(pack_path, j)));
      pack.tokens = CheckedAdd(pack_path, pack.tokens, pack.pieces.back().length);
      pack.images = CheckedAdd(pack_path, pack.images, pack.pieces.back().images);
    }
    s.pending.push_back(std::move(pack));
  }
  s.items_seen = ReadCount(obj, path, "items_seen");
  s.dropped = ReadCount(obj, path, "dropped");
  s.split_items = ReadCount(obj, path, "split_items");
  s.packs_closed = ReadCount(obj, path, "packs_closed");
  s.tokens_closed = ReadCount(obj, path, "tokens_closed");
  if (s.packs_closed < static_cast<Index>(s.pending.size())) {
    ThrowAtPath(Dot(path, "packs_closed"), Str(s.packs_closed) + " is fewer than the " +
                                               Str(static_cast<Index>(s.pending.size())) +
                                               " pending packs");
  }
  Index pending_tokens = 0;
  for (const Pack& p : s.pending)
    pending_tokens = CheckedAdd(pending_path, pending_tokens, p.tokens);
  if (s.tokens_closed < pending_tokens) {
    ThrowAtPath(Dot(path, "tokens_closed"), Str(s.tokens_closed) +
                                                " is fewer than the pending packs' " +
                                                Str(pending_tokens) + " tokens");
  }
  return s;
}

// Sorted pieces of one document must not overlap (and two pieces never start
// at the same token).
void CheckDisjoint(std::vector<Piece> pieces, std::string_view path) {
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return a.item != b.item ? a.item < b.item : a.start < b.start;
  });
  for (std::size_t i = 1; i < pieces.size(); ++i) {
    const Piece& a = pieces[i - 1];
    const Piece& b = pieces[i];
    if (a.item == b.item && (b.start == a.start || b.start < a.start + a.length)) {
      ThrowAtPath(path, "document " + Str(a.item) + " is listed twice (pieces at " + Str(a.start) +
                            "+" + Str(a.length) + " and " + Str(b.start) + "+" + Str(b.length) +
                            "): a state holds every piece once");
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------

namespace {

constexpr std::uint64_t kSelectedDomain = 0x53454c4543544544ULL;  // "SELECTED"

constexpr Index kReleaseSamples = 64;

// A source's sampled digest (the sources of a selected view): part sizes,
// totals, and the lengths and middle tokens of the sampled documents.
std::uint64_t SourceDigest(const TokenSource& source) {
  Hasher h(kSelectedDomain);
  const Index documents = source.num_documents();
  h.Add(static_cast<std::uint64_t>(documents));
  h.Add(static_cast<std::uint64_t>(source.num_tokens()));
  h.Add(static_cast<std::uint64_t>(source.num_parts()));
  for (Index part = 0; part < source.num_parts(); ++part) {
    h.Add(static_cast<std::uint64_t>(source.PartBegin(part + 1) - source.PartBegin(part)));
  }
  std::vector<std::int32_t> tokens;
  const Index samples = std::min(documents, kFingerprintDocuments);
  for (Index k = 0; k < samples; ++k) {
    const Index d = static_cast<Index>(static_cast<unsigned __int128>(k) *
                                       static_cast<unsigned __int128>(documents) /
                                       static_cast<unsigned __int128>(samples));
    const Index length = source.DocumentLength(d);
    const Index count = std::min(length, kFingerprintWindow);
    tokens.resize(static_cast<std::size_t>(count));
    if (count > 0) source.Copy(d, (length - count) / 2, count, tokens.data());
    h.Add(static_cast<std::uint64_t>(d));
    h.Add(static_cast<std::uint64_t>(length));
    for (std::int32_t t : tokens) h.Add(static_cast<std::uint32_t>(t));
    // Each sample faults in 64 KB or more of each file around it: 4096 of
    // them map most of a source's files. Released as the pass goes, so the
    // resident set grows by kReleaseSamples samples' pages at most.
    if (k % kReleaseSamples == kReleaseSamples - 1) source.ReleasePages();
  }
  source.ReleasePages();
  return h.Finish();
}

DataFingerprint SelectedFingerprint(const TokenSource& view) {
  DataFingerprint f;
  f.documents = view.num_documents();
  Hasher h(kSelectedDomain);
  h.Add(static_cast<std::uint64_t>(f.documents));
  h.Add(view.identity());
  for (const auto& source : view.selected_from()) {
    f.tokens = CheckedAdd("sources", f.tokens, source->num_tokens());
    h.Add(SourceDigest(*source));
    // Every length of the source (computed when it was opened): with the
    // identity, which determines the documents selected, this determines
    // every length of the view (TrainDocumentsOf's lengths_bound).
    h.Add(source->LengthsDigest());
  }
  h.Add(static_cast<std::uint64_t>(f.tokens));
  f.hash = h.Finish();
  return f;
}

}  // namespace

DataFingerprint FingerprintData(const TokenSource& source) {
  // The fingerprint samples the mapped files: refuse one changed since open.
  source.CheckUnchanged();
  if (!source.selected_from().empty()) return SelectedFingerprint(source);
  DataFingerprint f;
  f.documents = source.num_documents();
  f.tokens = source.num_tokens();
  Hasher h(kDataDomain);
  h.Add(static_cast<std::uint64_t>(f.documents));
  h.Add(static_cast<std::uint64_t>(f.tokens));
  h.Add(static_cast<std::uint64_t>(source.num_parts()));
  for (Index part = 0; part < source.num_parts(); ++part) {
    h.Add(static_cast<std::uint64_t>(source.PartBegin(part + 1) - source.PartBegin(part)));
  }
  // The lengths, a block at a time through Hasher::AddArray (~10 GB/s; the
  // same blocks whichever way the lengths are read: offsets in place, or a
  // part's lengths in bulk, TokenSource::Lengths).
  constexpr Index kBlock = static_cast<Index>(Hasher::kArrayBlock);
  std::uint64_t lengths[kBlock];
  Index bulk[kBlock];
  const std::int64_t* offsets = source.ContiguousOffsets();
  for (Index begin = 0; begin < f.documents; begin += kBlock) {
    const Index n = std::min(kBlock, f.documents - begin);
    if (offsets != nullptr) {
      // Unsigned: a mapped offsets file edited in place may hold any values
      // (token_source.h); for valid offsets this is the length.
      for (Index i = 0; i < n; ++i) {
        lengths[i] = static_cast<std::uint64_t>(offsets[begin + i + 1]) -
                     static_cast<std::uint64_t>(offsets[begin + i]);
      }
    } else {
      source.Lengths(begin, n, bulk);
      for (Index i = 0; i < n; ++i) {
        lengths[i] = static_cast<std::uint64_t>(bulk[i]);
      }
    }
    h.AddArray(lengths, static_cast<std::size_t>(n));
  }
  // The content: a sample of the tokens (the rule is in the header).
  std::vector<std::int32_t> tokens;
  auto add_tokens = [&](Index d, Index begin, Index count) {
    tokens.resize(static_cast<std::size_t>(count));
    if (count > 0) source.Copy(d, begin, count, tokens.data());
    h.Add(static_cast<std::uint64_t>(d));
    for (std::int32_t t : tokens) h.Add(static_cast<std::uint32_t>(t));
  };
  if (f.tokens <= kFingerprintAllTokens) {
    for (Index d = 0; d < f.documents; ++d) add_tokens(d, 0, source.DocumentLength(d));
  } else {
    const Index samples = std::min(f.documents, kFingerprintDocuments);
    for (Index k = 0; k < samples; ++k) {
      // Document floor(k * D / samples), without overflow.
      const Index d = static_cast<Index>(static_cast<unsigned __int128>(k) *
                                         static_cast<unsigned __int128>(f.documents) /
                                         static_cast<unsigned __int128>(samples));
      const Index length = source.DocumentLength(d);
      const Index count = std::min(length, kFingerprintWindow);
      add_tokens(d, (length - count) / 2, count);
    }
  }
  // A gathered view (an order stage) adds what chose its documents.
  if (source.identity() != 0) h.Add(source.identity());
  f.hash = h.Finish();
  return f;
}

TrainDocuments TrainDocumentsOf(const TokenSource& source, std::uint64_t data_hash) {
  TrainDocuments docs;
  if (const std::int64_t* offsets = source.ContiguousOffsets()) {
    // One part with int64 offsets (memory, or an int64 .npy): the plan reads
    // the lengths from the offsets, no call per document, clamped to the
    // tokens (a mapped offsets file edited in place, token_source.h).
    docs = TrainDocuments::FromOffsets(
        std::span<const std::int64_t>(offsets,
                                      static_cast<std::size_t>(source.num_documents()) + 1),
        source.num_tokens());
  } else if (int shift = 0; const char* pointers = source.ContiguousSequencePointers(&shift)) {
    // A Megatron index of one sequence per document: the lengths from its
    // byte pointers, read by the plan directly (no call per document).
    docs = TrainDocuments::FromSequencePointers(pointers, shift, source.num_documents(),
                                                source.num_tokens());
  } else {
    docs.count = source.num_documents();
    const TokenSource* src = &source;
    docs.length = [src](Index d) { return src->DocumentLength(d); };
  }
  docs.identity = data_hash;
  if (!source.selected_from().empty() && data_hash != 0) {
    // A selected view: its data fingerprint binds every length (the identity
    // and each source's LengthsDigest), so the plan takes it for them, and
    // no document is longer than its longest source.
    docs.lengths_bound = true;
    for (const auto& s : source.selected_from()) {
      docs.length_bound = std::max(docs.length_bound, s->num_tokens());
    }
  }
  return docs;
}

std::uint64_t PlanFingerprint(const LoaderState& s) {
  Hasher h(kPlanDomain);
  h.Add(static_cast<std::uint64_t>(s.num_documents));
  h.Add(static_cast<std::uint64_t>(s.num_tokens.value_or(0)));
  h.Add(s.data_hash.value_or(0));
  h.Add(static_cast<std::uint64_t>(s.seq_len));
  h.Add(s.shuffle ? 1 : 0);
  h.Add(s.seed);
  h.Add(s.epoch);
  h.Add(s.shard_files ? 1 : 0);
  return h.Finish();
}

std::string LoaderStateToJson(const LoaderState& state) {
  if (state.train) return TrainStateToJson(*state.train);
  return SealState(LoaderBody(state));
}

void ValidateLoaderState(const LoaderState& s) {
  const Index D = s.num_documents;
  if (D < 0) ThrowAtPath("state.num_documents", "must not be negative, got " + Str(D));
  CheckEpoch("state.epoch", s.epoch);
  if (s.num_tokens && *s.num_tokens < 0) {
    ThrowAtPath("state.num_tokens", "must not be negative, got " + Str(*s.num_tokens));
  }
  if (s.seq_len < 1) ThrowAtPath("state.seq_len", "must be at least 1, got " + Str(s.seq_len));
  if (s.position < 0 || s.position > D) {
    ThrowAtPath("state.position", Str(s.position) + " is outside [0, " + Str(D) + "]");
  }
  for (std::size_t i = 0; i < s.done.size(); ++i) {
    if (s.done[i] < s.position || s.done[i] >= D || (i > 0 && s.done[i] <= s.done[i - 1])) {
      ThrowInvalid("state", "done must be increasing positions in [position " + Str(s.position) +
                                ", " + Str(D) + "), got " + Str(s.done[i]) + " at done[" +
                                Str(static_cast<Index>(i)) + "]");
    }
  }
  if (s.shard_files && !s.head.empty()) {
    ThrowAtPath("state.head", "a file-sharded state has no head (its states cannot be merged)");
  }
  const Index H = static_cast<Index>(s.head.size());
  for (std::size_t i = 0; i < s.head.size(); ++i) {
    const Piece& p = s.head[i];
    Index end;
    if (p.item < 0 || p.item >= D || p.start < 0 || p.length < 0 || p.length > s.seq_len ||
        __builtin_add_overflow(p.start, p.length, &end)) {
      ThrowAtPath(At("state.head", i), "piece (document " + Str(p.item) + ", start " +
                                           Str(p.start) + ", length " + Str(p.length) +
                                           ") is not a piece of at most seq_len " + Str(s.seq_len) +
                                           " tokens of one of " + Str(D) + " documents");
    }
  }
  CheckDisjoint(s.head, "state.head");
  // A head piece is the rest of a document already taken from the order: the
  // document is not at a remaining position too (it would come twice).
  Permutation order(s.shard_files ? 0 : D, s.seed, s.epoch);
  for (std::size_t i = 0; i < s.head.size(); ++i) {
    const Index doc = s.head[i].item;
    const Index pos = s.shuffle ? order.Inverse(doc) : doc;
    if (pos >= s.position && !std::binary_search(s.done.begin(), s.done.end(), pos)) {
      ThrowAtPath(At("state.head", i), "document " + Str(doc) +
                                           " is also still to come at order position " + Str(pos) +
                                           " of epoch " + std::to_string(s.epoch) +
                                           " (a state of another plan or epoch?)");
    }
  }
  const PackerState& k = s.packer;
  if (s.consumers < 0) ThrowAtPath("state.consumers", "must not be negative");
  if (s.consumers == 0) {
    // A merged state: no consumer, nothing read, an empty packer.
    if (s.consumer != -1 || s.read != 0 || s.batches != 0 || !k.buffered.empty() ||
        !k.pending.empty() || k.items_seen != 0 || k.packs_closed != 0) {
      ThrowAtPath("state.consumers",
                  "0 marks a merged state, which has consumer -1, read 0, batches 0 and an "
                  "empty packer; this one has consumer " +
                      Str(s.consumer) + ", read " + Str(s.read) + ", " +
                      Str(static_cast<Index>(k.buffered.size() + k.pending.size())) +
                      " packer entries");
    }
    return;
  }
  if (s.consumer < 0 || s.consumer >= s.consumers) {
    ThrowAtPath("state.consumer",
                Str(s.consumer) + " is outside [0, consumers " + Str(s.consumers) + ")");
  }
  const Index C = s.consumers, c = s.consumer;
  const Index S = H + (D - s.position - static_cast<Index>(s.done.size()));
  const Index list_size = S > c ? (S - c - 1) / C + 1 : 0;
  if (s.read < 0 || (!s.shard_files && s.read > list_size)) {
    ThrowAtPath("state.read", Str(s.read) + " is outside [0, " + Str(list_size) +
                                  "] (the entries of consumer " + Str(c) + " of " + Str(C) + ")");
  }
  if (k.items_seen != s.read) {
    ThrowAtPath("state.packer.items_seen",
                Str(k.items_seen) + " differs from read " + Str(s.read) +
                    " (the loader pushes every entry it reads into the packer)");
  }
  // A run (one piece of k * seq_len tokens, StreamingPacker's full pieces of
  // one split document) is k pending packs.
  auto is_run = [&](const Pack& pack) {
    return pack.pieces.size() == 1 && pack.pieces[0].length > s.seq_len &&
           pack.pieces[0].length % s.seq_len == 0;
  };
  Index pending_packs = 0;
  for (const Pack& pack : k.pending) {
    pending_packs += is_run(pack) ? pack.pieces[0].length / s.seq_len : 1;
  }
  const Index popped = k.packs_closed - pending_packs;
  if (s.batches < 0 || s.batches > popped) {
    ThrowAtPath("state.batches", Str(s.batches) + " is outside [0, " + Str(popped) +
                                     "] (packs closed and delivered)");
  }
  // Every packer piece: a piece of a document of this consumer's reading, at
  // most seq_len tokens, each pending pack at most seq_len tokens, and no
  // token twice.
  std::vector<Piece> resolved;
  auto check = [&](const Piece& p, const char* where, const std::string& field, bool run = false) {
    auto fail = [&](const std::string& why) {
      ThrowInvalid("state", std::string(where) + " item " + Str(p.item) + " (start " +
                                Str(p.start) + ", length " + Str(p.length) + ") at " + field +
                                ": " + why);
    };
    Index end = 0;
    (void)__builtin_add_overflow(p.start, p.length, &end);  // checked on reading
    if (p.length > s.seq_len && !run) fail("longer than seq_len " + Str(s.seq_len));
    if (p.item < -H || p.item >= D) {
      fail("neither a document of " + Str(D) + " nor a head piece (-1 .. -" + Str(H) + ")");
    }
    if (p.item < 0) {
      const Index h = -p.item - 1;
      const Piece& ref = s.head[static_cast<std::size_t>(h)];
      if (h % C != c || h / C >= s.read) {
        fail("head piece " + Str(h) + " was not read by consumer " + Str(c) + " of " + Str(C) +
             " (read " + Str(s.read) + ")");
      }
      if (end > ref.length) {
        fail("lies outside head piece " + Str(h) + " of " + Str(ref.length) + " tokens");
      }
      resolved.push_back(Piece{.item = ref.item, .length = p.length, .start = ref.start + p.start});
      return;
    }
    if (!s.shard_files) {
      // The document must sit at an order position this consumer has read.
      const Index pos = s.shuffle ? order.Inverse(p.item) : p.item;
      const auto below = std::lower_bound(s.done.begin(), s.done.end(), pos) - s.done.begin();
      const bool in_done = below < static_cast<Index>(s.done.size()) &&
                           s.done[static_cast<std::size_t>(below)] == pos;
      const Index entry = H + (pos - s.position - below);
      if (pos < s.position || in_done || entry % C != c || entry / C >= s.read) {
        fail("not a document this consumer has read in epoch " + std::to_string(s.epoch) +
             " (a state of another plan or epoch?)");
      }
    }
    resolved.push_back(Piece{.item = p.item, .length = p.length, .start = p.start});
  };
  for (std::size_t i = 0; i < k.buffered.size(); ++i) {
    check(k.buffered[i], "buffered", At("packer.buffered", i));
  }
  for (std::size_t i = 0; i < k.pending.size(); ++i) {
    const std::string path = At("packer.pending", i);
    const bool run = is_run(k.pending[i]);
    for (std::size_t j = 0; j < k.pending[i].pieces.size(); ++j) {
      check(k.pending[i].pieces[j], "packed", At(path, j), run);
    }
    if (k.pending[i].tokens > s.seq_len && !run) {
      ThrowInvalid("state", "a packed row holds " + Str(k.pending[i].tokens) +
                                " tokens, more than seq_len " + Str(s.seq_len) + " (" + path + ")");
    }
  }
  CheckDisjoint(std::move(resolved), "state.packer");
}
LoaderState LoaderStateFromJson(std::string_view text) {
  const Json d = ParseJson(text, "state");
  ExpectType(d, "state", Json::Type::kObject);
  if (const Json* kind = d.Find("kind");
      kind && kind->type() == Json::Type::kString && kind->string_value() == "train_plan") {
    LoaderState s;
    s.train = TrainStateFromJson(text);
    s.epoch = s.train->epoch;
    return s;
  }
  ExpectStateVersion(d, "state", kLoaderStateVersion, "loader",
                     "version 1 had no checksum and another piece layout, version 2's "
                     "data_hash covered the document lengths only, not the data, and "
                     "version 3's data_hash hashed the lengths one at a time (version 4 "
                     "hashes them in blocks, Hasher::AddArray)");
  ExpectOnlyKeys(d, "state",
                 {"version", "epoch", "head", "position", "done", "consumers", "consumer", "read",
                  "batches", "packer", "num_documents", "num_tokens", "data_hash", "seq_len",
                  "shuffle", "seed", "shard_files", "fingerprint", "checksum"});
  LoaderState s;
  s.epoch = AsUint64(Field(d, "state", "epoch"), "state.epoch");
  s.head = ReadList(Field(d, "state", "head"), "state.head", ReadHeadPiece);
  s.position = ReadIndex(d, "state", "position");
  s.done = ReadList(Field(d, "state", "done"), "state.done",
                    [](const Json& e, const std::string& at) { return AsInt64(e, at); });
  s.consumers = ReadIndex(d, "state", "consumers");
  s.consumer = ReadIndex(d, "state", "consumer");
  s.read = ReadIndex(d, "state", "read");
  s.batches = ReadIndex(d, "state", "batches");
  const Json& packer = Field(d, "state", "packer");
  ExpectOnlyKeys(packer, "state.packer",
                 {"buffered", "pending", "items_seen", "dropped", "split_items", "packs_closed",
                  "tokens_closed"});
  s.packer = ReadPacker(packer, "state.packer");
  s.num_documents = ReadIndex(d, "state", "num_documents");
  s.seq_len = ReadIndex(d, "state", "seq_len");
  s.shuffle = AsBool(Field(d, "state", "shuffle"), "state.shuffle");
  s.seed = AsUint64(Field(d, "state", "seed"), "state.seed");
  s.shard_files = AsBool(Field(d, "state", "shard_files"), "state.shard_files");
  s.num_tokens = ReadIndex(d, "state", "num_tokens");
  s.data_hash = ReadHexField(d, "state", "data_hash");
  const std::uint64_t fingerprint = ReadHexField(d, "state", "fingerprint");
  // The checksum covers the canonical text of every other field: an edit
  // anywhere (epoch, head, read, ...) shows here.
  CheckStateSeal(d, "state", LoaderBody(s));
  if (PlanFingerprint(s) != fingerprint) {
    ThrowAtPath("state.fingerprint", "does not match the state's plan and data fields");
  }
  ValidateLoaderState(s);
  return s;
}

std::string LoaderStatesToJson(std::span<const LoaderState> states) {
  std::string out = "[";
  for (std::size_t i = 0; i < states.size(); ++i) {
    if (i > 0) out += ", ";
    out += LoaderStateToJson(states[i]);
  }
  out += "]";
  return out;
}

std::vector<LoaderState> LoaderStatesFromJson(std::string_view text) {
  const Json d = ParseJson(text, "state");
  if (d.type() == Json::Type::kObject) return {LoaderStateFromJson(text)};
  const Json::Array& list = AsArray(d, "state");
  std::vector<LoaderState> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    try {
      out.push_back(LoaderStateFromJson(WriteJson(list[i])));
    } catch (const std::invalid_argument& e) {
      // "state: ..." -> "state: [i]: ..."
      const std::string what = e.what();
      ThrowInvalid("state", "[" + std::to_string(i) + "]: " + what.substr(what.find(": ") + 2));
    }
  }
  return out;
}

std::string PackerStateToJson(const PackerState& state) {
  return SealState(PackerJson(state, true));
}

PackerState PackerStateFromJson(std::string_view text) {
  const Json d = ParseJson(text, "state");
  ExpectType(d, "state", Json::Type::kObject);
  if (d.Find("version") == nullptr) {
    ThrowInvalid("state",
                 "a packer state without \"version\" (version 1, unsealed); this shardkit reads "
                 "version " +
                     Str(kPackerStateVersion) + " (sealed with a checksum)");
  }
  ExpectStateVersion(d, "state", kPackerStateVersion, "packer",
                     "it had no checksum, or the loader's older layout");
  ExpectOnlyKeys(d, "state",
                 {"version", "buffered", "pending", "items_seen", "dropped", "split_items",
                  "packs_closed", "tokens_closed", "checksum"});
  PackerState s = ReadPacker(d, "state");
  CheckStateSeal(d, "state", PackerJson(s, true));
  return s;
}

void PackerStateFits(const PackerState& state, const PackOptions& options) {
  // The packer's own restore checks are the one definition of a state that
  // fits (budgets, buffer, pieces, counters): apply them, keep nothing.
  (void)StreamingPacker(options, state);
}

}  // namespace shardkit
