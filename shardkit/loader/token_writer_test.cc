#include "shardkit/loader/token_writer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <vector>

#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/source_formats.h"

namespace shardkit {
namespace {

namespace fs = std::filesystem;
using loader_testing::ErrorOf;

std::vector<std::vector<std::int64_t>> Documents(std::mt19937_64& rng, std::int64_t high) {
  std::uniform_int_distribution<int> docs(0, 30), len(0, 50);
  std::uniform_int_distribution<std::int64_t> token(0, high);
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(docs(rng)));
  for (auto& d : out) {
    d.resize(static_cast<std::size_t>(len(rng)));
    for (auto& t : d) t = token(rng);
  }
  return out;
}

// The megatron and npy readers are checked against megatron-core and NumPy
// elsewhere (megatron_source_test.cc, test_sources.py); here they read back
// what the writer wrote.
TEST(TokenWriterTest, WhatIsWrittenReadsBackDocumentForDocumentInEveryFormat) {
  const fs::path dir = loader_testing::TempDir("token_writer", "roundtrip");
  std::mt19937_64 rng(3);
  const std::pair<SourceFormat, TokenDType> cases[] = {
      {SourceFormat::kMegatron, TokenDType::kUint16}, {SourceFormat::kMegatron, TokenDType::kInt32},
      {SourceFormat::kMegatron, TokenDType::kUint8},  {SourceFormat::kNpy, TokenDType::kUint16},
      {SourceFormat::kNpy, TokenDType::kInt32},       {SourceFormat::kNpy, TokenDType::kUint32}};
  for (int round = 0; round < 5; ++round) {
    for (const auto& [format, dtype] : cases) {
      const auto docs = Documents(rng, dtype == TokenDType::kUint8 ? 255 : 65535);
      const std::string prefix = (dir / "out").string();
      TokenWriter writer(prefix, format, dtype);
      for (const auto& d : docs) writer.Add(d.data(), static_cast<Index>(d.size()));
      const TokenWriterResult r = writer.Finish();
      ASSERT_EQ(r.documents, static_cast<Index>(docs.size()));
      ASSERT_EQ(r.files.size(), 2u);
      const std::string path = format == SourceFormat::kNpy ? r.files[0] : prefix;
      auto source = OpenSource({path}, OpenSourceOptions{format, {}, {}});
      ASSERT_EQ(source->num_documents(), static_cast<Index>(docs.size()));
      Index total = 0;
      for (std::size_t k = 0; k < docs.size(); ++k) {
        std::vector<std::int64_t> got(docs[k].size());
        ASSERT_EQ(source->DocumentLength(static_cast<Index>(k)), static_cast<Index>(got.size()));
        source->Copy(static_cast<Index>(k), 0, static_cast<Index>(got.size()), got.data());
        EXPECT_EQ(got, docs[k]);
        total += static_cast<Index>(got.size());
      }
      EXPECT_EQ(r.tokens, total);
    }
  }
  fs::remove_all(dir);
}

TEST(TokenWriterTest, IdsThatDoNotFitAreRefusedAndNothingLooksComplete) {
  const fs::path dir = loader_testing::TempDir("token_writer", "refuse");
  const std::string prefix = (dir / "out").string();
  {
    TokenWriter writer(prefix, SourceFormat::kMegatron, TokenDType::kUint16);
    const std::vector<std::int64_t> ok{1, 2}, bad{3, 70000};
    writer.Add(ok.data(), 2);
    EXPECT_EQ(ErrorOf([&] { writer.Add(bad.data(), 2); }),
              "tokens: document 1, token 1: id 70000 does not fit uint16");
    // Interrupted here: the writer goes away unfinished.
  }
  EXPECT_TRUE(fs::is_empty(dir));  // no output, no temporaries
  EXPECT_NE(ErrorOf([&] {
              TokenWriter(prefix, SourceFormat::kMegatron, TokenDType::kUint32);
            }).find("token_dtype: uint32 has no Megatron dtype code"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              TokenWriter((dir / "no" / "x").string(), SourceFormat::kNpy, TokenDType::kInt32);
            }).find("output: cannot create"),
            std::string::npos);
  EXPECT_EQ(TokenWriter::DTypeForVocabulary(65499), TokenDType::kUint16);
  EXPECT_EQ(TokenWriter::DTypeForVocabulary(65500), TokenDType::kInt32);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardkit
