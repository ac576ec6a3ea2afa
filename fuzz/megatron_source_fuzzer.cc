// libFuzzer harness: a Megatron IndexedDataset (PREFIX.idx + PREFIX.bin)
// whose bytes come from the input, opened as a token source, then every
// document read (shardkit/loader/megatron_source.h).
//
// Input: two bytes of little-endian split point, then the bytes of the .idx
// followed by the .bin. Opening must validate everything (throw
// invalid_argument) so that reading every document afterwards stays inside
// the mapped files; ASan catches a read past either file's end.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/loader/token_source.h"

namespace {

void WriteFile(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  std::size_t split = data[0] | (static_cast<std::size_t>(data[1]) << 8);
  data += 2;
  size -= 2;
  if (split > size) split = size;
  static const std::string prefix = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/shardkit_fuzz_megatron_" + std::to_string(getpid());
  }();
  WriteFile(prefix + ".idx", data, split);
  WriteFile(prefix + ".bin", data + split, size - split);
  try {
    auto source = shardkit::TokenSource::OpenMegatron(prefix);
    std::vector<std::int64_t> buffer;
    shardkit::Index total = 0;
    for (shardkit::Index d = 0; d < source->num_documents(); ++d) {
      const shardkit::Index n = source->DocumentLength(d);
      if (n < 0 || n > source->num_tokens()) __builtin_trap();
      total += n;
      if (total > source->num_tokens()) __builtin_trap();
      buffer.resize(static_cast<std::size_t>(n));
      source->Copy(d, 0, n, buffer.data());
    }
    if (total != source->num_tokens()) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
