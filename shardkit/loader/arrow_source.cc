#include "shardkit/loader/arrow_source.h"

#include <cstring>
#include <filesystem>
#include <memory>

#include "shardkit/base/errors.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/files.h"

namespace shardkit {

namespace {

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

[[noreturn]] void Fail(const std::string& file, const std::string& what) {
  ThrowInvalid("path", file + ": " + what);
}

// A bounds-checked reader of one flatbuffer (an IPC message's metadata):
// every offset, vtable, vector and string is checked to lie inside the
// buffer before it is read; a violation names the file and `where`.
class Flatbuffer {
 public:
  struct Table {
    std::uint64_t pos = 0;
    std::uint64_t vtable = 0;
    std::uint64_t vsize = 0;  // bytes of the vtable
  };
  struct Vector {
    std::uint64_t pos = 0;  // first element
    std::uint64_t size = 0;
  };

  Flatbuffer(std::string_view buf, const std::string& file, std::string where)
      : buf_(buf), file_(file), where_(std::move(where)) {}

  Table Root() const { return TableAt(Offset(0, "root")); }

  // Field `index` of `t` as a scalar of type T, or `fallback` when absent.
  template <typename T>
  T Scalar(const Table& t, int index, T fallback) const {
    const std::uint64_t at = FieldPos(t, index);
    if (at == 0) return fallback;
    Need(at, sizeof(T), "field");
    return Load<T>(buf_.data() + at);
  }
  // Field `index` of `t` as a table, or pos 0 when absent.
  Table SubTable(const Table& t, int index) const {
    const std::uint64_t at = FieldPos(t, index);
    if (at == 0) return Table{};
    return TableAt(Offset(at, "table"));
  }
  Vector VectorField(const Table& t, int index, std::uint64_t element_size) const {
    const std::uint64_t at = FieldPos(t, index);
    if (at == 0) return Vector{};
    const std::uint64_t v = Offset(at, "vector");
    Need(v, 4, "vector length");
    Vector out{v + 4, Load<std::uint32_t>(buf_.data() + v)};
    if (out.size > (buf_.size() - out.pos) / element_size) {
      Bad("a vector of " + std::to_string(out.size) + " elements runs past the metadata's " +
          std::to_string(buf_.size()) + " bytes");
    }
    return out;
  }
  std::string String(const Table& t, int index) const {
    const Vector v = VectorField(t, index, 1);
    return std::string(buf_.substr(v.pos, v.size));
  }
  // Element k of a vector of tables.
  Table TableIn(const Vector& v, std::uint64_t k) const {
    return TableAt(Offset(v.pos + 4 * k, "table"));
  }
  const char* Data(std::uint64_t pos) const { return buf_.data() + pos; }
  [[noreturn]] void Bad(const std::string& what) const { Fail(file_, where_ + ": " + what); }

 private:
  void Need(std::uint64_t at, std::uint64_t n, const char* what) const {
    if (at > buf_.size() || n > buf_.size() - at) {
      Bad(std::string("flatbuffer ") + what + " at byte " + std::to_string(at) +
          " runs past the metadata's " + std::to_string(buf_.size()) + " bytes");
    }
  }
  // The position a uoffset at `at` points to.
  std::uint64_t Offset(std::uint64_t at, const char* what) const {
    Need(at, 4, what);
    const std::uint64_t target = at + Load<std::uint32_t>(buf_.data() + at);
    Need(target, 0, what);
    return target;
  }
  Table TableAt(std::uint64_t pos) const {
    Need(pos, 4, "table");
    const auto soffset = Load<std::int32_t>(buf_.data() + pos);
    const std::int64_t vt = static_cast<std::int64_t>(pos) - soffset;
    if (vt < 0) Bad("flatbuffer vtable offset " + Str(soffset) + " points before the metadata");
    Table t{pos, static_cast<std::uint64_t>(vt), 0};
    Need(t.vtable, 4, "vtable");
    t.vsize = Load<std::uint16_t>(buf_.data() + t.vtable);
    Need(t.vtable, t.vsize, "vtable");
    return t;
  }
  // The position of field `index` of `t`, or 0 when absent.
  std::uint64_t FieldPos(const Table& t, int index) const {
    if (t.pos == 0) return 0;
    const std::uint64_t entry = 4 + 2 * static_cast<std::uint64_t>(index);
    if (entry + 2 > t.vsize) return 0;
    const std::uint16_t off = Load<std::uint16_t>(buf_.data() + t.vtable + entry);
    if (off == 0) return 0;
    Need(t.pos + off, 1, "field");
    return t.pos + off;
  }

  std::string_view buf_;
  const std::string& file_;
  std::string where_;
};

// Arrow's Type union (Schema.fbs), by tag.
std::string TypeName(int tag) {
  static const char* const kNames[] = {
      "NONE",          "Null",      "Int",           "FloatingPoint",
      "Binary",        "Utf8",      "Bool",          "Decimal",
      "Date",          "Time",      "Timestamp",     "Interval",
      "List",          "Struct",    "Union",         "FixedSizeBinary",
      "FixedSizeList", "Map",       "Duration",      "LargeBinary",
      "LargeUtf8",     "LargeList", "RunEndEncoded", "BinaryView",
      "Utf8View",      "ListView",  "LargeListView"};
  return tag >= 0 && tag < static_cast<int>(std::size(kNames)) ? kNames[tag]
                                                               : "type " + std::to_string(tag);
}

struct Count {
  std::uint64_t nodes = 0, buffers = 0;
};

constexpr int kMaxDepth = 64;

// Field nodes and buffers a field (and its children) takes in a record
// batch (Arrow's columnar format, IPC).
Count CountField(const Flatbuffer& fb, const Flatbuffer::Table& field, int depth) {
  if (depth > kMaxDepth) fb.Bad("schema: fields nested deeper than 64 levels");
  const int tag = fb.Scalar<std::uint8_t>(field, 2, 0);
  Count c{1, 0};
  if (fb.SubTable(field, 4).pos != 0) {  // dictionary-encoded: the indices
    c.buffers = 2;
    return c;
  }
  switch (tag) {
    case 1:   // Null
    case 22:  // RunEndEncoded
      break;
    case 2:
    case 3:
    case 6:
    case 7:
    case 8:
    case 9:
    case 10:
    case 11:
    case 15:
    case 18:
      c.buffers = 2;
      break;
    case 4:
    case 5:
    case 19:
    case 20:
      c.buffers = 3;
      break;
    case 12:
    case 17:
    case 21:
      c.buffers = 2;
      break;
    case 13:
    case 16:
      c.buffers = 1;
      break;
    case 25:
    case 26:
      c.buffers = 3;
      break;
    default:
      fb.Bad("schema: field '" + fb.String(field, 0) + "' of type " + TypeName(tag) +
             ": its buffers cannot be counted (unions and view types are not read)");
  }
  const Flatbuffer::Vector children = fb.VectorField(field, 5, 4);
  for (std::uint64_t k = 0; k < children.size; ++k) {
    const Count sub = CountField(fb, fb.TableIn(children, k), depth + 1);
    c.nodes += sub.nodes;
    c.buffers += sub.buffers;
  }
  return c;
}

// Where the column sits in every record batch, from the schema.
struct Layout {
  std::uint64_t node = 0, buffer = 0;  // the list's node and first buffer
  TokenDType dtype = TokenDType::kInt32;
  int offset_size = 4;
  int value_size = 4;
};

TokenDType IntType(int bits, bool is_signed) {
  switch (bits) {
    case 8:
      return is_signed ? TokenDType::kInt8 : TokenDType::kUint8;
    case 16:
      return is_signed ? TokenDType::kInt16 : TokenDType::kUint16;
    case 32:
      return is_signed ? TokenDType::kInt32 : TokenDType::kUint32;
    default:
      return is_signed ? TokenDType::kInt64 : TokenDType::kUint64;
  }
}

Layout ParseSchema(const Flatbuffer& fb, const Flatbuffer::Table& schema, std::string_view column,
                   std::vector<std::string>* names) {
  if (fb.Scalar<std::int16_t>(schema, 0, 0) != 0) {
    fb.Bad("schema: big-endian data (endianness 1); only little-endian Arrow files are read");
  }
  const Flatbuffer::Vector fields = fb.VectorField(schema, 1, 4);
  Layout out;
  bool found = false;
  for (std::uint64_t k = 0; k < fields.size; ++k) {
    const Flatbuffer::Table field = fb.TableIn(fields, k);
    names->push_back(fb.String(field, 0));
    if (found || names->back() != column) {
      if (!found) {
        const Count c = CountField(fb, field, 0);
        out.node += c.nodes;
        out.buffer += c.buffers;
      }
      continue;
    }
    found = true;
    const int tag = fb.Scalar<std::uint8_t>(field, 2, 0);
    const std::string name(column);
    if (fb.SubTable(field, 4).pos != 0) fb.Bad("column: '" + name + "' is dictionary-encoded");
    const Flatbuffer::Vector children = fb.VectorField(field, 5, 4);
    std::string child_type;
    if ((tag == 12 || tag == 21) && children.size == 1) {
      const Flatbuffer::Table child = fb.TableIn(children, 0);
      const int child_tag = fb.Scalar<std::uint8_t>(child, 2, 0);
      child_type = TypeName(child_tag);
      if (child_tag == 2 && fb.SubTable(child, 4).pos == 0) {
        const Flatbuffer::Table int_type = fb.SubTable(child, 3);
        const int bits = fb.Scalar<std::int32_t>(int_type, 0, 0);
        const bool is_signed = fb.Scalar<std::uint8_t>(int_type, 1, 0) != 0;
        if (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
          fb.Bad("column: '" + name + "': Int of bitWidth " + Str(bits));
        }
        out.dtype = IntType(bits, is_signed);
        out.offset_size = tag == 21 ? 8 : 4;
        out.value_size = bits / 8;
        continue;
      }
    }
    fb.Bad("column: '" + name + "' is " + TypeName(tag) +
           (child_type.empty() ? "" : "<" + child_type + ">") +
           ", expected a list or large_list of integers (token ids)");
  }
  return out;  // a missing column is named by the caller, with every column
}

}  // namespace

ArrowColumn ParseArrowIpc(std::string_view file, const std::string& path, std::string_view column) {
  ArrowColumn out;
  const std::uint64_t size = file.size();
  std::uint64_t pos = 0;
  if (file.substr(0, 6) == "ARROW1") {  // the file format: its stream follows
    if (size < 8) Fail(path, "magic: 'ARROW1' without its padding (truncated?)");
    pos = 8;
  }
  bool have_schema = false;
  Layout layout;
  for (Index message = 0;; ++message) {
    const std::string where = "message[" + Str(message) + "]";
    if (pos == size) break;  // a stream may end without its end marker
    if (size - pos < 4)
      Fail(path, where + ": " + Str(static_cast<Index>(size - pos)) +
                     " stray bytes at the end (truncated?)");
    std::uint64_t meta = pos + 4;
    std::int64_t length = Load<std::int32_t>(file.data() + pos);
    if (Load<std::uint32_t>(file.data() + pos) == 0xFFFFFFFFu) {
      if (size - pos < 8) Fail(path, where + ": truncated message length");
      length = Load<std::int32_t>(file.data() + pos + 4);
      meta = pos + 8;
    }
    if (length == 0) break;  // end of stream
    if (length < 0 || static_cast<std::uint64_t>(length) > size - meta) {
      Fail(path, where + ": metadata length " + Str(length) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes; truncated?)");
    }
    const Flatbuffer fb(file.substr(meta, static_cast<std::uint64_t>(length)), path, where);
    const Flatbuffer::Table msg = fb.Root();
    const int header = fb.Scalar<std::uint8_t>(msg, 1, 0);
    const std::int64_t body_length = fb.Scalar<std::int64_t>(msg, 3, 0);
    const std::uint64_t body = meta + static_cast<std::uint64_t>(length);
    if (body_length < 0 || static_cast<std::uint64_t>(body_length) > size - body) {
      Fail(path, where + ": bodyLength " + Str(body_length) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes; truncated?)");
    }
    pos = body + static_cast<std::uint64_t>(body_length);
    if (header == 1) {
      if (have_schema) fb.Bad("a second schema message");
      layout = ParseSchema(fb, fb.SubTable(msg, 2), column, &out.columns);
      bool found = false;
      for (const std::string& n : out.columns) found = found || n == column;
      if (!found) {
        std::string list;
        for (const std::string& n : out.columns) list += (list.empty() ? "'" : ", '") + n + "'";
        Fail(path, "column: no column '" + std::string(column) + "'; the columns are " +
                       (list.empty() ? "none" : list));
      }
      have_schema = true;
      out.dtype = layout.dtype;
      out.offset_size = layout.offset_size;
      continue;
    }
    if (header == 2) continue;  // a dictionary batch: not the column's
    if (header != 3) fb.Bad("message type " + Str(header) + " is not a schema or record batch");
    if (!have_schema) fb.Bad("a record batch before the schema");
    const std::string b = "record_batch[" + Str(static_cast<Index>(out.batches.size())) + "]";
    const Flatbuffer::Table batch = fb.SubTable(msg, 2);
    if (batch.pos == 0) fb.Bad(b + ": no header");
    const Flatbuffer::Table compression = fb.SubTable(batch, 3);
    if (compression.pos != 0) {
      const int codec = fb.Scalar<std::int8_t>(compression, 0, 0);
      fb.Bad(b + ": compressed with " +
             (codec == 0   ? std::string("LZ4_FRAME")
              : codec == 1 ? "ZSTD"
                           : "codec " + Str(codec)) +
             "; token columns are read in place: write the file uncompressed (the datasets "
             "default)");
    }
    const std::int64_t rows = fb.Scalar<std::int64_t>(batch, 0, 0);
    const Flatbuffer::Vector nodes = fb.VectorField(batch, 1, 16);
    const Flatbuffer::Vector buffers = fb.VectorField(batch, 2, 16);
    if (nodes.size < layout.node + 2 || buffers.size < layout.buffer + 4) {
      fb.Bad(b + ".nodes: " + std::to_string(nodes.size) + " nodes and " +
             std::to_string(buffers.size) + " buffers, the schema needs at least " +
             std::to_string(layout.node + 2) + " and " + std::to_string(layout.buffer + 4));
    }
    auto node = [&](std::uint64_t k, std::int64_t* null_count) {
      const char* p = fb.Data(nodes.pos + 16 * k);
      *null_count = Load<std::int64_t>(p + 8);
      return Load<std::int64_t>(p);
    };
    // Buffer k as (position in the file, bytes), checked inside the body.
    auto buffer = [&](std::uint64_t k, const char* name) {
      const char* p = fb.Data(buffers.pos + 16 * k);
      const auto offset = Load<std::int64_t>(p), bytes = Load<std::int64_t>(p + 8);
      if (offset < 0 || bytes < 0 || offset > body_length || bytes > body_length - offset) {
        fb.Bad(b + ".buffers[" + std::to_string(k) + "] (" + name + "): [" + Str(offset) + ", +" +
               Str(bytes) + ") is outside the body of " + Str(body_length) + " bytes");
      }
      return std::pair<std::uint64_t, std::uint64_t>(body + static_cast<std::uint64_t>(offset),
                                                     static_cast<std::uint64_t>(bytes));
    };
    std::int64_t list_nulls = 0, value_nulls = 0;
    const std::int64_t list_length = node(layout.node, &list_nulls);
    const std::int64_t values = node(layout.node + 1, &value_nulls);
    if (list_length != rows || rows < 0) {
      fb.Bad(b + ".nodes[" + std::to_string(layout.node) + "]: length " + Str(list_length) +
             ", expected the batch's " + Str(rows) + " rows");
    }
    if (values < 0)
      fb.Bad(b + ".nodes[" + std::to_string(layout.node + 1) + "]: length " + Str(values));
    const auto validity = buffer(layout.buffer, "validity");
    const auto offsets = buffer(layout.buffer + 1, "offsets");
    (void)buffer(layout.buffer + 2, "values validity");
    const auto data = buffer(layout.buffer + 3, "values");
    if (list_nulls != 0) {
      // The first null row, from the validity bitmap (bit r of byte r / 8).
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint64_t byte = static_cast<std::uint64_t>(r) / 8;
        if (byte >= validity.second ||
            !((static_cast<unsigned char>(file[validity.first + byte]) >> (r % 8)) & 1)) {
          Fail(path, "column: '" + std::string(column) + "': " + b + " row " + Str(r) +
                         " is null (a document is a list of ids; drop or fill null rows first)");
        }
      }
      fb.Bad(b + ".nodes: null_count " + Str(list_nulls) + " but no null row in the bitmap");
    }
    if (value_nulls != 0) {
      Fail(path, "column: '" + std::string(column) + "': " + b + " holds " + Str(value_nulls) +
                     " null ids inside its lists (drop or fill them first)");
    }
    if (rows == 0) continue;
    const int osize = layout.offset_size;
    if (offsets.second / static_cast<std::uint64_t>(osize) < static_cast<std::uint64_t>(rows) + 1) {
      fb.Bad(b + ": offsets buffer of " + std::to_string(offsets.second) +
             " bytes is shorter than " + Str(rows + 1) + " offsets");
    }
    if (data.second / static_cast<std::uint64_t>(layout.value_size) <
        static_cast<std::uint64_t>(values)) {
      fb.Bad(b + ": values buffer of " + std::to_string(data.second) + " bytes is shorter than " +
             Str(values) + " values");
    }
    auto offset = [&](std::int64_t r) -> std::int64_t {
      const char* p = file.data() + offsets.first + static_cast<std::uint64_t>(r) * osize;
      return osize == 8 ? Load<std::int64_t>(p) : Load<std::int32_t>(p);
    };
    std::int64_t previous = offset(0);
    if (previous < 0) fb.Bad(b + ": offsets[0] = " + Str(previous) + " is negative");
    for (std::int64_t r = 1; r <= rows; ++r) {
      const std::int64_t v = offset(r);
      if (v < previous) {
        fb.Bad(b + ": offsets[" + Str(r) + "] = " + Str(v) + " < offsets[" + Str(r - 1) +
               "] = " + Str(previous) + " (not non-decreasing)");
      }
      previous = v;
    }
    if (previous > values) {
      fb.Bad(b + ": offsets[" + Str(rows) + "] = " + Str(previous) + " is past the " + Str(values) +
             " values");
    }
    out.batches.push_back(ArrowBatch{rows, offsets.first, data.first, values});
  }
  if (!have_schema) Fail(path, "schema: no schema message (not an Arrow IPC stream or file?)");
  if (out.batches.empty()) Fail(path, "column: '" + std::string(column) + "': no rows");
  return out;
}

std::vector<std::string> ArrowFilesOfFolder(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir(folder);
  if (fs::exists(dir / "dataset_dict.json", ec)) {
    ThrowInvalid("path", folder +
                             ": a DatasetDict folder (dataset_dict.json); give one split's "
                             "folder");
  }
  const std::string state = (dir / "state.json").string();
  if (!fs::exists(state, ec)) {
    ThrowInvalid("path", folder + ": no state.json (not a datasets save_to_disk folder)");
  }
  const Json json = ParseJson(ReadWholeFile("path", state, kMaxJsonBytes), "path");
  std::vector<std::string> files;
  const Json* list = json.type() == Json::Type::kObject ? json.Find("_data_files") : nullptr;
  if (list == nullptr || list->type() != Json::Type::kArray) {
    ThrowInvalid("path", state + ": no \"_data_files\" list");
  }
  for (const Json& entry : AsArray(*list, "path")) {
    const Json* name = entry.type() == Json::Type::kObject ? entry.Find("filename") : nullptr;
    if (name == nullptr || name->type() != Json::Type::kString) {
      ThrowInvalid("path", state + ": a \"_data_files\" entry without a \"filename\"");
    }
    const std::string file = AsString(*name, "path");
    if (file.find('/') != std::string::npos || file == "..") {
      ThrowInvalid("path", state + ": filename '" + file + "' is not a file of the folder");
    }
    files.push_back((dir / file).string());
    if (!fs::exists(files.back(), ec)) {
      ThrowInvalid("path", state + " lists " + file + ", which is missing");
    }
  }
  if (files.empty()) ThrowInvalid("path", state + ": \"_data_files\" is empty");
  return files;
}

std::shared_ptr<const TokenSource> TokenSource::OpenArrow(const std::string& path,
                                                          const std::string& column) {
  auto mapped = std::make_shared<MappedFile>(path, "path");
  const ArrowColumn c = ParseArrowIpc(
      std::string_view(mapped->data() == nullptr ? "" : mapped->data(), mapped->size()), path,
      column);
  std::shared_ptr<TokenSource> source(new TokenSource());
  const int vsize = TokenDTypeSize(c.dtype);
  for (const ArrowBatch& batch : c.batches) {
    Part part;
    part.name = path;
    part.tokens_file = mapped;
    part.type = c.dtype;
    part.num_documents = batch.rows;
    part.offset_size = c.offset_size;
    part.offset_signed = true;
    part.offsets = mapped->data() + batch.offsets_at;
    const Index first = part.RawOffset(0), last = part.RawOffset(batch.rows);
    if (first != 0) {
      // A sliced array: its offsets rebased (a copy of rows + 1 offsets; the
      // tokens stay in the file).
      auto owned = std::make_shared<std::vector<std::int64_t>>();
      owned->reserve(static_cast<std::size_t>(batch.rows) + 1);
      for (Index r = 0; r <= batch.rows; ++r) owned->push_back(part.RawOffset(r) - first);
      part.owned_offsets = owned;
      part.offsets = reinterpret_cast<const char*>(owned->data());
      part.offset_size = 8;
    }
    part.tokens = mapped->data() + batch.values_at + static_cast<std::uint64_t>(first) * vsize;
    part.num_tokens = last - first;
    source->AddPart(std::move(part));
  }
  return source;
}

}  // namespace shardkit
