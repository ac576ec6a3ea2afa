// libFuzzer harness: a Megatron IndexedDataset (PREFIX.idx + PREFIX.bin)
// whose bytes come from the input, opened as a token source, then every
// document read (shardkit/loader/megatron_source.h).
//
// Input: two bytes of little-endian split point, then the bytes of the .idx
// followed by the .bin. Opening must validate everything (throw
// invalid_argument) so that reading every document afterwards stays inside
// the mapped files; ASan catches a read past either file's end.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_files.h"
#include "shardkit/loader/token_source.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::size_t split = data[0] | (static_cast<std::size_t>(data[1]) << 8);
  data += 2;
  size -= 2;
  if (split > size) split = size;
  static const std::string prefix = shardkit::fuzz::TempPath("megatron");
  shardkit::fuzz::WriteFile(prefix + ".idx", data, split);
  shardkit::fuzz::WriteFile(prefix + ".bin", data + split, size - split);
  try {
    auto source = shardkit::TokenSource::OpenMegatron(prefix);
    const shardkit::Index total = shardkit::fuzz::ReadEveryDocument<std::int64_t>(*source);
    if (total != source->num_tokens()) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
