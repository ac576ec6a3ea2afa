// Internal to the packing implementation: the placement algorithms over
// units that all fit a pack. Users call PackItems / StreamingPacker.
#ifndef SHARDKIT_PACKING_INTERNAL_PLACE_H_
#define SHARDKIT_PACKING_INTERNAL_PLACE_H_

#include <span>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/packing/packing.h"

namespace shardkit::internal {

// Units in placement order and the pack of each: unit order[j] went to pack
// bin[j]; packs are numbered 0 .. num_bins - 1 in the order they opened.
struct Placement {
  std::vector<Index> order;
  std::vector<Index> bin;
  Index num_bins = 0;
};

// Places units with lengths `len` and images `img` (empty: none) by
// options.algorithm under every budget of `options`.
// REQUIRES every unit fits an empty pack (len <= capacity, img <= max_images).
[[nodiscard]] Placement Place(std::span<const Index> len, std::span<const Index> img,
                              const PackOptions& options);

// Best-fit decreasing for the common case (tokens and the count budget only,
// every length <= capacity <= 2^22, fewer than 2^31 items), straight into
// the CSR arrays of *out (offsets, items, lengths, starts). Identical packs to
// Place() (compat trl ties included); returns false (and leaves *out alone)
// outside that case.
bool BestFitFast(std::span<const Index> len, const PackOptions& options, Packing* out);

// Balanced for text units that are the items themselves (no images, none
// split or dropped): true with the packs written straight into the CSR
// arrays of *out (offsets, items, lengths, starts) where balanced returns
// best fit's or histogram packing's packs as they are (large text near the
// bound), else false with *placed = Place()'s placement. The same packs as
// Place() either way.
bool BalancedDirect(std::span<const Index> len, const PackOptions& options, Packing* out,
                    Placement* placed);

// Best fit decreasing's packs for units whose histogram is `count` (count[l]
// units of length l, l <= capacity), counted without the units (BestFitFast's
// packs: its placement depends on lengths only, items of one length are
// alike), and the sum over packs of their tokens squared. O(units) time,
// O(packs) memory, no per-unit array.
// REQUIRES as BestFitFast (no max_images, capacity <= 2^22, compat none) and
// capacity * total tokens < 2^63.
void BestFitCount(std::span<const Index> count, const PackOptions& options, Index* packs,
                  Index* load_squares);

// Units sorted by decreasing length, ties by lower index (counting sort when
// the lengths are small enough, else a stable comparison sort).
[[nodiscard]] std::vector<Index> DecreasingOrder(std::span<const Index> len);

// max(ceil(tokens / capacity), ceil(images / max_images), ceil(pieces /
// max_sequences), 1 if pieces > 0).
[[nodiscard]] Index LowerBound(Index tokens, Index images, Index pieces,
                               const PackOptions& options);

// Classifies item i: 0 fits, 1 dropped, 2 split (text longer than capacity),
// the one oversize rule of PackItems and StreamingPacker. Throws under
// oversize error.
[[nodiscard]] int Classify(Index i, Index length, Index images, const PackOptions& options);

}  // namespace shardkit::internal

#endif  // SHARDKIT_PACKING_INTERNAL_PLACE_H_
