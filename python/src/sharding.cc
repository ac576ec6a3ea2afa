// Bindings of ShardPlan, Shard and the Whale helper.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <stdexcept>
#include <string>

#include "python/src/bindings.h"
#include "shardkit/sharding/shard_plan.h"
#include "shardkit/sharding/whale.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

struct ShardIterator {
  Shard shard;
  Index next = 0;
};

std::string AuditRepr(const AuditReport& r) {
  std::string out =
      std::string("AuditReport(exactly_once=") + (r.exactly_once ? "True" : "False") +
      ", method='" + r.method + "', window_size=" + std::to_string(r.window_size) +
      ", delivered=" + std::to_string(r.delivered) + ", padding=" + std::to_string(r.padding) +
      ", dropped=" + std::to_string(r.dropped) + ", duplicates=" + std::to_string(r.duplicates) +
      ", missing=" + std::to_string(r.missing) + ", min_count=" + std::to_string(r.min_count) +
      ", max_count=" + std::to_string(r.max_count) +
      ", max_imbalance=" + std::to_string(r.max_imbalance);
  if (!r.load_groups.empty()) {
    out += ", max_load=" + ReprFloat(r.max_load) + ", lower_bound=" + ReprFloat(r.lower_bound) +
           ", load_imbalance=" + ReprFloat(r.load_imbalance);
  }
  return out + ")";
}

// A weighted plan's load figure, None for an unweighted one.
std::optional<double> IfWeighted(const AuditReport& r, double value) {
  if (r.load_groups.empty()) return std::nullopt;
  return value;
}

}  // namespace

void init_shard_plan(nb::module_& m) {
  // The keyword options and their defaults are ShardOptions' (its table in
  // shardkit/loader/option_fields.h).
  static const std::string init_signature =
      "def __init__(self, num_items: int, world_size: int, *, " + OptionParameters(ShardOptions{}) +
      ") -> None";
  nb::class_<Shard>(m, "Shard",
                    "One rank's (or one dataloader worker's) list of global item indices.\n\n"
                    "O(1) random access; padded entries are the trailing ``padding`` ones.")
      .def("__len__", &Shard::size)
      .def(
          "__getitem__",
          [](const Shard& s, Int k) {
            return s[CheckedIndex(ToIndex(k, "index"), s.size(), "index")];
          },
          "index"_a.none())
      .def("__iter__",
           [](const Shard& s) {
             return ShardIterator{s, 0};
           })
      .def_prop_ro("padding", &Shard::padding, "number of trailing padded entries")
      .def_prop_ro("rank", &Shard::rank)
      .def_prop_ro("worker", &Shard::worker)
      .def_prop_ro("num_workers", &Shard::num_workers)
      .def(
          "is_padding",
          [](const Shard& s, Int k) {
            return s.IsPadding(CheckedIndex(ToIndex(k, "index"), s.size(), "index"));
          },
          "index"_a.none(),
          "Whether entry index (negative: from the end) is padding; IndexError outside.")
      .def(
          "numpy",
          [](const Shard& s, Int start_arg, OptionalInt stop,
             std::optional<nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig>> out)
              -> nb::typed<nb::object, NumpyArray<std::int64_t>> {
            const Index start = ToIndex(start_arg, "start");
            const Index end = ToOptionalIndex(stop, "stop").value_or(s.size());
            if (start < 0 || end < start || end > s.size()) {
              const char* bound = start < 0 || start > s.size() ? "start: " : "stop: ";
              throw nb::index_error((bound + std::string("range [") + std::to_string(start) + ", " +
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
              result = nb::cast(NewArrayFor<std::int64_t>("stop", count, &data));
            }
            {
              ReleaseGil release;
              s.Fill(start, end, data);
            }
            return nb::typed<nb::object, NumpyArray<std::int64_t>>(result);
          },
          "start"_a.none() = 0, "stop"_a.none() = nb::none(), "out"_a = nb::none(),
          "Entries [start, stop) as int64, filled in place by C++: into `out` (a\n"
          "contiguous int64 array of stop - start elements) when given, else into a new\n"
          "array.")
      .def(
          "mask",
          [](const Shard& s) {
            bool* data;
            // One flag per entry of the rank's list (ShardPlan(2**62, 1).shard(0).mask()
            // was a bare MemoryError).
            auto array = NewArrayFor<bool>("rank", static_cast<size_t>(s.size()), &data);
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

  nb::class_<AuditReport>(
      m, "AuditReport",
      "What ShardPlan.audit() proved: coverage as the remainder policy states it, and\n"
      "balance. Read-only attributes; loads and the load figures are None for an\n"
      "unweighted plan.\n\n"
      ">>> import shardkit\n"
      ">>> report = shardkit.ShardPlan(10, 4, remainder=\"pad\").audit()\n"
      ">>> report.exactly_once, report.padding, report.max_imbalance\n"
      "(True, 2, 0)\n"
      ">>> report\n"
      "AuditReport(exactly_once=True, method='enumerated', window_size=10, delivered=10, "
      "padding=2, dropped=0, duplicates=0, missing=0, min_count=3, max_count=3, "
      "max_imbalance=0)\n"
      ">>> shardkit.ShardPlan(4, 2, split=\"balanced\", weights=[4, 1, 1, 2]).audit().loads\n"
      "[4.0, 4.0]\n")
      .def_ro("exactly_once", &AuditReport::exactly_once,
              "coverage is exactly what the remainder policy states")
      .def_ro("method", &AuditReport::method, "'enumerated' (every entry listed) or 'arithmetic'")
      .def_ro("detail", &AuditReport::detail, "what was checked, or what failed")
      .def_ro("window_size", &AuditReport::window_size)
      .def_ro("delivered", &AuditReport::delivered, "real (unpadded) entries over all ranks")
      .def_ro("padding", &AuditReport::padding, "padded entries over all ranks")
      .def_ro("dropped", &AuditReport::dropped)
      .def_ro("duplicates", &AuditReport::duplicates, "real entries naming an item seen before")
      .def_ro("missing", &AuditReport::missing, "items no rank received (besides dropped)")
      .def_ro("min_count", &AuditReport::min_count, "shortest list, padding included")
      .def_ro("max_count", &AuditReport::max_count, "longest list, padding included")
      .def_ro("max_imbalance", &AuditReport::max_imbalance, "max_count - min_count")
      .def_prop_ro(
          "loads",
          [](const AuditReport& r) -> std::optional<std::vector<double>> {
            if (r.load_groups.empty()) return std::nullopt;
            if (r.loads.empty()) {
              Index world = 0;
              for (const LoadGroup& g : r.load_groups) world += g.ranks;
              ThrowInvalid("world_size",
                           shardkit::Str(world) +
                               " ranks are too many to list loads one per rank (at most " +
                               shardkit::Str(kMaxRankList) + "); read load_groups instead");
            }
            return r.loads;
          },
          "each rank's load (sum of its items' weights); for more than 2^20 ranks a\n"
          "ValueError naming world_size (read load_groups)")
      .def_prop_ro(
          "load_groups",
          [](const AuditReport& r) -> std::optional<std::vector<std::pair<double, Index>>> {
            if (r.load_groups.empty()) return std::nullopt;
            std::vector<std::pair<double, Index>> out;
            out.reserve(r.load_groups.size());
            for (const LoadGroup& g : r.load_groups) out.emplace_back(g.load, g.ranks);
            return out;
          },
          "the distinct loads, ascending, as (load, number of ranks) pairs: a bounded\n"
          "description for any world size")
      .def_prop_ro("max_load", [](const AuditReport& r) { return IfWeighted(r, r.max_load); })
      .def_prop_ro(
          "lower_bound", [](const AuditReport& r) { return IfWeighted(r, r.lower_bound); },
          "no split of these weights has a smaller max_load")
      .def_prop_ro("load_imbalance",
                   [](const AuditReport& r) { return IfWeighted(r, r.load_imbalance); })
      .def("__repr__", &AuditRepr);

  nb::class_<ShardPlan>(
      m, "ShardPlan",
      "Which rank (and dataloader worker) gets which item: window -> order -> split ->\n"
      "remainder -> workers, a pure function of its parameters.")
      .def(
          "__init__",
          [](ShardPlan* self, Int num_items, Int world_size, nb::kwargs options) {
            ShardOptions o;
            const Index n = ToIndex(num_items, "num_items");
            const Index w = ToIndex(world_size, "world_size");
            ReadOptions(options, &o);
            ReleaseGil release;
            new (self) ShardPlan(n, w, std::move(o));
          },
          // .none(): None reaches ToIndex, whose TypeError names the parameter.
          "num_items"_a.none(), "world_size"_a.none(), "options"_a, nb::sig(init_signature.c_str()))
      .def(
          "shard",
          [](const ShardPlan& p, Int rank, Int worker, Int num_workers) {
            return p.GetShard(ToIndex(rank, "rank"), ToIndex(worker, "worker"),
                              ToIndex(num_workers, "num_workers"));
          },
          "rank"_a.none(), nb::kw_only(), "worker"_a.none() = 0, "num_workers"_a.none() = 1,
          "Rank's list, or the part of it that one of num_workers dataloader workers reads.")
      .def("counts", &ShardPlan::Counts,
           "Length of every rank's list, padding included; ValueError naming world_size\n"
           "above 2^20 ranks (use count(rank)).")
      .def(
          "count", [](const ShardPlan& p, Int rank) { return p.Count(ToIndex(rank, "rank")); },
          "rank"_a.none())
      .def(
          "padding", [](const ShardPlan& p, Int rank) { return p.Padding(ToIndex(rank, "rank")); },
          "rank"_a.none())
      .def(
          "item",
          [](const ShardPlan& p, Int rank, Int entry) {
            return p.ItemAt(ToIndex(rank, "rank"), ToIndex(entry, "entry"));
          },
          "rank"_a.none(), "entry"_a.none(), "The global item at entry `entry` of rank's list.")
      .def(
          "locate",
          [](const ShardPlan& p, Int item) -> std::optional<std::pair<Index, Index>> {
            Location loc = p.Locate(ToIndex(item, "item"));
            if (loc.rank < 0) return std::nullopt;
            return std::make_pair(loc.rank, loc.entry);
          },
          "item"_a.none(), "(rank, entry) holding `item`, or None when it was dropped.")
      .def("loads", &ShardPlan::Loads,
           "Each rank's load (sum of its items' weights); ValueError naming world_size\n"
           "above 2^20 ranks (use load(rank) or audit().load_groups).")
      .def(
          "load", [](const ShardPlan& p, Int rank) { return p.Load(ToIndex(rank, "rank")); },
          "rank"_a.none(), "Rank's load (sum of its real items' weights; 0.0 without weights).")
      .def(
          "audit",
          [](const ShardPlan& p, Int limit) {
            const Index enumerate_limit = ToIndex(limit, "enumerate_limit");
            AuditReport report;
            {
              ReleaseGil release;
              report = p.Audit(enumerate_limit);
            }
            return report;
          },
          "enumerate_limit"_a.none() = Index{1} << 27,
          "Proves exactly-once coverage (as the remainder policy states) and reports balance\n"
          "(an AuditReport). Plans of up to enumerate_limit entries are checked by listing\n"
          "every entry, larger ones by the arithmetic of the split.")
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
      .def("__repr__", [](const ShardPlan& p) { return "<ShardPlan: " + p.Describe() + ">"; });

  nb::class_<WhaleChoice>(m, "WhaleChoice",
                          "How Whale slices files over workers (see shardkit.whale_choice):\n"
                          "the remainder policy, whether each worker shuffles, the rule that\n"
                          "chose it, and a warning where Whale's documentation warns.\n\n"
                          ">>> import shardkit\n"
                          ">>> shardkit.whale_choice(10, 3, env={}).remainder\n"
                          "'replicate'\n")
      .def_prop_ro("remainder",
                   [](const WhaleChoice& c) { return std::string(RemainderName(c.remainder)); })
      .def_ro("shuffle", &WhaleChoice::shuffle)
      .def_ro("reason", &WhaleChoice::reason)
      .def_ro("warning", &WhaleChoice::warning, "'' when the choice has no known hazard")
      .def("__repr__", [](const WhaleChoice& c) {
        return "WhaleChoice(remainder='" + std::string(RemainderName(c.remainder)) +
               "', shuffle=" + (c.shuffle ? "True" : "False") +
               ", reason=" + nb::cast<std::string>(nb::repr(nb::str(c.reason.c_str()))) + ")";
      });

  m.def("_whale_slicing", &WhaleSlicing, "num_files"_a, "world_size"_a, "unbalanced_io_slicing"_a,
        "drop_last_files"_a);
  m.def(
      "_whale_policy",
      [](const std::map<std::string, std::string>& env) {
        const WhalePolicy p = WhalePolicyFrom([&](const std::string& name) {
          auto it = env.find(name);
          return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
        });
        return std::make_pair(p.unbalanced_io_slicing, p.drop_last_files);
      },
      "env"_a,
      "(unbalanced_io_slicing, drop_last_files) as Whale reads them from `env`; "
      "ValueError naming the variable and the accepted spellings.");
  m.def(
      "_parse_whale_bool",
      [](const std::string& name, const std::string& value) { return ParseWhaleBool(name, value); },
      "name"_a, "value"_a);
}

}  // namespace shardkit::python
