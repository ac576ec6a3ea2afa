#include "shardkit/loader/arrow_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/source_formats.h"
#include "shardkit/loader/token_source.h"

namespace shardkit {
namespace {

namespace fs = std::filesystem;
using loader_testing::ErrorOf;
using Doc = std::vector<std::int64_t>;
using loader_testing::ExpectDocuments;

// The documents testdata/make_arrow_files.py writes (pyarrow is the writer):
// the rows of its input_ids column.
const std::vector<Doc> kDocs = {{1, 2}, {}, {3, 4, 5}, {6}, {7, 8, 9, 10}};

std::string TestFile(const std::string& name) {
  return std::string(SHARDKIT_TESTDATA_DIR) + "/arrow/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ArrowSourceTest, StreamAndFileFormatsGiveTheRowsOfTheColumn) {
  // Stream format, list<int32>, record batches of 2 rows: 3 parts.
  auto stream = TokenSource::OpenArrow(TestFile("stream_int32.arrow"), "input_ids");
  EXPECT_EQ(stream->num_parts(), 3);
  ExpectDocuments(*stream, kDocs);
  // File format, large_list<uint16>, one batch: the int64 offsets are mapped
  // in place.
  auto file = TokenSource::OpenArrow(TestFile("file_large_uint16.arrow"), "input_ids");
  ExpectDocuments(*file, kDocs);
  EXPECT_NE(file->ContiguousOffsets(), nullptr);
  // Another list column of the same file (int8 ids), after the tokens.
  auto mask = TokenSource::OpenArrow(TestFile("stream_int32.arrow"), "attention_mask");
  std::vector<Doc> ones;
  for (const Doc& d : kDocs) ones.push_back(Doc(d.size(), 1));
  ExpectDocuments(*mask, ones);
  // Detected by the extension; a list of files is one source.
  OpenSourceOptions o;
  ExpectDocuments(*OpenSource({TestFile("stream_int32.arrow")}, o), kDocs);
  auto both = OpenSource({TestFile("file_large_uint16.arrow"), TestFile("stream_int32.arrow")}, o);
  std::vector<Doc> twice = kDocs;
  twice.insert(twice.end(), kDocs.begin(), kDocs.end());
  ExpectDocuments(*both, twice);
}

TEST(ArrowSourceTest, ASlicedListsFirstOffsetIsHonoured) {
  // Offsets [0, 2, 2, 5, 6, 10] of the one batch rewritten as [1, 2, 2, ...]:
  // document 0 is values[1:2].
  const std::string path = TestFile("file_large_uint16.arrow");
  std::string bytes = ReadBytes(path);
  const ArrowColumn c = ParseArrowIpc(bytes, path, "input_ids");
  ASSERT_EQ(c.batches.size(), 1u);
  const std::int64_t one = 1;
  std::memcpy(bytes.data() + c.batches[0].offsets_at, &one, 8);
  const fs::path dir = loader_testing::TempDir("arrow", "sliced");
  std::ofstream(dir / "s.arrow", std::ios::binary) << bytes;
  std::vector<Doc> docs = kDocs;
  docs[0] = {2};
  ExpectDocuments(*TokenSource::OpenArrow((dir / "s.arrow").string(), "input_ids"), docs);
  fs::remove_all(dir);
}

TEST(ArrowSourceTest, BadColumnsNullsAndCompressionAreRefusedByName) {
  const std::string s = TestFile("stream_int32.arrow");
  struct Case {
    std::string path, column, words;
  };
  const std::vector<Case> cases = {
      {s, "ids",
       s + ": column: no column 'ids'; the columns are 'text', 'meta', 'nothing', "
           "'input_ids', 'attention_mask'"},
      {s, "text", s + ": message[0]: column: 'text' is Utf8, expected a list or large_list"},
      {s, "meta", "column: 'meta' is Struct"},
      {TestFile("null_row.arrow"), "input_ids",
       "column: 'input_ids': record_batch[0] row 3 is null"},
      {TestFile("null_id.arrow"), "input_ids", "record_batch[0] holds 1 null ids inside its lists"},
      {TestFile("zstd.arrow"), "input_ids", "record_batch[0]: compressed with ZSTD"},
  };
  for (const Case& c : cases) {
    const std::string e = ErrorOf([&] { (void)TokenSource::OpenArrow(c.path, c.column); });
    EXPECT_NE(e.find(c.words), std::string::npos) << e;
    EXPECT_EQ(e.rfind("path: ", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// An IPC stream of one Schema message with no fields and `endianness`,
// its flatbuffer laid out by hand (Message.fbs / Schema.fbs): pyarrow writes
// little-endian only, and leaves the default endianness out.
std::string SchemaOnlyStream(std::int16_t endianness) {
  std::string m(56, '\0');
  auto put = [&](std::size_t at, auto v) { std::memcpy(m.data() + at, &v, sizeof v); };
  put(0, std::uint32_t{16});  // root: the Message table
  // Message vtable at 4: size 12, table 16 bytes, version +12, header_type
  // +4, header +8, bodyLength absent.
  put(4, std::uint16_t{12});
  put(6, std::uint16_t{16});
  put(8, std::uint16_t{12});
  put(10, std::uint16_t{4});
  put(12, std::uint16_t{8});
  put(14, std::uint16_t{0});
  put(16, std::int32_t{12});   // table at 16 -> vtable at 4
  put(20, std::uint8_t{1});    // header_type: Schema
  put(24, std::uint32_t{16});  // header -> 40
  put(28, std::int16_t{4});    // version V5
  // Schema vtable at 32: size 8, table 12 bytes, endianness +4, fields +8.
  put(32, std::uint16_t{8});
  put(34, std::uint16_t{12});
  put(36, std::uint16_t{4});
  put(38, std::uint16_t{8});
  put(40, std::int32_t{8});  // table at 40 -> vtable at 32
  put(44, endianness);
  put(48, std::uint32_t{4});  // fields -> 52
  put(52, std::uint32_t{0});  // no fields
  std::string out("\xff\xff\xff\xff", 4);
  const std::int32_t length = 56;
  out.append(reinterpret_cast<const char*>(&length), 4);
  out += m;
  out.append("\xff\xff\xff\xff\0\0\0\0", 8);
  return out;
}

TEST(ArrowSourceTest, BigEndianSchemasAreRefused) {
  const std::string e =
      ErrorOf([&] { (void)ParseArrowIpc(SchemaOnlyStream(1), "be.arrow", "input_ids"); });
  EXPECT_NE(e.find("path: be.arrow: message[0]: schema: big-endian data (endianness 1)"),
            std::string::npos)
      << e;
  const std::string little =
      ErrorOf([&] { (void)ParseArrowIpc(SchemaOnlyStream(0), "le.arrow", "input_ids"); });
  EXPECT_NE(little.find("path: le.arrow: column: no column 'input_ids'; the columns are none"),
            std::string::npos)
      << little;
}

TEST(ArrowSourceTest, EveryTruncationIsRefusedOrReadsOnlyWhatIsThere) {
  // Cut at every length: refused with one line, or (a cut at a message
  // boundary: a stream may end without its end marker) a prefix of the rows.
  for (const char* name : {"stream_int32.arrow", "file_large_uint16.arrow"}) {
    const std::string bytes = ReadBytes(TestFile(name));
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      const std::string cut = bytes.substr(0, n);
      try {
        const ArrowColumn c = ParseArrowIpc(cut, "x.arrow", "input_ids");
        for (const ArrowBatch& b : c.batches) {
          EXPECT_LE(b.values_at + 4 * static_cast<std::uint64_t>(b.num_values), n) << n;
          EXPECT_LE(b.offsets_at + 8 * static_cast<std::uint64_t>(b.rows + 1), n) << n;
        }
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()).rfind("path: x.arrow: ", 0), 0u) << e.what();
      }
    }
  }
}

TEST(ArrowSourceTest, EveryFlippedByteIsRefusedOrStaysInsideTheFile) {
  // Each byte of the metadata and bodies XORed with 0x80 and 0x01: the
  // parser either refuses with a message naming the file or returns batches
  // whose offsets and values lie inside the file (validated offsets).
  const std::string bytes = ReadBytes(TestFile("stream_int32.arrow"));
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0x80, 0x01}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      try {
        const ArrowColumn c = ParseArrowIpc(bad, "x.arrow", "input_ids");
        for (const ArrowBatch& b : c.batches) {
          EXPECT_LE(b.values_at + 4 * static_cast<std::uint64_t>(b.num_values), bad.size());
        }
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()).rfind("path: x.arrow: ", 0), 0u) << e.what();
      }
    }
  }
}

TEST(ArrowSourceTest, SaveToDiskFolderIsReadInStateJsonOrder) {
  const fs::path dir = loader_testing::TempDir("arrow", "folder");
  fs::copy_file(TestFile("stream_int32.arrow"), dir / "data-00001-of-00002.arrow");
  fs::copy_file(TestFile("file_large_uint16.arrow"), dir / "data-00000-of-00002.arrow");
  std::ofstream(dir / "state.json")
      << R"({"_data_files": [{"filename": "data-00001-of-00002.arrow"},)"
      << R"( {"filename": "data-00000-of-00002.arrow"}], "_fingerprint": "x", "_split": null})";
  EXPECT_EQ(DetectSourceFormat(dir.string()), SourceFormat::kArrow);
  auto source = OpenSource({dir.string()});
  EXPECT_EQ(source->num_parts(), 4);
  std::vector<Doc> twice = kDocs;
  twice.insert(twice.end(), kDocs.begin(), kDocs.end());
  ExpectDocuments(*source, twice);
  EXPECT_EQ(source->PartName(0), (dir / "data-00001-of-00002.arrow").string());
  std::ofstream(dir / "state.json") << R"({"_data_files": [{"filename": "gone.arrow"}]})";
  EXPECT_NE(
      ErrorOf([&] { (void)OpenSource({dir.string()}); }).find("lists gone.arrow, which is missing"),
      std::string::npos);
  std::ofstream(dir / "dataset_dict.json") << "{}";
  EXPECT_NE(ErrorOf([&] { (void)OpenSource({dir.string()}); }).find("a DatasetDict folder"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardkit
