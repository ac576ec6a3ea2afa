// Error helpers shared by the core.
//
// Every configuration error names the parameter it concerns: the message of a
// std::invalid_argument thrown by the core starts with "<parameter>: ", where
// <parameter> is the snake_case name the Python API uses (num_items,
// world_size, rank, ...). The CLI rewrites that prefix into the flag the user
// typed (--items, --world, ...). An index outside its domain throws
// std::out_of_range with the same convention.
//
// Thread-safety: stateless.
#ifndef SHARDKIT_BASE_ERRORS_H_
#define SHARDKIT_BASE_ERRORS_H_

#include <string>
#include <string_view>

#include "shardkit/base/index.h"

namespace shardkit {

// Throws std::invalid_argument("<param>: <what>").
[[noreturn]] void ThrowInvalid(std::string_view param, std::string_view what);

// Throws std::out_of_range("<param>: <what>").
[[noreturn]] void ThrowOutOfRange(std::string_view param, std::string_view what);

// The largest epoch: every epoch has a successor (the epoch a loader or a
// continuous plan moves on to) that does not wrap to 0.
inline constexpr std::uint64_t kMaxEpoch = ~std::uint64_t{0} - 1;
// Throws invalid_argument naming `param` when epoch > kMaxEpoch.
void CheckEpoch(std::string_view param, std::uint64_t epoch);

// REQUIRES nothing. Throws invalid_argument naming `param` unless value >= min.
void CheckAtLeast(std::string_view param, Index value, Index min);

// The one range check, in one wording: unless lo <= value < hi, throws
// "<param>: <value> is outside [<lo>, <hi>)<context>" (context: extra words
// such as " (world_size=4)"). CheckInRange throws invalid_argument (a
// configuration value, e.g. a constructor's rank); CheckIndex throws
// out_of_range (an index looked up in something already built).
void CheckInRange(std::string_view param, Index value, Index lo, Index hi,
                  std::string_view context = {});
void CheckIndex(std::string_view param, Index value, Index lo, Index hi,
                std::string_view context = {});

// The decimal text of v: the one spelling of numbers in messages.
[[nodiscard]] std::string Str(Index v);

// Returns a * b, or throws invalid_argument naming `param` when the product
// does not fit in an Index. REQUIRES: a >= 0 and b >= 0.
[[nodiscard]] Index CheckedMul(std::string_view param, Index a, Index b);

// Returns a + b, or throws invalid_argument naming `param` on overflow.
// REQUIRES: a >= 0 and b >= 0.
[[nodiscard]] Index CheckedAdd(std::string_view param, Index a, Index b);

}  // namespace shardkit

#endif  // SHARDKIT_BASE_ERRORS_H_
