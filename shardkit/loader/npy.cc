#include "shardkit/loader/npy.h"

#include <cstring>
#include <limits>
#include <stdexcept>

namespace shardkit {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view param, std::string_view path)
      : text_(text), param_(param), path_(path) {}

  [[noreturn]] void Fail(const std::string& what) const {
    ThrowInvalid(param_, std::string(path_) + ": " + what);
  }

  void Skip() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Peek(char c) {
    Skip();
    return pos_ < text_.size() && text_[pos_] == c;
  }
  void Expect(char c) {
    if (!Peek(c))
      Fail(std::string("malformed header: expected '") + c + "' at offset " + std::to_string(pos_) +
           " of '" + std::string(text_) + "'");
    ++pos_;
  }
  std::string String() {
    Skip();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      Fail("malformed header: expected a quoted string in '" + std::string(text_) + "'");
    }
    const char quote = text_[pos_++];
    const std::size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) Fail("malformed header: unterminated string");
    std::string out(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  bool Bool() {
    Skip();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const std::size_t n = std::strlen(word);
      if (text_.substr(pos_, n) == word) {
        pos_ += n;
        return value;
      }
    }
    Fail("malformed header: fortran_order is not True or False");
  }
  Index Integer() {
    Skip();
    Index v = 0;
    std::size_t digits = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const Index d = text_[pos_] - '0';
      if (digits == 1 && v == 0) Fail("malformed header: shape extent with a leading zero");
      if (v > (std::numeric_limits<Index>::max() - d) / 10) Fail("shape extent overflows");
      v = v * 10 + d;
      ++pos_;
      ++digits;
    }
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs
    if (digits == 0) Fail("malformed header: expected a non-negative shape extent");
    return v;
  }
  std::vector<Index> Shape() {
    // A Python tuple: "()", "(n,)", "(n, m)", "(n, m,)"; "(n)" is an int.
    std::vector<Index> shape;
    Expect('(');
    bool comma = false;
    while (!Peek(')')) {
      shape.push_back(Integer());
      comma = Peek(',');
      if (comma) {
        ++pos_;
      } else if (!Peek(')')) {
        Fail("malformed header: bad shape tuple");
      }
    }
    if (shape.size() == 1 && !comma) Fail("malformed header: shape (n) is not a tuple");
    ++pos_;
    return shape;
  }
  bool AtEnd() {
    Skip();
    return pos_ == text_.size();
  }

 private:
  std::string_view text_, param_, path_;
  std::size_t pos_ = 0;
};

}  // namespace

bool IsNpy(std::string_view bytes) { return bytes.substr(0, kMagic.size()) == kMagic; }

NpyHeader ParseNpyHeader(std::string_view bytes, std::uint64_t file_size, std::string_view param,
                         std::string_view path) {
  auto fail = [&](const std::string& what) {
    ThrowInvalid(param, std::string(path) + ": " + what);
  };
  if (bytes.size() < 10 || !IsNpy(bytes)) fail("not a .npy file (bad magic string)");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  std::uint64_t header_len = 0;
  std::size_t header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (std::uint64_t{static_cast<unsigned char>(bytes[9])} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail("truncated header");
    for (int i = 0; i < 4; ++i) {
      header_len |= std::uint64_t{static_cast<unsigned char>(bytes[8 + i])} << (8 * i);
    }
    header_start = 12;
  } else {
    fail("unsupported .npy format version " + std::to_string(major));
  }
  if (minor != 0) {
    fail("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  }
  if (header_start + header_len > bytes.size() || header_start + header_len > file_size) {
    fail("truncated header (" + std::to_string(header_len) + " header bytes promised, file has " +
         std::to_string(file_size) + " bytes)");
  }
  std::string_view text = bytes.substr(header_start, header_len);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\0')) {
    text.remove_suffix(1);
  }

  HeaderParser p(text, param, path);
  NpyHeader h;
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  p.Expect('{');
  while (!p.Peek('}')) {
    const std::string key = p.String();
    p.Expect(':');
    if (key == "descr") {
      h.descr = p.String();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = p.Bool();
      have_order = true;
    } else if (key == "shape") {
      h.shape = p.Shape();
      have_shape = true;
    } else {
      p.Fail("unexpected header key '" + key + "'");
    }
    if (!p.Peek('}')) p.Expect(',');  // entries are comma-separated
  }
  p.Expect('}');
  if (!p.AtEnd()) p.Fail("malformed header: text after the dictionary");
  if (!have_descr || !have_order || !have_shape) {
    p.Fail("header lacks one of 'descr', 'fortran_order', 'shape'");
  }
  if (fortran) p.Fail("Fortran-order arrays are not supported");

  const std::string& d = h.descr;
  if (d.size() < 3 || (d[0] != '<' && d[0] != '>' && d[0] != '|' && d[0] != '=')) {
    p.Fail("unsupported dtype '" + d + "'");
  }
  h.kind = d[1];
  const std::string size_text = d.substr(2);
  h.item_size =
      size_text.size() == 1 && size_text[0] >= '1' && size_text[0] <= '8' ? size_text[0] - '0' : 0;
  const bool int_ok = (h.kind == 'i' || h.kind == 'u') && (h.item_size == 1 || h.item_size == 2 ||
                                                           h.item_size == 4 || h.item_size == 8);
  const bool float_ok = h.kind == 'f' && (h.item_size == 4 || h.item_size == 8);
  const bool bool_ok = h.kind == 'b' && h.item_size == 1;
  if (!int_ok && !float_ok && !bool_ok) p.Fail("unsupported dtype '" + d + "'");
  if (d[0] == '>' && h.item_size > 1) p.Fail("big-endian dtype '" + d + "' is not supported");

  h.count = 1;
  for (Index extent : h.shape) {
    if (extent != 0 && h.count > std::numeric_limits<Index>::max() / extent) {
      p.Fail("shape overflows a 64-bit element count");
    }
    h.count *= extent;
  }
  h.data_offset = header_start + header_len;
  const std::uint64_t available = file_size - h.data_offset;
  const std::uint64_t needed = static_cast<std::uint64_t>(h.count);
  if (needed > available / static_cast<std::uint64_t>(h.item_size)) {
    p.Fail("truncated data: the header promises " + std::to_string(h.count) + " elements of " + d +
           " (" + std::to_string(needed * h.item_size) + " bytes) but the file holds " +
           std::to_string(available) + " data bytes");
  }
  if (needed * static_cast<std::uint64_t>(h.item_size) != available) {
    // More data than the shape promises: a corrupted shape would silently
    // hide the rest of the array.
    p.Fail("size mismatch: the header promises " + std::to_string(h.count) + " elements of " + d +
           " (" + std::to_string(needed * h.item_size) + " bytes) but the file holds " +
           std::to_string(available) + " data bytes");
  }
  return h;
}

std::vector<double> NpyToDoubles(std::string_view bytes, std::string_view param,
                                 std::string_view path) {
  const NpyHeader h = ParseNpyHeader(bytes, bytes.size(), param, path);
  if (h.shape.size() != 1) {
    ThrowInvalid(param, std::string(path) + ": expected a 1-D array, got " +
                            std::to_string(h.shape.size()) + " dimensions");
  }
  std::vector<double> out(static_cast<std::size_t>(h.count));
  const char* p = bytes.data() + h.data_offset;
  for (Index i = 0; i < h.count; ++i, p += h.item_size) {
    double v;
    if (h.kind == 'f' && h.item_size == 8) {
      std::memcpy(&v, p, 8);
    } else if (h.kind == 'f') {
      float f;
      std::memcpy(&f, p, 4);
      v = f;
    } else {
      std::uint64_t raw = 0;
      std::memcpy(&raw, p, h.item_size);
      if (h.kind == 'i' && h.item_size < 8 && ((raw >> (8 * h.item_size - 1)) & 1)) {
        raw |= ~std::uint64_t{0} << (8 * h.item_size);  // sign-extend
      }
      v = h.kind == 'i' ? static_cast<double>(static_cast<std::int64_t>(raw))
                        : static_cast<double>(raw);
    }
    out[static_cast<std::size_t>(i)] = v;
  }
  return out;
}

std::string NpyHeaderBytes(std::string_view descr, Index count) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(count) + ",), }";
  // Version 1.0; the header (magic + 4 + dict + '\n') is padded to 64 bytes.
  std::size_t total = 10 + dict.size() + 1;
  const std::size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  return out + dict;
}

}  // namespace shardkit
