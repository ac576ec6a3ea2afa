// Test helpers shared by the loader tests (header-only, tests only): an
// in-memory corpus whose own copy of every document is the oracle, a fresh
// temporary folder, and the message of an invalid_argument.
#ifndef SHARDKIT_LOADER_INTERNAL_TEST_CORPUS_H_
#define SHARDKIT_LOADER_INTERNAL_TEST_CORPUS_H_

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/base/json.h"
#include "shardkit/loader/token_source.h"

namespace shardkit::loader_testing {

// int32 tokens with their offsets, and a TokenSource viewing them. Add the
// documents, then Seal() once: the view points into the vectors, so the
// corpus must not be changed afterwards (moving it keeps the buffers).
struct TestCorpus {
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> offsets = {0};
  std::shared_ptr<const TokenSource> source;

  [[nodiscard]] Index num_documents() const { return static_cast<Index>(offsets.size()) - 1; }
  [[nodiscard]] Index length(Index d) const { return offsets[d + 1] - offsets[d]; }

  // Appends a document of `length` tokens; token k is token(k).
  void Add(Index length, const std::function<std::int32_t(Index)>& token) {
    for (Index k = 0; k < length; ++k) tokens.push_back(token(k));
    offsets.push_back(static_cast<std::int64_t>(tokens.size()));
  }

  void Seal() {
    source = TokenSource::FromMemory(tokens.data(), TokenDType::kInt32,
                                     static_cast<Index>(tokens.size()), offsets.data(),
                                     static_cast<Index>(offsets.size()));
  }
};

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

// What f throws as invalid_argument, or "no error".
inline std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
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

}  // namespace shardkit::loader_testing

#endif  // SHARDKIT_LOADER_INTERNAL_TEST_CORPUS_H_
