#include "shardkit/loader/internal/train_deal.h"

#include <algorithm>
#include <utility>

namespace shardkit::internal {

namespace {

// The deal cost of one pack: its tokens, the sum of its squared piece
// lengths, or (squared, with CP) the causal work of its busiest CP rank.
double PackCost(const Pack& pack, CostModel model, Index seq_len,
                const ContextParallelOptions& cp) {
  // Tokens: the pack's total, which the packer keeps (an integer below
  // 2^53, so the same double as the sum of its pieces).
  if (model == CostModel::kTokens) return static_cast<double>(pack.tokens);
  if (cp.size > 1) return CpRowCost(pack.pieces, seq_len, cp);
  double c = 0;
  for (const Piece& p : pack.pieces) c += PieceCost(p.length, model);
  return c;
}

}  // namespace

Index Gather(PackStream* stream, Index R, Deal* deal) {
  deal->packs.clear();
  deal->epochs.clear();
  deal->indices.clear();
  Pack pack;
  std::uint64_t e;
  Index g;
  while (static_cast<Index>(deal->packs.size()) < R && stream->Next(&pack, &e, &g)) {
    deal->packs.push_back(std::move(pack));
    deal->epochs.push_back(e);
    deal->indices.push_back(g);
  }
  return static_cast<Index>(deal->packs.size());
}

void DealPacks(Index W, Index rows, CostModel model, Index seq_len,
               const ContextParallelOptions& cp, Deal* deal) {
  const Index K = static_cast<Index>(deal->packs.size());
  deal->costs.assign(static_cast<std::size_t>(K), 0.0);
  deal->total = 0;
  for (Index k = 0; k < K; ++k) {
    const Pack& pack = deal->packs[static_cast<std::size_t>(k)];
    const double c = PackCost(pack, model, seq_len, cp);
    deal->costs[static_cast<std::size_t>(k)] = c;
    deal->total += c;
  }
  DealStep(deal->costs, W, rows, {}, &deal->dealt);
  double heaviest = 0;
  for (double c : deal->dealt.rank_costs) heaviest = std::max(heaviest, c);
  const double mean = deal->total / static_cast<double>(W);
  deal->imbalance = mean > 0 ? heaviest / mean - 1.0 : 0.0;
}

void FillStep(const Deal& deal, Index rank, Index rows, Index step, TrainStep* out) {
  out->step = step;
  out->rows.clear();
  out->row_epochs.clear();
  out->row_packs.clear();
  out->tokens = 0;
  out->cost = 0;
  out->imbalance = deal.imbalance;
  if (rank < static_cast<Index>(deal.dealt.by.size())) {
    const std::size_t ur = static_cast<std::size_t>(rank);
    out->cost = deal.dealt.rank_costs[ur];
    for (Index k : deal.dealt.by[ur]) {
      const std::size_t uk = static_cast<std::size_t>(k);
      out->rows.push_back(deal.packs[uk].pieces);
      out->row_epochs.push_back(deal.epochs[uk]);
      out->row_packs.push_back(deal.indices[uk]);
      out->tokens += deal.packs[uk].tokens;
    }
  }
  out->filler_rows = rows - static_cast<Index>(out->rows.size());
  const std::uint64_t e = deal.epochs.empty() ? 0 : deal.epochs.back();
  while (static_cast<Index>(out->rows.size()) < rows) {
    out->rows.emplace_back();
    out->row_epochs.push_back(e);
    out->row_packs.push_back(-1);
  }
}

}  // namespace shardkit::internal
