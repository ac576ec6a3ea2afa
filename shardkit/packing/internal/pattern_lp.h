// Internal to the packing implementation: the linear program over pack
// patterns behind histogram packing under a count budget.
//
// A pattern is a multiset of at most k lengths (k = max_sequences) whose sum
// is at most the capacity. With n_l items of length l, the LP
//
//   minimise sum_p x_p   subject to   sum_p a_lp x_p = n_l (every length l),
//                                     x_p >= 0,
//
// (a_lp: copies of l in pattern p) is the fractional relaxation of packing
// the histogram into as few packs as possible (Gilmore and Gomory's cutting
// stock LP); its optimum is a lower bound on the packs of any packing. It is
// solved by column generation: a revised primal simplex over a dense basis
// inverse (one row per distinct length), and pricing that finds the pattern
// of the largest dual value (k <= 3: over pairs of lengths and the best third;
// k >= 4: a DP over capacity and item count). The simplex stays primal
// feasible, so every iterate is a usable (fractional) packing; a
// deterministic work limit stops it, and the result says whether it reached
// the optimum.
//
// Deterministic: the same arithmetic in the same order, ties broken by
// position, no clocks (the limit counts arithmetic steps, not seconds).
#ifndef SHARDKIT_PACKING_INTERNAL_PATTERN_LP_H_
#define SHARDKIT_PACKING_INTERNAL_PATTERN_LP_H_

#include <optional>
#include <span>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit::internal {

// Largest number of distinct lengths the LP takes (its basis inverse is
// dense: 8 MiB at this size).
inline constexpr Index kPatternLpMaxLengths = 1024;

struct PatternLpResult {
  // The basis: pattern j (lengths, decreasing) is used x[j] times.
  std::vector<std::vector<Index>> patterns;
  std::vector<double> x;
  // Dual value of every length (same order as the input lengths): at the
  // optimum no pattern's duals sum to more than 1.
  std::vector<double> duals;
  double objective = 0;  // sum of x
  bool optimal = false;  // no pattern prices out (within 1e-9)
  Index pivots = 0;
  Index work = 0;  // arithmetic steps spent (pricing, pivots, refactorisations)
};

// Solves the pattern LP for `lengths` (distinct, ascending, each in
// [0, capacity]) with `counts` (>= 1 each), at most `max_sequences` (>= 1)
// items per pattern, spending at most about `work_limit` arithmetic steps.
// nullopt when it does not apply (more than kPatternLpMaxLengths lengths, or
// a limit that leaves no room for 4 pricing steps per length) or the basis
// turns singular. REQUIRES max_sequences <= the number of items.
[[nodiscard]] std::optional<PatternLpResult> SolvePatternLp(std::span<const Index> lengths,
                                                            std::span<const Index> counts,
                                                            Index capacity, Index max_sequences,
                                                            Index work_limit);

}  // namespace shardkit::internal

#endif  // SHARDKIT_PACKING_INTERNAL_PATTERN_LP_H_
