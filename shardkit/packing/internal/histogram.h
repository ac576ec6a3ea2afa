// Internal to the packing implementation: histogram packing. Users call
// PackItems / StreamingPacker with algorithm "histogram" or "balanced".
//
// Items are grouped by length; packs are built per *strategy* (a multiset of
// lengths) chosen from the histogram, and a strategy is applied to as many
// packs at once as the counts allow, so the work depends on the number of
// distinct lengths, not on the number of items. Then units are assigned to
// the packs, each length's units in input order.
//
// Strategy choice, longest remaining length L first (L opens the pack, room
// r = capacity - L, s = slots left under max_sequences):
//   s <= 2: the completion by one item of length r' or two items summing to
//           r' (both <= L), r' = r - waste for the smallest waste that has
//           one; among completions within one token of that waste, the one
//           with more items, then the one whose scarcest length is most
//           abundant (so no length runs out early), then the longer items.
//   s >= 3 (or no count budget): the longest available length that fits is
//           added while more than two slots remain, then the rule above.
// Measured on the Wikipedia-512 histogram of Krell et al. (2021) at 3
// sequences per pack: within 0.35% of the lower bound, where bfd is 11.75%
// above it (docs/packing.md).
#ifndef SHARDKIT_PACKING_INTERNAL_HISTOGRAM_H_
#define SHARDKIT_PACKING_INTERNAL_HISTOGRAM_H_

#include <span>

#include "shardkit/base/errors.h"
#include "shardkit/packing/internal/place.h"
#include "shardkit/packing/packing.h"

namespace shardkit::internal {

// Largest capacity the histogram packer takes (its tables are O(capacity)).
inline constexpr Index kHistogramMaxCapacity = Index{1} << 16;

// Whether HistogramPlace can pack these units: tokens and max_sequences only
// (no images), capacity <= kHistogramMaxCapacity.
[[nodiscard]] bool HistogramApplicable(const PackOptions& options, bool has_images);

// Places units with lengths `len` by histogram strategies under capacity and
// max_sequences. Packs are numbered in the order their strategies were
// chosen; within a pack, units in decreasing length.
// REQUIRES HistogramApplicable(options, false), 0 <= len[u] <= capacity.
[[nodiscard]] Placement HistogramPlace(std::span<const Index> len, const PackOptions& options);

}  // namespace shardkit::internal

#endif  // SHARDKIT_PACKING_INTERNAL_HISTOGRAM_H_
