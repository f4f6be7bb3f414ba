// `herd jobscript`: the batch script each pool of a configuration file would submit.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands.hpp"
#include "common/util.hpp"
#include "common/process.hpp"
#include "herd/slurm.hpp"
#include "jobqueue/pool_config.hpp"

namespace herd::detail {

int jobscript_main(const std::vector<std::string>& args) {
  CLI::App app{"herd jobscript: print the script the pools of a configuration submit"};
  app.name("herd jobscript");
  std::string config_path, pool, address = "tcp://SCHEDULER:PORT";
  app.add_option("--config", config_path, "TOML configuration (as for herd scheduler)")->required()->check(CLI::ExistingFile);
  app.add_option("--pool", pool, "only this pool");
  app.add_option("--scheduler", address, "scheduler address to put in the script")->capture_default_str();
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
    const auto config = jobqueue::load_config(config_path);
    bool any = false;
    for (const auto& p : config.pools) {
      if (p.kind != "slurm" || (!pool.empty() && p.options.pool() != pool)) continue;
      if (any) std::cout << "\n";
      std::cout << herd::job_script(p.options, address);
      any = true;
    }
    if (!any) {
      std::cerr << "herd jobscript: " << (pool.empty() ? "no slurm pool in " + config_path : "no slurm pool named '" + pool + "'") << "\n";
      return 1;
    }
    return 0;
  } catch (const CLI::ParseError& e) {
    return util::usage_exit(app.exit(e));
  } catch (const std::exception& e) {
    std::cerr << "herd jobscript: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace herd::detail
