// TokenWriter: documents of token ids written as a source shardkit and its
// peers read: a Megatron-LM IndexedDataset (PREFIX.bin + PREFIX.idx, the
// layout in megatron_source.h; one sequence per document, as megatron-core's
// IndexedDatasetBuilder.add_document writes) or shardkit's npy pair
// (PREFIX.tokens.npy + PREFIX.offsets.npy, int64 offsets).
//
// Files are written under temporary names (<file>.tmp.<pid>) and renamed by
// Finish, the data first and the index last, so an interrupted run leaves no
// output that looks complete; a writer destroyed before Finish removes its
// temporaries. Token ids are checked against the dtype as they are added.
//
// Thread-safety: one writer, one thread.
#ifndef SHARDKIT_LOADER_TOKEN_WRITER_H_
#define SHARDKIT_LOADER_TOKEN_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/loader/source_formats.h"
#include "shardkit/loader/token_source.h"

namespace shardkit {

struct TokenWriterResult {
  Index documents = 0;
  Index tokens = 0;
  std::vector<std::string> files;  // the data file, then the index / offsets file
};

class TokenWriter {
 public:
  // Opens the temporaries of `output` (a prefix). `dtype`: uint8, uint16,
  // int32 (Megatron: any dtype it has a code for except float; npy: uint16,
  // int32 or uint32). Throws invalid_argument naming token_dtype or output
  // (a file that cannot be created).
  TokenWriter(std::string output, SourceFormat format, TokenDType dtype);
  ~TokenWriter();
  TokenWriter(const TokenWriter&) = delete;
  TokenWriter& operator=(const TokenWriter&) = delete;

  // The smallest dtype Megatron's preprocess_data.py picks for a vocabulary
  // of `vocab_size` ids: uint16 below 65500, else int32.
  [[nodiscard]] static TokenDType DTypeForVocabulary(Index vocab_size);

  // Appends one document. Throws invalid_argument naming tokens (document
  // number, position, value) when an id does not fit the dtype; nothing of
  // that document is written then.
  void Add(const std::int64_t* tokens, Index count);
  // Writes the index and renames every file into place; the writer is done.
  // Throws invalid_argument naming output on an I/O error.
  TokenWriterResult Finish();

 private:
  void Write(const void* data, std::size_t bytes);
  std::string output_;
  SourceFormat format_;
  TokenDType dtype_;
  std::string data_path_, index_path_, data_tmp_, index_tmp_;
  std::FILE* data_ = nullptr;
  std::vector<std::int64_t> offsets_{0};  // token offsets of the documents
  std::vector<char> buffer_;
  bool finished_ = false;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_TOKEN_WRITER_H_
