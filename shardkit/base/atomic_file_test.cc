#include "shardkit/base/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace shardkit {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardkit_atomic_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The files of dir_ other than `keep` (temporaries left behind).
  int Others(const std::string& keep) const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.path().filename() != keep;
    return n;
  }

  std::string dir_;
};

TEST_F(AtomicFileTest, WritesAndReplacesWholeFiles) {
  const std::string path = dir_ + "/ck.json";
  WriteFileAtomically(path, "first", "state");
  EXPECT_EQ(Read(path), "first");
  WriteFileAtomically(path, "second, longer", "state");
  EXPECT_EQ(Read(path), "second, longer");
  WriteFileAtomically(path, "", "state");
  EXPECT_EQ(Read(path), "");
  EXPECT_EQ(Others("ck.json"), 0);
}

TEST_F(AtomicFileTest, FailureNamesParamPathAndErrnoAndKeepsThePreviousFile) {
  const std::string path = dir_ + "/ck.json";
  WriteFileAtomically(path, "previous", "state");
  // A directory as the path, a missing directory.
  try {
    WriteFileAtomically(dir_, "x", "--save-state");
    FAIL() << "a directory was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--save-state: cannot write '" + dir_ + "': Is a directory");
  }
  try {
    WriteFileAtomically(dir_ + "/no/such/ck.json", "x", "--out");
    FAIL() << "a missing directory was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--out: cannot write '" + dir_ +
                                         "/no/such/ck.json': No such file or directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(Read(path), "previous");
}

// A write past RLIMIT_FSIZE (SIGXFSZ ignored, as in the CLI and Python) fails
// with EFBIG naming the path; the previous file is intact and no temporary is
// left. Run in a child: the limit is process-wide.
TEST_F(AtomicFileTest, RegressionFileSizeLimitKeepsThePreviousFile) {
  const std::string path = dir_ + "/ck.json";
  const std::string previous(1000, 'p');
  WriteFileAtomically(path, previous, "state");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      WriteFileAtomically(path, std::string(100000, 'n'), "--save-state");
      ::_exit(3);
    } catch (const std::invalid_argument& e) {
      const std::string want = "--save-state: cannot write '" + path + "': File too large";
      ::_exit(std::string(e.what()) == want ? 0 : 4);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(Read(path), previous);
  EXPECT_EQ(Others("ck.json"), 0);
}

// SIGKILL at random moments of a large write: the file is always the previous
// contents or the new ones, whole.
TEST_F(AtomicFileTest, RegressionKillDuringWriteLeavesThePreviousOrTheNewFileWhole) {
  const std::string path = dir_ + "/ck.json";
  std::string a(4 << 20, 'a'), b(3 << 20, 'b');
  WriteFileAtomically(path, a, "state");
  std::mt19937 rng(7);
  int saw_new = 0, saw_old = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const bool odd = trial % 2;
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (;;) WriteFileAtomically(path, odd ? b : a, "state");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    const std::string now = Read(path);
    ASSERT_TRUE(now == a || now == b) << "trial " << trial << ": " << now.size() << " bytes";
    (now == (odd ? b : a) ? saw_new : saw_old)++;
    // Killed writers may leave temporaries, never a damaged file.
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename() != "ck.json") fs::remove(e.path());
    }
  }
  EXPECT_GT(saw_new + saw_old, 0);
}

TEST_F(AtomicFileTest, SymlinkTargetIsReplacedAndTheLinkKept) {
  const std::string target = dir_ + "/real.json", link = dir_ + "/ck.json";
  WriteFileAtomically(target, "old", "state");
  fs::create_symlink(target, link);
  WriteFileAtomically(link, "new", "state");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(Read(target), "new");
}

TEST_F(AtomicFileTest, RegressionDeviceIsWrittenInPlaceNotReplaced) {
  try {
    WriteFileAtomically("/dev/full", "x", "--out");
    FAIL() << "/dev/full accepted a write";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--out: cannot write '/dev/full': No space left on device");
  }
  struct stat st {};
  ASSERT_EQ(::stat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  WriteFileAtomically("/dev/null", "x", "--out");
}

}  // namespace
}  // namespace shardkit
