#include "cli/args.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace shardkit::cli {

namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Reads a NumPy .npy file (format 1.0-3.0, little-endian, C order, one
// dimension) of bool/int/uint/float elements.
std::vector<double> ReadNpy(const std::string& flag, const std::string& path,
                            const std::string& bytes) {
  auto fail = [&](const std::string& why) -> UsageError {
    return UsageError(flag + ": " + path + ": " + why);
  };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    throw fail("not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    header_start = 10;
  } else {
    if (bytes.size() < 12) throw fail("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    header_start = 12;
  }
  if (header_start + header_len > bytes.size()) throw fail("truncated header");
  const std::string header = bytes.substr(header_start, header_len);
  auto field = [&](const std::string& key) {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) throw fail("header lacks '" + key + "'");
    size_t colon = header.find(':', k);
    return Trim(header.substr(colon + 1));
  };
  std::string descr = field("descr");
  if (descr.size() < 4 || descr[0] != '\'') throw fail("unsupported descr " + descr);
  descr = descr.substr(1, descr.find('\'', 1) - 1);
  if (field("fortran_order").rfind("False", 0) != 0) throw fail("fortran_order arrays unsupported");
  std::string shape = field("shape");
  shape = shape.substr(1, shape.find(')') - 1);
  size_t comma = shape.find(',');
  std::string first = Trim(comma == std::string::npos ? shape : shape.substr(0, comma));
  std::string rest = comma == std::string::npos ? "" : Trim(shape.substr(comma + 1));
  if (first.empty() || !rest.empty()) throw fail("expected a 1-D array, shape (" + shape + ")");
  const std::int64_t count = ParseInt(flag, first);
  const char order = descr[0];
  const char kind = descr[1];
  const int size = std::atoi(descr.c_str() + 2);
  if (order == '>' && size > 1) throw fail("big-endian arrays unsupported (" + descr + ")");
  const size_t data_start = header_start + header_len;
  if (static_cast<std::uint64_t>(count) * size > bytes.size() - data_start) {
    throw fail("truncated data: header promises " + std::to_string(count) + " elements of " +
               descr);
  }
  std::vector<double> out(static_cast<size_t>(count));
  const char* p = bytes.data() + data_start;
  for (std::int64_t i = 0; i < count; ++i, p += size) {
    double v;
    if (kind == 'f' && size == 8) {
      std::memcpy(&v, p, 8);
    } else if (kind == 'f' && size == 4) {
      float f;
      std::memcpy(&f, p, 4);
      v = f;
    } else if ((kind == 'i' || kind == 'u' || kind == 'b') &&
               (size == 1 || size == 2 || size == 4 || size == 8)) {
      std::uint64_t raw = 0;
      std::memcpy(&raw, p, size);
      if (kind == 'i' && size < 8 && (raw >> (8 * size - 1)) & 1) {
        raw |= ~std::uint64_t{0} << (8 * size);  // sign-extend
      }
      v = kind == 'u' || kind == 'b' ? static_cast<double>(raw)
                                     : static_cast<double>(static_cast<std::int64_t>(raw));
    } else {
      throw fail("unsupported dtype " + descr);
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
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

std::vector<double> ReadNumbers(const std::string& flag, const std::string& path) {
  std::string bytes;
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    bytes = ss.str();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(flag + ": cannot open '" + path + "': " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  if (bytes.size() >= 6 && std::memcmp(bytes.data(), "\x93NUMPY", 6) == 0) {
    return ReadNpy(flag, path, bytes);
  }
  std::vector<double> out;
  std::istringstream in(bytes);
  std::string line;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    double v = 0;
    auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || ptr != t.data() + t.size()) {
      throw UsageError(flag + ": " + (path == "-" ? std::string("stdin") : path) + " line " +
                       std::to_string(number) + ": '" + t + "' is not a number");
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace shardkit::cli
