#include "shardkit/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shardkit/base/errors.h"

namespace shardkit {
namespace {

[[noreturn]] void Fail(std::string_view param, const std::string& path, int error) {
  ThrowInvalid(param, "cannot write '" + path + "': " + std::strerror(error));
}

// Writes all of `data` to fd; returns 0 or the errno of the failed write.
int WriteAll(int fd, std::string_view data) {
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace

void WriteFileAtomically(const std::string& given, std::string_view contents,
                         std::string_view param) {
  if (given.empty()) ThrowInvalid(param, "is empty; expected a file path");
  std::string path = given;
  struct stat st {};
  if (::stat(given.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) Fail(param, given, EISDIR);
    if (!S_ISREG(st.st_mode)) {
      // A device, pipe or terminal (/dev/stdout, a FIFO): written in place,
      // nothing to keep; never renamed over (that would replace the node).
      const int fd = ::open(given.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) Fail(param, given, errno);
      int error = WriteAll(fd, contents);
      if (::close(fd) != 0 && error == 0 && errno != EINTR) error = errno;
      if (error != 0) Fail(param, given, error);
      return;
    }
    // A symlink to a regular file: the target is replaced, the link kept.
    struct stat link {};
    if (::lstat(given.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      char* real = ::realpath(given.c_str(), nullptr);
      if (real == nullptr) Fail(param, given, errno);
      path = real;
      std::free(real);
    }
  }
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  static std::atomic<unsigned> counter{0};
  const std::string temp = (slash == std::string::npos ? "" : dir) + "." + name + ".tmp." +
                           std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) Fail(param, given, errno);
  int error = WriteAll(fd, contents);
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0 && errno != EINTR) error = errno;
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temp.c_str());
    Fail(param, given, error);
  }
  // The rename itself reaches the disk with the directory (best effort: some
  // file systems refuse fsync on a directory).
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace shardkit
