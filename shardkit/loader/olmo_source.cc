#include "shardkit/loader/olmo_source.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "shardkit/base/atomic_file.h"
#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"

namespace shardkit {

namespace {

constexpr std::string_view kCacheMagic{"SKDOCS1\0", 8};
constexpr std::string_view kNumpyMagic{"\x93NUMPY", 6};
constexpr std::uint64_t kCacheVersion = 1;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::uint64_t MaxOf(TokenDType type) {
  switch (type) {
    case TokenDType::kUint8:
      return 0xFF;
    case TokenDType::kUint16:
      return 0xFFFF;
    case TokenDType::kUint32:
      return 0xFFFFFFFFu;
    case TokenDType::kUint64:
      return ~std::uint64_t{0};
    default:
      return 0;
  }
}

// Every boundary position of the scan: i such that tokens[i] ends a document.
template <typename T>
std::vector<std::int64_t> Scan(const char* tokens, Index n, std::int64_t eos,
                               std::optional<std::int64_t> bos) {
  std::vector<std::int64_t> offsets{0};
  const T e = static_cast<T>(eos);
  // Blocks copied to aligned memory: the compiler vectorises the compare.
  constexpr Index kBlock = 4096;
  T block[kBlock + 1];
  for (Index base = 0; base < n; base += kBlock) {
    const Index m = std::min(kBlock, n - base);
    const Index with_next = std::min(m + 1, n - base);
    std::memcpy(block, tokens + base * static_cast<Index>(sizeof(T)),
                static_cast<std::size_t>(with_next) * sizeof(T));
    for (Index j = 0; j < m; ++j) {
      if (block[j] != e) continue;
      const Index i = base + j;
      if (bos && i + 1 < n && block[j + 1] != static_cast<T>(*bos)) continue;
      offsets.push_back(i + 1);
    }
  }
  // The end of the file always ends a document (OLMo-core's
  // get_document_offsets): tokens after the last EOS are one more.
  if (offsets.back() != n) offsets.push_back(n);
  return offsets;
}

struct FileStat {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
};

FileStat StatOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

bool IsBoundary(const char* tokens, TokenDType type, Index n, Index at, std::int64_t eos,
                std::optional<std::int64_t> bos) {
  // `at` ends a document: token at - 1 is the EOS, and token at the BOS.
  auto token = [&](Index i) -> std::uint64_t {
    switch (TokenDTypeSize(type)) {
      case 1:
        return Load<std::uint8_t>(tokens + i);
      case 2:
        return Load<std::uint16_t>(tokens + 2 * i);
      case 4:
        return Load<std::uint32_t>(tokens + 4 * i);
      default:
        return Load<std::uint64_t>(tokens + 8 * i);
    }
  };
  if (at <= 0 || at > n || token(at - 1) != static_cast<std::uint64_t>(eos)) return false;
  return !bos || at == n || token(at) == static_cast<std::uint64_t>(*bos);
}

std::uint64_t CacheChecksum(std::string_view header72, const char* offsets, std::uint64_t n) {
  Hasher h(0x534b444f43533031ULL);  // "SKDOCS01"
  h.AddBytes(header72);
  for (std::uint64_t i = 0; i < n; ++i) h.Add(Load<std::uint64_t>(offsets + 8 * i));
  return h.Finish();
}

struct CacheKey {
  TokenDType type;
  std::int64_t eos, bos;  // bos -1: none
  FileStat data;
  std::uint64_t sample;
  Index num_tokens;
};

// Why the cache at `cache` is not usable for `key` over `tokens`, or "" when
// it proves itself.
std::string CacheProblem(const MappedFile& cache, const CacheKey& key, const char* tokens) {
  const std::string_view bytes(cache.data() == nullptr ? "" : cache.data(), cache.size());
  if (bytes.size() < kOlmoCacheHeaderBytes + 8) {
    return "its " + std::to_string(bytes.size()) + " bytes are shorter than a header and offset";
  }
  const char* p = bytes.data();
  if (bytes.substr(0, 8) != kCacheMagic) return "bad magic (not a shardkit document cache)";
  if (Load<std::uint64_t>(p + 8) != kCacheVersion) {
    return "version " + std::to_string(Load<std::uint64_t>(p + 8)) + ", expected 1";
  }
  const auto n = Load<std::uint64_t>(p + 64);
  if (n > (bytes.size() - kOlmoCacheHeaderBytes) / 8 ||
      bytes.size() != kOlmoCacheHeaderBytes + 8 * n) {
    return "size " + std::to_string(bytes.size()) + " bytes does not hold its " +
           std::to_string(n) + " offsets (truncated?)";
  }
  const char* offsets = p + kOlmoCacheHeaderBytes;
  if (CacheChecksum(bytes.substr(0, 72), offsets, n) != Load<std::uint64_t>(p + 72)) {
    return "checksum mismatch (corrupt)";
  }
  if (Load<std::uint64_t>(p + 32) != static_cast<std::uint64_t>(key.type)) {
    return "built for another token dtype";
  }
  if (Load<std::int64_t>(p + 40) != key.eos || Load<std::int64_t>(p + 48) != key.bos) {
    return "built for eos " + Str(Load<std::int64_t>(p + 40)) + ", bos " +
           Str(Load<std::int64_t>(p + 48));
  }
  if (Load<std::uint64_t>(p + 16) != key.data.size) {
    return "stale: the data changed size (" + std::to_string(Load<std::uint64_t>(p + 16)) +
           " bytes when built, " + std::to_string(key.data.size) + " now)";
  }
  if (Load<std::int64_t>(p + 24) != key.data.mtime_ns) {
    return "stale: the data's mtime changed since the cache was built";
  }
  if (Load<std::uint64_t>(p + 56) != key.sample) {
    return "stale: the data's sampled bytes differ from those the cache was built from";
  }
  const Index count = static_cast<Index>(n);
  if (Load<std::int64_t>(offsets) != 0 ||
      Load<std::int64_t>(offsets + 8 * (count - 1)) != key.num_tokens) {
    return "its offsets do not run from 0 to the token count " + Str(key.num_tokens);
  }
  for (Index i = 1; i < count; ++i) {
    if (Load<std::int64_t>(offsets + 8 * i) < Load<std::int64_t>(offsets + 8 * (i - 1))) {
      return "offsets[" + Str(i) + "] decreases";
    }
  }
  // Inner boundaries (not the file's end, which always ends a document).
  const Index inner = count - 2;
  const Index checks = std::min(inner, kOlmoBoundaryChecks);
  const std::optional<std::int64_t> bos =
      key.bos < 0 ? std::nullopt : std::optional<std::int64_t>(key.bos);
  for (Index k = 0; k < checks; ++k) {
    const Index i = 1 + (checks == inner ? k : k * inner / checks);
    const Index at = Load<std::int64_t>(offsets + 8 * i);
    if (at == key.num_tokens) continue;  // the last EOS may end the file
    if (!IsBoundary(tokens, key.type, key.num_tokens, at, key.eos, bos)) {
      return "stale: offsets[" + Str(i) + "] = " + Str(at) + " is not after an EOS";
    }
  }
  return "";
}

std::string CacheBytes(const CacheKey& key, const std::vector<std::int64_t>& offsets) {
  std::string out;
  out.reserve(kOlmoCacheHeaderBytes + 8 * offsets.size());
  out.append(kCacheMagic);
  Put<std::uint64_t>(out, kCacheVersion);
  Put<std::uint64_t>(out, key.data.size);
  Put<std::int64_t>(out, key.data.mtime_ns);
  Put<std::uint64_t>(out, static_cast<std::uint64_t>(key.type));
  Put<std::int64_t>(out, key.eos);
  Put<std::int64_t>(out, key.bos);
  Put<std::uint64_t>(out, key.sample);
  Put<std::uint64_t>(out, offsets.size());
  const std::uint64_t sum =
      CacheChecksum(out, reinterpret_cast<const char*>(offsets.data()), offsets.size());
  Put<std::uint64_t>(out, sum);
  out.append(reinterpret_cast<const char*>(offsets.data()), 8 * offsets.size());
  return out;
}

void CheckId(std::string_view param, std::int64_t id, TokenDType type) {
  if (id < 0 || static_cast<std::uint64_t>(id) > MaxOf(type)) {
    ThrowInvalid(param, Str(id) + " is outside the " + std::string(TokenDTypeName(type)) +
                            " token ids [0, " + std::to_string(MaxOf(type)) + "]");
  }
}

}  // namespace

TokenDType OlmoTokenDType(const OlmoOptions& options) {
  if (options.token_dtype) {
    const TokenDType t = *options.token_dtype;
    if (MaxOf(t) == 0) {
      ThrowInvalid("token_dtype", "'" + std::string(TokenDTypeName(t)) +
                                      "' is not an OLMo token dtype (uint8, uint16, uint32, "
                                      "uint64)");
    }
    return t;
  }
  if (options.vocab_size) {
    if (*options.vocab_size < 1) {
      ThrowInvalid("vocab_size", Str(*options.vocab_size) + "; a vocabulary holds at least one id");
    }
    const auto v = static_cast<std::uint64_t>(*options.vocab_size);
    for (TokenDType t :
         {TokenDType::kUint8, TokenDType::kUint16, TokenDType::kUint32, TokenDType::kUint64}) {
      if (v - 1 <= MaxOf(t)) return t;
    }
  }
  ThrowInvalid("token_dtype",
               "an OLMo token file has no header: give token_dtype (uint8, uint16, uint32, "
               "uint64) or vocab_size");
}

std::string OlmoMetadataPath(const std::string& path) {
  return (EndsWith(path, ".npy") ? path.substr(0, path.size() - 4) : path) + ".csv.gz";
}

std::string OlmoCachePath(const std::string& path, const OlmoOptions& options) {
  std::string out = path + ".shardkit-docs-eos" + Str(options.eos_token_id.value_or(-1));
  if (options.bos_token_id) out += "-bos" + Str(*options.bos_token_id);
  return out;
}

std::vector<std::int64_t> ScanOlmoDocuments(const char* tokens, TokenDType type, Index num_tokens,
                                            std::int64_t eos, std::optional<std::int64_t> bos) {
  switch (TokenDTypeSize(type)) {
    case 1:
      return Scan<std::uint8_t>(tokens, num_tokens, eos, bos);
    case 2:
      return Scan<std::uint16_t>(tokens, num_tokens, eos, bos);
    case 4:
      return Scan<std::uint32_t>(tokens, num_tokens, eos, bos);
    default:
      return Scan<std::uint64_t>(tokens, num_tokens, eos, bos);
  }
}

std::vector<std::int64_t> ParseOlmoMetadata(std::string_view text, const std::string& metadata_path,
                                            Index num_tokens, const std::string& data_path) {
  std::vector<std::int64_t> offsets{0};
  Index row = 0;
  std::size_t pos = 0;
  auto fail = [&](const std::string& what) {
    ThrowInvalid("metadata", metadata_path + ": row " + Str(row) + ": " + what);
  };
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++row;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::size_t c1 = line.find(',');
    if (c1 == std::string_view::npos) {
      fail("'" + std::string(line.substr(0, 40)) + "' has fewer than two fields (start,end)");
    }
    std::size_t c2 = line.find(',', c1 + 1);
    if (c2 == std::string_view::npos) c2 = line.size();
    Index field[2];
    const std::string_view texts[2] = {line.substr(0, c1), line.substr(c1 + 1, c2 - c1 - 1)};
    for (int k = 0; k < 2; ++k) {
      const std::string_view f = texts[k];
      const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), field[k]);
      if (f.empty() || ec != std::errc() || ptr != f.data() + f.size() || field[k] < 0) {
        fail(std::string(k == 0 ? "start" : "end") + " '" + std::string(f.substr(0, 40)) +
             "' is not a non-negative integer");
      }
    }
    const Index start = field[0], stop = field[1];
    if (start != offsets.back()) {
      fail("start " + Str(start) + ", expected " + Str(offsets.back()) +
           " (rows tile the tokens: each starts where the previous ended)");
    }
    if (stop < start) fail("end " + Str(stop) + " < start " + Str(start));
    if (stop > num_tokens) {
      fail("end " + Str(stop) + " is past the end of " + data_path + " (" + Str(num_tokens) +
           " tokens; metadata of another file, or the wrong dtype?)");
    }
    offsets.push_back(stop);
  }
  if (offsets.back() != num_tokens) {
    ThrowInvalid("metadata", metadata_path + ": " + Str(row) + " rows end at token " +
                                 Str(offsets.back()) + " but " + data_path + " holds " +
                                 Str(num_tokens) +
                                 " tokens (metadata of another file, truncated, or the wrong "
                                 "dtype?)");
  }
  return offsets;
}

std::string ReadGzipFile(const std::string& path, std::uint64_t max_bytes) {
  gzFile f = ::gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    ThrowInvalid("metadata", "cannot open '" + path + "': " + std::strerror(errno));
  }
  std::unique_ptr<gzFile_s, int (*)(gzFile)> closer(f, ::gzclose);
  std::string out;
  char buf[1 << 16];
  while (true) {
    const int got = ::gzread(f, buf, sizeof buf);
    if (got < 0) {
      int code = 0;
      ThrowInvalid("metadata",
                   path + ": corrupt gzip data (" + std::string(::gzerror(f, &code)) + ")");
    }
    if (::gzdirect(f)) {
      ThrowInvalid("metadata", path + ": not gzip-compressed (bad magic); expected a .csv.gz");
    }
    if (got == 0) break;
    if (out.size() + static_cast<std::uint64_t>(got) > max_bytes) {
      ThrowInvalid("metadata", path + ": more than " + std::to_string(max_bytes) +
                                   " bytes decompressed; refused");
    }
    out.append(buf, static_cast<std::size_t>(got));
  }
  int code = Z_OK;
  const char* message = ::gzerror(f, &code);
  if (code != Z_OK) ThrowInvalid("metadata", path + ": " + message + " (truncated or corrupt)");
  // gzread returns 0 at a stream cut short without setting an error in some
  // zlib versions; gzclose_r reports it (Z_BUF_ERROR).
  closer.release();
  const int closed = ::gzclose(f);
  if (closed == Z_BUF_ERROR) {
    ThrowInvalid("metadata", path + ": the gzip stream ends early (truncated)");
  }
  if (closed != Z_OK) ThrowInvalid("metadata", path + ": gzip error " + Str(closed));
  return out;
}

std::uint64_t OlmoSampleHash(std::string_view data) {
  Hasher h(0x4f4c4d4f53414d50ULL);  // "OLMOSAMP"
  h.Add(data.size());
  constexpr std::size_t kEdge = 4096, kWindows = 4096, kWindow = 16;
  h.AddBytes(data.substr(0, kEdge));
  h.AddBytes(data.substr(data.size() - std::min(data.size(), kEdge)));
  if (data.size() > kWindow) {
    for (std::size_t k = 0; k < kWindows; ++k) {
      const std::size_t at = static_cast<std::size_t>(static_cast<unsigned __int128>(k) *
                                                      (data.size() - kWindow) / kWindows);
      h.AddBytes(data.substr(at, kWindow));
    }
  }
  return h.Finish();
}

std::string ResealOlmoCache(std::string cache, const std::string& path) {
  const FileStat data = StatOf(path);
  MappedFile mapped(path, "path");
  const std::string_view bytes(mapped.data() == nullptr ? "" : mapped.data(), mapped.size());
  char* p = cache.data();
  std::memcpy(p + 16, &data.size, 8);
  std::memcpy(p + 24, &data.mtime_ns, 8);
  const std::uint64_t sample = OlmoSampleHash(bytes);
  std::memcpy(p + 56, &sample, 8);
  const std::uint64_t n = std::min<std::uint64_t>(Load<std::uint64_t>(p + 64),
                                                  (cache.size() - kOlmoCacheHeaderBytes) / 8);
  const std::uint64_t sum = CacheChecksum(std::string_view(p, 72), p + kOlmoCacheHeaderBytes, n);
  std::memcpy(p + 72, &sum, 8);
  return cache;
}

std::shared_ptr<const TokenSource> TokenSource::OpenOlmo(const std::string& path,
                                                         const OlmoOptions& options,
                                                         std::string* origin) {
  const TokenDType type = OlmoTokenDType(options);
  if (options.bos_token_id && !options.eos_token_id) {
    ThrowInvalid("bos_token_id", Str(*options.bos_token_id) +
                                     " needs eos_token_id (a document ends at an EOS followed "
                                     "by the BOS)");
  }
  if (options.eos_token_id) CheckId("eos_token_id", *options.eos_token_id, type);
  if (options.bos_token_id) CheckId("bos_token_id", *options.bos_token_id, type);
  Part part;
  part.name = path;
  part.tokens_file = std::make_shared<MappedFile>(path, "tokens");
  const MappedFile& t = *part.tokens_file;
  const std::string_view bytes(t.data() == nullptr ? "" : t.data(), t.size());
  if (bytes.substr(0, kNumpyMagic.size()) == kNumpyMagic) {
    ThrowInvalid("tokens", path +
                               ": magic: starts with the NumPy magic '\\x93NUMPY': a .npy with a "
                               "header, not a headerless OLMo token file (format npy reads it)");
  }
  const int size = TokenDTypeSize(type);
  if (t.size() % static_cast<std::uint64_t>(size) != 0) {
    ThrowInvalid("tokens", path + ": size: " + std::to_string(t.size()) +
                               " bytes is not a whole number of " +
                               std::string(TokenDTypeName(type)) +
                               " tokens (wrong token_dtype, or truncated?)");
  }
  part.tokens = t.data();
  part.type = type;
  part.num_tokens = static_cast<Index>(t.size() / static_cast<std::uint64_t>(size));
  std::string how;
  if (options.eos_token_id) {
    CacheKey key{type,         *options.eos_token_id, options.bos_token_id.value_or(-1),
                 StatOf(path), OlmoSampleHash(bytes), part.num_tokens};
    const std::string cache_path = OlmoCachePath(path, options);
    std::string problem = "absent";
    std::error_code ec;
    if (std::filesystem::exists(cache_path, ec)) {
      try {
        auto cache = std::make_shared<MappedFile>(cache_path, "cache");
        problem = CacheProblem(*cache, key, t.data());
        if (problem.empty()) {
          part.offsets_file = cache;
          part.offsets = cache->data() + kOlmoCacheHeaderBytes;
          part.num_documents = static_cast<Index>(Load<std::uint64_t>(cache->data() + 64)) - 1;
          how = "cache " + cache_path + " (reused)";
        }
      } catch (const std::invalid_argument& e) {
        problem = std::string("unreadable: ") + e.what();
      }
    }
    if (part.offsets == nullptr) {
      auto offsets = std::make_shared<std::vector<std::int64_t>>(ScanOlmoDocuments(
          t.data(), type, part.num_tokens, *options.eos_token_id, options.bos_token_id));
      part.owned_offsets = offsets;
      part.offsets = reinterpret_cast<const char*>(offsets->data());
      part.num_documents = static_cast<Index>(offsets->size()) - 1;
      if (!options.write_cache) {
        how = "scan (cache not written: write_cache is off)";
      } else {
        try {
          WriteFileAtomically(cache_path, CacheBytes(key, *offsets), "cache");
          how = "cache " + cache_path +
                (problem == "absent" ? std::string(" (built)") : " (rebuilt: " + problem + ")");
        } catch (const std::invalid_argument& e) {
          how = std::string("scan (cache not written: ") + e.what() + ")";
        }
      }
    }
  } else {
    const std::string metadata = OlmoMetadataPath(path);
    std::error_code ec;
    if (!std::filesystem::exists(metadata, ec)) {
      ThrowInvalid("eos_token_id", path + ": no metadata file " + metadata +
                                       "; give eos_token_id to find the documents by an EOS "
                                       "scan");
    }
    auto offsets = std::make_shared<std::vector<std::int64_t>>(ParseOlmoMetadata(
        ReadGzipFile(metadata, kMaxOlmoMetadataBytes), metadata, part.num_tokens, path));
    part.owned_offsets = offsets;
    part.offsets = reinterpret_cast<const char*>(offsets->data());
    part.num_documents = static_cast<Index>(offsets->size()) - 1;
    how = "metadata " + metadata;
  }
  part.offset_size = 8;
  part.offset_signed = true;
  if (origin != nullptr) *origin = how;
  std::shared_ptr<TokenSource> source(new TokenSource());
  source->AddPart(std::move(part));
  return source;
}

}  // namespace shardkit
