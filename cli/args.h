// A small strict command-line parser for the shardkit subcommands.
//
// Flags are declared before parsing; an unknown flag, a missing value or a
// value that does not parse is a UsageError whose message names the flag and
// the value, which main() prints as one line before exiting with status 2.
#ifndef SHARDKIT_CLI_ARGS_H_
#define SHARDKIT_CLI_ARGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/sharding/mixture.h"

namespace shardkit::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  Args(std::string command, std::string summary);

  // Declares a flag. `value` is the placeholder shown in --help ("N"), empty
  // for a switch that takes no value.
  Args& Flag(const std::string& name, const std::string& value, const std::string& help);

  // Parses argv after the subcommand. Returns false when --help was given
  // (the help text has been printed to stdout).
  bool Parse(const std::vector<std::string>& argv);

  [[nodiscard]] bool Has(const std::string& name) const;
  [[nodiscard]] std::string Str(const std::string& name, const std::string& fallback) const;
  [[nodiscard]] std::optional<std::string> Str(const std::string& name) const;
  [[nodiscard]] std::int64_t Int(const std::string& name, std::int64_t fallback) const;
  [[nodiscard]] std::optional<std::int64_t> Int(const std::string& name) const;
  [[nodiscard]] std::uint64_t Uint(const std::string& name, std::uint64_t fallback) const;
  // A required flag: UsageError "--name: required" when missing.
  [[nodiscard]] std::int64_t RequireInt(const std::string& name) const;
  [[nodiscard]] std::string RequireStr(const std::string& name) const;
  [[nodiscard]] std::vector<std::int64_t> IntList(const std::string& name) const;

  [[nodiscard]] std::string Help() const;

 private:
  struct Spec {
    std::string value, help;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
};

// The ranks a command prints: the one given with --rank (after `validate`
// accepts it), else every rank of `world`; UsageError naming --world when
// there are more than a million to list.
[[nodiscard]] std::vector<std::int64_t> ListedRanks(
    const Args& args, std::int64_t world, const std::function<void(std::int64_t)>& validate);

// "a | b (default) | c" from a core name table (PackAlgorithmNames() and the
// like), so a --help lists exactly what the parser accepts; names in `skip`
// are left out (a value a command refuses).
[[nodiscard]] std::string Choices(const std::vector<std::string_view>& names,
                                  std::string_view fallback,
                                  const std::vector<std::string_view>& skip = {});

// Comma-separated numbers ("6,3,1"); UsageError naming `flag` and the part
// that is not a number.
[[nodiscard]] std::vector<double> ParseDoubles(const std::string& flag, const std::string& text);
// A schedule "POS:W0,W1,...;POS:..."; UsageError naming --schedule.
[[nodiscard]] std::vector<SchedulePoint> ParseSchedule(const std::string& text);

// Parses a signed 64-bit integer; UsageError naming `flag` and `text` if it is
// not one or does not fit.
[[nodiscard]] std::int64_t ParseInt(const std::string& flag, const std::string& text);

// Numbers from `path` ("-" is stdin) through the core's strict reader
// (shardkit/loader/files.h ReadNumberFile): invalid_argument naming `flag`,
// the file and the offending line or header.
[[nodiscard]] std::vector<double> ReadNumbers(const std::string& flag, const std::string& path);

// Reads whole numbers >= 0 (lengths, image counts) like ReadNumbers, exactly:
// integers of any size below 2^63 (text or integer .npy) are never rounded
// through a double. UsageError naming `flag`, the file and the item.
[[nodiscard]] std::vector<std::int64_t> ReadWholeNumbers(const std::string& flag,
                                                         const std::string& path);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_ARGS_H_
