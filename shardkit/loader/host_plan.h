// The shared host plan: one planner per host for an equal-steps run.
//
// Every rank of an equal-steps run plans the whole epoch (train_plan.h: the
// pack stream and the deal of all W ranks' documents) and keeps its own
// rows, so a host with L ranks plans the epoch L times. With a shared host
// plan, local rank 0 plans it once, writes every rank's steps to one file in
// shared memory (/dev/shm) and the host's other local ranks map that file
// read-only and read their rows from it (TrainPlan::ReadShared):
//
//   name     <directory>/shardkit-plan-<key>.bin, key = a hash of the plan's
//            Fingerprint() and Describe() (the stream fingerprint: the
//            documents' lengths and the data's identity, every packing, deal
//            and batch option, epoch and position) and this format's
//            version. Any other plan has another name.
//   write    local rank 0 runs the plan's one pass (as ReadOnce does) and
//            writes the file with WriteFileAtomically (temporary + rename): a
//            reader sees no file or the whole file.
//   seal     the header (magic, version, key, sizes, the plan's summary, the
//            offsets of the W rank sections) carries a checksum, and so does
//            every rank's section (base/hash.h's Hasher); a reader checks the
//            header and its own rank's section (O(its own rows)), each
//            copied out of the mapping first: the checks and every read see
//            the copy, so a file edited or cut in place after the check
//            changes nothing delivered and cannot fault a read (SIGBUS).
//   read     the other local ranks wait for the file (polling, up to
//            `timeout_seconds`; then invalid_argument naming the file and
//            local rank 0), map it and check it. A file that fails a check
//            (another format, a truncated or edited file, another plan's
//            file under this name) is never trusted: that rank plans the
//            epoch itself (role "recomputed"), and local rank 0, finding
//            such a file, rebuilds it.
//   remove   local rank 0 removes the file when its reader, having read past
//            the plan's last step (the loader's epoch is over), is destroyed;
//            ranks that mapped it keep their mapping. A reader destroyed
//            before (a loader built only to validate options, a crashed run)
//            leaves the file, which the next local rank 0 of the same plan
//            reuses ("reused": checked whole, then written again as a file
//            of its own, so that the loader that left it, removing only the
//            file it mapped, cannot remove it under the ranks about to map
//            it). The next epoch's loader, which a loader builds when its
//            epoch ends, leaves its file at the end of a run: a run resumed
//            at that epoch reuses it; files of runs that never come back stay
//            until removed (rm <directory>/shardkit-plan-*.bin).
//
// What a rank delivers through the shared plan is exactly what it delivers
// without it (the same TrainStep for every step; the same num_steps,
// summary and states): the file holds the plan's own steps, written by the
// same code that deals them.
//
// Memory: the file holds every rank's rows of the epoch (about 32 bytes per
// piece plus 24 per row), in the host's shared memory while the epoch runs.
// Time: local rank 0 plans the whole epoch before the others can start (the
// plan's construction time; docs/benchmarks.md), instead of every rank
// planning it.
//
// Thread-safety: as TrainPlan::Reader; the file is read-only once written.
#ifndef SHARDKIT_LOADER_HOST_PLAN_H_
#define SHARDKIT_LOADER_HOST_PLAN_H_

#include <string>
#include <string_view>

#include "shardkit/base/index.h"

namespace shardkit {

struct HostPlanOptions {
  // This process's rank on its host (torchrun's LOCAL_RANK): 0 plans and
  // writes the file; others map it. REQUIRES >= 0.
  Index local_rank = 0;
  // Where the file lives: a memory file system (default /dev/shm).
  std::string directory = "/dev/shm";
  // How long a local rank other than 0 waits for the file. REQUIRES > 0.
  double timeout_seconds = 600;
};

// How ReadShared obtained the rank's steps.
struct HostPlanInfo {
  std::string path;
  // "built" (local rank 0 planned and wrote the file), "reused" (local rank
  // 0 found a valid file of this plan), "mapped" (another local rank mapped
  // local rank 0's file), "recomputed" (the file failed a check: this rank
  // planned the epoch itself).
  std::string_view role;
};

// The environment's values: HostPlanOptions with local_rank from LOCAL_RANK
// (default 0), directory from SHARDKIT_SHARE_PLAN_DIR (default /dev/shm) and
// timeout_seconds from SHARDKIT_SHARE_PLAN_TIMEOUT (default 600). Throws
// invalid_argument naming the variable when a value does not parse or is
// out of range.
[[nodiscard]] HostPlanOptions HostPlanOptionsFromEnvironment();

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_HOST_PLAN_H_
