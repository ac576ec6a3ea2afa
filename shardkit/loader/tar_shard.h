// TarShard: one WebDataset-style tar shard of image-text samples, indexed
// once: where every member's bytes lie, which members form a sample, and the
// sample table (text tokens, images' sizes read from their headers).
//
// Samples follow WebDataset's rule (webdataset.tariterators.group_by_keys,
// the oracle of tar_shard tests): a member "dir/abc.0.jpg" has key "dir/abc"
// (up to the first dot of the base name) and extension "0.jpg" (lowercased);
// consecutive members with the same key form a sample (an extension repeated
// in a sample is an error, as in webdataset). Members whose base name has no
// dot or starts with one, and top-level "__*__" names, are skipped; ustar,
// GNU long names ('L') and pax path records ('x') are read; directories and
// links are skipped. Stricter than Python's tarfile: a shard must end with
// the end-of-archive block (every tar writer writes it), so a shard cut between
// two members is an error, never fewer samples.
//
// In a sample: the text is the member with extension `text_ext` ("ids":
// little-endian int32 token ids; "json": an object whose "input_ids" is a list
// of integers); the images are the members whose extension ends in .jpg,
// .jpeg, .png or .webp (or is one), in tar order; other members are kept in
// the index and ignored. Every sample needs its text member.
//
// Cache: Open writes "<shard>.shardkit-index.json" beside the shard
// (atomically; a sealed state, shardkit/base/json.h) and later Opens read it
// instead of scanning, when its fingerprint matches the shard: the file's size
// and a hash of every member's 512-byte header (name, size, mtime, checksum),
// re-read at the recorded offsets (one small read per member, no data). An
// image rewritten in place with the same size and header is not detected.
// A cache that cannot be written (read-only folder) is left out:
// cache_written() says so.
//
// Errors: std::invalid_argument "<param>: '<path>' ..." naming the byte
// offset or member at fault (a bad header checksum, a member past the end of
// the file, a sample without its text member, an image whose header does not
// parse, ...).
//
// Thread-safety: after Open, the const methods may run concurrently.
#ifndef SHARDKIT_LOADER_TAR_SHARD_H_
#define SHARDKIT_LOADER_TAR_SHARD_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/loader/image_decode.h"

namespace shardkit {

struct TarMember {
  std::string ext;   // the extension, lowercased ("0.jpg", "ids")
  Index offset = 0;  // first byte of the member's data in the tar
  Index size = 0;
  Index header = 0;  // first byte of the member's own ustar header
};

struct TarShardOptions {
  std::string text_ext = "ids";  // "ids" or "json"
  Index pixel_limit = kDefaultMaxImagePixels;
  bool cache = true;  // read / write the cache file beside the shard
};

class TarShard {
 public:
  // Reads the cache or scans the shard (see above). Throws invalid_argument
  // naming `param` and the path.
  [[nodiscard]] static TarShard Open(const std::string& path, const TarShardOptions& options,
                                     std::string_view param = "paths");

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] Index num_samples() const { return static_cast<Index>(keys_.size()); }
  [[nodiscard]] const std::string& key(Index s) const { return keys_[s]; }
  // Members of sample s, in tar order.
  [[nodiscard]] std::span<const TarMember> members(Index s) const;
  // The sample table: text tokens of sample s; its images' sizes.
  [[nodiscard]] Index tokens(Index s) const { return tokens_[s]; }
  [[nodiscard]] Index num_images(Index s) const { return image_start_[s + 1] - image_start_[s]; }
  [[nodiscard]] std::span<const Index> image_heights() const { return heights_; }
  [[nodiscard]] std::span<const Index> image_widths() const { return widths_; }
  // image_start()[s]: sample s's first image in image_heights() (samples + 1 entries).
  [[nodiscard]] std::span<const Index> image_start() const { return image_start_; }

  // The token ids of sample s (read from the shard).
  [[nodiscard]] std::vector<std::int64_t> ReadTokens(Index s) const;
  // The encoded bytes of sample s's images, in order.
  [[nodiscard]] std::vector<std::string> ReadImages(Index s) const;

  [[nodiscard]] std::uint64_t fingerprint() const { return fingerprint_; }
  [[nodiscard]] bool from_cache() const { return from_cache_; }
  [[nodiscard]] bool cache_written() const { return cache_written_; }
  [[nodiscard]] static std::string CachePath(const std::string& path);

 private:
  TarShard() = default;
  void Scan(int fd, Index file_size, std::string_view param);
  void BuildTable(int fd, std::string_view param);
  [[nodiscard]] bool ReadCache(int fd, Index file_size);
  void WriteCache() const;
  [[nodiscard]] std::uint64_t HeaderHash(int fd, Index file_size) const;
  [[nodiscard]] std::string ReadMember(int fd, const TarMember& m) const;

  std::string path_;
  TarShardOptions options_;
  Index file_size_ = 0;
  std::vector<std::string> keys_;
  std::vector<Index> member_start_ = {0};
  std::vector<TarMember> members_;
  std::vector<Index> text_member_;    // per sample, index into members_
  std::vector<Index> image_members_;  // flat, index into members_
  std::vector<Index> tokens_;
  std::vector<Index> image_start_ = {0};
  std::vector<Index> heights_, widths_;
  std::uint64_t fingerprint_ = 0;
  bool from_cache_ = false;
  bool cache_written_ = false;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_TAR_SHARD_H_
