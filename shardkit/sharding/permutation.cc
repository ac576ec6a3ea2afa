#include "shardkit/sharding/permutation.h"

#include <string>

namespace shardkit {

namespace {

// Round function: a 32-bit integer hash (two multiply-xorshift steps, the
// "lowbias32" constants) of the half xored with the round key, mapped onto
// [0, m) by a multiply-shift (no division). 32-bit lanes vectorise.
inline std::uint32_t Hash(std::uint32_t x, std::uint32_t key) {
  x ^= key;
  x ^= x >> 16;
  x *= 0x21f0aaadU;
  x ^= x >> 15;
  x *= 0x735a2d97U;
  x ^= x >> 15;
  return x;
}

inline std::uint32_t Reduce(std::uint32_t h, std::uint32_t m) {
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(h) * m) >> 32);
}

// (v + f) mod m for v, f < m <= 2^32, without leaving 32 bits.
inline std::uint32_t AddMod(std::uint32_t v, std::uint32_t f, std::uint32_t m) {
  const std::uint32_t gap = m - f;
  return v >= gap ? v - gap : v + f;
}

// (v - f) mod m for v, f < m.
inline std::uint32_t SubMod(std::uint32_t v, std::uint32_t f, std::uint32_t m) {
  return v >= f ? v - f : v + (m - f);
}

constexpr int kBlock = 256;
// Feistel networks over a handful of values per half are far from uniform (6
// rounds over 4 x 4 values miss most permutations of 5 items); each half has
// at least 16 values, and cycle walking pays for it, which only n < 256 sees.
constexpr int kMinBits = 4;
constexpr std::uint64_t kMinLeft = 16;

std::uint64_t CeilSqrt(std::uint64_t n) {
  std::uint64_t r = 1;
  while (r < 4294967296ULL && r * r < n) r <<= 1;  // power of two >= sqrt(n)
  std::uint64_t lo = r / 2, hi = r;                // lo^2 < n <= hi^2
  while (hi - lo > 1) {
    std::uint64_t mid = lo + (hi - lo) / 2;
    if (mid * mid >= n) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

}  // namespace

Permutation::Permutation(Index n, std::uint64_t seed, std::uint64_t epoch) : n_(n) {
  CheckAtLeast("num_items", n, 0);
  const std::uint64_t un = static_cast<std::uint64_t>(n);
  // Right half: 2^k >= sqrt(n) values, so splitting and joining a position
  // are a shift and a mask; left half: a = ceil(n / 2^k) <= 2^k values, so
  // the domain a * 2^k exceeds n by less than 2^k <= 2 sqrt(n).
  int k = kMinBits;
  const std::uint64_t root = un <= 1 ? 1 : CeilSqrt(un);
  while ((std::uint64_t{1} << k) < root) ++k;
  right_bits_ = k;
  right_mask_ = static_cast<std::uint32_t>((std::uint64_t{1} << k) - 1);
  const std::uint64_t a = std::max<std::uint64_t>(kMinLeft, (un + right_mask_) >> k);
  a_ = static_cast<std::uint32_t>(a);  // a <= 2^31 since n < 2^63 and k >= 32 there
  std::uint64_t state = Mix64(seed ^ 0x5348415244ULL);  // "SHARD"
  state = Mix64(state ^ epoch);
  state = Mix64(state ^ un);
  for (int i = 0; i < kRounds; ++i) {
    keys_[i] = static_cast<std::uint32_t>(Mix64(state + i) >> 32);
  }
}

std::uint64_t Permutation::Encrypt(std::uint64_t x) const {
  std::uint32_t left = static_cast<std::uint32_t>(x >> right_bits_);
  std::uint32_t right = static_cast<std::uint32_t>(x) & right_mask_;
  for (int i = 0; i < kRounds; i += 2) {
    left = AddMod(left, Reduce(Hash(right, keys_[i]), a_), a_);
    right ^= Hash(left, keys_[i + 1]) & right_mask_;
  }
  return (static_cast<std::uint64_t>(left) << right_bits_) | right;
}

std::uint64_t Permutation::Decrypt(std::uint64_t x) const {
  std::uint32_t left = static_cast<std::uint32_t>(x >> right_bits_);
  std::uint32_t right = static_cast<std::uint32_t>(x) & right_mask_;
  for (int i = kRounds - 2; i >= 0; i -= 2) {
    right ^= Hash(left, keys_[i + 1]) & right_mask_;
    left = SubMod(left, Reduce(Hash(right, keys_[i]), a_), a_);
  }
  return (static_cast<std::uint64_t>(left) << right_bits_) | right;
}

namespace {

// The Feistel network over a block of positions position + j * step, j < count
// <= kBlock, written without
// branches so that the compiler vectorises it; target_clones picks the widest
// instruction set at load time without requiring it at build time. Writes
// out[j] = left * 2^shift + right and returns how many results are >= n (those
// lanes need cycle walking).
#if defined(SHARDKIT_NO_TARGET_CLONES) || defined(__SANITIZE_THREAD__)
// ThreadSanitizer: an ifunc resolver runs before the TSan runtime starts and
// crashes the program before main, so the portable clone alone is built.
#define SHARDKIT_TARGET_CLONES
#else
#define SHARDKIT_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
SHARDKIT_TARGET_CLONES int EncryptBlock(std::uint64_t position, std::uint64_t step, int count,
                                        const std::uint32_t* keys, std::uint32_t a, int shift,
                                        std::uint32_t mask, std::uint64_t n,
                                        Index* __restrict out) {
  alignas(64) std::uint32_t left[kBlock];
  alignas(64) std::uint32_t right[kBlock];
  for (int j = 0; j < count; ++j) {
    left[j] = static_cast<std::uint32_t>(position >> shift);
    right[j] = static_cast<std::uint32_t>(position) & mask;
    position += step;
  }
  for (int r = 0; r < Permutation::kRounds; r += 2) {
    const std::uint32_t k0 = keys[r];
    const std::uint32_t k1 = keys[r + 1];
    for (int j = 0; j < count; ++j) {
      const std::uint32_t l = AddMod(left[j], Reduce(Hash(right[j], k0), a), a);
      left[j] = l;
      right[j] ^= Hash(l, k1) & mask;
    }
  }
  int outside = 0;
  for (int j = 0; j < count; ++j) {
    const std::uint64_t x = (static_cast<std::uint64_t>(left[j]) << shift) | right[j];
    out[j] = static_cast<Index>(x);
    outside += x >= n;
  }
  return outside;
}

}  // namespace

void Permutation::Fill(Index first, Index stride, Index count, Index* out) const {
  if (count <= 0) return;
  Index last_offset = 0;
  const bool overflow = __builtin_mul_overflow(count - 1, stride, &last_offset);
  if (first < 0 || stride < 0 || overflow || first >= n_ || last_offset >= n_ - first) {
    ThrowOutOfRange("position", "positions " + std::to_string(first) + " + k * " +
                                    std::to_string(stride) + " for k < " + std::to_string(count) +
                                    " leave [0, " + std::to_string(n_) + ")");
  }
  const std::uint64_t n = static_cast<std::uint64_t>(n_);
  const std::uint64_t step = static_cast<std::uint64_t>(stride);
  for (Index base = 0; base < count; base += kBlock) {
    const int lanes = static_cast<int>(count - base < kBlock ? count - base : kBlock);
    const std::uint64_t position = static_cast<std::uint64_t>(first) + base * step;
    Index* block_out = out + base;
    if (EncryptBlock(position, step, lanes, keys_, a_, right_bits_, right_mask_, n, block_out) == 0)
      continue;
    // Rare for large n (the domain exceeds n by less than 2 sqrt(n)):
    // walk the stragglers one at a time.
    for (int j = 0; j < lanes; ++j) {
      std::uint64_t x = static_cast<std::uint64_t>(block_out[j]);
      while (x >= n) x = Encrypt(x);
      block_out[j] = static_cast<Index>(x);
    }
  }
}

}  // namespace shardkit
