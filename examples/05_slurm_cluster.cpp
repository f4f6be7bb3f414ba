// 05_slurm_cluster: workers as Slurm jobs. The scheduler runs here (a login node); scale()
// submits one job array; adapt() lets the backlog size the pool; closing the client cancels
// every job. Try it on the project's one-machine Slurm:
//
//   scripts/local-slurm.sh start && eval "$(scripts/local-slurm.sh env)"
//   build/examples/05_slurm_cluster            # partition "cpu" by default
//   scripts/local-slurm.sh stop
#include <herd/herd.hpp>

#include <cstdlib>
#include <iostream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

std::string where(int) {
  const char* job = std::getenv("SLURM_JOB_ID");
  return job != nullptr ? std::string("job ") + job : std::string("not in a Slurm job");
}
HERD_TASK(where);

long square(long x) { return x * x; }
HERD_TASK(square);

int main(int argc, char** argv) {
  herd::init(argc, argv);
  const char* partition = argc > 1 ? argv[1] : "cpu";
  herd::Client client{herd::SlurmCluster{herd::SlurmOptions{}
                                             .partition(partition)
                                             .cores(1)
                                             .memory("500M")
                                             .walltime("00:10:00")
                                             .log_directory("/tmp/herd-example-logs")}};
  std::cout << "scheduler at " << client.scheduler_address() << "\n";

  client.scale(2);  // one sbatch --array=0-1
  client.wait_for_workers(2, std::chrono::minutes(2));
  std::vector<int> xs(20);
  std::iota(xs.begin(), xs.end(), 0);
  std::set<std::string> jobs;
  for (const auto& j : client.gather(client.map(where, xs))) jobs.insert(j);
  std::cout << "20 tasks ran in " << jobs.size() << " Slurm job(s):";
  for (const auto& j : jobs) std::cout << " [" << j << "]";
  std::cout << "\n";

  client.adapt(1, 3);  // the backlog decides, between 1 and 3 workers
  std::vector<long> ys(1000);
  std::iota(ys.begin(), ys.end(), 0L);
  const auto squares = client.gather(client.map(square, ys));
  const long total = std::accumulate(squares.begin(), squares.end(), 0L);
  std::cout << "sum of squares 0..999 = " << total << "\n";
  for (const auto& p : client.pools()) {
    std::cout << "pool " << p.name << ": " << p.workers << " workers, " << p.running << " running, "
              << p.pending << " pending jobs\n";
  }
  return (total == 332833500 && jobs.size() >= 1 && jobs.count("not in a Slurm job") == 0) ? 0 : 1;
}
