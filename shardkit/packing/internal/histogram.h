// Internal to the packing implementation: histogram packing. Users call
// PackItems / StreamingPacker with algorithm "histogram" or "balanced".
//
// Items are grouped by length; packs are built per *strategy* (a multiset of
// lengths) chosen from the histogram, and a strategy is applied to as many
// packs at once as the counts allow, so the work depends on the number of
// distinct lengths, not on the number of items. Then units are assigned to
// the packs, each length's units in input order.
//
// Two strategy choices; the one that needs fewer packs is taken (ties: the
// greedy one).
//
// Greedy, longest remaining length L first (L opens the pack, room
// r = capacity - L, s = slots left under max_sequences):
//   s <= 2: the completion by one item of length r' or two items summing to
//           r' (both <= L), r' = r - waste for the smallest waste that has
//           one; among completions within one token of that waste, the one
//           with more items, then the one whose scarcest length is most
//           abundant (so no length runs out early), then the longer items.
//   s >= 3 (or no count budget): the longest available length that fits is
//           added while more than two slots remain, then the rule above.
//
// LP (under a count budget, max_sequences >= 2): the pattern LP of
// pattern_lp.h over the histogram (column generation, a work limit of 256
// arithmetic steps per unit, at least 2^18 and at most 2^32; skipped when that
// cannot cover a few pivots per distinct length, e.g. at 12 sequences per
// pack on 512 lengths); each basis pattern is used floor(x) times, and the
// units left over are packed by the greedy choice.
//
// Measured on the Wikipedia-512 histogram of Krell et al. (2021): at 3
// sequences per pack the LP rounding gives 8,143,829 packs, the LP optimum
// rounded up (so no packing has fewer), +0.116% over the lower bound of
// ceil(tokens / 512), where the greedy choice is at +0.32% and bfd at +11.75%;
// at 12 the greedy choice, +0.170% (docs/packing.md).
#ifndef SHARDKIT_PACKING_INTERNAL_HISTOGRAM_H_
#define SHARDKIT_PACKING_INTERNAL_HISTOGRAM_H_

#include <span>
#include <vector>

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

// The packs histogram packing chose, one strategy per run of alike packs:
// strategy s is the lengths flat[begin[s], begin[s + 1]) (decreasing),
// applied to times[s] packs; packs = the sum of times.
struct HistogramStrategies {
  std::vector<Index> flat, begin = {0}, times;
  Index packs = 0;

  void Add(std::span<const Index> lengths, Index m);
};

// The strategies for units whose histogram is `count` (count[l] units of
// length l, l <= capacity): the greedy choice, and under a count budget the
// LP's rounding where it needs fewer packs. REQUIRES as HistogramPlace.
[[nodiscard]] HistogramStrategies ChooseStrategies(std::span<const Index> count,
                                                   const PackOptions& options);

// HistogramPlace's placement of units `len` by `strategies` (chosen from
// len's histogram): packs in strategy order, each length's units in input
// order.
[[nodiscard]] Placement PlaceStrategies(std::span<const Index> len,
                                        const HistogramStrategies& strategies, Index capacity);

// The same packs straight into the CSR arrays of *out (offsets, items,
// lengths, starts; every unit is its own item). REQUIRES len.size() < 2^31.
void WriteStrategies(std::span<const Index> len, const HistogramStrategies& strategies,
                     Index capacity, Packing* out);

// HistogramPlace's packs for text units that are the items themselves,
// straight into the CSR arrays of *out (no Placement): false (and *out left
// alone) for 2^31 units or more. REQUIRES as HistogramPlace.
bool HistogramDirect(std::span<const Index> len, const PackOptions& options, Packing* out);

// The number of packs HistogramPlace makes for units whose histogram is
// `count` (count[l] units of length l, l <= capacity), without the units
// (benchmarks and tests on histograms too large to expand).
[[nodiscard]] Index HistogramPacks(std::span<const Index> count, const PackOptions& options);

}  // namespace shardkit::internal

#endif  // SHARDKIT_PACKING_INTERNAL_HISTOGRAM_H_
