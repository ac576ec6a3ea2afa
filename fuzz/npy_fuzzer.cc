// libFuzzer harness: the .npy header parser and the CLI's .npy number reader.
//
// Input: the bytes of a file. Both entry points must either return a result
// consistent with the bytes or throw std::invalid_argument; never read outside
// the buffer, overflow, or hang.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "shardkit/loader/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const shardkit::NpyHeader h = shardkit::ParseNpyHeader(bytes, size, "tokens", "fuzz.npy");
    // A header that parses promises data inside the file.
    if (h.data_offset > size || h.count < 0 || h.item_size <= 0) __builtin_trap();
    if (static_cast<std::uint64_t>(h.count) * static_cast<std::uint64_t>(h.item_size) >
        size - h.data_offset) {
      __builtin_trap();
    }
  } catch (const std::invalid_argument&) {
  }
  try {
    const auto values = shardkit::NpyToDoubles(bytes, "--lengths", "fuzz.npy");
    if (values.size() > size) __builtin_trap();  // at least one byte per element
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
