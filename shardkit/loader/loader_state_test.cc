#include "shardkit/loader/loader_state.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/base/json.h"
#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/loader.h"
#include "shardkit/loader/token_source.h"

namespace shardkit {
namespace {

// The data set of testdata/make_v1_states.py: document d has 1 + (37 d) % 50
// tokens, token t of document d is (1000 d + t) % 30011.
using Data = loader_testing::TestCorpus;
using loader_testing::ErrorOf;
using loader_testing::RowOptions;

Data SampleData(Index docs = 200, Index bump_document = -1) {
  Data data;
  for (Index d = 0; d < docs; ++d) {
    Index n = 1 + (37 * d) % 50;
    if (d == bump_document) ++n;
    data.Add(n, [d](Index t) { return static_cast<std::int32_t>((1000 * d + t) % 30011); });
  }
  data.Seal();
  return data;
}

std::string ReadFile(const std::string& name) {
  std::ifstream in(std::string(SHARDKIT_TESTDATA_DIR) + "/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

LoaderOptions SampleOptions() {
  LoaderOptions o = RowOptions(32, 2);
  o.shuffle = true;
  o.seed = std::numeric_limits<std::uint64_t>::max() - 4;
  o.algorithm = PackAlgorithm::kBestFitDecreasing;
  o.buffer = 8;
  o.num_threads = 0;
  o.rank = 1;
  o.world_size = 3;
  return o;
}

// (documents, starts, lengths, rows) of every remaining batch.
struct Pieces {
  std::vector<std::int64_t> documents, starts, lengths;
  std::vector<std::int32_t> rows;
  friend bool operator==(const Pieces&, const Pieces&) = default;
};

std::vector<Pieces> Drain(TokenLoader& loader) {
  std::vector<Pieces> out;
  while (auto b = loader.Next()) out.push_back({b->documents, b->starts, b->lengths, b->rows});
  return out;
}

// ---------------------------------------------------------------------------

// Issue 20: version 1 states (no checksum; the loader's pieces were [item,
// length, start, images]) are refused naming the version, never read with
// another layout: a version-3 state relabelled "version": 1 skipped its
// checksum and, read with the version-1 layout, lost documents (4 of 200).
TEST(LoaderStateTest, RegressionOldVersionsAreRefusedNamingTheVersion) {
  const Json loader_v1 = ParseJson(ReadFile("loader_state_v1.json"), "sample");
  EXPECT_EQ(ErrorOf([&] { (void)LoaderStateFromJson(WriteJson(*loader_v1.Find("state"))); })
                .rfind("state: version: a version 1 loader state; this shardkit reads version 4 "
                       "(version 1 had no checksum and another piece layout",
                       0),
            0u);
  const Json packer_v1 = ParseJson(ReadFile("packer_state_v1.json"), "sample");
  EXPECT_EQ(ErrorOf([&] {
              (void)PackerStateFromJson(WriteJson(*packer_v1.Find("state")));
            }).rfind("state: a packer state without \"version\" (version 1, unsealed)", 0),
            0u);
  // A current state relabelled.
  Data data = SampleData();
  TokenLoader loader(data.source, SampleOptions());
  for (int i = 0; i < 3; ++i) ASSERT_NE(loader.Next(), nullptr);
  const std::string text = LoaderStateToJson(loader.State());
  for (const char* version : {"1", "2", "3"}) {
    std::string relabelled = text;
    relabelled.replace(relabelled.find("\"version\": 4"), 12,
                       std::string("\"version\": ") + version);
    const std::string e = ErrorOf([&] { (void)LoaderStateFromJson(relabelled); });
    EXPECT_EQ(e.rfind(std::string("state: version: a version ") + version + " loader state", 0), 0u)
        << e;
  }
  // The packer's current version reads; a relabelled one does not.
  const std::string packer = PackerStateToJson(loader.State().packer);
  EXPECT_EQ(ErrorOf([&] { (void)PackerStateFromJson(packer); }), "no error");
  std::string relabelled = packer;
  relabelled.replace(relabelled.find("\"version\": 2"), 12, "\"version\": 1");
  EXPECT_EQ(ErrorOf([&] {
              (void)PackerStateFromJson(relabelled);
            }).rfind("state: version: a version 1 packer state", 0),
            0u);
}

// Issue 20: the data fingerprint identifies the data, not only its lengths.
TEST(LoaderStateTest, TheDataFingerprintCoversTheTokensNotOnlyTheLengths) {
  auto corpus = [](Index docs, Index length, std::int32_t shift, Index changed_document) {
    Data data;
    for (Index d = 0; d < docs; ++d) {
      data.Add(length + d % 7, [=](Index t) {
        return static_cast<std::int32_t>(d * 31 + t + (d == changed_document || shift ? shift : 0));
      });
    }
    data.Seal();
    return data;
  };
  // Small (every token hashed): one token of one document differs.
  const Data a = corpus(200, 10, 0, -1), same = corpus(200, 10, 0, -1);
  const Data one = corpus(200, 10, 1, 123);
  EXPECT_EQ(FingerprintData(*a.source).hash, FingerprintData(*same.source).hash);
  EXPECT_NE(FingerprintData(*a.source).hash, FingerprintData(*one.source).hash);
  EXPECT_EQ(FingerprintData(*a.source).tokens, FingerprintData(*one.source).tokens);
  // Large (a sample): another data set of the same lengths.
  const Data big = corpus(20000, 30, 0, -1), big_same = corpus(20000, 30, 0, -1);
  const Data big_other = corpus(20000, 30, 5, -1);
  ASSERT_GT(big.source->num_tokens(), kFingerprintAllTokens);
  EXPECT_EQ(FingerprintData(*big.source).hash, FingerprintData(*big_same.source).hash);
  EXPECT_NE(FingerprintData(*big.source).hash, FingerprintData(*big_other.source).hash);
}

TEST(LoaderStateTest, SaveToJsonAndResumeEqualsTheUninterruptedRun) {
  Data data = SampleData(300);
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    LoaderOptions o;
    o.equal_steps = false;
    o.seq_len = 8 + static_cast<Index>(rng() % 40);
    o.batch_size = 1 + static_cast<Index>(rng() % 4);
    o.world_size = 1 + static_cast<Index>(rng() % 3);
    o.rank = static_cast<Index>(rng() % static_cast<std::uint64_t>(o.world_size));
    o.seed = rng();  // any uint64, the top bit included
    o.epoch = rng() % 3;
    o.shuffle = trial % 5 != 0;
    o.buffer = 2 + static_cast<Index>(rng() % 16);
    o.num_threads = static_cast<Index>(rng() % 3);
    TokenLoader whole(data.source, o);
    const std::vector<Pieces> all = Drain(whole);
    const std::size_t k = all.empty() ? 0 : rng() % all.size();
    TokenLoader first(data.source, o);
    for (std::size_t i = 0; i < k; ++i) ASSERT_NE(first.Next(), nullptr);
    const std::string text = LoaderStateToJson(first.State());
    const LoaderState back = LoaderStateFromJson(text);
    EXPECT_EQ(back.seed, o.seed);
    EXPECT_EQ(LoaderStateToJson(back), text);  // byte for byte
    TokenLoader resumed(data.source, o, back);
    EXPECT_EQ(Drain(resumed),
              std::vector<Pieces>(all.begin() + static_cast<std::ptrdiff_t>(k), all.end()))
        << "trial " << trial << " k " << k;
  }
}

// The states of ranks 0 and 1 of two, each after three batches of `o`.
std::vector<LoaderState> TwoRanksAfterThreeBatches(const Data& data, LoaderOptions o) {
  o.world_size = 2;
  std::vector<LoaderState> states;
  for (Index r = 0; r < 2; ++r) {
    o.rank = r;
    TokenLoader l(data.source, o);
    for (int i = 0; i < 3; ++i) EXPECT_NE(l.Next(), nullptr) << "rank " << r << ", batch " << i;
    states.push_back(l.State());
  }
  return states;
}

TEST(LoaderStateTest, MergedStatesRoundTripThroughJson) {
  Data data = SampleData(300);
  LoaderOptions o = SampleOptions();
  std::vector<LoaderState> states = TwoRanksAfterThreeBatches(data, o);
  for (LoaderState& state : states) state = LoaderStateFromJson(LoaderStateToJson(state));
  const LoaderState merged = MergeLoaderStates(states);
  const std::string text = LoaderStateToJson(merged);
  const LoaderState back = LoaderStateFromJson(text);
  EXPECT_EQ(back.head, merged.head);
  EXPECT_EQ(back.done, merged.done);
  EXPECT_EQ(back.data_hash, merged.data_hash);
  o.world_size = 3;
  o.rank = 2;
  TokenLoader l(data.source, o, back);
  EXPECT_GT(l.ListSize(), 0);
}

// PackerStateFits and the StreamingPacker constructor each checked restored
// states, differently: Fits accepted pieces listed twice and more buffered
// items than the buffer takes, which the constructor refused. Fits now
// applies the constructor's checks (one definition).
TEST(LoaderStateTest, RegressionPackerStateFitsIsTheConstructorsCheck) {
  PackOptions o;
  o.capacity = 10;
  o.buffer = 2;
  PackerState twice;
  twice.buffered = {PackItem{3, 4, 0, 0}};
  twice.pending = {Pack{{PackItem{3, 4, 0, 0}}, 4, 0}};
  twice.items_seen = 1;
  twice.packs_closed = 1;
  twice.tokens_closed = 4;
  auto error = [&](const PackerState& s) { return ErrorOf([&] { PackerStateFits(s, o); }); };
  EXPECT_EQ(error(twice), "state: item 3 is listed twice (pieces at start 0 and 0 overlap)");
  PackerState full;
  full.buffered = {PackItem{1, 2, 0, 0}, PackItem{2, 2, 0, 0}};
  full.items_seen = 2;
  EXPECT_NE(error(full).find("buffered items, the buffer takes fewer than 2"), std::string::npos)
      << error(full);
  PackerState over;
  over.pending = {Pack{{PackItem{1, 6, 0, 0}, PackItem{2, 7, 0, 0}}, 0, 0}};
  over.packs_closed = 1;
  over.tokens_closed = 13;
  EXPECT_EQ(error(over), "state: pending[0]: holds 13 tokens, more than capacity 10");
  full.buffered.pop_back();
  EXPECT_EQ(error(full), "no error");
}

// Issue 13: a state must prove itself or be refused with the field named.
class StateRefusals : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = SampleData(200);
    o_ = SampleOptions();
    TokenLoader l(data_.source, o_);
    for (int i = 0; i < 3; ++i) ASSERT_NE(l.Next(), nullptr);
    state_ = l.State();
    text_ = LoaderStateToJson(state_);
    ASSERT_FALSE(state_.packer.buffered.empty());
  }
  std::string Load(const LoaderState& s) {
    return ErrorOf([&] { TokenLoader l(data_.source, o_, s); });
  }
  std::string LoadText(const std::string& text) {
    return ErrorOf([&] { TokenLoader l(data_.source, o_, LoaderStateFromJson(text)); });
  }
  Data data_;
  LoaderOptions o_;
  LoaderState state_;
  std::string text_;
};

TEST_F(StateRefusals, AnEditedFieldBreaksTheChecksum) {
  std::string edited = text_;
  const auto at = edited.find("\"epoch\": 0");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 10, "\"epoch\": 1");
  EXPECT_NE(LoadText(edited).find("state: checksum"), std::string::npos) << LoadText(edited);
  EXPECT_EQ(LoadText(text_), "no error");
}

TEST_F(StateRefusals, AStateOfAnotherEpochIsRefusedEvenWithoutTheChecksum) {
  LoaderState s = state_;
  s.epoch = 1;  // the packer holds documents of epoch 0's order
  const std::string e = Load(s);
  EXPECT_EQ(e.rfind("state: ", 0), 0u) << e;
  EXPECT_NE(e.find("another plan or epoch"), std::string::npos) << e;
}

TEST_F(StateRefusals, AnotherDataSetWithTheSameDocumentCountIsRefused) {
  Data other = SampleData(200, /*bump_document=*/17);  // a re-tokenised corpus
  const std::string e =
      ErrorOf([&] { TokenLoader l(other.source, o_, LoaderStateFromJson(text_)); });
  EXPECT_NE(e.find("state: was saved for another data set"), std::string::npos) << e;
  EXPECT_NE(e.find("num_tokens"), std::string::npos) << e;
}

// Issue 20: a state of data set A resumed a loader over a data set B of the
// same lengths (B's first packs were never delivered). Per rank and with
// equal steps; the state resumes its own data exactly.
TEST_F(StateRefusals, RegressionAStateOfAnotherDataSetWithTheSameLengthsIsRefused) {
  Data other;
  for (Index d = 0; d < data_.num_documents(); ++d) {
    other.Add(data_.length(d), [d](Index t) { return static_cast<std::int32_t>(7 * d + t + 1); });
  }
  other.Seal();
  for (const bool equal : {false, true}) {
    LoaderOptions o = o_;
    o.equal_steps = equal;
    TokenLoader whole(data_.source, o);
    const std::vector<Pieces> all = Drain(whole);
    TokenLoader first(data_.source, o);
    for (int i = 0; i < 3; ++i) ASSERT_NE(first.Next(), nullptr);
    const std::string text = LoaderStateToJson(first.State());
    const std::string e =
        ErrorOf([&] { TokenLoader l(other.source, o, LoaderStateFromJson(text)); });
    EXPECT_EQ(e.rfind("state: was saved for another data set", 0), 0u) << e;
    EXPECT_NE(e.find("the data differs"), std::string::npos) << e;
    TokenLoader rest(data_.source, o, LoaderStateFromJson(text));
    EXPECT_EQ(Drain(rest), std::vector<Pieces>(all.begin() + 3, all.end())) << equal;
  }
}

TEST_F(StateRefusals, InconsistentFieldsAreRefusedNamingTheField) {
  LoaderState s = state_;
  s.head.push_back(Piece{
      .item = 4, .length = 1 << 20, .start = std::numeric_limits<Index>::max() - 1});  // overflows
  EXPECT_NE(Load(s).find("state: head[0]"), std::string::npos) << Load(s);
  s = state_;
  s.head = std::vector<Piece>(5, Piece{.item = 0, .length = 5});
  EXPECT_NE(Load(s).find("state: head: document 0 is listed twice"), std::string::npos) << Load(s);
  s = state_;
  s.consumers = 0;
  EXPECT_NE(Load(s).find("state: consumers: 0 marks a merged state"), std::string::npos);
  s = state_;
  s.packer.buffered.push_back(s.packer.buffered.front());
  s.packer.items_seen = s.read;
  EXPECT_NE(Load(s).find("listed twice"), std::string::npos) << Load(s);
  s = state_;
  s.position = 201;
  EXPECT_NE(Load(s).find("state: position: 201 is outside [0, 200]"), std::string::npos);
  s = state_;
  s.read += 1;
  EXPECT_NE(Load(s).find("state: packer.items_seen"), std::string::npos) << Load(s);
  s = state_;
  s.done = {199, 199};
  EXPECT_NE(Load(s).find("state: done must be increasing"), std::string::npos);
  s = state_;
  s.batches = 1000;
  EXPECT_NE(Load(s).find("state: batches: 1000"), std::string::npos) << Load(s);
  s = state_;
  s.consumer = 5;
  EXPECT_NE(Load(s).find("state: consumer: 5"), std::string::npos) << Load(s);
}

// Found by fuzz/state_fuzzer.cc: a merged state (whose version-1 form has no
// checksum) with its epoch edited kept head pieces of documents that the new
// epoch's order still had to deliver, so their tokens came twice.
TEST_F(StateRefusals, RegressionHeadDocumentStillToComeInTheOrderIsRefused) {
  LoaderState merged = MergeLoaderStates(TwoRanksAfterThreeBatches(data_, o_));
  ASSERT_FALSE(merged.head.empty());
  EXPECT_EQ(Load(merged), "no error");
  merged.epoch = 5;
  const std::string e = Load(merged);
  EXPECT_EQ(e.rfind("state: head[", 0), 0u) << e;
  EXPECT_NE(e.find("is also still to come at order position"), std::string::npos) << e;
}

TEST_F(StateRefusals, HostileTextNeverCrashes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "state: not valid JSON at byte 0"},
      {"[]", "state: expected an object, got a list"},
      {"{\"version\": 5}",
       "state: version: a version 5 loader state; this shardkit reads version 4"},
      {"{\"version\": 1.5}", "only integers"},
      {"{\"version\": 2, \"version\": 2}", "appears twice"},
      {std::string(100000, '['), "nested deeper than 64"},
      {"{\"version\": 99999999999999999999}", "state: version: 99999999999999999999 does not fit"},
      {"\"\\ud800\"", "unpaired surrogate"},
  };
  for (const auto& [text, want] : cases) {
    const std::string e = ErrorOf([&] { (void)LoaderStateFromJson(text); });
    EXPECT_NE(e.find(want), std::string::npos) << text.substr(0, 40) << " -> " << e;
  }
  // Every truncation and every one-byte change of a real state is refused
  // with invalid_argument or still loads (never a crash).
  for (std::size_t n = 0; n < text_.size(); n += 7) {
    (void)ErrorOf([&] { (void)LoaderStateFromJson(text_.substr(0, n)); });
    std::string mutated = text_;
    mutated[n] = static_cast<char>(mutated[n] ^ 0x11);
    const std::string e = LoadText(mutated);
    EXPECT_NE(e, "no error") << "byte " << n;
  }
  // A wrong type anywhere names the field.
  std::string wrong = text_;
  wrong.replace(wrong.find("\"head\": ["), 9, "\"head\": {\"a\": 1}, \"x\": [");
  EXPECT_NE(LoadText(wrong).find("state: "), std::string::npos);
  const std::string e = LoadText(
      "{\"version\": 4, \"epoch\": 0, \"head\": 5, \"position\": 0, \"done\": [], \"consumers\": "
      "1}");
  EXPECT_NE(e.find("state: head: expected a list, got an integer"), std::string::npos) << e;
}

}  // namespace
}  // namespace shardkit
