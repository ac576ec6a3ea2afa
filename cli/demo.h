// `shardkit demo`: a tour of the library on the embedded data set. Each area
// contributes one section function (demo_<area>.cc) that prints a readable
// summary to stdout and adds its pictures to the HTML report.
#ifndef SHARDKIT_CLI_DEMO_H_
#define SHARDKIT_CLI_DEMO_H_

#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/json.h"
#include "cli/report.h"
#include "shardkit/base/errors.h"

namespace shardkit::cli {

// One module of the Python standard library: its path and its length in
// tokens (Python's tokenize) and bytes. See data/python_stdlib.tsv and
// tools/derive_stdlib_lengths.py.
struct Document {
  std::string path;
  Index tokens = 0;
  Index bytes = 0;
};

// The embedded data set, parsed once.
const std::vector<Document>& StdlibDocuments();
// Its header line: which Python version, how many documents.
const std::string& StdlibDescription();

struct DemoContext {
  const std::vector<Document>& documents;
  std::vector<double> tokens;  // tokens[i] of documents[i], as weights
  std::ostream& out;           // the readable summary (discarded with --json)
  Json& json;                  // each section adds one key with its figures
};

// `v` with `digits` digits after the point ("12.35").
inline std::string Fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// A share as a percentage with `digits` digits after the point ("12.35%").
inline std::string Percent(double share, int digits = 2) {
  return Fixed(100 * share, digits) + "%";
}

void DemoSharding(const DemoContext& context, HtmlReport& report);
void DemoMixture(const DemoContext& context, HtmlReport& report);
void DemoPacking(const DemoContext& context, HtmlReport& report);
void DemoEval(const DemoContext& context, HtmlReport& report);
void DemoLoader(const DemoContext& context, HtmlReport& report);
void DemoLayout(const DemoContext& context, HtmlReport& report);
void DemoContextParallel(const DemoContext& context, HtmlReport& report);
void DemoMultimodal(const DemoContext& context, HtmlReport& report);

}  // namespace shardkit::cli

#endif  // SHARDKIT_CLI_DEMO_H_
