// Strict readers of user files: the token and offsets files of a TokenSource
// and the number files of the command line (--weights, --lengths, --images).
//
// A path names a regular file, or "-" (standard input) where the reader says
// so. Directories, FIFOs, devices (/dev/null, /dev/zero) and sockets are
// refused by name before a byte is read, so no open or read blocks or runs
// forever; reads are bounded; a file that holds no data is an error, never
// zero numbers read in silence.
//
// Errors: std::invalid_argument "<param>: '<path>' ..." naming the parameter
// (or flag) given by the caller, the file and the problem.
//
// Thread-safety: pure functions (they touch only the files named).
#ifndef SHARDKIT_LOADER_FILES_H_
#define SHARDKIT_LOADER_FILES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit {

// The most bytes ReadNumberFile reads (1 GiB: 100M+ numbers as text).
inline constexpr std::uint64_t kMaxNumberFileBytes = std::uint64_t{1} << 30;

// Opens `path` for reading and returns the file descriptor (close-on-exec,
// blocking reads). Never blocks in open() (a FIFO is opened non-blocking and
// refused). Throws invalid_argument naming `param` when the path cannot be
// opened or is not a regular file ("... is a FIFO (named pipe); expected a
// regular file").
[[nodiscard]] int OpenRegularFile(std::string_view param, const std::string& path);

// The whole content of `path` ("-": standard input, which may be a pipe, a
// regular file or a terminal, but must be open). Throws invalid_argument
// naming `param` when the file is not readable as above, or holds more than
// `max_bytes` bytes.
[[nodiscard]] std::string ReadWholeFile(std::string_view param, const std::string& path,
                                        std::uint64_t max_bytes);

// Numbers from `path` ("-" is stdin): a .npy array of a numeric dtype
// (shardkit/loader/npy.h), or text with one number per line (blank lines and
// '#' comments skipped). Throws invalid_argument naming `param`, the file and
// the line or header at fault, and when the file holds no number at all.
[[nodiscard]] std::vector<double> ReadNumberFile(std::string_view param, const std::string& path);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_FILES_H_
