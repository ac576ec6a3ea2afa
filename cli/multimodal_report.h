// The report of `shardkit multimodal-stats` (cli/cmd_multimodal.cc): a
// MultimodalPlan's summary and its per-step balance before (round-robin deal)
// and after (the plan's deal), printed as one JSON object or as text from the
// same values, and the picture of vision cost per step per rank (also in
// `shardkit demo`'s page). Printing only: the numbers come from the core
// (shardkit/loader/multimodal_stats.h).
#ifndef SHARDKIT_CLI_MULTIMODAL_REPORT_H_
#define SHARDKIT_CLI_MULTIMODAL_REPORT_H_

#include <optional>
#include <string>

#include "shardkit/loader/multimodal_plan.h"
#include "shardkit/loader/multimodal_stats.h"

namespace shardkit::cli {

struct MultimodalReport {
  const MultimodalPlan* plan = nullptr;
  std::string source;  // what the table was read from
  MultimodalDealStats before, after;
  bool steps = false;              // list every step's per-rank values
  std::optional<std::string> svg;  // where the picture was written
};

void PrintMultimodalStats(const MultimodalReport& report, bool json);

// Steps pictured at most (the first ones); more would make a huge picture.
inline constexpr Index kMaxPicturedSteps = 1000;

// One SVG document: a heat map per deal, steps left to right, ranks top to
// bottom, each cell coloured by the rank's vision cost over the step's mean
// (white 1, red heavier, blue lighter, saturated at +-50%).
[[nodiscard]] std::string SvgVisionPerStep(const MultimodalDealStats& before,
                                           const MultimodalDealStats& after);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_MULTIMODAL_REPORT_H_
