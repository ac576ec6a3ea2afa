#include "shardkit/loader/token_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/hash.h"
#include "shardkit/loader/files.h"
#include "shardkit/loader/npy.h"

namespace shardkit {

namespace {
constexpr EnumNames<TokenDType, 8> kTokenDTypes{
    "token_dtype",
    "token dtype",
    {"uint16", "int32", "uint32", "uint8", "int8", "int16", "int64", "uint64"}};
constexpr EnumNames<ReadMode, 3> kReadModes{"read", "read mode", {"auto", "mmap", "pread"}};
}  // namespace

SHARDKIT_ENUM_PARSE_AND_NAME(TokenDType, kTokenDTypes, ParseTokenDType, TokenDTypeName)
SHARDKIT_ENUM_PARSE_AND_NAME(ReadMode, kReadModes, ParseReadMode, ReadModeName)

int TokenDTypeSize(TokenDType type) {
  switch (type) {
    case TokenDType::kUint8:
    case TokenDType::kInt8:
      return 1;
    case TokenDType::kUint16:
    case TokenDType::kInt16:
      return 2;
    case TokenDType::kInt32:
    case TokenDType::kUint32:
      return 4;
    case TokenDType::kInt64:
    case TokenDType::kUint64:
      return 8;
  }
  return 4;
}

namespace {

std::int64_t Nanoseconds(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// Descriptors kept open for CheckUnchanged, process-wide, and how many may
// be: a quarter of RLIMIT_NOFILE (at least 16), so a source of thousands of
// files (a Dolma directory) never exhausts the limit (1024 by default).
std::atomic<Index> kept_descriptors{0};
Index DescriptorBudget() {
  static const Index budget = [] {
    struct rlimit r {};
    Index soft = 1024;
    if (::getrlimit(RLIMIT_NOFILE, &r) == 0) {
      soft = r.rlim_cur == RLIM_INFINITY
                 ? Index{1} << 20
                 : static_cast<Index>(std::min<rlim_t>(r.rlim_cur, 1 << 20));
    }
    return std::max<Index>(16, soft / 4);
  }();
  return budget;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, std::string_view param)
    : path_(path), param_(param) {
  const int fd = OpenRegularFile(param, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ThrowInvalid(param, "cannot read '" + path + "': " + why);
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  mtime_ns_ = Nanoseconds(st.st_mtim);
  device_ = static_cast<std::uint64_t>(st.st_dev);
  inode_ = static_cast<std::uint64_t>(st.st_ino);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ThrowInvalid(param, "cannot map '" + path + "': " + why);
    }
    data_ = static_cast<const char*>(p);
  }
  // Kept open for CheckUnchanged while the budget allows: an fstat of the
  // descriptor sees the mapped file itself, whatever the path names now.
  if (kept_descriptors.fetch_add(1) < DescriptorBudget()) {
    fd_ = fd;
  } else {
    kept_descriptors.fetch_sub(1);
    ::close(fd);
  }
}

void MappedFile::CheckUnchanged() const {
  struct stat st {};
  // Past the descriptor budget the path is looked up: a file replaced under
  // it (another inode) counts as changed, since the check cannot see the
  // mapped one any more.
  if ((fd_ >= 0 ? ::fstat(fd_, &st) : ::stat(path_.c_str(), &st)) != 0) {
    ThrowInvalid(param_, path_ + ": cannot check it is unchanged since it was opened: " +
                             std::strerror(errno));
  }
  if (static_cast<std::uint64_t>(st.st_dev) != device_ ||
      static_cast<std::uint64_t>(st.st_ino) != inode_) {
    ThrowInvalid(param_, path_ + ": changed since it was opened (replaced: inode " +
                             std::to_string(inode_) + " -> " + std::to_string(st.st_ino) + ")");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size != size_) {
    ThrowInvalid(param_, path_ + ": changed since it was opened (size " + std::to_string(size_) +
                             " -> " + std::to_string(size) + ")");
  }
  if (Nanoseconds(st.st_mtim) != mtime_ns_) {
    ThrowInvalid(param_, path_ + ": changed since it was opened (same size " +
                             std::to_string(size_) + ", written: modification time " +
                             std::to_string(mtime_ns_) + " -> " +
                             std::to_string(Nanoseconds(st.st_mtim)) + " ns)");
  }
  if (const std::int64_t at = failed_at_.load(); at >= 0) {
    const int error = failed_errno_.load();
    ThrowInvalid(param_, path_ + ": changed since it was opened (a read at byte " +
                             std::to_string(at) + " " +
                             (error == 0 ? std::string("found the file ended before it (") +
                                               std::to_string(size_) + " bytes at open)"
                                         : std::string("failed: ") + std::strerror(error)) +
                             ")");
  }
}

void MappedFile::ReadAt(const char* p, std::size_t n, void* out) const {
  if (fd_ < 0) {
    std::memcpy(out, p, n);
    return;
  }
  auto* dst = static_cast<char*>(out);
  auto at = static_cast<off_t>(p - data_);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, dst, n, at);
    if (got > 0) {
      dst += got;
      at += got;
      n -= static_cast<std::size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    // The file ended (or the read failed) before the bytes read at open:
    // zeros, remembered for CheckUnchanged.
    std::int64_t none = -1;
    if (failed_at_.compare_exchange_strong(none, static_cast<std::int64_t>(at))) {
      failed_errno_.store(got < 0 ? errno : 0);
    }
    std::memset(dst, 0, n);
    return;
  }
}

void MappedFile::AdviseRandom() const {
  if (data_ != nullptr) (void)::madvise(const_cast<char*>(data_), size_, MADV_RANDOM);
}

void MappedFile::Release(std::uint64_t end) const {
  static const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  end = std::min(end, size_) / page * page;
  if (data_ != nullptr && end > 0) (void)::madvise(const_cast<char*>(data_), end, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  if (fd_ >= 0) {
    ::close(fd_);
    kept_descriptors.fetch_sub(1);
  }
}

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The T stored (unaligned, in the machine's order) at p.
template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::int64_t LoadInt64(const char* p) { return Load<std::int64_t>(p); }

// Ids are delivered as int32: every unsigned id U (uint32, uint64) must be
// below 2^31. One pass at open (the OR of all ids vectorises); the second
// only finds the id to name. Reading never checks.
template <typename U>
void CheckBelow2To31(const std::string& name, const char* tokens, Index num_tokens,
                     const char* dtype) {
  U all = 0;
  for (Index i = 0; i < num_tokens; ++i) {
    const U v = Load<U>(tokens + sizeof(U) * i);
    all |= v;
  }
  if (!(all >> 31)) return;
  for (Index i = 0; i < num_tokens; ++i) {
    const U v = Load<U>(tokens + sizeof(U) * i);
    if (v >> 31) {
      ThrowInvalid("tokens", name + ": token " + std::to_string(i) + " is " + std::to_string(v) +
                                 "; " + dtype +
                                 " ids must be below 2^31 (they are delivered as int32)");
    }
  }
}

// LengthsDigest's domains: a part's term, and the source's digest of them.
constexpr std::uint64_t kLengthsDomain = 0x4c454e4754485331ULL;  // "LENGTHS1"
constexpr std::uint64_t kPartsDomain = 0x4c454e5041525453ULL;    // "LENPARTS"

// The validation pass over offsets[0, num_offsets) stored as T at p: each
// offset in [previous, limit] (previous = 0 before the first), a block of
// Hasher::kArrayBlock at a time; the lengths go to the part's digest term in
// the same pass. Returns the term, or sets *bad to the first offset that
// breaks the rule. release(i) is called every kReleaseEvery offsets with the
// number of offsets read so far (a mapped file drops those pages).
constexpr Index kReleaseEvery = Index{1} << 20;
template <typename T, typename Release>
std::uint64_t ScanOffsets(const char* p, Index num_offsets, Index limit, Index* bad,
                          Release release) {
  constexpr Index kBlock = static_cast<Index>(Hasher::kArrayBlock);
  Hasher h(kLengthsDomain);
  Index values[kBlock + 1];
  std::uint64_t lengths[kBlock];
  *bad = -1;
  values[0] = Load<T>(p);
  if (values[0] < 0 || values[0] > limit) {
    *bad = 0;
    return 0;
  }
  const Index documents = num_offsets - 1;
  for (Index begin = 0; begin < documents; begin += kBlock) {
    const Index n = std::min(kBlock, documents - begin);
    const char* src = p + (begin + 1) * static_cast<Index>(sizeof(T));
    if constexpr (sizeof(T) == 8) {
      std::memcpy(values + 1, src, static_cast<std::size_t>(n) * 8);
    } else {
      T narrow[kBlock];
      std::memcpy(narrow, src, static_cast<std::size_t>(n) * sizeof(T));
      for (Index j = 0; j < n; ++j) values[j + 1] = static_cast<Index>(narrow[j]);
    }
    bool broken = false;
    for (Index j = 0; j < n; ++j) {
      broken |= (values[j + 1] < values[j]) | (values[j + 1] > limit);
      lengths[j] =
          static_cast<std::uint64_t>(values[j + 1]) - static_cast<std::uint64_t>(values[j]);
    }
    if (broken) {
      for (Index j = 0; j < n; ++j) {
        if (values[j + 1] < values[j] || values[j + 1] > limit) {
          *bad = begin + 1 + j;
          return 0;
        }
      }
    }
    h.AddArray(lengths, static_cast<std::size_t>(n));
    values[0] = values[n];
    if ((begin + n) % kReleaseEvery < kBlock) release(begin + n + 1);
  }
  h.Add(static_cast<std::uint64_t>(documents));
  return h.Finish();
}

// ScanOffsets of a part's offsets as the part stores them.
template <typename Release>
std::uint64_t ScanPartOffsets(const char* p, int size, bool is_signed, Index num_offsets,
                              Index limit, Index* bad, Release release) {
  switch (size) {
    case 8:
      return ScanOffsets<std::int64_t>(p, num_offsets, limit, bad, release);
    case 4:
      return is_signed ? ScanOffsets<std::int32_t>(p, num_offsets, limit, bad, release)
                       : ScanOffsets<std::uint32_t>(p, num_offsets, limit, bad, release);
    case 2:
      return is_signed ? ScanOffsets<std::int16_t>(p, num_offsets, limit, bad, release)
                       : ScanOffsets<std::uint16_t>(p, num_offsets, limit, bad, release);
    default:
      return is_signed ? ScanOffsets<std::int8_t>(p, num_offsets, limit, bad, release)
                       : ScanOffsets<std::uint8_t>(p, num_offsets, limit, bad, release);
  }
}

}  // namespace

Index TokenSource::Part::Offset(Index i) const {
  // Two compares: bytes changed after open can never point outside the tokens.
  return std::clamp<Index>(RawOffset(i), 0, num_tokens);
}

template <typename T>
T TokenSource::Part::Get(const char* p) const {
  if (offsets_in == nullptr) return Load<T>(p);
  T v;
  offsets_in->ReadAt(p, sizeof v, &v);
  return v;
}

namespace {

// The offset stored at p as `size` bytes, signed or not.
Index DecodeOffset(const char* p, int size, bool is_signed) {
  switch (size) {
    case 8:
      return Load<std::int64_t>(p);
    case 4:
      return is_signed ? Index{Load<std::int32_t>(p)} : Index{Load<std::uint32_t>(p)};
    case 2:
      return is_signed ? Index{Load<std::int16_t>(p)} : Index{Load<std::uint16_t>(p)};
    default:
      return is_signed ? static_cast<std::int8_t>(*p) : static_cast<std::uint8_t>(*p);
  }
}

}  // namespace

Index TokenSource::Part::RawOffset(Index i) const {
  if (sequence_pointers != nullptr) {
    // A Megatron part: the sequence id read is clamped as well, so an index
    // edited after open never makes this read leave the mapping.
    const Index s =
        document_indices == nullptr
            ? i
            : std::clamp<Index>(Get<std::int64_t>(document_indices + 8 * i), 0, num_sequences);
    return s == num_sequences ? num_tokens
                              : Get<std::int64_t>(sequence_pointers + 8 * s) >> token_shift;
  }
  const char* p = offsets + i * offset_size;
  if (offsets_in == nullptr) return DecodeOffset(p, offset_size, offset_signed);
  char bytes[8];
  offsets_in->ReadAt(p, static_cast<std::size_t>(offset_size), bytes);
  return DecodeOffset(bytes, offset_size, offset_signed);
}

void TokenSource::Part::Offsets(Index i, Index n, Index* out) const {
  constexpr Index kBlock = kOffsetsBlock;
  const bool one_array = sequence_pointers == nullptr;
  if (offsets_in == nullptr || (!one_array && document_indices != nullptr)) {
    for (Index j = 0; j < n; ++j) out[j] = Offset(i + j);
    return;
  }
  // One array in the file: offset_size bytes per entry (a Megatron part of
  // one sequence per document: pointer i, num_tokens past the last).
  const Index size = one_array ? offset_size : 8;
  const char* base = one_array ? offsets : sequence_pointers;
  const Index stored = one_array ? num_documents + 1 : num_sequences;
  char bytes[kBlock * 8];
  for (Index b = 0; b < n; b += kBlock) {
    const Index first = i + b;
    const Index m = std::min(kBlock, n - b);
    const Index have = std::clamp<Index>(stored - first, 0, m);
    if (have > 0) {
      offsets_in->ReadAt(base + first * size, static_cast<std::size_t>(have * size), bytes);
    }
    for (Index j = 0; j < m; ++j) {
      const Index raw = j >= have   ? num_tokens
                        : one_array ? DecodeOffset(bytes + j * size, offset_size, offset_signed)
                                    : Load<std::int64_t>(bytes + j * 8) >> token_shift;
      out[b + j] = std::clamp<Index>(raw, 0, num_tokens);
    }
  }
}

TokenSource::Part TokenSource::OpenPart(const std::string& tokens_path,
                                        const std::string& offsets_path, SourceOptions options) {
  Part part;
  part.name = tokens_path;
  part.tokens_file = std::make_shared<MappedFile>(tokens_path, "tokens");
  part.offsets_file = std::make_shared<MappedFile>(offsets_path, "offsets");
  const MappedFile& t = *part.tokens_file;
  const MappedFile& o = *part.offsets_file;
  std::string_view tbytes(t.data() == nullptr ? "" : t.data(), t.size());
  std::string_view obytes(o.data() == nullptr ? "" : o.data(), o.size());

  if (IsNpy(tbytes) || EndsWith(tokens_path, ".npy")) {
    NpyHeader h = ParseNpyHeader(tbytes, t.size(), "tokens", tokens_path);
    if (h.shape.size() != 1) {
      ThrowInvalid("tokens", tokens_path + ": expected a 1-D token array, got " +
                                 std::to_string(h.shape.size()) + " dimensions");
    }
    if (h.kind == 'u' && h.item_size == 2) {
      part.type = TokenDType::kUint16;
    } else if (h.kind == 'i' && h.item_size == 4) {
      part.type = TokenDType::kInt32;
    } else if (h.kind == 'u' && h.item_size == 4) {
      part.type = TokenDType::kUint32;
    } else {
      ThrowInvalid("tokens", tokens_path + ": dtype '" + h.descr +
                                 "' is not a token type (uint16, int32, uint32)");
    }
    part.tokens = t.data() + h.data_offset;
    part.num_tokens = h.count;
  } else {
    part.type = options.raw_token_dtype;
    const int size = TokenDTypeSize(part.type);
    if (t.size() % size != 0) {
      ThrowInvalid("tokens", tokens_path + ": raw " + std::string(TokenDTypeName(part.type)) +
                                 " file of " + std::to_string(t.size()) +
                                 " bytes is not a whole number of tokens (truncated?)");
    }
    part.tokens = t.data();
    part.num_tokens = static_cast<Index>(t.size() / size);
  }

  Index num_offsets = 0;
  if (IsNpy(obytes) || EndsWith(offsets_path, ".npy")) {
    NpyHeader h = ParseNpyHeader(obytes, o.size(), "offsets", offsets_path);
    if (h.shape.size() != 1 || (h.kind != 'i' && h.kind != 'u')) {
      ThrowInvalid("offsets", offsets_path + ": expected a 1-D integer array, got dtype '" +
                                  h.descr + "' with " + std::to_string(h.shape.size()) +
                                  " dimensions");
    }
    if (h.kind == 'u' && h.item_size == 8) {
      ThrowInvalid("offsets", offsets_path + ": uint64 offsets are not supported; use int64");
    }
    part.offsets = o.data() + h.data_offset;
    part.offset_size = h.item_size;
    part.offset_signed = h.kind == 'i';
    num_offsets = h.count;
  } else {
    if (o.size() % 8 != 0) {
      ThrowInvalid("offsets", offsets_path + ": raw int64 file of " + std::to_string(o.size()) +
                                  " bytes is not a whole number of offsets (truncated?)");
    }
    part.offsets = o.data();
    num_offsets = static_cast<Index>(o.size() / 8);
  }
  if (num_offsets < 1) {
    ThrowInvalid("offsets",
                 offsets_path + ": empty; needs num_documents + 1 entries (the first is 0)");
  }
  part.num_documents = num_offsets - 1;
  // One pass: every offset non-decreasing from a non-negative first one,
  // and the lengths hashed into the part's LengthsDigest term. The pages
  // read are released as the pass goes (an offsets file of 10^8 documents
  // is 800 MB): the resident set stays small, the page cache keeps them.
  const std::uint64_t data_offset = static_cast<std::uint64_t>(part.offsets - o.data());
  Index bad = -1;
  part.lengths_digest = ScanPartOffsets(
      part.offsets, part.offset_size, part.offset_signed, num_offsets,
      std::numeric_limits<Index>::max(), &bad, [&](Index read) {
        o.Release(data_offset + static_cast<std::uint64_t>(read * part.offset_size));
      });
  if (bad == 0) {
    ThrowInvalid("offsets", offsets_path + ": offsets[0] = " + std::to_string(part.RawOffset(0)) +
                                " is negative");
  }
  if (bad > 0) {
    ThrowInvalid("offsets", offsets_path + ": offsets[" + std::to_string(bad) +
                                "] = " + std::to_string(part.RawOffset(bad)) + " < offsets[" +
                                std::to_string(bad - 1) + "] = " +
                                std::to_string(part.RawOffset(bad - 1)) + " (not non-decreasing)");
  }
  const Index previous = part.RawOffset(num_offsets - 1);
  if (previous > part.num_tokens) {
    ThrowInvalid("offsets", offsets_path + ": last offset " + std::to_string(previous) +
                                " is past the end of " + tokens_path + " (" +
                                std::to_string(part.num_tokens) +
                                " tokens; truncated token file?)");
  }
  if (previous < part.num_tokens) {
    // Every token of a file belongs to a document: a shorter offsets file is
    // a truncated one (a raw .bin cut at a multiple of 8 bytes parses).
    ThrowInvalid("offsets", offsets_path + ": last offset " + std::to_string(previous) +
                                " leaves tokens [" + std::to_string(previous) + ", " +
                                std::to_string(part.num_tokens) + ") of " + tokens_path +
                                " in no document (truncated offsets file?)");
  }
  return part;
}

void TokenSource::AddPart(Part part) {
  if (part.type == TokenDType::kInt64) {
    // The same rule for int64 ids (a Megatron dtype, a raw file's): each must
    // fit the int32 it is delivered as.
    std::int64_t low = 0, high = 0;
    for (Index i = 0; i < part.num_tokens; ++i) {
      const std::int64_t v = LoadInt64(part.tokens + 8 * i);
      low = std::min(low, v);
      high = std::max(high, v);
    }
    if (low < INT32_MIN || high > INT32_MAX) {
      for (Index i = 0; i < part.num_tokens; ++i) {
        const std::int64_t v = LoadInt64(part.tokens + 8 * i);
        if (v < INT32_MIN || v > INT32_MAX) {
          ThrowInvalid("tokens", part.name + ": token " + Str(i) + " is " + Str(v) +
                                     "; int64 ids must fit in int32 (they are delivered as "
                                     "int32)");
        }
      }
    }
  }
  if (part.type == TokenDType::kUint64) {
    CheckBelow2To31<std::uint64_t>(part.name, part.tokens, part.num_tokens, "uint64");
  }
  if (part.type == TokenDType::kUint32) {
    CheckBelow2To31<std::uint32_t>(part.name, part.tokens, part.num_tokens, "uint32");
  }
  // From here on the tokens are read in the order of a shuffled epoch (and
  // sampled by the data fingerprint): at random (the scans above, if any,
  // were sequential and kept the kernel's read-ahead).
  if (part.tokens_file != nullptr) part.tokens_file->AdviseRandom();
  if (part_begin_.empty()) part_begin_.push_back(0);
  part.first_document = num_documents_;
  num_documents_ = CheckedAdd("offsets", num_documents_, part.num_documents);
  num_tokens_ = CheckedAdd("tokens", num_tokens_, part.num_tokens);
  part_begin_.push_back(num_documents_);
  parts_.push_back(std::move(part));
}

std::shared_ptr<const TokenSource> TokenSource::Open(const std::string& tokens_path,
                                                     const std::string& offsets_path,
                                                     SourceOptions options) {
  std::shared_ptr<TokenSource> source(new TokenSource());
  source->AddPart(OpenPart(tokens_path, offsets_path, options));
  return source;
}

std::shared_ptr<const TokenSource> TokenSource::OpenDirectory(const std::string& directory,
                                                              SourceOptions options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) {
    ThrowInvalid("directory", "'" + directory + "' is not a directory");
  }
  std::map<std::string, std::string> tokens;  // stem -> tokens file (sorted by stem)
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* suffix : {".tokens.npy", ".tokens.bin"}) {
      if (EndsWith(name, suffix)) {
        const std::string stem = name.substr(0, name.size() - std::strlen(suffix));
        if (tokens.count(stem)) {
          ThrowInvalid("directory", directory + ": both " + stem + ".tokens.npy and " + stem +
                                        ".tokens.bin exist");
        }
        tokens[stem] = entry.path().string();
      }
    }
  }
  if (ec) ThrowInvalid("directory", "cannot list '" + directory + "': " + ec.message());
  if (tokens.empty()) {
    ThrowInvalid("directory",
                 "'" + directory + "' holds no <stem>.tokens.npy / <stem>.tokens.bin files");
  }
  std::shared_ptr<TokenSource> source(new TokenSource());
  for (const auto& [stem, tokens_path] : tokens) {
    const std::string ext = EndsWith(tokens_path, ".npy") ? ".npy" : ".bin";
    const std::string offsets_path = (fs::path(directory) / (stem + ".offsets" + ext)).string();
    if (!fs::exists(offsets_path, ec)) {
      ThrowInvalid("directory", tokens_path + " has no offsets file " + offsets_path);
    }
    source->AddPart(OpenPart(tokens_path, offsets_path, options));
  }
  return source;
}

std::shared_ptr<const TokenSource> TokenSource::Concat(
    const std::vector<std::shared_ptr<const TokenSource>>& sources) {
  if (sources.empty()) ThrowInvalid("sources", "no sources; give at least one");
  std::shared_ptr<TokenSource> out(new TokenSource());
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (sources[k] == nullptr) ThrowInvalid("sources", "source " + Str(Index(k)) + " is null");
    if (sources[k]->gathered_ != nullptr) {
      ThrowInvalid("sources", "source " + Str(Index(k)) +
                                  " is a gathered view (an order stage); concatenate files");
    }
    for (const Part& part : sources[k]->parts_) {
      // Validated when its source was opened: append without a second pass
      // (AddPart would rescan uint32 / int64 tokens).
      Part copy = part;
      if (out->part_begin_.empty()) out->part_begin_.push_back(0);
      copy.first_document = out->num_documents_;
      out->num_documents_ = CheckedAdd("sources", out->num_documents_, copy.num_documents);
      out->num_tokens_ = CheckedAdd("sources", out->num_tokens_, copy.num_tokens);
      out->part_begin_.push_back(out->num_documents_);
      out->parts_.push_back(std::move(copy));
    }
  }
  return out;
}

std::shared_ptr<const TokenSource> TokenSource::FromMemory(const void* tokens, TokenDType type,
                                                           Index num_tokens,
                                                           const std::int64_t* offsets,
                                                           Index num_offsets) {
  CheckAtLeast("tokens", num_tokens, 0);
  Part part;
  part.name = "<memory>";
  part.tokens = static_cast<const char*>(tokens);
  part.type = type;
  part.num_tokens = num_tokens;
  if (num_offsets < 1) {
    ThrowInvalid("offsets", "empty; needs num_documents + 1 entries (the first is 0)");
  }
  // Validate a private copy: the caller's array may change after this call,
  // and collation reads without checks (8 bytes a document).
  auto owned = std::make_shared<std::vector<std::int64_t>>(offsets, offsets + num_offsets);
  offsets = owned->data();
  part.owned_offsets = owned;
  part.offsets = reinterpret_cast<const char*>(offsets);
  part.offset_size = 8;
  part.num_documents = num_offsets - 1;
  Index bad = -1;
  part.lengths_digest =
      ScanOffsets<std::int64_t>(part.offsets, num_offsets, num_tokens, &bad, [](Index) {});
  if (bad >= 0) {
    const Index v = offsets[bad];
    ThrowInvalid("offsets",
                 "offsets[" + std::to_string(bad) + "] = " + std::to_string(v) +
                     (v < 0 || v > num_tokens
                          ? " is outside [0, " + std::to_string(num_tokens) + "] (the token count)"
                          : " < offsets[" + std::to_string(bad - 1) + "] (not non-decreasing)"));
  }
  std::shared_ptr<TokenSource> source(new TokenSource());
  source->AddPart(std::move(part));
  return source;
}

std::shared_ptr<const TokenSource> TokenSource::Gather(
    std::vector<std::shared_ptr<const TokenSource>> sources, std::vector<std::int64_t> documents,
    std::uint64_t identity) {
  if (sources.empty()) ThrowInvalid("sources", "no sources; give at least one");
  auto g = std::make_shared<Gathered>();
  g->begin.push_back(0);
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (sources[k] == nullptr) {
      ThrowInvalid("sources", "source " + Str(static_cast<Index>(k)) + " is None");
    }
    g->begin.push_back(CheckedAdd("sources", g->begin.back(), sources[k]->num_documents()));
  }
  g->sources = std::move(sources);
  g->documents = std::move(documents);
  auto source = std::shared_ptr<TokenSource>(new TokenSource());
  source->gathered_ = g;
  source->identity_ = identity;
  Index tokens = 0;
  const Index n = static_cast<Index>(g->documents.size());
  for (Index i = 0; i < n; ++i) {
    const Index d = g->documents[i];
    if (d < 0 || d >= g->begin.back()) {
      ThrowInvalid("documents", "entry " + Str(i) + " is " + Str(d) + "; the sources hold " +
                                    Str(g->begin.back()) + " documents");
    }
    tokens = CheckedAdd("documents", tokens, source->DocumentLength(i));
  }
  Part part;
  part.name = "<gathered>";
  part.num_documents = n;
  part.num_tokens = tokens;
  source->parts_.push_back(std::move(part));
  source->part_begin_ = {0, n};
  source->num_documents_ = n;
  source->num_tokens_ = tokens;
  return source;
}

namespace {

// A Select view's serial (SelectedLength's per-thread caches tell views apart).
std::uint64_t NextSerial() {
  static std::atomic<std::uint64_t> serials{0};
  return serials.fetch_add(1) + 1;
}

}  // namespace

std::shared_ptr<const TokenSource> TokenSource::Select(
    std::vector<std::shared_ptr<const TokenSource>> sources, Index count, Locator locate,
    std::uint64_t identity) {
  if (sources.empty()) ThrowInvalid("sources", "no sources; give at least one");
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (sources[k] == nullptr) {
      ThrowInvalid("sources", "source " + Str(static_cast<Index>(k)) + " is None");
    }
    if (sources[k]->gathered_ != nullptr) {
      ThrowInvalid("sources", "source " + Str(static_cast<Index>(k)) +
                                  " is a view (an order stage); select from files");
    }
  }
  if (count < 0) ThrowInvalid("count", "must be >= 0, got " + Str(count));
  if (count > 0) {
    Index k = -1, item = -1;
    locate(0, &k, &item);
    if (k < 0 || k >= static_cast<Index>(sources.size()) || item < 0 ||
        item >= sources[static_cast<std::size_t>(k)]->num_documents()) {
      ThrowInvalid("documents", "entry 0 is item " + Str(item) + " of source " + Str(k) +
                                    ", outside the sources");
    }
  }
  auto g = std::make_shared<Gathered>();
  g->sources = std::move(sources);
  g->locate = std::move(locate);
  g->serial = NextSerial();
  auto source = std::shared_ptr<TokenSource>(new TokenSource());
  source->gathered_ = g;
  source->identity_ = identity;
  Part part;
  part.name = "<selected>";
  part.num_documents = count;
  source->parts_.push_back(std::move(part));
  source->part_begin_ = {0, count};
  source->num_documents_ = count;
  return source;
}

Index TokenSource::num_tokens() const {
  if (gathered_ == nullptr || !gathered_->locate) return num_tokens_;
  std::call_once(gathered_->tokens_once, [&] {
    Index tokens = 0;
    for (Index i = 0; i < num_documents_; ++i) {
      tokens = CheckedAdd("documents", tokens, DocumentLength(i));
    }
    gathered_->tokens = tokens;
  });
  return gathered_->tokens;
}

const std::vector<std::shared_ptr<const TokenSource>>& TokenSource::selected_from() const {
  static const std::vector<std::shared_ptr<const TokenSource>> kNone;
  return gathered_ != nullptr && gathered_->locate ? gathered_->sources : kNone;
}

std::pair<const TokenSource*, Index> TokenSource::Locate(Index d) const {
  if (gathered_->locate) {
    Index k = 0, item = 0;
    gathered_->locate(d, &k, &item);
    return {gathered_->sources[static_cast<std::size_t>(k)].get(), item};
  }
  const Index id = gathered_->documents[static_cast<std::size_t>(d)];
  const auto& begin = gathered_->begin;
  const std::size_t k = static_cast<std::size_t>(std::upper_bound(begin.begin(), begin.end(), id) -
                                                 begin.begin() - 1);
  return {gathered_->sources[k].get(), id - begin[k]};
}

std::uint64_t TokenSource::LengthsDigest() const {
  if (gathered_ != nullptr) return 0;
  std::call_once(lengths_digest_->once, [&] {
    Hasher digest(kPartsDomain);
    digest.Add(static_cast<std::uint64_t>(parts_.size()));
    constexpr Index kBlock = static_cast<Index>(Hasher::kArrayBlock);
    Index bulk[kBlock];
    std::uint64_t lengths[kBlock];
    for (std::size_t k = 0; k < parts_.size(); ++k) {
      const Part& p = parts_[k];
      if (p.lengths_digest) {
        digest.Add(*p.lengths_digest);
        continue;
      }
      // The term ScanOffsets computes, from the lengths as Lengths reads them.
      Hasher h(kLengthsDomain);
      for (Index begin = 0; begin < p.num_documents; begin += kBlock) {
        const Index n = std::min(kBlock, p.num_documents - begin);
        Lengths(p.first_document + begin, n, bulk);
        for (Index i = 0; i < n; ++i) lengths[i] = static_cast<std::uint64_t>(bulk[i]);
        h.AddArray(lengths, static_cast<std::size_t>(n));
      }
      h.Add(static_cast<std::uint64_t>(p.num_documents));
      digest.Add(h.Finish());
      // Like the open pass, the pass leaves none of the part's pages mapped.
      for (const auto* file : {p.offsets_file.get(), p.index_file.get()}) {
        if (file != nullptr) file->Release(file->size());
      }
    }
    lengths_digest_->value = digest.Finish();
  });
  return lengths_digest_->value;
}

namespace {

// The file among `files` whose map holds p, or null (memory of the source's
// own, such as an OLMo part's offsets from its metadata).
const MappedFile* FileHolding(const char* p, std::initializer_list<const MappedFile*> files) {
  if (p == nullptr) return nullptr;
  for (const MappedFile* f : files) {
    if (f != nullptr && f->data() != nullptr && p >= f->data() && p < f->data() + f->size()) {
      return f;
    }
  }
  return nullptr;
}

}  // namespace

std::shared_ptr<const TokenSource> TokenSource::WithReads(ReadMode mode) const {
  const bool pread = mode == ReadMode::kPread;
  std::shared_ptr<TokenSource> out(new TokenSource());
  out->identity_ = identity_;
  out->lengths_digest_ = lengths_digest_;  // the same lengths
  out->parts_ = parts_;
  out->part_begin_ = part_begin_;
  out->num_documents_ = num_documents_;
  out->num_tokens_ = num_tokens_;
  out->reads_ = pread ? ReadMode::kPread : ReadMode::kMmap;
  for (Part& p : out->parts_) {
    const std::initializer_list<const MappedFile*> files = {
        p.index_file.get(), p.offsets_file.get(), p.tokens_file.get()};
    p.offsets_in =
        pread ? FileHolding(p.sequence_pointers != nullptr ? p.sequence_pointers : p.offsets, files)
              : nullptr;
    p.tokens_in = pread ? FileHolding(p.tokens, files) : nullptr;
  }
  if (gathered_ != nullptr) {
    auto g = std::make_shared<Gathered>();
    for (const auto& source : gathered_->sources) g->sources.push_back(source->WithReads(mode));
    g->begin = gathered_->begin;
    g->documents = gathered_->documents;
    g->locate = gathered_->locate;
    g->serial = gathered_->locate ? NextSerial() : 0;
    out->gathered_ = std::move(g);
  }
  return out;
}

void TokenSource::ReleasePages() const {
  for (const Part& p : parts_) {
    for (const auto* file : {p.tokens_file.get(), p.offsets_file.get(), p.index_file.get()}) {
      if (file != nullptr) file->Release(file->size());
    }
  }
}

void TokenSource::CheckUnchanged() const { CheckPartFiles(/*lengths_only=*/false); }

void TokenSource::CheckLengthsUnchanged() const { CheckPartFiles(/*lengths_only=*/true); }

void TokenSource::CheckPartFiles(bool lengths_only) const {
  if (gathered_ != nullptr) {
    for (const auto& source : gathered_->sources) source->CheckPartFiles(lengths_only);
    return;
  }
  // The parts of one Arrow file (one per record batch) share it, their
  // tokens and lengths file: once each.
  const MappedFile* previous = nullptr;
  for (const Part& p : parts_) {
    const std::array<const MappedFile*, 3> files =
        lengths_only ? std::array<const MappedFile*, 3>{LengthsFile(p), nullptr, nullptr}
                     : std::array<const MappedFile*, 3>{p.tokens_file.get(), p.offsets_file.get(),
                                                        p.index_file.get()};
    for (const MappedFile* file : files) {
      if (file != nullptr && file != previous) file->CheckUnchanged();
    }
    previous = p.tokens_file.get();
  }
}

// A Megatron part's lengths are read from its index, any other's from its
// offsets (an Arrow part's are in its one file, the tokens file).
const MappedFile* TokenSource::LengthsFile(const Part& p) {
  return p.index_file != nullptr     ? p.index_file.get()
         : p.offsets_file != nullptr ? p.offsets_file.get()
                                     : p.tokens_file.get();
}

void TokenSource::CheckLengthsUnchanged(Index part) const {
  if (const MappedFile* file = LengthsFile(parts_[static_cast<std::size_t>(part)])) {
    file->CheckUnchanged();
  }
}

Index TokenSource::PartIndex(Index d) const {
  if (parts_.size() == 1) return 0;
  return static_cast<Index>(std::upper_bound(part_begin_.begin(), part_begin_.end(), d) -
                            part_begin_.begin() - 1);
}

void TokenSource::AddDocumentFiles(Index d, std::vector<const MappedFile*>* files) const {
  if (gathered_ != nullptr) {
    const auto [source, local] = Locate(d);
    source->AddDocumentFiles(local, files);
    return;
  }
  const Part& p = PartOf(d);
  for (const auto* file : {p.tokens_file.get(), p.offsets_file.get(), p.index_file.get()}) {
    if (file != nullptr && std::find(files->begin(), files->end(), file) == files->end()) {
      files->push_back(file);
    }
  }
}

void TokenSource::DocumentFiles(std::span<const Index> documents,
                                std::vector<const MappedFile*>* files) const {
  if (documents.empty()) return;
  if (gathered_ == nullptr && parts_.size() == 1) {
    // One part: its files, not a lookup per document.
    AddDocumentFiles(documents.front(), files);
    return;
  }
  for (const Index d : documents) AddDocumentFiles(d, files);
}

void TokenSource::CheckFiles(std::span<const MappedFile* const> files) {
  for (const MappedFile* file : files) file->CheckUnchanged();
}

void TokenSource::CheckUnchanged(Index d) const { CheckUnchanged(std::span<const Index>(&d, 1)); }

void TokenSource::CheckUnchanged(std::span<const Index> documents) const {
  std::vector<const MappedFile*> files;
  DocumentFiles(documents, &files);
  CheckFiles(files);
}

Index TokenSource::PartBegin(Index part) const { return part_begin_[part]; }

const TokenSource::Part& TokenSource::PartOf(Index d) const {
  return parts_[static_cast<std::size_t>(PartIndex(d))];
}

void TokenSource::PrefetchOffset(Index d) const {
  const Part& p = PartOf(d);
  if (p.offsets != nullptr && p.sequence_pointers == nullptr && p.offsets_in == nullptr) {
    __builtin_prefetch(p.offsets + (d - p.first_document) * p.offset_size);
  }
}

Index TokenSource::SelectedLength(Index d) const {
  constexpr Index kChunk = 1024;
  constexpr Index kWays = 4;  // the packer's buffer spans neighbouring chunks
  struct Way {
    std::uint64_t owner = 0;
    Index chunk = -1;
    Index lengths[kChunk];
  };
  thread_local Way ways[kWays];
  const Gathered& g = *gathered_;
  const Index chunk = d / kChunk;
  Way& way = ways[chunk % kWays];
  if (way.owner != g.serial || way.chunk != chunk) {
    const Index begin = chunk * kChunk;
    const Index n = std::min(kChunk, num_documents_ - begin);
    Index sources[kChunk], items[kChunk];
    for (Index j = 0; j < n; ++j) g.locate(begin + j, &sources[j], &items[j]);
    for (Index j = 0; j < n; ++j) {
      g.sources[static_cast<std::size_t>(sources[j])]->PrefetchOffset(items[j]);
    }
    for (Index j = 0; j < n; ++j) {
      way.lengths[j] = g.sources[static_cast<std::size_t>(sources[j])]->DocumentLength(items[j]);
    }
    way.owner = g.serial;
    way.chunk = chunk;
  }
  return way.lengths[d % kChunk];
}

Index TokenSource::DocumentLength(Index d) const {
  if (gathered_ != nullptr) {
    if (gathered_->locate) return SelectedLength(d);
    const auto [source, local] = Locate(d);
    return source->DocumentLength(local);
  }
  const Part& p = PartOf(d);
  const Index local = d - p.first_document;
  if (p.offsets_in != nullptr) {
    Index both[2];  // one read for the two offsets
    p.Offsets(local, 2, both);
    return std::max<Index>(0, both[1] - both[0]);
  }
  return std::max<Index>(0, p.Offset(local + 1) - p.Offset(local));
}

const std::int64_t* TokenSource::ContiguousOffsets() const {
  if (gathered_ != nullptr || parts_.size() != 1) return nullptr;
  const Part& p = parts_[0];
  if (p.offset_size != 8 ||
      reinterpret_cast<std::uintptr_t>(p.offsets) % alignof(std::int64_t) != 0) {
    return nullptr;
  }
  return reinterpret_cast<const std::int64_t*>(p.offsets);
}

const char* TokenSource::ContiguousSequencePointers(int* shift) const {
  if (gathered_ != nullptr || parts_.size() != 1) return nullptr;
  const Part& p = parts_[0];
  if (p.sequence_pointers == nullptr || p.document_indices != nullptr) return nullptr;
  *shift = p.token_shift;
  return p.sequence_pointers;
}

void TokenSource::Lengths(Index begin, Index count, Index* out) const {
  if (gathered_ != nullptr) {
    for (Index i = 0; i < count; ++i) out[i] = DocumentLength(begin + i);
    return;
  }
  while (count > 0) {
    const Part& p = PartOf(begin);
    const Index local = begin - p.first_document;
    const Index n = std::min(count, p.num_documents - local);
    if (p.offsets_in != nullptr) {
      // Read with pread: kBlock lengths from the kBlock + 1 offsets of one
      // read (Part::Offsets' block).
      constexpr Index kBlock = Part::kOffsetsBlock - 1;
      Index block[kBlock + 1];
      for (Index b = 0; b < n; b += kBlock) {
        const Index m = std::min(kBlock, n - b);
        p.Offsets(local + b, m + 1, block);
        for (Index i = 0; i < m; ++i) out[b + i] = std::max<Index>(0, block[i + 1] - block[i]);
      }
    } else if (p.sequence_pointers != nullptr && p.document_indices == nullptr) {
      // A Megatron part of one sequence per document: offset i is pointer i
      // (the part's end past the last), clamped as Part::Offset clamps.
      const Index limit = p.num_tokens;
      auto at = [&](Index i) {
        return i == p.num_documents
                   ? limit
                   : std::clamp<Index>(LoadInt64(p.sequence_pointers + 8 * i) >> p.token_shift, 0,
                                       limit);
      };
      Index previous = at(local);
      const Index full = std::min(n, p.num_documents - 1 - local);  // pointer i + 1 exists
      for (Index i = 0; i < full; ++i) {
        const Index next = std::clamp<Index>(
            LoadInt64(p.sequence_pointers + 8 * (local + i + 1)) >> p.token_shift, 0, limit);
        out[i] = std::max<Index>(0, next - previous);
        previous = next;
      }
      for (Index i = std::max<Index>(full, 0); i < n; ++i) {
        const Index next = at(local + i + 1);
        out[i] = std::max<Index>(0, next - previous);
        previous = next;
      }
    } else {
      Index previous = p.Offset(local);
      for (Index i = 0; i < n; ++i) {
        const Index next = p.Offset(local + i + 1);
        out[i] = std::max<Index>(0, next - previous);
        previous = next;
      }
    }
    begin += n;
    count -= n;
    out += n;
  }
}

namespace {

template <typename In, typename Out>
void Widen(const char* src, Index count, Out* out) {
  // memcpy into an aligned block, then a plain loop the compiler vectorises.
  constexpr Index kBlock = 512;
  In block[kBlock];
  for (Index i = 0; i < count; i += kBlock) {
    const Index n = std::min(kBlock, count - i);
    std::memcpy(block, src + i * static_cast<Index>(sizeof(In)),
                static_cast<std::size_t>(n) * sizeof(In));
    for (Index j = 0; j < n; ++j) out[i + j] = static_cast<Out>(block[j]);
  }
}

// Tokens [first, first + count) stored as In into out: a plain copy of
// 32-bit ids into a 32-bit Out (uint32 ids were validated below 2^31 when the
// part was opened), else widened.
template <typename In, typename Out>
void CopyAs(const char* tokens, Index first, Index count, Out* out) {
  const char* src = tokens + first * static_cast<Index>(sizeof(In));
  if constexpr (sizeof(In) == 4 && sizeof(Out) == 4) {
    std::memcpy(out, src, static_cast<std::size_t>(count) * 4);
  } else {
    Widen<In>(src, count, out);
  }
}

template <typename Out>
void CopyTokens(const char* tokens, TokenDType type, Index first, Index count, Out* out) {
  switch (type) {
    case TokenDType::kInt32:
      return CopyAs<std::int32_t>(tokens, first, count, out);
    case TokenDType::kUint32:
      return CopyAs<std::uint32_t>(tokens, first, count, out);
    case TokenDType::kUint16:
      return CopyAs<std::uint16_t>(tokens, first, count, out);
    case TokenDType::kInt16:
      return CopyAs<std::int16_t>(tokens, first, count, out);
    case TokenDType::kUint8:
      return CopyAs<std::uint8_t>(tokens, first, count, out);
    case TokenDType::kInt8:
      return CopyAs<std::int8_t>(tokens, first, count, out);
    case TokenDType::kInt64:
      // Validated inside the int32 range when the part was opened.
      return CopyAs<std::int64_t>(tokens, first, count, out);
    case TokenDType::kUint64:
      // Validated below 2^31 when the part was opened.
      return CopyAs<std::uint64_t>(tokens, first, count, out);
  }
}

}  // namespace

// The tokens [begin, begin + count) of document d, from the source that
// holds it in a gathered view; in its part the ones past the token array
// (only after its offsets file changed under the mapping) as zeros: one
// branch, and no read outside the mapping whatever the file's bytes became.
template <typename Out>
void TokenSource::CopyInto(Index d, Index begin, Index count, Out* out) const {
  if (count <= 0) return;
  if (gathered_ != nullptr) {
    const auto [source, local] = Locate(d);
    source->Copy(local, begin, count, out);
    return;
  }
  const Part& p = PartOf(d);
  const Index first = p.Offset(d - p.first_document) + begin;
  const Index n = std::clamp<Index>(p.num_tokens - first, 0, count);
  if (n > 0 && p.tokens_in != nullptr) {
    // Read with pread: the bytes into `out` when they are its ids already
    // (32-bit ids into int32), else into a buffer of this thread's, widened.
    const int size = TokenDTypeSize(p.type);
    const char* src = p.tokens + first * size;
    const auto bytes = static_cast<std::size_t>(n * size);
    if (size == 4 && sizeof(Out) == 4) {
      p.tokens_in->ReadAt(src, bytes, out);
    } else {
      thread_local std::vector<char> buffer;
      if (buffer.size() < bytes) buffer.resize(bytes);
      p.tokens_in->ReadAt(src, bytes, buffer.data());
      CopyTokens(buffer.data(), p.type, 0, n, out);
    }
  } else if (n > 0) {
    CopyTokens(p.tokens, p.type, first, n, out);
  }
  if (n < count) std::fill(out + n, out + count, Out{0});
}

void TokenSource::Copy(Index d, Index begin, Index count, std::int32_t* out) const {
  CopyInto(d, begin, count, out);
}

void TokenSource::Copy(Index d, Index begin, Index count, std::int64_t* out) const {
  CopyInto(d, begin, count, out);
}

}  // namespace shardkit
