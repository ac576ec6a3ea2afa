// The sharding section of the demo: three splits of the same documents over
// 8 ranks x 4 workers, a shuffled epoch and the audit.
#include <algorithm>
#include <cstdio>
#include <iomanip>

#include "cli/demo.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit::cli {

namespace {

constexpr Index kRanks = 8;
constexpr Index kWorkers = 4;

struct Row {
  std::string name;
  ShardPlan plan;
};

}  // namespace

void DemoSharding(const DemoContext& c, HtmlReport& report) {
  const Index n = static_cast<Index>(c.documents.size());
  auto make = [&](Split split, bool equal_counts) {
    ShardOptions o;
    o.split = split;
    o.weights = c.tokens;
    o.equal_counts = equal_counts;
    return ShardPlan(n, kRanks, o);
  };
  std::vector<Row> rows = {{"round_robin", make(Split::kRoundRobin, false)},
                           {"contiguous", make(Split::kContiguous, false)},
                           {"balanced", make(Split::kBalanced, false)},
                           {"balanced, equal counts", make(Split::kBalanced, true)}};

  c.out << "== Sharding: " << n << " documents over " << kRanks << " ranks x " << kWorkers
        << " workers, weights = tokens\n";
  c.out << std::left << std::setw(24) << "split" << std::right << std::setw(12) << "items/rank"
        << std::setw(14) << "max tokens" << std::setw(14) << "lower bound" << std::setw(12)
        << "over bound" << std::setw(18) << "worker tokens"
        << "  audit\n";
  std::vector<std::vector<std::string>> table = {
      {"split", "items per rank (min-max)", "heaviest rank (tokens)", "lower bound",
       "over the bound", "worker load (min-max)", "audit"}};
  std::vector<Series> series;
  const char* colors[] = {"#9aa5b1", "#e0a458", "#2a9d8f", "#264653"};
  c.json.Key("sharding").Begin().Key("ranks").Int(kRanks).Key("workers").Int(kWorkers);
  c.json.Key("splits").BeginList();
  double lower_bound = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ShardPlan& plan = rows[i].plan;
    AuditReport audit = plan.Audit();
    lower_bound = audit.lower_bound;
    double worker_min = 1e300, worker_max = 0;
    for (Index r = 0; r < kRanks; ++r) {
      for (Index k = 0; k < kWorkers; ++k) {
        Shard part = plan.GetShard(r, k, kWorkers);
        double load = 0;
        for (Index j = 0; j < part.size(); ++j) load += c.tokens[part[j]];
        worker_min = std::min(worker_min, load);
        worker_max = std::max(worker_max, load);
      }
    }
    const std::string counts =
        std::to_string(audit.min_count) + "-" + std::to_string(audit.max_count);
    const std::string workers = Fixed(worker_min, 0) + "-" + Fixed(worker_max, 0);
    const std::string over = "+" + Fixed(100 * audit.load_imbalance, 2) + "%";
    const std::string verdict = audit.exactly_once ? "exactly once" : "FAILED";
    c.out << std::left << std::setw(24) << rows[i].name << std::right << std::setw(12) << counts
          << std::setw(14) << Fixed(audit.max_load, 0) << std::setw(14)
          << Fixed(audit.lower_bound, 0) << std::setw(12) << over << std::setw(18) << workers
          << "  " << verdict << "\n";
    table.push_back({rows[i].name, counts, Fixed(audit.max_load, 0), Fixed(audit.lower_bound, 0),
                     over, workers, verdict});
    if (i < 3) series.push_back({rows[i].name, audit.loads, colors[i]});
    c.json.Begin().Key("split").String(rows[i].name).Key("loads").DoubleList(audit.loads);
    c.json.Key("max_load").Double(audit.max_load).Key("lower_bound").Double(audit.lower_bound);
    c.json.Key("load_imbalance").Double(audit.load_imbalance);
    c.json.Key("exactly_once").Bool(audit.exactly_once).End();
  }
  c.json.End();

  // A shuffled epoch: one global permutation per (seed, epoch).
  ShardOptions shuffled;
  shuffled.shuffle = true;
  shuffled.seed = 2026;
  std::string epochs_html =
      "<p>Shuffled with seed 2026: the first documents of rank 0, "
      "worker 0 in two epochs. Every rank computes the same global "
      "permutation from (seed, epoch) alone, in O(1) memory.</p><ul>";
  c.out << "\nShuffled epochs (seed 2026), rank 0 / worker 0 starts with:\n";
  c.json.Key("shuffled").BeginList();
  for (std::uint64_t epoch : {0, 1}) {
    shuffled.epoch = epoch;
    ShardPlan plan(n, kRanks, shuffled);
    Shard part = plan.GetShard(0, 0, kWorkers);
    std::string names;
    for (Index j = 0; j < std::min<Index>(4, part.size()); ++j) {
      names += (j ? ", " : "") + c.documents[part[j]].path;
    }
    AuditReport audit = plan.Audit();
    c.out << "  epoch " << epoch << ": " << names
          << ", ...  (audit: " << (audit.exactly_once ? "exactly once" : "FAILED") << ")\n";
    epochs_html += "<li>epoch " + std::to_string(epoch) + ": " + Escape(names) + ", ... (" +
                   (audit.exactly_once ? "exactly once" : "FAILED") + ")</li>";
    c.json.Begin().Key("epoch").Int(static_cast<Index>(epoch));
    c.json.Key("exactly_once").Bool(audit.exactly_once).End();
  }
  c.json.End().End();
  epochs_html += "</ul>";

  std::vector<std::string> ranks;
  for (Index r = 0; r < kRanks; ++r) ranks.push_back("rank " + std::to_string(r));
  report.AddSection(
      "Sharding: who gets which document",
      "<p>" + std::to_string(n) + " documents over " + std::to_string(kRanks) + " ranks x " +
          std::to_string(kWorkers) +
          " dataloader workers. round_robin and contiguous balance item counts (within one) "
          "but not tokens; balanced assigns by token weight and lands next to the lower bound "
          "max(longest document, total / ranks).</p>" +
          SvgBars("Tokens per rank", ranks, series, lower_bound, "lower bound") + HtmlTable(table) +
          epochs_html);
}

}  // namespace shardkit::cli
