// The report of `shardkit loader-stats` (cli/cmd_loader.cc): what a run
// measured, printed as one JSON object or as text from the same values, and
// the progress bar. Printing only: the numbers come from the core
// (shardkit/loader/loader_stats.h, the plan's summary, the mixture's order).
#ifndef SHARDKIT_CLI_LOADER_REPORT_H_
#define SHARDKIT_CLI_LOADER_REPORT_H_

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardkit/layout/data_roles.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_stats.h"
#include "shardkit/loader/mixture_loader.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/packing/context_parallel.h"

namespace shardkit::cli {

using Clock = std::chrono::steady_clock;

class Progress {
 public:
  Progress(bool enabled, Index total_tokens) : enabled_(enabled), total_(total_tokens) {}
  void Update(Index done_tokens, Index batches, double seconds, bool force = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double fraction =
        total_ > 0 ? std::min(1.0, static_cast<double>(done_tokens) / total_) : 1.0;
    const int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar += std::string(static_cast<std::size_t>(width - filled), '.');
    std::fprintf(stderr, "\r[%s] %5.1f%%  %" PRId64 " batches  %.1f Mtokens/s ", bar.c_str(),
                 100 * fraction, batches, seconds > 0 ? done_tokens / seconds / 1e6 : 0.0);
    std::fflush(stderr);
  }
  void Done() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  Index total_;
  Clock::time_point last_{};
};

// A mixture loader run: its sources, the weights asked for, the order read.
struct MixtureRun {
  std::vector<std::shared_ptr<const TokenSource>> sources;
  std::unique_ptr<MixtureLoader> loader;  // the core's assembly of the run
  std::optional<Mixture> requested;
  std::optional<MixtureOrder> order;
  std::optional<Index> samples;  // given with --samples
  std::optional<MixtureResume> resumed;
  std::vector<Index> window_sources;
  MixtureDelivery delivered;
  // After a resume that changed the weights: what the run delivered of the
  // window documents read before the change (old weights) and after it.
  MixtureDelivery before_change, after_change;
  // Files under every source (a mixture's loader reads one gathered view).
  Index files = 0;
};

// Everything a run reports, computed once; PrintLoaderStats writes it as
// JSON or as text.
struct LoaderStatsReport {
  const TokenSource* source = nullptr;
  Index files = 0;
  LoaderOptions options;
  std::optional<WhaleChoice> file_policy;
  std::optional<TrainSummary> plan;  // equal steps
  std::vector<RankLoadStats> stats;
  LoadSummary sum;
  double seconds = 0, rate = 0;
  bool resumed = false;
  std::string resume_path;
  const MixtureRun* mixture = nullptr;  // with --mixture
  std::optional<CpWorkSummary> cp_work;
  std::optional<Index> cp_granularity;
  const std::vector<DataRoles>* roles = nullptr;
};

void PrintLoaderStats(const LoaderStatsReport& report, bool json);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_LOADER_REPORT_H_
