// shardkit prepare: raw text to Megatron .bin/.idx or shardkit's .npy pair;
// shardkit image-table: the sample table of an image-text data set.
//
// Tokenizing is Hugging Face tokenizers' (a Python package over Rust), so
// this command runs `python -m shardkit prepare` with the same arguments
// (python/shardkit/_prepare.py parses them, tokenizes, and writes through the
// core's TokenWriter, shardkit/loader/token_writer.h) and returns its exit
// status; its errors are its own one line on stderr. The interpreter:
// $SHARDKIT_PYTHON, else the python3 beside this program (a pip-installed
// shardkit's venv), else python3 on PATH.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

extern char** environ;

namespace shardkit::cli {

namespace {

std::string Interpreter() {
  if (const char* p = std::getenv("SHARDKIT_PYTHON"); p != nullptr && *p != '\0') return p;
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<std::size_t>(n));
    dir = dir.substr(0, dir.rfind('/') + 1);
    if (::access((dir + "python3").c_str(), X_OK) == 0) return dir + "python3";
  }
  return "python3";
}

// Runs `python -m shardkit <command> argv...` and returns its exit status.
int RunPython(const std::string& command, const Argv& argv) {
  const std::string python = Interpreter();
  std::vector<std::string> args = {python, "-m", "shardkit", command};
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, python.c_str(), nullptr, nullptr, raw.data(), environ);
  if (err != 0) {
    throw UsageError(command + ": cannot run Python ('" + python + "'): " + std::strerror(err) +
                     "; set SHARDKIT_PYTHON to an interpreter with shardkit and tokenizers");
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw UsageError(command + ": waitpid: " + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

int RunPrepare(const Argv& argv) { return RunPython("prepare", argv); }

// The sample table of image-text data (python/shardkit/_image_table.py: tar
// shards through the core's index, a datasets folder through pyarrow).
int RunImageTable(const Argv& argv) { return RunPython("image-table", argv); }

}  // namespace shardkit::cli
