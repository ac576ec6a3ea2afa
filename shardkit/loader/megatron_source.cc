#include "shardkit/loader/megatron_source.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "shardkit/base/errors.h"

namespace shardkit {

namespace {

// Megatron's DType codes (indexed_dataset.py), by code - 1: the name, and
// the token dtype the code stores (none for the floats).
struct MegatronDType {
  std::string_view name;
  std::optional<TokenDType> token;
};
constexpr std::array<MegatronDType, 8> kCodes{{{"uint8", TokenDType::kUint8},
                                               {"int8", TokenDType::kInt8},
                                               {"int16", TokenDType::kInt16},
                                               {"int32", TokenDType::kInt32},
                                               {"int64", TokenDType::kInt64},
                                               {"float64", std::nullopt},
                                               {"float32", std::nullopt},
                                               {"uint16", TokenDType::kUint16}}};

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

[[noreturn]] void Fail(const std::string& file, std::string_view what) {
  ThrowInvalid("path", file + ": " + std::string(what));
}

std::string Escaped(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

TokenDType DTypeOfCode(int code, const std::string& file) {
  if (code < 1 || code > static_cast<int>(kCodes.size())) {
    std::string codes;
    for (int c = 1; c <= static_cast<int>(kCodes.size()); ++c) {
      codes += (c > 1 ? ", " : "") + Str(c) + " " + std::string(MegatronDTypeName(c));
    }
    Fail(file, "dtype: code " + Str(code) + " is not a Megatron dtype (" + codes + ")");
  }
  const MegatronDType& m = kCodes[static_cast<std::size_t>(code - 1)];
  if (!m.token) {
    Fail(file, "dtype: code " + Str(code) + " (" + std::string(m.name) +
                   ") is not a token dtype; token ids are integers");
  }
  return *m.token;
}

}  // namespace

std::string_view MegatronDTypeName(int code) {
  return code >= 1 && code <= static_cast<int>(kCodes.size())
             ? kCodes[static_cast<std::size_t>(code - 1)].name
             : "";
}

int MegatronDTypeCode(TokenDType type) {
  for (std::size_t i = 0; i < kCodes.size(); ++i) {
    if (kCodes[i].token == type) return static_cast<int>(i) + 1;
  }
  return 0;
}

MegatronIndex ParseMegatronIndex(std::string_view idx, const std::string& idx_path,
                                 std::uint64_t bin_size, const std::string& bin_path) {
  const std::uint64_t size = idx.size();
  if (size < kMegatronHeaderBytes) {
    Fail(idx_path, "header: file of " + Str(static_cast<Index>(size)) +
                       " bytes is shorter than the 34-byte header (truncated?)");
  }
  const char* p = idx.data();
  if (idx.substr(0, kMegatronMagic.size()) != kMegatronMagic) {
    Fail(idx_path, "magic: '" + Escaped(idx.substr(0, kMegatronMagic.size())) +
                       "', expected 'MMIDIDX\\x00\\x00' (not a Megatron index)");
  }
  const auto version = Load<std::uint64_t>(p + 9);
  if (version != 1) {
    Fail(idx_path, "version: " + std::to_string(version) + ", expected 1");
  }
  MegatronIndex m;
  m.dtype = DTypeOfCode(static_cast<unsigned char>(p[17]), idx_path);
  const std::uint64_t token_size = static_cast<std::uint64_t>(TokenDTypeSize(m.dtype));
  const auto sequences = Load<std::uint64_t>(p + 18);
  const auto documents = Load<std::uint64_t>(p + 26);
  // Each count is checked against the bytes it alone needs before the two
  // are combined, so no product overflows; the exact size is checked next.
  const std::uint64_t room = size - kMegatronHeaderBytes;
  if (sequences > room / 12) {
    Fail(idx_path, "sequence_count: " + std::to_string(sequences) +
                       " sequences need more bytes of lengths and pointers than the " +
                       std::to_string(room) +
                       " the file holds after the header (lying count or truncated?)");
  }
  if (documents > room / 8) {
    Fail(idx_path, "document_count: " + std::to_string(documents) +
                       " document indices need more bytes than the " + std::to_string(room) +
                       " the file holds after the header (lying count or truncated?)");
  }
  if (documents == 0) {
    Fail(idx_path,
         "document_count: 0; an index holds documents + 1 document indices (at least one)");
  }
  const std::uint64_t plain = kMegatronHeaderBytes + sequences * 12 + documents * 8;
  if (size == plain + sequences) {
    m.has_modes = sequences > 0;
  } else if (size != plain) {
    Fail(idx_path, "size: " + std::to_string(size) + " bytes, expected " + std::to_string(plain) +
                       " (or " + std::to_string(plain + sequences) +
                       " with sequence modes) for sequence_count " + std::to_string(sequences) +
                       " and document_count " + std::to_string(documents) +
                       " (lying counts or a truncated file?)");
  }
  m.num_sequences = static_cast<Index>(sequences);
  m.num_documents = static_cast<Index>(documents) - 1;
  m.pointers_offset = m.lengths_offset + 4 * sequences;
  m.documents_offset = m.pointers_offset + 8 * sequences;

  const char* lengths = p + m.lengths_offset;
  const char* pointers = p + m.pointers_offset;
  // First every check of the sequences folded into one flag, in a loop with
  // no branch (10^8 sequences in about 0.1 s); only when it fails, the loop
  // below finds the first offending entry and names it. Once false, `valid`
  // stays false, so the sum wrapping after it does not matter.
  bool valid = true;
  std::uint64_t sum = 0;
  for (Index i = 0; i < m.num_sequences; ++i) {
    const auto pointer = Load<std::int64_t>(pointers + 8 * i);
    const auto length = Load<std::int32_t>(lengths + 4 * i);
    valid &= static_cast<std::uint64_t>(pointer) == sum;
    valid &= length >= 0;
    sum += static_cast<std::uint64_t>(static_cast<std::uint32_t>(length)) * token_size;
    valid &= sum <= bin_size;
  }
  std::uint64_t expected = valid ? sum : 0;  // bytes of the sequences before sequence i
  for (Index i = valid ? m.num_sequences : 0; i < m.num_sequences; ++i) {
    const auto pointer = Load<std::int64_t>(pointers + 8 * i);
    if (pointer < 0 || static_cast<std::uint64_t>(pointer) > bin_size) {
      Fail(idx_path, "sequence_pointers[" + Str(i) + "] = " + Str(pointer) + " is outside " +
                         bin_path + " (" + std::to_string(bin_size) + " bytes)");
    }
    if (static_cast<std::uint64_t>(pointer) != expected) {
      Fail(idx_path, "sequence_pointers[" + Str(i) + "] = " + Str(pointer) + ", expected " +
                         std::to_string(expected) +
                         " (the sequences before it, back to back: pointers must match the "
                         "lengths)");
    }
    const auto length = Load<std::int32_t>(lengths + 4 * i);
    if (length < 0) {
      Fail(idx_path, "sequence_lengths[" + Str(i) + "] = " + Str(length) + " is negative");
    }
    // expected <= bin_size < 2^63 and length * token_size < 2^34: no overflow.
    expected += static_cast<std::uint64_t>(length) * token_size;
    if (expected > bin_size) {
      Fail(idx_path, "sequence_lengths[" + Str(i) + "] = " + Str(length) + ": sequence " + Str(i) +
                         " ends at byte " + std::to_string(expected) + ", past the end of " +
                         bin_path + " (" + std::to_string(bin_size) + " bytes)");
    }
  }
  if (expected != bin_size) {
    Fail(bin_path, "size: " + std::to_string(bin_size) + " bytes, but the sequences of " +
                       idx_path + " hold " + std::to_string(expected) +
                       " (every byte of the .bin is in a sequence)");
  }
  m.num_tokens = static_cast<Index>(expected / token_size);

  const char* doc = p + m.documents_offset;
  Index previous = Load<std::int64_t>(doc);
  bool identity = m.num_documents == m.num_sequences;
  if (previous != 0) {
    Fail(idx_path, "document_indices[0] = " + Str(previous) + ", expected 0");
  }
  // The same two passes: the folded checks, then (only on failure) the loop
  // that names the entry.
  bool ordered = true;
  bool same = identity;
  for (Index d = 1; d <= m.num_documents; ++d) {
    const Index v = Load<std::int64_t>(doc + 8 * d);
    const Index before = Load<std::int64_t>(doc + 8 * (d - 1));
    ordered &= v >= before && v <= m.num_sequences;
    same &= v == d;
  }
  if (ordered) {
    identity = same;
    previous = Load<std::int64_t>(doc + 8 * m.num_documents);
  }
  for (Index d = ordered ? m.num_documents + 1 : 1; d <= m.num_documents; ++d) {
    const Index v = Load<std::int64_t>(doc + 8 * d);
    if (v < previous || v > m.num_sequences) {
      Fail(idx_path, "document_indices[" + Str(d) + "] = " + Str(v) +
                         (v < previous ? " < document_indices[" + Str(d - 1) +
                                             "] = " + Str(previous) + " (not non-decreasing)"
                                       : " is past sequence_count " + Str(m.num_sequences)));
    }
    identity = identity && v == d;
    previous = v;
  }
  m.one_sequence_per_document = identity;
  if (previous != m.num_sequences) {
    Fail(idx_path, "document_indices[" + Str(m.num_documents) + "] = " + Str(previous) +
                       ", expected sequence_count " + Str(m.num_sequences) +
                       " (sequences after the last document)");
  }
  if (m.has_modes) {
    const char* modes = doc + 8 * documents;
    for (Index i = 0; i < m.num_sequences; ++i) {
      if (modes[i] != 0) {
        Fail(idx_path, "sequence_modes[" + Str(i) +
                           "] = " + Str(static_cast<signed char>(modes[i])) +
                           ": not a text sequence (mode 0); multimodal sequences are not "
                           "token sources");
      }
    }
  }
  return m;
}

std::shared_ptr<const TokenSource> TokenSource::OpenMegatron(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  Part part;
  part.name = bin_path;
  part.index_file = std::make_shared<MappedFile>(idx_path, "path");
  part.tokens_file = std::make_shared<MappedFile>(bin_path, "path");
  const MappedFile& idx = *part.index_file;
  const MegatronIndex m =
      ParseMegatronIndex(std::string_view(idx.data() == nullptr ? "" : idx.data(), idx.size()),
                         idx_path, part.tokens_file->size(), bin_path);
  part.tokens = part.tokens_file->data();
  part.type = m.dtype;
  part.num_tokens = m.num_tokens;
  part.num_documents = m.num_documents;
  part.num_sequences = m.num_sequences;
  part.sequence_pointers = idx.data() + m.pointers_offset;
  part.document_indices = m.one_sequence_per_document ? nullptr : idx.data() + m.documents_offset;
  const int size = TokenDTypeSize(m.dtype);
  while ((1 << part.token_shift) < size) ++part.token_shift;
  std::shared_ptr<TokenSource> source(new TokenSource());
  source->AddPart(std::move(part));
  return source;
}

}  // namespace shardkit
