// The packing section of the demo: the road of the nanoVLM/mmdp post on the
// embedded documents, from naive padding to packing with an image budget, as
// waste percentages and pictures of real tokens versus padding per batch.
#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "cli/demo.h"
#include "shardkit/packing/packing.h"
#include "shardkit/packing/rank_balance.h"

namespace shardkit::cli {

namespace {

constexpr Index kSeqLen = 8192;   // tokens per row
constexpr Index kRows = 8;        // rows per batch
constexpr Index kMaxImages = 16;  // images per row (multimodal rows)
constexpr Index kRanks = 8;
constexpr size_t kBatchesShown = 16;

// The synthetic image count of document i: (7 i) mod 5, i.e. 0 to 4 images
// per sample, 2 on average, evenly spread over the data set.
Index SyntheticImages(Index i) { return (7 * i) % 5; }

struct Strategy {
  std::string name, note;
  Index rows = 0;              // rows used
  Index real = 0, padded = 0;  // tokens
  Index dropped = 0;           // documents left out
  std::vector<double> batch_real, batch_pad;
  double waste() const { return padded + real ? static_cast<double>(padded) / (padded + real) : 0; }
};

// Groups rows (real tokens, row width) into batches of kRows rows.
void Batches(Strategy& s, const std::vector<std::pair<Index, Index>>& rows) {
  for (size_t r = 0; r < rows.size(); ++r) {
    if (r % kRows == 0) {
      s.batch_real.push_back(0);
      s.batch_pad.push_back(0);
    }
    s.batch_real.back() += static_cast<double>(rows[r].first);
    s.batch_pad.back() += static_cast<double>(rows[r].second - rows[r].first);
    s.real += rows[r].first;
    s.padded += rows[r].second - rows[r].first;
  }
  s.rows = static_cast<Index>(rows.size());
}

Strategy FromPacking(const std::string& name, const std::string& note, const Packing& p) {
  Strategy s;
  s.name = name;
  s.note = note;
  std::vector<std::pair<Index, Index>> rows;
  for (Index b = 0; b < p.num_packs(); ++b) rows.push_back({p.PackTokens(b), p.capacity});
  Batches(s, rows);
  s.dropped = p.dropped();
  return s;
}

}  // namespace

void DemoPacking(const DemoContext& c, HtmlReport& report) {
  const Index n = static_cast<Index>(c.documents.size());
  std::vector<Index> lengths(n), images(n);
  for (Index i = 0; i < n; ++i) {
    lengths[i] = c.documents[i].tokens;
    images[i] = SyntheticImages(i);
  }
  std::vector<Strategy> strategies;

  // 1. Naive padding: batches of kRows documents in data order, each padded
  //    to the longest document of its batch.
  {
    Strategy s;
    s.name = "naive padding";
    s.note = "pad to the longest of each batch of 8";
    std::vector<std::pair<Index, Index>> rows;
    for (Index b = 0; b < n; b += kRows) {
      const Index end = std::min(n, b + kRows);
      const Index longest = *std::max_element(lengths.begin() + b, lengths.begin() + end);
      for (Index i = b; i < end; ++i) rows.push_back({lengths[i], longest});
    }
    Batches(s, rows);
    strategies.push_back(s);
  }
  // 2. Constrained padding: one global length; longer documents are dropped.
  {
    Strategy s;
    s.name = "constrained padding";
    s.note = "drop longer than 8192, pad every row to 8192";
    std::vector<std::pair<Index, Index>> rows;
    for (Index i = 0; i < n; ++i) {
      if (lengths[i] > kSeqLen) {
        ++s.dropped;
      } else {
        rows.push_back({lengths[i], kSeqLen});
      }
    }
    Batches(s, rows);
    strategies.push_back(s);
  }
  // 3-6. Packing, text only: oversize documents are split, nothing is lost.
  PackOptions o;
  o.capacity = kSeqLen;
  o.oversize = Oversize::kSplit;
  struct Run {
    PackAlgorithm algorithm;
    const char* note;
  };
  const Run runs[] = {{PackAlgorithm::kNextFit, "data order, close a row when the next won't fit"},
                      {PackAlgorithm::kFirstFitDecreasing, "longest first, first row with room"},
                      {PackAlgorithm::kBestFitDecreasing, "longest first, fullest row with room"},
                      {PackAlgorithm::kBalanced, "fewest rows, loads evened out"}};
  Packing bfd;
  Index lower_bound = 0;
  for (const Run& run : runs) {
    o.algorithm = run.algorithm;
    Packing p = PackItems(lengths, o);
    lower_bound = p.lower_bound;
    if (run.algorithm == PackAlgorithm::kBestFitDecreasing) bfd = p;
    strategies.push_back(
        FromPacking(std::string(PackAlgorithmName(run.algorithm)) + " (split)", run.note, p));
  }
  // 7-8. Multimodal: the synthetic image counts with a budget of kMaxImages
  //      per row; samples with images cannot be split, so the longest are
  //      dropped (counted).
  o.max_images = kMaxImages;
  o.algorithm = PackAlgorithm::kBestFitDecreasing;
  Packing mm_bfd = PackItems(lengths, o, images);
  strategies.push_back(FromPacking("bfd + images", "16 images per row at most", mm_bfd));
  o.algorithm = PackAlgorithm::kBalanced;
  Packing mm = PackItems(lengths, o, images);
  strategies.push_back(FromPacking("balanced + images", "16 images per row at most", mm));
  // Streaming: bfd through a buffer of 64 documents.
  o.max_images.reset();
  o.algorithm = PackAlgorithm::kBestFitDecreasing;
  o.buffer = 64;
  strategies.push_back(FromPacking("bfd, buffer 64 (split)", "streaming, 64 documents buffered",
                                   PackItems(lengths, o)));

  c.out << "\n== Packing: " << n << " documents into rows of " << kSeqLen << " tokens, batches of "
        << kRows << " rows (lower bound " << lower_bound << " rows)\n";
  c.out << std::left << std::setw(26) << "strategy" << std::right << std::setw(8) << "rows"
        << std::setw(12) << "real" << std::setw(12) << "padding" << std::setw(10) << "waste"
        << std::setw(9) << "dropped"
        << "\n";
  std::vector<std::vector<std::string>> table = {
      {"strategy", "how", "rows", "real tokens", "padding tokens", "waste", "documents dropped"}};
  c.json.Key("packing").Begin().Key("seq_len").Int(kSeqLen).Key("rows_per_batch").Int(kRows);
  c.json.Key("max_images").Int(kMaxImages).Key("lower_bound").Int(lower_bound);
  c.json.Key("strategies").BeginList();
  for (const Strategy& s : strategies) {
    c.out << std::left << std::setw(26) << s.name << std::right << std::setw(8) << s.rows
          << std::setw(12) << s.real << std::setw(12) << s.padded << std::setw(10)
          << Percent(s.waste()) << std::setw(9) << s.dropped << "\n";
    table.push_back({s.name, s.note, std::to_string(s.rows), std::to_string(s.real),
                     std::to_string(s.padded), Percent(s.waste()), std::to_string(s.dropped)});
    c.json.Begin().Key("name").String(s.name).Key("rows").Int(s.rows).Key("real").Int(s.real);
    c.json.Key("padding").Int(s.padded).Key("waste").Double(s.waste());
    c.json.Key("dropped").Int(s.dropped).End();
  }
  c.json.End();

  // Cross-rank balance of the bfd rows over 8 ranks, both cost models.
  c.out << "Rows of bfd over " << kRanks << " ranks, one row per rank per step:\n";
  c.json.Key("ranks").BeginList();
  std::string ranks_html = "<ul>";
  for (CostModel model : {CostModel::kTokens, CostModel::kSquaredLengths}) {
    RankSchedule s = BalanceRanks(PackCosts(bfd, model), kRanks, 1);
    const std::string line =
        "cost " + std::string(CostModelName(model)) + ": " + std::to_string(s.num_steps) +
        " steps, " + std::to_string(s.padding_packs) +
        " padding rows; heaviest rank over the mean: worst full step +" +
        Percent(s.max_full_step_imbalance) + ", last (padded) step +" +
        Percent(s.max_step_imbalance) + ", whole epoch +" + Percent(s.total_imbalance);
    c.out << "  " << line << "\n";
    ranks_html += "<li>" + Escape(line) + "</li>";
    c.json.Begin().Key("cost").String(CostModelName(model)).Key("steps").Int(s.num_steps);
    c.json.Key("padding_packs").Int(s.padding_packs);
    c.json.Key("max_step_imbalance").Double(s.max_step_imbalance);
    c.json.Key("max_full_step_imbalance").Double(s.max_full_step_imbalance);
    c.json.Key("total_imbalance").Double(s.total_imbalance).End();
  }
  c.json.End().End();
  ranks_html += "</ul>";

  std::string pictures;
  for (size_t k : {size_t{0}, size_t{1}, size_t{4}, size_t{7}}) {
    const Strategy& s = strategies[k];
    std::vector<std::string> labels;
    Series real{"real tokens", {}, "#2a9d8f"}, pad{"padding", {}, "#c9ced6"};
    for (size_t b = 0; b < std::min(kBatchesShown, s.batch_real.size()); ++b) {
      labels.push_back("batch " + std::to_string(b));
      real.values.push_back(s.batch_real[b]);
      pad.values.push_back(s.batch_pad[b]);
    }
    pictures += SvgStacked(s.name + ": waste " + Percent(s.waste()) + " (first " +
                               std::to_string(labels.size()) + " batches)",
                           labels, {real, pad});
  }
  report.AddSection(
      "Packing: real tokens versus padding",
      "<p>The " + std::to_string(n) + " documents become rows of " + std::to_string(kSeqLen) +
          " tokens, " + std::to_string(kRows) +
          " rows per batch, following the nanoVLM/mmdp post: naive padding (pad each batch "
          "to its longest document), constrained padding (one fixed length, longer documents "
          "dropped), then packing. Text packing splits the few documents longer than a row "
          "into row-sized pieces, so nothing is lost; bfd and ffd land on the lower bound "
          "ceil(tokens / " +
          std::to_string(kSeqLen) + ") = " + std::to_string(lower_bound) +
          ". The multimodal rows give document <i>i</i> a synthetic (7&#183;<i>i</i>) mod 5 "
          "images (0 to 4, 2 on average) under a budget of " +
          std::to_string(kMaxImages) +
          " images per row; samples with images are never split, so the longest are "
          "dropped and counted.</p>" +
          pictures + HtmlTable(table) +
          "<p>Cross-rank balance of the bfd rows: every rank gets one row per step; rows "
          "are dealt so each step's cost is even.</p>" +
          ranks_html);
}

}  // namespace shardkit::cli
