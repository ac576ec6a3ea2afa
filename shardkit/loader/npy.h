// NumPy .npy headers: parse and validate, so that a memory-mapped array can be
// read in place.
//
// Supported: format versions 1.0, 2.0 and 3.0; little-endian (or 1-byte)
// bool / signed / unsigned integers of 1, 2, 4, 8 bytes and float32/float64;
// C order; any number of dimensions (callers check the rank they need).
// Everything else (big-endian multi-byte types, Fortran order, object arrays,
// a header that is not the dict NumPy writes or that NumPy itself would refuse,
// another minor version, data shorter or longer than the header promises) is
// an error, never a silent misread.
//
// Errors: std::invalid_argument("<param>: <file>: <what>"), so the message
// names the parameter, the file and the problem.
//
// Thread-safety: pure functions.
#ifndef SHARDKIT_LOADER_NPY_H_
#define SHARDKIT_LOADER_NPY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit {

struct NpyHeader {
  char kind = 0;      // 'b' bool, 'i' signed, 'u' unsigned, 'f' float
  int item_size = 0;  // bytes per element
  std::string descr;  // as written, e.g. "<i4"
  std::vector<Index> shape;
  Index count = 0;              // product of shape
  std::size_t data_offset = 0;  // where the elements start in the file
};

// Parses the header at the start of `bytes` (the first bytes of the file, at
// least the whole header; more is fine) of a file of `file_size` bytes.
// Checks that file_size holds count * item_size bytes of data. Throws
// invalid_argument "<param>: <path>: ..." when anything is wrong.
[[nodiscard]] NpyHeader ParseNpyHeader(std::string_view bytes, std::uint64_t file_size,
                                       std::string_view param, std::string_view path);

// True when `bytes` starts with the .npy magic string.
[[nodiscard]] bool IsNpy(std::string_view bytes);

// Reads a 1-D .npy array of any supported dtype as doubles (the CLI's number
// files). Throws invalid_argument "<param>: <path>: ...".
[[nodiscard]] std::vector<double> NpyToDoubles(std::string_view bytes, std::string_view param,
                                               std::string_view path);

// The bytes of a .npy file holding `count` elements of `descr` in shape
// (count,): header only, the caller appends the data. For tests, tools and
// the demo. REQUIRES: descr is one NumPy understands, e.g. "<i4".
[[nodiscard]] std::string NpyHeaderBytes(std::string_view descr, Index count);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_NPY_H_
