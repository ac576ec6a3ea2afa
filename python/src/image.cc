// Bindings of image decoding (shardkit/loader/image_decode.h, image_batch.h),
// tar shards (tar_shard.h) and the image-table cache (image_table_cache.h):
// shardkit.multimodal.decode_image / image_info / ImageDecoder and
// shardkit.image_sources wrap these.
// Pixels reach Python without a copy (the core's buffer is the array's).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "python/src/bindings.h"
#include "shardkit/loader/image_batch.h"
#include "shardkit/loader/image_decode.h"
#include "shardkit/loader/image_table_cache.h"
#include "shardkit/loader/tar_shard.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

using IndexArray = nb::ndarray<const Index, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::vector<Index> VectorOf(const IndexArray& a) { return {a.data(), a.data() + a.size()}; }

std::span<const std::uint8_t> BytesOf(const nb::bytes& b) {
  return {reinterpret_cast<const std::uint8_t*>(b.c_str()), b.size()};
}

// A numpy uint8 array of `shape` over `pixels`, which it takes over.
nb::ndarray<nb::numpy, std::uint8_t> Own(std::vector<std::uint8_t>&& pixels,
                                         std::vector<std::size_t> shape) {
  auto* owned = new std::vector<std::uint8_t>(std::move(pixels));
  nb::capsule owner(owned,
                    [](void* p) noexcept { delete static_cast<std::vector<std::uint8_t>*>(p); });
  return nb::ndarray<nb::numpy, std::uint8_t>(owned->data(), shape.size(), shape.data(), owner);
}

}  // namespace

void init_image(nb::module_& m) {
  m.def("_image_formats", &ImageFormatsBuilt);
  m.def(
      "_image_info",
      [](const nb::bytes& data, const std::string& field, Index pixel_limit) {
        const ImageInfo info = ReadImageInfo(BytesOf(data), field, pixel_limit);
        return std::make_tuple(std::string(ImageFormatName(info.format)), info.height, info.width);
      },
      "data"_a, "field"_a, "pixel_limit"_a);
  m.def(
      "_decode_image",
      [](const nb::bytes& data, const std::string& field, Index height, Index width,
         Index max_pixels, Index pixel_limit, bool jpeg_draft) {
        Image image;
        {
          ReleaseGil unlocked;
          image = DecodeImage(BytesOf(data), field, {height, width, max_pixels, jpeg_draft},
                              pixel_limit);
        }
        return Own(std::move(image.pixels), {static_cast<std::size_t>(image.height),
                                             static_cast<std::size_t>(image.width), 3});
      },
      "data"_a, "field"_a, "height"_a, "width"_a, "max_pixels"_a, "pixel_limit"_a,
      "jpeg_draft"_a = false);
  m.def(
      "_resize_bilinear",
      [](nb::ndarray<const std::uint8_t, nb::ndim<3>, nb::c_contig, nb::device::cpu> pixels,
         Index height, Index width) {
        if (pixels.shape(2) != 3) ThrowInvalid("pixels", "must be [height, width, 3]");
        if (height < 1 || width < 1) ThrowInvalid("size", "sides must be >= 1");
        Image in{static_cast<Index>(pixels.shape(0)), static_cast<Index>(pixels.shape(1)),
                 std::vector<std::uint8_t>(pixels.data(), pixels.data() + pixels.size())};
        if (in.height < 1 || in.width < 1) ThrowInvalid("pixels", "has a side of 0");
        Image out = ResizeBilinear(in, height, width);
        return Own(std::move(out.pixels),
                   {static_cast<std::size_t>(height), static_cast<std::size_t>(width), 3});
      },
      "pixels"_a, "height"_a, "width"_a);
  nb::class_<ImageBatchDecoder>(m, "_ImageBatchDecoder")
      .def(
          "__init__",
          [](ImageBatchDecoder* self, Index height, Index width, Index max_pixels,
             Index pixel_limit, int threads, bool jpeg_draft) {
            new (self)
                ImageBatchDecoder({{height, width, max_pixels, jpeg_draft}, pixel_limit, threads});
          },
          "height"_a, "width"_a, "max_pixels"_a, "pixel_limit"_a, "threads"_a,
          "jpeg_draft"_a = false)
      .def_prop_ro("threads", &ImageBatchDecoder::threads)
      .def(
          "decode",
          [](ImageBatchDecoder& d, const std::vector<nb::bytes>& images,
             const std::vector<Index>& samples) {
            std::vector<std::span<const std::uint8_t>> spans;
            spans.reserve(images.size());
            for (const nb::bytes& b : images) spans.push_back(BytesOf(b));
            DecodedImages out;
            {
              ReleaseGil unlocked;  // `images` holds the bytes alive meanwhile
              out = d.Decode(spans, samples);
            }
            const std::size_t n = images.size();
            const std::size_t bytes = out.pixels.size();
            return std::make_tuple(Own(std::move(out.pixels), {bytes}), ToArray<Index>(out.heights),
                                   ToArray<Index>(out.widths), ToArray<Index>(out.offsets), n);
          },
          "images"_a, "samples"_a);
  m.def("_image_table_cache_name", &ImageTableCacheName, "key"_a);
  m.def(
      "_read_image_table_cache",
      [](const std::string& path, const std::string& key, Index pixel_limit, Index num_samples)
          -> std::optional<std::tuple<NumpyArray<Index>, NumpyArray<Index>, NumpyArray<Index>>> {
        std::optional<ImageTable> table;
        {
          ReleaseGil unlocked;
          table = ReadImageTableCache(path, key, pixel_limit, num_samples);
        }
        if (!table) return std::nullopt;
        return std::make_tuple(ToArray<Index>(table->image_counts), ToArray<Index>(table->heights),
                               ToArray<Index>(table->widths));
      },
      "path"_a, "key"_a, "pixel_limit"_a, "num_samples"_a);
  m.def(
      "_write_image_table_cache",
      [](const std::string& path, const std::string& key, Index pixel_limit,
         const IndexArray& image_counts, const IndexArray& heights, const IndexArray& widths) {
        ImageTable table{VectorOf(image_counts), VectorOf(heights), VectorOf(widths)};
        ReleaseGil unlocked;
        return WriteImageTableCache(path, key, pixel_limit, table);
      },
      "path"_a, "key"_a, "pixel_limit"_a, "image_counts"_a, "heights"_a, "widths"_a);
  nb::class_<TarShard>(m, "_TarShard")
      .def(
          "__init__",
          [](TarShard* self, const std::string& path, const std::string& text, Index pixel_limit,
             bool cache) {
            TarShardOptions o;
            o.text_ext = text;
            o.pixel_limit = pixel_limit;
            o.cache = cache;
            ReleaseGil unlocked;
            new (self) TarShard(TarShard::Open(path, o));
          },
          "path"_a, "text"_a, "pixel_limit"_a, "cache"_a)
      .def_prop_ro("num_samples", &TarShard::num_samples)
      .def("key", [](const TarShard& t,
                     Index s) { return t.key(CheckedIndex(s, t.num_samples(), "sample")); })
      .def("members",
           [](const TarShard& t, Index s) {
             std::vector<std::tuple<std::string, Index, Index>> out;
             for (const TarMember& m : t.members(CheckedIndex(s, t.num_samples(), "sample"))) {
               out.emplace_back(m.ext, m.offset, m.size);
             }
             return out;
           })
      .def("table",
           [](const TarShard& t) {
             std::vector<Index> tokens(t.num_samples());
             for (Index s = 0; s < t.num_samples(); ++s) tokens[s] = t.tokens(s);
             return std::make_tuple(ToArray<Index>(tokens), ToArray<Index>(t.image_start()),
                                    ToArray<Index>(t.image_heights()),
                                    ToArray<Index>(t.image_widths()));
           })
      .def("read_tokens",
           [](const TarShard& t, Index s) {
             std::vector<std::int64_t> ids;
             {
               ReleaseGil unlocked;
               ids = t.ReadTokens(s);
             }
             return ToArray<std::int64_t>(ids);
           })
      .def("read_images",
           [](const TarShard& t, Index s) {
             std::vector<std::string> images;
             {
               ReleaseGil unlocked;
               images = t.ReadImages(s);
             }
             nb::list out;
             for (const std::string& b : images) out.append(nb::bytes(b.data(), b.size()));
             return out;
           })
      .def_prop_ro("fingerprint", &TarShard::fingerprint)
      .def_prop_ro("from_cache", &TarShard::from_cache)
      .def_prop_ro("cache_written", &TarShard::cache_written)
      .def_static("cache_path", &TarShard::CachePath);
}

}  // namespace shardkit::python
