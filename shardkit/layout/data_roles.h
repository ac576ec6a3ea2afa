// DataRoles: what one rank of a parallel job does with data, from its mesh.
//
// The mesh's devices are numbered row-major (see mesh.h) and owners[d] is the
// rank holding device d: one device per rank for torch DeviceMesh / MPI /
// torchrun (owners is the mesh's rank tensor, flattened), several per process
// for a JAX mesh (owners = process index). `data_axes` name the axes along
// which data differs (data parallel, FSDP, ...); every other axis (tensor,
// pipeline, context, expert, ...) replicates data.
//
// The data coordinate of device d is the mixed-radix number of its coordinates
// along data_axes, the first listed most significant (the tile index of a
// batch dimension sharded P(data_axes)). Let S(r) be the set of data
// coordinates of rank r's devices. The S(r) must partition the data
// coordinates into classes of equal size (two ranks' sets are equal or
// disjoint); then
//   dp_size      = number of classes (D / |S(r)|, D = product of data sizes),
//   dp_rank      = position of S(r) among the classes ordered by their least
//                  coordinate (for one device per rank: the data coordinate),
//   replica_group= the ranks r' with S(r') = S(r), ascending: they must see
//                  identical data (the rank itself included).
// Loading. `broadcast_axes` (non-data axes) name where data is received
// rather than read: a rank loads iff it holds a device whose coordinates along
// every broadcast axis are 0. Whale's rule (pipeline stage 0 = master workers
// read; later stages take none) is broadcast_axes = {"pipeline axis"}; "one
// rank per tensor-parallel group reads and broadcasts" is {"tp"}. source() is
// the rank this rank's data comes from: itself when it loads, else the owner
// of its first device with the broadcast coordinates set to 0.
// saver() is the least loading rank of the replica group: exactly one rank per
// group saves the loader state.
// reporter() is the least rank of the replica group: the one rank per group
// whose outputs count when outputs are gathered or summed over all ranks (an
// evaluation's unshard and global metric sums), so that the replicas, which
// hold the same outputs, count once (see ReplicaSources in eval/eval_plan.h).
//
// Context parallelism. `cp_axes` (non-data, non-broadcast axes) split every
// row of the data over C = the product of their sizes CP ranks: the CP ranks
// of a data shard get the same rows of the plan (they share dp_rank) but
// complementary slices of them (shardkit/packing/context_parallel.h), so they
// are not replicas of each other. cp_rank = the mixed-radix number of the
// rank's coordinates along cp_axes (the first listed most significant; all of
// the rank's devices must agree), cp_size = C; replica_group and reporter()
// are then the ranks with the same data shard and the same cp_rank (the TP
// ranks inside a CP rank stay replicas). saver() still picks one rank per
// data shard: the loader state is the same on every CP rank.
//
// Cost: construction is O(mesh size) time and memory (it validates the whole
// mesh, so every rank fails the same way on a bad layout).
// Thread-safety: immutable after construction.
#ifndef SHARDKIT_LAYOUT_DATA_ROLES_H_
#define SHARDKIT_LAYOUT_DATA_ROLES_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/layout/mesh.h"

namespace shardkit {

class DataRoles {
 public:
  // REQUIRES: data_axes, broadcast_axes and cp_axes name distinct axes of
  // `mesh`, no axis in two of them; `rank` holds a device of the mesh.
  // Throws invalid_argument naming `data_axes`, `broadcast_axes` or `cp_axes`
  // and the name, `data_axes` when the ranks' data coordinates overlap partly
  // or come in unequal numbers (naming the two ranks), `cp_axes` when a rank's
  // devices have different CP coordinates; out_of_range naming `rank` when it
  // holds no device.
  DataRoles(const Mesh& mesh, std::vector<std::string> data_axes, Index rank,
            std::vector<std::string> broadcast_axes = {}, std::vector<std::string> cp_axes = {});

  [[nodiscard]] Index rank() const { return rank_; }
  [[nodiscard]] Index dp_rank() const { return dp_rank_; }
  [[nodiscard]] Index dp_size() const { return dp_size_; }
  [[nodiscard]] Index cp_rank() const { return cp_rank_; }
  [[nodiscard]] Index cp_size() const { return cp_size_; }
  [[nodiscard]] const std::vector<std::string>& cp_axes() const { return cp_axes_; }
  // Ranks that must see identical data, ascending, including rank().
  [[nodiscard]] const std::vector<Index>& replica_group() const { return replica_group_; }
  // The data coordinates of this rank's devices, ascending (S(rank)).
  [[nodiscard]] const std::vector<Index>& data_coordinates() const { return data_coordinates_; }
  [[nodiscard]] bool loads() const { return source_ == rank_; }
  [[nodiscard]] Index source() const { return source_; }
  [[nodiscard]] Index saver() const { return saver_; }
  [[nodiscard]] bool saves() const { return saver_ == rank_; }
  [[nodiscard]] Index reporter() const { return replica_group_.front(); }
  [[nodiscard]] bool reports() const { return reporter() == rank_; }
  [[nodiscard]] const std::vector<std::string>& data_axes() const { return data_axes_; }
  [[nodiscard]] const std::vector<std::string>& broadcast_axes() const { return broadcast_axes_; }

 private:
  std::vector<std::string> data_axes_;
  std::vector<std::string> broadcast_axes_;
  std::vector<std::string> cp_axes_;
  Index rank_ = 0;
  Index cp_rank_ = 0;
  Index cp_size_ = 1;
  Index dp_rank_ = 0;
  Index dp_size_ = 1;
  std::vector<Index> replica_group_;
  std::vector<Index> data_coordinates_;
  Index source_ = 0;
  Index saver_ = 0;
};

// A mesh whose device d is held by rank d: the rank order of MPI and
// torchrun over `axes` (row-major, last axis fastest).
[[nodiscard]] Mesh RankOrderMesh(std::vector<MeshAxis> axes);

// A 64-bit fingerprint of a batch's item ids (order-sensitive), for checking
// that the ranks of a replica group received identical batches. Equal inputs
// give equal values on every platform; distinct inputs collide with
// probability about 2^-64.
[[nodiscard]] std::uint64_t BatchFingerprint(std::span<const Index> ids);

// The replica check: entry k of both spans describes one rank (its dp_rank,
// or -1 when it holds no batch this step, and its batch's fingerprint). Ranks
// of one replica group share a dp_rank and must agree. Returns the positions k
// of the group with the least dp_rank whose fingerprints differ, ascending;
// empty when every group agrees. Throws invalid_argument naming
// `fingerprints` when the spans differ in length.
[[nodiscard]] std::vector<Index> DivergentReplicas(std::span<const Index> dp_ranks,
                                                   std::span<const std::uint64_t> fingerprints);

}  // namespace shardkit

#endif  // SHARDKIT_LAYOUT_DATA_ROLES_H_
