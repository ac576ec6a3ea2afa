// ImageTableCache: the image half of an image-text data set's sample table
// (how many images each sample has, and each image's height and width as read
// from its header), saved once beside the data so that later opens (every
// rank, every run) read one small file instead of every image's header.
//
// The file is a sealed state (shardkit/base/json.h): {"version", "kind":
// "image_table", "key", "pixel_limit", "image_counts" (per sample),
// "heights", "widths" (per image, in sample order), "checksum"}, written
// atomically (shardkit/base/atomic_file.h). `key` is the caller's string for
// what the table was built from (for a Hugging Face dataset: its fingerprint,
// the image column, and every Arrow file's path, size and mtime); the cache
// proves only that the file was written for that key: data changed without
// changing the key is not detected.
//
// Reading never trusts: a file that is absent, does not parse, carries a
// broken seal, another version, key or pixel_limit, another number of samples
// than expected, counts that do not add up to the images, or a size outside
// [1, pixel_limit] pixels is "not usable" (nullopt), and the caller scans.
//
// Thread-safety: free functions over values; concurrent writers of one path
// leave one whole file (last rename wins).
#ifndef SHARDKIT_LOADER_IMAGE_TABLE_CACHE_H_
#define SHARDKIT_LOADER_IMAGE_TABLE_CACHE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/index.h"

namespace shardkit {

struct ImageTable {
  std::vector<Index> image_counts;  // per sample, >= 0
  std::vector<Index> heights;       // per image, sum(image_counts) entries
  std::vector<Index> widths;
  friend bool operator==(const ImageTable&, const ImageTable&) = default;
};

// "shardkit-image-table-<16 hex digits of a hash of key>.json": the cache's
// file name for `key`, so that tables built from different data (or columns)
// sit side by side in one folder.
[[nodiscard]] std::string ImageTableCacheName(std::string_view key);

// Writes `table` to `path` (see above). Returns false, writing nothing, when
// the file cannot be written (a read-only folder): the cache is optional.
// Throws invalid_argument "table: ..." when image_counts do not add up to the
// images or heights and widths differ in length, and "pixel_limit: ..." when
// it is below 1 (the checks a reader makes, so a written file is readable).
[[nodiscard]] bool WriteImageTableCache(const std::string& path, std::string_view key,
                                        Index pixel_limit, const ImageTable& table);

// The table in `path` when it is usable for (key, pixel_limit, num_samples)
// (see above); nullopt otherwise. Never throws for the file's content.
[[nodiscard]] std::optional<ImageTable> ReadImageTableCache(const std::string& path,
                                                            std::string_view key, Index pixel_limit,
                                                            Index num_samples);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_IMAGE_TABLE_CACHE_H_
