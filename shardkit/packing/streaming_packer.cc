// StreamingPacker (packing.h): the packer over a stream of items, with its
// state.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "shardkit/base/piece.h"
#include "shardkit/packing/internal/place.h"
#include "shardkit/packing/packing.h"

namespace shardkit {

using internal::Classify;

namespace {

// A pending pack of one piece longer than the capacity is a run of full
// packs of one split item (StreamingPacker::Push), popped a pack at a time.
bool IsPackRun(const Pack& pack, Index capacity) {
  return pack.pieces.size() == 1 && pack.pieces[0].length > capacity;
}
}  // namespace

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
  auto check_piece = [&](const Piece& p, const char* where) {
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
  for (const Piece& p : state.buffered) {
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
      const Piece& p = pack.pieces[0];
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
    for (const Piece& p : pack.pieces) {
      check_piece(p, "pending");
      // Each piece is at most a pack (checked above): the sums cannot wrap
      // before they pass the budget.
      pack_tokens += p.length;
      pack_images += p.images;
      if (pack_tokens > options_.capacity) {
        Index total = 0;
        for (const Piece& q : pack.pieces)
          total = AddWithoutOverflow(total, q.length).value_or(total);
        over(k, total, "tokens", capacity_text);
      }
      if (options_.max_images && pack_images > *options_.max_images) {
        Index total = 0;
        for (const Piece& q : pack.pieces)
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
  std::vector<const Piece*> all;
  for (const Piece& p : state.buffered) all.push_back(&p);
  for (const Pack& pack : state.pending) {
    for (const Piece& p : pack.pieces) all.push_back(&p);
  }
  std::sort(all.begin(), all.end(), [](const Piece* a, const Piece* b) {
    return a->item != b->item ? a->item < b->item : a->start < b->start;
  });
  for (std::size_t i = 1; i < all.size(); ++i) {
    const Piece& a = *all[i - 1];
    const Piece& b = *all[i];
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
      state_.pending.push_back(Pack{{Piece{item, pieces * capacity, 0, 0}}, pieces * capacity, 0});
    }
    if (length % capacity) Place(Piece{item, length % capacity, 0, pieces * capacity});
    return;
  }
  Place(Piece{item, length, images, 0});
}

void StreamingPacker::Place(const Piece& piece) {
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
  std::vector<Piece> rest;
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
  for (const Piece& p : buffered) max_len = std::max(max_len, p.length);
  s.first.assign(static_cast<std::size_t>(max_len) + 2, 0);
  for (const Piece& p : buffered) ++s.first[static_cast<std::size_t>(max_len - p.length) + 1];
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
    const Piece& piece = buffered[static_cast<std::size_t>(u)];
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
    Piece& run = front.pieces[0];
    const Index capacity = options_.capacity;
    *pack = Pack{{Piece{run.item, capacity, 0, run.start}}, capacity, 0};
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

}  // namespace shardkit
