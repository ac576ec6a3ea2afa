// TrainPlan's plans, bit for bit, against testdata/train_plan_golden_v1.txt:
// digests of every rank's rows of every step (pieces, epochs, stream
// indices), the summary, the stream and plan fingerprints, resumed readers
// and DocumentsReadAt over random configurations (sizes up to 2.2e6
// documents: many blocks of the pack stream's gather, bucketed or not). The
// file was written by the planner before its gather was reordered (commit
// 6b5275f's pack_stream.h), so a change of the planner's speed must leave it
// unchanged. Its stream= and fingerprint= columns were rewritten once, when
// the fingerprints moved to base/hash.h's Hasher (train state version 3),
// every other column unchanged, and again for the 9 continuous-mode cases
// when continuous mode joined the stream fingerprint (a pad state had resumed
// a continuous loader), every other column unchanged. To rewrite it (only when the plan is meant
// to change, with a new version name):
//   SHARDKIT_WRITE_TRAIN_PLAN_GOLDEN=path build/dev/shardkit/train_plan_golden_test
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "shardkit/loader/train_plan.h"

namespace shardkit {
namespace {

// FNV-1a over 64-bit values (a test-local digest, independent of the
// library's hashes).
struct Digest {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  void Add(std::uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  }
  void Add(const TrainStep& s) {
    Add(static_cast<std::uint64_t>(s.step));
    Add(static_cast<std::uint64_t>(s.rows.size()));
    for (std::size_t r = 0; r < s.rows.size(); ++r) {
      Add(s.row_epochs[r]);
      Add(static_cast<std::uint64_t>(s.row_packs[r]));
      Add(static_cast<std::uint64_t>(s.rows[r].size()));
      for (const PackItem& p : s.rows[r]) {
        Add(static_cast<std::uint64_t>(p.item));
        Add(static_cast<std::uint64_t>(p.start));
        Add(static_cast<std::uint64_t>(p.length));
        Add(static_cast<std::uint64_t>(p.images));
      }
    }
    Add(static_cast<std::uint64_t>(s.tokens));
    Add(static_cast<std::uint64_t>(s.filler_rows));
  }
};

std::string Hex(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// One line per case: its parameters, then what its plan gives.
std::vector<std::string> Cases() {
  std::mt19937_64 rng(20261127);
  auto pick = [&rng](std::uint64_t m) { return static_cast<Index>(rng() % m); };
  std::vector<std::string> lines;
  const Index sizes[] = {0, 1, 7, 100, 513, 2000, 4097, 30000, 70000, 300000};
  // Cases 40 and 41: more documents than the pack stream's bucketed gather
  // starts at (2^21).
  for (int c = 0; c < 42; ++c) {
    const Index n = c < 40 ? sizes[c % 10] : 2'200'000;
    TrainOptions o;
    o.seq_len = std::vector<Index>{64, 256, 1024, 4096}[static_cast<std::size_t>(pick(4))];
    o.batch_size = 1 + pick(4);
    o.world_size = 1 + pick(8);
    o.micro_batches = 1 + pick(2);
    o.mode = static_cast<TrainMode>(pick(3));
    o.shuffle = pick(5) != 0;
    o.seed = rng();
    o.epoch = static_cast<std::uint64_t>(pick(3));
    o.algorithm = pick(2) ? PackAlgorithm::kBestFitDecreasing : PackAlgorithm::kNextFit;
    if (pick(3) == 0) o.buffer = 1 + pick(3000);
    if (pick(4) == 0) o.max_sequences = 1 + pick(8);
    o.oversize = pick(4) == 0 ? Oversize::kDrop : Oversize::kSplit;
    o.cost = pick(2) ? CostModel::kTokens : CostModel::kSquaredLengths;
    const bool with_images = pick(4) == 0;
    if (with_images) o.max_images = 2 + pick(6);
    if (o.seq_len >= 256 && pick(5) == 0) o.cp.size = 2;
    const bool from_offsets = !with_images && pick(2) == 0;
    // Lognormal-like lengths from a few shapes (short, long, a few huge).
    std::vector<Index> lengths(static_cast<std::size_t>(n)), images;
    for (auto& l : lengths) {
      const Index r = pick(100);
      l = r < 60 ? pick(o.seq_len / 4 + 1) : r < 95 ? pick(o.seq_len + 1) : pick(3 * o.seq_len);
    }
    if (with_images) {
      images.resize(static_cast<std::size_t>(n));
      for (auto& i : images) i = pick(3);
    }
    std::vector<std::int64_t> offsets(1, 0);
    for (Index l : lengths) offsets.push_back(offsets.back() + l);
    auto documents = [&] {
      return from_offsets ? TrainDocuments::FromOffsets(offsets)
                          : TrainDocuments::FromSpans(lengths, images);
    };

    std::ostringstream line;
    line << "case " << c << " n=" << n << " seq_len=" << o.seq_len << " b=" << o.batch_size
         << " W=" << o.world_size << " m=" << o.micro_batches << " mode=" << TrainModeName(o.mode)
         << " shuffle=" << o.shuffle << " epoch=" << o.epoch
         << " alg=" << PackAlgorithmName(o.algorithm) << " buffer=" << o.buffer.value_or(-1)
         << " max_seq=" << o.max_sequences.value_or(-1) << " oversize=" << OversizeName(o.oversize)
         << " cost=" << CostModelName(o.cost) << " images=" << o.max_images.value_or(-1)
         << " cp=" << o.cp.size << " offsets=" << from_offsets;

    TrainPlan plan(documents(), o);
    const TrainSummary& s = plan.summary();
    line << " | steps=" << s.num_steps << " packs=" << s.packs << " stream_packs=" << s.stream_packs
         << " tokens=" << s.tokens << " pieces=" << s.pieces << " split=" << s.split_documents
         << " dropped=" << s.dropped << " filler=" << s.filler_rows
         << " next_epoch_rows=" << s.next_epoch_rows << " end=" << s.end.epoch << ":"
         << s.end.position << " stream=" << Hex(plan.StateAt(0).stream)
         << " fingerprint=" << Hex(plan.Fingerprint());
    Digest all;
    auto reader = plan.Read(-1);
    std::vector<TrainStep> steps;
    // Continuous readers go on into the next epochs: the plan's steps only.
    for (Index k = 0; k < s.num_steps && reader->NextAll(&steps); ++k) {
      for (const TrainStep& st : steps) all.Add(st);
    }
    line << " all=" << Hex(all.h);

    // A rank read from a random step (a checkpoint restored mid-block), and
    // the same from a resumed, deferred plan read once.
    if (s.num_steps > 0) {
      const Index rank = pick(static_cast<std::uint64_t>(o.world_size));
      const Index first = pick(static_cast<std::uint64_t>(s.num_steps));
      Digest from;
      auto r = plan.Read(rank, first);
      TrainStep st;
      for (int k = 0; k < 5 && r->Next(&st); ++k) from.Add(st);
      const TrainState state = plan.StateAt(first);
      auto resumed = TrainPlan::Deferred(documents(), o, state);
      auto once = resumed->ReadOnce(rank, 0);
      for (int k = 0; k < 5 && once->Next(&st); ++k) from.Add(st);
      line << " from=" << rank << "@" << first << ":" << Hex(from.h)
           << " read_at=" << plan.DocumentsReadAt(state.position);
    }
    lines.push_back(line.str());
  }
  return lines;
}

TEST(TrainPlanGoldenTest, PlansEqualThoseOfThePlannerBeforeTheBlockedGather) {
  const std::vector<std::string> lines = Cases();
  if (const char* out = std::getenv("SHARDKIT_WRITE_TRAIN_PLAN_GOLDEN")) {
    std::ofstream f(out);
    for (const std::string& l : lines) f << l << "\n";
    GTEST_SKIP() << "wrote " << out;
  }
  std::ifstream f(SHARDKIT_TESTDATA_DIR "/train_plan_golden_v1.txt");
  ASSERT_TRUE(f) << "missing " SHARDKIT_TESTDATA_DIR "/train_plan_golden_v1.txt";
  std::vector<std::string> golden;
  for (std::string l; std::getline(f, l);) golden.push_back(l);
  ASSERT_EQ(golden.size(), lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i], golden[i]);
}

}  // namespace
}  // namespace shardkit
