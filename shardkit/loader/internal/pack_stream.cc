#include "shardkit/loader/internal/pack_stream.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "shardkit/base/json.h"

namespace shardkit::internal {

namespace {

std::string Str(std::uint64_t v) { return std::to_string(v); }

constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace

CompactLengths::CompactLengths(const TrainDocuments& docs) {
  // A whole number of 2 MB pages (aligned_alloc wants a multiple of the
  // alignment).
  const std::size_t bytes = static_cast<std::size_t>(docs.count) * sizeof(std::uint16_t);
  const std::size_t size = std::max(kHugePage, (bytes + kHugePage - 1) / kHugePage * kHugePage);
  data_ = static_cast<std::uint16_t*>(std::aligned_alloc(kHugePage, size));
  if (data_ == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: without transparent huge pages the copy still holds 4x
  // the lengths a line and a page that int64 lengths do.
  (void)::madvise(data_, size, MADV_HUGEPAGE);
#endif
  // A length read as negative (data changed under the plan: the documents
  // were checked when it was made) is escaped too: read as before.
  for (Index d = 0; d < docs.count; ++d) {
    data_[d] = static_cast<std::uint16_t>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(docs.Length(d)), kEscape));
  }
}

CompactLengths::~CompactLengths() { std::free(data_); }

void SkipToPosition(const TrainDocuments* docs, const TrainOptions& o, PackStream* stream,
                    std::string_view param) {
  if (stream->SkipInEpoch(o.position) != o.position) {
    PackStream count(docs, o, false, stream->compact());
    const Index p = count.SkipInEpoch(std::numeric_limits<Index>::max());
    ThrowAtPath(param, Str(o.position) + " is outside [0, " + Str(p) + "] (the packs of epoch " +
                           Str(o.epoch) + "'s stream)");
  }
}

}  // namespace shardkit::internal
