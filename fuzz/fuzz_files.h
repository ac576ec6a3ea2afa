// What the token source harnesses share (header-only, fuzzers only): the
// input's header (a flags byte and a split point), the input's bytes written
// to a file of this process, and every document of an opened source read back
// with the bounds a valid source keeps.
#ifndef SHARDKIT_FUZZ_FUZZ_FILES_H_
#define SHARDKIT_FUZZ_FUZZ_FILES_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardkit/loader/token_source.h"

namespace shardkit::fuzz {

// The first three bytes of an input: a flags byte, then a little-endian
// 16-bit split point.
struct InputHeader {
  std::uint8_t flags = 0;
  std::size_t split = 0;
};

// Takes the header off the front of [*data, *data + *size); false (nothing
// taken) when the input is shorter than the header.
inline bool TakeHeader(const std::uint8_t** data, std::size_t* size, InputHeader* header) {
  if (*size < 3) return false;
  header->flags = (*data)[0];
  header->split = (*data)[1] | (static_cast<std::size_t>((*data)[2]) << 8);
  *data += 3;
  *size -= 3;
  return true;
}

// $TMPDIR (or /tmp) / shardkit_fuzz_<pid>_<name>: one file per process and name.
inline std::string TempPath(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/shardkit_fuzz_" + std::to_string(getpid()) + "_" +
         name;
}

// Writes [data, data + size) to `path`; traps when it cannot.
inline void WriteFile(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
}

// Reads every document of `source` as T; traps when a length is negative or
// the lengths add up past num_tokens(). Returns their sum.
template <typename T>
Index ReadEveryDocument(const TokenSource& source) {
  std::vector<T> buffer;
  Index total = 0;
  for (Index d = 0; d < source.num_documents(); ++d) {
    const Index n = source.DocumentLength(d);
    if (n < 0 || n > source.num_tokens()) __builtin_trap();
    total += n;
    if (total > source.num_tokens()) __builtin_trap();
    buffer.resize(static_cast<std::size_t>(n));
    source.Copy(d, 0, n, buffer.data());
  }
  return total;
}

}  // namespace shardkit::fuzz

#endif  // SHARDKIT_FUZZ_FUZZ_FILES_H_
