// Opening a TokenSource from the files users have, by format: the one rule
// behind shardkit.open_source (Python) and loader-stats --source (CLI).
//
// Formats:
//   npy       shardkit's pairs: a directory of <stem>.tokens.npy|.bin +
//             <stem>.offsets.npy|.bin (TokenSource::OpenDirectory), or one
//             <stem>.tokens.npy|.bin file with its offsets file beside it
//   megatron  a Megatron-LM IndexedDataset PREFIX.bin + PREFIX.idx
//             (megatron_source.h); the path is PREFIX, or either file
//   olmo      an OLMo / Dolma headerless token file (olmo_source.h): its
//             documents from its .csv.gz or an EOS scan (OpenSourceOptions::olmo)
//   arrow     a Hugging Face `datasets` save_to_disk folder (its .arrow files
//             in state.json's order) or one Arrow IPC file; the documents are
//             the rows of the list<intN> column OpenSourceOptions::column
//             (arrow_source.h)
//
// Detection, for a path given without a format, in this order:
//   0. a directory holding state.json or dataset_dict.json, or a path
//      ending in .arrow                              -> arrow
//      (a path ending in .parquet is refused naming the Python reader)
//   1. a directory                                   -> npy
//   2. PATH.idx and PATH.bin exist                   -> megatron, prefix PATH
//   3. PATH ends in .idx or .bin and its sibling (.bin / .idx) exists
//                                                    -> megatron
//   4. PATH ends in .tokens.npy or .tokens.bin       -> npy
//   5. PATH ends in .npy and does not start with the NumPy magic
//      (a headerless token file)                     -> olmo
//   otherwise invalid_argument "path: '<path>': cannot tell the format ...".
// Several paths are one source (TokenSource::Concat): the documents of
// paths[0] first, then paths[1]'s, ...; each path is detected on its own.
// A path holding *, ? or [ that names no file is a glob pattern: its matches
// in byte order of their paths, in its place (no match: invalid_argument
// naming the pattern). A directory given with format olmo is its *.npy
// files, with format arrow and no state.json its *.arrow files, both in byte
// order of their names.
//
// Errors: std::invalid_argument naming path (a missing or unreadable file, a
// file the format refuses: see each format's reader) or format.
//
// Thread-safety: pure functions over the files named.
#ifndef SHARDKIT_LOADER_SOURCE_FORMATS_H_
#define SHARDKIT_LOADER_SOURCE_FORMATS_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/loader/olmo_source.h"
#include "shardkit/loader/token_source.h"

namespace shardkit {

enum class SourceFormat { kNpy, kMegatron, kOlmo, kArrow };

// "npy" | "megatron" | "olmo" | "arrow"; throws invalid_argument naming
// format.
[[nodiscard]] SourceFormat ParseSourceFormat(std::string_view name);
[[nodiscard]] std::string_view SourceFormatName(SourceFormat format);

struct OpenSourceOptions {
  std::optional<SourceFormat> format;  // nullopt: detected per path
  SourceOptions npy;                   // raw token dtype of npy-format raw files
  OlmoOptions olmo;                    // dtype, EOS/BOS ids of olmo-format files
  std::string column = "input_ids";    // the token column of arrow-format files
};

// `path` as the paths it stands for: itself, or a glob pattern's matches in
// byte order (see above). Throws invalid_argument naming path when a
// pattern matches nothing.
[[nodiscard]] std::vector<std::string> ExpandSourcePath(const std::string& path);

// The format of `path` by the detection rule above; throws invalid_argument
// naming path when no rule matches.
[[nodiscard]] SourceFormat DetectSourceFormat(const std::string& path);

// Every path opened in its format (given, or detected) as one source.
// REQUIRES nothing; throws invalid_argument naming path (none given, or a
// path's files refused) or format.
[[nodiscard]] std::shared_ptr<const TokenSource> OpenSource(const std::vector<std::string>& paths,
                                                            const OpenSourceOptions& options = {});

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_SOURCE_FORMATS_H_
