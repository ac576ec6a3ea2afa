// libFuzzer harness: the tar shard index (scan, sample grouping, the sample
// table with its image headers and token members).
//
// Input: the bytes of a tar file, written to a temporary file. TarShard::Open
// (no cache) must either index it consistently (members inside the file,
// every sample with its text member) or throw std::invalid_argument; never
// read outside the file, crash or hang.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "shardkit/loader/tar_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/tar_shard_fuzzer." + std::to_string(::getpid()) +
           ".tar";
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  for (const char* text : {"ids", "json"}) {
    try {
      shardkit::TarShardOptions options;
      options.text_ext = text;
      options.cache = false;
      options.pixel_limit = 1 << 20;
      const shardkit::TarShard shard = shardkit::TarShard::Open(path, options);
      for (shardkit::Index s = 0; s < shard.num_samples(); ++s) {
        for (const shardkit::TarMember& m : shard.members(s)) {
          if (m.offset < 0 || m.size < 0 ||
              m.offset + m.size > static_cast<shardkit::Index>(size)) {
            __builtin_trap();
          }
        }
        if (static_cast<shardkit::Index>(shard.ReadTokens(s).size()) != shard.tokens(s)) {
          __builtin_trap();
        }
        (void)shard.ReadImages(s);
      }
    } catch (const std::invalid_argument&) {
    }
  }
  return 0;
}
