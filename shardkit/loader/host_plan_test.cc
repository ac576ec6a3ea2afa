#include "shardkit/loader/host_plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shardkit/base/testing.h"
#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit {
namespace {

namespace fs = std::filesystem;
using base_testing::ErrorOf;
using base_testing::TempDir;
using loader_testing::ExpectSameSummary;
using loader_testing::PlanOptions;

std::vector<Index> Lengths(Index n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> dist(5.5, 1.2);
  std::vector<Index> v(static_cast<std::size_t>(n));
  for (Index& x : v) x = 1 + static_cast<Index>(dist(rng));
  return v;
}

void ExpectSameStep(const TrainStep& a, const TrainStep& b) {
  ASSERT_EQ(a.step, b.step);
  ASSERT_EQ(a.rows.size(), b.rows.size());
  for (std::size_t r = 0; r < a.rows.size(); ++r) {
    ASSERT_EQ(a.rows[r].size(), b.rows[r].size()) << "step " << a.step << " row " << r;
    for (std::size_t k = 0; k < a.rows[r].size(); ++k) {
      EXPECT_EQ(a.rows[r][k].item, b.rows[r][k].item);
      EXPECT_EQ(a.rows[r][k].start, b.rows[r][k].start);
      EXPECT_EQ(a.rows[r][k].length, b.rows[r][k].length);
      EXPECT_EQ(a.rows[r][k].images, b.rows[r][k].images);
    }
  }
  EXPECT_EQ(a.row_epochs, b.row_epochs);
  EXPECT_EQ(a.row_packs, b.row_packs);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.filler_rows, b.filler_rows);
  EXPECT_EQ(a.cost, b.cost);
  EXPECT_EQ(a.imbalance, b.imbalance);
}

// Expects `got` to be `want`, step by step.
void ExpectSameSteps(const std::vector<TrainStep>& got, const std::vector<TrainStep>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t s = 0; s < want.size(); ++s) ExpectSameStep(got[s], want[s]);
}

// Reads every step of `reader`, with a Skip between the kept ones when
// `stride` > 1 (a loader worker's pattern).
std::vector<TrainStep> Drain(TrainPlan::Reader* reader, Index stride) {
  std::vector<TrainStep> out;
  TrainStep s;
  for (;;) {
    if (!reader->Next(&s)) break;
    out.push_back(s);
    bool more = true;
    for (Index k = 1; k < stride && more; ++k) more = reader->Skip();
    if (!more) break;
  }
  return out;
}

class HostPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir("host_plan", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  HostPlanOptions Host(Index local_rank) const {
    HostPlanOptions h;
    h.local_rank = local_rank;
    h.directory = dir_.string();
    h.timeout_seconds = 5;
    return h;
  }
  // A deferred plan of `docs` and rank `rank`'s reader of it, shared through
  // the host file of local rank `local_rank` (`info`: what the reader did).
  struct Shared {
    std::unique_ptr<TrainPlan> plan;
    std::unique_ptr<TrainPlan::Reader> reader;
  };
  Shared ReadShared(const TrainDocuments& docs, const TrainOptions& o, Index rank, Index local_rank,
                    HostPlanInfo* info) const {
    Shared s{TrainPlan::Deferred(docs, o, std::nullopt), nullptr};
    s.reader = s.plan->ReadShared(rank, 0, Host(local_rank), info);
    return s;
  }
  fs::path dir_;
};

// The oracle: each rank's ReadOnce over its own Deferred plan (no sharing).
TEST_F(HostPlanTest, EveryRankDeliversWhatItDeliversWithoutTheSharedPlan) {
  const std::vector<Index> lengths = Lengths(5000, 7);
  const TrainDocuments docs = TrainDocuments::FromSpans(lengths);
  struct Case {
    TrainMode mode;
    Index W, batch;
    bool shuffle;
    Index position;
    Index stride;
    CostModel cost;
  };
  const Case cases[] = {
      {TrainMode::kPad, 4, 3, true, 0, 1, CostModel::kTokens},
      {TrainMode::kDrop, 3, 2, true, 0, 2, CostModel::kSquaredLengths},
      {TrainMode::kContinuous, 5, 2, false, 0, 1, CostModel::kTokens},
      {TrainMode::kPad, 2, 4, true, 37, 3, CostModel::kTokens},
  };
  for (const Case& c : cases) {
    TrainOptions o = PlanOptions(2048, c.batch, c.W);
    o.mode = c.mode;
    o.shuffle = c.shuffle;
    o.seed = 11;
    o.epoch = 2;
    o.position = c.position;
    o.cost = c.cost;
    SCOPED_TRACE(static_cast<int>(c.mode));
    // Local rank 0 (rank c.W - 1 here: any rank may be the host's first).
    std::vector<std::unique_ptr<TrainPlan>> plans;
    std::vector<std::unique_ptr<TrainPlan::Reader>> readers;
    std::vector<HostPlanInfo> infos(static_cast<std::size_t>(c.W));
    for (Index r = c.W - 1; r >= 0; --r) {
      plans.push_back(TrainPlan::Deferred(docs, o, std::nullopt));
      const Index local = c.W - 1 - r;
      readers.push_back(plans.back()->ReadShared(r, r % c.stride, Host(local),
                                                 &infos[static_cast<std::size_t>(r)]));
    }
    for (Index r = c.W - 1; r >= 0; --r) {
      const std::size_t k = static_cast<std::size_t>(c.W - 1 - r);
      EXPECT_EQ(infos[static_cast<std::size_t>(r)].role, r == c.W - 1 ? "built" : "mapped");
      EXPECT_TRUE(fs::exists(infos[static_cast<std::size_t>(r)].path));
      const auto oracle_plan = TrainPlan::Deferred(docs, o, std::nullopt);
      const auto oracle = oracle_plan->ReadOnce(r, r % c.stride);
      const std::vector<TrainStep> want = Drain(oracle.get(), c.stride);
      const std::vector<TrainStep> got = Drain(readers[k].get(), c.stride);
      ASSERT_EQ(got.size(), want.size()) << "rank " << r;
      ASSERT_FALSE(want.empty());
      for (std::size_t s = 0; s < want.size(); ++s) ExpectSameStep(got[s], want[s]);
      ExpectSameSummary(plans[k]->summary(), oracle_plan->summary());
      EXPECT_EQ(plans[k]->num_steps(), oracle_plan->num_steps());
      for (Index s = 0; s <= oracle_plan->num_steps(); ++s) {
        EXPECT_EQ(plans[k]->StateAt(s), oracle_plan->StateAt(s));
      }
      // And the whole plan's steps (every rank) through the file.
      if (r == 0) {
        const TrainPlan full(docs, o);
        const auto fresh = TrainPlan::Deferred(docs, o, std::nullopt);
        auto all = fresh->ReadShared(0, 0, Host(1));
        std::vector<TrainStep> got_all, want_all;
        auto want_reader = full.Read(-1, 0);
        for (Index s = 0; s < full.num_steps(); ++s) {
          ASSERT_TRUE(want_reader->NextAll(&want_all));
          ASSERT_TRUE(all->NextAll(&got_all));
          for (std::size_t q = 0; q < want_all.size(); ++q) ExpectSameStep(got_all[q], want_all[q]);
        }
        EXPECT_FALSE(all->NextAll(&got_all));
      }
    }
    // Local rank 0's reader removes the file when it goes.
    const std::string path = infos[static_cast<std::size_t>(c.W - 1)].path;
    readers.front().reset();
    EXPECT_FALSE(fs::exists(path));
  }
}

TEST_F(HostPlanTest, AnotherPlanHasAnotherFile) {
  const std::vector<Index> lengths = Lengths(500, 3);
  const TrainDocuments docs = TrainDocuments::FromSpans(lengths);
  TrainOptions o = PlanOptions(1024, 2, 2);
  HostPlanInfo a, b, c;
  auto ra = ReadShared(docs, o, 0, 0, &a);
  o.seed = 1;
  auto rb = ReadShared(docs, o, 0, 0, &b);
  o.seed = 0;
  TrainDocuments other = docs;
  other.identity = 42;  // same lengths, another data set
  auto rc = ReadShared(other, o, 0, 0, &c);
  EXPECT_NE(a.path, b.path);
  EXPECT_NE(a.path, c.path);
  EXPECT_EQ(c.role, "built");
}

// A file under the plan's name that fails a check is never used: a reader
// plans the epoch itself, local rank 0 rebuilds the file.
TEST_F(HostPlanTest, ACorruptTruncatedOrForeignFileIsRefused) {
  const std::vector<Index> lengths = Lengths(3000, 5);
  const TrainDocuments docs = TrainDocuments::FromSpans(lengths);
  TrainOptions o = PlanOptions(2048, 2, 3);
  o.seed = 4;
  const auto oracle_plan = TrainPlan::Deferred(docs, o, std::nullopt);
  // Rank 2's section is the file's last one (edited below).
  const std::vector<TrainStep> want = Drain(oracle_plan->ReadOnce(2, 0).get(), 1);

  // A valid file, kept (its builder's reader stays alive while we copy it).
  HostPlanInfo built;
  auto builder = ReadShared(docs, o, 0, 0, &built);
  ASSERT_EQ(built.role, "built");
  const fs::path good = dir_ / "good.bin";
  fs::copy_file(built.path, good);
  const std::uintmax_t size = fs::file_size(good);
  // Another plan's file (another seed), to put under this plan's name.
  TrainOptions o2 = o;
  o2.seed = 5;
  HostPlanInfo foreign_info;
  auto foreign_reader = ReadShared(docs, o2, 0, 0, &foreign_info);
  builder.reader.reset();  // not read to its end: the file stays, for the next local rank 0
  ASSERT_TRUE(fs::exists(built.path));
  {
    HostPlanInfo again;
    auto shared = ReadShared(docs, o, 0, 0, &again);
    EXPECT_EQ(again.role, "reused");
    (void)Drain(shared.reader.get(), 1);
  }  // read to its end: removed
  ASSERT_FALSE(fs::exists(built.path));

  auto edited = [&](const std::string& what) {
    fs::copy_file(good, built.path, fs::copy_options::overwrite_existing);
    std::fstream f(built.path, std::ios::in | std::ios::out | std::ios::binary);
    if (what == "section byte") {
      f.seekp(static_cast<std::streamoff>(size - 100));
      f.put('\x7f');
    } else if (what == "header byte") {
      f.seekp(8 * 10);
      f.put('\x01');
    } else if (what == "magic") {
      f.seekp(0);
      f.put('X');
    }
    f.close();
    if (what == "truncated") fs::resize_file(built.path, size - 64);
    if (what == "empty") fs::resize_file(built.path, 0);
    if (what == "foreign") {
      fs::copy_file(foreign_info.path, built.path, fs::copy_options::overwrite_existing);
    }
  };
  for (const std::string what :
       {"section byte", "header byte", "magic", "truncated", "empty", "foreign"}) {
    SCOPED_TRACE(what);
    edited(what);
    HostPlanInfo info;
    auto shared = ReadShared(docs, o, 2, 2, &info);
    EXPECT_EQ(info.role, "recomputed");
    const std::vector<TrainStep> got = Drain(shared.reader.get(), 1);
    ExpectSameSteps(got, want);
    ExpectSameSummary(shared.plan->summary(), oracle_plan->summary());
    // Local rank 0 rebuilds it; then a reader maps it.
    HostPlanInfo rebuilt, mapped;
    auto r0 = ReadShared(docs, o, 0, 0, &rebuilt);
    EXPECT_EQ(rebuilt.role, "built");
    auto r1 = ReadShared(docs, o, 2, 1, &mapped);
    EXPECT_EQ(mapped.role, "mapped");
    const std::vector<TrainStep> again = Drain(r1.reader.get(), 1);
    ExpectSameSteps(again, want);
  }
  // A valid file left by an earlier run of the same plan is reused.
  fs::copy_file(good, built.path, fs::copy_options::overwrite_existing);
  HostPlanInfo reused;
  auto r0 = ReadShared(docs, o, 2, 0, &reused);
  EXPECT_EQ(reused.role, "reused");
  const std::vector<TrainStep> got = Drain(r0.reader.get(), 1);
  ExpectSameSteps(got, want);
}

// Two loaders of one plan on a host (a finished run's loader not yet
// destroyed, the next run's starting): the first one's removal at its end
// does not take the file the second one's ranks are about to map.
TEST_F(HostPlanTest, AFinishedLoaderDoesNotRemoveTheFileOfTheNextOne) {
  const std::vector<Index> lengths = Lengths(800, 9);
  const TrainDocuments docs = TrainDocuments::FromSpans(lengths);
  TrainOptions o = PlanOptions(1024, 2, 2);
  HostPlanInfo first, second, mapped;
  auto ra = ReadShared(docs, o, 0, 0, &first);
  (void)Drain(ra.reader.get(), 1);  // finished, not yet destroyed
  auto rb = ReadShared(docs, o, 0, 0, &second);
  EXPECT_EQ(second.role, "reused");
  ra.reader.reset();  // removes only the file it mapped
  ASSERT_TRUE(fs::exists(second.path));
  auto rc = ReadShared(docs, o, 1, 1, &mapped);
  EXPECT_EQ(mapped.role, "mapped");
  const auto oracle_plan = TrainPlan::Deferred(docs, o, std::nullopt);
  const std::vector<TrainStep> want = Drain(oracle_plan->ReadOnce(1, 0).get(), 1);
  const std::vector<TrainStep> got = Drain(rc.reader.get(), 1);
  ExpectSameSteps(got, want);
}

TEST_F(HostPlanTest, AReaderWithoutLocalRankZeroTimesOutNamingTheFile) {
  const std::vector<Index> lengths = Lengths(100, 1);
  TrainOptions o = PlanOptions(1024, 1, 2);
  auto plan = TrainPlan::Deferred(TrainDocuments::FromSpans(lengths), o, std::nullopt);
  HostPlanOptions h = Host(1);
  h.timeout_seconds = 0.05;
  const std::string error = ErrorOf([&] { (void)plan->ReadShared(1, 0, h); });
  EXPECT_NE(error.find("share_plan"), std::string::npos) << error;
  EXPECT_NE(error.find(dir_.string() + "/shardkit-plan-"), std::string::npos) << error;
  EXPECT_NE(error.find("local rank 0"), std::string::npos) << error;
  h.local_rank = -1;
  EXPECT_NE(ErrorOf([&] { (void)plan->ReadShared(1, 0, h); }).find("local_rank"),
            std::string::npos);
  h.local_rank = 1;
  h.timeout_seconds = 0;
  EXPECT_NE(ErrorOf([&] { (void)plan->ReadShared(1, 0, h); }).find("timeout_seconds"),
            std::string::npos);
}

}  // namespace
}  // namespace shardkit
