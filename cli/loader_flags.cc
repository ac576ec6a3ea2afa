// The flags of `shardkit loader-stats` (cli/loader_flags.h).
#include "cli/loader_flags.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/mixture_flags.h"
#include "cli/roles.h"
#include "shardkit/loader/option_fields.h"

namespace shardkit::cli {

namespace {

std::string Default(Index v) { return " (default " + std::to_string(v) + ")"; }

// The flags of LoaderOptions' fields (cli/flags.h): the true renames, the
// switches that turn a field off, and the fields the command sets by a rule of
// its own (--cp plans for the report only, --rank picks the ranks to run,
// --whale-policy).
constexpr FieldFlag kRenamed[] = {{"batch_size", "batch"},
                                  {"world_size", "world"},
                                  {"num_workers", "workers"},
                                  {"num_threads", "threads"}};
constexpr FieldFlag kNegated[] = {{"shuffle", "no-shuffle"}, {"equal_steps", "per-rank"}};
constexpr std::string_view kOwnRule[] = {"cp_size", "cp_granularity", "rank",
                                         "whale_unbalanced_io_slicing", "whale_drop_last_files"};

}  // namespace

// The text of a file (--resume).
std::string ReadText(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag + ": cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void ReadLoaderOptionFlags(const Args& args, LoaderOptions* o) {
  ReadOptionFlags(args, o, {kRenamed, kNegated, kOwnRule});
}

void DeclareLoaderFlags(Args& args) {
  const LoaderOptions d;  // the defaults are the core's
  args.Flag("tokens", "FILE", "token array: .npy (uint16/int32/uint32) or raw")
      .Flag("offsets", "FILE", "document offsets (num_documents + 1 entries): .npy or raw int64")
      .Flag("dir", "DIR", "a directory of <stem>.tokens.npy + <stem>.offsets.npy pairs")
      .Flag("source", "PATH[,PATH...]",
            "a token source in any format shardkit reads: a directory of .npy pairs, a\n"
            "Megatron PREFIX (PREFIX.bin + PREFIX.idx), a <stem>.tokens.npy; several\n"
            "paths are one source, numbered in the order given")
      .Flag("format", "NAME",
            "with --source or --mixture: npy | megatron | olmo | arrow (default: from the\nfiles)")
      .Flag("eos-token-id", "ID",
            "olmo files: documents end at this EOS id (a scan, cached beside the file);\n"
            "without it, from the file's .csv.gz")
      .Flag("bos-token-id", "ID",
            "olmo files, with --eos-token-id: an EOS ends a document only "
            "before this BOS")
      .Flag("column", "NAME",
            "arrow sources (a datasets save_to_disk folder, .arrow files): the list-of-ids\n"
            "column (default input_ids)")
      .Flag("vocab-size", "V",
            "olmo files without --token-dtype: the smallest uint dtype "
            "holding V ids")
      .Flag("token-dtype", "T",
            "dtype of raw token files: int32 | uint16 | uint32 | uint8 | int8 | int16 | int64 | "
            "uint64 "
            "(default " +
                std::string(TokenDTypeName(SourceOptions{}.raw_token_dtype)) + ")")
      .Flag("seq-len", "L", "tokens per row (required)")
      .Flag("batch", "B", "rows per batch (required)")
      .Flag("world", "W", "number of ranks" + Default(d.world_size))
      .Flag("rank", "R", "run only this rank")
      .Flag("workers", "K", "dataloader workers per rank" + Default(d.num_workers));
  AddShuffleFlags(args, "keep document order (default: shuffled per seed and epoch)", d.shuffle);
  args.Flag("algorithm", "NAME", Choices(PackAlgorithmNames(), PackAlgorithmName(d.algorithm)))
      .Flag("buffer", "N", "packing buffer in documents (default 1024)")
      .Flag("oversize", "NAME",
            Choices(OversizeNames(), OversizeName(d.oversize), {OversizeName(Oversize::kError)}) +
                ": documents longer than seq-len")
      .Flag("threads", "T",
            "collating threads per loader (and one planning thread); 0 = inline" +
                Default(d.num_threads))
      .Flag("prefetch", "N", "batches prefetched" + Default(d.prefetch))
      .Flag("read", "MODE",
            "auto | mmap | pread: how documents are read from their files (default " +
                std::string(ReadModeName(d.read)) + ": pread for --mixture, else mmap)")
      .Flag("max-batches", "N", "stop each loader (rank x worker) after N batches")
      .Flag("shard-files", "",
            "assign whole files to ranks by Whale's policies (with --dir and --per-rank)")
      .Flag("save-state", "FILE",
            "after the run, write the state of every loader run (rank x worker) as JSON")
      .Flag("resume", "FILE",
            "continue from states saved with --save-state (or Python's state_dict()): each "
            "loader from its own state, or, for another world size or worker count, from "
            "their merge")
      .Flag("whale-policy", "NAME",
            "with --shard-files: env (default: WHALE_UNBALANCED_IO_SLICING /\n"
            "WHALE_DROP_LAST_FILES) | default | unbalanced | drop_last")
      .Flag("per-rank", "", "pack each rank on its own (ranks get different batch counts)")
      .Flag("mixture", "SRC0,SRC1,...",
            "mix several sources (each a --source path or TOKENS:OFFSETS) with --weights: the\n"
            "loader's order is the mixture's window of --epoch; prints realised against\n"
            "target shares. --resume with other --weights changes them at the state's\n"
            "read point and reports the shares before and after the change apart\n"
            "(docs/loader.md, Mixing sources)")
      .Flag("weights", "W0,W1,...", "with --mixture: one weight per source")
      .Flag("samples", "N",
            "with --mixture: samples per epoch (default: the whole mixture when a source\n"
            "does not repeat, else the sum of the sources' documents; on --resume the state's)");
  AddMixtureFlags(args, "with --mixture: ", MixBy::kTokens);
  args.Flag("mode", "NAME",
            Choices(TrainModeNames(), TrainModeName(d.mode)) +
                ": equal steps at the end of the epoch")
      .Flag("cost", "NAME", Choices(CostModelNames(), CostModelName(d.cost)) + ": per-step balance")
      .Flag("cp", "C",
            "context parallelism over C ranks: plan every document with room for its\n"
            "per-document head-tail padding and report the causal work per CP rank of the\n"
            "plan's rows (contiguous, document-blind and per-document head-tail splits);\n"
            "the loaders deliver the unsplit rows")
      .Flag("cp-granularity", "G", "with --cp: pad documents to a multiple of G (default 2C)")
      .Flag("quiet", "", "no progress bar")
      .Flag("json", "", "print one JSON object");
  AddRolesFlags(args);
}

// The source of a run (--tokens/--offsets, --dir, --source), or the mixture's
// sources in `mix`.
std::shared_ptr<const TokenSource> OpenRunSource(const Args& args, OpenSourceOptions& open_options,
                                                 MixtureRun& mix) {
  SourceOptions& source_options = open_options.npy;
  if (auto t = args.Str("token-dtype")) {
    source_options.raw_token_dtype = ParseTokenDType(*t);
    open_options.olmo.token_dtype = source_options.raw_token_dtype;
  }
  open_options.olmo.vocab_size = args.Int("vocab-size");
  if (auto c = args.Str("column")) open_options.column = *c;
  open_options.olmo.eos_token_id = args.Int("eos-token-id");
  open_options.olmo.bos_token_id = args.Int("bos-token-id");
  if (auto f = args.Str("format")) {
    if (!args.Has("source") && !args.Has("mixture")) {
      throw UsageError("--format: needs --source or --mixture");
    }
    open_options.format = ParseSourceFormat(*f);
  }
  std::shared_ptr<const TokenSource> source;
  const bool mixing = args.Has("mixture");
  for (const char* flag :
       {"weights", "by", "samples", "block", "schedule", "linear", "schedule-unit", "no-repeat"}) {
    if (!mixing && args.Has(flag)) throw UsageError(std::string("--") + flag + ": needs --mixture");
  }
  if (mixing) {
    for (const char* flag : {"tokens", "offsets", "dir", "source", "shard-files", "no-shuffle"}) {
      if (args.Has(flag)) {
        throw UsageError(std::string("--") + flag +
                         ": not with --mixture (the mixture is the order; its sources are "
                         "given there)");
      }
    }
    mix.sources = OpenMixtureSources(*args.Str("mixture"), open_options);
    for (const auto& s : mix.sources) mix.files += s->num_parts();
  } else if (auto paths = args.Str("source")) {
    if (args.Has("tokens") || args.Has("offsets") || args.Has("dir")) {
      throw UsageError("--source: give either --source, --dir or --tokens with --offsets");
    }
    std::vector<std::string> list;
    std::stringstream stream(*paths);
    std::string path;
    while (std::getline(stream, path, ',')) {
      if (path.empty()) throw UsageError("--source: an empty path in '" + *paths + "'");
      list.push_back(path);
    }
    source = OpenSource(list, open_options);
  } else if (auto dir = args.Str("dir")) {
    if (args.Has("tokens") || args.Has("offsets")) {
      throw UsageError("--dir: give either --dir or --tokens with --offsets");
    }
    source = TokenSource::OpenDirectory(*dir, source_options);
  } else {
    source =
        TokenSource::Open(args.RequireStr("tokens"), args.RequireStr("offsets"), source_options);
  }
  return source;
}

}  // namespace shardkit::cli
