// libFuzzer harness: an Arrow IPC stream or file whose bytes come from the
// input, parsed for its "input_ids" column from an exact-size heap copy (so
// ASan sees any read past the end), then opened as a token source and every
// document read (shardkit/loader/arrow_source.h).
//
// Opening must validate everything (throw invalid_argument) so that reading
// every document afterwards stays inside the mapped file.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "fuzz/fuzz_files.h"
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
  static const std::string path = shardkit::fuzz::TempPath("arrow");
  shardkit::fuzz::WriteFile(path, data, size);
  try {
    auto source = shardkit::TokenSource::OpenArrow(path, "input_ids");
    const shardkit::Index total = shardkit::fuzz::ReadEveryDocument<std::int64_t>(*source);
    if (total != source->num_tokens()) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
