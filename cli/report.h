// The HTML report of `shardkit demo`: one self-contained page (inline SVG, no
// scripts, no external resources) built from sections.
#ifndef SHARDKIT_CLI_REPORT_H_
#define SHARDKIT_CLI_REPORT_H_

#include <string>
#include <vector>

namespace shardkit::cli {

struct Series {
  std::string name;
  std::vector<double> values;
  std::string color;  // CSS colour
};

// Grouped vertical bars: one group per category, one bar per series; an
// optional dashed horizontal reference line (e.g. a lower bound).
[[nodiscard]] std::string SvgBars(const std::string& title,
                                  const std::vector<std::string>& categories,
                                  const std::vector<Series>& series, double reference = -1,
                                  const std::string& reference_label = "");

// Stacked horizontal bars: one row per label, segments left to right.
[[nodiscard]] std::string SvgStacked(const std::string& title,
                                     const std::vector<std::string>& labels,
                                     const std::vector<Series>& segments);

// An HTML table; the first row is the header.
[[nodiscard]] std::string HtmlTable(const std::vector<std::vector<std::string>>& rows);

[[nodiscard]] std::string Escape(const std::string& text);

class HtmlReport {
 public:
  explicit HtmlReport(std::string title) : title_(std::move(title)) {}
  // `html` is trusted markup produced by the functions above.
  void AddSection(const std::string& heading, const std::string& html);
  // Writes the page; throws std::runtime_error naming the path on failure.
  void Write(const std::string& path) const;

 private:
  std::string title_;
  std::vector<std::pair<std::string, std::string>> sections_;
};

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_REPORT_H_
