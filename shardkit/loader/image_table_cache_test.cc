#include "shardkit/loader/image_table_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

using base_testing::ErrorOf;
using base_testing::Resealed;
using base_testing::TempDir;

constexpr Index kLimit = 1000;
const std::string kKey = "fp-1|images|/data/a.arrow:100:5";

ImageTable Sample() { return {{2, 0, 1}, {10, 20, 30}, {5, 6, 7}}; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

class ImageTableCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir("image_table_cache",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    path_ = (dir_ / ImageTableCacheName(kKey)).string();
    ASSERT_TRUE(WriteImageTableCache(path_, kKey, kLimit, Sample()));
    text_ = ReadText(path_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::optional<ImageTable> Read() const { return ReadImageTableCache(path_, kKey, kLimit, 3); }

  std::filesystem::path dir_;
  std::string path_, text_;
};

TEST_F(ImageTableCacheTest, RoundTripGivesTheTableWritten) {
  const std::optional<ImageTable> table = Read();
  ASSERT_TRUE(table.has_value());
  EXPECT_EQ(*table, Sample());
  // An empty table (no sample, or samples without images) round-trips too.
  const ImageTable empty{{0, 0}, {}, {}};
  ASSERT_TRUE(WriteImageTableCache(path_, kKey, kLimit, empty));
  EXPECT_EQ(ReadImageTableCache(path_, kKey, kLimit, 2), empty);
}

TEST_F(ImageTableCacheTest, NameDependsOnTheKeyOnly) {
  EXPECT_EQ(ImageTableCacheName(kKey), ImageTableCacheName(kKey));
  EXPECT_NE(ImageTableCacheName(kKey), ImageTableCacheName(kKey + "x"));
  EXPECT_EQ(ImageTableCacheName(kKey).rfind("shardkit-image-table-", 0), 0u);
  EXPECT_EQ(ImageTableCacheName(kKey).size(),
            std::string("shardkit-image-table-.json").size() + 16);
}

TEST_F(ImageTableCacheTest, AnotherKeyPixelLimitOrSampleCountIsNotUsed) {
  EXPECT_FALSE(ReadImageTableCache(path_, kKey + "x", kLimit, 3));
  EXPECT_FALSE(ReadImageTableCache(path_, "", kLimit, 3));
  EXPECT_FALSE(ReadImageTableCache(path_, kKey, kLimit + 1, 3));
  EXPECT_FALSE(ReadImageTableCache(path_, kKey, kLimit, 2));
  EXPECT_FALSE(ReadImageTableCache(path_, kKey, kLimit, 4));
}

// Every field edited, with the seal left as it was (damage, or an edit by
// hand): never used. Sealed again (someone who recomputes the checksum): the
// checks behind the seal still refuse another version, kind, key, limit or
// shape; a plausible size resealed is beyond a non-cryptographic seal
// (shardkit/base/json.h), so those rows expect the resealed file to be read.
TEST_F(ImageTableCacheTest, EveryFieldEditedIsNotUsed) {
  struct Edit {
    std::string from, to;
    bool resealed_is_refused;
  };
  const std::vector<Edit> edits = {
      {"\"version\": 1", "\"version\": 2", true},
      {"\"kind\": \"image_table\"", "\"kind\": \"tar_shard_index\"", true},
      {"\"key\": \"fp-1", "\"key\": \"fp-2", true},
      {"\"pixel_limit\": 1000", "\"pixel_limit\": 999", true},
      {"\"image_counts\": [2, 0, 1]", "\"image_counts\": [1, 1, 1]", false},
      {"\"image_counts\": [2, 0, 1]", "\"image_counts\": [2, 0, 1, 0]", true},
      {"\"image_counts\": [2, 0, 1]", "\"image_counts\": [2, 0]", true},
      {"\"image_counts\": [2, 0, 1]", "\"image_counts\": [3, -1, 1]", true},
      {"\"heights\": [10, 20, 30]", "\"heights\": [10, 21, 30]", false},
      {"\"heights\": [10, 20, 30]", "\"heights\": [10, 0, 30]", true},
      {"\"heights\": [10, 20, 30]", "\"heights\": [10, 20, 300]", true},  // over pixel_limit
      {"\"heights\": [10, 20, 30]", "\"heights\": [10, 20]", true},
      {"\"widths\": [5, 6, 7]", "\"widths\": [5, 6, 8]", false},
      {"\"widths\": [5, 6, 7]", "\"widths\": [5, 6, true]", true},
      {"\"widths\": [5, 6, 7]", "\"widths\": [5, 6, 7], \"extra\": 1", true},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.to);
    std::string edited = text_;
    const std::size_t at = edited.find(e.from);
    ASSERT_NE(at, std::string::npos);
    edited.replace(at, e.from.size(), e.to);
    WriteText(path_, edited);
    EXPECT_FALSE(Read());
    std::string broken = text_;
    broken[broken.rfind('"') - 1] ^= 1;  // the checksum's last digit
    WriteText(path_, broken);
    EXPECT_FALSE(Read());
    WriteText(path_, Resealed(text_, e.from, e.to));
    EXPECT_EQ(Read().has_value(), !e.resealed_is_refused);
  }
  WriteText(path_, text_);
  EXPECT_TRUE(Read());
}

TEST_F(ImageTableCacheTest, TruncatedGarbageOrAbsentFileIsNotUsed) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, text_.size() / 2, text_.size() - 2}) {
    WriteText(path_, text_.substr(0, n));
    EXPECT_FALSE(Read()) << n;
  }
  WriteText(path_, "\x89PNG garbage \xff\xfe");
  EXPECT_FALSE(Read());
  WriteText(path_, "[1, 2, 3]");
  EXPECT_FALSE(Read());
  std::filesystem::remove(path_);
  EXPECT_FALSE(Read());
  std::filesystem::create_directory(path_);  // a folder where the file should be
  EXPECT_FALSE(Read());
}

TEST_F(ImageTableCacheTest, UnwritableFolderIsLeftOutNotAnError) {
  const std::string missing = (dir_ / "no-such-folder" / ImageTableCacheName(kKey)).string();
  EXPECT_FALSE(WriteImageTableCache(missing, kKey, kLimit, Sample()));
  EXPECT_FALSE(std::filesystem::exists(missing));
  if (::geteuid() != 0) {  // root writes into a read-only folder anyway
    const std::filesystem::path ro = dir_ / "ro";
    std::filesystem::create_directory(ro);
    ::chmod(ro.c_str(), 0555);
    EXPECT_FALSE(WriteImageTableCache((ro / "t.json").string(), kKey, kLimit, Sample()));
    ::chmod(ro.c_str(), 0755);
  }
}

TEST_F(ImageTableCacheTest, InconsistentTableIsRefusedAtWrite) {
  EXPECT_EQ(ErrorOf([&] {
              (void)WriteImageTableCache(path_, kKey, kLimit, {{2}, {1}, {1}});
            }).rfind("table: ", 0),
            0u);
  EXPECT_EQ(ErrorOf([&] {
              (void)WriteImageTableCache(path_, kKey, kLimit, {{1}, {1}, {}});
            }).rfind("table: ", 0),
            0u);
  EXPECT_EQ(ErrorOf([&] {
              (void)WriteImageTableCache(path_, kKey, 0, {{}, {}, {}});
            }).rfind("pixel_limit", 0),
            0u);
  EXPECT_EQ(ReadText(path_), text_);  // a refused write leaves the file as it was
}

}  // namespace
}  // namespace shardkit
