// Test helpers shared by the loader tests (header-only, tests only): an
// in-memory corpus whose own copy of every document is the oracle, a .npy
// writer, a source's documents checked against the expected ones, loader
// and plan options of a given batch shape, a random corpus, two plan
// summaries compared field by field, and the core's shared helpers
// (shardkit/base/testing.h) under their loader names.
#ifndef SHARDKIT_LOADER_INTERNAL_TEST_CORPUS_H_
#define SHARDKIT_LOADER_INTERNAL_TEST_CORPUS_H_

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/base/testing.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/npy.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit::loader_testing {

// int32 tokens with their offsets, and a TokenSource viewing them. Add the
// documents, then Seal() once: the view points into the vectors, so the
// corpus must not be changed afterwards (moving it keeps the buffers).
struct TestCorpus {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> offsets = {0};
  std::shared_ptr<const TokenSource> source;

  [[nodiscard]] Index num_documents() const { return static_cast<Index>(offsets.size()) - 1; }
  [[nodiscard]] Index length(Index d) const { return offsets[d + 1] - offsets[d]; }

  // Appends a document of `length` tokens; token k is token(k).
  void Add(Index length, const std::function<std::int32_t(Index)>& token) {
    for (Index k = 0; k < length; ++k) tokens.push_back(token(k));
    offsets.push_back(static_cast<std::int64_t>(tokens.size()));
  }

  void Seal() {
    source = TokenSource::FromMemory(tokens.data(), TokenDType::kInt32,
                                     static_cast<Index>(tokens.size()), offsets.data(),
                                     static_cast<Index>(offsets.size()));
  }
};

// A corpus of `docs` documents drawn by `rng`, each of `min_len` to `max_len`
// tokens, and (when empty_one_in > 0) one in `empty_one_in` on average made
// empty by a second draw; token k of document d is token(d, k).
inline TestCorpus RandomCorpus(std::mt19937_64& rng, Index docs, Index min_len, Index max_len,
                               const std::function<std::int32_t(Index, Index)>& token,
                               int empty_one_in = 0) {
  TestCorpus corpus;
  for (Index d = 0; d < docs; ++d) {
    Index len =
        min_len + static_cast<Index>(rng() % static_cast<std::uint64_t>(max_len - min_len + 1));
    if (empty_one_in > 0 && rng() % static_cast<std::uint64_t>(empty_one_in) == 0) len = 0;
    corpus.Add(len, [&](Index k) { return token(d, k); });
  }
  corpus.Seal();
  return corpus;
}

// Writes `values` as a one-dimensional .npy file of dtype `descr`, less its
// last `cut` bytes (a truncated file when cut > 0).
template <typename T>
void WriteNpy(const std::filesystem::path& path, const std::string& descr,
              const std::vector<T>& values, std::size_t cut = 0) {
  std::string bytes = NpyHeaderBytes(descr, static_cast<Index>(values.size()));
  bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  bytes.resize(bytes.size() - cut);
  std::ofstream(path, std::ios::binary) << bytes;
}

// Expects `s` to hold exactly `docs`: their count, each one's length and
// tokens (read as int64).
inline void ExpectDocuments(const TokenSource& s,
                            const std::vector<std::vector<std::int64_t>>& docs) {
  ASSERT_EQ(s.num_documents(), static_cast<Index>(docs.size()));
  for (Index d = 0; d < s.num_documents(); ++d) {
    const std::vector<std::int64_t>& want = docs[static_cast<std::size_t>(d)];
    ASSERT_EQ(s.DocumentLength(d), static_cast<Index>(want.size())) << "document " << d;
    std::vector<std::int64_t> got(want.size());
    s.Copy(d, 0, static_cast<Index>(got.size()), got.data());
    EXPECT_EQ(got, want) << "document " << d;
  }
}

// Loader options of `batch_size` rows of `seq_len` tokens for rank `rank` of
// `world_size`, packed per rank (equal_steps off: the building block these
// tests check; a test of the plan turns it on); every other option at its
// default.
inline LoaderOptions RowOptions(Index seq_len, Index batch_size, Index world_size = 1,
                                Index rank = 0) {
  LoaderOptions o;
  o.equal_steps = false;
  o.seq_len = seq_len;
  o.batch_size = batch_size;
  o.world_size = world_size;
  o.rank = rank;
  return o;
}

// Plan options of `batch_size` rows of `seq_len` tokens on `world_size`
// ranks; every other option at its default.
inline TrainOptions PlanOptions(Index seq_len, Index batch_size, Index world_size = 1) {
  TrainOptions o;
  o.seq_len = seq_len;
  o.batch_size = batch_size;
  o.world_size = world_size;
  return o;
}

using base_testing::ErrorOf;
using base_testing::Resealed;
using base_testing::TempDir;

// Expects every field of two plans' summaries to be equal.
inline void ExpectSameSummary(const TrainSummary& a, const TrainSummary& b) {
  EXPECT_EQ(a.num_steps, b.num_steps);
  EXPECT_EQ(a.packs, b.packs);
  EXPECT_EQ(a.stream_packs, b.stream_packs);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.pieces, b.pieces);
  EXPECT_EQ(a.split_documents, b.split_documents);
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.dropped_packs, b.dropped_packs);
  EXPECT_EQ(a.dropped_tokens, b.dropped_tokens);
  EXPECT_EQ(a.filler_rows, b.filler_rows);
  EXPECT_EQ(a.next_epoch_rows, b.next_epoch_rows);
  EXPECT_EQ(a.lower_bound, b.lower_bound);
  EXPECT_EQ(a.max_step_imbalance, b.max_step_imbalance);
  EXPECT_EQ(a.max_full_step_imbalance, b.max_full_step_imbalance);
  EXPECT_EQ(a.mean_step_imbalance, b.mean_step_imbalance);
  EXPECT_EQ(a.end, b.end);
}

}  // namespace shardkit::loader_testing

#endif  // SHARDKIT_LOADER_INTERNAL_TEST_CORPUS_H_
