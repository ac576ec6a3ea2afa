// shardkit demo: the main job, a tour on the embedded data set.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/demo.h"

namespace shardkit::cli {

int RunDemo(const Argv& argv) {
  Args args("demo",
            "A tour of shardkit on an embedded data set (the token lengths of the\n"
            "Python standard library's modules, no download). Prints a summary and\n"
            "writes a self-contained HTML report with pictures.");
  args.Flag("out", "PATH", "where to write the HTML report (default shardkit-demo.html)")
      .Flag("json", "", "print one JSON object with the figures instead of the summary");
  if (!args.Parse(argv)) return 0;
  const std::string path = args.Str("out", "shardkit-demo.html");
  const bool json = args.Has("json");

  const auto& documents = StdlibDocuments();
  std::ostringstream discard;
  Json figures;
  figures.Begin();
  DemoContext context{
      documents, {}, json ? static_cast<std::ostream&>(discard) : std::cout, figures};
  Index total = 0;
  for (const auto& d : documents) {
    context.tokens.push_back(static_cast<double>(d.tokens));
    total += d.tokens;
  }
  context.out << "shardkit demo on " << StdlibDescription() << "\n"
              << documents.size() << " documents, " << total << " tokens\n\n";
  figures.Key("data")
      .Begin()
      .Key("documents")
      .Int(static_cast<Index>(documents.size()))
      .Key("tokens")
      .Int(total)
      .End();

  HtmlReport report("shardkit demo");
  report.AddSection("The data set",
                    "<p>" + Escape(StdlibDescription()) +
                        " Every module is one document; its weight is its length in "
                        "tokens. Only the lengths ship with shardkit "
                        "(data/python_stdlib.tsv), derived by "
                        "tools/derive_stdlib_lengths.py.</p>");
  DemoSharding(context, report);
  DemoMixture(context, report);
  DemoPacking(context, report);
  DemoEval(context, report);
  DemoLoader(context, report);
  DemoContextParallel(context, report);
  DemoMultimodal(context, report);
  DemoLayout(context, report);

  std::filesystem::path out_path(path);
  if (out_path.has_parent_path()) std::filesystem::create_directories(out_path.parent_path());
  report.Write(path);
  figures.Key("report").String(path);
  figures.End();
  if (json) {
    std::cout << figures.str() << "\n";
  } else {
    std::cout << "\nreport: " << path << " (open it in a browser)\n";
  }
  return 0;
}

}  // namespace shardkit::cli
