// shardkit eval-plan: equal-step fixed-shape evaluation batches from flags.
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/json.h"
#include "cli/roles.h"
#include "shardkit/eval/eval_plan.h"

namespace shardkit::cli {

namespace {

constexpr Index kMaxListedSlots = 10000000;

std::string Hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

int RunEvalPlan(const Argv& argv) {
  const EvalOptions d;  // the defaults are the core's
  Args args("eval-plan",
            "Full-dataset evaluation in equal, fixed-shape steps: every rank runs\n"
            "ceil(ceil(N / W) / B) steps of B slots; every item is in exactly one\n"
            "unmasked slot, the padded slots are masked (and hold a valid index).");
  args.Flag("items", "N", "number of items to evaluate (required)")
      .Flag("world", "W", "number of ranks (required unless --mesh)")
      .Flag("batch", "B", "slots per step on each rank (required)")
      .Flag("devices", "D",
            "local devices per rank; must divide the batch (default " + std::to_string(d.devices) +
                ")")
      .Flag("min-device-batch", "M", "at least M slots per device (Flax pad_shard_unpad)")
      .Flag("window", "NAME",
            "strict (default: an offset past the items is an error) | harness (lm-eval's\n"
            "reading: limit 0 is every item, an offset past the items none)");
  // balanced is refused: an evaluation needs no weights to be exact.
  AddItemSplitFlags(args,
                    Choices(SplitNames(), SplitName(d.split), {SplitName(Split::kBalanced)}) +
                        ": round_robin is lmms-eval's",
                    "shuffled order (seed, epoch)");
  args.Flag("rank", "R", "with --batches: show only this rank")
      .Flag("batches", "", "list every step's indices and mask")
      .Flag("json", "", "print one JSON object");
  AddRolesFlags(args);
  if (!args.Parse(argv)) return 0;
  const std::optional<std::vector<DataRoles>> roles = RolesFromArgs(args);
  EvalOptions o;
  ReadOptionFlags(args, &o, {});
  EvalPlan plan(args.RequireInt("items"), WorldFromArgs(args, roles), args.RequireInt("batch"), o);
  const std::vector<Index> ranks =
      ListedRanks(args, plan.world_size(), [&](Index r) { (void)plan.Real(r); });
  const bool batches = args.Has("batches");
  Index per_rank = 0, listed = 0;
  const bool too_many =
      __builtin_mul_overflow(plan.num_steps(), plan.batch_size(), &per_rank) ||
      __builtin_mul_overflow(per_rank, static_cast<Index>(ranks.size()), &listed) ||
      listed > kMaxListedSlots;
  if (batches && too_many) {
    throw UsageError("--batches: would list more than " + std::to_string(kMaxListedSlots) +
                     " slots; narrow with --rank");
  }
  // Buffers for one step, only when steps are listed (the check above bounds
  // them): a huge --batch alone must not allocate.
  // With no step to list (no items), a huge --batch allocates nothing either.
  const bool listing = batches && plan.num_steps() > 0;
  std::vector<Index> idx(listing ? plan.batch_size() : 0);
  std::unique_ptr<bool[]> mask(new bool[listing ? plan.batch_size() : 1]);

  if (args.Has("json")) {
    Json j;
    j.Begin();
    j.Key("items").Int(plan.num_items()).Key("world").Int(plan.world_size());
    j.Key("batch").Int(plan.batch_size()).Key("devices").Int(plan.devices());
    j.Key("device_batch").Int(plan.device_batch());
    j.Key("split").String(SplitName(o.split));
    j.Key("steps").Int(plan.num_steps());
    j.Key("padding").Int(plan.TotalPadding());
    j.Key("padding_fraction").Double(plan.PaddingFraction());
    j.Key("fingerprint").String(Hex(plan.Fingerprint()));
    if (roles) RolesJson(j, *roles);
    j.Key("ranks").BeginList();
    for (Index r : ranks) {
      j.Begin()
          .Key("rank")
          .Int(r)
          .Key("real")
          .Int(plan.Real(r))
          .Key("padding")
          .Int(plan.Padding(r));
      if (batches) {
        j.Key("batches").BeginList();
        for (Index s = 0; s < plan.num_steps(); ++s) {
          plan.Batch(r, s, idx.data(), mask.get());
          j.Begin().Key("indices").IntList(idx).Key("mask").BeginList();
          for (Index k = 0; k < plan.batch_size(); ++k) j.Bool(mask[k]);
          j.End().End();
        }
        j.End();
      }
      j.End();
    }
    j.End();
    j.End();
    std::cout << j.str() << "\n";
    return 0;
  }
  std::printf("%" PRId64 " items over %" PRId64 " ranks, batch %" PRId64 " (%" PRId64
              " device(s) x %" PRId64 "), split %s\n",
              plan.num_items(), plan.world_size(), plan.batch_size(), plan.devices(),
              plan.device_batch(), std::string(SplitName(o.split)).c_str());
  std::printf("steps on every rank: %" PRId64 "; padded slots: %" PRId64 " (%.2f%% of %" PRId64
              "), all masked\n",
              plan.num_steps(), plan.TotalPadding(), 100 * plan.PaddingFraction(),
              plan.num_steps() * plan.world_size() * plan.batch_size());
  std::printf("%6s %12s %10s\n", "rank", "real", "padding");
  for (Index r : ranks) {
    std::printf("%6" PRId64 " %12" PRId64 " %10" PRId64 "\n", r, plan.Real(r), plan.Padding(r));
    if (!batches) continue;
    for (Index s = 0; s < plan.num_steps(); ++s) {
      plan.Batch(r, s, idx.data(), mask.get());
      std::printf("    step %" PRId64 ":", s);
      for (Index k = 0; k < plan.batch_size(); ++k) {
        std::printf(" %" PRId64 "%s", idx[k], mask[k] ? "" : "*");
      }
      std::printf("\n");
    }
  }
  if (batches) std::printf("(* = padded slot, masked out)\n");
  if (roles) {
    PrintRoles(*roles);
    std::printf(
        "(the plan's ranks above are dp_ranks: the ranks of a replica group run the same\n"
        " steps; in gathers and global sums only its reporter's outputs count)\n");
  }
  return 0;
}

}  // namespace shardkit::cli
