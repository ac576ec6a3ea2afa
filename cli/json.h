// A minimal JSON writer: the CLI prints exactly one JSON object with --json.
//
//   Json j;
//   j.Begin().Key("items").Int(10).Key("ranks").BeginList() ... .End().End();
//   std::cout << j.str() << "\n";
//
// Commas are inserted automatically; doubles print with 17 significant
// digits (round-trip exact); NaN and infinities print as null.
#ifndef SHARDKIT_CLI_JSON_H_
#define SHARDKIT_CLI_JSON_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace shardkit::cli {

class Json {
 public:
  Json& Begin() { return Open('{'); }
  Json& BeginList() { return Open('['); }
  Json& End() {
    out_ += stack_.back() == '{' ? '}' : ']';
    stack_.pop_back();
    first_ = false;
    return *this;
  }
  Json& Key(std::string_view key) {
    Separate();
    Quote(key);
    out_ += ':';
    first_ = true;  // the value follows without a comma
    return *this;
  }
  Json& Int(std::int64_t v) { return Raw(std::to_string(v)); }
  // Seeds and epochs are unsigned 64-bit: printed as such, never as negative.
  Json& Uint(std::uint64_t v) { return Raw(std::to_string(v)); }
  Json& Bool(bool v) { return Raw(v ? "true" : "false"); }
  Json& Null() { return Raw("null"); }
  Json& Double(double v) {
    if (!std::isfinite(v)) return Null();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return Raw(buf);
  }
  Json& String(std::string_view s) {
    Separate();
    Quote(s);
    return *this;
  }
  Json& IntList(const std::vector<std::int64_t>& values) {
    BeginList();
    for (auto v : values) Int(v);
    return End();
  }
  Json& DoubleList(const std::vector<double>& values) {
    BeginList();
    for (auto v : values) Double(v);
    return End();
  }
  [[nodiscard]] const std::string& str() const { return out_; }

 private:
  Json& Open(char c) {
    Separate();
    out_ += c;
    stack_.push_back(c);
    first_ = true;
    return *this;
  }
  Json& Raw(std::string_view text) {
    Separate();
    out_ += text;
    return *this;
  }
  void Separate() {
    if (!first_ && !stack_.empty()) out_ += ',';
    first_ = false;
  }
  void Quote(std::string_view s) {
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\t':
          out_ += "\\t";
          break;
        case '\r':
          out_ += "\\r";
          break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out_ += buf;
          } else {
            out_ += static_cast<char>(c);
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<char> stack_;
  bool first_ = true;
};

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_JSON_H_
