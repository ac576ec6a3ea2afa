// The image-text section of the demo: a synthetic VQA-style mix planned on 8
// ranks, each step's vision work per rank before and after the plan's deal
// (the picture of `shardkit multimodal-stats --svg`).
#include <iomanip>

#include "cli/demo.h"
#include "cli/multimodal_report.h"
#include "shardkit/base/hash.h"
#include "shardkit/loader/multimodal_plan.h"
#include "shardkit/loader/multimodal_stats.h"

namespace shardkit::cli {

namespace {

constexpr Index kRanks = 8;

// One sample per document: 20-300 text tokens, 0-6 images of 1-13 tiles of
// 64 vision tokens (64 LM tokens per image after the connector), drawn from
// a keyed hash of the document's index (the same on every machine).
SampleTable SyntheticMix(Index n) {
  std::vector<Index> lengths, counts, vision;
  for (Index s = 0; s < n; ++s) {
    auto draw = [&](std::uint64_t k, std::uint64_t m) {
      return static_cast<Index>(Hasher::Mix(static_cast<std::uint64_t>(s) * 131 + k) % m);
    };
    const Index c = draw(1, 7);
    for (Index i = 0; i < c; ++i) vision.push_back(64 * (1 + draw(10 + static_cast<Index>(i), 13)));
    counts.push_back(c);
    lengths.push_back(20 + draw(2, 281) + 64 * c);
  }
  return SampleTable::Make(std::move(lengths), counts, std::move(vision));
}

}  // namespace

void DemoMultimodal(const DemoContext& c, HtmlReport& report) {
  const Index n = static_cast<Index>(c.documents.size());
  MultimodalOptions o;
  o.seq_len = 1024;
  o.world_size = kRanks;
  o.max_images = 18;
  const MultimodalPlan plan(SyntheticMix(n), o);
  const MultimodalDealStats before = DealStats(plan, MultimodalDeal::kRoundRobin);
  const MultimodalDealStats after = DealStats(plan, MultimodalDeal::kPlan);
  const MultimodalSummary& s = plan.summary();
  c.out << "\n== Image-text: " << n << " synthetic samples (0-6 images of 1-13 tiles) on " << kRanks
        << " ranks, " << plan.num_steps() << " equal steps, padding " << std::fixed
        << std::setprecision(2) << 100 * after.padding << "%\n"
        << std::setprecision(3)
        << "heaviest rank / mean rank of vision cost per step: " << before.vision_ratio.mean
        << " (worst " << before.vision_ratio.max << ") dealt round-robin, "
        << after.vision_ratio.mean << " (worst " << after.vision_ratio.max
        << ") dealt by MultimodalPlan\n"
        << std::defaultfloat;
  c.json.Key("multimodal").Begin();
  c.json.Key("samples").Int(s.samples).Key("packs").Int(s.packs).Key("steps").Int(s.num_steps);
  c.json.Key("padding").Double(after.padding);
  c.json.Key("vision_before").Begin().Key("mean").Double(before.vision_ratio.mean);
  c.json.Key("max").Double(before.vision_ratio.max).End();
  c.json.Key("vision_after").Begin().Key("mean").Double(after.vision_ratio.mean);
  c.json.Key("max").Double(after.vision_ratio.max).End();
  c.json.End();
  report.AddSection(
      "Image-text samples: vision work per rank",
      "<p>One sample per document, with 0-6 images of 1-13 tiles of 64 vision tokens "
      "(synthetic), packed under 1,024 tokens and 18 images per row and dealt to " +
          std::to_string(kRanks) +
          " ranks with equal steps. Each cell is a rank's vision-encoder work at one step over "
          "the step's mean: dealt round-robin (as a deal that ignores vision cost), then by "
          "MultimodalPlan (packs of similar cost per step, each to the lightest rank). "
          "<code>shardkit multimodal-stats --svg</code> draws the same picture for your "
          "table.</p>" +
          SvgVisionPerStep(before, after));
}

}  // namespace shardkit::cli
