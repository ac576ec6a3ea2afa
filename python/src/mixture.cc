// Bindings of Mixture (shardkit/sharding/mixture.h) and its state <-> dict
// conversion; shardkit/mixture.py documents and re-exports them.
#include "shardkit/sharding/mixture.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "python/src/bindings.h"
#include "shardkit/sharding/mixture_json.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

using StateDict = nb::typed<nb::dict, nb::str, nb::any>;
using ScheduleArg = nb::typed<nb::handle, ScheduleTag>;
using ArrayList = nb::typed<nb::handle, ArrayListTag>;
using Bools = nb::typed<nb::handle, BoolsTag>;

}  // namespace

// (position, weights) pairs; None: no schedule. Every wrong shape or type is
// one line naming `schedule` (the conversions of bindings.h).
std::vector<SchedulePoint> ToScheduleList(nb::handle schedule) {
  std::vector<SchedulePoint> out;
  if (schedule.is_none()) return out;
  for (nb::handle point : ToList(schedule, "schedule", "a sequence of (position, weights) pairs")) {
    nb::list pair = ToList(point, "schedule", "each point to be a (position, weights) pair");
    if (nb::len(pair) != 2) {
      ThrowInvalid("schedule", "each point must be a (position, weights) pair");
    }
    SchedulePoint p;
    p.position = ToIndex(pair[0], "schedule");
    p.weights = ToDoubles(pair[1], "schedule");
    out.push_back(std::move(p));
  }
  return out;
}

// repeat: a bool for every source, or one flag per source.
std::vector<bool> ToRepeat(nb::handle repeat, Index k) {
  if (nb::isinstance<nb::bool_>(repeat) ||
      nb::cast<std::string>(nb::str(repeat.type().attr("__name__"))) == "bool_") {
    return std::vector<bool>(static_cast<std::size_t>(k), ToBool(repeat, "repeat"));
  }
  std::vector<bool> out;
  for (nb::handle flag : ToList(repeat, "repeat", "a bool or one bool per source")) {
    out.push_back(ToBool(flag, "repeat"));
  }
  return out;
}

MixtureOptions ToMixtureOptions(nb::handle by, nb::handle block, nb::handle schedule,
                                nb::handle interpolation, nb::handle schedule_unit,
                                nb::handle repeat, Index k) {
  MixtureOptions o;
  o.by = ParseMixBy(ToStr(by, "by"));
  o.block = ToOptionalIndex(block, "block");
  o.schedule = ToScheduleList(schedule);
  o.interpolation = ParseInterpolation(ToStr(interpolation, "interpolation"));
  o.schedule_unit = ParseMixBy(ToStr(schedule_unit, "schedule_unit"), "schedule_unit");
  o.repeat = ToRepeat(repeat, k);
  return o;
}

namespace {

// Each source's total tokens from its document lengths (1-D integer arrays:
// 1.5 was truncated to 1), named with the source and the first value that is
// not an integer.
std::vector<Index> ToTokens(nb::handle lengths) {
  std::vector<Index> tokens;
  nb::module_ np = nb::module_::import_("numpy");
  std::size_t k = 0;
  for (nb::handle source :
       ToList(lengths, "lengths", "a sequence of per-source arrays of document lengths")) {
    nb::object keep;
    try {
      auto view = ToInt64Array(source, "lengths", &keep);
      tokens.push_back(TotalTokens({view.data(), view.shape(0)}));
    } catch (const std::invalid_argument& e) {
      std::string what = e.what();
      try {
        nb::object a = np.attr("asarray")(source).attr("ravel")();
        nb::object bad = np.attr("flatnonzero")(a.attr("__ne__")(np.attr("trunc")(a)));
        if (nb::cast<Index>(bad.attr("size")) > 0) {
          nb::object i = bad[nb::int_(0)];
          what += " (" + nb::cast<std::string>(nb::repr(a[i].attr("item")())) + " at [" +
                  nb::cast<std::string>(nb::str(i)) + "])";
        }
      } catch (const nb::python_error&) {
        // Not numeric at all: the message above says what it is.
      }
      ThrowInvalid("lengths",
                   "source " + std::to_string(k) + ": " + what.substr(what.find(": ") + 2));
    }
    ++k;
  }
  return tokens;
}

// A mixture state as a dict: json.loads of the core's sealed text
// (shardkit/sharding/mixture_json.h), and back through the core's reader.
StateDict StateToDict(const MixtureState& s) {
  return nb::borrow<StateDict>(JsonToPython(MixtureStateToJson(s)));
}

MixtureState DictToState(nb::handle h) {
  const std::string text = StateText(h);
  ReleaseGil release;
  return MixtureStateFromJson(text);
}

}  // namespace

void init_mixture(nb::module_& m) {
  nb::class_<Mixture>(m, "Mixture",
                      "One global order of samples drawn from several sources with exact "
                      "proportions; see shardkit.mixture.")
      .def(
          "__init__",
          [](Mixture* self, IntSequence sizes_arg, FloatArray weights, Str by, ArrayList lengths,
             OptionalInt block, Int seed, ScheduleArg schedule, Str interpolation, Bools repeat,
             Str schedule_unit) {
            // Integers checked as everywhere (bindings.h): one line naming the
            // parameter and the value, not nanobind's signature dump.
            std::vector<Index> sizes = ToIndices(sizes_arg, "sizes");
            MixtureOptions o = ToMixtureOptions(by, block, schedule, interpolation, schedule_unit,
                                                repeat, static_cast<Index>(sizes.size()));
            if (!lengths.is_none()) o.tokens = ToTokens(lengths);
            o.seed = ToUint64(seed, "seed");
            std::vector<double> w = ToDoubles(weights, "weights");
            new (self) Mixture(std::move(sizes), std::move(w), std::move(o));
          },
          "sizes"_a.none(), "weights"_a.none(), nb::kw_only(), "by"_a.none() = "samples",
          "lengths"_a.none() = nb::none(), "block"_a.none() = nb::none(), "seed"_a.none() = 0,
          "schedule"_a.none() = nb::none(), "interpolation"_a.none() = "step",
          "repeat"_a.none() = true, "schedule_unit"_a.none() = "samples")
      .def("__len__", &Mixture::size)
      .def_prop_ro("num_sources", &Mixture::num_sources)
      .def_prop_ro("sizes", &Mixture::sizes)
      .def_prop_ro("weights", &Mixture::weights)
      .def_prop_ro("block", &Mixture::block, "Samples per block (every block's counts are exact).")
      .def_prop_ro("bounded", &Mixture::bounded,
                   "False when every source repeats: the mixture has 2^62 samples.")
      .def_prop_ro(
          "segments",
          [](const Mixture& mix) {
            std::vector<std::pair<Index, std::vector<double>>> out;
            for (const MixSegment& s : mix.segments()) {
              std::vector<double> shares;
              for (std::uint64_t q : s.q) {
                shares.push_back(static_cast<double>(static_cast<long double>(q) / s.total));
              }
              out.emplace_back(s.begin, std::move(shares));
            }
            return out;
          },
          "(begin, sample shares) of each constant piece, begin a plan position.")
      .def(
          "source_of",
          [](const Mixture& mix, Int position) {
            const MixSample s = mix.At(ToIndex(position, "position"));
            return std::make_pair(s.source, s.item);
          },
          "position"_a.none(), "(source, item) of sample ``position``.")
      .def(
          "numpy",
          [](const Mixture& mix, Int start_arg, OptionalInt stop,
             nb::typed<nb::handle, OutPairTag> out) -> nb::typed<nb::object, SamplePairTag> {
            const Index start = ToIndex(start_arg, "start");
            const Index end = ToOptionalIndex(stop, "stop").value_or(mix.size());
            CheckSlice(start, end, mix.size());
            const auto n = static_cast<std::size_t>(end - start);
            if (out.is_none()) {
              // stop (None: the end) sets the length.
              return nb::typed<nb::object, SamplePairTag>(
                  nb::cast(SampleArrays("stop", n, [&](std::int64_t* sources, std::int64_t* items) {
                    mix.Fill(start, end, sources, items);
                  })));
            }
            // Caller's arrays (reused chunk buffers, a memory map): written in place.
            using Out = nb::ndarray<std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
            const std::string want =
                "expected (sources, items): two writable C-contiguous int64 arrays of " +
                std::to_string(n) + " elements";
            // What was given, in one line: "tuple of length 1", "int32 array of shape (8,)".
            auto what = [](nb::handle h) -> std::string {
              if (!nb::hasattr(h, "dtype") || !nb::hasattr(h, "flags")) {
                std::string name = nb::str(nb::object(h.type().attr("__name__"))).c_str();
                if (nb::isinstance<nb::tuple>(h) || nb::isinstance<nb::list>(h)) {
                  name += " of length " + std::to_string(nb::len(h));
                }
                return name;
              }
              const nb::object flags = h.attr("flags");
              auto text = [](const nb::object& o) { return std::string(nb::str(o).c_str()); };
              auto set = [&](const char* flag) {
                return PyObject_IsTrue(nb::object(flags.attr(flag)).ptr()) == 1;
              };
              return text(h.attr("dtype")) + " array of shape " + text(h.attr("shape")) +
                     (set("c_contiguous") ? "" : ", not C-contiguous") +
                     (set("writeable") ? "" : ", read-only");
            };
            if (!nb::isinstance<nb::tuple>(out) || nb::len(out) != 2) {
              ThrowInvalid("out", want + ", got " + what(out));
            }
            Out arrays[2];
            for (int i = 0; i < 2; ++i) {
              nb::object entry = out[nb::int_(i)];
              if (!nb::try_cast(entry, arrays[i], false) || arrays[i].shape(0) != n) {
                ThrowInvalid("out",
                             want + ", got " + (i == 0 ? "sources: " : "items: ") + what(entry));
              }
            }
            std::int64_t* sources = arrays[0].data();
            std::int64_t* items = arrays[1].data();
            if (n > 0 && sources < items + n && items < sources + n) {
              ThrowInvalid("out", "sources and items overlap; give two separate arrays");
            }
            {
              ReleaseGil release;
              mix.Fill(start, end, sources, items);
            }
            return nb::typed<nb::object, SamplePairTag>(nb::borrow(out));
          },
          "start"_a.none() = 0, "stop"_a.none() = nb::none(), "out"_a.none() = nb::none(),
          "(sources, items): int64 arrays for samples [start, stop): new arrays, or ``out``\n"
          "(two writable C-contiguous int64 arrays of stop - start elements) filled in place.")
      .def(
          "take",
          [](const Mixture& mix, IntArray positions_arg) {
            nb::object keep;
            const auto positions = ToInt64Array(positions_arg, "positions", &keep);
            const std::size_t n = positions.shape(0);
            return SampleArrays("positions", n, [&](std::int64_t* sources, std::int64_t* items) {
              mix.Take(std::span<const Index>(positions.data(), n), sources, items);
            });
          },
          "positions"_a.none(),
          "(sources, items): int64 arrays, source_of at each of ``positions`` (a block's "
          "counts are computed once for consecutive positions in it).")
      .def(
          "consumed",
          [](const Mixture& mix, Int position_arg) {
            const Index position = ToIndex(position_arg, "position");
            ReleaseGil release;
            return mix.Consumed(position);
          },
          "position"_a.none(), "Items taken from each source before ``position``.")
      .def(
          "nominal_tokens",
          [](const Mixture& mix, Int position) {
            return mix.NominalTokens(ToIndex(position, "position"));
          },
          "position"_a.none(),
          "Tokens drawn before ``position`` counted at each source's mean length (the unit "
          "of a schedule in tokens; needs ``lengths``).")
      .def(
          "position_of_tokens",
          [](const Mixture& mix, double tokens) {
            ReleaseGil release;
            return mix.PositionOfTokens(tokens);
          },
          "tokens"_a,
          "The first position (0 or a block boundary) where nominal_tokens reaches "
          "``tokens``: where a schedule point at that token position takes effect; len() "
          "when the mixture ends before.")
      .def(
          "target",
          [](const Mixture& mix, Int position) {
            return mix.Target(ToIndex(position, "position"));
          },
          "position"_a.none(), "The real-valued counts that consumed(position) rounds.")
      .def(
          "block_counts",
          [](const Mixture& mix, Int block) {
            const Index b = ToIndex(block, "block");
            // b * block() could overflow: compare with the last block's index.
            if (b < 0 || mix.size() == 0 || b > (mix.size() - 1) / mix.block()) {
              ThrowOutOfRange("block", std::to_string(b) + " is not a block of the mixture");
            }
            std::vector<Index> out(static_cast<std::size_t>(mix.num_sources()));
            mix.BlockCounts(b, out.data());
            return out;
          },
          "block"_a.none(), "Each source's count in block ``block``.")
      .def(
          "state_dict",
          [](const Mixture& mix, Int position) {
            return StateToDict(mix.State(ToIndex(position, "position")));
          },
          "position"_a.none(), "Where a run stands after ``position`` samples (JSON-serialisable).")
      .def_static(
          "from_state",
          [](StateDictArg state, std::optional<FloatArray> weights, ScheduleArg schedule) {
            // None is not a state (the one wording: shardkit/_states.py).
            if (state.is_none()) {
              ThrowInvalid("state",
                           "None is not a state (pass what state_dict() returned; to start an "
                           "epoch afresh, make a new loader or call set_epoch)");
            }
            std::optional<std::vector<double>> w;
            std::optional<std::vector<SchedulePoint>> s;
            if (weights.has_value()) w = ToDoubles(*weights, "weights");
            if (!schedule.is_none()) s = ToScheduleList(schedule);
            return Mixture::FromState(DictToState(state), std::move(w), std::move(s));
          },
          "state"_a.none(), "weights"_a = nb::none(), "schedule"_a.none() = nb::none(),
          "Continues a run from state_dict(); new weights / schedule allowed.");
}

}  // namespace shardkit::python
