// shardkit mix: realised against target proportions of a mixture of sources,
// per-source epochs consumed, and a picture of the proportions over the run.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "cli/mixture_flags.h"
#include "shardkit/sharding/mixture.h"

namespace shardkit::cli {

namespace {

constexpr Index kMaxListedSamples = 1000000;
constexpr int kBarWidth = 60;

// One row of the picture: each source's share of the window as a run of its
// letter (a, b, c, ...; '#' past 26 sources).
std::string Bar(const std::vector<Index>& counts) {
  Index total = 0;
  for (Index c : counts) total += c;
  std::string bar;
  double acc = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    acc += total > 0 ? static_cast<double>(counts[i]) / static_cast<double>(total) : 0;
    const std::size_t until = static_cast<std::size_t>(std::lround(acc * kBarWidth));
    const char letter = i < 26 ? static_cast<char>('a' + i) : '#';
    while (bar.size() < until) bar.push_back(letter);
  }
  return bar;
}

}  // namespace

int RunMix(const Argv& argv) {
  Args args("mix",
            "A mixture of sources with exact proportions: every block of B samples\n"
            "holds fixed per-source counts (cumulative rounding of the weights, carried\n"
            "over the run), spread evenly inside the block; each source walks its own\n"
            "shuffled order per epoch.\n"
            "Prints realised against target proportions over [start, stop), each\n"
            "source's epochs consumed and a picture of the proportions over windows.");
  args.Flag("sizes", "N0,N1,...", "items in each source (required)")
      .Flag("weights", "W0,W1,...", "weight of each source (required)")
      .Flag("lengths", "F0,F1,...",
            "by tokens or --schedule-unit tokens: one file of item lengths per source")
      .Flag("seed", "S", "seed of the block orders and the source walks (default 0)");
  AddMixtureFlags(args, "", MixBy::kSamples);
  args.Flag("start", "P", "first sample of the report window (default 0)")
      .Flag("stop", "P", "end of the report window (default: 100 blocks, or the end)")
      .Flag("windows", "W", "stretches in the picture (default 20)")
      .Flag("samples", "", "list (source, item) of every sample in the window")
      .Flag("json", "", "print one JSON object");
  if (!args.Parse(argv)) return 0;
  std::vector<Index> sizes = args.IntList("sizes");
  if (!args.Has("sizes")) throw UsageError("--sizes: required");
  const std::vector<double> weights = ParseDoubles("--weights", args.RequireStr("weights"));
  MixtureOptions o = ReadMixtureFlags(args, static_cast<Index>(sizes.size()), MixBy::kSamples);
  o.seed = args.Uint("seed", 0);
  if (auto files = args.Str("lengths")) {
    std::stringstream stream(*files);
    std::string path;
    while (std::getline(stream, path, ',')) {
      const std::vector<double> lengths = ReadNumbers("--lengths", path);
      std::vector<std::int64_t> ints(lengths.begin(), lengths.end());
      o.tokens.push_back(TotalTokens(ints));
    }
  }
  const Mixture mix(sizes, weights, o);
  const Index start = args.Int("start", 0);
  Index stop_default = mix.size();
  if (start <= mix.size() && mix.size() - start > 100 * mix.block()) {
    stop_default = start + 100 * mix.block();
  }
  const Index stop = args.Int("stop", stop_default);
  const MixReport r = ReportMixture(mix, start, stop, args.Int("windows", 20));
  const bool list = args.Has("samples");
  if (list && stop - start > kMaxListedSamples) {
    throw UsageError("--samples: would list more than " + std::to_string(kMaxListedSamples) +
                     " samples; narrow --start/--stop");
  }
  std::vector<Index> sources, items;
  if (list) {
    sources.resize(stop - start);
    items.resize(stop - start);
    mix.Fill(start, stop, sources.data(), items.data());
  }
  const Index k = mix.num_sources();

  if (args.Has("json")) {
    Json j;
    j.Begin();
    j.Key("sources").Int(k).Key("sizes").IntList(mix.sizes());
    j.Key("weights").DoubleList(mix.weights());
    j.Key("by").String(MixByName(o.by));
    j.Key("schedule_unit").String(MixByName(o.schedule_unit));
    j.Key("block").Int(mix.block());
    j.Key("bounded").Bool(mix.bounded());
    j.Key("samples").Int(mix.size());
    j.Key("window").BeginList().Int(start).Int(stop).End();
    j.Key("counts").IntList(r.counts);
    j.Key("realised").DoubleList(r.realised);
    j.Key("target").DoubleList(r.target);
    j.Key("consumed").IntList(r.consumed);
    j.Key("epochs").DoubleList(r.epochs);
    j.Key("max_error").Double(r.max_error);
    j.Key("segments").BeginList();
    for (const MixSegment& s : mix.segments()) {
      std::vector<double> shares;
      for (std::uint64_t q : s.q) {
        shares.push_back(static_cast<double>(static_cast<long double>(q) / s.total));
      }
      j.Begin().Key("begin").Int(s.begin).Key("shares").DoubleList(shares).End();
    }
    j.End();
    const bool nominal = !o.tokens.empty();
    j.Key("windows").BeginList();
    for (const MixWindow& w : r.windows) {
      j.Begin().Key("begin").Int(w.begin).Key("end").Int(w.end);
      if (nominal) j.Key("tokens").Double(mix.NominalTokens(w.begin));
      j.Key("counts").IntList(w.counts).Key("target").DoubleList(w.target).End();
    }
    j.End();
    if (list) {
      j.Key("list").BeginList();
      for (std::size_t i = 0; i < sources.size(); ++i) {
        j.BeginList().Int(sources[i]).Int(items[i]).End();
      }
      j.End();
    }
    j.End();
    std::cout << j.str() << "\n";
    return 0;
  }
  std::printf("%" PRId64 " sources, by %s, block %" PRId64 ", %s\n", k,
              std::string(MixByName(o.by)).c_str(), mix.block(),
              mix.bounded() ? ("ends after " + std::to_string(mix.size()) + " samples").c_str()
                            : "never ends (every source repeats)");
  std::printf("window [%" PRId64 ", %" PRId64 "): max |consumed - target| at its end %.3f\n", start,
              stop, r.max_error);
  std::printf("%7s %14s %10s %10s %14s %9s\n", "source", "size", "target", "realised", "consumed",
              "epochs");
  for (Index i = 0; i < k; ++i) {
    std::printf("%7" PRId64 " %14" PRId64 " %9.4f%% %9.4f%% %14" PRId64 " %9.3f\n", i,
                mix.sizes()[i], 100 * r.target[i], 100 * r.realised[i], r.consumed[i], r.epochs[i]);
  }
  if (!r.windows.empty()) {
    // With lengths, each window's start also in nominal tokens (the unit of
    // a schedule in tokens).
    const bool nominal = !o.tokens.empty();
    std::printf("\nproportions over the window (one letter per source: a = 0, b = 1, ...)%s\n",
                nominal ? "; sample position, nominal tokens" : "");
    for (const MixWindow& w : r.windows) {
      if (nominal) {
        std::printf("%14" PRId64 " %12.4g |%s|\n", w.begin, mix.NominalTokens(w.begin),
                    Bar(w.counts).c_str());
      } else {
        std::printf("%14" PRId64 " |%s|\n", w.begin, Bar(w.counts).c_str());
      }
    }
  }
  if (list) {
    std::printf("\nsamples (source:item):");
    for (std::size_t i = 0; i < sources.size(); ++i) {
      std::printf("%s%" PRId64 ":%" PRId64, i % 10 == 0 ? "\n  " : " ", sources[i], items[i]);
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace shardkit::cli
