// The layout section of the demo: one shuffled epoch of the documents, read
// as global batches of 32 by 4 hosts whose 8 devices form a data x model mesh
// with interleaved owners. Each host reads only its rows of each step. Then the
// data roles of 8 torchrun ranks on a dp x pp x tp mesh: which shard each rank
// reads, which ranks must see the same data, who reads and who receives.
#include <algorithm>
#include <string>
#include <vector>

#include "cli/demo.h"
#include "shardkit/layout/data_roles.h"
#include "shardkit/layout/loading_plan.h"
#include "shardkit/layout/named_sharding.h"
#include "shardkit/sharding/shard_plan.h"

namespace shardkit::cli {

void DemoLayout(const DemoContext& c, HtmlReport& report) {
  constexpr Index kBatch = 32;
  // data=4 splits the batch, model=2 replicates it. Host h owns the devices
  // (data=h, model=0) and (data=(h+1)%4, model=1): every row is on two hosts.
  const std::vector<Index> owners = {0, 3, 1, 0, 2, 1, 3, 2};
  NamedSharding sharding(Mesh({{"data", 4}, {"model", 2}}, owners),
                         ParsePartitionSpec("data, None"));
  LoadingPlan plan(sharding, kBatch);
  ShardOptions options;
  options.shuffle = true;
  options.seed = 2024;
  const Index n = static_cast<Index>(c.documents.size());
  Shard order = ShardPlan(n, 1, options).GetShard(0);
  const Index steps = plan.NumSteps(order);

  c.out << "== layout: a 32-row global batch on a data=4 x model=2 mesh, 4 hosts\n"
        << "   owners ";
  for (Index o : owners) c.out << o << ' ';
  c.out << "(row-major devices), " << steps << " steps per epoch\n";
  std::vector<std::vector<std::string>> table = {
      {"host", "rows of each batch", "step 0 reads", "tokens over the epoch"}};
  c.json.Key("layout")
      .Begin()
      .Key("batch")
      .Int(kBatch)
      .Key("steps")
      .Int(steps)
      .Key("hosts")
      .BeginList();
  for (Index host = 0; host < 4; ++host) {
    std::string rows;
    for (const Slice& s : plan.Rows(host)) {
      rows += (rows.empty() ? "" : " ") + std::to_string(s.start) + ":" + std::to_string(s.stop);
    }
    const Index k = plan.NumRows(host);
    std::vector<Index> items(k);
    std::vector<char> padding(k);
    Index tokens = 0;
    std::string first;
    for (Index step = 0; step < steps; ++step) {
      plan.Items(order, step, host, items.data(), reinterpret_cast<bool*>(padding.data()));
      for (Index item : items) tokens += c.documents[item].tokens;
      if (step == 0) {
        for (Index j = 0; j < std::min<Index>(k, 2); ++j) {
          first += (j ? ", " : "") + c.documents[items[j]].path;
        }
        if (k > 2) first += ", ...";
      }
    }
    c.out << "   host " << host << ": rows " << rows << "  (" << k << " of " << kBatch
          << "), step 0: " << first << "\n";
    table.push_back({std::to_string(host), rows, first, std::to_string(tokens)});
    c.json.Begin().Key("host").Int(host).Key("rows").Int(k).Key("tokens").Int(tokens).End();
  }
  Index min_hosts = 4, max_hosts = 0;
  for (Index row = 0; row < kBatch; ++row) {
    const Index h = static_cast<Index>(plan.HostsOf(row).size());
    min_hosts = std::min(min_hosts, h);
    max_hosts = std::max(max_hosts, h);
  }
  c.json.End().Key("hosts_per_row").IntList({min_hosts, max_hosts}).End();
  c.out << "   each row is held (and read) by " << min_hosts << ".." << max_hosts
        << " hosts: the model axis replicates the batch\n\n";
  report.AddSection("Global-array layout",
                    "<p>A shuffled epoch read as global batches of 32 rows, split over "
                    "<code>data=4</code> and replicated over <code>model=2</code>, with "
                    "interleaved device owners. Each host reads only the rows its devices "
                    "hold (shardkit.jax.host_items), in the order "
                    "make_array_from_process_local_data expects.</p>" +
                        HtmlTable(table));
  // Data roles: only the data axis chooses the shard; tensor-parallel pairs
  // and pipeline stages see the same data; only pipeline stage 0 reads.
  const Mesh ranks = RankOrderMesh({{"dp", 2}, {"pp", 2}, {"tp", 2}});
  const ShardPlan split(n, 2, ShardOptions{});
  c.out << "== data roles: 8 torchrun ranks on a dp=2 x pp=2 x tp=2 mesh, data axis dp,"
        << " pipeline stage 0 reads\n"
        << "         pp=0,tp=0   pp=0,tp=1   pp=1,tp=0   pp=1,tp=1\n";
  std::vector<std::vector<std::string>> roles_table = {
      {"rank", "dp, pp, tp", "data shard", "replica group", "reads", "saves state"}};
  c.json.Key("data_roles").BeginList();
  for (Index dp = 0; dp < 2; ++dp) {
    c.out << "   dp=" << dp << "  ";
    Index dp_rank = 0;
    for (Index k = 0; k < 4; ++k) {
      const Index rank = dp * 4 + k;
      DataRoles r(ranks, {"dp"}, rank, {"pp"});
      dp_rank = r.dp_rank();
      std::string cell =
          std::to_string(rank) + (r.loads() ? " reads" : " <- " + std::to_string(r.source()));
      c.out << cell << std::string(12 - std::min<size_t>(cell.size(), 11), ' ');
      std::string group;
      for (Index g : r.replica_group()) group += (group.empty() ? "" : " ") + std::to_string(g);
      roles_table.push_back(
          {std::to_string(rank),
           std::to_string(dp) + ", " + std::to_string(k / 2) + ", " + std::to_string(k % 2),
           std::to_string(r.dp_rank()) + " of " + std::to_string(r.dp_size()), group,
           r.loads() ? "yes" : "from rank " + std::to_string(r.source()), r.saves() ? "yes" : ""});
      c.json.Begin()
          .Key("rank")
          .Int(rank)
          .Key("dp_rank")
          .Int(r.dp_rank())
          .Key("replica_group")
          .IntList({r.replica_group().begin(), r.replica_group().end()})
          .Key("loads")
          .Bool(r.loads())
          .Key("source")
          .Int(r.source())
          .Key("saves")
          .Bool(r.saves())
          .End();
    }
    c.out << "shard " << dp_rank << ": " << split.GetShard(dp_rank).size() << " documents\n";
  }
  c.json.End();
  c.out << "   each row is one replica group (identical data); \"a <- b\": rank a receives"
        << " from rank b\n\n";
  report.AddSection("Data roles from a parallelism mesh",
                    "<p>8 ranks in torchrun order on a <code>dp=2 x pp=2 x tp=2</code> mesh "
                    "with data axis <code>dp</code> and <code>broadcast_axes=('pp',)</code>: "
                    "the tensor-parallel pair and the pipeline stages of one model replica "
                    "see the same shard; only stage 0 reads it (Whale's master workers), "
                    "and one rank per group saves the loader state "
                    "(shardkit.DataRoles).</p>" +
                        HtmlTable(roles_table));
}

}  // namespace shardkit::cli
