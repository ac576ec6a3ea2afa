#include "shardkit/base/errors.h"

#include <limits>
#include <stdexcept>

#include "shardkit/base/enum_names.h"

namespace shardkit {

namespace {
std::string Compose(std::string_view param, std::string_view what) {
  std::string message(param);
  message += ": ";
  message += what;
  return message;
}
}  // namespace

void ThrowInvalid(std::string_view param, std::string_view what) {
  throw std::invalid_argument(Compose(param, what));
}

void ThrowOutOfRange(std::string_view param, std::string_view what) {
  throw std::out_of_range(Compose(param, what));
}

void CheckEpoch(std::string_view param, std::uint64_t epoch) {
  if (epoch <= kMaxEpoch) return;
  // "state.epoch" names the field of a state: "state: epoch: ...".
  std::string field;
  if (const std::size_t dot = param.find('.'); dot != std::string_view::npos) {
    field = std::string(param.substr(dot + 1)) + ": ";
    param = param.substr(0, dot);
  }
  ThrowInvalid(param, field + std::to_string(epoch) +
                          " has no successor (the next epoch would wrap to 0); the largest "
                          "epoch is 2^64 - 2 = " +
                          std::to_string(kMaxEpoch));
}

void CheckAtLeast(std::string_view param, Index value, Index min) {
  if (value < min) {
    ThrowInvalid(param,
                 "must be at least " + std::to_string(min) + ", got " + std::to_string(value));
  }
}

namespace {
std::string RangeMessage(Index value, Index lo, Index hi, std::string_view context) {
  return std::to_string(value) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) +
         ")" + std::string(context);
}
}  // namespace

void CheckInRange(std::string_view param, Index value, Index lo, Index hi,
                  std::string_view context) {
  if (value < lo || value >= hi) ThrowInvalid(param, RangeMessage(value, lo, hi, context));
}

void CheckIndex(std::string_view param, Index value, Index lo, Index hi, std::string_view context) {
  if (value < lo || value >= hi) ThrowOutOfRange(param, RangeMessage(value, lo, hi, context));
}

void CheckPosition(std::string_view param, Index value, Index lo, Index hi,
                   std::string_view context) {
  if (value < lo || value > hi) {
    ThrowOutOfRange(param, std::to_string(value) + " is outside [" + std::to_string(lo) + ", " +
                               std::to_string(hi) + "]" + std::string(context));
  }
}

void CheckSlice(Index start, Index stop, Index size) {
  CheckPosition("start", start, 0, size);
  CheckPosition("stop", stop, start, size);
}

std::string Str(Index v) { return std::to_string(v); }

std::string QuoteForMessage(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > 64) out += "...";
  return out + "'";
}

namespace {
// "<param>: a <op> b overflows a 64-bit count": the words of CheckedMul and
// CheckedAdd.
[[noreturn]] void ThrowOverflow(std::string_view param, Index a, const char* op, Index b) {
  ThrowInvalid(param, std::to_string(a) + op + std::to_string(b) + " overflows a 64-bit count");
}
}  // namespace

Index CheckedMul(std::string_view param, Index a, Index b) {
  Index out;
  if (__builtin_mul_overflow(a, b, &out)) ThrowOverflow(param, a, " * ", b);
  return out;
}

Index CheckedAdd(std::string_view param, Index a, Index b) {
  Index out;
  if (__builtin_add_overflow(a, b, &out)) ThrowOverflow(param, a, " + ", b);
  return out;
}

}  // namespace shardkit
