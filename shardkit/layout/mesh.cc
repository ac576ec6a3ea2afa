#include "shardkit/layout/mesh.h"

#include <algorithm>
#include <charconv>

namespace shardkit {

Mesh::Mesh(std::vector<MeshAxis> axes, std::vector<Index> owners) {
  auto impl = std::make_shared<Impl>();
  if (axes.empty()) ThrowInvalid("axes", "a mesh needs at least one axis");
  Index size = 1;
  for (size_t a = 0; a < axes.size(); ++a) {
    const MeshAxis& axis = axes[a];
    if (axis.name.empty()) ThrowInvalid("axes", "axis " + std::to_string(a) + " has an empty name");
    for (size_t b = 0; b < a; ++b) {
      if (axes[b].name == axis.name) {
        ThrowInvalid("axes", "axis name '" + axis.name + "' appears twice");
      }
    }
    if (axis.size < 1) {
      ThrowInvalid("axes", "axis '" + axis.name + "' has size " + std::to_string(axis.size) +
                               "; sizes must be at least 1");
    }
    if (size > kMaxDevices / axis.size) {
      ThrowInvalid("axes", "the mesh has more than " + std::to_string(kMaxDevices) +
                               " devices (axis '" + axis.name + "' of size " +
                               std::to_string(axis.size) + ")");
    }
    size *= axis.size;
  }
  impl->size = size;
  impl->strides.assign(axes.size(), 1);
  for (int a = static_cast<int>(axes.size()) - 2; a >= 0; --a) {
    impl->strides[a] = impl->strides[a + 1] * axes[a + 1].size;
  }
  impl->axes = std::move(axes);

  if (owners.empty()) {
    owners.assign(size, 0);
  } else if (static_cast<Index>(owners.size()) != size) {
    ThrowInvalid("owners", "expected one process per device (" + std::to_string(size) +
                               " devices), got " + std::to_string(owners.size()) + " entries");
  }
  for (Index d = 0; d < size; ++d) {
    if (owners[d] < 0) {
      ThrowInvalid("owners", "device " + std::to_string(d) + " has negative process " +
                                 std::to_string(owners[d]));
    }
  }
  impl->processes = owners;
  std::sort(impl->processes.begin(), impl->processes.end());
  impl->processes.erase(std::unique(impl->processes.begin(), impl->processes.end()),
                        impl->processes.end());
  const Index num_processes = static_cast<Index>(impl->processes.size());
  impl->offsets.assign(num_processes + 1, 0);
  std::vector<Index> slot(size);
  for (Index d = 0; d < size; ++d) {
    slot[d] = std::lower_bound(impl->processes.begin(), impl->processes.end(), owners[d]) -
              impl->processes.begin();
    ++impl->offsets[slot[d] + 1];
  }
  for (Index p = 0; p < num_processes; ++p) impl->offsets[p + 1] += impl->offsets[p];
  impl->devices_by_process.resize(size);
  std::vector<Index> fill(impl->offsets.begin(), impl->offsets.end() - 1);
  for (Index d = 0; d < size; ++d) impl->devices_by_process[fill[slot[d]]++] = d;
  impl->owners = std::move(owners);
  impl_ = std::move(impl);
}

int Mesh::FindAxis(std::string_view name) const {
  for (int a = 0; a < num_axes(); ++a) {
    if (impl_->axes[a].name == name) return a;
  }
  return -1;
}

Index Mesh::Owner(Index device) const {
  CheckIndex("device", device, 0, size());
  return impl_->owners[device];
}

Index Mesh::ProcessSlot(Index process) const {
  auto it = std::lower_bound(impl_->processes.begin(), impl_->processes.end(), process);
  if (it == impl_->processes.end() || *it != process) return -1;
  return it - impl_->processes.begin();
}

std::span<const Index> Mesh::DevicesOf(Index process) const {
  const Index slot = ProcessSlot(process);
  if (slot < 0) return {};
  const Index* base = impl_->devices_by_process.data();
  return {base + impl_->offsets[slot], base + impl_->offsets[slot + 1]};
}

std::string Mesh::ToString() const {
  std::string out;
  for (const MeshAxis& axis : impl_->axes) {
    if (!out.empty()) out += ',';
    out += axis.name + "=" + std::to_string(axis.size);
  }
  return out;
}

namespace {
std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

std::vector<MeshAxis> ParseMeshAxes(std::string_view text) {
  std::vector<MeshAxis> axes;
  const std::string whole(text);
  while (true) {
    const size_t comma = text.find(',');
    std::string_view item = Trim(text.substr(0, comma));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      ThrowInvalid("axes",
                   "expected name=size in '" + whole + "', got '" + std::string(item) + "'");
    }
    std::string_view name = Trim(item.substr(0, eq));
    std::string_view number = Trim(item.substr(eq + 1));
    Index size = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), size);
    if (ec != std::errc() || end != number.data() + number.size() || name.empty()) {
      ThrowInvalid("axes",
                   "expected name=size in '" + whole + "', got '" + std::string(item) + "'");
    }
    axes.push_back({std::string(name), size});
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return axes;
}

}  // namespace shardkit
