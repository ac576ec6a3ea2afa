#include "shardkit/sharding/permutation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace shardkit {
namespace {

TEST(PermutationTest, IsABijectionExhaustivelyForSmallN) {
  for (Index n = 0; n <= 1100; ++n) {
    for (std::uint64_t seed : {0ULL, 1ULL, 0xdeadbeefULL}) {
      Permutation perm(n, seed, n % 3);
      std::vector<char> seen(n, 0);
      for (Index p = 0; p < n; ++p) {
        Index i = perm.Forward(p);
        ASSERT_GE(i, 0);
        ASSERT_LT(i, n);
        ASSERT_FALSE(seen[i]) << "n=" << n << " seed=" << seed;
        seen[i] = 1;
        ASSERT_EQ(perm.Inverse(i), p);
      }
    }
  }
}

TEST(PermutationTest, FillMatchesForwardForEveryStride) {
  for (Index n : {1, 2, 3, 5, 100, 1000, 4097, 65536, 100003}) {
    Permutation perm(n, 42, 7);
    for (Index stride : {1, 2, 3, 8, 1000}) {
      for (Index first : {Index{0}, Index{1}, n / 2}) {
        if (first >= n) continue;
        Index count = (n - 1 - first) / stride + 1;
        std::vector<Index> out(count);
        perm.Fill(first, stride, count, out.data());
        for (Index j = 0; j < count; ++j) {
          ASSERT_EQ(out[j], perm.Forward(first + j * stride)) << n << " " << stride;
        }
      }
    }
  }
}

TEST(PermutationTest, FillRejectsPositionsOutsideTheDomain) {
  Permutation perm(10, 0, 0);
  std::vector<Index> out(20);
  EXPECT_THROW(perm.Fill(5, 1, 6, out.data()), std::out_of_range);
  EXPECT_THROW(perm.Fill(-1, 1, 1, out.data()), std::out_of_range);
  EXPECT_THROW(perm.Fill(0, Index{1} << 62, 3, out.data()), std::out_of_range);
  EXPECT_NO_THROW(perm.Fill(0, 1, 10, out.data()));
  EXPECT_NO_THROW(perm.Fill(3, 0, 0, out.data()));
}

TEST(PermutationTest, RoundTripsNearTwoToTheSixtyThree) {
  for (Index n : {INT64_MAX, INT64_MAX - 1, (Index{1} << 62) + 1, Index{1} << 62}) {
    Permutation perm(n, 3, 4);
    for (Index p : {Index{0}, Index{1}, n / 3, n - 2, n - 1}) {
      Index i = perm.Forward(p);
      ASSERT_GE(i, 0);
      ASSERT_LT(i, n);
      ASSERT_EQ(perm.Inverse(i), p);
    }
    std::vector<Index> out(1000);
    perm.Fill(n - 1000, 1, 1000, out.data());
    for (Index j = 0; j < 1000; ++j) ASSERT_EQ(out[j], perm.Forward(n - 1000 + j));
  }
}

TEST(PermutationTest, DifferentKeysGiveDifferentOrders) {
  const Index n = 1000;
  auto order = [&](std::uint64_t seed, std::uint64_t epoch) {
    Permutation perm(n, seed, epoch);
    std::vector<Index> out(n);
    perm.Fill(0, 1, n, out.data());
    return out;
  };
  auto base = order(0, 0);
  EXPECT_EQ(base, order(0, 0));
  EXPECT_NE(base, order(0, 1));
  EXPECT_NE(base, order(1, 0));
  EXPECT_NE(order(0, 1), order(1, 0));
  std::vector<Index> identity(n);
  for (Index i = 0; i < n; ++i) identity[i] = i;
  EXPECT_NE(base, identity);
}

TEST(PermutationTest, RejectsNegativeSize) {
  EXPECT_THROW(Permutation(-1, 0, 0), std::invalid_argument);
}

// Statistical quality: over many keys, the index at each position of a small
// domain is uniform (chi-square over the n x n position/index table), and the
// number of fixed points has the mean 1 of a uniform random permutation.
TEST(PermutationTest, PositionsAreUniformOverKeys) {
  for (Index n : {5, 12, 37}) {
    const int trials = 40000;
    std::vector<double> table(n * n, 0.0);
    double fixed_points = 0;
    for (int t = 0; t < trials; ++t) {
      Permutation perm(n, static_cast<std::uint64_t>(t), 0);
      for (Index p = 0; p < n; ++p) {
        Index i = perm.Forward(p);
        table[p * n + i] += 1;
        fixed_points += (i == p);
      }
    }
    const double expected = static_cast<double>(trials) / n;
    double chi2 = 0;
    for (double observed : table) chi2 += (observed - expected) * (observed - expected) / expected;
    const double dof = static_cast<double>((n - 1) * (n - 1));
    // chi2 has mean dof and sd sqrt(2 dof); 6 sd leaves no room for a biased
    // construction yet never fails by chance.
    EXPECT_LT(chi2, dof + 6 * std::sqrt(2 * dof)) << "n=" << n;
    EXPECT_NEAR(fixed_points / trials, 1.0, 0.05) << "n=" << n;
  }
}

// Large domains: a contiguous run of positions (one rank's contiguous block)
// lands uniformly over [0, n), neighbouring positions are uncorrelated, and
// two epochs' orders are uncorrelated.
TEST(PermutationTest, LargeDomainsLookRandom) {
  for (Index n : {Index{1000003}, Index{1} << 20, Index{123456789012}}) {
    Permutation perm(n, 9, 0);
    Permutation next_epoch(n, 9, 1);
    const Index samples = 200000;
    std::vector<Index> out(samples), other(samples);
    perm.Fill(n / 3, 1, samples, out.data());
    next_epoch.Fill(n / 3, 1, samples, other.data());
    const int buckets = 100;
    std::vector<double> counts(buckets, 0);
    double sum_xy = 0, sum_x = 0, sum_xx = 0, sum_ab = 0, sum_b = 0, sum_bb = 0;
    for (Index j = 0; j < samples; ++j) {
      const double x = static_cast<double>(out[j]) / n;
      const double b = static_cast<double>(other[j]) / n;
      counts[static_cast<int>(x * buckets)] += 1;
      sum_x += x;
      sum_xx += x * x;
      sum_b += b;
      sum_bb += b * b;
      sum_ab += x * b;
      if (j > 0) sum_xy += x * (static_cast<double>(out[j - 1]) / n);
    }
    double chi2 = 0;
    const double expected = static_cast<double>(samples) / buckets;
    for (double c : counts) chi2 += (c - expected) * (c - expected) / expected;
    EXPECT_LT(chi2, 99 + 6 * std::sqrt(2 * 99.0)) << "n=" << n;
    const double mean = sum_x / samples, var = sum_xx / samples - mean * mean;
    const double lag1 = (sum_xy / (samples - 1) - mean * mean) / var;
    const double mean_b = sum_b / samples, var_b = sum_bb / samples - mean_b * mean_b;
    const double cross = (sum_ab / samples - mean * mean_b) / std::sqrt(var * var_b);
    // Correlations of independent uniforms have sd 1/sqrt(samples) ~ 0.0022.
    EXPECT_LT(std::abs(lag1), 0.015) << "n=" << n;
    EXPECT_LT(std::abs(cross), 0.015) << "n=" << n;
  }
}

TEST(PermutationTest, MediumDomainsAreUniformOverKeys) {
  const Index n = 300;
  const int trials = 6000;
  std::vector<double> table(n * n, 0.0);
  for (int t = 0; t < trials; ++t) {
    Permutation perm(n, 1000 + static_cast<std::uint64_t>(t), 3);
    std::vector<Index> out(n);
    perm.Fill(0, 1, n, out.data());
    for (Index p = 0; p < n; ++p) table[p * n + out[p]] += 1;
  }
  const double expected = static_cast<double>(trials) / n;
  double chi2 = 0;
  for (double observed : table) chi2 += (observed - expected) * (observed - expected) / expected;
  const double dof = static_cast<double>((n - 1) * (n - 1));
  EXPECT_LT(chi2, dof + 6 * std::sqrt(2 * dof));
}

}  // namespace
}  // namespace shardkit
