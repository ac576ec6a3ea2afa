// The fields of the loader's and the plan's options by name: one table per
// option struct, which the edges walk to read and write options (the Python
// bindings' keyword arguments, python/src/arguments.cc; the CLI's flags,
// cli/cmd_loader.cc), so that no edge maps a struct field by field and a new
// field is added here once.
//
// VisitOptions(options, visit) calls visit(name, field) for every field, in
// declaration order, with the field's core name; the one rename is
// TrainOptions::cp (size, strategy, granularity), visited as cp_size,
// cp_strategy and cp_granularity. Options that contain others visit their
// parts' tables: a LoaderOptions (a TrainOptions and a PaddingOptions plus the
// loader's own fields, loader.h) visits the TrainOptions fields, then the
// PaddingOptions ones; a CollateOptions (packing_metadata.h) seq_len, then
// its PaddingOptions. option_fields_test.cc counts each struct's fields
// against its table, so a field added without its line here fails there.
//
// Field types a visitor meets: Index (std::int64_t), std::uint64_t, bool,
// std::optional<Index> and the enums PackAlgorithm, Oversize, TrainMode,
// CostModel, CpStrategy, PaddingSide, VisionCost, MultimodalMode, Split,
// Remainder, WindowRule and ReadMode (read with ParseOptionField below), and
// ShardOptions::weights (std::vector<double>, which each edge reads by a rule
// of its own: an array in Python, a file in the CLI). MultimodalOptions
// (multimodal_plan.h) has a table of its own; ShardOptions (shard_plan.h) and
// EvalOptions (eval_plan.h) visit their shared ItemSplitOptions part (split,
// window, order), then their own fields: the Python ShardPlan / EvalPlan take
// their keyword arguments through them (python/src/sharding.cc, eval.cc), the
// CLI's shard / audit / eval-plan their flags (cli/flags.h).
//
// Thread-safety: pure functions over the caller's struct.
#ifndef SHARDKIT_LOADER_OPTION_FIELDS_H_
#define SHARDKIT_LOADER_OPTION_FIELDS_H_

#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "shardkit/eval/eval_plan.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/multimodal_plan.h"
#include "shardkit/loader/train_plan.h"
#include "shardkit/packing/packing.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit {

// `Options` is T, or const T (a table reads and writes alike).
template <typename Options, typename T>
concept OptionsOf = std::is_same_v<std::remove_const_t<Options>, T>;

template <OptionsOf<TrainOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  v("seq_len", o.seq_len);
  v("batch_size", o.batch_size);
  v("world_size", o.world_size);
  v("micro_batches", o.micro_batches);
  v("mode", o.mode);
  v("shuffle", o.shuffle);
  v("seed", o.seed);
  v("epoch", o.epoch);
  v("position", o.position);
  v("algorithm", o.algorithm);
  v("buffer", o.buffer);
  v("max_images", o.max_images);
  v("max_sequences", o.max_sequences);
  v("oversize", o.oversize);
  v("cost", o.cost);
  v("cp_size", o.cp.size);
  v("cp_strategy", o.cp.strategy);
  v("cp_granularity", o.cp.granularity);
}

// The packer's options (shardkit/packing/packing.h). A plan packs with the
// fields it shares with TrainOptions by name (TrainPackOptions, through
// AssignFieldsByName below): capacity is the plan's seq_len, and the fields in
// kPackerOnlyFields keep the packer's defaults.
template <OptionsOf<PackOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  v("capacity", o.capacity);
  v("algorithm", o.algorithm);
  v("max_images", o.max_images);
  v("max_sequences", o.max_sequences);
  v("oversize", o.oversize);
  v("buffer", o.buffer);
  v("compat", o.compat);
}

// compat: TRL's rows (pack_dataset), not a plan's.
inline constexpr std::string_view kPackerOnlyFields[] = {"compat"};

template <OptionsOf<PaddingOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  v("padding_side", o.padding_side);
  v("pad_token_id", o.pad_token_id);
  v("ignore_index", o.ignore_index);
  v("causal", o.causal);
}

// Options contained by inheritance: `o` seen as its part `Part` (const kept).
template <typename Part, typename Options>
auto& OptionsPart(Options& o) {
  return static_cast<std::conditional_t<std::is_const_v<Options>, const Part, Part>&>(o);
}

template <OptionsOf<CollateOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  v("seq_len", o.seq_len);
  VisitOptions(OptionsPart<PaddingOptions>(o), v);
}

template <OptionsOf<LoaderOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  VisitOptions(OptionsPart<TrainOptions>(o), v);
  VisitOptions(OptionsPart<PaddingOptions>(o), v);
  v("rank", o.rank);
  v("worker", o.worker);
  v("num_workers", o.num_workers);
  v("num_threads", o.num_threads);
  v("prefetch", o.prefetch);
  v("shard_files", o.shard_files);
  v("whale_unbalanced_io_slicing", o.whale_unbalanced_io_slicing);
  v("whale_drop_last_files", o.whale_drop_last_files);
  v("equal_steps", o.equal_steps);
  v("block_mask", o.block_mask);
  v("cp_rank", o.cp_rank);
  v("share_plan", o.share_plan);
  v("local_rank", o.local_rank);
  v("read", o.read);
}

template <OptionsOf<MultimodalOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  v("seq_len", o.seq_len);
  v("rows_per_rank", o.rows_per_rank);
  v("world_size", o.world_size);
  v("max_images", o.max_images);
  v("max_vision_tokens", o.max_vision_tokens);
  v("max_images_per_sample", o.max_images_per_sample);
  v("vision_cost", o.vision_cost);
  v("mode", o.mode);
  v("shuffle", o.shuffle);
  v("seed", o.seed);
  v("epoch", o.epoch);
}

template <OptionsOf<ItemSplitOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  v("split", o.split);
  v("offset", o.offset);
  v("limit", o.limit);
  v("shuffle", o.shuffle);
  v("seed", o.seed);
  v("epoch", o.epoch);
}

template <OptionsOf<ShardOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  VisitOptions(OptionsPart<ItemSplitOptions>(o), v);
  v("remainder", o.remainder);
  v("weights", o.weights);
  v("equal_counts", o.equal_counts);
}

template <OptionsOf<EvalOptions> Options, typename Visit>
void VisitOptions(Options& o, Visit&& v) {
  VisitOptions(OptionsPart<ItemSplitOptions>(o), v);
  v("devices", o.devices);
  v("min_device_batch", o.min_device_batch);
  v("window", o.window);
}

// Sets every field of `to` from the field of `from` with the same name in
// their tables (or the name `renamed` maps it from: {from's name, to's name}),
// when both have the same type; the others keep their values. What makes a
// struct built from another carry a field added to both without a line of
// its own (TrainPackOptions).
template <typename From, typename To>
void AssignFieldsByName(const From& from, To* to,
                        std::span<const std::pair<std::string_view, std::string_view>> renamed) {
  VisitOptions(*to, [&](const char* to_name, auto& to_field) {
    VisitOptions(from, [&](const char* from_name, const auto& from_field) {
      std::string_view name = from_name;
      for (auto [old_name, new_name] : renamed) {
        if (old_name == name) name = new_name;
      }
      if constexpr (std::is_same_v<std::decay_t<decltype(from_field)>,
                                   std::decay_t<decltype(to_field)>>) {
        if (name == to_name) to_field = from_field;
      }
    });
  });
}

// The enum fields' text, by the core's name tables: ParseOptionField(text,
// &field) (throws invalid_argument naming the option, as Parse* does) and
// OptionFieldName(value).
inline PackAlgorithm ParseOptionField(std::string_view s, PackAlgorithm*) {
  return ParsePackAlgorithm(s);
}
inline Oversize ParseOptionField(std::string_view s, Oversize*) { return ParseOversize(s); }
inline TrainMode ParseOptionField(std::string_view s, TrainMode*) { return ParseTrainMode(s); }
inline CostModel ParseOptionField(std::string_view s, CostModel*) { return ParseCostModel(s); }
inline PaddingSide ParseOptionField(std::string_view s, PaddingSide*) {
  return ParsePaddingSide(s);
}
inline CpStrategy ParseOptionField(std::string_view s, CpStrategy*) { return ParseCpStrategy(s); }
inline VisionCost ParseOptionField(std::string_view s, VisionCost*) { return ParseVisionCost(s); }
inline MultimodalMode ParseOptionField(std::string_view s, MultimodalMode*) {
  return ParseMultimodalMode(s);
}
inline Split ParseOptionField(std::string_view s, Split*) { return ParseSplit(s); }
inline Remainder ParseOptionField(std::string_view s, Remainder*) { return ParseRemainder(s); }
inline WindowRule ParseOptionField(std::string_view s, WindowRule*) { return ParseWindowRule(s); }
inline ReadMode ParseOptionField(std::string_view s, ReadMode*) { return ParseReadMode(s); }
inline std::string_view OptionFieldName(PackAlgorithm v) { return PackAlgorithmName(v); }
inline std::string_view OptionFieldName(ReadMode v) { return ReadModeName(v); }
inline std::string_view OptionFieldName(Oversize v) { return OversizeName(v); }
inline std::string_view OptionFieldName(TrainMode v) { return TrainModeName(v); }
inline std::string_view OptionFieldName(CostModel v) { return CostModelName(v); }
inline std::string_view OptionFieldName(PaddingSide v) { return PaddingSideName(v); }
inline std::string_view OptionFieldName(CpStrategy v) { return CpStrategyName(v); }
inline std::string_view OptionFieldName(Split v) { return SplitName(v); }
inline std::string_view OptionFieldName(Remainder v) { return RemainderName(v); }
inline std::string_view OptionFieldName(WindowRule v) { return WindowRuleName(v); }

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_OPTION_FIELDS_H_
