// 07_sweep_function: a sweep over a C++ training function, with early stopping.
//
// `train` fits a logistic regression by gradient descent; it is registered with HERD_TASK, takes
// its parameters as herd::Params and returns herd::Metrics. Successive halving runs all 18
// trials for 5 epochs, the best third of them for 15, and the best third of those for 45: poor
// learning rates are stopped early and the budget goes to the promising ones.
//
//   18 trials @ 5 epochs  ->  6 @ 15  ->  2 @ 45
#include <herd/herd.hpp>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

namespace {

struct Sample {
  double x1, x2;
  int label;
};

/// 200 points in two overlapping clouds, the same in every process (a fixed generator).
std::vector<Sample> dataset() {
  std::vector<Sample> data;
  std::uint64_t s = 12345;
  auto next = [&s] {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) * 0x1.0p-53;
  };
  for (int i = 0; i < 200; ++i) {
    const int label = i % 2;
    const double cx = label ? 1.0 : -1.0;
    data.push_back({cx + (next() - 0.5) * 2.4, cx * 0.5 + (next() - 0.5) * 2.4, label});
  }
  return data;
}

}  // namespace

herd::Metrics train(herd::Params p) {
  const double lr = herd::param<double>(p, "lr");
  const double l2 = herd::param<double>(p, "l2");
  const int epochs = herd::param<int>(p, "epochs");  // the budget, set by early stopping
  static const std::vector<Sample> data = dataset();
  double w1 = 0, w2 = 0, b = 0, loss = 0, correct = 0;
  for (int e = 0; e < epochs; ++e) {
    double g1 = 0, g2 = 0, gb = 0;
    loss = 0;
    correct = 0;
    for (const Sample& d : data) {
      const double z = w1 * d.x1 + w2 * d.x2 + b;
      const double prob = 1 / (1 + std::exp(-z));
      loss -= d.label ? std::log(prob + 1e-12) : std::log(1 - prob + 1e-12);
      correct += (prob > 0.5) == (d.label == 1);
      g1 += (prob - d.label) * d.x1;
      g2 += (prob - d.label) * d.x2;
      gb += prob - d.label;
    }
    const double n = static_cast<double>(data.size());
    loss = loss / n + l2 * (w1 * w1 + w2 * w2);
    w1 -= lr * (g1 / n + 2 * l2 * w1);
    w2 -= lr * (g2 / n + 2 * l2 * w2);
    b -= lr * gb / n;
    herd::report_metric("loss", loss);  // the history of the run
  }
  return {{"loss", loss}, {"accuracy", correct / static_cast<double>(data.size())}};
}
HERD_TASK(train);

int main(int argc, char** argv) {
  herd::init(argc, argv);
  herd::Client client{herd::LocalCluster{2}};
  const auto space = herd::SearchSpace{}.grid("l2", {0.0, 0.01}).log_uniform("lr", 1e-3, 3).samples(9).seed(4);
  const herd::SweepReport report =
      herd::Sweep{space}
          .function(train)
          .minimize("loss")
          .early_stopping(herd::SuccessiveHalving{}.parameter("epochs").budgets(5, 45).eta(3))
          .top(5)
          .run(client);  // no results(): kept in memory only

  const herd::TrialResult* best = report.best();
  bool ok = report.trials.size() == 18 && report.ok == 2 && report.stopped == 16 && report.runs == 18 + 6 + 2;
  ok = ok && best != nullptr && best->budget == "45" && best->metrics.at("accuracy") > 0.8 &&
       best->history.at("loss").size() == 45;
  for (const auto& t : report.trials) {
    ok = ok && (t.status == herd::TrialStatus::ok ? t.budget == "45" : t.status == herd::TrialStatus::stopped);
  }
  if (!ok) std::cerr << "07_sweep_function: unexpected result\n";
  return ok ? 0 : 1;
}
