#include "shardkit/loader/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

// A header as NumPy 1.x/2.x writes it, built by hand (not by NpyHeaderBytes,
// which is under test too).
std::string Handmade(int major, const std::string& dict, std::size_t data_bytes) {
  std::string text = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + text.size() + 1) % 64 != 0) text += ' ';
  text += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t n = text.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) {
    out += static_cast<char>((n >> 16) & 0xff);
    out += static_cast<char>((n >> 24) & 0xff);
  }
  return out + text + std::string(data_bytes, '\0');
}

std::string ErrorOf(const std::string& bytes) {
  return base_testing::ErrorOf(
      [&] { (void)ParseNpyHeader(bytes, bytes.size(), "tokens", "/data/t.npy"); });
}

// The bytes are refused with an error that names the file and says `what`.
void ExpectRefused(const std::string& bytes, const std::string& what) {
  const std::string e = ErrorOf(bytes);
  EXPECT_EQ(e.rfind("tokens: /data/t.npy: ", 0), 0u) << e;
  EXPECT_NE(e.find(what), std::string::npos) << what << " / " << e;
}

TEST(NpyTest, ParsesTheHeadersNumpyWritesInEveryVersion) {
  for (int major : {1, 2, 3}) {
    const std::string bytes =
        Handmade(major, "{'descr': '<u2', 'fortran_order': False, 'shape': (5,), }", 10);
    NpyHeader h = ParseNpyHeader(bytes, bytes.size(), "tokens", "t.npy");
    EXPECT_EQ(h.kind, 'u');
    EXPECT_EQ(h.item_size, 2);
    EXPECT_EQ(h.count, 5);
    EXPECT_EQ(h.shape, std::vector<Index>{5});
    EXPECT_EQ(h.data_offset % 64, 0u);
    EXPECT_EQ(h.data_offset + 10, bytes.size());
  }
  const std::string two_d =
      Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }", 48);
  EXPECT_EQ(ParseNpyHeader(two_d, two_d.size(), "x", "x").count, 12);
  const std::string scalar_empty =
      Handmade(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (0,), }", 0);
  EXPECT_EQ(ParseNpyHeader(scalar_empty, scalar_empty.size(), "x", "x").count, 0);
}

TEST(NpyTest, WrittenHeaderRoundTrips) {
  std::string bytes = NpyHeaderBytes("<i4", 7) + std::string(28, '\0');
  NpyHeader h = ParseNpyHeader(bytes, bytes.size(), "tokens", "t.npy");
  EXPECT_EQ(h.descr, "<i4");
  EXPECT_EQ(h.count, 7);
  EXPECT_EQ(h.data_offset % 64, 0u);
}

TEST(NpyTest, CorruptOrTruncatedFilesAreErrorsNamingTheFile) {
  const std::string good =
      Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", 16);
  EXPECT_EQ(ErrorOf(good), "no error");
  ExpectRefused("hello world, not numpy", "bad magic");
  ExpectRefused(good.substr(0, 40), "truncated header");
  ExpectRefused(good.substr(0, good.size() - 1), "truncated data");
  ExpectRefused(Handmade(1, "{'descr': '>i4', 'fortran_order': False, 'shape': (4,), }", 16),
                "big-endian");
  ExpectRefused(Handmade(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (4,), }", 16),
                "Fortran");
  ExpectRefused(Handmade(1, "{'descr': '|O', 'fortran_order': False, 'shape': (4,), }", 16),
                "unsupported dtype");
  ExpectRefused(Handmade(1, "{'descr': '<i4', 'shape': (4,), }", 16), "lacks");
  ExpectRefused(Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,", 16),
                "malformed");
  ExpectRefused(Handmade(9, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", 16),
                "version 9");
  ExpectRefused(Handmade(1,
                         "{'descr': '<i4', 'fortran_order': False, 'shape': "
                         "(99999999999, 99999999999), }",
                         16),
                "overflows");
  // Corrupting any single byte of the header never crashes: it parses or throws.
  for (std::size_t i = 0; i < good.size() - 16; ++i) {
    for (int v : {0, 32, 40, 39, 0x93, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(v);
      try {
        NpyHeader h = ParseNpyHeader(bad, bad.size(), "tokens", "t.npy");
        EXPECT_LE(h.data_offset + static_cast<std::size_t>(h.count * h.item_size), bad.size());
      } catch (const std::invalid_argument&) {
      }
    }
  }
}

TEST(NpyTest, RegressionCorruptedShapeDigitHidingElementsIsRefused) {
  // '(13,)' -> '( 3,)': the header promises 3 of the 13 offsets in the file;
  // reading 3 would silently drop 10 documents.
  const std::string bytes =
      Handmade(1, "{'descr': '<i8', 'fortran_order': False, 'shape': ( 3,), }", 13 * 8);
  const std::string e = ErrorOf(bytes);
  EXPECT_EQ(e.rfind("tokens: /data/t.npy: size mismatch: the header promises 3 elements", 0), 0u)
      << e;
  EXPECT_NE(e.find("the file holds 104 data bytes"), std::string::npos) << e;
  EXPECT_EQ(
      ErrorOf(Handmade(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (13,), }", 13 * 8)),
      "no error");
}

TEST(NpyTest, RegressionHeadersNumpyRefusesAreRefused) {
  // Missing commas between entries (numpy: a SyntaxError in the header).
  ExpectRefused(Handmade(1, "{'descr': '<i4' 'fortran_order': False 'shape': (4,) }", 16),
                "malformed header: expected ','");
  // Another minor version byte.
  std::string minor = Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", 16);
  minor[7] = '\x01';
  ExpectRefused(minor, "unsupported .npy format version 1.1");
  // Leading zeros are not a Python integer literal.
  ExpectRefused(Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (04,), }", 16),
                "leading zero");
  // '(4)' is an int, not a shape tuple.
  ExpectRefused(Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4), }", 16),
                "not a tuple");
  // What numpy does accept still parses: no trailing comma, 0 as an extent.
  EXPECT_EQ(ErrorOf(Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,)}", 16)),
            "no error");
  EXPECT_EQ(ErrorOf(Handmade(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (0, 4)}", 0)),
            "no error");
}

TEST(NpyTest, ReadsOneDimensionalNumbersOfEveryType) {
  std::string bytes = Handmade(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", 0);
  const std::int16_t values[3] = {-2, 7, 300};
  bytes.append(reinterpret_cast<const char*>(values), sizeof values);
  EXPECT_EQ(NpyToDoubles(bytes, "lengths", "x.npy"), (std::vector<double>{-2, 7, 300}));
  std::string f = Handmade(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", 0);
  const double half = 0.5;
  f.append(reinterpret_cast<const char*>(&half), 8);
  EXPECT_EQ(NpyToDoubles(f, "lengths", "x.npy"), std::vector<double>{0.5});
}

}  // namespace
}  // namespace shardkit
