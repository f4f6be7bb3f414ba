// 06_sweep_shell: a hyperparameter sweep over an existing program. Each trial runs
// 06_sweep_train.sh (gradient descent on a line fit, printing `herd-metric loss=...` after each
// epoch) on a worker; the sweep reads the metrics, writes every trial to a CSV and a JSON-lines
// file as it finishes, and prints a table of the best.
//
//   grid epochs = {20, 60}  x  6 log-uniform draws of lr in [1e-3, 0.5]   ->  12 trials
//
// The same from the command line:
//   herd sweep --grid epochs=20,60 --random lr=loguniform:1e-3:0.5 --samples 6 --seed 1
//              --metric loss -- sh examples/06_sweep_train.sh {lr} {epochs}
#include <herd/herd.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  herd::init(argc, argv);
  // The training script beside this file (examples/CMakeLists.txt says where that is).
  const std::string script = (fs::path(HERD_EXAMPLES_DIR) / "06_sweep_train.sh").string();
  const std::string results = "/tmp/herd-example-06-" + std::to_string(::getpid()) + "/sweep";
  herd::Client client{herd::LocalCluster{2}};

  const auto space = herd::SearchSpace{}.grid("epochs", {"20", "60"}).log_uniform("lr", 1e-3, 0.5).samples(6).seed(1);
  auto sweep = herd::Sweep{space}
                   .command({"sh", script, "{lr}", "{epochs}"})  // an argv: no shell, no quoting
                   .minimize("loss")
                   .max_running(2)
                   .timeout(60)
                   .results(results)
                   .top(5);
  const herd::SweepReport report = sweep.run(client);

  // Run again with the same results file: every trial is found there, nothing runs.
  const herd::SweepReport again = sweep.progress(herd::Progress::none).run(client);

  bool ok = report.trials.size() == 12 && report.ok == 12 && again.runs == 0 && again.resumed == 12;
  const herd::TrialResult* best = report.best();
  ok = ok && best != nullptr && best->metrics.at("loss") < 1e-3 && best->params.at("epochs") == "60" &&
       best->history.at("loss").size() == 60;
  std::size_t rows = 0;
  std::ifstream csv(results + ".csv");
  for (std::string line; std::getline(csv, line);) ++rows;
  ok = ok && rows == 13;  // a header and a row per trial
  fs::remove_all(fs::path(results).parent_path());
  if (!ok) std::cerr << "06_sweep_shell: unexpected result\n";
  return ok ? 0 : 1;
}
