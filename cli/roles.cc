#include "cli/roles.h"

#include <cinttypes>
#include <cstdio>
#include <string>
#include <utility>

namespace shardkit::cli {

namespace {

constexpr Index kMaxRoleRanks = 4096;  // every rank's roles cost O(mesh) each

std::vector<std::string> Names(const std::string& text) {
  std::vector<std::string> out;
  std::string name;
  for (char c : text + ",") {
    if (c == ',') {
      if (!name.empty()) out.push_back(name);
      name.clear();
    } else if (c != ' ' && c != '\'' && c != '"') {
      name += c;
    }
  }
  return out;
}

std::string Group(const std::vector<Index>& ranks) {
  std::string out;
  for (Index r : ranks) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

}  // namespace

void AddRolesFlags(Args& args) {
  args.Flag("mesh", "AXES",
            "parallelism mesh as name=size,... in torchrun/MPI rank order, e.g. dp=2,tp=2:\n"
            "                            the plan splits over its data-parallel ranks")
      .Flag("data-axes", "NAMES", "with --mesh: the axes data is split along, e.g. dp or dp,fsdp")
      .Flag("broadcast-axes", "NAMES",
            "with --mesh: axes along which only coordinate 0 reads (e.g. pp)");
}

std::optional<std::vector<DataRoles>> RolesFromArgs(const Args& args) {
  if (!args.Has("mesh")) {
    if (args.Has("data-axes")) throw UsageError("--data-axes: needs --mesh");
    if (args.Has("broadcast-axes")) throw UsageError("--broadcast-axes: needs --mesh");
    return std::nullopt;
  }
  if (!args.Has("data-axes")) {
    throw UsageError("--data-axes: required with --mesh (e.g. --data-axes dp)");
  }
  std::vector<MeshAxis> axes = ParseMeshAxes(args.RequireStr("mesh"));
  Index ranks = 1;
  for (const MeshAxis& axis : axes) {
    if (axis.size > 0 && ranks > kMaxRoleRanks / axis.size) {
      throw UsageError("--mesh: more than " + std::to_string(kMaxRoleRanks) +
                       " ranks; the roles of every rank are listed");
    }
    ranks *= std::max<Index>(axis.size, 1);
  }
  const Mesh mesh = RankOrderMesh(std::move(axes));
  const std::vector<std::string> data = Names(args.Str("data-axes", ""));
  const std::vector<std::string> broadcast = Names(args.Str("broadcast-axes", ""));
  std::vector<DataRoles> out;
  for (Index r = 0; r < mesh.size(); ++r) out.emplace_back(mesh, data, r, broadcast);
  return out;
}

std::int64_t WorldFromArgs(const Args& args, const std::optional<std::vector<DataRoles>>& roles) {
  if (!roles) return args.RequireInt("world");
  const Index dp_size = roles->front().dp_size();
  if (auto world = args.Int("world"); world && *world != dp_size) {
    throw UsageError("--world: " + std::to_string(*world) + " differs from the mesh's " +
                     std::to_string(dp_size) + " data-parallel ranks (leave --world out)");
  }
  return dp_size;
}

void RolesJson(Json& j, const std::vector<DataRoles>& roles) {
  j.Key("dp_size").Int(roles.front().dp_size());
  j.Key("roles").BeginList();
  for (const DataRoles& r : roles) {
    j.Begin().Key("rank").Int(r.rank()).Key("dp_rank").Int(r.dp_rank());
    j.Key("dp_size").Int(r.dp_size()).Key("replica_group").IntList(r.replica_group());
    j.Key("loads").Bool(r.loads()).Key("source").Int(r.source());
    j.Key("saver").Int(r.saver()).Key("reporter").Int(r.reporter()).End();
  }
  j.End();
}

void PrintRoles(const std::vector<DataRoles>& roles) {
  std::printf("data roles (%zu ranks, %" PRId64 " data-parallel):\n", roles.size(),
              roles.front().dp_size());
  std::printf("%6s %8s %-16s %6s %7s %6s %9s\n", "rank", "dp_rank", "replica group", "loads",
              "source", "saver", "reporter");
  for (const DataRoles& r : roles) {
    std::printf("%6" PRId64 " %8" PRId64 " %-16s %6s %7" PRId64 " %6" PRId64 " %9" PRId64 "\n",
                r.rank(), r.dp_rank(), ("{" + Group(r.replica_group()) + "}").c_str(),
                r.loads() ? "yes" : "no", r.source(), r.saver(), r.reporter());
  }
}

}  // namespace shardkit::cli
