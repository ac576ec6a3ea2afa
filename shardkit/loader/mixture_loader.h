// The mixture as the order stage of a TokenLoader: one loader over several
// token sources with weights (shardkit/sharding/mixture.h).
//
// A mixture loader's epoch e is the window of mixture samples
// [e * samples, min((e + 1) * samples, mixture.size())) ("samples" per epoch).
// The window becomes a selected TokenSource (TokenSource::Select): its
// document i is the mixture's sample first + i, i.e. item `item` of source
// `source`, computed from the order when it is read (nothing per sample is
// stored), so a TokenLoader over it with shuffle off reads the documents in
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
// State: the loader's state of the window (its data fingerprint includes the
// window through the view's identity, so a state of another mixture, window
// or weights is refused naming the fingerprint), wrapped with the order it
// belongs to (MixtureLoaderState below).
//
// Resume with changed weights (ResumeMixtureLoader): the window's documents
// the plan has already read, up to read point Q (TrainPlan::DocumentsReadAt
// at the state's pack position, packer buffers included; per rank: every
// order position read by any consumer of the merged state), stay exactly as
// in the old order; from Q on, the window continues with the mixture
// Mixture::FromState(State(first + Q), new weights / schedule): every source
// continues from its consumed count, so nothing is repeated or skipped
// within any source's epoch. The packs before the state's position, and the
// packer's buffer there, are unchanged, so the loader's guarantees (every
// piece once, equal steps, elastic resume) hold across the change.
//
// Thread-safety: pure functions; the views are immutable.
#ifndef SHARDKIT_LOADER_MIXTURE_LOADER_H_
#define SHARDKIT_LOADER_MIXTURE_LOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/loader/loader.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/sharding/mixture.h"

namespace shardkit {

// The mixture of `sources` (sizes = their document counts; by tokens, their
// token counts) with `weights` and `options` (options.tokens is filled here).
// Throws invalid_argument naming `sources` (none, or a null one) or what
// Mixture rejects.
[[nodiscard]] Mixture MixtureOfSources(std::span<const std::shared_ptr<const TokenSource>> sources,
                                       std::vector<double> weights, MixtureOptions options);

// The most samples one epoch may read. The window itself stores nothing per
// sample (a selected view), but what lists a window's samples does
// (window_samples() in Python, loader-stats' per-source tallies: 16 bytes a
// sample, 32 GiB at 2^31). Larger `samples` (given, or read from a state) are
// refused naming `samples` instead of failing to allocate there.
inline constexpr Index kMaxWindowSamples = Index{1} << 31;

struct MixtureWindow {
  Index first = 0;  // mixture position of the window's first sample
  Index count = 0;  // samples in the window (0 past the end of a bounded mixture)
};

// Loader epoch `epoch` of `samples` samples per epoch. Throws invalid_argument
// naming `samples` unless 1 <= samples <= kMaxWindowSamples, and `epoch` when
// epoch * samples overflows.
[[nodiscard]] MixtureWindow MixtureEpochWindow(const Mixture& mixture, Index samples,
                                               std::uint64_t epoch);

// The window as one selected source (TokenSource::Select): document i is
// sample window.first + i of the order, located when read (O(K) to make).
// The view's identity hashes the window and the plans of the order's pieces
// that it reads, which determine its samples. Throws invalid_argument naming
// `sources` when they do not match the mixture (count, document counts),
// out_of_range naming `window` outside [0, mixture.size()].
[[nodiscard]] std::shared_ptr<const TokenSource> MixtureSource(
    std::vector<std::shared_ptr<const TokenSource>> sources, const Mixture& mixture,
    MixtureWindow window);

// Which source and item each document of a MixtureSource view is (the
// window's samples), into sources / items (window.count entries each).
void MixtureWindowSamples(const Mixture& mixture, MixtureWindow window, Index* sources,
                          Index* items);

// The order of a mixture loader over a run: the mixture it started with and
// each change of weights / schedule from the global position where it took
// effect. Piece i is a Mixture whose local position 0 is global position
// begin_i = origin + skip; it holds positions [begin_i, begin_{i+1}). A
// loader state carries the pieces from its epoch's window on (older ones are
// dropped), so an order may start after position 0.
class MixtureOrder {
 public:
  // One mixture for the whole run. Throws invalid_argument naming `samples`
  // unless 1 <= samples <= kMaxWindowSamples.
  MixtureOrder(Mixture mixture, Index samples);
  // Pieces in order. Throws invalid_argument naming `state` unless there is
  // at least one and each begins inside the one before (begin_{i-1} <
  // begin_i <= begin_{i-1} + size_{i-1}) with the same sources, and naming
  // `samples` unless samples >= 1.
  MixtureOrder(std::vector<Mixture> pieces, Index samples);

  [[nodiscard]] Index samples() const { return samples_; }
  [[nodiscard]] const std::vector<Mixture>& pieces() const { return pieces_; }
  [[nodiscard]] const Mixture& current() const { return pieces_.back(); }
  [[nodiscard]] Index begin(std::size_t piece) const;
  // First global position the order holds (its first piece's begin).
  [[nodiscard]] Index start() const { return begin(0); }
  // Global end (saturated at the largest Index for a run that never stops).
  [[nodiscard]] Index size() const;

  // Loader epoch `epoch`'s window: [epoch * samples, ...) cut at size().
  // Throws invalid_argument naming `epoch` when epoch * samples overflows or
  // the window begins before start() (an epoch before a change of weights
  // that this order no longer holds).
  [[nodiscard]] MixtureWindow Window(std::uint64_t epoch) const;
  // (source, item) of global positions [begin, end). Throws out_of_range
  // naming `window` outside [start(), size()] (CheckWindow, which callers that
  // allocate the output call first).
  void Fill(Index begin, Index end, Index* sources, Index* items) const;
  void CheckWindow(Index begin, Index end) const;
  // (source, item) of each global position of `positions` (any order).
  // Throws out_of_range naming `position` for one outside [start(), size()).
  void Take(std::span<const Index> positions, Index* sources, Index* items) const;
  // The per-source consumed counts before global position `at`.
  [[nodiscard]] MixtureState StateAt(Index at) const;

  // The order with a change at global position `at` (start() <= at <=
  // size()): its samples before `at` unchanged, then
  // FromState(StateAt(at), weights, schedule) with `like`'s interpolation and
  // block option. Pieces that end at or before `keep_from` are dropped.
  [[nodiscard]] MixtureOrder Changed(Index at, const Mixture& like, Index keep_from) const;

 private:
  std::vector<Mixture> pieces_;
  Index samples_ = 1;
};

// The order as one piece per epoch window: MixtureSource / MixtureWindowSamples
// of the order's window (the same view, identity included, as the Mixture
// overloads give for an order of one mixture).
[[nodiscard]] std::shared_ptr<const TokenSource> MixtureSource(
    std::vector<std::shared_ptr<const TokenSource>> sources, const MixtureOrder& order,
    MixtureWindow window);

// The default samples per epoch: the whole mixture when a source does not
// repeat (it ends), else the sum of the sources' sizes.
[[nodiscard]] Index DefaultMixtureSamples(const Mixture& mixture);

// What a mixture loader's batches delivered per source: tokens, and the
// documents started (pieces that begin at token 0), against the target shares
// of the weights (of the order's current mixture, in its `by` unit).
struct MixtureDelivery {
  std::vector<Index> tokens;
  std::vector<Index> documents;
  // Counts the pieces of `batch`; window_sources[d] is the source of window
  // document d (MixtureOrder::Fill). Throws out_of_range naming `batch` for a
  // document outside the window.
  void Add(const Batch& batch, std::span<const Index> window_sources);
  // The same for the pieces of window documents in [first, end) only: after a
  // resume that changed the weights at window document `read`
  // (MixtureResume), [0, read) was drawn with the old weights and [read, ...)
  // with the new ones, and their shares are read apart.
  void Add(const Batch& batch, std::span<const Index> window_sources, Index first, Index end);
  // tokens (by tokens) or documents (by samples) of each source over their
  // sum; 0s when nothing was delivered.
  [[nodiscard]] std::vector<double> Realised(MixBy by) const;
};
// The weights of `mixture` as shares (sum 1).
[[nodiscard]] std::vector<double> TargetShares(const Mixture& mixture);

// A mixture loader's state: the loader's state of its epoch's window and the
// order it reads, sealed by the rule of every state kind (base/json.h). JSON
// (version 3; version 1 states, made with the mixture's earlier per-block
// orders, and version 2 ones, without a checksum, are refused naming the
// version):
//   {"version": 3, "kind": "mixture_loader", "epoch": E, "samples": S,
//    "mixture": [PLAN, ...], "loader": <the loader's state>,
//    "checksum": "<16 hex>"}
// PLAN is a mixture's plan (shardkit/sharding/mixture_json.h); the pieces are
// the order's from the state's epoch's window on (for an equal-steps state at
// position 0 of epoch E >= 1, from epoch E - 1's window on, when the order
// holds it: such a state may be the end state of epoch E - 1, whose stream
// fingerprint is that window's). "loader" is the LoaderStateToJson object (a
// TrainState's with equal steps), which is bound to its window's data by its
// own fingerprint. FromJson checks the types, then the checksum (before it
// builds anything), then builds every piece (a bad piece is refused naming
// `state`) and the loader state's own checks; "epoch" must be the loader
// state's.
struct MixtureLoaderState {
  std::vector<Mixture> pieces;
  Index samples = 1;
  LoaderState loader;
};
[[nodiscard]] std::string MixtureLoaderStateToJson(const MixtureOrder& order,
                                                   const LoaderState& loader);
[[nodiscard]] MixtureLoaderState MixtureLoaderStateFromJson(std::string_view text);
// Whether `text` is a mixture loader's state (its "kind"); false for a plain
// loader state or anything else.
[[nodiscard]] bool IsMixtureLoaderState(std::string_view text);
// Merges the states of every consumer of a per-rank mixture run (one order):
// MergeLoaderStates of the loader states. Throws invalid_argument naming
// `state` when the orders differ.
[[nodiscard]] std::string MergeMixtureLoaderStates(std::span<const std::string> texts);

// Resuming a mixture loader whose mixture (weights, schedule) is `mixture`.
struct MixtureResume {
  MixtureOrder order;  // the order to read from the state's epoch on
  LoaderState loader;  // the loader's state for order.Window(epoch)
  bool changed = false;
  Index read = 0;  // changed: window documents kept from the old order (Q)
  Index at = 0;    // changed: the global position of the change
};

// The rule of resuming (see the top of this file). `text` is a mixture
// loader's state (MixtureLoaderStateToJson), or a plain loader state of an
// order of `mixture` alone (then nothing changes; the loader checks its
// fingerprint). The state's order must have `mixture`'s sources (`sources`),
// `by`, `seed`, `repeat` and `samples` (nullopt: the state's, or for a plain
// state DefaultMixtureSamples); when its current piece has other
// weights, schedule, interpolation or block than `mixture`, the change is
// made at the read point of the state's window: equal steps, the pack
// stream's documents read at the state's position (`options` give the
// packing); per rank, a merged state (or the state of a run of one
// consumer), whose read point is its position or the last done position + 1.
// The state of one consumer of several is refused naming `state` (give all
// of them, or their merge). Throws invalid_argument naming the parameter, or
// `state` when it was made for another window (fingerprint; at an epoch
// boundary the equal-steps state's stream must be its epoch's window's or,
// for the end state of the epoch before, that window's: "the data differs").
[[nodiscard]] MixtureResume ResumeMixtureLoader(
    const std::vector<std::shared_ptr<const TokenSource>>& sources, const Mixture& mixture,
    std::optional<Index> samples, const LoaderOptions& options, std::string_view text);

// A batch of a MixtureLoader: the loader's batch (its documents are positions
// in the epoch's window) and, per piece of batch->documents, which source and
// which of its documents it is.
struct MixtureBatch {
  std::shared_ptr<const Batch> batch;
  std::vector<Index> sources, items;
};

// The mixture loader: a TokenLoader whose order stage is a mixture's window,
// epoch after epoch. It owns the assembly that the Python package and the CLI
// call: the order (the mixture and each change of weights), the epoch's
// window as a selected view (MixtureSource: O(K) to make, documents read
// when the plan reaches them), the sealed state (MixtureLoaderStateToJson)
// and resume with changed weights (ResumeMixtureLoader). The passes and the
// epoch advance are the TokenLoader's own (one TokenLoader whose
// EpochSource gives each epoch its window): one mechanism for both loaders. Opening it and the
// first batch cost O(K + the packer's buffer) in time and memory, whatever the samples per epoch.
//
// Rules: the mixture is the order (options.shuffle must be false), no file
// sharding, no continuous mode (each epoch is its own window); by tokens the
// mixture's sizes are the sources' token totals (MixtureOfSources); samples
// per epoch default to DefaultMixtureSamples.
//
// Thread-safety: Next() may be called from several threads (each batch goes
// to one caller; the one that meets the end of an epoch moves the loader to
// the next, once); the other calls are not to be made concurrently with each
// other or with Next().
class MixtureLoader {
 public:
  // Validates everything here: throws invalid_argument naming `sources`,
  // what Mixture rejects, `samples`, `shuffle`, `shard_files`, `mode`, or
  // what TokenLoader rejects (options.epoch is the first epoch).
  MixtureLoader(std::vector<std::shared_ptr<const TokenSource>> sources,
                std::vector<double> weights, MixtureOptions mixture, LoaderOptions options,
                std::optional<Index> samples = std::nullopt);
  ~MixtureLoader();
  MixtureLoader(const MixtureLoader&) = delete;
  MixtureLoader& operator=(const MixtureLoader&) = delete;

  // The next batch of the current epoch, or nullopt at its end; the caller
  // that meets the end moves the loader to the start of the next epoch
  // (equal steps: where the plan's end state stands; per rank: epoch + 1).
  // With `generation` (generation() when a pass began): nullopt as well once
  // the loader has moved on from it, so concurrent passes of one epoch all
  // end with it and none reads into the next.
  [[nodiscard]] std::optional<MixtureBatch> Next(
      std::optional<std::uint64_t> generation = std::nullopt);
  // To the start of `epoch`, unless the loader already stands in it (a
  // resumed state's epoch, or the one an ended epoch moved to).
  void SetEpoch(std::uint64_t epoch);
  // Continues from `text`: a mixture loader's state (or a merge of every
  // consumer's, MergeMixtureLoaderStates), by ResumeMixtureLoader's rule with
  // this loader's mixture and samples (given, or the state's). Throws as
  // ResumeMixtureLoader and TokenLoader do; the loader is unchanged then.
  void Load(std::string_view text);
  // The states of every consumer of a run: their merge is loaded
  // (MergeMixtureLoaderStates; a list of one state too, so the run of one
  // consumer resumes on any world size). Throws invalid_argument naming
  // `state` for none, and as Load.
  void Load(std::span<const std::string> texts);

  // The sealed state after the last batch Next() returned.
  [[nodiscard]] std::string State() const;
  // Equal steps: the state after `steps` batches of this epoch's plan.
  // Throws invalid_argument naming equal_steps for a loader packing per rank.
  [[nodiscard]] std::string StateAt(Index steps) const;

  // A pass (as TokenLoader::BeginPass): the generation to give Next, and
  // forgets which epoch last ran out.
  [[nodiscard]] std::uint64_t BeginPass();
  // The epoch the next batch comes from.
  [[nodiscard]] std::uint64_t epoch() const;
  // The epoch of the current pass: once a pass ran out (the loader then
  // stands at the start of the next epoch) and until the next BeginPass,
  // SetEpoch or Load, the epoch that ran out (TokenLoader::epoch's rule).
  [[nodiscard]] std::uint64_t pass_epoch() const;
  // Incremented each time the loader moves to another epoch or state (an
  // ended epoch, SetEpoch, Load): a pass that ran out knows whether the
  // loader it saw is still there.
  [[nodiscard]] std::uint64_t generation() const;
  [[nodiscard]] const MixtureOrder& order() const { return order_; }
  [[nodiscard]] const Mixture& mixture() const { return order_.current(); }
  [[nodiscard]] Index samples() const { return order_.samples(); }
  [[nodiscard]] const std::vector<std::shared_ptr<const TokenSource>>& sources() const {
    return sources_;
  }
  // The current epoch's loader (its plan, dropped count, consumers).
  [[nodiscard]] std::shared_ptr<const TokenLoader> loader() const;
  // The current epoch's window view.
  [[nodiscard]] std::shared_ptr<const TokenSource> view() const;
  // (source, item) of window documents `documents` of epoch `epoch`'s window.
  void Locate(std::uint64_t epoch, std::span<const Index> documents, Index* sources,
              Index* items) const;
  // After Load: whether the weights changed, the window documents kept from
  // the old order and the global position of the change (MixtureResume).
  struct LastResume {
    bool changed = false;
    Index read = 0, at = 0;
  };
  [[nodiscard]] const std::optional<LastResume>& last_resume() const { return last_resume_; }

 private:
  std::vector<std::shared_ptr<const TokenSource>> sources_;
  Mixture requested_;                   // the weights asked for
  std::optional<Index> samples_given_;  // else a state's samples win on resume
  LoaderOptions options_;
  MixtureOrder order_;
  std::optional<LastResume> last_resume_;
  // One TokenLoader whose EpochSource is the order's window of each epoch:
  // its passes, epoch advance, SetEpoch and Restore are this loader's.
  std::shared_ptr<TokenLoader> loader_;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_MIXTURE_LOADER_H_
