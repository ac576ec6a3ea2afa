// Atomic file writes: the one way shardkit writes a file (loader states,
// reports, anything a user names as an output path).
//
// WriteFileAtomically(path, contents, param) writes `contents` to a fresh
// temporary file in the same directory as `path` (".<name>.tmp.<pid>.<n>"),
// writes all of it (retrying short writes and EINTR), fsyncs it, renames it
// over `path` and fsyncs the directory. A reader of `path` therefore sees the
// previous file or the new one, whole, never a mixture or a truncated file:
// a kill (even SIGKILL), a full disk or a file-size limit (RLIMIT_FSIZE)
// during the write leaves the previous file intact. (A file-size limit is an
// error, EFBIG, where SIGXFSZ is ignored, as in Python and the shardkit CLI;
// under the signal's default action the kernel kills the process, and the
// previous file is intact all the same.) On any failure the
// temporary is removed (unless the process itself was killed: a killed
// writer can leave a ".<name>.tmp.*" file, never a damaged `path`) and
// std::invalid_argument "<param>: cannot write '<path>': <strerror(errno)>"
// is thrown. Reading and writing the same path (`--resume ck.json
// --save-state ck.json`) is safe: the old file is replaced only at the rename.
//
// `path` may not be a directory. A symlink to a regular file: its target is
// replaced (the link stays). An existing path that is not a regular file (a
// device, a FIFO, /dev/stdout) is written in place (nothing to keep; renaming
// over it would replace the node). The new file's mode is 0666 minus the
// umask, as for any file the process creates (not the previous file's mode).
//
// Thread-safety: concurrent calls on distinct paths are safe; concurrent
// calls on one path leave one writer's contents whole (last rename wins).
#ifndef SHARDKIT_BASE_ATOMIC_FILE_H_
#define SHARDKIT_BASE_ATOMIC_FILE_H_

#include <string>
#include <string_view>

namespace shardkit {

// See above. Throws invalid_argument naming `param`, the path and errno's text.
void WriteFileAtomically(const std::string& path, std::string_view contents,
                         std::string_view param);

}  // namespace shardkit

#endif  // SHARDKIT_BASE_ATOMIC_FILE_H_
