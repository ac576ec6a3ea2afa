// The evaluation section of the demo: every document evaluated exactly once
// in equal, fixed-shape steps on 8 ranks, next to what the usual recipes do.
#include <algorithm>
#include <iomanip>
#include <memory>

#include "cli/demo.h"
#include "shardkit/eval/eval_plan.h"

namespace shardkit::cli {

namespace {

constexpr Index kRanks = 8;

// torch.utils.data.DistributedSampler(drop_last=False): every rank gets
// ceil(N / W) indices; the missing ones repeat the head of the list, unmarked.
Index TorchPerRank(Index n, Index w) { return (n + w - 1) / w; }

}  // namespace

void DemoEval(const DemoContext& c, HtmlReport& report) {
  const Index n = static_cast<Index>(c.documents.size());
  c.out << "\n== Evaluation: " << n << " documents on " << kRanks
        << " ranks, every one exactly once, equal fixed-shape steps\n";
  c.out << std::setw(6) << "batch" << std::setw(8) << "steps" << std::setw(14) << "padded slots"
        << std::setw(13) << "own-share" << std::setw(18) << "torch sampler" << std::setw(14)
        << "torch last"
        << "\n";
  c.out << std::setw(6) << "" << std::setw(8) << "(all)" << std::setw(14) << "(masked)"
        << std::setw(13) << "steps/rank" << std::setw(18) << "dups (unmarked)" << std::setw(14)
        << "batch shape"
        << "\n";
  std::vector<std::vector<std::string>> table = {{"batch", "shardkit steps (every rank)",
                                                  "padded slots (all masked)",
                                                  "batching each rank's own share: steps per rank",
                                                  "torch DistributedSampler: duplicated, "
                                                  "unmarked",
                                                  "torch: last batch shape"}};
  c.json.Key("eval").Begin().Key("ranks").Int(kRanks).Key("batches").BeginList();
  for (Index b : {8, 13, 16, 32}) {
    EvalPlan plan(n, kRanks, b);
    // Each rank batching its own share (lmms-eval / tfds split, no padding).
    Index own_min = 1 << 30, own_max = 0;
    for (Index r = 0; r < kRanks; ++r) {
      const Index steps = (plan.Real(r) + b - 1) / b;
      own_min = std::min(own_min, steps);
      own_max = std::max(own_max, steps);
    }
    const Index torch_per_rank = TorchPerRank(n, kRanks);
    const Index torch_dups = torch_per_rank * kRanks - n;
    const Index torch_last = torch_per_rank % b == 0 ? b : torch_per_rank % b;
    std::string own = std::to_string(own_min) +
                      (own_min == own_max ? "" : "-" + std::to_string(own_max) + " (hangs)");
    c.out << std::setw(6) << b << std::setw(8) << plan.num_steps() << std::setw(14)
          << plan.TotalPadding() << std::setw(13) << own << std::setw(18) << torch_dups
          << std::setw(14) << (std::to_string(torch_last) + (torch_last == b ? "" : " (new)"))
          << "\n";
    table.push_back({std::to_string(b), std::to_string(plan.num_steps()),
                     std::to_string(plan.TotalPadding()), own, std::to_string(torch_dups),
                     std::to_string(torch_last) + (torch_last == b ? "" : " (recompiles)")});
    c.json.Begin().Key("batch").Int(b).Key("steps").Int(plan.num_steps());
    c.json.Key("padding").Int(plan.TotalPadding());
    c.json.Key("own_share_steps").BeginList().Int(own_min).Int(own_max).End();
    c.json.Key("torch_duplicates").Int(torch_dups).Key("torch_last_batch").Int(torch_last).End();
  }
  c.json.End();

  // Flax's full-eval example: 4097 examples, 8 hosts, per-host batch 512.
  EvalOptions o;
  o.devices = 8;
  o.split = Split::kContiguous;
  EvalPlan flax(4097, 8, 512, o);
  c.out << "Flax's example, 4097 examples on 8 hosts x 8 devices, per-host batch 512: host 0 "
           "holds "
        << flax.Real(0) << " (2 batches of its own), the others " << flax.Real(1)
        << " (1 batch); shardkit runs " << flax.num_steps() << " steps on every host with "
        << flax.TotalPadding() << " masked slots.\n";
  c.json.Key("flax")
      .Begin()
      .Key("steps")
      .Int(flax.num_steps())
      .Key("padding")
      .Int(flax.TotalPadding())
      .End();

  // Unshard: outputs in slot order come back in document order.
  EvalPlan plan(n, kRanks, 16);
  std::vector<std::vector<Index>> outputs(kRanks);
  std::vector<Index> idx(16);
  std::unique_ptr<bool[]> mask(new bool[16]);
  std::vector<Series> segments = {{"real", {}, "#2a9d8f"}, {"padded (masked)", {}, "#e0a458"}};
  std::vector<std::string> labels;
  for (Index r = 0; r < kRanks; ++r) {
    for (Index s = 0; s < plan.num_steps(); ++s) {
      plan.Batch(r, s, idx.data(), mask.get());
      outputs[r].insert(outputs[r].end(), idx.begin(), idx.end());
    }
    labels.push_back("rank " + std::to_string(r));
    segments[0].values.push_back(static_cast<double>(plan.Real(r)));
    segments[1].values.push_back(static_cast<double>(plan.Padding(r)));
  }
  const std::vector<Index> ordered = plan.Unshard(outputs);
  bool in_order = static_cast<Index>(ordered.size()) == n;
  for (Index i = 0; in_order && i < n; ++i) in_order = ordered[i] == i;
  c.out << "unshard (batch 16): " << ordered.size()
        << " outputs back in document order: " << (in_order ? "yes" : "NO") << "\n";
  c.json.Key("unshard_in_order").Bool(in_order).End();

  report.AddSection(
      "Evaluation: every document once, equal steps, fixed shapes",
      "<p>" + std::to_string(n) + " documents on " + std::to_string(kRanks) +
          " ranks. shardkit runs ceil(ceil(N / W) / B) steps of B slots on every rank; the "
          "padded slots hold a valid index and are masked out, so metrics count every "
          "document exactly once. Batching each rank's own share gives ranks different step "
          "counts for some batch sizes (an SPMD program then hangs in its last collective); "
          "torch's DistributedSampler repeats documents without marking them and ends with a "
          "smaller batch (a new shape).</p>" +
          SvgStacked("Slots per rank, batch 16", labels, segments) + HtmlTable(table) +
          "<p>Flax's example (4097 examples, 8 hosts, per-host batch 512): " +
          std::to_string(flax.num_steps()) + " steps on every host, " +
          std::to_string(flax.TotalPadding()) + " masked slots.</p>");
}

}  // namespace shardkit::cli
