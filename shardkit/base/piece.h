// Pieces of items (documents, samples): the one type the packer places, the
// loader's state lists and the train plan deals, and overflow-free checks of
// half-open pieces [start, start + length): every place that validates a
// piece read from a user (a state, a file, an argument) asks these instead of
// writing `start + length <= limit`, which wraps for start near 2^63 and lets
// the piece through.
//
// Thread-safety: value types and stateless functions.
#ifndef SHARDKIT_BASE_PIECE_H_
#define SHARDKIT_BASE_PIECE_H_

#include <optional>

#include "shardkit/base/index.h"

namespace shardkit {

// Tokens [start, start + length) of item `item`, carrying `images` images.
// An item that is not split is one piece with start 0 and its whole length.
// What `item` names is the holder's: a position in the input (PackItems), a
// document (the loader), or a reference into a list (a loader state's packer
// refers to its head piece h as item -h - 1, start within that piece).
struct Piece {
  Index item = 0;
  Index length = 0;  // tokens
  Index images = 0;
  Index start = 0;  // first token of this piece within the item
  friend bool operator==(const Piece&, const Piece&) = default;
};

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
