// shardkit multimodal-stats: a sample table (JSON, or tar shards indexed by
// the core) -> a MultimodalPlan's steps, their balance before and after the
// plan's deal, and a picture of vision cost per step per rank.
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/multimodal_report.h"
#include "shardkit/base/atomic_file.h"
#include "shardkit/loader/files.h"
#include "shardkit/loader/multimodal_plan.h"
#include "shardkit/loader/multimodal_stats.h"
#include "shardkit/loader/tar_shard.h"

namespace shardkit::cli {

namespace {

constexpr std::uint64_t kMaxTableBytes = std::uint64_t{1} << 30;

std::vector<std::string> SplitPaths(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma == start) throw UsageError("--tar: an empty path in '" + text + "'");
    out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

int RunMultimodalStats(const Argv& argv) {
  Args args("multimodal-stats",
            "Plans one epoch of image-text samples (MultimodalPlan: packs under token,\n"
            "image and vision-token budgets, equal steps on every rank) and reports per\n"
            "step the heaviest rank / mean rank of LM tokens, images and vision cost,\n"
            "padding and dropped samples, before balancing (the same packs dealt\n"
            "round-robin) and after (the plan's deal), with an SVG picture.");
  args.Flag("table", "FILE",
            "the sample table as JSON ('-' = stdin): {\"lengths\": [...], \"vision_tokens\": "
            "[[per image], ...]} (Python's sample_table()) or {\"lengths\", \"image_counts\"}")
      .Flag("tar", "PATHS",
            "WebDataset tar shards, comma-separated (indexed once, the index cached "
            "beside each shard)")
      .Flag("text", "EXT", "tar: the text member, ids (int32 tokens) | json (default ids)")
      .Flag("vision-rule", "NAME",
            Choices(VisionRuleNames(), "one") + ": tar: vision tokens per image from its size")
      .Flag("inline-vision", "", "tar: count each image's vision tokens in the sample's length")
      .Flag("seq-len", "N", "LM tokens per row (required)")
      .Flag("world", "W", "ranks (default 1)")
      .Flag("batch", "R", "rows per rank per step (default 1)")
      .Flag("max-images", "M", "images per row")
      .Flag("max-vision-tokens", "V", "vision tokens per row")
      .Flag("max-images-per-sample", "K", "samples with more images are dropped")
      .Flag("vision-cost", "NAME", "tokens (default) | squared: the balanced cost")
      .Flag("mode", "NAME", "pad (default) | drop: the last partial step");
  AddShuffleFlags(args, "samples in table order (default: shuffled by --seed/--epoch)",
                  MultimodalOptions{}.shuffle);
  args.Flag("steps", "", "list every step's per-rank values")
      .Flag("svg", "PATH", "write the picture of vision cost per step per rank (atomically)")
      .Flag("json", "", "print one JSON object");
  if (!args.Parse(argv)) return 0;
  if (args.Has("table") == args.Has("tar")) {
    throw UsageError("--table: give the sample table with --table FILE or --tar PATHS (one)");
  }
  MultimodalOptions o;
  (void)args.RequireInt("seq-len");
  constexpr FieldFlag kRenamed[] = {{"rows_per_rank", "batch"}, {"world_size", "world"}};
  constexpr FieldFlag kNegated[] = {{"shuffle", "no-shuffle"}};
  ReadOptionFlags(args, &o, {kRenamed, kNegated, {}});

  SampleTable table;
  std::string source;
  if (auto path = args.Str("table")) {
    for (const char* flag : {"text", "vision-rule", "inline-vision"}) {
      if (args.Has(flag)) throw UsageError(std::string("--") + flag + ": only with --tar");
    }
    table = SampleTableFromJson(ReadWholeFile("table", *path, kMaxTableBytes), "table");
    source = *path;
  } else {
    const std::string paths = args.RequireStr("tar");
    const VisionRule rule = ParseVisionRule(args.Str("vision-rule", "one"));
    TarShardOptions to;
    to.text_ext = args.Str("text", "ids");
    std::vector<TarShard> shards;
    for (const std::string& p : SplitPaths(paths)) shards.push_back(TarShard::Open(p, to, "tar"));
    table = SampleTableFromTar(shards, rule, args.Has("inline-vision"));
    source = paths;
  }
  const MultimodalPlan plan(std::move(table), o);
  MultimodalReport report{&plan,
                          source,
                          DealStats(plan, MultimodalDeal::kRoundRobin),
                          DealStats(plan, MultimodalDeal::kPlan),
                          args.Has("steps"),
                          args.Str("svg")};
  if (report.svg) {
    WriteFileAtomically(*report.svg, SvgVisionPerStep(report.before, report.after), "svg");
  }
  PrintMultimodalStats(report, args.Has("json"));
  return 0;
}

}  // namespace shardkit::cli
