// `herd logs [NAME] [-n LINES]`: a worker's recent log, a batch job's output file(s) or a
// task's captured output, from a running scheduler (found as `herd status` finds it). No
// NAME: every worker's log.
#include <iostream>

#include "cli/commands.hpp"
#include "cli/connect.hpp"
#include "herd/client.hpp"
#include "herd/error.hpp"

namespace herd::detail {

int logs_main(const std::vector<std::string>& args) {
  CLI::App app{"herd logs: a worker's log, a job's output file or a task's output"};
  app.name("herd logs");
  SchedulerArgs scheduler(app);
  std::string name;
  int lines = 100;
  bool worker = false, task = false, job = false;
  app.add_option("name", name,
                 "worker name, batch job id or task key (default: every worker); a name is tried as "
                 "a worker, then a job, then a task");
  app.add_option("-n,--lines", lines, "newest lines to show per source")->check(CLI::NonNegativeNumber)->capture_default_str();
  auto* w = app.add_flag("--worker", worker, "NAME is a worker: its in-memory log");
  auto* j = app.add_flag("--job", job, "NAME is a batch job id: its output file(s)");
  auto* t = app.add_flag("--task", task, "NAME is a task key: what it printed");
  w->excludes(j, t);
  j->excludes(t);
  if (const int rc = scheduler.parse(app, args); rc >= 0) return rc;
  if (name.empty() && (job || task)) {
    std::cerr << "herd logs: --job and --task need a NAME\n";
    return 2;
  }
  try {
    Client client = scheduler.connect("herd-logs");
    std::vector<Logs> sources;
    if (task) {
      sources.push_back(client.task_output(name, lines));
    } else if (worker || name.empty()) {
      sources = client.worker_logs(name, lines);
    } else if (job) {
      for (auto& s : client.logs(name, lines)) {
        if (s.kind == "job") sources.push_back(std::move(s));
      }
      if (sources.empty()) throw LogsNotFound("'" + name + "' is not a job of any pool (it is a worker or a task)");
    } else {
      sources = client.logs(name, lines);
    }
    for (std::size_t i = 0; i < sources.size(); ++i) std::cout << (i > 0 ? "\n" : "") << sources[i].to_text();
    std::cout << std::flush;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "herd logs: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace herd::detail
