// MultimodalPlan: equal steps for image-text samples, with each step's vision
// work balanced across ranks.
//
// A sample has `length` LM tokens (image tokens included where the model
// inlines them) and zero or more images, image i costing vision_tokens[i]
// tokens of the vision encoder. The plan of one epoch:
//
//   order   samples in the keyed Permutation of (seed, epoch), or 0..N-1.
//   drop    a sample that can never fit (length > seq_len, images >
//           max_images or > max_images_per_sample, vision tokens >
//           max_vision_tokens) is dropped and counted, never packed.
//   pack    first-fit decreasing over the whole epoch: samples by decreasing
//           length (ties: earlier in the order), each into the lowest-numbered
//           pack where all three budgets hold (seq_len tokens, max_images
//           images, max_vision_tokens vision tokens), else a new pack.
//           Samples are never split. The packs depend on the samples and
//           the packing options only, never on the world size or batch size.
//   deal    packs by decreasing vision cost (ties: more tokens, lower pack
//           id) are cut into groups of G = world_size * rows_per_rank
//           consecutive packs, one group per step (similar costs together);
//           inside a group each pack goes to the rank with the least vision
//           cost that has a free row (ties: fewer tokens, lower rank); a
//           rank's rows are in pack-id order. Full steps run in a keyed
//           random order (shuffle) or heaviest first; the partial group is
//           the last step, completed with filler rows (pad) or dropped and
//           counted (drop).
//   cost    of a pack: the sum of its images' vision tokens (kTokens), or of
//           their squares (kSquared: attention-bound encoders, one image
//           attends to itself).
//
// State and elastic resume: a run's position is its history of segments
// (world_size, rows_per_rank, steps run). Segment 0 deals every pack; each
// later segment deals the packs no earlier segment ran, in pack-id order, with
// its own world size and batch size. A plan built from a state whose last
// segment has this plan's world size and rows continues it (exact resume);
// otherwise a new segment starts with the packs not yet run (elastic resume:
// every remaining sample exactly once). The history has one entry per change
// of shape, so it stays small.
//
// Cost: O(N log N + P log P) per segment in history; O(P) memory.
// Thread-safety: immutable after construction.
#ifndef SHARDKIT_LOADER_MULTIMODAL_PLAN_H_
#define SHARDKIT_LOADER_MULTIMODAL_PLAN_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit {

enum class VisionCost { kTokens, kSquared };
// "tokens", "squared"; Parse throws invalid_argument naming `vision_cost`.
[[nodiscard]] VisionCost ParseVisionCost(std::string_view name);
[[nodiscard]] std::string_view VisionCostName(VisionCost cost);

// The sample table: sample s has lengths[s] LM tokens and the images
// [image_offsets[s], image_offsets[s + 1]) of vision_tokens.
struct SampleTable {
  std::vector<Index> lengths;
  std::vector<Index> image_offsets = {0};
  std::vector<Index> vision_tokens;

  // From per-sample image counts and per-image vision tokens (sum(image_counts)
  // entries; empty: 1 per image). Throws invalid_argument naming `lengths`,
  // `image_counts` or `vision_tokens` for a negative value, a size mismatch
  // or an overflowing sum, and naming `image_counts` when vision_tokens is
  // empty and the counts add up to more than 2^28 images (the 1-per-image
  // table would be allocated from a few numbers).
  static SampleTable Make(std::vector<Index> lengths, std::span<const Index> image_counts,
                          std::vector<Index> vision_tokens);

  [[nodiscard]] Index size() const { return static_cast<Index>(lengths.size()); }
  [[nodiscard]] Index Images(Index s) const {
    return image_offsets[static_cast<std::size_t>(s) + 1] -
           image_offsets[static_cast<std::size_t>(s)];
  }
  [[nodiscard]] Index VisionTokens(Index s) const;
  [[nodiscard]] double Cost(Index s, VisionCost model) const;
};

enum class MultimodalMode { kPad, kDrop };
// "pad", "drop"; Parse throws invalid_argument naming `mode`.
[[nodiscard]] MultimodalMode ParseMultimodalMode(std::string_view name);

struct MultimodalOptions {
  Index seq_len = 0;                           // REQUIRES >= 1
  Index rows_per_rank = 1;                     // rows per rank per step; >= 1
  Index world_size = 1;                        // >= 1
  std::optional<Index> max_images;             // images per pack; >= 0
  std::optional<Index> max_vision_tokens;      // vision tokens per pack; >= 0
  std::optional<Index> max_images_per_sample;  // larger samples dropped; >= 0
  VisionCost vision_cost = VisionCost::kTokens;
  MultimodalMode mode = MultimodalMode::kPad;
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
};

// One segment of a run's history: `steps` steps run with this shape.
struct MultimodalSegment {
  Index world_size = 1;
  Index rows_per_rank = 1;
  Index steps = 0;
  friend bool operator==(const MultimodalSegment&, const MultimodalSegment&) = default;
};

// Where a run stands. `stream` fingerprints the sample table and every option
// but world_size and rows_per_rank; a plan refuses a state of another stream.
// JSON: {"version": 1, "kind": "multimodal_plan", "epoch": E,
//        "stream": "<16 hex>", "segments": [[W, R, S], ...]}
struct MultimodalState {
  std::uint64_t epoch = 0;
  std::uint64_t stream = 0;
  std::vector<MultimodalSegment> segments;
  friend bool operator==(const MultimodalState&, const MultimodalState&) = default;
};
[[nodiscard]] std::string MultimodalStateToJson(const MultimodalState& state);
// Throws invalid_argument naming `state` for anything but the format above.
[[nodiscard]] MultimodalState MultimodalStateFromJson(std::string_view json);

// Per-step balance of one plan: heaviest rank / mean rank (1 when the mean is
// 0), for LM tokens and for vision cost.
struct MultimodalBalance {
  std::vector<double> token_ratio;   // per step
  std::vector<double> vision_ratio;  // per step
  // Over the steps without filler rows (all steps when none has filler).
  double mean_token_ratio = 1, max_token_ratio = 1;
  double mean_vision_ratio = 1, max_vision_ratio = 1;
};

struct MultimodalSummary {
  Index samples = 0;          // in the table
  Index dropped = 0;          // samples dropped as oversize
  Index packs = 0;            // packs of the epoch
  Index tokens = 0;           // LM tokens in packs
  Index images = 0;           // images in packs
  Index num_steps = 0;        // steps of this plan (from its first step)
  Index filler_rows = 0;      // pad: rows of the last step without a pack
  Index dropped_packs = 0;    // drop: packs of the final partial group
  Index dropped_samples = 0;  // drop: samples in those packs
};

class MultimodalPlan {
 public:
  // Throws invalid_argument naming the option (seq_len, rows_per_rank,
  // world_size, max_images, max_vision_tokens, max_images_per_sample;
  // world_size or rows_per_rank when world_size * rows_per_rank is over
  // 2^24 rows per step) or
  // `state` (another stream or epoch, a segment with steps beyond its deal).
  MultimodalPlan(SampleTable table, const MultimodalOptions& options,
                 std::optional<MultimodalState> state = std::nullopt);

  // Steps from the resume point on, numbered from 0.
  [[nodiscard]] Index num_steps() const { return summary_.num_steps; }
  // The sample ids of each of `rank`'s rows in step `step` (a filler row is
  // empty), samples within a row by decreasing length (placement order).
  // Throws out_of_range naming `rank` or `step`.
  [[nodiscard]] std::vector<std::vector<Index>> Rows(Index rank, Index step) const;
  // The pack id of each of rank's rows in step (-1: filler).
  [[nodiscard]] std::vector<Index> RowPacks(Index rank, Index step) const;
  // The state after `steps_done` steps of this plan (0 <= steps_done <=
  // num_steps(); out_of_range naming `steps_done` otherwise).
  [[nodiscard]] MultimodalState StateAfter(Index steps_done) const;

  [[nodiscard]] const MultimodalSummary& summary() const { return summary_; }
  [[nodiscard]] const MultimodalBalance& balance() const { return balance_; }
  [[nodiscard]] std::span<const Index> dropped_samples() const { return dropped_; }
  [[nodiscard]] const SampleTable& table() const { return table_; }
  [[nodiscard]] const MultimodalOptions& options() const { return options_; }
  [[nodiscard]] std::uint64_t stream() const { return stream_; }
  // The stream, the world size, the rows per rank and the resume point: ranks
  // that will run the same steps together hold the same fingerprint.
  [[nodiscard]] std::uint64_t Fingerprint() const;
  // Pack p's samples, and its LM tokens and vision cost. REQUIRES 0 <= p <
  // summary().packs (unchecked).
  [[nodiscard]] std::span<const Index> PackSamples(Index p) const;
  [[nodiscard]] Index PackTokens(Index p) const {
    return pack_tokens_[static_cast<std::size_t>(p)];
  }
  [[nodiscard]] double PackCost(Index p) const { return pack_cost_[static_cast<std::size_t>(p)]; }

 private:
  // The deal of `packs` (ids) with world W and R rows: step-major, rank, row.
  [[nodiscard]] std::vector<Index> Deal(const std::vector<Index>& packs, Index world_size,
                                        Index rows, std::uint64_t salt, Index* steps) const;

  SampleTable table_;
  MultimodalOptions options_;
  std::uint64_t stream_ = 0;
  std::vector<Index> pack_offsets_ = {0}, pack_samples_, pack_tokens_;
  std::vector<double> pack_cost_;
  std::vector<Index> dropped_;
  std::vector<MultimodalSegment> history_;  // segments before the current one
  Index start_step_ = 0;                    // current segment's steps already run
  std::vector<Index> deal_;                 // current segment: [step][rank][row]
  MultimodalSummary summary_;
  MultimodalBalance balance_;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_MULTIMODAL_PLAN_H_
