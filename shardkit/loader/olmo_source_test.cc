#include "shardkit/loader/olmo_source.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <utime.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
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

constexpr TokenDType kOlmoTypes[] = {TokenDType::kUint8, TokenDType::kUint16, TokenDType::kUint32,
                                     TokenDType::kUint64};

// The little-endian bytes of `docs`' tokens back to back, in `type`.
std::string Encode(const std::vector<Doc>& docs, TokenDType type) {
  std::string out;
  const auto size = static_cast<std::size_t>(TokenDTypeSize(type));
  for (const Doc& d : docs) {
    for (std::int64_t t : d) out.append(reinterpret_cast<const char*>(&t), size);
  }
  return out;
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void WriteGzip(const fs::path& path, const std::string& text) {
  gzFile f = gzopen(path.string().c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!text.empty()) {
    ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
              static_cast<int>(text.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

// The rows OLMo's toolkit writes for `docs`: "start,end,id,src,loc".
std::string Rows(const std::vector<Doc>& docs) {
  std::string out;
  std::int64_t start = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const std::int64_t end = start + static_cast<std::int64_t>(docs[i].size());
    out += std::to_string(start) + "," + std::to_string(end) + ",doc" + std::to_string(i) +
           ",s3://bucket/x.json.gz," + std::to_string(i + 1) + "\n";
    start = end;
  }
  return out;
}

// Random documents over ids [0, hi - 2) (the EOS is hi - 1, the BOS hi - 2);
// each ends in the EOS (the last one, when `tail`, does not), and starts with
// the BOS when `with_bos`. With a BOS, some documents hold an EOS not
// followed by the BOS inside them (not a boundary by OLMo's rule).
std::vector<Doc> RandomDocs(std::mt19937_64& rng, std::int64_t hi, bool with_bos, bool tail) {
  const std::int64_t eos = hi - 1, bos = hi - 2;
  std::vector<Doc> docs;
  const int n = static_cast<int>(rng() % 20) + 1;
  for (int i = 0; i < n; ++i) {
    Doc d;
    if (with_bos) d.push_back(bos);
    const int len = static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) {
      d.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - 2)));
    }
    if (with_bos && len >= 2 && rng() % 2) d[1] = eos;  // EOS then a non-BOS: inside
    if (!(tail && i == n - 1)) d.push_back(eos);
    docs.push_back(d);
  }
  return docs;
}

OlmoOptions Scan(TokenDType type, std::int64_t eos, std::optional<std::int64_t> bos = {}) {
  OlmoOptions o;
  o.token_dtype = type;
  o.eos_token_id = eos;
  o.bos_token_id = bos;
  return o;
}

TEST(OlmoSourceTest, EosScanGivesTheDocumentsOfEveryDtypeWithAndWithoutBos) {
  const fs::path dir = loader_testing::TempDir("olmo", "scan");
  std::mt19937_64 rng(5);
  for (TokenDType type : kOlmoTypes) {
    const std::int64_t hi = type == TokenDType::kUint8    ? 256
                            : type == TokenDType::kUint16 ? 65536
                                                          : std::int64_t{1} << 30;
    for (bool with_bos : {false, true}) {
      for (bool tail : {false, true}) {
        const std::int64_t eos = hi - 1;
        const std::optional<std::int64_t> bos =
            with_bos ? std::optional<std::int64_t>(hi - 2) : std::nullopt;
        const std::vector<Doc> docs = RandomDocs(rng, hi, with_bos, tail);
        const fs::path path = dir / "part-0-00000.npy";
        WriteBytes(path, Encode(docs, type));
        fs::remove(OlmoCachePath(path.string(), Scan(type, eos, bos)));
        auto source = TokenSource::OpenOlmo(path.string(), Scan(type, eos, bos));
        SCOPED_TRACE(std::string(TokenDTypeName(type)) + (with_bos ? " bos" : "") +
                     (tail ? " tail" : ""));
        ExpectDocuments(*source, docs);
      }
    }
  }
  fs::remove_all(dir);
}

TEST(OlmoSourceTest, EosNotFollowedByBosIsInsideADocument) {
  // OLMo-core's rule with a BOS: [B a E c E | B d E] -> boundaries after the
  // second E (a BOS follows) and at the file's last token.
  const std::vector<std::int64_t> tokens = {1, 5, 0, 6, 0, 1, 7, 0};
  const auto offsets =
      ScanOlmoDocuments(reinterpret_cast<const char*>(Encode({tokens}, TokenDType::kUint64).data()),
                        TokenDType::kUint64, 8, 0, 1);
  EXPECT_EQ(offsets, (std::vector<std::int64_t>{0, 5, 8}));
  const std::string bytes = Encode({tokens}, TokenDType::kUint16);
  EXPECT_EQ(ScanOlmoDocuments(bytes.data(), TokenDType::kUint16, 8, 0, std::nullopt),
            (std::vector<std::int64_t>{0, 3, 5, 8}));
  EXPECT_EQ(ScanOlmoDocuments(bytes.data(), TokenDType::kUint16, 0, 0, 1),
            (std::vector<std::int64_t>{0}));
  // Tokens after the last EOS are one more document (the file's end ends one).
  EXPECT_EQ(ScanOlmoDocuments(bytes.data(), TokenDType::kUint16, 7, 0, std::nullopt),
            (std::vector<std::int64_t>{0, 3, 5, 7}));
}

TEST(OlmoSourceTest, MetadataCsvGzGivesTheDocumentsAndTheDtypeComesFromTheVocabulary) {
  const fs::path dir = loader_testing::TempDir("olmo", "csv");
  const std::vector<Doc> docs = {{3, 4, 5}, {}, {7}, {8, 9, 10, 11}};
  for (const auto& [vocab, type] :
       std::vector<std::pair<Index, TokenDType>>{{256, TokenDType::kUint8},
                                                 {257, TokenDType::kUint16},
                                                 {65536, TokenDType::kUint16},
                                                 {100278, TokenDType::kUint32},
                                                 {(Index{1} << 32) + 1, TokenDType::kUint64}}) {
    OlmoOptions o;
    o.vocab_size = vocab;
    EXPECT_EQ(OlmoTokenDType(o), type) << vocab;
    WriteBytes(dir / "a.npy", Encode(docs, type));
    WriteGzip(dir / "a.csv.gz", Rows(docs));
    std::string origin;
    auto source = TokenSource::OpenOlmo((dir / "a.npy").string(), o, &origin);
    ExpectDocuments(*source, docs);
    EXPECT_EQ(origin, "metadata " + (dir / "a.csv.gz").string());
  }
  // Detected from the files: a .npy without the NumPy magic.
  EXPECT_EQ(DetectSourceFormat((dir / "a.npy").string()), SourceFormat::kOlmo);
  OpenSourceOptions open;
  open.olmo.token_dtype = TokenDType::kUint64;
  ExpectDocuments(*OpenSource({(dir / "a.npy").string()}, open), docs);
  fs::remove_all(dir);
}

TEST(OlmoSourceTest, ScanCacheIsBuiltReusedAndRebuiltWhenTheDataChanges) {
  const fs::path dir = loader_testing::TempDir("olmo", "cache");
  const fs::path path = dir / "a.npy";
  std::vector<Doc> docs = {{5, 6, 0}, {7, 0}, {8, 9, 9, 0}};
  WriteBytes(path, Encode(docs, TokenDType::kUint16));
  const OlmoOptions o = Scan(TokenDType::kUint16, 0);
  const std::string cache = OlmoCachePath(path.string(), o);
  std::string origin;
  ExpectDocuments(*TokenSource::OpenOlmo(path.string(), o, &origin), docs);
  EXPECT_EQ(origin, "cache " + cache + " (built)");
  auto reused = TokenSource::OpenOlmo(path.string(), o, &origin);
  ExpectDocuments(*reused, docs);
  EXPECT_EQ(origin, "cache " + cache + " (reused)");
  EXPECT_NE(reused->ContiguousOffsets(), nullptr);  // mapped in place, aligned

  // The data rewritten with other boundaries, same size: rebuilt, and why.
  docs = {{5, 0}, {6, 7, 0}, {8, 9, 9, 0}};
  WriteBytes(path, Encode(docs, TokenDType::kUint16));
  struct stat st {};
  ASSERT_EQ(::stat(cache.c_str(), &st), 0);
  ExpectDocuments(*TokenSource::OpenOlmo(path.string(), o, &origin), docs);
  EXPECT_NE(origin.find("(rebuilt: stale"), std::string::npos) << origin;

  // A cache of other data given the data's mtime (cp -p of a cache): the
  // sampled bytes tell.
  const std::string good = [&] {
    std::ifstream in(cache, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::vector<Doc> other = {{5, 0}, {6, 7, 0}, {8, 9, 1, 0}};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  WriteBytes(path, Encode(other, TokenDType::kUint16));
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  ExpectDocuments(*TokenSource::OpenOlmo(path.string(), o, &origin), other);
  EXPECT_NE(origin.find("rebuilt: stale: the data's sampled bytes differ"), std::string::npos)
      << origin;

  // A corrupt cache (one offset byte flipped) is rebuilt.
  std::string bad = good;
  bad[kOlmoCacheHeaderBytes + 8] ^= 1;
  WriteBytes(cache, bad);
  ExpectDocuments(*TokenSource::OpenOlmo(path.string(), o, &origin), other);
  EXPECT_NE(origin.find("rebuilt: checksum mismatch"), std::string::npos) << origin;
  // Truncated, garbage, empty: rebuilt, never read past its end.
  for (const std::string& junk : {good.substr(0, 90), std::string("hello"), std::string()}) {
    WriteBytes(cache, junk);
    ExpectDocuments(*TokenSource::OpenOlmo(path.string(), o, &origin), other);
    EXPECT_NE(origin.find("(rebuilt: "), std::string::npos) << origin;
  }
  // Another EOS id is another cache file; write_cache off writes nothing.
  OlmoOptions eos9 = Scan(TokenDType::kUint16, 9);
  eos9.write_cache = false;
  EXPECT_EQ(TokenSource::OpenOlmo(path.string(), eos9, &origin)->num_documents(), 2);
  EXPECT_EQ(origin, "scan (cache not written: write_cache is off)");
  EXPECT_FALSE(fs::exists(OlmoCachePath(path.string(), eos9)));
  fs::remove_all(dir);
}

TEST(OlmoSourceTest, GlobsAndDirectoriesAreTheirFilesInByteOrder) {
  const fs::path dir = loader_testing::TempDir("olmo", "glob");
  std::vector<Doc> all;
  // Written out of order; names sort as part-0-00000 < part-0-00001 < part-1-00000.
  const std::vector<std::string> names = {"part-1-00000.npy", "part-0-00001.npy",
                                          "part-0-00000.npy"};
  std::map<std::string, std::vector<Doc>> by_name;
  for (std::size_t k = 0; k < names.size(); ++k) {
    const std::vector<Doc> docs = {{static_cast<std::int64_t>(k) + 5, 0}, {9, 9, 0}};
    WriteBytes(dir / names[k], Encode(docs, TokenDType::kUint32));
    by_name[names[k]] = docs;
  }
  for (const auto& [name, docs] : by_name) all.insert(all.end(), docs.begin(), docs.end());
  OpenSourceOptions o;
  o.olmo = Scan(TokenDType::kUint32, 0);
  auto globbed = OpenSource({(dir / "part-*.npy").string()}, o);
  ExpectDocuments(*globbed, all);
  EXPECT_EQ(globbed->PartName(0), (dir / "part-0-00000.npy").string());
  o.format = SourceFormat::kOlmo;
  ExpectDocuments(*OpenSource({dir.string()}, o), all);  // the folder: its *.npy files
  // A pattern beside a path: in the order given, each pattern's matches in place.
  auto mixed =
      OpenSource({(dir / "part-1-*.npy").string(), (dir / "part-0-00000.npy").string()}, o);
  std::vector<Doc> want = by_name["part-1-00000.npy"];
  want.insert(want.end(), by_name["part-0-00000.npy"].begin(), by_name["part-0-00000.npy"].end());
  ExpectDocuments(*mixed, want);
  const std::string e = ErrorOf([&] { (void)OpenSource({(dir / "nothing-*.npy").string()}, o); });
  EXPECT_NE(e.find("path: '" + (dir / "nothing-*.npy").string() + "': the pattern matches no file"),
            std::string::npos)
      << e;
  fs::remove_all(dir);
}

TEST(OlmoSourceTest, AForgedCacheSealedForTheDataIsCheckedAgainstItsTokens) {
  // A writer who recomputes the seal (size, mtime, sample hash, checksum):
  // the offsets themselves must still agree with the data.
  const fs::path dir = loader_testing::TempDir("olmo", "forged");
  const fs::path path = dir / "a.npy";
  const std::vector<Doc> docs = {{5, 6, 0}, {7, 0}, {8, 9, 9, 0}};
  WriteBytes(path, Encode(docs, TokenDType::kUint16));
  const OlmoOptions o = Scan(TokenDType::kUint16, 0);
  const std::string cache = OlmoCachePath(path.string(), o);
  (void)TokenSource::OpenOlmo(path.string(), o);
  std::ifstream in(cache, std::ios::binary);
  const std::string good(std::istreambuf_iterator<char>(in), {});
  std::string origin;
  WriteBytes(cache, ResealOlmoCache(good, path.string()));
  ExpectDocuments(*TokenSource::OpenOlmo(path.string(), o, &origin), docs);
  EXPECT_EQ(origin, "cache " + cache + " (reused)");  // the seal alone is sound
  struct Forgery {
    std::int64_t offset1, offset3;
    const char* words;
  };
  for (const Forgery& f : {Forgery{2, 9, "stale: offsets[1] = 2 is not after an EOS"},
                           Forgery{3, 8, "its offsets do not run from 0 to the token count 9"},
                           Forgery{7, 9, "offsets[2] decreases"}}) {
    std::string bad = good;
    std::memcpy(bad.data() + kOlmoCacheHeaderBytes + 8, &f.offset1, 8);
    std::memcpy(bad.data() + kOlmoCacheHeaderBytes + 24, &f.offset3, 8);
    WriteBytes(cache, ResealOlmoCache(bad, path.string()));
    ExpectDocuments(*TokenSource::OpenOlmo(path.string(), o, &origin), docs);
    EXPECT_NE(origin.find(std::string("(rebuilt: ") + f.words), std::string::npos) << origin;
  }
  fs::remove_all(dir);
}

TEST(OlmoSourceTest, CacheOfAnotherBosIsRebuiltNotTrusted) {
  const fs::path dir = loader_testing::TempDir("olmo", "cachebos");
  const fs::path path = dir / "a.npy";
  WriteBytes(path, Encode({{1, 5, 0, 6, 0}, {1, 7, 0}}, TokenDType::kUint32));
  const OlmoOptions plain = Scan(TokenDType::kUint32, 0), bos = Scan(TokenDType::kUint32, 0, 1);
  (void)TokenSource::OpenOlmo(path.string(), plain);
  // A cache made for EOS only, copied to the BOS cache's name.
  fs::copy_file(OlmoCachePath(path.string(), plain), OlmoCachePath(path.string(), bos),
                fs::copy_options::overwrite_existing);
  std::string origin;
  ExpectDocuments(*TokenSource::OpenOlmo(path.string(), bos, &origin),
                  {{1, 5, 0, 6, 0}, {1, 7, 0}});
  EXPECT_NE(origin.find("rebuilt: built for eos 0, bos -1"), std::string::npos) << origin;
  fs::remove_all(dir);
}

// A hostile input: the files it writes and the words of its one-line error.
struct Hostile {
  const char* name;
  std::string data;
  std::optional<std::string> csv;  // gzip-compressed unless raw_csv
  OlmoOptions options;
  std::string expected;
  bool raw_csv = false;
};

TEST(OlmoSourceTest, HostileFilesAreRefusedNamingFileAndField) {
  const fs::path dir = loader_testing::TempDir("olmo", "hostile");
  const std::string u16 = Encode({{3, 4, 5}, {7, 8}}, TokenDType::kUint16);
  OlmoOptions csv16;
  csv16.token_dtype = TokenDType::kUint16;
  std::string gz_ok;
  {
    WriteGzip(dir / "ok.gz", "0,3\n3,5\n");
    std::ifstream in(dir / "ok.gz", std::ios::binary);
    gz_ok.assign(std::istreambuf_iterator<char>(in), {});
  }
  OlmoOptions no_dtype;
  OlmoOptions i32 = csv16;
  i32.token_dtype = TokenDType::kInt32;
  OlmoOptions bos_only = csv16;
  bos_only.bos_token_id = 1;
  const std::vector<Hostile> cases = {
      {"truncated tokens", u16.substr(0, 9), "0,3\n3,5\n", csv16,
       "a.npy: size: 9 bytes is not a whole number of uint16"},
      {"wrong dtype", u16, "0,3\n3,5\n", Scan(TokenDType::kUint32, 0), ""},
      {"no dtype", u16, "0,3\n3,5\n", no_dtype, "token_dtype: an OLMo token file has no header"},
      {"signed dtype", u16, "0,3\n3,5\n", i32, "token_dtype: 'int32' is not an OLMo token dtype"},
      {"numpy magic", std::string("\x93NUMPY\x01\x00", 8) + u16, "0,3\n3,5\n", csv16,
       "a.npy: magic: starts with the NumPy magic"},
      {"eos outside dtype",
       u16,
       {},
       Scan(TokenDType::kUint16, 70000),
       "eos_token_id: 70000 is outside the uint16 token ids"},
      {"negative bos", u16, {}, Scan(TokenDType::kUint16, 5, -1), "bos_token_id: -1 is outside"},
      {"bos without eos", u16, "0,3\n3,5\n", bos_only, "bos_token_id: 1 needs eos_token_id"},
      {"no metadata",
       u16,
       {},
       csv16,
       "eos_token_id: " + (dir / "a.npy").string() + ": no metadata file " +
           (dir / "a.csv.gz").string()},
      {"csv not gzip", u16, "0,3\n3,5\n", csv16, "a.csv.gz: not gzip-compressed", true},
      {"csv truncated gzip", u16, gz_ok.substr(0, gz_ok.size() - 6), csv16, "a.csv.gz: ", true},
      {"row start not 0", u16, "1,3\n3,5\n", csv16, "a.csv.gz: row 1: start 1, expected 0"},
      {"rows not tiling", u16, "0,3\n4,5\n", csv16, "a.csv.gz: row 2: start 4, expected 3"},
      {"end before start", u16, "0,3\n3,2\n", csv16, "a.csv.gz: row 2: end 2 < start 3"},
      {"end past tokens", u16, "0,3\n3,9\n", csv16, "a.csv.gz: row 2: end 9 is past the end of"},
      {"rows end early", u16, "0,3\n", csv16, "a.csv.gz: 1 rows end at token 3 but"},
      {"one field", u16, "0,3\n5\n", csv16, "a.csv.gz: row 2: '5' has fewer than two fields"},
      {"not a number", u16, "0,3\n3,x5\n", csv16,
       "a.csv.gz: row 2: end 'x5' is not a non-negative integer"},
      {"negative", u16, "-1,3\n3,5\n", csv16, "a.csv.gz: row 1: start '-1' is not a non-negative"},
      {"blank row", u16, "0,3\n\n3,5\n", csv16, "a.csv.gz: row 2: '' has fewer than two fields"},
      {"empty csv", u16, "", csv16, "a.csv.gz: 0 rows end at token 0 but"},
      {"uint32 id past int32", Encode({{1, std::int64_t{1} << 31}}, TokenDType::kUint32), "0,2\n",
       [] {
         OlmoOptions o;
         o.token_dtype = TokenDType::kUint32;
         return o;
       }(),
       "tokens: " + (dir / "a.npy").string() + ": token 1 is 2147483648"},
  };
  for (const Hostile& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(dir / "x");
    fs::create_directories(dir / "x");
    const fs::path data = dir / "x" / "a.npy";
    WriteBytes(data, c.data);
    if (c.csv) {
      if (c.raw_csv) {
        WriteBytes(dir / "x" / "a.csv.gz", *c.csv);
      } else {
        WriteGzip(dir / "x" / "a.csv.gz", *c.csv);
      }
    }
    const std::string e = ErrorOf([&] { (void)TokenSource::OpenOlmo(data.string(), c.options); });
    if (std::string(c.name) == "wrong dtype") {
      // 10 bytes as uint32: not whole tokens.
      EXPECT_NE(e.find("size: 10 bytes is not a whole number of uint32 tokens"), std::string::npos)
          << e;
      continue;
    }
    std::string want = c.expected;
    const std::string from = (dir / "a.").string(), to = (dir / "x" / "a.").string();
    for (std::size_t at = want.find(from); at != std::string::npos; at = want.find(from, at)) {
      want.replace(at, from.size(), to);
      at += to.size();
    }
    EXPECT_NE(e.find(want), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardkit
