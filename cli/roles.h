// --mesh / --data-axes / --broadcast-axes: the data roles of every rank of a
// parallelism mesh (shardkit/layout/data_roles.h), for the commands whose plan
// is split over data-parallel ranks (shard, audit, eval-plan). Ranks follow
// the rank order of torchrun and MPI (row-major over --mesh, last axis
// fastest); the plan's world is the data-parallel size.
#ifndef SHARDKIT_CLI_ROLES_H_
#define SHARDKIT_CLI_ROLES_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "cli/args.h"
#include "cli/json.h"
#include "shardkit/layout/data_roles.h"

namespace shardkit::cli {

// Declares --mesh, --data-axes and --broadcast-axes on `args`.
void AddRolesFlags(Args& args);

// Every rank's roles, rank by rank; nullopt without --mesh. UsageError naming
// --data-axes when --mesh comes without it (or the reverse), --mesh when the
// mesh has more than 4096 ranks; the core's errors name --data-axes or
// --broadcast-axes.
[[nodiscard]] std::optional<std::vector<DataRoles>> RolesFromArgs(const Args& args);

// The plan's world: --world, or the roles' dp_size. UsageError naming --world
// when both are given and differ, or neither.
[[nodiscard]] std::int64_t WorldFromArgs(const Args& args,
                                         const std::optional<std::vector<DataRoles>>& roles);

// "roles": one object per rank (rank, dp_rank, dp_size, replica_group, loads,
// source, saver, reporter), and "dp_size".
void RolesJson(Json& j, const std::vector<DataRoles>& roles);

// The same as a table on stdout, one line per rank.
void PrintRoles(const std::vector<DataRoles>& roles);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_ROLES_H_
