// The mixing section of the demo: the stdlib documents split into sources by
// package, mixed by tokens with a linear schedule, realised against target
// proportions over the run.
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "cli/demo.h"
#include "shardkit/sharding/mixture.h"

namespace shardkit::cli {

void DemoMixture(const DemoContext& c, HtmlReport& report) {
  // Sources: asyncio, email, encodings and everything else.
  const std::vector<std::string> names = {"asyncio/", "email/", "encodings/", "other"};
  std::vector<std::vector<Index>> members(names.size());
  std::vector<std::vector<std::int64_t>> lengths(names.size());
  for (Index d = 0; d < static_cast<Index>(c.documents.size()); ++d) {
    std::size_t s = names.size() - 1;
    for (std::size_t k = 0; k + 1 < names.size(); ++k) {
      if (c.documents[d].path.rfind(names[k], 0) == 0) s = k;
    }
    members[s].push_back(d);
    lengths[s].push_back(c.documents[d].tokens);
  }
  std::vector<Index> sizes;
  MixtureOptions o;
  o.by = MixBy::kTokens;
  for (const auto& l : lengths) {
    sizes.push_back(static_cast<Index>(l.size()));
    o.tokens.push_back(TotalTokens(l));
  }
  // Equal token shares at first, annealed to mostly "other" by sample 40000.
  const Index run = 60000;
  o.schedule = {{40000, {1, 1, 1, 7}}};
  o.interpolation = Interpolation::kLinear;
  o.seed = 2026;
  const Mixture mix(sizes, {1, 1, 1, 1}, o);
  const MixReport r = ReportMixture(mix, 0, run, 12);

  c.out << "\n== Mixing: the documents as " << names.size()
        << " sources by package, weights by tokens, annealed linearly from 1:1:1:1 to 1:1:1:7"
        << " by sample 40000 (block " << mix.block() << ")\n";
  c.out << "shares of samples (documents) over the run; token shares per window below\n";
  c.out << std::left << std::setw(12) << "source" << std::right << std::setw(8) << "docs"
        << std::setw(12) << "tokens" << std::setw(12) << "target" << std::setw(12) << "realised"
        << std::setw(10) << "epochs\n";
  std::vector<std::vector<std::string>> table = {{"source", "documents", "tokens",
                                                  "target share of samples",
                                                  "realised share of samples", "epochs consumed"}};
  c.json.Key("mixture").Begin().Key("block").Int(mix.block()).Key("sources").BeginList();
  for (std::size_t k = 0; k < names.size(); ++k) {
    c.out << std::left << std::setw(12) << names[k] << std::right << std::setw(8) << sizes[k]
          << std::setw(12) << o.tokens[k] << std::setw(12) << Percent(r.target[k], 1)
          << std::setw(12) << Percent(r.realised[k], 1) << std::setw(9) << std::fixed
          << std::setprecision(2) << r.epochs[k] << "\n";
    table.push_back({names[k], std::to_string(sizes[k]), std::to_string(o.tokens[k]),
                     Percent(r.target[k], 1), Percent(r.realised[k], 1),
                     std::to_string(r.epochs[k]).substr(0, 5)});
    c.json.Begin().Key("name").String(names[k]).Key("documents").Int(sizes[k]);
    c.json.Key("target").Double(r.target[k]).Key("realised").Double(r.realised[k]);
    c.json.Key("epochs").Double(r.epochs[k]).End();
  }
  c.json.End().Key("max_error").Double(r.max_error);
  // Tokens each window delivered per source, against the token target.
  std::vector<std::string> labels;
  std::vector<Series> segments(names.size());
  const char* colors[] = {"#264653", "#2a9d8f", "#e9c46a", "#e76f51"};
  std::vector<Index> sources(run), items(run);
  mix.Fill(0, run, sources.data(), items.data());
  c.out << "token shares per window (realised; target in brackets):\n";
  c.json.Key("windows").BeginList();
  for (const MixWindow& w : r.windows) {
    std::vector<double> tokens(names.size(), 0), target(names.size(), 0);
    double total = 0, total_target = 0;
    for (Index i = w.begin; i < w.end; ++i) {
      tokens[sources[i]] += static_cast<double>(lengths[sources[i]][items[i]]);
    }
    for (std::size_t k = 0; k < names.size(); ++k) {
      total += tokens[k];
      target[k] = w.target[k] * static_cast<double>(o.tokens[k]) / static_cast<double>(sizes[k]);
      total_target += target[k];
    }
    labels.push_back(std::to_string(w.begin));
    c.out << std::setw(8) << w.begin;
    c.json.Begin().Key("begin").Int(w.begin).Key("token_shares").BeginList();
    for (std::size_t k = 0; k < names.size(); ++k) {
      segments[k].name = names[k];
      segments[k].color = colors[k];
      segments[k].values.push_back(tokens[k] / total);
      c.out << "  " << Percent(tokens[k] / total, 1) << " (" << Percent(target[k] / total_target, 1)
            << ")";
      c.json.Double(tokens[k] / total);
    }
    c.out << "\n";
    c.json.End().End();
  }
  c.json.End().End();
  report.AddSection(
      "Mixing: sources with exact proportions and a schedule",
      "<p>The documents split into four sources by package and mixed by <em>tokens</em> "
      "(a weight is a share of the tokens the model sees), annealed linearly from equal "
      "shares to 1:1:1:7 by sample 40000. Every block of " +
          std::to_string(mix.block()) +
          " samples holds fixed per-source counts; each source walks its own shuffled order "
          "per epoch, so a small source is repeated (upsampled) without ever repeating an "
          "item within one of its epochs.</p><p>The chart counts <em>tokens</em> (the unit of "
          "the weights); the table counts <em>samples</em> (documents): a source whose "
          "documents are longer than the average reaches its token share with fewer "
          "samples, so its share of samples is below its share of tokens.</p>" +
          SvgStacked("Token share of each source per window of samples", labels, segments) +
          HtmlTable(table));
}

}  // namespace shardkit::cli
