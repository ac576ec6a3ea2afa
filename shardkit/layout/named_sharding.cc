#include "shardkit/layout/named_sharding.h"

#include <algorithm>
#include <cctype>

namespace shardkit {

namespace {

// As Python's repr writes a str: single quotes, or double quotes when the
// name holds a single quote and no double quote; otherwise the quote and the
// backslash are escaped. The parser reads all of these back.
std::string Quoted(const std::string& name) {
  const bool single = name.find('\'') != std::string::npos;
  const bool dbl = name.find('"') != std::string::npos;
  const char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  for (char c : name) {
    if (c == quote || c == '\\') out += '\\';
    out += c;
  }
  return out + quote;
}

std::string EntryToString(const SpecEntry& entry) {
  if (entry.axes.empty() && !entry.tuple) return "None";
  if (!entry.tuple) return Quoted(entry.axes[0]);
  std::string out = "(";
  for (size_t k = 0; k < entry.axes.size(); ++k) {
    out += (k ? ", " : "") + Quoted(entry.axes[k]);
  }
  if (entry.axes.size() == 1) out += ",";
  return out + ")";
}

std::string ShapeToString(std::span<const Index> shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

// Parser state over the spec text.
struct SpecParser {
  std::string_view text;
  std::string whole;
  size_t pos = 0;

  [[noreturn]] void Fail(const std::string& what) const {
    ThrowInvalid("spec", what + " at position " + std::to_string(pos) + " of '" + whole + "'");
  }
  void Skip() {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
  }
  bool Eat(char c) {
    Skip();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool AtEnd() {
    Skip();
    return pos == text.size();
  }
  // A name, quoted or bare; nullopt for None.
  std::optional<std::string> Name() {
    Skip();
    if (pos < text.size() && (text[pos] == '\'' || text[pos] == '"')) {
      const char quote = text[pos++];
      std::string name;
      while (true) {
        if (pos >= text.size()) Fail("unterminated quote");
        const char c = text[pos++];
        if (c == quote) break;
        // A backslash escapes the next character (\' \" \\), as in Python.
        if (c == '\\' && pos < text.size()) {
          name += text[pos++];
          continue;
        }
        name += c;
      }
      if (name.empty()) Fail("empty axis name");
      return name;
    }
    const size_t begin = pos;
    while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) ||
                                 text[pos] == '_' || text[pos] == '-' || text[pos] == '.')) {
      ++pos;
    }
    if (pos == begin) Fail("expected an axis name, None or a tuple");
    std::string name(text.substr(begin, pos - begin));
    if (name == "None") return std::nullopt;
    return name;
  }
  SpecEntry Entry() {
    SpecEntry entry;
    if (Eat('(')) {
      entry.tuple = true;
      while (!Eat(')')) {
        auto name = Name();
        if (!name) Fail("None inside a tuple");
        entry.axes.push_back(*name);
        if (!Eat(',')) {
          if (!Eat(')')) Fail("expected ',' or ')'");
          break;
        }
      }
      return entry;
    }
    if (auto name = Name()) entry.axes.push_back(*name);
    return entry;
  }
};

}  // namespace

PartitionSpec ParsePartitionSpec(std::string_view text) {
  SpecParser parser{text, std::string(text)};
  // An optional P( ... ) / PartitionSpec( ... ) wrapper.
  std::string_view t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  for (std::string_view prefix : {"PartitionSpec(", "P("}) {
    if (t.substr(0, prefix.size()) == prefix && !t.empty() && t.back() == ')') {
      parser.text = t.substr(prefix.size(), t.size() - prefix.size() - 1);
      break;
    }
  }
  PartitionSpec spec;
  if (parser.AtEnd()) return spec;
  while (true) {
    spec.push_back(parser.Entry());
    if (parser.AtEnd()) break;
    if (!parser.Eat(',')) parser.Fail("expected ','");
    if (parser.AtEnd()) break;  // a trailing comma
  }
  return spec;
}

std::string SpecToString(const PartitionSpec& spec) {
  std::string out = "P(";
  for (size_t i = 0; i < spec.size(); ++i) out += (i ? ", " : "") + EntryToString(spec[i]);
  return out + ")";
}

NamedSharding::NamedSharding(Mesh mesh, PartitionSpec spec)
    : mesh_(std::move(mesh)), spec_(std::move(spec)) {
  std::vector<int> used_by(mesh_.num_axes(), -1);
  for (size_t i = 0; i < spec_.size(); ++i) {
    std::vector<int> axes;
    Index partitions = 1;
    for (const std::string& name : spec_[i].axes) {
      const int a = mesh_.FindAxis(name);
      if (a < 0) {
        ThrowInvalid("spec", "axis '" + name + "' of dimension " + std::to_string(i) + " in " +
                                 SpecToString(spec_) +
                                 " is not a mesh axis (mesh axes: " + mesh_.ToString() + ")");
      }
      if (used_by[a] >= 0) {
        ThrowInvalid("spec", "axis '" + name + "' is used by dimension " +
                                 std::to_string(used_by[a]) + " and again by dimension " +
                                 std::to_string(i) + " in " + SpecToString(spec_));
      }
      used_by[a] = static_cast<int>(i);
      if (mesh_.axes()[a].size > 1) {
        axes.push_back(a);
        partitions *= mesh_.axes()[a].size;
      }
    }
    dim_axes_.push_back(std::move(axes));
    partitions_.push_back(partitions);
  }
  for (int a = 0; a < mesh_.num_axes(); ++a) {
    if (used_by[a] < 0 && mesh_.axes()[a].size > 1) unused_axes_.push_back(a);
  }
}

std::span<const int> NamedSharding::DimAxes(int dim) const {
  if (dim < 0 || dim >= static_cast<int>(dim_axes_.size())) return {};
  return dim_axes_[dim];
}

Index NamedSharding::Partitions(int dim) const {
  if (dim < 0 || dim >= static_cast<int>(partitions_.size())) return 1;
  return partitions_[dim];
}

bool NamedSharding::IsFullyReplicated() const {
  for (Index p : partitions_) {
    if (p > 1) return false;
  }
  return true;
}

Index NamedSharding::Tile(Index device, int dim) const {
  Index tile = 0;
  for (int a : DimAxes(dim)) tile = tile * mesh_.axes()[a].size + mesh_.Coordinate(device, a);
  return tile;
}

void NamedSharding::Tiles(int dim, Index* out) const {
  const int axes = mesh_.num_axes();
  std::vector<Index> weight(axes, 0);
  Index w = 1;
  auto dim_axes = DimAxes(dim);
  for (auto it = dim_axes.rbegin(); it != dim_axes.rend(); ++it) {
    weight[*it] = w;
    w *= mesh_.axes()[*it].size;
  }
  // Row-major odometer; the tile is linear in the coordinates.
  std::vector<Index> coord(axes, 0);
  const Index inner = mesh_.axes()[axes - 1].size;
  Index base = 0;
  for (Index d = 0; d < mesh_.size(); d += inner) {
    for (Index c = 0; c < inner; ++c) out[d + c] = base + c * weight[axes - 1];
    for (int a = axes - 2; a >= 0; --a) {
      if (++coord[a] < mesh_.axes()[a].size) {
        base += weight[a];
        break;
      }
      base -= (mesh_.axes()[a].size - 1) * weight[a];
      coord[a] = 0;
    }
  }
}

ArrayLayout NamedSharding::Layout(std::span<const Index> shape) const {
  if (shape.size() < spec_.size()) {
    ThrowInvalid("shape", ShapeToString(shape) + " has " + std::to_string(shape.size()) +
                              " dimensions, fewer than the " + std::to_string(spec_.size()) +
                              " entries of " + SpecToString(spec_));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      ThrowInvalid("shape", "dimension " + std::to_string(i) + " of " + ShapeToString(shape) +
                                " is negative");
    }
    const Index p = Partitions(static_cast<int>(i));
    if (shape[i] % p != 0) {
      std::string names, sizes;
      for (int a : DimAxes(static_cast<int>(i))) {
        names += (names.empty() ? "" : ", ") + Quoted(mesh_.axes()[a].name);
        sizes += (sizes.empty() ? "" : " * ") + std::to_string(mesh_.axes()[a].size);
      }
      ThrowInvalid("shape", "dimension " + std::to_string(i) + " of " + ShapeToString(shape) +
                                " has size " + std::to_string(shape[i]) +
                                ", which is not divisible by its " + std::to_string(p) +
                                " partitions (mesh axes " + names + " of sizes " + sizes + " in " +
                                SpecToString(spec_) + ")");
    }
  }
  return ArrayLayout(*this, std::vector<Index>(shape.begin(), shape.end()));
}

std::optional<std::pair<Index, Index>> NamedSharding::ProcessIndexAndCount(int dim,
                                                                           Index process) const {
  const Index slot = mesh_.ProcessSlot(process);
  if (slot < 0) {
    ThrowOutOfRange("process", std::to_string(process) + " owns no device of the mesh");
  }
  if (mesh_.num_processes() == 1 || IsFullyReplicated()) return std::make_pair(Index{0}, Index{1});
  // Every process's sorted distinct tiles, as segments of one flat array in
  // process order (the mesh lists each process's devices contiguously).
  const Index processes = mesh_.num_processes();
  std::vector<Index> tile_of(mesh_.size());
  Tiles(dim, tile_of.data());
  std::vector<Index> tiles;
  tiles.reserve(mesh_.size());
  std::vector<Index> begin(processes + 1, 0);
  for (Index s = 0; s < processes; ++s) {
    const size_t first = tiles.size();
    for (Index d : mesh_.DevicesOfSlot(s)) tiles.push_back(tile_of[d]);
    std::sort(tiles.begin() + first, tiles.end());
    tiles.erase(std::unique(tiles.begin() + first, tiles.end()), tiles.end());
    begin[s + 1] = static_cast<Index>(tiles.size());
  }
  const Index mine = begin[slot + 1] - begin[slot];
  for (Index s = 0; s < processes; ++s) {
    if (begin[s + 1] - begin[s] != mine) return std::nullopt;
  }
  // Distinct tiles over all processes.
  std::vector<bool> seen(Partitions(dim), false);
  Index distinct = 0;
  for (Index t : tiles) {
    if (!seen[t]) {
      seen[t] = true;
      ++distinct;
    }
  }
  // Distinct sets: sort the processes by their set, then count changes.
  auto set = [&](Index s) {
    return std::span<const Index>(tiles.data() + begin[s], static_cast<size_t>(mine));
  };
  auto less = [&](Index a, Index b) {
    auto x = set(a), y = set(b);
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
  };
  auto equal = [&](Index a, Index b) {
    auto x = set(a), y = set(b);
    return std::equal(x.begin(), x.end(), y.begin(), y.end());
  };
  std::vector<Index> order(processes);
  for (Index s = 0; s < processes; ++s) order[s] = s;
  std::sort(order.begin(), order.end(), less);
  Index unique_sets = 0, index = -1;
  for (Index k = 0; k < processes; ++k) {
    if (k == 0 || !equal(order[k - 1], order[k])) ++unique_sets;
    if (order[k] == slot) index = unique_sets - 1;
  }
  // Equal-sized sets that are disjoint unless equal cover every tile once.
  if (unique_sets * mine != distinct) return std::nullopt;
  // Disjoint sets: lexicographic order is the order of their first tiles.
  return std::make_pair(index, unique_sets);
}

std::vector<std::optional<Index>> NamedSharding::InferGlobalShape(
    std::span<const Index> local_shape) const {
  std::vector<std::optional<Index>> out(local_shape.size());
  const Index any_process = mesh_.processes().front();
  for (size_t i = 0; i < local_shape.size(); ++i) {
    if (auto ic = ProcessIndexAndCount(static_cast<int>(i), any_process)) {
      out[i] = CheckedMul("global_shape", local_shape[i], ic->second);
    }
  }
  return out;
}

std::vector<Index> NamedSharding::ResolveGlobalShape(
    std::span<const Index> local_shape, std::optional<std::span<const Index>> global_shape) const {
  for (size_t i = 0; i < local_shape.size(); ++i) {
    if (local_shape[i] < 0) {
      ThrowInvalid("local_data", "dimension " + std::to_string(i) + " of " +
                                     ShapeToString(local_shape) + " is negative");
    }
  }
  if (global_shape) {
    if (global_shape->size() != local_shape.size()) {
      ThrowInvalid("global_shape",
                   ShapeToString(*global_shape) + " has " + std::to_string(global_shape->size()) +
                       " dimensions but the local data " + ShapeToString(local_shape) + " has " +
                       std::to_string(local_shape.size()));
    }
    return std::vector<Index>(global_shape->begin(), global_shape->end());
  }
  std::vector<std::optional<Index>> inferred = InferGlobalShape(local_shape);
  std::vector<Index> out;
  std::string bad;
  for (size_t i = 0; i < inferred.size(); ++i) {
    if (!inferred[i]) {
      bad += (bad.empty() ? "" : ", ") + std::to_string(i);
    } else {
      out.push_back(*inferred[i]);
    }
  }
  if (!bad.empty()) {
    ThrowInvalid("global_shape", "cannot be inferred from the local shape " +
                                     ShapeToString(local_shape) + ": " + SpecToString(spec_) +
                                     " over mesh " + mesh_.ToString() +
                                     " is non-uniform across processes in dimension(s) " + bad +
                                     "; pass global_shape explicitly");
  }
  return out;
}

ArrayLayout::ArrayLayout(NamedSharding sharding, std::vector<Index> shape)
    : sharding_(std::move(sharding)), shape_(std::move(shape)) {
  const int n = ndim();
  const Mesh& mesh = sharding_.mesh();
  std::vector<bool> replica(mesh.num_axes(), false);
  for (int i = 0; i < n; ++i) {
    const Index p = sharding_.Partitions(i);
    shard_shape_.push_back(shape_[i] / p);
    // Every tile of an empty dimension is the slice [0, 0): identical slices.
    if (shape_[i] == 0) {
      for (int a : sharding_.DimAxes(i)) replica[a] = true;
    }
  }
  for (int a = 0; a < mesh.num_axes(); ++a) {
    bool unused = mesh.axes()[a].size > 1;
    for (int i = 0; i < n && unused; ++i) {
      for (int b : sharding_.DimAxes(i)) unused = unused && b != a;
    }
    if (unused || replica[a]) replica_axes_.push_back(a);
  }
}

Slice ArrayLayout::DeviceSlice(Index device, int dim) const {
  const Index start = sharding_.Tile(device, dim) * shard_shape_[dim];
  return {start, start + shard_shape_[dim]};
}

void ArrayLayout::DeviceIndex(Index device, Slice* out) const {
  for (int i = 0; i < ndim(); ++i) out[i] = DeviceSlice(device, i);
}

void ArrayLayout::DevicesIndicesMap(Slice* out) const {
  const Mesh& mesh = sharding_.mesh();
  const int axes = mesh.num_axes();
  const int n = ndim();
  if (mesh.size() == 0 || n == 0) return;
  // The start of dimension i is linear in the coordinates: sum over its axes
  // of coord[a] * weight[i][a] (mixed radix times the shard extent). Walk the
  // devices in row-major order and update the starts as an odometer turns.
  std::vector<Index> weight(static_cast<size_t>(n) * axes, 0);
  for (int i = 0; i < n; ++i) {
    Index w = shard_shape_[i];
    auto dim_axes = sharding_.DimAxes(i);
    for (auto it = dim_axes.rbegin(); it != dim_axes.rend(); ++it) {
      weight[static_cast<size_t>(i) * axes + *it] = w;
      w *= mesh.axes()[*it].size;
    }
  }
  std::vector<Index> coord(axes, 0), start(n, 0);
  const Index inner = mesh.axes()[axes - 1].size;
  for (Index d = 0; d < mesh.size(); d += inner) {
    for (Index c = 0; c < inner; ++c) {
      Slice* row = out + (d + c) * n;
      for (int i = 0; i < n; ++i) {
        const Index s = start[i] + c * weight[static_cast<size_t>(i) * axes + axes - 1];
        row[i] = {s, s + shard_shape_[i]};
      }
    }
    for (int a = axes - 2; a >= 0; --a) {
      const Index size = mesh.axes()[a].size;
      if (++coord[a] < size) {
        for (int i = 0; i < n; ++i) start[i] += weight[static_cast<size_t>(i) * axes + a];
        break;
      }
      coord[a] = 0;
      for (int i = 0; i < n; ++i)
        start[i] -= (size - 1) * weight[static_cast<size_t>(i) * axes + a];
    }
  }
}

Index ArrayLayout::ReplicaId(Index device) const {
  const Mesh& mesh = sharding_.mesh();
  Index id = 0;
  for (int a : replica_axes_) id = id * mesh.axes()[a].size + mesh.Coordinate(device, a);
  return id;
}

void ArrayLayout::ReplicaIds(Index* out) const {
  for (Index d = 0; d < sharding_.mesh().size(); ++d) out[d] = ReplicaId(d);
}

ProcessLayout ArrayLayout::Process(Index process) const {
  std::span<const Index> devices = sharding_.mesh().DevicesOf(process);
  if (devices.empty()) {
    ThrowOutOfRange("process", std::to_string(process) + " owns no device of the mesh");
  }
  const int n = ndim();
  ProcessLayout out;
  out.process_ = process;
  out.devices_.assign(devices.begin(), devices.end());
  out.shape_ = shape_;
  out.shard_shape_ = shard_shape_;
  out.starts_.resize(n);
  out.global_.resize(devices.size() * n);
  for (size_t k = 0; k < devices.size(); ++k) {
    // A 0-d array has no slices: out.global_ is empty, and indexing it (even
    // to take an address) is undefined behaviour.
    if (n > 0) DeviceIndex(devices[k], out.global_.data() + k * n);
    for (int i = 0; i < n; ++i) out.starts_[i].push_back(out.global_[k * n + i].start);
  }
  for (int i = 0; i < n; ++i) {
    std::vector<Index>& starts = out.starts_[i];
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    out.local_shape_.push_back(static_cast<Index>(starts.size()) * shard_shape_[i]);
  }
  return out;
}

std::vector<Slice> ProcessLayout::Intervals(int dim) const {
  std::vector<Slice> out;
  for (Index start : starts_[dim]) {
    const Index stop = start + shard_shape_[dim];
    if (!out.empty() && out.back().stop == start) {
      out.back().stop = stop;
    } else {
      out.push_back({start, stop});
    }
  }
  return out;
}

ProcessLayout::Mapping ProcessLayout::LocalToGlobal(std::span<const Index> local_data_shape) const {
  const int n = static_cast<int>(shape_.size());
  if (static_cast<int>(local_data_shape.size()) != n) {
    ThrowInvalid("local_data", "has shape " + ShapeToString(local_data_shape) + " of " +
                                   std::to_string(local_data_shape.size()) +
                                   " dimensions, but the global shape " + ShapeToString(shape_) +
                                   " has " + std::to_string(n));
  }
  std::vector<bool> full(n);
  for (int i = 0; i < n; ++i) {
    full[i] = local_data_shape[i] == shape_[i];
    if (!full[i] && local_data_shape[i] != local_shape_[i]) {
      ThrowInvalid("local_data", "dimension " + std::to_string(i) + " has " +
                                     std::to_string(local_data_shape[i]) +
                                     " elements, but it must match the "
                                     "global size " +
                                     std::to_string(shape_[i]) + " or the " +
                                     std::to_string(local_shape_[i]) + " elements process " +
                                     std::to_string(process_) + " addresses (global shape " +
                                     ShapeToString(shape_) + ")");
    }
  }
  Mapping out;
  out.global = global_;
  out.local.resize(global_.size());
  for (size_t k = 0; k < devices_.size(); ++k) {
    for (int i = 0; i < n; ++i) {
      const Slice& g = global_[k * n + i];
      if (full[i]) {
        out.local[k * n + i] = g;
      } else {
        const auto& starts = starts_[i];
        const Index block =
            std::lower_bound(starts.begin(), starts.end(), g.start) - starts.begin();
        out.local[k * n + i] = {block * shard_shape_[i], (block + 1) * shard_shape_[i]};
      }
    }
  }
  return out;
}

}  // namespace shardkit
