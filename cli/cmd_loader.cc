// shardkit loader-stats: runs the token loader over a data set for every rank
// (or one) and reports throughput, padding and balance.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "shardkit/loader/loader.h"

namespace shardkit::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct RankStats {
  Index rank = 0;
  Index batches = 0;
  Index tokens = 0;  // real tokens
  Index slots = 0;   // batch_size * seq_len * batches
  Index pieces = 0;
  Index dropped = 0;
  double seconds = 0;
};

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

}  // namespace

int RunLoaderStats(const Argv& argv) {
  Args args("loader-stats",
            "Runs the token loader (read -> pack -> collate, background threads) over a\n"
            "tokenised data set for every rank, or one, and reports tokens/s, padding\n"
            "and the balance of batches and tokens across ranks. A progress bar goes\n"
            "to stderr (--quiet turns it off).");
  args.Flag("tokens", "FILE", "token array: .npy (uint16/int32/uint32) or raw")
      .Flag("offsets", "FILE", "document offsets (num_documents + 1 entries): .npy or raw int64")
      .Flag("dir", "DIR", "a directory of <stem>.tokens.npy + <stem>.offsets.npy pairs")
      .Flag("token-dtype", "T", "dtype of raw token files: int32 (default) | uint16 | uint32")
      .Flag("seq-len", "L", "tokens per row (required)")
      .Flag("batch", "B", "rows per batch (required)")
      .Flag("world", "W", "number of ranks (default 1)")
      .Flag("rank", "R", "run only this rank")
      .Flag("workers", "K", "dataloader workers per rank (default 1)")
      .Flag("no-shuffle", "", "keep document order (default: shuffled per seed and epoch)")
      .Flag("seed", "S", "shuffle seed (default 0)")
      .Flag("epoch", "E", "epoch (default 0)")
      .Flag("algorithm", "NAME", "next_fit | ffd | bfd (default) | balanced")
      .Flag("buffer", "N", "packing buffer in documents (default 1024)")
      .Flag("oversize", "NAME", "split (default) | drop: documents longer than seq-len")
      .Flag("threads", "T", "background threads per loader (default 1; 0 = inline)")
      .Flag("prefetch", "N", "batches prefetched (default 2)")
      .Flag("max-batches", "N", "stop each rank after N batches")
      .Flag("shard-files", "", "assign whole files to ranks by Whale's policies (with --dir)")
      .Flag("quiet", "", "no progress bar")
      .Flag("json", "", "print one JSON object");
  if (!args.Parse(argv)) return 0;

  SourceOptions source_options;
  source_options.raw_token_dtype = ParseTokenDType(args.Str("token-dtype", "int32"));
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
  o.world_size = args.Int("world", 1);
  o.num_workers = args.Int("workers", 1);
  o.shuffle = !args.Has("no-shuffle");
  o.seed = args.Uint("seed", 0);
  o.epoch = args.Uint("epoch", 0);
  o.algorithm = ParsePackAlgorithm(args.Str("algorithm", "bfd"));
  o.oversize = ParseOversize(args.Str("oversize", "split"));
  if (auto buffer = args.Int("buffer")) o.buffer = *buffer;
  o.num_threads = args.Int("threads", 1);
  o.prefetch = args.Int("prefetch", 2);
  o.shard_files = args.Has("shard-files");
  const Index max_batches = args.Int("max-batches", -1);
  if (args.Has("max-batches") && max_batches < 0) {
    throw UsageError("--max-batches: must be at least 0, got " + std::to_string(max_batches));
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
  // Validate every option before the first batch.
  for (Index r : ranks) {
    LoaderOptions c = o;
    c.rank = r;
    TokenLoader probe(source, c);
  }

  const bool json = args.Has("json");
  const Index expected_tokens =
      ranks.size() == static_cast<std::size_t>(o.world_size) ? source->num_tokens() : 0;
  Progress progress(!args.Has("quiet"), expected_tokens);
  std::vector<RankStats> stats;
  Index all_tokens = 0, all_batches = 0;
  const auto start = Clock::now();
  for (Index r : ranks) {
    RankStats s;
    s.rank = r;
    const auto rank_start = Clock::now();
    for (Index w = 0; w < o.num_workers; ++w) {
      LoaderOptions c = o;
      c.rank = r;
      c.worker = w;
      TokenLoader loader(source, c);
      while (max_batches < 0 || s.batches < max_batches * (w + 1)) {
        auto batch = loader.Next();
        if (!batch) break;
        ++s.batches;
        s.tokens += batch->tokens;
        s.slots += o.batch_size * o.seq_len;
        s.pieces += static_cast<Index>(batch->documents.size());
        all_tokens += batch->tokens;
        ++all_batches;
        progress.Update(all_tokens, all_batches,
                        std::chrono::duration<double>(Clock::now() - start).count());
      }
      s.dropped += loader.dropped();
    }
    s.seconds = std::chrono::duration<double>(Clock::now() - rank_start).count();
    stats.push_back(s);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  progress.Update(all_tokens, all_batches, seconds, true);
  progress.Done();

  Index slots = 0, dropped = 0, min_batches = stats[0].batches, max_batches_seen = 0;
  Index min_tokens = stats[0].tokens, max_tokens = 0;
  for (const RankStats& s : stats) {
    slots += s.slots;
    dropped += s.dropped;
    min_batches = std::min(min_batches, s.batches);
    max_batches_seen = std::max(max_batches_seen, s.batches);
    min_tokens = std::min(min_tokens, s.tokens);
    max_tokens = std::max(max_tokens, s.tokens);
  }
  const double padding = slots > 0 ? 1.0 - static_cast<double>(all_tokens) / slots : 0.0;
  const double rate = seconds > 0 ? all_tokens / seconds : 0.0;
  // Every token of the data set delivered (all ranks, whole epoch, nothing dropped).
  const bool complete = expected_tokens > 0 && max_batches < 0 && !o.shard_files && dropped == 0 &&
                        all_tokens == source->num_tokens();

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
    j.Key("ranks").BeginList();
    for (const RankStats& s : stats) {
      j.Begin().Key("rank").Int(s.rank).Key("batches").Int(s.batches).Key("tokens").Int(s.tokens);
      j.Key("padding").Double(s.slots ? 1.0 - static_cast<double>(s.tokens) / s.slots : 0.0);
      j.Key("pieces").Int(s.pieces).Key("dropped").Int(s.dropped).Key("seconds").Double(s.seconds);
      j.End();
    }
    j.End();
    j.Key("batches").Int(all_batches);
    j.Key("real_tokens").Int(all_tokens);
    j.Key("padding").Double(padding);
    j.Key("dropped").Int(dropped);
    j.Key("batch_imbalance").Int(max_batches_seen - min_batches);
    j.Key("token_imbalance")
        .Double(min_tokens > 0 ? static_cast<double>(max_tokens) / min_tokens - 1 : 0.0);
    j.Key("seconds").Double(seconds);
    j.Key("tokens_per_second").Double(rate);
    j.Key("complete").Bool(complete);
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
  std::printf("%6s %9s %14s %9s %9s %9s\n", "rank", "batches", "tokens", "padding", "pieces",
              "seconds");
  for (const RankStats& s : stats) {
    std::printf("%6" PRId64 " %9" PRId64 " %14" PRId64 " %8.2f%% %9" PRId64 " %9.3f\n", s.rank,
                s.batches, s.tokens,
                s.slots ? 100.0 * (1.0 - static_cast<double>(s.tokens) / s.slots) : 0.0, s.pieces,
                s.seconds);
  }
  std::printf("total: %" PRId64 " batches, %" PRId64
              " real tokens, padding %.2f%%, %.1f M "
              "tokens/s; batches per rank %" PRId64 "-%" PRId64,
              all_batches, all_tokens, 100 * padding, rate / 1e6, min_batches, max_batches_seen);
  if (dropped) std::printf("; dropped %" PRId64 " document(s)", dropped);
  if (complete) std::printf("; every token delivered once");
  std::printf("\n");
  return 0;
}

}  // namespace shardkit::cli
