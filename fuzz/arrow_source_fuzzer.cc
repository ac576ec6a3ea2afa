// libFuzzer harness: an Arrow IPC stream or file whose bytes come from the
// input, parsed for its "input_ids" column from an exact-size heap copy (so
// ASan sees any read past the end), then opened as a token source and every
// document read (shardkit/loader/arrow_source.h).
//
// Opening must validate everything (throw invalid_argument) so that reading
// every document afterwards stays inside the mapped file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/loader/arrow_source.h"
#include "shardkit/loader/token_source.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::unique_ptr<char[]> copy(new char[size]);
    if (size) std::memcpy(copy.get(), data, size);
    try {
      const shardkit::ArrowColumn c =
          shardkit::ParseArrowIpc(std::string_view(copy.get(), size), "fuzz.arrow", "input_ids");
      for (const shardkit::ArrowBatch& b : c.batches) {
        if (b.offsets_at > size || b.values_at > size) __builtin_trap();
      }
    } catch (const std::invalid_argument&) {
      return 0;
    }
  }
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/shardkit_fuzz_arrow_" + std::to_string(getpid());
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  try {
    auto source = shardkit::TokenSource::OpenArrow(path, "input_ids");
    std::vector<std::int64_t> buffer;
    shardkit::Index total = 0;
    for (shardkit::Index d = 0; d < source->num_documents(); ++d) {
      const shardkit::Index n = source->DocumentLength(d);
      if (n < 0 || n > source->num_tokens()) __builtin_trap();
      total += n;
      buffer.resize(static_cast<std::size_t>(n));
      source->Copy(d, 0, n, buffer.data());
    }
    if (total != source->num_tokens()) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
