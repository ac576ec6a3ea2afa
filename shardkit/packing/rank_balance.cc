#include "shardkit/packing/rank_balance.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "shardkit/base/enum_names.h"

namespace shardkit {

namespace {
constexpr EnumNames<CostModel, 2> kCostModels{"cost", "cost model", {"tokens", "squared"}};
}  // namespace

SHARDKIT_ENUM_PARSE_AND_NAMES(CostModel, kCostModels, ParseCostModel, CostModelName, CostModelNames)

double PieceCost(Index length, CostModel model) {
  const double l = static_cast<double>(length);
  return model == CostModel::kTokens ? l : l * l;
}

std::vector<double> PackCosts(const Packing& packing, CostModel model) {
  std::vector<double> costs(packing.num_packs(), 0.0);
  for (Index p = 0; p < packing.num_packs(); ++p) {
    double c = 0;
    for (Index e = packing.offsets[p]; e < packing.offsets[p + 1]; ++e) {
      c += PieceCost(packing.lengths[e], model);
    }
    costs[p] = c;
  }
  return costs;
}

void DealStep(std::span<const double> costs, Index world_size, Index rows,
              std::span<const double> carried, RankDeal* deal) {
  const Index K = static_cast<Index>(costs.size());
  // With nothing carried an unused rank costs 0 and the lowest one wins ties,
  // so ranks past the K-th never receive a pack.
  const Index ranks = carried.empty() ? std::min(world_size, K) : world_size;
  // Decreasing cost, ties by lower position: a strict order, so std::sort
  // gives what a stable sort by cost would.
  std::vector<Index>& order = deal->order;
  order.resize(static_cast<std::size_t>(K));
  std::iota(order.begin(), order.end(), Index{0});
  std::sort(order.begin(), order.end(), [costs](Index a, Index b) {
    const double ca = costs[static_cast<std::size_t>(a)], cb = costs[static_cast<std::size_t>(b)];
    return ca != cb ? ca > cb : a < b;
  });
  // A min-heap of (cost in this step, carried cost, rank).
  auto& heap = deal->heap;
  heap.clear();
  for (Index r = 0; r < ranks; ++r) {
    heap.emplace_back(0.0, carried.empty() ? 0.0 : carried[static_cast<std::size_t>(r)], r);
  }
  if (!carried.empty()) std::make_heap(heap.begin(), heap.end(), std::greater<>());
  deal->owner.assign(static_cast<std::size_t>(K), -1);
  deal->by.resize(static_cast<std::size_t>(ranks));
  for (auto& list : deal->by) list.clear();
  deal->rank_costs.assign(static_cast<std::size_t>(ranks), 0.0);
  for (Index k : order) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const auto [cost, before, r] = heap.back();
    heap.pop_back();
    const std::size_t ur = static_cast<std::size_t>(r);
    deal->owner[static_cast<std::size_t>(k)] = r;
    deal->by[ur].push_back(k);
    deal->rank_costs[ur] = cost + costs[static_cast<std::size_t>(k)];
    if (static_cast<Index>(deal->by[ur].size()) < rows) {
      heap.emplace_back(deal->rank_costs[ur], before, r);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  }
  for (auto& list : deal->by) std::sort(list.begin(), list.end());
}

RankSchedule BalanceRanks(std::span<const double> costs, Index world_size, Index packs_per_rank,
                          bool drop_last) {
  CheckAtLeast("world_size", world_size, 1);
  CheckAtLeast("packs_per_rank", packs_per_rank, 1);
  const Index num_packs = static_cast<Index>(costs.size());
  for (Index p = 0; p < num_packs; ++p) {
    if (!(costs[p] >= 0) || !std::isfinite(costs[p])) {
      ThrowInvalid("costs", "pack " + Str(p) + " has cost " + std::to_string(costs[p]) +
                                " (must be finite and >= 0)");
    }
  }
  const Index per_step = CheckedMul("world_size", world_size, packs_per_rank);
  // The schedule holds world_size x packs_per_rank entries per step: bounded
  // by the packs (plus a generous margin), so that a huge world over a few
  // packs is refused up front instead of allocating gigabytes of padding.
  constexpr Index kMaxPaddedStep = Index{1} << 24;
  if (per_step > kMaxPaddedStep && per_step > num_packs) {
    ThrowInvalid("world_size", Str(world_size) + " ranks x " + Str(packs_per_rank) +
                                   " packs per rank is " + Str(per_step) +
                                   " pack slots per step for only " + Str(num_packs) +
                                   " packs (more than 2^24 slots, almost all padding)");
  }
  RankSchedule s;
  s.world_size = world_size;
  s.packs_per_rank = packs_per_rank;
  std::vector<Index> order(num_packs);
  std::iota(order.begin(), order.end(), Index{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](Index a, Index b) { return costs[a] > costs[b]; });
  Index used = num_packs;
  if (drop_last) {
    used = num_packs / per_step * per_step;
    s.dropped_packs.assign(order.begin() + used, order.end());
    std::sort(s.dropped_packs.begin(), s.dropped_packs.end());
  }
  s.num_steps = CeilDiv(used, per_step);
  s.padding_packs = s.num_steps * per_step - used;
  s.assignment.assign(static_cast<size_t>(s.num_steps * per_step), -1);
  s.rank_costs.assign(static_cast<size_t>(s.num_steps * world_size), 0.0);
  // Each step dealt by DealStep carrying the epoch's totals so far.
  std::vector<double> totals(world_size, 0.0);
  std::vector<double> step_costs;
  RankDeal deal;
  for (Index step = 0; step < s.num_steps; ++step) {
    const Index begin = step * per_step, end = std::min(used, begin + per_step);
    step_costs.clear();
    for (Index j = begin; j < end; ++j) step_costs.push_back(costs[order[j]]);
    DealStep(step_costs, world_size, packs_per_rank, totals, &deal);
    for (Index r = 0; r < static_cast<Index>(deal.by.size()); ++r) {
      const auto& mine = deal.by[static_cast<size_t>(r)];
      for (std::size_t slot = 0; slot < mine.size(); ++slot) {
        s.assignment[static_cast<size_t>((step * world_size + r) * packs_per_rank) + slot] =
            order[begin + mine[slot]];
      }
      s.rank_costs[static_cast<size_t>(step * world_size + r)] =
          deal.rank_costs[static_cast<size_t>(r)];
    }
    double sum = 0, max = 0;
    for (Index r = 0; r < world_size; ++r) {
      const double c = s.rank_costs[static_cast<size_t>(step * world_size + r)];
      sum += c;
      max = std::max(max, c);
      totals[r] += c;
    }
    if (sum > 0) {
      const double imbalance = max / (sum / static_cast<double>(world_size)) - 1;
      s.max_step_imbalance = std::max(s.max_step_imbalance, imbalance);
      if (end - begin == per_step) {
        s.max_full_step_imbalance = std::max(s.max_full_step_imbalance, imbalance);
      }
    }
  }
  double sum = 0, max = 0;
  for (double t : totals) {
    sum += t;
    max = std::max(max, t);
  }
  if (sum > 0) s.total_imbalance = max / (sum / static_cast<double>(world_size)) - 1;
  return s;
}

}  // namespace shardkit
