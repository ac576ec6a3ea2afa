// shardkit pack: lengths from a file or stdin -> packs, a summary or JSON.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "shardkit/packing/packing.h"
#include "shardkit/packing/rank_balance.h"

namespace shardkit::cli {

namespace {

constexpr Index kMaxListedEntries = 100000000;

}  // namespace

int RunPack(const Argv& argv) {
  Args args("pack",
            "Packs variable-length items (documents, samples) into packs of at most\n"
            "--capacity tokens (and --max-images images, --max-sequences items), and\n"
            "reports how close the result is to the lower bound ceil(tokens / capacity).");
  args.Flag("lengths", "FILE", "item lengths in tokens, one per line or .npy ('-' = stdin)")
      .Flag("capacity", "C", "tokens per pack (required)")
      .Flag("algorithm", "NAME", Choices(PackAlgorithmNames(), "bfd"))
      .Flag("images", "FILE", "images per item, one per line or .npy")
      .Flag("max-images", "M", "images per pack (needs --images)")
      .Flag("max-sequences", "S", "items per pack")
      .Flag("buffer", "B", "pack in input order through a buffer of B items (streaming)")
      .Flag("oversize", "NAME", Choices(OversizeNames(), "drop") + ": items that never fit")
      .Flag("compat", "NAME",
            Choices(PackCompatNames(), "none") +
                ": trl = the rows of TRL's pack_dataset (with bfd; --buffer 1000 for its map "
                "batch)")
      .Flag("world", "W", "also deal the packs to W ranks (equal packs per step)")
      .Flag("packs-per-rank", "K", "packs per rank per step with --world (default 1)")
      .Flag("cost", "NAME",
            Choices(CostModelNames(), "tokens") + ": rank cost model (with --world)")
      .Flag("packs", "", "list the item ids of every pack")
      .Flag("json", "", "print one JSON object");
  if (!args.Parse(argv)) return 0;
  const std::string lengths_path = args.RequireStr("lengths");
  PackOptions o;
  o.capacity = args.RequireInt("capacity");
  o.algorithm = ParsePackAlgorithm(args.Str("algorithm", "bfd"));
  o.oversize = ParseOversize(args.Str("oversize", "drop"));
  o.compat = ParsePackCompat(args.Str("compat", "none"));
  o.max_images = args.Int("max-images");
  o.max_sequences = args.Int("max-sequences");
  o.buffer = args.Int("buffer");
  ValidatePackOptions(o);
  const std::vector<Index> lengths = ReadWholeNumbers("--lengths", lengths_path);
  std::vector<Index> images;
  if (auto path = args.Str("images")) {
    images = ReadWholeNumbers("--images", *path);
    if (images.size() != lengths.size()) {
      throw UsageError("--images: has " + std::to_string(images.size()) +
                       " entries but --lengths has " + std::to_string(lengths.size()));
    }
  } else if (o.max_images) {
    throw UsageError("--max-images: needs --images");
  }
  const bool list = args.Has("packs");
  const Packing p = PackItems(lengths, o, images);
  if (list && static_cast<Index>(p.items.size()) > kMaxListedEntries) {
    throw UsageError("--packs: would list more than " + std::to_string(kMaxListedEntries) +
                     " entries");
  }
  std::optional<RankSchedule> schedule;
  CostModel cost = ParseCostModel(args.Str("cost", "tokens"));
  // Parsed whether or not --world is given: a bad value is never ignored.
  const Index packs_per_rank = args.Int("packs-per-rank", 1);
  if (auto world = args.Int("world")) {
    schedule = BalanceRanks(PackCosts(p, cost), *world, packs_per_rank);
  } else if (args.Has("packs-per-rank") || args.Has("cost")) {
    throw UsageError(std::string(args.Has("cost") ? "--cost" : "--packs-per-rank") +
                     ": needs --world (ranks to deal the packs to)");
  }
  const double over =
      p.lower_bound > 0 ? static_cast<double>(p.num_packs()) / p.lower_bound - 1 : 0.0;

  if (args.Has("json")) {
    Json j;
    j.Begin();
    j.Key("items").Int(p.num_items);
    j.Key("dropped").Int(p.dropped());
    j.Key("num_packs").Int(p.num_packs());
    j.Key("lower_bound").Int(p.lower_bound);
    j.Key("efficiency").Double(p.efficiency());
    j.Key("algorithm").String(PackAlgorithmName(o.algorithm));
    j.Key("compat").String(PackCompatName(o.compat));
    j.Key("capacity").Int(o.capacity);
    j.Key("tokens").Int(p.tokens);
    j.Key("split_items").Int(p.split_items);
    j.Key("dropped_items").IntList(p.dropped_items);
    j.Key("over_lower_bound").Double(over);
    if (schedule) {
      j.Key("ranks").Begin();
      j.Key("world").Int(schedule->world_size);
      j.Key("packs_per_rank").Int(schedule->packs_per_rank);
      j.Key("cost").String(CostModelName(cost));
      j.Key("steps").Int(schedule->num_steps);
      j.Key("padding_packs").Int(schedule->padding_packs);
      j.Key("max_step_imbalance").Double(schedule->max_step_imbalance);
      j.Key("max_full_step_imbalance").Double(schedule->max_full_step_imbalance);
      j.Key("total_imbalance").Double(schedule->total_imbalance);
      j.End();
    }
    if (list) {
      j.Key("packs").BeginList();
      for (Index b = 0; b < p.num_packs(); ++b) {
        j.BeginList();
        for (Index e = p.offsets[b]; e < p.offsets[b + 1]; ++e) j.Int(p.items[e]);
        j.End();
      }
      j.End();
    }
    j.End();
    std::cout << j.str() << "\n";
    return 0;
  }
  std::printf(
      "%" PRId64 " items, %" PRId64 " tokens -> %" PRId64 " packs of %" PRId64 " (%s%s%s)\n",
      p.num_items, p.tokens, p.num_packs(), o.capacity,
      std::string(PackAlgorithmName(o.algorithm)).c_str(),
      o.compat == PackCompat::kNone ? ""
                                    : (", compat " + std::string(PackCompatName(o.compat))).c_str(),
      o.buffer ? (", buffer " + std::to_string(*o.buffer)).c_str() : "");
  std::printf("lower bound %" PRId64 " packs (+%.4f%%), efficiency %.4f%% (padding %.4f%%)\n",
              p.lower_bound, 100 * over, 100 * p.efficiency(), 100 * (1 - p.efficiency()));
  if (p.dropped() || p.split_items) {
    std::printf("oversize (%s): dropped %" PRId64 ", split %" PRId64 "\n",
                std::string(OversizeName(o.oversize)).c_str(), p.dropped(), p.split_items);
  }
  if (schedule) {
    std::printf("%" PRId64 " ranks x %" PRId64 " packs per step: %" PRId64 " steps, %" PRId64
                " padding packs, cost %s: worst full step +%.3f%%, worst "
                "step +%.3f%%, epoch +%.3f%%\n",
                schedule->world_size, schedule->packs_per_rank, schedule->num_steps,
                schedule->padding_packs, std::string(CostModelName(cost)).c_str(),
                100 * schedule->max_full_step_imbalance, 100 * schedule->max_step_imbalance,
                100 * schedule->total_imbalance);
  }
  if (list) {
    for (Index b = 0; b < p.num_packs(); ++b) {
      std::printf("pack %" PRId64 " (%" PRId64 " tokens):", b, p.PackTokens(b));
      for (Index e = p.offsets[b]; e < p.offsets[b + 1]; ++e) {
        std::printf(" %" PRId64, p.items[e]);
        if (p.starts[e] != 0 || p.lengths[e] != lengths[p.items[e]]) {
          std::printf("[%" PRId64 ":%" PRId64 "]", p.starts[e], p.starts[e] + p.lengths[e]);
        }
      }
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace shardkit::cli
