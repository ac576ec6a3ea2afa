// Histogram packing: strategies chosen from the length histogram, applied in
// batches, then units assigned (see histogram.h).
#include "shardkit/packing/internal/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "shardkit/packing/internal/pattern_lp.h"

namespace shardkit::internal {

namespace {

// The histogram count[l] (units of length l, 0 <= l <= capacity) with the set
// of lengths still available, so that the largest available length <= x is
// found in O(1) words (two levels of 64-bit words) instead of a scan over
// every length: a sparse histogram (few units at a large capacity) made each
// completion search O(capacity^2) (2,000 units at capacity 65536: 11 s).
class Counts {
 public:
  explicit Counts(std::vector<Index>* count) : n_(*count) {
    const std::size_t words = n_.size() / 64 + 1;
    bits_.assign(words, 0);
    summary_.assign(words / 64 + 1, 0);
    for (std::size_t l = 0; l < n_.size(); ++l) {
      if (n_[l] > 0) Set(l);
    }
  }
  Index operator[](Index l) const { return n_[static_cast<std::size_t>(l)]; }
  void Add(Index l, Index delta) {
    Index& c = n_[static_cast<std::size_t>(l)];
    const bool had = c > 0;
    c += delta;
    if (had != (c > 0)) {
      if (c > 0) {
        Set(static_cast<std::size_t>(l));
      } else {
        Clear(static_cast<std::size_t>(l));
      }
    }
  }
  // The largest length <= x with a unit left, or -1.
  Index Prev(Index x) const {
    if (x < 0) return -1;
    std::size_t w = std::min(static_cast<std::size_t>(x), n_.size() - 1);
    const std::size_t bit = w % 64;
    w /= 64;
    std::uint64_t word = bits_[w] & (bit == 63 ? ~std::uint64_t{0} : (std::uint64_t{2} << bit) - 1);
    if (word) return static_cast<Index>(w * 64 + 63 - std::countl_zero(word));
    if (w == 0) return -1;
    // The last non-empty word before w, from the summary.
    std::size_t k = (w - 1) / 64;
    const std::size_t kb = (w - 1) % 64;
    std::uint64_t sw = summary_[k] & (kb == 63 ? ~std::uint64_t{0} : (std::uint64_t{2} << kb) - 1);
    while (!sw) {
      if (k == 0) return -1;
      sw = summary_[--k];
    }
    w = k * 64 + 63 - static_cast<std::size_t>(std::countl_zero(sw));
    return static_cast<Index>(w * 64 + 63 - static_cast<std::size_t>(std::countl_zero(bits_[w])));
  }

 private:
  void Set(std::size_t l) {
    bits_[l / 64] |= std::uint64_t{1} << (l % 64);
    summary_[l / 64 / 64] |= std::uint64_t{1} << ((l / 64) % 64);
  }
  void Clear(std::size_t l) {
    bits_[l / 64] &= ~(std::uint64_t{1} << (l % 64));
    if (!bits_[l / 64]) summary_[l / 64 / 64] &= ~(std::uint64_t{1} << ((l / 64) % 64));
  }

  std::vector<Index>& n_;
  std::vector<std::uint64_t> bits_, summary_;
};

// A completion of a pack by at most two more items: lengths a >= b (b < 0:
// one item; a < 0: none).
struct Completion {
  Index a = -1, b = -1;
  int items() const { return (a >= 0) + (b >= 0); }
};

class Chooser {
 public:
  explicit Chooser(const Counts* count) : n_(*count) {}

  // Completion of room `r` by at most `slots` (1 or 2) items of length <= L:
  // the exact completions and those one token short; without an exact one,
  // those with the least waste. Among them: more items, then the scarcest
  // length most abundant, then the first found (longer items, less waste).
  // Work: O(available lengths visited), never a scan of every length.
  Completion Best(Index L, Index r, Index slots) const {
    // The largest total <= r of one or two available items (<= L): the
    // smallest waste, first = r - top.
    const Index hi = std::min(L, r);
    Index top = n_.Prev(hi);
    if (slots >= 2) {
      for (Index a = n_.Prev(hi); a >= 0 && 2 * a > top && top < r; a = n_.Prev(a - 1)) {
        Index b = n_.Prev(std::min(a, r - a));
        if (b == a && n_[a] < 2) b = n_.Prev(a - 1);
        if (b >= 0) top = std::max(top, a + b);
      }
    }
    if (top < 0) return {};
    const Index first = r - top;
    const Index start = std::max<Index>(0, first - 1);
    Completion best;
    Index best_scarce = -1;
    bool have = false;
    auto offer = [&](Index a, Index b) {
      const Completion c{a, b};
      const Index scarce = b >= 0 ? std::min(n_[a], n_[b]) : n_[a];
      if (!have || c.items() > best.items() ||
          (c.items() == best.items() && scarce > best_scarce)) {
        best = c;
        best_scarce = scarce;
        have = true;
      }
    };
    for (Index w = start; w <= std::min(r, start + 1); ++w) {
      const Index t = r - w;
      if (t <= L && n_[t] >= 1) offer(t, -1);
      if (slots >= 2) {
        // Every available a in [t / 2, min(L, t)], descending.
        for (Index a = n_.Prev(std::min(L, t)); a >= 0 && 2 * a >= t; a = n_.Prev(a - 1)) {
          const Index b = t - a;
          if (a == b ? n_[a] >= 2 : n_[b] >= 1) offer(a, b);
        }
      }
    }
    return best;
  }

 private:
  const Counts& n_;
};

}  // namespace

bool HistogramApplicable(const PackOptions& o, bool has_images) {
  return !has_images && !o.max_images && o.capacity <= kHistogramMaxCapacity;
}

namespace {

// Work limit of the pattern LP (pattern_lp.h): kLpWorkPerUnit arithmetic
// steps per unit, at least kLpMinWork, at most kLpWorkLimit (about a second
// of one core: the Wikipedia-512 histogram at 3 sequences per pack needs
// 2.8e9, 16.3M units).
constexpr Index kLpWorkPerUnit = 256;
constexpr Index kLpMinWork = Index{1} << 18;
constexpr Index kLpWorkLimit = Index{1} << 32;

using Strategies = HistogramStrategies;

// The greedy strategy choice (histogram.h) over `count` (consumed: all zero
// on return), k < 0 without a count budget, n the number of units.
void GreedyStrategies(std::vector<Index>* count_ptr, Index capacity, Index k, Index n,
                      Strategies* out) {
  Counts count(count_ptr);
  std::vector<Index> pick;
  std::vector<std::pair<Index, Index>> need;  // (length, units per pack)
  Chooser chooser(&count);
  for (Index L = capacity; L >= 0; --L) {
    while (count[L] > 0) {
      // The opener and the longest-first picks are taken from the counts
      // while the rest is chosen, then given back.
      pick.assign(1, L);
      count.Add(L, -1);
      Index room = capacity - L;
      Index slots = k < 0 ? n : k - 1;
      Index x = std::min(L, room);
      while (slots > 2 && room > 0) {
        x = count.Prev(x);
        if (x < 0) break;
        pick.push_back(x);
        count.Add(x, -1);
        room -= x;
        --slots;
        x = std::min(x, room);
      }
      const size_t taken = pick.size();
      if (slots > 0 && slots <= 2) {
        const Completion c = chooser.Best(L, room, slots);
        if (c.a >= 0) pick.push_back(c.a);
        if (c.b >= 0) pick.push_back(c.b);
      }
      for (size_t j = 0; j < taken; ++j) count.Add(pick[j], 1);
      std::sort(pick.begin(), pick.end(), std::greater<>());
      need.clear();
      for (Index l : pick) {
        if (!need.empty() && need.back().first == l) {
          ++need.back().second;
        } else {
          need.push_back({l, 1});
        }
      }
      // As many packs of this strategy as the counts allow (>= 1: every
      // length of it was available).
      Index m = -1;
      for (auto [l, c] : need) {
        const Index fit = count[l] / c;
        m = m < 0 ? fit : std::min(m, fit);
      }
      for (auto [l, c] : need) count.Add(l, -m * c);
      out->Add(pick, m);
    }
  }
}

// Strategies from the pattern LP (pattern_lp.h): each basis pattern used
// floor(x) times (fewer where round-off would take more items of a length
// than there are), lexicographically longest patterns first; the units left
// over are packed by the greedy choice. False when the LP does not apply.
bool LpStrategies(const std::vector<Index>& count, Index capacity, Index k, Index n,
                  Strategies* out) {
  std::vector<Index> lengths, counts;
  for (Index l = 0; l <= capacity; ++l) {
    if (count[static_cast<size_t>(l)] > 0) {
      lengths.push_back(l);
      counts.push_back(count[static_cast<size_t>(l)]);
    }
  }
  const Index limit =
      n > kLpWorkLimit / kLpWorkPerUnit ? kLpWorkLimit : std::max(kLpMinWork, kLpWorkPerUnit * n);
  const auto lp = SolvePatternLp(lengths, counts, capacity, std::min(k, n), limit);
  if (!lp) return false;
  std::vector<size_t> order(lp->patterns.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lp->patterns[a] > lp->patterns[b]; });
  std::vector<Index> left = count;
  for (size_t j : order) {
    const std::vector<Index>& pattern = lp->patterns[j];
    if (pattern.empty()) continue;
    const double x = std::floor(lp->x[j] + 1e-6);
    Index m = x >= static_cast<double>(n) ? n : static_cast<Index>(x);
    for (size_t a = 0; a < pattern.size();) {
      size_t b = a;
      while (b < pattern.size() && pattern[b] == pattern[a]) ++b;
      m = std::min(m, left[static_cast<size_t>(pattern[a])] / static_cast<Index>(b - a));
      a = b;
    }
    if (m <= 0) continue;
    for (Index l : pattern) left[static_cast<size_t>(l)] -= m;
    out->Add(pattern, m);
  }
  GreedyStrategies(&left, capacity, k, n, out);
  return true;
}

}  // namespace

void HistogramStrategies::Add(std::span<const Index> lengths, Index m) {
  flat.insert(flat.end(), lengths.begin(), lengths.end());
  begin.push_back(static_cast<Index>(flat.size()));
  times.push_back(m);
  packs += m;
}

HistogramStrategies ChooseStrategies(std::span<const Index> count_span, const PackOptions& o) {
  const std::vector<Index> count(count_span.begin(), count_span.end());
  Index n = 0;
  for (Index c : count) n += c;
  const Index k = o.max_sequences.value_or(-1);  // -1: no count budget
  Strategies greedy;
  {
    std::vector<Index> left = count;
    GreedyStrategies(&left, o.capacity, k, n, &greedy);
  }
  Strategies lp;
  if (k >= 2 && LpStrategies(count, o.capacity, k, n, &lp) && lp.packs < greedy.packs) return lp;
  return greedy;
}

Index HistogramPacks(std::span<const Index> count, const PackOptions& o) {
  return ChooseStrategies(count, o).packs;
}

Placement HistogramPlace(std::span<const Index> len, const PackOptions& o) {
  std::vector<Index> count(static_cast<size_t>(o.capacity) + 1, 0);
  for (Index l : len) ++count[static_cast<size_t>(l)];
  return PlaceStrategies(len, ChooseStrategies(count, o), o.capacity);
}

bool HistogramDirect(std::span<const Index> len, const PackOptions& o, Packing* out) {
  if (static_cast<Index>(len.size()) >= (Index{1} << 31)) return false;
  std::vector<Index> count(static_cast<size_t>(o.capacity) + 1, 0);
  for (Index l : len) ++count[static_cast<size_t>(l)];
  WriteStrategies(len, ChooseStrategies(count, o), o.capacity, out);
  return true;
}

Placement PlaceStrategies(std::span<const Index> len, const HistogramStrategies& chosen,
                          Index capacity) {
  const Index n = static_cast<Index>(len.size());
  const std::vector<Index>& flat = chosen.flat;
  const std::vector<Index>& begin = chosen.begin;
  const std::vector<Index>& times = chosen.times;

  // Units of each length in input order; strategy by strategy, pack by pack.
  std::vector<Index> next(static_cast<size_t>(capacity) + 2, 0);
  for (Index l : len) ++next[static_cast<size_t>(l) + 1];
  for (size_t i = 1; i < next.size(); ++i) next[i] += next[i - 1];
  std::vector<Index> by_length(static_cast<size_t>(n));
  {
    std::vector<Index> at(next.begin(), next.end() - 1);
    for (Index u = 0; u < n; ++u)
      by_length[static_cast<size_t>(at[static_cast<size_t>(len[u])]++)] = u;
  }
  Placement p;
  p.order.reserve(static_cast<size_t>(n));
  p.bin.reserve(static_cast<size_t>(n));
  for (size_t s = 0; s + 1 < begin.size(); ++s) {
    for (Index t = 0; t < times[s]; ++t) {
      const Index bin = p.num_bins++;
      for (Index j = begin[s]; j < begin[s + 1]; ++j) {
        const Index l = flat[static_cast<size_t>(j)];
        p.order.push_back(by_length[static_cast<size_t>(next[static_cast<size_t>(l)]++)]);
        p.bin.push_back(bin);
      }
    }
  }
  return p;
}

void WriteStrategies(std::span<const Index> len, const HistogramStrategies& chosen, Index capacity,
                     Packing* out) {
  const size_t n = len.size();
  // Units of each length in input order (32-bit ids: half the memory traffic).
  std::vector<std::int32_t> next(static_cast<size_t>(capacity) + 2, 0);
  for (Index l : len) ++next[static_cast<size_t>(l) + 1];
  for (size_t i = 1; i < next.size(); ++i) next[i] += next[i - 1];
  std::vector<std::int32_t> by_length(n);
  {
    std::vector<std::int32_t> at(next.begin(), next.end() - 1);
    for (size_t u = 0; u < n; ++u) {
      by_length[static_cast<size_t>(at[static_cast<size_t>(len[u])]++)] =
          static_cast<std::int32_t>(u);
    }
  }
  out->offsets.resize(static_cast<size_t>(chosen.packs) + 1);
  out->offsets[0] = 0;
  out->items.resize(n);
  out->lengths.resize(n);
  out->starts.assign(n, 0);
  Index* offsets = out->offsets.data();
  Index* items = out->items.data();
  Index* lengths = out->lengths.data();
  size_t e = 0, pack = 0;
  for (size_t s = 0; s + 1 < chosen.begin.size(); ++s) {
    const auto first = static_cast<size_t>(chosen.begin[s]);
    const auto last = static_cast<size_t>(chosen.begin[s + 1]);
    for (Index t = 0; t < chosen.times[s]; ++t) {
      for (size_t j = first; j < last; ++j) {
        const Index l = chosen.flat[j];
        items[e] = by_length[static_cast<size_t>(next[static_cast<size_t>(l)]++)];
        lengths[e] = l;
        ++e;
      }
      offsets[++pack] = static_cast<Index>(e);
    }
  }
}

}  // namespace shardkit::internal
