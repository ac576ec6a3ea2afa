// The mixture as the order stage of a TokenLoader: one loader over several
// token sources with weights (shardkit/sharding/mixture.h).
//
// A mixture loader's epoch e is the window of mixture samples
// [e * samples, min((e + 1) * samples, mixture.size())) ("samples" per epoch).
// The window becomes a gathered TokenSource (TokenSource::Gather): its
// document i is the mixture's sample first + i, i.e. item `item` of source
// `source`, so a TokenLoader over it with shuffle off reads the documents in
// the mixture's order. Everything after the order stage is the loader's own:
// sharding (consumers read entries c, c + C, ...), packing, equal steps (the
// TrainPlan packs the window in mixture order and deals the packs), workers,
// mesh roles, state and elastic resume. The per-source guarantees come from
// the mixture: exact counts in every block of the window, every item of a
// source once per epoch of that source, across loader epochs too (epoch e + 1
// continues every source's walk where epoch e left it).
//
// By tokens (MixBy::kTokens): the weights are shares of tokens, and the
// sample shares are weight / mean document length of the source; with
// oversize split every token of every document is delivered, so the tokens
// the model sees follow the weights (over a window, up to the spread of the
// document lengths drawn).
//
// State: a loader state of a mixture loader is the loader's state of the
// window (its data fingerprint includes the window and the mixture's
// parameters through the view's identity, so a state of another mixture,
// window or weights is refused naming the fingerprint).
//
// Thread-safety: pure functions; the views are immutable.
#ifndef SHARDKIT_LOADER_MIXTURE_LOADER_H_
#define SHARDKIT_LOADER_MIXTURE_LOADER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "shardkit/loader/token_source.h"
#include "shardkit/sharding/mixture.h"

namespace shardkit {

// The mixture of `sources` (sizes = their document counts; by tokens, their
// token counts) with `weights` and `options` (options.tokens is filled here).
// Throws invalid_argument naming `sources` (none, or a null one) or what
// Mixture rejects.
[[nodiscard]] Mixture MixtureOfSources(std::span<const std::shared_ptr<const TokenSource>> sources,
                                       std::vector<double> weights, MixtureOptions options);

struct MixtureWindow {
  Index first = 0;  // mixture position of the window's first sample
  Index count = 0;  // samples in the window (0 past the end of a bounded mixture)
};

// Loader epoch `epoch` of `samples` samples per epoch. Throws invalid_argument
// naming `samples` unless samples >= 1, and `epoch` when epoch * samples
// overflows.
[[nodiscard]] MixtureWindow MixtureEpochWindow(const Mixture& mixture, Index samples,
                                               std::uint64_t epoch);

// The window as one gathered source: document i is item items[i] of source
// sources[i] for sample window.first + i. The view's identity hashes the
// mixture's parameters and the window. Throws invalid_argument naming
// `sources` when they do not match the mixture (count, document counts),
// out_of_range naming `window` outside [0, mixture.size()].
[[nodiscard]] std::shared_ptr<const TokenSource> MixtureSource(
    std::vector<std::shared_ptr<const TokenSource>> sources, const Mixture& mixture,
    MixtureWindow window);

// Which source and item each document of a MixtureSource view is (the
// window's samples), into sources / items (window.count entries each).
void MixtureWindowSamples(const Mixture& mixture, MixtureWindow window, Index* sources,
                          Index* items);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_MIXTURE_LOADER_H_
