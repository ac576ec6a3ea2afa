// Printing of `shardkit loader-stats`' report (cli/loader_report.h).
#include "cli/loader_report.h"

#include <cinttypes>
#include <cstdio>
#include <iostream>

#include "cli/json.h"
#include "cli/roles.h"

namespace shardkit::cli {

void PrintLoaderStats(const LoaderStatsReport& report, bool json) {
  const LoaderOptions& o = report.options;
  const TokenSource* source = report.source;
  const Index files = report.files;
  const auto& file_policy = report.file_policy;
  const auto& plan = report.plan;
  const auto& stats = report.stats;
  const LoadSummary& sum = report.sum;
  const double seconds = report.seconds, rate = report.rate;
  const bool complete = report.sum.complete;
  const bool mixing = report.mixture != nullptr;
  static const MixtureRun kNoMixture;
  const MixtureRun& mix = mixing ? *report.mixture : kNoMixture;
  const auto& cp_work = report.cp_work;
  const auto* roles = report.roles;
  const bool changed = mix.resumed && mix.resumed->changed;
  // A change of weights on resume: the shares of the documents read before it
  // against the weights they were drawn with, then the rest against the new.
  std::vector<double> old_target;
  if (changed) {
    const MixtureOrder& order = *mix.order;
    std::size_t piece = 0;
    while (piece + 1 < order.pieces().size() && order.begin(piece + 1) < mix.resumed->at) ++piece;
    old_target = TargetShares(order.pieces()[piece]);
  }

  if (json) {
    Json j;
    j.Begin();
    j.Key("documents").Int(source->num_documents());
    j.Key("tokens").Int(source->num_tokens());
    j.Key("files").Int(files);
    j.Key("seq_len").Int(o.seq_len);
    j.Key("batch_size").Int(o.batch_size);
    j.Key("world").Int(o.world_size);
    j.Key("workers").Int(o.num_workers);
    j.Key("algorithm").String(PackAlgorithmName(o.algorithm));
    j.Key("threads").Int(o.num_threads);
    if (file_policy) {
      j.Key("file_policy").Begin();
      j.Key("remainder").String(RemainderName(file_policy->remainder));
      j.Key("shuffle").Bool(file_policy->shuffle);
      j.Key("reason").String(file_policy->reason);
      j.Key("warning").String(file_policy->warning);
      j.End();
    }
    j.Key("equal_steps").Bool(plan.has_value());
    if (plan) {
      j.Key("mode").String(TrainModeName(o.mode));
      j.Key("steps").Int(plan->num_steps);
      j.Key("filler_rows").Int(plan->filler_rows);
      j.Key("dropped_packs").Int(plan->dropped_packs);
      j.Key("dropped_tokens").Int(plan->dropped_tokens);
      j.Key("max_step_imbalance").Double(plan->max_step_imbalance);
      j.Key("max_full_step_imbalance").Double(plan->max_full_step_imbalance);
      j.Key("mean_step_imbalance").Double(plan->mean_step_imbalance);
    }
    j.Key("ranks").BeginList();
    for (const RankLoadStats& s : stats) {
      j.Begin().Key("rank").Int(s.rank).Key("batches").Int(s.batches).Key("tokens").Int(s.tokens);
      j.Key("padding").Double(s.padding());
      j.Key("pieces").Int(s.pieces).Key("dropped").Int(s.dropped).Key("seconds").Double(s.seconds);
      j.End();
    }
    j.End();
    j.Key("batches").Int(sum.batches);
    j.Key("real_tokens").Int(sum.tokens);
    j.Key("padding").Double(sum.padding);
    j.Key("dropped").Int(sum.dropped);
    j.Key("batch_imbalance").Int(sum.batch_imbalance);
    j.Key("token_imbalance").Double(sum.token_imbalance);
    j.Key("seconds").Double(seconds);
    j.Key("tokens_per_second").Double(rate);
    j.Key("resumed").Bool(report.resumed);
    j.Key("complete").Bool(complete);
    if (mixing) {
      const MixBy by = mix.requested->options().by;
      const MixtureWindow window = mix.order->Window(o.epoch);
      const std::vector<double> target = TargetShares(mix.order->current());
      j.Key("mixture").Begin();
      j.Key("by").String(MixByName(by));
      j.Key("epoch").Int(static_cast<Index>(o.epoch));
      j.Key("first").Int(window.first).Key("count").Int(window.count);
      j.Key("changed").Bool(changed);
      if (changed) {
        j.Key("read").Int(mix.resumed->read).Key("at").Int(mix.resumed->at);
      }
      auto shares = [&](const char* key, const MixtureDelivery& d, const std::vector<double>& t) {
        const std::vector<double> r = d.Realised(by);
        j.Key(key).BeginList();
        for (std::size_t k = 0; k < mix.sources.size(); ++k) {
          j.Begin();
          j.Key("target").Double(t[k]);
          j.Key("realised").Double(k < r.size() ? r[k] : 0.0);
          j.Key("tokens").Int(k < d.tokens.size() ? d.tokens[k] : 0);
          j.Key("documents").Int(k < d.documents.size() ? d.documents[k] : 0);
          j.End();
        }
        j.End();
      };
      // "sources": everything this run delivered against the current
      // weights; with a change, also its two sides apart.
      shares("sources", mix.delivered, target);
      if (changed) {
        shares("before_change", mix.before_change, old_target);
        shares("after_change", mix.after_change, target);
      }
      j.End();
    }
    if (cp_work) {
      j.Key("cp").Begin();
      j.Key("cp_size").Int(cp_work->cp_size);
      j.Key("granularity").Int(*report.cp_granularity);
      j.Key("rows").Int(cp_work->rows).Key("tokens").Int(cp_work->tokens);
      j.Key("padding").Int(cp_work->padding);
      j.Key("balanced_padding").Int(cp_work->balanced_padding);
      j.Key("splits").Begin();
      for (const std::string_view name : CpSplitNames()) {
        const std::size_t k = static_cast<std::size_t>(ParseCpSplit(name));
        j.Key(std::string(name)).Begin();
        j.Key("mean_max_over_mean").Double(cp_work->mean_ratio[k]);
        j.Key("worst_max_over_mean").Double(cp_work->worst_ratio[k]);
        j.End();
      }
      j.End();
      j.End();
    }
    if (roles) RolesJson(j, *roles);
    j.End();
    std::cout << j.str() << "\n";
    return;
  }
  std::printf("%" PRId64 " documents, %" PRId64 " tokens in %" PRId64 " file(s); seq_len %" PRId64
              ", batch %" PRId64 ", %" PRId64 " rank(s) x %" PRId64 " worker(s), %s, %" PRId64
              " thread(s)\n",
              source->num_documents(), source->num_tokens(), files, o.seq_len, o.batch_size,
              o.world_size, o.num_workers, std::string(PackAlgorithmName(o.algorithm)).c_str(),
              o.num_threads);
  if (file_policy) {
    std::printf("files: %s (Whale, %s)\n", file_policy->reason.c_str(),
                std::string(RemainderName(file_policy->remainder)).c_str());
    if (!file_policy->warning.empty()) std::printf("warning: %s\n", file_policy->warning.c_str());
  }
  std::printf("%6s %9s %14s %9s %9s %9s\n", "rank", "batches", "tokens", "padding", "pieces",
              "seconds");
  for (const RankLoadStats& s : stats) {
    std::printf("%6" PRId64 " %9" PRId64 " %14" PRId64 " %8.2f%% %9" PRId64 " %9.3f\n", s.rank,
                s.batches, s.tokens, 100.0 * s.padding(), s.pieces, s.seconds);
  }
  std::printf("total: %" PRId64 " batches, %" PRId64
              " real tokens, padding %.2f%%, %.1f M "
              "tokens/s; batches per rank %" PRId64 "-%" PRId64,
              sum.batches, sum.tokens, 100 * sum.padding, rate / 1e6, sum.min_batches,
              sum.max_batches);
  if (sum.dropped) std::printf("; dropped %" PRId64 " document(s)", sum.dropped);
  if (report.resumed) std::printf("; resumed from %s", report.resume_path.c_str());
  if (plan) {
    std::printf("\nequal steps (%s): %" PRId64 " steps on every rank, %" PRId64
                " filler row(s) in the last step; per-step imbalance (heaviest rank / mean - 1) "
                "mean %.3f%% and max %.3f%% over full steps, %.3f%% with the last",
                std::string(TrainModeName(o.mode)).c_str(), plan->num_steps, plan->filler_rows,
                100 * plan->mean_step_imbalance, 100 * plan->max_full_step_imbalance,
                100 * plan->max_step_imbalance);
    if (plan->dropped_packs) {
      std::printf("; dropped the final partial step: %" PRId64 " rows, %" PRId64 " tokens",
                  plan->dropped_packs, plan->dropped_tokens);
    }
  }
  if (complete) std::printf("; every token delivered once");
  std::printf("\n");
  if (mixing) {
    const MixBy by = mix.requested->options().by;
    const MixtureWindow window = mix.order->Window(o.epoch);
    const std::vector<double> target = TargetShares(mix.order->current());
    std::printf("mixture of %zu sources by %s: epoch %" PRId64 " reads samples [%" PRId64
                ", %" PRId64 ")",
                mix.sources.size(), std::string(MixByName(by)).c_str(), static_cast<Index>(o.epoch),
                window.first, window.first + window.count);
    if (changed) {
      std::printf("; weights changed on resume at sample %" PRId64 " (%" PRId64
                  " documents of the window read before, kept)",
                  mix.resumed->at, mix.resumed->read);
    }
    std::printf("\n");
    auto table = [&](const MixtureDelivery& d, const std::vector<double>& t) {
      const std::vector<double> r = d.Realised(by);
      std::printf("%6s %9s %9s %14s %11s\n", "source", "target", "realised", "tokens", "documents");
      for (std::size_t k = 0; k < mix.sources.size(); ++k) {
        std::printf("%6zu %8.2f%% %8.2f%% %14" PRId64 " %11" PRId64 "\n", k, 100 * t[k],
                    100 * (k < r.size() ? r[k] : 0.0), k < d.tokens.size() ? d.tokens[k] : 0,
                    k < d.documents.size() ? d.documents[k] : 0);
      }
    };
    const char* unit = by == MixBy::kTokens ? "tokens" : "documents";
    if (changed) {
      // One table would mix the two: documents drawn with the old weights
      // (still in the packer's buffer at the state) and the new ones.
      std::printf("before the change: the documents of samples [%" PRId64 ", %" PRId64
                  ") this run delivered, drawn with the old weights\n",
                  window.first, mix.resumed->at);
      table(mix.before_change, old_target);
      std::printf("after the change: samples [%" PRId64 ", %" PRId64 "), the new weights\n",
                  mix.resumed->at, window.first + window.count);
      table(mix.after_change, target);
      std::printf(
          "(target: the weights' shares of %s on each side; realised: of what this run "
          "delivered there)\n",
          unit);
    } else {
      table(mix.delivered, target);
      std::printf(
          "(target: the current weights' shares of %s; realised: of what this run "
          "delivered)\n",
          unit);
    }
  }
  if (cp_work) {
    std::printf("context parallelism over %" PRId64 " ranks (documents padded to %" PRId64
                "): causal work of the busiest CP rank / mean, per row, over %" PRId64
                " rows (mean / worst)\n",
                cp_work->cp_size, *report.cp_granularity, cp_work->rows);
    for (const std::string_view name : CpSplitNames()) {
      const std::size_t k = static_cast<std::size_t>(ParseCpSplit(name));
      std::printf("  %-20s %.4f / %.4f\n", std::string(name).c_str(), cp_work->mean_ratio[k],
                  cp_work->worst_ratio[k]);
    }
    std::printf("  padding of the per-document split: %" PRId64 " tokens (%.3f%% of %" PRId64 ")\n",
                cp_work->padding,
                cp_work->tokens ? 100.0 * static_cast<double>(cp_work->padding) /
                                      static_cast<double>(cp_work->tokens)
                                : 0.0,
                cp_work->tokens);
    std::printf("  padding of the balanced split: %" PRId64 " tokens (%.3f%%)\n",
                cp_work->balanced_padding,
                cp_work->tokens ? 100.0 * static_cast<double>(cp_work->balanced_padding) /
                                      static_cast<double>(cp_work->tokens)
                                : 0.0);
  }
  if (roles) {
    PrintRoles(*roles);
    std::printf("(the ranks above are dp_ranks; a replica group reads its dp_rank's batches)\n");
  }
}

}  // namespace shardkit::cli
