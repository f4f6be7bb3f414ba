// The run record's cost and its reports' (bench/README.md, "The run record"):
//   herd_bench record --tasks 100000 --repeat 5   map+gather on two local clusters side by side,
//                                                 one recording (HERD_RECORD=1), one not, their
//                                                 rounds interleaved: the recording's cost
//   herd_bench report --runs 1000000              a record of that many synthetic task runs
//                                                 (8 functions, 64 workers, a few pool events,
//                                                 samples): how long writing, reading and building
//                                                 the HTML report and the trace take, their sizes
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <herd/herd.hpp>

#include "record/record.hpp"
#include "record/report.hpp"

int noop(int x);  // herd_bench.cpp's task

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void emit(const std::string& bench, const std::vector<std::pair<std::string, double>>& fields, const std::string& extra = "") {
  std::ostringstream out;
  out << "{\"system\":\"herd\",\"bench\":\"" << bench << "\"";
  for (const auto& [k, v] : fields) out << ",\"" << k << "\":" << v;
  out << extra << "}";
  std::printf("%s\n", out.str().c_str());
  std::fflush(stdout);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

void record_cost_bench(int tasks, int workers, int repeat) {
  const std::string dir = "/tmp/herd-bench-record-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  herd::LocalCluster on{workers, 1}, off{workers, 1};
  on.env("HERD_RECORD", "1").env("HERD_RECORD_FILE", dir + "/on.record");
  off.env("HERD_RECORD", "0");
  herd::Client with{std::move(on)}, without{std::move(off)};
  std::vector<int> xs(static_cast<std::size_t>(tasks));
  std::iota(xs.begin(), xs.end(), 0);
  for (herd::Client* c : {&with, &without}) c->gather(c->map(noop, std::vector<int>(1000, 1)));  // warm-up
  std::vector<double> s_on, s_off;
  for (int r = 0; r < repeat; ++r) {
    // Alternating which goes first, so that neither always runs on a warmer machine.
    for (int k = 0; k < 2; ++k) {
      const bool recording = (r + k) % 2 == 0;
      herd::Client& c = recording ? with : without;
      const auto t0 = Clock::now();
      auto out = c.gather(c.map(noop, xs));
      const double s = seconds_since(t0);
      if (out.back() != tasks - 1) throw std::runtime_error("wrong result");
      (recording ? s_on : s_off).push_back(s);
      emit("record_map_gather", {{"workers", workers}, {"tasks", tasks}, {"seconds", s}, {"tasks_per_s", tasks / s}},
           std::string(",\"record\":") + (recording ? "true" : "false"));
    }
  }
  const double m_on = median(s_on), m_off = median(s_off);
  emit("record_cost", {{"workers", workers}, {"tasks", tasks}, {"rounds", repeat}, {"median_on_s", m_on},
                       {"median_off_s", m_off}, {"cost_percent", m_off > 0 ? 100.0 * (m_on - m_off) / m_off : 0},
                       {"record_bytes", static_cast<double>(std::filesystem::exists(dir + "/on.record")
                                                                ? std::filesystem::file_size(dir + "/on.record")
                                                                : 0)}});
  with.close();
  without.close();
  std::filesystem::remove_all(dir);
}

void report_bench(long runs) {
  const std::string dir = "/tmp/herd-bench-report-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/synthetic.record";
  std::mt19937_64 rng(42);
  const std::vector<std::string> functions = {"load", "parse", "features", "train_fold", "score", "merge", "plot", "save"};
  constexpr int kWorkers = 64, kThreads = 4;
  auto t0 = Clock::now();
  {
    herd::record::Recorder rec({path, 1ull << 40});
    herd::record::Encoder& enc = rec.encoder();
    const std::int64_t start = 1'700'000'000'000'000;
    std::vector<std::int64_t> free_at(kWorkers * kThreads, start);
    for (int w = 0; w < kWorkers; ++w) {
      herd::record::WorkerEvent e;
      e.time_us = start;
      e.worker = "node" + std::to_string(w / 4) + "-" + std::to_string(w % 4);
      e.host = "node" + std::to_string(w / 4);
      e.pool = "cpu";
      e.job = "1000_" + std::to_string(w / 4);
      e.nthreads = kThreads;
      enc.worker_event(e);
    }
    herd::record::TaskRun r;
    for (long i = 0; i < runs; ++i) {
      const std::size_t slot = static_cast<std::size_t>(i % (kWorkers * kThreads));
      r.task = static_cast<std::uint64_t>(i) | (1ull << 40);
      r.function = functions[static_cast<std::size_t>(i % 8)];
      r.worker = "node" + std::to_string(slot / kThreads / 4) + "-" + std::to_string(slot / kThreads % 4);
      r.thread = static_cast<std::uint32_t>(slot % kThreads + 1);
      r.submitted_us = start + i * 20;
      r.ready_us = r.submitted_us + 50;
      r.placed_us = std::max(r.ready_us, free_at[slot]) + 30;
      r.start_us = r.placed_us + 200;
      r.end_us = r.start_us + 1000 + static_cast<std::int64_t>(rng() % 20000);
      r.received_us = r.end_us + 300;
      free_at[slot] = r.received_us;
      r.fetch_us = i % 3 ? 0 : 150;
      r.fetch_bytes = i % 3 ? 0 : 65536;
      r.fetch_peers = i % 3 ? 0 : 1;
      r.result_bytes = 128;
      r.status = i % 997 == 0 ? herd::record::RunStatus::failed : herd::record::RunStatus::ok;
      r.attempt = 0;
      r.error_type = r.status == herd::record::RunStatus::ok ? "" : "std::runtime_error";
      r.error = r.status == herd::record::RunStatus::ok ? "" : "synthetic failure " + std::to_string(i);
      enc.task_run(r);
      if (i % 5000 == 4999) {
        herd::record::WorkerSample s;
        for (int w = 0; w < kWorkers; ++w) {
          s.time_us = r.received_us;
          s.worker = "node" + std::to_string(w / 4) + "-" + std::to_string(w % 4);
          s.cpu = static_cast<double>(rng() % 400);
          s.memory = (1ull << 30) + rng() % (1ull << 30);
          s.nthreads = kThreads;
          s.executing = kThreads;
          enc.worker_sample(s);
        }
        rec.end_turn();
      }
    }
    herd::record::PoolEvent pe;
    pe.time_us = start;
    pe.pool = "cpu";
    pe.what = herd::record::PoolEvent::What::scaled;
    pe.target = 16;
    enc.pool_event(pe);
  }
  const double write_s = seconds_since(t0);
  const double record_bytes = static_cast<double>(std::filesystem::file_size(path));
  t0 = Clock::now();
  const herd::record::Contents c = herd::record::read_files(path);
  const double read_s = seconds_since(t0);
  t0 = Clock::now();
  const std::string html = herd::record::html_report(c);
  const double html_s = seconds_since(t0);
  t0 = Clock::now();
  const std::string trace = herd::record::trace_report(c);
  const double trace_s = seconds_since(t0);
  emit("record_report", {{"runs", static_cast<double>(runs)}, {"record_bytes", record_bytes},
                         {"record_bytes_per_run", record_bytes / static_cast<double>(std::max(1L, runs))},
                         {"write_s", write_s}, {"read_s", read_s}, {"html_s", html_s},
                         {"html_bytes", static_cast<double>(html.size())}, {"trace_s", trace_s},
                         {"trace_bytes", static_cast<double>(trace.size())},
                         {"runs_read", static_cast<double>(c.runs.size())}});
  if (static_cast<long>(c.runs.size()) != runs) throw std::runtime_error("record_report: runs lost");
  std::filesystem::remove_all(dir);
}
