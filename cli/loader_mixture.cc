// --mixture of `shardkit loader-stats`: its sources and the core
// MixtureLoader from its flags (cli/loader_flags.h).
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/json.h"
#include "cli/loader_flags.h"
#include "cli/mixture_flags.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/mixture_loader.h"

namespace shardkit::cli {

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
// --mixture: the requested mixture, the order read (resumed with --resume),
// the epoch's window as the run's source.
std::shared_ptr<const TokenSource> SetUpMixture(const Args& args, LoaderOptions& o,
                                                MixtureRun& mix) {
  const std::vector<double> weights = ParseDoubles("--weights", args.RequireStr("weights"));
  MixtureOptions mo =
      ReadMixtureFlags(args, static_cast<Index>(mix.sources.size()), MixBy::kTokens);
  mo.seed = o.seed;
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
      if (list.type() == shardkit::Json::Type::kArray) {
        std::vector<std::string> texts;
        for (const shardkit::Json& s : list.array()) texts.push_back(WriteJson(s));
        mix.loader->Load(std::span<const std::string>(texts));
      } else {
        mix.loader->Load(text);
      }
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

}  // namespace shardkit::cli
