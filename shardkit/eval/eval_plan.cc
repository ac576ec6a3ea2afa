#include "shardkit/eval/eval_plan.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "shardkit/sharding/permutation.h"

namespace shardkit {

namespace {

ShardPlan MakeItemPlan(Index num_items, Index world_size, const EvalOptions& o) {
  if (o.split == Split::kBalanced) {
    ThrowInvalid("split",
                 "balanced is not supported by EvalPlan (expected round_robin or "
                 "contiguous): evaluation needs no weights to be exact");
  }
  ShardOptions so;
  static_cast<ItemSplitOptions&>(so) = o;  // remainder uneven, the default
  if (o.window == WindowRule::kHarness) {
    // lm-eval / lmms-eval: `limit = int(limit) if limit else None`, and
    // islice from an offset beyond the data yields nothing.
    if (o.limit && *o.limit == 0) so.limit.reset();
    if (o.offset > num_items && num_items >= 0) so.offset = num_items;
  }
  return ShardPlan(num_items, world_size, so);
}

Index EffectiveBatch(Index batch_size, const EvalOptions& o) {
  CheckAtLeast("batch_size", batch_size, 1);
  CheckAtLeast("devices", o.devices, 1);
  const Index min_device_batch = o.min_device_batch.value_or(0);
  CheckAtLeast("min_device_batch", min_device_batch, 0);
  if (batch_size % o.devices != 0) {
    ThrowInvalid("devices", Str(o.devices) + " devices do not divide batch_size " +
                                Str(batch_size) + " (each device needs an equal share)");
  }
  const Index per_device = std::max(batch_size / o.devices, min_device_batch);
  return CheckedMul("min_device_batch", per_device, o.devices);
}

}  // namespace

WindowRule ParseWindowRule(std::string_view name) {
  if (name == "strict") return WindowRule::kStrict;
  if (name == "harness") return WindowRule::kHarness;
  ThrowInvalid("window", "expected strict or harness, got '" + std::string(name) + "'");
}

std::string_view WindowRuleName(WindowRule rule) {
  return rule == WindowRule::kHarness ? "harness" : "strict";
}

EvalPlan::EvalPlan(Index num_items, Index world_size, Index batch_size, EvalOptions options)
    : plan_(MakeItemPlan(num_items, world_size, options)), options_(options) {
  batch_ = EffectiveBatch(batch_size, options_);
  steps_ = CeilDiv(CeilDiv(window_size(), world_size), batch_);
  // Every slot of every rank must be addressable as one Index (SourceRows).
  // The slots grow with the batch (num_items only through the step count,
  // which is at least 1 per item): name batch_size and give all three.
  Index per_rank = 0, slots = 0;
  if (__builtin_mul_overflow(steps_, batch_, &per_rank) ||
      __builtin_mul_overflow(per_rank, world_size, &slots)) {
    ThrowInvalid("batch_size", Str(batch_) + " slots per step x " + Str(steps_) + " steps x " +
                                   Str(world_size) +
                                   " ranks overflows a signed 64-bit slot count (num_items " +
                                   Str(num_items) + ")");
  }
}

EvalPlan::EvalPlan(Index num_items, const DataRoles& roles, Index batch_size, EvalOptions options)
    : EvalPlan(num_items, roles.dp_size(), batch_size, options) {
  roles_ = roles;
}

void EvalPlan::CheckRank(Index rank) const {
  CheckIndex("rank", rank, 0, world_size(), " (world_size=" + Str(world_size()) + ")");
}

Index EvalPlan::Real(Index rank) const {
  CheckRank(rank);
  return plan_.Count(rank);
}

Index EvalPlan::Padding(Index rank) const { return steps_ * batch_ - Real(rank); }

Index EvalPlan::TotalPadding() const { return steps_ * world_size() * batch_ - window_size(); }

double EvalPlan::PaddingFraction() const {
  const Index slots = steps_ * world_size() * batch_;
  return slots == 0 ? 0.0 : static_cast<double>(TotalPadding()) / static_cast<double>(slots);
}

void EvalPlan::Batch(Index rank, Index step, Index* indices, bool* mask) const {
  CheckRank(rank);
  CheckIndex("step", step, 0, steps_);
  const Shard shard = plan_.GetShard(rank);
  const Index real = shard.size();
  const Index begin = step * batch_;
  const Index real_end = std::clamp(real, begin, begin + batch_);
  shard.Fill(begin, real_end, indices);
  for (Index e = begin; e < begin + batch_; ++e) {
    const Index j = e - begin;
    mask[j] = e < real_end;
    if (e >= real_end) indices[j] = real > 0 ? shard[e % real] : window_begin();
  }
}

EvalPlan::Slot EvalPlan::Locate(Index item) const {
  CheckIndex("item", item, window_begin(), window_begin() + window_size(), " (the window)");
  const Location loc = plan_.Locate(item);
  return {loc.rank, loc.entry / batch_, loc.entry % batch_};
}

std::vector<Index> EvalPlan::SourceRows() const {
  std::vector<Index> rows;
  try {
    rows.resize(static_cast<size_t>(window_size()));
  } catch (const std::exception&) {  // bad_alloc, or length_error past max_size()
    // One row per item of the window (it was "cannot create std::vector
    // larger than max_size()" or a bare MemoryError for EvalPlan(2^62, 3, 4)).
    ThrowInvalid("num_items", Str(window_size()) +
                                  " items need one source row each (8 bytes a row), more than "
                                  "can be allocated here");
  }
  std::vector<Index> items;
  const Index per_rank = steps_ * batch_;
  // Only ranks [0, min(W, M)) hold items (uneven lists, no padding): a loop
  // over every rank of EvalPlan(3, 2^40, 1) never ended.
  const Index holders = std::min(world_size(), window_size());
  for (Index r = 0; r < holders; ++r) {
    const Shard shard = plan_.GetShard(r);
    items.resize(static_cast<size_t>(shard.size()));
    shard.Fill(0, shard.size(), items.data());
    for (Index e = 0; e < shard.size(); ++e) rows[items[e] - window_begin()] = r * per_rank + e;
  }
  return rows;
}

void EvalPlan::CheckOutputRows(const std::vector<Index>& rows_by_rank) const {
  if (static_cast<Index>(rows_by_rank.size()) != world_size()) {
    ThrowInvalid("outputs_by_rank", "expected one entry per rank (" + Str(world_size()) +
                                        "), got " + Str(static_cast<Index>(rows_by_rank.size())));
  }
  const Index expected = steps_ * batch_;
  for (Index r = 0; r < world_size(); ++r) {
    if (rows_by_rank[r] != expected) {
      ThrowInvalid("outputs_by_rank", "rank " + Str(r) + " has " + Str(rows_by_rank[r]) +
                                          " rows, expected " + Str(expected) + " (num_steps " +
                                          Str(steps_) + " x batch_size " + Str(batch_) +
                                          ", padded slots included)");
    }
  }
}

std::uint64_t EvalPlan::Fingerprint() const {
  std::uint64_t h = 0x5348415244454b31ULL;  // "SHARDEK1"
  auto add = [&h](std::uint64_t v) { h = Mix64(h ^ Mix64(v + 0x9e3779b97f4a7c15ULL)); };
  for (const char* c = kEvalPlanVersion; *c; ++c) add(static_cast<unsigned char>(*c));
  add(static_cast<std::uint64_t>(num_items()));
  add(static_cast<std::uint64_t>(world_size()));
  add(static_cast<std::uint64_t>(batch_));
  add(static_cast<std::uint64_t>(options_.devices));
  add(static_cast<std::uint64_t>(options_.min_device_batch.value_or(0)));  // unset and 0 alike
  add(static_cast<std::uint64_t>(options_.split));
  add(options_.shuffle ? 1 : 0);
  add(options_.seed);
  add(options_.epoch);
  if (window_begin() != 0 || window_size() != num_items()) {
    // Only a window that leaves items out changes the hash (plans made
    // before windows existed keep theirs).
    add(0x57494e444f57ULL);  // "WINDOW"
    add(static_cast<std::uint64_t>(window_begin()));
    add(static_cast<std::uint64_t>(window_size()));
  }
  return h;
}

std::string EvalPlan::Describe() const {
  std::string s = "EvalPlan(num_items=" + Str(num_items()) + ", world_size=" + Str(world_size()) +
                  ", batch_size=" + Str(batch_) + ", devices=" + Str(options_.devices) +
                  ", split=" + std::string(SplitName(options_.split));
  if (options_.min_device_batch.value_or(0) != 0) {
    s += ", min_device_batch=" + Str(*options_.min_device_batch);
  }
  if (window_begin() != 0 || window_size() != num_items()) {
    s += ", window=[" + Str(window_begin()) + ", " + Str(window_begin() + window_size()) + ")";
  }
  if (options_.shuffle) {
    s += ", shuffle=True, seed=" + std::to_string(options_.seed) +
         ", epoch=" + std::to_string(options_.epoch);
  }
  return s + ", version=" + kEvalPlanVersion + ")";
}

std::vector<Index> ReplicaSources(std::span<const Index> dp_rank_by_rank, Index dp_size) {
  CheckAtLeast("dp_size", dp_size, 1);
  const Index ranks = static_cast<Index>(dp_rank_by_rank.size());
  if (dp_size > ranks) {
    ThrowInvalid("dp_ranks", Str(ranks) + " ranks cannot hold " + Str(dp_size) +
                                 " data-parallel ranks (every dp_rank needs a rank)");
  }
  std::vector<Index> sources(static_cast<size_t>(dp_size), -1);
  for (Index g = 0; g < ranks; ++g) {
    const Index d = dp_rank_by_rank[static_cast<size_t>(g)];
    if (d < 0 || d >= dp_size) {
      ThrowInvalid("dp_ranks", "rank " + Str(g) + " has dp_rank " + Str(d) + ", outside [0, " +
                                   Str(dp_size) + ")");
    }
    if (sources[static_cast<size_t>(d)] < 0) sources[static_cast<size_t>(d)] = g;
  }
  for (Index d = 0; d < dp_size; ++d) {
    if (sources[static_cast<size_t>(d)] < 0) {
      ThrowInvalid("dp_ranks", "no rank has dp_rank " + Str(d) + " of " + Str(dp_size) +
                                   " (did every rank build its roles from the same mesh?)");
    }
  }
  return sources;
}

Index StepsForCount(Index max_count, Index batch_size) {
  CheckAtLeast("batch_size", batch_size, 1);
  CheckAtLeast("counts", max_count, 0);
  return CeilDiv(max_count, batch_size);
}

DevicePadding PadForDevices(Index n, Index devices, Index min_device_batch) {
  CheckAtLeast("n", n, 0);
  CheckAtLeast("devices", devices, 1);
  CheckAtLeast("min_device_batch", min_device_batch, 0);
  DevicePadding p;
  p.device_batch = std::max(CeilDiv(n, devices), min_device_batch);
  p.padding =
      CheckedMul(min_device_batch > 0 ? "min_device_batch" : "n", p.device_batch, devices) - n;
  return p;
}

std::string CompareFingerprints(const std::vector<std::uint64_t>& by_rank) {
  std::string differing;
  Index count = 0;
  for (size_t r = 1; r < by_rank.size(); ++r) {
    if (by_rank[r] == by_rank[0]) continue;
    if (++count <= 8) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%zu (%016llx)", differing.empty() ? "" : ", ", r,
                    static_cast<unsigned long long>(by_rank[r]));
      differing += buf;
    }
  }
  if (count == 0) return "";
  char head[160];
  std::snprintf(head, sizeof head,
                "plan fingerprint mismatch: %lld of %zu ranks differ from rank 0 (%016llx): ",
                static_cast<long long>(count), by_rank.size(),
                static_cast<unsigned long long>(by_rank[0]));
  return std::string(head) + "ranks " + differing + (count > 8 ? ", ..." : "") +
         "; every rank must build the plan with the same parameters and shardkit version";
}

namespace {

// "Kind(a=1, b=[0, 5), c=x)" -> kind "Kind" and the fields in order. A field
// starts after ", " followed by a name and '=' (a value may hold ", ").
struct Described {
  std::string kind;
  std::vector<std::pair<std::string, std::string>> fields;
};

Described ParseDescription(std::string_view text) {
  Described d;
  const std::size_t open = text.find('(');
  if (open == std::string_view::npos || text.empty() || text.back() != ')') {
    d.kind = std::string(text);
    return d;
  }
  d.kind = std::string(text.substr(0, open));
  const std::string_view body = text.substr(open + 1, text.size() - open - 2);
  auto name_at = [&](std::size_t i) -> std::size_t {  // length of "name=" at i, or 0
    std::size_t j = i;
    while (j < body.size() && (std::isalnum(static_cast<unsigned char>(body[j])) || body[j] == '_'))
      ++j;
    return j > i && j < body.size() && body[j] == '=' ? j - i : 0;
  };
  std::size_t start = 0;
  while (start < body.size()) {
    std::size_t end = start;
    while (true) {
      end = body.find(", ", end);
      if (end == std::string_view::npos || name_at(end + 2) > 0) break;
      end += 2;
    }
    const std::string_view field =
        body.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    const std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) {
      d.fields.emplace_back(std::string(field), "");
    } else {
      d.fields.emplace_back(std::string(field.substr(0, eq)), std::string(field.substr(eq + 1)));
    }
    if (end == std::string_view::npos) break;
    start = end + 2;
  }
  return d;
}

std::string Article(const std::string& kind) {
  return (!kind.empty() && std::strchr("AEIOU", kind[0]) ? "an " : "a ") + kind;
}

}  // namespace

std::string ComparePlanDescriptions(const std::vector<std::string>& by_rank) {
  std::vector<std::size_t> differing;
  for (std::size_t r = 1; r < by_rank.size(); ++r) {
    if (by_rank[r] != by_rank[0]) differing.push_back(r);
  }
  if (differing.empty()) return "";
  const Described base = ParseDescription(by_rank[0]);
  const std::size_t other = differing.front();
  const Described odd = ParseDescription(by_rank[other]);
  const std::string r = "rank " + std::to_string(other);
  std::string what;
  if (odd.kind != base.kind) {
    what = r + " has " + Article(odd.kind) + " where rank 0 has " + Article(base.kind);
  } else {
    auto find = [](const Described& d, const std::string& name) -> const std::string* {
      for (const auto& [k, v] : d.fields) {
        if (k == name) return &v;
      }
      return nullptr;
    };
    std::vector<std::string> names;
    for (const auto& [k, v] : base.fields) names.push_back(k);
    for (const auto& [k, v] : odd.fields) {
      if (!find(base, k)) names.push_back(k);
    }
    std::string mine, theirs;
    for (const std::string& name : names) {
      const std::string* a = find(base, name);
      const std::string* b = find(odd, name);
      if (a && b && *a == *b) continue;
      if (!mine.empty()) {
        mine += ", ";
        theirs += ", ";
      }
      mine += b ? name + "=" + *b : "no " + name;
      theirs += a ? name + "=" + *a : "no " + name;
    }
    if (mine.empty()) {  // same fields in another spelling: show both texts
      mine = by_rank[other];
      theirs = by_rank[0];
    }
    what = r + " has " + mine + " where rank 0 has " + theirs;
  }
  std::string ranks;
  for (std::size_t i = 0; i < differing.size() && i < 8; ++i) {
    ranks += (i ? ", " : "") + std::to_string(differing[i]);
  }
  if (differing.size() > 8) ranks += ", ...";
  return base.kind + " mismatch: " + what + " (ranks that differ from rank 0: " + ranks +
         "); every rank must build the " + base.kind +
         " with the same parameters and shardkit version";
}

}  // namespace shardkit
