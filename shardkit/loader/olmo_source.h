// OLMo / Dolma token files (what the Dolma toolkit's `dolma tokens` writes and
// OLMo-core's NumpyDocumentSource reads) as a token source part:
// TokenSource::OpenOlmo(path, options) (token_source.h).
//
// The file: headerless little-endian token ids, one dtype (uint8, uint16,
// uint32 or uint64; conventionally named *.npy although it has no NumPy
// header), documents back to back. Its dtype is OlmoOptions::token_dtype, or
// the smallest of uint8/16/32/64 holding vocab_size - 1 (OLMo-core's
// NumpyDocumentSourceConfig.get_dtype rule); one of the two is required.
//
// Documents, by OLMo-core's rule (olmo_core/data/utils.py
// iter_document_indices and composable/numpy_document_source.py
// get_document_offsets):
//   - eos_token_id given: an EOS scan of the tokens. Without a BOS id each
//     EOS ends a document (document = [start, eos + 1)); with bos_token_id,
//     an EOS ends a document only where a BOS follows it, or at the file's
//     last token. Tokens after the last boundary are one more document (the
//     end of a file always ends a document). The scan is done once and
//     cached beside the data (see "The scan cache").
//   - otherwise: the sibling metadata file, PATH with ".npy" replaced by
//     ".csv.gz" (PATH + ".csv.gz" when PATH does not end in .npy), gzip text
//     of "start,end[,...]" rows, one a document. The rows must tile the
//     tokens: row 1 starts at 0, each next row where the previous ended,
//     end >= start, the last ends at the token count.
//
// Refused, with std::invalid_argument "<param>: <file>: <field> ..." naming
// the file, the field and the value (param: tokens, token_dtype,
// vocab_size, eos_token_id, bos_token_id, metadata):
//   - no dtype and no vocab_size; a vocab_size < 1;
//   - a file whose size is not a whole number of tokens of the dtype (wrong
//     dtype, or truncated); a file that starts with the NumPy magic (a .npy
//     with a header is format npy, not a headerless OLMo file);
//   - an EOS or BOS id negative or outside the dtype; a BOS without an EOS;
//   - no metadata file and no eos_token_id;
//   - a metadata file that is not gzip, is truncated or corrupt, holds more
//     than kMaxOlmoMetadataBytes, or a row with fewer than two fields, a field
//     that is not a non-negative integer, a start that is not where the
//     previous row ended, end < start, end past the token count, or rows
//     ending before the last token (the metadata of another file);
//   - uint32 / uint64 ids of 2^31 or more (ids are delivered as int32; one
//     pass at open, as for every part).
//
// The scan cache: PATH + ".shardkit-docs-eos<E>[-bos<B>]", little-endian:
//   offset  0  magic "SKDOCS1\0"     8 bytes
//           8  version               uint64, 1
//          16  data size             uint64, bytes of PATH when built
//          24  data mtime            int64, ns since the epoch
//          32  token dtype           uint64 (TokenDType)
//          40  eos id, 48 bos id     int64 (bos -1: none)
//          56  data sample hash      uint64 (OlmoSampleHash of PATH)
//          64  offset count          uint64 n (documents + 1)
//          72  checksum              uint64: Hasher over bytes [0, 72) + offsets
//          80  offsets               int64[n], mapped in place when reused
// A cache is reused only when it proves itself against the data: size of
// the cache = 80 + 8n, magic, version, checksum, dtype/eos/bos equal to the
// options, the data's size and mtime equal to the recorded ones, the sample
// hash recomputed from the data equal, offsets from 0 non-decreasing to the
// token count, and (up to kOlmoBoundaryChecks of them, spread evenly) each
// inner boundary an EOS (followed by the BOS). Otherwise it is rebuilt by a
// new scan (never refused: it is derived data), and `origin` says why
// ("rebuilt: stale: <file> changed: size ..."). The cache is written with
// WriteFileAtomically; when that fails (a read-only directory) the scan's
// offsets are kept in memory and `origin` says "not written: <why>".
//
// Thread-safety: pure functions over the files named; concurrent openers of
// one file may each write the cache (atomic renames of identical bytes).
#ifndef SHARDKIT_LOADER_OLMO_SOURCE_H_
#define SHARDKIT_LOADER_OLMO_SOURCE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/loader/token_source.h"

namespace shardkit {

struct OlmoOptions {
  std::optional<TokenDType> token_dtype;     // the file's dtype, or
  std::optional<Index> vocab_size;           // the smallest unsigned dtype holding it
  std::optional<std::int64_t> eos_token_id;  // given: documents from an EOS scan
  std::optional<std::int64_t> bos_token_id;  // REQUIRES eos_token_id
  bool write_cache = true;                   // false: scan, use, write nothing
};

inline constexpr std::uint64_t kMaxOlmoMetadataBytes = std::uint64_t{1} << 34;
inline constexpr Index kOlmoBoundaryChecks = 4096;
inline constexpr std::uint64_t kOlmoCacheHeaderBytes = 80;

// The dtype the options give (token_dtype, else from vocab_size); throws
// invalid_argument naming token_dtype / vocab_size.
[[nodiscard]] TokenDType OlmoTokenDType(const OlmoOptions& options);
// The metadata file beside `path` and the scan cache for `options`.
[[nodiscard]] std::string OlmoMetadataPath(const std::string& path);
[[nodiscard]] std::string OlmoCachePath(const std::string& path, const OlmoOptions& options);

// Document offsets (num_documents + 1 entries) of `num_tokens` tokens of
// `type` at `tokens` by the EOS scan above. REQUIRES: eos (and bos when
// given) validated inside the dtype.
[[nodiscard]] std::vector<std::int64_t> ScanOlmoDocuments(const char* tokens, TokenDType type,
                                                          Index num_tokens, std::int64_t eos,
                                                          std::optional<std::int64_t> bos);
// Document offsets from the decompressed text of a metadata file, validated
// against `num_tokens` tokens of `data_path` as above.
[[nodiscard]] std::vector<std::int64_t> ParseOlmoMetadata(std::string_view text,
                                                          const std::string& metadata_path,
                                                          Index num_tokens,
                                                          const std::string& data_path);
// The decompressed bytes of a gzip file; throws invalid_argument naming
// metadata (not gzip, truncated, corrupt, larger than max_bytes).
[[nodiscard]] std::string ReadGzipFile(const std::string& path, std::uint64_t max_bytes);
// A cache's bytes sealed for the data file `path`: its size, mtime and
// sample hash written in, the checksum recomputed, the rest as given (a tool
// for tests and the fuzzer: what a writer who forges a cache would do, so
// that the structural checks behind the seal are reached). REQUIRES:
// cache.size() >= kOlmoCacheHeaderBytes; the offset count field is clamped to
// what the bytes hold.
[[nodiscard]] std::string ResealOlmoCache(std::string cache, const std::string& path);
// A hash of the data's size, its first and last 4 KiB and 4096 16-byte
// windows spread over it: what a cache records of the bytes it was built from.
[[nodiscard]] std::uint64_t OlmoSampleHash(std::string_view data);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_OLMO_SOURCE_H_
