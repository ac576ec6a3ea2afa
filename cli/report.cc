#include "cli/report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "shardkit/base/atomic_file.h"

namespace shardkit::cli {

namespace {
std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}
std::string Short(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1fM", v / 1e6);
  } else if (v >= 1e4) {
    std::snprintf(buf, sizeof buf, "%.0fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

// The step of an axis's ticks: 1, 2, 2.5 or 5 times a power of ten, the
// smallest with at most 5 steps up to `max_value` (> 0).
double TickStep(double max_value) {
  const double power = std::pow(10.0, std::floor(std::log10(max_value / 5)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (max_value <= 5 * m * power) return m * power;
  }
  return 10 * power;
}

// One coloured square and name per series along the bottom edge.
std::string Legend(const std::vector<Series>& series, double left, double height);
}  // namespace

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {
std::string Legend(const std::vector<Series>& series, double left, double height) {
  std::string svg;
  double x = left;
  for (const auto& s : series) {
    svg += "<rect x='" + Num(x) + "' y='" + Num(height - 16) + "' width='10' height='10' fill='" +
           s.color + "'/>";
    svg +=
        "<text x='" + Num(x + 14) + "' y='" + Num(height - 7) + "'>" + Escape(s.name) + "</text>";
    x += 24 + 7 * s.name.size();
  }
  return svg;
}
}  // namespace

std::string SvgBars(const std::string& title, const std::vector<std::string>& categories,
                    const std::vector<Series>& series, double reference,
                    const std::string& reference_label) {
  const double width = 760, height = 300, left = 60, right = 20, top = 40, bottom = 50;
  double max_value = std::max(reference, 0.0);
  for (const auto& s : series) {
    for (double v : s.values) max_value = std::max(max_value, v);
  }
  if (max_value <= 0) max_value = 1;
  // The axis ends at a whole number of round steps, so every tick reads
  // exactly (3, 6, 9, not 2.99, 5.981, 8.971).
  const double step = TickStep(max_value);
  const int ticks = static_cast<int>(std::ceil(max_value / step - 1e-9));
  max_value = step * ticks;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const double group_w = plot_w / std::max<size_t>(1, categories.size());
  const double bar_w = group_w * 0.8 / std::max<size_t>(1, series.size());
  auto y = [&](double v) { return top + plot_h * (1 - v / max_value); };
  std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + Num(width) + "' height='" +
                    Num(height) + "' font-family='sans-serif' font-size='11'>";
  svg += "<text x='" + Num(left) + "' y='18' font-size='14' font-weight='bold'>" + Escape(title) +
         "</text>";
  for (int t = 0; t <= ticks; ++t) {
    double v = step * t;
    svg += "<line x1='" + Num(left) + "' x2='" + Num(width - right) + "' y1='" + Num(y(v)) +
           "' y2='" + Num(y(v)) + "' stroke='#ddd'/>";
    svg += "<text x='" + Num(left - 4) + "' y='" + Num(y(v) + 4) + "' text-anchor='end'>" +
           Short(v) + "</text>";
  }
  for (size_t c = 0; c < categories.size(); ++c) {
    double gx = left + c * group_w + group_w * 0.1;
    for (size_t s = 0; s < series.size(); ++s) {
      double v = c < series[s].values.size() ? series[s].values[c] : 0;
      svg += "<rect x='" + Num(gx + s * bar_w) + "' y='" + Num(y(v)) + "' width='" +
             Num(std::max(1.0, bar_w - 1)) + "' height='" + Num(top + plot_h - y(v)) + "' fill='" +
             series[s].color + "'><title>" + Escape(series[s].name) + " " + Escape(categories[c]) +
             ": " + Short(v) + "</title></rect>";
    }
    svg += "<text x='" + Num(left + c * group_w + group_w / 2) + "' y='" + Num(top + plot_h + 14) +
           "' text-anchor='middle'>" + Escape(categories[c]) + "</text>";
  }
  if (reference >= 0) {
    svg += "<line x1='" + Num(left) + "' x2='" + Num(width - right) + "' y1='" + Num(y(reference)) +
           "' y2='" + Num(y(reference)) + "' stroke='black' stroke-dasharray='5,3'/>";
    svg += "<text x='" + Num(width - right) + "' y='" + Num(y(reference) - 4) +
           "' text-anchor='end'>" + Escape(reference_label) + "</text>";
  }
  return svg + Legend(series, left, height) + "</svg>";
}

std::string SvgStacked(const std::string& title, const std::vector<std::string>& labels,
                       const std::vector<Series>& segments) {
  const double width = 760, row_h = 14, left = 110, top = 30;
  const double height = top + row_h * labels.size() + 30;
  double max_total = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    double total = 0;
    for (const auto& s : segments) total += r < s.values.size() ? s.values[r] : 0;
    max_total = std::max(max_total, total);
  }
  if (max_total <= 0) max_total = 1;
  const double plot_w = width - left - 20;
  std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='" + Num(width) + "' height='" +
                    Num(height) + "' font-family='sans-serif' font-size='10'>";
  svg += "<text x='" + Num(left) + "' y='16' font-size='14' font-weight='bold'>" + Escape(title) +
         "</text>";
  for (size_t r = 0; r < labels.size(); ++r) {
    double x = left, ry = top + r * row_h;
    svg += "<text x='" + Num(left - 4) + "' y='" + Num(ry + row_h - 4) + "' text-anchor='end'>" +
           Escape(labels[r]) + "</text>";
    for (const auto& s : segments) {
      double v = r < s.values.size() ? s.values[r] : 0;
      double w = plot_w * v / max_total;
      svg += "<rect x='" + Num(x) + "' y='" + Num(ry) + "' width='" + Num(w) + "' height='" +
             Num(row_h - 2) + "' fill='" + s.color + "'><title>" + Escape(s.name) + ": " +
             Short(v) + "</title></rect>";
      x += w;
    }
  }
  return svg + Legend(segments, left, height) + "</svg>";
}

std::string HtmlTable(const std::vector<std::vector<std::string>>& rows) {
  std::string html = "<table>";
  for (size_t r = 0; r < rows.size(); ++r) {
    html += "<tr>";
    for (const auto& cell : rows[r]) {
      html += (r == 0 ? "<th>" : "<td>") + Escape(cell) + (r == 0 ? "</th>" : "</td>");
    }
    html += "</tr>";
  }
  return html + "</table>";
}

void HtmlReport::AddSection(const std::string& heading, const std::string& html) {
  sections_.emplace_back(heading, html);
}

void HtmlReport::Write(const std::string& path) const {
  std::ostringstream out;
  out << "<!doctype html><html><head><meta charset='utf-8'><title>" << Escape(title_)
      << "</title><style>body{font-family:sans-serif;max-width:820px;margin:2em auto;"
         "color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid "
         "#ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}section{margin:2em "
         "0}p{line-height:1.4}</style></head><body><h1>"
      << Escape(title_) << "</h1>";
  for (const auto& [heading, html] : sections_) {
    out << "<section><h2>" << Escape(heading) << "</h2>" << html << "</section>";
  }
  out << "</body></html>\n";
  // Written whole and renamed (a full disk fails before the rename and leaves
  // the previous report), never reported as success when it did not land.
  WriteFileAtomically(path, out.str(), "--out");
}

}  // namespace shardkit::cli
