// Bindings of MultimodalPlan (shardkit/loader/multimodal_plan.h): the Python
// class shardkit.MultimodalPlan (python/shardkit/loader.py) wraps
// _MultimodalPlan. The state crosses as the core's JSON text.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "python/src/bindings.h"
#include "shardkit/loader/multimodal_plan.h"
#include "shardkit/loader/vision_tokens.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

using I64In = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::vector<Index> ToVector(const I64In& a) {
  const auto* p = reinterpret_cast<const Index*>(a.data());
  return std::vector<Index>(p, p + a.shape(0));
}

template <typename T>
NumpyArray<T> Copy(std::span<const T> values) {
  T* data = nullptr;
  NumpyArray<T> out = NewArray<T>(values.size(), &data);
  std::copy(values.begin(), values.end(), data);
  return out;
}

}  // namespace

// LM tokens of each image (heights[i] x widths[i]) under `rule`.
template <typename Rule>
NumpyArray<Index> TokensOf(const I64In& heights, const I64In& widths, Rule rule) {
  if (heights.shape(0) != widths.shape(0)) {
    ThrowInvalid("widths", "has " + shardkit::Str(static_cast<Index>(widths.shape(0))) +
                               " entries, heights " +
                               shardkit::Str(static_cast<Index>(heights.shape(0))));
  }
  Index* out = nullptr;
  NumpyArray<Index> array = NewArray<Index>(heights.shape(0), &out);
  for (std::size_t i = 0; i < heights.shape(0); ++i) out[i] = rule(heights(i), widths(i)).tokens;
  return array;
}

void init_multimodal(nb::module_& m) {
  m.def(
      "_qwen_vision_tokens",
      [](const I64In& heights, const I64In& widths, Int patch_size, Int merge_size, Int min_pixels,
         Int max_pixels) {
        const QwenVisionOptions o{
            ToIndex(patch_size, "patch_size"), ToIndex(merge_size, "merge_size"),
            ToIndex(min_pixels, "min_pixels"), ToIndex(max_pixels, "max_pixels")};
        return TokensOf(heights, widths,
                        [&](Index h, Index w) { return QwenVisionTokens(h, w, o); });
      },
      "heights"_a, "widths"_a, "patch_size"_a.none(), "merge_size"_a.none(), "min_pixels"_a.none(),
      "max_pixels"_a.none(), "The options are converted here (ToIndex: errors name the option).");
  m.def(
      "_tile_vision_tokens",
      [](const I64In& heights, const I64In& widths, Int tile_size, Int max_side,
         Bool resize_to_max_side, Bool global_tile, Int tokens_per_tile) {
        const TileOptions o{ToIndex(tile_size, "tile_size"), ToIndex(max_side, "max_side"),
                            ToBool(resize_to_max_side, "resize_to_max_side"),
                            ToBool(global_tile, "global_tile"),
                            ToIndex(tokens_per_tile, "tokens_per_tile")};
        return TokensOf(heights, widths,
                        [&](Index h, Index w) { return TileVisionTokens(h, w, o); });
      },
      "heights"_a, "widths"_a, "tile_size"_a.none(), "max_side"_a.none(),
      "resize_to_max_side"_a.none(), "global_tile"_a.none(), "tokens_per_tile"_a.none(),
      "The options are converted here (ToIndex, ToBool: errors name the option).");
  nb::class_<MultimodalPlan>(m, "_MultimodalPlan")
      .def(
          "__init__",
          [](MultimodalPlan* self, const I64In& lengths, const I64In& image_counts,
             const I64In& vision_tokens, std::optional<std::string> state_json,
             nb::kwargs options) {
            MultimodalOptions o;
            ReadOptions(options, &o);
            std::vector<Index> counts = ToVector(image_counts);
            SampleTable table =
                SampleTable::Make(ToVector(lengths), counts, ToVector(vision_tokens));
            std::optional<MultimodalState> state;
            if (state_json) state = MultimodalStateFromJson(*state_json);
            ReleaseGil unlocked;
            new (self) MultimodalPlan(std::move(table), o, std::move(state));
          },
          "lengths"_a, "image_counts"_a, "vision_tokens"_a, "state"_a.none(), "options"_a,
          "options: MultimodalOptions' fields by name (bindings.h, ReadOptions).")
      .def_prop_ro("num_steps", &MultimodalPlan::num_steps)
      .def("rows", &MultimodalPlan::Rows, "rank"_a, "step"_a)
      .def("row_packs", &MultimodalPlan::RowPacks, "rank"_a, "step"_a)
      .def(
          "state_after",
          [](const MultimodalPlan& p, Index steps_done) {
            return MultimodalStateToJson(p.StateAfter(steps_done));
          },
          "steps_done"_a)
      .def_prop_ro("stream", [](const MultimodalPlan& p) { return p.stream(); })
      .def_prop_ro("fingerprint", &MultimodalPlan::Fingerprint)
      .def_prop_ro(
          "dropped_samples",
          [](const MultimodalPlan& p) { return Copy<Index>(p.dropped_samples()); },
          nb::rv_policy::move)
      .def_prop_ro("summary",
                   [](const MultimodalPlan& p) {
                     const MultimodalSummary& s = p.summary();
                     nb::dict d;
                     d["samples"] = s.samples;
                     d["dropped"] = s.dropped;
                     d["packs"] = s.packs;
                     d["tokens"] = s.tokens;
                     d["images"] = s.images;
                     d["num_steps"] = s.num_steps;
                     d["filler_rows"] = s.filler_rows;
                     d["dropped_packs"] = s.dropped_packs;
                     d["dropped_samples"] = s.dropped_samples;
                     return d;
                   })
      .def_prop_ro("balance", [](const MultimodalPlan& p) {
        const MultimodalBalance& b = p.balance();
        nb::dict d;
        d["token_ratio"] = Copy<double>(b.token_ratio);
        d["vision_ratio"] = Copy<double>(b.vision_ratio);
        d["mean_token_ratio"] = b.mean_token_ratio;
        d["max_token_ratio"] = b.max_token_ratio;
        d["mean_vision_ratio"] = b.mean_vision_ratio;
        d["max_vision_ratio"] = b.max_vision_ratio;
        return d;
      });
}

}  // namespace shardkit::python
