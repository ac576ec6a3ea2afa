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
