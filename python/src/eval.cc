// Bindings of EvalPlan and process discovery (the C++ side of shardkit.dist).
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>

#include "python/src/bindings.h"
#include "shardkit/eval/dist.h"
#include "shardkit/eval/eval_plan.h"

namespace shardkit::python {

using namespace nb::literals;

void init_eval_plan(nb::module_& m) {
  nb::class_<EvalPlan>(
      m, "EvalPlan",
      "Full-dataset evaluation in equal fixed-shape steps: every rank runs num_steps steps of\n"
      "batch_size slots; every item is in exactly one unmasked slot. See shardkit.EvalPlan.")
      .def(
          "__init__",
          [](EvalPlan* self, Index num_items, Index world_size, Index batch_size, Index devices,
             std::optional<Index> min_device_batch, const std::string& split, bool shuffle,
             std::uint64_t seed, std::uint64_t epoch) {
            EvalOptions o;
            o.devices = devices;
            o.min_device_batch = min_device_batch.value_or(0);
            o.split = ParseSplit(split);
            o.shuffle = shuffle;
            o.seed = seed;
            o.epoch = epoch;
            new (self) EvalPlan(num_items, world_size, batch_size, o);
          },
          "num_items"_a, "world_size"_a, "batch_size"_a, nb::kw_only(), "devices"_a = 1,
          "min_device_batch"_a = nb::none(), "split"_a = "round_robin", "shuffle"_a = false,
          "seed"_a = 0, "epoch"_a = 0)
      .def_prop_ro("num_items", &EvalPlan::num_items)
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
      .def("real", &EvalPlan::Real, "rank"_a, "Real (unmasked) slots of rank over all steps.")
      .def("padding", &EvalPlan::Padding, "rank"_a,
           "Padded slots of rank over all steps (as ShardPlan.padding(rank)).")
      .def(
          "_batch",
          [](const EvalPlan& p, Index rank, Index step) {
            Index* idx;
            bool* mask;
            auto indices = NewArray<Index>(static_cast<size_t>(p.batch_size()), &idx);
            auto masks = NewArray<bool>(static_cast<size_t>(p.batch_size()), &mask);
            {
              nb::gil_scoped_release release;
              p.Batch(rank, step, idx, mask);
            }
            return nb::make_tuple(indices, masks);
          },
          "rank"_a, "step"_a)
      .def(
          "locate",
          [](const EvalPlan& p, Index item) {
            auto s = p.Locate(item);
            return std::make_tuple(s.rank, s.step, s.slot);
          },
          "item"_a, "(rank, step, slot) where item is evaluated.")
      .def(
          "source_rows",
          [](const EvalPlan& p) {
            std::vector<Index> rows;
            {
              nb::gil_scoped_release release;
              rows = p.SourceRows();
            }
            Index* data;
            auto array = NewArray<Index>(rows.size(), &data);
            std::copy(rows.begin(), rows.end(), data);
            return array;
          },
          "For every item, its row in the rank-concatenated outputs (rank-major, then step,\n"
          "then slot).")
      .def("_check_output_rows", &EvalPlan::CheckOutputRows, "rows_by_rank"_a)
      .def("describe", &EvalPlan::Describe)
      .def("__repr__", &EvalPlan::Describe);

  m.def("steps_for_count", &StepsForCount, "max_count"_a, "batch_size"_a,
        "ceil(max_count / batch_size): the step count ranks agree on for dynamic counts.");
  m.def(
      "pad_for_devices",
      [](Index n, Index devices, std::optional<Index> min_device_batch) {
        DevicePadding p = PadForDevices(n, devices, min_device_batch.value_or(0));
        return std::make_tuple(p.device_batch, p.padding);
      },
      "n"_a, "devices"_a, nb::kw_only(), "min_device_batch"_a = nb::none(),
      "Flax pad_shard_unpad's rule: (per-device batch, padding) for a host batch of n rows.");
  m.def("compare_fingerprints", &CompareFingerprints, "by_rank"_a,
        "'' when every rank's fingerprint equals rank 0's, else a message naming the others.");
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
