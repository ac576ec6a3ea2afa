// Overflow-free checks of half-open pieces [start, start + length): every
// place that validates a piece read from a user (a state, a file, an
// argument) asks these instead of writing `start + length <= limit`, which
// wraps for start near 2^63 and lets the piece through.
//
// Thread-safety: stateless.
#ifndef SHARDKIT_BASE_PIECE_H_
#define SHARDKIT_BASE_PIECE_H_

#include <optional>

#include "shardkit/base/index.h"

namespace shardkit {

// True when 0 <= start, 0 <= length and [start, start + length) lies inside
// [0, limit). Never overflows, for any Index values.
[[nodiscard]] constexpr bool PieceWithin(Index start, Index length, Index limit) {
  return start >= 0 && length >= 0 && start <= limit && length <= limit - start;
}

// a + b, or nullopt when the sum does not fit in an Index.
[[nodiscard]] constexpr std::optional<Index> AddWithoutOverflow(Index a, Index b) {
  Index out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace shardkit

#endif  // SHARDKIT_BASE_PIECE_H_
