// Bindings of EvalPlan and process discovery (the C++ side of shardkit.eval.discover).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>

#include "python/src/bindings.h"
#include "shardkit/eval/dist.h"
#include "shardkit/eval/eval_plan.h"
#include "shardkit/layout/data_roles.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

using Indices = nb::ndarray<nb::numpy, std::int64_t>;
using Mask = nb::ndarray<nb::numpy, bool>;

// (indices, mask) of rank's step: [batch_size], or [devices, device_batch].
std::pair<Indices, Mask> BatchArrays(const EvalPlan& p, Index rank, Index step, bool per_device) {
  const auto devices = static_cast<size_t>(per_device ? p.devices() : 1);
  const auto width = static_cast<size_t>(per_device ? p.device_batch() : p.batch_size());
  std::int64_t* idx;
  bool* mask;
  std::optional<Indices> indices;
  std::optional<Mask> masks;
  try {
    indices = per_device ? NewNd<std::int64_t>({devices, width}, &idx)
                         : NewNd<std::int64_t>({width}, &idx);
    masks = per_device ? NewNd<bool>({devices, width}, &mask) : NewNd<bool>({width}, &mask);
  } catch (const std::bad_alloc&) {
    // A valid plan whose one batch does not fit in memory: say which
    // parameter and how much (it was a bare MemoryError).
    const std::string slots = std::to_string(p.batch_size());
    ThrowInvalid("batch_size", slots + " slots per batch need " + slots +
                                   " x 9 bytes for its indices and mask, more than can be "
                                   "allocated here");
  }
  {
    ReleaseGil release;
    p.Batch(rank, step, idx, mask);
  }
  return {*indices, *masks};
}

// Iterates (step, indices, mask) over every step of one rank.
struct EvalBatches {
  EvalPlan plan;
  Index rank;
  bool per_device;
  Index step = 0;
};

// The core's SourceRows says which output row belongs to which item; this
// only gathers those rows from numpy arrays (any trailing shape), torch
// tensors, or any other sequences (a list).
nb::object Unshard(const EvalPlan& p, nb::handle outputs_by_rank) {
  nb::list outputs =
      nb::borrow<nb::list>(nb::module_::import_("builtins").attr("list")(outputs_by_rank));
  std::vector<Index> counts;
  for (nb::handle o : outputs) counts.push_back(static_cast<Index>(nb::len(o)));
  p.CheckOutputRows(counts);
  std::vector<Index> source;
  {
    ReleaseGil release;
    source = p.SourceRows();
  }
  auto rows = ToArray<std::int64_t>(source);
  auto all_of = [&](nb::handle type) {
    if (outputs.size() == 0) return false;
    for (nb::handle o : outputs) {
      if (!nb::isinstance(o, type)) return false;
    }
    return true;
  };
  nb::module_ np = nb::module_::import_("numpy");
  if (all_of(np.attr("ndarray"))) {
    return np.attr("concatenate")(outputs).attr("__getitem__")(nb::cast(rows));
  }
  nb::dict loaded = nb::borrow<nb::dict>(nb::module_::import_("sys").attr("modules"));
  if (loaded.contains("torch")) {
    nb::handle torch = loaded["torch"];
    if (all_of(torch.attr("Tensor"))) {
      nb::object index =
          torch.attr("from_numpy")(nb::cast(rows)).attr("to")(outputs[0].attr("device"));
      return torch.attr("cat")(outputs).attr("__getitem__")(index);
    }
  }
  std::vector<nb::object> flat;
  for (nb::handle o : outputs) {
    for (nb::handle x : o) flat.push_back(nb::borrow(x));
  }
  nb::list out;
  for (Index row : source) out.append(flat[static_cast<size_t>(row)]);
  return out;
}

// roles= (a DataRoles) or mesh= and data_axes= (DataRoles(mesh, data_axes)),
// or nothing.
std::optional<DataRoles> RolesArgument(nb::handle roles, nb::handle mesh, nb::handle data_axes) {
  if (mesh.is_none() != data_axes.is_none()) {
    throw std::invalid_argument("data_axes: mesh= and data_axes= go together");
  }
  if (!mesh.is_none()) {
    if (!roles.is_none()) {
      throw std::invalid_argument("roles: pass roles= or mesh= and data_axes=, not both");
    }
    return nb::cast<DataRoles>(
        nb::module_::import_("shardkit._core").attr("DataRoles")(mesh, data_axes));
  }
  if (roles.is_none()) return std::nullopt;
  if (!nb::isinstance<DataRoles>(roles)) {
    throw std::invalid_argument("roles: expected a shardkit.DataRoles, got " +
                                nb::cast<std::string>(nb::repr(roles)));
  }
  return nb::cast<DataRoles>(roles);
}

}  // namespace

void init_eval_plan(nb::module_& m) {
  // The keyword options and their defaults are EvalOptions' (its table in
  // shardkit/loader/option_fields.h).
  static const std::string init_signature =
      "def __init__(self, num_items: int, world_size: int | None = None, batch_size: int | None = "
      "None, *, roles: DataRoles | None = None, mesh: typing.Any = None, data_axes: str | "
      "collections.abc.Sequence[str] | None = None, " +
      OptionParameters(EvalOptions{}) + ") -> None";
  nb::class_<EvalBatches>(m, "_EvalBatches")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", [](EvalBatches& it) {
        if (it.step >= it.plan.num_steps()) throw nb::stop_iteration();
        auto [indices, mask] = BatchArrays(it.plan, it.rank, it.step, it.per_device);
        return std::make_tuple(it.step++, indices, mask);
      });

  nb::class_<EvalPlan>(
      m, "EvalPlan",
      "Equal, fixed-shape evaluation steps on every rank; every item exactly once.\n\n"
      "Every rank runs num_steps = ceil(ceil(num_items / world_size) / batch_size) steps.\n"
      "Items are split over ranks as lmms-eval does (round_robin) or in blocks (contiguous,\n"
      "tfds even_splits). batch(rank, step) returns batch_size indices and a mask; padded\n"
      "slots hold a valid index and are masked out. With `devices` local devices the batch\n"
      "divides into [devices, device_batch] (per_device=True); min_device_batch raises the\n"
      "per-device batch as Flax's pad_shard_unpad does.\n\n"
      ">>> import shardkit\n"
      ">>> plan = shardkit.EvalPlan(10, 3, 4, devices=2)\n"
      ">>> plan.num_steps, plan.total_padding, [plan.padding(r) for r in range(3)]\n"
      "(1, 2, [0, 1, 1])\n"
      ">>> indices, mask = plan.batch(2, 0, per_device=True)\n"
      ">>> indices.tolist(), mask.tolist()\n"
      "([[2, 5], [8, 2]], [[True, True], [True, False]])\n\n"
      "Under tensor/pipeline parallelism the plan's ranks are the data-parallel ranks:\n"
      "roles= (a shardkit.DataRoles), or mesh= and data_axes=, stand for world_size; the\n"
      "replicas of one group run the same steps, batch(plan.roles.dp_rank, step).\n\n"
      ">>> roles = shardkit.DataRoles({'dp': 2, 'tp': 2}, 'dp', rank=3)\n"
      ">>> plan = shardkit.EvalPlan(10, batch_size=4, roles=roles)\n"
      ">>> plan.world_size, plan.roles.dp_rank, plan.batch(plan.roles.dp_rank, 0)[0].tolist()\n"
      "(2, 1, [1, 3, 5, 7])\n")
      .def(
          "__init__",
          [](EvalPlan* self, Int num_items, OptionalInt world_size, Int batch_size,
             nb::handle roles, nb::handle mesh, nb::handle data_axes, nb::kwargs options) {
            EvalOptions o;
            const Index n = ToIndex(num_items, "num_items");
            const std::optional<Index> w = ToOptionalIndex(world_size, "world_size");
            const Index b = ToIndex(batch_size, "batch_size");
            ReadOptions(options, &o);
            const std::optional<DataRoles> r = RolesArgument(roles, mesh, data_axes);
            if (!r) {
              if (!w) throw std::invalid_argument("world_size: required unless roles= is given");
              new (self) EvalPlan(n, *w, b, o);
              return;
            }
            if (w && *w != r->dp_size()) {
              throw std::invalid_argument("world_size: " + std::to_string(*w) +
                                          " differs from the roles' dp_size " +
                                          std::to_string(r->dp_size()));
            }
            new (self) EvalPlan(n, *r, b, o);
          },
          "num_items"_a.none(), "world_size"_a.none() = nb::none(),
          "batch_size"_a.none() = nb::none(), nb::kw_only(), "roles"_a.none() = nb::none(),
          "mesh"_a.none() = nb::none(), "data_axes"_a.none() = nb::none(), "options"_a,
          nb::sig(init_signature.c_str()))
      .def_prop_ro(
          "roles", [](const EvalPlan& p) { return p.roles(); },
          "The DataRoles the plan was built from (None without roles=): the plan's ranks are\n"
          "their data-parallel ranks; gather_unshard and global_masked_sum count each replica\n"
          "group once (its reporter, the least rank).")
      .def_prop_ro("num_items", &EvalPlan::num_items)
      .def_prop_ro("window_begin", &EvalPlan::window_begin, "first item of the window (offset)")
      .def_prop_ro("window_size", &EvalPlan::window_size,
                   "items evaluated: [window_begin, window_begin + window_size)")
      .def_prop_ro(
          "window",
          [](const EvalPlan& p) { return std::string(WindowRuleName(p.options().window)); })
      .def_prop_ro("world_size", &EvalPlan::world_size)
      .def_prop_ro("batch_size", &EvalPlan::batch_size,
                   "slots per step on every rank (devices x device_batch)")
      .def_prop_ro("devices", &EvalPlan::devices)
      .def_prop_ro("device_batch", &EvalPlan::device_batch)
      .def_prop_ro("num_steps", &EvalPlan::num_steps, "the same on every rank")
      .def_prop_ro("total_padding", &EvalPlan::TotalPadding,
                   "padded slots over all ranks: num_steps * world_size * batch_size - num_items")
      .def_prop_ro("padding_fraction", &EvalPlan::PaddingFraction)
      .def_prop_ro("fingerprint", &EvalPlan::Fingerprint,
                   "hash of the parameters and the shardkit version (compare across ranks)")
      .def_prop_ro("split",
                   [](const EvalPlan& p) { return std::string(SplitName(p.options().split)); })
      .def(
          "real", [](const EvalPlan& p, Int rank) { return p.Real(ToIndex(rank, "rank")); },
          "rank"_a.none(), "Real (unmasked) slots of rank over all steps.")
      .def(
          "padding", [](const EvalPlan& p, Int rank) { return p.Padding(ToIndex(rank, "rank")); },
          "rank"_a.none(), "Padded slots of rank over all steps (as ShardPlan.padding(rank)).")
      .def(
          "batch",
          [](const EvalPlan& p, Int rank, Int step, Bool per_device) {
            return BatchArrays(p, ToIndex(rank, "rank"), ToIndex(step, "step"),
                               ToBool(per_device, "per_device"));
          },
          "rank"_a.none(), "step"_a.none(), nb::kw_only(), "per_device"_a.none() = false,
          "(indices int64, mask bool) of rank's step: shape [batch_size], or\n"
          "[devices, device_batch] with per_device. Raises IndexError for a rank or step\n"
          "outside its range.")
      .def(
          "batches",
          [](const EvalPlan& p, Int rank_arg, Bool per_device) {
            const Index rank = ToIndex(rank_arg, "rank");
            static_cast<void>(p.Real(rank));  // the core's IndexError for a bad rank, now
            return nb::typed<nb::iterator, std::tuple<Index, Indices, Mask>>(
                nb::iter(nb::cast(EvalBatches{p, rank, ToBool(per_device, "per_device")})));
          },
          "rank"_a.none(), nb::kw_only(), "per_device"_a.none() = false,
          "(step, indices, mask) for every step of rank.")
      .def("unshard", &Unshard, "outputs_by_rank"_a,
           nb::sig("def unshard(self, outputs_by_rank: collections.abc.Sequence[typing.Any]) "
                   "-> typing.Any"),
           "One output per item, in item order, from every rank's outputs.\n\n"
           "outputs_by_rank[r] holds rank r's outputs for every slot of every step in order\n"
           "(num_steps * batch_size rows, padded slots included). numpy arrays (any trailing\n"
           "shape) give a numpy array, torch tensors a tensor, anything else (lists of\n"
           "strings, dicts, ...) a list. Raises ValueError naming outputs_by_rank when a rank\n"
           "has the wrong number of rows.\n\n"
           ">>> import numpy as np, shardkit\n"
           ">>> plan = shardkit.EvalPlan(5, 2, 2, split='contiguous')\n"
           ">>> outputs = [np.concatenate([i * 10 for _, i, _ in plan.batches(r)]) for r in "
           "range(2)]\n"
           ">>> plan.unshard(outputs).tolist()\n"
           "[0, 10, 20, 30, 40]\n")
      .def(
          "locate",
          [](const EvalPlan& p, Int item) {
            auto s = p.Locate(ToIndex(item, "item"));
            return std::make_tuple(s.rank, s.step, s.slot);
          },
          "item"_a.none(), "(rank, step, slot) where item is evaluated.")
      .def(
          "source_rows",
          [](const EvalPlan& p) {
            std::vector<Index> rows;
            {
              ReleaseGil release;
              rows = p.SourceRows();
            }
            Index* data;
            auto array = NewArray<Index>(rows.size(), &data);
            std::copy(rows.begin(), rows.end(), data);
            return array;
          },
          "For every item, its row in the rank-concatenated outputs (rank-major, then step,\n"
          "then slot).")
      .def("describe", &EvalPlan::Describe)
      .def("__repr__", &EvalPlan::Describe);

  m.def(
      "steps_for_count",
      [](Int max_count, Int batch_size) {
        const Index n = ToIndex(max_count, "max_count");
        if (n < 0) ThrowInvalid("max_count", "must be at least 0, got " + std::to_string(n));
        return StepsForCount(n, ToIndex(batch_size, "batch_size"));
      },
      "max_count"_a.none(), "batch_size"_a.none(),
      "ceil(max_count / batch_size): the step count ranks agree on for dynamic counts.");
  m.def(
      "pad_for_devices",
      [](Int n, Int devices, OptionalInt min_device_batch) {
        DevicePadding p =
            PadForDevices(ToIndex(n, "n"), ToIndex(devices, "devices"),
                          ToOptionalIndex(min_device_batch, "min_device_batch").value_or(0));
        return std::make_tuple(p.device_batch, p.padding);
      },
      "n"_a.none(), "devices"_a.none(), nb::kw_only(), "min_device_batch"_a.none() = nb::none(),
      "Flax pad_shard_unpad's rule: (per-device batch, padding) for a host batch of n rows.");
  m.def(
      "replica_sources",
      [](const std::vector<Index>& dp_rank_by_rank, Index dp_size) {
        return ReplicaSources(dp_rank_by_rank, dp_size);
      },
      "dp_rank_by_rank"_a, "dp_size"_a,
      "For each data-parallel rank, the rank whose gathered outputs stand for it: the least\n"
      "rank of its replica group (the others hold the same outputs and are skipped).\n\n"
      ">>> import shardkit\n"
      ">>> shardkit.eval.replica_sources([1, 1, 0, 0], 2)  # ranks 0, 1 hold dp_rank 1\n"
      "[2, 0]\n");
  m.def("compare_fingerprints", &CompareFingerprints, "by_rank"_a,
        "'' when every rank's fingerprint equals rank 0's, else a message naming the others.");
  m.def("compare_plan_descriptions", &ComparePlanDescriptions, "by_rank"_a,
        "'' when every rank's plan description equals rank 0's, else a message naming the "
        "plan kind and the parameters that differ.");
  m.def(
      "_discover_env",
      [](const std::map<std::string, std::string>& env) {
        ProcessInfo p =
            DiscoverProcess([&env](const std::string& name) -> std::optional<std::string> {
              auto it = env.find(name);
              if (it == env.end()) return std::nullopt;
              return it->second;
            });
        return std::make_tuple(p.rank, p.world_size, p.local_rank, p.source);
      },
      "env"_a);
}

}  // namespace shardkit::python
