// libFuzzer harness: an OLMo token file and its scan cache, or its metadata
// text, whose bytes come from the input (shardkit/loader/olmo_source.h).
//
// Input: a mode byte, two bytes of little-endian split point, then bytes.
// Mode even: the first part is the data file (uint16 tokens), the rest the
// cache file beside it; opened with EOS 0 (and BOS 1 when bit 1 of the mode
// is set) and write_cache off (bit 2: the cache resealed for the data): a cache that does not prove
// itself must be ignored (the scan's documents used), one that does must give documents inside the
// file. Mode odd: the rest is metadata text, parsed against a token count from the split point.
// Every document is read; ASan catches a read past a file's end.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_files.h"
#include "shardkit/loader/olmo_source.h"
#include "shardkit/loader/token_source.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  shardkit::fuzz::InputHeader header;
  if (!shardkit::fuzz::TakeHeader(&data, &size, &header)) return 0;
  const std::uint8_t mode = header.flags;
  std::size_t split = header.split;
  if (mode & 1) {
    try {
      const std::string text(reinterpret_cast<const char*>(data), size);
      const auto offsets = shardkit::ParseOlmoMetadata(
          text, "fuzz.csv.gz", static_cast<shardkit::Index>(split), "fuzz.npy");
      if (offsets.front() != 0 || offsets.back() != static_cast<std::int64_t>(split))
        __builtin_trap();
      for (std::size_t i = 1; i < offsets.size(); ++i) {
        if (offsets[i] < offsets[i - 1]) __builtin_trap();
      }
    } catch (const std::invalid_argument&) {
    }
    return 0;
  }
  if (split > size) split = size;
  static const std::string path = shardkit::fuzz::TempPath("olmo.npy");
  shardkit::OlmoOptions options;
  options.token_dtype = shardkit::TokenDType::kUint16;
  options.eos_token_id = 0;
  if (mode & 2) options.bos_token_id = 1;
  options.write_cache = false;
  shardkit::fuzz::WriteFile(path, data, split);
  std::string cache(reinterpret_cast<const char*>(data + split), size - split);
  // Bit 2: the cache sealed for this data file (size, mtime, sample hash,
  // checksum), so that the checks behind the seal (offsets, boundaries) are
  // what must refuse it.
  if ((mode & 4) && cache.size() >= shardkit::kOlmoCacheHeaderBytes) {
    cache = shardkit::ResealOlmoCache(std::move(cache), path);
  }
  shardkit::fuzz::WriteFile(shardkit::OlmoCachePath(path, options),
                            reinterpret_cast<const std::uint8_t*>(cache.data()), cache.size());
  try {
    auto source = shardkit::TokenSource::OpenOlmo(path, options);
    const shardkit::Index total = shardkit::fuzz::ReadEveryDocument<std::int64_t>(*source);
    if (total != source->num_tokens()) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
