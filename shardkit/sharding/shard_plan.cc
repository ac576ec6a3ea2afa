#include "shardkit/sharding/shard_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>
#include <tuple>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/internal/runs.h"

namespace shardkit {

namespace {

using u64 = std::uint64_t;
using u128 = unsigned __int128;

}  // namespace

namespace {
constexpr EnumNames<Split, 3> kSplits{"split", "split", {"round_robin", "contiguous", "balanced"}};
constexpr EnumNames<Remainder, 4> kRemainders{
    "remainder", "remainder", {"uneven", "drop", "pad", "replicate"}};
}  // namespace

SHARDKIT_ENUM_PARSE_AND_NAMES(Split, kSplits, ParseSplit, SplitName, SplitNames)
SHARDKIT_ENUM_PARSE_AND_NAMES(Remainder, kRemainders, ParseRemainder, RemainderName, RemainderNames)

// The balanced split: per-rank lists of window positions in epoch order, and
// the inverse map. Only ranks [0, min(W, M)) can receive items (see Assign).
struct ShardPlan::Balanced {
  std::vector<std::vector<Index>> lists;
  std::vector<Index> rank_of;   // by window position
  std::vector<Index> entry_of;  // by window position
  Index min_count = 0, max_count = 0;
};

ShardPlan::ShardPlan(Index num_items, Index world_size, ShardOptions options)
    : num_items_(num_items), world_(world_size), order_(0, 0, 0) {
  CheckAtLeast("num_items", num_items, 0);
  CheckAtLeast("world_size", world_size, 1);
  CheckAtLeast("offset", options.offset, 0);
  if (options.offset > num_items) {
    ThrowInvalid("offset",
                 Str(options.offset) + " lies beyond the data (num_items=" + Str(num_items) + ")");
  }
  window_ = num_items - options.offset;
  if (options.limit) {
    CheckAtLeast("limit", *options.limit, 0);
    window_ = std::min(window_, *options.limit);
  }
  if (!options.weights.empty() || options.split == Split::kBalanced) {
    if (static_cast<Index>(options.weights.size()) != num_items) {
      ThrowInvalid("weights", "expected one weight per item (" + Str(num_items) + "), got " +
                                  Str(options.weights.size()));
    }
    for (size_t i = 0; i < options.weights.size(); ++i) {
      double w = options.weights[i];
      if (!std::isfinite(w) || w < 0) {
        ThrowInvalid("weights", "weight of item " + Str(static_cast<Index>(i)) + " is " +
                                    std::to_string(w) + " (weights must be finite and >= 0)");
      }
    }
  }
  if (options.split == Split::kBalanced && options.remainder == Remainder::kReplicate) {
    ThrowInvalid("remainder",
                 "'replicate' gives every rank every item; it cannot be combined "
                 "with split 'balanced'");
  }
  // replicate gives every rank the whole window in its own seeded shuffled
  // order (Whale: "to ensure convergence"); the same order on every rank
  // would make every rank compute the same gradients. So it always shuffles.
  if (options.remainder == Remainder::kReplicate) options.shuffle = true;
  quotient_ = window_ / world_;
  remainder_ = window_ % world_;
  order_ = Permutation(window_, options.seed, options.epoch);
  options_ = std::make_shared<const ShardOptions>(std::move(options));

  if (options_->split != Split::kBalanced) {
    if (options_->remainder == Remainder::kDrop) dropped_ = remainder_;
    return;
  }

  // Longest-processing-time first: heaviest item first (ties: earlier in the
  // epoch order) to the rank with the least load (ties: fewer items, then
  // lower rank). While loads are tied at zero the first min(W, M) items go to
  // distinct ranks in rank order, so ranks >= M never receive anything.
  auto balanced = std::make_shared<Balanced>();
  const Index active = std::min(world_, window_);
  std::vector<std::pair<double, Index>> by_weight(window_);
  for (Index p = 0; p < window_; ++p) {
    Index item = options_->offset + (options_->shuffle ? order_.Forward(p) : p);
    by_weight[p] = {options_->weights[item], p};
  }
  std::sort(by_weight.begin(), by_weight.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  using Slot = std::tuple<double, Index, Index>;  // load, count, rank
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
  for (Index r = 0; r < active; ++r) heap.emplace(0.0, 0, r);
  std::vector<double> load(active, 0.0);
  balanced->lists.assign(active, {});
  // With equal_counts, exactly M % W ranks may hold q + 1 items.
  Index long_slots = remainder_;
  for (const auto& [weight, position] : by_weight) {
    Index rank;
    while (true) {
      auto [l, count, r] = heap.top();
      heap.pop();
      bool full = options_->equal_counts &&
                  (count >= quotient_ + 1 || (count == quotient_ && long_slots == 0));
      if (!full) {
        rank = r;
        break;
      }
    }
    auto& list = balanced->lists[rank];
    list.push_back(position);
    load[rank] += weight;
    Index count = static_cast<Index>(list.size());
    if (options_->equal_counts && count == quotient_ + 1) --long_slots;
    heap.emplace(load[rank], count, rank);
  }
  balanced->rank_of.assign(window_, -1);
  balanced->entry_of.assign(window_, -1);
  balanced->min_count = active < world_ ? 0 : window_;
  for (Index r = 0; r < active; ++r) {
    auto& list = balanced->lists[r];
    std::sort(list.begin(), list.end());
    Index size = static_cast<Index>(list.size());
    balanced->min_count = std::min(balanced->min_count, size);
    balanced->max_count = std::max(balanced->max_count, size);
    for (Index e = 0; e < size; ++e) {
      balanced->rank_of[list[e]] = r;
      balanced->entry_of[list[e]] = e;
    }
  }
  if (options_->remainder == Remainder::kDrop) {
    dropped_ = window_ - balanced->min_count * world_;
  }
  balanced_ = std::move(balanced);
}

std::string ShardPlan::Describe() const {
  const ShardOptions& o = *options_;
  const std::string order = o.shuffle ? "shuffled (seed " + std::to_string(o.seed) + ", epoch " +
                                            std::to_string(o.epoch) + ")"
                                      : "sequential";
  std::string out = Str(num_items_) + " items, window [" + Str(window_begin()) + ", " +
                    Str(window_end()) + ") over " + Str(world_) + " ranks; split " +
                    std::string(SplitName(o.split)) + ", remainder " +
                    std::string(RemainderName(o.remainder)) + ", order " + order;
  if (!o.weights.empty()) out += "; weighted";
  return out;
}

void ShardPlan::CheckRank(Index rank) const {
  CheckIndex("rank", rank, 0, world_, " (world_size=" + Str(world_) + ")");
}

Index ShardPlan::RealCount(Index rank) const {
  const Remainder rem = options_->remainder;
  if (rem == Remainder::kReplicate) return window_;
  if (balanced_) {
    Index size = rank < static_cast<Index>(balanced_->lists.size())
                     ? static_cast<Index>(balanced_->lists[rank].size())
                     : 0;
    return rem == Remainder::kDrop ? balanced_->min_count : size;
  }
  if (rem == Remainder::kDrop) return quotient_;
  if (rem == Remainder::kPad && options_->split == Split::kContiguous) {
    // Blocks of ceil(M / W) over the padded list; the padding sits at its end.
    const u128 per = static_cast<u128>(quotient_ + (remainder_ > 0 ? 1 : 0));
    const u128 begin = per * static_cast<u128>(rank);
    if (begin >= static_cast<u128>(window_)) return 0;
    return static_cast<Index>(std::min<u128>(per, window_ - begin));
  }
  return quotient_ + (rank < remainder_ ? 1 : 0);
}

Index ShardPlan::Count(Index rank) const {
  CheckRank(rank);
  if (options_->remainder == Remainder::kPad) {
    return balanced_ ? balanced_->max_count : quotient_ + (remainder_ > 0 ? 1 : 0);
  }
  return RealCount(rank);
}

Index ShardPlan::Padding(Index rank) const { return Count(rank) - RealCount(rank); }

void ShardPlan::CheckListable(const char* what) const {
  if (world_ > kMaxRankList) {
    ThrowInvalid("world_size", Str(world_) + " ranks are too many to list " + what +
                                   " one per rank (at most " + Str(kMaxRankList) +
                                   "); ask for one rank's or for the distinct values instead");
  }
}

std::vector<Index> ShardPlan::Counts() const {
  CheckListable("counts");
  std::vector<Index> counts(world_);
  for (Index r = 0; r < world_; ++r) counts[r] = Count(r);
  return counts;
}

Index ShardPlan::ProgressionStart(Index rank) const {
  if (options_->remainder == Remainder::kReplicate) return 0;
  if (options_->split == Split::kRoundRobin) return rank;
  switch (options_->remainder) {
    case Remainder::kUneven:
      return rank * quotient_ + std::min(rank, remainder_);
    case Remainder::kDrop:
      return rank * quotient_;
    default:
      // Padded contiguous blocks may start past M; callers use u64 math.
      return -1;
  }
}

Index ShardPlan::ProgressionStep() const {
  return options_->split == Split::kRoundRobin && options_->remainder != Remainder::kReplicate
             ? world_
             : 1;
}

Permutation ShardPlan::RankOrder(Index rank) const {
  if (options_->remainder == Remainder::kReplicate && options_->shuffle) {
    return Permutation(window_, Mix64(options_->seed ^ Mix64(static_cast<u64>(rank) + 1)),
                       options_->epoch);
  }
  return order_;
}

Shard ShardPlan::GetShard(Index rank, Index worker, Index num_workers) const {
  CheckRank(rank);
  CheckAtLeast("num_workers", num_workers, 1);
  CheckIndex("worker", worker, 0, num_workers, " (num_workers=" + Str(num_workers) + ")");
  return Shard(*this, rank, worker, num_workers);
}

Index ShardPlan::ItemAt(Index rank, Index entry) const { return GetShard(rank).At(entry); }

Location ShardPlan::Locate(Index item) const {
  CheckIndex("item", item, window_begin(), window_end(), " (the window)");
  if (options_->remainder == Remainder::kReplicate) {
    ThrowInvalid("remainder", "'replicate' gives every rank every item");
  }
  const Index p = options_->shuffle ? order_.Inverse(item - window_begin()) : item - window_begin();
  const bool drop = options_->remainder == Remainder::kDrop;
  if (balanced_) {
    Index entry = balanced_->entry_of[p];
    if (drop && entry >= balanced_->min_count) return {};
    return {balanced_->rank_of[p], entry};
  }
  if (drop && p >= quotient_ * world_) return {};
  if (options_->split == Split::kRoundRobin) return {p % world_, p / world_};
  if (drop) return {p / quotient_, p % quotient_};
  if (options_->remainder == Remainder::kPad) {
    const Index per = quotient_ + (remainder_ > 0 ? 1 : 0);
    return {p / per, p % per};
  }
  // The first M % W ranks hold q + 1 items (no such rank when M % W == 0, and
  // then q + 1 may not even fit: W = 1, M = 2^63 - 1).
  const Index boundary = remainder_ > 0 ? remainder_ * (quotient_ + 1) : 0;
  if (p < boundary) return {p / (quotient_ + 1), p % (quotient_ + 1)};
  return {remainder_ + (p - boundary) / quotient_, (p - boundary) % quotient_};
}

double ShardPlan::Load(Index rank) const {
  CheckRank(rank);
  if (options_->weights.empty()) return 0;
  if (options_->remainder == Remainder::kReplicate) return WindowTotal();
  Shard shard = GetShard(rank);
  const Index real = shard.size() - shard.padding();
  double load = 0;
  std::vector<Index> buffer(static_cast<size_t>(std::min<Index>(real, 1 << 16)));
  for (Index begin = 0; begin < real; begin += 1 << 16) {
    Index end = std::min<Index>(real, begin + (1 << 16));
    shard.Fill(begin, end, buffer.data());
    for (Index i = 0; i < end - begin; ++i) load += options_->weights[buffer[i]];
  }
  return load;
}

double ShardPlan::WindowTotal() const {
  double total = 0;
  for (Index p = 0; p < window_; ++p) total += options_->weights[window_begin() + p];
  return total;
}

std::vector<double> ShardPlan::PrefixLoads() const {
  // Every split deals a window of M items to ranks [0, min(W, M)) at most
  // (round_robin and uneven/pad lists: rank r >= M gets nothing; contiguous
  // padded blocks of ceil(M / W) start past M from rank M on; balanced gives
  // its first min(W, M) items to distinct ranks), so this costs O(M), not O(W).
  const Index ranks = std::min(world_, window_);
  std::vector<double> loads(static_cast<size_t>(ranks));
  for (Index r = 0; r < ranks; ++r) loads[r] = Load(r);
  return loads;
}

std::vector<double> ShardPlan::Loads() const {
  if (options_->weights.empty()) return {};
  CheckListable("loads");
  if (options_->remainder == Remainder::kReplicate)
    return std::vector<double>(world_, WindowTotal());
  std::vector<double> loads = PrefixLoads();
  loads.resize(static_cast<size_t>(world_), 0.0);
  return loads;
}

std::vector<LoadGroup> ShardPlan::LoadGroups() const {
  if (options_->weights.empty()) return {};
  if (options_->remainder == Remainder::kReplicate) return {{WindowTotal(), world_}};
  std::vector<double> loads = PrefixLoads();
  const Index empty_ranks = world_ - static_cast<Index>(loads.size());
  std::sort(loads.begin(), loads.end());
  std::vector<LoadGroup> groups;
  if (empty_ranks > 0) groups.push_back({0.0, empty_ranks});
  internal::AppendRuns(loads, &groups);
  return groups;
}

AuditReport ShardPlan::Audit(Index enumerate_limit) const {
  AuditReport report;
  report.window_size = window_;
  report.dropped = dropped_;
  const bool replicate = options_->remainder == Remainder::kReplicate;

  // Counts take at most two values except under balanced; both are known in
  // closed form, so totals need no loop over ranks.
  u128 real_total = 0, padded_total = 0;
  // balanced: ranks past its lists (min(W, M) of them) all share rank W - 1's
  // counts; only the lists are walked (a loop over W = 2^62 ranks never ended).
  const Index walked =
      balanced_ ? std::min<Index>(world_, static_cast<Index>(balanced_->lists.size())) : world_;
  if (balanced_ || world_ <= 4096) {
    report.min_count = report.max_count = Count(0);
    auto add = [&](Index r, Index times) {
      Index c = Count(r), real = RealCount(r);
      real_total += static_cast<u128>(real) * static_cast<u128>(times);
      padded_total += static_cast<u128>(c - real) * static_cast<u128>(times);
      report.min_count = std::min(report.min_count, c);
      report.max_count = std::max(report.max_count, c);
    };
    for (Index r = 0; r < walked; ++r) add(r, 1);
    if (walked < world_) add(world_ - 1, world_ - walked);
  } else {
    // Every rank below the boundary shares Count(0) / RealCount(0), every rank
    // at or after it shares the values of rank W - 1.
    Index boundary = remainder_;
    if (options_->remainder == Remainder::kPad && options_->split == Split::kContiguous) {
      const Index per = quotient_ + (remainder_ > 0 ? 1 : 0);
      boundary = per == 0 ? 0 : window_ / per;  // ranks with a full block
      const Index partial = (per != 0 && window_ % per != 0) ? 1 : 0;
      real_total = static_cast<u128>(boundary) * per + (partial ? window_ % per : 0);
      padded_total = static_cast<u128>(world_) * Count(0) - real_total;
    } else {
      if (replicate || options_->remainder == Remainder::kDrop) boundary = 0;
      real_total = static_cast<u128>(boundary) * RealCount(0) +
                   static_cast<u128>(world_ - boundary) * RealCount(world_ - 1);
      padded_total = static_cast<u128>(boundary) * Padding(0) +
                     static_cast<u128>(world_ - boundary) * Padding(world_ - 1);
    }
    report.min_count = std::min(Count(0), Count(world_ - 1));
    report.max_count = std::max(Count(0), Count(world_ - 1));
  }
  report.max_imbalance = report.max_count - report.min_count;
  const u128 expected_real =
      replicate ? static_cast<u128>(window_) * world_ : static_cast<u128>(window_ - dropped_);
  const u128 saturate = static_cast<u128>(INT64_MAX);
  report.delivered = static_cast<Index>(std::min(real_total, saturate));
  report.padding = static_cast<Index>(std::min(padded_total, saturate));

  const u128 entries = real_total + padded_total;
  if (entries <= static_cast<u128>(enumerate_limit) &&
      static_cast<u128>(world_) <= static_cast<u128>(enumerate_limit)) {
    report.method = "enumerated";
    std::vector<u64> seen(static_cast<size_t>((window_ + 63) / 64), 0);
    std::vector<Index> buffer(1 << 16);
    Index distinct = 0, out_of_window = 0;
    for (Index r = 0; r < world_; ++r) {
      if (replicate) {
        std::fill(seen.begin(), seen.end(), 0);
        distinct = 0;
      }
      Shard shard = GetShard(r);
      const Index real = shard.size() - shard.padding();
      for (Index begin = 0; begin < shard.size(); begin += 1 << 16) {
        Index end = std::min<Index>(shard.size(), begin + (1 << 16));
        shard.Fill(begin, end, buffer.data());
        for (Index k = begin; k < end; ++k) {
          Index p = buffer[k - begin] - window_begin();
          if (p < 0 || p >= window_) {
            ++out_of_window;
            continue;
          }
          if (k >= real) continue;  // padding: a valid item, not counted
          u64 bit = u64{1} << (p & 63);
          if (seen[p >> 6] & bit) {
            ++report.duplicates;
          } else {
            seen[p >> 6] |= bit;
            ++distinct;
          }
        }
      }
      if (replicate) report.missing += window_ - distinct;
    }
    if (!replicate) report.missing = window_ - dropped_ - distinct;
    report.exactly_once = report.duplicates == 0 && report.missing == 0 && out_of_window == 0 &&
                          real_total == expected_real;
    report.detail = "listed " + std::to_string(static_cast<Index>(entries)) + " entries of " +
                    Str(world_) + " ranks against a bitmap of the window";
    if (out_of_window) report.detail += "; " + Str(out_of_window) + " entries outside the window";
  } else {
    report.method = "arithmetic";
    // Counts must add up, and a sample of entries must round-trip through the
    // inverse map: ItemAt(Locate(i)) == i and Locate(ItemAt(r, e)) == (r, e).
    bool ok = real_total == expected_real;
    Index checked = 0;
    if (!replicate && window_ > 0) {
      u64 state = Mix64(options_->seed ^ 0xa0d17ULL);
      const Index samples = window_ > 50000 ? 100000 : 2 * window_ + 16;
      for (Index s = 0; s < samples && ok; ++s) {
        state = Mix64(state);
        Index item = window_begin() + static_cast<Index>(state % static_cast<u64>(window_));
        Location loc = Locate(item);
        if (loc.rank >= 0) ok = ItemAt(loc.rank, loc.entry) == item;
        Index rank = static_cast<Index>(Mix64(state ^ 1) % static_cast<u64>(world_));
        Index real = RealCount(rank);
        if (real > 0 && ok) {
          Index entry = static_cast<Index>(Mix64(state ^ 2) % static_cast<u64>(real));
          Location back = Locate(ItemAt(rank, entry));
          ok = back.rank == rank && back.entry == entry;
        }
        ++checked;
      }
    }
    report.exactly_once = ok;
    report.detail = "counts add up to " +
                    std::to_string(static_cast<Index>(std::min(expected_real, saturate))) +
                    " real entries; " + Str(checked) + " sampled entries round-trip through Locate";
    if (!ok) report.detail = "FAILED: " + report.detail;
  }

  if (!options_->weights.empty()) {
    // Bounded by the window, not by W: the distinct loads always, the
    // per-rank list only for a listable world.
    report.load_groups = LoadGroups();
    if (world_ <= kMaxRankList) report.loads = Loads();
    double total = 0, max_weight = 0;
    for (Index p = 0; p < window_; ++p) {
      double w = options_->weights[window_begin() + p];
      total += w;
      max_weight = std::max(max_weight, w);
    }
    report.max_load = report.load_groups.back().load;
    report.lower_bound = replicate ? total : std::max(max_weight, total / world_);
    report.load_imbalance = report.lower_bound > 0 ? report.max_load / report.lower_bound - 1 : 0;
  }
  return report;
}

Shard::Shard(const ShardPlan& plan, Index rank, Index worker, Index num_workers)
    : plan_(plan),
      order_(plan.RankOrder(rank)),
      rank_(rank),
      worker_(worker),
      num_workers_(num_workers) {
  const Index length = plan.Count(rank);
  const Index real = plan.RealCount(rank);
  auto take = [&](Index n) { return n > worker ? (n - worker - 1) / num_workers + 1 : 0; };
  size_ = take(length);
  padding_ = size_ - take(real);
  if (plan.balanced_) return;
  u64 rank_start;
  if (plan.options_->split == Split::kContiguous && plan.options_->remainder == Remainder::kPad) {
    const u64 per = static_cast<u64>(plan.quotient_ + (plan.remainder_ > 0 ? 1 : 0));
    rank_start = per * static_cast<u64>(rank);
  } else {
    rank_start = static_cast<u64>(plan.ProgressionStart(rank));
  }
  const u64 rank_step = static_cast<u64>(plan.ProgressionStep());
  start_ = rank_start + static_cast<u64>(worker) * rank_step;
  step_ = static_cast<u64>(num_workers) * rank_step;  // used only when size_ >= 2
}

std::uint64_t Shard::Position(Index k) const {
  const u64 window = static_cast<u64>(plan_.window_);
  if (plan_.balanced_) {
    const Index entry = worker_ + k * num_workers_;
    const Index real = plan_.RealCount(rank_);
    const auto& lists = plan_.balanced_->lists;
    if (entry < real) return static_cast<u64>(lists[rank_][entry]);
    const Index j = entry - real;  // padding repeats the rank's own head
    if (real > 0) return static_cast<u64>(lists[rank_][j % real]);
    return static_cast<u64>(j) % window;
  }
  u64 p = start_ + static_cast<u64>(k) * step_;
  return p < window ? p : p % window;
}

Index Shard::operator[](Index k) const {
  const u64 p = Position(k);
  const Index local =
      plan_.options_->shuffle ? order_.Forward(static_cast<Index>(p)) : static_cast<Index>(p);
  return plan_.window_begin() + local;
}

Index Shard::At(Index k) const {
  CheckIndex("index", k, 0, size_, " of rank " + Str(rank_) + "'s shard");
  return (*this)[k];
}

void Shard::Fill(Index begin, Index end, Index* out) const {
  if (begin < 0 || end < begin || end > size_) {
    ThrowOutOfRange(
        "index", "range [" + Str(begin) + ", " + Str(end) + ") is outside [0, " + Str(size_) + ")");
  }
  const Index real_end = std::min(end, size_ - padding_);
  Index k = begin;
  if (!plan_.balanced_ && real_end > begin) {
    const Index count = real_end - begin;
    const Index first = static_cast<Index>(start_ + static_cast<u64>(begin) * step_);
    const Index step = count > 1 ? static_cast<Index>(step_) : 1;
    if (plan_.options_->shuffle) {
      order_.Fill(first, step, count, out);
    } else {
      for (Index i = 0; i < count; ++i) out[i] = first + i * step;
    }
    const Index offset = plan_.window_begin();
    if (offset != 0) {
      for (Index i = 0; i < count; ++i) out[i] += offset;
    }
    k = real_end;
  }
  for (; k < end; ++k) out[k - begin] = (*this)[k];
}

}  // namespace shardkit
