#include "shardkit/loader/image_table_cache.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "shardkit/base/atomic_file.h"
#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/files.h"

namespace shardkit {

namespace {

constexpr int kVersion = 1;
constexpr std::string_view kKind = "image_table";
constexpr std::uint64_t kNameDomain = 0x696d6774626c6531;  // "imgtble1"

Json IntList(const std::vector<Index>& values) {
  Json out = Json::MakeArray();
  for (Index v : values) out.Push(Json::Int(v));
  return out;
}

Json Body(std::string_view key, Index pixel_limit, Json counts, Json heights, Json widths) {
  Json body = Json::MakeObject();
  body.Set("version", Json::Int(kVersion));
  body.Set("kind", Json::String(std::string(kKind)));
  body.Set("key", Json::String(std::string(key)));
  body.Set("pixel_limit", Json::Int(pixel_limit));
  body.Set("image_counts", std::move(counts));
  body.Set("heights", std::move(heights));
  body.Set("widths", std::move(widths));
  return body;
}

// Whether `table` is consistent: counts >= 0 adding up to the images, and
// every size in [1, pixel_limit] pixels.
bool Consistent(const ImageTable& table, Index pixel_limit) {
  if (table.heights.size() != table.widths.size()) return false;
  Index images = 0;
  for (Index c : table.image_counts) {
    if (c < 0 || c > static_cast<Index>(table.heights.size()) - images) return false;
    images += c;
  }
  if (images != static_cast<Index>(table.heights.size())) return false;
  for (std::size_t i = 0; i < table.heights.size(); ++i) {
    const Index h = table.heights[i], w = table.widths[i];
    if (h < 1 || w < 1 || h > pixel_limit / w) return false;
  }
  return true;
}

}  // namespace

std::string ImageTableCacheName(std::string_view key) {
  Hasher h(kNameDomain);
  h.AddBytes(key);
  return "shardkit-image-table-" + HexDigest(h.Finish()) + ".json";
}

bool WriteImageTableCache(const std::string& path, std::string_view key, Index pixel_limit,
                          const ImageTable& table) {
  CheckAtLeast("pixel_limit", pixel_limit, 1);
  if (!Consistent(table, pixel_limit)) {
    ThrowInvalid("table", "image_counts must add up to the " +
                              std::to_string(table.heights.size()) +
                              " heights (and as many widths), each image within pixel_limit " +
                              std::to_string(pixel_limit));
  }
  const std::string text = SealState(Body(key, pixel_limit, IntList(table.image_counts),
                                          IntList(table.heights), IntList(table.widths)));
  try {
    WriteFileAtomically(path, text, "cache");
  } catch (const std::invalid_argument&) {
    return false;  // a read-only folder: the table lives in memory only
  }
  return true;
}

std::optional<ImageTable> ReadImageTableCache(const std::string& path, std::string_view key,
                                              Index pixel_limit, Index num_samples) {
  try {
    const std::string text = ReadWholeFile("cache", path, kMaxJsonBytes);
    const Json doc = ParseJson(text, "cache");
    ExpectType(doc, "cache", Json::Type::kObject);
    ExpectOnlyKeys(
        doc, "cache",
        {"version", "kind", "key", "pixel_limit", "image_counts", "heights", "widths", "checksum"});
    if (AsInt64(Field(doc, "cache", "version"), "cache.version") != kVersion) return std::nullopt;
    if (AsString(Field(doc, "cache", "kind"), "cache.kind") != kKind) return std::nullopt;
    if (AsString(Field(doc, "cache", "key"), "cache.key") != key) return std::nullopt;
    if (AsInt64(Field(doc, "cache", "pixel_limit"), "cache.pixel_limit") != pixel_limit) {
      return std::nullopt;
    }
    const Json& counts = Field(doc, "cache", "image_counts");
    const Json& heights = Field(doc, "cache", "heights");
    const Json& widths = Field(doc, "cache", "widths");
    CheckStateSeal(doc, "cache", Body(key, pixel_limit, counts, heights, widths));
    const auto read = [](const Json& v, const std::string& p) { return AsInt64(v, p); };
    ImageTable table{ReadList(counts, "cache.image_counts", read),
                     ReadList(heights, "cache.heights", read),
                     ReadList(widths, "cache.widths", read)};
    if (static_cast<Index>(table.image_counts.size()) != num_samples) return std::nullopt;
    if (!Consistent(table, pixel_limit)) return std::nullopt;
    return table;
  } catch (const std::invalid_argument&) {
    return std::nullopt;  // absent, damaged or edited: scan again
  }
}

}  // namespace shardkit
