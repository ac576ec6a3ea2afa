#include "shardkit/loader/token_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>

#include "shardkit/base/errors.h"
#include "shardkit/loader/megatron_source.h"
#include "shardkit/loader/npy.h"

namespace shardkit {

namespace {

std::string_view NpyDescr(TokenDType type) {
  switch (type) {
    case TokenDType::kUint16:
      return "<u2";
    case TokenDType::kInt32:
      return "<i4";
    case TokenDType::kUint32:
      return "<u4";
    default:
      return "";
  }
}

// [low, high] of the ids `type` holds (int64 is capped at int32: the ids a
// source delivers).
std::pair<std::int64_t, std::int64_t> Range(TokenDType type) {
  switch (type) {
    case TokenDType::kUint8:
      return {0, 255};
    case TokenDType::kInt8:
      return {-128, 127};
    case TokenDType::kInt16:
      return {-32768, 32767};
    case TokenDType::kUint16:
      return {0, 65535};
    case TokenDType::kUint32:
    case TokenDType::kUint64:
      return {0, std::numeric_limits<std::int32_t>::max()};
    case TokenDType::kInt32:
    case TokenDType::kInt64:
      return {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()};
  }
  return {0, 0};
}

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void WriteWhole(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) ThrowInvalid("output", "cannot create '" + path + "': " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    ThrowInvalid("output", "cannot write '" + path + "': " + std::strerror(errno));
  }
}

}  // namespace

TokenDType TokenWriter::DTypeForVocabulary(Index vocab_size) {
  return vocab_size < 65500 ? TokenDType::kUint16 : TokenDType::kInt32;
}

TokenWriter::TokenWriter(std::string output, SourceFormat format, TokenDType dtype)
    : output_(std::move(output)), format_(format), dtype_(dtype) {
  if (format_ == SourceFormat::kMegatron) {
    if (MegatronDTypeCode(dtype_) == 0) {
      ThrowInvalid("token_dtype", std::string(TokenDTypeName(dtype_)) +
                                      " has no Megatron dtype code; use uint16 or int32");
    }
    data_path_ = output_ + ".bin";
    index_path_ = output_ + ".idx";
  } else {
    if (NpyDescr(dtype_).empty()) {
      ThrowInvalid("token_dtype", std::string(TokenDTypeName(dtype_)) +
                                      " is not an npy token dtype; use uint16, int32 or uint32");
    }
    data_path_ = output_ + ".tokens.npy";
    index_path_ = output_ + ".offsets.npy";
  }
  const std::string tmp = ".tmp." + std::to_string(::getpid());
  data_tmp_ = data_path_ + tmp;
  index_tmp_ = index_path_ + tmp;
  data_ = std::fopen(data_tmp_.c_str(), "wb");
  if (data_ == nullptr) {
    ThrowInvalid("output", "cannot create '" + data_tmp_ + "': " + std::strerror(errno));
  }
  if (format_ == SourceFormat::kNpy) {
    // A 1-D header is padded to a fixed size whatever the count; rewritten
    // with the real count by Finish.
    const std::string header = NpyHeaderBytes(NpyDescr(dtype_), 0);
    Write(header.data(), header.size());
  }
}

TokenWriter::~TokenWriter() {
  if (data_ != nullptr) std::fclose(data_);
  if (!finished_) {
    std::remove(data_tmp_.c_str());
    std::remove(index_tmp_.c_str());
  }
}

void TokenWriter::Write(const void* data, std::size_t bytes) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, data_) != bytes) {
    ThrowInvalid("output", "cannot write '" + data_tmp_ + "': " + std::strerror(errno));
  }
}

void TokenWriter::Add(const std::int64_t* tokens, Index count) {
  if (finished_) ThrowInvalid("output", "the writer of '" + output_ + "' is finished");
  CheckAtLeast("tokens", count, 0);
  const auto [low, high] = Range(dtype_);
  const int size = TokenDTypeSize(dtype_);
  buffer_.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(size));
  for (Index i = 0; i < count; ++i) {
    const std::int64_t v = tokens[i];
    if (v < low || v > high) {
      ThrowInvalid("tokens", "document " + Str(static_cast<Index>(offsets_.size()) - 1) +
                                 ", token " + Str(i) + ": id " + Str(v) + " does not fit " +
                                 std::string(TokenDTypeName(dtype_)));
    }
    std::memcpy(buffer_.data() + i * size, &v, static_cast<std::size_t>(size));  // little-endian
  }
  Write(buffer_.data(), buffer_.size());
  offsets_.push_back(CheckedAdd("tokens", offsets_.back(), count));
}

TokenWriterResult TokenWriter::Finish() {
  if (finished_) ThrowInvalid("output", "the writer of '" + output_ + "' is finished");
  const Index documents = static_cast<Index>(offsets_.size()) - 1;
  const Index tokens = offsets_.back();
  std::string index;
  if (format_ == SourceFormat::kMegatron) {
    const int size = TokenDTypeSize(dtype_);
    index.append(kMegatronMagic);
    Put<std::uint64_t>(index, 1);
    Put<std::uint8_t>(index, static_cast<std::uint8_t>(MegatronDTypeCode(dtype_)));
    Put<std::uint64_t>(index, static_cast<std::uint64_t>(documents));      // sequences
    Put<std::uint64_t>(index, static_cast<std::uint64_t>(documents) + 1);  // document indices
    for (Index d = 0; d < documents; ++d) {
      const Index length = offsets_[d + 1] - offsets_[d];
      if (length > std::numeric_limits<std::int32_t>::max()) {
        ThrowInvalid("tokens", "document " + Str(d) + " has " + Str(length) +
                                   " tokens; a Megatron sequence holds at most 2^31 - 1");
      }
      Put<std::int32_t>(index, static_cast<std::int32_t>(length));
    }
    for (Index d = 0; d < documents; ++d) Put<std::int64_t>(index, offsets_[d] * size);
    for (Index d = 0; d <= documents; ++d) Put<std::int64_t>(index, d);
  } else {
    // The real count into the data file's header (the same size as the
    // placeholder), then the offsets file.
    const std::string header = NpyHeaderBytes(NpyDescr(dtype_), tokens);
    if (header.size() != NpyHeaderBytes(NpyDescr(dtype_), 0).size() ||
        std::fseek(data_, 0, SEEK_SET) != 0) {
      ThrowInvalid("output", "cannot rewrite the header of '" + data_tmp_ + "'");
    }
    Write(header.data(), header.size());
    index = NpyHeaderBytes("<i8", documents + 1);
    index.append(reinterpret_cast<const char*>(offsets_.data()), offsets_.size() * 8);
  }
  const int closed = std::fclose(data_);
  data_ = nullptr;
  if (closed != 0) {
    ThrowInvalid("output", "cannot write '" + data_tmp_ + "': " + std::strerror(errno));
  }
  WriteWhole(index_tmp_, index);
  for (const auto& [from, to] : {std::pair{data_tmp_, data_path_}, {index_tmp_, index_path_}}) {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      ThrowInvalid("output",
                   "cannot rename '" + from + "' to '" + to + "': " + std::strerror(errno));
    }
  }
  finished_ = true;
  return {documents, tokens, {data_path_, index_path_}};
}

}  // namespace shardkit
