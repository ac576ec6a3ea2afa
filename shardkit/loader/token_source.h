// TokenSource: tokenised documents read in place from memory-mapped files (or
// from memory the caller owns), numbered 0 .. num_documents() - 1.
//
// A part is a flat token array plus a document-offsets array: document d of
// the part is tokens[offsets[d] : offsets[d + 1]], so offsets has
// num_documents + 1 entries. Tokens are uint16, int32 or uint32; offsets are
// any integer type. Arrays are .npy files (dtype and length from the validated
// header) or raw little-endian files (token dtype given; offsets int64).
// A part may also be a Megatron-LM IndexedDataset (PREFIX.bin + PREFIX.idx,
// shardkit/loader/megatron_source.h): its documents' offsets are read from
// the index, and its tokens may be any of the integer types below.
// A source of several parts (a directory, a list of prefixes) numbers the
// documents of part 0 first, then part 1, and so on; a document never spans
// parts.
//
// Everything is validated when the source is opened: only regular files are
// read (a FIFO, a device or a directory is refused by name, never waited on),
// headers, file sizes (exactly what the header promises), offsets
// non-decreasing and within the token array, and, for files, the last offset
// equal to the token count (every token of a file is in a document, so a
// truncated offsets file is caught). The offsets are checked in one pass
// that also hashes every length (LengthsDigest), a block at a time, and
// releases the pages it has read from the process (an offsets file of 10^8
// documents is 800 MB: the page cache keeps it, the resident set does not
// grow by it; a later read maps a page again). Errors are
// std::invalid_argument "tokens: <file>: ..." / "offsets: <file>: ..." (or
// "directory: ..."), naming the file. After that, reading never throws.
// Token ids are delivered as int32; uint32 and uint64 ids must be below 2^31
// and int64 ids inside the int32 range (checked when the source is opened, one pass over
// such a part's tokens; invalid_argument naming tokens and the position).
//
// Files changed after opening: the files are mapped, not copied (an offsets
// array of 10^8 documents is 800 MB), so bytes written into them later reach
// the reader, and touching a page past a shrunk file's new end raises SIGBUS
// (the kernel's rule for a shared mapping). So a reader asks CheckUnchanged
// before it reads: one fstat of each file's open descriptor, compared with the
// size and modification time recorded when it was opened; a file
// truncated, extended or written since is refused with invalid_argument
// "<param>: <file>: changed since it was opened (size 800000 -> 4096)". The
// TokenLoader checks the files lengths come from before it plans each batch,
// and the files of its documents before it copies it and again after; the
// Python source checks before and after each document. write(2) stamps the
// modification time before it copies its bytes, so a copy that read any byte
// such a write put there is refused by the check after it. Not covered: a
// file cut between the check and the read still raises SIGBUS, and one
// written through a shared mapping of its own (its time is stamped later), within the
// file system's timestamp granularity at the same size, or by a writer that
// sets the old modification time back delivers unspecified tokens; keep data files
// immutable and write new versions under new names (a file replaced by rename
// is not a change: the opened one stays mapped). Whatever the bytes become,
// reading never leaves the mapping: every offset read (and a Megatron index's
// sequence id) is clamped to [0, num_tokens] of its part, DocumentLength is
// then >= 0, and Copy delivers zeros for tokens past the part's end. A
// source that reads with pread (WithReads(ReadMode::kPread)) never faults
// on a cut file: a read past its end gives zeros and the next check refuses
// the file (MappedFile::ReadAt).
//
// Thread-safety: immutable after construction; share freely. Memory is the
// mapped files (paged in on demand) plus O(number of parts).
#ifndef SHARDKIT_LOADER_TOKEN_SOURCE_H_
#define SHARDKIT_LOADER_TOKEN_SOURCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit {

// The first three are the dtypes of .npy token files and arrays; every one
// may be a raw file's (SourceOptions) or a Megatron part's; uint64 is an OLMo
// token file's (shardkit/loader/olmo_source.h).
enum class TokenDType { kUint16, kInt32, kUint32, kUint8, kInt8, kInt16, kInt64, kUint64 };

// "uint16" | "int32" | "uint32" | "uint8" | "int8" | "int16" | "int64" |
// "uint64"; throws invalid_argument naming token_dtype.
[[nodiscard]] TokenDType ParseTokenDType(std::string_view name);
[[nodiscard]] std::string_view TokenDTypeName(TokenDType type);
// Bytes per token of `type` (1, 2, 4 or 8).
[[nodiscard]] int TokenDTypeSize(TokenDType type);

// How a source's sparse reads reach its files (LoaderOptions::read):
// kMmap loads from the memory maps; kPread reads the bytes a document's
// length and tokens need with pread(2) into memory of its own, so a read maps
// nothing into the process. On this kind of machine a fault on a mapped file
// maps 64 KB around the byte (fault-around) or the whole large folio the page
// cache holds it in (up to 2 MB): a mixture's first batch reads a few
// thousand places at random in each source and mapped them most of its files
// (870 MB resident at 10^8 documents, docs/benchmarks.md) where pread keeps
// the resident set at the bytes read. A pread is a system call per read
// (about 1 us against a load from a mapped page), so a reader of every
// length in order is faster mapped. kAuto: pread for the sources of a
// mixture loader (each source is read in a permuted order), mmap otherwise.
enum class ReadMode { kAuto, kMmap, kPread };

// "auto" | "mmap" | "pread"; throws invalid_argument naming read.
[[nodiscard]] ReadMode ParseReadMode(std::string_view name);
[[nodiscard]] std::string_view ReadModeName(ReadMode mode);

struct OlmoOptions;  // shardkit/loader/olmo_source.h

// A read-only memory map of a whole file, and its descriptor for pread
// (ReadAt); unmapped on destruction.
class MappedFile {
 public:
  // Throws invalid_argument "<param>: cannot open '<path>': <reason>".
  MappedFile(const std::string& path, std::string_view param);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  [[nodiscard]] const char* data() const { return data_; }
  [[nodiscard]] std::uint64_t size() const { return size_; }
  [[nodiscard]] const std::string& path() const { return path_; }
  // Advises the kernel that the map is read at random (madvise MADV_RANDOM:
  // no read-ahead around a page fault). For token files: a shuffled epoch
  // reads documents in random order and the data fingerprint samples 4096
  // windows spread over the file; with read-ahead every such fault reads
  // read_ahead_kb around it (8 MB on some machines: 32 GB for one fingerprint
  // of a 120 GB file). Advice only: a failure is ignored.
  void AdviseRandom() const;
  // Drops this process's mapping of the pages of bytes [0, end) (madvise
  // MADV_DONTNEED; the file and the page cache are unchanged, a later read
  // maps them again): a pass over a large file at open does not leave it
  // all in the process's resident set. Advice only: a failure is ignored.
  void Release(std::uint64_t end) const;
  // Throws invalid_argument "<param>: <path>: changed since it was opened
  // (size A -> B)" (or "(same size A, written: modification time ...)") when
  // an fstat of the file's descriptor, kept open for this, finds another size
  // or modification time than at open (chmod, links, reads change neither).
  // Descriptors are kept for a quarter of RLIMIT_NOFILE's files at most (a
  // source of thousands of files must not exhaust it); past that the path is
  // stat'ed, and a file renamed over it counts as changed too ("(replaced:
  // inode A -> B)"). One system call; thread-safe.
  // Also throws it (naming the byte and why) after a ReadAt found the file
  // shorter than at open or failed.
  void CheckUnchanged() const;
  // Copies the n bytes at p (inside [data(), data() + size())) into out with
  // pread(2) from the file's descriptor, not through the map (kPread); past
  // the descriptor budget (see below), from the map. A read that finds the
  // file shorter than at open, or fails, fills the rest of out with zeros
  // and is remembered: every later CheckUnchanged throws, so such bytes are
  // never delivered as valid data by a reader that checks after it reads
  // (the TokenLoader does). Never throws; thread-safe.
  void ReadAt(const char* p, std::size_t n, void* out) const;

 private:
  std::string path_;
  std::string param_;
  const char* data_ = nullptr;
  std::uint64_t size_ = 0;
  int fd_ = -1;  // -1: past the descriptor budget, the path is stat'ed
  std::int64_t mtime_ns_ = 0;
  std::uint64_t device_ = 0, inode_ = 0;
  // ReadAt's first failure: the byte it read at, and errno (0: the file ended
  // there). -1: none.
  mutable std::atomic<std::int64_t> failed_at_{-1};
  mutable std::atomic<int> failed_errno_{0};
};

struct SourceOptions {
  // The dtype of raw (not .npy) token files; .npy files carry their own.
  TokenDType raw_token_dtype = TokenDType::kInt32;
};

class TokenSource {
 public:
  // One part from a tokens file and an offsets file.
  static std::shared_ptr<const TokenSource> Open(const std::string& tokens_path,
                                                 const std::string& offsets_path,
                                                 SourceOptions options = {});
  // Every part of a directory: files named <stem>.tokens.npy (or .tokens.bin)
  // with <stem>.offsets.npy (or .offsets.bin) beside them, in stem order.
  // Throws invalid_argument naming directory when it holds no parts or a
  // tokens file lacks its offsets file.
  static std::shared_ptr<const TokenSource> OpenDirectory(const std::string& directory,
                                                          SourceOptions options = {});
  // A Megatron-LM IndexedDataset: PREFIX.bin and PREFIX.idx, validated as
  // shardkit/loader/megatron_source.h says (errors name the file, the field
  // and the value). One part; document d is the run of sequences
  // [document_indices[d], document_indices[d + 1]). Defined in
  // megatron_source.cc.
  static std::shared_ptr<const TokenSource> OpenMegatron(const std::string& prefix);
  // An OLMo / Dolma headerless token file, its documents from its .csv.gz or
  // an EOS scan, as shardkit/loader/olmo_source.h says. One part. `origin`,
  // when given, receives where the documents came from (the metadata file,
  // or the scan cache and whether it was reused, built or rebuilt and why).
  // Defined in olmo_source.cc.
  // The list<intN> / large_list<intN> column `column` of an Arrow IPC file
  // (stream or file format: what `datasets` writes), as
  // shardkit/loader/arrow_source.h says: one part per record batch with
  // rows, tokens and offsets viewed in the mapped file. Defined in
  // arrow_source.cc.
  static std::shared_ptr<const TokenSource> OpenArrow(const std::string& path,
                                                      const std::string& column);
  static std::shared_ptr<const TokenSource> OpenOlmo(const std::string& path,
                                                     const OlmoOptions& options,
                                                     std::string* origin = nullptr);
  // The parts of `sources` (files or memory, not gathered views) as one
  // source: the documents of sources[0] first, then sources[1]'s, ... No
  // data is copied (the parts share their maps). Throws invalid_argument
  // naming `sources` when it is empty, holds a null or a gathered source, or
  // the totals overflow.
  static std::shared_ptr<const TokenSource> Concat(
      const std::vector<std::shared_ptr<const TokenSource>>& sources);
  // A view of caller-owned tokens (they must outlive the source and not
  // change) and a copy of `offsets` (num_documents + 1 entries, validated
  // like files; later changes to the caller's array do not reach the source).
  static std::shared_ptr<const TokenSource> FromMemory(const void* tokens, TokenDType type,
                                                       Index num_tokens,
                                                       const std::int64_t* offsets,
                                                       Index num_offsets);

  // A view that gathers documents of other sources (an order stage such as
  // a mixture, shardkit/loader/mixture_loader.h): document i of the view is
  // document documents[i] of the concatenation of `sources` (source 0's
  // documents first, then source 1's, ...). A document may appear more than
  // once. The view is one part; `identity` (e.g. a hash of what chose the
  // documents) is mixed into its data fingerprint, so a loader state of one
  // view is refused by another with the same lengths. Throws
  // invalid_argument naming `sources` (none, or a null one) or `documents`
  // (an id outside the concatenation, naming the entry) or the token total
  // overflowing. O(documents) memory (8 bytes each).
  static std::shared_ptr<const TokenSource> Gather(
      std::vector<std::shared_ptr<const TokenSource>> sources, std::vector<std::int64_t> documents,
      std::uint64_t identity);

  // A view whose documents are chosen by a rule with random access (an order
  // stage such as a mixture's window, mixture_loader.h): document i of the
  // view is document `item` of sources[source], (source, item) = locate(i),
  // computed when the document is read. O(K) memory, nothing is read when
  // the view is made: its num_tokens() is one pass over its lengths, made on
  // the first call (FingerprintData does not make it: the view's data
  // fingerprint is its identity and its sources' sampled digests,
  // loader_state.h). `identity` must determine `locate` (e.g. a hash of the
  // rule's parameters). REQUIRES (unchecked after the first document):
  // locate is pure and thread-safe, 0 <= source < sources.size(), 0 <= item <
  // that source's documents for every i in [0, count). Throws
  // invalid_argument naming `sources` (none, a null or a gathered one) or
  // `count` (< 0), or `documents` for a first document outside its source.
  using Locator = std::function<void(Index i, Index* source, Index* item)>;
  static std::shared_ptr<const TokenSource> Select(
      std::vector<std::shared_ptr<const TokenSource>> sources, Index count, Locator locate,
      std::uint64_t identity);

  [[nodiscard]] Index num_documents() const { return num_documents_; }
  // Select's views: computed on the first call (one pass over the lengths;
  // throws invalid_argument naming `documents` when the total overflows).
  [[nodiscard]] Index num_tokens() const;
  // Select's views: their sources (empty for any other source).
  [[nodiscard]] const std::vector<std::shared_ptr<const TokenSource>>& selected_from() const;
  [[nodiscard]] Index num_parts() const { return static_cast<Index>(parts_.size()); }
  // Documents [PartBegin(p), PartBegin(p + 1)) are part p's.
  [[nodiscard]] Index PartBegin(Index part) const;
  [[nodiscard]] const std::string& PartName(Index part) const { return parts_[part].name; }
  // Gather's identity (0 for a source of files or memory).
  [[nodiscard]] std::uint64_t identity() const { return identity_; }
  // A digest of every document's length: per part, Hasher::AddArray of its
  // lengths (blocks of Hasher::kArrayBlock) and its document count, then the
  // parts in order. Parts of .npy / raw files and memory compute theirs in
  // the validation pass that opens them (the same pass over the offsets, at
  // hash speed); other parts (Megatron, OLMo, Arrow) on the first call, one
  // pass over their lengths (Lengths). Sources with equal lengths part by
  // part have equal digests; one length changed anywhere changes it (up to
  // the hash's collisions). Views (Gather, Select): 0.
  [[nodiscard]] std::uint64_t LengthsDigest() const;

  // This source with its document lengths and tokens read as `mode` says
  // (kAuto, kMmap: from the maps; kPread: with MappedFile::ReadAt, a few
  // pread calls per document), sharing its files; a view's sources are read
  // so. The documents delivered are the same in both modes. Bulk passes
  // (opening, LengthsDigest, Lengths' blocks, ContiguousOffsets for a plan
  // that reads every length) keep their sequential reads (blocks read with
  // pread in kPread; ContiguousOffsets stays a pointer into the map). O(parts),
  // plus a copy of a Gather view's document ids.
  [[nodiscard]] std::shared_ptr<const TokenSource> WithReads(ReadMode mode) const;
  // kPread when WithReads(kPread) made this source, else kMmap.
  [[nodiscard]] ReadMode reads() const { return reads_; }

  // Drops this process's mappings of the source's files (MappedFile::Release
  // of every part's tokens, offsets and index files; nothing for memory or
  // views): what a sparse pass such as a sampled fingerprint faulted in
  // (the kernel maps 64 KB or more around each touched byte) leaves the
  // resident set. The data stays in the page cache; later reads map it again.
  void ReleasePages() const;

  // MappedFile::CheckUnchanged of every file the source reads (every part's
  // tokens, offsets and index files; a view's: its sources'); nothing for
  // memory. Throws invalid_argument naming the first changed file.
  // CheckLengthsUnchanged checks only the files lengths are read from
  // (offsets, index, scan cache: what a planner reads). The forms with
  // documents check only the files of the parts that hold them, each file
  // once (what one batch's copies read).
  // REQUIRES: 0 <= d < num_documents() for each document d given.
  void CheckUnchanged() const;
  void CheckLengthsUnchanged() const;
  // CheckLengthsUnchanged of part `part`'s lengths file alone (a reader of
  // a source of many files checks the parts it reads, not all of them).
  // REQUIRES: not a view; 0 <= part < num_parts().
  void CheckLengthsUnchanged(Index part) const;
  // The part document d is in. REQUIRES: not a view; 0 <= d < num_documents().
  [[nodiscard]] Index PartIndex(Index d) const;
  void CheckUnchanged(Index d) const;
  void CheckUnchanged(std::span<const Index> documents) const;
  // The files CheckUnchanged(documents) checks, appended to *files (each
  // once, not those already there), and their check: a reader that checks
  // the same documents before and after it reads them (the TokenLoader's
  // batches) looks the files up once.
  void DocumentFiles(std::span<const Index> documents, std::vector<const MappedFile*>* files) const;
  static void CheckFiles(std::span<const MappedFile* const> files);

  // Length in tokens of document d. REQUIRES: 0 <= d < num_documents().
  [[nodiscard]] Index DocumentLength(Index d) const;
  // Every document's offsets as one array of num_documents() + 1 8-byte
  // integers (DocumentLength(d) = offsets[d + 1] - offsets[d], each offset
  // clamped to [0, num_tokens()]: a mapped file's bytes may have changed
  // since they were validated, see above) when the source
  // is one part with 8-byte, 8-byte-aligned offsets (memory, or an int64 /
  // uint64 file; all validated below 2^63); nullptr otherwise (several parts,
  // narrower offsets, a gathered view). A planner that reads the lengths of
  // a whole epoch in shuffled order reads them from here, without a call per
  // document.
  [[nodiscard]] const std::int64_t* ContiguousOffsets() const;
  // The same for a source that is one Megatron part whose documents are one
  // sequence each (what preprocess_data.py and `shardkit prepare` write): its
  // num_documents() little-endian int64 byte pointers, as mapped (not aligned:
  // read them with memcpy), and log2 of the token size in *shift. Then
  // DocumentLength(d) = max(0, c(d + 1) - c(d)) where c(i) = clamp(pointer[i]
  // >> shift, 0, num_tokens()) and c(num_documents()) = num_tokens(). nullptr
  // for any other source.
  [[nodiscard]] const char* ContiguousSequencePointers(int* shift) const;
  // out[i] = DocumentLength(begin + i) for i < count, one tight loop per part
  // (what a pass over every length, such as a fingerprint, calls).
  // REQUIRES: 0 <= begin, begin + count <= num_documents().
  void Lengths(Index begin, Index count, Index* out) const;
  // out[i] = token begin + i of document d, for i < count.
  // REQUIRES: 0 <= begin, begin + count <= DocumentLength(d) (a length read
  // before a file changed in place gives unspecified tokens, never a read
  // outside the mapping).
  void Copy(Index d, Index begin, Index count, std::int32_t* out) const;
  void Copy(Index d, Index begin, Index count, std::int64_t* out) const;

 private:
  struct Part {
    std::string name;
    std::shared_ptr<MappedFile> tokens_file, offsets_file;
    std::shared_ptr<const std::vector<std::int64_t>> owned_offsets;  // FromMemory's copy
    const char* tokens = nullptr;
    TokenDType type = TokenDType::kInt32;
    Index num_tokens = 0;
    const char* offsets = nullptr;
    int offset_size = 8;
    bool offset_signed = true;
    Index num_documents = 0;
    Index first_document = 0;  // global id of the part's document 0
    // A Megatron part (sequence_pointers set): offsets are not stored;
    // offset i is the token position of sequence s = document_indices[i]
    // (its byte pointer >> token_shift, or num_tokens past the last
    // sequence). document_indices is null when every document is one
    // sequence (s = i: one load per offset, as for an offsets array). Both
    // arrays are little-endian int64, validated when opened.
    std::shared_ptr<MappedFile> index_file;
    const char* sequence_pointers = nullptr;  // num_sequences entries
    const char* document_indices = nullptr;   // num_documents + 1 entries
    Index num_sequences = 0;
    int token_shift = 0;  // log2 of the token size
    // The part's LengthsDigest term when its opening pass computed it.
    std::optional<std::uint64_t> lengths_digest;
    // kPread (WithReads): the files the offsets (or a Megatron part's index
    // arrays) and the tokens are read from with ReadAt; null: from the map
    // or memory.
    const MappedFile* offsets_in = nullptr;
    const MappedFile* tokens_in = nullptr;
    // Offset i as the file holds it now; Offset clamps it to [0, num_tokens].
    [[nodiscard]] Index RawOffset(Index i) const;
    [[nodiscard]] Index Offset(Index i) const;
    // out[j] = Offset(i + j) for j < n: one read per kOffsetsBlock entries
    // when the part's offsets are one array (or one sequence per document)
    // and it reads with pread.
    static constexpr Index kOffsetsBlock = 512;
    void Offsets(Index i, Index n, Index* out) const;
    // The T at p, an address in the part's offsets or index arrays.
    template <typename T>
    [[nodiscard]] T Get(const char* p) const;
  };
  template <typename Out>
  void CopyInto(Index d, Index begin, Index count, Out* out) const;
  TokenSource() = default;
  void AddPart(Part part);
  static Part OpenPart(const std::string& tokens_path, const std::string& offsets_path,
                       SourceOptions options);
  [[nodiscard]] const Part& PartOf(Index d) const;
  // The mapped file part p's lengths are read from (null: in memory).
  static const MappedFile* LengthsFile(const Part& p);
  // Adds the files of document d's part not in *files.
  void AddDocumentFiles(Index d, std::vector<const MappedFile*>* files) const;
  // CheckUnchanged (every file of every part) or CheckLengthsUnchanged.
  void CheckPartFiles(bool lengths_only) const;

  // Gather's view: the sources, their first global document ids (K + 1) and
  // the gathered ids; Select's: the sources and the locator, and the token
  // total once computed.
  struct Gathered {
    std::vector<std::shared_ptr<const TokenSource>> sources;
    std::vector<Index> begin;
    std::vector<std::int64_t> documents;
    Locator locate;            // set for Select's views
    std::uint64_t serial = 0;  // Select's: a number no other view has (per-thread caches)
    mutable std::once_flag tokens_once;
    mutable Index tokens = 0;
  };
  // The source and its document for document d of a gathered view.
  [[nodiscard]] std::pair<const TokenSource*, Index> Locate(Index d) const;
  // Select's views: document d's length from a per-thread chunk of lengths
  // computed together (the offsets of a chunk's documents are prefetched
  // first: a mixture reads each source in a permuted order, so each offset is
  // a cache miss, and a chunk overlaps them).
  [[nodiscard]] Index SelectedLength(Index d) const;
  // Starts loading document d's offset into the cache (files and memory).
  void PrefetchOffset(Index d) const;

  std::shared_ptr<const Gathered> gathered_;
  std::uint64_t identity_ = 0;
  // LengthsDigest, computed once.
  struct Digest {
    std::once_flag once;
    std::uint64_t value = 0;
  };
  std::shared_ptr<Digest> lengths_digest_ = std::make_shared<Digest>();
  std::vector<Part> parts_;
  ReadMode reads_ = ReadMode::kMmap;
  std::vector<Index> part_begin_;  // parts_.size() + 1 entries
  Index num_documents_ = 0;
  Index num_tokens_ = 0;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_TOKEN_SOURCE_H_
