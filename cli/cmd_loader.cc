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
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/roles.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/loader_stats.h"

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
      .Flag("token-dtype", "T",
            "dtype of raw token files: int32 | uint16 | uint32 (default " +
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
      .Flag("shard-files", "", "assign whole files to ranks by Whale's policies (with --dir)")
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
      .Flag("mode", "NAME",
            Choices(TrainModeNames(), TrainModeName(d.mode)) +
                ": equal steps at the end of the epoch")
      .Flag("cost", "NAME", Choices(CostModelNames(), CostModelName(d.cost)) + ": per-step balance")
      .Flag("quiet", "", "no progress bar")
      .Flag("json", "", "print one JSON object");
  AddRolesFlags(args);
  if (!args.Parse(argv)) return 0;
  const std::optional<std::vector<DataRoles>> roles = RolesFromArgs(args);

  SourceOptions source_options;
  if (auto t = args.Str("token-dtype")) source_options.raw_token_dtype = ParseTokenDType(*t);
  std::shared_ptr<const TokenSource> source;
  if (auto dir = args.Str("dir")) {
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
  o.shuffle = !args.Has("no-shuffle");
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
  o.equal_steps = !args.Has("per-rank") && !o.shard_files;
  o.mode = ParseTrainMode(args.Str("mode", "pad"));
  o.cost = ParseCostModel(args.Str("cost", "tokens"));
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
  if (auto path = args.Str("resume")) {
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
    std::ofstream out(*save_path, std::ios::binary | std::ios::trunc);
    out << LoaderStatesToJson(saved) << "\n";
    out.flush();
    if (!out) throw UsageError("--save-state: cannot write '" + *save_path + "'");
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

  if (json) {
    Json j;
    j.Begin();
    j.Key("documents").Int(source->num_documents());
    j.Key("tokens").Int(source->num_tokens());
    j.Key("files").Int(source->num_parts());
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
    if (roles) RolesJson(j, *roles);
    j.End();
    std::cout << j.str() << "\n";
    return 0;
  }
  std::printf("%" PRId64 " documents, %" PRId64 " tokens in %" PRId64 " file(s); seq_len %" PRId64
              ", batch %" PRId64 ", %" PRId64 " rank(s) x %" PRId64 " worker(s), %s, %" PRId64
              " thread(s)\n",
              source->num_documents(), source->num_tokens(), source->num_parts(), o.seq_len,
              o.batch_size, o.world_size, o.num_workers,
              std::string(PackAlgorithmName(o.algorithm)).c_str(), o.num_threads);
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
  if (roles) {
    PrintRoles(*roles);
    std::printf("(the ranks above are dp_ranks; a replica group reads its dp_rank's batches)\n");
  }
  return 0;
}

}  // namespace shardkit::cli
