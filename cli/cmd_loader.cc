// shardkit loader-stats: runs the token loader over a data set for every rank
// (or one) and reports throughput, padding and balance: parse -> run -> report
// (cli/loader_report.cc prints).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/loader_report.h"
#include "cli/roles.h"
#include "shardkit/base/atomic_file.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/loader_stats.h"
#include "shardkit/loader/mixture_loader.h"
#include "shardkit/loader/option_fields.h"
#include "shardkit/loader/source_formats.h"

namespace shardkit::cli {

namespace {

std::string Default(Index v) { return " (default " + std::to_string(v) + ")"; }

// The text of a file (--resume).
std::string ReadText(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag + ": cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The state each consumer resumes from: the core's rule, ResumeStateFor
// (its own state when the file holds one for it, else the merge).
std::map<Index, LoaderState> ResumeStates(const std::string& path, Index consumers,
                                          const std::vector<Index>& wanted) {
  std::vector<LoaderState> states;
  std::map<Index, LoaderState> by;
  try {
    states = LoaderStatesFromJson(ReadText("--resume", path));
    for (Index c : wanted) by[c] = ResumeStateFor(states, consumers, c);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--resume: '" + path + "': " + e.what());
  }
  return by;
}

// --mixture SRC0,SRC1,...: each a directory or TOKENS:OFFSETS.
std::vector<std::shared_ptr<const TokenSource>> OpenMixtureSources(
    const std::string& spec, const OpenSourceOptions& options) {
  std::vector<std::shared_ptr<const TokenSource>> out;
  std::stringstream stream(spec);
  std::string part;
  while (std::getline(stream, part, ',')) {
    if (part.empty()) throw UsageError("--mixture: an empty source in '" + spec + "'");
    const std::size_t colon = part.find(':');
    try {
      out.push_back(
          colon == std::string::npos
              ? OpenSource({part}, options)
              : TokenSource::Open(part.substr(0, colon), part.substr(colon + 1), options.npy));
    } catch (const std::exception& e) {
      throw UsageError("--mixture: source " + std::to_string(out.size()) + " ('" + part +
                       "'): " + e.what());
    }
  }
  if (out.empty()) throw UsageError("--mixture: no sources in '" + spec + "'");
  return out;
}

// ---- parse ------------------------------------------------------------------

// The flags of LoaderOptions' fields are their names (shardkit/loader/
// option_fields.h) with '-' for '_'; the true renames, the switches that turn
// a field off, and the fields the command sets by a rule of its own (--cp
// plans for the report only, --rank picks the ranks to run, --whale-policy).
constexpr std::pair<std::string_view, std::string_view> kRenamed[] = {{"batch_size", "batch"},
                                                                      {"world_size", "world"},
                                                                      {"num_workers", "workers"},
                                                                      {"num_threads", "threads"}};
constexpr std::pair<std::string_view, std::string_view> kNegated[] = {{"shuffle", "no-shuffle"},
                                                                      {"equal_steps", "per-rank"}};
constexpr std::string_view kOwnRule[] = {"cp_size", "cp_granularity", "rank",
                                         "whale_unbalanced_io_slicing", "whale_drop_last_files"};

void ReadOptionFlags(const Args& args, LoaderOptions* o) {
  VisitOptions(*o, [&](const char* name, auto& field) {
    using T = std::decay_t<decltype(field)>;
    for (std::string_view own : kOwnRule) {
      if (own == name) return;
    }
    for (auto [negated, flag] : kNegated) {
      if (negated != name) continue;
      if constexpr (std::is_same_v<T, bool>) field = !args.Has(std::string(flag));
      return;
    }
    std::string flag = name;
    for (auto [renamed, short_flag] : kRenamed) {
      if (renamed == name) flag = short_flag;
    }
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (!args.Has(flag)) return;
    if constexpr (std::is_same_v<T, bool>) {
      field = true;
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      field = args.Uint(flag, field);
    } else if constexpr (std::is_same_v<T, Index> || std::is_same_v<T, std::optional<Index>>) {
      field = *args.Int(flag);
    } else {
      field = ParseOptionField(*args.Str(flag), &field);
    }
  });
}

void DeclareFlags(Args& args) {
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
      .Flag("workers", "K", "dataloader workers per rank" + Default(d.num_workers))
      .Flag("no-shuffle", "", "keep document order (default: shuffled per seed and epoch)")
      .Flag("seed", "S", "shuffle seed" + Default(static_cast<Index>(d.seed)))
      .Flag("epoch", "E", "epoch" + Default(static_cast<Index>(d.epoch)))
      .Flag("algorithm", "NAME", Choices(PackAlgorithmNames(), PackAlgorithmName(d.algorithm)))
      .Flag("buffer", "N", "packing buffer in documents (default 1024)")
      .Flag("oversize", "NAME",
            Choices(OversizeNames(), OversizeName(d.oversize), {OversizeName(Oversize::kError)}) +
                ": documents longer than seq-len")
      .Flag("threads", "T",
            "collating threads per loader (and one planning thread); 0 = inline" +
                Default(d.num_threads))
      .Flag("prefetch", "N", "batches prefetched" + Default(d.prefetch))
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
      .Flag("by", "NAME", "with --mixture: tokens (default; weights are token shares) | samples")
      .Flag("samples", "N",
            "with --mixture: samples per epoch (default: the whole mixture when a source\n"
            "does not repeat, else the sum of the sources' documents; on --resume the state's)")
      .Flag("block", "B", "with --mixture: samples per block (default: the smallest valid)")
      .Flag("schedule", "P:W,..;..", "with --mixture: weights from position P on")
      .Flag("linear", "", "with --mixture: move the weights linearly between schedule points")
      .Flag("schedule-unit", "NAME",
            "with --mixture: samples (default) | tokens: schedule positions count tokens")
      .Flag("no-repeat", "K0,K1,...",
            "with --mixture: sources that end the mixture when they run out")
      .Flag("mode", "NAME",
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
    if (args.Str("mode", "pad") == "continuous") {
      throw UsageError(
          "--mode: 'continuous' is not supported with --mixture (each epoch is its "
          "own window); use pad or drop");
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

// --mixture: the requested mixture, the order read (resumed with --resume),
// the epoch's window as the run's source.
std::shared_ptr<const TokenSource> SetUpMixture(const Args& args, LoaderOptions& o,
                                                MixtureRun& mix) {
  const std::vector<double> weights = ParseDoubles("--weights", args.RequireStr("weights"));
  MixtureOptions mo;
  try {
    mo.by = ParseMixBy(args.Str("by", "tokens"));
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--") + e.what());
  }
  mo.seed = o.seed;
  if (auto b = args.Int("block")) mo.block = *b;
  if (auto sch = args.Str("schedule")) mo.schedule = ParseSchedule(*sch);
  if (args.Has("linear")) mo.interpolation = Interpolation::kLinear;
  mo.schedule_unit = ParseMixBy(args.Str("schedule-unit", "samples"), "--schedule-unit");
  if (args.Has("no-repeat")) {
    mo.repeat.assign(mix.sources.size(), true);
    for (std::int64_t k : args.IntList("no-repeat")) {
      if (k < 0 || k >= static_cast<std::int64_t>(mix.sources.size())) {
        throw UsageError("--no-repeat: source " + std::to_string(k) + " is outside [0, " +
                         std::to_string(mix.sources.size()) + ")");
      }
      mo.repeat[static_cast<std::size_t>(k)] = false;
    }
  }
  if (auto n = args.Int("samples")) {
    if (*n < 1) throw UsageError("--samples: must be at least 1, got " + std::to_string(*n));
    mix.samples = *n;
  }
  // The core's mixture loader assembles the run (the mixture's rules, the
  // order, the window, resume with changed weights); the consumers read its
  // window.
  mix.loader = std::make_unique<MixtureLoader>(mix.sources, weights, mo, o, mix.samples);
  if (auto path = args.Str("resume")) {
    const std::string text = ReadText("--resume", *path);
    try {
      const shardkit::Json list = ParseJson(text, "state");
      std::string one = text;
      if (list.type() == shardkit::Json::Type::kArray) {
        std::vector<std::string> texts;
        for (const shardkit::Json& s : list.array()) texts.push_back(WriteJson(s));
        one = texts.size() == 1 ? texts[0] : MergeMixtureLoaderStates(texts);
      }
      mix.loader->Load(one);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--resume: '" + *path + "': " + e.what());
    }
    const auto& r = *mix.loader->last_resume();
    mix.resumed.emplace(MixtureResume{mix.loader->order(),
                                      MixtureLoaderStateFromJson(mix.loader->State()).loader,
                                      r.changed, r.read, r.at});
    o.epoch = mix.loader->epoch();
  }
  mix.requested.emplace(mix.loader->mixture());
  mix.order.emplace(mix.loader->order());
  const MixtureWindow window = mix.order->Window(o.epoch);
  mix.window_sources.resize(static_cast<std::size_t>(window.count));
  std::vector<Index> items(static_cast<std::size_t>(window.count));
  mix.order->Fill(window.first, window.first + window.count, mix.window_sources.data(),
                  items.data());
  return mix.loader->view();
}

}  // namespace

int RunLoaderStats(const Argv& argv) {
  Args args("loader-stats",
            "Runs the token loader (read -> pack -> collate, background threads) over a\n"
            "tokenised data set for every rank, or one, and reports tokens/s, padding\n"
            "and the balance of batches and tokens across ranks. By default the batches\n"
            "follow the equal-steps plan (every rank the same number of steps; the\n"
            "per-step balance is reported); --per-rank packs each rank on its own.\n"
            "A progress bar goes to stderr (--quiet turns it off).");
  DeclareFlags(args);
  if (!args.Parse(argv)) return 0;
  const std::optional<std::vector<DataRoles>> roles = RolesFromArgs(args);
  OpenSourceOptions open_options;
  MixtureRun mix;
  const bool mixing = args.Has("mixture");
  std::shared_ptr<const TokenSource> source = OpenRunSource(args, open_options, mix);
  LoaderOptions o;
  (void)args.RequireInt("seq-len");
  (void)args.RequireInt("batch");
  ReadOptionFlags(args, &o);
  if (roles) o.world_size = WorldFromArgs(args, roles);
  if (mixing) o.shuffle = false;
  if (args.Has("whale-policy") && !o.shard_files) {
    throw UsageError("--whale-policy: needs --shard-files");
  }
  const std::string policy_name = args.Str("whale-policy", "env");
  const WhalePolicy policy = policy_name == "env" ? WhalePolicyFromEnvironment()
                                                  : ParseWhalePolicy("--whale-policy", policy_name);
  o.whale_unbalanced_io_slicing = policy.unbalanced_io_slicing;
  o.whale_drop_last_files = policy.drop_last_files;
  if (mixing) source = SetUpMixture(args, o, mix);
  // --cp: the plan of a CP run (cp.size = C) for the report; the loaders
  // below keep its granularity and deliver whole rows.
  std::optional<CpWorkSummary> cp_work;
  const std::optional<Index> cp_granularity = args.Int("cp-granularity");
  if (cp_granularity && !args.Has("cp")) {
    throw UsageError("--cp-granularity: " + std::to_string(*cp_granularity) + " needs --cp");
  }
  if (auto cp = args.Int("cp")) {
    if (!o.equal_steps || mixing) {
      throw UsageError("--cp: " + std::to_string(*cp) +
                       " needs the equal-steps plan (not with --per-rank, --shard-files or "
                       "--mixture)");
    }
    LoaderOptions c = o;
    c.cp.size = *cp;
    c.cp.granularity = cp_granularity;
    TokenLoader probe(source, c);
    cp_work = SummarizeCpWork(*probe.train_plan());
    o.cp.granularity = CpGranule(c.cp);
  }
  const Index max_batches = args.Int("max-batches", -1);
  if (args.Has("max-batches") && max_batches < 0) {
    throw UsageError("--max-batches: must be at least 0, got " + std::to_string(max_batches));
  }
  // Every worker of every rank runs here one after another (as ranks do).
  if (o.num_workers > 4096) {
    throw UsageError("--workers: " + std::to_string(o.num_workers) +
                     " workers per rank are too many to run one after another (at most 4096)");
  }
  std::vector<Index> ranks;
  if (auto rank = args.Int("rank")) {
    ranks.push_back(*rank);
  } else {
    CheckAtLeast("world_size", o.world_size, 1);
    if (o.world_size > 4096) {
      throw UsageError("--world: " + std::to_string(o.world_size) +
                       " ranks are too many to run one after another; pass --rank");
    }
    for (Index r = 0; r < o.world_size; ++r) ranks.push_back(r);
  }
  std::optional<WhaleChoice> file_policy;
  // Validate every option before the first batch; the equal-steps plan is the
  // same on every rank.
  std::optional<TrainSummary> plan;
  for (Index r : ranks) {
    LoaderOptions c = o;
    c.rank = r;
    TokenLoader probe(source, c);
    file_policy = probe.file_policy();
    if (probe.train_plan() && !plan) plan = probe.train_plan()->summary();
    if (plan) break;
  }
  std::vector<Index> consumers;  // consumer = rank + worker * world
  for (Index r : ranks) {
    for (Index w = 0; w < o.num_workers; ++w) consumers.push_back(r + w * o.world_size);
  }
  std::map<Index, LoaderState> resume;
  if (mix.resumed) {
    // Every consumer continues from the (merged) state the rule gave.
    for (Index c : consumers) resume[c] = mix.resumed->loader;
  } else if (auto path = args.Str("resume")) {
    resume = ResumeStates(*path, o.world_size * o.num_workers, consumers);
  }
  std::optional<std::string> save_path = args.Str("save-state");
  std::vector<LoaderState> saved;
  const bool json = args.Has("json");
  const Index expected_tokens =
      ranks.size() == static_cast<std::size_t>(o.world_size) ? source->num_tokens() : 0;
  Progress progress(!args.Has("quiet"), expected_tokens);
  std::vector<RankLoadStats> stats;
  Index all_tokens = 0, all_batches = 0;
  const auto start = Clock::now();
  for (Index r : ranks) {
    RankLoadStats s;
    s.rank = r;
    const auto rank_start = Clock::now();
    for (Index w = 0; w < o.num_workers; ++w) {
      LoaderOptions c = o;
      c.rank = r;
      c.worker = w;
      std::optional<LoaderState> from;
      if (auto it = resume.find(r + w * o.world_size); it != resume.end()) from = it->second;
      TokenLoader loader(source, c, from);
      Index worker_batches = 0;
      while (max_batches < 0 || worker_batches < max_batches) {
        auto batch = loader.Next();
        if (!batch) break;
        ++worker_batches;
        s.Add(*batch);
        if (mixing) {
          mix.delivered.Add(*batch, mix.window_sources);
          if (mix.resumed && mix.resumed->changed) {
            const Index read = mix.resumed->read;
            mix.before_change.Add(*batch, mix.window_sources, 0, read);
            mix.after_change.Add(*batch, mix.window_sources, read,
                                 static_cast<Index>(mix.window_sources.size()));
          }
        }
        all_tokens += batch->tokens;
        ++all_batches;
        progress.Update(all_tokens, all_batches,
                        std::chrono::duration<double>(Clock::now() - start).count());
      }
      s.dropped += loader.dropped();
      if (save_path) saved.push_back(loader.State());
    }
    s.seconds = std::chrono::duration<double>(Clock::now() - rank_start).count();
    stats.push_back(s);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  progress.Update(all_tokens, all_batches, seconds, true);
  progress.Done();
  if (save_path) {
    // Written whole to a temporary and renamed: a kill, a full disk or a
    // file-size limit leaves the previous state (--resume's file) intact.
    std::string text;
    if (mixing) {
      text = "[";
      for (std::size_t i = 0; i < saved.size(); ++i) {
        text += (i ? ", " : "") + MixtureLoaderStateToJson(*mix.order, saved[i]);
      }
      text += "]\n";
    } else {
      text = LoaderStatesToJson(saved) + "\n";
    }
    WriteFileAtomically(*save_path, text, "--save-state");
  }

  LoadRunScope scope;
  scope.data_tokens = source->num_tokens();
  scope.all_ranks = ranks.size() == static_cast<std::size_t>(o.world_size);
  scope.whole_epoch = max_batches < 0 && resume.empty();
  scope.shard_files = o.shard_files;
  scope.plan = plan;
  scope.mode = o.mode;
  const LoadSummary sum = SummarizeLoad(stats, scope);
  const double rate = seconds > 0 ? all_tokens / seconds : 0.0;
  const Index files = mixing ? mix.files : source->num_parts();
  LoaderStatsReport report;
  report.source = source.get();
  report.files = files;
  report.options = o;
  report.file_policy = file_policy;
  report.plan = plan;
  report.stats = std::move(stats);
  report.sum = sum;
  report.seconds = seconds;
  report.rate = rate;
  report.resumed = !resume.empty();
  report.resume_path = args.Str("resume", "");
  report.mixture = mixing ? &mix : nullptr;
  report.cp_work = cp_work;
  report.cp_granularity = o.cp.granularity;
  report.roles = roles ? &*roles : nullptr;
  PrintLoaderStats(report, args.Has("json"));
  return 0;
}

}  // namespace shardkit::cli
