#include "shardkit/loader/internal/bilinear_resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace shardkit::internal {

namespace {

// Pillow's Resample.c, 8 bits per channel, bilinear filter (support 1).
constexpr int kPrecisionBits = 32 - 8 - 2;

struct Coefficients {
  int ksize = 0;
  std::vector<int> bounds;  // per output: first input, count
  std::vector<std::int32_t> k;
};

Coefficients Precompute(Index in_size, Index out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(out_size * 2);
  c.k.assign(out_size * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (Index xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = static_cast<int>(in_size);
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double t = (x + xmin - center + 0.5) * ss;
      if (t < 0.0) t = -t;
      w[x] = t < 1.0 ? 1.0 - t : 0.0;
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[xx * c.ksize + x] = static_cast<std::int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                                              : 0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = xmax;
  }
  return c;
}

// One pass of Pillow's resampling along rows: output row j is the weighted sum
// of input rows [bounds[2j], bounds[2j] + bounds[2j+1]), every row `stride`
// bytes, then rounded and clipped as Pillow does. The sums are integers, so
// the order of the additions does not change a bit of the result; the loop
// over a row vectorises (AVX2 where the CPU has it).
// kLanes consecutive bytes of one output row: the accumulators stay in
// registers across the taps (the trip counts are constants).
template <int kLanes>
[[gnu::always_inline]] inline void ResampleLanes(const std::uint8_t* src, Index stride,
                                                 const std::int32_t* k, int taps,
                                                 std::uint8_t* out) {
  std::int32_t acc[kLanes];
  for (int i = 0; i < kLanes; ++i) acc[i] = 1 << (kPrecisionBits - 1);
  for (int t = 0; t < taps; ++t) {
    const std::uint8_t* row = src + t * stride;
    const std::int32_t w = k[t];
    for (int i = 0; i < kLanes; ++i) acc[i] += row[i] * w;
  }
  // Pillow's clip8: v >> 22 clamped to [0, 255] (the same as its comparisons).
  for (int i = 0; i < kLanes; ++i) {
    out[i] = static_cast<std::uint8_t>(std::clamp(acc[i] >> kPrecisionBits, 0, 255));
  }
}

[[gnu::always_inline]] inline void ResampleRowsBody(const std::uint8_t* src, Index stride,
                                                    const Coefficients& c, Index out_rows,
                                                    std::uint8_t* out) {
  for (Index j = 0; j < out_rows; ++j) {
    const int taps = c.bounds[j * 2 + 1];
    const std::uint8_t* s = src + c.bounds[j * 2] * stride;
    const std::int32_t* k = c.k.data() + j * c.ksize;
    std::uint8_t* o = out + j * stride;
    Index i = 0;
    for (; i + 64 <= stride; i += 64) ResampleLanes<64>(s + i, stride, k, taps, o + i);
    for (; i + 16 <= stride; i += 16) ResampleLanes<16>(s + i, stride, k, taps, o + i);
    for (; i < stride; ++i) ResampleLanes<1>(s + i, stride, k, taps, o + i);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2")]] void ResampleRowsAvx2(const std::uint8_t* src, Index stride,
                                              const Coefficients& c, Index out_rows,
                                              std::uint8_t* out) {
  ResampleRowsBody(src, stride, c, out_rows, out);
}
// 512-bit vectors (both compilers prefer 256 bits by default on AVX-512).
#if defined(__clang__)
#define SHARDKIT_AVX512 gnu::target("avx512f,avx512bw"), clang::min_vector_width(512)
#else
#define SHARDKIT_AVX512 gnu::target("avx512f,avx512bw,prefer-vector-width=512")
#endif
[[SHARDKIT_AVX512]] void ResampleRowsAvx512(const std::uint8_t* src, Index stride,
                                            const Coefficients& c, Index out_rows,
                                            std::uint8_t* out) {
  ResampleRowsBody(src, stride, c, out_rows, out);
}
#undef SHARDKIT_AVX512
#endif

void ResampleRows(const std::uint8_t* src, Index stride, const Coefficients& c, Index out_rows,
                  std::uint8_t* out) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (avx512) return ResampleRowsAvx512(src, stride, c, out_rows, out);
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return ResampleRowsAvx2(src, stride, c, out_rows, out);
#endif
  ResampleRowsBody(src, stride, c, out_rows, out);
}

// Rows handled together by the horizontal pass: a block of kBlockRows input
// rows is transposed into a column-major tile (in_width x kBlockRows x 3
// bytes, at most 96 KiB for a 2048-wide image: it stays in L2), resampled
// along its columns by ResampleRows (stride kBlockRows * 3: a few vectors),
// and written back row-major. Transposing the whole image instead (the
// previous code) wrote every byte to a different cache line.
constexpr Index kBlockRows = 16;

// Pillow's horizontal pass on rows [0, rows) of `src` (in_width pixels a row)
// into `out` (width pixels a row).
void ResampleHorizontal(const std::uint8_t* src, Index rows, Index in_width, const Coefficients& c,
                        Index width, std::uint8_t* out) {
  const Index stride = kBlockRows * 3;
  // One spare byte: a pixel is moved as 4 bytes (the 4th lands on the next
  // slot, which is written after it, or on the spare byte).
  std::vector<std::uint8_t> tile(in_width * stride + 1), res(width * stride);
  for (Index r0 = 0; r0 < rows; r0 += kBlockRows) {
    const Index n = std::min(kBlockRows, rows - r0);
    const std::uint8_t* s = src + r0 * in_width * 3;
    // The last pixel of the last row is moved as 3 bytes (4 would read past `src`).
    const Index full = r0 + n == rows ? in_width - 1 : in_width;
    for (Index x = 0; x < full; ++x) {
      std::uint8_t* t = tile.data() + x * stride;
      for (Index r = 0; r < n; ++r) std::memcpy(t + r * 3, s + (r * in_width + x) * 3, 4);
    }
    for (Index x = full; x < in_width; ++x) {
      for (Index r = 0; r < n; ++r) {
        std::memcpy(tile.data() + x * stride + r * 3, s + (r * in_width + x) * 3, 3);
      }
    }
    ResampleRows(tile.data(), stride, c, width, res.data());
    for (Index r = 0; r < n; ++r) {
      const std::uint8_t* t = res.data() + r * 3;
      std::uint8_t* o = out + (r0 + r) * width * 3;
      // 4 bytes a pixel (the 4th overwritten by the next pixel), the last 3.
      for (Index x = 0; x + 1 < width; ++x) std::memcpy(o + x * 3, t + x * stride, 4);
      std::memcpy(o + (width - 1) * 3, t + (width - 1) * stride, 3);
    }
  }
}

}  // namespace

void ResizeBilinearInto(const std::uint8_t* src, Index in_h, Index in_w, Index height, Index width,
                        std::uint8_t* out) {
  if (height == in_h && width == in_w) {
    std::memcpy(out, src, static_cast<std::size_t>(height) * width * 3);
    return;
  }
  Coefficients cv = Precompute(in_h, height);
  std::vector<std::uint8_t> tmp;
  if (width != in_w) {
    // Pillow's horizontal pass over the rows the vertical pass uses.
    const Coefficients ch = Precompute(in_w, width);
    const int first = cv.bounds[0];
    const int last = cv.bounds[height * 2 - 2] + cv.bounds[height * 2 - 1];
    for (Index y = 0; y < height; ++y) cv.bounds[y * 2] -= first;
    const Index rows = last - first;
    if (height == in_h && rows == in_h) {
      ResampleHorizontal(src, rows, in_w, ch, width, out);
      return;
    }
    tmp.resize(rows * width * 3);
    ResampleHorizontal(src + first * in_w * 3, rows, in_w, ch, width, tmp.data());
    src = tmp.data();
  }
  ResampleRows(src, width * 3, cv, height, out);
}

}  // namespace shardkit::internal
