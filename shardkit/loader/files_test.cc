#include "shardkit/loader/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/npy.h"

namespace shardkit {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) { return loader_testing::TempDir("files", name); }

using loader_testing::ErrorOf;

// A reader that blocks would hang the test: SIGALRM ends it as a failure.
class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override { ::alarm(30); }
  void TearDown() override { ::alarm(0); }
};

TEST_F(FilesTest, ReadsTextAndNpyNumbers) {
  fs::path dir = TempDir("numbers");
  std::ofstream(dir / "w.txt") << "# weights\n1\n\n 2.5 \n3\n";
  EXPECT_EQ(ReadNumberFile("--weights", dir / "w.txt"), (std::vector<double>{1, 2.5, 3}));
  std::string npy = NpyHeaderBytes("<i8", 2);
  const std::int64_t values[2] = {7, -1};
  npy.append(reinterpret_cast<const char*>(values), sizeof values);
  std::ofstream(dir / "w.npy", std::ios::binary) << npy;
  EXPECT_EQ(ReadNumberFile("--weights", dir / "w.npy"), (std::vector<double>{7, -1}));
  fs::remove_all(dir);
}

TEST_F(FilesTest, RegressionFifoDoesNotBlockOpen) {
  fs::path dir = TempDir("fifo");
  const fs::path fifo = dir / "t.tokens.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string e = ErrorOf([&] { (void)ReadNumberFile("--weights", fifo); });
  EXPECT_EQ(e,
            "--weights: '" + fifo.string() + "' is a FIFO (named pipe); expected a regular file");
  EXPECT_NE(ErrorOf([&] { (void)OpenRegularFile("tokens", fifo); }).find("tokens: "),
            std::string::npos);
  fs::remove_all(dir);
}

TEST_F(FilesTest, RegressionDevZeroIsNotReadForever) {
  EXPECT_EQ(ErrorOf([] { (void)ReadNumberFile("--weights", "/dev/zero"); }),
            "--weights: '/dev/zero' is a character device; expected a regular file");
}

TEST_F(FilesTest, RegressionDevNullIsNotCannotReadSuccess) {
  const std::string e = ErrorOf([] { (void)OpenRegularFile("tokens", "/dev/null"); });
  EXPECT_EQ(e, "tokens: '/dev/null' is a character device; expected a regular file");
  EXPECT_EQ(e.find("Success"), std::string::npos);
}

TEST_F(FilesTest, RegressionEmptyFileIsNotZeroNumbers) {
  fs::path dir = TempDir("empty");
  std::ofstream(dir / "empty.txt") << "";
  std::ofstream(dir / "comments.txt") << "# nothing\n\n";
  EXPECT_EQ(ErrorOf([&] { (void)ReadNumberFile("--weights", dir / "empty.txt"); }),
            "--weights: " + (dir / "empty.txt").string() + " holds no numbers (it is empty)");
  EXPECT_EQ(ErrorOf([&] { (void)ReadNumberFile("--weights", dir / "comments.txt"); }),
            "--weights: " + (dir / "comments.txt").string() + " holds no numbers");
  std::ofstream(dir / "empty.npy", std::ios::binary) << NpyHeaderBytes("<f8", 0);
  EXPECT_NE(ErrorOf([&] {
              (void)ReadNumberFile("--weights", dir / "empty.npy");
            }).find("holds no numbers"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST_F(FilesTest, RegressionDirectoryIsNotZeroNumbers) {
  fs::path dir = TempDir("dir");
  EXPECT_EQ(ErrorOf([&] { (void)ReadNumberFile("--lengths", dir); }),
            "--lengths: '" + dir.string() + "' is a directory; expected a regular file");
  fs::remove_all(dir);
}

TEST_F(FilesTest, RegressionClosedStdinIsNotZeroNumbers) {
  const int saved = ::dup(0);
  ASSERT_GE(saved, 0);
  ::close(0);
  const std::string e = ErrorOf([] { (void)ReadNumberFile("--lengths", "-"); });
  ASSERT_EQ(::dup2(saved, 0), 0);
  ::close(saved);
  EXPECT_EQ(e, "--lengths: cannot read stdin: Bad file descriptor (stdin is closed)");
}

TEST_F(FilesTest, RegressionDevZeroOnStdinIsRefused) {
  const int saved = ::dup(0);
  ASSERT_GE(saved, 0);
  const int zero = ::open("/dev/zero", O_RDONLY);
  ASSERT_GE(zero, 0);
  ASSERT_EQ(::dup2(zero, 0), 0);
  ::close(zero);
  const std::string e = ErrorOf([] { (void)ReadNumberFile("--lengths", "-"); });
  ASSERT_EQ(::dup2(saved, 0), 0);
  ::close(saved);
  EXPECT_EQ(e,
            "--lengths: stdin is a character device; expected a regular file, a pipe or a "
            "terminal");
}

TEST_F(FilesTest, ReadsAreBounded) {
  fs::path dir = TempDir("bounded");
  std::ofstream(dir / "big.txt") << std::string(100, '1');
  EXPECT_EQ(ErrorOf([&] { (void)ReadWholeFile("--weights", dir / "big.txt", 64); }),
            "--weights: '" + (dir / "big.txt").string() +
                "' holds more than 64 bytes (the limit for this file)");
  EXPECT_EQ(ReadWholeFile("--weights", dir / "big.txt", 100).size(), 100u);
  fs::remove_all(dir);
}

TEST_F(FilesTest, BadLineIsNamed) {
  fs::path dir = TempDir("bad");
  std::ofstream(dir / "w.txt") << "1\n2\nx3\n";
  EXPECT_EQ(ErrorOf([&] { (void)ReadNumberFile("--weights", dir / "w.txt"); }),
            "--weights: " + (dir / "w.txt").string() + " line 3: 'x3' is not a number");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardkit
