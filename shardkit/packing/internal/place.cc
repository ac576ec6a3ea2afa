// The placement algorithms behind PackItems and StreamingPacker.
#include "shardkit/packing/internal/place.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "shardkit/packing/internal/histogram.h"
#include "shardkit/packing/internal/room_bits.h"

namespace shardkit::internal {

namespace {

// Packs grouped by remaining room r in [0, capacity]: a list of packs per r
// (taken from the most recently filled end, or with `oldest` from the end that
// reached r first) and a two-level bitset of the non-empty r, so the smallest
// r >= L is found in a few word scans. Capacities too large for a dense array
// use an ordered map instead.
class RoomIndex {
 public:
  RoomIndex(Index capacity, bool dense, bool oldest, std::vector<Index>* next)
      : dense_(dense), oldest_(oldest), next_(next), bits_(dense ? capacity : 0) {
    if (dense_) {
      tail_.assign(static_cast<size_t>(capacity) + 1, -1);
      head_.assign(static_cast<size_t>(capacity) + 1, -1);
    }
  }

  void Insert(Index bin, Index room) {
    if (!dense_) {
      sparse_[room].push_back(bin);
      return;
    }
    if (oldest_) {
      // Queue: taken at head_, appended at tail_.
      (*next_)[bin] = -1;
      if (head_[room] < 0) {
        head_[room] = bin;
      } else {
        (*next_)[tail_[room]] = bin;
      }
      tail_[room] = bin;
    } else {
      (*next_)[bin] = head_[room];
      head_[room] = bin;
    }
    bits_.Set(room);
  }

  // Smallest room >= need with a pack, or -1.
  [[nodiscard]] Index FindAtLeast(Index need) const {
    if (!dense_) {
      auto it = sparse_.lower_bound(need);
      return it == sparse_.end() ? -1 : it->first;
    }
    if (need >= static_cast<Index>(head_.size())) return -1;
    return bits_.FindAtLeast(need);
  }

  // Removes and returns the top pack of room `room`. REQUIRES one is there.
  Index PopAt(Index room) {
    if (!dense_) {
      auto it = sparse_.find(room);
      Index bin;
      if (oldest_) {
        bin = it->second.front();
        it->second.pop_front();
      } else {
        bin = it->second.back();
        it->second.pop_back();
      }
      if (it->second.empty()) sparse_.erase(it);
      return bin;
    }
    const Index bin = head_[room];
    head_[room] = (*next_)[bin];
    if (head_[room] < 0) bits_.Clear(room);
    return bin;
  }

 private:
  bool dense_ = true;
  bool oldest_ = false;
  std::vector<Index>* next_;
  std::vector<Index> head_, tail_;
  RoomBits bits_;
  std::map<Index, std::deque<Index>> sparse_;
};

struct Budgets {
  Index capacity;
  Index max_images;     // -1: no image budget
  Index max_sequences;  // -1: no count budget
  bool oldest = false;  // best fit ties: the pack that reached its room first
};

Budgets BudgetsOf(const PackOptions& o, bool has_images) {
  return {o.capacity, has_images && o.max_images ? *o.max_images : -1, o.max_sequences.value_or(-1),
          o.compat == PackCompat::kTrl};
}

Placement NextFit(std::span<const Index> len, std::span<const Index> img, const Budgets& b) {
  const Index n = static_cast<Index>(len.size());
  Placement p;
  p.order.resize(n);
  std::iota(p.order.begin(), p.order.end(), Index{0});
  p.bin.resize(n);
  Index tokens = 0, images = 0, count = 0, bin = -1;
  for (Index u = 0; u < n; ++u) {
    const Index k = img.empty() ? 0 : img[u];
    const bool fits = bin >= 0 && tokens + len[u] <= b.capacity &&
                      (b.max_images < 0 || images + k <= b.max_images) &&
                      (b.max_sequences < 0 || count < b.max_sequences);
    if (!fits) {
      ++bin;
      tokens = images = count = 0;
    }
    tokens += len[u];
    images += k;
    ++count;
    p.bin[u] = bin;
  }
  p.num_bins = bin + 1;
  return p;
}

// Best fit: the pack with the least room that fits (tokens), among packs with
// enough image room (the tightest image room on ties), the most recently
// filled on remaining ties (b.oldest: the one that reached that room first).
Placement BestFit(std::span<const Index> len, std::span<const Index> img, const Budgets& b,
                  std::vector<Index> order) {
  const Index n = static_cast<Index>(len.size());
  Placement p;
  p.bin.resize(n);
  // Image rooms above the data's total image count are all alike: one level.
  Index total_images = 0;
  for (Index k : img) total_images += k;
  const Index levels = b.max_images < 0 ? 1 : std::min(b.max_images, total_images) + 1;
  const bool dense = b.capacity <= (Index{1} << 22) &&
                     static_cast<double>(levels) * static_cast<double>(b.capacity) <= 1 << 24;
  std::vector<Index> next(n), room_tokens, room_images, count;
  std::vector<RoomIndex> index;
  index.reserve(levels);
  for (Index m = 0; m < levels; ++m) index.emplace_back(b.capacity, dense, b.oldest, &next);
  room_tokens.reserve(n);
  for (Index j = 0; j < n; ++j) {
    const Index u = order[j];
    const Index need = len[u];
    const Index k = b.max_images < 0 ? 0 : img[u];
    Index best_room = -1, best_level = -1;
    for (Index m = k; m < levels; ++m) {
      const Index r = index[m].FindAtLeast(need);
      if (r >= 0 && (best_room < 0 || r < best_room)) {
        best_room = r;
        best_level = m;
        if (r == need) break;
      }
    }
    Index bin;
    if (best_room < 0) {
      bin = p.num_bins++;
      room_tokens.push_back(b.capacity);
      room_images.push_back(b.max_images < 0 ? 0 : b.max_images);
      count.push_back(0);
    } else {
      bin = index[best_level].PopAt(best_room);
    }
    room_tokens[bin] -= need;
    room_images[bin] -= k;
    ++count[bin];
    p.bin[j] = bin;
    if (b.max_sequences < 0 || count[bin] < b.max_sequences) {
      index[std::min(room_images[bin], levels - 1)].Insert(bin, room_tokens[bin]);
    }
  }
  p.order = std::move(order);
  return p;
}

// First fit over a max segment tree of the packs' remaining room (and image
// room): the lowest-numbered pack that fits. Closed packs (count budget
// reached) hold -1.
class FirstFitTree {
 public:
  explicit FirstFitTree(bool images) : images_(images) { Grow(1024); }

  // Lowest pack with room >= need and image room >= k, or -1.
  [[nodiscard]] Index Find(Index need, Index k) const {
    if (tok_[1] < need || (images_ && img_[1] < k)) return -1;
    if (!images_) {
      size_t node = 1;
      while (node < cap_) node = tok_[2 * node] >= need ? 2 * node : 2 * node + 1;
      return static_cast<Index>(node - cap_);
    }
    return FindFrom(1, need, k);
  }

  void Set(Index bin, Index room, Index image_room) {
    while (static_cast<size_t>(bin) >= cap_) Grow(cap_ * 2);
    size_t node = cap_ + static_cast<size_t>(bin);
    tok_[node] = room;
    if (images_) img_[node] = image_room;
    for (node /= 2; node >= 1; node /= 2) {
      tok_[node] = std::max(tok_[2 * node], tok_[2 * node + 1]);
      if (images_) img_[node] = std::max(img_[2 * node], img_[2 * node + 1]);
    }
  }

 private:
  Index FindFrom(size_t node, Index need, Index k) const {
    if (tok_[node] < need || img_[node] < k) return -1;
    if (node >= cap_) return static_cast<Index>(node - cap_);
    const Index left = FindFrom(2 * node, need, k);
    return left >= 0 ? left : FindFrom(2 * node + 1, need, k);
  }

  void Grow(size_t cap) {
    std::vector<Index> tok(2 * cap, -1), img(images_ ? 2 * cap : 0, -1);
    for (size_t b = 0; b < cap_; ++b) {
      tok[cap + b] = tok_[cap_ + b];
      if (images_) img[cap + b] = img_[cap_ + b];
    }
    for (size_t node = cap - 1; node >= 1; --node) {
      tok[node] = std::max(tok[2 * node], tok[2 * node + 1]);
      if (images_) img[node] = std::max(img[2 * node], img[2 * node + 1]);
    }
    tok_ = std::move(tok);
    img_ = std::move(img);
    cap_ = cap;
  }

  bool images_;
  size_t cap_ = 0;
  std::vector<Index> tok_, img_;
};

Placement FirstFit(std::span<const Index> len, std::span<const Index> img, const Budgets& b,
                   std::vector<Index> order) {
  const Index n = static_cast<Index>(len.size());
  const bool images = b.max_images >= 0;
  Placement p;
  p.bin.resize(n);
  FirstFitTree tree(images);
  std::vector<Index> room_tokens, room_images, count;
  for (Index j = 0; j < n; ++j) {
    const Index u = order[j];
    const Index k = images ? img[u] : 0;
    Index bin = tree.Find(len[u], k);
    if (bin < 0) {
      bin = p.num_bins++;
      room_tokens.push_back(b.capacity);
      room_images.push_back(images ? b.max_images : 0);
      count.push_back(0);
    }
    room_tokens[bin] -= len[u];
    room_images[bin] -= k;
    ++count[bin];
    p.bin[j] = bin;
    const bool open = b.max_sequences < 0 || count[bin] < b.max_sequences;
    tree.Set(bin, open ? room_tokens[bin] : -1, open ? room_images[bin] : -1);
  }
  p.order = std::move(order);
  return p;
}

// LPT starting from `bins` packs: each unit into the least loaded pack that
// fits it (ties: the pack that reached that load first; at the start, the
// lower pack); when none of the least loaded packs tried fits it, a new pack
// opens (and takes later units like any other). The load is the pack's tokens
// (measured: evening the fuller of tokens and images packs image-budgeted
// data worse). Packs are kept by load in a RoomIndex (buckets and a bitset),
// so a unit costs O(1) amortised where only tokens bind. Returns the number
// of packs used.
Index LeastLoaded(std::span<const Index> ordered_len, std::span<const Index> ordered_img,
                  const Budgets& b, Index bins, std::vector<Index>* bin_of) {
  constexpr int kTries = 4096;
  const bool images = b.max_images >= 0;
  std::vector<Index> next(static_cast<size_t>(bins), -1);
  RoomIndex by_load(b.capacity, b.capacity <= (Index{1} << 22), /*oldest=*/true, &next);
  for (Index p = 0; p < bins; ++p) by_load.Insert(p, 0);
  std::vector<Index> tokens(bins, 0), image_count(bins, 0), count(bins, 0);
  bin_of->assign(ordered_len.size(), -1);
  std::vector<std::pair<Index, Index>> skipped;  // (pack, load)
  for (size_t j = 0; j < ordered_len.size(); ++j) {
    const Index need = ordered_len[j];
    const Index k = images ? ordered_img[j] : 0;
    skipped.clear();
    Index chosen = -1;
    for (Index load = by_load.FindAtLeast(0);
         load >= 0 && load + need <= b.capacity && static_cast<int>(skipped.size()) < kTries;
         load = by_load.FindAtLeast(load)) {
      const Index p = by_load.PopAt(load);
      if (!images || image_count[p] + k <= b.max_images) {
        chosen = p;
        break;
      }
      skipped.push_back({p, load});
    }
    for (auto [p, load] : skipped) by_load.Insert(p, load);
    if (chosen < 0) {
      chosen = static_cast<Index>(tokens.size());
      tokens.push_back(0);
      image_count.push_back(0);
      count.push_back(0);
      next.push_back(-1);
    }
    tokens[chosen] += need;
    image_count[chosen] += k;
    ++count[chosen];
    (*bin_of)[j] = chosen;
    if (b.max_sequences < 0 || count[chosen] < b.max_sequences) {
      by_load.Insert(chosen, tokens[chosen]);
    }
  }
  // Packs that stayed empty (more packs than units) are dropped; renumber.
  std::vector<Index> rename(tokens.size(), -1);
  Index used = 0;
  for (size_t p = 0; p < tokens.size(); ++p) {
    if (count[p] > 0) rename[p] = used++;
  }
  for (Index& x : *bin_of) x = rename[x];
  return used;
}

// Best fit decreasing as a Placement: the fast path where it applies.
Placement BestFitAny(std::span<const Index> len, std::span<const Index> img, const Budgets& b,
                     const PackOptions& o) {
  if (b.max_images < 0) {
    PackOptions text = o;
    text.max_images.reset();
    Packing out;
    if (BestFitFast(len, text, &out)) {
      Placement p;
      p.order = std::move(out.items);
      p.bin.resize(p.order.size());
      p.num_bins = out.num_packs();
      for (Index pack = 0; pack < p.num_bins; ++pack) {
        for (Index e = out.offsets[pack]; e < out.offsets[pack + 1]; ++e) p.bin[e] = pack;
      }
      return p;
    }
  }
  return BestFit(len, img, b, DecreasingOrder(len));
}

// Text inputs above this many units skip the LPT search (each LPT pass
// touches every pack at random; best fit and histogram packing set the count).
constexpr Index kLargeText = Index{1} << 20;

// Histogram packing joins balanced's candidates up to this many distinct
// lengths (its strategy search grows with them and with the capacity).
constexpr Index kHistogramDistinct = 4096;

Index DistinctLengths(std::span<const Index> len, Index capacity) {
  if (capacity > kHistogramMaxCapacity) return kHistogramDistinct + 1;
  std::vector<bool> seen(static_cast<size_t>(capacity) + 1, false);
  Index distinct = 0;
  for (Index l : len) {
    if (!seen[static_cast<size_t>(l)]) {
      seen[static_cast<size_t>(l)] = true;
      ++distinct;
    }
  }
  return distinct;
}

// Coefficient of variation of pack tokens from their sum and sum of squares
// over `packs` packs (0 without packs).
double Variation(double sum, double squares, Index packs) {
  if (packs == 0) return 0;
  const double mean = sum / static_cast<double>(packs);
  if (mean <= 0) return 0;
  const double variance = std::max(0.0, squares / static_cast<double>(packs) - mean * mean);
  return std::sqrt(variance) / mean;
}

// Coefficient of variation of the packs' tokens (0 without packs).
double LoadVariation(const Placement& p, std::span<const Index> len) {
  if (p.num_bins == 0) return 0;
  std::vector<double> load(static_cast<size_t>(p.num_bins), 0.0);
  for (size_t j = 0; j < p.order.size(); ++j)
    load[p.bin[j]] += static_cast<double>(len[p.order[j]]);
  double sum = 0, squares = 0;
  for (double l : load) {
    sum += l;
    squares += l * l;
  }
  return Variation(sum, squares, p.num_bins);
}

// Balanced's step 2 for large text (below), counted before any unit is
// placed: best fit's packs from the length histogram (BestFitCount) and
// histogram packing's strategies, so that only the winner is placed (placing
// both, and best fit's 16M-unit arrays, was most of balanced's time beside
// the LP). When balanced returns the winner as it is (within 1% of the bound,
// loads varying by at most 5%) and `direct` is given, its packs are written
// into *direct (true). Otherwise *fit is the winner's placement, the one the
// step makes from the units, and *cap its packs (false); *cap stays -1 where
// this does not apply (a capacity over 2^22, 2^31 units or more, or loads
// whose sums of squares a double does not hold exactly: the load variation
// must be the same number as LoadVariation's).
bool CountedCandidates(std::span<const Index> len, const Budgets& b, const PackOptions& o,
                       Index lower, Packing* direct, Placement* fit, Index* cap) {
  const Index capacity = o.capacity;
  if (capacity > (Index{1} << 22) || static_cast<Index>(len.size()) >= (Index{1} << 31)) {
    return false;
  }
  std::vector<Index> count(static_cast<size_t>(capacity) + 1, 0);
  Index tokens = 0, distinct = 0;
  for (Index l : len) ++count[static_cast<size_t>(l)];
  for (Index l = 0; l <= capacity; ++l) {
    tokens += l * count[static_cast<size_t>(l)];
    distinct += count[static_cast<size_t>(l)] > 0;
  }
  // Every pack's tokens squared is at most capacity times its tokens.
  if (tokens > (Index{1} << 53) / capacity) return false;
  PackOptions text = o;
  text.max_images.reset();
  Index packs = 0, squares = 0;
  BestFitCount(count, text, &packs, &squares);
  HistogramStrategies strategies;
  bool histogram = false;
  if (HistogramApplicable(o, false) && (o.max_sequences || capacity <= 2048) &&
      distinct <= kHistogramDistinct) {
    strategies = ChooseStrategies(count, o);
    histogram = strategies.packs < packs;
  }
  if (histogram) {
    packs = strategies.packs;
    squares = 0;
    for (size_t s = 0; s < strategies.times.size(); ++s) {
      Index load = 0;
      for (Index j = strategies.begin[s]; j < strategies.begin[s + 1]; ++j) {
        load += strategies.flat[static_cast<size_t>(j)];
      }
      squares += load * load * strategies.times[s];
    }
  }
  if (direct != nullptr && packs - lower <= lower / 100 &&
      Variation(static_cast<double>(tokens), static_cast<double>(squares), packs) <= 0.05) {
    if (histogram) {
      WriteStrategies(len, strategies, capacity, direct);
    } else {
      BestFitFast(len, text, direct);
    }
    return true;
  }
  *fit = histogram ? PlaceStrategies(len, strategies, capacity) : BestFitAny(len, {}, b, o);
  *cap = fit->num_bins;
  return false;
}

// Balanced: LPT from K packs (LeastLoaded) uses K packs when the loads fit,
// more when units overflow. Too few starting packs overflow units into late,
// lightly loaded packs; too many leave every pack part full.
//   1. LPT from the lower bound: if it fits, that count cannot be beaten.
//   2. The count to beat: best fit decreasing, or histogram packing where it
//      applies and may win (a count budget, or a capacity up to 2048 tokens,
//      so few distinct lengths), whichever needs fewer packs.
//   3. K is searched above the bound (a ladder, then a local refinement)
//      while it can gain: the count to beat 0.1% or more above the bound.
//   4. The fewest packs win; at the count of step 2, LPT from that count
//      evens the loads when it fits, else that packing is returned as is.
// Text (no image budget) over kLargeText units starts with step 2: when its
// count is within 1% of the bound, 1 and 3 are skipped (each LPT pass touches
// every pack at random and costs more than all of step 2) and 4 runs only
// when its loads vary by more than 5% (coefficient of variation); farther
// from the bound (count budgets on spread-out lengths), the search runs, with
// the ladder where the count to beat is more than 1% above the bound.
// With `direct` (text units that are the items themselves), step 2's
// shortcut for large text writes its packs there and returns nullopt.
std::optional<Placement> Balanced(std::span<const Index> len, std::span<const Index> img,
                                  const Budgets& b, const PackOptions& o,
                                  Packing* direct = nullptr) {
  // Units by decreasing length, and their lengths and images in that order,
  // made before the first LPT pass (large text often needs none): every pass
  // then reads them in sequence (read through `order`, each pass missed the
  // cache once per unit, most of its time on large inputs).
  std::vector<Index> order, ordered_len, ordered_img;
  auto gather = [&] {
    if (!ordered_len.empty() || len.empty()) return;
    order = DecreasingOrder(len);
    ordered_len.resize(order.size());
    for (size_t j = 0; j < order.size(); ++j) ordered_len[j] = len[order[j]];
    if (!img.empty()) {
      ordered_img.resize(order.size());
      for (size_t j = 0; j < order.size(); ++j) ordered_img[j] = img[order[j]];
    }
  };
  Index tokens = 0, images = 0;
  for (Index l : len) tokens += l;
  for (Index k : img) images += k;
  PackOptions bound_options = o;
  if (b.max_images < 0) bound_options.max_images.reset();
  const Index lower = LowerBound(tokens, images, static_cast<Index>(len.size()), bound_options);
  std::map<Index, Index> tried;  // start K -> packs used
  Placement best;
  Index best_start = -1;
  auto attempt = [&](Index start) {
    if (start < lower || tried.count(start)) return;
    gather();
    Placement p;
    p.num_bins = LeastLoaded(ordered_len, ordered_img, b, start, &p.bin);
    tried[start] = p.num_bins;
    if (best_start < 0 || p.num_bins < best.num_bins) {
      best = std::move(p);
      best_start = start;
    }
  };
  const bool large_text = b.max_images < 0 && static_cast<Index>(len.size()) > kLargeText;
  Placement fit;
  Index cap = -1;
  auto candidates = [&] {
    fit = BestFitAny(len, img, b, o);
    if (HistogramApplicable(o, b.max_images >= 0) && (o.max_sequences || o.capacity <= 2048) &&
        DistinctLengths(len, o.capacity) <= kHistogramDistinct) {
      Placement h = HistogramPlace(len, o);
      if (h.num_bins < fit.num_bins) fit = std::move(h);
    }
    cap = fit.num_bins;
  };
  if (large_text) {
    // Within 1% of the bound, LPT has little to gain and costs more than
    // best fit and histogram packing together: even the loads only where
    // they vary by more than 5%.
    if (CountedCandidates(len, b, o, lower, direct, &fit, &cap)) return std::nullopt;
    if (cap < 0) candidates();
    if (cap - lower <= lower / 100 && LoadVariation(fit, len) <= 0.05) return fit;
  }
  if (!large_text || cap - lower > lower / 100) {
    attempt(lower);
    if (best.num_bins <= lower) {
      best.order = std::move(order);
      return best;
    }
  }
  if (cap < 0) candidates();
  const bool search = cap - lower > (large_text ? lower / 100 : lower / 1000);
  for (double fraction : {0.0025, 0.005, 0.01, 0.02, 0.04}) {
    if (!search) break;
    const Index start = lower + std::max<Index>(1, static_cast<Index>(lower * fraction));
    if (start >= cap) break;
    attempt(start);
  }
  for (Index step = std::max<Index>(1, best_start / 200); search && step >= 1; step /= 2) {
    attempt(best_start + step);
    attempt(best_start - step);
    if (step == 1) break;
  }
  if (best_start >= 0 && best.num_bins < cap) {
    best.order = std::move(order);
    return best;
  }
  gather();
  Placement again;
  again.num_bins = LeastLoaded(ordered_len, ordered_img, b, cap, &again.bin);
  if (again.num_bins <= cap) {
    again.order = std::move(order);
    return again;
  }
  return fit;
}

}  // namespace

bool BestFitFast(std::span<const Index> len, const PackOptions& o, Packing* out) {
  const Index n = static_cast<Index>(len.size());
  const Index capacity = o.capacity;
  if (o.max_images || capacity > (Index{1} << 22) || n >= (Index{1} << 31)) return false;
  const Index max_sequences = o.max_sequences.value_or(-1);
  // Counting sort, decreasing length, ties by lower index: count[l], then the
  // first sorted position of every length.
  std::vector<std::int64_t> first(static_cast<size_t>(capacity) + 2, 0);
  for (Index l : len) ++first[static_cast<size_t>(capacity - l) + 1];
  for (size_t i = 1; i < first.size(); ++i) first[i] += first[i - 1];
  const std::vector<std::int64_t> bounds(first.begin(), first.end());
  std::vector<std::int32_t> order(static_cast<size_t>(n));
  for (Index u = 0; u < n; ++u) {
    order[static_cast<size_t>(first[static_cast<size_t>(capacity - len[u])]++)] =
        static_cast<std::int32_t>(u);
  }
  // Best fit: packs grouped by remaining room; the room of a pack is the
  // bucket it sits in, so no per-pack state is touched but its item count.
  std::vector<std::vector<std::int32_t>> bucket(static_cast<size_t>(capacity) + 1);
  // Ties: the most recently filled pack of a room (the back of its bucket), or
  // under compat trl the one that reached the room first (front[r] onwards).
  const bool oldest = o.compat == PackCompat::kTrl;
  std::vector<size_t> front(oldest ? static_cast<size_t>(capacity) + 1 : 0, 0);
  RoomBits rooms(capacity);
  std::vector<std::int32_t> bin_of(static_cast<size_t>(n));
  std::vector<std::int32_t> count;  // entries per pack (< 2^31: n is)
  count.reserve(static_cast<size_t>(n / 4 + 16));
  for (Index l = capacity; l >= 0; --l) {
    const std::int64_t begin = bounds[static_cast<size_t>(capacity - l)];
    const std::int64_t end = bounds[static_cast<size_t>(capacity - l) + 1];
    for (std::int64_t j = begin; j < end; ++j) {
      const Index r = rooms.FindAtLeast(l);
      std::int32_t bin;
      Index room;
      if (r < 0) {
        bin = static_cast<std::int32_t>(count.size());
        count.push_back(0);
        room = capacity;
      } else {
        auto& b = bucket[static_cast<size_t>(r)];
        if (oldest) {
          size_t& f = front[static_cast<size_t>(r)];
          bin = b[f++];
          if (f == b.size()) {
            b.clear();
            f = 0;
            rooms.Clear(r);
          }
        } else {
          bin = b.back();
          b.pop_back();
          if (b.empty()) rooms.Clear(r);
        }
        room = r;
      }
      ++count[static_cast<size_t>(bin)];
      bin_of[static_cast<size_t>(j)] = bin;
      if (max_sequences >= 0 && count[static_cast<size_t>(bin)] >= max_sequences) continue;
      const Index rest = room - l;
      auto& target = bucket[static_cast<size_t>(rest)];
      if (target.empty()) rooms.Set(rest);
      target.push_back(bin);
    }
  }
  // CSR by pack, entries in placement order.
  const size_t packs = count.size();
  out->offsets.resize(packs + 1);
  out->offsets[0] = 0;
  for (size_t b = 0; b < packs; ++b) {
    const std::int32_t c = count[b];
    count[b] = static_cast<std::int32_t>(out->offsets[b]);  // next free entry of pack b
    out->offsets[b + 1] = out->offsets[b] + c;
  }
  out->items.resize(static_cast<size_t>(n));
  out->lengths.resize(static_cast<size_t>(n));
  out->starts.assign(static_cast<size_t>(n), 0);
  for (Index l = capacity; l >= 0; --l) {
    const std::int64_t begin = bounds[static_cast<size_t>(capacity - l)];
    const std::int64_t end = bounds[static_cast<size_t>(capacity - l) + 1];
    for (std::int64_t j = begin; j < end; ++j) {
      const auto bin = static_cast<size_t>(bin_of[static_cast<size_t>(j)]);
      const auto e = static_cast<size_t>(count[bin]++);
      out->items[e] = order[static_cast<size_t>(j)];
      out->lengths[e] = l;
    }
  }
  return true;
}

bool BalancedDirect(std::span<const Index> len, const PackOptions& o, Packing* out,
                    Placement* placed) {
  std::optional<Placement> p = Balanced(len, {}, BudgetsOf(o, false), o, out);
  if (!p) return true;
  *placed = std::move(*p);
  return false;
}

void BestFitCount(std::span<const Index> count, const PackOptions& o, Index* packs,
                  Index* load_squares) {
  const Index capacity = o.capacity;
  const Index max_sequences = o.max_sequences.value_or(-1);
  // BestFitFast's buckets, each pack standing for its entry count only: the
  // packs of room r, most recently filled at the back.
  std::vector<std::vector<std::int32_t>> bucket(static_cast<size_t>(capacity) + 1);
  RoomBits rooms(capacity);
  Index opened = 0, squares = 0;
  for (Index l = capacity; l >= 0; --l) {
    for (Index c = count[static_cast<size_t>(l)]; c > 0; --c) {
      const Index r = rooms.FindAtLeast(l);
      std::int32_t entries = 0;
      Index room = capacity;
      if (r < 0) {
        ++opened;
      } else {
        auto& b = bucket[static_cast<size_t>(r)];
        entries = b.back();
        b.pop_back();
        if (b.empty()) rooms.Clear(r);
        room = r;
      }
      ++entries;
      const Index rest = room - l;
      if (max_sequences >= 0 && entries >= max_sequences) {
        squares += (capacity - rest) * (capacity - rest);
        continue;
      }
      auto& target = bucket[static_cast<size_t>(rest)];
      if (target.empty()) rooms.Set(rest);
      target.push_back(entries);
    }
  }
  for (Index r = 0; r <= capacity; ++r) {
    squares +=
        static_cast<Index>(bucket[static_cast<size_t>(r)].size()) * (capacity - r) * (capacity - r);
  }
  *packs = opened;
  *load_squares = squares;
}

std::vector<Index> DecreasingOrder(std::span<const Index> len) {
  const Index n = static_cast<Index>(len.size());
  std::vector<Index> order(n);
  Index max_len = 0;
  for (Index l : len) max_len = std::max(max_len, l);
  if (max_len <= std::max<Index>(Index{1} << 16, 4 * n)) {
    // Stable counting sort: start[l] = units longer than l.
    std::vector<Index> start(static_cast<size_t>(max_len) + 2, 0);
    for (Index l : len) ++start[static_cast<size_t>(max_len - l) + 1];
    for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
    for (Index u = 0; u < n; ++u) order[start[static_cast<size_t>(max_len - len[u])]++] = u;
    return order;
  }
  std::iota(order.begin(), order.end(), Index{0});
  std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) { return len[a] > len[b]; });
  return order;
}

Placement Place(std::span<const Index> len, std::span<const Index> img,
                const PackOptions& options) {
  const Budgets b = BudgetsOf(options, !img.empty());
  switch (options.algorithm) {
    case PackAlgorithm::kNextFit:
      return NextFit(len, img, b);
    case PackAlgorithm::kFirstFitDecreasing:
      return FirstFit(len, img, b, DecreasingOrder(len));
    case PackAlgorithm::kBestFitDecreasing:
      return BestFit(len, img, b, DecreasingOrder(len));
    case PackAlgorithm::kBalanced:
      return *Balanced(len, img, b, options);
    case PackAlgorithm::kHistogram:
      return HistogramPlace(len, options);
  }
  return {};
}

}  // namespace shardkit::internal
