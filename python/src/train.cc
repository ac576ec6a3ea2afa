// Bindings of TrainPlan (shardkit/loader/train_plan.h): the Python class
// shardkit.TrainPlan (python/shardkit/loader.py) wraps _TrainPlan. The
// state crosses as the core's JSON text; the wrapper turns it into a dict.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

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

nb::list Rows(const TrainStep& t) {
  nb::list rows;
  for (const auto& row : t.rows) {
    nb::list pieces;
    for (const PackItem& p : row) pieces.append(nb::make_tuple(p.item, p.start, p.length));
    rows.append(pieces);
  }
  return rows;
}

nb::dict StepInfo(const TrainStep& t) {
  nb::dict d;
  d["step"] = t.step;
  d["rows"] = Rows(t);
  d["row_packs"] = t.row_packs;
  d["row_epochs"] = t.row_epochs;
  d["tokens"] = t.tokens;
  d["filler_rows"] = t.filler_rows;
  d["cost"] = t.cost;
  d["imbalance"] = t.imbalance;
  return d;
}

nb::dict SummaryDict(const TrainSummary& s) {
  nb::dict d;
  d["num_steps"] = s.num_steps;
  d["packs"] = s.packs;
  d["stream_packs"] = s.stream_packs;
  d["tokens"] = s.tokens;
  d["pieces"] = s.pieces;
  d["split_documents"] = s.split_documents;
  d["dropped"] = s.dropped;
  d["dropped_packs"] = s.dropped_packs;
  d["dropped_tokens"] = s.dropped_tokens;
  d["filler_rows"] = s.filler_rows;
  d["next_epoch_rows"] = s.next_epoch_rows;
  d["lower_bound"] = s.lower_bound;
  d["max_step_imbalance"] = s.max_step_imbalance;
  d["max_full_step_imbalance"] = s.max_full_step_imbalance;
  d["mean_step_imbalance"] = s.mean_step_imbalance;
  return d;
}

nb::dict AuditDict(const TrainAudit& a) {
  nb::dict d;
  d["exactly_once"] = a.exactly_once;
  d["equal_steps"] = a.equal_steps;
  d["filler_last_only"] = a.filler_last_only;
  d["steps"] = a.steps;
  d["world_size"] = a.world_size;
  d["rows_per_rank"] = a.rows_per_rank;
  d["documents"] = a.documents;
  d["dropped"] = a.dropped;
  d["dropped_packs"] = a.dropped_packs;
  d["dropped_tokens"] = a.dropped_tokens;
  d["filler_rows"] = a.filler_rows;
  d["tokens"] = a.tokens;
  d["lower_bound"] = a.lower_bound;
  d["padding_over_bound"] = a.padding_over_bound;
  d["max_step_imbalance"] = a.max_step_imbalance;
  d["max_full_step_imbalance"] = a.max_full_step_imbalance;
  d["error"] = a.error;
  return d;
}

}  // namespace

void init_train(nb::module_& m) {
  nb::class_<PyTrainPlan>(m, "_TrainPlan")
      .def(
          "__init__",
          [](PyTrainPlan* self, nb::object lengths_obj, std::optional<nb::object> images_obj,
             Index seq_len, Index batch_size, Index world_size, Index micro_batches,
             const std::string& mode, bool shuffle, std::uint64_t seed, std::uint64_t epoch,
             Index position, const std::string& algorithm, std::optional<Index> buffer,
             const std::string& cost, std::optional<Index> max_images,
             std::optional<Index> max_sequences, const std::string& oversize,
             std::optional<std::string> state_json) {
            new (self) PyTrainPlan();
            self->keep_lengths = lengths_obj;
            const I64In lengths = nb::cast<I64In>(lengths_obj);
            std::span<const Index> img;
            if (images_obj) {
              self->keep_images = *images_obj;
              const I64In images = nb::cast<I64In>(*images_obj);
              img = {reinterpret_cast<const Index*>(images.data()), images.shape(0)};
            }
            TrainOptions o;
            o.seq_len = seq_len;
            o.batch_size = batch_size;
            o.world_size = world_size;
            o.micro_batches = micro_batches;
            o.mode = ParseTrainMode(mode);
            o.shuffle = shuffle;
            o.seed = seed;
            o.epoch = epoch;
            o.position = position;
            o.algorithm = ParsePackAlgorithm(algorithm);
            o.buffer = buffer;
            o.cost = ParseCostModel(cost);
            o.max_images = max_images;
            o.max_sequences = max_sequences;
            o.oversize = ParseOversize(oversize);
            auto docs = TrainDocuments::FromSpans(
                {reinterpret_cast<const Index*>(lengths.data()), lengths.shape(0)}, img);
            std::optional<TrainState> state;
            if (state_json) state = TrainStateFromJson(*state_json);
            ReleaseGil release;
            self->plan = state ? std::make_unique<TrainPlan>(std::move(docs), o, *state)
                               : std::make_unique<TrainPlan>(std::move(docs), o);
          },
          "lengths"_a, "images"_a.none(), "seq_len"_a, "batch_size"_a, "world_size"_a,
          "micro_batches"_a, "mode"_a, "shuffle"_a, "seed"_a, "epoch"_a, "position"_a,
          "algorithm"_a, "buffer"_a.none(), "cost"_a, "max_images"_a.none(),
          "max_sequences"_a.none(), "oversize"_a, "state"_a.none())
      .def_prop_ro("num_steps", [](const PyTrainPlan& p) { return p.plan->num_steps(); })
      .def_prop_ro("rows_per_rank", [](const PyTrainPlan& p) { return p.plan->rows_per_rank(); })
      .def_prop_ro("world_size", [](const PyTrainPlan& p) { return p.plan->options().world_size; })
      .def_prop_ro("epoch", [](const PyTrainPlan& p) { return p.plan->options().epoch; })
      .def_prop_ro("position", [](const PyTrainPlan& p) { return p.plan->options().position; })
      .def_prop_ro("fingerprint", [](const PyTrainPlan& p) { return p.plan->Fingerprint(); })
      .def("describe", [](const PyTrainPlan& p) { return p.plan->Describe(); })
      .def("summary", [](const PyTrainPlan& p) { return SummaryDict(p.plan->summary()); })
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
            return StepInfo(t);
          },
          "rank"_a, "step"_a)
      .def("audit", [](const PyTrainPlan& p) {
        TrainAudit a;
        {
          ReleaseGil release;
          a = p.plan->Audit();
        }
        return AuditDict(a);
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
      .def("next", [](PyTrainReader& r) -> nb::object {
        TrainStep t;
        bool more;
        {
          ReleaseGil release;
          more = r.reader->Next(&t);
        }
        if (!more) return nb::none();
        return StepInfo(t);
      });

  m.def("_train_state_from_json",
        [](const std::string& json) { return TrainStateToJson(TrainStateFromJson(json)); });
}

}  // namespace shardkit::python
