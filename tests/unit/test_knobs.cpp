// The one registry of HERD_* variables (common/env_def.hpp, common/config_def.hpp), held to the
// sources and to the README: nothing in src/ calls getenv but common/env.cpp; every HERD_* name
// a string in src/ mentions is registered (or is a build option); every registered variable has
// a row in README's tables and every row names a registered one; env::get refuses an
// unregistered HERD_* name at run time.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "common/config.hpp"
#include "common/env.hpp"

using namespace herd;

namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The sources of src/, by path relative to the project.
std::vector<std::filesystem::path> sources() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::filesystem::path(HERD_SOURCE_DIR) / "src")) {
    const auto ext = e.path().extension();
    if (ext == ".cpp" || ext == ".hpp" || ext == ".cu") out.push_back(e.path());
  }
  REQUIRE(out.size() > 100);
  return out;
}

/// `text` without // comments (string literals kept), line by line.
std::string without_comments(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    bool in_string = false;
    std::size_t cut = std::string::npos;
    for (std::size_t i = 0; i + 1 < line.size(); ++i) {
      if (line[i] == '"' && (i == 0 || line[i - 1] != '\\')) in_string = !in_string;
      if (!in_string && line[i] == '/' && line[i + 1] == '/') {
        cut = i;
        break;
      }
    }
    out += line.substr(0, cut) + "\n";
  }
  return out;
}

// Names of build options and macros that appear in herd's messages, not environment variables.
const std::set<std::string> kNotVariables = {"HERD_WITH_CUDA", "HERD_WITH_NCCL", "HERD_PGO", "HERD_WERROR",
                                             "HERD_TASK", "HERD_TASK_NAMED", "HERD_VERSION"};

}  // namespace

TEST_CASE("Knobs.Sources.OnlyTheRegistryCallsGetenv") {
  const std::regex call(R"((^|[^A-Za-z0-9_])(std::|::)?(secure_)?getenv\s*\()");
  std::vector<std::string> offenders;
  for (const auto& path : sources()) {
    if (path.filename() == "env.cpp" && path.parent_path().filename() == "common") continue;
    const std::string code = without_comments(read(path));
    if (std::regex_search(code, call)) offenders.push_back(path.string());
  }
  std::string list;
  for (const auto& o : offenders) list += "\n  " + o;
  INFO("files that read the environment outside src/common/env.cpp:" << list);
  CHECK(offenders.empty());
}

TEST_CASE("Knobs.Sources.EveryHerdNameInAStringIsRegistered") {
  const std::regex literal(R"("([^"\\]|\\.)*")");
  const std::regex name(R"(HERD_[A-Z0-9_]*[A-Z0-9_])");
  std::set<std::string> unregistered;
  std::size_t seen = 0;
  for (const auto& path : sources()) {
    const std::string code = without_comments(read(path));
    for (auto it = std::sregex_iterator(code.begin(), code.end(), literal); it != std::sregex_iterator(); ++it) {
      const std::string s = it->str();
      for (auto n = std::sregex_iterator(s.begin(), s.end(), name); n != std::sregex_iterator(); ++n) {
        ++seen;
        const std::string v = n->str();
        if (!env::registered(v) && kNotVariables.count(v) == 0) unregistered.insert(v + " (" + path.filename().string() + ")");
      }
    }
  }
  CHECK(seen > 20);
  std::string list;
  for (const auto& u : unregistered) list += "\n  " + u;
  INFO("HERD_* names in strings that are not registered:" << list);
  CHECK(unregistered.empty());
}

TEST_CASE("Knobs.Readme.TheTablesListEveryVariableAndOnlyThem") {
  const std::string readme = read(std::filesystem::path(HERD_SOURCE_DIR) / "README.md");
  std::set<std::string> rows;
  const std::regex row(R"(\n\| `(HERD_[A-Z0-9_]+)(<name>)?` \|)");
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), row); it != std::sregex_iterator(); ++it) {
    rows.insert((*it)[1].str());
  }
  std::set<std::string> registry;
  for (const auto& k : env::knobs()) registry.insert(k.name);
  REQUIRE(registry.size() > 40);
  for (const auto& r : registry) {
    CAPTURE(r);
    CHECK(rows.count(r) == 1);  // missing from README: `herd config --markdown` writes the rows
  }
  for (const auto& r : rows) {
    CAPTURE(r);
    CHECK(registry.count(r) == 1);  // a row for a variable herd does not read
  }
}

TEST_CASE("Knobs.Get.RefusesAnUnregisteredHerdNameAndPassesOthers") {
  CHECK_THROWS_WITH_AS(env::get("HERD_NO_SUCH_KNOB"), doctest::Contains("not in its registry"), std::logic_error);
  CHECK_NOTHROW(env::get("PATH"));
  CHECK_NOTHROW(env::get("HERD_TIMEOUT_MS"));
  CHECK(env::registered("HERD_PARAM_lr"));  // a prefix's variable
  CHECK(std::string(env::name(env::Var::auth)) == "HERD_AUTH");
  bool auth = false, timeout = false;
  for (const auto& k : env::knobs()) {
    auth = auth || (k.name == "HERD_AUTH" && !k.internal && !k.numeric);
    timeout = timeout || (k.name == "HERD_TIMEOUT_MS" && k.numeric && k.value == std::to_string(herd::Config{}.timeout_ms));
  }
  CHECK(auth);
  CHECK(timeout);
}
