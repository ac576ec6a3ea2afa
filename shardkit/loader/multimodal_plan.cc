#include "shardkit/loader/multimodal_plan.h"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

namespace {

constexpr Index kNoLimit = std::numeric_limits<Index>::max();
constexpr std::string_view kKind = "multimodal_plan";
constexpr int kVersion = 1;
constexpr Index kMaxRowsPerStep = Index{1} << 24;

Index CheckedAdd(Index a, Index b, std::string_view param) {
  Index out;
  if (__builtin_add_overflow(a, b, &out)) ThrowInvalid(param, "sums overflow 64 bits");
  return out;
}

// First fit over packs with three budgets: a segment tree over pack slots
// keeps, per node, the most room of any pack below it in each budget; a
// descent skips every subtree where one budget cannot hold the item.
class FirstFit {
 public:
  FirstFit(Index slots, Index tokens, Index images, Index vision) : cap_{tokens, images, vision} {
    while (size_ < slots) size_ *= 2;
    room_.assign(static_cast<std::size_t>(2 * size_), {0, 0, 0});
  }
  // The lowest pack that holds (t, i, v), opening a new one when none does.
  Index Place(Index t, Index i, Index v) {
    Index p = Find(1, 0, size_, t, i, v);
    if (p < 0) {
      p = open_++;
      Set(p, cap_);
    }
    auto r = room_[static_cast<std::size_t>(size_ + p)];
    Set(p, {r[0] - t, r[1] - i, r[2] - v});
    return p;
  }

 private:
  using Room = std::array<Index, 3>;
  void Set(Index p, Room r) {
    std::size_t k = static_cast<std::size_t>(size_ + p);
    room_[k] = r;
    for (k /= 2; k >= 1; k /= 2) {
      for (int d = 0; d < 3; ++d) room_[k][d] = std::max(room_[2 * k][d], room_[2 * k + 1][d]);
    }
  }
  Index Find(std::size_t node, Index lo, Index hi, Index t, Index i, Index v) const {
    const Room& r = room_[node];
    if (lo >= open_ || r[0] < t || r[1] < i || r[2] < v) return -1;
    if (hi - lo == 1) return lo;
    Index mid = (lo + hi) / 2;
    Index left = Find(2 * node, lo, mid, t, i, v);
    return left >= 0 ? left : Find(2 * node + 1, mid, hi, t, i, v);
  }
  Room cap_;
  Index size_ = 1;
  Index open_ = 0;
  std::vector<Room> room_;
};

}  // namespace

VisionCost ParseVisionCost(std::string_view name) {
  if (name == "tokens") return VisionCost::kTokens;
  if (name == "squared") return VisionCost::kSquared;
  ThrowInvalid("vision_cost", "expected 'tokens' or 'squared', got '" + std::string(name) + "'");
}

MultimodalMode ParseMultimodalMode(std::string_view name) {
  if (name == "pad") return MultimodalMode::kPad;
  if (name == "drop") return MultimodalMode::kDrop;
  ThrowInvalid("mode", "expected 'pad' or 'drop', got '" + std::string(name) + "'");
}

std::string_view VisionCostName(VisionCost cost) {
  return cost == VisionCost::kTokens ? "tokens" : "squared";
}

// The most images SampleTable::Make expands from image_counts alone.
constexpr Index kMaxImplicitImages = Index{1} << 28;

SampleTable SampleTable::Make(std::vector<Index> lengths, std::span<const Index> image_counts,
                              std::vector<Index> vision_tokens) {
  SampleTable t;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    if (lengths[s] < 0)
      ThrowInvalid("lengths", "sample " + Str(static_cast<Index>(s)) + " is negative (" +
                                  Str(lengths[s]) + ")");
  }
  if (!image_counts.empty() && image_counts.size() != lengths.size()) {
    ThrowInvalid("image_counts", "has " + Str(static_cast<Index>(image_counts.size())) +
                                     " entries, lengths " +
                                     Str(static_cast<Index>(lengths.size())));
  }
  t.image_offsets.reserve(lengths.size() + 1);
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    Index c = image_counts.empty() ? 0 : image_counts[s];
    if (c < 0)
      ThrowInvalid("image_counts",
                   "sample " + Str(static_cast<Index>(s)) + " is negative (" + Str(c) + ")");
    t.image_offsets.push_back(CheckedAdd(t.image_offsets.back(), c, "image_counts"));
  }
  Index images = t.image_offsets.back();
  if (vision_tokens.empty()) {
    // One entry per image is allocated here from a count alone: a hostile
    // count (2^31 in one JSON number took 16 GB and 49 s) is refused instead.
    if (images > kMaxImplicitImages) {
      ThrowInvalid("image_counts", Str(images) +
                                       " images in all; without vision_tokens each image takes "
                                       "one entry of the table, at most 2^28 (pass vision_tokens)");
    }
    vision_tokens.assign(static_cast<std::size_t>(images), 1);
  } else if (static_cast<Index>(vision_tokens.size()) != images) {
    ThrowInvalid("vision_tokens", "has " + Str(static_cast<Index>(vision_tokens.size())) +
                                      " entries, the images " + Str(images));
  }
  Index sum = 0;
  for (std::size_t i = 0; i < vision_tokens.size(); ++i) {
    if (vision_tokens[i] < 0)
      ThrowInvalid("vision_tokens", "image " + Str(static_cast<Index>(i)) + " is negative (" +
                                        Str(vision_tokens[i]) + ")");
    sum = CheckedAdd(sum, vision_tokens[i], "vision_tokens");
  }
  t.lengths = std::move(lengths);
  t.vision_tokens = std::move(vision_tokens);
  return t;
}

Index SampleTable::VisionTokens(Index s) const {
  Index sum = 0;
  for (Index i = image_offsets[static_cast<std::size_t>(s)];
       i < image_offsets[static_cast<std::size_t>(s) + 1]; ++i) {
    sum += vision_tokens[static_cast<std::size_t>(i)];
  }
  return sum;
}

double SampleTable::Cost(Index s, VisionCost model) const {
  double sum = 0;
  for (Index i = image_offsets[static_cast<std::size_t>(s)];
       i < image_offsets[static_cast<std::size_t>(s) + 1]; ++i) {
    double v = static_cast<double>(vision_tokens[static_cast<std::size_t>(i)]);
    sum += model == VisionCost::kTokens ? v : v * v;
  }
  return sum;
}

std::string MultimodalStateToJson(const MultimodalState& state) {
  Json::Array segments;
  for (const MultimodalSegment& g : state.segments) {
    segments.push_back(
        Json::MakeArray({Json::Int(g.world_size), Json::Int(g.rows_per_rank), Json::Int(g.steps)}));
  }
  return WriteJson(Json::MakeObject({{"version", Json::Int(kVersion)},
                                     {"kind", Json::String(std::string(kKind))},
                                     {"epoch", Json::Uint(state.epoch)},
                                     {"stream", Json::String(HexDigest(state.stream))},
                                     {"segments", Json::MakeArray(std::move(segments))}}));
}

MultimodalState MultimodalStateFromJson(std::string_view json) {
  Json j = ParseJson(json, "state");
  ExpectType(j, "state", Json::Type::kObject);
  ExpectOnlyKeys(j, "state", {"version", "kind", "epoch", "stream", "segments"});
  if (AsInt64(Field(j, "state", "version"), "state.version") != kVersion) {
    ThrowInvalid("state", "version: expected " + std::to_string(kVersion));
  }
  if (AsString(Field(j, "state", "kind"), "state.kind") != kKind) {
    ThrowInvalid("state", "kind: expected '" + std::string(kKind) + "'");
  }
  MultimodalState s;
  s.epoch = AsUint64(Field(j, "state", "epoch"), "state.epoch");
  const std::string& hex = AsString(Field(j, "state", "stream"), "state.stream");
  if (!ParseHexDigest(hex, &s.stream)) ThrowInvalid("state", "stream: expected 16 hex digits");
  const Json::Array& segments = AsArray(Field(j, "state", "segments"), "state.segments");
  for (std::size_t k = 0; k < segments.size(); ++k) {
    std::string path = "state.segments[" + std::to_string(k) + "]";
    const Json::Array& g = AsArray(segments[k], path);
    if (g.size() != 3) ThrowAtPath(path, "expected [world_size, rows_per_rank, steps]");
    MultimodalSegment seg{AsInt64(g[0], path + "[0]"), AsInt64(g[1], path + "[1]"),
                          AsInt64(g[2], path + "[2]")};
    if (seg.world_size < 1 || seg.rows_per_rank < 1 || seg.steps < 0) {
      ThrowAtPath(path, "expected world_size >= 1, rows_per_rank >= 1, steps >= 0");
    }
    s.segments.push_back(seg);
  }
  return s;
}

MultimodalPlan::MultimodalPlan(SampleTable table, const MultimodalOptions& options,
                               std::optional<MultimodalState> state)
    : table_(std::move(table)), options_(options) {
  const MultimodalOptions& o = options_;
  CheckAtLeast("seq_len", o.seq_len, 1);
  CheckAtLeast("rows_per_rank", o.rows_per_rank, 1);
  CheckAtLeast("world_size", o.world_size, 1);
  if (o.max_images) CheckAtLeast("max_images", *o.max_images, 0);
  if (o.max_vision_tokens) CheckAtLeast("max_vision_tokens", *o.max_vision_tokens, 0);
  if (o.max_images_per_sample) CheckAtLeast("max_images_per_sample", *o.max_images_per_sample, 0);
  // The deal holds every row of every step: bound the rows of one step. The
  // error names world_size when it alone is over the bound, else rows_per_rank.
  if (o.world_size > kMaxRowsPerStep) {
    ThrowInvalid("world_size", Str(o.world_size) + " ranks, more than " + Str(kMaxRowsPerStep) +
                                   " rows per step");
  }
  if (o.rows_per_rank > kMaxRowsPerStep / o.world_size) {
    ThrowInvalid("rows_per_rank", Str(o.rows_per_rank) + " rows per rank x " + Str(o.world_size) +
                                      " ranks is more than " + Str(kMaxRowsPerStep) +
                                      " rows per step");
  }
  const Index n = table_.size();
  if (static_cast<Index>(table_.image_offsets.size()) != n + 1 ||
      table_.image_offsets.back() != static_cast<Index>(table_.vision_tokens.size())) {
    ThrowInvalid("table", "image_offsets do not match lengths and vision_tokens");
  }

  Hasher h(0x6d6d706c616e);  // "mmplan"
  h.Add(static_cast<std::uint64_t>(n));
  for (Index v : table_.lengths) h.Add(static_cast<std::uint64_t>(v));
  for (Index v : table_.image_offsets) h.Add(static_cast<std::uint64_t>(v));
  for (Index v : table_.vision_tokens) h.Add(static_cast<std::uint64_t>(v));
  for (const std::optional<Index>& v :
       {o.max_images, o.max_vision_tokens, o.max_images_per_sample}) {
    h.Add(v ? static_cast<std::uint64_t>(*v) : ~std::uint64_t{0});
  }
  h.Add(static_cast<std::uint64_t>(o.seq_len));
  h.Add(static_cast<std::uint64_t>(o.vision_cost));
  h.Add(static_cast<std::uint64_t>(o.mode));
  h.Add(o.shuffle ? 1 : 0);
  h.Add(o.seed);
  stream_ = h.Finish();

  // Order, eligibility, and first-fit decreasing.
  std::vector<Index> order(static_cast<std::size_t>(n));
  if (o.shuffle && n > 0) {
    Permutation perm(n, o.seed, o.epoch);
    perm.Fill(0, 1, n, order.data());
  } else {
    std::iota(order.begin(), order.end(), Index{0});
  }
  const Index max_images = o.max_images.value_or(kNoLimit);
  const Index max_vision = o.max_vision_tokens.value_or(kNoLimit);
  const Index per_sample = o.max_images_per_sample.value_or(kNoLimit);
  std::vector<Index> vision(static_cast<std::size_t>(n));
  std::vector<Index> eligible;
  eligible.reserve(order.size());
  for (Index s : order) {
    Index v = vision[static_cast<std::size_t>(s)] = table_.VisionTokens(s);
    Index images = table_.Images(s);
    if (table_.lengths[static_cast<std::size_t>(s)] > o.seq_len || images > max_images ||
        images > per_sample || v > max_vision) {
      dropped_.push_back(s);
    } else {
      eligible.push_back(s);
    }
  }
  std::stable_sort(eligible.begin(), eligible.end(), [&](Index a, Index b) {
    return table_.lengths[static_cast<std::size_t>(a)] >
           table_.lengths[static_cast<std::size_t>(b)];
  });
  FirstFit fit(static_cast<Index>(eligible.size()), o.seq_len, max_images, max_vision);
  std::vector<Index> pack_of(eligible.size());
  Index packs = 0;
  for (std::size_t k = 0; k < eligible.size(); ++k) {
    Index s = eligible[k];
    pack_of[k] = fit.Place(table_.lengths[static_cast<std::size_t>(s)], table_.Images(s),
                           vision[static_cast<std::size_t>(s)]);
    packs = std::max(packs, pack_of[k] + 1);
  }
  pack_offsets_.assign(static_cast<std::size_t>(packs) + 1, 0);
  for (Index p : pack_of) ++pack_offsets_[static_cast<std::size_t>(p) + 1];
  for (Index p = 0; p < packs; ++p) {
    pack_offsets_[static_cast<std::size_t>(p) + 1] += pack_offsets_[static_cast<std::size_t>(p)];
  }
  pack_samples_.resize(eligible.size());
  pack_tokens_.assign(static_cast<std::size_t>(packs), 0);
  pack_cost_.assign(static_cast<std::size_t>(packs), 0);
  std::vector<Index> fill(pack_offsets_.begin(), pack_offsets_.end() - 1);
  for (std::size_t k = 0; k < eligible.size(); ++k) {
    auto p = static_cast<std::size_t>(pack_of[k]);
    Index s = eligible[k];
    pack_samples_[static_cast<std::size_t>(fill[p]++)] = s;
    pack_tokens_[p] += table_.lengths[static_cast<std::size_t>(s)];
    pack_cost_[p] += table_.Cost(s, o.vision_cost);
    summary_.images += table_.Images(s);
  }
  summary_.samples = n;
  summary_.dropped = static_cast<Index>(dropped_.size());
  summary_.packs = packs;
  summary_.tokens = std::accumulate(pack_tokens_.begin(), pack_tokens_.end(), Index{0});

  // Replay the history: each finished segment removes the packs it ran.
  std::vector<Index> remaining(static_cast<std::size_t>(packs));
  std::iota(remaining.begin(), remaining.end(), Index{0});
  if (state) {
    if (state->stream != stream_) {
      ThrowInvalid("state", "was made for another sample table or other options (stream " +
                                HexDigest(state->stream) + ", this plan " + HexDigest(stream_) +
                                ")");
    }
    if (state->epoch != o.epoch) {
      ThrowInvalid("state", "is at epoch " + std::to_string(state->epoch) +
                                ", the plan's epoch is " + std::to_string(o.epoch));
    }
    history_ = state->segments;
  }
  if (!history_.empty() && history_.back().world_size == o.world_size &&
      history_.back().rows_per_rank == o.rows_per_rank) {
    start_step_ = history_.back().steps;
    history_.pop_back();
  }
  std::uint64_t salt = 0;
  for (const MultimodalSegment& g : history_) {
    Index steps = 0;
    std::vector<Index> deal = Deal(remaining, g.world_size, g.rows_per_rank, salt++, &steps);
    if (g.steps > steps) {
      ThrowInvalid("state", "a segment ran " + Str(g.steps) + " steps of a deal of " + Str(steps));
    }
    std::vector<char> ran(static_cast<std::size_t>(packs), 0);
    for (Index k = 0; k < g.steps * g.world_size * g.rows_per_rank; ++k) {
      Index p = deal[static_cast<std::size_t>(k)];
      if (p >= 0) ran[static_cast<std::size_t>(p)] = 1;
    }
    std::erase_if(remaining, [&](Index p) { return ran[static_cast<std::size_t>(p)] != 0; });
  }
  Index steps = 0;
  deal_ = Deal(remaining, o.world_size, o.rows_per_rank, salt, &steps);
  if (start_step_ > steps) {
    ThrowInvalid("state", "ran " + Str(start_step_) + " steps of a deal of " + Str(steps));
  }
  summary_.num_steps = steps - start_step_;
  const Index g = o.world_size * o.rows_per_rank;
  Index full = static_cast<Index>(remaining.size()) / g;
  Index rest = static_cast<Index>(remaining.size()) - full * g;
  if (o.mode == MultimodalMode::kPad) {
    summary_.filler_rows = rest ? g - rest : 0;
  } else {
    summary_.dropped_packs = rest;
    // The deal lists every pack it runs; the rest are the dropped ones.
    std::vector<char> dealt(static_cast<std::size_t>(packs), 0);
    for (Index p : deal_) {
      if (p >= 0) dealt[static_cast<std::size_t>(p)] = 1;
    }
    for (Index p : remaining) {
      if (!dealt[static_cast<std::size_t>(p)])
        summary_.dropped_samples += static_cast<Index>(PackSamples(p).size());
    }
  }

  // Balance of the steps of this plan.
  Index counted = 0;
  double token_sum = 0, vision_sum = 0;
  balance_.max_token_ratio = balance_.max_vision_ratio = 1;
  for (Index s = start_step_; s < steps; ++s) {
    double tmax = 0, tsum = 0, vmax = 0, vsum = 0;
    bool filler = false;
    for (Index r = 0; r < o.world_size; ++r) {
      double t = 0, v = 0;
      for (Index k = 0; k < o.rows_per_rank; ++k) {
        Index p = deal_[static_cast<std::size_t>((s * o.world_size + r) * o.rows_per_rank + k)];
        if (p < 0) {
          filler = true;
          continue;
        }
        t += static_cast<double>(PackTokens(p));
        v += PackCost(p);
      }
      tmax = std::max(tmax, t), tsum += t, vmax = std::max(vmax, v), vsum += v;
    }
    double w = static_cast<double>(o.world_size);
    double tr = tsum > 0 ? tmax * w / tsum : 1, vr = vsum > 0 ? vmax * w / vsum : 1;
    balance_.token_ratio.push_back(tr);
    balance_.vision_ratio.push_back(vr);
    if (!filler) {
      ++counted, token_sum += tr, vision_sum += vr;
      balance_.max_token_ratio = std::max(balance_.max_token_ratio, tr);
      balance_.max_vision_ratio = std::max(balance_.max_vision_ratio, vr);
    }
  }
  if (counted > 0) {
    balance_.mean_token_ratio = token_sum / static_cast<double>(counted);
    balance_.mean_vision_ratio = vision_sum / static_cast<double>(counted);
  }
}

std::vector<Index> MultimodalPlan::Deal(const std::vector<Index>& packs, Index world_size,
                                        Index rows, std::uint64_t salt, Index* steps) const {
  const Index g = world_size * rows;
  std::vector<Index> sorted = packs;
  std::sort(sorted.begin(), sorted.end(), [&](Index a, Index b) {
    double ca = PackCost(a), cb = PackCost(b);
    if (ca != cb) return ca > cb;
    if (PackTokens(a) != PackTokens(b)) return PackTokens(a) > PackTokens(b);
    return a < b;
  });
  const Index n = static_cast<Index>(sorted.size());
  const Index full = n / g;
  const bool partial = n % g != 0 && options_.mode == MultimodalMode::kPad;
  *steps = full + (partial ? 1 : 0);
  std::vector<Index> out(static_cast<std::size_t>(*steps * g), -1);
  // Group k of the sorted packs runs as step order[k].
  std::vector<Index> order(static_cast<std::size_t>(full));
  if (options_.shuffle && full > 0) {
    Permutation perm(full, Hasher::Mix(options_.seed ^ Hasher::Mix(salt)), options_.epoch);
    for (Index k = 0; k < full; ++k) order[static_cast<std::size_t>(perm.Forward(k))] = k;
  } else {
    std::iota(order.begin(), order.end(), Index{0});
  }
  std::vector<double> cost(static_cast<std::size_t>(world_size));
  std::vector<Index> tokens(static_cast<std::size_t>(world_size));
  std::vector<std::vector<Index>> mine(cost.size());
  for (Index k = 0; k < *steps; ++k) {
    Index step = k < full ? order[static_cast<std::size_t>(k)] : full;
    std::fill(cost.begin(), cost.end(), 0.0);
    std::fill(tokens.begin(), tokens.end(), 0);
    for (auto& m : mine) m.clear();
    for (Index j = k * g; j < std::min(n, (k + 1) * g); ++j) {
      Index p = sorted[static_cast<std::size_t>(j)], best = -1;
      for (Index r = 0; r < world_size; ++r) {
        auto ur = static_cast<std::size_t>(r);
        if (static_cast<Index>(mine[ur].size()) == rows) continue;
        if (best < 0 || cost[ur] < cost[static_cast<std::size_t>(best)] ||
            (cost[ur] == cost[static_cast<std::size_t>(best)] &&
             tokens[ur] < tokens[static_cast<std::size_t>(best)])) {
          best = r;
        }
      }
      auto b = static_cast<std::size_t>(best);
      cost[b] += PackCost(p), tokens[b] += PackTokens(p);
      mine[b].push_back(p);
    }
    for (Index r = 0; r < world_size; ++r) {
      auto& m = mine[static_cast<std::size_t>(r)];
      std::sort(m.begin(), m.end());
      for (std::size_t q = 0; q < m.size(); ++q) {
        out[static_cast<std::size_t>((step * world_size + r) * rows) + q] = m[q];
      }
    }
  }
  return out;
}

std::span<const Index> MultimodalPlan::PackSamples(Index p) const {
  auto b = static_cast<std::size_t>(pack_offsets_[static_cast<std::size_t>(p)]);
  auto e = static_cast<std::size_t>(pack_offsets_[static_cast<std::size_t>(p) + 1]);
  return std::span<const Index>(pack_samples_).subspan(b, e - b);
}

std::vector<Index> MultimodalPlan::RowPacks(Index rank, Index step) const {
  CheckIndex("rank", rank, 0, options_.world_size);
  CheckIndex("step", step, 0, summary_.num_steps);
  std::vector<Index> out(static_cast<std::size_t>(options_.rows_per_rank));
  Index s = start_step_ + step;
  for (Index k = 0; k < options_.rows_per_rank; ++k) {
    out[static_cast<std::size_t>(k)] = deal_[static_cast<std::size_t>(
        (s * options_.world_size + rank) * options_.rows_per_rank + k)];
  }
  return out;
}

std::vector<std::vector<Index>> MultimodalPlan::Rows(Index rank, Index step) const {
  std::vector<std::vector<Index>> rows;
  for (Index p : RowPacks(rank, step)) {
    if (p < 0) {
      rows.emplace_back();
    } else {
      std::span<const Index> s = PackSamples(p);
      rows.emplace_back(s.begin(), s.end());
    }
  }
  return rows;
}

std::uint64_t MultimodalPlan::Fingerprint() const {
  Hasher h(stream_);
  h.Add(static_cast<std::uint64_t>(options_.world_size));
  h.Add(static_cast<std::uint64_t>(options_.rows_per_rank));
  h.Add(static_cast<std::uint64_t>(start_step_));
  h.Add(options_.epoch);
  for (const MultimodalSegment& g : history_) {
    h.Add(static_cast<std::uint64_t>(g.world_size));
    h.Add(static_cast<std::uint64_t>(g.rows_per_rank));
    h.Add(static_cast<std::uint64_t>(g.steps));
  }
  return h.Finish();
}

MultimodalState MultimodalPlan::StateAfter(Index steps_done) const {
  CheckIndex("steps_done", steps_done, 0, summary_.num_steps + 1);
  MultimodalState s{options_.epoch, stream_, history_};
  s.segments.push_back({options_.world_size, options_.rows_per_rank, start_step_ + steps_done});
  return s;
}

}  // namespace shardkit
