// The loader section of the demo: the embedded documents as a token stream
// (synthetic token ids, the real lengths) through the TokenLoader on 4 ranks:
// padding per packing algorithm, exactly-once coverage, exact resume, an
// elastic resume from 4 ranks to 3, and the equal-steps plan beside per-rank
// packing.
#include <algorithm>
#include <iomanip>
#include <map>
#include <sstream>
#include <tuple>

#include "cli/demo.h"
#include "shardkit/loader/loader.h"

namespace shardkit::cli {

namespace {

constexpr Index kRanks = 4;
constexpr Index kSeqLen = 2048;
constexpr Index kBatch = 4;

using Piece = std::tuple<Index, Index, Index>;  // document, start, length

// True when the pieces tile every document exactly once.
bool ExactlyOnce(std::vector<Piece> pieces, const TokenSource& source) {
  std::sort(pieces.begin(), pieces.end());
  std::size_t i = 0;
  for (Index d = 0; d < source.num_documents(); ++d) {
    Index covered = 0;
    bool any = false;
    for (; i < pieces.size() && std::get<0>(pieces[i]) == d; ++i) {
      if (std::get<1>(pieces[i]) != covered) return false;
      covered += std::get<2>(pieces[i]);
      any = true;
    }
    if (!any || covered != source.DocumentLength(d)) return false;
  }
  return i == pieces.size();
}

void AddPieces(const Batch& b, std::vector<Piece>* out) {
  for (std::size_t k = 0; k < b.documents.size(); ++k) {
    out->emplace_back(b.documents[k], b.starts[k], b.lengths[k]);
  }
}

}  // namespace

void DemoLoader(const DemoContext& c, HtmlReport& report) {
  // Token ids are synthetic (only lengths ship with shardkit); what matters
  // here is where every token goes.
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> offsets = {0};
  for (std::size_t d = 0; d < c.documents.size(); ++d) {
    for (Index k = 0; k < c.documents[d].tokens; ++k) {
      tokens.push_back(static_cast<std::int32_t>((d * 7919 + static_cast<std::size_t>(k)) % 50000));
    }
    offsets.push_back(static_cast<std::int64_t>(tokens.size()));
  }
  auto source =
      TokenSource::FromMemory(tokens.data(), TokenDType::kInt32, static_cast<Index>(tokens.size()),
                              offsets.data(), static_cast<Index>(offsets.size()));
  LoaderOptions base;
  base.equal_steps = false;  // per rank first; the equal-steps plan below
  base.seq_len = kSeqLen;
  base.batch_size = kBatch;
  base.world_size = kRanks;
  base.seed = 2026;
  base.buffer = 64;
  base.num_threads = 2;

  c.out << "\n== Loader: " << source->num_documents() << " documents (" << source->num_tokens()
        << " tokens) -> [" << kBatch << ", " << kSeqLen << "] batches on " << kRanks
        << " ranks, shuffled, packed (buffer 64), long documents split\n";
  c.json.Key("loader").Begin().Key("seq_len").Int(kSeqLen).Key("batch_size").Int(kBatch);
  c.json.Key("ranks").Int(kRanks);

  // Padding by algorithm, every rank, the whole epoch.
  const std::pair<const char*, PackAlgorithm> algorithms[] = {
      {"next_fit", PackAlgorithm::kNextFit},
      {"ffd", PackAlgorithm::kFirstFitDecreasing},
      {"bfd", PackAlgorithm::kBestFitDecreasing},
      {"balanced", PackAlgorithm::kBalanced}};
  std::vector<std::vector<std::string>> table = {
      {"algorithm", "batches per rank", "padding", "every document once"}};
  std::vector<std::string> names;
  Series padding_series{"padding", {}, "#e0a458"};
  bool bfd_once = false;
  std::vector<double> bfd_rank_tokens;
  c.json.Key("algorithms").BeginList();
  for (const auto& [name, algorithm] : algorithms) {
    std::vector<Piece> pieces;
    Index real = 0, slots = 0, min_batches = -1, max_batches = 0;
    std::vector<double> rank_tokens;
    for (Index r = 0; r < kRanks; ++r) {
      LoaderOptions o = base;
      o.rank = r;
      o.algorithm = algorithm;
      TokenLoader loader(source, o);
      Index batches = 0, rank_real = 0;
      while (auto b = loader.Next()) {
        AddPieces(*b, &pieces);
        rank_real += b->tokens;
        slots += kBatch * kSeqLen;
        ++batches;
      }
      real += rank_real;
      rank_tokens.push_back(static_cast<double>(rank_real));
      min_batches = min_batches < 0 ? batches : std::min(min_batches, batches);
      max_batches = std::max(max_batches, batches);
    }
    const bool once = ExactlyOnce(pieces, *source);
    const double padding = slots ? 1.0 - static_cast<double>(real) / slots : 0.0;
    if (algorithm == PackAlgorithm::kBestFitDecreasing) {
      bfd_once = once;
      bfd_rank_tokens = rank_tokens;
    }
    names.push_back(name);
    padding_series.values.push_back(100 * padding);
    const std::string batches = std::to_string(min_batches) + "-" + std::to_string(max_batches);
    table.push_back({name, batches, Percent(padding), once ? "yes" : "NO"});
    c.out << "  " << std::left << std::setw(10) << name << std::right << " batches/rank "
          << std::setw(7) << batches << "  padding " << std::setw(7) << Percent(padding)
          << "  every document once: " << (once ? "yes" : "NO") << "\n";
    c.json.Begin().Key("algorithm").String(name).Key("padding").Double(padding);
    c.json.Key("min_batches").Int(min_batches).Key("max_batches").Int(max_batches);
    c.json.Key("exactly_once").Bool(once).End();
  }
  c.json.End();

  // Exact resume: rank 1 stops after 5 batches, a new loader continues from
  // the state; the rest must equal the uninterrupted run.
  LoaderOptions one = base;
  one.rank = 1;
  std::vector<std::shared_ptr<const Batch>> full;
  {
    TokenLoader loader(source, one);
    while (auto b = loader.Next()) full.push_back(b);
  }
  LoaderState state;
  {
    TokenLoader loader(source, one);
    for (int i = 0; i < 5; ++i) (void)loader.Next();
    state = loader.State();
  }
  bool resume_exact = true;
  {
    TokenLoader resumed(source, one, state);
    for (std::size_t i = 5; i < full.size(); ++i) {
      auto b = resumed.Next();
      resume_exact = resume_exact && b && b->input_ids == full[i]->input_ids &&
                     b->documents == full[i]->documents;
    }
    resume_exact = resume_exact && resumed.Next() == nullptr;
  }

  // Elastic: 4 ranks deliver 3 batches each, 3 ranks finish the epoch.
  std::vector<Piece> elastic;
  std::vector<LoaderState> states;
  for (Index r = 0; r < kRanks; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    TokenLoader loader(source, o);
    for (int i = 0; i < 3; ++i) {
      if (auto b = loader.Next()) AddPieces(*b, &elastic);
    }
    states.push_back(loader.State());
  }
  LoaderState merged = MergeLoaderStates(states);
  for (Index r = 0; r < 3; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    o.world_size = 3;
    TokenLoader loader(source, o, merged);
    while (auto b = loader.Next()) AddPieces(*b, &elastic);
  }
  const bool elastic_once = ExactlyOnce(elastic, *source);
  c.out << "  resume rank 1 after 5 batches from its state: "
        << (resume_exact ? "identical to the uninterrupted run" : "DIFFERS") << "\n";
  c.out << "  elastic: 4 ranks x 3 batches, then 3 ranks from the merged state ("
        << merged.head.size()
        << " pending pieces): " << (elastic_once ? "every document exactly once" : "FAILED")
        << "\n";
  // Equal steps: the same data through the global plan (bfd), beside the
  // per-rank packing above.
  std::vector<double> per_rank_batches, equal_batches;
  Index per_rank_real = 0, per_rank_slots = 0;
  for (Index r = 0; r < kRanks; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    TokenLoader loader(source, o);
    Index n = 0;
    while (auto b = loader.Next()) {
      ++n;
      per_rank_real += b->tokens;
    }
    per_rank_slots += n * kBatch * kSeqLen;
    per_rank_batches.push_back(static_cast<double>(n));
  }
  std::vector<Piece> equal_pieces;
  Index equal_real = 0, equal_slots = 0, filler_rows = 0;
  TrainSummary plan;
  for (Index r = 0; r < kRanks; ++r) {
    LoaderOptions o = base;
    o.rank = r;
    o.equal_steps = true;
    TokenLoader loader(source, o);
    plan = loader.train_plan()->summary();
    Index n = 0;
    while (auto b = loader.Next()) {
      ++n;
      equal_real += b->tokens;
      AddPieces(*b, &equal_pieces);
      filler_rows += std::count(b->row_tokens.begin(), b->row_tokens.end(), 0);
    }
    equal_slots += n * kBatch * kSeqLen;
    equal_batches.push_back(static_cast<double>(n));
  }
  const bool equal_once = ExactlyOnce(equal_pieces, *source);
  const double per_rank_padding =
      per_rank_slots ? 1.0 - static_cast<double>(per_rank_real) / per_rank_slots : 0.0;
  const double equal_padding =
      equal_slots ? 1.0 - static_cast<double>(equal_real) / equal_slots : 0.0;
  const auto [lo, hi] = std::minmax_element(per_rank_batches.begin(), per_rank_batches.end());
  c.out << "  per-rank packing: batches per rank " << static_cast<Index>(*lo) << "-"
        << static_cast<Index>(*hi) << " (a DDP loop with a collective per step hangs), padding "
        << Percent(per_rank_padding) << "\n";
  c.out << "  equal steps (global plan, dealt): " << plan.num_steps << " steps on every rank, "
        << filler_rows << " filler row(s) in the last step, padding " << Percent(equal_padding)
        << ", per-step imbalance mean " << Percent(plan.mean_step_imbalance) << " max "
        << Percent(plan.max_full_step_imbalance)
        << ", every document once: " << (equal_once ? "yes" : "NO") << "\n";
  c.json.Key("equal_steps").Begin();
  c.json.Key("steps").Int(plan.num_steps).Key("filler_rows").Int(filler_rows);
  c.json.Key("padding").Double(equal_padding).Key("per_rank_padding").Double(per_rank_padding);
  c.json.Key("mean_step_imbalance").Double(plan.mean_step_imbalance);
  c.json.Key("max_full_step_imbalance").Double(plan.max_full_step_imbalance);
  c.json.Key("batches").BeginList();
  for (double v : equal_batches) c.json.Int(static_cast<Index>(v));
  c.json.End();
  c.json.Key("per_rank_batches").BeginList();
  for (double v : per_rank_batches) c.json.Int(static_cast<Index>(v));
  c.json.End();
  c.json.Key("exactly_once").Bool(equal_once).End();

  c.json.Key("exactly_once").Bool(bfd_once);
  c.json.Key("resume_exact").Bool(resume_exact);
  c.json.Key("elastic_exactly_once").Bool(elastic_once);
  c.json.Key("merged_pending_pieces").Int(static_cast<Index>(merged.head.size()));
  c.json.End();

  std::vector<std::string> ranks;
  for (Index r = 0; r < kRanks; ++r) ranks.push_back("rank " + std::to_string(r));
  report.AddSection(
      "Loader: packed batches from the token stream",
      "<p>The documents as one token stream (synthetic ids, real lengths) through the "
      "TokenLoader: one global shuffled order dealt round robin to " +
          std::to_string(kRanks) +
          " ranks, streamed through a packer (buffer 64), long "
          "documents split into pieces of at most " +
          std::to_string(kSeqLen) + " tokens, collated into [" + std::to_string(kBatch) + ", " +
          std::to_string(kSeqLen) +
          "] batches with labels, position ids, document ids and cu_seqlens on background "
          "threads.</p>" +
          SvgBars("Padding (% of batch tokens) by packing algorithm", names, {padding_series}) +
          SvgBars("Real tokens per rank (bfd)", ranks, {{"tokens", bfd_rank_tokens, "#2a9d8f"}}) +
          HtmlTable(table) + "<p>Resume of rank 1 after 5 batches from its state: " +
          (resume_exact ? "identical to the uninterrupted run" : "DIFFERS") +
          ". Elastic resume, 4 ranks (3 batches each) to 3 ranks from the merged state: " +
          (elastic_once ? "every document exactly once" : "FAILED") + ".</p>");
  report.AddSection(
      "Loader: equal steps for training",
      "<p>Per-rank packing gives the ranks different batch counts, so a data-parallel loop "
      "with a collective every step hangs at the end of the epoch. The equal-steps plan packs "
      "the epoch once, globally, and deals each step's rows to the ranks (each rank the same "
      "number of rows, the heaviest rank close to the mean): every rank runs " +
          std::to_string(plan.num_steps) + " steps, only the last step holds filler rows (" +
          std::to_string(filler_rows) + ", masked), every document " +
          (equal_once ? "exactly once" : "NOT exactly once") + ".</p>" +
          SvgBars("Batches per rank: per-rank packing vs equal steps", ranks,
                  {{"per-rank packing", per_rank_batches, "#e76f51"},
                   {"equal steps", equal_batches, "#2a9d8f"}}) +
          HtmlTable({{"plan", "batches per rank", "padding", "per-step imbalance (mean / max)"},
                     {"per-rank packing",
                      std::to_string(static_cast<Index>(*lo)) + "-" +
                          std::to_string(static_cast<Index>(*hi)),
                      Percent(per_rank_padding), "-"},
                     {"equal steps", std::to_string(plan.num_steps), Percent(equal_padding),
                      Percent(plan.mean_step_imbalance) + " / " +
                          Percent(plan.max_full_step_imbalance)}}));
}

}  // namespace shardkit::cli
