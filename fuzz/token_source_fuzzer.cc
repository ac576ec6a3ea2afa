// libFuzzer harness: a token source opened from two files (tokens, offsets)
// whose bytes come from the input, then every document read.
//
// Input: one byte of flags (bit 0: tokens as .npy or raw, bit 1: offsets as
// .npy or raw, bits 2-3: the raw token dtype), two bytes of little-endian
// split point, then the bytes of the tokens file followed by the offsets
// file. Opening must validate everything (throw invalid_argument) so that
// reading every document afterwards stays inside the mapped files.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/loader/token_source.h"

namespace {

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/shardkit_fuzz_" + std::to_string(getpid()) + "_" +
         name;
}

void WriteFile(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t flags = data[0];
  std::size_t split = data[1] | (static_cast<std::size_t>(data[2]) << 8);
  data += 3;
  size -= 3;
  if (split > size) split = size;
  static const std::string tokens_npy = TempPath("t.tokens.npy"), tokens_bin = TempPath("t.bin"),
                           offsets_npy = TempPath("o.offsets.npy"), offsets_bin = TempPath("o.bin");
  const std::string& tokens = (flags & 1) ? tokens_npy : tokens_bin;
  const std::string& offsets = (flags & 2) ? offsets_npy : offsets_bin;
  WriteFile(tokens, data, split);
  WriteFile(offsets, data + split, size - split);
  shardkit::SourceOptions options;
  options.raw_token_dtype = static_cast<shardkit::TokenDType>(((flags >> 2) & 3) % 3);
  try {
    auto source = shardkit::TokenSource::Open(tokens, offsets, options);
    std::vector<std::int32_t> buffer;
    shardkit::Index total = 0;
    for (shardkit::Index d = 0; d < source->num_documents(); ++d) {
      const shardkit::Index n = source->DocumentLength(d);
      if (n < 0 || n > source->num_tokens()) __builtin_trap();
      total += n;
      if (total > source->num_tokens()) __builtin_trap();
      buffer.resize(static_cast<size_t>(n));
      source->Copy(d, 0, n, buffer.data());
    }
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
