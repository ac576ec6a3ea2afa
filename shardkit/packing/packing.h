// Packing: variable-length items (documents, samples) into fixed-capacity
// packs (sequences of `capacity` tokens) with little padding.
//
// An item has a length in tokens and, optionally, a number of images. A pack
// holds items whose lengths sum to at most `capacity`, whose images sum to at
// most `max_images` and whose count is at most `max_sequences`. Algorithms:
//   next_fit  keeps input order; closes the open pack when the next item does
//             not fit. O(n), streaming, state = the open pack.
//   ffd       first-fit decreasing: items by decreasing length (ties: lower
//             item position first), each into the lowest-numbered pack with
//             room, else a new pack. O(n log n) (counting sort + max segment
//             tree over the packs' remaining room).
//   bfd       best-fit decreasing: same order, each into the pack with the
//             least remaining room that still fits it (ties: the lowest image
//             room, then the most recently filled pack), else a new pack.
//             O(n log n) (counting sort + buckets of packs by remaining room,
//             a bitset finds the next non-empty bucket).
//   balanced  as few packs as the data allows with loads evened out: LPT
//             (items by decreasing length into the least loaded pack that
//             fits every budget; an item no pack fits opens a new one) from K
//             packs, K = the lower bound first, then searched above it when
//             that overflows; never more packs than bfd (if LPT cannot match
//             bfd's count, bfd's packing is returned). Beats bfd where a
//             second budget (images) binds. Where histogram applies (no
//             images, capacity <= 2^16) and a count budget is set or the
//             capacity is at most 2048, histogram packing is run too and
//             taken when it needs fewer packs.
//   histogram packs chosen from the length histogram, not item by item
//             (internal/histogram.h): the longest remaining length opens
//             a pack, the completion that fills it (exactly, or with the
//             least waste) is chosen from the counts and applied to as many
//             packs as the counts allow; each length's items are then
//             assigned in input order. Under a count budget the LP over
//             pack patterns (column generation in the core, a work limit
//             per item) is solved too and its rounding taken when it needs
//             fewer packs. For count budgets (max_sequences) and few
//             distinct lengths; tokens and max_sequences only (max_images
//             is an error), capacity <= 2^16. Wikipedia-512 at 3 sequences
//             per pack: 0.116% over the lower bound (the LP optimum rounded
//             up), bfd 11.75%.
// Oversize (an item that can never fit: length > capacity or images >
// max_images): drop (counted in `dropped`, listed in `dropped_items`), error
// (invalid_argument naming the item), split (text only: cut into pieces of
// `capacity` tokens, each full piece its own pack, the rest packed as an item;
// an oversize item with images is dropped even under split).
//
// With `buffer` set, items are packed in input order through a bounded buffer
// of that many items (StreamingPacker below); without it, all at once.
//
// Everything is deterministic: the same input gives the same packs, in the
// same order, on every machine. No globals, no RNG.
//
// Dealing packs to ranks (costs, BalanceRanks, DealStep): rank_balance.h.
//
// Thread-safety: the free functions are pure; a StreamingPacker is
// thread-compatible (one thread at a time, no shared state between packers).
#ifndef SHARDKIT_PACKING_PACKING_H_
#define SHARDKIT_PACKING_PACKING_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/base/piece.h"

namespace shardkit {

enum class PackAlgorithm {
  kNextFit,
  kFirstFitDecreasing,
  kBestFitDecreasing,
  kBalanced,
  kHistogram
};
enum class Oversize { kDrop, kError, kSplit };
// kTrl: the rows of TRL's pack_dataset (trl.data_utils, strategy "bfd", and
// "bfd_split" with oversize split), pack for pack: see PackOptions::compat.
enum class PackCompat { kNone, kTrl };

// Names as written in the CLI and Python: "next_fit", "ffd", "bfd",
// "balanced", "histogram"; "drop", "error", "split". Parse throws invalid_argument naming
// `algorithm` / `oversize` and the value.
[[nodiscard]] PackAlgorithm ParsePackAlgorithm(std::string_view name);
[[nodiscard]] Oversize ParseOversize(std::string_view name);
[[nodiscard]] std::string_view PackAlgorithmName(PackAlgorithm algorithm);
[[nodiscard]] std::string_view OversizeName(Oversize oversize);
// "none", "trl"; Parse throws invalid_argument naming `compat`.
[[nodiscard]] PackCompat ParsePackCompat(std::string_view name);
[[nodiscard]] std::string_view PackCompatName(PackCompat compat);
// Every name Parse accepts, in the order of the name table (the CLI's help
// lists these, so it cannot drift from what Parse takes).
[[nodiscard]] std::vector<std::string_view> PackAlgorithmNames();
[[nodiscard]] std::vector<std::string_view> OversizeNames();
[[nodiscard]] std::vector<std::string_view> PackCompatNames();

struct PackOptions {
  Index capacity = 0;  // tokens per pack; REQUIRES >= 1
  PackAlgorithm algorithm = PackAlgorithm::kBestFitDecreasing;
  std::optional<Index> max_images;     // images per pack; REQUIRES >= 0
  std::optional<Index> max_sequences;  // items (pieces) per pack; REQUIRES >= 1
  Oversize oversize = Oversize::kDrop;
  std::optional<Index> buffer;  // stream through a buffer of this many items; >= 1
  // kTrl (REQUIRES algorithm bfd; not for StreamingPacker) reproduces TRL's
  // pack_dataset rows: among packs with the same room, the one that reached
  // that room first takes the item (the default takes the most recently
  // filled); empty items are dropped (listed in dropped_items), as TRL filters
  // them; under oversize split the pieces of an item are units ordered with
  // the other items (TRL's "bfd_split"), not packs of their own ahead of the
  // rest. With `buffer` = B, items [0, B), [B, 2B), ... are packed each on its
  // own, as pack_dataset does per map batch (batch_size B, 1000 by default).
  // TRL's "bfd" truncates an item longer than the capacity; shardkit offers no
  // truncation, so the rows agree when every item fits (or under split).
  PackCompat compat = PackCompat::kNone;
};

// Throws invalid_argument naming the field (capacity, max_images,
// max_sequences, buffer) when it is out of its domain.
void ValidatePackOptions(const PackOptions& options);

// One item, or one piece of a split item, as placed in a pack: a Piece
// (shardkit/base/piece.h) whose `item` is the caller's id (the position in the
// input for PackItems). PackItem is the name it had before the loader's
// pieces and the packer's were one type; kept so callers keep compiling.
using PackItem = Piece;

// The packs of a whole data set, as flat arrays (CSR): the entries of pack p
// are [offsets[p], offsets[p + 1]). Within a pack, entries are in placement
// order (input order for next_fit, decreasing length for the others).
struct Packing {
  Index capacity = 0;
  std::vector<Index> offsets = {0};  // num_packs() + 1
  std::vector<Index> items;          // item id of each entry
  std::vector<Index> lengths;        // tokens of each entry
  std::vector<Index> starts;         // first token of each entry within its item
  std::vector<Index> images;         // images of each entry; empty without images
  std::vector<Index> dropped_items;  // oversize items dropped (and empty
                                     // items under compat trl), input order
  Index num_items = 0;               // items offered
  Index split_items = 0;             // items cut into pieces (oversize split)
  Index tokens = 0;                  // tokens in packs
  Index image_count = 0;             // images in packs
  // max(ceil(tokens / capacity), ceil(images / max_images),
  //     ceil(pieces / max_sequences)): no packing of these items has fewer.
  Index lower_bound = 0;

  [[nodiscard]] Index num_packs() const { return static_cast<Index>(offsets.size()) - 1; }
  [[nodiscard]] Index dropped() const { return static_cast<Index>(dropped_items.size()); }
  // tokens / (num_packs * capacity); 1 when there are no packs.
  [[nodiscard]] double efficiency() const;
  // Tokens of pack p. REQUIRES 0 <= p < num_packs().
  [[nodiscard]] Index PackTokens(Index p) const;
  // The entries of pack p as pieces. REQUIRES 0 <= p < num_packs().
  [[nodiscard]] std::vector<Piece> Entries(Index p) const;
};

// The most entries (items and pieces of split items) a Packing lists: 2^28,
// about 8 GB of entry arrays. Oversize split makes ceil(length / capacity)
// entries of an item, so a few huge lengths (five of 2^40 at capacity 4096)
// would ask for billions; PackItems refuses them before allocating (pack such
// items through StreamingPacker, whose runs of full pieces take O(1) memory).
inline constexpr Index kMaxPackEntries = Index{1} << 28;

// Packs items 0..n-1 with lengths[i] tokens and images[i] images (`images`
// empty: none). Throws invalid_argument naming `lengths` / `images` for a
// negative value or a size mismatch, the option for a bad option, `images`
// when max_images is set without images, `lengths` for an oversize item
// under oversize error or entries beyond kMaxPackEntries (checked before any
// allocation, naming the count, the items' total and capacity), and
// `capacity` / `lengths` when a count overflows.
[[nodiscard]] Packing PackItems(std::span<const Index> lengths, const PackOptions& options,
                                std::span<const Index> images = {});

// A closed pack of the streaming packer.
struct Pack {
  std::vector<Piece> pieces;  // placement order
  Index tokens = 0;
  Index images = 0;
};

// Everything a StreamingPacker holds: restore it to continue exactly where a
// checkpoint was taken. `buffered` is the buffer in arrival order (split
// remainders carry their `start`); `pending` the closed packs not yet popped.
// The full pieces of one split item are a single pending entry, a run: one
// piece of k * capacity tokens (longer than a pack) that Pop returns as k
// packs of capacity tokens, so a state stays O(buffer) however long the
// documents are (a flat stream of 1e9 tokens is one entry, not 1e9 / capacity).
struct PackerState {
  std::vector<Piece> buffered;
  std::vector<Pack> pending;
  Index items_seen = 0;  // Push calls
  Index dropped = 0;
  Index split_items = 0;
  Index packs_closed = 0;   // packs closed (pending or popped)
  Index tokens_closed = 0;  // tokens in closed packs
};

// Streaming packer: items arrive one at a time (Push), packs come out as they
// close (Pop), memory is bounded by the buffer.
//   next_fit: the buffer is the open pack; it closes when an item does not fit.
//   ffd, bfd, balanced: when `buffer` items are waiting, they are packed with
//     the algorithm; every pack but the least full closes, the least full
//     one's items stay buffered (unless it holds more than half of the buffer,
//     then it closes too, so every repack frees at least half of the buffer:
//     O(log buffer) amortised work per item).
// Finish() packs whatever is buffered and closes everything.
// Oversize items follow options.oversize at Push: drop counts them (see
// dropped_items()), split closes the full pieces at once and buffers the
// rest, error throws invalid_argument naming the item (the packer is unchanged).
//
// Thread-compatible: one thread at a time. Deterministic: the same pushes
// give the same packs; a packer restored from State() continues exactly as the
// original would have.
class StreamingPacker {
 public:
  // Throws invalid_argument for bad options; buffer defaults to 1024 when unset
  // (ignored by next_fit).
  explicit StreamingPacker(const PackOptions& options);
  // Continues from a checkpoint. Throws invalid_argument naming `state` when
  // the state does not fit the options or cannot have come from a packer: a
  // piece with a negative or overflowing [start, start + length) or larger
  // than a pack, too many buffered, a pending pack over capacity (or over
  // max_images / max_sequences), a negative counter, or pieces of one item
  // that overlap or repeat (item ids are distinct, as in pack() and the
  // loader). Pending packs' totals are recomputed from their pieces.
  StreamingPacker(const PackOptions& options, PackerState state);

  // Offers one item. REQUIRES length >= 0, images >= 0 (invalid_argument
  // otherwise, naming `lengths` / `images`).
  void Push(Index item, Index length, Index images = 0);
  // End of input: packs the buffer and closes every pack.
  void Finish();
  // Moves the oldest closed pack into *pack; false when none is pending.
  [[nodiscard]] bool Pop(Pack* pack);
  [[nodiscard]] Index pending() const;
  [[nodiscard]] Index buffered() const;

  // Items dropped (oversize drop) since the start, in arrival order; cleared
  // by TakeDropped.
  [[nodiscard]] const std::vector<Index>& dropped_items() const { return dropped_items_; }
  std::vector<Index> TakeDropped();

  // Tokens in closed packs / (closed packs * capacity): efficiency so far; 1
  // before the first pack closes.
  [[nodiscard]] double efficiency() const;
  [[nodiscard]] PackerState State() const;
  [[nodiscard]] const PackOptions& options() const { return options_; }

 private:
  void Place(const Piece& piece);
  void Repack(bool finish);
  bool RepackBestFit(bool finish);
  void Close(Pack pack);

  // Buffers RepackBestFit reuses from one repack to the next (their contents
  // mean nothing between calls), so that a repack allocates only the packs
  // it closes.
  struct Scratch {
    std::vector<std::int32_t> first;           // counting sort: first position of each length
    std::vector<std::int32_t> order;           // units by decreasing length, ties lower index
    std::vector<std::int32_t> bin;             // pack of each unit (arrival order)
    std::vector<std::int32_t> head;            // room -> most recently filled pack with it, -1
    std::vector<std::int32_t> next;            // pack -> next pack of the same room
    std::vector<std::int32_t> room, count;     // per pack
    std::vector<std::uint64_t> bits, summary;  // non-empty rooms, two levels
  };

  PackOptions options_;
  Index buffer_limit_ = 0;
  PackerState state_;
  Pack open_;  // next_fit's open pack
  std::vector<Index> dropped_items_;
  std::size_t pending_head_ = 0;
  Index pending_packs_ = 0;  // packs Pop will return (a run counts each of its packs)
  Scratch scratch_;
};

}  // namespace shardkit

#endif  // SHARDKIT_PACKING_PACKING_H_
