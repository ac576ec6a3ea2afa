// TrainPlan::Audit: the plan checked against the epoch's stream replayed on
// its own (train_plan.h: TrainAudit).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "shardkit/loader/internal/pack_stream.h"
#include "shardkit/loader/internal/train_deal.h"
#include "shardkit/loader/internal/train_reader.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit {

namespace {

bool SamePieces(const std::vector<Piece>& a, const std::vector<Piece>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Piece& x, const Piece& y) {
    return x.item == y.item && x.length == y.length && x.images == y.images && x.start == y.start;
  });
}

}  // namespace

TrainAudit TrainPlan::Audit() const {
  const TrainOptions& o = options_;
  TrainAudit a;
  a.steps = num_steps();
  a.world_size = o.world_size;
  a.rows_per_rank = rows_per_rank_;
  a.documents = documents_.count;
  a.equal_steps = true;
  a.filler_last_only = true;
  auto fail = [&a](const std::string& what) {
    if (a.error.empty()) a.error = what;
  };
  // The whole stream of the epoch, on its own.
  std::vector<std::vector<Piece>> packs;
  std::vector<Index> dropped_docs;
  {
    internal::PackStream whole(&documents_, o, false);
    whole.set_dropped_sink(&dropped_docs);
    Pack pack;
    std::uint64_t e;
    Index g;
    while (whole.Next(&pack, &e, &g)) packs.push_back(std::move(pack.pieces));
  }
  const Index P = static_cast<Index>(packs.size());
  a.dropped = static_cast<Index>(dropped_docs.size());
  // Every piece of every document exactly once in the stream, dropped
  // documents in none.
  {
    std::vector<std::vector<std::pair<Index, Index>>> by_doc(
        static_cast<std::size_t>(documents_.count));
    const Index granule = CpGranule(o.cp);
    for (const auto& pack : packs) {
      // Every row fits seq_len with each piece padded to the CP granularity.
      if (CpPaddedTokens(pack, granule) > o.seq_len) {
        fail("a pack of " + Str(CpPaddedTokens(pack, granule)) + " padded tokens exceeds seq_len");
      }
      for (const Piece& p : pack) {
        if (p.item < 0 || p.item >= documents_.count) {
          fail("a piece names document " + Str(p.item));
          continue;
        }
        by_doc[static_cast<std::size_t>(p.item)].push_back({p.start, p.length});
      }
    }
    std::vector<char> dropped(static_cast<std::size_t>(documents_.count), 0);
    for (Index d : dropped_docs) dropped[static_cast<std::size_t>(d)] = 1;
    for (Index d = 0; d < documents_.count; ++d) {
      auto& list = by_doc[static_cast<std::size_t>(d)];
      if (dropped[static_cast<std::size_t>(d)]) {
        if (!list.empty()) fail("dropped document " + Str(d) + " was packed");
        continue;
      }
      std::sort(list.begin(), list.end());
      const Index len = documents_.Length(d);
      Index at = 0;
      bool ok = !list.empty();
      for (auto [start, length] : list) {
        if (start != at || length < 0 || (length == 0 && len != 0)) ok = false;
        at = start + length;
      }
      if (!ok || at != len) fail("document " + Str(d) + " is not covered exactly once");
    }
  }
  // The plan's rows: stream packs [position, position + dealt) in order, each
  // once, with the stream's pieces.
  // Every rank's rows from the deal itself: ranks past the ones that got a
  // pack hold filler only (counted, not listed: W may be huge).
  auto reader = Read(-1, 0);
  Reader::Impl& in = *reader->impl_;
  std::vector<char> seen(static_cast<std::size_t>(P), 0);
  Index dealt = 0;
  for (; in.step < a.steps && in.Advance(); ++in.step) {
    const Index s = in.step;
    const internal::Deal& deal = in.deal;
    const Index used = static_cast<Index>(deal.dealt.by.size());
    Index listed = 0;
    for (Index r = 0; r < used; ++r) {
      const auto& mine = deal.dealt.by[static_cast<std::size_t>(r)];
      listed += static_cast<Index>(mine.size());
      if (static_cast<Index>(mine.size()) > rows_per_rank_) {
        a.equal_steps = false;
        fail("rank " + Str(r) + " got " + Str(static_cast<Index>(mine.size())) + " packs in step " +
             Str(s));
      }
      for (Index k : mine) {
        const std::size_t uk = static_cast<std::size_t>(k);
        if (deal.dealt.owner[uk] != r) fail("pack owner mismatch in step " + Str(s));
        const Index g = deal.indices[uk];
        if (deal.epochs[uk] != o.epoch) continue;  // continuous: a later epoch
        if (g < o.position || g >= P || seen[static_cast<std::size_t>(g)]) {
          fail("pack " + Str(g) + " dealt twice or outside [position, packs)");
          continue;
        }
        seen[static_cast<std::size_t>(g)] = 1;
        ++dealt;
        if (!SamePieces(deal.packs[uk].pieces, packs[static_cast<std::size_t>(g)])) {
          fail("pack " + Str(g) + " changed");
        }
        for (const Piece& p : deal.packs[uk].pieces) a.tokens += p.length;
      }
    }
    if (listed != static_cast<Index>(deal.packs.size()))
      fail("a pack of step " + Str(s) + " has no rank");
    const Index filler = o.world_size * rows_per_rank_ - listed;
    a.filler_rows += filler;
    if (filler > 0 && (o.mode != TrainMode::kPad || s != a.steps - 1)) {
      a.filler_last_only = false;
      fail("filler rows in step " + Str(s));
    }
  }
  if (in.step != a.steps) fail("the plan ended after " + Str(in.step) + " steps");
  for (Index g = o.position; g < o.position + dealt && g < P; ++g) {
    if (!seen[static_cast<std::size_t>(g)]) fail("pack " + Str(g) + " was skipped");
  }
  const Index tail = P - o.position - dealt;
  if (o.mode == TrainMode::kDrop) {
    a.dropped_packs = tail;
    for (Index g = P - tail; g < P; ++g) {
      for (const Piece& p : packs[static_cast<std::size_t>(g)]) a.dropped_tokens += p.length;
    }
    if (tail >= o.world_size * rows_per_rank_) fail("drop mode dropped a whole step");
  } else if (tail != 0) {
    fail(Str(tail) + " packs of the epoch were not dealt");
  }
  a.lower_bound = (a.tokens + o.seq_len - 1) / o.seq_len;
  const Index rows_dealt = a.steps * o.world_size * rows_per_rank_;
  a.padding_over_bound =
      a.lower_bound ? static_cast<double>(rows_dealt - a.lower_bound) / a.lower_bound : 0.0;
  a.max_step_imbalance = summary_.max_step_imbalance;
  a.max_full_step_imbalance = summary_.max_full_step_imbalance;
  a.exactly_once = a.error.empty();
  return a;
}

}  // namespace shardkit
