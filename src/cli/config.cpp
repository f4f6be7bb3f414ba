// `herd config`: every knob of the registry (common/env_def.hpp, common/config_def.hpp) with
// the value this process would use and where it came from; `--markdown` writes README's table.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "common/util.hpp"
#include "common/env.hpp"

namespace herd::detail {

namespace {

/// A Markdown table cell: pipes escaped, one line.
std::string cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

}  // namespace

int config_main(const std::vector<std::string>& args) {
  CLI::App app{"herd config: every HERD_* variable, its value here and where it came from"};
  app.name("herd config");
  bool markdown = false, internal = false;
  app.add_flag("--markdown", markdown, "README's tables: the variables you set, then the ones herd sets");
  app.add_flag("--internal", internal, "also the variables herd sets for the processes it starts");
  app.footer(
      "A numeric knob a scheduler sets (heartbeats, timeouts, limits) is the one its workers and clients "
      "use: it tells them its values when they join.");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return util::usage_exit(app.exit(e));
  }
  std::vector<env::Knob> knobs;
  try {
    knobs = env::knobs();
  } catch (const std::exception& e) {  // a numeric knob that is not a number
    std::cerr << "herd config: " << e.what() << "\n";
    return 1;
  }
  if (markdown) {
    for (const bool herd_sets : {false, true}) {
      std::cout << (herd_sets ? "\nSet by herd for the processes it starts (read there; do not set them):\n\n"
                              : "")
                << "| variable | default | what it does |\n| --- | --- | --- |\n";
      for (const auto& k : knobs) {
        if (k.internal != herd_sets) continue;
        const std::string shown = k.source == "default" ? k.value : "";  // never this machine's settings
        std::cout << "| `" << k.name << (k.name.back() == '_' ? "<name>" : "") << "` | "
                  << (shown.empty() ? "" : "`" + cell(shown) + "`") << " | " << cell(k.doc) << " |\n";
      }
    }
    return 0;
  }
  for (const auto& k : knobs) {
    if (k.internal && !internal) continue;
    std::cout << k.name << (k.name.back() == '_' ? "<name>" : "") << " = "
              << (k.value.empty() ? "(unset)" : k.value) << "  [" << k.source << (k.internal ? ", set by herd" : "")
              << "]\n    " << k.doc << "\n";
  }
  return 0;
}

}  // namespace herd::detail
