#include "shardkit/sharding/mixture.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "shardkit/base/enum_names.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

namespace {

// The first b in [lo, hi) with pred(b), or hi where there is none. REQUIRES:
// pred is monotone over the range (false, then true); it is called
// O(log(hi - lo)) times.
template <typename Pred>
Index FirstTrue(Index lo, Index hi, Pred pred) {
  while (lo < hi) {
    const Index mid = lo + (hi - lo) / 2;
    if (pred(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

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

// round(tau * p / total), halves up, for one of a segment's cumulative
// shares p (<= total): floor((2 tau p + total) / (2 total)). A shift when the
// total is a power of two (quantized shares), 64-bit arithmetic when it
// fits, else 128-bit.
Index RoundShare(std::uint64_t tau, std::uint64_t p, const MixSegment& seg) {
  const std::uint64_t total = seg.total;
  if ((total & (total - 1)) == 0) {
    return static_cast<Index>((static_cast<u128>(tau) * p + (total >> 1)) >>
                              std::countr_zero(total));
  }
  if (p == 0) return 0;
  if (tau <= (std::numeric_limits<std::uint64_t>::max() / 2 - total) / p) {
    return static_cast<Index>((2 * tau * p + total) / (2 * total));
  }
  return static_cast<Index>((2 * static_cast<u128>(tau) * p + total) /
                            (2 * static_cast<u128>(total)));
}

// Cumulative rounding: the count of sources [0, i) at tau is
// round(tau * P_i / Q), so source i has the difference of two roundings,
// plus the segment's start counts; into out (K).
void SegmentCounts(Index tau, const MixSegment& seg, Index* out) {
  const std::uint64_t t = static_cast<std::uint64_t>(tau);
  Index before = 0;
  for (std::size_t i = 0; i + 1 < seg.prefix.size(); ++i) {
    const Index upto = RoundShare(t, seg.prefix[i + 1], seg);
    out[i] = seg.counts[i] + (upto - before);
    before = upto;
  }
}

// Source i's count at tau (one entry of SegmentCounts), O(1).
Index SegmentCount(Index tau, const MixSegment& seg, std::size_t i) {
  const std::uint64_t t = static_cast<std::uint64_t>(tau);
  return seg.counts[i] + RoundShare(t, seg.prefix[i + 1], seg) - RoundShare(t, seg.prefix[i], seg);
}

// sum over x in [0, n) of floor((a x + b) / m), m >= 1, every argument
// below 2^30 (blocks are at most 2^28 slots), so every product and the sum
// fit in 64 bits: the Euclid-like reduction (swap the roles of a and m each
// round), O(log m).
std::uint64_t FloorSum(std::uint64_t n, std::uint64_t m, std::uint64_t a, std::uint64_t b) {
  std::uint64_t sum = 0;
  while (n > 0) {
    if (a >= m) {
      sum += (a / m) * (n * (n - 1) / 2);
      a %= m;
    }
    if (b >= m) {
      sum += (b / m) * n;
      b %= m;
    }
    const std::uint64_t y = a * n + b;
    if (y < m) break;
    n = y / m;
    b = y % m;
    std::swap(m, a);
  }
  return sum;
}

// The largest partial quotient of g / n's continued fraction (0 < g < n).
std::int64_t LargestQuotient(std::int64_t g, std::int64_t n) {
  std::int64_t largest = 0;
  while (g != 0) {
    largest = std::max(largest, n / g);
    std::tie(n, g) = std::pair(g, n % g);
  }
  return largest;
}

// The multiplier of a block of n slots: coprime to n, g / n with small
// continued-fraction terms (at most 5 when one is found near n / golden
// ratio, which is the usual case; else the smallest largest term seen), so
// the multiples of g are evenly spread mod n at every scale: the positions of
// any run of consecutive slots leave gaps of at most three lengths, none much
// longer than the mean. Searched once per block length (at construction).
std::int64_t SpreadMultiplier(std::int64_t n) {
  if (n <= 2) return n - 1 > 0 ? 1 : 0;
  constexpr double kGolden = 0.6180339887498949;
  constexpr std::int64_t kGood = 5, kTries = std::int64_t{1} << 14;
  const auto near = std::clamp<std::int64_t>(
      static_cast<std::int64_t>(std::llround(static_cast<double>(n) * kGolden)), 1, n - 1);
  std::int64_t best = 1, best_quotient = n;
  for (std::int64_t t = 0, step = 0; t<kTries; ++t, step = step> 0 ? -step : 1 - step) {
    const std::int64_t g = near + step;
    if (g < 1 || g >= n || std::gcd(g, n) != 1) continue;
    const std::int64_t q = LargestQuotient(g, n);
    if (q < best_quotient) {
      best = g;
      best_quotient = q;
      if (q <= kGood) break;
    }
  }
  return best;
}

std::int64_t InverseMod(std::int64_t g, std::int64_t n) {
  std::int64_t r0 = n, r1 = g, s0 = 0, s1 = 1;
  while (r1 != 0) {
    const std::int64_t q = r0 / r1;
    std::tie(r0, r1) = std::pair(r1, r0 - q * r1);
    std::tie(s0, s1) = std::pair(s1, s0 - q * s1);
  }
  return s0 < 0 ? s0 + n : s0;
}

}  // namespace

// A block's order: slot s sits at position (g * s + d) mod length, so a
// source's consecutive slots are g apart (mod length) and its positions are
// spread like the multiples of an irrational rotation; position j holds slot
// ginv * (j - d) mod length.
struct Mixture::Rotation {
  std::uint64_t g = 0, ginv = 0, d = 0, length = 1;

  Rotation() = default;
  // Block `block` of n slots whose spread multiplier is (g, its inverse): the
  // key picks the offset d and the direction (g or n - g).
  Rotation(std::uint64_t key, Index block, Index n, std::int64_t g_n, std::int64_t ginv_n)
      : length(static_cast<std::uint64_t>(n)) {
    if (n <= 1) return;
    const std::uint64_t h = Mix64(key ^ Mix64(static_cast<std::uint64_t>(block)));
    d = h % length;
    g = static_cast<std::uint64_t>(g_n);
    ginv = static_cast<std::uint64_t>(ginv_n);
    if ((Mix64(h) & 1) != 0) {
      g = length - g;
      ginv = length - ginv;
    }
  }
  // The slot at block position j (0 <= j < length).
  [[nodiscard]] Index Slot(Index j) const {
    const std::uint64_t shifted = (static_cast<std::uint64_t>(j) + length - d) % length;
    return static_cast<Index>(static_cast<u128>(shifted) * ginv % length);
  }
  // How many of slots [lo, hi) sit at positions below j: the x in [0, hi - lo)
  // with y mod L < j, y = g x + (g lo + d) mod L, and y mod L < j exactly when
  // floor(y / L) - floor((y - j) / L) = 1: two floor sums.
  [[nodiscard]] Index Before(Index j, Index lo, Index hi) const {
    if (j <= 0 || hi <= lo) return 0;
    if (static_cast<std::uint64_t>(j) >= length) return hi - lo;
    const auto n = static_cast<std::uint64_t>(hi - lo);
    const auto c = static_cast<std::uint64_t>(
        (static_cast<u128>(g) * static_cast<std::uint64_t>(lo) + d) % length);
    return static_cast<Index>(FloorSum(n, length, g, c) -
                              FloorSum(n, length, g, c + length - static_cast<std::uint64_t>(j)) +
                              n);
  }
};

namespace {
// The parameter of a MixBy is the caller's (mix_by, schedule_unit): Parse
// takes a copy of the table with that name.
constexpr EnumNames<MixBy, 2> kMixBy{"mix_by", "value", {"samples", "tokens"}};
constexpr EnumNames<Interpolation, 2> kInterpolations{"interpolation", "value", {"step", "linear"}};
}  // namespace

MixBy ParseMixBy(std::string_view name, std::string_view param) {
  EnumNames<MixBy, 2> table = kMixBy;
  table.param = param;
  return table.Parse(name);
}

std::string_view MixByName(MixBy by) { return kMixBy.Name(by); }

SHARDKIT_ENUM_PARSE_AND_NAME(Interpolation, kInterpolations, ParseInterpolation, InterpolationName)

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
  Rotation rotation;
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
  const bool token_positions = options_.schedule_unit == MixBy::kTokens;
  if (tokens || token_positions) {
    if (static_cast<Index>(options_.tokens.size()) != k) {
      ThrowInvalid("lengths", std::string(tokens ? "by tokens" : "a schedule in tokens") +
                                  " needs the lengths of every source: expected " + Str(k) +
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

  // Schedule positions in tokens are nominal: each source's count times its
  // mean length (tokens / items), summed; the origin's is that of `start`.
  if (static_cast<Index>(options_.tokens.size()) == k) {
    mean_.assign(k, 0);
    for (Index i = 0; i < k; ++i) {
      if (sizes_[i] > 0) {
        mean_[i] =
            static_cast<long double>(options_.tokens[i]) / static_cast<long double>(sizes_[i]);
      }
    }
  }
  const long double origin_tokens = token_positions ? Nominal(options_.start.data()) : 0;
  // Where the run stands in the schedule's unit, and whether a point lies
  // before it (ignored) or at it (replaces the weights).
  const long double here =
      token_positions ? origin_tokens : static_cast<long double>(options_.origin);
  // Control points: (here, weights), then the schedule's points at or after
  // it (one at it replaces the weights).
  std::vector<SchedulePoint> points;
  points.push_back({token_positions ? static_cast<Index>(std::min<long double>(
                                          origin_tokens, static_cast<long double>(kMaxStart)))
                                    : options_.origin,
                    weights_});
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
    if (static_cast<long double>(p.position) < here) continue;
    if (static_cast<long double>(p.position) == here) {
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

  // Segments at block boundaries (local positions): a change at sample
  // position P begins at the first boundary at or after P; one at token
  // position T at the first boundary where the nominal tokens drawn reach T
  // (binary search over the boundaries of the segment before it, whose counts
  // only grow). A later change that lands on the same boundary wins.
  const Index last_block = kMaxSamples / block_;
  std::vector<Index> counts(k);
  auto nominal = [&](const MixSegment& seg, Index b) {
    SegmentCounts(b * block_ - seg.begin, seg, counts.data());
    return Nominal(counts.data());
  };
  for (Change& c : changes) {
    Index begin = 0;
    if (!segments_.empty()) {
      if (token_positions) {
        const MixSegment& before = segments_.back();
        const auto target = static_cast<long double>(c.position);
        // The first block reaching it.
        begin = FirstTrue(before.begin / block_, last_block,
                          [&](Index b) { return nominal(before, b) >= target; }) *
                block_;
      } else {
        const Index local = c.position - options_.origin;
        begin = local <= 0 ? 0 : std::min(CeilDiv(local, block_), last_block) * block_;
      }
    }
    if (!segments_.empty() && segments_.back().begin == begin) segments_.pop_back();
    MixSegment seg;
    seg.begin = begin;
    seg.q = std::move(c.q);
    seg.total = c.total;
    seg.prefix.resize(static_cast<std::size_t>(k) + 1);
    for (Index i = 0; i < k; ++i) seg.prefix[i + 1] = seg.prefix[i] + seg.q[i];
    if (segments_.empty()) {
      seg.counts = options_.start;
    } else {
      seg.counts.resize(k);
      SegmentCounts(begin - segments_.back().begin, segments_.back(), seg.counts.data());
    }
    segments_.push_back(std::move(seg));
  }

  order_key_ =
      Mix64(Mix64(options_.seed ^ 0x4d4958ULL) ^ static_cast<std::uint64_t>(options_.origin));
  source_keys_.resize(k);
  for (Index i = 0; i < k; ++i) {
    source_keys_[i] =
        Mix64(options_.seed ^ Mix64(0x534f55524345ULL + static_cast<std::uint64_t>(i)));
  }

  spread_ = SpreadMultiplier(block_);
  spread_inverse_ = block_ > 1 ? InverseMod(spread_, block_) : 0;
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
  SegmentCounts(position - seg.begin, seg, out);
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
  const Index lo = FirstTrue(0, blocks, overflows);  // the first overflowing block
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
  self->cut_prefix_.assign(k + 1, 0);
  for (Index i = 0; i < k; ++i) self->cut_prefix_[i + 1] = cut_prefix_[i] + cut_counts_[i];
  self->cut_spread_ = SpreadMultiplier(length);
  self->cut_spread_inverse_ = length > 1 ? InverseMod(cut_spread_, length) : 0;
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

Mixture::Rotation Mixture::RotationOf(Index b, Index length) const {
  return b == cut_block_ ? Rotation(order_key_, b, length, cut_spread_, cut_spread_inverse_)
                         : Rotation(order_key_, b, length, spread_, spread_inverse_);
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
  info->rotation = RotationOf(b, info->length);
}

Index Mixture::SourceItem(Index source, Index c) const {
  const Index n = sizes_[source];
  return Permutation(n, source_keys_[source], static_cast<std::uint64_t>(c / n)).Forward(c % n);
}

// Per-source counts of the block's positions [0, first): K + 1 floor-sum
// counts of the slots below each source's first slot.
void Mixture::HeadCounts(const BlockInfo& info, Index first, Index* seen) const {
  const Index k = num_sources();
  for (Index i = 0; i < k; ++i) {
    seen[i] = info.rotation.Before(first, info.prefix[i], info.prefix[i + 1]);
  }
}

MixSample Mixture::LookupIn(const BlockInfo& info, Index p) const {
  const Index j = p - info.index * block_;
  const Index slot = info.rotation.Slot(j);
  const Index source =
      std::upper_bound(info.prefix.begin() + 1, info.prefix.end(), slot) - info.prefix.begin() - 1;
  const Index rank = info.rotation.Before(j, info.prefix[source], info.prefix[source + 1]);
  return {source, SourceItem(source, info.cum[source] + rank)};
}

// Without the block's O(K) arrays: every slot prefix and count is O(1) from
// the segment's cumulative shares (or the cut block's stored prefix).
MixSample Mixture::Lookup(Index p) const {
  const Index b = p / block_;
  const Index j = p - b * block_;
  const Index t0 = b * block_;
  auto it = std::upper_bound(segments_.begin(), segments_.end(), t0,
                             [](Index x, const MixSegment& s) { return x < s.begin; });
  const MixSegment& seg = *(it - 1);
  const Index tau = t0 - seg.begin;
  const bool cut = b == cut_block_;
  const auto t = static_cast<std::uint64_t>(tau);
  const auto t1 = static_cast<std::uint64_t>(tau + block_);
  auto prefix = [&](Index i) {
    if (cut) return cut_prefix_[i];
    const std::uint64_t p_i = seg.prefix[i];
    return RoundShare(t1, p_i, seg) - RoundShare(t, p_i, seg);
  };
  const Index k = num_sources();
  const Rotation rotation = RotationOf(b, cut ? cut_prefix_[k] : block_);
  const Index slot = rotation.Slot(j);
  Index lo = 0, hi = k - 1;  // the last source whose first slot is <= slot
  while (lo < hi) {
    const Index mid = lo + (hi - lo + 1) / 2;
    if (prefix(mid) <= slot) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const Index rank = rotation.Before(j, prefix(lo), prefix(lo + 1));
  return {lo, SourceItem(lo, SegmentCount(tau, seg, static_cast<std::size_t>(lo)) + rank)};
}

MixSample Mixture::At(Index position) const {
  CheckIndex("position", position, 0, size_);
  return Lookup(position + options_.skip);
}

void Mixture::Take(std::span<const Index> positions, Index* sources, Index* items) const {
  for (std::size_t j = 0; j < positions.size(); ++j) {
    if (positions[j] < 0 || positions[j] >= size_) {
      ThrowOutOfRange("position", Str(positions[j]) + " (entry " + Str(static_cast<Index>(j)) +
                                      ") is outside [0, " + Str(size_) + ")");
    }
  }
  // A run of entries in one block: when they are dense (their span at most
  // 32 x the entries) Fill lists the span, O(K) + O(1) per position; else
  // the block's arrays (O(K)) once when the run is long enough to pay for
  // them, or the O(log K + log B) closed forms per entry.
  constexpr Index kDenseRatio = 32;
  const Index k = num_sources();
  BlockInfo info;
  std::vector<Index> span_sources, span_items;
  const std::size_t n = positions.size();
  std::size_t j = 0;
  while (j < n) {
    const Index b = (positions[j] + options_.skip) / block_;
    std::size_t e = j + 1;
    Index lo = positions[j], hi = positions[j];
    while (e < n && (positions[e] + options_.skip) / block_ == b) {
      lo = std::min(lo, positions[e]);
      hi = std::max(hi, positions[e]);
      ++e;
    }
    const auto run = static_cast<Index>(e - j);
    if (run > 1 && hi - lo + 1 <= kDenseRatio * run) {
      span_sources.resize(hi - lo + 1);
      span_items.resize(hi - lo + 1);
      Fill(lo, hi + 1, span_sources.data(), span_items.data());
      for (; j < e; ++j) {
        sources[j] = span_sources[positions[j] - lo];
        items[j] = span_items[positions[j] - lo];
      }
      continue;
    }
    const bool arrays = run * 8 >= k;
    if (arrays && info.index != b) ComputeBlock(b, &info);
    for (; j < e; ++j) {
      const Index p = positions[j] + options_.skip;
      const MixSample s = arrays ? LookupIn(info, p) : Lookup(p);
      sources[j] = s.source;
      items[j] = s.item;
    }
  }
}

namespace {

// Lists source `source`'s walk positions [c, c_end) (its items over all its
// epochs) into dst, vectorised, through a cache of the permutation of its
// current epoch (constructing one costs more than listing a few items).
void ListWalk(Index n, std::uint64_t key, Index c, Index c_end, std::optional<Permutation>* walk,
              Index* walk_epoch, Index* dst) {
  while (c < c_end) {
    const Index epoch = c / n;
    const Index in_epoch = std::min(c_end - c, (epoch + 1) * n - c);
    if (*walk_epoch != epoch) {
      walk->emplace(n, key, static_cast<std::uint64_t>(epoch));
      *walk_epoch = epoch;
    }
    (*walk)->Fill(c - epoch * n, 1, in_epoch, dst);
    dst += in_epoch;
    c += in_epoch;
  }
}

// The samples of one block's positions [first, first + count): position j
// holds slot `slot` (the next is slot + step mod length), whose source is
// table[slot]; that source's next item is *cursor[source]. No branch but the
// wrap of the slot (a conditional move); four slot sequences (positions j,
// j + 1, j + 2, j + 3, each stepping 4 x step) so that the add-compare-move
// of the wrap is not one chain through every sample.
void FillBlock(const std::int32_t* __restrict table, const Index** cursor, std::uint64_t slot,
               std::uint64_t step, std::uint64_t length, Index count, Index* __restrict sources,
               Index* __restrict items) {
  auto advance = [length](std::uint64_t s, std::uint64_t by) {
    s += by;
    return s >= length ? s - length : s;
  };
  auto emit = [&](Index j, std::uint64_t s) {
    const std::int32_t source = table[s];
    sources[j] = source;
    items[j] = *cursor[source]++;
  };
  Index j = 0;
  if (count >= 8) {
    const std::uint64_t step4 = (4 * step) % length;
    std::uint64_t s0 = slot;
    std::uint64_t s1 = advance(s0, step);
    std::uint64_t s2 = advance(s1, step);
    std::uint64_t s3 = advance(s2, step);
    for (; j + 4 <= count; j += 4) {
      emit(j, s0);
      emit(j + 1, s1);
      emit(j + 2, s2);
      emit(j + 3, s3);
      s0 = advance(s0, step4);
      s1 = advance(s1, step4);
      s2 = advance(s2, step4);
      s3 = advance(s3, step4);
    }
    slot = s0;
  }
  for (; j < count; ++j) {
    emit(j, slot);
    slot = advance(slot, step);
  }
}

// FillBlock for kK <= 4 sources: the cursors stay in registers (every
// source's next item is loaded and the sample's own selected), so no sample
// waits on the previous one's cursor store: with two sources, that chain ran
// through nearly every sample. Reads one entry past a source's items, which
// the caller pads.
template <int kK>
void FillBlockFew(const std::int32_t* __restrict table, const Index** cursor_array,
                  std::uint64_t slot, std::uint64_t step, std::uint64_t length, Index count,
                  Index* __restrict sources, Index* __restrict items) {
  const Index* cursor[kK];
  for (int i = 0; i < kK; ++i) cursor[i] = cursor_array[i];
  for (Index j = 0; j < count; ++j) {
    const std::int32_t source = table[slot];
    sources[j] = source;
    Index item = *cursor[0];
    for (int i = 1; i < kK; ++i) item = source == i ? *cursor[i] : item;
    items[j] = item;
    for (int i = 0; i < kK; ++i) cursor[i] += source == i ? 1 : 0;
    slot += step;
    slot = slot >= length ? slot - length : slot;
  }
  for (int i = 0; i < kK; ++i) cursor_array[i] = cursor[i];
}

}  // namespace

void Mixture::Fill(Index begin, Index end, Index* sources, Index* items) const {
  CheckSlice(begin, end, size_);
  const Index k = num_sources();
  // Blocks up to kTableBlock: a slot -> source table per block; larger blocks
  // go sample by sample (a binary search for the source of each slot).
  constexpr Index kTableBlock = Index{1} << 20;
  // A run of consecutive blocks (up to about kRunSamples samples) lists each
  // source's items once: a source's samples in the run take consecutive walk
  // positions, so its items are one vectorised Permutation::Fill per run
  // (not one short one per block), laid out source after source.
  constexpr Index kRunSamples = Index{1} << 15;
  std::vector<BlockInfo> run(1);
  std::vector<Index> known;  // counts before the next block, when known
  std::vector<Index> head(k);
  std::vector<std::int32_t> table;
  std::vector<Index> table_prefix;  // the slot prefixes `table` was built for
  std::vector<Index> walk_items;
  std::vector<const Index*> cursor(k);
  std::vector<std::optional<Permutation>> walks(k);
  std::vector<Index> walk_epoch(k, -1);
  Index out = 0;
  Index p = begin + options_.skip;
  const Index stop = end + options_.skip;
  while (p < stop) {
    const Index b = p / block_;
    ComputeBlock(b, &run[0], known.empty() ? nullptr : &known);
    const Index first = p - b * block_;
    if (first > 0) {
      HeadCounts(run[0], first, head.data());
    } else {
      std::fill(head.begin(), head.end(), 0);
    }
    if (run[0].length > kTableBlock) {
      const BlockInfo& info = run[0];
      const Index count = std::min(stop - p, info.length - first);
      const auto length = static_cast<std::uint64_t>(info.length);
      const std::uint64_t step = info.rotation.ginv;
      auto slot = static_cast<std::uint64_t>(info.rotation.Slot(first));
      std::vector<Index>& next = head;
      for (Index i = 0; i < k; ++i) next[i] += info.cum[i];
      for (Index j = 0; j < count; ++j) {
        const Index source =
            std::upper_bound(info.prefix.begin() + 1, info.prefix.end(), static_cast<Index>(slot)) -
            info.prefix.begin() - 1;
        const Index c = next[source]++;
        const Index n = sizes_[source];
        const Index epoch = c / n;
        if (walk_epoch[source] != epoch) {
          walks[source].emplace(n, source_keys_[source], static_cast<std::uint64_t>(epoch));
          walk_epoch[source] = epoch;
        }
        sources[out + j] = source;
        items[out + j] = walks[source]->Forward(c - epoch * n);
        slot += step;
        if (slot >= length) slot -= length;
      }
      known = info.next;
      out += count;
      p += count;
      continue;
    }
    // The run: blocks b .. b + g - 1, while samples remain before `stop`.
    // Full blocks all have block_ <= kTableBlock slots; a cut block is shorter.
    Index g = 1;
    Index span = run[0].length - first;
    while (p + span < stop && span < kRunSamples) {
      if (static_cast<Index>(run.size()) <= g) run.emplace_back();
      ComputeBlock(b + g, &run[g], &run[g - 1].next);
      span += run[g].length;
      ++g;
    }
    // Each source's items of the run, from its walk position after the
    // head of block b to its count after block b + g - 1 (the last block's
    // tail past `stop` included: at most one block listed in vain).
    const std::vector<Index>& run_end = run[g - 1].next;
    Index listed = 0;
    for (Index i = 0; i < k; ++i) listed += run_end[i] - run[0].cum[i] - head[i];
    walk_items.resize(static_cast<std::size_t>(listed) + 1);  // FillBlockFew reads one past
    Index offset = 0;
    for (Index i = 0; i < k; ++i) {
      const Index c = run[0].cum[i] + head[i];
      Index* dst = walk_items.data() + offset;
      ListWalk(sizes_[i], source_keys_[i], c, run_end[i], &walks[i], &walk_epoch[i], dst);
      cursor[i] = dst;
      offset += run_end[i] - c;
    }
    for (Index t = 0; t < g && p < stop; ++t) {
      const BlockInfo& info = run[t];
      const Index at = t == 0 ? first : 0;
      const Index count = std::min(stop - p, info.length - at);
      if (info.prefix != table_prefix) {
        table.resize(static_cast<std::size_t>(info.length));
        for (Index i = 0; i < k; ++i) {
          std::fill(table.begin() + info.prefix[i], table.begin() + info.prefix[i + 1],
                    static_cast<std::int32_t>(i));
        }
        table_prefix = info.prefix;
      }
      const auto fill = k == 1   ? FillBlockFew<1>
                        : k == 2 ? FillBlockFew<2>
                        : k == 3 ? FillBlockFew<3>
                        : k == 4 ? FillBlockFew<4>
                                 : FillBlock;
      fill(table.data(), cursor.data(), static_cast<std::uint64_t>(info.rotation.Slot(at)),
           info.rotation.ginv, static_cast<std::uint64_t>(info.length), count, sources + out,
           items + out);
      out += count;
      p += count;
    }
    known = run_end;
  }
}

std::vector<Index> Mixture::Consumed(Index position) const {
  CheckPosition("position", position, 0, size_);
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
  HeadCounts(info, first, out.data());
  for (Index i = 0; i < k; ++i) out[i] += info.cum[i];
  return out;
}

long double Mixture::Nominal(const Index* counts) const {
  long double t = 0;
  for (std::size_t i = 0; i < mean_.size(); ++i)
    t += static_cast<long double>(counts[i]) * mean_[i];
  return t;
}

double Mixture::NominalTokens(Index position) const {
  if (mean_.empty()) {
    ThrowInvalid("lengths", "nominal tokens need the lengths (token counts) of every source");
  }
  return static_cast<double>(Nominal(Consumed(position).data()));
}

Index Mixture::PositionOfTokens(double tokens) const {
  if (mean_.empty()) {
    ThrowInvalid("lengths", "nominal tokens need the lengths (token counts) of every source");
  }
  if (!(tokens >= 0)) ThrowInvalid("tokens", "must be >= 0, got " + Num(tokens));
  if (NominalTokens(0) >= tokens) return 0;
  const Index k = num_sources();
  std::vector<Index> c(k);
  auto reaches = [&](Index b) {  // plan block boundary b
    Cumulative(b, c.data());
    return Nominal(c.data()) >= static_cast<long double>(tokens);
  };
  const Index plan_end = size_ + options_.skip;
  const Index lo = CeilDiv(options_.skip, block_), hi = plan_end / block_;
  if (lo > hi || !reaches(hi)) return size_;  // not before the end
  return std::min(FirstTrue(lo, hi, reaches) * block_ - options_.skip, size_);
}

std::vector<double> Mixture::Target(Index position) const {
  CheckPosition("position", position, 0, size_);
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
  MixtureOptions plan = state.options;
  if (schedule.has_value()) plan.schedule = std::move(*schedule);
  return Continue(state, weights.has_value() ? std::move(*weights) : state.weights, plan);
}

Mixture Mixture::Continue(const MixtureState& state, std::vector<double> weights,
                          const MixtureOptions& plan) {
  MixtureOptions options = state.options;
  options.origin = state.position;
  options.start = state.consumed;
  options.skip = 0;
  options.schedule = plan.schedule;
  options.schedule_unit = plan.schedule_unit;
  options.interpolation = plan.interpolation;
  // The block was chosen for the old shares; the new ones pick their own
  // unless the plan fixes it.
  options.block = plan.block;
  return Mixture(state.sizes, std::move(weights), std::move(options));
}

MixReport ReportMixture(const Mixture& mixture, Index begin, Index end, Index windows) {
  CheckSlice(begin, end, mixture.size());
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
