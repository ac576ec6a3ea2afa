// Rank, world size and local rank of this process, discovered from the
// launcher's environment variables.
//
// shardkit never starts a distributed runtime: the engine is the user's. The
// Python package first asks the engine that is running (torch.distributed,
// then JAX); this header covers what every launcher leaves in the
// environment, checked in this order (the first complete source wins):
//   1. torchrun / torch.distributed.launch: RANK, WORLD_SIZE, LOCAL_RANK
//   2. Open MPI (mpirun):  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                          OMPI_COMM_WORLD_LOCAL_RANK
//   3. PMI (MPICH, Intel MPI, srun --mpi=pmi2): PMI_RANK, PMI_SIZE,
//                          MPI_LOCALRANKID or PMI_LOCAL_RANK
//   4. SLURM (srun):       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//   5. nothing:            rank 0 of a world of 1
// torchrun comes first because it is the most specific: a torchrun inside a
// SLURM allocation (or an MPI job) sets its own RANK for the processes it
// starts, while the SLURM / MPI variables still describe the launcher task.
// MPI's variables come before SLURM's for the same reason (mpirun under srun).
//
// Thread-safety: pure functions; DiscoverFromEnvironment reads getenv.
#ifndef SHARDKIT_EVAL_DIST_H_
#define SHARDKIT_EVAL_DIST_H_

#include <functional>
#include <optional>
#include <string>

#include "shardkit/base/errors.h"

namespace shardkit {

struct ProcessInfo {
  Index rank = 0;
  Index world_size = 1;
  Index local_rank = 0;
  std::string source = "default";  // "torchrun", "openmpi", "pmi", "slurm", "default"
};

// Looks a variable up; nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Applies the order above to `env`. A source counts when its rank and size
// variables are both set. Throws invalid_argument naming the variable when a
// value is not an integer, the size is < 1, or the rank (or local rank) is
// outside [0, size).
[[nodiscard]] ProcessInfo DiscoverProcess(const EnvLookup& env);

// DiscoverProcess over the process environment (getenv).
[[nodiscard]] ProcessInfo DiscoverFromEnvironment();

}  // namespace shardkit

#endif  // SHARDKIT_EVAL_DIST_H_
