// libFuzzer harness: the PartitionSpec and mesh-axes parsers, and the layout
// arithmetic on what they accept.
//
// Input: "<mesh text>\n<spec text>\n<shape text>". A spec that parses must
// print to text that parses back to the same spec; a layout over a small
// mesh must place every device inside the shape.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "shardkit/layout/mesh.h"
#include "shardkit/layout/named_sharding.h"

namespace {

bool SameSpec(const shardkit::PartitionSpec& a, const shardkit::PartitionSpec& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].axes != b[i].axes) return false;
  }
  return true;
}

std::vector<shardkit::Index> Shape(std::string_view text) {
  std::vector<shardkit::Index> out;
  shardkit::Index v = 0;
  bool any = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      if (v < 1000000) v = v * 10 + (c - '0');
      any = true;
    } else if (any) {
      out.push_back(v);
      v = 0;
      any = false;
    }
    if (out.size() >= 6) break;
  }
  if (any && out.size() < 6) out.push_back(v);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t a = in.find('\n');
  const std::string_view mesh_text = in.substr(0, a);
  const std::string_view rest = a == std::string_view::npos ? "" : in.substr(a + 1);
  const size_t b = rest.find('\n');
  const std::string_view spec_text = rest.substr(0, b);
  const std::string_view shape_text = b == std::string_view::npos ? "" : rest.substr(b + 1);

  shardkit::PartitionSpec spec;
  try {
    spec = shardkit::ParsePartitionSpec(spec_text);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  // Printing round-trips (names with quotes, commas or spaces included).
  const std::string printed = shardkit::SpecToString(spec);
  shardkit::PartitionSpec again;
  try {
    again = shardkit::ParsePartitionSpec(printed);
  } catch (const std::invalid_argument&) {
    __builtin_trap();
  }
  if (!SameSpec(spec, again)) __builtin_trap();

  try {
    const std::vector<shardkit::MeshAxis> axes = shardkit::ParseMeshAxes(mesh_text);
    // A mesh holds one owner per device: keep each run cheap.
    shardkit::Index devices = 1;
    for (const shardkit::MeshAxis& axis : axes) {
      if (axis.size > 4096) return 0;
      devices *= axis.size > 0 ? axis.size : 1;
      if (devices > 4096) return 0;
    }
    shardkit::Mesh mesh(axes);
    shardkit::NamedSharding sharding(mesh, spec);
    const std::vector<shardkit::Index> shape = Shape(shape_text);
    const shardkit::ArrayLayout layout = sharding.Layout(shape);
    const int n = layout.ndim();
    std::vector<shardkit::Slice> indices(static_cast<size_t>(mesh.size()) * n);
    layout.DevicesIndicesMap(indices.data());
    for (shardkit::Index d = 0; d < mesh.size(); ++d) {
      for (int i = 0; i < n; ++i) {
        const shardkit::Slice& s = indices[d * n + i];
        if (s.start < 0 || s.start > s.stop || s.stop > shape[i]) __builtin_trap();
      }
      (void)layout.ReplicaId(d);
    }
    for (shardkit::Index p : mesh.processes()) (void)layout.Process(p).local_shape();
  } catch (const std::invalid_argument&) {
  } catch (const std::out_of_range&) {
  }
  return 0;
}
