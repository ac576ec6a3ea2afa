// shardkit loader-stats: runs the token loader over a data set for every rank
// (or one) and reports throughput, padding and balance.
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
#include "cli/roles.h"
#include "shardkit/base/atomic_file.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/loader_stats.h"
#include "shardkit/loader/mixture_loader.h"
#include "shardkit/loader/source_formats.h"

namespace shardkit::cli {

namespace {

using Clock = std::chrono::steady_clock;

class Progress {
 public:
  Progress(bool enabled, Index total_tokens) : enabled_(enabled), total_(total_tokens) {}
  void Update(Index done_tokens, Index batches, double seconds, bool force = false) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (!force && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double fraction =
        total_ > 0 ? std::min(1.0, static_cast<double>(done_tokens) / total_) : 1.0;
    const int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar += std::string(static_cast<std::size_t>(width - filled), '.');
    std::fprintf(stderr, "\r[%s] %5.1f%%  %" PRId64 " batches  %.1f Mtokens/s ", bar.c_str(),
                 100 * fraction, batches, seconds > 0 ? done_tokens / seconds / 1e6 : 0.0);
    std::fflush(stderr);
  }
  void Done() {
    if (enabled_) std::fprintf(stderr, "\n");
  }

 private:
  bool enabled_;
  Index total_;
  Clock::time_point last_{};
};

std::string Default(Index v) { return " (default " + std::to_string(v) + ")"; }

// The states to resume each consumer from: its own state when the file holds
// one for every consumer of this run (exact resume), else the merge of all
// the states in the file (elastic: any world size or worker count).
std::map<Index, LoaderState> ResumeStates(const std::string& path, Index consumers,
                                          const std::vector<Index>& wanted) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--resume: cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  std::vector<LoaderState> states;
  try {
    states = LoaderStatesFromJson(text.str());
  } catch (const std::invalid_argument& e) {
    throw UsageError("--resume: '" + path + "': " + e.what());
  }
  std::map<Index, LoaderState> by;
  for (const LoaderState& s : states) {
    if (s.consumers == consumers) by[s.consumer] = s;
  }
  bool exact = true;
  for (Index c : wanted) exact = exact && by.count(c) > 0;
  if (exact) return by;
  LoaderState merged;
  try {
    merged = MergeLoaderStates(states);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--resume: '" + path + "': " + e.what());
  }
  by.clear();
  for (Index c : wanted) by[c] = merged;
  return by;
}

// The text of a file (--resume).
std::string ReadText(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag + ": cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
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

// A mixture loader run: its sources, the core loader that assembles it (the
// order, the window, resume), the weights asked for, the order read.
struct MixtureRun {
  std::vector<std::shared_ptr<const TokenSource>> sources;
  std::unique_ptr<MixtureLoader> loader;
  std::optional<Mixture> requested;
  std::optional<MixtureOrder> order;
  std::optional<Index> samples;  // given with --samples
  std::optional<MixtureResume> resumed;
  std::vector<Index> window_sources;
  MixtureDelivery delivered;
  // After a resume that changed the weights: what the run delivered of the
  // window documents read before the change (old weights) and after it.
  MixtureDelivery before_change, after_change;
  // Files under every source (a mixture's loader reads one gathered view).
  Index files = 0;
};

}  // namespace

int RunLoaderStats(const Argv& argv) {
  Args args("loader-stats",
            "Runs the token loader (read -> pack -> collate, background threads) over a\n"
            "tokenised data set for every rank, or one, and reports tokens/s, padding\n"
            "and the balance of batches and tokens across ranks. By default the batches\n"
            "follow the equal-steps plan (every rank the same number of steps; the\n"
            "per-step balance is reported); --per-rank packs each rank on its own.\n"
            "A progress bar goes to stderr (--quiet turns it off).");
  const LoaderOptions d;  // the defaults are the core's
  args.Flag("tokens", "FILE", "token array: .npy (uint16/int32/uint32) or raw")
      .Flag("offsets", "FILE", "document offsets (num_documents + 1 entries): .npy or raw int64")
      .Flag("dir", "DIR", "a directory of <stem>.tokens.npy + <stem>.offsets.npy pairs")
      .Flag("source", "PATH[,PATH...]",
            "a token source in any format shardkit reads: a directory of .npy pairs, a\n"
            "Megatron PREFIX (PREFIX.bin + PREFIX.idx), a <stem>.tokens.npy; several\n"
            "paths are one source, numbered in the order given")
      .Flag("format", "NAME",
            "with --source or --mixture: npy | megatron (default: from the files)")
      .Flag("token-dtype", "T",
            "dtype of raw token files: int32 | uint16 | uint32 | uint8 | int8 | int16 | int64 "
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
  if (!args.Parse(argv)) return 0;
  const std::optional<std::vector<DataRoles>> roles = RolesFromArgs(args);

  OpenSourceOptions open_options;
  SourceOptions& source_options = open_options.npy;
  if (auto t = args.Str("token-dtype")) source_options.raw_token_dtype = ParseTokenDType(*t);
  if (auto f = args.Str("format")) {
    if (!args.Has("source") && !args.Has("mixture")) {
      throw UsageError("--format: needs --source or --mixture");
    }
    open_options.format = ParseSourceFormat(*f);
  }
  std::shared_ptr<const TokenSource> source;
  MixtureRun mix;
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
  LoaderOptions o;
  o.seq_len = args.RequireInt("seq-len");
  o.batch_size = args.RequireInt("batch");
  o.world_size = roles ? WorldFromArgs(args, roles) : args.Int("world", d.world_size);
  o.num_workers = args.Int("workers", d.num_workers);
  o.shuffle = !args.Has("no-shuffle") && !mixing;
  o.seed = args.Uint("seed", d.seed);
  o.epoch = args.Uint("epoch", d.epoch);
  if (auto a = args.Str("algorithm")) o.algorithm = ParsePackAlgorithm(*a);
  if (auto v = args.Str("oversize")) o.oversize = ParseOversize(*v);
  if (auto buffer = args.Int("buffer")) o.buffer = *buffer;
  o.num_threads = args.Int("threads", d.num_threads);
  o.prefetch = args.Int("prefetch", d.prefetch);
  o.shard_files = args.Has("shard-files");
  if (args.Has("whale-policy") && !o.shard_files) {
    throw UsageError("--whale-policy: needs --shard-files");
  }
  const std::string policy_name = args.Str("whale-policy", "env");
  const WhalePolicy policy = policy_name == "env" ? WhalePolicyFromEnvironment()
                                                  : ParseWhalePolicy("--whale-policy", policy_name);
  o.whale_unbalanced_io_slicing = policy.unbalanced_io_slicing;
  o.whale_drop_last_files = policy.drop_last_files;
  o.equal_steps = !args.Has("per-rank");
  o.mode = ParseTrainMode(args.Str("mode", "pad"));
  o.cost = ParseCostModel(args.Str("cost", "tokens"));
  if (mixing) {
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
    // order, the window, resume with changed weights); the consumers below
    // read its window.
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
    source = mix.loader->view();
  }
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
  const LoadSummary sum = SummarizeLoad(stats, scope);
  const double rate = seconds > 0 ? all_tokens / seconds : 0.0;
  // Equal steps: drop mode drops the final partial step, continuous mode
  // ends with rows of the next epoch.
  const bool complete =
      sum.complete && (!plan || (plan->dropped_tokens == 0 && o.mode != TrainMode::kContinuous));
  const Index files = mixing ? mix.files : source->num_parts();
  const bool changed = mix.resumed && mix.resumed->changed;
  // A change of weights on resume: the shares of the documents read before it
  // against the weights they were drawn with, then the rest against the new.
  std::vector<double> old_target;
  if (changed) {
    const MixtureOrder& order = *mix.order;
    std::size_t piece = 0;
    while (piece + 1 < order.pieces().size() && order.begin(piece + 1) < mix.resumed->at) ++piece;
    old_target = TargetShares(order.pieces()[piece]);
  }

  if (json) {
    Json j;
    j.Begin();
    j.Key("documents").Int(source->num_documents());
    j.Key("tokens").Int(source->num_tokens());
    j.Key("files").Int(files);
    j.Key("seq_len").Int(o.seq_len);
    j.Key("batch_size").Int(o.batch_size);
    j.Key("world").Int(o.world_size);
    j.Key("workers").Int(o.num_workers);
    j.Key("algorithm").String(PackAlgorithmName(o.algorithm));
    j.Key("threads").Int(o.num_threads);
    if (file_policy) {
      j.Key("file_policy").Begin();
      j.Key("remainder").String(RemainderName(file_policy->remainder));
      j.Key("shuffle").Bool(file_policy->shuffle);
      j.Key("reason").String(file_policy->reason);
      j.Key("warning").String(file_policy->warning);
      j.End();
    }
    j.Key("equal_steps").Bool(plan.has_value());
    if (plan) {
      j.Key("mode").String(TrainModeName(o.mode));
      j.Key("steps").Int(plan->num_steps);
      j.Key("filler_rows").Int(plan->filler_rows);
      j.Key("dropped_packs").Int(plan->dropped_packs);
      j.Key("dropped_tokens").Int(plan->dropped_tokens);
      j.Key("max_step_imbalance").Double(plan->max_step_imbalance);
      j.Key("max_full_step_imbalance").Double(plan->max_full_step_imbalance);
      j.Key("mean_step_imbalance").Double(plan->mean_step_imbalance);
    }
    j.Key("ranks").BeginList();
    for (const RankLoadStats& s : stats) {
      j.Begin().Key("rank").Int(s.rank).Key("batches").Int(s.batches).Key("tokens").Int(s.tokens);
      j.Key("padding").Double(s.padding());
      j.Key("pieces").Int(s.pieces).Key("dropped").Int(s.dropped).Key("seconds").Double(s.seconds);
      j.End();
    }
    j.End();
    j.Key("batches").Int(sum.batches);
    j.Key("real_tokens").Int(sum.tokens);
    j.Key("padding").Double(sum.padding);
    j.Key("dropped").Int(sum.dropped);
    j.Key("batch_imbalance").Int(sum.batch_imbalance);
    j.Key("token_imbalance").Double(sum.token_imbalance);
    j.Key("seconds").Double(seconds);
    j.Key("tokens_per_second").Double(rate);
    j.Key("resumed").Bool(!resume.empty());
    j.Key("complete").Bool(complete);
    if (mixing) {
      const MixBy by = mix.requested->options().by;
      const MixtureWindow window = mix.order->Window(o.epoch);
      const std::vector<double> target = TargetShares(mix.order->current());
      j.Key("mixture").Begin();
      j.Key("by").String(MixByName(by));
      j.Key("epoch").Int(static_cast<Index>(o.epoch));
      j.Key("first").Int(window.first).Key("count").Int(window.count);
      j.Key("changed").Bool(changed);
      if (changed) {
        j.Key("read").Int(mix.resumed->read).Key("at").Int(mix.resumed->at);
      }
      auto shares = [&](const char* key, const MixtureDelivery& d, const std::vector<double>& t) {
        const std::vector<double> r = d.Realised(by);
        j.Key(key).BeginList();
        for (std::size_t k = 0; k < mix.sources.size(); ++k) {
          j.Begin();
          j.Key("target").Double(t[k]);
          j.Key("realised").Double(k < r.size() ? r[k] : 0.0);
          j.Key("tokens").Int(k < d.tokens.size() ? d.tokens[k] : 0);
          j.Key("documents").Int(k < d.documents.size() ? d.documents[k] : 0);
          j.End();
        }
        j.End();
      };
      // "sources": everything this run delivered against the current
      // weights; with a change, also its two sides apart.
      shares("sources", mix.delivered, target);
      if (changed) {
        shares("before_change", mix.before_change, old_target);
        shares("after_change", mix.after_change, target);
      }
      j.End();
    }
    if (cp_work) {
      j.Key("cp").Begin();
      j.Key("cp_size").Int(cp_work->cp_size);
      j.Key("granularity").Int(*o.cp.granularity);
      j.Key("rows").Int(cp_work->rows).Key("tokens").Int(cp_work->tokens);
      j.Key("padding").Int(cp_work->padding);
      j.Key("splits").Begin();
      for (const std::string_view name : CpSplitNames()) {
        const std::size_t k = static_cast<std::size_t>(ParseCpSplit(name));
        j.Key(std::string(name)).Begin();
        j.Key("mean_max_over_mean").Double(cp_work->mean_ratio[k]);
        j.Key("worst_max_over_mean").Double(cp_work->worst_ratio[k]);
        j.End();
      }
      j.End();
      j.End();
    }
    if (roles) RolesJson(j, *roles);
    j.End();
    std::cout << j.str() << "\n";
    return 0;
  }
  std::printf("%" PRId64 " documents, %" PRId64 " tokens in %" PRId64 " file(s); seq_len %" PRId64
              ", batch %" PRId64 ", %" PRId64 " rank(s) x %" PRId64 " worker(s), %s, %" PRId64
              " thread(s)\n",
              source->num_documents(), source->num_tokens(), files, o.seq_len, o.batch_size,
              o.world_size, o.num_workers, std::string(PackAlgorithmName(o.algorithm)).c_str(),
              o.num_threads);
  if (file_policy) {
    std::printf("files: %s (Whale, %s)\n", file_policy->reason.c_str(),
                std::string(RemainderName(file_policy->remainder)).c_str());
    if (!file_policy->warning.empty()) std::printf("warning: %s\n", file_policy->warning.c_str());
  }
  std::printf("%6s %9s %14s %9s %9s %9s\n", "rank", "batches", "tokens", "padding", "pieces",
              "seconds");
  for (const RankLoadStats& s : stats) {
    std::printf("%6" PRId64 " %9" PRId64 " %14" PRId64 " %8.2f%% %9" PRId64 " %9.3f\n", s.rank,
                s.batches, s.tokens, 100.0 * s.padding(), s.pieces, s.seconds);
  }
  std::printf("total: %" PRId64 " batches, %" PRId64
              " real tokens, padding %.2f%%, %.1f M "
              "tokens/s; batches per rank %" PRId64 "-%" PRId64,
              sum.batches, sum.tokens, 100 * sum.padding, rate / 1e6, sum.min_batches,
              sum.max_batches);
  if (sum.dropped) std::printf("; dropped %" PRId64 " document(s)", sum.dropped);
  if (!resume.empty()) std::printf("; resumed from %s", args.Str("resume")->c_str());
  if (plan) {
    std::printf("\nequal steps (%s): %" PRId64 " steps on every rank, %" PRId64
                " filler row(s) in the last step; per-step imbalance (heaviest rank / mean - 1) "
                "mean %.3f%% and max %.3f%% over full steps, %.3f%% with the last",
                std::string(TrainModeName(o.mode)).c_str(), plan->num_steps, plan->filler_rows,
                100 * plan->mean_step_imbalance, 100 * plan->max_full_step_imbalance,
                100 * plan->max_step_imbalance);
    if (plan->dropped_packs) {
      std::printf("; dropped the final partial step: %" PRId64 " rows, %" PRId64 " tokens",
                  plan->dropped_packs, plan->dropped_tokens);
    }
  }
  if (complete) std::printf("; every token delivered once");
  std::printf("\n");
  if (mixing) {
    const MixBy by = mix.requested->options().by;
    const MixtureWindow window = mix.order->Window(o.epoch);
    const std::vector<double> target = TargetShares(mix.order->current());
    std::printf("mixture of %zu sources by %s: epoch %" PRId64 " reads samples [%" PRId64
                ", %" PRId64 ")",
                mix.sources.size(), std::string(MixByName(by)).c_str(), static_cast<Index>(o.epoch),
                window.first, window.first + window.count);
    if (changed) {
      std::printf("; weights changed on resume at sample %" PRId64 " (%" PRId64
                  " documents of the window read before, kept)",
                  mix.resumed->at, mix.resumed->read);
    }
    std::printf("\n");
    auto table = [&](const MixtureDelivery& d, const std::vector<double>& t) {
      const std::vector<double> r = d.Realised(by);
      std::printf("%6s %9s %9s %14s %11s\n", "source", "target", "realised", "tokens", "documents");
      for (std::size_t k = 0; k < mix.sources.size(); ++k) {
        std::printf("%6zu %8.2f%% %8.2f%% %14" PRId64 " %11" PRId64 "\n", k, 100 * t[k],
                    100 * (k < r.size() ? r[k] : 0.0), k < d.tokens.size() ? d.tokens[k] : 0,
                    k < d.documents.size() ? d.documents[k] : 0);
      }
    };
    const char* unit = by == MixBy::kTokens ? "tokens" : "documents";
    if (changed) {
      // One table would mix the two: documents drawn with the old weights
      // (still in the packer's buffer at the state) and the new ones.
      std::printf("before the change: the documents of samples [%" PRId64 ", %" PRId64
                  ") this run delivered, drawn with the old weights\n",
                  window.first, mix.resumed->at);
      table(mix.before_change, old_target);
      std::printf("after the change: samples [%" PRId64 ", %" PRId64 "), the new weights\n",
                  mix.resumed->at, window.first + window.count);
      table(mix.after_change, target);
      std::printf(
          "(target: the weights' shares of %s on each side; realised: of what this run "
          "delivered there)\n",
          unit);
    } else {
      table(mix.delivered, target);
      std::printf(
          "(target: the current weights' shares of %s; realised: of what this run "
          "delivered)\n",
          unit);
    }
  }
  if (cp_work) {
    std::printf("context parallelism over %" PRId64 " ranks (documents padded to %" PRId64
                "): causal work of the busiest CP rank / mean, per row, over %" PRId64
                " rows (mean / worst)\n",
                cp_work->cp_size, *o.cp.granularity, cp_work->rows);
    for (const std::string_view name : CpSplitNames()) {
      const std::size_t k = static_cast<std::size_t>(ParseCpSplit(name));
      std::printf("  %-20s %.4f / %.4f\n", std::string(name).c_str(), cp_work->mean_ratio[k],
                  cp_work->worst_ratio[k]);
    }
    std::printf("  padding of the per-document split: %" PRId64 " tokens (%.3f%% of %" PRId64 ")\n",
                cp_work->padding,
                cp_work->tokens ? 100.0 * static_cast<double>(cp_work->padding) /
                                      static_cast<double>(cp_work->tokens)
                                : 0.0,
                cp_work->tokens);
  }
  if (roles) {
    PrintRoles(*roles);
    std::printf("(the ranks above are dp_ranks; a replica group reads its dp_rank's batches)\n");
  }
  return 0;
}

}  // namespace shardkit::cli
