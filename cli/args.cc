#include "cli/args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "shardkit/loader/files.h"
#include "shardkit/loader/npy.h"

namespace shardkit::cli {

namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

Args::Args(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {
  Flag("help", "", "show this help and exit");
}

Args& Args::Flag(const std::string& name, const std::string& value, const std::string& help) {
  order_.push_back(name);
  specs_[name] = {value, help};
  return *this;
}

bool Args::Parse(const std::vector<std::string>& argv) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      throw UsageError(command_ + ": unexpected argument '" + arg + "' (see --help)");
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto spec = specs_.find(name);
    if (spec == specs_.end()) {
      throw UsageError("--" + name + ": unknown flag for '" + command_ + "' (see --help)");
    }
    if (name == "help") {
      std::cout << Help();
      return false;
    }
    if (spec->second.value.empty()) {
      if (inline_value) throw UsageError("--" + name + ": takes no value, got '" + value + "'");
      value = "1";
    } else if (!inline_value) {
      if (i + 1 >= argv.size()) throw UsageError("--" + name + ": missing value");
      // "--items --world 4": the value of --items is missing, not '4'
      // unexpected. A value that starts with "--" is written --name=VALUE.
      if (argv[i + 1].rfind("--", 0) == 0) {
        throw UsageError("--" + name + ": missing value (got the flag '" + argv[i + 1] +
                         "'; write --" + name + "=VALUE for a value that starts with --)");
      }
      value = argv[++i];
    }
    if (values_.count(name)) throw UsageError("--" + name + ": given twice");
    values_[name] = value;
  }
  return true;
}

bool Args::Has(const std::string& name) const { return values_.count(name) > 0; }

std::optional<std::string> Args::Str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::Str(const std::string& name, const std::string& fallback) const {
  return Str(name).value_or(fallback);
}

std::optional<std::int64_t> Args::Int(const std::string& name) const {
  auto s = Str(name);
  if (!s) return std::nullopt;
  return ParseInt("--" + name, *s);
}

std::int64_t Args::Int(const std::string& name, std::int64_t fallback) const {
  return Int(name).value_or(fallback);
}

std::uint64_t Args::Uint(const std::string& name, std::uint64_t fallback) const {
  auto s = Str(name);
  if (!s) return fallback;
  std::uint64_t v = 0;
  const std::string t = Trim(*s);
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) {
    throw UsageError("--" + name + ": '" + *s + "' does not fit in 64 bits");
  }
  if (ec != std::errc() || ptr != t.data() + t.size() || t.empty()) {
    throw UsageError("--" + name + ": '" + *s + "' is not a non-negative integer");
  }
  return v;
}

std::int64_t Args::RequireInt(const std::string& name) const {
  auto v = Int(name);
  if (!v) throw UsageError("--" + name + ": required (see --help)");
  return *v;
}

std::string Args::RequireStr(const std::string& name) const {
  auto v = Str(name);
  if (!v) throw UsageError("--" + name + ": required (see --help)");
  return *v;
}

std::vector<std::int64_t> Args::IntList(const std::string& name) const {
  std::vector<std::int64_t> out;
  auto s = Str(name);
  if (!s) return out;
  std::stringstream stream(*s);
  std::string part;
  while (std::getline(stream, part, ',')) out.push_back(ParseInt("--" + name, part));
  return out;
}

std::string Args::Help() const {
  std::ostringstream out;
  out << "usage: shardkit " << command_ << " [flags]\n\n" << summary_ << "\n\nflags:\n";
  for (const auto& name : order_) {
    const Spec& spec = specs_.at(name);
    std::string left = "  --" + name + (spec.value.empty() ? "" : " " + spec.value);
    out << left;
    if (left.size() < 28) {
      out << std::string(28 - left.size(), ' ');
    } else {
      out << "\n" << std::string(28, ' ');
    }
    out << spec.help << "\n";
  }
  return out.str();
}

std::vector<std::int64_t> ListedRanks(const Args& args, std::int64_t world,
                                      const std::function<void(std::int64_t)>& validate) {
  constexpr std::int64_t kMaxListedRanks = 1000000;
  if (auto rank = args.Int("rank")) {
    validate(*rank);
    return {*rank};
  }
  if (world > kMaxListedRanks) {
    throw UsageError("--world: " + std::to_string(world) +
                     " ranks are too many to list; pass --rank");
  }
  std::vector<std::int64_t> ranks(static_cast<size_t>(world));
  for (std::int64_t r = 0; r < world; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

std::string Choices(const std::vector<std::string_view>& names, std::string_view fallback,
                    const std::vector<std::string_view>& skip) {
  std::string out;
  for (std::string_view name : names) {
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    if (!out.empty()) out += " | ";
    out += name;
    if (name == fallback) out += " (default)";
  }
  return out;
}

std::int64_t ParseInt(const std::string& flag, const std::string& text) {
  const std::string t = Trim(text);
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) {
    throw UsageError(flag + ": '" + text + "' does not fit in a signed 64-bit integer");
  }
  if (ec != std::errc() || ptr != t.data() + t.size() || t.empty()) {
    throw UsageError(flag + ": '" + text + "' is not an integer");
  }
  return v;
}

namespace {

std::string ReadAll(const std::string& flag, const std::string& path) {
  // The core's strict reader: regular files or stdin only, bounded.
  return ReadWholeFile(flag, path, kMaxNumberFileBytes);
}

std::string Where(const std::string& path) { return path == "-" ? "stdin" : path; }

}  // namespace

std::vector<double> ReadNumbers(const std::string& flag, const std::string& path) {
  return ReadNumberFile(flag, path);  // invalid_argument "<flag>: <path> ..."
}

std::vector<std::int64_t> ReadWholeNumbers(const std::string& flag, const std::string& path) {
  const std::string bytes = ReadAll(flag, path);
  auto bad = [&](std::int64_t i, const std::string& text) {
    return UsageError(flag + ": item " + std::to_string(i) + " is " + text + " in " + Where(path) +
                      ", expected a whole number in [0, 2^63)");
  };
  std::vector<std::int64_t> out;
  if (IsNpy(bytes)) {
    const NpyHeader h = ParseNpyHeader(bytes, bytes.size(), flag, path);
    if (h.count == 0)
      throw UsageError(flag + ": " + Where(path) + ": the .npy array holds no numbers");
    if (h.shape.size() != 1) {
      throw UsageError(flag + ": " + Where(path) + ": expected a 1-D array, got " +
                       std::to_string(h.shape.size()) + " dimensions");
    }
    if (h.kind == 'f') {
      for (double v : NpyToDoubles(bytes, flag, path)) {
        // 2^63 is the first double that does not fit; below it, whole
        // doubles convert exactly.
        if (!(v >= 0) || v != std::floor(v) || v >= 9223372036854775808.0) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%.17g", v);
          throw bad(static_cast<std::int64_t>(out.size()), buf);
        }
        out.push_back(static_cast<std::int64_t>(v));
      }
      return out;
    }
    out.resize(static_cast<size_t>(h.count));
    const char* p = bytes.data() + h.data_offset;
    for (std::int64_t i = 0; i < h.count; ++i, p += h.item_size) {
      std::uint64_t raw = 0;
      std::memcpy(&raw, p, static_cast<size_t>(h.item_size));  // little-endian (npy.h)
      const bool negative = h.kind == 'i' && ((raw >> (8 * h.item_size - 1)) & 1);
      if (negative || raw > static_cast<std::uint64_t>(INT64_MAX)) {
        std::int64_t shown = 0;
        if (negative && h.item_size < 8) raw |= ~std::uint64_t{0} << (8 * h.item_size);
        std::memcpy(&shown, &raw, 8);
        throw bad(i, negative ? std::to_string(shown) : std::to_string(raw));
      }
      out[static_cast<size_t>(i)] = static_cast<std::int64_t>(raw);
    }
    return out;
  }
  std::istringstream in(bytes);
  std::string line;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc() && ptr == t.data() + t.size() && v >= 0) {
      out.push_back(v);  // exact, whatever its size
      continue;
    }
    double d = 0;
    auto [dptr, dec] = std::from_chars(t.data(), t.data() + t.size(), d);
    if ((dec != std::errc() && dec != std::errc::result_out_of_range) ||
        dptr != t.data() + t.size()) {
      throw UsageError(flag + ": " + Where(path) + " line " + std::to_string(number) + ": '" + t +
                       "' is not a number");
    }
    if (dec != std::errc() || !(d >= 0) || d != std::floor(d) || d >= 9223372036854775808.0) {
      throw bad(static_cast<std::int64_t>(out.size()), t);
    }
    out.push_back(static_cast<std::int64_t>(d));  // "1e3", "4096.0"
  }
  if (out.empty()) {  // as ReadNumberFile: no number is an error, not zero items
    throw UsageError(flag + ": " + Where(path) + " holds no numbers" +
                     (bytes.empty() ? " (it is empty)" : ""));
  }
  return out;
}

std::vector<double> ParseDoubles(const std::string& flag, const std::string& text) {
  std::vector<double> out;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size()) {
      throw UsageError(flag + ": '" + part + "' is not a number (in '" + text + "')");
    }
    out.push_back(v);
  }
  return out;
}

// "POS:w0,w1,...;POS:w0,w1,..."
std::vector<SchedulePoint> ParseSchedule(const std::string& text) {
  std::vector<SchedulePoint> out;
  std::stringstream stream(text);
  std::string point;
  while (std::getline(stream, point, ';')) {
    const std::size_t colon = point.find(':');
    if (colon == std::string::npos) {
      throw UsageError("--schedule: '" + point + "' is not POSITION:W0,W1,...");
    }
    SchedulePoint p;
    p.position = ParseInt("--schedule", point.substr(0, colon));
    p.weights = ParseDoubles("--schedule", point.substr(colon + 1));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace shardkit::cli
