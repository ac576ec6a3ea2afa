#include "shardkit/loader/mixture_loader.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"

namespace shardkit {

namespace {

constexpr std::uint64_t kWindowDomain = 0x4d49585749ULL;  // "MIXWI"

void CheckSources(std::span<const std::shared_ptr<const TokenSource>> sources) {
  if (sources.empty()) ThrowInvalid("sources", "no sources; give at least one");
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (sources[k] == nullptr) {
      ThrowInvalid("sources", "source " + Str(static_cast<Index>(k)) + " is None");
    }
  }
}

}  // namespace

Mixture MixtureOfSources(std::span<const std::shared_ptr<const TokenSource>> sources,
                         std::vector<double> weights, MixtureOptions options) {
  CheckSources(sources);
  std::vector<Index> sizes;
  options.tokens.clear();
  for (const auto& source : sources) {
    sizes.push_back(source->num_documents());
    if (options.by == MixBy::kTokens) options.tokens.push_back(source->num_tokens());
  }
  return Mixture(std::move(sizes), std::move(weights), std::move(options));
}

MixtureWindow MixtureEpochWindow(const Mixture& mixture, Index samples, std::uint64_t epoch) {
  if (samples < 1) ThrowInvalid("samples", "must be >= 1 per epoch, got " + Str(samples));
  if (epoch > static_cast<std::uint64_t>(std::numeric_limits<Index>::max() / samples)) {
    ThrowInvalid("epoch", Str(static_cast<Index>(epoch)) + " x " + Str(samples) +
                              " samples per epoch overflows a 64-bit position");
  }
  const Index first = static_cast<Index>(epoch) * samples;
  MixtureWindow w;
  w.first = std::min(first, mixture.size());
  w.count = std::min(samples, mixture.size() - w.first);
  return w;
}

void MixtureWindowSamples(const Mixture& mixture, MixtureWindow window, Index* sources,
                          Index* items) {
  if (window.first < 0 || window.count < 0 || window.first > mixture.size() ||
      window.count > mixture.size() - window.first) {
    ThrowOutOfRange("window", "[" + Str(window.first) + ", +" + Str(window.count) +
                                  ") is outside the mixture's [0, " + Str(mixture.size()) + ")");
  }
  mixture.Fill(window.first, window.first + window.count, sources, items);
}

std::shared_ptr<const TokenSource> MixtureSource(
    std::vector<std::shared_ptr<const TokenSource>> sources, const Mixture& mixture,
    MixtureWindow window) {
  CheckSources(sources);
  if (static_cast<Index>(sources.size()) != mixture.num_sources()) {
    ThrowInvalid("sources", Str(static_cast<Index>(sources.size())) + " sources for a mixture of " +
                                Str(mixture.num_sources()));
  }
  std::vector<Index> begin(sources.size() + 1, 0);
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (sources[k]->num_documents() != mixture.sizes()[k]) {
      ThrowInvalid("sources", "source " + Str(static_cast<Index>(k)) + " has " +
                                  Str(sources[k]->num_documents()) +
                                  " documents but the mixture's size is " +
                                  Str(mixture.sizes()[k]));
    }
    begin[k + 1] = begin[k] + sources[k]->num_documents();
  }
  std::vector<Index> which(static_cast<std::size_t>(window.count));
  std::vector<std::int64_t> documents(static_cast<std::size_t>(window.count));
  MixtureWindowSamples(mixture, window, which.data(), documents.data());
  Hasher h(kWindowDomain);
  h.Add(static_cast<std::uint64_t>(window.first));
  for (std::size_t i = 0; i < documents.size(); ++i) {
    documents[i] += begin[static_cast<std::size_t>(which[i])];
    h.Add(static_cast<std::uint64_t>(documents[i]));
  }
  std::uint64_t identity = h.Finish();
  if (identity == 0) identity = 1;  // 0 means "no view"
  return TokenSource::Gather(std::move(sources), std::move(documents), identity);
}

}  // namespace shardkit
