// The vocabulary every area shares: Index, the one integer type of the
// library (item counts, positions, ranks), and the arithmetic on it.
// Intervals are half-open [begin, end) throughout.
//
// Thread-safety: stateless.
#ifndef SHARDKIT_BASE_INDEX_H_
#define SHARDKIT_BASE_INDEX_H_

#include <cstdint>

namespace shardkit {

using Index = std::int64_t;

// ceil(a / b) for a >= 0, b > 0, without overflow.
[[nodiscard]] constexpr Index CeilDiv(Index a, Index b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace shardkit

#endif  // SHARDKIT_BASE_INDEX_H_
