// shardkit shard / shardkit audit: a ShardPlan from flags, listed or audited.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/json.h"
#include "cli/roles.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit::cli {

namespace {

constexpr Index kMaxListedIndices = 100000000;

Args PlanArgs(const std::string& command, const std::string& summary) {
  const ShardOptions d;  // the defaults are the core's
  Args args(command, summary);
  args.Flag("items", "N", "number of items (or files) in the data set (required)")
      .Flag("world", "W", "number of ranks (required unless --mesh)")
      .Flag("rank", "R", "show only this rank")
      .Flag("weights", "FILE", "per-item weights, one per line or .npy ('-' = stdin)")
      .Flag("equal-counts", "", "balanced: keep item counts within one across ranks")
      .Flag("remainder", "NAME", Choices(RemainderNames(), RemainderName(d.remainder)));
  AddItemSplitFlags(args, Choices(SplitNames(), SplitName(d.split)),
                    "one global permutation per (seed, epoch)");
  args.Flag("workers", "K", "dataloader workers per rank (interleaved)")
      .Flag("worker", "k", "show only this worker (with --workers)")
      .Flag("json", "", "print one JSON object");
  AddRolesFlags(args);
  return args;
}

ShardPlan PlanFromArgs(const Args& args, const std::optional<std::vector<DataRoles>>& roles) {
  ShardOptions options;
  constexpr std::string_view kOwn[] = {"weights"};  // a file, read below
  ReadOptionFlags(args, &options, {{}, {}, kOwn});
  if (auto path = args.Str("weights")) options.weights = ReadNumbers("--weights", *path);
  return ShardPlan(args.RequireInt("items"), WorldFromArgs(args, roles), std::move(options));
}

std::vector<Index> Items(const Shard& shard) {
  std::vector<Index> out(shard.size());
  shard.Fill(0, shard.size(), out.data());
  return out;
}

std::string Head(const Shard& shard, Index max_items) {
  std::string out;
  Index shown = std::min(shard.size(), max_items);
  std::vector<Index> items(shown);
  shard.Fill(0, shown, items.data());
  for (Index k = 0; k < shown; ++k) {
    if (k) out += ' ';
    out += std::to_string(items[k]);
    if (shard.IsPadding(k)) out += '*';
  }
  if (shard.size() > shown) out += " ...";
  return out;
}

// What the audit proves: each item once, or (replicate) every item on
// every rank.
const char* CoverageName(const ShardPlan& plan) {
  return plan.options().remainder == Remainder::kReplicate ? "every item on every rank"
                                                           : "exactly once";
}

void PlanHeader(Json& j, const ShardPlan& plan) {
  const auto& o = plan.options();
  j.Key("items").Int(plan.num_items());
  j.Key("world").Int(plan.world_size());
  j.Key("window").BeginList().Int(plan.window_begin()).Int(plan.window_end()).End();
  j.Key("split").String(SplitName(o.split));
  j.Key("remainder").String(RemainderName(o.remainder));
  j.Key("shuffle").Bool(o.shuffle);
  j.Key("seed").Uint(o.seed);
  j.Key("epoch").Uint(o.epoch);
  j.Key("dropped").Int(plan.Dropped());
  j.Key("coverage").String(CoverageName(plan));
}

// The weight figures of an audit (only when the plan has weights); `shard`
// reports each rank's load in its rank entries, `audit` lists them here.
// Per-rank loads are listed up to kMaxRankList ranks; `load_groups` (the
// distinct loads and how many ranks carry each) describes any world.
void LoadFields(Json& j, const AuditReport& r, bool per_rank) {
  if (r.load_groups.empty()) return;
  if (per_rank) {
    if (!r.loads.empty()) j.Key("loads").DoubleList(r.loads);
    j.Key("load_groups").BeginList();
    for (const LoadGroup& g : r.load_groups) j.BeginList().Double(g.load).Int(g.ranks).End();
    j.End();
  }
  j.Key("max_load").Double(r.max_load);
  j.Key("lower_bound").Double(r.lower_bound);
  j.Key("load_imbalance").Double(r.load_imbalance);
}

}  // namespace

int RunShard(const Argv& argv) {
  Args args = PlanArgs("shard",
                       "Lists which items each rank (and dataloader worker) gets. Padded\n"
                       "entries are the trailing 'padding' entries of a rank's list (marked *\n"
                       "in the human output).");
  args.Flag("indices", "", "list every index (JSON) or every index of each rank (text)");
  if (!args.Parse(argv)) return 0;
  const std::optional<std::vector<DataRoles>> roles = RolesFromArgs(args);
  ShardPlan plan = PlanFromArgs(args, roles);
  const std::vector<Index> ranks =
      ListedRanks(args, plan.world_size(), [&](Index r) { (void)plan.Count(r); });
  const Index workers = args.Int("workers", 1);
  if (workers < 1)
    throw UsageError("--workers: must be at least 1, got " + std::to_string(workers));
  std::vector<Index> worker_list;
  if (!args.Int("worker") && args.Has("workers") &&
      (workers > 1000000 || workers * static_cast<Index>(ranks.size()) > 1000000)) {
    // Every listed rank lists every worker: bounded like the ranks.
    throw UsageError("--workers: " + std::to_string(workers) + " workers x " +
                     std::to_string(ranks.size()) +
                     " ranks are too many to list; pass --worker (and --rank)");
  }
  if (auto worker = args.Int("worker")) {
    if (!args.Has("workers")) throw UsageError("--worker: needs --workers");
    (void)plan.GetShard(0, *worker, workers);  // validates the worker
    worker_list.push_back(*worker);
  } else {
    for (Index k = 0; k < workers; ++k) worker_list.push_back(k);
  }
  const bool indices = args.Has("indices");
  if (indices) {
    Index total = 0;
    for (Index r : ranks) {
      total += plan.Count(r);
      if (total > kMaxListedIndices) {
        throw UsageError("--indices: would list more than " + std::to_string(kMaxListedIndices) +
                         " indices; narrow with --rank, --worker or --limit");
      }
    }
  }
  AuditReport report = plan.Audit();
  const bool split_workers = args.Has("workers");
  const bool weighted = !report.load_groups.empty();

  if (args.Has("json")) {
    Json j;
    j.Begin();
    PlanHeader(j, plan);
    j.Key("ranks").BeginList();
    for (Index r : ranks) {
      // With --worker the entry is that worker's view of the rank; with only
      // --workers the rank's entry lists every worker's view too.
      const bool one_worker = args.Has("worker");
      Shard shard = one_worker ? plan.GetShard(r, worker_list[0], workers) : plan.GetShard(r);
      j.Begin().Key("rank").Int(r);
      if (one_worker) j.Key("worker").Int(worker_list[0]);
      j.Key("count").Int(shard.size()).Key("padding").Int(shard.padding());
      if (weighted && !one_worker) j.Key("load").Double(plan.Load(r));
      if (indices) j.Key("indices").IntList(Items(shard));
      if (split_workers && !one_worker) {
        j.Key("workers").BeginList();
        for (Index k : worker_list) {
          Shard part = plan.GetShard(r, k, workers);
          j.Begin()
              .Key("worker")
              .Int(k)
              .Key("count")
              .Int(part.size())
              .Key("padding")
              .Int(part.padding());
          if (indices) j.Key("indices").IntList(Items(part));
          j.End();
        }
        j.End();
      }
      j.End();
    }
    j.End();
    j.Key("exactly_once").Bool(report.exactly_once);
    j.Key("max_imbalance").Int(report.max_imbalance);
    LoadFields(j, report, /*per_rank=*/false);
    if (roles) RolesJson(j, *roles);
    j.End();
    std::cout << j.str() << "\n";
    return 0;
  }

  std::cout << plan.Describe() << "\n";
  const Index head = indices ? kMaxListedIndices : 12;
  std::printf("%6s %12s %8s%s  %s\n", "rank", "count", "padding", weighted ? "         load" : "",
              "items (* = padding)");
  for (Index r : ranks) {
    if (split_workers) {
      for (Index k : worker_list) {
        Shard part = plan.GetShard(r, k, workers);
        std::printf("%3" PRId64 "/w%-2" PRId64 " %12" PRId64 " %8" PRId64 "  %s\n", r, k,
                    part.size(), part.padding(), Head(part, head).c_str());
      }
      continue;
    }
    Shard shard = plan.GetShard(r);
    std::printf("%6" PRId64 " %12" PRId64 " %8" PRId64, r, shard.size(), shard.padding());
    if (weighted) std::printf(" %12.6g", plan.Load(r));
    std::printf("  %s\n", Head(shard, head).c_str());
  }
  std::printf("%s: %s (%s); max imbalance %" PRId64 " item(s)", CoverageName(plan),
              report.exactly_once ? "yes" : "NO", report.method.c_str(), report.max_imbalance);
  if (plan.Dropped()) std::printf("; dropped %" PRId64, plan.Dropped());
  if (weighted) {
    std::printf("; heaviest rank %.6g vs lower bound %.6g (+%.3f%%)", report.max_load,
                report.lower_bound, 100 * report.load_imbalance);
  }
  std::printf("\n");
  if (roles) {
    PrintRoles(*roles);
    std::printf(
        "(the plan's ranks above are dp_ranks; a replica group reads its dp_rank's items)\n");
  }
  return 0;
}

int RunAudit(const Argv& argv) {
  Args args = PlanArgs("audit",
                       "Proves that a plan delivers every item of the window exactly once\n"
                       "(or exactly what its remainder policy states) and reports its\n"
                       "balance. Exits 0 iff coverage holds, 1 otherwise. Plans of up to\n"
                       "2^27 entries are listed entry by entry; larger ones are checked by\n"
                       "arithmetic plus a sample of entries round-tripped through the inverse.");
  if (!args.Parse(argv)) return 0;
  ShardPlan plan = PlanFromArgs(args, RolesFromArgs(args));
  // The audit covers the whole plan; --rank / --workers / --worker are only
  // validated, so that the same flags as `shard` are accepted.
  (void)plan.GetShard(args.Int("rank", 0), args.Int("worker", 0), args.Int("workers", 1));
  AuditReport r = plan.Audit();
  if (args.Has("json")) {
    Json j;
    j.Begin();
    PlanHeader(j, plan);
    j.Key("exactly_once").Bool(r.exactly_once);
    j.Key("method").String(r.method);
    j.Key("detail").String(r.detail);
    j.Key("window_size").Int(r.window_size);
    j.Key("delivered").Int(r.delivered);
    j.Key("padding").Int(r.padding);
    j.Key("duplicates").Int(r.duplicates);
    j.Key("missing").Int(r.missing);
    j.Key("min_count").Int(r.min_count);
    j.Key("max_count").Int(r.max_count);
    j.Key("max_imbalance").Int(r.max_imbalance);
    LoadFields(j, r, /*per_rank=*/true);
    j.End();
    std::cout << j.str() << "\n";
  } else {
    std::cout << plan.Describe() << "\n";
    std::printf("coverage: %s\n", r.exactly_once
                                      ? (plan.options().remainder == Remainder::kReplicate
                                             ? "OK, every item on every rank"
                                             : "OK, exactly as the policy states")
                                      : "FAILED");
    std::printf("  %s: %s\n", r.method.c_str(), r.detail.c_str());
    std::printf("  window %" PRId64 ", delivered %" PRId64 ", padding %" PRId64 ", dropped %" PRId64
                ", duplicates %" PRId64 ", missing %" PRId64 "\n",
                r.window_size, r.delivered, r.padding, r.dropped, r.duplicates, r.missing);
    std::printf("  list lengths: min %" PRId64 ", max %" PRId64 " (imbalance %" PRId64 ")\n",
                r.min_count, r.max_count, r.max_imbalance);
    if (!r.load_groups.empty()) {
      std::printf(
          "  loads: heaviest %.6g, lower bound max(max weight, total/W) %.6g, "
          "imbalance +%.3f%%\n",
          r.max_load, r.lower_bound, 100 * r.load_imbalance);
    }
  }
  return r.exactly_once ? 0 : 1;
}

}  // namespace shardkit::cli
