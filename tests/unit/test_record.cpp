// The run record's format (record/record.hpp): round trips, the size cap and its rotation, a
// truncated or damaged file read up to its last whole record with a warning; the report built
// from it (record/report.hpp) counting what the record holds; and what the scheduler's core
// notes for it (SchedulerState::run_notes).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "record/record.hpp"
#include "record/report.hpp"
#include "scheduler/state.hpp"

using namespace herd::record;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/herd-record-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

TaskRun sample_run(std::uint64_t i) {
  TaskRun r;
  r.task = i;
  r.function = i % 3 == 0 ? "load" : "inc";
  r.worker = "local-" + std::to_string(i % 4);
  r.thread = static_cast<std::uint32_t>(1 + i % 2);
  r.submitted_us = 1'700'000'000'000'000 + static_cast<std::int64_t>(i) * 1000;
  r.ready_us = r.submitted_us + 10;
  r.placed_us = r.ready_us + 20;
  r.start_us = r.placed_us + 300;
  r.end_us = r.start_us + 5000 + static_cast<std::int64_t>(i);
  r.received_us = r.end_us + 40;
  r.fetch_us = i % 2 ? 120 : 0;
  r.fetch_bytes = i % 2 ? 4096 : 0;
  r.fetch_peers = i % 2 ? 1 : 0;
  r.result_bytes = 8;
  r.attempt = i == 7 ? 1 : 0;
  if (i == 5) {
    r.status = RunStatus::failed;
    r.error_type = "std::runtime_error";
    r.error = "boom <script>";
  }
  if (i == 6) {
    r.status = RunStatus::lost;
    r.error = "worker local-2 lost";
    r.preemptions = 1;
  }
  if (i == 9) r.campaign = "nightly";
  return r;
}

std::string with_header(const std::string& body) {
  std::string h(kMagic, sizeof kMagic);
  h.push_back(static_cast<char>(kRecordVersion));
  return h + body;
}

}  // namespace

TEST_CASE("Record.Format.EveryKindRoundTrips") {
  Encoder enc;
  for (std::uint64_t i = 0; i < 10; ++i) enc.task_run(sample_run(i));
  PoolEvent pe;
  pe.time_us = 1'700'000'000'500'000;
  pe.pool = "gpu";
  pe.what = PoolEvent::What::failed;
  pe.job = "1234_5";
  pe.reason = "NODE_FAIL";
  pe.target = 4;
  pe.workers = 3;
  pe.running = 3;
  pe.pending = 1;
  enc.pool_event(pe);
  WorkerSample ws;
  ws.time_us = pe.time_us + 1;
  ws.worker = "local-1";
  ws.cpu = 187.5;
  ws.memory = 123456789;
  ws.memory_limit = 1ull << 32;
  ws.spilled = 77;
  ws.executing = 2;
  ws.nthreads = 4;
  enc.worker_sample(ws);
  WorkerEvent we;
  we.time_us = pe.time_us + 2;
  we.worker = "local-2";
  we.what = WorkerEvent::What::lost;
  we.host = "node7";
  we.pool = "gpu";
  we.job = "1234_5";
  we.nthreads = 4;
  we.why = "silent for 10000 ms";
  enc.worker_event(we);

  Contents c;
  const std::size_t n = parse(with_header(enc.bytes()), "test", c);
  CHECK(n > 13);  // name records too
  CHECK(c.warnings.empty());
  REQUIRE(c.runs.size() == 10);
  for (std::uint64_t i = 0; i < 10; ++i) {
    const TaskRun want = sample_run(i);
    const TaskRun& got = c.runs[i];
    CHECK(got.task == want.task);
    CHECK(got.function == want.function);
    CHECK(got.worker == want.worker);
    CHECK(got.campaign == want.campaign);
    CHECK(got.thread == want.thread);
    CHECK(got.submitted_us == want.submitted_us);
    CHECK(got.ready_us == want.ready_us);
    CHECK(got.placed_us == want.placed_us);
    CHECK(got.start_us == want.start_us);
    CHECK(got.end_us == want.end_us);
    CHECK(got.received_us == want.received_us);
    CHECK(got.fetch_us == want.fetch_us);
    CHECK(got.fetch_bytes == want.fetch_bytes);
    CHECK(got.fetch_peers == want.fetch_peers);
    CHECK(got.status == want.status);
    CHECK(got.attempt == want.attempt);
    CHECK(got.preemptions == want.preemptions);
    CHECK(got.error_type == want.error_type);
    CHECK(got.error == want.error);
  }
  REQUIRE(c.pool_events.size() == 1);
  CHECK(c.pool_events[0].pool == "gpu");
  CHECK(c.pool_events[0].what == PoolEvent::What::failed);
  CHECK(c.pool_events[0].job == "1234_5");
  CHECK(c.pool_events[0].reason == "NODE_FAIL");
  CHECK(c.pool_events[0].pending == 1);
  REQUIRE(c.samples.size() == 1);
  CHECK(c.samples[0].cpu == doctest::Approx(187.5));
  CHECK(c.samples[0].memory == 123456789);
  CHECK(c.samples[0].memory_limit == (1ull << 32));
  CHECK(c.samples[0].spilled == 77);
  REQUIRE(c.worker_events.size() == 1);
  CHECK(c.worker_events[0].what == WorkerEvent::What::lost);
  CHECK(c.worker_events[0].why == "silent for 10000 ms");
  CHECK(c.worker_events[0].job == "1234_5");
}

TEST_CASE("Record.Format.TruncatedFileReadToItsLastWholeRecordWithAWarning") {
  Encoder enc;
  for (std::uint64_t i = 0; i < 20; ++i) enc.task_run(sample_run(i));
  const std::string whole = with_header(enc.bytes());
  for (std::size_t cut : {whole.size() - 1, whole.size() - 5, whole.size() - 30}) {
    Contents c;
    parse(std::string_view(whole).substr(0, cut), "run.record", c);
    CHECK(c.runs.size() == 19);
    REQUIRE(c.warnings.size() == 1);
    CHECK(c.warnings[0].find("run.record") != std::string::npos);
    CHECK(c.warnings[0].find("cut short") != std::string::npos);
  }
  SUBCASE("a damaged byte stops the reading there, with a warning") {
    std::string bad = whole;
    bad[bad.size() / 2] ^= 0x55;
    Contents c;
    parse(bad, "run.record", c);
    CHECK(c.runs.size() < 20);
    CHECK(c.runs.size() >= 8);
    REQUIRE(c.warnings.size() == 1);
  }
  SUBCASE("no header: a clear error") {
    Contents c;
    CHECK_THROWS_WITH_AS(parse("hello world", "notes.txt", c), doctest::Contains("notes.txt is not a herd record file"),
                         std::runtime_error);
  }
}

TEST_CASE("Record.Writer.WritesEachTurnRotatesAtItsCap") {
  TempDir dir;
  const std::string path = (dir.path / "run.record").string();
  {
    Recorder rec({path, 64 * 1024});
    for (std::uint64_t i = 0; i < 5000; ++i) {
      rec.encoder().task_run(sample_run(i));
      if (i % 50 == 49) rec.end_turn();
    }
    rec.flush();
    CHECK(fs::exists(path + ".1"));
    // Bounded: each file passes the cap by at most one turn's records.
    CHECK(fs::file_size(path) < 64 * 1024 + 16 * 1024);
    CHECK(fs::file_size(path + ".1") < 64 * 1024 + 16 * 1024);
  }
  // Both files read alone (each defines its names), newest runs last, none damaged.
  const Contents c = read_files(path);
  CHECK(c.warnings.empty());
  REQUIRE(c.runs.size() > 100);
  CHECK(c.runs.back().task == 4999);
  for (std::size_t i = 1; i < c.runs.size(); ++i) CHECK(c.runs[i].task == c.runs[i - 1].task + 1);
  for (const auto& r : c.runs) CHECK(!r.function.empty());

  SUBCASE("a recorder opened again appends") {
    {
      Recorder rec({path, 1ull << 30});
      rec.encoder().task_run(sample_run(5000));
    }
    const Contents again = read_files(path);
    CHECK(again.runs.back().task == 5000);
  }
  SUBCASE("a missing file: an error naming it") {
    CHECK_THROWS_WITH_AS(read_files((dir.path / "nope.record").string()), doctest::Contains("nope.record"),
                         std::runtime_error);
  }
}

TEST_CASE("Record.Filters.SinceCampaignJob") {
  Encoder enc;
  WorkerEvent we;
  we.time_us = 1;
  we.worker = "local-1";
  we.job = "777_3";
  enc.worker_event(we);
  for (std::uint64_t i = 0; i < 10; ++i) enc.task_run(sample_run(i));
  Contents all;
  parse(with_header(enc.bytes()), "t", all);
  {
    Contents c = all;
    Filter f;
    f.campaign = "nightly";
    apply(f, c);
    REQUIRE(c.runs.size() == 1);
    CHECK(c.runs[0].task == 9);
  }
  {
    Contents c = all;
    Filter f;
    f.job = "777";
    apply(f, c);
    CHECK(c.runs.size() == 3);  // tasks 1, 5, 9 ran on local-1
    for (const auto& r : c.runs) CHECK(r.worker == "local-1");
  }
  {
    Contents c = all;
    Filter f;
    f.since_us = sample_run(5).received_us;
    apply(f, c);
    CHECK(c.runs.size() == 5);
  }
}

TEST_CASE("Record.Report.CountsEveryRunSumsPhasesEscapesUserText") {
  Encoder enc;
  for (std::uint64_t i = 0; i < 10; ++i) enc.task_run(sample_run(i));
  Contents c;
  parse(with_header(enc.bytes()), "t", c);
  ReportOptions ro;
  ro.title = "unit";
  const std::string html = html_report(c, ro);
  CHECK(html.find("<!DOCTYPE html>") == 0);
  // Nothing from the network (the SVG namespace is a name, not an address to load).
  std::string loads = html;
  for (std::size_t at; (at = loads.find("http://www.w3.org/2000/svg")) != std::string::npos;) loads.erase(at, 26);
  CHECK(loads.find("http://") == std::string::npos);
  CHECK(loads.find("https://") == std::string::npos);
  CHECK(loads.find("<link") == std::string::npos);
  CHECK(html.find("boom \\u003cscript\\u003e") != std::string::npos);
  CHECK(html.find("boom <script>") == std::string::npos);
  CHECK(html.find("\"runs_total\":10") != std::string::npos);
  const std::string trace = trace_report(c);
  CHECK(trace.find("\"traceEvents\"") != std::string::npos);
  std::size_t slices = 0;
  for (std::size_t at = 0; (at = trace.find("\"ph\":\"X\",\"cat\":\"", at)) != std::string::npos; ++at) {
    if (trace.compare(at + 16, 5, "fetch") != 0) ++slices;
  }
  CHECK(slices == 10);
}

// ---- what the scheduler's core notes for the record ---------------------------------------

TEST_CASE("Record.Core.NotesEachEndedRunTimesPhasesRetriesLosses") {
  using namespace herd::scheduler;
  StateOptions o;
  o.validate = true;
  o.record = true;
  SchedulerState state(o);
  Now now{Clock::time_point{} + std::chrono::hours(1), 1'700'000'000'000, 1'700'000'000'000'000};
  herd::protocol::HelloRequest hello;
  hello.name = "client";
  const ClientId client = state.add_client(hello, now);
  auto add_worker = [&](const std::string& name) {
    herd::protocol::HelloRequest h;
    h.name = name;
    h.nthreads = 1;
    h.data_address = "tcp://" + name + ":1";
    return state.add_worker(h, now);
  };
  const WorkerId a = add_worker("a");
  herd::protocol::TaskSpec spec;
  spec.id = (static_cast<TaskId>(client) << 40) | 1;
  spec.function = "inc";
  spec.retries = 1;
  std::string error;
  state.set_clock(now.unix_us);
  REQUIRE(state.submit(client, spec, nullptr, error));
  state.set_clock(now.unix_us + 100);
  state.schedule(now);
  REQUIRE(state.outbox().workers[a].execute.size() == 1);
  state.outbox().clear();
  // It fails once (a retry), then succeeds.
  auto result = [&](bool ok) {
    herd::protocol::TaskResultsEvent ev;
    herd::protocol::TaskResult r;
    r.id = spec.id;
    r.ok = ok;
    r.duration_us = 700;
    r.return_us = 40;
    r.fetch_us = 15;
    r.fetch_bytes = 4096;
    r.fetch_peers = 1;
    r.thread = 2;
    if (!ok) r.error = {"std::runtime_error", "boom", "", "a"};
    ev.results.push_back(r);
    now.unix_us += 1000;
    state.set_clock(now.unix_us);
    state.task_results(a, ev, now);
    state.schedule(now);
    state.outbox().clear();
  };
  result(false);
  const WorkerId b = add_worker("b");
  result(true);
  std::vector<RunNote>& notes = state.run_notes();
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].status == 1);
  CHECK(notes[0].attempt == 0);
  CHECK(notes[0].error == "boom");
  CHECK(notes[1].status == 0);
  CHECK(notes[1].attempt == 1);
  for (const RunNote& n : notes) {
    CHECK(state.function_name(n.function) == "inc");
    CHECK(state.worker_name(n.worker) == "a");
    CHECK(n.submitted_us == 1'700'000'000'000'000);
    CHECK(n.placed_us >= n.ready_us);
    CHECK(n.ready_us >= n.submitted_us);
    CHECK(n.run_us == 700);
    CHECK(n.return_us == 40);
    CHECK(n.fetch_us == 15);
    CHECK(n.fetch_bytes == 4096);
    CHECK(n.thread == 2);
  }
  notes.clear();
  // A task running on a worker that is lost: its run ends there, lost.
  spec.id = (static_cast<TaskId>(client) << 40) | 2;
  REQUIRE(state.submit(client, spec, nullptr, error));
  state.schedule(now);
  WorkerId on = 0;
  for (auto& [wid, out] : state.outbox().workers) {
    if (!out.execute.empty()) on = wid;
  }
  REQUIRE(on != 0);
  state.outbox().clear();
  state.set_clock(now.unix_us + 5000);
  state.worker_lost(on, "silent for 10000 ms", true);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].status == 2);
  CHECK(notes[0].received_us == now.unix_us + 5000);
  CHECK(notes[0].error.find("silent") != std::string::npos);
  CHECK(notes[0].preemptions == 0);  // the deaths counted by this loss come after its note
  (void)b;
}
