#include "cli/multimodal_report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/json.h"
#include "cli/report.h"
#include "shardkit/base/hash.h"

namespace shardkit::cli {

namespace {

void Ratio(Json& j, const char* key, const StepRatios& r, bool steps) {
  j.Key(key).Begin().Key("mean").Double(r.mean).Key("max").Double(r.max);
  if (steps) j.Key("per_step").DoubleList(r.per_step);
  j.End();
}

void DealJson(Json& j, const char* key, const MultimodalDealStats& d, bool steps) {
  j.Key(key).Begin();
  j.Key("deal").String(MultimodalDealName(d.deal));
  j.Key("padding").Double(d.padding);
  Ratio(j, "tokens", d.token_ratio, steps);
  Ratio(j, "images", d.image_ratio, steps);
  Ratio(j, "vision", d.vision_ratio, steps);
  if (steps) {
    // Per step, one value per rank.
    j.Key("steps").BeginList();
    for (Index s = 0; s < d.num_steps; ++s) {
      const auto b = static_cast<std::ptrdiff_t>(s * d.world_size);
      const auto e = b + static_cast<std::ptrdiff_t>(d.world_size);
      j.Begin();
      j.Key("tokens").IntList({d.tokens.begin() + b, d.tokens.begin() + e});
      j.Key("images").IntList({d.images.begin() + b, d.images.begin() + e});
      j.Key("vision").DoubleList({d.vision.begin() + b, d.vision.begin() + e});
      j.Key("filler").Bool(d.filler[static_cast<std::size_t>(s)] != 0);
      j.End();
    }
    j.End();
  }
  j.End();
}

void DealText(const char* name, const MultimodalDealStats& d) {
  std::printf("%-22s %8.3f%% %8.3f %7.3f %8.3f %7.3f %8.3f %7.3f\n", name, 100 * d.padding,
              d.token_ratio.mean, d.token_ratio.max, d.image_ratio.mean, d.image_ratio.max,
              d.vision_ratio.mean, d.vision_ratio.max);
}

std::string Fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Ratio of a cell to its step's mean -> a CSS colour.
std::string Colour(double ratio) {
  double t = std::clamp((ratio - 1) / 0.5, -1.0, 1.0);
  int a = static_cast<int>(255 * (1 - std::abs(t)));
  char buf[16];
  if (t >= 0) {
    std::snprintf(buf, sizeof buf, "#ff%02x%02x", a, a);
  } else {
    std::snprintf(buf, sizeof buf, "#%02x%02xff", a, a);
  }
  return buf;
}

std::string Panel(const MultimodalDealStats& d, const std::string& title, double top, double width,
                  double cell_h) {
  const Index steps = std::min(d.num_steps, kMaxPicturedSteps);
  const double left = 60, cell_w = steps > 0 ? width / static_cast<double>(steps) : width;
  std::string out = "<text x=\"" + Fmt("%.0f", left) + "\" y=\"" + Fmt("%.1f", top - 6) +
                    "\" font-size=\"13\">" + Escape(title) + "</text>\n";
  for (Index r = 0; r < d.world_size; ++r) {
    const double y = top + static_cast<double>(r) * cell_h;
    if (d.world_size <= 16 || r % (d.world_size / 8) == 0) {
      out += "<text x=\"" + Fmt("%.0f", left - 4) + "\" y=\"" + Fmt("%.1f", y + cell_h * 0.8) +
             "\" font-size=\"10\" text-anchor=\"end\">rank " + std::to_string(r) + "</text>\n";
    }
  }
  for (Index s = 0; s < steps; ++s) {
    double mean = 0;
    for (Index r = 0; r < d.world_size; ++r) {
      mean += d.vision[static_cast<std::size_t>(s * d.world_size + r)];
    }
    mean /= static_cast<double>(d.world_size);
    for (Index r = 0; r < d.world_size; ++r) {
      const double v = d.vision[static_cast<std::size_t>(s * d.world_size + r)];
      const double ratio = mean > 0 ? v / mean : 1;
      out += "<rect class=\"cell\" x=\"" + Fmt("%.2f", left + static_cast<double>(s) * cell_w) +
             "\" y=\"" + Fmt("%.2f", top + static_cast<double>(r) * cell_h) + "\" width=\"" +
             Fmt("%.2f", cell_w) + "\" height=\"" + Fmt("%.2f", cell_h) + "\" fill=\"" +
             Colour(ratio) + "\"><title>step " + std::to_string(s) + ", rank " + std::to_string(r) +
             ": vision cost " + Fmt("%.6g", v) + " (" + Fmt("%.3f", ratio) +
             " x mean)</title></rect>\n";
    }
  }
  return out;
}

}  // namespace

std::string SvgVisionPerStep(const MultimodalDealStats& before, const MultimodalDealStats& after) {
  const double width = 800;
  const double cell_h =
      std::max(2.0, std::min(16.0, 200.0 / static_cast<double>(after.world_size)));
  const double panel = cell_h * static_cast<double>(after.world_size);
  const double total_h = 40 + 2 * (panel + 40) + 40;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fmt("%.0f", width + 80) +
                    "\" height=\"" + Fmt("%.0f", total_h) +
                    "\" font-family=\"sans-serif\">\n<text x=\"60\" y=\"20\" font-size=\"15\">"
                    "Vision cost per step per rank (cell / step mean)";
  if (after.num_steps > kMaxPicturedSteps) {
    out += ", first " + std::to_string(kMaxPicturedSteps) + " of " +
           std::to_string(after.num_steps) + " steps";
  }
  out += "</text>\n";
  auto title = [](const char* name, const MultimodalDealStats& d) {
    return std::string(name) + ": heaviest / mean rank " + Fmt("%.3f", d.vision_ratio.mean) +
           " on average, worst " + Fmt("%.3f", d.vision_ratio.max) + "; padding " +
           Fmt("%.2f", 100 * d.padding) + "%";
  };
  out += Panel(before, title("before (round-robin deal)", before), 60, width, cell_h);
  out += Panel(after, title("after (MultimodalPlan deal)", after), 60 + panel + 40, width, cell_h);
  // Colour scale.
  const double y = 60 + 2 * (panel + 40) - 10;
  for (int k = 0; k <= 10; ++k) {
    const double ratio = 0.5 + 0.1 * k;
    out += "<rect x=\"" + Fmt("%.0f", 60 + 30.0 * k) + "\" y=\"" + Fmt("%.0f", y) +
           "\" width=\"30\" height=\"10\" fill=\"" + Colour(ratio) + "\"/><text x=\"" +
           Fmt("%.0f", 75 + 30.0 * k) + "\" y=\"" + Fmt("%.0f", y + 22) +
           "\" font-size=\"9\" text-anchor=\"middle\">" + Fmt("%.1f", ratio) + "</text>\n";
  }
  out += "</svg>\n";
  return out;
}

void PrintMultimodalStats(const MultimodalReport& report, bool json) {
  const MultimodalPlan& plan = *report.plan;
  const MultimodalSummary& s = plan.summary();
  const MultimodalOptions& o = plan.options();
  if (json) {
    Json j;
    j.Begin();
    j.Key("source").String(report.source);
    j.Key("samples").Int(s.samples);
    j.Key("dropped").Int(s.dropped);
    std::span<const Index> dropped = plan.dropped_samples();
    j.Key("dropped_samples").IntList({dropped.begin(), dropped.end()});
    j.Key("packs").Int(s.packs);
    j.Key("tokens").Int(s.tokens);
    j.Key("images").Int(s.images);
    j.Key("world").Int(o.world_size);
    j.Key("rows_per_rank").Int(o.rows_per_rank);
    j.Key("seq_len").Int(o.seq_len);
    j.Key("vision_cost").String(VisionCostName(o.vision_cost));
    j.Key("mode").String(o.mode == MultimodalMode::kPad ? "pad" : "drop");
    j.Key("num_steps").Int(s.num_steps);
    j.Key("filler_rows").Int(s.filler_rows);
    j.Key("dropped_packs").Int(s.dropped_packs);
    j.Key("dropped_pack_samples").Int(s.dropped_samples);
    j.Key("fingerprint").String(HexDigest(plan.Fingerprint()));
    DealJson(j, "before", report.before, report.steps);
    DealJson(j, "after", report.after, report.steps);
    if (report.svg) j.Key("svg").String(*report.svg);
    j.End();
    std::cout << j.str() << "\n";
    return;
  }
  std::printf("%s: %" PRId64 " samples, %" PRId64 " dropped as oversize, %" PRId64
              " packs, %" PRId64 " tokens, %" PRId64 " images\n",
              report.source.c_str(), s.samples, s.dropped, s.packs, s.tokens, s.images);
  std::printf("%" PRId64 " ranks x %" PRId64 " rows of %" PRId64 " tokens: %" PRId64
              " steps, %" PRId64 " filler rows",
              o.world_size, o.rows_per_rank, o.seq_len, s.num_steps, s.filler_rows);
  if (o.mode == MultimodalMode::kDrop) {
    std::printf(", %" PRId64 " packs (%" PRId64 " samples) dropped", s.dropped_packs,
                s.dropped_samples);
  }
  std::printf("; vision cost %s\n", std::string(VisionCostName(o.vision_cost)).c_str());
  std::printf("heaviest rank / mean rank per step (mean, worst; steps without filler rows):\n");
  std::printf("%-22s %9s %8s %7s %8s %7s %8s %7s\n", "deal", "padding", "tokens", "worst", "images",
              "worst", "vision", "worst");
  DealText("before (round_robin)", report.before);
  DealText("after (plan)", report.after);
  if (report.steps) {
    for (const MultimodalDealStats* d : {&report.before, &report.after}) {
      std::printf("%s, vision cost per rank:\n", std::string(MultimodalDealName(d->deal)).c_str());
      for (Index st = 0; st < d->num_steps; ++st) {
        std::printf("  step %" PRId64 ":", st);
        for (Index r = 0; r < d->world_size; ++r) {
          std::printf(" %.6g", d->vision[static_cast<std::size_t>(st * d->world_size + r)]);
        }
        std::printf("  (%.3f%s)\n", d->vision_ratio.per_step[static_cast<std::size_t>(st)],
                    d->filler[static_cast<std::size_t>(st)] ? ", filler" : "");
      }
    }
  }
  if (report.svg) std::printf("picture: %s\n", report.svg->c_str());
}

}  // namespace shardkit::cli
