// The layout section of the demo: one shuffled epoch of the documents, read
// as global batches of 32 by 4 hosts whose 8 devices form a data x model mesh
// with interleaved owners. Each host reads only its rows of each step.
#include <algorithm>
#include <string>
#include <vector>

#include "cli/demo.h"
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
}

}  // namespace shardkit::cli
