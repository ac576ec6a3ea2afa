#include "shardkit/loader/source_formats.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/errors.h"
#include "shardkit/loader/arrow_source.h"

namespace shardkit {

namespace {

constexpr EnumNames<SourceFormat, 4> kFormats{
    "format", "source format", {"npy", "megatron", "olmo", "arrow"}};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// Whether the file's first bytes are "\x93NUMPY" (an unreadable file: no).
bool StartsWithNumpyMagic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[6] = {};
  in.read(head, sizeof head);
  return in.gcount() == 6 && std::string_view(head, 6) == std::string_view("\x93NUMPY", 6);
}

// PATH.idx / PATH.bin -> PATH; a prefix stays itself.
std::string MegatronPrefix(const std::string& path) {
  if ((EndsWith(path, ".idx") || EndsWith(path, ".bin")) && !Exists(path + ".idx")) {
    return path.substr(0, path.size() - 4);
  }
  return path;
}

std::shared_ptr<const TokenSource> OpenNpy(const std::string& path, const SourceOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return TokenSource::OpenDirectory(path, options);
  for (const char* ext : {".npy", ".bin"}) {
    const std::string suffix = std::string(".tokens") + ext;
    if (EndsWith(path, suffix)) {
      const std::string offsets = path.substr(0, path.size() - suffix.size()) + ".offsets" + ext;
      if (!Exists(offsets)) ThrowInvalid("path", path + " has no offsets file " + offsets);
      return TokenSource::Open(path, offsets, options);
    }
  }
  ThrowInvalid("path", "'" + path +
                           "': an npy source is a directory of <stem>.tokens.npy + "
                           "<stem>.offsets.npy pairs or one <stem>.tokens.npy file");
}

// The files of `dir` ending in `suffix`, in byte order of their names.
std::vector<std::string> FilesEndingIn(const std::string& dir, std::string_view suffix,
                                       std::string_view what) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string p = entry.path().string();
    if (EndsWith(p, suffix) && entry.is_regular_file(ec)) out.push_back(p);
  }
  if (ec) ThrowInvalid("path", "cannot list '" + dir + "': " + ec.message());
  std::sort(out.begin(), out.end());
  if (out.empty()) {
    ThrowInvalid("path", "'" + dir + "' holds no *" + std::string(suffix) + " files (" +
                             std::string(what) + ")");
  }
  return out;
}

}  // namespace

std::vector<std::string> ExpandSourcePath(const std::string& path) {
  if (path.find_first_of("*?[") == std::string::npos || Exists(path)) return {path};
  glob_t g{};
  const int rc = ::glob(path.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty())) {
    ThrowInvalid("path", "'" + path + "': the pattern matches no file");
  }
  if (rc != 0)
    ThrowInvalid("path", "'" + path + "': cannot expand the pattern (a folder unreadable?)");
  std::sort(out.begin(), out.end());  // byte order, whatever the locale
  return out;
}

SHARDKIT_ENUM_PARSE_AND_NAME(SourceFormat, kFormats, ParseSourceFormat, SourceFormatName)

SourceFormat DetectSourceFormat(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path dir(path);
    if (Exists((dir / "state.json").string()) || Exists((dir / "dataset_dict.json").string())) {
      return SourceFormat::kArrow;
    }
    return SourceFormat::kNpy;
  }
  if (EndsWith(path, ".arrow")) return SourceFormat::kArrow;
  if (EndsWith(path, ".parquet")) {
    ThrowInvalid("path", "'" + path +
                             "': Parquet is decoded by the Python package (shardkit.open_source, "
                             "pyarrow); for the core, convert it once: "
                             "datasets.Dataset.from_parquet(path).save_to_disk(folder)");
  }
  if (Exists(path + ".idx") && Exists(path + ".bin")) return SourceFormat::kMegatron;
  const std::string stem = path.size() >= 4 ? path.substr(0, path.size() - 4) : "";
  if ((EndsWith(path, ".idx") && Exists(stem + ".bin")) ||
      (EndsWith(path, ".bin") && Exists(stem + ".idx"))) {
    return SourceFormat::kMegatron;
  }
  if (EndsWith(path, ".tokens.npy") || EndsWith(path, ".tokens.bin")) return SourceFormat::kNpy;
  if (EndsWith(path, ".npy") && Exists(path) && !StartsWithNumpyMagic(path)) {
    return SourceFormat::kOlmo;
  }
  ThrowInvalid("path", "'" + path +
                           "': cannot tell the format (not a directory, no PATH.idx + PATH.bin, "
                           "not a <stem>.tokens.npy, not a headerless .npy); does it exist? Or "
                           "give format (npy, megatron, olmo, arrow)");
}

std::shared_ptr<const TokenSource> OpenSource(const std::vector<std::string>& paths,
                                              const OpenSourceOptions& options) {
  if (paths.empty()) ThrowInvalid("path", "no paths; give at least one");
  std::vector<std::string> expanded;
  for (const std::string& path : paths) {
    for (std::string& p : ExpandSourcePath(path)) expanded.push_back(std::move(p));
  }
  std::vector<std::shared_ptr<const TokenSource>> parts;
  for (const std::string& path : expanded) {
    const SourceFormat format = options.format ? *options.format : DetectSourceFormat(path);
    switch (format) {
      case SourceFormat::kNpy:
        parts.push_back(OpenNpy(path, options.npy));
        break;
      case SourceFormat::kMegatron:
        parts.push_back(TokenSource::OpenMegatron(MegatronPrefix(path)));
        break;
      case SourceFormat::kOlmo: {
        std::error_code ec;
        if (std::filesystem::is_directory(path, ec)) {
          for (const std::string& file : FilesEndingIn(path, ".npy", "OLMo token files")) {
            parts.push_back(TokenSource::OpenOlmo(file, options.olmo));
          }
        } else {
          parts.push_back(TokenSource::OpenOlmo(path, options.olmo));
        }
        break;
      }
      case SourceFormat::kArrow: {
        std::error_code ec;
        const bool saved = Exists((std::filesystem::path(path) / "state.json").string()) ||
                           Exists((std::filesystem::path(path) / "dataset_dict.json").string());
        if (std::filesystem::is_directory(path, ec) && !saved) {
          for (const std::string& file : FilesEndingIn(path, ".arrow", "Arrow files")) {
            parts.push_back(TokenSource::OpenArrow(file, options.column));
          }
        } else if (std::filesystem::is_directory(path, ec)) {
          for (const std::string& file : ArrowFilesOfFolder(path)) {
            parts.push_back(TokenSource::OpenArrow(file, options.column));
          }
        } else {
          parts.push_back(TokenSource::OpenArrow(path, options.column));
        }
        break;
      }
    }
  }
  return parts.size() == 1 ? parts[0] : TokenSource::Concat(parts);
}

}  // namespace shardkit
