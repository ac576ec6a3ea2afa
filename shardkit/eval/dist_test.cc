#include "shardkit/eval/dist.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

ProcessInfo From(std::map<std::string, std::string> vars) {
  return DiscoverProcess([vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

TEST(DistTest, NothingSetMeansOneProcess) {
  ProcessInfo p = From({});
  EXPECT_EQ(p.rank, 0);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.local_rank, 0);
  EXPECT_EQ(p.source, "default");
}

TEST(DistTest, EachLauncherIsRead) {
  ProcessInfo t = From({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.local_rank, 1);
  ProcessInfo o = From({{"OMPI_COMM_WORLD_RANK", "2"},
                        {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  EXPECT_EQ(o.source, "openmpi");
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.local_rank, 0);
  ProcessInfo p = From({{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "1"}});
  EXPECT_EQ(p.source, "pmi");
  EXPECT_EQ(p.local_rank, 1);
  ProcessInfo s = From({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "3"}});
  EXPECT_EQ(s.source, "slurm");
  EXPECT_EQ(s.rank, 7);
  EXPECT_EQ(s.world_size, 16);
  EXPECT_EQ(s.local_rank, 3);
}

TEST(DistTest, TorchrunWinsOverMpiWinsOverSlurm) {
  std::map<std::string, std::string> all = {{"RANK", "1"},
                                            {"WORLD_SIZE", "2"},
                                            {"OMPI_COMM_WORLD_RANK", "3"},
                                            {"OMPI_COMM_WORLD_SIZE", "4"},
                                            {"PMI_RANK", "0"},
                                            {"PMI_SIZE", "4"},
                                            {"SLURM_PROCID", "9"},
                                            {"SLURM_NTASKS", "10"}};
  EXPECT_EQ(From(all).source, "torchrun");
  all.erase("RANK");  // an incomplete source is skipped
  EXPECT_EQ(From(all).source, "openmpi");
  all.erase("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(From(all).source, "pmi");
  all.erase("PMI_SIZE");
  EXPECT_EQ(From(all).source, "slurm");
}

TEST(DistTest, LocalRankDefaultsToTheRank) {
  EXPECT_EQ(From({{"RANK", "3"}, {"WORLD_SIZE", "4"}}).local_rank, 3);
  EXPECT_EQ(From({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"PMI_LOCAL_RANK", "0"}}).local_rank, 0);
}

TEST(DistTest, BadValuesNameTheVariable) {
  auto message = [](std::map<std::string, std::string> vars) {
    return base_testing::ErrorOf([&] { (void)From(vars); });
  };
  EXPECT_EQ(message({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).rfind("RANK: rank 4 is outside", 0), 0u);
  EXPECT_EQ(message({{"RANK", "x"}, {"WORLD_SIZE", "4"}}).rfind("RANK: environment value 'x'", 0),
            0u);
  EXPECT_EQ(message({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}).rfind("SLURM_NTASKS: ", 0), 0u);
  EXPECT_EQ(
      message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}}).rfind("LOCAL_RANK: ", 0),
      0u);
  EXPECT_EQ(message({{"RANK", "1 "}, {"WORLD_SIZE", "2"}}).rfind("RANK: ", 0), 0u);
}

}  // namespace
}  // namespace shardkit
