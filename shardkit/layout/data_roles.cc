#include "shardkit/layout/data_roles.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>

namespace shardkit {
namespace {

std::string Quote(const std::string& name) { return "'" + name + "'"; }

// Positions of `names` in the mesh; throws naming `param` on an unknown or
// repeated name.
std::vector<int> AxisPositions(const Mesh& mesh, const std::vector<std::string>& names,
                               std::string_view param) {
  std::vector<int> out;
  for (const auto& name : names) {
    const int a = mesh.FindAxis(name);
    if (a < 0) {
      ThrowInvalid(param, Quote(name) + " is not an axis of the mesh " + mesh.ToString());
    }
    if (std::find(out.begin(), out.end(), a) != out.end()) {
      ThrowInvalid(param, Quote(name) + " is listed twice");
    }
    out.push_back(a);
  }
  return out;
}

std::string ListOf(const std::vector<Index>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(values[i]);
  }
  return out + "}";
}

}  // namespace

DataRoles::DataRoles(const Mesh& mesh, std::vector<std::string> data_axes, Index rank,
                     std::vector<std::string> broadcast_axes, std::vector<std::string> cp_axes)
    : data_axes_(std::move(data_axes)),
      broadcast_axes_(std::move(broadcast_axes)),
      cp_axes_(std::move(cp_axes)),
      rank_(rank) {
  const std::vector<int> data = AxisPositions(mesh, data_axes_, "data_axes");
  const std::vector<int> broadcast = AxisPositions(mesh, broadcast_axes_, "broadcast_axes");
  for (size_t i = 0; i < broadcast.size(); ++i) {
    if (std::find(data.begin(), data.end(), broadcast[i]) != data.end()) {
      ThrowInvalid("broadcast_axes", Quote(broadcast_axes_[i]) +
                                         " is a data axis; data is received only "
                                         "along axes that replicate it");
    }
  }
  const std::vector<int> cp = AxisPositions(mesh, cp_axes_, "cp_axes");
  for (size_t i = 0; i < cp.size(); ++i) {
    if (std::find(data.begin(), data.end(), cp[i]) != data.end() ||
        std::find(broadcast.begin(), broadcast.end(), cp[i]) != broadcast.end()) {
      ThrowInvalid("cp_axes", Quote(cp_axes_[i]) +
                                  " is also a data or broadcast axis; a context-parallel axis "
                                  "splits the rows of one data shard");
    }
  }
  const Index self_slot = mesh.ProcessSlot(rank);
  if (self_slot < 0) {
    ThrowOutOfRange("rank", std::to_string(rank) + " holds no device of the mesh " +
                                mesh.ToString() + " (" + std::to_string(mesh.num_processes()) +
                                " ranks)");
  }

  // Data coordinate of a device; the mesh size fits in an Index, so does D.
  Index num_coords = 1;
  for (int a : data) num_coords *= mesh.axes()[a].size;
  auto coordinate = [&](Index device) {
    Index c = 0;
    for (int a : data) c = c * mesh.axes()[a].size + mesh.Coordinate(device, a);
    return c;
  };

  // Every rank's coordinate set; the class of a coordinate is the least
  // coordinate of the (unique) set holding it.
  const Index slots = mesh.num_processes();
  std::vector<std::vector<Index>> sets(slots);
  std::vector<Index> class_of(num_coords, -1);
  std::vector<Index> first_slot(num_coords, -1);  // who claimed the coordinate
  for (Index p = 0; p < slots; ++p) {
    std::vector<Index>& set = sets[p];
    for (Index device : mesh.DevicesOfSlot(p)) set.push_back(coordinate(device));
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    for (Index c : set) {
      if (class_of[c] < 0) {
        class_of[c] = set.front();
        first_slot[c] = p;
      } else if (class_of[c] != set.front()) {
        ThrowInvalid("data_axes", "ranks " + std::to_string(mesh.processes()[first_slot[c]]) +
                                      " and " + std::to_string(mesh.processes()[p]) +
                                      " hold overlapping but different data coordinates (" +
                                      ListOf(sets[first_slot[c]]) + " and " + ListOf(set) +
                                      "); a rank's devices must hold whole data shards");
      }
    }
  }
  std::map<Index, Index> class_size;  // least coordinate -> coordinates in it
  for (Index c = 0; c < num_coords; ++c) ++class_size[class_of[c]];
  const Index per_class = class_size.begin()->second;
  for (Index p = 0; p < slots; ++p) {
    const Index size = static_cast<Index>(sets[p].size());
    const Index expected = class_size[sets[p].front()];
    if (size != expected || size != per_class) {
      ThrowInvalid("data_axes", "rank " + std::to_string(mesh.processes()[p]) + " holds data " +
                                    "coordinates " + ListOf(sets[p]) + " but rank " +
                                    std::to_string(mesh.processes()[first_slot[0]]) + " holds " +
                                    ListOf(sets[first_slot[0]]) +
                                    "; every rank must hold equally many whole data shards");
    }
  }
  dp_size_ = static_cast<Index>(class_size.size());
  data_coordinates_ = sets[self_slot];
  const Index self_class = data_coordinates_.front();
  dp_rank_ = std::distance(class_size.begin(), class_size.find(self_class));

  // The CP coordinate of every rank: one per rank, the same on all its devices.
  for (int a : cp) cp_size_ *= mesh.axes()[a].size;
  auto cp_of_slot = [&](Index p) {
    Index value = -1;
    for (Index device : mesh.DevicesOfSlot(p)) {
      Index c = 0;
      for (int a : cp) c = c * mesh.axes()[a].size + mesh.Coordinate(device, a);
      if (value >= 0 && c != value) {
        ThrowInvalid("cp_axes", "rank " + std::to_string(mesh.processes()[p]) +
                                    " holds devices of different context-parallel ranks (" +
                                    std::to_string(value) + " and " + std::to_string(c) + ")");
      }
      value = c;
    }
    return value;
  };
  std::vector<Index> cp_rank_of(static_cast<std::size_t>(slots), 0);
  for (Index p = 0; p < slots; ++p) cp_rank_of[static_cast<std::size_t>(p)] = cp_of_slot(p);
  cp_rank_ = cp_rank_of[static_cast<std::size_t>(self_slot)];
  std::vector<Index> shard_group;  // same data shard, any CP rank
  for (Index p = 0; p < slots; ++p) {
    if (sets[p].front() != self_class) continue;
    shard_group.push_back(mesh.processes()[p]);
    if (cp_rank_of[static_cast<std::size_t>(p)] == cp_rank_) {
      replica_group_.push_back(mesh.processes()[p]);
    }
  }

  auto at_origin = [&](Index device) {
    for (int a : broadcast) {
      if (mesh.Coordinate(device, a) != 0) return false;
    }
    return true;
  };
  auto loads = [&](Index process) {
    for (Index device : mesh.DevicesOf(process)) {
      if (at_origin(device)) return true;
    }
    return false;
  };
  if (loads(rank)) {
    source_ = rank;
  } else {
    Index device = mesh.DevicesOfSlot(self_slot).front();
    for (int a : broadcast) device -= mesh.Coordinate(device, a) * mesh.stride(a);
    source_ = mesh.Owner(device);
  }
  // The group holds every non-data coordinate of its data shard, so some
  // member holds the broadcast origin and loads.
  saver_ = *std::find_if(shard_group.begin(), shard_group.end(), loads);
}

Mesh RankOrderMesh(std::vector<MeshAxis> axes) {
  Index size = 1;
  for (const auto& axis : axes) {
    CheckAtLeast("axes", axis.size, 1);
    size = CheckedMul("axes", size, axis.size);
  }
  if (size > Mesh::kMaxDevices) {
    ThrowInvalid("axes", "the mesh has " + std::to_string(size) + " devices, more than " +
                             std::to_string(Mesh::kMaxDevices));
  }
  std::vector<Index> owners(size);
  std::iota(owners.begin(), owners.end(), Index{0});
  return Mesh(std::move(axes), std::move(owners));
}

std::uint64_t BatchFingerprint(std::span<const Index> ids) {
  // splitmix64 finalizer over a running state: order-sensitive, portable.
  auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(0x9e3779b97f4a7c15ULL + ids.size());
  for (Index id : ids) h = mix(h ^ (static_cast<std::uint64_t>(id) + 0x9e3779b97f4a7c15ULL));
  return h;
}

std::vector<Index> DivergentReplicas(std::span<const Index> dp_ranks,
                                     std::span<const std::uint64_t> fingerprints) {
  if (dp_ranks.size() != fingerprints.size()) {
    ThrowInvalid("fingerprints", std::to_string(fingerprints.size()) + " values for " +
                                     std::to_string(dp_ranks.size()) + " ranks");
  }
  std::map<Index, std::vector<Index>> groups;
  for (size_t k = 0; k < dp_ranks.size(); ++k) {
    if (dp_ranks[k] >= 0) groups[dp_ranks[k]].push_back(static_cast<Index>(k));
  }
  for (const auto& [dp_rank, members] : groups) {
    for (Index k : members) {
      if (fingerprints[k] != fingerprints[members.front()]) return members;
    }
  }
  return {};
}

}  // namespace shardkit
