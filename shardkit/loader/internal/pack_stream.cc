#include "shardkit/loader/internal/pack_stream.h"

#include <limits>
#include <string>

#include "shardkit/base/json.h"

namespace shardkit::internal {

namespace {

std::string Str(std::uint64_t v) { return std::to_string(v); }

}  // namespace

void SkipToPosition(const TrainDocuments* docs, const TrainOptions& o, PackStream* stream,
                    std::string_view param) {
  if (stream->SkipInEpoch(o.position) != o.position) {
    PackStream count(docs, o, false);
    const Index p = count.SkipInEpoch(std::numeric_limits<Index>::max());
    ThrowAtPath(param, Str(o.position) + " is outside [0, " + Str(p) + "] (the packs of epoch " +
                           Str(o.epoch) + "'s stream)");
  }
}

}  // namespace shardkit::internal
