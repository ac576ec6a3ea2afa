// The context-parallel section of the demo: the rows of an equal-steps plan
// split over C CP ranks four ways, the causal attention work of each CP rank
// side by side, and the padding each split costs.
#include <algorithm>
#include <array>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <string>

#include "cli/demo.h"
#include "shardkit/loader/loader_stats.h"
#include "shardkit/loader/train_plan.h"
#include "shardkit/packing/context_parallel.h"

namespace shardkit::cli {

namespace {

constexpr Index kSeqLen = 16384;
constexpr Index kCp = 8;
constexpr Index kRanks = 4;

// The splits compared, in the order shown, each with its label.
struct ShownSplit {
  CpSplit split;
  const char* label;
};
constexpr std::array<ShownSplit, kNumCpSplits> kSplits = {{
    {CpSplit::kContiguous, "contiguous"},
    {CpSplit::kHeadTail, "head-tail, document-blind"},
    {CpSplit::kDocumentHeadTail, "per-document head-tail"},
    {CpSplit::kBalanced, "shardkit balanced"},
    {CpSplit::kPtrr, "PTRR (token round-robin)"},
}};

double MaxOverMean(const std::vector<double>& work) {
  const double total = std::accumulate(work.begin(), work.end(), 0.0);
  return total > 0 ? *std::max_element(work.begin(), work.end()) /
                         (total / static_cast<double>(work.size()))
                   : 1.0;
}

}  // namespace

void DemoContextParallel(const DemoContext& c, HtmlReport& report) {
  std::vector<Index> lengths;
  for (const Document& d : c.documents) lengths.push_back(d.tokens);
  TrainOptions o;
  o.seq_len = kSeqLen;
  o.batch_size = 1;
  o.world_size = kRanks;
  o.cp.size = kCp;
  const TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
  const CpWorkSummary summary = SummarizeCpWork(plan);

  // The row whose per-document head-tail split is least balanced: the one the
  // balanced strategy is for.
  std::vector<Piece> shown;
  double shown_ratio = 0;
  const auto reader = plan.Read(-1, 0);
  std::vector<TrainStep> all;
  for (Index step = 0; step < plan.num_steps() && reader->NextAll(&all); ++step) {
    for (const TrainStep& t : all) {
      for (const auto& row : t.rows) {
        if (RowTokens(row) == 0) continue;
        const double r = MaxOverMean(CpRankWork(row, kSeqLen, o.cp, CpSplit::kDocumentHeadTail));
        if (r > shown_ratio) {
          shown_ratio = r;
          shown = row;
        }
      }
    }
  }

  c.out << "\n== Context parallelism: rows of " << kSeqLen << " tokens split over " << kCp
        << " CP ranks (" << summary.rows << " rows of the equal-steps plan, " << kRanks
        << " data-parallel ranks)\n";
  c.out << "causal work of the busiest CP rank / mean, per row (mean / worst), and the padding "
           "inside documents\n";
  const double tokens = static_cast<double>(std::max<Index>(1, summary.tokens));
  std::vector<std::vector<std::string>> table = {
      {"split", "busiest CP rank / mean: mean over rows", "worst row", "padding in documents"}};
  std::vector<std::string> names;
  Series mean{"mean over rows", {}, "#2a9d8f"}, worst{"worst row", {}, "#e76f51"};
  c.json.Key("context_parallel").Begin().Key("cp_size").Int(kCp).Key("seq_len").Int(kSeqLen);
  c.json.Key("rows").Int(summary.rows).Key("splits").Begin();
  for (const auto& [split, label] : kSplits) {
    const std::size_t k = static_cast<std::size_t>(split);
    const Index padding = split == CpSplit::kDocumentHeadTail ? summary.padding
                          : split == CpSplit::kBalanced       ? summary.balanced_padding
                                                              : 0;
    const std::string pad = std::to_string(padding) + " (" +
                            Fixed(100.0 * static_cast<double>(padding) / tokens, 3) + "%)";
    c.out << "  " << std::left << std::setw(28) << label << std::right
          << Fixed(summary.mean_ratio[k], 3) << " / " << Fixed(summary.worst_ratio[k], 3)
          << "   padding " << pad << "\n";
    table.push_back(
        {label, Fixed(summary.mean_ratio[k], 3), Fixed(summary.worst_ratio[k], 3), pad});
    names.push_back(label);
    mean.values.push_back(summary.mean_ratio[k]);
    worst.values.push_back(summary.worst_ratio[k]);
    c.json.Key(std::string(CpSplitName(split))).Begin();
    c.json.Key("mean_max_over_mean").Double(summary.mean_ratio[k]);
    c.json.Key("worst_max_over_mean").Double(summary.worst_ratio[k]);
    c.json.Key("padding").Int(padding).End();
  }
  c.json.End();

  // The shown row's work per CP rank under each split, over the mean.
  static const char* kColors[] = {"#264653", "#2a9d8f", "#8ab17d", "#e9c46a",
                                  "#f4a261", "#e76f51", "#9c6644", "#6d597a"};
  std::vector<Series> ranks;
  for (Index r = 0; r < kCp; ++r) ranks.push_back({"CP rank " + std::to_string(r), {}, kColors[r]});
  for (const auto& [split, label] : kSplits) {
    const std::vector<double> work = CpRankWork(shown, kSeqLen, o.cp, split);
    const double m = std::accumulate(work.begin(), work.end(), 0.0) / static_cast<double>(kCp);
    for (Index r = 0; r < kCp; ++r) {
      ranks[static_cast<std::size_t>(r)].values.push_back(
          m > 0 ? work[static_cast<std::size_t>(r)] / m : 0);
    }
  }
  c.json.Key("shown_row_documents").Int(static_cast<Index>(shown.size())).End();
  c.out << "the row drawn in the report: " << shown.size() << " documents, per-document head-tail "
        << Fixed(shown_ratio, 3) << "\n";

  report.AddSection(
      "Context parallelism: the plan knows how each row is split",
      "<p>Every row of " + std::to_string(kSeqLen) + " tokens is split over " +
          std::to_string(kCp) +
          " context-parallel ranks. Causal attention makes a token's work grow with its "
          "position in its document, so the split decides how long the step takes: the "
          "busiest CP rank sets the pace. Contiguous runs and torch's document-blind head-tail "
          "split ignore documents; per-document head-tail (TransformerEngine's THD layout, "
          "shardkit's default) cuts every document into 2C chunks and pads it to a multiple of "
          "2C, and the padding of its last chunk always lands on CP rank 0; "
          "<code>cp_strategy=\"balanced\"</code> keeps short documents whole on the "
          "least-loaded CP rank when that lowers the busiest rank's work.</p>" +
          SvgBars("Busiest CP rank / mean, over the " + std::to_string(summary.rows) + " rows",
                  names, {mean, worst}, 1.0, "even") +
          SvgBars("Work per CP rank / mean, the row of " + std::to_string(shown.size()) +
                      " documents least balanced by per-document head-tail",
                  names, ranks, 1.0, "even") +
          HtmlTable(table));
}

}  // namespace shardkit::cli
