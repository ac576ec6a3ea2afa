// Json: a small, strict JSON value for the core's state formats (the loader
// and packer checkpoints), with a reader and a writer.
//
// Values are null, booleans, integers (any value in [-2^63, 2^64), so int64
// counts and uint64 seeds round-trip exactly; a longer integer is kept as its
// digits so that reading it as a field names the field), strings, arrays and objects
// (keys in insertion order, no duplicates). Numbers with a fraction or an
// exponent are refused: no state holds one, and a float would round a seed.
//
// ParseJson is strict and bounded: hostile text gives std::invalid_argument
// "<param>: ..." naming where it failed, never a crash. Nesting is limited to
// kMaxJsonDepth levels and the text to kMaxJsonBytes bytes.
//
// WriteJson writes the text Python's json.dumps(value) writes for the same
// value with its defaults (", " and ": " separators, keys in order, non-ASCII
// escaped as \uXXXX), so a state that went through Python's json module
// compares byte for byte with the core's.
//
// The typed accessors (Field, AsIndex, ...) throw invalid_argument naming the
// dotted path of the field ("state.packer.buffered[3]") and what was wrong.
//
// Thread-safety: values are plain data; distinct values are independent.
#ifndef SHARDKIT_BASE_JSON_H_
#define SHARDKIT_BASE_JSON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardkit/base/index.h"

namespace shardkit {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr std::size_t kMaxJsonBytes = std::size_t{1} << 30;

class Json {
 public:
  enum class Type { kNull, kBool, kInt, kString, kArray, kObject };
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;  // null
  static Json Bool(bool v);
  static Json Int(std::int64_t v);
  static Json Uint(std::uint64_t v);
  static Json String(std::string v);
  static Json MakeArray(Array v = {});
  static Json MakeObject(Object v = {});

  [[nodiscard]] Type type() const { return type_; }
  [[nodiscard]] static std::string_view TypeName(Type type);

  // Appends to an array / an object (REQUIRES: that type; the key is new).
  void Push(Json v);
  void Set(std::string key, Json v);

  // The member `key` of an object, or nullptr when absent (REQUIRES: object).
  [[nodiscard]] const Json* Find(std::string_view key) const;

  // Raw access; REQUIRES the matching type.
  [[nodiscard]] bool bool_value() const { return bool_; }
  [[nodiscard]] bool negative() const { return negative_; }
  [[nodiscard]] std::uint64_t magnitude() const { return magnitude_; }
  // kInt outside [-2^63, 2^64): its digits are string_value().
  [[nodiscard]] bool too_big() const { return too_big_; }
  static Json BigInt(std::string digits);
  [[nodiscard]] const std::string& string_value() const { return string_; }
  [[nodiscard]] const Array& array() const { return array_; }
  [[nodiscard]] const Object& object() const { return object_; }

  friend bool operator==(const Json&, const Json&) = default;

 private:
  // A value of `type` whose `member` is `value` (the factories above).
  template <typename T>
  static Json Of(Type type, T Json::*member, T value);

  Type type_ = Type::kNull;
  bool bool_ = false;
  bool negative_ = false;  // kInt: value = negative_ ? -magnitude_ : magnitude_
  bool too_big_ = false;
  std::uint64_t magnitude_ = 0;  // kInt
  std::string string_;
  Array array_;
  Object object_;
};

// Parses one JSON value (surrounding whitespace allowed, nothing else).
// Throws invalid_argument "<param>: not valid JSON at byte <k>: <reason>".
[[nodiscard]] Json ParseJson(std::string_view text, std::string_view param);

// Appends the text of `value` in json.dumps' default form.
void WriteJson(const Json& value, std::string* out);
[[nodiscard]] std::string WriteJson(const Json& value);

// Typed reading with the path of the field in every error.
// `path` names the value being read: the parameter, then the field
// ("state.packer.buffered[3]"). All throw invalid_argument
// "<parameter>: <field>: <what>" ("state: packer.buffered[3]: expected a
// list, got an integer"), so the message starts with the parameter as every
// error of the core does (shardkit/base/errors.h).
[[noreturn]] void ThrowAtPath(std::string_view path, std::string_view what);
[[nodiscard]] const Json& Field(const Json& object, std::string_view path, std::string_view key);
void ExpectType(const Json& value, std::string_view path, Json::Type type);
[[nodiscard]] std::int64_t AsInt64(const Json& value, std::string_view path);
[[nodiscard]] std::uint64_t AsUint64(const Json& value, std::string_view path);
[[nodiscard]] bool AsBool(const Json& value, std::string_view path);
[[nodiscard]] const std::string& AsString(const Json& value, std::string_view path);
[[nodiscard]] const Json::Array& AsArray(const Json& value, std::string_view path);
// The list at `path`, read element by element: read(element, "<path>[i]")
// for each, in order (AsArray's error when `value` is not a list; read's own
// for a bad element).
template <typename Read>
[[nodiscard]] auto ReadList(const Json& value, std::string_view path, Read&& read) {
  using T = std::decay_t<std::invoke_result_t<Read&, const Json&, const std::string&>>;
  const Json::Array& a = AsArray(value, path);
  std::vector<T> out;
  out.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    out.push_back(read(a[i], std::string(path) + "[" + std::to_string(i) + "]"));
  }
  return out;
}
// Throws unless every key of `object` is in `allowed`.
void ExpectOnlyKeys(const Json& object, std::string_view path,
                    std::initializer_list<std::string_view> allowed);

// ---- Sealed states: one rule for every state kind --------------------------
// (the loader's, the packer's, the train plan's, the mixture's and the mixture
// loader's). A state's text ends with "checksum": 16 hex digits of
// StateChecksum(body), body = every other field, in the format's order, as
// WriteJson writes it. A reader re-encodes the values it has read into that
// body and checks the seal (CheckStateSeal) before it uses any of them, so an
// edit of any value, a relabelled version, a field added or removed shows.
// Each kind also carries a fingerprint of the data it belongs to, which its
// user checks against the data at hand (see the kind's header). The hash is
// not cryptographic: it catches edits and damage, not an adversary who
// recomputes it (the fingerprint and the kind's range checks still apply).
[[nodiscard]] std::uint64_t StateChecksum(const Json& body);
// The text of `body` (an object) with "checksum" appended as its last field.
[[nodiscard]] std::string SealState(const Json& body);
// Throws invalid_argument "<path>: checksum: ..." unless `state`'s "checksum"
// (16 lowercase hex digits) is StateChecksum(body).
void CheckStateSeal(const Json& state, std::string_view path, const Json& body);
// The value of `key`, 16 lowercase hex digits; throws naming path.key.
[[nodiscard]] std::uint64_t ReadHexField(const Json& object, std::string_view path,
                                         std::string_view key);
// The state's "version", which must be `current`: an older one is refused
// naming the version and `why_not` (what changed, so that reading it with
// this layout would deliver other data), never read with another layout.
void ExpectStateVersion(const Json& object, std::string_view path, std::int64_t current,
                        std::string_view kind, std::string_view why_not);

}  // namespace shardkit

#endif  // SHARDKIT_BASE_JSON_H_
