// libFuzzer harness: a token source opened from two files (tokens, offsets)
// whose bytes come from the input, then every document read.
//
// Input: one byte of flags (bit 0: tokens as .npy or raw, bit 1: offsets as
// .npy or raw, bits 2-3: the raw token dtype), two bytes of little-endian
// split point, then the bytes of the tokens file followed by the offsets
// file. Opening must validate everything (throw invalid_argument) so that
// reading every document afterwards stays inside the mapped files.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_files.h"
#include "shardkit/loader/token_source.h"

using shardkit::fuzz::TempPath;
using shardkit::fuzz::WriteFile;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  shardkit::fuzz::InputHeader header;
  if (!shardkit::fuzz::TakeHeader(&data, &size, &header)) return 0;
  const std::uint8_t flags = header.flags;
  std::size_t split = header.split;
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
    (void)shardkit::fuzz::ReadEveryDocument<std::int32_t>(*source);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
