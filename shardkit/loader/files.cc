#include "shardkit/loader/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "shardkit/loader/npy.h"

namespace shardkit {

namespace {

std::string FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

int OpenRegularFile(std::string_view param, const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer; it is
  // refused below like every other file that is not regular.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) ThrowInvalid(param, "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ThrowInvalid(param, "cannot read '" + path + "': " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    ThrowInvalid(param, "'" + path + "' is " + FileKind(st.st_mode) + "; expected a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string ReadWholeFile(std::string_view param, const std::string& path,
                          std::uint64_t max_bytes) {
  const bool is_stdin = path == "-";
  const std::string name = is_stdin ? std::string("stdin") : "'" + path + "'";
  int fd = 0;
  if (is_stdin) {
    struct stat st {};
    if (::fstat(0, &st) != 0) {
      ThrowInvalid(param, "cannot read stdin: " + std::string(std::strerror(errno)) +
                              (errno == EBADF ? " (stdin is closed)" : ""));
    }
    const bool ok = S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ||
                    (S_ISCHR(st.st_mode) && ::isatty(0));
    if (!ok) {
      ThrowInvalid(param, "stdin is " + FileKind(st.st_mode) +
                              "; expected a regular file, a pipe or a terminal");
    }
  } else {
    fd = OpenRegularFile(param, path);
  }
  std::string bytes;
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      if (!is_stdin) ::close(fd);
      ThrowInvalid(param, "cannot read " + name + ": " + why);
    }
    if (n == 0) break;
    if (bytes.size() + static_cast<std::uint64_t>(n) > max_bytes) {
      if (!is_stdin) ::close(fd);
      ThrowInvalid(param, name + " holds more than " + std::to_string(max_bytes) +
                              " bytes (the limit for this file)");
    }
    bytes.append(chunk, static_cast<std::size_t>(n));
  }
  if (!is_stdin) ::close(fd);
  return bytes;
}

std::vector<double> ReadNumberFile(std::string_view param, const std::string& path) {
  const std::string bytes = ReadWholeFile(param, path, kMaxNumberFileBytes);
  const std::string name = path == "-" ? std::string("stdin") : path;
  if (IsNpy(bytes)) {
    std::vector<double> out = NpyToDoubles(bytes, param, name);
    if (out.empty()) ThrowInvalid(param, name + ": the .npy array holds no numbers");
    return out;
  }
  std::vector<double> out;
  std::string_view rest = bytes;
  std::int64_t number = 0;
  while (!rest.empty()) {
    const std::size_t eol = rest.find('\n');
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
    ++number;
    const std::string_view t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    double v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || ptr != t.data() + t.size()) {
      ThrowInvalid(param, name + " line " + std::to_string(number) + ": '" + std::string(t) +
                              "' is not a number");
    }
    out.push_back(v);
  }
  if (out.empty()) {
    ThrowInvalid(param, name + " holds no numbers" +
                            (bytes.empty() ? std::string(" (it is empty)") : std::string()));
  }
  return out;
}

}  // namespace shardkit
