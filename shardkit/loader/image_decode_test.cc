#include "shardkit/loader/image_decode.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/loader/image_batch.h"

namespace shardkit {
namespace {

// A 3 x 2 RGB image written by Pillow 12.0.0 as PNG and as lossless WebP; the
// expected pixels are the ones given to Pillow (python/tests/test_image_decode.py
// compares larger images with Pillow's decode).
const std::vector<std::uint8_t> kPng = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0x12, 0x16, 0xf1,
    0x4d, 0x00, 0x00, 0x00, 0x17, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xc0,
    0x00, 0xc1, 0x5c, 0x22, 0x72, 0x27, 0x52, 0x8c, 0x18, 0x99, 0x98, 0x01, 0x36, 0x29, 0x04, 0x9e,
    0xa6, 0xb6, 0xd7, 0x50, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
const std::vector<std::uint8_t> kWebp = {
    0x52, 0x49, 0x46, 0x46, 0x42, 0x00, 0x00, 0x00, 0x57, 0x45, 0x42, 0x50, 0x56, 0x50, 0x38,
    0x4c, 0x36, 0x00, 0x00, 0x00, 0x2f, 0x02, 0x40, 0x00, 0x00, 0x2f, 0x40, 0x10, 0x40, 0x52,
    0x23, 0x4c, 0xb6, 0xbf, 0xcc, 0x1a, 0x64, 0xd2, 0x36, 0xa5, 0x5f, 0xfd, 0xfb, 0x99, 0xb5,
    0x91, 0x09, 0x58, 0x0c, 0x15, 0x7c, 0xfa, 0xe7, 0x34, 0xff, 0x01, 0x7f, 0xc4, 0x23, 0x46,
    0x9b, 0xad, 0x40, 0x20, 0x40, 0x19, 0x2b, 0x1e, 0xd8, 0x26, 0xa2, 0xff, 0x31, 0x5e};
const std::vector<std::uint8_t> kPixels = {255, 0,  0,  0,   255, 0,  0, 0, 255,
                                           10,  20, 30, 200, 100, 50, 1, 2, 3};

bool Built(std::string_view format) {
  for (const std::string& f : ImageFormatsBuilt()) {
    if (f == format) return true;
  }
  return false;
}

std::string ErrorOf(std::span<const std::uint8_t> bytes,
                    Index max_pixels = kDefaultMaxImagePixels) {
  try {
    (void)DecodeImage(bytes, "images: sample 7, image 1", {}, max_pixels);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ImageDecodeTest, LosslessImagesDecodeToTheirPixels) {
  if (!Built("png") || !Built("webp")) GTEST_SKIP() << "png or webp not built";
  for (const auto* bytes : {&kPng, &kWebp}) {
    const ImageInfo info = ReadImageInfo(*bytes, "x");
    EXPECT_EQ(info.height, 2);
    EXPECT_EQ(info.width, 3);
    const Image image = DecodeImage(*bytes, "x");
    EXPECT_EQ(image.height, 2);
    EXPECT_EQ(image.width, 3);
    EXPECT_EQ(image.pixels, kPixels);
  }
}

TEST(ImageDecodeTest, EveryTruncationIsOneErrorNamingTheField) {
  for (const auto* bytes : {&kPng, &kWebp}) {
    for (std::size_t n = 0; n < bytes->size(); ++n) {
      std::span<const std::uint8_t> head(bytes->data(), n);
      const std::string error = ErrorOf(head);
      // Some prefixes end after the image data (PNG's IEND chunk): those decode whole.
      if (error.empty()) {
        EXPECT_EQ(DecodeImage(head, "x").pixels, kPixels) << n;
        continue;
      }
      EXPECT_EQ(error.rfind("images: sample 7, image 1: ", 0), 0u) << n << ": " << error;
    }
  }
}

TEST(ImageDecodeTest, UnknownFormatIsRefusedWithItsFirstBytes) {
  const std::vector<std::uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0};
  EXPECT_EQ(ErrorOf(gif),
            "images: sample 7, image 1: not a JPEG, PNG or WebP image (first bytes 47 49 46 38 "
            "39 61 01 00)");
  EXPECT_EQ(ErrorOf({}),
            "images: sample 7, image 1: not a JPEG, PNG or WebP image (first "
            "bytes none: 0 bytes)");
}

TEST(ImageDecodeTest, HugeDeclaredDimensionsAreRefusedBeforeAnyAllocation) {
  std::vector<std::uint8_t> huge = kPng;
  huge[16] = 0x7f;  // width 0x7f000003
  huge[20] = 0x10;  // height 0x10000002
  EXPECT_NE(ErrorOf(huge).find("pixels is over the limit of 178956970 pixels"), std::string::npos)
      << ErrorOf(huge);
  EXPECT_NE(ErrorOf(kPng, 5).find("3 x 2 pixels is over the limit of 5 pixels"), std::string::npos);
  std::vector<std::uint8_t> zero = kPng;
  zero[19] = 0;
  EXPECT_NE(ErrorOf(zero).find("a side is 0"), std::string::npos);
}

TEST(ImageDecodeTest, CorruptBytesNeverCrash) {
  for (const auto* bytes : {&kPng, &kWebp}) {
    for (std::size_t i = 0; i < bytes->size(); ++i) {
      std::vector<std::uint8_t> b = *bytes;
      b[i] ^= 0x5a;
      try {
        const Image image = DecodeImage(b, "x");
        EXPECT_EQ(image.pixels.size(), static_cast<std::size_t>(image.height * image.width * 3));
      } catch (const std::invalid_argument&) {
      }
    }
  }
}

// A build without a library still reads, and refuses that format by name.
TEST(ImageDecodeTest, AFormatBuiltWithoutItsLibraryIsRefusedNamingThePackage) {
  if (Built("webp")) GTEST_SKIP() << "webp built";
  try {
    (void)DecodeImage(kWebp, "images: sample 0, image 0");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("libwebp-dev was not installed"), std::string::npos)
        << e.what();
  }
}

TEST(ImageDecodeTest, ResizedShapeFollowsTheStatedRule) {
  EXPECT_EQ(ResizedShape(100, 50, {224, 224, 0}), std::make_pair(Index{224}, Index{224}));
  EXPECT_EQ(ResizedShape(100, 50, {0, 0, 0}), std::make_pair(Index{100}, Index{50}));
  EXPECT_EQ(ResizedShape(100, 50, {0, 0, 5000}), std::make_pair(Index{100}, Index{50}));
  EXPECT_EQ(ResizedShape(1000, 500, {0, 0, 5000}), std::make_pair(Index{100}, Index{50}));
  EXPECT_EQ(ResizedShape(1, 1000000, {0, 0, 10}), std::make_pair(Index{1}, Index{10}));
  for (Index h : {1, 7, 333, 4000}) {
    for (Index w : {1, 9, 640, 5000}) {
      const auto [nh, nw] = ResizedShape(h, w, {0, 0, 1000});
      EXPECT_LE(nh * nw, std::max<Index>(1000, 1)) << h << "x" << w;
    }
  }
  EXPECT_THROW((void)ResizedShape(1, 1, {224, 0, 0}), std::invalid_argument);
  EXPECT_THROW((void)ResizedShape(1, 1, {0, 0, -1}), std::invalid_argument);
  // A target over the pixel limit is refused before anything is allocated (a
  // target of 2^31 x 2 was allocated; 2^63-1 x 1 overflowed height * width).
  EXPECT_THROW((void)ResizedShape(1, 1, {Index{1} << 31, 2, 0}), std::invalid_argument);
  EXPECT_THROW((void)ResizedShape(1, 1, {INT64_MAX, 1, 0}), std::invalid_argument);
  EXPECT_THROW((void)ResizedShape(1, 1, {100, 100, 0}, 9999), std::invalid_argument);
  EXPECT_EQ(ResizedShape(1, 1, {100, 100, 0}, 10000), std::make_pair(Index{100}, Index{100}));
}

// Resizing a constant image gives the same constant (the weights sum to one).
TEST(ImageDecodeTest, ResizeKeepsAConstantImage) {
  Image flat{37, 53, std::vector<std::uint8_t>(37 * 53 * 3)};
  for (std::size_t i = 0; i < flat.pixels.size(); ++i) flat.pixels[i] = 17 + (i % 3) * 100;
  for (auto [h, w] : {std::pair<Index, Index>{5, 7}, {37, 9}, {80, 53}, {1, 1}, {100, 120}}) {
    const Image r = ResizeBilinear(flat, h, w);
    ASSERT_EQ(r.pixels.size(), static_cast<std::size_t>(h * w * 3));
    for (std::size_t i = 0; i < r.pixels.size(); ++i) {
      ASSERT_EQ(r.pixels[i], 17 + (i % 3) * 100) << h << "x" << w << " at " << i;
    }
  }
}

TEST(ImageDecodeTest, DecodeImageIntoWritesDecodeImagesPixelsAndChecksTheSlot) {
  if (!Built("png") || !Built("webp")) GTEST_SKIP() << "png or webp not built";
  for (const auto* bytes : {&kPng, &kWebp}) {
    std::vector<std::uint8_t> out(18 + 60, 0xAB);
    EXPECT_EQ(
        DecodeImageInto(*bytes, "x", {}, kDefaultMaxImagePixels, std::span(out).subspan(0, 18)),
        std::make_pair(Index{2}, Index{3}));
    EXPECT_EQ(std::vector<std::uint8_t>(out.begin(), out.begin() + 18), kPixels);
    EXPECT_EQ(
        DecodeImageInto(*bytes, "x", {4, 5, 0}, kDefaultMaxImagePixels, std::span(out).subspan(18)),
        std::make_pair(Index{4}, Index{5}));
    EXPECT_EQ(std::vector<std::uint8_t>(out.begin() + 18, out.end()),
              DecodeImage(*bytes, "x", {4, 5, 0}).pixels);
    try {
      (void)DecodeImageInto(*bytes, "x", {4, 5, 0}, kDefaultMaxImagePixels,
                            std::span(out).subspan(0, 59));
      FAIL() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("out: has 59 bytes, the image 4 x 5 x 3", 0), 0u)
          << e.what();
    }
  }
}

TEST(ImageBatchDecoderTest, BatchIsTheImagesInOrderAndNamesTheFailingSample) {
  if (!Built("png") || !Built("webp")) GTEST_SKIP() << "png or webp not built";
  ImageBatchDecoder decoder({{}, kDefaultMaxImagePixels, 3});
  std::vector<std::span<const std::uint8_t>> images = {kPng, kWebp, kPng};
  const DecodedImages out = decoder.Decode(images);
  ASSERT_EQ(out.offsets, (std::vector<Index>{0, 18, 36, 54}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(
        std::vector<std::uint8_t>(out.pixels.begin() + 18 * i, out.pixels.begin() + 18 * (i + 1)),
        kPixels);
  }
  const std::vector<std::uint8_t> bad = {1, 2, 3};
  images = {kPng, kPng, bad, bad};
  const std::vector<Index> samples = {4, 9, 9, 10};
  try {
    (void)decoder.Decode(images, samples);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("images: sample 9, image 1: not a JPEG", 0), 0u)
        << e.what();
  }
  ImageBatchDecoder fixed({{4, 5, 0}, kDefaultMaxImagePixels, 2});
  EXPECT_EQ(fixed.Decode(images = {kPng, kWebp}).pixels.size(), 2u * 4 * 5 * 3);
}

// Regression: a DataLoader worker forked from a process whose decoder had
// started its threads waited forever for workers that did not exist there.
TEST(ImageBatchDecoderTest, RegressionDecoderUsedInAForkedChildDoesNotHang) {
  if (!Built("png")) GTEST_SKIP() << "png not built";
  ImageBatchDecoder decoder({{}, kDefaultMaxImagePixels, 3});
  std::vector<std::span<const std::uint8_t>> images = {kPng, kPng, kPng, kPng};
  ASSERT_EQ(decoder.Decode(images).pixels.size(), 4u * 18);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a hang fails the test instead of stalling it
    const bool ok = decoder.Decode(images).pixels.size() == 4u * 18 &&
                    decoder.Decode(images).pixels.size() == 4u * 18;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(decoder.Decode(images).pixels.size(), 4u * 18);  // the parent's pool still works
}

}  // namespace
}  // namespace shardkit
