// Mesh: a grid of devices with named axes, as in jax.sharding.Mesh.
//
// A mesh has axes (name, size); its devices are numbered 0 .. size()-1 in
// row-major order over the axes (the last axis varies fastest), so device d
// has coordinate (d / stride(a)) % size(a) along axis a. Every device is held
// by one process (its owner); any assignment is allowed, not only contiguous
// blocks. The mesh keeps, per process, the sorted list of its devices so that
// per-process queries cost O(that process's devices).
//
// Thread-safety: immutable; copies share their storage.
#ifndef SHARDKIT_LAYOUT_MESH_H_
#define SHARDKIT_LAYOUT_MESH_H_

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shardkit/base/errors.h"

namespace shardkit {

struct MeshAxis {
  std::string name;
  Index size = 1;
};

class Mesh {
 public:
  // The most devices a mesh may have (owners are stored per device).
  static constexpr Index kMaxDevices = Index{1} << 28;

  // REQUIRES: at least one axis; names non-empty and distinct; sizes >= 1;
  // the product at most kMaxDevices; owners empty (every device in process 0)
  // or one non-negative process id per device. Throws invalid_argument
  // naming `axes` or `owners` and the offending value.
  explicit Mesh(std::vector<MeshAxis> axes, std::vector<Index> owners = {});

  [[nodiscard]] const std::vector<MeshAxis>& axes() const { return impl_->axes; }
  [[nodiscard]] int num_axes() const { return static_cast<int>(impl_->axes.size()); }
  [[nodiscard]] Index size() const { return impl_->size; }
  // Position of the axis called `name`, or -1.
  [[nodiscard]] int FindAxis(std::string_view name) const;
  // Devices between consecutive coordinates of axis a (row-major).
  [[nodiscard]] Index stride(int axis) const { return impl_->strides[axis]; }
  // REQUIRES: 0 <= device < size(), 0 <= axis < num_axes().
  [[nodiscard]] Index Coordinate(Index device, int axis) const {
    return (device / impl_->strides[axis]) % impl_->axes[axis].size;
  }

  // The process holding `device`. Throws out_of_range naming `device`.
  [[nodiscard]] Index Owner(Index device) const;
  [[nodiscard]] const std::vector<Index>& owners() const { return impl_->owners; }
  // The processes owning at least one device, ascending.
  [[nodiscard]] const std::vector<Index>& processes() const { return impl_->processes; }
  [[nodiscard]] Index num_processes() const { return static_cast<Index>(impl_->processes.size()); }
  // Position of `process` in processes(), or -1 when it owns no device.
  [[nodiscard]] Index ProcessSlot(Index process) const;
  // The devices of `process`, ascending (empty when it owns none). O(log P).
  [[nodiscard]] std::span<const Index> DevicesOf(Index process) const;
  // The devices of processes()[slot]. REQUIRES: 0 <= slot < num_processes().
  [[nodiscard]] std::span<const Index> DevicesOfSlot(Index slot) const {
    const Index* base = impl_->devices_by_process.data();
    return {base + impl_->offsets[slot], base + impl_->offsets[slot + 1]};
  }

  // "x=2,y=4" (owners are not shown).
  [[nodiscard]] std::string ToString() const;

 private:
  struct Impl {
    std::vector<MeshAxis> axes;
    std::vector<Index> strides;
    Index size = 1;
    std::vector<Index> owners;
    std::vector<Index> processes;
    std::vector<Index> offsets;  // CSR over processes
    std::vector<Index> devices_by_process;
  };
  std::shared_ptr<const Impl> impl_;
};

// Parses "x=2,y=4" (spaces allowed) into axes. Throws invalid_argument naming
// `axes` and the text.
[[nodiscard]] std::vector<MeshAxis> ParseMeshAxes(std::string_view text);

}  // namespace shardkit

#endif  // SHARDKIT_LAYOUT_MESH_H_
