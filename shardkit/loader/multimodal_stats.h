// What each rank runs at each step of a MultimodalPlan (multimodal_plan.h):
// LM tokens, images and vision cost per step per rank, for the plan's own
// deal ("after" balancing) and for the round-robin deal of the same packs
// ("before"), with the per-step heaviest rank / mean rank of each. The
// numbers of `shardkit multimodal-stats` and its picture.
//
// Round-robin deal: the packs the plan runs, in pack-id order (first-fit
// decreasing order: longest first sample first), q_0, q_1, ...; with
// G = world_size * rows_per_rank, pack q_j runs at step j / G on rank
// j % world_size, row (j % G) / world_size: a deal that ignores vision cost,
// as a token-only packer or a per-rank sampler would. Its last step is
// completed with filler rows exactly where the plan's is (the same number
// of packs and steps).
//
// Also here: the sample table read from JSON (the dict Python's
// `sample_table()` returns) and from WebDataset tar shards (tar_shard.h),
// each image's vision tokens from its size by a named rule.
//
// Thread-safety: pure functions over immutable inputs.
#ifndef SHARDKIT_LOADER_MULTIMODAL_STATS_H_
#define SHARDKIT_LOADER_MULTIMODAL_STATS_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/loader/multimodal_plan.h"
#include "shardkit/loader/tar_shard.h"

namespace shardkit {

enum class MultimodalDeal { kPlan, kRoundRobin };
// "plan", "round_robin".
[[nodiscard]] std::string_view MultimodalDealName(MultimodalDeal deal);

// Per step, the heaviest rank / the mean rank (1 when the mean is 0), and the
// mean and max of those over the steps without filler rows (1 when none).
struct StepRatios {
  std::vector<double> per_step;
  double mean = 1, max = 1;
};

struct MultimodalDealStats {
  MultimodalDeal deal = MultimodalDeal::kPlan;
  Index world_size = 1, rows_per_rank = 1, num_steps = 0, seq_len = 0;
  // [step * world_size + rank]: what the rank's rows hold at that step.
  std::vector<Index> tokens, images;
  std::vector<double> vision;  // the plan's vision cost (tokens or squared)
  std::vector<char> filler;    // per step: 1 when a row of it is a filler row
  StepRatios token_ratio, image_ratio, vision_ratio;
  // 1 - tokens / (num_steps * world_size * rows_per_rank * seq_len): filler
  // rows count as padding.
  double padding = 0;
};

// The stats of `plan`'s steps (from its resume point on) under `deal`.
[[nodiscard]] MultimodalDealStats DealStats(const MultimodalPlan& plan, MultimodalDeal deal);

// Reads {"lengths": [L, ...], "vision_tokens": [[v, ...], ...]} (one list per
// sample, one number per image; Python's sample_table()) or {"lengths": [...],
// "image_counts": [c, ...]} (1 vision token per image), or lengths alone (no
// images). Other keys are refused. Throws invalid_argument naming `param`
// and the field ("table: vision_tokens[3][1]: expected an integer ...").
[[nodiscard]] SampleTable SampleTableFromJson(std::string_view json, std::string_view param);

// How an image's vision tokens follow from its height and width
// (vision_tokens.h, default options): 1 per image, Qwen2-VL's smart_resize,
// or nanoVLM's tiles.
enum class VisionRule { kOne, kQwen, kTile };
// "one", "qwen", "tile"; Parse throws invalid_argument naming `vision_rule`.
[[nodiscard]] VisionRule ParseVisionRule(std::string_view name);
[[nodiscard]] std::vector<std::string_view> VisionRuleNames();

// The sample table of tar shards read in order: lengths = text tokens (plus
// every image's vision tokens with `inline_vision`: models that put the image
// tokens in the LM sequence), vision tokens by `rule` from each image's
// header size. Throws invalid_argument naming `vision_rule` and the shard,
// sample and image whose size the rule refuses.
[[nodiscard]] SampleTable SampleTableFromTar(std::span<const TarShard> shards, VisionRule rule,
                                             bool inline_vision);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_MULTIMODAL_STATS_H_
