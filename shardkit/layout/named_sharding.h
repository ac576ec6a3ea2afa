// PartitionSpec and NamedSharding: which slice of a global array each device
// of a Mesh holds, with the arithmetic of jax.sharding.NamedSharding, and the
// per-process view that jax.make_array_from_process_local_data relies on.
//
// Semantics (JAX's):
//   * A PartitionSpec has one entry per leading array dimension: None (the
//     dimension is not split), one mesh axis, or a tuple of mesh axes. Array
//     dimensions past the spec are not split.
//   * Mesh axes of size 1 are dropped: they split nothing and replicate
//     nothing.
//   * Dimension i is split into p_i = prod(sizes of its axes) equal tiles; the
//     tile of a device is the mixed-radix number of its coordinates over the
//     entry's axes, the first listed the most significant. The device holds
//     [tile * s_i, (tile + 1) * s_i) with s_i = shape[i] / p_i.
//   * Mesh axes no entry uses replicate. The replica id of a device is the
//     number of devices before it (row-major) holding the identical slice
//     (JAX's device_replica_id_map): the mixed-radix number of its
//     coordinates over the unused axes (and over the axes of any split
//     dimension of size 0, whose tiles are all the empty slice [0, 0)).
//
// Per process (ProcessLayout), following make_array_from_process_local_data:
// the sorted distinct starts it holds along each dimension; its local shape
// along i is (number of those starts) * s_i; a local array whose extent along
// i equals shape[i] is taken as the global data of that dimension, otherwise
// the device whose slice starts at the k-th distinct start reads local block
// [k * s_i, (k + 1) * s_i). Every per-process query costs O(that process's
// devices), not O(mesh).
//
// Thread-safety: all types are immutable values; share freely.
#ifndef SHARDKIT_LAYOUT_NAMED_SHARDING_H_
#define SHARDKIT_LAYOUT_NAMED_SHARDING_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/base/errors.h"
#include "shardkit/layout/mesh.h"

namespace shardkit {

// A half-open interval [start, stop) of one array dimension.
struct Slice {
  Index start = 0;
  Index stop = 0;
  friend bool operator==(const Slice&, const Slice&) = default;
};

// One PartitionSpec entry. `axes` empty: None. `tuple`: written as a tuple
// (kept only to print the spec as it was written).
struct SpecEntry {
  std::vector<std::string> axes;
  bool tuple = false;
};
using PartitionSpec = std::vector<SpecEntry>;

// Parses the arguments of a JAX PartitionSpec: "('x', 'y'), None, z".
// Quotes are optional; "P(...)" / "PartitionSpec(...)" around it is accepted.
// Throws invalid_argument naming `spec` and the text.
[[nodiscard]] PartitionSpec ParsePartitionSpec(std::string_view text);
// "P(('x', 'y'), None)".
[[nodiscard]] std::string SpecToString(const PartitionSpec& spec);

class ArrayLayout;
class ProcessLayout;

class NamedSharding {
 public:
  // Throws invalid_argument naming `spec`: an axis that is not a mesh axis,
  // an axis used twice (in one entry or in two), an empty axis name.
  NamedSharding(Mesh mesh, PartitionSpec spec);

  [[nodiscard]] const Mesh& mesh() const { return mesh_; }
  [[nodiscard]] const PartitionSpec& spec() const { return spec_; }
  // The mesh axes of size > 1 that split dimension `dim`, most significant
  // first; none for dimensions past the spec.
  [[nodiscard]] std::span<const int> DimAxes(int dim) const;
  // Number of tiles of dimension `dim` (1 past the spec).
  [[nodiscard]] Index Partitions(int dim) const;
  // No dimension is split (every device holds the whole array).
  [[nodiscard]] bool IsFullyReplicated() const;
  // Tile of `device` along `dim`. REQUIRES: 0 <= device < mesh().size().
  [[nodiscard]] Index Tile(Index device, int dim) const;
  // out[d] = Tile(d, dim) for every device, without divisions. O(mesh).
  void Tiles(int dim, Index* out) const;

  // The layout of an array of `shape`. Throws invalid_argument naming
  // `shape`: a negative extent, fewer dimensions than spec entries, or a
  // dimension its partition count does not divide (the message names the
  // dimension, its size, the partition count and the axes with their sizes).
  [[nodiscard]] ArrayLayout Layout(std::span<const Index> shape) const;

  // JAX's get_process_index_and_count for dimension `dim` of a rank-`ndim`
  // array: (index, count) of `process` among the distinct sets of tiles that
  // processes hold along `dim`, or nullopt when the dimension is non-uniform
  // (processes hold different numbers of tiles, or sets that overlap without
  // being equal). (0, 1) when the mesh has one process or nothing is split.
  // Unlike JAX, whose index depends on Python set iteration order, the index
  // is the rank of the process's set ordered by its first tile.
  // Throws out_of_range when `process` owns no device. O(mesh) time.
  [[nodiscard]] std::optional<std::pair<Index, Index>> ProcessIndexAndCount(int dim,
                                                                            Index process) const;

  // JAX's local_to_global_shape: local_shape[i] * count_i per dimension,
  // nullopt where the dimension is non-uniform. O(mesh * ndim).
  [[nodiscard]] std::vector<std::optional<Index>> InferGlobalShape(
      std::span<const Index> local_shape) const;
  // `global_shape` when given (checked for rank), otherwise the inferred one.
  // Throws invalid_argument naming `global_shape` when a dimension is
  // non-uniform and no global shape was given (naming the dimensions), or
  // when the ranks differ.
  [[nodiscard]] std::vector<Index> ResolveGlobalShape(
      std::span<const Index> local_shape, std::optional<std::span<const Index>> global_shape) const;

 private:
  Mesh mesh_;
  PartitionSpec spec_;
  std::vector<std::vector<int>> dim_axes_;  // per spec entry, size-1 axes dropped
  std::vector<Index> partitions_;
  std::vector<int> unused_axes_;  // size > 1, in mesh order
};

// The slices of one array shape over a NamedSharding. Built (and validated)
// by NamedSharding::Layout; its queries do not throw.
class ArrayLayout {
 public:
  [[nodiscard]] const NamedSharding& sharding() const { return sharding_; }
  [[nodiscard]] const std::vector<Index>& shape() const { return shape_; }
  [[nodiscard]] const std::vector<Index>& shard_shape() const { return shard_shape_; }
  [[nodiscard]] int ndim() const { return static_cast<int>(shape_.size()); }

  // REQUIRES: 0 <= device < mesh size, 0 <= dim < ndim().
  [[nodiscard]] Slice DeviceSlice(Index device, int dim) const;
  // out[i] = DeviceSlice(device, i) for every dimension.
  void DeviceIndex(Index device, Slice* out) const;
  // out[d * ndim() + i] = DeviceSlice(d, i) for every device d. O(mesh * ndim).
  void DevicesIndicesMap(Slice* out) const;
  [[nodiscard]] Index ReplicaId(Index device) const;
  // out[d] = ReplicaId(d) for every device.
  void ReplicaIds(Index* out) const;

  // The view of `process`. Throws out_of_range naming `process` when it owns
  // no device. O(its devices * ndim * log).
  [[nodiscard]] ProcessLayout Process(Index process) const;

 private:
  friend class NamedSharding;
  ArrayLayout(NamedSharding sharding, std::vector<Index> shape);

  NamedSharding sharding_;
  std::vector<Index> shape_;
  std::vector<Index> shard_shape_;
  std::vector<int> replica_axes_;  // mesh order
};

// What one process holds of an array, and how its local data maps to its
// devices.
class ProcessLayout {
 public:
  [[nodiscard]] Index process() const { return process_; }
  [[nodiscard]] std::span<const Index> devices() const { return devices_; }
  // Sorted distinct starts of the slices the process's devices hold along dim.
  [[nodiscard]] const std::vector<Index>& Starts(int dim) const { return starts_[dim]; }
  // JAX's num_addressable_indices per dimension: Starts(i).size() * s_i.
  [[nodiscard]] const std::vector<Index>& local_shape() const { return local_shape_; }
  // Merged [start, stop) intervals the process holds along dim, ascending.
  [[nodiscard]] std::vector<Slice> Intervals(int dim) const;

  // Where each of the process's devices reads its block of a local array of
  // `local_shape`: global[k * ndim + i] and local[k * ndim + i] are the
  // global slice device devices()[k] holds and the slice of the local array
  // it is filled from. Throws invalid_argument naming `local_data` when an
  // extent matches neither the global extent nor local_shape() (naming the
  // dimension, both sizes and the global shape), or the rank differs.
  struct Mapping {
    std::vector<Slice> global;
    std::vector<Slice> local;
  };
  [[nodiscard]] Mapping LocalToGlobal(std::span<const Index> local_data_shape) const;

 private:
  friend class ArrayLayout;
  ProcessLayout() = default;

  Index process_ = 0;
  std::vector<Index> devices_;
  std::vector<Index> shape_, shard_shape_;
  std::vector<std::vector<Index>> starts_;
  std::vector<Index> local_shape_;
  std::vector<Slice> global_;  // per device, per dim
};

}  // namespace shardkit

#endif  // SHARDKIT_LAYOUT_NAMED_SHARDING_H_
