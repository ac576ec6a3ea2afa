// Internal to the packing implementation: the set of remaining rooms in
// [0, capacity] that some open pack has, as two levels of 64-bit words, so
// that the smallest room >= a need is found in a few word scans (best fit's
// query). Thread-compatible; no allocation after construction.
#ifndef SHARDKIT_PACKING_INTERNAL_ROOM_BITS_H_
#define SHARDKIT_PACKING_INTERNAL_ROOM_BITS_H_

#include <bit>
#include <cstdint>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit::internal {

class RoomBits {
 public:
  // Rooms 0 .. capacity, none set. REQUIRES capacity >= 0.
  explicit RoomBits(Index capacity)
      : bits_(static_cast<size_t>(capacity) / 64 + 1, 0), summary_(bits_.size() / 64 + 1, 0) {}

  void Set(Index r) {
    const size_t w = static_cast<size_t>(r) / 64;
    bits_[w] |= std::uint64_t{1} << (r % 64);
    summary_[w / 64] |= std::uint64_t{1} << (w % 64);
  }
  void Clear(Index r) {
    const size_t w = static_cast<size_t>(r) / 64;
    bits_[w] &= ~(std::uint64_t{1} << (r % 64));
    if (!bits_[w]) summary_[w / 64] &= ~(std::uint64_t{1} << (w % 64));
  }
  // The smallest set room >= need, or -1. REQUIRES 0 <= need <= capacity.
  [[nodiscard]] Index FindAtLeast(Index need) const {
    size_t w = static_cast<size_t>(need) / 64;
    std::uint64_t word = bits_[w] & (~std::uint64_t{0} << (need % 64));
    if (word) return static_cast<Index>(w * 64 + std::countr_zero(word));
    size_t s = (w + 1) / 64;
    if (s >= summary_.size()) return -1;
    std::uint64_t sw =
        (w + 1) % 64 == 0 ? summary_[s] : summary_[s] & (~std::uint64_t{0} << ((w + 1) % 64));
    while (!sw) {
      if (++s >= summary_.size()) return -1;
      sw = summary_[s];
    }
    w = s * 64 + std::countr_zero(sw);
    return static_cast<Index>(w * 64 + std::countr_zero(bits_[w]));
  }

 private:
  std::vector<std::uint64_t> bits_, summary_;
};

}  // namespace shardkit::internal

#endif  // SHARDKIT_PACKING_INTERNAL_ROOM_BITS_H_
