#include "shardkit/base/json.h"

#include <algorithm>
#include <array>
#include <limits>
#include <unordered_set>
#include <utility>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/errors.h"
#include "shardkit/base/hash.h"

namespace shardkit {

template <typename T>
Json Json::Of(Type type, T Json::*member, T value) {
  Json j;
  j.type_ = type;
  j.*member = std::move(value);
  return j;
}

Json Json::Bool(bool v) { return Of(Type::kBool, &Json::bool_, v); }

Json Json::Int(std::int64_t v) {
  Json j = Uint(v < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(v)
                      : static_cast<std::uint64_t>(v));
  j.negative_ = v < 0;
  return j;
}

Json Json::Uint(std::uint64_t v) { return Of(Type::kInt, &Json::magnitude_, v); }

Json Json::BigInt(std::string digits) {
  Json j = Of(Type::kInt, &Json::string_, std::move(digits));
  j.too_big_ = true;
  return j;
}

Json Json::String(std::string v) { return Of(Type::kString, &Json::string_, std::move(v)); }

Json Json::MakeArray(Array v) { return Of(Type::kArray, &Json::array_, std::move(v)); }

Json Json::MakeObject(Object v) { return Of(Type::kObject, &Json::object_, std::move(v)); }

namespace {
// A value's type as error messages say it ("expected an integer, got a list").
constexpr EnumNames<Json::Type, 6> kTypeNames{
    "json", "type", {"null", "a boolean", "an integer", "a string", "a list", "an object"}};
}  // namespace

std::string_view Json::TypeName(Type type) { return kTypeNames.Name(type); }

void Json::Push(Json v) { array_.push_back(std::move(v)); }

void Json::Set(std::string key, Json v) { object_.emplace_back(std::move(key), std::move(v)); }

const Json* Json::Find(std::string_view key) const {
  for (const auto& [k, v] : object_) {
    if (k == key) return &v;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Reader

namespace {

// JSON's two-character escapes: the character and the letter after the
// backslash. The reader also takes "\/" (as '/'); the writer, like
// json.dumps, never writes it.
constexpr std::array<std::pair<char, char>, 7> kShortEscapes{
    {{'"', '"'}, {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}}};

// The escape letter of each ASCII character, 0 where it has none.
constexpr std::array<char, 128> kEscapeLetter = [] {
  std::array<char, 128> letters{};
  for (const auto& [c, letter] : kShortEscapes) letters[static_cast<unsigned char>(c)] = letter;
  return letters;
}();

class Parser {
 public:
  Parser(std::string_view text, std::string_view param) : text_(text), param_(param) {}

  Json ParseDocument() {
    if (text_.size() > kMaxJsonBytes) {
      ThrowInvalid(param_, "JSON text of " + std::to_string(text_.size()) +
                               " bytes is longer than the limit of " +
                               std::to_string(kMaxJsonBytes));
    }
    SkipSpace();
    Json v = ParseValue(0);
    SkipSpace();
    if (pos_ != text_.size()) Fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void Fail(std::string_view why) const {
    ThrowInvalid(param_,
                 "not valid JSON at byte " + std::to_string(pos_) + ": " + std::string(why));
  }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool Consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json ParseValue(int depth) {
    if (depth >= kMaxJsonDepth) Fail("nested deeper than " + std::to_string(kMaxJsonDepth));
    if (pos_ >= text_.size()) Fail("unexpected end of text");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') return Json::String(ParseString());
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
    if (Consume("true")) return Json::Bool(true);
    if (Consume("false")) return Json::Bool(false);
    if (Consume("null")) return Json();
    Fail("expected a value");
  }

  // The elements of the list that opens at pos_ ('{' or '['), to `close`:
  // none, or element() repeated with ',' between (no trailing ',').
  template <typename Element>
  void ParseList(char close, Element element) {
    const std::string_view end(&close, 1);
    ++pos_;  // the opening bracket
    SkipSpace();
    if (Consume(end)) return;
    while (true) {
      SkipSpace();
      element();
      SkipSpace();
      if (Consume(",")) continue;
      if (Consume(end)) return;
      Fail("expected ',' or '" + std::string(end) + "'");
    }
  }

  Json ParseObject(int depth) {
    Json out = Json::MakeObject();
    // Keys seen so far, for objects past a few keys: a scan of the object per
    // key made a hostile state of 200,000 keys take two minutes to refuse.
    std::unordered_set<std::string> seen;
    constexpr std::size_t kScanKeys = 16;
    ParseList('}', [&] {
      if (pos_ >= text_.size() || text_[pos_] != '"') Fail("expected a key in quotes");
      const std::size_t key_at = pos_;
      std::string key = ParseString();
      const std::size_t keys = out.object().size();
      bool twice;
      if (keys < kScanKeys) {
        twice = out.Find(key) != nullptr;
      } else {
        if (seen.empty()) {
          for (const auto& [k, v] : out.object()) seen.insert(k);
        }
        twice = !seen.insert(key).second;
      }
      if (twice) {
        // Ambiguous: Python's json keeps the last, a first-wins reader the
        // first. The key is printed JSON-escaped (one line).
        pos_ = key_at;
        Fail("key " + WriteJson(Json::String(key)) +
             " appears twice (ambiguous: every key must appear once)");
      }
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') Fail("expected ':'");
      ++pos_;
      SkipSpace();
      out.Set(std::move(key), ParseValue(depth + 1));
    });
    return out;
  }

  Json ParseArray(int depth) {
    Json out = Json::MakeArray();
    ParseList(']', [&] { out.Push(ParseValue(depth + 1)); });
    return out;
  }

  Json ParseNumber() {
    const std::size_t begin = pos_;
    bool negative = false;
    if (text_[pos_] == '-') {
      negative = true;
      ++pos_;
    }
    const std::size_t first = pos_;
    std::uint64_t v = 0;
    bool too_big = false;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) too_big = true;
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ == first) Fail("expected digits");
    if (text_[first] == '0' && pos_ - first > 1) Fail("leading zero");
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      Fail("only integers are accepted (no fraction or exponent)");
    }
    if (pos_ - first > 400) Fail("integer of more than 400 digits");
    if (too_big || (negative && v > std::uint64_t{1} << 63)) {
      return Json::BigInt(std::string(text_.substr(begin, pos_ - begin)));
    }
    if (negative) {
      return Json::Int(v == std::uint64_t{1} << 63 ? std::numeric_limits<std::int64_t>::min()
                                                   : -static_cast<std::int64_t>(v));
    }
    return Json::Uint(v);
  }

  unsigned Hex4() {
    if (pos_ + 4 > text_.size()) Fail("short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        Fail("bad \\u escape");
      }
    }
    return v;
  }

  static void AppendUtf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  std::string ParseString() {
    ++pos_;  // "
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) Fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) Fail("control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) Fail("unterminated string");
      const char e = text_[pos_++];
      if (e == 'u') {
        unsigned cp = Hex4();
        if (cp >= 0xD800 && cp < 0xDC00) {
          if (!Consume("\\u")) Fail("unpaired surrogate");
          const unsigned lo = Hex4();
          if (lo < 0xDC00 || lo >= 0xE000) Fail("unpaired surrogate");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          Fail("unpaired surrogate");
        }
        AppendUtf8(cp, &out);
        continue;
      }
      if (e == '/') {
        out.push_back(e);
        continue;
      }
      const auto* escape = std::find_if(kShortEscapes.begin(), kShortEscapes.end(),
                                        [e](const auto& pair) { return pair.second == e; });
      if (escape == kShortEscapes.end()) Fail("bad escape");
      out.push_back(escape->first);
    }
  }

  std::string_view text_;
  std::string_view param_;
  std::size_t pos_ = 0;
};

// ---------------------------------------------------------------------------
// Writer

void WriteHex4(unsigned v, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\u");
  for (int shift = 12; shift >= 0; shift -= 4) out->push_back(kHex[(v >> shift) & 0xF]);
}

// json.dumps(ensure_ascii=True): ASCII as is except " \ and controls; other
// code points as \uXXXX (surrogate pairs above the BMP). Bytes that are not
// valid UTF-8 are written as U+FFFD.
void WriteString(const std::string& s, std::string* out) {
  out->push_back('"');
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      if (const char letter = kEscapeLetter[c]; letter != 0) {
        out->push_back('\\');
        out->push_back(letter);
      } else if (c < 0x20 || c == 0x7F) {
        WriteHex4(c, out);
      } else {
        out->push_back(static_cast<char>(c));
      }
      continue;
    }
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    unsigned cp = extra == 3 ? (c & 0x07) : extra == 2 ? (c & 0x0F) : (c & 0x1F);
    bool ok = extra > 0 && c < 0xF8;
    for (int k = 1; ok && k <= extra; ++k) {
      if (i + static_cast<std::size_t>(k) >= s.size()) {
        ok = false;
        break;
      }
      const auto d = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((d & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (!ok || cp > 0x10FFFF) {
      WriteHex4(0xFFFD, out);
      ++i;
      continue;
    }
    i += static_cast<std::size_t>(extra) + 1;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      WriteHex4(0xD800 + (cp >> 10), out);
      WriteHex4(0xDC00 + (cp & 0x3FF), out);
    } else {
      WriteHex4(cp, out);
    }
  }
  out->push_back('"');
}

}  // namespace

Json ParseJson(std::string_view text, std::string_view param) {
  return Parser(text, param).ParseDocument();
}

void WriteJson(const Json& value, std::string* out) {
  switch (value.type()) {
    case Json::Type::kNull:
      out->append("null");
      return;
    case Json::Type::kBool:
      out->append(value.bool_value() ? "true" : "false");
      return;
    case Json::Type::kInt:
      if (value.too_big()) {
        out->append(value.string_value());
        return;
      }
      if (value.negative() && value.magnitude() != 0) out->push_back('-');
      out->append(std::to_string(value.magnitude()));
      return;
    case Json::Type::kString:
      WriteString(value.string_value(), out);
      return;
    case Json::Type::kArray: {
      out->push_back('[');
      bool first = true;
      for (const Json& v : value.array()) {
        if (!first) out->append(", ");
        first = false;
        WriteJson(v, out);
      }
      out->push_back(']');
      return;
    }
    case Json::Type::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, v] : value.object()) {
        if (!first) out->append(", ");
        first = false;
        WriteString(k, out);
        out->append(": ");
        WriteJson(v, out);
      }
      out->push_back('}');
      return;
    }
  }
}

std::string WriteJson(const Json& value) {
  std::string out;
  WriteJson(value, &out);
  return out;
}

// ---------------------------------------------------------------------------
// Typed reading

void ThrowAtPath(std::string_view path, std::string_view what) {
  const std::size_t cut = path.find_first_of(".[");
  if (cut == std::string_view::npos) ThrowInvalid(path, what);
  std::string_view field = path.substr(cut);
  if (field.front() == '.') field.remove_prefix(1);
  ThrowInvalid(path.substr(0, cut), std::string(field) + ": " + std::string(what));
}

void ExpectType(const Json& value, std::string_view path, Json::Type type) {
  if (value.type() != type) {
    ThrowAtPath(path, "expected " + std::string(Json::TypeName(type)) + ", got " +
                          std::string(Json::TypeName(value.type())));
  }
}

const Json& Field(const Json& object, std::string_view path, std::string_view key) {
  ExpectType(object, path, Json::Type::kObject);
  const Json* v = object.Find(key);
  if (v == nullptr) ThrowAtPath(path, "missing key '" + std::string(key) + "'");
  return *v;
}

std::int64_t AsInt64(const Json& value, std::string_view path) {
  ExpectType(value, path, Json::Type::kInt);
  if (value.too_big()) ThrowAtPath(path, value.string_value() + " does not fit in int64");
  const std::uint64_t m = value.magnitude();
  if (value.negative()) {
    if (m > std::uint64_t{1} << 63) ThrowAtPath(path, "does not fit in int64");
    return m == std::uint64_t{1} << 63 ? std::numeric_limits<std::int64_t>::min()
                                       : -static_cast<std::int64_t>(m);
  }
  if (m > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    ThrowAtPath(path, std::to_string(m) + " does not fit in int64");
  }
  return static_cast<std::int64_t>(m);
}

std::uint64_t AsUint64(const Json& value, std::string_view path) {
  ExpectType(value, path, Json::Type::kInt);
  if (value.too_big()) ThrowAtPath(path, value.string_value() + " does not fit in uint64");
  if (value.negative() && value.magnitude() != 0) {
    ThrowAtPath(path, "must not be negative, got -" + std::to_string(value.magnitude()));
  }
  return value.magnitude();
}

bool AsBool(const Json& value, std::string_view path) {
  ExpectType(value, path, Json::Type::kBool);
  return value.bool_value();
}

const std::string& AsString(const Json& value, std::string_view path) {
  ExpectType(value, path, Json::Type::kString);
  return value.string_value();
}

const Json::Array& AsArray(const Json& value, std::string_view path) {
  ExpectType(value, path, Json::Type::kArray);
  return value.array();
}

void ExpectOnlyKeys(const Json& object, std::string_view path,
                    std::initializer_list<std::string_view> allowed) {
  ExpectType(object, path, Json::Type::kObject);
  for (const auto& [k, v] : object.object()) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      ThrowAtPath(path, "unknown key '" + k + "'");
    }
  }
}

// ---------------------------------------------------------------------------
// Sealed states

namespace {
constexpr std::uint64_t kChecksumDomain = 0x736b2d73756d0003ULL;  // "sk-sum"
}  // namespace

std::uint64_t StateChecksum(const Json& body) {
  Hasher h(kChecksumDomain);
  h.AddBytes(WriteJson(body));
  return h.Finish();
}

std::string SealState(const Json& body) {
  std::string text = WriteJson(body);
  const std::uint64_t sum = StateChecksum(body);
  text.pop_back();  // '}'
  if (text.size() > 1) text += ", ";
  text += "\"checksum\": \"" + HexDigest(sum) + "\"}";
  return text;
}

std::uint64_t ReadHexField(const Json& object, std::string_view path, std::string_view key) {
  const std::string field = std::string(path) + "." + std::string(key);
  const std::string& text = AsString(Field(object, path, key), field);
  std::uint64_t v = 0;
  if (!ParseHexDigest(text, &v)) {
    ThrowAtPath(field, "expected 16 lowercase hex digits, got '" + text.substr(0, 40) + "'");
  }
  return v;
}

void CheckStateSeal(const Json& state, std::string_view path, const Json& body) {
  if (ReadHexField(state, path, "checksum") != StateChecksum(body)) {
    ThrowAtPath(std::string(path) + ".checksum",
                "does not match the state's content (the state was edited or damaged)");
  }
}

void ExpectStateVersion(const Json& object, std::string_view path, std::int64_t current,
                        std::string_view kind, std::string_view why_not) {
  const std::string field = std::string(path) + ".version";
  const std::int64_t v = AsInt64(Field(object, path, "version"), field);
  if (v == current) return;
  std::string what = "a version " + std::to_string(v) + " " + std::string(kind) +
                     " state; this shardkit reads version " + std::to_string(current);
  if (v > 0 && v < current) what += " (" + std::string(why_not) + ")";
  ThrowAtPath(field, what);
}

}  // namespace shardkit
