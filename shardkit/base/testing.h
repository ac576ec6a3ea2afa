// Test helpers shared by the core's tests (header-only, tests only): the
// message an exception carries, a fresh temporary folder, and a state edited
// and sealed again. Nothing in the library includes this header.
#ifndef SHARDKIT_BASE_TESTING_H_
#define SHARDKIT_BASE_TESTING_H_

#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include "shardkit/base/json.h"

namespace shardkit::base_testing {

// What `f` throws as an `E` (std::invalid_argument unless named), or
// "no error" when it returns. Other exceptions pass through, so a test that
// expects a configuration error fails on an index error.
template <typename E = std::invalid_argument>
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

// An empty folder `<tmp>/shardkit_<prefix>_<name>_<pid>`, removed first if a
// previous run left it.
inline std::filesystem::path TempDir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() /
                 ("shardkit_" + prefix + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A state's text with `from` replaced by `to` and sealed again, as someone
// who recomputes the checksum would (shardkit/base/json.h): what only the
// checks behind the seal can refuse. `from` must occur in `text`.
inline std::string Resealed(const std::string& text, const std::string& from,
                            const std::string& to) {
  std::string edited = text;
  const std::size_t at = edited.find(from);
  if (at == std::string::npos) throw std::logic_error("Resealed: '" + from + "' not in the text");
  edited.replace(at, from.size(), to);
  Json body = Json::MakeObject();
  const Json parsed = ParseJson(edited, "state");
  for (const auto& [k, v] : parsed.object()) {
    if (k != "checksum") body.Set(k, v);
  }
  return SealState(body);
}

}  // namespace shardkit::base_testing

#endif  // SHARDKIT_BASE_TESTING_H_
