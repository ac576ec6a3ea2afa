// Bindings of the packing engine: Packing, StreamingPacker, rank balance and
// row collation. The Python package (shardkit/packing.py) converts inputs to
// int64 arrays (no copy when they already are) and calls these.
#include "shardkit/packing/packing.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <stdexcept>
#include <string>

#include "python/src/bindings.h"
#include "shardkit/loader/loader_state.h"
#include "shardkit/packing/context_parallel.h"
#include "shardkit/packing/packing_metadata.h"
#include "shardkit/packing/rank_balance.h"

namespace shardkit::python {

using namespace nb::literals;

namespace {

PackOptions MakeOptions(Index capacity, const std::string& algorithm,
                        std::optional<Index> max_images, std::optional<Index> max_sequences,
                        const std::string& oversize, std::optional<Index> buffer,
                        const std::string& compat = "none") {
  PackOptions o;
  o.compat = ParsePackCompat(compat);
  o.capacity = capacity;
  o.algorithm = ParsePackAlgorithm(algorithm);
  o.max_images = max_images;
  o.max_sequences = max_sequences;
  o.oversize = ParseOversize(oversize);
  o.buffer = buffer;
  ValidatePackOptions(o);
  return o;
}

nb::tuple PieceTuple(const Piece& p) { return nb::make_tuple(p.item, p.start, p.length, p.images); }

// The arguments the _cp_* helpers share: one row of the documents `lengths`
// (items 0, 1, ... in order) and the context-parallel options, the row
// checked by the core (ValidateCpRow) for them and `how`.
struct CpRow {
  ContextParallelOptions cp;
  std::vector<Piece> pieces;
};

CpRow CheckedCpRow(const std::vector<Index>& lengths, Index seq_len, Index cp_size,
                   std::optional<Index> cp_granularity, const std::string& cp_strategy,
                   CpSplit how) {
  CpRow row;
  row.cp.size = cp_size;
  row.cp.granularity = cp_granularity;
  row.cp.strategy = ParseCpStrategy(cp_strategy);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    row.pieces.push_back(Piece{static_cast<Index>(i), lengths[i], 0, 0});
  }
  ValidateCpRow(row.pieces, seq_len, row.cp, how);
  return row;
}

// Binds `name`(lengths, seq_len, cp_size, cp_granularity=None, cp_strategy="head_tail"),
// a helper of the row's layout under cp_strategy: body(row, seq_len) of the checked row.
template <typename Body>
void DefCpLayoutFunction(nb::module_& m, const char* name, Body body) {
  m.def(
      name,
      [body](const std::vector<Index>& lengths, Index seq_len, Index cp_size,
             std::optional<Index> cp_granularity, const std::string& cp_strategy) {
        return body(CheckedCpRow(lengths, seq_len, cp_size, cp_granularity, cp_strategy,
                                 CpSplit::kDocumentHeadTail),
                    seq_len);
      },
      "lengths"_a, "seq_len"_a, "cp_size"_a, "cp_granularity"_a = nb::none(),
      "cp_strategy"_a = "head_tail");
}

}  // namespace

void init_packing(nb::module_& m) {
  nb::class_<Packing>(m, "Packing",
                      "Packs of a whole data set (see shardkit.pack). Pack p holds entries\n"
                      "offsets[p]:offsets[p+1] of items / starts / lengths.")
      .def_prop_ro("num_packs", &Packing::num_packs)
      .def("__len__", &Packing::num_packs)
      .def_prop_ro("efficiency", &Packing::efficiency, "real tokens / (num_packs * capacity)")
      .def_prop_ro(
          "lower_bound", [](const Packing& p) { return p.lower_bound; },
          "no packing of these items has fewer packs")
      .def_prop_ro("dropped", &Packing::dropped, "number of oversize items dropped")
      .def_prop_ro("capacity", [](const Packing& p) { return p.capacity; })
      .def_prop_ro("num_items", [](const Packing& p) { return p.num_items; })
      .def_prop_ro("split_items", [](const Packing& p) { return p.split_items; })
      .def_prop_ro("tokens", [](const Packing& p) { return p.tokens; })
      .def_prop_ro("images_packed", [](const Packing& p) { return p.image_count; })
      .def_prop_ro("offsets", &MemberView<&Packing::offsets>)
      .def_prop_ro("items", &MemberView<&Packing::items>)
      .def_prop_ro("lengths", &MemberView<&Packing::lengths>)
      .def_prop_ro("starts", &MemberView<&Packing::starts>)
      .def_prop_ro("dropped_items", &MemberView<&Packing::dropped_items>)
      .def_prop_ro(
          "packs",
          [](const Packing& p) {
            std::vector<std::vector<Index>> out(static_cast<size_t>(p.num_packs()));
            for (Index b = 0; b < p.num_packs(); ++b) {
              out[b].assign(p.items.begin() + p.offsets[b], p.items.begin() + p.offsets[b + 1]);
            }
            return out;
          },
          "list of packs, each the list of its item ids (a split item appears once per "
          "piece)")
      .def(
          "pack_tokens",
          [](const Packing& p) {
            std::int64_t* data;
            auto a = NewArray<std::int64_t>(static_cast<size_t>(p.num_packs()), &data);
            for (Index b = 0; b < p.num_packs(); ++b) data[b] = p.PackTokens(b);
            return a;
          },
          "tokens of every pack")
      .def(
          "pieces",
          [](const Packing& p, Index b) {
            std::vector<std::tuple<Index, Index, Index, Index>> out;
            for (const Piece& e : p.Entries(CheckedIndex(b, p.num_packs(), "pack"))) {
              out.emplace_back(e.item, e.start, e.length, e.images);
            }
            return out;
          },
          "pack"_a, "(item, start, length, images) of every entry of pack `pack`")
      .def("__repr__", [](const Packing& p) {
        char eff[32];
        std::snprintf(eff, sizeof eff, "%.6f", p.efficiency());
        return "Packing(items=" + std::to_string(p.num_items) +
               ", num_packs=" + std::to_string(p.num_packs()) +
               ", lower_bound=" + std::to_string(p.lower_bound) + ", efficiency=" + eff +
               ", dropped=" + std::to_string(p.dropped()) + ")";
      });

  m.def(
      "_pack",
      [](const I64In& lengths, Int capacity, Str algorithm, std::optional<I64In> images,
         OptionalInt max_images, OptionalInt max_sequences, Str oversize, OptionalInt buffer,
         Str compat) {
        PackOptions o = MakeOptions(ToIndex(capacity, "capacity"), ToStr(algorithm, "algorithm"),
                                    ToOptionalIndex(max_images, "max_images"),
                                    ToOptionalIndex(max_sequences, "max_sequences"),
                                    ToStr(oversize, "oversize"), ToOptionalIndex(buffer, "buffer"),
                                    ToStr(compat, "compat"));
        std::span<const Index> img;
        if (images) img = Span(*images);
        ReleaseGil release;
        return PackItems(Span(lengths), o, img);
      },
      "lengths"_a, "capacity"_a.none(), "algorithm"_a.none(), "images"_a.none(),
      "max_images"_a.none(), "max_sequences"_a.none(), "oversize"_a.none(), "buffer"_a.none(),
      "compat"_a.none());

  nb::class_<StreamingPacker>(m, "_StreamingPacker")
      .def(
          "__init__",
          [](StreamingPacker* self, Index capacity, const std::string& algorithm,
             std::optional<Index> max_images, std::optional<Index> max_sequences,
             const std::string& oversize, std::optional<Index> buffer, nb::object state) {
            PackOptions o =
                MakeOptions(capacity, algorithm, max_images, max_sequences, oversize, buffer);
            if (state.is_none()) {
              new (self) StreamingPacker(o);
              return;
            }
            // The state goes through the core codec (shardkit/loader/loader_state.h).
            const std::string text = StateText(state);
            // The constructor applies the restore checks (PackerStateFits is them).
            new (self) StreamingPacker(o, PackerStateFromJson(text));
          },
          "capacity"_a, "algorithm"_a, "max_images"_a.none(), "max_sequences"_a.none(),
          "oversize"_a, "buffer"_a.none(), "state"_a.none())
      .def("push", &StreamingPacker::Push, "item"_a, "length"_a, "images"_a = 0)
      .def(
          "push_many",
          [](StreamingPacker& s, const I64In& items, const I64In& lengths,
             std::optional<I64In> images) {
            if (items.shape(0) != lengths.shape(0) ||
                (images && images->shape(0) != lengths.shape(0))) {
              throw std::invalid_argument("lengths: items, lengths and images differ in size");
            }
            ReleaseGil release;
            for (size_t i = 0; i < lengths.shape(0); ++i) {
              s.Push(items.data()[i], lengths.data()[i], images ? images->data()[i] : 0);
            }
          },
          "items"_a, "lengths"_a, "images"_a.none())
      .def("finish", &StreamingPacker::Finish)
      .def(
          "pop",
          [](StreamingPacker& s) -> nb::object {
            Pack p;
            if (!s.Pop(&p)) return nb::none();
            nb::list out;
            for (const Piece& e : p.pieces) out.append(PieceTuple(e));
            return out;
          },
          "The oldest closed pack as a list of (item, start, length, images), or None.")
      .def_prop_ro("pending", &StreamingPacker::pending)
      .def_prop_ro("buffered", &StreamingPacker::buffered)
      .def_prop_ro("efficiency", &StreamingPacker::efficiency)
      .def("take_dropped", &StreamingPacker::TakeDropped)
      .def("state",
           [](const StreamingPacker& s) { return JsonToPython(PackerStateToJson(s.State())); })
      .def(
          "state_json", [](const StreamingPacker& s) { return PackerStateToJson(s.State()); },
          "The state as the core's JSON text (state() is json.loads of it).");

  using Steps = nb::ndarray<nb::numpy, const std::int64_t, nb::ndim<3>>;
  using StepCosts = nb::ndarray<nb::numpy, const double, nb::ndim<2>>;
  nb::class_<RankSchedule>(
      m, "RankSchedule",
      "Packs dealt to ranks, the same number per rank per step (see shardkit.balance_ranks).\n"
      "Read-only; the arrays view the schedule's memory.\n\n"
      ">>> import shardkit\n"
      ">>> s = shardkit.balance_ranks([10, 1, 9, 2], 2)\n"
      ">>> s.assignment.tolist(), s.rank_costs.tolist()\n"
      "([[[0], [2]], [[1], [3]]], [[10.0, 9.0], [1.0, 2.0]])\n"
      ">>> s\n"
      "RankSchedule(world_size=2, packs_per_rank=1, num_steps=2, padding_packs=0, "
      "dropped_packs=0, max_step_imbalance=0.333333, total_imbalance=0.0)\n")
      .def_ro("world_size", &RankSchedule::world_size)
      .def_ro("packs_per_rank", &RankSchedule::packs_per_rank)
      .def_ro("num_steps", &RankSchedule::num_steps)
      .def_prop_ro(
          "assignment",
          [](nb::handle self) {
            const auto& s = nb::cast<const RankSchedule&>(self);
            static_assert(sizeof(Index) == sizeof(std::int64_t));
            return Steps(reinterpret_cast<const std::int64_t*>(s.assignment.data()),
                         {static_cast<size_t>(s.num_steps), static_cast<size_t>(s.world_size),
                          static_cast<size_t>(s.packs_per_rank)},
                         self);
          },
          "int64 [num_steps, world_size, packs_per_rank]: pack ids, -1 for a padding pack")
      .def_prop_ro(
          "rank_costs",
          [](nb::handle self) {
            const auto& s = nb::cast<const RankSchedule&>(self);
            return StepCosts(s.rank_costs.data(),
                             {static_cast<size_t>(s.num_steps), static_cast<size_t>(s.world_size)},
                             self);
          },
          "float64 [num_steps, world_size]: each rank's cost at each step")
      .def_ro("padding_packs", &RankSchedule::padding_packs)
      .def_prop_ro("dropped_packs", &MemberView<&RankSchedule::dropped_packs>,
                   "ids of the packs left out (drop_last)")
      .def_ro("max_step_imbalance", &RankSchedule::max_step_imbalance,
              "max over steps of heaviest rank / mean rank - 1")
      .def_ro("max_full_step_imbalance", &RankSchedule::max_full_step_imbalance,
              "the same over the steps without padding packs")
      .def_ro("total_imbalance", &RankSchedule::total_imbalance,
              "heaviest rank's epoch total / mean rank total - 1")
      .def("__repr__", [](const RankSchedule& s) {
        return "RankSchedule(world_size=" + std::to_string(s.world_size) +
               ", packs_per_rank=" + std::to_string(s.packs_per_rank) +
               ", num_steps=" + std::to_string(s.num_steps) +
               ", padding_packs=" + std::to_string(s.padding_packs) +
               ", dropped_packs=" + std::to_string(s.dropped_packs.size()) +
               ", max_step_imbalance=" + ReprFloat(s.max_step_imbalance) +
               ", total_imbalance=" + ReprFloat(s.total_imbalance) + ")";
      });

  m.def(
      "_balance_ranks",
      [](std::vector<double> costs, Index world_size, Index packs_per_rank, bool drop_last) {
        ReleaseGil release;
        return BalanceRanks(costs, world_size, packs_per_rank, drop_last);
      },
      "costs"_a, "world_size"_a, "packs_per_rank"_a, "drop_last"_a);

  m.def(
      "_pack_costs",
      [](const Packing& p, const std::string& cost) { return PackCosts(p, ParseCostModel(cost)); },
      "packing"_a, "cost"_a);

  m.def(
      "_collate",
      [](const I64In& row_offsets, const I64In& items, const I64In& starts, const I64In& lengths,
         const I64In& images, const I64In& tokens, const I64In& offsets, Bool block_mask_arg,
         nb::kwargs options) {
        // The collation options by the one table (option_fields.h), as a whole.
        CollateOptions o;
        ReadOptions(options, &o, "collate_rows");
        ValidateCollateOptions(o);
        const Index seq_len = o.seq_len;
        const bool block_mask = ToBool(block_mask_arg, "block_mask");
        // The arrays are [rows, seq_len] (and [rows, seq_len, seq_len] with
        // block_mask): a row of more than 2^28 tokens (the loader's bound on a
        // whole batch, kMaxBatchTokens) is refused naming seq_len instead of
        // numpy's "array is too big".
        if (seq_len > (Index{1} << 28)) {
          ThrowInvalid("seq_len",
                       std::to_string(seq_len) + " tokens per row is more than 2^28 (268435456)");
        }
        // Array shapes are the binding's; every rule of collation (pieces in
        // their items, rows within seq_len, offsets) is the core's.
        const Index rows = static_cast<Index>(row_offsets.shape(0)) - 1;
        const Index entries = static_cast<Index>(items.shape(0));
        if (rows < 0) throw std::invalid_argument("packs: no row offsets");
        if (starts.shape(0) != items.shape(0) || lengths.shape(0) != items.shape(0) ||
            (images.shape(0) != 0 && images.shape(0) != items.shape(0))) {
          throw std::invalid_argument("packs: items, starts, lengths and images differ in size");
        }
        std::vector<std::vector<Piece>> pieces(rows);
        for (Index r = 0; r < rows; ++r) {
          const Index b = row_offsets.data()[r], e = row_offsets.data()[r + 1];
          if (b < 0 || e < b || e > entries) {
            throw std::invalid_argument("packs: bad row offsets at row " + std::to_string(r));
          }
          for (Index j = b; j < e; ++j) {
            pieces[r].push_back({items.data()[j], lengths.data()[j],
                                 images.shape(0) ? images.data()[j] : 0, starts.data()[j]});
          }
        }
        const std::span<const std::int64_t> offset_span(offsets.data(), offsets.shape(0));
        ValidateCollation(pieces, offset_span, static_cast<Index>(tokens.shape(0)), o);
        const size_t R = static_cast<size_t>(rows), L = static_cast<size_t>(seq_len);
        std::int64_t *ids, *labels, *pos;
        std::int32_t* doc;
        std::uint8_t *mask, *block = nullptr;
        nb::dict d;
        d["input_ids"] = NewNd<std::int64_t>({R, L}, &ids);
        d["labels"] = NewNd<std::int64_t>({R, L}, &labels);
        d["position_ids"] = NewNd<std::int64_t>({R, L}, &pos);
        d["document_ids"] = NewNd<std::int32_t>({R, L}, &doc);
        d["attention_mask"] = NewNd<std::uint8_t>({R, L}, &mask);
        if (block_mask) d["block_mask"] = NewNd<std::uint8_t>({R, L, L}, &block);
        std::vector<std::int32_t> cu;
        Index max_seqlen;
        {
          ReleaseGil release;
          std::vector<std::span<const Piece>> spans(pieces.begin(), pieces.end());
          for (size_t r = 0; r < R; ++r) {
            RowOutput row{ids + r * L, labels + r * L, pos + r * L,
                          doc + r * L, mask + r * L,   block ? block + r * L * L : nullptr};
            CollateRow(pieces[r], o, row, [&](const Piece& p, std::int64_t* dst) {
              const std::int64_t* src = tokens.data() + offsets.data()[p.item] + p.start;
              std::copy(src, src + p.length, dst);
            });
          }
          max_seqlen = BatchCuSeqlens(spans, o, &cu);
        }
        std::int32_t* cu_data;
        d["cu_seqlens"] = NewNd<std::int32_t>({cu.size()}, &cu_data);
        std::copy(cu.begin(), cu.end(), cu_data);
        d["max_seqlen"] = max_seqlen;
        std::vector<std::span<const Piece>> spans(pieces.begin(), pieces.end());
        auto map = ImageMap(spans);
        std::int64_t* im;
        d["image_sample"] = NewNd<std::int64_t>({map.size(), size_t{3}}, &im);
        for (size_t i = 0; i < map.size(); ++i) {
          im[3 * i] = map[i].row;
          im[3 * i + 1] = map[i].sequence;
          im[3 * i + 2] = map[i].item;
        }
        return d;
      },
      "row_offsets"_a, "items"_a, "starts"_a, "lengths"_a, "images"_a, "tokens"_a, "offsets"_a,
      "block_mask"_a.none(), "options"_a,
      "Rows from pieces (shardkit.packing.collate_rows); options: CollateOptions' fields "
      "by name (seq_len, padding_side, pad_token_id, ignore_index, causal).");

  m.def(
      "_cp_rank_work",
      [](const std::vector<Index>& lengths, Index seq_len, Index cp_size, const std::string& split,
         std::optional<Index> cp_granularity) {
        const CpSplit how = ParseCpSplit(split);
        const CpRow row = CheckedCpRow(lengths, seq_len, cp_size, cp_granularity, "head_tail", how);
        return CpRankWork(row.pieces, seq_len, row.cp, how);
      },
      "lengths"_a, "seq_len"_a, "cp_size"_a, "split"_a = "document_head_tail",
      "cp_granularity"_a = nb::none());

  DefCpLayoutFunction(m, "_cp_document_padding", [](const CpRow& row, Index seq_len) {
    return CpDocumentPadding(row.pieces, seq_len, row.cp);
  });
  DefCpLayoutFunction(m, "_cp_restore_index", [](const CpRow& row, Index seq_len) {
    std::int64_t* data;
    auto out = NewNd<std::int64_t>({static_cast<std::size_t>(seq_len)}, &data);
    FillCpRestoreIndex(row.pieces, seq_len, row.cp, data);
    return out;
  });
}

}  // namespace shardkit::python
