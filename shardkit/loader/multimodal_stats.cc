#include "shardkit/loader/multimodal_stats.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "shardkit/base/json.h"
#include "shardkit/loader/vision_tokens.h"

namespace shardkit {

namespace {

// Per-step heaviest / mean over `values` [step * world + rank].
template <typename T>
StepRatios Ratios(const std::vector<T>& values, const std::vector<char>& filler, Index world) {
  StepRatios out;
  double sum = 0;
  Index counted = 0;
  const auto steps = static_cast<Index>(filler.size());
  for (Index s = 0; s < steps; ++s) {
    double top = 0, total = 0;
    for (Index r = 0; r < world; ++r) {
      auto v = static_cast<double>(values[static_cast<std::size_t>(s * world + r)]);
      top = std::max(top, v), total += v;
    }
    double ratio = total > 0 ? top * static_cast<double>(world) / total : 1;
    out.per_step.push_back(ratio);
    if (!filler[static_cast<std::size_t>(s)]) {
      ++counted, sum += ratio;
      out.max = counted == 1 ? ratio : std::max(out.max, ratio);
    }
  }
  if (counted > 0) out.mean = sum / static_cast<double>(counted);
  return out;
}

}  // namespace

std::string_view MultimodalDealName(MultimodalDeal deal) {
  return deal == MultimodalDeal::kPlan ? "plan" : "round_robin";
}

MultimodalDealStats DealStats(const MultimodalPlan& plan, MultimodalDeal deal) {
  const MultimodalOptions& o = plan.options();
  const SampleTable& table = plan.table();
  MultimodalDealStats st;
  st.deal = deal;
  st.world_size = o.world_size;
  st.rows_per_rank = o.rows_per_rank;
  st.num_steps = plan.num_steps();
  st.seq_len = o.seq_len;
  const Index w = o.world_size, rows = o.rows_per_rank, g = w * rows;
  // [step][rank][row] pack ids, -1 for filler.
  std::vector<Index> slots(static_cast<std::size_t>(st.num_steps * g), -1);
  for (Index s = 0; s < st.num_steps; ++s) {
    for (Index r = 0; r < w; ++r) {
      std::vector<Index> packs = plan.RowPacks(r, s);
      std::copy(packs.begin(), packs.end(), slots.begin() + (s * w + r) * rows);
    }
  }
  if (deal == MultimodalDeal::kRoundRobin) {
    std::vector<Index> packs;
    for (Index p : slots) {
      if (p >= 0) packs.push_back(p);
    }
    std::sort(packs.begin(), packs.end());
    std::fill(slots.begin(), slots.end(), -1);
    for (std::size_t j = 0; j < packs.size(); ++j) {
      const auto k = static_cast<Index>(j);
      const Index step = k / g, rank = k % w, row = (k % g) / w;
      slots[static_cast<std::size_t>((step * w + rank) * rows + row)] = packs[j];
    }
  }
  const auto cells = static_cast<std::size_t>(st.num_steps * w);
  st.tokens.assign(cells, 0);
  st.images.assign(cells, 0);
  st.vision.assign(cells, 0.0);
  st.filler.assign(static_cast<std::size_t>(st.num_steps), 0);
  Index total = 0;
  for (Index s = 0; s < st.num_steps; ++s) {
    for (Index r = 0; r < w; ++r) {
      const auto cell = static_cast<std::size_t>(s * w + r);
      for (Index k = 0; k < rows; ++k) {
        const Index p = slots[static_cast<std::size_t>((s * w + r) * rows + k)];
        if (p < 0) {
          st.filler[static_cast<std::size_t>(s)] = 1;
          continue;
        }
        st.tokens[cell] += plan.PackTokens(p);
        st.vision[cell] += plan.PackCost(p);
        for (Index sample : plan.PackSamples(p)) st.images[cell] += table.Images(sample);
      }
      total += st.tokens[cell];
    }
  }
  st.token_ratio = Ratios(st.tokens, st.filler, w);
  st.image_ratio = Ratios(st.images, st.filler, w);
  st.vision_ratio = Ratios(st.vision, st.filler, w);
  const double capacity =
      static_cast<double>(st.num_steps) * static_cast<double>(g) * static_cast<double>(o.seq_len);
  st.padding = capacity > 0 ? 1 - static_cast<double>(total) / capacity : 0;
  return st;
}

SampleTable SampleTableFromJson(std::string_view json, std::string_view param) {
  const std::string p(param);
  Json j = ParseJson(json, param);
  ExpectType(j, p, Json::Type::kObject);
  ExpectOnlyKeys(j, p, {"lengths", "vision_tokens", "image_counts"});
  std::vector<Index> lengths;
  for (const Json& v : AsArray(Field(j, p, "lengths"), p + ".lengths")) {
    lengths.push_back(AsInt64(v, p + ".lengths[" + std::to_string(lengths.size()) + "]"));
  }
  const Json* vision = j.Find("vision_tokens");
  const Json* counts = j.Find("image_counts");
  if (vision != nullptr && counts != nullptr) {
    ThrowInvalid(param, "give vision_tokens (one list per sample) or image_counts, not both");
  }
  std::vector<Index> image_counts, flat;
  if (vision != nullptr) {
    const Json::Array& per_sample = AsArray(*vision, p + ".vision_tokens");
    for (std::size_t s = 0; s < per_sample.size(); ++s) {
      const std::string at = p + ".vision_tokens[" + std::to_string(s) + "]";
      const Json::Array& images = AsArray(per_sample[s], at);
      image_counts.push_back(static_cast<Index>(images.size()));
      for (std::size_t i = 0; i < images.size(); ++i) {
        flat.push_back(AsInt64(images[i], at + "[" + std::to_string(i) + "]"));
      }
    }
  } else if (counts != nullptr) {
    for (const Json& v : AsArray(*counts, p + ".image_counts")) {
      image_counts.push_back(
          AsInt64(v, p + ".image_counts[" + std::to_string(image_counts.size()) + "]"));
    }
  }
  if (!image_counts.empty() && image_counts.size() != lengths.size()) {
    ThrowInvalid(param, std::string(vision != nullptr ? "vision_tokens" : "image_counts") +
                            " has " + Str(static_cast<Index>(image_counts.size())) +
                            " samples, lengths " + Str(static_cast<Index>(lengths.size())));
  }
  try {
    return SampleTable::Make(std::move(lengths), image_counts, std::move(flat));
  } catch (const std::invalid_argument& e) {
    ThrowInvalid(param, e.what());
  }
}

VisionRule ParseVisionRule(std::string_view name) {
  if (name == "one") return VisionRule::kOne;
  if (name == "qwen") return VisionRule::kQwen;
  if (name == "tile") return VisionRule::kTile;
  ThrowInvalid("vision_rule", "expected 'one', 'qwen' or 'tile', got '" + std::string(name) + "'");
}

std::vector<std::string_view> VisionRuleNames() { return {"one", "qwen", "tile"}; }

SampleTable SampleTableFromTar(std::span<const TarShard> shards, VisionRule rule,
                               bool inline_vision) {
  std::vector<Index> lengths, counts, vision;
  for (const TarShard& shard : shards) {
    std::span<const Index> heights = shard.image_heights(), widths = shard.image_widths();
    std::span<const Index> start = shard.image_start();
    for (Index s = 0; s < shard.num_samples(); ++s) {
      Index length = shard.tokens(s);
      for (Index i = start[s]; i < start[s + 1]; ++i) {
        Index v = 1;
        try {
          if (rule == VisionRule::kQwen) v = QwenVisionTokens(heights[i], widths[i]).tokens;
          if (rule == VisionRule::kTile) v = TileVisionTokens(heights[i], widths[i]).tokens;
        } catch (const std::invalid_argument& e) {
          ThrowInvalid("vision_rule", "'" + shard.path() + "' sample " + Str(s) + " (" +
                                          shard.key(s) + "), image " + Str(i - start[s]) + ": " +
                                          e.what());
        }
        vision.push_back(v);
        if (inline_vision) length = CheckedAdd("lengths", length, v);
      }
      lengths.push_back(length);
      counts.push_back(shard.num_images(s));
    }
  }
  return SampleTable::Make(std::move(lengths), counts, std::move(vision));
}

}  // namespace shardkit
