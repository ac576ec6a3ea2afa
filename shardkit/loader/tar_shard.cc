#include "shardkit/loader/tar_shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "shardkit/base/atomic_file.h"
#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/files.h"

namespace shardkit {

namespace {

constexpr Index kBlock = 512;
constexpr Index kMaxNameRecord = Index{1} << 20;  // a pax or GNU long-name record
constexpr Index kMaxTextMember = Index{1} << 30;
constexpr int kCacheVersion = 1;
constexpr Index kMaxIndex = std::numeric_limits<Index>::max();

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void Bad(std::string_view param, const std::string& path, const std::string& what) {
  ThrowInvalid(param, "'" + path + "' " + what);
}

// Reads exactly n bytes at offset (false at end of file or on error).
bool ReadAt(int fd, Index offset, Index n, char* out) {
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<std::size_t>(n), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    offset += got;
    n -= got;
  }
  return true;
}

// A numeric header field: octal text (NUL or space ended) or GNU base-256.
bool TarNumber(const char* field, int width, Index* out) {
  const auto* u = reinterpret_cast<const unsigned char*>(field);
  if (u[0] & 0x80) {
    if (u[0] != 0x80) return false;  // negative, or too large for an Index
    std::uint64_t v = 0;
    for (int i = 1; i < width; ++i) {
      if (v >> 55) return false;
      v = (v << 8) | u[i];
    }
    if (v > static_cast<std::uint64_t>(kMaxIndex)) return false;
    *out = static_cast<Index>(v);
    return true;
  }
  int i = 0;
  while (i < width && field[i] == ' ') ++i;
  std::uint64_t v = 0;
  bool digits = false;
  for (; i < width && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<std::uint64_t>(field[i] - '0');
    digits = true;
  }
  for (; i < width; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  if (!digits || v > static_cast<std::uint64_t>(kMaxIndex)) return false;
  *out = static_cast<Index>(v);
  return true;
}

std::string CString(const char* field, int width) {
  return std::string(field, strnlen(field, static_cast<std::size_t>(width)));
}

// The "path" value of a pax extended header's records ("<len> key=value\n").
std::string PaxPath(const std::string& records) {
  std::string path;
  std::size_t pos = 0;
  while (pos < records.size()) {
    const std::size_t space = records.find(' ', pos);
    if (space == std::string::npos) break;
    std::size_t len = 0;
    for (std::size_t i = pos; i < space; ++i) {
      if (records[i] < '0' || records[i] > '9' || len > records.size()) return path;
      len = len * 10 + static_cast<std::size_t>(records[i] - '0');
    }
    if (len <= space - pos || pos + len > records.size()) break;
    const std::string record = records.substr(space + 1, pos + len - space - 2);
    if (record.rfind("path=", 0) == 0) path = record.substr(5);
    pos += len;
  }
  return path;
}

bool IsImageExt(std::string_view ext) {
  const std::size_t dot = ext.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? ext : ext.substr(dot + 1);
  return last == "jpg" || last == "jpeg" || last == "png" || last == "webp";
}

}  // namespace

std::string TarShard::CachePath(const std::string& path) { return path + ".shardkit-index.json"; }

std::span<const TarMember> TarShard::members(Index s) const {
  return std::span<const TarMember>(members_).subspan(member_start_[s],
                                                      member_start_[s + 1] - member_start_[s]);
}

TarShard TarShard::Open(const std::string& path, const TarShardOptions& options,
                        std::string_view param) {
  if (options.text_ext != "ids" && options.text_ext != "json") {
    ThrowInvalid("text", "must be 'ids' or 'json', got '" + options.text_ext + "'");
  }
  CheckAtLeast("pixel_limit", options.pixel_limit, 1);
  TarShard shard;
  shard.path_ = path;
  shard.options_ = options;
  Fd fd(OpenRegularFile(param, path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    Bad(param, path, "cannot be read: " + std::string(strerror(errno)));
  shard.file_size_ = st.st_size;
  if (options.cache && shard.ReadCache(fd.get(), shard.file_size_)) {
    shard.from_cache_ = true;
    return shard;
  }
  shard.Scan(fd.get(), shard.file_size_, param);
  shard.BuildTable(fd.get(), param);
  shard.fingerprint_ = shard.HeaderHash(fd.get(), shard.file_size_);
  if (options.cache) {
    try {
      shard.WriteCache();
      shard.cache_written_ = true;
    } catch (const std::invalid_argument&) {
      // A read-only folder: the index lives in memory only (cache_written() is false).
    }
  }
  return shard;
}

void TarShard::Scan(int fd, Index file_size, std::string_view param) {
  char h[kBlock];
  std::string long_name;  // from a preceding 'L' or 'x' record
  Index pos = 0;
  bool ended = false;
  std::string current_key;
  std::vector<std::string> current_exts;
  while (pos + kBlock <= file_size) {
    if (!ReadAt(fd, pos, kBlock, h)) Bad(param, path_, "cannot be read at byte " + Str(pos));
    if (std::all_of(h, h + kBlock, [](char c) { return c == 0; })) {
      ended = true;  // the end-of-archive block
      break;
    }
    Index stored = 0;
    if (!TarNumber(h + 148, 8, &stored)) {
      Bad(param, path_, "is not a tar file: no header checksum at byte " + Str(pos));
    }
    Index sum = 0;
    for (Index i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    }
    if (sum != stored) {
      Bad(param, path_, "has a bad tar header checksum at byte " + Str(pos));
    }
    Index size = 0;
    if (!TarNumber(h + 124, 12, &size)) {
      Bad(param, path_, "has a bad member size in the tar header at byte " + Str(pos));
    }
    const Index data = pos + kBlock;
    if (size > file_size - data) {
      Bad(param, path_,
          "is truncated: the member at byte " + Str(pos) + " has " + Str(size) +
              " bytes, the file ends " + Str(file_size - data) + " bytes later");
    }
    const char type = h[156];
    std::string name = CString(h, 100);
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != 0) {
      name = CString(h + 345, 155) + "/" + name;
    }
    const Index next = data + (size + kBlock - 1) / kBlock * kBlock;
    if (type == 'L' || type == 'x') {
      if (size > kMaxNameRecord) {
        Bad(param, path_, "has a name record of " + Str(size) + " bytes at byte " + Str(pos));
      }
      std::string record(static_cast<std::size_t>(size), '\0');
      if (!ReadAt(fd, data, size, record.data())) {
        Bad(param, path_, "cannot be read at byte " + Str(data));
      }
      long_name = type == 'L' ? CString(record.data(), static_cast<int>(size)) : PaxPath(record);
      pos = next;
      continue;
    }
    if (!long_name.empty()) name = long_name;
    long_name.clear();
    pos = next;
    if (type != '0' && type != '\0' && type != '7') continue;  // directories, links, 'g', ...
    // WebDataset's base_plus_ext and its "__*__" metadata names.
    const std::size_t slash = name.rfind('/');
    const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
    if (slash == std::string::npos && name.size() >= 4 && name.rfind("__", 0) == 0 &&
        name.compare(name.size() - 2, 2, "__") == 0) {
      continue;
    }
    const std::size_t dot = name.find('.', base);
    if (dot == std::string::npos || dot == base) continue;
    std::string key = name.substr(0, dot);
    std::string ext = name.substr(dot + 1);
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!keys_.empty() && key == current_key &&
        std::find(current_exts.begin(), current_exts.end(), ext) != current_exts.end()) {
      Bad(param, path_,
          "has member '" + name + "' at byte " + Str(data - kBlock) + ": sample '" + key +
              "' already has a ." + ext + " member (webdataset refuses it too)");
    }
    if (keys_.empty() || key != current_key) {
      if (!keys_.empty()) member_start_.push_back(static_cast<Index>(members_.size()));
      keys_.push_back(key);
      current_key = key;
      current_exts.clear();
    }
    current_exts.push_back(ext);
    members_.push_back({std::move(ext), data, size, data - kBlock});
  }
  if (pos > file_size) {  // a member's data whole, its padding cut
    Bad(param, path_,
        "is truncated: the last member's padding ends at byte " + Str(pos) + ", the file at byte " +
            Str(file_size));
  }
  if (pos < file_size && pos + kBlock > file_size) {
    Bad(param, path_,
        "is truncated: " + Str(file_size - pos) + " bytes of a tar header at byte " + Str(pos));
  }
  if (!ended && pos == file_size) {  // tar writers end with zero blocks: a cut between members
    Bad(param, path_,
        "is truncated: no end-of-archive block after the member ending at byte " + Str(pos));
  }
  if (!keys_.empty()) member_start_.push_back(static_cast<Index>(members_.size()));
}

std::string TarShard::ReadMember(int fd, const TarMember& m) const {
  std::string out(static_cast<std::size_t>(m.size), '\0');
  if (!ReadAt(fd, m.offset, m.size, out.data())) {
    Bad("paths", path_,
        "cannot be read at byte " + Str(m.offset) + " (changed since it was indexed?)");
  }
  return out;
}

void TarShard::BuildTable(int fd, std::string_view param) {
  const Index n = num_samples();
  tokens_.assign(n, 0);
  text_member_.assign(n, -1);
  for (Index s = 0; s < n; ++s) {
    for (Index m = member_start_[s]; m < member_start_[s + 1]; ++m) {
      const TarMember& member = members_[m];
      if (member.ext == options_.text_ext) {
        text_member_[s] = m;
      } else if (IsImageExt(member.ext)) {
        image_members_.push_back(m);
        const std::string bytes = ReadMember(fd, member);
        const ImageInfo info = ReadImageInfo(
            std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()),
            std::string(param) + ": '" + path_ + "' sample " + Str(s) + " ('" + keys_[s] +
                "') member ." + member.ext,
            options_.pixel_limit);
        heights_.push_back(info.height);
        widths_.push_back(info.width);
      }
    }
    image_start_.push_back(static_cast<Index>(heights_.size()));
    if (text_member_[s] < 0) {
      Bad(param, path_,
          "sample " + Str(s) + " ('" + keys_[s] + "') has no ." + options_.text_ext +
              " member (its text)");
    }
    tokens_[s] = static_cast<Index>(ReadTokens(s).size());
  }
}

std::vector<std::int64_t> TarShard::ReadTokens(Index s) const {
  CheckIndex("sample", s, 0, num_samples());
  const TarMember& m = members_[text_member_[s]];
  const std::string where =
      "'" + path_ + "' sample " + Str(s) + " ('" + keys_[s] + "') member ." + m.ext;
  if (m.size > kMaxTextMember) ThrowInvalid("paths", where + " has " + Str(m.size) + " bytes");
  Fd fd(OpenRegularFile("paths", path_));
  const std::string bytes = ReadMember(fd.get(), m);
  std::vector<std::int64_t> out;
  if (options_.text_ext == "ids") {
    if (bytes.size() % 4 != 0) {
      ThrowInvalid("paths",
                   where + " has " + Str(m.size) + " bytes, not a whole number of int32 token ids");
    }
    out.resize(bytes.size() / 4);
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::uint32_t v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);  // little endian (x86, ARM)
      out[i] = static_cast<std::int32_t>(v);
    }
    return out;
  }
  const Json doc = ParseJson(bytes, "paths: " + where);
  ExpectType(doc, "paths: " + where, Json::Type::kObject);
  const Json::Array& ids =
      AsArray(Field(doc, "paths: " + where, "input_ids"), "paths: " + where + ".input_ids");
  out.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out.push_back(AsInt64(ids[i], "paths: " + where + ".input_ids[" + std::to_string(i) + "]"));
  }
  return out;
}

std::vector<std::string> TarShard::ReadImages(Index s) const {
  CheckIndex("sample", s, 0, num_samples());
  Fd fd(OpenRegularFile("paths", path_));
  std::vector<std::string> out;
  for (Index i = image_start_[s]; i < image_start_[s + 1]; ++i) {
    out.push_back(ReadMember(fd.get(), members_[image_members_[i]]));
  }
  return out;
}

std::uint64_t TarShard::HeaderHash(int fd, Index file_size) const {
  Hasher h(0x7a75);
  h.Add(static_cast<std::uint64_t>(file_size));
  char block[kBlock];
  for (const TarMember& m : members_) {
    if (m.header < 0 || m.header + kBlock > file_size || !ReadAt(fd, m.header, kBlock, block)) {
      return ~fingerprint_;  // cannot match: the shard changed
    }
    h.AddBytes(std::string_view(block, kBlock));
  }
  return h.Finish();
}

namespace {

Json CacheBody(const std::string& text_ext, Index pixel_limit, Index size, std::uint64_t hash,
               Json samples) {
  Json body = Json::MakeObject();
  body.Set("version", Json::Int(kCacheVersion));
  body.Set("kind", Json::String("tar_shard_index"));
  body.Set("text", Json::String(text_ext));
  body.Set("pixel_limit", Json::Int(pixel_limit));
  body.Set("size", Json::Int(size));
  body.Set("headers", Json::String(HexDigest(hash)));
  body.Set("samples", std::move(samples));
  return body;
}

}  // namespace

void TarShard::WriteCache() const {
  Json samples = Json::MakeArray();
  for (Index s = 0; s < num_samples(); ++s) {
    Json members = Json::MakeArray();
    for (const TarMember& m : this->members(s)) {
      Json e = Json::MakeArray();
      e.Push(Json::String(m.ext));
      e.Push(Json::Int(m.offset));
      e.Push(Json::Int(m.size));
      e.Push(Json::Int(m.header));
      members.Push(std::move(e));
    }
    Json images = Json::MakeArray();
    for (Index i = image_start_[s]; i < image_start_[s + 1]; ++i) {
      Json e = Json::MakeArray();
      e.Push(Json::Int(image_members_[i] - member_start_[s]));
      e.Push(Json::Int(heights_[i]));
      e.Push(Json::Int(widths_[i]));
      images.Push(std::move(e));
    }
    Json sample = Json::MakeArray();
    sample.Push(Json::String(keys_[s]));
    sample.Push(Json::Int(tokens_[s]));
    sample.Push(Json::Int(text_member_[s] - member_start_[s]));
    sample.Push(std::move(members));
    sample.Push(std::move(images));
    samples.Push(std::move(sample));
  }
  WriteFileAtomically(CachePath(path_),
                      SealState(CacheBody(options_.text_ext, options_.pixel_limit, file_size_,
                                          fingerprint_, std::move(samples))),
                      "cache");
}

bool TarShard::ReadCache(int fd, Index file_size) {
  // Any problem (absent, damaged, stale, other options) means: scan again.
  try {
    const std::string text = ReadWholeFile("cache", CachePath(path_), kMaxJsonBytes);
    const Json doc = ParseJson(text, "cache");
    ExpectType(doc, "cache", Json::Type::kObject);
    if (AsInt64(Field(doc, "cache", "version"), "cache.version") != kCacheVersion) return false;
    if (AsString(Field(doc, "cache", "text"), "cache.text") != options_.text_ext) return false;
    if (AsInt64(Field(doc, "cache", "pixel_limit"), "cache") != options_.pixel_limit) return false;
    if (AsInt64(Field(doc, "cache", "size"), "cache.size") != file_size) return false;
    const std::uint64_t hash = ReadHexField(doc, "cache", "headers");
    const Json& samples = Field(doc, "cache", "samples");
    CheckStateSeal(doc, "cache",
                   CacheBody(options_.text_ext, options_.pixel_limit, file_size, hash, samples));
    for (const Json& sample : AsArray(samples, "cache.samples")) {
      const Json::Array& f = AsArray(sample, "cache.samples[]");
      if (f.size() != 5) return false;
      const Index first = static_cast<Index>(members_.size());
      keys_.push_back(AsString(f[0], "cache"));
      tokens_.push_back(AsInt64(f[1], "cache"));
      const Index text = AsInt64(f[2], "cache");
      const Json::Array& members = AsArray(f[3], "cache");
      for (const Json& m : members) {
        const Json::Array& e = AsArray(m, "cache");
        if (e.size() != 4) return false;
        TarMember member{AsString(e[0], "cache"), AsInt64(e[1], "cache"), AsInt64(e[2], "cache"),
                         AsInt64(e[3], "cache")};
        if (member.offset < 0 || member.size < 0 || member.size > file_size - member.offset) {
          return false;
        }
        members_.push_back(std::move(member));
      }
      member_start_.push_back(static_cast<Index>(members_.size()));
      if (text < 0 || text >= static_cast<Index>(members.size())) return false;
      text_member_.push_back(first + text);
      for (const Json& image : AsArray(f[4], "cache")) {
        const Json::Array& e = AsArray(image, "cache");
        if (e.size() != 3) return false;
        const Index m = AsInt64(e[0], "cache");
        if (m < 0 || m >= static_cast<Index>(members.size())) return false;
        image_members_.push_back(first + m);
        heights_.push_back(AsInt64(e[1], "cache"));
        widths_.push_back(AsInt64(e[2], "cache"));
      }
      image_start_.push_back(static_cast<Index>(heights_.size()));
    }
    fingerprint_ = hash;
    if (HeaderHash(fd, file_size) == hash) return true;
  } catch (const std::invalid_argument&) {
  }
  keys_.clear();
  members_.clear();
  member_start_ = {0};
  text_member_.clear();
  image_members_.clear();
  tokens_.clear();
  image_start_ = {0};
  heights_.clear();
  widths_.clear();
  fingerprint_ = 0;
  return false;
}

}  // namespace shardkit
