#include "shardkit/permutation.h"

#include <bit>
#include <string>

namespace shardkit {

namespace {

// Round function: a 32-bit integer hash (two multiply-xorshift steps, the
// "lowbias32" constants) of the half xored with the round key. 32-bit lanes so
// that blocks of positions vectorise with AVX2 / AVX-512.
inline std::uint32_t Round(std::uint32_t x, std::uint32_t key) {
  x ^= key;
  x ^= x >> 16;
  x *= 0x21f0aaadU;
  x ^= x >> 15;
  x *= 0x735a2d97U;
  x ^= x >> 15;
  return x;
}

constexpr int kBlock = 256;
constexpr int kMinBits = 8;

}  // namespace

Permutation::Permutation(Index n, std::uint64_t seed, std::uint64_t epoch)
    : n_(n) {
  CheckAtLeast("num_items", n, 0);
  int bits = n <= 1 ? 0 : 64 - std::countl_zero(static_cast<std::uint64_t>(n - 1));
  // Feistel networks over a handful of bits are far from uniform (6 rounds over
  // 2 + 2 bits miss most permutations of 5 items); below 2^kMinBits the domain
  // is widened and cycle walking pays for it, which only small n ever see.
  if (bits < kMinBits) bits = kMinBits;
  const int left_bits = (bits + 1) / 2;
  right_bits_ = bits / 2;
  left_mask_ = static_cast<std::uint32_t>((std::uint64_t{1} << left_bits) - 1);
  right_mask_ = static_cast<std::uint32_t>((std::uint64_t{1} << right_bits_) - 1);
  std::uint64_t state = Mix64(seed ^ 0x5348415244ULL);  // "SHARD"
  state = Mix64(state ^ epoch);
  state = Mix64(state ^ static_cast<std::uint64_t>(n));
  for (int i = 0; i < kRounds; ++i) {
    keys_[i] = static_cast<std::uint32_t>(Mix64(state + i) >> 32);
  }
}

std::uint64_t Permutation::Encrypt(std::uint64_t x) const {
  std::uint32_t left = static_cast<std::uint32_t>(x >> right_bits_);
  std::uint32_t right = static_cast<std::uint32_t>(x) & right_mask_;
  for (int i = 0; i < kRounds; i += 2) {
    left ^= Round(right, keys_[i]) & left_mask_;
    right ^= Round(left, keys_[i + 1]) & right_mask_;
  }
  return (static_cast<std::uint64_t>(left) << right_bits_) | right;
}

std::uint64_t Permutation::Decrypt(std::uint64_t x) const {
  std::uint32_t left = static_cast<std::uint32_t>(x >> right_bits_);
  std::uint32_t right = static_cast<std::uint32_t>(x) & right_mask_;
  for (int i = kRounds - 2; i >= 0; i -= 2) {
    right ^= Round(left, keys_[i + 1]) & right_mask_;
    left ^= Round(right, keys_[i]) & left_mask_;
  }
  return (static_cast<std::uint64_t>(left) << right_bits_) | right;
}

namespace {

// One pass of the Feistel network over a block of (left, right) halves. Kept
// free of branches so that the compiler vectorises it; target_clones picks the
// widest instruction set at load time without requiring it at build time.
__attribute__((target_clones("avx512f", "avx2", "default"))) void
EncryptBlock(std::uint32_t* __restrict left, std::uint32_t* __restrict right,
             int count, const std::uint32_t* keys, std::uint32_t left_mask,
             std::uint32_t right_mask) {
  for (int r = 0; r < Permutation::kRounds; r += 2) {
    const std::uint32_t k0 = keys[r];
    const std::uint32_t k1 = keys[r + 1];
    for (int j = 0; j < count; ++j) {
      std::uint32_t l = left[j] ^ (Round(right[j], k0) & left_mask);
      left[j] = l;
      right[j] ^= Round(l, k1) & right_mask;
    }
  }
}

}  // namespace

void Permutation::Fill(Index first, Index stride, Index count, Index* out) const {
  if (count <= 0) return;
  Index last_offset = 0;
  const bool overflow = __builtin_mul_overflow(count - 1, stride, &last_offset);
  if (first < 0 || stride < 0 || overflow || first >= n_ || last_offset >= n_ - first) {
    ThrowOutOfRange("position", "positions " + std::to_string(first) + " + k * " +
                                    std::to_string(stride) + " for k < " +
                                    std::to_string(count) + " leave [0, " +
                                    std::to_string(n_) + ")");
  }
  const std::uint64_t n = static_cast<std::uint64_t>(n_);
  const int shift = right_bits_;
  alignas(64) std::uint32_t left[kBlock];
  alignas(64) std::uint32_t right[kBlock];
  alignas(64) std::uint32_t slot[kBlock];  // output slot of each pending lane
  for (Index base = 0; base < count; base += kBlock) {
    const int lanes = static_cast<int>(count - base < kBlock ? count - base : kBlock);
    Index* block_out = out + base;
    std::uint64_t position = static_cast<std::uint64_t>(first + base * stride);
    for (int j = 0; j < lanes; ++j) {
      const std::uint64_t p = position + static_cast<std::uint64_t>(j) * stride;
      left[j] = static_cast<std::uint32_t>(p >> shift);
      right[j] = static_cast<std::uint32_t>(p) & right_mask_;
    }
    EncryptBlock(left, right, lanes, keys_, left_mask_, right_mask_);
    // Every lane writes its slot; lanes that left [0, n) are compacted without
    // branches and walk again, overwriting their slot when they land.
    int pending = 0;
    for (int j = 0; j < lanes; ++j) {
      const std::uint64_t x = (static_cast<std::uint64_t>(left[j]) << shift) | right[j];
      block_out[j] = static_cast<Index>(x);
      left[pending] = left[j];
      right[pending] = right[j];
      slot[pending] = static_cast<std::uint32_t>(j);
      pending += x >= n;
    }
    while (pending > 0) {
      EncryptBlock(left, right, pending, keys_, left_mask_, right_mask_);
      int still = 0;
      for (int j = 0; j < pending; ++j) {
        const std::uint64_t x = (static_cast<std::uint64_t>(left[j]) << shift) | right[j];
        block_out[slot[j]] = static_cast<Index>(x);
        left[still] = left[j];
        right[still] = right[j];
        slot[still] = slot[j];
        still += x >= n;
      }
      pending = still;
    }
  }
}

}  // namespace shardkit
