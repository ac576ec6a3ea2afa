// Mixture: one global order of samples drawn from K sources with exact
// proportions, as a pure function of its parameters (no index array).
//
// Sources: source k has n_k items (n_k >= 0). Sample i of the mixture is a
// pair (source, item) with item in [0, n_k).
//
// Shares: each source's weight becomes an integer share q_k of a total Q.
// Integral weights with a sum below 2^62 are used exactly; any other weights
// are rounded (largest remainder) to shares of Q = 2^40, a positive weight to
// a positive share. by tokens: the weight is a share of tokens, so the sample
// share is w_k / mean_length_k (mean over the source's items), then the same.
//
// Blocks: positions are cut into blocks of B samples. Within a segment of
// constant shares that starts at local position t0 (a block boundary) with
// per-source counts S_k, the count of sources [0, k) before t0 + tau (tau a
// multiple of B) is sum_{j<k} S_j + round(tau * P_k / Q) (halves up), P_k =
// q_0 + ... + q_{k-1} (cumulative rounding: each source's count is the
// difference of two roundings, each within 1/2). So every block's per-source counts are fixed, and
// at every block boundary |count - target| < 1 for every source within the segment (the rounding is
// carried, never accumulated). REQUIRES B * q_k >= Q for every positive share (checked: `block`);
// that is what makes every block count non-negative. And B <= kMaxBlock = 2^28 (checked: `block`,
// or `weights` / `schedule` when a share below 1 / 2^28 would need a larger block). Inside a block
// of length L the slots are grouped by source (source 0 first) and position j holds the source of
// slot (a * j + c) mod L: a keyed rotation (c from the key and the block; a coprime to L near L
// times one of four badly approximable ratios, also chosen by the key), which spreads every source
// evenly over the block (its gaps take at most three lengths). A source's samples within the block
// take its next items in position order, and the number of them before position j is a difference
// of two floor sums (O(log L)), so a lookup never scans the block.
//
// Schedules: points (position, weights), positions in samples (or tokens,
// schedule_unit) from the start of the run, ascending. `weights` hold before the first point. Step:
// a point's weights hold from its position on. Linear: between two points the shares move linearly,
// realised as kLinearSteps equal constant steps (each takes the shares at its middle). Every change
// takes effect at the first block boundary at or after its position, and starts a new segment (the
// error bound restarts from the realised counts). In tokens, a point takes
// effect at the first block boundary where the nominal tokens drawn (each
// source's count x its mean length tokens / items, summed) reach its
// position: exact for the counts, within one sample's worth per source of
// any real prefix of documents drawn, and the same on every resume (the
// origin's nominal tokens come from its start counts).
//
// Sources' items: source k walks its own keyed Permutation of [0, n_k), a new
// one per epoch of that source (the c-th item taken from source k is
// Permutation(n_k, key(seed, k), c / n_k).Forward(c % n_k)), so every item is
// taken exactly once per epoch of its source, whatever the weights.
//
// Repeat: a source that does not repeat stops the mixture when it runs out.
// Block b* is the first block that would take an item past the end of such a
// source. If that source still has items left in b*, b* is the last block,
// cut to hold those items (of every non-repeating source that runs out in
// it) and the full counts of the other sources; otherwise the mixture ends at
// block b*'s start. Every item of the source that ran out is delivered
// exactly once. A mixture that never stops has kMaxSamples samples.
//
// Resume: a Mixture can start from per-source consumed counts (`start`) at
// global position `origin`; with new weights or a new schedule it continues
// every source from where it stopped: nothing repeated or skipped within any
// source's epoch.
//
// Cost: O(K * segments) memory. At: the segment (O(log segments)), the
// slot's source by binary search over the block's cumulative counts, each
// O(1) in closed form (O(log K)), the sample's rank among its source's
// samples of the block (two floor sums, O(log B)) and one item of the
// source's walk: O(log K + log B), no O(K) or O(B) work. Per-source counts:
// at a block boundary O(K) (Cumulative), anywhere O(K log B) (Consumed).
// Fill of consecutive positions is O(K) per block plus O(1) per sample
// (O(log K) in blocks over 2^20); Take reuses a block's counts for a run of
// entries in it.
//
// Thread-safety: immutable after construction; share freely.
#ifndef SHARDKIT_SHARDING_MIXTURE_H_
#define SHARDKIT_SHARDING_MIXTURE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/sharding/permutation.h"

namespace shardkit {

enum class MixBy { kSamples, kTokens };
enum class Interpolation { kStep, kLinear };

// "samples" / "tokens", "step" / "linear". Parse throws invalid_argument
// naming `by` (or `param`) / `interpolation` and the value.
[[nodiscard]] MixBy ParseMixBy(std::string_view name, std::string_view param = "by");
[[nodiscard]] std::string_view MixByName(MixBy by);
[[nodiscard]] Interpolation ParseInterpolation(std::string_view name);
[[nodiscard]] std::string_view InterpolationName(Interpolation interpolation);

struct SchedulePoint {
  Index position = 0;           // global position, in MixtureOptions::schedule_unit
  std::vector<double> weights;  // one per source
};

struct MixtureOptions {
  MixBy by = MixBy::kSamples;
  // by tokens: the tokens of each source (sum of its items' lengths);
  // TotalTokens sums a source's lengths.
  std::vector<Index> tokens;
  std::optional<Index> block;  // default: the smallest valid, at least 1024
  std::uint64_t seed = 0;
  std::vector<SchedulePoint> schedule;
  Interpolation interpolation = Interpolation::kStep;
  // The unit of schedule positions: samples, or tokens (nominal: the sum over
  // sources of count x mean length, which needs `tokens` whatever `by` is).
  MixBy schedule_unit = MixBy::kSamples;
  // One flag per source, or empty (every source repeats).
  std::vector<bool> repeat;
  // Resume: the global position of this mixture's sample 0 (schedule
  // positions are global) and each source's consumed count before it (empty:
  // zeros).
  Index origin = 0;
  std::vector<Index> start;
  // Samples of the plan hidden at the front (an unchanged resume): local
  // position i is position i + skip of the plan.
  Index skip = 0;
};

// The sum of `lengths`. Throws invalid_argument naming `lengths` for a
// negative length or an overflowing sum.
[[nodiscard]] Index TotalTokens(std::span<const std::int64_t> lengths);

struct MixSample {
  Index source = 0;
  Index item = 0;
  friend bool operator==(const MixSample&, const MixSample&) = default;
};

// Where a run stands: its global position, what each source gave, and the
// plan it followed (for an unchanged continuation).
struct MixtureState {
  Index position = 0;           // global position of the next sample
  std::vector<Index> consumed;  // items taken from each source so far
  std::vector<Index> sizes;
  std::vector<double> weights;
  MixtureOptions options;  // options.skip: plan position of the next sample
};

// A constant-share piece of the run (what the schedule and resume became).
struct MixSegment {
  Index begin = 0;                    // local position (a multiple of block)
  std::vector<std::uint64_t> q;       // integer shares, sum == total
  std::uint64_t total = 0;            // Q
  std::vector<Index> counts;          // per-source counts before `begin`
  std::vector<std::uint64_t> prefix;  // P_k = q_0 + ... + q_{k-1}, K + 1 entries
};

class Mixture {
 public:
  // Samples of a mixture that never stops: kMaxSamples rounded down to a
  // multiple of the block.
  static constexpr Index kMaxSamples = Index{1} << 62;
  static constexpr int kLinearSteps = 16;
  // The largest block, given or needed by the shares (a share below 1 / 2^28
  // of the total, or block=2^53 + 1, is refused naming the parameter): Fill
  // and Take list up to a block of scratch, and the floor sums of a lookup
  // stay in 64 bits.
  static constexpr Index kMaxBlock = Index{1} << 28;

  // Validates everything here. Throws invalid_argument naming the parameter:
  // sizes (empty list, a negative size), weights (wrong length, negative,
  // NaN/inf, all zero), a positive weight on an empty source (sizes), tokens
  // (by tokens: wrong length, negative, zero tokens with positive weight),
  // block (< 1, above kMaxBlock, or too small for a share: the message gives
  // the minimum), weights / schedule whose smallest positive share needs a
  // block above kMaxBlock,
  // schedule (positions not ascending or negative, weights as above),
  // repeat / start (wrong length, negative), origin (< 0).
  Mixture(std::vector<Index> sizes, std::vector<double> weights, MixtureOptions options = {});

  [[nodiscard]] Index num_sources() const { return static_cast<Index>(sizes_.size()); }
  [[nodiscard]] const std::vector<Index>& sizes() const { return sizes_; }
  [[nodiscard]] const std::vector<double>& weights() const { return weights_; }
  [[nodiscard]] const MixtureOptions& options() const { return options_; }
  [[nodiscard]] Index block() const { return block_; }
  // Number of samples; about kMaxSamples when the mixture never stops.
  [[nodiscard]] Index size() const { return size_; }
  // Whether a non-repeating source stops the mixture (was size() <
  // kMaxSamples, true for every mixture whose block does not divide 2^62).
  [[nodiscard]] bool bounded() const { return bounded_; }
  [[nodiscard]] const std::vector<MixSegment>& segments() const { return segments_; }

  // Sample at local position i. Throws out_of_range naming `position` unless
  // 0 <= i < size().
  [[nodiscard]] MixSample At(Index position) const;
  // sources[j], items[j] = At(positions[j]) for every j. A dense run of
  // entries in one block (span at most 32 x the entries) is listed once
  // through Fill; a long sparse run computes the block's counts once (O(K));
  // otherwise O(log K + log B) per entry. Throws out_of_range naming
  // `position` (and the entry) before writing anything.
  void Take(std::span<const Index> positions, Index* sources, Index* items) const;
  // out[j] = At(begin + j) for j in [0, end - begin). Throws out_of_range
  // naming `start` / `stop` unless 0 <= begin <= end <= size().
  void Fill(Index begin, Index end, Index* sources, Index* items) const;

  // Items taken from each source before local position `position` (the
  // start counts included). Throws out_of_range unless 0 <= position <= size().
  [[nodiscard]] std::vector<Index> Consumed(Index position) const;
  // The nominal tokens drawn before local position `position` (from the
  // plan's start, resumes included): sum over sources of consumed x mean
  // length (tokens / items), the unit of a schedule in tokens. Throws
  // invalid_argument naming `lengths` when the mixture has no token counts,
  // out_of_range naming `position` unless 0 <= position <= size().
  [[nodiscard]] double NominalTokens(Index position) const;
  // The first local position p (0 or a block boundary) where
  // NominalTokens(p) >= tokens; size() when the mixture ends before. O(K log
  // blocks). Throws as NominalTokens, invalid_argument naming `tokens` when
  // negative.
  [[nodiscard]] Index PositionOfTokens(double tokens) const;
  // The target (real-valued) counts of each source before `position` within
  // its segment plus the segment's start counts: what Consumed approximates.
  [[nodiscard]] std::vector<double> Target(Index position) const;

  // The state after `position` local samples. Throws out_of_range unless
  // 0 <= position <= size().
  [[nodiscard]] MixtureState State(Index position) const;
  // Continues a run: with neither weights nor schedule, the same plan from
  // the state's position (the samples an unbroken run would give). Otherwise
  // a new plan from the state's position: `weights` (default: the state's)
  // hold there and `schedule` (default: the state's) applies from there on
  // (points before the position are ignored); every source continues from its
  // consumed count. Throws invalid_argument naming `state` when the state is
  // inconsistent, or the parameter the new plan rejects.
  [[nodiscard]] static Mixture FromState(
      const MixtureState& state, std::optional<std::vector<double>> weights = std::nullopt,
      std::optional<std::vector<SchedulePoint>> schedule = std::nullopt);
  // A new plan from the state's position with `weights` and the schedule,
  // schedule unit, interpolation and block of `plan` (its other options are
  // the state's): every source continues from its consumed count. What
  // FromState does with new weights or a new schedule.
  [[nodiscard]] static Mixture Continue(const MixtureState& state, std::vector<double> weights,
                                        const MixtureOptions& plan);

  // The c-th item (0-based, over all epochs) of source k's walk.
  [[nodiscard]] Index SourceItem(Index source, Index c) const;

  // Per-source counts of block b (b < ceil(size / block)), into out (K).
  void BlockCounts(Index b, Index* out) const;
  // Per-source counts before local position b * block, into out (K).
  void Cumulative(Index b, Index* out) const;

 private:
  struct Rotation;   // the order of one block's slots
  struct BlockInfo;  // counts, slot prefixes and rotation of one block
  // `known`: the counts before block b when the caller has them.
  void ComputeBlock(Index b, BlockInfo* info, const std::vector<Index>* known = nullptr) const;
  // The sample at plan position p in O(log K + log B), from closed forms.
  MixSample Lookup(Index p) const;
  // The sample at plan position p of block info->index (computed).
  MixSample LookupIn(const BlockInfo& info, Index p) const;
  // The order of block b of `length` slots.
  [[nodiscard]] Rotation RotationOf(Index b, Index length) const;
  // Sum of counts[i] x mean_[i] (REQUIRES mean_ set, K counts).
  [[nodiscard]] long double Nominal(const Index* counts) const;
  // Per-source counts of the block's positions [0, first), into seen (K).
  void HeadCounts(const BlockInfo& info, Index first, Index* seen) const;
  Index FindStop() const;

  std::vector<Index> sizes_;
  std::vector<double> weights_;
  MixtureOptions options_;
  Index block_ = 0;
  Index size_ = 0;
  std::vector<MixSegment> segments_;
  std::vector<std::uint64_t> source_keys_;
  std::uint64_t order_key_ = 0;
  // The last block when it is cut short (bounded mixtures): its index and
  // per-source counts.
  Index cut_block_ = -1;
  std::vector<Index> cut_counts_;
  std::vector<Index> cut_prefix_;  // slot prefix sums of the cut block, K + 1
  // Mean length of each source (tokens / items), when the tokens are known.
  std::vector<long double> mean_;
  // Spread multipliers (and inverses) of full blocks and of the cut block.
  std::int64_t spread_ = 0, spread_inverse_ = 0;
  std::int64_t cut_spread_ = 0, cut_spread_inverse_ = 0;
  bool bounded_ = false;  // a non-repeating source stops the mixture
};

// What a stretch of a mixture delivered, against its target.
struct MixWindow {
  Index begin = 0, end = 0;
  std::vector<Index> counts;   // samples of each source in [begin, end)
  std::vector<double> target;  // the target counts of the same stretch
};

struct MixReport {
  Index begin = 0, end = 0;
  std::vector<Index> counts;     // samples of each source in [begin, end)
  std::vector<double> realised;  // counts / (end - begin)
  std::vector<double> target;    // target shares over [begin, end)
  std::vector<Index> consumed;   // each source's consumed count at `end`
  std::vector<double> epochs;    // consumed / size (0 for an empty source)
  // max over sources of |consumed - target count| at `end` (below 1 at a
  // block boundary within a segment).
  double max_error = 0;
  std::vector<MixWindow> windows;  // `windows` equal stretches of [begin, end)
};

// Realised against target proportions over [begin, end) and in `windows`
// equal stretches (the picture of a schedule). O(K * windows) plus a block
// scan per window edge. Throws out_of_range naming `start` / `stop` unless
// 0 <= begin <= end <= size(), invalid_argument naming `windows` unless
// 0 <= windows <= 10000.
[[nodiscard]] MixReport ReportMixture(const Mixture& mixture, Index begin, Index end,
                                      Index windows);

}  // namespace shardkit

#endif  // SHARDKIT_SHARDING_MIXTURE_H_
