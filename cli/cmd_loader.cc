// shardkit loader-stats: runs the token loader over a data set for every rank
// (or one) and reports throughput, padding and balance: parse
// (cli/loader_flags.cc, cli/loader_mixture.cc) -> run -> report
// (cli/loader_report.cc prints).
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/loader_flags.h"
#include "cli/loader_report.h"
#include "cli/roles.h"
#include "shardkit/base/atomic_file.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/loader_stats.h"
#include "shardkit/loader/mixture_loader.h"

namespace shardkit::cli {

namespace {

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

}  // namespace

int RunLoaderStats(const Argv& argv) {
  Args args("loader-stats",
            "Runs the token loader (read -> pack -> collate, background threads) over a\n"
            "tokenised data set for every rank, or one, and reports tokens/s, padding\n"
            "and the balance of batches and tokens across ranks. By default the batches\n"
            "follow the equal-steps plan (every rank the same number of steps; the\n"
            "per-step balance is reported); --per-rank packs each rank on its own.\n"
            "A progress bar goes to stderr (--quiet turns it off).");
  DeclareLoaderFlags(args);
  if (!args.Parse(argv)) return 0;
  const std::optional<std::vector<DataRoles>> roles = RolesFromArgs(args);
  OpenSourceOptions open_options;
  MixtureRun mix;
  const bool mixing = args.Has("mixture");
  std::shared_ptr<const TokenSource> source = OpenRunSource(args, open_options, mix);
  LoaderOptions o;
  (void)args.RequireInt("seq-len");
  (void)args.RequireInt("batch");
  ReadLoaderOptionFlags(args, &o);
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
  PrintLoaderStats(report, json);
  return 0;
}

}  // namespace shardkit::cli
