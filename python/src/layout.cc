// Bindings of Mesh, PartitionSpec, NamedSharding and LoadingPlan.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "python/src/bindings.h"
#include "shardkit/layout/data_roles.h"
#include "shardkit/layout/loading_plan.h"
#include "shardkit/layout/mesh.h"
#include "shardkit/layout/named_sharding.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit::python {
struct MeshLikeTag {};  // what DataRoles reads a mesh from
struct NamesTag {};     // one axis name or several
struct RankLikeTag {};  // a rank, a discover() result, or None
struct PlanLikeTag {};  // a ShardPlan or an item count
}  // namespace shardkit::python

namespace nanobind::detail {
template <>
struct type_caster<shardkit::python::MeshLikeTag> {
  static constexpr auto Name = const_name(
      "shardkit.Mesh | collections.abc.Mapping[str, int] | "
      "torch.distributed.device_mesh.DeviceMesh | jax.sharding.Mesh");
};
template <>
struct type_caster<shardkit::python::NamesTag> {
  static constexpr auto Name = const_name("str | collections.abc.Sequence[str]");
};
template <>
struct type_caster<shardkit::python::RankLikeTag> {
  static constexpr auto Name = const_name("int | shardkit.ProcessInfo | None");
};
template <>
struct type_caster<shardkit::python::PlanLikeTag> {
  static constexpr auto Name = const_name("shardkit.ShardPlan | int");
};
}  // namespace nanobind::detail

namespace shardkit::python {

using namespace nb::literals;

namespace {

// PartitionSpec is a std::vector, which the STL casters would claim; Python
// sees this wrapper instead.
struct BoundSpec {
  PartitionSpec spec;
};

using Axes = nb::typed<nb::handle, AxesTag>;
using SpecLike = nb::typed<nb::handle, SpecLikeTag>;
using SpecEntryOut = nb::typed<nb::object, SpecEntryTag>;

// How a process's local data fills its devices (NamedSharding.local_to_global).
// The arrays are numpy objects typed for the stub, so that .def_ro reads them.
struct LocalToGlobal {
  using SliceArray = nb::typed<nb::object, nb::ndarray<nb::numpy, std::int64_t, nb::ndim<3>>>;
  nb::typed<nb::tuple, Index, nb::ellipsis> global_shape;
  nb::typed<nb::object, NumpyArray<std::int64_t>> devices;  // int64 [device]
  SliceArray global_slices, local_slices;                   // int64 [device, dim, (start, stop)]
};

SpecEntry EntryFromPython(nb::handle entry, size_t dim) {
  SpecEntry out;
  if (entry.is_none()) return out;
  if (nb::isinstance<nb::str>(entry)) {
    out.axes.push_back(nb::cast<std::string>(entry));
    return out;
  }
  if (nb::isinstance<nb::tuple>(entry) || nb::isinstance<nb::list>(entry)) {
    out.tuple = true;
    for (nb::handle name : entry) {
      if (!nb::isinstance<nb::str>(name)) {
        throw std::invalid_argument("spec: entry " + std::to_string(dim) +
                                    " holds a non-string axis " +
                                    nb::cast<std::string>(nb::repr(name)));
      }
      out.axes.push_back(nb::cast<std::string>(name));
    }
    return out;
  }
  throw std::invalid_argument("spec: entry " + std::to_string(dim) + " is " +
                              nb::cast<std::string>(nb::repr(entry)) +
                              "; expected None, an axis name or a tuple of axis names");
}

SpecEntryOut EntryToPython(const SpecEntry& entry) {
  if (!entry.tuple) {
    if (entry.axes.empty()) return SpecEntryOut(nb::none());
    return SpecEntryOut(nb::str(entry.axes[0].c_str()));
  }
  nb::list names;
  for (const auto& name : entry.axes) names.append(nb::str(name.c_str()));
  return SpecEntryOut(nb::tuple(names));
}

// Any iterable of entries (shardkit or JAX PartitionSpec, tuple, list).
PartitionSpec SpecFromPython(nb::handle spec) {
  if (nb::isinstance<BoundSpec>(spec)) return nb::cast<const BoundSpec&>(spec).spec;
  // A JAX spec may carry unreduced / reduced axes (pending sums), which no slice
  // layout expresses: refuse them rather than drop them.
  for (const char* kind : {"unreduced", "reduced"}) {
    if (nb::hasattr(spec, kind) && nb::len(nb::object(spec.attr(kind))) > 0) {
      throw std::invalid_argument("spec: " + nb::cast<std::string>(nb::repr(spec)) + " has " +
                                  kind + " axes " +
                                  nb::cast<std::string>(nb::repr(spec.attr(kind))) +
                                  "; shardkit's layout covers split and replicated axes only");
    }
  }
  PartitionSpec out;
  for (nb::handle entry :
       ToList(spec, "spec", "a PartitionSpec or its entries (None, a name or names)")) {
    out.push_back(EntryFromPython(entry, out.size()));
  }
  return out;
}

// `param`: the argument the axes came in (axes for Mesh, mesh for DataRoles).
Mesh MeshFromPython(nb::handle axes, nb::handle owners, const char* param = "axes") {
  const std::string name = param;
  const char* expected = "{name: size} or (name, size) pairs";
  std::vector<MeshAxis> out;
  nb::object items = nb::hasattr(axes, "items") ? axes.attr("items")() : nb::borrow(axes);
  for (nb::handle item : ToList(items, param, expected)) {
    nb::list pair = ToList(item, param, expected);
    if (pair.size() != 2) throw std::invalid_argument(name + ": expected (name, size) pairs");
    if (!nb::isinstance<nb::str>(pair[0])) {
      throw nb::type_error(
          (name + ": an axis name must be a str, got " + nb::cast<std::string>(nb::repr(pair[0])))
              .c_str());
    }
    out.push_back({nb::cast<std::string>(pair[0]), ToIndex(pair[1], param)});
  }
  std::vector<Index> owner_list;
  if (!owners.is_none()) owner_list = ToIndices(owners, "owners");
  ReleaseGil release;
  return Mesh(std::move(out), std::move(owner_list));
}

Mesh MeshFromJax(nb::handle jax_mesh) {
  nb::object devices = jax_mesh.attr("devices");
  nb::tuple names = nb::tuple(jax_mesh.attr("axis_names"));
  std::vector<Index> dims = ToIndices(devices.attr("shape"), "mesh");
  std::vector<MeshAxis> axes;
  for (size_t a = 0; a < names.size(); ++a) {
    axes.push_back({nb::cast<std::string>(nb::str(names[a])), dims[a]});
  }
  std::vector<Index> owners;
  for (nb::handle device : devices.attr("flat")) {
    owners.push_back(nb::cast<Index>(device.attr("process_index")));
  }
  return Mesh(std::move(axes), std::move(owners));
}

std::string SpecRepr(const PartitionSpec& spec) {
  std::string s = SpecToString(spec);
  return "PartitionSpec" + s.substr(1);
}

// int64 [rows, cols, (start, stop)].
nb::ndarray<nb::numpy, std::int64_t, nb::ndim<3>> Slices(const std::vector<Slice>& slices,
                                                         Index rows, Index cols) {
  std::int64_t* data;
  auto array =
      NewNd<std::int64_t>({static_cast<size_t>(rows), static_cast<size_t>(cols), size_t{2}}, &data);
  for (size_t k = 0; k < slices.size(); ++k) {
    data[2 * k] = slices[k].start;
    data[2 * k + 1] = slices[k].stop;
  }
  return nb::ndarray<nb::numpy, std::int64_t, nb::ndim<3>>(array);
}

ArrayLayout LayoutOf(const NamedSharding& s, IntSequence shape) {
  return s.Layout(ToIndices(shape, "shape"));
}

using MeshLike = nb::typed<nb::handle, MeshLikeTag>;
using Names = nb::typed<nb::handle, NamesTag>;
using RankLike = nb::typed<nb::handle, RankLikeTag>;
using PlanLike = nb::typed<nb::handle, PlanLikeTag>;

std::vector<std::string> NamesFromPython(nb::handle value, const char* param) {
  std::vector<std::string> out;
  if (value.is_none()) return out;
  if (nb::isinstance<nb::str>(value)) return {nb::cast<std::string>(value)};
  if (!nb::hasattr(value, "__iter__")) {
    throw nb::type_error((std::string(param) +
                          ": expected an axis name or a sequence of them, got " +
                          TypeAndRepr(value))
                             .c_str());
  }
  for (nb::handle name : value) {
    if (!nb::isinstance<nb::str>(name)) {
      throw std::invalid_argument(std::string(param) + ": expected axis names, got " +
                                  nb::cast<std::string>(nb::repr(name)) + " in " +
                                  nb::cast<std::string>(nb::repr(value)));
    }
    out.push_back(nb::cast<std::string>(name));
  }
  return out;
}

Index DiscoveredRank() {
  return nb::cast<Index>(nb::module_::import_("shardkit.eval").attr("discover")().attr("rank"));
}

// The mesh of DataRoles with ranks as owners, and this process's rank on it
// when `rank` is None: a shardkit Mesh, a torch DeviceMesh (its rank tensor;
// DeviceMesh.get_rank()), a jax.sharding.Mesh (processes; jax.process_index())
// or axis sizes in the rank order of MPI / torchrun (discover()).
std::pair<Mesh, Index> RolesMesh(nb::handle mesh, nb::handle rank) {
  auto given = [&](auto fallback) -> Index {
    if (rank.is_none()) return fallback();
    if (nb::hasattr(rank, "rank") && !nb::isinstance<nb::int_>(rank)) {
      return nb::cast<Index>(rank.attr("rank"));  // a shardkit.discover() result
    }
    return ToIndex(rank, "rank");
  };
  if (nb::isinstance<Mesh>(mesh)) return {nb::cast<Mesh>(mesh), given(DiscoveredRank)};
  if (nb::hasattr(mesh, "mesh_dim_names") && nb::hasattr(mesh, "get_rank")) {
    nb::object names = mesh.attr("mesh_dim_names");
    if (names.is_none()) {
      throw std::invalid_argument(
          "mesh: the DeviceMesh has no mesh_dim_names; name its dimensions "
          "(init_device_mesh(..., mesh_dim_names=('dp', 'tp')))");
    }
    nb::object ranks = mesh.attr("mesh");
    std::vector<Index> dims = ToIndices(nb::tuple(ranks.attr("shape")), "mesh");
    std::vector<MeshAxis> axes;
    size_t a = 0;
    for (nb::handle name : names) axes.push_back({nb::cast<std::string>(name), dims.at(a++)});
    std::vector<Index> owners = ToIndices(ranks.attr("flatten")().attr("tolist")(), "mesh");
    return {Mesh(std::move(axes), std::move(owners)),
            given([&] { return nb::cast<Index>(mesh.attr("get_rank")()); })};
  }
  if (nb::hasattr(mesh, "axis_names") && nb::hasattr(mesh, "devices")) {
    return {MeshFromJax(mesh), given([] {
              return nb::cast<Index>(nb::module_::import_("jax").attr("process_index")());
            })};
  }
  if (nb::hasattr(mesh, "items") || nb::isinstance<nb::list>(mesh) ||
      nb::isinstance<nb::tuple>(mesh)) {
    Mesh parsed = MeshFromPython(mesh, nb::none(), "mesh");
    return {RankOrderMesh(parsed.axes()), given(DiscoveredRank)};
  }
  throw std::invalid_argument(
      "mesh: expected a shardkit.Mesh, a torch DeviceMesh, a jax.sharding.Mesh or axis "
      "sizes such as {'dp': 2, 'tp': 2}, got " +
      nb::cast<std::string>(nb::str(nb::type_name(mesh.type()))));
}

std::string IndexList(const std::vector<Index>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

}  // namespace

void init_layout(nb::module_& m) {
  nb::class_<Mesh>(
      m, "Mesh",
      "Named mesh axes over devices numbered in row-major order.\n\n"
      "``owners[d]`` is the process holding device ``d`` (default: all in process 0).\n\n"
      ">>> import shardkit\n"
      ">>> mesh = shardkit.Mesh({'x': 2, 'y': 4}, owners=[0, 0, 0, 0, 1, 1, 1, 1])\n"
      ">>> mesh.size, mesh.processes, mesh.devices_of(1).tolist()\n"
      "(8, [0, 1], [4, 5, 6, 7])\n")
      .def(
          "__init__",
          [](Mesh* self, Axes axes, std::optional<IntSequence> owners) {
            new (self)
                Mesh(MeshFromPython(axes, owners ? nb::handle(*owners) : nb::handle(Py_None)));
          },
          "axes"_a.none(), "owners"_a = nb::none())
      .def_static("from_jax", &MeshFromJax, "mesh"_a,  // any jax.sharding.Mesh: JAX is optional
                  "The shardkit Mesh of a jax.sharding.Mesh: its axes, and device d = position "
                  "in mesh.devices.flat with owner d.process_index.")
      .def_prop_ro("axis_names",
                   [](const Mesh& m) {
                     nb::list names;
                     for (const auto& a : m.axes()) names.append(nb::str(a.name.c_str()));
                     return nb::typed<nb::tuple, std::string, nb::ellipsis>(nb::tuple(names));
                   })
      .def_prop_ro(
          "shape",
          [](const Mesh& m) {
            nb::typed<nb::dict, std::string, Index> d;
            for (const auto& a : m.axes()) d[nb::str(a.name.c_str())] = a.size;
            return d;
          },
          "{axis name: size}, in mesh order (as jax.sharding.Mesh.shape)")
      .def_static(
          "rank_order",
          [](Axes axes) {
            Mesh parsed = MeshFromPython(axes, nb::none());
            ReleaseGil release;
            return RankOrderMesh(parsed.axes());
          },
          "axes"_a.none(),
          "The mesh whose device d is held by rank d: the rank order of MPI and torchrun\n"
          "(row-major, last axis fastest).\n\n"
          ">>> import shardkit\n"
          ">>> shardkit.Mesh.rank_order({'dp': 2, 'tp': 2}).owners\n"
          "[0, 1, 2, 3]\n")
      .def_prop_ro("size", &Mesh::size)
      .def_prop_ro("owners", [](const Mesh& m) { return m.owners(); })
      .def_prop_ro("processes", [](const Mesh& m) { return m.processes(); })
      .def(
          "devices_of",
          [](const Mesh& m, Int process) {
            auto devices = m.DevicesOf(ToIndex(process, "process"));
            std::int64_t* data;
            auto array = NewArray<std::int64_t>(devices.size(), &data);
            std::copy(devices.begin(), devices.end(), data);
            return array;
          },
          "process"_a.none(), "The devices of `process`, ascending (empty when it owns none).")
      .def("__repr__", [](const Mesh& m) {
        std::string out = "Mesh({";
        for (size_t a = 0; a < m.axes().size(); ++a) {
          out += (a ? ", '" : "'") + m.axes()[a].name + "': " + std::to_string(m.axes()[a].size);
        }
        return out + "}, processes=" + std::to_string(m.num_processes()) + ")";
      });

  nb::class_<BoundSpec>(m, "PartitionSpec",
                        "How each array dimension is split over mesh axes, as in JAX: None, "
                        "an axis name or a tuple of axis names per leading dimension.\n\n"
                        ">>> import shardkit\n"
                        ">>> shardkit.PartitionSpec(('x', 'y'), None)\n"
                        "PartitionSpec(('x', 'y'), None)\n"
                        ">>> shardkit.PartitionSpec.parse(\"x, None\")[0]\n"
                        "'x'\n")
      .def(
          "__init__",
          [](BoundSpec* self, nb::args entries) {
            PartitionSpec spec;
            for (nb::handle e : entries) spec.push_back(EntryFromPython(e, spec.size()));
            new (self) BoundSpec{std::move(spec)};
          },
          nb::sig("def __init__(self, *entries: str | tuple[str, ...] | None) -> None"))
      .def_static(
          "parse", [](std::string_view text) { return BoundSpec{ParsePartitionSpec(text)}; },
          "text"_a, "Parses the arguments of a JAX PartitionSpec: \"('x', 'y'), None\".")
      .def_static(
          "from_jax", [](nb::handle spec) { return BoundSpec{SpecFromPython(spec)}; }, "spec"_a)
      .def("__len__", [](const BoundSpec& b) { return b.spec.size(); })
      .def(
          "__getitem__",
          [](const BoundSpec& b, Index i) {
            const PartitionSpec& s = b.spec;
            return EntryToPython(s[CheckedIndex(i, static_cast<Index>(s.size()), "index")]);
          },
          "index"_a)
      .def("__iter__",
           [](const BoundSpec& b) {
             nb::list out;
             for (const auto& e : b.spec) out.append(EntryToPython(e));
             return nb::typed<nb::iterator, SpecEntryOut>(nb::iter(out));
           })
      .def("__eq__",
           [](const BoundSpec& bound, nb::handle b) {
             const PartitionSpec& a = bound.spec;
             try {
               PartitionSpec other = SpecFromPython(b);
               if (other.size() != a.size()) return false;
               for (size_t i = 0; i < a.size(); ++i) {
                 if (other[i].axes != a[i].axes) return false;
               }
               return true;
             } catch (const std::exception&) {
               return false;
             }
           })
      .def("__repr__", [](const BoundSpec& b) { return SpecRepr(b.spec); });

  nb::class_<NamedSharding>(
      m, "NamedSharding",
      "JAX's NamedSharding arithmetic: which slice of a global array each device and each\n"
      "process holds. Devices are positions in row-major mesh order.\n\n"
      ">>> import shardkit\n"
      ">>> mesh = shardkit.Mesh({'x': 2, 'y': 2}, owners=[0, 0, 1, 1])\n"
      ">>> s = shardkit.NamedSharding(mesh, shardkit.PartitionSpec('x'))\n"
      ">>> s.shard_shape((4, 3))\n"
      "(2, 3)\n"
      ">>> s.devices_indices_map((4, 3))[2]\n"
      "(slice(2, 4, None), slice(0, 3, None))\n"
      ">>> s.replica_ids((4, 3)).tolist()\n"
      "[0, 1, 0, 1]\n"
      ">>> s.process_indices((4, 3), 1), s.local_shape((4, 3), 1)\n"
      "([[(2, 4)], [(0, 3)]], (2, 3))\n")
      .def(
          "__init__",
          [](NamedSharding* self, nb::handle mesh, SpecLike spec) {
            // Named, not nanobind's signature dump (NamedSharding(None, spec)).
            if (!nb::isinstance<Mesh>(mesh)) {
              throw nb::type_error(
                  ("mesh: expected a shardkit.Mesh, got " + TypeAndRepr(mesh)).c_str());
            }
            if (spec.is_none()) {
              throw nb::type_error("spec: expected a PartitionSpec (or its entries), got None");
            }
            new (self) NamedSharding(nb::cast<const Mesh&>(mesh), SpecFromPython(spec));
          },
          nb::sig("def __init__(self, mesh: Mesh, spec: PartitionSpec | "
                  "collections.abc.Iterable[str | tuple[str, ...] | None]) -> None"),
          "mesh"_a.none(), "spec"_a.none())
      .def_static(
          "from_jax",
          [](nb::handle sharding) {
            return NamedSharding(MeshFromJax(sharding.attr("mesh")),
                                 SpecFromPython(sharding.attr("spec")));
          },
          "sharding"_a, "The shardkit view of a jax.sharding.NamedSharding.")
      .def_prop_ro("mesh", &NamedSharding::mesh)
      .def_prop_ro("spec", [](const NamedSharding& s) { return BoundSpec{s.spec()}; })
      .def(
          "shard_shape",
          [](const NamedSharding& s, IntSequence shape) {
            return ToTuple(LayoutOf(s, shape).shard_shape());
          },
          "shape"_a.none(), "The shape every device holds.")
      .def(
          "indices",
          [](const NamedSharding& s, IntSequence shape) {
            ArrayLayout layout = LayoutOf(s, shape);
            const Index n = layout.ndim(), devices = s.mesh().size();
            // Written straight into the array: a temporary vector of this size
            // (256 KB at 8192 devices) cost 4x the map itself in fresh pages.
            static_assert(sizeof(Slice) == 2 * sizeof(std::int64_t) &&
                          std::is_standard_layout_v<Slice>);
            std::int64_t* data;
            auto array = NewNd<std::int64_t>(
                {static_cast<size_t>(devices), static_cast<size_t>(n), size_t{2}}, &data);
            {
              ReleaseGil release;
              layout.DevicesIndicesMap(reinterpret_cast<Slice*>(data));
            }
            return nb::ndarray<nb::numpy, std::int64_t, nb::ndim<3>>(array);
          },
          "shape"_a.none(),
          "int64 array [device, dim, (start, stop)]: devices_indices_map without Python "
          "objects.")
      .def(
          "devices_indices_map",
          [](const NamedSharding& s, IntSequence shape) {
            ArrayLayout layout = LayoutOf(s, shape);
            const Index n = layout.ndim(), devices = s.mesh().size();
            // One slice object per tile of each dimension, shared by every
            // device holding it (devices differ only in their tuple).
            std::vector<std::vector<nb::object>> tile_slices(n);
            std::vector<Index> tiles(static_cast<size_t>(devices) * n);
            for (Index i = 0; i < n; ++i) {
              const Index shard = layout.shard_shape()[i];
              for (Index t = 0; t < s.Partitions(static_cast<int>(i)); ++t) {
                tile_slices[i].push_back(nb::steal(PySlice_New(
                    nb::int_(t * shard).ptr(), nb::int_(t * shard + shard).ptr(), Py_None)));
              }
              s.Tiles(static_cast<int>(i), tiles.data() + i * devices);
            }
            nb::dict out;
            for (Index d = 0; d < devices; ++d) {
              PyObject* index = PyTuple_New(n);
              for (Index i = 0; i < n; ++i) {
                PyObject* slice = tile_slices[i][tiles[i * devices + d]].ptr();
                Py_INCREF(slice);
                PyTuple_SET_ITEM(index, i, slice);
              }
              PyObject* key = PyLong_FromLongLong(d);
              PyDict_SetItem(out.ptr(), key, index);
              Py_DECREF(key);
              Py_DECREF(index);
            }
            return nb::typed<nb::object, DevicesIndicesTag>(out);
          },
          "shape"_a.none(),
          "{device: tuple of slices}, as jax.sharding.NamedSharding.devices_indices_map "
          "(slices always have explicit bounds).")
      .def(
          "replica_ids",
          [](const NamedSharding& s, IntSequence shape) {
            ArrayLayout layout = LayoutOf(s, shape);
            std::int64_t* data;
            auto array = NewArray<std::int64_t>(s.mesh().size(), &data);
            layout.ReplicaIds(data);
            return array;
          },
          "shape"_a.none(), "Replica id of every device (JAX's device_replica_id_map rule).")
      .def(
          "process_indices",
          [](const NamedSharding& s, IntSequence shape, Int process) {
            ProcessLayout view = LayoutOf(s, shape).Process(ToIndex(process, "process"));
            const Index shard_dims = static_cast<Index>(view.local_shape().size());
            std::vector<Index> shard_shape = LayoutOf(s, shape).shard_shape();
            std::vector<std::vector<std::pair<Index, Index>>> out(static_cast<size_t>(shard_dims));
            for (Index i = 0; i < shard_dims; ++i) {
              for (Index start : view.Starts(i)) out[i].emplace_back(start, start + shard_shape[i]);
            }
            return out;
          },
          "shape"_a.none(), "process"_a.none(),
          "Per dimension, the sorted distinct (start, stop) slices `process` holds.")
      .def(
          "local_shape",
          [](const NamedSharding& s, IntSequence shape, Int process) {
            return ToTuple(LayoutOf(s, shape).Process(ToIndex(process, "process")).local_shape());
          },
          "shape"_a.none(), "process"_a.none(),
          "The shape of `process`'s local data (JAX's num_addressable_indices per dimension).")
      .def(
          "process_index_and_count",
          [](const NamedSharding& s, Int dim, Int process) {
            const Index d = ToIndex(dim, "dim");
            if (d < std::numeric_limits<int>::min() || d > std::numeric_limits<int>::max()) {
              throw nb::index_error(("dim: " + std::to_string(d) + " is not a dimension").c_str());
            }
            return s.ProcessIndexAndCount(static_cast<int>(d), ToIndex(process, "process"));
          },
          "dim"_a.none(), "process"_a.none(),
          "(index, count) of the process's distinct slices along `dim` (JAX's "
          "get_process_index_and_count, index ordered by first start), None when non-uniform.")
      .def(
          "infer_global_shape",
          [](const NamedSharding& s, IntSequence local_shape) {
            auto shape = s.InferGlobalShape(ToIndices(local_shape, "local_shape"));
            nb::list out;
            for (const auto& v : shape) out.append(v ? nb::cast(*v) : nb::none());
            return nb::typed<nb::tuple, std::optional<Index>, nb::ellipsis>(nb::tuple(out));
          },
          "local_shape"_a.none(), "JAX's local_to_global_shape: None in non-uniform dimensions.")
      .def(
          "local_to_global",
          [](const NamedSharding& s, IntSequence local_shape, Int process_arg,
             std::optional<IntSequence> global_shape) {
            const Index process = ToIndex(process_arg, "process");
            std::vector<Index> local = ToIndices(local_shape, "local_data");
            std::vector<Index> given;
            std::optional<std::span<const Index>> global;
            if (global_shape) {
              given = ToIndices(*global_shape, "global_shape");
              global = given;
            }
            std::vector<Index> resolved = s.ResolveGlobalShape(local, global);
            ProcessLayout view = s.Layout(resolved).Process(process);
            ProcessLayout::Mapping map = view.LocalToGlobal(local);
            const Index k = static_cast<Index>(view.devices().size());
            const Index n = static_cast<Index>(resolved.size());
            std::int64_t* data;
            auto devices = NewArray<std::int64_t>(k, &data);
            std::copy(view.devices().begin(), view.devices().end(), data);
            return LocalToGlobal{ToTuple(resolved), nb::cast(devices),
                                 nb::cast(Slices(map.global, k, n)),
                                 nb::cast(Slices(map.local, k, n))};
          },
          "local_shape"_a.none(), "process"_a.none(), "global_shape"_a = nb::none(),
          "How `process`'s local data of `local_shape` fills its devices, exactly as\n"
          "jax.make_array_from_process_local_data: a LocalToGlobal (global_shape, devices,\n"
          "and global/local int64 arrays [device, dim, (start, stop)]).")
      .def("__repr__", [](const NamedSharding& s) {
        return "NamedSharding(mesh=" + nb::cast<std::string>(nb::repr(nb::cast(s.mesh()))) +
               ", spec=" + SpecRepr(s.spec()) + ")";
      });

  nb::class_<LocalToGlobal>(
      m, "LocalToGlobal",
      "How one process's local data fills its devices (NamedSharding.local_to_global):\n"
      "device devices[k] holds block local_slices[k] of the local data, which is\n"
      "global_slices[k] of the global array (int64 [device, dim, (start, stop)]).\n\n"
      ">>> import shardkit\n"
      ">>> mesh = shardkit.Mesh({'data': 4}, owners=[0, 1, 0, 1])\n"
      ">>> s = shardkit.NamedSharding(mesh, shardkit.PartitionSpec('data'))\n"
      ">>> m = s.local_to_global((4,), process=1)\n"
      ">>> m\n"
      "LocalToGlobal(global_shape=(8,), devices=[1, 3])\n"
      ">>> m.global_slices[:, 0].tolist(), m.local_slices[:, 0].tolist()\n"
      "([[2, 4], [6, 8]], [[0, 2], [2, 4]])\n")
      .def_ro("global_shape", &LocalToGlobal::global_shape)
      .def_ro("devices", &LocalToGlobal::devices, "the process's devices, ascending")
      .def_ro("global_slices", &LocalToGlobal::global_slices,
              "int64 [device, dim, (start, stop)]: each device's slice of the global array")
      .def_ro("local_slices", &LocalToGlobal::local_slices,
              "int64 [device, dim, (start, stop)]: the block of the local data it reads")
      .def("__repr__", [](const LocalToGlobal& m) {
        return "LocalToGlobal(global_shape=" + nb::cast<std::string>(nb::repr(m.global_shape)) +
               ", devices=" +
               nb::cast<std::string>(nb::repr(nb::cast(m.devices).attr("tolist")())) + ")";
      });

  nb::class_<LoadingPlan>(
      m, "LoadingPlan",
      "Which rows of each step's global batch (dimension 0 split by `sharding`) every\n"
      "host loads, and which hosts hold a row.\n\n"
      ">>> import shardkit\n"
      ">>> mesh = shardkit.Mesh({'data': 4}, owners=[0, 1, 0, 1])\n"
      ">>> plan = shardkit.LoadingPlan(shardkit.NamedSharding(mesh, "
      "shardkit.PartitionSpec('data')), 8)\n"
      ">>> plan.rows(1), plan.hosts_of(5)\n"
      "([(2, 4), (6, 8)], [0])\n")
      .def(
          "__init__",
          [](LoadingPlan* self, nb::handle sharding, Int batch_size) {
            new (self) LoadingPlan(
                ToInstance<NamedSharding>(sharding, "sharding", "shardkit.NamedSharding"),
                ToIndex(batch_size, "batch_size"));
          },
          nb::sig("def __init__(self, sharding: NamedSharding, batch_size: int) -> None"),
          "sharding"_a.none(), "batch_size"_a.none())
      .def_prop_ro("batch_size", &LoadingPlan::batch_size)
      .def_prop_ro("shard_rows", &LoadingPlan::shard_rows)
      .def(
          "rows",
          [](const LoadingPlan& p, Int process) {
            std::vector<std::pair<Index, Index>> out;
            for (const Slice& s : p.Rows(ToIndex(process, "process"))) {
              out.push_back({s.start, s.stop});
            }
            return out;
          },
          "process"_a.none(),
          "Merged (start, stop) row ranges `process` loads, in local-data order.")
      .def(
          "hosts_of",
          [](const LoadingPlan& p, Int row) {
            auto hosts = p.HostsOf(ToIndex(row, "row"));
            return std::vector<Index>(hosts.begin(), hosts.end());
          },
          "row"_a.none(), "The processes holding global row `row`.")
      .def("num_steps", &LoadingPlan::NumSteps, "order"_a)
      .def(
          "items",
          [](const LoadingPlan& p, const Shard& order, Int step_arg, Int process_arg) {
            const Index step = ToIndex(step_arg, "step"), process = ToIndex(process_arg, "process");
            const Index n = p.NumRows(process);
            std::int64_t* items;
            bool* padding;
            auto a = NewArray<std::int64_t>(n, &items);
            auto b = NewArray<bool>(n, &padding);
            {
              ReleaseGil release;
              p.Items(order, step, process, items, padding);
            }
            return std::make_pair(a, b);
          },
          "order"_a, "step"_a.none(), "process"_a.none(),
          "(items, padding): the items `process` reads at `step`, where the global batch of\n"
          "step t is entries [t * batch_size, (t + 1) * batch_size) of `order` (a Shard).");

  nb::class_<DataRoles>(
      m, "DataRoles",
      "What this rank does with data, from the parallelism mesh (rules:\n"
      "shardkit/layout/data_roles.h).\n\n"
      "``DataRoles(mesh, data_axes, rank=None, *, broadcast_axes=(), cp_axes=())``\n\n"
      "mesh: a shardkit.Mesh (owners = ranks), a torch DeviceMesh, a jax.sharding.Mesh\n"
      "(ranks = JAX processes) or axis sizes such as {'dp': 2, 'tp': 2} in the rank order\n"
      "of MPI / torchrun (row-major, last axis fastest). data_axes: the axes data is split\n"
      "along (the first listed most significant); every other axis replicates data.\n"
      "rank: this rank or a shardkit.discover() result (default: DeviceMesh.get_rank(),\n"
      "jax.process_index(), or shardkit.discover()). broadcast_axes: non-data axes along\n"
      "which only coordinate 0 reads and the others receive ('pp': only pipeline stage 0\n"
      "reads; 'tp': one rank per tensor-parallel group reads and broadcasts). cp_axes:\n"
      "context-parallel axes: their ranks get the same rows, each its own slice\n"
      "(cp_rank of cp_size; a TokenLoader given these roles delivers that slice).\n\n"
      ">>> import shardkit\n"
      ">>> r = shardkit.DataRoles({'dp': 2, 'tp': 2}, 'dp', rank=1)\n"
      ">>> r.dp_rank, r.dp_size, r.replica_group, r.loads\n"
      "(0, 2, [0, 1], True)\n"
      ">>> r = shardkit.DataRoles({'dp': 2, 'pp': 2}, 'dp', rank=3, broadcast_axes='pp')\n"
      ">>> r.loads, r.source, r.saver\n"
      "(False, 2, 2)\n"
      ">>> r = shardkit.DataRoles({'dp': 2, 'cp': 2, 'tp': 2}, 'dp', rank=6, cp_axes='cp')\n"
      ">>> r.dp_rank, r.cp_rank, r.cp_size, r.replica_group, r.saver\n"
      "(1, 1, 2, [6, 7], 4)\n")
      .def(
          "__init__",
          [](DataRoles* self, MeshLike mesh, Names data_axes, RankLike rank, Names broadcast_axes,
             Names cp_axes) {
            auto [converted, this_rank] = RolesMesh(mesh, rank);
            std::vector<std::string> data = NamesFromPython(data_axes, "data_axes");
            std::vector<std::string> broadcast = NamesFromPython(broadcast_axes, "broadcast_axes");
            std::vector<std::string> cp = NamesFromPython(cp_axes, "cp_axes");
            ReleaseGil release;
            new (self) DataRoles(converted, std::move(data), this_rank, std::move(broadcast),
                                 std::move(cp));
          },
          "mesh"_a.none(), "data_axes"_a.none(), "rank"_a = nb::none(), nb::kw_only(),
          "broadcast_axes"_a.none() = nb::tuple(), "cp_axes"_a.none() = nb::tuple())
      .def_prop_ro("rank", &DataRoles::rank)
      .def_prop_ro("dp_rank", &DataRoles::dp_rank, "What plans and loaders shard by.")
      .def_prop_ro("dp_size", &DataRoles::dp_size, "How many data-parallel shards there are.")
      .def_prop_ro("replica_group", &DataRoles::replica_group,
                   "Ranks that must see identical data, ascending (this rank included).")
      .def_prop_ro("data_coordinates", &DataRoles::data_coordinates,
                   "Data coordinates of this rank's devices, ascending.")
      .def_prop_ro("loads", &DataRoles::loads, "Whether this rank reads data itself.")
      .def_prop_ro("source", &DataRoles::source,
                   "The rank this rank's data comes from (itself when it loads).")
      .def_prop_ro("saver", &DataRoles::saver,
                   "The rank of the replica group that saves the loader state.")
      .def_prop_ro("saves", &DataRoles::saves)
      .def_prop_ro("reporter", &DataRoles::reporter,
                   "The rank of the replica group whose outputs count in gathers and global\n"
                   "sums (the least rank of the group): replicas count once.")
      .def_prop_ro("reports", &DataRoles::reports)
      .def_prop_ro("data_axes", &DataRoles::data_axes)
      .def_prop_ro("broadcast_axes", &DataRoles::broadcast_axes)
      .def_prop_ro("cp_rank", &DataRoles::cp_rank,
                   "This rank's context-parallel rank (0 without cp_axes).")
      .def_prop_ro("cp_size", &DataRoles::cp_size,
                   "Context-parallel ranks per row (1 without cp_axes).")
      .def_prop_ro("cp_axes", &DataRoles::cp_axes)
      .def(
          "shard",
          [](const DataRoles& r, PlanLike plan, nb::kwargs options) -> Shard {
            if (nb::isinstance<ShardPlan>(plan)) {
              if (nb::len(options) > 0) {
                throw std::invalid_argument("options: only with an item count, not a ShardPlan");
              }
              const Index world = nb::cast<const ShardPlan&>(plan).world_size();
              if (world != r.dp_size()) {
                throw std::invalid_argument("plan: world_size " + std::to_string(world) +
                                            " differs from dp_size " + std::to_string(r.dp_size()));
              }
              return nb::cast<const ShardPlan&>(plan).GetShard(r.dp_rank());
            }
            nb::object cls = nb::module_::import_("shardkit._core").attr("ShardPlan");
            return nb::cast<const ShardPlan&>(cls(plan, r.dp_size(), **options))
                .GetShard(r.dp_rank());
          },
          "plan"_a, "options"_a,
          "This rank's Shard: of `plan` (a ShardPlan over dp_size ranks), or of\n"
          "ShardPlan(plan, dp_size, **options) for an item count.")
      .def("__repr__", [](const DataRoles& r) {
        return "DataRoles(rank=" + std::to_string(r.rank()) +
               ", dp_rank=" + std::to_string(r.dp_rank()) +
               ", dp_size=" + std::to_string(r.dp_size()) +
               ", replica_group=" + IndexList(r.replica_group()) +
               ", loads=" + (r.loads() ? "True" : "False") +
               ", saver=" + std::to_string(r.saver()) + ")";
      });

  m.def(
      "_batch_fingerprint",
      [](nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> ids) {
        std::uint64_t h = BatchFingerprint({ids.data(), ids.shape(0)});
        return static_cast<std::int64_t>(h);
      },
      "ids"_a);
  m.def(
      "_divergent_replicas",
      [](nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> dp_ranks,
         nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> prints) {
        std::vector<std::uint64_t> values(prints.data(), prints.data() + prints.shape(0));
        return DivergentReplicas({dp_ranks.data(), dp_ranks.shape(0)}, values);
      },
      "dp_ranks"_a, "fingerprints"_a);
}

}  // namespace shardkit::python
