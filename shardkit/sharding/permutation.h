// Permutation: a keyed bijection on [0, n) for any n in [0, 2^63 - 1].
//
// Domain: positions and indices are both in [0, n). Forward(p) is the index at
// position p of the shuffled order; Inverse(i) is the position of index i.
// Both are O(1) (expected fewer than two Feistel evaluations) and the object is
// O(1) memory, so a shuffled epoch is never materialised.
// Key: (seed, epoch) select the permutation; n is mixed into the key too, so
// orders of different lengths are unrelated. Same key, same n -> same order on
// every machine (no floating point, no platform-dependent hashing).
// Construction: a Feistel network of kRounds rounds over the mixed-radix
// domain [0, a) x [0, 2^k), 2^k >= sqrt(n), a = ceil(n / 2^k) (each at least
// 16): the left half is updated by addition mod a, the right half by xor. The
// domain exceeds n by less than 2^k <= 2 sqrt(n), so cycle walking back into
// [0, n) is rare. docs/permutation.md gives the construction
// and the statistical tests it passes.
//
// Thread-safety: immutable after construction; safe to share across threads.
#ifndef SHARDKIT_SHARDING_PERMUTATION_H_
#define SHARDKIT_SHARDING_PERMUTATION_H_

#include <algorithm>
#include <cstdint>

#include "shardkit/base/errors.h"

namespace shardkit {

class Permutation {
 public:
  static constexpr int kRounds = 4;

  // REQUIRES: n >= 0 (throws invalid_argument naming num_items otherwise).
  Permutation(Index n, std::uint64_t seed, std::uint64_t epoch);

  [[nodiscard]] Index size() const { return n_; }

  // The index at `position`. REQUIRES: 0 <= position < size() (unchecked).
  [[nodiscard]] Index Forward(Index position) const {
    return Walk<&Permutation::Encrypt>(position);
  }

  // The position of `index`. REQUIRES: 0 <= index < size() (unchecked).
  [[nodiscard]] Index Inverse(Index index) const { return Walk<&Permutation::Decrypt>(index); }

  // out[j] = Forward(first + j * stride) for 0 <= j < count, evaluated in
  // vectorised blocks (a few ns per index). Throws out_of_range naming
  // `position` unless every position lies in [0, size()).
  void Fill(Index first, Index stride, Index count, Index* out) const;

 private:
  std::uint64_t Encrypt(std::uint64_t x) const;
  std::uint64_t Decrypt(std::uint64_t x) const;
  // Cycle walking: applies `kStep` (Encrypt or Decrypt, a bijection on the
  // domain) until the value lies in [0, n).
  template <std::uint64_t (Permutation::*kStep)(std::uint64_t) const>
  [[nodiscard]] Index Walk(Index v) const {
    std::uint64_t x = static_cast<std::uint64_t>(v);
    do {
      x = (this->*kStep)(x);
    } while (x >= static_cast<std::uint64_t>(n_));
    return static_cast<Index>(x);
  }

  Index n_;
  // position = left * 2^right_bits_ + right, left in [0, a_), right in
  // [0, 2^right_bits_).
  std::uint32_t a_ = 1;
  int right_bits_ = 4;
  std::uint32_t right_mask_ = 15;
  std::uint32_t keys_[kRounds] = {};
};

// SplitMix64 finaliser: the key schedule and other seeded choices use it.
[[nodiscard]] constexpr std::uint64_t Mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace shardkit

#endif  // SHARDKIT_SHARDING_PERMUTATION_H_
