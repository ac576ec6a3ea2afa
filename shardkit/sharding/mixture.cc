#include "shardkit/sharding/mixture.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "shardkit/sharding/permutation.h"

namespace shardkit {

namespace {

using u128 = unsigned __int128;

constexpr std::uint64_t kQuantum = std::uint64_t{1} << 40;
constexpr Index kMaxStart = Index{1} << 62;
constexpr Index kDefaultBlock = 1024;

std::string Num(double v) {
  std::string s = std::to_string(v);
  return s;
}

// One share vector of the run: q (sum == total), in effect from `position`
// (global samples).
struct Change {
  Index position = 0;
  std::vector<std::uint64_t> q;
  std::uint64_t total = 0;
  std::string_view param = "weights";  // what set these shares (weights / schedule)
};

void CheckWeights(std::string_view param, const std::vector<double>& weights, Index k) {
  if (static_cast<Index>(weights.size()) != k) {
    ThrowInvalid(param, "expected " + Str(k) + " weights (one per source), got " +
                            Str(static_cast<Index>(weights.size())));
  }
  bool positive = false;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double w = weights[i];
    if (!std::isfinite(w) || w < 0) {
      ThrowInvalid(param, "weight " + Str(static_cast<Index>(i)) + " is " + Num(w) +
                              "; weights must be finite and >= 0");
    }
    positive = positive || w > 0;
  }
  if (!positive) ThrowInvalid(param, "every weight is 0; at least one must be positive");
}

// Integer shares of `weights` (already per-sample). Integral weights with a
// small sum are exact; otherwise largest-remainder rounding to kQuantum, a
// positive weight getting at least 1.
Change Quantize(const std::vector<double>& w, bool allow_exact) {
  Change c;
  const std::size_t k = w.size();
  c.q.assign(k, 0);
  if (allow_exact) {
    bool integral = true;
    double sum = 0;
    for (double x : w) {
      integral = integral && x == std::floor(x) && x < 4.6e18;
      sum += x;
    }
    if (integral && sum < 4.6e18) {
      std::uint64_t total = 0;
      for (std::size_t i = 0; i < k; ++i) {
        c.q[i] = static_cast<std::uint64_t>(w[i]);
        total += c.q[i];
      }
      if (total <= (std::uint64_t{1} << 62)) {
        c.total = total;
        return c;
      }
    }
  }
  long double sum = 0;
  for (double x : w) sum += x;
  std::vector<long double> rem(k);
  std::uint64_t given = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const long double x = static_cast<long double>(w[i]) / sum * static_cast<long double>(kQuantum);
    const long double f = std::floor(x);
    c.q[i] = static_cast<std::uint64_t>(f);
    rem[i] = x - f;
    given += c.q[i];
  }
  std::vector<std::size_t> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rem[a] > rem[b]; });
  for (std::size_t j = 0; given < kQuantum && j < k; ++j) {
    if (w[order[j]] > 0) {
      ++c.q[order[j]];
      ++given;
    }
  }
  // A positive weight never rounds to a zero share: take it from the largest.
  for (std::size_t i = 0; i < k; ++i) {
    if (w[i] > 0 && c.q[i] == 0) {
      const std::size_t big =
          static_cast<std::size_t>(std::max_element(c.q.begin(), c.q.end()) - c.q.begin());
      --c.q[big];
      c.q[i] = 1;
    }
  }
  c.total = kQuantum;
  return c;
}

// The smallest block for which every positive share gets at least one sample
// per block: ceil(total / min positive q).
Index MinBlock(const Change& c) {
  std::uint64_t lo = std::numeric_limits<std::uint64_t>::max();
  for (std::uint64_t q : c.q) {
    if (q > 0) lo = std::min(lo, q);
  }
  return static_cast<Index>((c.total + lo - 1) / lo);
}

// Hamilton rounding of tau * q_k / total, added to base into out.
void Hamilton(Index tau, const MixSegment& seg, Index* out) {
  const std::size_t k = seg.q.size();
  Index floors = 0;
  thread_local std::vector<std::uint64_t> rem;
  thread_local std::vector<std::uint32_t> order;
  rem.resize(k);
  const std::uint64_t t = static_cast<std::uint64_t>(tau);
  std::uint64_t max_q = 0;
  for (std::uint64_t q : seg.q) max_q = std::max(max_q, q);
  if (max_q == 0 || t <= std::numeric_limits<std::uint64_t>::max() / max_q) {
    // tau * q fits in 64 bits: a 64-bit division, several times faster.
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint64_t p = t * seg.q[i];
      const Index f = static_cast<Index>(p / seg.total);
      rem[i] = p % seg.total;
      out[i] = seg.counts[i] + f;
      floors += f;
    }
  } else {
    for (std::size_t i = 0; i < k; ++i) {
      const u128 p = static_cast<u128>(t) * seg.q[i];
      const Index f = static_cast<Index>(p / seg.total);
      rem[i] = static_cast<std::uint64_t>(p % seg.total);
      out[i] = seg.counts[i] + f;
      floors += f;
    }
  }
  const Index r = tau - floors;  // < number of sources with a positive remainder
  if (r <= 0) return;
  order.resize(k);
  std::iota(order.begin(), order.end(), 0u);
  auto larger = [&](std::uint32_t a, std::uint32_t b) {
    return rem[a] != rem[b] ? rem[a] > rem[b] : a < b;
  };
  std::nth_element(order.begin(), order.begin() + (r - 1), order.end(), larger);
  for (Index j = 0; j < r; ++j) ++out[order[j]];
}

}  // namespace

MixBy ParseMixBy(std::string_view name) {
  if (name == "samples") return MixBy::kSamples;
  if (name == "tokens") return MixBy::kTokens;
  ThrowInvalid("by", "unknown value '" + std::string(name) + "' (expected samples or tokens)");
}

std::string_view MixByName(MixBy by) { return by == MixBy::kSamples ? "samples" : "tokens"; }

Interpolation ParseInterpolation(std::string_view name) {
  if (name == "step") return Interpolation::kStep;
  if (name == "linear") return Interpolation::kLinear;
  ThrowInvalid("interpolation",
               "unknown value '" + std::string(name) + "' (expected step or linear)");
}

std::string_view InterpolationName(Interpolation interpolation) {
  return interpolation == Interpolation::kStep ? "step" : "linear";
}

Index TotalTokens(std::span<const std::int64_t> lengths) {
  Index total = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      ThrowInvalid("lengths", "length " + Str(static_cast<Index>(i)) + " is " + Str(lengths[i]) +
                                  "; lengths must be >= 0");
    }
    total = CheckedAdd("lengths", total, lengths[i]);
  }
  return total;
}

struct Mixture::BlockInfo {
  Index index = -1;
  Index length = 0;
  std::vector<Index> cum;     // per-source counts before the block
  std::vector<Index> counts;  // per-source counts in the block
  std::vector<Index> prefix;  // slot prefix sums, K + 1
  std::vector<Index> next;    // per-source counts after the block
};

Mixture::Mixture(std::vector<Index> sizes, std::vector<double> weights, MixtureOptions options)
    : sizes_(std::move(sizes)), weights_(std::move(weights)), options_(std::move(options)) {
  const Index k = num_sources();
  if (k == 0) ThrowInvalid("sizes", "no sources; give at least one size");
  for (Index i = 0; i < k; ++i) {
    if (sizes_[i] < 0) {
      ThrowInvalid("sizes", "size " + Str(i) + " is " + Str(sizes_[i]) + "; sizes must be >= 0");
    }
  }
  CheckWeights("weights", weights_, k);
  const bool tokens = options_.by == MixBy::kTokens;
  if (tokens) {
    if (static_cast<Index>(options_.tokens.size()) != k) {
      ThrowInvalid("lengths", "by tokens needs the lengths of every source: expected " + Str(k) +
                                  " sources, got " +
                                  Str(static_cast<Index>(options_.tokens.size())));
    }
    for (Index i = 0; i < k; ++i) {
      if (options_.tokens[i] < 0) {
        ThrowInvalid("lengths", "source " + Str(i) + " has " + Str(options_.tokens[i]) + " tokens");
      }
    }
  }
  if (!options_.repeat.empty() && static_cast<Index>(options_.repeat.size()) != k) {
    ThrowInvalid("repeat", "expected one flag per source (" + Str(k) + "), got " +
                               Str(static_cast<Index>(options_.repeat.size())));
  }
  if (options_.start.empty()) options_.start.assign(k, 0);
  if (static_cast<Index>(options_.start.size()) != k) {
    ThrowInvalid("start", "expected one count per source (" + Str(k) + "), got " +
                              Str(static_cast<Index>(options_.start.size())));
  }
  for (Index i = 0; i < k; ++i) {
    const Index s = options_.start[i];
    if (s < 0 || s > kMaxStart) {
      ThrowInvalid("start", "count " + Str(i) + " is " + Str(s) + "; counts must be in [0, 2^62]");
    }
    if (!options_.repeat.empty() && !options_.repeat[i] && s > sizes_[i]) {
      ThrowInvalid("start", "source " + Str(i) + " does not repeat and has " + Str(sizes_[i]) +
                                " items, but " + Str(s) + " were consumed");
    }
  }
  if (options_.origin < 0 || options_.origin > kMaxStart) {
    ThrowInvalid("origin", "must be in [0, 2^62], got " + Str(options_.origin));
  }
  if (options_.skip < 0) ThrowInvalid("skip", "must be >= 0, got " + Str(options_.skip));

  // Control points: (origin, weights), then the schedule's points at or after
  // the origin (one at the origin replaces the weights).
  std::vector<SchedulePoint> points;
  points.push_back({options_.origin, weights_});
  Index previous = -1;
  for (std::size_t j = 0; j < options_.schedule.size(); ++j) {
    const SchedulePoint& p = options_.schedule[j];
    const std::string where = "point " + Str(static_cast<Index>(j));
    if (p.position < 0 || p.position <= previous) {
      ThrowInvalid("schedule", where + " has position " + Str(p.position) +
                                   "; positions must be >= 0 and strictly ascending");
    }
    previous = p.position;
    CheckWeights("schedule", p.weights, k);
    if (p.position < options_.origin) continue;
    if (p.position == options_.origin) {
      points.front().weights = p.weights;
    } else {
      points.push_back(p);
    }
  }
  // Per-sample weights, checked against empty sources and token counts.
  auto per_sample = [&](const std::vector<double>& w, std::string_view param) {
    std::vector<double> out(k);
    for (Index i = 0; i < k; ++i) {
      if (w[i] == 0) continue;
      if (sizes_[i] == 0) {
        ThrowInvalid("sizes", "source " + Str(i) + " is empty but has weight " + Num(w[i]) +
                                  " (in " + std::string(param) + ")");
      }
      if (tokens) {
        if (options_.tokens[i] == 0) {
          ThrowInvalid("lengths", "source " + Str(i) + " has no tokens but weight " + Num(w[i]));
        }
        out[i] = w[i] * (static_cast<double>(sizes_[i]) / static_cast<double>(options_.tokens[i]));
      } else {
        out[i] = w[i];
      }
    }
    return out;
  };
  const bool linear = options_.interpolation == Interpolation::kLinear;
  std::vector<Change> changes;
  for (std::size_t j = 0; j < points.size(); ++j) {
    Change c = Quantize(per_sample(points[j].weights, j == 0 ? "weights" : "schedule"),
                        !linear && !tokens);
    c.position = points[j].position;
    c.param = j == 0 ? "weights" : "schedule";
    if (linear && j + 1 < points.size()) {
      const Change next = Quantize(per_sample(points[j + 1].weights, "schedule"), false);
      const Index length = points[j + 1].position - c.position;
      const Index steps = std::min<Index>(kLinearSteps, length);
      for (Index m = 0; m < steps; ++m) {
        Change s;
        // A step between two points: the weights' fault only if the first
        // point alone already needs too large a block.
        s.param = j == 0 && MinBlock(c) > kMaxBlock ? "weights" : "schedule";
        s.position = c.position + static_cast<Index>(static_cast<u128>(length) * m / steps);
        s.total = 2 * static_cast<std::uint64_t>(steps) * kQuantum;
        s.q.resize(k);
        for (Index i = 0; i < k; ++i) {
          s.q[i] = c.q[i] * static_cast<std::uint64_t>(2 * steps - 2 * m - 1) +
                   next.q[i] * static_cast<std::uint64_t>(2 * m + 1);
        }
        changes.push_back(std::move(s));
      }
    } else {
      changes.push_back(std::move(c));
    }
  }

  Index needed = 1;
  for (const Change& c : changes) {
    const Index min_block = MinBlock(c);
    needed = std::max(needed, min_block);
    if (min_block > kMaxBlock) {
      // Every lookup inside a block scans up to half of it: a share of 1 in
      // 2^40 (weights [1, 2^40]) made blocks of 2^40 samples and every
      // sample past the first billion of a block took minutes.
      std::uint64_t smallest = c.total;
      for (std::uint64_t q : c.q) {
        if (q > 0) smallest = std::min(smallest, q);
      }
      ThrowInvalid(c.param, "the smallest positive share (" + std::to_string(smallest) + " of " +
                                std::to_string(c.total) + ") needs blocks of " + Str(min_block) +
                                " samples, more than 2^28 (a source must get a sample at least "
                                "once every 2^28 samples); raise its weight or set it to 0");
    }
  }
  if (options_.block.has_value()) {
    block_ = *options_.block;
    if (block_ < 1 || block_ > kMaxBlock) {
      ThrowInvalid("block", "must be in [1, 2^28], got " + Str(block_) +
                                " (every lookup inside a block scans up to half of it)");
    }
    if (block_ < needed) {
      ThrowInvalid("block", Str(block_) +
                                " is too small for the shares: block * share must be at least 1 "
                                "for every source with a positive weight (minimum " +
                                Str(needed) + ")");
    }
  } else {
    block_ = std::max(needed, kDefaultBlock);
  }

  // Segments at block boundaries (local positions); a later change that
  // rounds to the same boundary wins.
  for (Change& c : changes) {
    const Index local = c.position - options_.origin;
    const Index begin =
        local <= 0 ? 0 : std::min(CeilDiv(local, block_), kMaxSamples / block_) * block_;
    if (!segments_.empty() && segments_.back().begin == begin) segments_.pop_back();
    MixSegment seg;
    seg.begin = begin;
    seg.q = std::move(c.q);
    seg.total = c.total;
    segments_.push_back(std::move(seg));
  }
  segments_.front().counts = options_.start;
  for (std::size_t j = 1; j < segments_.size(); ++j) {
    segments_[j].counts.resize(k);
    Hamilton(segments_[j].begin - segments_[j - 1].begin, segments_[j - 1],
             segments_[j].counts.data());
  }

  order_key_ =
      Mix64(Mix64(options_.seed ^ 0x4d4958ULL) ^ static_cast<std::uint64_t>(options_.origin));
  source_keys_.resize(k);
  for (Index i = 0; i < k; ++i) {
    source_keys_[i] =
        Mix64(options_.seed ^ Mix64(0x534f55524345ULL + static_cast<std::uint64_t>(i)));
  }

  const Index plan_size = FindStop();
  if (options_.skip > plan_size) {
    ThrowInvalid("skip", Str(options_.skip) + " is past the end of the plan (" + Str(plan_size) +
                             " samples)");
  }
  size_ = plan_size - options_.skip;
}

void Mixture::Cumulative(Index b, Index* out) const {
  const Index position = b * block_;
  auto it = std::upper_bound(segments_.begin(), segments_.end(), position,
                             [](Index p, const MixSegment& s) { return p < s.begin; });
  const MixSegment& seg = *(it - 1);
  Hamilton(position - seg.begin, seg, out);
}

Index Mixture::FindStop() const {
  const Index k = num_sources();
  const Index blocks = kMaxSamples / block_;
  bool any = false;
  for (Index i = 0; i < k && !options_.repeat.empty(); ++i) any = any || !options_.repeat[i];
  if (!any) return blocks * block_;
  std::vector<Index> cum(k);
  // Block b takes an item past the end of a non-repeating source.
  auto overflows = [&](Index b) {
    Cumulative(b + 1, cum.data());
    for (Index i = 0; i < k; ++i) {
      if (!options_.repeat[i] && cum[i] > std::max(sizes_[i], options_.start[i])) return true;
    }
    return false;
  };
  Index lo = 0, hi = blocks;  // the first overflowing block is in [lo, hi]
  while (lo < hi) {
    const Index mid = lo + (hi - lo) / 2;
    if (overflows(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  if (lo == blocks) return blocks * block_;
  const_cast<Mixture*>(this)->bounded_ = true;  // construction only
  std::vector<Index> next(k);
  Cumulative(lo, cum.data());
  Cumulative(lo + 1, next.data());
  auto* self = const_cast<Mixture*>(this);  // construction only
  self->cut_block_ = lo;
  self->cut_counts_.resize(k);
  Index length = 0;
  bool remaining = false;  // an overflowing source still has items in block lo
  for (Index i = 0; i < k; ++i) {
    Index c = next[i] - cum[i];
    if (!options_.repeat[i] && next[i] > std::max(sizes_[i], options_.start[i])) {
      const Index left = std::max<Index>(0, sizes_[i] - cum[i]);
      remaining = remaining || left > 0;
      c = std::min(c, left);
    }
    self->cut_counts_[i] = c;
    length += c;
  }
  if (!remaining) {  // the last items were in block lo - 1: end there
    self->cut_block_ = -1;
    self->cut_counts_.clear();
    return lo * block_;
  }
  return lo * block_ + length;
}

void Mixture::BlockCounts(Index b, Index* out) const {
  const Index k = num_sources();
  if (b == cut_block_) {
    std::copy(cut_counts_.begin(), cut_counts_.end(), out);
    return;
  }
  std::vector<Index> lo(k);
  Cumulative(b, lo.data());
  Cumulative(b + 1, out);
  for (Index i = 0; i < k; ++i) out[i] -= lo[i];
}

Index Mixture::SourceOfSlot(const BlockInfo& info, Index slot) {
  return std::upper_bound(info.prefix.begin() + 1, info.prefix.end(), slot) - info.prefix.begin() -
         1;
}

void Mixture::ComputeBlock(Index b, BlockInfo* info, const std::vector<Index>* known) const {
  const Index k = num_sources();
  info->index = b;
  info->counts.resize(k);
  info->prefix.resize(k + 1);
  if (known != nullptr) {
    info->cum = *known;
  } else {
    info->cum.resize(k);
    Cumulative(b, info->cum.data());
  }
  info->next.resize(k);
  if (b == cut_block_) {
    std::copy(cut_counts_.begin(), cut_counts_.end(), info->counts.begin());
    for (Index i = 0; i < k; ++i) info->next[i] = info->cum[i] + info->counts[i];
  } else {
    Cumulative(b + 1, info->next.data());
    for (Index i = 0; i < k; ++i) info->counts[i] = info->next[i] - info->cum[i];
  }
  info->prefix[0] = 0;
  for (Index i = 0; i < k; ++i) info->prefix[i + 1] = info->prefix[i] + info->counts[i];
  info->length = info->prefix[k];
}

Index Mixture::SourceItem(Index source, Index c) const {
  const Index n = sizes_[source];
  return Permutation(n, source_keys_[source], static_cast<std::uint64_t>(c / n)).Forward(c % n);
}

// Per-source counts of the block's positions [0, first), by listing the
// shorter side of the split (at most half the block).
void Mixture::HeadCounts(const BlockInfo& info, const Permutation& order, Index first,
                         Index* seen) const {
  const Index k = num_sources();
  const bool head = first <= info.length - first;
  const Index lo = head ? 0 : first, hi = head ? first : info.length;
  std::fill(seen, seen + k, 0);
  Index buffer[512];
  for (Index q = lo; q < hi; q += 512) {
    const Index count = std::min<Index>(hi - q, 512);
    order.Fill(q, 1, count, buffer);
    for (Index j = 0; j < count; ++j) ++seen[SourceOfSlot(info, buffer[j])];
  }
  if (!head) {
    for (Index i = 0; i < k; ++i) seen[i] = info.counts[i] - seen[i];
  }
}

// The rank of block position `first` among the positions of `source` (whose
// slot is `source`'s) in the block: the number of them before `first`. The
// cheapest of three counts: Inverse of each of the source's slots (count
// scalar evaluations), or a vectorised scan of the positions before `first`
// or of those after it.
Index Mixture::RankInBlock(const BlockInfo& info, const Permutation& order, Index first,
                           Index source) {
  const Index lo = info.prefix[source], hi = info.prefix[source + 1];
  const Index count = hi - lo;
  const Index before = first, after = info.length - first - 1;
  // One scalar Inverse costs about as much as this many vectorised Forwards.
  constexpr Index kScalarCost = 8;
  if (count <= 1) return 0;
  if (count * kScalarCost <= std::min(before, after)) {
    Index rank = 0;
    for (Index s = lo; s < hi; ++s) rank += order.Inverse(s) < first ? 1 : 0;
    return rank;
  }
  const bool head = before <= after;
  const Index a = head ? 0 : first + 1, b = head ? first : info.length;
  Index seen = 0;
  Index buffer[512];
  for (Index q = a; q < b; q += 512) {
    const Index n = std::min<Index>(b - q, 512);
    order.Fill(q, 1, n, buffer);
    for (Index j = 0; j < n; ++j) {
      seen += static_cast<Index>(static_cast<std::uint64_t>(buffer[j] - lo) <
                                 static_cast<std::uint64_t>(count));
    }
  }
  return head ? seen : count - 1 - seen;
}

MixSample Mixture::Lookup(Index p, BlockInfo* info) const {
  const Index b = p / block_;
  if (info->index != b) ComputeBlock(b, info);
  const Permutation order(info->length, order_key_, static_cast<std::uint64_t>(b));
  const Index first = p - b * block_;
  const Index source = SourceOfSlot(*info, order.Forward(first));
  const Index rank = RankInBlock(*info, order, first, source);
  return {source, SourceItem(source, info->cum[source] + rank)};
}

MixSample Mixture::At(Index position) const {
  if (position < 0 || position >= size_) {
    ThrowOutOfRange("position", Str(position) + " is outside [0, " + Str(size_) + ")");
  }
  BlockInfo info;
  return Lookup(position + options_.skip, &info);
}

void Mixture::Take(std::span<const Index> positions, Index* sources, Index* items) const {
  for (std::size_t j = 0; j < positions.size(); ++j) {
    if (positions[j] < 0 || positions[j] >= size_) {
      ThrowOutOfRange("position", Str(positions[j]) + " (entry " + Str(static_cast<Index>(j)) +
                                      ") is outside [0, " + Str(size_) + ")");
    }
  }
  // A run of entries in one block pays the block's counts once. A dense run
  // (at least 1/32 of the block's positions, blocks up to 2^20) lists the
  // whole block once instead: every position's source and rank in O(B).
  constexpr Index kDenseBlock = Index{1} << 20;
  constexpr Index kDenseRatio = 32;
  const Index k = num_sources();
  BlockInfo info;
  std::vector<std::int32_t> table, source_at;
  std::vector<Index> rank_at, seen;
  const std::size_t n = positions.size();
  std::size_t j = 0;
  while (j < n) {
    const Index b = (positions[j] + options_.skip) / block_;
    std::size_t e = j + 1;
    while (e < n && (positions[e] + options_.skip) / block_ == b) ++e;
    if (info.index != b) ComputeBlock(b, &info);
    const Index run = static_cast<Index>(e - j);
    if (info.length > kDenseBlock || run * kDenseRatio < info.length) {
      for (; j < e; ++j) {
        const MixSample s = Lookup(positions[j] + options_.skip, &info);
        sources[j] = s.source;
        items[j] = s.item;
      }
      continue;
    }
    const Permutation order(info.length, order_key_, static_cast<std::uint64_t>(b));
    table.resize(info.length);
    for (Index i = 0; i < k; ++i) {
      std::fill(table.begin() + info.prefix[i], table.begin() + info.prefix[i + 1],
                static_cast<std::int32_t>(i));
    }
    rank_at.resize(info.length);
    order.Fill(0, 1, info.length, rank_at.data());  // slots, replaced by ranks
    source_at.resize(info.length);
    seen.assign(k, 0);
    for (Index q = 0; q < info.length; ++q) {
      const std::int32_t source = table[rank_at[q]];
      source_at[q] = source;
      rank_at[q] = seen[source]++;
    }
    for (; j < e; ++j) {
      const Index q = positions[j] + options_.skip - b * block_;
      const Index source = source_at[q];
      sources[j] = source;
      items[j] = SourceItem(source, info.cum[source] + rank_at[q]);
    }
  }
}

void Mixture::Fill(Index begin, Index end, Index* sources, Index* items) const {
  if (begin < 0 || begin > size_) {
    ThrowOutOfRange("start", Str(begin) + " is outside [0, " + Str(size_) + "]");
  }
  if (end < begin || end > size_) {
    ThrowOutOfRange("stop", Str(end) + " is outside [" + Str(begin) + ", " + Str(size_) + "]");
  }
  const Index k = num_sources();
  BlockInfo info;
  std::vector<Index> next(k);  // walk index of each source's next sample
  std::vector<Index> known;    // counts before the next block, when known
  // Blocks up to kTableBlock: a slot -> source table and each source's items
  // of the block, both filled vectorised; larger blocks go sample by sample.
  constexpr Index kTableBlock = Index{1} << 20;
  std::vector<std::int32_t> table;
  std::vector<Index> walk_items;
  std::vector<std::optional<Permutation>> walks(k);
  std::vector<Index> walk_epoch(k, -1);
  Index out = 0;
  Index p = begin + options_.skip;
  const Index stop = end + options_.skip;
  while (p < stop) {
    const Index b = p / block_;
    ComputeBlock(b, &info, known.empty() ? nullptr : &known);
    const Index first = p - b * block_;
    const Index count = std::min(stop - p, info.length - first);
    const Permutation order(info.length, order_key_, static_cast<std::uint64_t>(b));
    HeadCounts(info, order, first, next.data());
    order.Fill(first, 1, count, items + out);  // slots, replaced below
    if (info.length <= kTableBlock) {
      table.resize(info.length);
      walk_items.resize(info.length);
      for (Index i = 0; i < k; ++i) {
        std::fill(table.begin() + info.prefix[i], table.begin() + info.prefix[i + 1],
                  static_cast<std::int32_t>(i));
        // Items of source i this block still gives: walk positions
        // cum + next .. cum + counts, at slot offsets prefix + next ...
        const Index n = sizes_[i];
        Index c = info.cum[i] + next[i];
        const Index c_end = info.cum[i] + info.counts[i];
        Index* dst = walk_items.data() + info.prefix[i] + next[i];
        while (c < c_end) {
          const Index epoch = c / n;
          const Index in_epoch = std::min(c_end - c, (epoch + 1) * n - c);
          Permutation(n, source_keys_[i], static_cast<std::uint64_t>(epoch))
              .Fill(c - epoch * n, 1, in_epoch, dst);
          dst += in_epoch;
          c += in_epoch;
        }
        next[i] += info.prefix[i];  // now the slot offset of the next item
      }
      for (Index j = 0; j < count; ++j) {
        const std::int32_t source = table[items[out + j]];
        sources[out + j] = source;
        items[out + j] = walk_items[next[source]++];
      }
    } else {
      for (Index i = 0; i < k; ++i) next[i] += info.cum[i];
      for (Index j = 0; j < count; ++j) {
        const Index source = SourceOfSlot(info, items[out + j]);
        const Index c = next[source]++;
        const Index n = sizes_[source];
        const Index epoch = c / n;
        if (walk_epoch[source] != epoch) {
          walks[source].emplace(n, source_keys_[source], static_cast<std::uint64_t>(epoch));
          walk_epoch[source] = epoch;
        }
        sources[out + j] = source;
        items[out + j] = walks[source]->Forward(c - epoch * n);
      }
    }
    known = info.next;
    out += count;
    p += count;
  }
}

std::vector<Index> Mixture::Consumed(Index position) const {
  if (position < 0 || position > size_) {
    ThrowOutOfRange("position", Str(position) + " is outside [0, " + Str(size_) + "]");
  }
  const Index k = num_sources();
  const Index p = position + options_.skip;
  const Index b = p / block_;
  const Index first = p - b * block_;
  std::vector<Index> out(k);
  if (first == 0) {
    Cumulative(b, out.data());
    return out;
  }
  BlockInfo info;
  ComputeBlock(b, &info);
  const Permutation order(info.length, order_key_, static_cast<std::uint64_t>(b));
  HeadCounts(info, order, first, out.data());
  for (Index i = 0; i < k; ++i) out[i] += info.cum[i];
  return out;
}

std::vector<double> Mixture::Target(Index position) const {
  if (position < 0 || position > size_) {
    ThrowOutOfRange("position", Str(position) + " is outside [0, " + Str(size_) + "]");
  }
  const Index p = position + options_.skip;
  auto it = std::upper_bound(segments_.begin(), segments_.end(), p,
                             [](Index x, const MixSegment& s) { return x < s.begin; });
  const MixSegment& seg = *(it - 1);
  std::vector<double> out(seg.q.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<double>(seg.counts[i]) +
             static_cast<double>(p - seg.begin) *
                 (static_cast<long double>(seg.q[i]) / static_cast<long double>(seg.total));
  }
  return out;
}

MixtureState Mixture::State(Index position) const {
  MixtureState state;
  state.consumed = Consumed(position);
  state.position = options_.origin + options_.skip + position;
  state.sizes = sizes_;
  state.weights = weights_;
  state.options = options_;
  state.options.skip = options_.skip + position;
  return state;
}

Mixture Mixture::FromState(const MixtureState& state, std::optional<std::vector<double>> weights,
                           std::optional<std::vector<SchedulePoint>> schedule) {
  const std::size_t k = state.sizes.size();
  if (state.consumed.size() != k || state.weights.size() != k) {
    ThrowInvalid("state", "consumed, sizes and weights must have one entry per source");
  }
  if (state.position != state.options.origin + state.options.skip) {
    ThrowInvalid("state", "position " + Str(state.position) + " is not origin + skip (" +
                              Str(state.options.origin) + " + " + Str(state.options.skip) + ")");
  }
  if (!weights.has_value() && !schedule.has_value()) {
    Mixture same(state.sizes, state.weights, state.options);
    if (same.Consumed(0) != state.consumed) {
      ThrowInvalid("state",
                   "the consumed counts do not match the plan at position " + Str(state.position));
    }
    return same;
  }
  MixtureOptions options = state.options;
  options.origin = state.position;
  options.start = state.consumed;
  options.skip = 0;
  if (schedule.has_value()) options.schedule = std::move(*schedule);
  // The block was chosen for the old shares; the new ones pick their own
  // unless the user fixed it.
  return Mixture(state.sizes, weights.has_value() ? std::move(*weights) : state.weights,
                 std::move(options));
}

MixReport ReportMixture(const Mixture& mixture, Index begin, Index end, Index windows) {
  if (begin < 0 || begin > mixture.size()) {
    ThrowOutOfRange("start", Str(begin) + " is outside [0, " + Str(mixture.size()) + "]");
  }
  if (end < begin || end > mixture.size()) {
    ThrowOutOfRange("stop",
                    Str(end) + " is outside [" + Str(begin) + ", " + Str(mixture.size()) + "]");
  }
  if (windows < 0 || windows > 10000) {
    ThrowInvalid("windows", "must be in [0, 10000], got " + Str(windows));
  }
  const std::size_t k = static_cast<std::size_t>(mixture.num_sources());
  MixReport r;
  r.begin = begin;
  r.end = end;
  const std::vector<Index> c0 = mixture.Consumed(begin);
  const std::vector<double> t0 = mixture.Target(begin);
  r.consumed = mixture.Consumed(end);
  const std::vector<double> t1 = mixture.Target(end);
  r.counts.resize(k);
  r.realised.resize(k);
  r.target.resize(k);
  r.epochs.resize(k);
  const double span = static_cast<double>(end - begin);
  for (std::size_t i = 0; i < k; ++i) {
    r.counts[i] = r.consumed[i] - c0[i];
    r.realised[i] = span > 0 ? static_cast<double>(r.counts[i]) / span : 0;
    r.target[i] = span > 0 ? (t1[i] - t0[i]) / span : 0;
    const Index n = mixture.sizes()[i];
    r.epochs[i] = n > 0 ? static_cast<double>(r.consumed[i]) / static_cast<double>(n) : 0;
    r.max_error = std::max(r.max_error, std::fabs(static_cast<double>(r.consumed[i]) - t1[i]));
  }
  std::vector<Index> prev_c = c0;
  std::vector<double> prev_t = t0;
  for (Index w = 0; w < windows && end > begin; ++w) {
    MixWindow win;
    win.begin = begin + static_cast<Index>(static_cast<u128>(end - begin) * w / windows);
    win.end = begin + static_cast<Index>(static_cast<u128>(end - begin) * (w + 1) / windows);
    const std::vector<Index> c = mixture.Consumed(win.end);
    const std::vector<double> t = mixture.Target(win.end);
    win.counts.resize(k);
    win.target.resize(k);
    for (std::size_t i = 0; i < k; ++i) {
      win.counts[i] = c[i] - prev_c[i];
      win.target[i] = t[i] - prev_t[i];
    }
    prev_c = c;
    prev_t = t;
    r.windows.push_back(std::move(win));
  }
  return r;
}

}  // namespace shardkit
