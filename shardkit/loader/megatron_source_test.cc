#include "shardkit/loader/megatron_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/loader/source_formats.h"
#include "shardkit/loader/token_source.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit {
namespace {

using loader_testing::PlanOptions;

namespace fs = std::filesystem;
using loader_testing::ErrorOf;

// A corpus as the test sees it: documents, each a list of sequences.
using Sequence = std::vector<std::int64_t>;
using Document = std::vector<Sequence>;

// The .bin and .idx bytes of `documents`, written by hand from the layout in
// megatron-core's indexed_dataset.py (_IndexWriter), independent of the reader.
struct Files {
  std::string bin, idx;
};

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

Files Encode(const std::vector<Document>& documents, int code, bool modes = false) {
  const int size = code == 1 || code == 2 ? 1 : code == 3 || code == 8 ? 2 : code == 5 ? 8 : 4;
  Files f;
  std::vector<std::int32_t> lengths;
  std::vector<std::int64_t> pointers, doc_index{0};
  for (const Document& d : documents) {
    for (const Sequence& s : d) {
      pointers.push_back(static_cast<std::int64_t>(f.bin.size()));
      lengths.push_back(static_cast<std::int32_t>(s.size()));
      for (std::int64_t t : s) {
        const char* p = reinterpret_cast<const char*>(&t);  // little-endian: low bytes first
        f.bin.append(p, static_cast<std::size_t>(size));
      }
    }
    doc_index.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  f.idx.append("MMIDIDX\0\0", 9);
  Put<std::uint64_t>(f.idx, 1);
  Put<std::uint8_t>(f.idx, static_cast<std::uint8_t>(code));
  Put<std::uint64_t>(f.idx, lengths.size());
  Put<std::uint64_t>(f.idx, doc_index.size());
  for (auto v : lengths) Put(f.idx, v);
  for (auto v : pointers) Put(f.idx, v);
  for (auto v : doc_index) Put(f.idx, v);
  if (modes) f.idx.append(lengths.size(), '\0');
  return f;
}

void Write(const fs::path& prefix, const Files& f) {
  std::ofstream(prefix.string() + ".bin", std::ios::binary) << f.bin;
  std::ofstream(prefix.string() + ".idx", std::ios::binary) << f.idx;
}

// one_sequence: every document one sequence (the index's identity case,
// read without its document indices).
std::vector<Document> RandomCorpus(std::mt19937_64& rng, std::int64_t lo, std::int64_t hi,
                                   bool one_sequence = false) {
  std::uniform_int_distribution<int> docs(0, 12), seqs(0, 3), len(0, 9);
  std::uniform_int_distribution<std::int64_t> token(lo, hi);
  std::vector<Document> corpus(static_cast<std::size_t>(docs(rng)));
  for (Document& d : corpus) {
    // 0 sequences: an empty document.
    d.resize(one_sequence ? 1 : static_cast<std::size_t>(seqs(rng)));
    for (Sequence& s : d) {
      s.resize(static_cast<std::size_t>(len(rng)));  // 0 tokens: an empty sequence
      for (auto& t : s) t = token(rng);
    }
  }
  return corpus;
}

Sequence Flat(const Document& d) {
  Sequence out;
  for (const Sequence& s : d) out.insert(out.end(), s.begin(), s.end());
  return out;
}

void ExpectDocuments(const TokenSource& source, const std::vector<Document>& corpus) {
  ASSERT_EQ(source.num_documents(), static_cast<Index>(corpus.size()));
  Index total = 0;
  for (std::size_t d = 0; d < corpus.size(); ++d) {
    const Sequence want = Flat(corpus[d]);
    ASSERT_EQ(source.DocumentLength(static_cast<Index>(d)), static_cast<Index>(want.size()));
    std::vector<std::int64_t> wide(want.size());
    std::vector<std::int32_t> narrow(want.size());
    source.Copy(static_cast<Index>(d), 0, static_cast<Index>(want.size()), wide.data());
    source.Copy(static_cast<Index>(d), 0, static_cast<Index>(want.size()), narrow.data());
    EXPECT_EQ(wide, want) << "document " << d;
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(narrow[i], want[i]);
    total += static_cast<Index>(want.size());
  }
  EXPECT_EQ(source.num_tokens(), total);
}

struct Code {
  int code;
  std::int64_t lo, hi;
};
// Every integer dtype code over its whole range (int64: the int32 range, the
// ids it may deliver).
const Code kIntegerCodes[] = {{1, 0, 255},
                              {2, -128, 127},
                              {3, -32768, 32767},
                              {4, INT32_MIN, INT32_MAX},
                              {5, INT32_MIN, INT32_MAX},
                              {8, 0, 65535}};

TEST(MegatronSourceTest, ReadsEveryDocumentOfEveryIntegerDtype) {
  const fs::path dir = loader_testing::TempDir("megatron", "dtypes");
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    for (const Code& c : kIntegerCodes) {
      for (bool one_sequence : {false, true}) {
        const std::vector<Document> corpus = RandomCorpus(rng, c.lo, c.hi, one_sequence);
        Write(dir / "p", Encode(corpus, c.code));
        auto source = TokenSource::OpenMegatron((dir / "p").string());
        ExpectDocuments(*source, corpus);
      }
    }
  }
  fs::remove_all(dir);
}

// indexed_dataset.py's DType codes, written out: the code a writer stores
// for each token dtype is the one the reader maps back to it.
TEST(MegatronSourceTest, DTypeCodesAreIndexedDatasetsTable) {
  const std::vector<std::pair<TokenDType, int>> codes = {
      {TokenDType::kUint8, 1},  {TokenDType::kInt8, 2},  {TokenDType::kInt16, 3},
      {TokenDType::kInt32, 4},  {TokenDType::kInt64, 5}, {TokenDType::kUint16, 8},
      {TokenDType::kUint32, 0}, {TokenDType::kUint64, 0}};
  for (const auto& [type, code] : codes) {
    EXPECT_EQ(MegatronDTypeCode(type), code) << TokenDTypeName(type);
    if (code != 0) {
      EXPECT_EQ(MegatronDTypeName(code), TokenDTypeName(type));
    }
  }
  EXPECT_EQ(MegatronDTypeName(6), "float64");
  EXPECT_EQ(MegatronDTypeName(7), "float32");
  EXPECT_EQ(MegatronDTypeName(0), "");
  EXPECT_EQ(MegatronDTypeName(9), "");
}

TEST(MegatronSourceTest, ListOfPrefixesIsOneSourceInTheOrderGiven) {
  const fs::path dir = loader_testing::TempDir("megatron", "list");
  std::mt19937_64 rng(11);
  std::vector<Document> all;
  std::vector<std::string> paths;
  for (int k = 0; k < 4; ++k) {
    const Code& c = kIntegerCodes[static_cast<std::size_t>(k) % std::size(kIntegerCodes)];
    std::vector<Document> corpus = RandomCorpus(rng, c.lo, c.hi);
    const fs::path prefix = dir / ("part" + std::to_string(k));
    Write(prefix, Encode(corpus, c.code));
    all.insert(all.end(), corpus.begin(), corpus.end());
    // Given as a prefix, the .idx or the .bin file: the same part.
    paths.push_back(prefix.string() + (k == 1 ? ".idx" : k == 2 ? ".bin" : ""));
  }
  auto source = OpenSource(paths);
  EXPECT_EQ(source->num_parts(), 4);
  ExpectDocuments(*source, all);
  auto given = OpenSource(paths, OpenSourceOptions{SourceFormat::kMegatron, {}, {}});
  ExpectDocuments(*given, all);
  fs::remove_all(dir);
}

TEST(MegatronSourceTest, TextOnlySequenceModesAreReadNonTextRefusedByName) {
  const fs::path dir = loader_testing::TempDir("megatron", "modes");
  const std::vector<Document> corpus = {{{1, 2}, {3}}, {}, {{4, 5, 6}}};
  Files f = Encode(corpus, 4, /*modes=*/true);
  Write(dir / "p", f);
  ExpectDocuments(*TokenSource::OpenMegatron((dir / "p").string()), corpus);
  f.idx[f.idx.size() - 2] = 1;  // sequence 1 (of 3) is an image
  Write(dir / "p", f);
  const std::string e = ErrorOf([&] { (void)TokenSource::OpenMegatron((dir / "p").string()); });
  EXPECT_NE(e.find("p.idx: sequence_modes[1] = 1"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(MegatronSourceTest, Int64IdsOutsideInt32AreRefusedWhenOpened) {
  const fs::path dir = loader_testing::TempDir("megatron", "int64");
  Write(dir / "p", Encode({{{1, 2}}, {{3, std::int64_t{1} << 31}}}, 5));
  const std::string e = ErrorOf([&] { (void)TokenSource::OpenMegatron((dir / "p").string()); });
  EXPECT_NE(e.find("tokens: " + (dir / "p.bin").string() + ": token 3 is 2147483648"),
            std::string::npos)
      << e;
  fs::remove_all(dir);
}

// One corruption of a valid pair: what it changes and the words of its one-line error.
struct Corruption {
  const char* name;
  std::function<void(Files&)> apply;
  const char* file;  // "idx" or "bin": the file the message names
  const char* expected;
};

template <typename T>
void Poke(std::string& s, std::size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof(T));
}

TEST(MegatronSourceTest, CorruptFilesAreRefusedNamingFileAndField) {
  // 3 documents: [1 2 | 3] [] [4 5 6]: sequences of 2, 1, 3 int32 tokens.
  const std::vector<Document> corpus = {{{1, 2}, {3}}, {}, {{4, 5, 6}}};
  // Offsets in the .idx: lengths at 34, pointers at 46, document indices at 70.
  const std::vector<Corruption> table = {
      {"empty index", [](Files& f) { f.idx.clear(); }, "idx", "header: file of 0 bytes"},
      {"truncated header", [](Files& f) { f.idx.resize(20); }, "idx", "header: file of 20 bytes"},
      {"bad magic", [](Files& f) { f.idx[0] = 'X'; }, "idx", "magic: 'XMIDIDX\\x00\\x00'"},
      {"version 2", [](Files& f) { Poke<std::uint64_t>(f.idx, 9, 2); }, "idx", "version: 2"},
      {"dtype code 0", [](Files& f) { f.idx[17] = 0; }, "idx", "dtype: code 0 is not"},
      {"dtype code 9", [](Files& f) { f.idx[17] = 9; }, "idx", "dtype: code 9 is not"},
      {"float32 tokens", [](Files& f) { f.idx[17] = 7; }, "idx", "dtype: code 7 (float32)"},
      {"float64 tokens", [](Files& f) { f.idx[17] = 6; }, "idx", "dtype: code 6 (float64)"},
      {"huge sequence_count", [](Files& f) { Poke<std::uint64_t>(f.idx, 18, ~0ull); }, "idx",
       "sequence_count: 18446744073709551615"},
      {"sequence_count + 1", [](Files& f) { Poke<std::uint64_t>(f.idx, 18, 4); }, "idx",
       "size: 102 bytes, expected 114 (or 118 with sequence modes) for sequence_count 4"},
      {"huge document_count", [](Files& f) { Poke<std::uint64_t>(f.idx, 26, 1ull << 61); }, "idx",
       "document_count: 2305843009213693952"},
      {"document_count - 1", [](Files& f) { Poke<std::uint64_t>(f.idx, 26, 3); }, "idx",
       "size: 102 bytes, expected 94"},
      {"document_count 0", [](Files& f) { Poke<std::uint64_t>(f.idx, 26, 0); }, "idx",
       "document_count: 0;"},
      {"truncated index", [](Files& f) { f.idx.resize(f.idx.size() - 5); }, "idx",
       "size: 97 bytes"},
      {"negative length", [](Files& f) { Poke<std::int32_t>(f.idx, 38, -1); }, "idx",
       "sequence_lengths[1] = -1 is negative"},
      {"pointer past the .bin", [](Files& f) { Poke<std::int64_t>(f.idx, 54, 4096); }, "idx",
       "sequence_pointers[1] = 4096 is outside"},
      {"negative pointer", [](Files& f) { Poke<std::int64_t>(f.idx, 46, -8); }, "idx",
       "sequence_pointers[0] = -8 is outside"},
      {"pointer not matching lengths", [](Files& f) { Poke<std::int64_t>(f.idx, 62, 8); }, "idx",
       "sequence_pointers[2] = 8, expected 12"},
      {"length past the .bin", [](Files& f) { Poke<std::int32_t>(f.idx, 42, 4); }, "idx",
       "sequence_lengths[2] = 4: sequence 2 ends at byte 28, past the end"},
      {"truncated .bin", [](Files& f) { f.bin.resize(f.bin.size() - 4); }, "idx",
       "sequence_lengths[2] = 3: sequence 2 ends at byte 24"},
      {"bytes after the last sequence", [](Files& f) { f.bin += "abcd"; }, "bin",
       "size: 28 bytes, but the sequences of"},
      {"first document index 1", [](Files& f) { Poke<std::int64_t>(f.idx, 70, 1); }, "idx",
       "document_indices[0] = 1, expected 0"},
      {"non-monotone document indices", [](Files& f) { Poke<std::int64_t>(f.idx, 78, 3); }, "idx",
       "document_indices[2] = 2 < document_indices[1] = 3 (not non-decreasing)"},
      {"document index past the sequences", [](Files& f) { Poke<std::int64_t>(f.idx, 94, 4); },
       "idx", "document_indices[3] = 4 is past sequence_count 3"},
      {"sequences after the last document", [](Files& f) { Poke<std::int64_t>(f.idx, 94, 2); },
       "idx", "document_indices[3] = 2, expected sequence_count 3"},
  };
  const fs::path dir = loader_testing::TempDir("megatron", "corrupt");
  const Files good = Encode(corpus, 4);
  ASSERT_EQ(good.idx.size(), 102u);  // the offsets above
  for (const Corruption& c : table) {
    Files f = good;
    c.apply(f);
    Write(dir / "p", f);
    const std::string e = ErrorOf([&] { (void)TokenSource::OpenMegatron((dir / "p").string()); });
    const std::string file = (dir / ("p." + std::string(c.file))).string();
    EXPECT_EQ(e.rfind("path: " + file + ": ", 0), 0u) << c.name << ": " << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.name << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << c.name << ": " << e;
  }
  fs::remove_all(dir);
}

TEST(MegatronSourceTest, MissingFilesAndUndetectablePathsNameThePath) {
  const fs::path dir = loader_testing::TempDir("megatron", "missing");
  Write(dir / "p", Encode({{{1}}}, 4));
  fs::remove(dir / "p.bin");
  EXPECT_NE(ErrorOf([&] {
              (void)TokenSource::OpenMegatron((dir / "p").string());
            }).find("path: cannot open '" + (dir / "p.bin").string()),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              (void)OpenSource({(dir / "p").string()});
            }).find("path: '" + (dir / "p").string() + "': cannot tell the format"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { (void)ParseSourceFormat("csv"); }).find("format: unknown"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { (void)OpenSource({}); }).find("path: no paths"), std::string::npos);
  fs::remove_all(dir);
}

// The fast paths of opening and planning a Megatron source (bulk Lengths, the
// plan reading the byte pointers directly, the folded validation pass): the
// same lengths as the corpus written, and the same plan, step by step, as a
// plan over those lengths given as an array.
TEST(MegatronSourceTest, BulkLengthsAndThePlanFromPointersMatchTheCorpus) {
  const fs::path dir = loader_testing::TempDir("megatron", "fast");
  std::mt19937_64 rng(23);
  for (int round = 0; round < 30; ++round) {
    const bool one_sequence = round % 2 == 0;
    const Code& c = kIntegerCodes[static_cast<std::size_t>(round) % std::size(kIntegerCodes)];
    std::vector<Document> corpus = RandomCorpus(rng, c.lo, c.hi, one_sequence);
    if (corpus.empty()) corpus.push_back({{1, 2}});
    std::vector<Index> want;
    for (const Document& d : corpus) want.push_back(static_cast<Index>(Flat(d).size()));
    Write(dir / "p", Encode(corpus, c.code));
    // One part, then the same file twice (two parts: a block crosses them).
    auto one = TokenSource::OpenMegatron((dir / "p").string());
    auto two = TokenSource::Concat({one, TokenSource::OpenMegatron((dir / "p").string())});
    std::vector<Index> twice = want;
    twice.insert(twice.end(), want.begin(), want.end());
    for (const auto& [source, lengths] : {std::pair{one, want}, std::pair{two, twice}}) {
      const Index n = static_cast<Index>(lengths.size());
      for (Index begin = 0; begin < n; ++begin) {
        const Index count = n - begin - static_cast<Index>(rng() % (n - begin + 1));
        std::vector<Index> got(static_cast<std::size_t>(count));
        source->Lengths(begin, count, got.data());
        ASSERT_EQ(got, std::vector<Index>(lengths.begin() + begin, lengths.begin() + begin + count))
            << "round " << round << " begin " << begin;
      }
    }
    int shift = -1;
    const char* pointers = one->ContiguousSequencePointers(&shift);
    ASSERT_EQ(pointers != nullptr, one_sequence) << round;
    EXPECT_EQ(two->ContiguousSequencePointers(&shift), nullptr);
    TrainOptions o = PlanOptions(8, 2, 3);
    o.seed = static_cast<std::uint64_t>(round);
    const TrainPlan ours(TrainDocumentsOf(*one, 0), o);
    const TrainPlan oracle(TrainDocuments::FromSpans(want), o);
    ASSERT_EQ(ours.num_steps(), oracle.num_steps());
    for (Index s = 0; s < ours.num_steps(); ++s) {
      for (Index r = 0; r < 3; ++r) {
        const TrainStep a = ours.Step(r, s), b = oracle.Step(r, s);
        ASSERT_EQ(a.rows.size(), b.rows.size());
        for (std::size_t i = 0; i < a.rows.size(); ++i) {
          ASSERT_EQ(a.rows[i].size(), b.rows[i].size());
          for (std::size_t j = 0; j < a.rows[i].size(); ++j) {
            EXPECT_EQ(a.rows[i][j].item, b.rows[i][j].item);
            EXPECT_EQ(a.rows[i][j].start, b.rows[i][j].start);
            EXPECT_EQ(a.rows[i][j].length, b.rows[i][j].length);
          }
        }
      }
    }
    // The fingerprint hashes the lengths read in blocks; the same hash as the
    // same tokens and offsets in memory (read through the offsets array).
    std::vector<std::int32_t> flat;
    std::vector<std::int64_t> offsets{0};
    for (const Document& d : corpus) {
      for (std::int64_t t : Flat(d)) flat.push_back(static_cast<std::int32_t>(t));
      offsets.push_back(static_cast<std::int64_t>(flat.size()));
    }
    auto memory =
        TokenSource::FromMemory(flat.data(), TokenDType::kInt32, static_cast<Index>(flat.size()),
                                offsets.data(), static_cast<Index>(offsets.size()));
    EXPECT_EQ(FingerprintData(*one).hash, FingerprintData(*memory).hash) << round;
    // LengthsDigest: the Megatron part's, a pass over its lengths on the
    // first call, equals the one memory's validation pass computed.
    EXPECT_EQ(one->LengthsDigest(), memory->LengthsDigest()) << round;
  }
  fs::remove_all(dir);
}

TEST(MegatronSourceTest, FormatsMixInOneSourceAndGatheredViewsDoNotConcatenate) {
  const fs::path dir = loader_testing::TempDir("megatron", "mixed");
  Write(dir / "m", Encode({{{7, 8}}, {{9}}}, 8));
  const std::vector<std::int32_t> tokens{1, 2, 3};
  const std::vector<std::int64_t> offsets{0, 1, 3};
  auto memory = TokenSource::FromMemory(tokens.data(), TokenDType::kInt32, 3, offsets.data(), 3);
  auto both = TokenSource::Concat({TokenSource::OpenMegatron((dir / "m").string()), memory});
  ExpectDocuments(*both, {{{7, 8}}, {{9}}, {{1}}, {{2, 3}}});
  auto gathered = TokenSource::Gather({memory}, {1, 0}, 5);
  EXPECT_NE(ErrorOf([&] {
              (void)TokenSource::Concat({memory, gathered});
            }).find("sources: source 1 is a gathered view"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardkit
