// shardkit layout: which slice of a global array every device and process holds.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/json.h"
#include "shardkit/layout/loading_plan.h"
#include "shardkit/layout/mesh.h"
#include "shardkit/layout/named_sharding.h"

namespace shardkit::cli {

namespace {

constexpr Index kMaxListedDevices = 64;
// Every device and process is computed (and, with --json, listed): the work
// and the output grow with the mesh, so meshes past this size are refused
// unless --max-devices raises the bound.
constexpr Index kDefaultMaxDevices = Index{1} << 20;

std::string SliceText(const Slice& s) {
  return std::to_string(s.start) + ":" + std::to_string(s.stop);
}

std::string ShapeText(const std::vector<Index>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// The mesh as a grid: rows are the first axis, columns the others (row-major);
// each cell is device/process.
void PrintMeshPicture(const Mesh& mesh) {
  const Index rows = mesh.axes()[0].size;
  const Index cols = mesh.size() / rows;
  if (cols > 16 || rows > 32) {
    std::printf("(mesh of %" PRId64 " devices: picture omitted)\n", mesh.size());
    return;
  }
  std::string col_names;
  for (int a = 1; a < mesh.num_axes(); ++a) col_names += (a > 1 ? "," : "") + mesh.axes()[a].name;
  std::printf("mesh: rows %s%s, cells device/process\n", mesh.axes()[0].name.c_str(),
              col_names.empty() ? "" : (", columns " + col_names).c_str());
  std::printf("%8s", "");
  for (Index c = 0; c < cols; ++c) {
    std::string label;
    for (int a = 1; a < mesh.num_axes(); ++a) {
      label += (a > 1 ? "," : "") + std::to_string(mesh.Coordinate(c, a));
    }
    std::printf(" %9s", label.empty() ? "" : (col_names + "=" + label).substr(0, 9).c_str());
  }
  std::printf("\n");
  for (Index r = 0; r < rows; ++r) {
    std::printf("%8s", (mesh.axes()[0].name + "=" + std::to_string(r)).substr(0, 8).c_str());
    for (Index c = 0; c < cols; ++c) {
      const Index d = r * cols + c;
      std::printf(" %9s", (std::to_string(d) + "/p" + std::to_string(mesh.owners()[d])).c_str());
    }
    std::printf("\n");
  }
}

}  // namespace

int RunLayout(const Argv& argv) {
  Args args("layout",
            "Which slice of a global array each device and each process holds under a\n"
            "JAX-style NamedSharding (devices are row-major mesh positions).");
  args.Flag("mesh", "AXES", "mesh axes as name=size,... e.g. x=2,y=4 (required)")
      .Flag("spec", "SPEC",
            "PartitionSpec arguments, e.g. \"('x','y'), None\" (default: replicated)")
      .Flag("shape", "DIMS", "global array shape, e.g. 16,8 (required)")
      .Flag("owners", "LIST", "process of each device, e.g. 0,0,1,1 (default: all process 0)")
      .Flag("batch", "B", "also show which rows of a B-row batch each process loads")
      .Flag("max-devices", "N",
            "refuse meshes of more than N devices (default 1048576): the work and the\n"
            "                            JSON grow with the mesh")
      .Flag("json", "", "print one JSON object");
  if (!args.Parse(argv)) return 0;
  const std::vector<MeshAxis> axes = ParseMeshAxes(args.RequireStr("mesh"));
  const Index max_devices = args.Int("max-devices", kDefaultMaxDevices);
  if (max_devices < 1) {
    throw UsageError("--max-devices: must be at least 1, got " + std::to_string(max_devices));
  }
  Index devices = 1;
  for (const MeshAxis& axis : axes) {
    if (axis.size > 0 && devices > max_devices / axis.size) {
      throw UsageError("--mesh: more than " + std::to_string(max_devices) +
                       " devices (--max-devices); layout computes and lists every device "
                       "and process: raise --max-devices to go on");
    }
    devices *= std::max<Index>(axis.size, 1);
  }
  Mesh mesh(axes, args.IntList("owners"));
  NamedSharding sharding(mesh, ParsePartitionSpec(args.Str("spec", "")));
  if (!args.Has("shape")) throw UsageError("--shape: required");
  const std::vector<Index> shape = args.IntList("shape");
  const ArrayLayout layout = sharding.Layout(shape);
  std::optional<LoadingPlan> loading;
  if (auto batch = args.Int("batch")) loading.emplace(sharding, *batch);
  const int n = layout.ndim();
  // The JSON lists every device; the text lists the first kMaxListedDevices.
  const Index listed = args.Has("json") ? mesh.size() : std::min(mesh.size(), kMaxListedDevices);
  std::vector<Slice> indices(static_cast<size_t>(listed * n) + 1);
  for (Index d = 0; d < listed; ++d) layout.DeviceIndex(d, indices.data() + d * n);

  if (args.Has("json")) {
    Json j;
    j.Begin().Key("mesh").Begin();
    for (const MeshAxis& axis : mesh.axes()) j.Key(axis.name).Int(axis.size);
    j.End().Key("spec").String(SpecToString(sharding.spec()));
    j.Key("shape").IntList(shape).Key("shard_shape").IntList(layout.shard_shape());
    j.Key("devices").BeginList();
    for (Index d = 0; d < mesh.size(); ++d) {
      j.Begin().Key("device").Int(d).Key("process").Int(mesh.owners()[d]).Key("index").BeginList();
      for (int i = 0; i < n; ++i) j.IntList({indices[d * n + i].start, indices[d * n + i].stop});
      j.End().Key("replica").Int(layout.ReplicaId(d)).End();
    }
    j.End().Key("processes").BeginList();
    for (Index p : mesh.processes()) {
      ProcessLayout view = layout.Process(p);
      j.Begin().Key("process").Int(p).Key("local_shape").IntList(view.local_shape());
      j.Key("index").BeginList();
      for (int i = 0; i < n; ++i) {
        j.BeginList();
        for (Index start : view.Starts(i)) j.IntList({start, start + layout.shard_shape()[i]});
        j.End();
      }
      j.End();
      if (loading) {
        j.Key("rows").BeginList();
        for (const Slice& s : loading->Rows(p)) j.IntList({s.start, s.stop});
        j.End();
      }
      j.End();
    }
    j.End().End();
    std::cout << j.str() << "\n";
    return 0;
  }

  std::printf("mesh %s (%" PRId64 " device%s, %" PRId64
              " process%s), spec %s, shape %s -> "
              "shard %s\n\n",
              mesh.ToString().c_str(), mesh.size(), mesh.size() == 1 ? "" : "s",
              mesh.num_processes(), mesh.num_processes() == 1 ? "" : "es",
              SpecToString(sharding.spec()).c_str(), ShapeText(shape).c_str(),
              ShapeText(layout.shard_shape()).c_str());
  PrintMeshPicture(mesh);
  std::printf("\n%7s %8s %8s  %s\n", "device", "process", "replica", "index");
  for (Index d = 0; d < listed; ++d) {
    std::string index = "[";
    for (int i = 0; i < n; ++i) index += (i ? ", " : "") + SliceText(indices[d * n + i]);
    std::printf("%7" PRId64 " %8" PRId64 " %8" PRId64 "  %s]\n", d, mesh.owners()[d],
                layout.ReplicaId(d), index.c_str());
  }
  if (listed < mesh.size()) std::printf("    ... %" PRId64 " more devices\n", mesh.size() - listed);
  std::printf("\n%7s %12s  %s\n", "process", "local_shape", "slices per dimension");
  for (Index p : mesh.processes()) {
    ProcessLayout view = layout.Process(p);
    std::string text;
    for (int i = 0; i < n; ++i) {
      text += (i ? "; " : "") + std::to_string(i) + ":";
      const auto& starts = view.Starts(i);
      for (size_t k = 0; k < starts.size() && k < 8; ++k) {
        text += " " + SliceText({starts[k], starts[k] + layout.shard_shape()[i]});
      }
      if (starts.size() > 8) text += " ... (" + std::to_string(starts.size()) + ")";
    }
    std::printf("%7" PRId64 " %12s  %s\n", p, ShapeText(view.local_shape()).c_str(), text.c_str());
    if (loading) {
      std::string rows;
      for (const Slice& s : loading->Rows(p)) rows += " " + SliceText(s);
      std::printf("%7s %12s  rows of a %" PRId64 "-row batch:%s\n", "", "", loading->batch_size(),
                  rows.c_str());
    }
  }
  auto inferred = sharding.InferGlobalShape(std::vector<Index>(n, 1));
  std::string uniform;
  for (int i = 0; i < n; ++i) {
    if (!inferred[i]) uniform += (uniform.empty() ? "" : ", ") + std::to_string(i);
  }
  std::printf("\nnon-uniform dimensions (global shape must be given): %s\n",
              uniform.empty() ? "none" : uniform.c_str());
  return 0;
}

}  // namespace shardkit::cli
