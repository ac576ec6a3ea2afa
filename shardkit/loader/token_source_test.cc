#include "shardkit/loader/token_source.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/mixture_loader.h"
#include "shardkit/loader/npy.h"
#include "shardkit/loader/olmo_source.h"
#include "shardkit/loader/token_writer.h"

namespace shardkit {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) { return loader_testing::TempDir("token_source", name); }

using loader_testing::WriteNpy;

template <typename T>
void WriteRaw(const fs::path& path, const std::vector<T>& values) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(values.data()),
             static_cast<std::streamsize>(values.size() * sizeof(T)));
}

using loader_testing::ErrorOf;

TEST(TokenSourceTest, ReadsEveryDocumentOfEveryDtypeInPlace) {
  fs::path dir = TempDir("dtypes");
  const std::vector<std::int64_t> offsets = {0, 3, 3, 7, 10};
  std::vector<std::uint16_t> u16(10);
  std::vector<std::int32_t> i32(10);
  std::vector<std::uint32_t> u32(10);
  for (int i = 0; i < 10; ++i)
    u16[i] = static_cast<std::uint16_t>(60000 + i), i32[i] = -i, u32[i] = 100000u + i;
  WriteNpy(dir / "u16.npy", "<u2", u16);
  WriteNpy(dir / "i32.npy", "<i4", i32);
  WriteRaw(dir / "u32.bin", u32);
  WriteNpy(dir / "off.npy", "<i8", offsets);
  auto a = TokenSource::Open(dir / "u16.npy", dir / "off.npy");
  auto b = TokenSource::Open(dir / "i32.npy", dir / "off.npy");
  auto c = TokenSource::Open(dir / "u32.bin", dir / "off.npy", SourceOptions{TokenDType::kUint32});
  for (auto* s : {a.get(), b.get(), c.get()}) {
    ASSERT_EQ(s->num_documents(), 4);
    EXPECT_EQ(s->num_tokens(), 10);
    EXPECT_EQ(s->DocumentLength(0), 3);
    EXPECT_EQ(s->DocumentLength(1), 0);
    EXPECT_EQ(s->DocumentLength(2), 4);
  }
  std::int64_t out[4];
  a->Copy(2, 1, 3, out);
  EXPECT_EQ(std::vector<std::int64_t>(out, out + 3),
            (std::vector<std::int64_t>{60004, 60005, 60006}));
  b->Copy(3, 0, 3, out);
  EXPECT_EQ(std::vector<std::int64_t>(out, out + 3), (std::vector<std::int64_t>{-7, -8, -9}));
  c->Copy(0, 0, 2, out);
  EXPECT_EQ(std::vector<std::int64_t>(out, out + 2), (std::vector<std::int64_t>{100000, 100001}));
  std::int32_t small[2];
  a->Copy(0, 1, 2, small);
  EXPECT_EQ(small[0], 60001);
  fs::remove_all(dir);
}

TEST(TokenSourceTest, ContiguousOffsetsOnlyForOnePartOfEightByteOffsets) {
  fs::path dir = TempDir("contiguous");
  const std::vector<std::int32_t> tokens(10, 7);
  const std::vector<std::int64_t> offsets = {0, 3, 3, 7, 10};
  WriteNpy(dir / "t.npy", "<i4", tokens);
  WriteNpy(dir / "o8.npy", "<i8", offsets);
  WriteNpy(dir / "o4.npy", "<i4", std::vector<std::int32_t>{0, 3, 3, 7, 10});
  for (const auto& s :
       {TokenSource::Open(dir / "t.npy", dir / "o8.npy"),
        TokenSource::FromMemory(tokens.data(), TokenDType::kInt32, 10, offsets.data(), 5)}) {
    const std::int64_t* o = s->ContiguousOffsets();
    ASSERT_NE(o, nullptr);
    for (Index d = 0; d < s->num_documents(); ++d) EXPECT_EQ(o[d + 1] - o[d], s->DocumentLength(d));
  }
  // Narrower offsets, several parts, a gathered view: no such array.
  EXPECT_EQ(TokenSource::Open(dir / "t.npy", dir / "o4.npy")->ContiguousOffsets(), nullptr);
  fs::create_directories(dir / "d");
  for (const char* stem : {"a", "b"}) {
    WriteNpy(dir / "d" / (std::string(stem) + ".tokens.npy"), "<i4", tokens);
    WriteNpy(dir / "d" / (std::string(stem) + ".offsets.npy"), "<i8", offsets);
  }
  auto two = TokenSource::OpenDirectory(dir / "d");
  ASSERT_EQ(two->num_parts(), 2);
  EXPECT_EQ(two->ContiguousOffsets(), nullptr);
  auto one = TokenSource::Open(dir / "t.npy", dir / "o8.npy");
  EXPECT_EQ(TokenSource::Gather({one}, {3, 0}, 1)->ContiguousOffsets(), nullptr);
  fs::remove_all(dir);
}

TEST(TokenSourceTest, DirectoryNumbersDocumentsPartByPartInStemOrder) {
  fs::path dir = TempDir("directory");
  std::mt19937_64 rng(3);
  std::vector<std::vector<std::int32_t>> docs;  // oracle: every document's tokens
  for (int part = 0; part < 3; ++part) {
    std::vector<std::int32_t> tokens;
    std::vector<std::int32_t> offsets = {0};
    const int n = 1 + static_cast<int>(rng() % 5);
    for (int d = 0; d < n; ++d) {
      std::vector<std::int32_t> doc(rng() % 6);
      for (auto& t : doc) t = static_cast<std::int32_t>(rng() % 50000);
      tokens.insert(tokens.end(), doc.begin(), doc.end());
      offsets.push_back(static_cast<std::int32_t>(tokens.size()));
      docs.push_back(doc);
    }
    const std::string stem = "part-" + std::to_string(part);
    WriteNpy(dir / (stem + ".tokens.npy"), "<i4", tokens);
    WriteNpy(dir / (stem + ".offsets.npy"), "<i4", offsets);
  }
  auto s = TokenSource::OpenDirectory(dir);
  ASSERT_EQ(s->num_parts(), 3);
  ASSERT_EQ(s->num_documents(), static_cast<Index>(docs.size()));
  for (Index d = 0; d < s->num_documents(); ++d) {
    ASSERT_EQ(s->DocumentLength(d), static_cast<Index>(docs[d].size()));
    std::vector<std::int32_t> got(docs[d].size());
    s->Copy(d, 0, static_cast<Index>(got.size()), got.data());
    EXPECT_EQ(got, docs[d]) << d;
  }
  EXPECT_NE(s->PartName(1).find("part-1.tokens.npy"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TokenSourceTest, CorruptOrTruncatedFilesAreClearErrorsNamingTheFile) {
  fs::path dir = TempDir("corrupt");
  const std::vector<std::int32_t> tokens = {1, 2, 3, 4, 5, 6};
  WriteNpy(dir / "t.npy", "<i4", tokens);
  WriteNpy(dir / "short.npy", "<i4", tokens, 3);  // truncated data
  WriteNpy(dir / "o.npy", "<i8", std::vector<std::int64_t>{0, 2, 6});
  WriteNpy(dir / "down.npy", "<i8", std::vector<std::int64_t>{0, 4, 2, 6});
  WriteNpy(dir / "past.npy", "<i8", std::vector<std::int64_t>{0, 2, 9});
  WriteNpy(dir / "neg.npy", "<i8", std::vector<std::int64_t>{-1, 2});
  WriteNpy(dir / "empty.npy", "<i8", std::vector<std::int64_t>{});
  WriteNpy(dir / "float.npy", "<f4", std::vector<float>{1, 2});
  std::ofstream(dir / "garbage.npy") << "definitely not numpy";
  WriteRaw(dir / "odd.bin", std::vector<std::uint8_t>{1, 2, 3, 4, 5});
  auto open = [&](const char* t, const char* o) {
    return ErrorOf([&] { (void)TokenSource::Open(dir / t, dir / o); });
  };
  auto expect = [&](const std::string& error, const std::string& prefix, const char* file,
                    const std::string& what) {
    EXPECT_EQ(error.rfind(prefix + ": ", 0), 0u) << error;
    EXPECT_NE(error.find(file), std::string::npos) << error;
    EXPECT_NE(error.find(what), std::string::npos) << error;
  };
  EXPECT_EQ(open("t.npy", "o.npy"), "no error");
  expect(open("short.npy", "o.npy"), "tokens", "short.npy", "truncated data");
  expect(open("garbage.npy", "o.npy"), "tokens", "garbage.npy", "bad magic");
  expect(open("float.npy", "o.npy"), "tokens", "float.npy", "not a token type");
  expect(open("odd.bin", "o.npy"), "tokens", "odd.bin", "whole number of tokens");
  expect(open("missing.npy", "o.npy"), "tokens", "missing.npy", "cannot open");
  expect(open("t.npy", "down.npy"), "offsets", "down.npy", "not non-decreasing");
  expect(open("t.npy", "past.npy"), "offsets", "past.npy", "past the end");
  expect(open("t.npy", "neg.npy"), "offsets", "neg.npy", "negative");
  expect(open("t.npy", "empty.npy"), "offsets", "empty.npy", "empty");
  expect(open("t.npy", "float.npy"), "offsets", "float.npy", "integer");
  expect(open("t.npy", "odd.bin"), "offsets", "odd.bin", "whole number of offsets");
  // A directory with a tokens file but no offsets file.
  fs::create_directories(dir / "d");
  WriteNpy(dir / "d" / "a.tokens.npy", "<i4", tokens);
  expect(ErrorOf([&] { (void)TokenSource::OpenDirectory(dir / "d"); }), "directory", "a.tokens.npy",
         "no offsets file");
  expect(ErrorOf([&] { (void)TokenSource::OpenDirectory(dir / "nothere"); }), "directory",
         "nothere", "not a directory");
  fs::remove_all(dir);
}

TEST(TokenSourceTest, MemoryViewsAreValidatedLikeFiles) {
  const std::vector<std::int32_t> tokens = {1, 2, 3};
  const std::vector<std::int64_t> bad = {0, 5};
  EXPECT_NE(ErrorOf([&] {
              (void)TokenSource::FromMemory(tokens.data(), TokenDType::kInt32, 3, bad.data(), 2);
            }).find("offsets: offsets[1] = 5 is outside [0, 3]"),
            std::string::npos);
  const std::vector<std::int64_t> good = {0, 1, 3};
  auto s = TokenSource::FromMemory(tokens.data(), TokenDType::kInt32, 3, good.data(), 3);
  EXPECT_EQ(s->DocumentLength(1), 2);
}

TEST(TokenSourceTest, Uint32IdsOfTwoToThe31OrMoreAreRefusedAtOpen) {
  std::vector<std::uint32_t> tokens = {1, 2, 0x7fffffffu, 4};
  const std::vector<std::int64_t> offsets = {0, 2, 4};
  auto s = TokenSource::FromMemory(tokens.data(), TokenDType::kUint32, 4, offsets.data(), 3);
  std::int32_t out[2];
  s->Copy(1, 0, 2, out);
  EXPECT_EQ(out[0], 0x7fffffff);
  tokens[3] = 0x80000000u;
  EXPECT_NE(ErrorOf([&] {
              (void)TokenSource::FromMemory(tokens.data(), TokenDType::kUint32, 4, offsets.data(),
                                            3);
            }).find("tokens: <memory>: token 3 is 2147483648; uint32 ids must be below 2^31"),
            std::string::npos);
}

TEST(TokenSourceTest, RegressionFifoAsTokensOrInDirectoryIsRefusedWithoutBlocking) {
  ::alarm(30);  // a blocking open() would hang: SIGALRM turns it into a failure
  fs::path dir = TempDir("fifo");
  WriteNpy(dir / "o.npy", "<i8", std::vector<std::int64_t>{0, 2});
  ASSERT_EQ(::mkfifo((dir / "fifo.npy").c_str(), 0600), 0);
  EXPECT_EQ(ErrorOf([&] { (void)TokenSource::Open(dir / "fifo.npy", dir / "o.npy"); }),
            "tokens: '" + (dir / "fifo.npy").string() +
                "' is a FIFO (named pipe); expected a regular file");
  EXPECT_EQ(ErrorOf([&] { (void)TokenSource::Open("/dev/null", dir / "o.npy"); }),
            "tokens: '/dev/null' is a character device; expected a regular file");
  fs::create_directories(dir / "d");
  ASSERT_EQ(::mkfifo((dir / "d" / "a.tokens.npy").c_str(), 0600), 0);
  WriteNpy(dir / "d" / "a.offsets.npy", "<i8", std::vector<std::int64_t>{0, 2});
  EXPECT_NE(ErrorOf([&] { (void)TokenSource::OpenDirectory(dir / "d"); }).find("is a FIFO"),
            std::string::npos);
  ::alarm(0);
  fs::remove_all(dir);
}

TEST(TokenSourceTest, RegressionTruncatedRawOffsetsAreRefused) {
  // Raw int64 offsets cut at a multiple of 8 bytes parse as fewer documents:
  // the last offset no longer reaches the end of the tokens.
  fs::path dir = TempDir("raw_offsets");
  WriteNpy(dir / "t.npy", "<i4", std::vector<std::int32_t>(12, 1));
  WriteRaw(dir / "o.bin", std::vector<std::int64_t>{0, 3, 6, 9, 12});
  WriteRaw(dir / "cut.bin", std::vector<std::int64_t>{0, 3, 6});
  EXPECT_EQ(TokenSource::Open(dir / "t.npy", dir / "o.bin")->num_documents(), 4);
  const std::string e = ErrorOf([&] { (void)TokenSource::Open(dir / "t.npy", dir / "cut.bin"); });
  EXPECT_EQ(e.rfind("offsets: " + (dir / "cut.bin").string() +
                        ": last offset 6 leaves tokens [6, 12) of ",
                    0),
            0u)
      << e;
  fs::remove_all(dir);
}

TEST(TokenSourceTest, RegressionCallerOffsetsChangedAfterConstructionAreNotRead) {
  // The offsets were validated once; a later write to the caller's array
  // (off[1] = 250) must not make collation read past the tokens.
  const std::vector<std::int32_t> tokens = {1, 2, 3, 4};
  std::vector<std::int64_t> offsets = {0, 2, 4};
  auto s = TokenSource::FromMemory(tokens.data(), TokenDType::kInt32, 4, offsets.data(), 3);
  offsets[1] = 250;
  EXPECT_EQ(s->DocumentLength(0), 2);
  EXPECT_EQ(s->DocumentLength(1), 2);
  std::int32_t out[2];
  s->Copy(1, 0, 2, out);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 4);
}

TEST(TokenSourceTest, LengthsDigestIsEveryLengthWhateverHoldsTheOffsets) {
  // Oracle: the lengths. One source's documents as int64, int32 and uint16
  // .npy offsets, raw int64 offsets and memory: one digest (each computed in
  // its open pass); one document boundary moved (the totals kept) changes
  // it, and so does another split into parts.
  fs::path dir = TempDir("digest");
  std::mt19937_64 rng(3);
  std::vector<std::int64_t> offsets{0};
  for (int d = 0; d < 5000; ++d) offsets.push_back(offsets.back() + static_cast<Index>(rng() % 6));
  const Index n = offsets.back();
  const std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n), 7);
  WriteNpy(dir / "t.npy", "<u2", tokens);
  WriteNpy(dir / "o8.npy", "<i8", offsets);
  WriteNpy(dir / "o4.npy", "<i4", std::vector<std::int32_t>(offsets.begin(), offsets.end()));
  WriteNpy(dir / "o2.npy", "<u2", std::vector<std::uint16_t>(offsets.begin(), offsets.end()));
  WriteRaw(dir / "o8.bin", offsets);
  const auto a = TokenSource::Open(dir / "t.npy", dir / "o8.npy");
  const std::uint64_t digest = a->LengthsDigest();
  EXPECT_NE(digest, 0u);
  EXPECT_EQ(TokenSource::Open(dir / "t.npy", dir / "o4.npy")->LengthsDigest(), digest);
  EXPECT_EQ(TokenSource::Open(dir / "t.npy", dir / "o2.npy")->LengthsDigest(), digest);
  EXPECT_EQ(TokenSource::Open(dir / "t.npy", dir / "o8.bin")->LengthsDigest(), digest);
  const auto memory = TokenSource::FromMemory(tokens.data(), TokenDType::kUint16, n, offsets.data(),
                                              static_cast<Index>(offsets.size()));
  EXPECT_EQ(memory->LengthsDigest(), digest);
  EXPECT_EQ(TokenSource::Concat({memory})->LengthsDigest(), digest);
  // Its pages released (a sparse pass's), the source reads as before.
  a->ReleasePages();
  for (Index d = 0; d < a->num_documents(); d += 7) {
    ASSERT_EQ(a->DocumentLength(d),
              offsets[static_cast<std::size_t>(d) + 1] - offsets[static_cast<std::size_t>(d)]);
    std::int32_t t[8] = {};
    a->Copy(d, 0, a->DocumentLength(d), t);
    for (Index k = 0; k < a->DocumentLength(d); ++k) ASSERT_EQ(t[k], 7);
  }
  std::vector<std::int64_t> moved = offsets;
  moved[2502] = moved[2501];  // document 2501 empty, 2502 longer: the same total
  ASSERT_NE(moved[2502], offsets[2502]);
  EXPECT_NE(TokenSource::FromMemory(tokens.data(), TokenDType::kUint16, n, moved.data(),
                                    static_cast<Index>(moved.size()))
                ->LengthsDigest(),
            digest);
  const std::vector<std::int64_t> head(offsets.begin(), offsets.begin() + 2001);
  std::vector<std::int64_t> tail;
  for (std::size_t i = 2000; i < offsets.size(); ++i) tail.push_back(offsets[i] - offsets[2000]);
  const auto parts = TokenSource::Concat(
      {TokenSource::FromMemory(tokens.data(), TokenDType::kUint16, head.back(), head.data(), 2001),
       TokenSource::FromMemory(tokens.data(), TokenDType::kUint16, tail.back(), tail.data(),
                               static_cast<Index>(tail.size()))});
  ASSERT_EQ(parts->num_documents(), a->num_documents());
  EXPECT_NE(parts->LengthsDigest(), digest);
  fs::remove_all(dir);
}

TEST(TokenSourceTest, CorruptOffsetsDeepInALargeFileAreRefusedAtOpenNamingTheEntry) {
  // 3 Mi documents of one token: the open pass releases its pages every
  // 2^20 offsets, and an error past those points still names its entry (and
  // nothing opens, so no batch is ever read from such a file).
  fs::path dir = TempDir("deep");
  const Index n = Index{3} << 20;
  WriteNpy(dir / "t.npy", "<u2", std::vector<std::uint16_t>(static_cast<std::size_t>(n), 1));
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(n) + 1);
  for (Index i = 0; i <= n; ++i) offsets[static_cast<std::size_t>(i)] = i;
  WriteNpy(dir / "good.npy", "<i8", offsets);
  EXPECT_EQ(ErrorOf([&] { (void)TokenSource::Open(dir / "t.npy", dir / "good.npy"); }), "no error");
  auto refused = [&](std::vector<std::int64_t> bad, const std::string& descr) {
    if (descr == "<i4") {
      WriteNpy(dir / "bad.npy", descr, std::vector<std::int32_t>(bad.begin(), bad.end()));
    } else {
      WriteNpy(dir / "bad.npy", descr, bad);
    }
    return ErrorOf([&] { (void)TokenSource::Open(dir / "t.npy", dir / "bad.npy"); });
  };
  const std::size_t deep = 2500001;  // past two release points
  std::vector<std::int64_t> down = offsets;
  down[deep] = down[deep - 1] - 1;
  EXPECT_EQ(refused(down, "<i8"), "offsets: " + (dir / "bad.npy").string() +
                                      ": offsets[2500001] = 2499999 < offsets[2500000] = "
                                      "2500000 (not non-decreasing)");
  EXPECT_NE(refused(down, "<i4").find("offsets[2500001] = 2499999 < offsets[2500000]"),
            std::string::npos);
  // An offset past the token file in the middle: the next one goes down.
  std::vector<std::int64_t> past = offsets;
  past[deep] = n + 5;
  EXPECT_NE(refused(past, "<i8")
                .find("offsets[2500002] = 2500002 < offsets[2500001] = " + std::to_string(n + 5)),
            std::string::npos);
  // Non-decreasing to the end, the last offset past the token file.
  std::vector<std::int64_t> end = offsets;
  end.back() = n + 1;
  EXPECT_NE(refused(end, "<i8").find("last offset " + std::to_string(n + 1) + " is past the end"),
            std::string::npos);
  // The same rules for memory (no pages released: the copy is the source's).
  const std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n), 1);
  EXPECT_NE(ErrorOf([&] {
              (void)TokenSource::FromMemory(tokens.data(), TokenDType::kUint16, n, past.data(),
                                            n + 1);
            }).find("offsets[2500001] = " + std::to_string(n + 5) + " is outside [0, "),
            std::string::npos);
  fs::remove_all(dir);
}

// Truncates `path` to one page, appends a page, or rewrites every byte past
// the first 128 in place (same size) and sets a modification time surely not
// the old one (a write inside the file system's timestamp granularity keeps
// it: the documented residual case).
void ChangeFile(const fs::path& path, const std::string& how) {
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  if (how == "truncate") {
    fs::resize_file(path, 4096);
  } else if (how == "extend") {
    fs::resize_file(path, fs::file_size(path) + 4096);
  } else {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (std::size_t i = 128; i < bytes.size(); ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5A);
    f.seekp(0);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    times[1].tv_sec += 1;
    times[1].tv_nsec = (times[1].tv_nsec + 7) % 1'000'000'000;
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
}

// A source of 6000 random documents in one format, its two files (data, then
// offsets / index / scan cache) and every document as written (the oracle).
struct ChangedSource {
  std::function<std::shared_ptr<const TokenSource>()> open;
  fs::path files[2];
  std::vector<std::vector<std::int64_t>> documents;
};

ChangedSource WriteSource(const fs::path& dir, const std::string& format) {
  std::mt19937_64 rng(31);
  std::vector<std::vector<std::int64_t>> docs(6000);
  for (auto& d : docs) {
    d.resize(1 + rng() % 60);
    for (auto& t : d) t = static_cast<std::int64_t>(1 + rng() % 60000);
  }
  ChangedSource out;
  const std::string prefix = (dir / format).string();
  if (format == "olmo") {
    // A headerless uint16 file, documents ending in EOS 0, from an EOS scan
    // (its cache is mapped as the part's offsets).
    std::vector<std::uint16_t> flat;
    for (auto& d : docs) {
      d.push_back(0);
      for (std::int64_t t : d) flat.push_back(static_cast<std::uint16_t>(t));
    }
    const std::string path = prefix + ".npy";
    WriteRaw(path, flat);
    OlmoOptions o;
    o.token_dtype = TokenDType::kUint16;
    o.eos_token_id = 0;
    out.open = [path, o] { return TokenSource::OpenOlmo(path, o); };
    (void)out.open();  // writes the scan cache
    out.files[0] = path;
    out.files[1] = OlmoCachePath(path, o);
  } else {
    const bool npy = format == "npy";
    TokenWriter writer(prefix, npy ? SourceFormat::kNpy : SourceFormat::kMegatron,
                       TokenDType::kUint16);
    for (const auto& d : docs) writer.Add(d.data(), static_cast<Index>(d.size()));
    const TokenWriterResult r = writer.Finish();
    out.files[0] = r.files.at(0);
    out.files[1] = r.files.at(1);
    if (npy) {
      out.open = [r] { return TokenSource::Open(r.files[0], r.files[1]); };
    } else {
      out.open = [prefix] { return TokenSource::OpenMegatron(prefix); };
    }
  }
  out.documents = std::move(docs);
  return out;
}

// The one line a changed file is refused with.
void ExpectChangedRefusal(const std::string& error, const fs::path& file) {
  EXPECT_NE(error.find(file.string() + ": changed since it was opened ("), std::string::npos)
      << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

// A source's data or offsets / index / cache file truncated after the source
// was opened raised SIGBUS on the next read past its new end, and one
// rewritten in place delivered other tokens. Now, for npy pairs, Megatron
// .bin/.idx and OLMo files: every check before a document's read, and every
// TokenLoader batch after the change (per rank and equal steps), is one
// invalid_argument naming the file; batches delivered before are the
// uninterrupted run's. The same when the source reads with pread.
TEST(TokenSourceTest, RegressionAFileChangedAfterOpenIsRefusedNeverReadPastItsEnd) {
  const fs::path dir = TempDir("changed");
  for (const std::string format : {"npy", "megatron", "olmo"}) {
    for (int which = 0; which < 2; ++which) {
      for (const std::string how : {"truncate", "extend", "rewrite"}) {
        for (const int reader : {0, 1, 2, 3, 4, 5}) {  // documents, per-rank, equal steps; pread
          const ReadMode mode = reader < 3 ? ReadMode::kMmap : ReadMode::kPread;
          SCOPED_TRACE(format + " file " + std::to_string(which) + " " + how + " reader " +
                       std::to_string(reader));
          fs::remove_all(dir);
          fs::create_directories(dir);
          const ChangedSource written = WriteSource(dir, format);
          const fs::path& file = written.files[which];
          auto source = written.open()->WithReads(mode);
          const Index n = source->num_documents();
          ASSERT_EQ(n, static_cast<Index>(written.documents.size()));
          if (reader % 3 == 0) {
            source->CheckUnchanged(n - 1);
            std::vector<std::int64_t> got(written.documents[n - 1].size());
            source->Copy(n - 1, 0, static_cast<Index>(got.size()), got.data());
            EXPECT_EQ(got, written.documents[n - 1]);
            ChangeFile(file, how);
            // The last document lies past a truncated file's end.
            ExpectChangedRefusal(ErrorOf([&] { source->CheckUnchanged(n - 1); }), file);
            ExpectChangedRefusal(ErrorOf([&] { source->CheckUnchanged(0); }), file);
            ExpectChangedRefusal(ErrorOf([&] { source->CheckUnchanged(); }), file);
            continue;
          }
          LoaderOptions o = loader_testing::RowOptions(64, 4);
          o.equal_steps = reader % 3 == 2;
          o.read = mode;
          std::vector<std::vector<std::int64_t>> oracle;
          {
            TokenLoader whole(written.open(), o);
            while (auto b = whole.Next()) oracle.push_back(b->input_ids);
          }
          ASSERT_GT(oracle.size(), 100u);
          TokenLoader loader(source, o);
          std::vector<std::vector<std::int64_t>> got;
          for (int i = 0; i < 2; ++i) got.push_back(loader.Next()->input_ids);
          ChangeFile(file, how);
          const std::string error = ErrorOf([&] {
            while (auto b = loader.Next()) got.push_back(b->input_ids);
          });
          ExpectChangedRefusal(error, file);
          ASSERT_LT(got.size(), oracle.size());
          for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], oracle[i]) << i;
        }
      }
    }
  }
  fs::remove_all(dir);
}

// A batch checks only the files of the parts its documents are in, and a
// view checks its sources' files: a directory of three parts with its last
// part's tokens cut is refused by the loader (directly and through a
// gathered view), by the document check of that part, and not by a
// document check of an untouched part.
TEST(TokenSourceTest, AChangedPartIsRefusedThroughDirectoriesAndViews) {
  const fs::path dir = TempDir("changed_parts");
  for (int k = 0; k < 3; ++k) {
    std::vector<std::int32_t> tokens(3000);
    std::vector<std::int64_t> offsets = {0};
    for (int d = 1; d <= 100; ++d) offsets.push_back(d * 30);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i);
    WriteNpy(dir / ("p" + std::to_string(k) + ".tokens.npy"), "<i4", tokens);
    WriteNpy(dir / ("p" + std::to_string(k) + ".offsets.npy"), "<i8", offsets);
  }
  auto source = TokenSource::OpenDirectory(dir.string());
  ASSERT_EQ(source->num_documents(), 300);
  std::vector<std::int64_t> everything(300);
  for (Index i = 0; i < 300; ++i) everything[static_cast<std::size_t>(i)] = 299 - i;
  auto view = TokenSource::Gather({source}, everything, 1);
  const fs::path cut = dir / "p2.tokens.npy";
  fs::resize_file(cut, 4096);
  for (const auto& s : {source, view}) {
    ExpectChangedRefusal(ErrorOf([&] { s->CheckUnchanged(); }), cut);
    LoaderOptions o = loader_testing::RowOptions(64, 4);
    o.shuffle = false;
    ExpectChangedRefusal(ErrorOf([&] {
                           TokenLoader loader(s, o);
                           while (loader.Next() != nullptr) {
                           }
                         }),
                         cut);
  }
  ExpectChangedRefusal(ErrorOf([&] { source->CheckUnchanged(250); }), cut);
  ExpectChangedRefusal(ErrorOf([&] { view->CheckUnchanged(0); }), cut);  // document 299
  source->CheckUnchanged(10);                                            // part 0: unchanged
  view->CheckUnchanged(299);                                             // document 0
  const std::vector<Index> untouched = {0, 99, 100, 199};
  source->CheckUnchanged(untouched);
  fs::remove_all(dir);
}

// The sources ReadsTheSameDocumentsWithPread reads: WriteSource's three
// formats (6000 documents each), npy pairs with int32 and uint16 offsets and
// int32 / uint32 tokens (raw .bin), and a directory of three npy parts; each
// with the documents written (the oracle).
std::vector<ChangedSource> ReadModeSources(const fs::path& dir) {
  std::vector<ChangedSource> out;
  for (const std::string format : {"npy", "megatron", "olmo"}) {
    fs::create_directories(dir / format);
    out.push_back(WriteSource(dir / format, format));
  }
  std::mt19937_64 rng(5);
  for (int k = 0; k < 3; ++k) {
    ChangedSource c;
    std::vector<std::int32_t> tokens;
    std::vector<std::int64_t> offsets = {0};
    for (int d = 0; d < 700; ++d) {
      std::vector<std::int64_t> doc(rng() % 50);  // empty documents too
      for (auto& t : doc) t = static_cast<std::int64_t>(rng() % 100000);
      for (auto t : doc) tokens.push_back(static_cast<std::int32_t>(t));
      offsets.push_back(static_cast<std::int64_t>(tokens.size()));
      c.documents.push_back(std::move(doc));
    }
    const fs::path stem = dir / ("part" + std::to_string(k));
    const fs::path t = stem.string() + (k == 2 ? ".tokens.bin" : ".tokens.npy");
    const fs::path o = stem.string() + ".offsets.npy";
    if (k == 2) {
      WriteRaw(t, std::vector<std::uint32_t>(tokens.begin(), tokens.end()));
    } else {
      WriteNpy(t, "<i4", tokens);
    }
    if (k == 0) {
      WriteNpy(o, "<i4", std::vector<std::int32_t>(offsets.begin(), offsets.end()));
    } else {
      WriteNpy(o, "<i8", offsets);
    }
    c.open = [t, o, k] {
      return TokenSource::Open(t, o,
                               SourceOptions{k == 2 ? TokenDType::kUint32 : TokenDType::kInt32});
    };
    out.push_back(std::move(c));
  }
  {
    // uint16 offsets (a small part) beside the three parts of a directory.
    ChangedSource c;
    std::vector<std::uint16_t> tokens;
    std::vector<std::uint16_t> offsets = {0};
    for (int d = 0; d < 300; ++d) {
      std::vector<std::int64_t> doc(rng() % 30);
      for (auto& t : doc) t = static_cast<std::int64_t>(rng() % 65536);
      for (auto t : doc) tokens.push_back(static_cast<std::uint16_t>(t));
      offsets.push_back(static_cast<std::uint16_t>(tokens.size()));
      c.documents.push_back(std::move(doc));
    }
    WriteNpy(dir / "u16.tokens.npy", "<u2", tokens);
    WriteNpy(dir / "u16.offsets.npy", "<u2", offsets);
    c.open = [dir] { return TokenSource::Open(dir / "u16.tokens.npy", dir / "u16.offsets.npy"); };
    out.push_back(std::move(c));
  }
  {
    ChangedSource c;
    fs::create_directories(dir / "parts");
    for (int k = 0; k < 3; ++k) {
      const std::string name = "p" + std::to_string(k);
      fs::copy_file(dir / ("part" + std::to_string(k % 2) + ".tokens.npy"),
                    dir / "parts" / (name + ".tokens.npy"));
      fs::copy_file(dir / ("part" + std::to_string(k % 2) + ".offsets.npy"),
                    dir / "parts" / (name + ".offsets.npy"));
      for (const auto& d : out[3 + k % 2].documents) c.documents.push_back(d);
    }
    c.open = [dir] { return TokenSource::OpenDirectory((dir / "parts").string()); };
    out.push_back(std::move(c));
  }
  return out;
}

// ReadMode::kPread reads a document's length and tokens with pread(2), not
// from the maps (a sparse reader's resident set stays at what it read). For
// every format and offsets / token width, a pread source delivers what was
// written, as the mapped one does: every length, every document into int32
// and int64, random slices, Lengths over random ranges (the block reads),
// and the same LengthsDigest.
TEST(TokenSourceTest, ReadsTheSameDocumentsWithPread) {
  const fs::path dir = TempDir("pread");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::mt19937_64 rng(11);
  for (const ChangedSource& written : ReadModeSources(dir)) {
    const auto mapped = written.open();
    const auto pread = mapped->WithReads(ReadMode::kPread);
    EXPECT_EQ(mapped->reads(), ReadMode::kMmap);
    ASSERT_EQ(pread->reads(), ReadMode::kPread);
    SCOPED_TRACE(mapped->PartName(0));
    const Index n = static_cast<Index>(written.documents.size());
    ASSERT_EQ(pread->num_documents(), n);
    EXPECT_EQ(pread->num_tokens(), mapped->num_tokens());
    EXPECT_EQ(pread->LengthsDigest(), mapped->LengthsDigest());
    for (const auto* s : {mapped.get(), pread.get()}) {
      for (Index d = 0; d < n; ++d) {
        const auto& want = written.documents[static_cast<std::size_t>(d)];
        const Index length = static_cast<Index>(want.size());
        ASSERT_EQ(s->DocumentLength(d), length) << d;
        std::vector<std::int64_t> wide(want.size());
        std::vector<std::int32_t> narrow(want.size());
        s->Copy(d, 0, length, wide.data());
        s->Copy(d, 0, length, narrow.data());
        ASSERT_EQ(wide, want) << d;
        ASSERT_EQ(std::vector<std::int64_t>(narrow.begin(), narrow.end()), want) << d;
        if (length > 1) {
          const Index begin = static_cast<Index>(rng() % static_cast<std::uint64_t>(length));
          const Index count =
              1 + static_cast<Index>(rng() % static_cast<std::uint64_t>(length - begin));
          std::vector<std::int64_t> slice(static_cast<std::size_t>(count));
          s->Copy(d, begin, count, slice.data());
          ASSERT_EQ(slice,
                    std::vector<std::int64_t>(want.begin() + begin, want.begin() + begin + count));
        }
      }
      for (int trial = 0; trial < 50; ++trial) {
        const Index begin = static_cast<Index>(rng() % static_cast<std::uint64_t>(n));
        const Index count = static_cast<Index>(rng() % static_cast<std::uint64_t>(n - begin + 1));
        std::vector<Index> got(static_cast<std::size_t>(count));
        s->Lengths(begin, count, got.data());
        for (Index i = 0; i < count; ++i) {
          ASSERT_EQ(
              got[static_cast<std::size_t>(i)],
              static_cast<Index>(written.documents[static_cast<std::size_t>(begin + i)].size()))
              << begin << " + " << i;
        }
      }
    }
  }
  fs::remove_all(dir);
}

// A pread past the end of a file cut after open delivers zeros, never valid
// data: the read is remembered and every later check refuses the file, also
// after the file was given back its size and modification time (which the
// size / time check alone would pass), in one line naming the file and byte.
TEST(TokenSourceTest, APreadPastAShortenedFileIsRefusedEvenAtItsOldSizeAndTime) {
  const fs::path dir = TempDir("pread_cut");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const ChangedSource written = WriteSource(dir, "npy");
  const fs::path& tokens = written.files[0];
  const auto source = written.open()->WithReads(ReadMode::kPread);
  const Index last = source->num_documents() - 1;
  const auto& want = written.documents.back();
  std::vector<std::int64_t> got(want.size());
  source->Copy(last, 0, static_cast<Index>(got.size()), got.data());
  ASSERT_EQ(got, want);
  struct stat before {};
  ASSERT_EQ(::stat(tokens.c_str(), &before), 0);
  const auto size = fs::file_size(tokens);
  fs::resize_file(tokens, 4096);
  source->Copy(last, 0, static_cast<Index>(got.size()), got.data());
  EXPECT_EQ(got, std::vector<std::int64_t>(want.size(), 0));
  ExpectChangedRefusal(ErrorOf([&] { source->CheckUnchanged(last); }), tokens);
  fs::resize_file(tokens, size);
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, tokens.c_str(), times, 0), 0);
  const std::string error = ErrorOf([&] { source->CheckUnchanged(); });
  ExpectChangedRefusal(error, tokens);
  EXPECT_NE(error.find("a read at byte"), std::string::npos) << error;
  EXPECT_NE(error.find("found the file ended before it"), std::string::npos) << error;
  fs::remove_all(dir);
}

// The loader's batches are the same read with pread or mmap: a mixture over
// npy, Megatron and OLMo sources and a directory of parts, and a loader over
// each source alone, in random configurations (seq_len, batch, world, equal
// steps, shuffle, seeds), every rank's batches field by field, and a state
// saved under one mode resumed under the other continues as the
// uninterrupted run.
TEST(TokenSourceTest, LoaderBatchesAreTheSameReadWithPreadOrMmap) {
  const fs::path dir = TempDir("pread_loader");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<ChangedSource> written = ReadModeSources(dir);
  std::vector<std::shared_ptr<const TokenSource>> sources;
  for (std::size_t k : {0, 1, 2, 7}) sources.push_back(written[k].open());
  auto same = [](const Batch& a, const Batch& b) {
    EXPECT_EQ(a.input_ids, b.input_ids);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_EQ(a.position_ids, b.position_ids);
    EXPECT_EQ(a.cu_seqlens, b.cu_seqlens);
    EXPECT_EQ(a.documents, b.documents);
    EXPECT_EQ(a.starts, b.starts);
    EXPECT_EQ(a.lengths, b.lengths);
    EXPECT_EQ(a.step, b.step);
  };
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 6; ++trial) {
    LoaderOptions o = loader_testing::RowOptions(
        32 << (rng() % 3), 1 + static_cast<Index>(rng() % 4), 1 + static_cast<Index>(rng() % 3));
    o.equal_steps = trial % 2 == 0;
    o.shuffle = rng() % 3 != 0;
    o.seed = rng();
    const std::vector<double> weights = {1.0 + static_cast<double>(rng() % 4), 1.0, 2.0,
                                         1.0 + static_cast<double>(rng() % 3)};
    MixtureOptions m;
    m.seed = rng();
    const Index samples = 3000 + static_cast<Index>(rng() % 3000);
    SCOPED_TRACE("trial " + std::to_string(trial));
    for (Index rank = 0; rank < o.world_size; ++rank) {
      o.rank = rank;
      auto mixture = [&](ReadMode mode) {
        LoaderOptions r = o;
        r.read = mode;
        r.shuffle = false;  // the mixture is the order
        return std::make_unique<MixtureLoader>(sources, weights, m, r, samples);
      };
      auto mapped = mixture(ReadMode::kMmap), pread = mixture(ReadMode::kAuto);
      std::vector<MixtureBatch> oracle;
      Index count = 0;
      std::string state;
      const Index stop = 1 + static_cast<Index>(rng() % 8);
      for (;;) {
        auto a = mapped->Next();
        auto b = pread->Next();
        ASSERT_EQ(a.has_value(), b.has_value());
        if (!a) break;
        same(*a->batch, *b->batch);
        EXPECT_EQ(a->sources, b->sources);
        EXPECT_EQ(a->items, b->items);
        if (++count == stop) state = pread->State();
        if (count > stop) oracle.push_back(std::move(*a));
      }
      if (state.empty()) continue;  // an epoch of fewer batches than `stop`
      auto resumed = mixture(ReadMode::kMmap);
      resumed->Load(state);
      for (const MixtureBatch& want : oracle) {
        auto b = resumed->Next();
        ASSERT_TRUE(b.has_value());
        same(*want.batch, *b->batch);
      }
      EXPECT_FALSE(resumed->Next().has_value());  // the epoch's end, as uninterrupted
    }
    for (const auto& source : sources) {
      LoaderOptions a = o, b = o;
      a.rank = b.rank = 0;
      a.read = ReadMode::kMmap;
      b.read = ReadMode::kPread;
      TokenLoader mapped(source, a), pread(source, b);
      for (;;) {
        auto x = mapped.Next();
        auto y = pread.Next();
        ASSERT_EQ(x == nullptr, y == nullptr);
        if (x == nullptr) break;
        same(*x, *y);
      }
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardkit
