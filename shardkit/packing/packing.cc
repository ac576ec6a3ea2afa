#include "shardkit/packing/packing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
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
constexpr EnumNames<PackAlgorithm, 5> kAlgorithms{
    "algorithm", "algorithm", {"next_fit", "ffd", "bfd", "balanced", "histogram"}};
constexpr EnumNames<Oversize, 3> kOversize{"oversize", "policy", {"drop", "error", "split"}};
constexpr EnumNames<PackCompat, 2> kCompat{"compat", "compat", {"none", "trl"}};

}  // namespace

SHARDKIT_ENUM_PARSE_AND_NAMES(PackAlgorithm, kAlgorithms, ParsePackAlgorithm, PackAlgorithmName,
                              PackAlgorithmNames)
SHARDKIT_ENUM_PARSE_AND_NAMES(Oversize, kOversize, ParseOversize, OversizeName, OversizeNames)
SHARDKIT_ENUM_PARSE_AND_NAMES(PackCompat, kCompat, ParsePackCompat, PackCompatName, PackCompatNames)

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

std::vector<Piece> Packing::Entries(Index p) const {
  std::vector<Piece> out;
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

}  // namespace internal

using internal::Classify;

namespace {

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
    for (const Piece& p : pack.pieces) {
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
  internal::Placement placed;
  const bool text_items = !any_oversize && !trl_units && !has_images;
  if (text_items && o.algorithm == PackAlgorithm::kHistogram &&
      internal::HistogramDirect(unit_len, o, &out)) {
    return out;
  }
  if (text_items && o.algorithm == PackAlgorithm::kBalanced) {
    if (internal::BalancedDirect(unit_len, o, &out, &placed)) return out;
  } else {
    placed = internal::Place(unit_len, unit_img, o);
  }
  Scatter(placed, unit_item, unit_len, unit_img, unit_start, &out);
  return out;
}

}  // namespace shardkit
