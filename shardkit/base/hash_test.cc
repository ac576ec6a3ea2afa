#include "shardkit/base/hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace shardkit {
namespace {

std::uint64_t ArrayHash(const std::vector<std::uint64_t>& words) {
  Hasher h(7);
  h.AddArray(words.data(), words.size());
  return h.Finish();
}

std::vector<std::uint64_t> RandomWords(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> words(n);
  for (auto& w : words) w = rng() % 5000;  // small values, like document lengths
  return words;
}

// Every single-bit edit of any word (full stripes and the tail alike) gives
// a hash of its own: no edit collides with the original or with another.
TEST(HasherTest, AddArrayDependsOnEveryWord) {
  for (std::size_t n : {1u, 7u, 8u, 9u, 100u, 1023u, 1024u}) {
    const std::vector<std::uint64_t> base = RandomWords(n, n);
    std::set<std::uint64_t> seen = {ArrayHash(base)};
    for (std::size_t i = 0; i < n; ++i) {
      for (int bit : {0, 1, 31, 32, 63}) {
        std::vector<std::uint64_t> edited = base;
        edited[i] ^= std::uint64_t{1} << bit;
        EXPECT_TRUE(seen.insert(ArrayHash(edited)).second) << "n " << n << " word " << i;
      }
    }
  }
}

// Two different words exchanged (in one lane, across lanes, across
// stripes) change the hash: it depends on positions, not only on the values.
TEST(HasherTest, AddArrayDependsOnPositions) {
  const std::vector<std::uint64_t> base = RandomWords(1024, 3);
  const std::uint64_t h = ArrayHash(base);
  for (auto [i, j] : std::vector<std::pair<int, int>>{{0, 1}, {0, 8}, {3, 11}, {5, 1000}}) {
    std::vector<std::uint64_t> swapped = base;
    ASSERT_NE(swapped[i], swapped[j]);
    std::swap(swapped[i], swapped[j]);
    EXPECT_NE(ArrayHash(swapped), h) << i << " <-> " << j;
  }
}

// Zeros of different counts differ (the count is hashed), and the domain
// separates hashes of the same words.
TEST(HasherTest, AddArrayHashesTheCountAndTheDomain) {
  std::set<std::uint64_t> seen;
  for (std::size_t n = 0; n <= 17; ++n) {
    EXPECT_TRUE(seen.insert(ArrayHash(std::vector<std::uint64_t>(n, 0))).second) << n;
  }
  const std::vector<std::uint64_t> words = RandomWords(50, 1);
  Hasher a(1), b(2);
  a.AddArray(words.data(), words.size());
  b.AddArray(words.data(), words.size());
  EXPECT_NE(a.Finish(), b.Finish());
}

// An array longer than a block hashes as its blocks added one by one (what
// FingerprintData does while it reads the lengths), and every word of every
// block still counts.
TEST(HasherTest, AddArrayOfManyBlocksIsItsBlocksInOrder) {
  const std::vector<std::uint64_t> words = RandomWords(2 * Hasher::kArrayBlock + 5, 9);
  Hasher whole(3), pieces(3);
  whole.AddArray(words.data(), words.size());
  for (std::size_t b = 0; b < words.size(); b += Hasher::kArrayBlock) {
    pieces.AddArray(words.data() + b, std::min(Hasher::kArrayBlock, words.size() - b));
  }
  EXPECT_EQ(whole.Finish(), pieces.Finish());
  std::set<std::uint64_t> seen = {whole.Finish()};
  for (std::size_t i : {std::size_t{0}, Hasher::kArrayBlock - 1, Hasher::kArrayBlock,
                        2 * Hasher::kArrayBlock + 4}) {
    std::vector<std::uint64_t> edited = words;
    edited[i] += 1;
    EXPECT_TRUE(seen.insert(ArrayHash(edited)).second) << i;
  }
}

}  // namespace
}  // namespace shardkit
