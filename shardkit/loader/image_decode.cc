#include "shardkit/loader/image_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/errors.h"
#include "shardkit/loader/internal/bilinear_resize.h"

#if SHARDKIT_HAVE_TURBOJPEG
#include <turbojpeg.h>
#endif
#if SHARDKIT_HAVE_PNG
#include <png.h>

#include <csetjmp>
#endif
#if SHARDKIT_HAVE_WEBP
#include <webp/decode.h>
#endif
#if SHARDKIT_HAVE_PNG && SHARDKIT_HAVE_DEFLATE
#include <libdeflate.h>
#endif

namespace shardkit {

namespace {

constexpr EnumNames<ImageFormat, 3> kImageFormats{
    "format", "image format", {"jpeg", "png", "webp"}};

[[noreturn]] void Fail(std::string_view field, std::string_view what) { ThrowInvalid(field, what); }

std::string FirstBytes(std::span<const std::uint8_t> bytes) {
  std::string out;
  char hex[4];
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    std::snprintf(hex, sizeof hex, "%s%02x", i ? " " : "", bytes[i]);
    out += hex;
  }
  return out.empty() ? "none: 0 bytes" : out;
}

std::uint32_t BigEndian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

ImageFormat Sniff(std::span<const std::uint8_t> b, std::string_view field) {
  static constexpr std::uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::kJpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), kPng, 8) == 0) return ImageFormat::kPng;
  if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 &&
      std::memcmp(b.data() + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebp;
  }
  Fail(field, "not a JPEG, PNG or WebP image (first bytes " + FirstBytes(b) + ")");
}

[[maybe_unused]] [[noreturn]] void NotBuilt(ImageFormat format, std::string_view field) {
  const char* package = format == ImageFormat::kJpeg  ? "libturbojpeg0-dev"
                        : format == ImageFormat::kPng ? "libpng-dev"
                                                      : "libwebp-dev";
  Fail(field, std::string("a ") + std::string(ImageFormatName(format)) +
                  " image, but this build of shardkit decodes no " +
                  std::string(ImageFormatName(format)) + " (" + package +
                  " was not installed when it was built)");
}

void CheckPixels(std::string_view field, Index h, Index w, Index max_pixels) {
  if (h <= 0 || w <= 0) {
    Fail(field, "image of " + Str(w) + " x " + Str(h) + " pixels (a side is 0)");
  }
  if (h > max_pixels / w) {
    Fail(field, "image of " + Str(w) + " x " + Str(h) + " pixels is over the limit of " +
                    Str(max_pixels) + " pixels");
  }
}

#if SHARDKIT_HAVE_TURBOJPEG
// One decompressor per thread, made on first use. After an error the handle
// is replaced: libjpeg-turbo 2.1 keeps a failed decompressor's state, and the
// next (valid) image then failed with "Bogus marker length" (regression test
// in test_image_decode.py).
struct JpegHolder {
  tjhandle h = nullptr;
  ~JpegHolder() {
    if (h != nullptr) tjDestroy(h);
  }
};
thread_local JpegHolder jpeg_holder;

tjhandle JpegHandle() {
  if (jpeg_holder.h == nullptr) jpeg_holder.h = tjInitDecompress();
  return jpeg_holder.h;
}

// The handle's error text, then a fresh handle for the next image.
std::string JpegErrorAndReset() {
  std::string error = tjGetErrorStr2(jpeg_holder.h);
  tjDestroy(jpeg_holder.h);
  jpeg_holder.h = nullptr;
  return error;
}
#endif

#if SHARDKIT_HAVE_PNG
// libpng reports errors by longjmp. Everything the read modifies after setjmp
// lives in this struct (memory, never a register), and no C++ object with a
// destructor is skipped by the jump (only libpng's C frames lie between).
struct PngJob {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t pos;
  Index max_pixels;
  Index height;  // from the header read before: the decoded size must agree
  Index width;
  std::uint8_t* out;  // height * width * 3 bytes
  std::vector<png_bytep> rows;
  char error[160];
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->size - job->pos) png_error(png, "truncated data");
  std::memcpy(out, job->data + job->pos, n);
  job->pos += n;
}

void PngOnError(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->error, sizeof job->error, "%s", message);
  png_longjmp(png, 1);
}

void PngOnWarning(png_structp, png_const_charp) {}

// Returns false with job->error set on failure.
bool PngDecode(PngJob* job) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, PngOnError, PngOnWarning);
  if (png == nullptr) {
    std::snprintf(job->error, sizeof job->error, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, job, PngRead);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // ours is the pixel count below
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, nullptr, nullptr, nullptr);
  if (w == 0 || h == 0 || static_cast<Index>(h) > job->max_pixels / static_cast<Index>(w)) {
    std::snprintf(job->error, sizeof job->error, "image of %u x %u pixels is over the limit", w, h);
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<png_size_t>(w) * 3) {
    png_error(png, "unexpected row size after conversion to RGB");
  }
  if (h != job->height || w != job->width) png_error(png, "size differs from the header");
  job->rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) job->rows[y] = job->out + std::size_t{y} * w * 3;
  png_read_image(png, job->rows.data());
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}
#endif

// Per-thread buffers are kept between images (no allocation, zeroing or page
// faults per image) up to this size each; a larger one is freed after its
// image, so a pool of T threads keeps at most ~3 * T * 4 MiB.
constexpr std::size_t kKeepBufferBytes = std::size_t{4} << 20;

struct TrimOnExit {
  std::vector<std::uint8_t>* a;
  std::vector<std::uint8_t>* b = nullptr;
  ~TrimOnExit() {
    for (std::vector<std::uint8_t>* v : {a, b}) {
      if (v != nullptr && v->capacity() > kKeepBufferBytes) std::vector<std::uint8_t>().swap(*v);
    }
  }
};

#if SHARDKIT_HAVE_PNG && SHARDKIT_HAVE_DEFLATE
// The PNG fast path: libdeflate's inflate (about 1.7x zlib's on photo-like
// PNGs) and our own unfiltering, for the common files only: 8 bits per
// sample, not interlaced, grey / grey+alpha / RGB / RGBA, no tRNS, every
// chunk up to the last IDAT with a correct CRC, one zlib stream that fills
// the rows exactly and ends at the last IDAT's end (Adler-32 checked). Any
// other file, or any doubt, goes to libpng, which then decides (decodes or
// refuses) as before: the fast path only takes files libpng decodes, and
// gives the same pixels (the PNG filters and the RGB conversion are exact).
struct DeflateHolder {
  libdeflate_decompressor* d = nullptr;
  std::vector<std::uint8_t> idat, raw;  // kept between images (kKeepBufferBytes)
  ~DeflateHolder() {
    if (d != nullptr) libdeflate_free_decompressor(d);
  }
};
thread_local DeflateHolder deflate_holder;

// PNG filter types 0-4 (PNG spec 9.2) on one row of `n` bytes, `prev` the
// previous unfiltered row (zeros for the first); the left neighbours are
// carried in registers (a load after the store would wait on forwarding).
template <int kBpp>
bool Unfilter(int type, std::uint8_t* cur, const std::uint8_t* prev, Index n) {
  switch (type) {
    case 0:
      return true;
    case 1: {
      std::uint8_t a[kBpp] = {};
      for (Index i = 0; i < n; i += kBpp) {
#pragma GCC unroll 4
        for (int c = 0; c < kBpp; ++c)
          cur[i + c] = a[c] = static_cast<std::uint8_t>(cur[i + c] + a[c]);
      }
      return true;
    }
    case 2:
      for (Index i = 0; i < n; ++i) cur[i] = static_cast<std::uint8_t>(cur[i] + prev[i]);
      return true;
    case 3: {
      std::uint8_t a[kBpp] = {};
      for (Index i = 0; i < n; i += kBpp) {
#pragma GCC unroll 4
        for (int c = 0; c < kBpp; ++c) {
          cur[i + c] = a[c] = static_cast<std::uint8_t>(cur[i + c] + ((a[c] + prev[i + c]) >> 1));
        }
      }
      return true;
    }
    case 4: {
      int a[kBpp] = {}, up_left[kBpp] = {};
      for (Index i = 0; i < n; i += kBpp) {
#pragma GCC unroll 4
        for (int c = 0; c < kBpp; ++c) {
          const int b = prev[i + c], cc = up_left[c];
          const int pa = std::abs(b - cc), pb = std::abs(a[c] - cc),
                    pc = std::abs(a[c] + b - 2 * cc);
          const int pred = (pa <= pb && pa <= pc) ? a[c] : (pb <= pc ? b : cc);
          a[c] = static_cast<std::uint8_t>(cur[i + c] + pred);
          cur[i + c] = static_cast<std::uint8_t>(a[c]);
          up_left[c] = b;
        }
      }
      return true;
    }
    default:
      return false;
  }
}

template <int kBpp>
bool UnfilterAndConvert(std::uint8_t* raw, Index h, Index w, std::uint8_t* rgb) {
  const Index n = w * kBpp;
  std::vector<std::uint8_t> zeros(n, 0);
  const std::uint8_t* prev = zeros.data();
  for (Index y = 0; y < h; ++y) {
    std::uint8_t* row = raw + y * (n + 1);
    if (!Unfilter<kBpp>(row[0], row + 1, prev, n)) return false;
    prev = row + 1;
    const std::uint8_t* s = row + 1;
    std::uint8_t* o = rgb + y * w * 3;
    if constexpr (kBpp == 3) {
      std::memcpy(o, s, n);
    } else {
      for (Index x = 0; x < w; ++x, s += kBpp, o += 3) {
        if constexpr (kBpp <= 2) {
          o[0] = o[1] = o[2] = s[0];  // grey replicated, its alpha dropped
        } else {
          o[0] = s[0], o[1] = s[1], o[2] = s[2];  // alpha dropped
        }
      }
    }
  }
  return true;
}

// True with `out` (h * w * 3 bytes, h and w from the header) written when the
// file is on the fast path.
bool PngDecodeFast(std::span<const std::uint8_t> b, Index max_pixels, std::uint8_t* out) {
  if (b.size() < 33 || BigEndian32(b.data() + 8) != 13 ||
      std::memcmp(b.data() + 12, "IHDR", 4) != 0) {
    return false;
  }
  const std::uint8_t* ihdr = b.data() + 16;
  const Index w = BigEndian32(ihdr), h = BigEndian32(ihdr + 4);
  const int depth = ihdr[8], color = ihdr[9];
  if (w == 0 || h == 0 || w > 0x7fffffff || h > 0x7fffffff || h > max_pixels / w || depth != 8 ||
      ihdr[10] != 0 || ihdr[11] != 0 || ihdr[12] != 0) {
    return false;
  }
  const int bpp = color == 0 ? 1 : color == 4 ? 2 : color == 2 ? 3 : color == 6 ? 4 : 0;
  if (bpp == 0) return false;
  DeflateHolder& holder = deflate_holder;
  const TrimOnExit trim{&holder.idat, &holder.raw};
  // Walk the chunks to the end of the IDAT run, checking every CRC.
  std::size_t pos = 8, idat_bytes = 0, idat_chunks = 0;
  const std::uint8_t* single = nullptr;
  bool in_idat = false;
  holder.idat.clear();
  for (;;) {
    if (b.size() - pos < 12) return false;
    const std::uint32_t len = BigEndian32(b.data() + pos);
    if (len > 0x7fffffffu || len > b.size() - pos - 12) return false;
    const std::uint8_t* type = b.data() + pos + 4;
    const std::uint32_t crc = BigEndian32(type + 4 + len);
    const bool is_idat = std::memcmp(type, "IDAT", 4) == 0;
    if (in_idat && !is_idat) break;  // libpng reads no further either
    if (libdeflate_crc32(0, type, 4 + std::size_t{len}) != crc) return false;
    for (int i = 0; i < 4; ++i) {
      if (!((type[i] >= 'A' && type[i] <= 'Z') || (type[i] >= 'a' && type[i] <= 'z'))) return false;
    }
    const bool critical = type[0] >= 'A' && type[0] <= 'Z';
    if (is_idat) {
      in_idat = true;
      if (++idat_chunks == 2) holder.idat.assign(single, single + idat_bytes);
      if (idat_chunks == 1) {
        single = type + 4;
      } else {
        holder.idat.insert(holder.idat.end(), type + 4, type + 4 + len);
      }
      idat_bytes += len;
    } else if (pos != 8 && (std::memcmp(type, "tRNS", 4) == 0 ||
                            (critical && (std::memcmp(type, "PLTE", 4) != 0 || bpp <= 2)))) {
      return false;  // IEND before the data, a second IHDR, an unknown critical chunk, ...
    }
    pos += 12 + std::size_t{len};
  }
  const std::uint8_t* in = idat_chunks == 1 ? single : holder.idat.data();
  const std::size_t raw_bytes = static_cast<std::size_t>(h) * (w * bpp + 1);
  holder.raw.resize(raw_bytes);
  if (holder.d == nullptr) holder.d = libdeflate_alloc_decompressor();
  if (holder.d == nullptr) return false;
  std::size_t used = 0;
  if (libdeflate_zlib_decompress_ex(holder.d, in, idat_bytes, holder.raw.data(), raw_bytes, &used,
                                    nullptr) != LIBDEFLATE_SUCCESS ||
      used != idat_bytes) {
    return false;
  }
  switch (bpp) {
    case 1:
      return UnfilterAndConvert<1>(holder.raw.data(), h, w, out);
    case 2:
      return UnfilterAndConvert<2>(holder.raw.data(), h, w, out);
    case 3:
      return UnfilterAndConvert<3>(holder.raw.data(), h, w, out);
    default:
      return UnfilterAndConvert<4>(holder.raw.data(), h, w, out);
  }
}
#endif

}  // namespace

std::string_view ImageFormatName(ImageFormat format) { return kImageFormats.Name(format); }

std::vector<std::string> ImageFormatsBuilt() {
  std::vector<std::string> out;
#if SHARDKIT_HAVE_TURBOJPEG
  out.emplace_back(ImageFormatName(ImageFormat::kJpeg));
#endif
#if SHARDKIT_HAVE_PNG
  out.emplace_back(ImageFormatName(ImageFormat::kPng));
#endif
#if SHARDKIT_HAVE_WEBP
  out.emplace_back(ImageFormatName(ImageFormat::kWebp));
#endif
  return out;
}

ImageInfo ReadImageInfo(std::span<const std::uint8_t> bytes, std::string_view field,
                        Index max_pixels) {
  ImageInfo info{Sniff(bytes, field)};
  switch (info.format) {
    case ImageFormat::kPng: {
      // The IHDR chunk comes first: length 13, "IHDR", width, height (big endian).
      if (bytes.size() < 24 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0) {
        Fail(field, "png image without an IHDR header (" + Str(static_cast<Index>(bytes.size())) +
                        " bytes)");
      }
      const std::uint32_t w = BigEndian32(bytes.data() + 16), h = BigEndian32(bytes.data() + 20);
      if (w > 0x7fffffffu || h > 0x7fffffffu) Fail(field, "png header with a side over 2^31 - 1");
      info.width = w;
      info.height = h;
      break;
    }
    case ImageFormat::kJpeg: {
#if SHARDKIT_HAVE_TURBOJPEG
      int w = 0, h = 0, subsampling = 0, colorspace = 0;
      if (tjDecompressHeader3(JpegHandle(), bytes.data(), bytes.size(), &w, &h, &subsampling,
                              &colorspace) != 0) {
        Fail(field, "jpeg header does not parse: " + JpegErrorAndReset());
      }
      if (w <= 0 || h <= 0) Fail(field, "jpeg header does not parse (no frame header)");
      info.width = w;
      info.height = h;
#else
      NotBuilt(info.format, field);
#endif
      break;
    }
    case ImageFormat::kWebp: {
#if SHARDKIT_HAVE_WEBP
      WebPBitstreamFeatures f;
      if (WebPGetFeatures(bytes.data(), bytes.size(), &f) != VP8_STATUS_OK) {
        Fail(field, "webp header does not parse");
      }
      if (f.has_animation) Fail(field, "animated webp images are not supported");
      info.width = f.width;
      info.height = f.height;
#else
      NotBuilt(info.format, field);
#endif
      break;
    }
  }
  CheckPixels(field, info.height, info.width, max_pixels);
  return info;
}

std::pair<Index, Index> ResizedShape(Index h, Index w, const ResizeOptions& r, Index pixel_limit) {
  if (r.height < 0 || r.width < 0 || r.max_pixels < 0) {
    ThrowInvalid("resize", "height, width and max_pixels must be >= 0, got " + Str(r.height) +
                               ", " + Str(r.width) + ", " + Str(r.max_pixels));
  }
  if ((r.height > 0) != (r.width > 0)) {
    ThrowInvalid("resize",
                 "height and width are set together, got " + Str(r.height) + " x " + Str(r.width));
  }
  if (r.height > 0) {
    // The target is allocated as it stands: held to the decoder's pixel limit
    // like a header (a target of 2^31 x 2 was allocated; 2^63-1 x 1 overflowed).
    Index pixels = 0;
    if (__builtin_mul_overflow(r.height, r.width, &pixels) || pixels > pixel_limit) {
      ThrowInvalid("resize", "the target " + Str(r.height) + " x " + Str(r.width) +
                                 " is over the limit of " + Str(pixel_limit) + " pixels");
    }
    return {r.height, r.width};
  }
  if (r.max_pixels == 0 || h <= r.max_pixels / w) return {h, w};
  const double s = std::sqrt(static_cast<double>(r.max_pixels) /
                             (static_cast<double>(h) * static_cast<double>(w)));
  Index nh = std::max<Index>(1, static_cast<Index>(std::floor(static_cast<double>(h) * s)));
  Index nw = std::max<Index>(1, static_cast<Index>(std::floor(static_cast<double>(w) * s)));
  while (nh * nw > r.max_pixels && (nh > 1 || nw > 1)) (nh >= nw ? nh : nw) -= 1;
  return {nh, nw};
}

namespace {

// The decoded pixels of `bytes` (info: its header) into `out`, h * w * 3 bytes.
void DecodePixels([[maybe_unused]] std::span<const std::uint8_t> bytes, std::string_view field,
                  const ImageInfo& info, [[maybe_unused]] Index max_pixels,
                  [[maybe_unused]] std::uint8_t* out) {
  switch (info.format) {
    case ImageFormat::kJpeg: {
#if SHARDKIT_HAVE_TURBOJPEG
      // Accurate integer IDCT, fancy upsampling (TurboJPEG's defaults, Pillow's
      // settings); a warning (truncated or corrupt data) is an error.
      if (tjDecompress2(JpegHandle(), bytes.data(), bytes.size(), out, static_cast<int>(info.width),
                        0, static_cast<int>(info.height), TJPF_RGB,
                        TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING) != 0) {
        Fail(field, "jpeg data does not decode: " + JpegErrorAndReset());
      }
#else
      NotBuilt(info.format, field);
#endif
      return;
    }
    case ImageFormat::kPng: {
#if SHARDKIT_HAVE_PNG
#if SHARDKIT_HAVE_DEFLATE
      if (PngDecodeFast(bytes, max_pixels, out)) return;
#endif
      PngJob job{bytes.data(), bytes.size(), 0, max_pixels, info.height, info.width, out, {}, {}};
      if (!PngDecode(&job)) Fail(field, std::string("png data does not decode: ") + job.error);
#else
      NotBuilt(info.format, field);
#endif
      return;
    }
    case ImageFormat::kWebp: {
#if SHARDKIT_HAVE_WEBP
      const std::size_t size = static_cast<std::size_t>(info.height) * info.width * 3;
      if (WebPDecodeRGBInto(bytes.data(), bytes.size(), out, size,
                            static_cast<int>(info.width * 3)) == nullptr) {
        Fail(field, "webp data does not decode (truncated or corrupt)");
      }
#else
      NotBuilt(info.format, field);
#endif
      return;
    }
  }
}

#if SHARDKIT_HAVE_TURBOJPEG
// ResizeOptions::jpeg_draft's scale for an h x w JPEG resized to out_h x out_w:
// Pillow's JpegImageFile.draft rule, kept only where TurboJPEG's
// tjDecompress2 (which picks the first of its scaling factors whose output
// fits the size asked) picks 1/s for ceil(w / s) x ceil(h / s); else 1.
int JpegDraftScale(Index h, Index w, Index out_h, Index out_w) {
  const Index scale = std::min(w / out_w, h / out_h);
  int s = 1;
  for (int c : {8, 4, 2}) {
    if (scale >= c) {
      s = c;
      break;
    }
  }
  if (s == 1) return 1;
  const Index dw = (w + s - 1) / s, dh = (h + s - 1) / s;
  int n = 0;
  const tjscalingfactor* f = tjGetScalingFactors(&n);
  for (int i = 0; f != nullptr && i < n; ++i) {
    if (TJSCALED(w, f[i]) <= dw && TJSCALED(h, f[i]) <= dh) {
      return f[i].num == 1 && f[i].denom == s ? s : 1;
    }
  }
  return 1;
}
#endif

// The full-size pixels of an image that is then resized (kKeepBufferBytes).
thread_local std::vector<std::uint8_t> decode_scratch;

}  // namespace

Image ResizeBilinear(const Image& in, Index height, Index width) {
  if (height == in.height && width == in.width) return in;
  Image out{height, width, std::vector<std::uint8_t>(height * width * 3)};
  internal::ResizeBilinearInto(in.pixels.data(), in.height, in.width, height, width,
                               out.pixels.data());
  return out;
}

std::pair<Index, Index> DecodeImageInto(std::span<const std::uint8_t> bytes, std::string_view field,
                                        const ResizeOptions& resize, Index max_pixels,
                                        std::span<std::uint8_t> out) {
  const ImageInfo info = ReadImageInfo(bytes, field, max_pixels);
  const auto [out_h, out_w] = ResizedShape(info.height, info.width, resize, max_pixels);
  if (static_cast<Index>(out.size()) != out_h * out_w * 3) {
    ThrowInvalid("out", "has " + Str(static_cast<Index>(out.size())) + " bytes, the image " +
                            Str(out_h) + " x " + Str(out_w) + " x 3");
  }
  if (out_h == info.height && out_w == info.width) {
    DecodePixels(bytes, field, info, max_pixels, out.data());
    return {out_h, out_w};
  }
#if SHARDKIT_HAVE_TURBOJPEG
  const int s = resize.jpeg_draft && info.format == ImageFormat::kJpeg
                    ? JpegDraftScale(info.height, info.width, out_h, out_w)
                    : 1;
  if (s > 1) {
    const Index dh = (info.height + s - 1) / s, dw = (info.width + s - 1) / s;
    const TrimOnExit trim{&decode_scratch};
    if (decode_scratch.size() < static_cast<std::size_t>(dh * dw * 3)) {
      decode_scratch.resize(dh * dw * 3);
    }
    if (tjDecompress2(JpegHandle(), bytes.data(), bytes.size(), decode_scratch.data(),
                      static_cast<int>(dw), 0, static_cast<int>(dh), TJPF_RGB,
                      TJFLAG_ACCURATEDCT | TJFLAG_STOPONWARNING) != 0) {
      Fail(field, "jpeg data does not decode: " + JpegErrorAndReset());
    }
    internal::ResizeBilinearInto(decode_scratch.data(), dh, dw, out_h, out_w, out.data());
    return {out_h, out_w};
  }
#endif
  const TrimOnExit trim{&decode_scratch};
  const std::size_t size = static_cast<std::size_t>(info.height) * info.width * 3;
  if (decode_scratch.size() < size) decode_scratch.resize(size);
  DecodePixels(bytes, field, info, max_pixels, decode_scratch.data());
  internal::ResizeBilinearInto(decode_scratch.data(), info.height, info.width, out_h, out_w,
                               out.data());
  return {out_h, out_w};
}

Image DecodeImage(std::span<const std::uint8_t> bytes, std::string_view field,
                  const ResizeOptions& resize, Index max_pixels) {
  const ImageInfo info = ReadImageInfo(bytes, field, max_pixels);
  const auto [out_h, out_w] = ResizedShape(info.height, info.width, resize, max_pixels);
  Image image{out_h, out_w, std::vector<std::uint8_t>(out_h * out_w * 3)};
  (void)DecodeImageInto(bytes, field, resize, max_pixels, image.pixels);
  return image;
}

}  // namespace shardkit
