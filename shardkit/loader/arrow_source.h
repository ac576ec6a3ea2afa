// Hugging Face `datasets` Arrow files (Arrow IPC, what save_to_disk and the
// datasets cache write) read as token source parts, without copying a token:
// TokenSource::OpenArrow(path, column) (token_source.h).
//
// Read: the Arrow IPC stream format (messages, each 0xFFFFFFFF, an int32
// metadata length, a flatbuffer Message, then its body; the pre-1.0 form
// without the 0xFFFFFFFF too) and the IPC file format ("ARROW1\0\0", the
// same stream, a footer: the stream part is read). Only what a token column
// needs is parsed: the Schema message (little-endian; the field named
// `column` of type list<intN> or large_list<intN>, N = 8, 16, 32, 64, signed
// or not) and every RecordBatch message's field nodes and buffers. Each
// record batch with rows is one part: its list offsets (int32 or int64) and
// its values are viewed in the memory-mapped file; document r of the batch is
// values[offsets[r] : offsets[r + 1]] (a first offset other than 0, as in a
// sliced array, is honoured). Dictionary batches are skipped; the columns
// before `column` are walked only to count their buffers and nodes.
//
// Refused, with std::invalid_argument "path: <file>: <field> ..." naming the
// file, the field (message[i], schema, column, record_batch[b].nodes, ...),
// and the value:
//   - a truncated message or body, a metadata length or buffer outside the
//     file, a flatbuffer offset, vtable, vector or string outside its
//     message (the flatbuffer reader checks every read; nothing is read past
//     the file's end);
//   - a big-endian schema, a missing column (the columns present are
//     listed), a column of another type (named), a dictionary-encoded
//     column, a column before it of a type whose buffers cannot be counted
//     (unions, view types);
//   - compressed record batches (the codec named: LZ4_FRAME or ZSTD; write
//     with compression off, the `datasets` default);
//   - node or buffer counts short of the schema's, a node length past the
//     batch's, an offsets buffer shorter than rows + 1 offsets, a values
//     buffer shorter than the child's length;
//   - a null list (row named) or a null id inside a list (the column must be
//     lists of ids; drop or fill nulls first);
//   - offsets negative, decreasing (row named) or past the values;
//   - ids outside int32 (uint32 / int64 / uint64 values; one pass at open).
// Batches with no rows are skipped; a file with no rows at all is refused.
//
// Thread-safety: pure functions.
#ifndef SHARDKIT_LOADER_ARROW_SOURCE_H_
#define SHARDKIT_LOADER_ARROW_SOURCE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/loader/token_source.h"

namespace shardkit {

// One record batch of the column: byte positions in the file.
struct ArrowBatch {
  Index rows = 0;
  std::uint64_t offsets_at = 0;  // rows + 1 offsets of `offset_size` bytes
  std::uint64_t values_at = 0;   // the child's values
  Index num_values = 0;          // the child's length
};

struct ArrowColumn {
  TokenDType dtype = TokenDType::kInt32;
  int offset_size = 4;  // 4: list, 8: large_list
  std::vector<ArrowBatch> batches;
  std::vector<std::string> columns;  // every top-level column's name
};

// Parses the IPC bytes `file` (of `path`) for the list column `column`, as
// the header comment says, validating every batch's offsets. Throws
// invalid_argument "path: <path>: ...".
[[nodiscard]] ArrowColumn ParseArrowIpc(std::string_view file, const std::string& path,
                                        std::string_view column);

// The .arrow files of a `datasets` save_to_disk folder, in the order of its
// state.json "_data_files". Throws invalid_argument naming path (no
// state.json, a DatasetDict folder: name a split's folder, a listed file
// missing).
[[nodiscard]] std::vector<std::string> ArrowFilesOfFolder(const std::string& folder);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_ARROW_SOURCE_H_
