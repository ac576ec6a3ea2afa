// Megatron-LM IndexedDataset (megatron/core/datasets/indexed_dataset.py: the
// files IndexedDatasetBuilder and tools/preprocess_data.py write) read as a
// token source part: TokenSource::OpenMegatron(prefix) (token_source.h).
//
// PREFIX.idx, little-endian, packed (no alignment):
//   offset  0  magic             9 bytes "MMIDIDX\x00\x00"
//   offset  9  version           uint64, 1
//   offset 17  dtype code        uint8: 1 uint8, 2 int8, 3 int16, 4 int32,
//                                5 int64, 6 float64, 7 float32, 8 uint16
//   offset 18  sequence_count    uint64 S
//   offset 26  document_count    uint64 D (documents + 1: the entries below)
//   offset 34  sequence_lengths  int32[S]  tokens of each sequence
//              sequence_pointers int64[S]  byte offset of each in PREFIX.bin
//              document_indices  int64[D]  document d is the sequences
//                                          [document_indices[d], [d + 1])
//              sequence_modes    int8[S]   only in multimodal indices
// PREFIX.bin holds the sequences' tokens back to back, nothing else.
//
// ParseMegatronIndex validates all of it from the index and the .bin's size
// alone (no token is read), reading nothing past the index's end:
//   - the header (34 bytes), the magic, the version, the dtype code (float
//     dtypes refused by name: tokens are integers);
//   - the file size equals what S and D promise, with or without the modes
//     (a lying count or a truncated file fails here, before any array is read);
//   - every length >= 0; sequence_pointers[0] = 0 and every next pointer = the
//     previous + its length * the token size (a pointer past the end of the
//     .bin is named as such); the .bin's size = the sum of lengths * size;
//   - document_indices[0] = 0, non-decreasing, the last = S;
//   - sequence modes, when present, all 0 (text): a non-text sequence (an
//     image of a multimodal index) is refused naming the sequence and mode.
// Errors: std::invalid_argument "path: <file>: <field> ..." naming the file,
// the field (magic, version, dtype, sequence_count, document_count,
// sequence_lengths[i], sequence_pointers[i], document_indices[i],
// sequence_modes[i], size) and the value.
//
// Thread-safety: pure functions.
#ifndef SHARDKIT_LOADER_MEGATRON_SOURCE_H_
#define SHARDKIT_LOADER_MEGATRON_SOURCE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "shardkit/base/index.h"
#include "shardkit/loader/token_source.h"

namespace shardkit {

inline constexpr std::string_view kMegatronMagic{"MMIDIDX\0\0", 9};
inline constexpr std::uint64_t kMegatronHeaderBytes = 34;

// The layout of a validated index: byte offsets of its arrays in the .idx.
struct MegatronIndex {
  TokenDType dtype = TokenDType::kInt32;
  Index num_sequences = 0;
  Index num_documents = 0;  // document_count - 1
  Index num_tokens = 0;     // the sum of the sequence lengths
  std::uint64_t lengths_offset = kMegatronHeaderBytes;
  std::uint64_t pointers_offset = 0;
  std::uint64_t documents_offset = 0;
  bool has_modes = false;
  // document_indices[d] = d for every d: each document is one sequence (what
  // preprocess_data.py writes without --split-sentences).
  bool one_sequence_per_document = false;
};

// The Megatron dtype code's name ("uint8" ... "uint16"), or "" for a code
// outside 1..8.
[[nodiscard]] std::string_view MegatronDTypeName(int code);

// The Megatron dtype code that stores `type` (1 uint8 ... 8 uint16), or 0
// where Megatron has none (uint32, uint64): the table ParseMegatronIndex
// reads the code with.
[[nodiscard]] int MegatronDTypeCode(TokenDType type);

// Validates the index bytes `idx` (of the file `idx_path`) against the data
// file `bin_path` of `bin_size` bytes, as the header comment says; returns
// the layout. Throws invalid_argument "path: <file>: <field> ...".
[[nodiscard]] MegatronIndex ParseMegatronIndex(std::string_view idx, const std::string& idx_path,
                                               std::uint64_t bin_size, const std::string& bin_path);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_MEGATRON_SOURCE_H_
