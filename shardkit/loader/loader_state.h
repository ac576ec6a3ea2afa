// LoaderState: where a TokenLoader stands in an epoch, and the one JSON codec
// for it and for a StreamingPacker's state (shardkit/packing/packing.h).
//
// The JSON text (version 4) is what the Python package's state_dict() returns
// (as a dict) and what `shardkit loader-stats --save-state` writes:
//
//   {"version": 4, "epoch": E, "head": [[document, start, length], ...],
//    "position": P, "done": [...], "consumers": C, "consumer": c, "read": r,
//    "batches": b,
//    "packer": {"buffered": [PIECE, ...], "pending": [[PIECE, ...], ...],
//               "items_seen": .., "dropped": .., "split_items": ..,
//               "packs_closed": .., "tokens_closed": ..},
//    "num_documents": D, "num_tokens": T, "data_hash": "<16 hex>",
//    "seq_len": L, "shuffle": bool, "seed": S, "shard_files": bool,
//    "fingerprint": "<16 hex>", "checksum": "<16 hex>"}
//
// PIECE is [item, start, length, images] everywhere (the loader's and the
// packer's states alike). A standalone packer state is the "packer" object
// above with "version": 2 (kPackerStateVersion) first and "checksum" last.
//
// A state proves itself, by the rule every state kind follows
// (shardkit/base/json.h, "Sealed states"): "fingerprint" hashes the plan and
// the data it belongs to (document count, token count, data_hash: the
// lengths and a sample of the tokens, see FingerprintData; seq_len, shuffle,
// seed, epoch, shard_files) and "checksum" hashes the whole content (the
// canonical text of every other field). Reading refuses a state whose
// checksum or fingerprint does not match, or whose fields contradict each
// other, with std::invalid_argument "state: <field>: <what>". A loader then
// refuses a state whose fingerprint differs from its own data and options
// (another data set of the same lengths included: "the data differs"), or
// whose pieces do not lie in its documents (TokenLoader's constructor).
//
// Older versions are refused naming the version, never read with another
// layout: version 1 (no checksum; loader pieces were [item, length, start,
// images]), version 2 (its data_hash covered the lengths only) and version 3
// (its data_hash added the lengths one word at a time; version 4 adds them in
// blocks through Hasher::AddArray, see FingerprintData); a packer state
// without "version" (version 1, unsealed) too.
//
// Integers are exact (seeds are uint64 and round-trip); the text is written in
// the form of Python's json.dumps (see shardkit/base/json.h).
//
// Thread-safety: pure functions over values.
#ifndef SHARDKIT_LOADER_LOADER_STATE_H_
#define SHARDKIT_LOADER_LOADER_STATE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/base/piece.h"
#include "shardkit/loader/train_plan.h"
#include "shardkit/packing/packing.h"

namespace shardkit {

class TokenSource;

inline constexpr int kLoaderStateVersion = 4;
inline constexpr int kPackerStateVersion = 2;

// A piece of a document (shardkit/base/piece.h): tokens [start, start +
// length) of document `item`, images 0. PieceRef is the name it had before the
// loader's pieces and the packer's were one type; kept so callers keep
// compiling.
using PieceRef = Piece;

// Everything needed to continue an epoch. Small: O(buffer + C) numbers.
struct LoaderState {
  std::uint64_t epoch = 0;
  // The remaining order of the epoch, shared by all consumers of a run:
  // first the pieces of `head` in order (item = the document), then the
  // documents at global order positions [position, num_documents) except
  // those listed in `done` (sorted, all >= position; already delivered).
  std::vector<Piece> head;
  Index position = 0;
  std::vector<Index> done;
  // This consumer (consumers == 0: a merged state of no consumer; then
  // consumer is -1, read and batches 0 and the packer empty).
  Index consumers = 0;
  Index consumer = -1;
  Index read = 0;     // entries of this consumer's list read so far
  Index batches = 0;  // batches delivered from this state's plan
  // The packer (item ids < 0 refer to head[-id - 1], start within that piece).
  PackerState packer;
  // What the state was made for; a loader refuses a state that differs.
  Index num_documents = 0;
  // Always set by this shardkit's reader (nullopt was a version-1 state).
  std::optional<Index> num_tokens;
  std::optional<std::uint64_t> data_hash;
  Index seq_len = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool shard_files = false;
  // Equal steps (LoaderOptions::equal_steps): the global plan's state
  // (train_plan.h) before the next step, the same on every rank; the fields
  // above are then unused. Its JSON is TrainStateToJson's
  // ({"kind": "train_plan", ...}, versioned on its own).
  std::optional<TrainState> train;
};

// The data a state belongs to: document count, token count and `hash`, a
// hash of the part sizes, of every document's length (in blocks of
// Hasher::kArrayBlock lengths through Hasher::AddArray: ~7 GB/s of offsets
// from memory on one core, BM_FingerprintDataLarge), and of the content:
//   every token when the source holds at most kFingerprintAllTokens tokens;
//   otherwise kFingerprintDocuments documents spread over the whole source
//   (document floor(k * D / kFingerprintDocuments), every document when
//   there are fewer), up to kFingerprintWindow tokens from the middle of each,
// and a gathered view's identity. So two data sets of the same lengths whose
// tokens differ (anywhere, for a small one; in the sample, for a large one)
// have different fingerprints. Cost: O(num_documents) for the lengths plus
// at most 64 Ki tokens read (at most 4096 random pages of a mapped file),
// once per loader; deterministic, the same on every rank and platform.
// A selected view (TokenSource::Select, e.g. a mixture's window) is
// fingerprinted without reading its documents: documents = its count, tokens
// = its sources' token total (the view's own total is a pass over every
// document), and the hash covers the count, the view's identity (which
// determines which documents it selects) and each source's digest: its part
// sizes, documents, tokens, and the lengths and middle tokens of the
// kFingerprintDocuments sampled documents above, and its LengthsDigest (every
// length, token_source.h; computed when a file source is opened). Cost
// O(K x 4096), whatever the view's size; the sources' lengths are bound
// whole, their tokens by sample.
inline constexpr Index kFingerprintAllTokens = Index{1} << 16;
inline constexpr Index kFingerprintDocuments = 4096;
inline constexpr Index kFingerprintWindow = 16;
struct DataFingerprint {
  Index documents = 0;
  Index tokens = 0;
  std::uint64_t hash = 0;
};
[[nodiscard]] DataFingerprint FingerprintData(const TokenSource& source);

// The documents of `source` as a TrainPlan reads them: their lengths (from
// the offsets array when the source has one) and identity `data_hash`
// (FingerprintData(source).hash, which the caller has computed), so that the
// plan's stream fingerprint covers the data, not only its lengths. For a
// selected view (data_hash != 0) the lengths are bound by data_hash
// (TrainDocuments::lengths_bound: the plan reads none before its first
// step), with length_bound its longest source's token count. The source
// must outlive the plan.
[[nodiscard]] TrainDocuments TrainDocumentsOf(const TokenSource& source, std::uint64_t data_hash);

// The fingerprint of the plan and data a state belongs to (the "fingerprint"
// field): a hash of num_documents, num_tokens, data_hash, seq_len, shuffle,
// seed, epoch and shard_files.
[[nodiscard]] std::uint64_t PlanFingerprint(const LoaderState& state);

// Checks what a state can check without its data set: epoch <= kMaxEpoch,
// non-negative counts,
// done sorted in [position, num_documents], head pieces of at most seq_len
// tokens with no token twice, each of a document no longer in the remaining
// order (before position, or done), consumer in [0, consumers), a merged state's
// empty packer, packer counters that agree with read and batches, and every
// packer piece a piece of an entry this consumer has read (so a state of
// another epoch or seed is refused), no token twice, packs of at most seq_len
// tokens (a pending run of k * seq_len tokens of one document, see
// PackerState, counts as k packs). Throws invalid_argument "state.<field>: ...".
void ValidateLoaderState(const LoaderState& state);

// The version-3 JSON text of `state`.
[[nodiscard]] std::string LoaderStateToJson(const LoaderState& state);

// Reads a version-3 loader state (or, with "kind": "train_plan", an
// equal-steps state: TrainStateFromJson): types, every start + length
// without overflow, the checksum and the fingerprint, then
// ValidateLoaderState. Throws invalid_argument "state: ..." or
// "state: <field>: ..." naming the field (and the version for another one).
[[nodiscard]] LoaderState LoaderStateFromJson(std::string_view text);

// A list of states (one per consumer of a run, as `shardkit loader-stats
// --save-state` writes), and its reader, which also takes a single state.
[[nodiscard]] std::string LoaderStatesToJson(std::span<const LoaderState> states);
[[nodiscard]] std::vector<LoaderState> LoaderStatesFromJson(std::string_view text);

// The version-2 JSON text of a StreamingPacker's state (sealed), and its
// reader (version 2 only; the checksum first). The reader checks types,
// non-negative numbers and every start + length; the fit to a packer's
// options is PackerStateFits.
[[nodiscard]] std::string PackerStateToJson(const PackerState& state);
[[nodiscard]] PackerState PackerStateFromJson(std::string_view text);

// Throws invalid_argument "state: ..." unless a StreamingPacker with
// `options` accepts `state` (its restore checks, the one definition: every
// closed pack within capacity, or a run of whole packs under oversize split,
// max_images and max_sequences; every buffered piece within one pack and
// fewer than the buffer; no piece twice; no negative counter).
void PackerStateFits(const PackerState& state, const PackOptions& options);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_LOADER_STATE_H_
