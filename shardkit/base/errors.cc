#include "shardkit/base/errors.h"

#include <limits>
#include <stdexcept>

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

void CheckAtLeast(std::string_view param, Index value, Index min) {
  if (value < min) {
    ThrowInvalid(param,
                 "must be at least " + std::to_string(min) + ", got " + std::to_string(value));
  }
}

Index CheckedMul(std::string_view param, Index a, Index b) {
  Index out;
  if (__builtin_mul_overflow(a, b, &out)) {
    ThrowInvalid(param,
                 std::to_string(a) + " * " + std::to_string(b) + " overflows a 64-bit count");
  }
  return out;
}

Index CheckedAdd(std::string_view param, Index a, Index b) {
  Index out;
  if (__builtin_add_overflow(a, b, &out)) {
    ThrowInvalid(param,
                 std::to_string(a) + " + " + std::to_string(b) + " overflows a 64-bit count");
  }
  return out;
}

}  // namespace shardkit
