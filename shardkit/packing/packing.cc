#include "shardkit/packing/packing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "shardkit/base/enum_names.h"
#include "shardkit/base/piece.h"
#include "shardkit/packing/internal/histogram.h"
#include "shardkit/packing/internal/place.h"

namespace shardkit {

namespace {
constexpr EnumNames<PackAlgorithm, 5> kAlgorithms{"algorithm",
                                                  "algorithm",
                                                  {{{PackAlgorithm::kNextFit, "next_fit"},
                                                    {PackAlgorithm::kFirstFitDecreasing, "ffd"},
                                                    {PackAlgorithm::kBestFitDecreasing, "bfd"},
                                                    {PackAlgorithm::kBalanced, "balanced"},
                                                    {PackAlgorithm::kHistogram, "histogram"}}}};
constexpr EnumNames<Oversize, 3> kOversize{
    "oversize",
    "policy",
    {{{Oversize::kDrop, "drop"}, {Oversize::kError, "error"}, {Oversize::kSplit, "split"}}}};
constexpr EnumNames<CostModel, 2> kCostModels{
    "cost",
    "cost model",
    {{{CostModel::kTokens, "tokens"}, {CostModel::kSquaredLengths, "squared"}}}};
constexpr EnumNames<PackCompat, 2> kCompat{
    "compat", "compat", {{{PackCompat::kNone, "none"}, {PackCompat::kTrl, "trl"}}}};

template <typename Table>
std::vector<std::string_view> NamesOf(const Table& table) {
  std::vector<std::string_view> names;
  for (const auto& entry : table.entries) names.push_back(entry.name);
  return names;
}

// A pending pack of one piece longer than the capacity is a run of full
// packs of one split item (StreamingPacker::Push), popped a pack at a time.
bool IsPackRun(const Pack& pack, Index capacity) {
  return pack.pieces.size() == 1 && pack.pieces[0].length > capacity;
}
}  // namespace

PackAlgorithm ParsePackAlgorithm(std::string_view name) { return kAlgorithms.Parse(name); }
std::string_view PackAlgorithmName(PackAlgorithm algorithm) { return kAlgorithms.Name(algorithm); }
Oversize ParseOversize(std::string_view name) { return kOversize.Parse(name); }
std::string_view OversizeName(Oversize oversize) { return kOversize.Name(oversize); }
CostModel ParseCostModel(std::string_view name) { return kCostModels.Parse(name); }
std::string_view CostModelName(CostModel model) { return kCostModels.Name(model); }

PackCompat ParsePackCompat(std::string_view name) { return kCompat.Parse(name); }
std::string_view PackCompatName(PackCompat compat) { return kCompat.Name(compat); }
std::vector<std::string_view> PackAlgorithmNames() { return NamesOf(kAlgorithms); }
std::vector<std::string_view> OversizeNames() { return NamesOf(kOversize); }
std::vector<std::string_view> PackCompatNames() { return NamesOf(kCompat); }
std::vector<std::string_view> CostModelNames() { return NamesOf(kCostModels); }

void ValidatePackOptions(const PackOptions& o) {
  CheckAtLeast("capacity", o.capacity, 1);
  if (o.max_images) CheckAtLeast("max_images", *o.max_images, 0);
  if (o.max_sequences) CheckAtLeast("max_sequences", *o.max_sequences, 1);
  if (o.buffer) CheckAtLeast("buffer", *o.buffer, 1);
  if (o.compat == PackCompat::kTrl && o.algorithm != PackAlgorithm::kBestFitDecreasing) {
    ThrowInvalid("compat", "trl reproduces TRL's bfd; algorithm is " +
                               std::string(PackAlgorithmName(o.algorithm)));
  }
  if (o.algorithm == PackAlgorithm::kHistogram) {
    if (o.max_images) {
      ThrowInvalid("algorithm", "histogram packs under tokens and max_sequences, not max_images (" +
                                    Str(*o.max_images) + "); use balanced with images");
    }
    if (o.capacity > internal::kHistogramMaxCapacity) {
      ThrowInvalid("capacity", "is " + Str(o.capacity) + ", more than histogram packing takes (" +
                                   Str(internal::kHistogramMaxCapacity) + "); use bfd");
    }
  }
}

double Packing::efficiency() const {
  if (num_packs() == 0) return 1.0;
  return static_cast<double>(tokens) /
         (static_cast<double>(num_packs()) * static_cast<double>(capacity));
}

Index Packing::PackTokens(Index p) const {
  Index sum = 0;
  for (Index e = offsets[p]; e < offsets[p + 1]; ++e) sum += lengths[e];
  return sum;
}

std::vector<PackItem> Packing::Entries(Index p) const {
  std::vector<PackItem> out;
  for (Index e = offsets[p]; e < offsets[p + 1]; ++e) {
    out.push_back({items[e], lengths[e], images.empty() ? 0 : images[e], starts[e]});
  }
  return out;
}

namespace internal {

Index LowerBound(Index tokens, Index images, Index pieces, const PackOptions& o) {
  if (pieces == 0) return 0;
  Index bound = std::max<Index>(1, CeilDiv(tokens, o.capacity));
  if (o.max_images && *o.max_images > 0) bound = std::max(bound, CeilDiv(images, *o.max_images));
  if (o.max_sequences) bound = std::max(bound, CeilDiv(pieces, *o.max_sequences));
  return bound;
}

}  // namespace internal

namespace {

// Classifies item i: 0 fits, 1 dropped, 2 split (text longer than capacity).
// Throws under oversize error.
int Classify(Index i, Index length, Index images, const PackOptions& o) {
  const bool too_long = length > o.capacity;
  const bool too_many_images = o.max_images && images > *o.max_images;
  if (!too_long && !too_many_images) return 0;
  if (o.oversize == Oversize::kError) {
    if (too_long) {
      ThrowInvalid("lengths", "item " + Str(i) + " has " + Str(length) +
                                  " tokens, more than capacity " + Str(o.capacity) +
                                  " (oversize=error)");
    }
    ThrowInvalid("images", "item " + Str(i) + " has " + Str(images) +
                               " images, more than max_images " + Str(*o.max_images) +
                               " (oversize=error)");
  }
  if (o.oversize == Oversize::kSplit && !too_many_images && images == 0) return 2;
  return 1;
}

void CheckInputs(std::span<const Index> lengths, std::span<const Index> images,
                 const PackOptions& o) {
  ValidatePackOptions(o);
  if (!images.empty() && images.size() != lengths.size()) {
    ThrowInvalid("images", "has " + Str(static_cast<Index>(images.size())) +
                               " entries but lengths has " +
                               Str(static_cast<Index>(lengths.size())));
  }
  if (o.max_images && images.empty() && !lengths.empty()) {
    ThrowInvalid("max_images", "is set (" + Str(*o.max_images) + ") but no images were given");
  }
  for (size_t i = 0; i < images.size(); ++i) {
    if (images[i] < 0) {
      ThrowInvalid("images", "item " + Str(static_cast<Index>(i)) + " has a negative image count " +
                                 Str(images[i]));
    }
  }
}

// Builds the CSR packing from units in placement order and their bins.
void Scatter(const internal::Placement& placed, const std::vector<Index>& unit_item,
             std::span<const Index> unit_len, std::span<const Index> unit_img,
             const std::vector<Index>& unit_start, Packing* out) {
  const Index first_pack = out->num_packs();
  const Index base = static_cast<Index>(out->items.size());
  const Index n = static_cast<Index>(placed.order.size());
  std::vector<Index> count(placed.num_bins + 1, 0);
  for (Index j = 0; j < n; ++j) ++count[placed.bin[j] + 1];
  for (Index b = 0; b < placed.num_bins; ++b) count[b + 1] += count[b];
  for (Index b = 1; b <= placed.num_bins; ++b) out->offsets.push_back(base + count[b]);
  (void)first_pack;
  out->items.resize(base + n);
  out->lengths.resize(base + n);
  out->starts.resize(base + n);
  const bool has_images = !unit_img.empty();
  if (has_images) out->images.resize(base + n);
  for (Index j = 0; j < n; ++j) {
    const Index u = placed.order[j];
    const Index e = base + count[placed.bin[j]]++;
    out->items[e] = unit_item.empty() ? u : unit_item[u];
    out->lengths[e] = unit_len[u];
    out->starts[e] = unit_start.empty() ? 0 : unit_start[u];
    if (has_images) out->images[e] = unit_img[u];
  }
}

Packing PackBuffered(std::span<const Index> lengths, std::span<const Index> images,
                     const PackOptions& o) {
  StreamingPacker packer(o);
  const bool has_images = !images.empty();
  for (size_t i = 0; i < lengths.size(); ++i) {
    packer.Push(static_cast<Index>(i), lengths[i], has_images ? images[i] : 0);
  }
  packer.Finish();
  Packing out;
  out.capacity = o.capacity;
  out.num_items = static_cast<Index>(lengths.size());
  Pack pack;
  Index pieces = 0;
  while (packer.Pop(&pack)) {
    for (const PackItem& p : pack.pieces) {
      out.items.push_back(p.item);
      out.lengths.push_back(p.length);
      out.starts.push_back(p.start);
      if (has_images) out.images.push_back(p.images);
      out.tokens += p.length;
      out.image_count += p.images;
      ++pieces;
    }
    out.offsets.push_back(static_cast<Index>(out.items.size()));
  }
  out.dropped_items = packer.dropped_items();
  out.split_items = packer.State().split_items;
  out.lower_bound = internal::LowerBound(out.tokens, out.image_count, pieces, o);
  return out;
}

// compat trl with a buffer: every batch of `buffer` items packed on its own
// (pack_dataset's map batches), the packs one after the other.
Packing PackTrlBatches(std::span<const Index> lengths, std::span<const Index> images,
                       const PackOptions& o) {
  PackOptions batch_options = o;
  batch_options.buffer.reset();
  const Index n = static_cast<Index>(lengths.size());
  const Index batch = *o.buffer;
  Packing out;
  out.capacity = o.capacity;
  out.num_items = n;
  for (Index begin = 0; begin < n; begin += std::min(batch, n - begin)) {
    const Index size = std::min(batch, n - begin);
    Packing part = PackItems(lengths.subspan(begin, size), batch_options,
                             images.empty() ? images : images.subspan(begin, size));
    const Index base = static_cast<Index>(out.items.size());
    for (Index p = 1; p <= part.num_packs(); ++p) out.offsets.push_back(base + part.offsets[p]);
    for (Index item : part.items) out.items.push_back(begin + item);
    out.lengths.insert(out.lengths.end(), part.lengths.begin(), part.lengths.end());
    out.starts.insert(out.starts.end(), part.starts.begin(), part.starts.end());
    out.images.insert(out.images.end(), part.images.begin(), part.images.end());
    for (Index item : part.dropped_items) out.dropped_items.push_back(begin + item);
    out.split_items += part.split_items;
    out.tokens += part.tokens;
    out.image_count += part.image_count;
  }
  out.lower_bound =
      internal::LowerBound(out.tokens, out.image_count, static_cast<Index>(out.items.size()), o);
  return out;
}

}  // namespace

Packing PackItems(std::span<const Index> lengths, const PackOptions& o,
                  std::span<const Index> images) {
  CheckInputs(lengths, images, o);
  const Index n = static_cast<Index>(lengths.size());
  const bool has_images = !images.empty();
  const Index capacity = o.capacity;

  Packing out;
  out.capacity = capacity;
  out.num_items = n;

  // Units: the items (or split remainders) the algorithm places. Without
  // oversize items they are the input itself, not copied.
  std::vector<Index> unit_item, unit_len_store, unit_img_store, unit_start;
  bool any_oversize = false;
  Index tokens = 0, image_count = 0;
  // One pass: negative lengths, oversize items, overflow of the totals.
  bool overflow = false;
  Index min_length = 0;
  for (Index i = 0; i < n; ++i) {
    const Index l = lengths[i];
    min_length = std::min(min_length, l);
    any_oversize |= l > capacity;
    overflow |= __builtin_add_overflow(tokens, l, &tokens);
  }
  if (min_length < 0) {
    for (Index i = 0; i < n; ++i) {
      if (lengths[i] < 0) {
        ThrowInvalid("lengths", "item " + Str(i) + " has negative length " + Str(lengths[i]));
      }
    }
  }
  if (overflow) ThrowInvalid("lengths", "the total token count overflows a 64-bit count");
  for (Index i = 0; i < static_cast<Index>(images.size()); ++i) {
    any_oversize |= o.max_images && images[i] > *o.max_images;
    image_count = CheckedAdd("images", image_count, images[i]);
  }
  if (any_oversize && o.oversize == Oversize::kSplit) {
    // The entries split makes, counted before anything is allocated (an item
    // of 2^40 tokens at capacity 4096 is 2^28 pieces).
    Index entries = 0;
    for (Index i = 0; i < n; ++i) {
      entries += lengths[i] > capacity ? CeilDiv(lengths[i], capacity) : 1;
      if (entries > kMaxPackEntries) {
        ThrowInvalid("lengths", "oversize split cuts the " + Str(n) + " items (" + Str(tokens) +
                                    " tokens) into more than " + Str(kMaxPackEntries) +
                                    " pieces of at most capacity " + Str(capacity) +
                                    " tokens, more than a packing lists; raise capacity, drop "
                                    "them (oversize drop) or pack them as a stream");
      }
    }
  }
  const bool trl = o.compat == PackCompat::kTrl;
  if (trl && o.buffer) return PackTrlBatches(lengths, images, o);
  // Streaming order: through the buffer, and next_fit's split pieces in place.
  if (o.buffer || (any_oversize && o.algorithm == PackAlgorithm::kNextFit)) {
    return PackBuffered(lengths, images, o);
  }
  // TRL filters empty items out before packing.
  const bool trl_units =
      trl && (any_oversize || std::find(lengths.begin(), lengths.end(), Index{0}) != lengths.end());
  std::span<const Index> unit_len = lengths, unit_img = images;
  Index full_pieces = 0;
  if (any_oversize || trl_units) {
    tokens = 0;
    image_count = 0;
    // Full pieces of split items: one pack each, first, in input order.
    for (Index i = 0; i < n; ++i) {
      const Index img = has_images ? images[i] : 0;
      if (trl && lengths[i] == 0) {
        out.dropped_items.push_back(i);
        continue;
      }
      switch (Classify(i, lengths[i], img, o)) {
        case 0:
          unit_item.push_back(i);
          unit_len_store.push_back(lengths[i]);
          if (has_images) unit_img_store.push_back(img);
          unit_start.push_back(0);
          tokens += lengths[i];
          image_count += img;
          break;
        case 1:
          out.dropped_items.push_back(i);
          break;
        default: {
          ++out.split_items;
          const Index pieces = lengths[i] / capacity;
          if (trl) {
            // TRL's bfd_split: the pieces are units like the items.
            for (Index k = 0; k * capacity < lengths[i]; ++k) {
              unit_item.push_back(i);
              unit_len_store.push_back(std::min(capacity, lengths[i] - k * capacity));
              if (has_images) unit_img_store.push_back(0);
              unit_start.push_back(k * capacity);
            }
            tokens += lengths[i];
            break;
          }
          for (Index k = 0; k < pieces; ++k) {
            out.items.push_back(i);
            out.lengths.push_back(capacity);
            out.starts.push_back(k * capacity);
            if (has_images) out.images.push_back(0);
            out.offsets.push_back(static_cast<Index>(out.items.size()));
          }
          full_pieces += pieces;
          tokens += lengths[i];
          const Index rest = lengths[i] % capacity;
          if (rest > 0) {
            unit_item.push_back(i);
            unit_len_store.push_back(rest);
            if (has_images) unit_img_store.push_back(0);
            unit_start.push_back(pieces * capacity);
          }
        }
      }
    }
    unit_len = unit_len_store;
    unit_img = unit_img_store;
  }
  const Index units = static_cast<Index>(unit_len.size());
  out.tokens = tokens;
  out.image_count = image_count;
  out.lower_bound = internal::LowerBound(tokens, image_count, units + full_pieces, o);

  if (!any_oversize && !trl_units && !has_images &&
      o.algorithm == PackAlgorithm::kBestFitDecreasing &&
      internal::BestFitFast(unit_len, o, &out)) {
    return out;
  }
  internal::Placement placed = internal::Place(unit_len, unit_img, o);
  Scatter(placed, unit_item, unit_len, unit_img, unit_start, &out);
  return out;
}

// ---------------------------------------------------------------------------
// StreamingPacker

StreamingPacker::StreamingPacker(const PackOptions& options) : options_(options) {
  ValidatePackOptions(options_);
  if (options_.compat != PackCompat::kNone) {
    ThrowInvalid("compat", "trl is for whole-data packing (PackItems), not the streaming packer");
  }
  buffer_limit_ = options_.buffer.value_or(1024);
}

StreamingPacker::StreamingPacker(const PackOptions& options, PackerState state)
    : StreamingPacker(options) {
  const bool next_fit = options_.algorithm == PackAlgorithm::kNextFit;
  if (!next_fit && static_cast<Index>(state.buffered.size()) >= buffer_limit_) {
    ThrowInvalid("state", "holds " + Str(static_cast<Index>(state.buffered.size())) +
                              " buffered items, the buffer takes fewer than " + Str(buffer_limit_));
  }
  for (const auto& [name, value] : {std::pair<const char*, Index>{"items_seen", state.items_seen},
                                    {"dropped", state.dropped},
                                    {"split_items", state.split_items},
                                    {"packs_closed", state.packs_closed},
                                    {"tokens_closed", state.tokens_closed}}) {
    if (value < 0) ThrowInvalid("state", std::string(name) + " = " + Str(value) + " is negative");
  }
  // Every piece is a piece of an item: [start, start + length) without
  // overflow, at most a pack of tokens and images.
  auto check_piece = [&](const PackItem& p, const char* where) {
    if (!PieceWithin(p.start, p.length, std::numeric_limits<Index>::max()) ||
        p.length > options_.capacity || p.images < 0 ||
        (options_.max_images && p.images > *options_.max_images)) {
      ThrowInvalid("state", std::string(where) + " item " + Str(p.item) + " (start " +
                                Str(p.start) + ", length " + Str(p.length) + ", images " +
                                Str(p.images) + ") does not fit a pack of capacity " +
                                Str(options_.capacity));
    }
  };
  Index tokens = 0, images = 0;
  for (const PackItem& p : state.buffered) {
    check_piece(p, "buffered");
    const auto t = AddWithoutOverflow(tokens, p.length);
    const auto i = AddWithoutOverflow(images, p.images);
    if (!t || !i) ThrowInvalid("state", "the buffered items' tokens overflow a 64-bit count");
    tokens = *t;
    images = *i;
  }
  if (next_fit &&
      (tokens > options_.capacity || (options_.max_images && images > *options_.max_images) ||
       (options_.max_sequences &&
        static_cast<Index>(state.buffered.size()) > *options_.max_sequences))) {
    ThrowInvalid("state", "the buffered items do not fit one pack (next_fit)");
  }
  // A closed pack obeys every budget; its totals are recomputed, not trusted.
  // (The one check of a restored state: PackerStateFits in
  // shardkit/loader/loader_state.h builds a packer to apply it.)
  auto over = [&](std::size_t k, Index have, const char* what, const std::string& limit) {
    ThrowInvalid("state", "pending[" + Str(static_cast<Index>(k)) + "]: holds " + Str(have) + " " +
                              what + ", more than " + limit);
  };
  const std::string capacity_text = "capacity " + Str(options_.capacity);
  for (std::size_t k = 0; k < state.pending.size(); ++k) {
    Pack& pack = state.pending[k];
    if (IsPackRun(pack, options_.capacity)) {
      // A run of full pieces (oversize split): whole packs of one item.
      const PackItem& p = pack.pieces[0];
      if (options_.oversize != Oversize::kSplit || p.length % options_.capacity != 0 ||
          p.images != 0 || !PieceWithin(p.start, p.length, std::numeric_limits<Index>::max())) {
        over(k, p.length, "tokens",
             capacity_text +
                 " (only a run of whole packs of one item under oversize split "
                 "may, item " +
                 Str(p.item) + ")");
      }
      pack.tokens = p.length;
      pack.images = 0;
      pending_packs_ += p.length / options_.capacity;
      continue;
    }
    ++pending_packs_;
    Index pack_tokens = 0, pack_images = 0;
    for (const PackItem& p : pack.pieces) {
      check_piece(p, "pending");
      // Each piece is at most a pack (checked above): the sums cannot wrap
      // before they pass the budget.
      pack_tokens += p.length;
      pack_images += p.images;
      if (pack_tokens > options_.capacity) {
        Index total = 0;
        for (const PackItem& q : pack.pieces)
          total = AddWithoutOverflow(total, q.length).value_or(total);
        over(k, total, "tokens", capacity_text);
      }
      if (options_.max_images && pack_images > *options_.max_images) {
        Index total = 0;
        for (const PackItem& q : pack.pieces)
          total = AddWithoutOverflow(total, q.images).value_or(total);
        over(k, total, "images", "max_images " + Str(*options_.max_images));
      }
    }
    if (options_.max_sequences &&
        static_cast<Index>(pack.pieces.size()) > *options_.max_sequences) {
      over(k, static_cast<Index>(pack.pieces.size()), "pieces",
           "max_sequences " + Str(*options_.max_sequences));
    }
    pack.tokens = pack_tokens;
    pack.images = pack_images;
  }
  // No token twice: the pieces of one item never overlap (a piece listed
  // twice, buffered and pending, would be delivered twice).
  std::vector<const PackItem*> all;
  for (const PackItem& p : state.buffered) all.push_back(&p);
  for (const Pack& pack : state.pending) {
    for (const PackItem& p : pack.pieces) all.push_back(&p);
  }
  std::sort(all.begin(), all.end(), [](const PackItem* a, const PackItem* b) {
    return a->item != b->item ? a->item < b->item : a->start < b->start;
  });
  for (std::size_t i = 1; i < all.size(); ++i) {
    const PackItem& a = *all[i - 1];
    const PackItem& b = *all[i];
    if (a.item == b.item && (a.start == b.start || a.start + a.length > b.start)) {
      ThrowInvalid("state", "item " + Str(a.item) + " is listed twice (pieces at start " +
                                Str(a.start) + " and " + Str(b.start) + " overlap)");
    }
  }
  state_ = std::move(state);
  if (next_fit) {
    open_.pieces = std::move(state_.buffered);
    state_.buffered.clear();
    open_.tokens = tokens;
    open_.images = images;
  }
}

void StreamingPacker::Push(Index item, Index length, Index images) {
  if (length < 0) {
    ThrowInvalid("lengths", "item " + Str(item) + " has negative length " + Str(length));
  }
  if (images < 0) {
    ThrowInvalid("images", "item " + Str(item) + " has a negative image count " + Str(images));
  }
  const int kind = Classify(item, length, images, options_);
  ++state_.items_seen;
  if (kind == 1) {
    ++state_.dropped;
    dropped_items_.push_back(item);
    return;
  }
  if (kind == 2) {
    ++state_.split_items;
    const Index capacity = options_.capacity;
    const Index pieces = length / capacity;
    // The full pieces close at once as one run (a pending pack of one piece
    // of pieces * capacity tokens) that Pop hands out a pack at a time: a
    // document of a billion tokens costs O(1) memory and state, not one
    // pack each.
    if (pieces > 0) {
      state_.packs_closed += pieces;
      state_.tokens_closed += pieces * capacity;
      pending_packs_ += pieces;
      state_.pending.push_back(
          Pack{{PackItem{item, pieces * capacity, 0, 0}}, pieces * capacity, 0});
    }
    if (length % capacity) Place(PackItem{item, length % capacity, 0, pieces * capacity});
    return;
  }
  Place(PackItem{item, length, images, 0});
}

void StreamingPacker::Place(const PackItem& piece) {
  if (options_.algorithm == PackAlgorithm::kNextFit) {
    const bool fits =
        open_.tokens + piece.length <= options_.capacity &&
        (!options_.max_images || open_.images + piece.images <= *options_.max_images) &&
        (!options_.max_sequences ||
         static_cast<Index>(open_.pieces.size()) < *options_.max_sequences);
    if (!fits && !open_.pieces.empty()) Close(std::exchange(open_, Pack{}));
    open_.pieces.push_back(piece);
    open_.tokens += piece.length;
    open_.images += piece.images;
    return;
  }
  state_.buffered.push_back(piece);
  if (static_cast<Index>(state_.buffered.size()) >= buffer_limit_) Repack(false);
}

void StreamingPacker::Repack(bool finish) {
  auto& buffered = state_.buffered;
  if (buffered.empty()) return;
  if (RepackBestFit(finish)) return;
  const Index n = static_cast<Index>(buffered.size());
  std::vector<Index> len(n), img;
  const bool has_images = options_.max_images.has_value();
  if (has_images) img.resize(n);
  for (Index i = 0; i < n; ++i) {
    len[i] = buffered[i].length;
    if (has_images) img[i] = buffered[i].images;
  }
  internal::Placement placed = internal::Place(len, img, options_);
  std::vector<Pack> packs(placed.num_bins);
  std::vector<std::vector<Index>> members(placed.num_bins);
  for (size_t j = 0; j < placed.order.size(); ++j) {
    const Index u = placed.order[j];
    Pack& pack = packs[placed.bin[j]];
    pack.pieces.push_back(buffered[u]);
    pack.tokens += buffered[u].length;
    pack.images += buffered[u].images;
    members[placed.bin[j]].push_back(u);
  }
  Index keep = -1;
  if (!finish) {
    // The least full pack (ties: the last one) waits for better company,
    // unless it holds more than half of the buffer.
    for (Index b = 0; b < placed.num_bins; ++b) {
      if (keep < 0 || packs[b].tokens <= packs[keep].tokens) keep = b;
    }
    if (2 * static_cast<Index>(members[keep].size()) > buffer_limit_) keep = -1;
  }
  std::vector<PackItem> rest;
  if (keep >= 0) {
    std::vector<Index> m = members[keep];
    std::sort(m.begin(), m.end());  // arrival order
    for (Index u : m) rest.push_back(buffered[u]);
  }
  for (Index b = 0; b < placed.num_bins; ++b) {
    if (b != keep) Close(std::move(packs[b]));
  }
  buffered = std::move(rest);
}

// Repack for best-fit decreasing under the token (and count) budget, the
// default of the equal-steps plan: the same packs, in the same order, as
// Repack's general path through internal::Place (units by decreasing length,
// ties by arrival; each to the pack with the least room that fits, the most
// recently filled among equals; packs numbered as they open), without its
// allocations: the sort, the room index and the per-pack lists live in
// scratch_, and the closed packs are built in place at the end of `pending`.
// Returns false (nothing done) outside that case.
bool StreamingPacker::RepackBestFit(bool finish) {
  const PackOptions& o = options_;
  auto& buffered = state_.buffered;
  const Index n = static_cast<Index>(buffered.size());
  const Index capacity = o.capacity;
  if (o.algorithm != PackAlgorithm::kBestFitDecreasing || o.max_images ||
      capacity > (Index{1} << 22) || n >= (Index{1} << 30)) {
    return false;
  }
  Scratch& s = scratch_;
  // Units by decreasing length, ties by arrival: a stable counting sort over
  // the lengths present (first[max_len - l] = units longer than l).
  Index max_len = 0;
  for (const PackItem& p : buffered) max_len = std::max(max_len, p.length);
  s.first.assign(static_cast<std::size_t>(max_len) + 2, 0);
  for (const PackItem& p : buffered) ++s.first[static_cast<std::size_t>(max_len - p.length) + 1];
  for (std::size_t i = 1; i < s.first.size(); ++i) s.first[i] += s.first[i - 1];
  s.order.resize(static_cast<std::size_t>(n));
  for (Index u = 0; u < n; ++u) {
    const Index l = buffered[static_cast<std::size_t>(u)].length;
    s.order[static_cast<std::size_t>(s.first[static_cast<std::size_t>(max_len - l)]++)] =
        static_cast<std::int32_t>(u);
  }
  // Best fit over packs grouped by remaining room: head[r] lists the packs
  // with room r, most recently filled first; bits / summary mark non-empty r.
  const std::size_t rooms = static_cast<std::size_t>(capacity) + 1;
  const std::size_t words = rooms / 64 + 1;
  if (s.head.size() != rooms) {
    s.head.assign(rooms, -1);
    s.bits.assign(words, 0);
    s.summary.assign(words / 64 + 1, 0);
  }
  auto find = [&s](Index need) -> Index {  // smallest non-empty room >= need, or -1
    std::size_t w = static_cast<std::size_t>(need) / 64;
    if (w >= s.bits.size()) return -1;
    std::uint64_t word = s.bits[w] & (~std::uint64_t{0} << (need % 64));
    if (word) return static_cast<Index>(w * 64 + static_cast<std::size_t>(std::countr_zero(word)));
    std::size_t k = (w + 1) / 64;
    if (k >= s.summary.size()) return -1;
    std::uint64_t sw =
        (w + 1) % 64 == 0 ? s.summary[k] : s.summary[k] & (~std::uint64_t{0} << ((w + 1) % 64));
    while (!sw) {
      if (++k >= s.summary.size()) return -1;
      sw = s.summary[k];
    }
    w = k * 64 + static_cast<std::size_t>(std::countr_zero(sw));
    return static_cast<Index>(w * 64 + static_cast<std::size_t>(std::countr_zero(s.bits[w])));
  };
  const Index max_sequences = o.max_sequences.value_or(-1);
  s.bin.resize(static_cast<std::size_t>(n));
  s.room.clear();
  s.count.clear();
  s.next.clear();
  for (Index j = 0; j < n; ++j) {
    const std::int32_t u = s.order[static_cast<std::size_t>(j)];
    const Index need = buffered[static_cast<std::size_t>(u)].length;
    const Index r = find(need);
    std::int32_t b;
    if (r < 0) {
      b = static_cast<std::int32_t>(s.room.size());
      s.room.push_back(static_cast<std::int32_t>(capacity));
      s.count.push_back(0);
      s.next.push_back(-1);
    } else {
      const std::size_t ur = static_cast<std::size_t>(r);
      b = s.head[ur];
      s.head[ur] = s.next[static_cast<std::size_t>(b)];
      if (s.head[ur] < 0) {
        const std::size_t w = ur / 64;
        s.bits[w] &= ~(std::uint64_t{1} << (ur % 64));
        if (!s.bits[w]) s.summary[w / 64] &= ~(std::uint64_t{1} << (w % 64));
      }
    }
    const std::size_t ub = static_cast<std::size_t>(b);
    s.room[ub] -= static_cast<std::int32_t>(need);
    ++s.count[ub];
    s.bin[static_cast<std::size_t>(u)] = b;
    if (max_sequences >= 0 && s.count[ub] >= max_sequences) continue;
    const std::size_t rest = static_cast<std::size_t>(s.room[ub]);
    s.next[ub] = s.head[rest];
    s.head[rest] = b;
    s.bits[rest / 64] |= std::uint64_t{1} << (rest % 64);
    s.summary[rest / 64 / 64] |= std::uint64_t{1} << ((rest / 64) % 64);
  }
  // Empty the room index for the next repack (only the rooms in use).
  for (std::size_t w = 0; w < s.bits.size(); ++w) {
    for (std::uint64_t word = s.bits[w]; word; word &= word - 1) {
      s.head[w * 64 + static_cast<std::size_t>(std::countr_zero(word))] = -1;
    }
    s.bits[w] = 0;
  }
  std::fill(s.summary.begin(), s.summary.end(), 0);
  // The least full pack (ties: the last one) waits for better company, unless
  // it holds more than half of the buffer.
  const Index bins = static_cast<Index>(s.room.size());
  Index keep = -1;
  if (!finish) {
    for (Index b = 0; b < bins; ++b) {
      if (keep < 0 || s.room[static_cast<std::size_t>(b)] >= s.room[static_cast<std::size_t>(keep)])
        keep = b;
    }
    if (2 * static_cast<Index>(s.count[static_cast<std::size_t>(keep)]) > buffer_limit_) keep = -1;
  }
  // Close the other packs in the order they opened, pieces in placement order.
  auto& pending = state_.pending;
  const std::size_t base = pending.size();
  const Index closed = keep >= 0 ? bins - 1 : bins;
  pending.resize(base + static_cast<std::size_t>(closed));
  auto slot = [&](Index b) {
    return base + static_cast<std::size_t>(keep >= 0 && b > keep ? b - 1 : b);
  };
  for (Index b = 0; b < bins; ++b) {
    if (b != keep)
      pending[slot(b)].pieces.reserve(
          static_cast<std::size_t>(s.count[static_cast<std::size_t>(b)]));
  }
  for (Index j = 0; j < n; ++j) {
    const std::int32_t u = s.order[static_cast<std::size_t>(j)];
    const Index b = s.bin[static_cast<std::size_t>(u)];
    if (b == keep) continue;
    const PackItem& piece = buffered[static_cast<std::size_t>(u)];
    Pack& pack = pending[slot(b)];
    pack.pieces.push_back(piece);
    pack.tokens += piece.length;
    pack.images += piece.images;
  }
  for (std::size_t k = base; k < pending.size(); ++k) state_.tokens_closed += pending[k].tokens;
  state_.packs_closed += closed;
  pending_packs_ += closed;
  // The kept pack's units stay buffered, in arrival order.
  std::size_t kept = 0;
  if (keep >= 0) {
    for (Index u = 0; u < n; ++u) {
      if (s.bin[static_cast<std::size_t>(u)] == keep)
        buffered[kept++] = buffered[static_cast<std::size_t>(u)];
    }
  }
  buffered.resize(kept);
  return true;
}

void StreamingPacker::Close(Pack pack) {
  ++state_.packs_closed;
  ++pending_packs_;
  state_.tokens_closed += pack.tokens;
  state_.pending.push_back(std::move(pack));
}

void StreamingPacker::Finish() {
  if (options_.algorithm == PackAlgorithm::kNextFit) {
    if (!open_.pieces.empty()) Close(std::exchange(open_, Pack{}));
    return;
  }
  Repack(true);
}

bool StreamingPacker::Pop(Pack* pack) {
  auto& pending = state_.pending;
  if (pending_head_ >= pending.size()) return false;
  --pending_packs_;
  Pack& front = pending[pending_head_];
  if (IsPackRun(front, options_.capacity)) {
    // The next full piece of a run; the rest stays pending.
    PackItem& run = front.pieces[0];
    const Index capacity = options_.capacity;
    *pack = Pack{{PackItem{run.item, capacity, 0, run.start}}, capacity, 0};
    run.start += capacity;
    run.length -= capacity;
    front.tokens -= capacity;
    return true;
  }
  *pack = std::move(pending[pending_head_++]);
  if (pending_head_ == pending.size()) {
    pending.clear();
    pending_head_ = 0;
  } else if (pending_head_ >= 64 && 2 * pending_head_ >= pending.size()) {
    pending.erase(pending.begin(), pending.begin() + static_cast<std::ptrdiff_t>(pending_head_));
    pending_head_ = 0;
  }
  return true;
}

Index StreamingPacker::pending() const { return pending_packs_; }

Index StreamingPacker::buffered() const {
  return options_.algorithm == PackAlgorithm::kNextFit ? static_cast<Index>(open_.pieces.size())
                                                       : static_cast<Index>(state_.buffered.size());
}

std::vector<Index> StreamingPacker::TakeDropped() { return std::exchange(dropped_items_, {}); }

double StreamingPacker::efficiency() const {
  if (state_.packs_closed == 0) return 1.0;
  return static_cast<double>(state_.tokens_closed) /
         (static_cast<double>(state_.packs_closed) * static_cast<double>(options_.capacity));
}

PackerState StreamingPacker::State() const {
  PackerState s;
  s.buffered = options_.algorithm == PackAlgorithm::kNextFit ? open_.pieces : state_.buffered;
  s.pending.assign(state_.pending.begin() + static_cast<std::ptrdiff_t>(pending_head_),
                   state_.pending.end());
  s.items_seen = state_.items_seen;
  s.dropped = state_.dropped;
  s.split_items = state_.split_items;
  s.packs_closed = state_.packs_closed;
  s.tokens_closed = state_.tokens_closed;
  return s;
}

// ---------------------------------------------------------------------------
// Cross-rank balance

std::vector<double> PackCosts(const Packing& packing, CostModel model) {
  std::vector<double> costs(packing.num_packs(), 0.0);
  for (Index p = 0; p < packing.num_packs(); ++p) {
    double c = 0;
    for (Index e = packing.offsets[p]; e < packing.offsets[p + 1]; ++e) {
      const double l = static_cast<double>(packing.lengths[e]);
      c += model == CostModel::kTokens ? l : l * l;
    }
    costs[p] = c;
  }
  return costs;
}

RankSchedule BalanceRanks(std::span<const double> costs, Index world_size, Index packs_per_rank,
                          bool drop_last) {
  CheckAtLeast("world_size", world_size, 1);
  CheckAtLeast("packs_per_rank", packs_per_rank, 1);
  const Index num_packs = static_cast<Index>(costs.size());
  for (Index p = 0; p < num_packs; ++p) {
    if (!(costs[p] >= 0) || !std::isfinite(costs[p])) {
      ThrowInvalid("costs", "pack " + Str(p) + " has cost " + std::to_string(costs[p]) +
                                " (must be finite and >= 0)");
    }
  }
  const Index per_step = CheckedMul("world_size", world_size, packs_per_rank);
  // The schedule holds world_size x packs_per_rank entries per step: bounded
  // by the packs (plus a generous margin), so that a huge world over a few
  // packs is refused up front instead of allocating gigabytes of padding.
  constexpr Index kMaxPaddedStep = Index{1} << 24;
  if (per_step > kMaxPaddedStep && per_step > num_packs) {
    ThrowInvalid("world_size", Str(world_size) + " ranks x " + Str(packs_per_rank) +
                                   " packs per rank is " + Str(per_step) +
                                   " pack slots per step for only " + Str(num_packs) +
                                   " packs (more than 2^24 slots, almost all padding)");
  }
  RankSchedule s;
  s.world_size = world_size;
  s.packs_per_rank = packs_per_rank;
  std::vector<Index> order(num_packs);
  std::iota(order.begin(), order.end(), Index{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](Index a, Index b) { return costs[a] > costs[b]; });
  Index used = num_packs;
  if (drop_last) {
    used = num_packs / per_step * per_step;
    s.dropped_packs.assign(order.begin() + used, order.end());
    std::sort(s.dropped_packs.begin(), s.dropped_packs.end());
  }
  s.num_steps = CeilDiv(used, per_step);
  s.padding_packs = s.num_steps * per_step - used;
  s.assignment.assign(static_cast<size_t>(s.num_steps * per_step), -1);
  s.rank_costs.assign(static_cast<size_t>(s.num_steps * world_size), 0.0);
  std::vector<double> totals(world_size, 0.0);
  std::vector<Index> slots(world_size);
  // (cost in this step, cost over the epoch so far, rank): the cheapest rank
  // of the step takes the next pack; ties go to the rank with the lighter
  // epoch, so the epoch evens out too.
  using Entry = std::tuple<double, double, Index>;
  for (Index step = 0; step < s.num_steps; ++step) {
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
    for (Index r = 0; r < world_size; ++r) {
      heap.push({0.0, totals[r], r});
      slots[r] = 0;
    }
    const Index begin = step * per_step, end = std::min(used, begin + per_step);
    for (Index j = begin; j < end; ++j) {
      auto [cost, total, r] = heap.top();
      heap.pop();
      const Index p = order[j];
      s.assignment[static_cast<size_t>((step * world_size + r) * packs_per_rank + slots[r])] = p;
      ++slots[r];
      cost += costs[p];
      s.rank_costs[static_cast<size_t>(step * world_size + r)] = cost;
      if (slots[r] < packs_per_rank) heap.push({cost, total, r});
    }
    double sum = 0, max = 0;
    for (Index r = 0; r < world_size; ++r) {
      const double c = s.rank_costs[static_cast<size_t>(step * world_size + r)];
      sum += c;
      max = std::max(max, c);
      totals[r] += c;
    }
    if (sum > 0) {
      const double imbalance = max / (sum / static_cast<double>(world_size)) - 1;
      s.max_step_imbalance = std::max(s.max_step_imbalance, imbalance);
      if (end - begin == per_step) {
        s.max_full_step_imbalance = std::max(s.max_full_step_imbalance, imbalance);
      }
    }
  }
  double sum = 0, max = 0;
  for (double t : totals) {
    sum += t;
    max = std::max(max, t);
  }
  if (sum > 0) s.total_imbalance = max / (sum / static_cast<double>(world_size)) - 1;
  return s;
}

}  // namespace shardkit
