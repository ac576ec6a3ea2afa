// Bindings of TrainPlan (shardkit/loader/train_plan.h): the Python class
// shardkit.TrainPlan (python/shardkit/loader.py) wraps _TrainPlan. The
// state crosses as the core's JSON text; the wrapper turns it into a dict.
// The summary, audit and step results are read-only bound classes.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "python/src/bindings.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

using I64In = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A plan plus the numpy arrays its TrainDocuments view.
struct PyTrainPlan {
  nb::object keep_lengths, keep_images;
  std::unique_ptr<TrainPlan> plan;
};

using PieceTuple = std::tuple<Index, Index, Index>;  // (document, start, length)

std::vector<std::vector<PieceTuple>> Rows(const TrainStep& t) {
  std::vector<std::vector<PieceTuple>> rows(t.rows.size());
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    rows[r].reserve(t.rows[r].size());
    for (const shardkit::Piece& p : t.rows[r]) rows[r].emplace_back(p.item, p.start, p.length);
  }
  return rows;
}

std::string Bool(bool v) { return v ? "True" : "False"; }

std::string SummaryRepr(const TrainSummary& s) {
  return "TrainSummary(num_steps=" + std::to_string(s.num_steps) +
         ", packs=" + std::to_string(s.packs) + ", tokens=" + std::to_string(s.tokens) +
         ", lower_bound=" + std::to_string(s.lower_bound) +
         ", filler_rows=" + std::to_string(s.filler_rows) +
         ", dropped=" + std::to_string(s.dropped) +
         ", dropped_packs=" + std::to_string(s.dropped_packs) +
         ", max_full_step_imbalance=" + ReprFloat(s.max_full_step_imbalance) + ")";
}

std::string AuditRepr(const TrainAudit& a) {
  return "TrainAudit(exactly_once=" + Bool(a.exactly_once) +
         ", equal_steps=" + Bool(a.equal_steps) + ", filler_last_only=" + Bool(a.filler_last_only) +
         ", steps=" + std::to_string(a.steps) + ", world_size=" + std::to_string(a.world_size) +
         ", rows_per_rank=" + std::to_string(a.rows_per_rank) +
         ", filler_rows=" + std::to_string(a.filler_rows) +
         ", dropped=" + std::to_string(a.dropped) +
         ", padding_over_bound=" + ReprFloat(a.padding_over_bound) +
         (a.error.empty()
              ? std::string()
              : ", error=" + nb::cast<std::string>(nb::repr(nb::str(a.error.c_str())))) +
         ")";
}

std::string StepRepr(const TrainStep& t) {
  return "TrainStep(step=" + std::to_string(t.step) + ", rows=" + std::to_string(t.rows.size()) +
         ", tokens=" + std::to_string(t.tokens) + ", filler_rows=" + std::to_string(t.filler_rows) +
         ", cost=" + ReprFloat(t.cost) + ", imbalance=" + ReprFloat(t.imbalance) + ")";
}

}  // namespace

void init_train(nb::module_& m) {
  nb::class_<TrainSummary>(
      m, "TrainSummary",
      "Totals of a TrainPlan's construction pass (TrainPlan.summary, and\n"
      "TokenLoader.plan_summary with equal steps). Read-only attributes.\n\n"
      ">>> import shardkit\n"
      ">>> s = shardkit.TrainPlan([100] * 10, 100, 2, 4, shuffle=False).summary\n"
      ">>> s.num_steps, s.packs, s.lower_bound, s.filler_rows\n"
      "(2, 10, 10, 6)\n"
      ">>> s\n"
      "TrainSummary(num_steps=2, packs=10, tokens=1000, lower_bound=10, filler_rows=6, "
      "dropped=0, dropped_packs=0, max_full_step_imbalance=0.0)\n")
      .def_ro("num_steps", &TrainSummary::num_steps, "steps of the plan, the same on every rank")
      .def_ro("packs", &TrainSummary::packs, "packs of this epoch's stream dealt by the plan")
      .def_ro("stream_packs", &TrainSummary::stream_packs, "packs of the whole epoch's stream")
      .def_ro("tokens", &TrainSummary::tokens, "tokens in the packs dealt")
      .def_ro("pieces", &TrainSummary::pieces, "pieces in the packs dealt")
      .def_ro("split_documents", &TrainSummary::split_documents,
              "documents cut into pieces (whole epoch)")
      .def_ro("dropped", &TrainSummary::dropped, "documents dropped as oversize (whole epoch)")
      .def_ro("dropped_packs", &TrainSummary::dropped_packs,
              "drop mode: packs of the final partial step")
      .def_ro("dropped_tokens", &TrainSummary::dropped_tokens)
      .def_ro("filler_rows", &TrainSummary::filler_rows,
              "pad mode: rows of the last step without a pack")
      .def_ro("next_epoch_rows", &TrainSummary::next_epoch_rows,
              "continuous mode: rows of the last step from later epochs")
      .def_ro("lower_bound", &TrainSummary::lower_bound,
              "ceil(tokens / seq_len): no plan of these tokens uses fewer rows")
      .def_ro("max_step_imbalance", &TrainSummary::max_step_imbalance, "over all steps")
      .def_ro("max_full_step_imbalance", &TrainSummary::max_full_step_imbalance,
              "over the steps without filler")
      .def_ro("mean_step_imbalance", &TrainSummary::mean_step_imbalance,
              "over the steps without filler")
      .def("__repr__", &SummaryRepr);

  nb::class_<TrainAudit>(
      m, "TrainAudit",
      "What TrainPlan.audit() checked by replaying the plan against the lengths.\n"
      "Read-only attributes; error names the first violation ('' when all hold).\n\n"
      ">>> import shardkit\n"
      ">>> a = shardkit.TrainPlan([100] * 10, 100, 2, 4, shuffle=False).audit()\n"
      ">>> a.exactly_once, a.equal_steps, a.filler_last_only, a.error\n"
      "(True, True, True, '')\n"
      ">>> a\n"
      "TrainAudit(exactly_once=True, equal_steps=True, filler_last_only=True, steps=2, "
      "world_size=4, rows_per_rank=2, filler_rows=6, dropped=0, padding_over_bound=0.6)\n")
      .def_ro("exactly_once", &TrainAudit::exactly_once,
              "every piece of every non-dropped document delivered once")
      .def_ro("equal_steps", &TrainAudit::equal_steps,
              "every rank got rows_per_rank rows at every step")
      .def_ro("filler_last_only", &TrainAudit::filler_last_only,
              "filler rows only in the last step")
      .def_ro("steps", &TrainAudit::steps)
      .def_ro("world_size", &TrainAudit::world_size)
      .def_ro("rows_per_rank", &TrainAudit::rows_per_rank)
      .def_ro("documents", &TrainAudit::documents)
      .def_ro("dropped", &TrainAudit::dropped, "documents dropped as oversize")
      .def_ro("dropped_packs", &TrainAudit::dropped_packs)
      .def_ro("dropped_tokens", &TrainAudit::dropped_tokens)
      .def_ro("filler_rows", &TrainAudit::filler_rows)
      .def_ro("tokens", &TrainAudit::tokens)
      .def_ro("lower_bound", &TrainAudit::lower_bound)
      .def_ro("padding_over_bound", &TrainAudit::padding_over_bound,
              "(rows dealt - lower_bound) / lower_bound, filler rows included")
      .def_ro("max_step_imbalance", &TrainAudit::max_step_imbalance)
      .def_ro("max_full_step_imbalance", &TrainAudit::max_full_step_imbalance)
      .def_ro("error", &TrainAudit::error, "the first violation in words; '' when all hold")
      .def("__repr__", &AuditRepr);

  nb::class_<TrainStep>(
      m, "TrainStep",
      "One rank's rows of one step (TrainPlan.step_info, TrainPlan.steps(info=True)).\n"
      "Read-only attributes.\n\n"
      ">>> import shardkit\n"
      ">>> t = shardkit.TrainPlan([100] * 10, 100, 2, 4, shuffle=False).step_info(0, 1)\n"
      ">>> t.rows, t.row_packs, t.tokens, t.filler_rows\n"
      "([[(8, 0, 100)], []], [8, -1], 100, 1)\n"
      ">>> t\n"
      "TrainStep(step=1, rows=2, tokens=100, filler_rows=1, cost=100.0, imbalance=1.0)\n")
      .def_ro("step", &TrainStep::step)
      .def_prop_ro("rows", &Rows,
                   "rows_per_rank lists of (document, start, length) pieces; a filler row is []")
      .def_ro("row_packs", &TrainStep::row_packs,
              "stream index of each row's pack; -1 for a filler row")
      .def_ro("row_epochs", &TrainStep::row_epochs, "epoch of each row's pack")
      .def_ro("tokens", &TrainStep::tokens, "real tokens of this rank in this step")
      .def_ro("filler_rows", &TrainStep::filler_rows)
      .def_ro("cost", &TrainStep::cost, "this rank's cost")
      .def_ro("imbalance", &TrainStep::imbalance,
              "the step's heaviest rank cost / mean - 1 (0 when empty)")
      .def("__repr__", &StepRepr);

  nb::class_<PyTrainPlan>(m, "_TrainPlan")
      .def(
          "__init__",
          [](PyTrainPlan* self, nb::object lengths_obj, std::optional<nb::object> images_obj,
             std::optional<std::string> state_json, std::uint64_t identity, nb::kwargs options) {
            TrainOptions o;
            ReadOptions(options, &o);
            new (self) PyTrainPlan();
            self->keep_lengths = lengths_obj;
            const I64In lengths = nb::cast<I64In>(lengths_obj);
            std::span<const Index> img;
            if (images_obj) {
              self->keep_images = *images_obj;
              const I64In images = nb::cast<I64In>(*images_obj);
              img = {reinterpret_cast<const Index*>(images.data()), images.shape(0)};
            }
            auto docs = TrainDocuments::FromSpans(
                {reinterpret_cast<const Index*>(lengths.data()), lengths.shape(0)}, img);
            docs.identity = identity;
            std::optional<TrainState> state;
            if (state_json) state = TrainStateFromJson(*state_json);
            ReleaseGil release;
            self->plan = state ? std::make_unique<TrainPlan>(std::move(docs), o, *state)
                               : std::make_unique<TrainPlan>(std::move(docs), o);
          },
          "lengths"_a, "images"_a.none(), "state"_a.none(), "identity"_a, "options"_a,
          "options: TrainOptions' fields by name (bindings.h, ReadOptions).")
      .def_prop_ro("num_steps", [](const PyTrainPlan& p) { return p.plan->num_steps(); })
      .def_prop_ro("first_step", [](const PyTrainPlan& p) { return p.plan->first_step(); })
      .def_prop_ro("epoch_steps", [](const PyTrainPlan& p) { return p.plan->epoch_steps(); })
      .def_prop_ro("rows_per_rank", [](const PyTrainPlan& p) { return p.plan->rows_per_rank(); })
      .def_prop_ro("world_size", [](const PyTrainPlan& p) { return p.plan->options().world_size; })
      .def_prop_ro("epoch", [](const PyTrainPlan& p) { return p.plan->options().epoch; })
      .def_prop_ro("position", [](const PyTrainPlan& p) { return p.plan->options().position; })
      .def_prop_ro("fingerprint", [](const PyTrainPlan& p) { return p.plan->Fingerprint(); })
      .def("describe", [](const PyTrainPlan& p) { return p.plan->Describe(); })
      .def("summary", [](const PyTrainPlan& p) { return p.plan->summary(); })
      .def(
          "state_at",
          [](const PyTrainPlan& p, Index step) { return TrainStateToJson(p.plan->StateAt(step)); },
          "step"_a)
      .def(
          "step",
          [](const PyTrainPlan& p, Index rank, Index step) {
            TrainStep t;
            {
              ReleaseGil release;
              t = p.plan->Step(rank, step);
            }
            return t;
          },
          "rank"_a, "step"_a)
      .def("audit", [](const PyTrainPlan& p) {
        TrainAudit a;
        {
          ReleaseGil release;
          a = p.plan->Audit();
        }
        return a;
      });

  // Streams one rank's steps; holds its plan alive.
  struct PyTrainReader {
    nb::object keep_plan;
    std::unique_ptr<TrainPlan::Reader> reader;
  };
  nb::class_<PyTrainReader>(m, "_TrainReader")
      .def(
          "__init__",
          [](PyTrainReader* self, nb::object plan, Index rank, Index first) {
            new (self) PyTrainReader();
            self->keep_plan = plan;
            self->reader = nb::cast<const PyTrainPlan&>(plan).plan->Read(rank, first);
          },
          "plan"_a, "rank"_a, "first"_a)
      .def("next", [](PyTrainReader& r) -> std::optional<TrainStep> {
        TrainStep t;
        bool more;
        {
          ReleaseGil release;
          more = r.reader->Next(&t);
        }
        if (!more) return std::nullopt;
        return t;
      });

  m.def("_train_state_from_json",
        [](const std::string& json) { return TrainStateToJson(TrainStateFromJson(json)); });
}

}  // namespace shardkit::python
