#include "shardkit/layout/loading_plan.h"

#include <algorithm>
#include <string>
#include <utility>

namespace shardkit {

LoadingPlan::LoadingPlan(NamedSharding sharding, Index batch_size)
    : sharding_(std::move(sharding)), batch_size_(batch_size) {
  CheckAtLeast("batch_size", batch_size, 0);
  const Index tiles = sharding_.Partitions(0);
  if (batch_size % tiles != 0) {
    std::string axes;
    for (int a : sharding_.DimAxes(0)) {
      const MeshAxis& axis = sharding_.mesh().axes()[a];
      axes += (axes.empty() ? "'" : ", '") + axis.name + "'=" + std::to_string(axis.size);
    }
    ThrowInvalid("batch_size", std::to_string(batch_size) + " is not divisible by the " +
                                   std::to_string(tiles) + " partitions of dimension 0 (axes " +
                                   axes + ")");
  }
  shard_rows_ = batch_size / tiles;
  const Mesh& mesh = sharding_.mesh();
  std::vector<Index> tile_of(mesh.size());
  sharding_.Tiles(0, tile_of.data());
  std::vector<std::pair<Index, Index>> pairs(mesh.size());  // (tile, host)
  for (Index d = 0; d < mesh.size(); ++d) pairs[d] = {tile_of[d], mesh.owners()[d]};
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  tile_offsets_.assign(tiles + 1, 0);
  for (const auto& [tile, host] : pairs) {
    ++tile_offsets_[tile + 1];
    tile_hosts_.push_back(host);
  }
  for (Index t = 0; t < tiles; ++t) tile_offsets_[t + 1] += tile_offsets_[t];
}

std::vector<Slice> LoadingPlan::Rows(Index process) const {
  std::span<const Index> devices = sharding_.mesh().DevicesOf(process);
  if (devices.empty()) {
    ThrowOutOfRange("process", std::to_string(process) + " owns no device of the mesh");
  }
  std::vector<Index> tiles;
  tiles.reserve(devices.size());
  for (Index d : devices) tiles.push_back(sharding_.Tile(d, 0));
  std::sort(tiles.begin(), tiles.end());
  tiles.erase(std::unique(tiles.begin(), tiles.end()), tiles.end());
  std::vector<Slice> out;
  for (Index t : tiles) {
    const Index start = t * shard_rows_, stop = start + shard_rows_;
    if (!out.empty() && out.back().stop == start) {
      out.back().stop = stop;
    } else {
      out.push_back({start, stop});
    }
  }
  return out;
}

Index LoadingPlan::NumRows(Index process) const {
  Index rows = 0;
  for (const Slice& s : Rows(process)) rows += s.stop - s.start;
  return rows;
}

std::span<const Index> LoadingPlan::HostsOf(Index row) const {
  CheckIndex("row", row, 0, batch_size_);
  const Index tile = row / shard_rows_;
  return {tile_hosts_.data() + tile_offsets_[tile], tile_hosts_.data() + tile_offsets_[tile + 1]};
}

Index LoadingPlan::NumSteps(const Shard& order) const {
  return batch_size_ == 0 ? 0 : order.size() / batch_size_;
}

void LoadingPlan::Items(const Shard& order, Index step, Index process, Index* items,
                        bool* padding) const {
  const Index steps = NumSteps(order);
  CheckIndex("step", step, 0, steps,
             " (" + Str(order.size()) + " entries in batches of " + Str(batch_size_) + ")");
  Index j = 0;
  const Index base = step * batch_size_;
  for (const Slice& s : Rows(process)) {
    order.Fill(base + s.start, base + s.stop, items + j);
    for (Index r = s.start; r < s.stop; ++r) padding[j++] = order.IsPadding(base + r);
  }
}

}  // namespace shardkit
