// Hasher: a fast, deterministic 64-bit hash for fingerprints and checksums of
// states (not cryptographic: it detects edits and mismatched data, it does not
// resist an adversary who recomputes it).
//
// Words are mixed with the SplitMix64 finaliser in four independent lanes
// (so hashing a long array runs at several words per nanosecond); the result
// depends on every word and its position. The same words give the same hash on
// every platform and build.
//
// Thread-safety: a Hasher is a value; use one per thread.
#ifndef SHARDKIT_BASE_HASH_H_
#define SHARDKIT_BASE_HASH_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace shardkit {

class Hasher {
 public:
  explicit Hasher(std::uint64_t domain = 0) : lanes_{domain, ~domain, domain ^ kC1, domain ^ kC2} {}

  void Add(std::uint64_t word) {
    std::uint64_t& lane = lanes_[count_ & 3];
    lane = Mix(lane ^ (word + kGolden));
    ++count_;
  }
  // Adds a digest of words[0, n), a block of kArrayBlock words at a time:
  // per block, its size, then eight 64-bit accumulators over stripes of 8
  // words (XXH3's accumulate step: lane j of stripe s adds
  // lo32(x ^ k) * hi32(x ^ k) with k a per-position key, and x itself to lane
  // j ^ 1), so the result depends on every word and its position. Not the
  // same as Add per word: a different, faster hash (the loop vectorises;
  // ~7 GB/s from memory on one core), for long arrays such as every document
  // length of a source. Adding an array in pieces of kArrayBlock words gives
  // the same hash as adding it whole.
  static constexpr std::size_t kArrayBlock = 1024;
  void AddArray(const std::uint64_t* words, std::size_t n) {
    for (std::size_t begin = 0; begin < n || begin == 0; begin += kArrayBlock) {
      AddBlock(words + begin, std::min(kArrayBlock, n - begin));
    }
  }
  void AddBytes(std::string_view bytes) {
    Add(bytes.size());
    std::size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
      std::uint64_t w;
      std::memcpy(&w, bytes.data() + i, 8);
      Add(w);
    }
    std::uint64_t tail = 0;
    std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
    Add(tail);
  }
  [[nodiscard]] std::uint64_t Finish() const {
    std::uint64_t h = Mix(count_);
    for (std::uint64_t lane : lanes_) h = Mix(h ^ lane);
    return h;
  }

  // SplitMix64's finaliser.
  [[nodiscard]] static constexpr std::uint64_t Mix(std::uint64_t z) {
    z += kGolden;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  // One block of AddArray. REQUIRES: n <= kArrayBlock.
  void AddBlock(const std::uint64_t* words, std::size_t n) {
    Add(n);
    std::uint64_t acc[8] = {kGolden, kC1, kC2, ~kGolden, ~kC1, ~kC2, kGolden ^ kC1, kC1 ^ kC2};
    const std::size_t stripes = n / 8;
    Accumulate(acc, words, 0, stripes);
    if (stripes * 8 < n) {
      std::uint64_t tail[8] = {};
      std::memcpy(tail, words + stripes * 8, (n - stripes * 8) * sizeof(std::uint64_t));
      Accumulate(acc, tail, stripes, 1);
    }
    for (std::uint64_t a : acc) Add(a);
  }
  // Key word i of AddArray: SplitMix64's i-th output from a fixed seed.
  static constexpr std::uint64_t Key(std::size_t i) {
    return Mix(0x736b2d6b65790000ULL + i * kGolden);
  }
  struct Keys {
    std::uint64_t k[kArrayBlock / 8 + 8];
    constexpr Keys() : k{} {
      for (std::size_t i = 0; i < kArrayBlock / 8 + 8; ++i) k[i] = Key(i);
    }
  };
  // Stripes [first, first + count) of a block, read from x[0, 8 * count).
  static void Accumulate(std::uint64_t* __restrict out, const std::uint64_t* __restrict x,
                         std::size_t first, std::size_t count) {
    static constexpr Keys kKeys;
    std::uint64_t acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = out[j];
    for (std::size_t s = 0; s < count; ++s) {
      const std::uint64_t* key = kKeys.k + first + s;
      for (int j = 0; j < 8; ++j) {
        const std::uint64_t k = x[s * 8 + j] ^ key[j];
        acc[j] += (k & 0xffffffffULL) * (k >> 32) + x[s * 8 + (j ^ 1)];
      }
    }
    for (int j = 0; j < 8; ++j) out[j] = acc[j];
  }

  static constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  static constexpr std::uint64_t kC1 = 0x243f6a8885a308d3ULL;
  static constexpr std::uint64_t kC2 = 0x13198a2e03707344ULL;
  std::uint64_t lanes_[4];
  std::uint64_t count_ = 0;
};

// 16 lowercase hex digits, and back (nullopt-free: returns false when `text`
// is not exactly 16 hex digits).
[[nodiscard]] inline std::string HexDigest(std::uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 0xF];
  return out;
}
[[nodiscard]] inline bool ParseHexDigest(std::string_view text, std::uint64_t* v) {
  if (text.size() != 16) return false;
  std::uint64_t out = 0;
  for (char c : text) {
    out <<= 4;
    if (c >= '0' && c <= '9') {
      out |= static_cast<std::uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      out |= static_cast<std::uint64_t>(c - 'a' + 10);
    } else {
      return false;
    }
  }
  *v = out;
  return true;
}

}  // namespace shardkit

#endif  // SHARDKIT_BASE_HASH_H_
