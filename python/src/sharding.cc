// Bindings of ShardPlan, Shard and the Whale helper.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>

#include "python/src/bindings.h"
#include "shardkit/sharding/shard_plan.h"
#include "shardkit/sharding/whale.h"

namespace shardkit::python {

using namespace nb::literals;

std::vector<double> ToDoubles(nb::handle values, const char* name) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object array = np.attr("ascontiguousarray")(values, "dtype"_a = np.attr("float64"));
  if (nb::cast<int>(array.attr("ndim")) != 1) {
    std::string shape;
    for (nb::handle extent : array.attr("shape")) {
      shape += (shape.empty() ? "" : ", ") + std::to_string(nb::cast<Index>(extent));
    }
    throw std::invalid_argument(std::string(name) + ": expected a 1-D array, got shape (" + shape +
                                ")");
  }
  auto view = nb::cast<nb::ndarray<const double, nb::ndim<1>, nb::c_contig>>(array);
  return std::vector<double>(view.data(), view.data() + view.shape(0));
}

namespace {

struct ShardIterator {
  Shard shard;
  Index next = 0;
};

nb::dict AuditToDict(const AuditReport& r) {
  nb::dict d;
  d["exactly_once"] = r.exactly_once;
  d["method"] = r.method;
  d["detail"] = r.detail;
  d["window_size"] = r.window_size;
  d["delivered"] = r.delivered;
  d["padding"] = r.padding;
  d["dropped"] = r.dropped;
  d["duplicates"] = r.duplicates;
  d["missing"] = r.missing;
  d["min_count"] = r.min_count;
  d["max_count"] = r.max_count;
  d["max_imbalance"] = r.max_imbalance;
  if (!r.loads.empty()) {
    d["loads"] = r.loads;
    d["max_load"] = r.max_load;
    d["lower_bound"] = r.lower_bound;
    d["load_imbalance"] = r.load_imbalance;
  }
  return d;
}

Index NormaliseIndex(const Shard& shard, Index k) {
  if (k < 0) k += shard.size();
  if (k < 0 || k >= shard.size()) {
    throw nb::index_error(
        ("index " + std::to_string(k) + " is outside [0, " + std::to_string(shard.size()) + ")")
            .c_str());
  }
  return k;
}

}  // namespace

void init_shard_plan(nb::module_& m) {
  nb::class_<Shard>(m, "Shard",
                    "One rank's (or one dataloader worker's) list of global item indices.\n\n"
                    "O(1) random access; padded entries are the trailing ``padding`` ones.")
      .def("__len__", &Shard::size)
      .def(
          "__getitem__", [](const Shard& s, Index k) { return s[NormaliseIndex(s, k)]; }, "index"_a)
      .def("__iter__",
           [](const Shard& s) {
             return ShardIterator{s, 0};
           })
      .def_prop_ro("padding", &Shard::padding, "number of trailing padded entries")
      .def_prop_ro("rank", &Shard::rank)
      .def_prop_ro("worker", &Shard::worker)
      .def_prop_ro("num_workers", &Shard::num_workers)
      .def("is_padding", &Shard::IsPadding, "index"_a)
      .def(
          "numpy",
          [](const Shard& s, Index start, std::optional<Index> stop,
             std::optional<nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig>> out)
              -> nb::object {
            const Index end = stop.value_or(s.size());
            if (start < 0 || end < start || end > s.size()) {
              throw nb::index_error(("range [" + std::to_string(start) + ", " +
                                     std::to_string(end) + ") is outside [0, " +
                                     std::to_string(s.size()) + ")")
                                        .c_str());
            }
            const size_t count = static_cast<size_t>(end - start);
            std::int64_t* data;
            nb::object result;
            if (out) {
              if (out->shape(0) != count) {
                throw std::invalid_argument("out: has " + std::to_string(out->shape(0)) +
                                            " elements, the range needs " + std::to_string(count));
              }
              data = out->data();
              result = nb::cast(*out);
            } else {
              result = nb::cast(NewArray<std::int64_t>(count, &data));
            }
            {
              nb::gil_scoped_release release;
              s.Fill(start, end, data);
            }
            return result;
          },
          "start"_a = 0, "stop"_a = nb::none(), "out"_a = nb::none(),
          "Entries [start, stop) as int64, filled in place by C++: into `out` (a\n"
          "contiguous int64 array of stop - start elements) when given, else into a new\n"
          "array.")
      .def(
          "mask",
          [](const Shard& s) {
            bool* data;
            auto array = NewArray<bool>(static_cast<size_t>(s.size()), &data);
            const Index real = s.size() - s.padding();
            for (Index k = 0; k < s.size(); ++k) data[k] = k < real;
            return array;
          },
          "True for real entries, False for padded ones.")
      .def("__repr__", [](const Shard& s) {
        return "Shard(rank=" + std::to_string(s.rank()) + ", worker=" + std::to_string(s.worker()) +
               "/" + std::to_string(s.num_workers()) + ", len=" + std::to_string(s.size()) +
               ", padding=" + std::to_string(s.padding()) + ")";
      });

  nb::class_<ShardIterator>(m, "_ShardIterator")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", [](ShardIterator& it) {
        if (it.next >= it.shard.size()) throw nb::stop_iteration();
        return it.shard[it.next++];
      });

  nb::class_<ShardPlan>(
      m, "ShardPlan",
      "Which rank (and dataloader worker) gets which item: window -> order -> split ->\n"
      "remainder -> workers, a pure function of its parameters.")
      .def(
          "__init__",
          [](ShardPlan* self, Index num_items, Index world_size, const std::string& split,
             const std::string& remainder, Index offset, std::optional<Index> limit, bool shuffle,
             std::uint64_t seed, std::uint64_t epoch, nb::object weights, bool equal_counts) {
            ShardOptions o;
            o.split = ParseSplit(split);
            o.remainder = ParseRemainder(remainder);
            o.offset = offset;
            o.limit = limit;
            o.shuffle = shuffle;
            o.seed = seed;
            o.epoch = epoch;
            o.equal_counts = equal_counts;
            if (!weights.is_none()) o.weights = ToDoubles(weights, "weights");
            nb::gil_scoped_release release;
            new (self) ShardPlan(num_items, world_size, std::move(o));
          },
          "num_items"_a, "world_size"_a, nb::kw_only(), "split"_a = "round_robin",
          "remainder"_a = "uneven", "offset"_a = 0, "limit"_a = nb::none(), "shuffle"_a = false,
          "seed"_a = 0, "epoch"_a = 0, "weights"_a = nb::none(), "equal_counts"_a = false)
      .def(
          "shard",
          [](const ShardPlan& p, Index rank, Index worker, Index num_workers) {
            return p.GetShard(rank, worker, num_workers);
          },
          "rank"_a, nb::kw_only(), "worker"_a = 0, "num_workers"_a = 1,
          "Rank's list, or the part of it that one of num_workers dataloader workers reads.")
      .def("counts", &ShardPlan::Counts, "Length of every rank's list, padding included.")
      .def("count", &ShardPlan::Count, "rank"_a)
      .def("padding", &ShardPlan::Padding, "rank"_a)
      .def("item", &ShardPlan::ItemAt, "rank"_a, "entry"_a,
           "The global item at entry `entry` of rank's list.")
      .def(
          "locate",
          [](const ShardPlan& p, Index item) -> std::optional<std::pair<Index, Index>> {
            Location loc = p.Locate(item);
            if (loc.rank < 0) return std::nullopt;
            return std::make_pair(loc.rank, loc.entry);
          },
          "item"_a, "(rank, entry) holding `item`, or None when it was dropped.")
      .def("loads", &ShardPlan::Loads, "Each rank's load (sum of its items' weights).")
      .def(
          "audit",
          [](const ShardPlan& p, Index enumerate_limit) {
            AuditReport report;
            {
              nb::gil_scoped_release release;
              report = p.Audit(enumerate_limit);
            }
            return AuditToDict(report);
          },
          "enumerate_limit"_a = Index{1} << 27,
          "Proves exactly-once coverage (as the remainder policy states) and reports balance.")
      .def_prop_ro("num_items", &ShardPlan::num_items)
      .def_prop_ro("world_size", &ShardPlan::world_size)
      .def_prop_ro(
          "window",
          [](const ShardPlan& p) { return std::make_pair(p.window_begin(), p.window_end()); })
      .def_prop_ro("dropped", &ShardPlan::Dropped)
      .def_prop_ro("split",
                   [](const ShardPlan& p) { return std::string(SplitName(p.options().split)); })
      .def_prop_ro(
          "remainder",
          [](const ShardPlan& p) { return std::string(RemainderName(p.options().remainder)); })
      .def_prop_ro("shuffle", [](const ShardPlan& p) { return p.options().shuffle; })
      .def_prop_ro("seed", [](const ShardPlan& p) { return p.options().seed; })
      .def_prop_ro("epoch", [](const ShardPlan& p) { return p.options().epoch; })
      .def("__repr__", [](const ShardPlan& p) {
        const auto& o = p.options();
        return "ShardPlan(num_items=" + std::to_string(p.num_items()) +
               ", world_size=" + std::to_string(p.world_size()) + ", split='" +
               std::string(SplitName(o.split)) + "', remainder='" +
               std::string(RemainderName(o.remainder)) + "', window=[" +
               std::to_string(p.window_begin()) + ", " + std::to_string(p.window_end()) +
               "), shuffle=" + (o.shuffle ? "True" : "False") + ")";
      });

  m.def(
      "_whale_slicing",
      [](Index num_files, Index world_size, bool unbalanced, bool drop_last) {
        WhaleChoice c = WhaleSlicing(num_files, world_size, unbalanced, drop_last);
        nb::dict d;
        d["remainder"] = std::string(RemainderName(c.remainder));
        d["shuffle"] = c.shuffle;
        d["reason"] = c.reason;
        d["warning"] = c.warning;
        return d;
      },
      "num_files"_a, "world_size"_a, "unbalanced_io_slicing"_a, "drop_last_files"_a);
  m.def(
      "_parse_whale_bool",
      [](const std::string& name, const std::string& value) { return ParseWhaleBool(name, value); },
      "name"_a, "value"_a);
}

}  // namespace shardkit::python
