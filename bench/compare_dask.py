#!/usr/bin/env python3
"""Runs the same workloads on herd and on Dask distributed, in one run, and compares them.

    python3 bench/compare_dask.py --small              smoke test, well under a minute
    python3 bench/compare_dask.py --repeat 3           full size (takes several minutes)
    python3 bench/compare_dask.py --skip-dask          herd only (Dask not needed)
    python3 bench/compare_dask.py --workloads data,spread --repeat 3    data transfers only

Workloads (see bench/README.md):
  1. throughput  map_gather: map(noop, range(N)) + gather; submit_loop: submit(noop, i) in a
                 loop, then wait. 1 and 2 workers of 1 slot/thread each. Dask twice: its
                 default config and its best one (worker-saturation = inf, i.e. no queuing).
  2. latency     round_trip: sequential submit(noop, i).result(), p50/p99 in microseconds.
  3. tree        tree_reduction: binary-tree sum of `leaves` numbers, 2*leaves-1 tasks, 2 workers.
  4. data        gather_bytes: fetch one result of 1, 16, 256, 1024 MiB to the client, MB/s,
                 beside a raw ZeroMQ transfer of the same bytes (plain and CURVE). Dask both
                 ways: f.result() (through its scheduler) and client.gather(f, direct=True).
                 Both sides gather each size untimed twice first (Dask: its warm-up blob, both
                 ways; herd: herd_bench data --warmup 2), in the process that is then timed.
                 The client's peak RSS during the gather, for sizes >= 256 MiB and the largest.
                 herd encrypts with CURVE by default, Dask does not: herd is also measured with
                 HERD_AUTH=off when its herd_bench reports a CURVE baseline.
  5. spread      worker_to_worker: one 256 MiB result copied from one worker to another
                 (herd: replicate; Dask: client.replicate, and a task pinned to the second
                 worker that takes it as input); scatter_broadcast: client.scatter(256 MiB,
                 broadcast) to 4 workers, until every worker holds it. CURVE on and off too.
  (extra)        startup: creating a 2-worker local cluster and connecting a client.

herd's figures come from the herd_bench binary (its JSON lines); Dask's from
distributed.LocalCluster(n_workers=W, threads_per_worker=1, processes=True) + Client.
Every figure is the median over --repeat runs, for both systems. herd and Dask are run one
after the other, never at the same time.

Dask is used for comparison only; it is never a dependency of herd. This script installs
nothing: on Debian 12, `apt-get install python3-distributed` (Dask distributed 2022.12).

Output: one JSON line per measurement (and one "summary" line per table row) on stdout, or
into --json FILE; then the table. Progress goes to stderr.
"""
import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import warnings

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ("throughput", "latency", "tree", "data", "spread", "startup")


# --- the Dask tasks (top level: pickled by value to the worker processes) -------------------
def noop(x):
    return x


def add(a, b):
    return a + b


def blob(n):
    # Incompressible bytes: Dask compresses frames with lz4 when it is installed (Debian's
    # python3-distributed pulls it in), and b"x" * n would then measure lz4, not the transfer.
    # herd never compresses, so for herd the content makes no difference. (os.urandom, not
    # random.randbytes: that one fails at 256 MiB, 2**31 bits overflowing a C int.)
    return os.urandom(n)


# --- helpers ------------------------------------------------------------------------------
class Output:
    def __init__(self, path):
        self.file = open(path, "w") if path else sys.stdout

    def record(self, obj):
        self.file.write(json.dumps(obj) + "\n")
        self.file.flush()

    def close(self):
        if self.file is not sys.stdout:
            self.file.close()


def progress(msg):
    print(f"[compare_dask {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def percentile(sorted_us, p):
    # Same rule as herd_bench: element floor(p * (n - 1)) of the sorted samples.
    return sorted_us[int(p * (len(sorted_us) - 1))]


def ensure_distributed():
    """Imports distributed, or explains how to get it. Returns the module."""
    try:
        import distributed  # noqa: F401

        return distributed
    except ImportError:
        pass
    # A python3 first on PATH (pyenv, venv) does not see Debian's dist-packages: use the system
    # interpreter if it has Dask, rather than fail.
    system_python = "/usr/bin/python3"
    if (
        os.environ.get("HERD_COMPARE_REEXEC") != "1"
        and os.path.realpath(sys.executable) != os.path.realpath(system_python)
        and os.path.exists(system_python)
        and subprocess.run([system_python, "-c", "import distributed"], capture_output=True).returncode == 0
    ):
        progress(f"{sys.executable} cannot import distributed; re-running under {system_python}")
        os.environ["HERD_COMPARE_REEXEC"] = "1"
        os.execv(system_python, [system_python, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(
        "compare_dask.py: `python3 -c \"import distributed\"` fails: Dask distributed is not installed.\n"
        "  Install it (Debian 12, Dask distributed 2022.12):\n"
        "      sudo apt-get install python3-distributed\n"
        "  or run herd only with --skip-dask. (Dask is needed for this comparison only, never by herd.)"
    )


# --- herd ---------------------------------------------------------------------------------
class HerdRunner:
    def __init__(self, binary, timeout_s, out):
        self.binary = binary
        self.timeout_s = timeout_s
        self.out = out
        self.errors = []
        self.tags = {}

    def run(self, args, run_index=None, warmup_by=None, env=None):
        """Runs herd_bench and returns its records. With warmup_by="mib" (or a tuple of fields,
        e.g. ("bench", "mib")), the first record of each value of that field is marked
        "warmup": true (the caller passed each size twice). env: extra environment variables,
        also added to each record (lower-cased names)."""
        cmd = [self.binary] + args
        progress("herd: " + " ".join(f"{k}={v}" for k, v in (env or {}).items()) + (" " if env else "") + " ".join(cmd))
        t0 = time.monotonic()
        self.tags = {k.lower(): v for k, v in (env or {}).items()}
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s,
                               env=dict(os.environ, **env) if env else None)
        except subprocess.TimeoutExpired as e:
            msg = f"`{' '.join(cmd)}` did not finish in {self.timeout_s} s (hang?)"
            progress("ERROR " + msg)
            self.errors.append(msg)
            return self._parse(e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), run_index, warmup_by)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            msg = f"`{' '.join(cmd)}` exited {p.returncode}: {p.stderr.strip()[-500:]}"
            progress("ERROR " + msg)
            self.errors.append(msg)
        elif p.stderr.strip():
            progress("herd stderr: " + p.stderr.strip()[-500:])
        progress(f"herd: done in {wall:.1f} s")
        return self._parse(p.stdout, run_index, warmup_by)

    def _parse(self, stdout, run_index, warmup_by=None):
        recs, seen = [], set()
        for line in stdout.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                self.errors.append(f"herd_bench printed a malformed line: {line[:200]}")
                continue
            rec.update(self.tags)
            if run_index is not None:
                rec["run"] = run_index
            if warmup_by is not None:
                key = tuple(rec.get(f) for f in ((warmup_by,) if isinstance(warmup_by, str) else warmup_by))
                if key not in seen:
                    seen.add(key)
                    rec["warmup"] = True
            self.out.record(rec)
            recs.append(rec)
        return recs


def run_herd(cfg, out):
    h = HerdRunner(cfg.herd_bench, cfg.herd_timeout, out)
    res = {}
    wl = ",".join(str(w) for w in cfg.workers)
    r = str(cfg.repeat)
    if "throughput" in cfg.workloads:
        recs = h.run(["throughput", "--tasks", str(cfg.tasks), "--workers", wl, "--repeat", r])
        for bench in ("map_gather", "submit_loop"):
            for w in cfg.workers:
                res[(bench, w)] = median(x["tasks_per_s"] for x in recs if x["bench"] == bench and x["workers"] == w)
    if "latency" in cfg.workloads:
        recs = []
        for i in range(cfg.repeat):  # herd_bench latency measures once per process
            recs += h.run(["latency", "--rounds", str(cfg.rounds)], run_index=i)
        res["p50"] = median(x["p50_us"] for x in recs if x["bench"] == "round_trip")
        res["p99"] = median(x["p99_us"] for x in recs if x["bench"] == "round_trip")
    if "tree" in cfg.workloads:
        recs = h.run(["tree", "--leaves", str(cfg.leaves), "--workers", str(cfg.tree_workers), "--repeat", r])
        res["tree"] = median(x["seconds"] for x in recs if x["bench"] == "tree_reduction")
    # herd encrypts every socket with CURVE by default (when herd_bench reports a CURVE
    # baseline); Dask's LocalCluster does not encrypt. data and spread measure herd unencrypted
    # too, HERD_AUTH=off (which needs an explicit listen address: loopback here).
    noauth_env = {"HERD_AUTH": "off", "HERD_LISTEN": "tcp://127.0.0.1:*"}
    herd_encrypts = os.environ.get("HERD_AUTH") not in ("off", "0")

    def field(recs, bench, m, name):
        return median(x.get(name) for x in recs if x.get("bench") == bench and x.get("mib") == m)

    def sized_runs(args, sizes, env=None):
        # herd_bench spread measures each listed size once per process: list each size twice
        # and drop the first as a warm-up.
        recs = []
        for i in range(cfg.repeat):
            recs += h.run(args + ["--mib", ",".join(f"{m},{m}" for m in sizes)], run_index=i,
                          warmup_by=("bench", "mib"), env=env)
        return [x for x in recs if not x.get("warmup")]

    def data_runs(sizes, env=None):
        # herd_bench data gathers each size twice untimed before the timed gather, as the Dask
        # side gathers its first blob both ways untimed (dask_data).
        recs = []
        for i in range(cfg.repeat):
            recs += h.run(["data", "--warmup", "2", "--mib", ",".join(str(m) for m in sizes)], run_index=i, env=env)
        return recs

    if "data" in cfg.workloads:
        recs = data_runs(cfg.mib)
        for m in cfg.mib:
            res[("data", m)] = field(recs, "gather_bytes", m, "mb_per_s")
            res[("raw", m)] = field(recs, "gather_bytes", m, "raw_zmq_mb_per_s")
            res[("raw_curve", m)] = field(recs, "gather_bytes", m, "raw_zmq_curve_mb_per_s")
            res[("peak_rss", m)] = field(recs, "gather_bytes", m, "client_peak_rss_bytes")
            res[("rss_before", m)] = field(recs, "gather_bytes", m, "client_rss_before_bytes")
        herd_encrypts = herd_encrypts and any(x.get("raw_zmq_curve_mb_per_s") for x in recs)
        if herd_encrypts:
            recs = data_runs(cfg.mib, env=noauth_env)
            for m in cfg.mib:
                res[("data_noauth", m)] = field(recs, "gather_bytes", m, "mb_per_s")
                res[("peak_rss_noauth", m)] = field(recs, "gather_bytes", m, "client_peak_rss_bytes")
                res[("rss_before_noauth", m)] = field(recs, "gather_bytes", m, "client_rss_before_bytes")
    if "spread" in cfg.workloads:
        # herd_bench spread: replicate to a second worker of a 2-worker cluster, then scatter
        # with broadcast on a cluster of the last of --workers workers.
        args = ["spread", "--workers", str(cfg.spread_workers)]
        for env, suffix in ((None, ""), (noauth_env, "_noauth")):
            if env and not herd_encrypts:
                continue
            recs = sized_runs(args, cfg.spread_mib, env=env)
            for m in cfg.spread_mib:
                res[("w2w" + suffix, m)] = field(recs, "worker_to_worker", m, "mb_per_s")
                res[("bcast" + suffix, m)] = field(recs, "scatter_broadcast", m, "mb_per_s")
    if "startup" in cfg.workloads:
        recs = h.run(["startup", "--workers", str(cfg.tree_workers), "--repeat", r])
        res["startup"] = median(x["seconds"] for x in recs if x["bench"] == "startup")
    return res, h.errors


# --- Dask ---------------------------------------------------------------------------------
def quiet_dask_logs():
    for name in ("distributed", "dask", "tornado", "asyncio"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # The scheduler's HTTP server gets a free port (dashboard_address=":0"); should Dask still
    # complain about a port, that is noise here too.
    warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)


def scheduler_idle(client, timeout_s=30.0):
    """Waits (untimed) until the scheduler has forgotten every task: released futures are
    processed asynchronously, and without this their cleanup would land in the next timed run."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
        if left == 0:
            return
        if time.monotonic() > deadline:
            progress(f"warning: the Dask scheduler still holds {left} task(s) after {timeout_s:.0f} s")
            return
        time.sleep(0.02)


def dask_throughput(client, wait, tasks, repeat, base, out):
    fig = {}
    client.gather(client.map(noop, [1] * 1000, pure=False))  # warm-up, as herd_bench does
    scheduler_idle(client)
    rates = []
    for i in range(repeat):
        t0 = time.perf_counter()
        futs = client.map(noop, range(tasks), pure=False)
        got = client.gather(futs)
        s = time.perf_counter() - t0
        if got[-1] != tasks - 1:
            raise RuntimeError("dask map_gather: wrong result")
        del futs, got
        scheduler_idle(client)
        rates.append(tasks / s)
        out.record(dict(base, bench="map_gather", tasks=tasks, seconds=s, tasks_per_s=tasks / s, run=i))
    fig["map_gather"] = median(rates)
    rates = []
    for i in range(repeat):
        t0 = time.perf_counter()
        futs = [client.submit(noop, x, pure=False) for x in range(tasks)]
        submit_s = time.perf_counter() - t0
        wait(futs)
        s = time.perf_counter() - t0
        del futs
        scheduler_idle(client)
        rates.append(tasks / s)
        out.record(dict(base, bench="submit_loop", tasks=tasks, seconds=s, tasks_per_s=tasks / s,
                        submit_calls_per_s=tasks / submit_s, run=i))
    fig["submit_loop"] = median(rates)
    return fig


def dask_latency(client, rounds, repeat, base, out):
    for i in range(100):  # warm-up, as herd_bench does
        client.submit(noop, i, pure=False).result()
    p50s, p99s = [], []
    for r in range(repeat):
        us = []
        for i in range(rounds):
            t0 = time.perf_counter()
            client.submit(noop, i, pure=False).result()
            us.append((time.perf_counter() - t0) * 1e6)
        us.sort()
        p50s.append(percentile(us, 0.5))
        p99s.append(percentile(us, 0.99))
        out.record(dict(base, bench="round_trip", rounds=rounds, p50_us=p50s[-1], p99_us=p99s[-1], max_us=us[-1], run=r))
    return {"p50": median(p50s), "p99": median(p99s)}


def tree_sum(client, leaves):
    """The binary-tree sum of herd_bench's tree: map the leaves, then add pairs level by level.
    Returns (sum, tasks); no future outlives the call."""
    level = client.map(add, range(leaves), [0] * leaves, pure=False)
    ntasks = len(level)
    while len(level) > 1:
        nxt = [client.submit(add, level[i], level[i + 1], pure=False) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        ntasks += len(level) // 2
        level = nxt
    return level[0].result(), ntasks


def dask_tree(client, leaves, repeat, base, out):
    client.gather(client.map(add, range(100), [0] * 100, pure=False))  # warm-up (herd_bench has none)
    scheduler_idle(client)
    times = []
    for r in range(repeat):
        t0 = time.perf_counter()
        total, ntasks = tree_sum(client, leaves)
        s = time.perf_counter() - t0
        if total != leaves * (leaves - 1) // 2:
            raise RuntimeError("dask tree_reduction: wrong sum")
        scheduler_idle(client)
        times.append(s)
        out.record(dict(base, bench="tree_reduction", leaves=leaves, tasks=ntasks, seconds=s, tasks_per_s=ntasks / s, run=r))
    return {"tree": median(times)}


def rss_reset():
    """Starts this process's peak RSS (VmHWM) again from its current RSS, as herd_bench does
    (/proc/self/clear_refs). Returns False where that is not allowed: the peak is then the
    process's lifetime peak (getrusage)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def self_status_bytes(field):
    """This process's VmRSS or VmHWM in bytes (from /proc/self/status), else getrusage's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def timed_gather(client, f, direct, n):
    """Times one gather of future f to this process: f.result() (Dask's default path: the
    scheduler fetches the bytes from the worker and forwards them) or client.gather(f,
    direct=True) (the client fetches them from the worker). Returns (seconds, rss_before,
    peak_rss, peak_is_reset). This process is the client (and, in a LocalCluster, the
    scheduler too); the workers are other processes."""
    reset = rss_reset()
    before = self_status_bytes("VmRSS")
    t0 = time.perf_counter()
    v = client.gather(f, direct=True) if direct else f.result()
    s = time.perf_counter() - t0
    peak = self_status_bytes("VmHWM")
    if len(v) != n:
        raise RuntimeError("dask gather_bytes: short result")
    del v
    return s, before, peak, reset


def dask_data(client, wait, mibs, repeat, base, out):
    """For each size: one blob per run, gathered both ways (f.result() and direct=True; the
    order alternates between runs); a first blob gathered both ways untimed, as a warm-up."""
    fig = {}
    for m in mibs:
        n = m << 20
        rates = {False: [], True: []}
        peaks = {False: [], True: []}
        befores = {False: [], True: []}
        for r in range(-1, repeat):  # r = -1: the warm-up (the first transfer of a size is slow)
            f = client.submit(blob, n, pure=False)
            wait(f)
            for direct in ((False, True) if r % 2 == 0 else (True, False)):
                s, before, peak, reset = timed_gather(client, f, direct, n)
                rec = dict(base, bench="gather_bytes", path="direct" if direct else "default", mib=m, seconds=s,
                           mb_per_s=n / 1e6 / s, client_rss_before_bytes=before, client_peak_rss_bytes=peak,
                           peak_rss_reset=reset, run=r)
                if r < 0:
                    rec = dict(rec, run=0, warmup=True)
                else:
                    rates[direct].append(n / 1e6 / s)
                    peaks[direct].append(peak)
                    befores[direct].append(before)
                out.record(rec)
            del f
            scheduler_idle(client)
        for direct, name in ((False, "data"), (True, "data_direct")):
            fig[(name, m)] = median(rates[direct])
            fig[(name.replace("data", "peak_rss"), m)] = median(peaks[direct])
            fig[(name.replace("data", "rss_before"), m)] = median(befores[direct])
    return fig


def who_holds(client, f):
    return set(client.who_has(f).get(f.key, ()))


def dask_spread(client, wait, mibs, repeat, base, out):
    """worker_to_worker: a blob made on worker A, then (1) client.replicate([f], n=2,
    workers=[A, B]), timed until it returns (it blocks until B holds a copy; who_has checked
    after); (2) a fresh blob on A and a task pinned to B, len(f), timed from submit to its
    result. scatter_broadcast: client.scatter(bytes, broadcast=True, hash=False) to every
    worker, timed until it returns (it replicates to all before returning; who_has checked
    after). The first run of each size is a warm-up."""
    workers = sorted(client.scheduler_info()["workers"])
    a, b = workers[0], workers[1]
    fig = {}
    for m in mibs:
        n = m << 20
        rep, task, bcast = [], [], []
        for r in range(-1, repeat):
            tag = dict(run=0, warmup=True) if r < 0 else dict(run=r)
            # (1) replicate
            f = client.submit(blob, n, workers=[a], allow_other_workers=False, pure=False)
            wait(f)
            if who_holds(client, f) != {a}:
                raise RuntimeError(f"dask worker_to_worker: blob not on {a} alone: {who_holds(client, f)}")
            t0 = time.perf_counter()
            client.replicate([f], n=2, workers=[a, b])
            s = time.perf_counter() - t0
            if who_holds(client, f) != {a, b}:
                raise RuntimeError(f"dask worker_to_worker: after replicate, held by {who_holds(client, f)}")
            del f
            scheduler_idle(client)
            out.record(dict(base, bench="worker_to_worker", path="replicate", mib=m, seconds=s, mb_per_s=n / 1e6 / s, **tag))
            if r >= 0:
                rep.append(n / 1e6 / s)
            # (2) a task on B that takes A's result as input
            f = client.submit(blob, n, workers=[a], allow_other_workers=False, pure=False)
            wait(f)
            t0 = time.perf_counter()
            got = client.submit(len, f, workers=[b], allow_other_workers=False, pure=False).result()
            s = time.perf_counter() - t0
            if got != n:
                raise RuntimeError("dask worker_to_worker: wrong length on the second worker")
            del f
            scheduler_idle(client)
            out.record(dict(base, bench="worker_to_worker", path="task_on_b", mib=m, seconds=s, mb_per_s=n / 1e6 / s, **tag))
            if r >= 0:
                task.append(n / 1e6 / s)
            # scatter with broadcast to every worker
            data = os.urandom(n)  # incompressible, untimed
            t0 = time.perf_counter()
            f = client.scatter(data, broadcast=True, hash=False)
            s = time.perf_counter() - t0
            if who_holds(client, f) != set(workers):
                raise RuntimeError(f"dask scatter_broadcast: held by {len(who_holds(client, f))} of {len(workers)} workers")
            del f, data
            scheduler_idle(client)
            mbps = n * len(workers) / 1e6 / s  # as herd_bench: bytes x workers / seconds
            out.record(dict(base, bench="scatter_broadcast", mib=m, seconds=s, mb_per_s=mbps, **tag))
            if r >= 0:
                bcast.append(mbps)
        fig[("w2w", m)] = median(rep)
        fig[("w2w_task", m)] = median(task)
        fig[("bcast", m)] = median(bcast)
    return fig


def run_dask(cfg, out, res, errors):
    """Fills res["default"] and res["best"]; a workload that fails is reported in errors and
    the others still run."""
    distributed = ensure_distributed()
    import dask
    from distributed import Client, LocalCluster, wait

    quiet_dask_logs()
    progress(f"Dask distributed {distributed.__version__}, default worker-saturation = "
             f"{dask.config.get('distributed.scheduler.worker-saturation')}")
    res.setdefault("default", {})
    res.setdefault("best", {})

    def attempt(what, fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # keep going: report what was measured
            errors.append(f"Dask {what} failed: {type(e).__name__}: {e}")
            progress("ERROR " + errors[-1])
            return {}

    configs = {"default": {}, "best": {"distributed.scheduler.worker-saturation": float("inf")}}
    # Four clusters in all (default/best x 1/2 workers); latency and data run on the 1-worker
    # default cluster, the tree on both 2-worker clusters, the way herd_bench uses 1 and 2 workers.
    startups = []
    for name, settings in configs.items():
        for w in cfg.workers:
            needs = []
            if "throughput" in cfg.workloads:
                needs.append("throughput")
            if name == "default" and w == 1:
                needs += [x for x in ("latency", "data") if x in cfg.workloads]
            if w == cfg.tree_workers:
                needs += [x for x in ("tree",) if x in cfg.workloads]
            if name == "default" and w == cfg.tree_workers and "startup" in cfg.workloads:
                needs.append("startup")
            if not needs:
                continue
            base = {"system": "dask", "config": name, "workers": w, "dask_version": distributed.__version__}
            with dask.config.set(settings):
                t0 = time.perf_counter()
                cluster = LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                                       silence_logs=logging.ERROR, dashboard_address=":0")
                client = Client(cluster)
                client.wait_for_workers(w)
                startup_s = time.perf_counter() - t0
                out.record(dict(base, bench="startup", seconds=startup_s))
                if w == cfg.tree_workers and name == "default":
                    startups.append(startup_s)
                try:
                    sat = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.WORKER_SATURATION)
                    progress(f"dask {name} (worker-saturation={sat}), {w} worker(s): {', '.join(needs)}")
                    t_all = time.monotonic()
                    what = f"{name} {w}w"
                    if "throughput" in needs:
                        tasks = cfg.dask_default_tasks if name == "default" else cfg.tasks
                        got = attempt(f"throughput ({what})", dask_throughput, client, wait, tasks, cfg.repeat, base, out)
                        for k, v in got.items():
                            res[name][(k, w)] = v
                    if "latency" in needs:
                        res[name].update(attempt(f"latency ({what})", dask_latency, client, cfg.rounds, cfg.repeat, base, out))
                    if "tree" in needs:
                        res[name].update(attempt(f"tree ({what})", dask_tree, client, cfg.leaves, cfg.repeat, base, out))
                    if "data" in needs:
                        res[name].update(attempt(f"data ({what})", dask_data, client, wait, cfg.mib, cfg.repeat, base, out))
                    progress(f"dask {name}, {w} worker(s): done in {time.monotonic() - t_all:.1f} s")
                finally:
                    client.close()
                    cluster.close()
    if "spread" in cfg.workloads:
        # Its own cluster of --spread-workers workers. The Active Memory Manager is off: its
        # ReduceReplicas policy (on by default) drops extra copies every 2 s, and Dask's docs say
        # to disable it before using replicate (scatter's broadcast is a replicate too).
        w = cfg.spread_workers
        base = {"system": "dask", "config": "default", "workers": w, "dask_version": distributed.__version__,
                "active_memory_manager": False}
        with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
            cluster = LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                                   silence_logs=logging.ERROR, dashboard_address=":0")
            client = Client(cluster)
            try:
                client.wait_for_workers(w)
                progress(f"dask default (active memory manager off), {w} workers: spread")
                t_all = time.monotonic()
                res["default"].update(attempt(f"spread ({w}w)", dask_spread, client, wait, cfg.spread_mib,
                                              cfg.repeat, base, out))
                progress(f"dask spread, {w} workers: done in {time.monotonic() - t_all:.1f} s")
            finally:
                client.close()
                cluster.close()
    if "startup" in cfg.workloads and cfg.repeat > 1:
        # One more cluster per extra repeat, for a median like herd's.
        for _ in range(cfg.repeat - 1):
            t0 = time.perf_counter()
            cluster = LocalCluster(n_workers=cfg.tree_workers, threads_per_worker=1, processes=True,
                                   silence_logs=logging.ERROR, dashboard_address=":0")
            client = Client(cluster)
            client.wait_for_workers(cfg.tree_workers)
            s = time.perf_counter() - t0
            client.close()
            cluster.close()
            startups.append(s)
            out.record({"system": "dask", "config": "default", "bench": "startup", "workers": cfg.tree_workers, "seconds": s})
    if startups:
        res["default"]["startup"] = median(startups)


# --- table --------------------------------------------------------------------------------
def fmt(v, unit):
    if v is None:
        return "-"
    if unit == "s":
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    if unit == "mib":
        return f"{v:,.0f}"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}"


def fmt_ratio(r):
    if r is None:
        return "-"
    return f"{r:.0f}x" if r >= 100 else f"{r:.1f}x" if r >= 10 else f"{r:.2f}x"


def ratio(h, d, higher_is_better):
    if h is None or d is None or h == 0 or d == 0:
        return None
    return h / d if higher_is_better else d / h


def best_of(a, b, higher_is_better):
    vals = [v for v in (a, b) if v is not None]
    if not vals:
        return None
    return max(vals) if higher_is_better else min(vals)


def mib_of(v):
    return None if v is None else v / (1 << 20)


def build_rows(cfg, herd, dask):
    rows = []  # (workload, metric, unit, higher_is_better, herd, default, direct, best, note)
    d, b = dask.get("default", {}), dask.get("best", {})
    if "throughput" in cfg.workloads:
        note = ""
        if cfg.dask_default_tasks != cfg.tasks:
            note = f"Dask default: {cfg.dask_default_tasks:,} tasks"
        for bench in ("map_gather", "submit_loop"):
            for w in cfg.workers:
                rows.append((f"{bench} {w}w", "tasks/s", "rate", True, herd.get((bench, w)),
                             d.get((bench, w)), None, b.get((bench, w)), note))
    if "latency" in cfg.workloads:
        rows.append(("round_trip p50", "us", "time", False, herd.get("p50"), d.get("p50"), None, None, "1 worker"))
        rows.append(("round_trip p99", "us", "time", False, herd.get("p99"), d.get("p99"), None, None, "1 worker"))
    if "tree" in cfg.workloads:
        rows.append((f"tree_reduction {cfg.tree_workers}w", "s", "s", False, herd.get("tree"), d.get("tree"), None,
                     b.get("tree"), f"{2 * cfg.leaves - 1:,} tasks"))

    def raw_note(m, prefix="herd: CURVE on; "):
        raw, raw_curve = herd.get(("raw", m)), herd.get(("raw_curve", m))
        if raw_curve:
            return f"{prefix}raw ZeroMQ {fmt(raw, 'rate')}, with CURVE {fmt(raw_curve, 'rate')} MB/s"
        return f"raw ZeroMQ {fmt(raw, 'rate')} MB/s" if raw else ""

    if "data" in cfg.workloads:
        def dask_gather(m):
            dd, dx = d.get(("data", m)), d.get(("data_direct", m))
            return dd, dx, best_of(dd, dx, True)

        for m in cfg.mib:
            rows.append((f"gather_bytes {m} MiB", "MB/s", "rate", True, herd.get(("data", m)), *dask_gather(m), raw_note(m)))
        for m in cfg.mib:
            if ("data_noauth", m) in herd:
                rows.append((f"gather_bytes {m} MiB, HERD_AUTH=off", "MB/s", "rate", True, herd.get(("data_noauth", m)),
                             *dask_gather(m), "herd unencrypted, like Dask's default"))
        # The client's peak RSS while it gathers: the big sizes, and the largest one measured.
        for m in sorted({x for x in cfg.mib if x >= 256} | {max(cfg.mib)}):
            hp, dp, xp = (mib_of(herd.get(("peak_rss", m))), mib_of(d.get(("peak_rss", m))),
                          mib_of(d.get(("peak_rss_direct", m))))

            def rise(src, peak, key):
                before = mib_of(src.get((key, m)))
                return "-" if peak is None or before is None else f"{round(peak - before):+,}"

            note = (f"rise during the gather: herd {rise(herd, hp, 'rss_before')}, Dask {rise(d, dp, 'rss_before')} "
                    f"/ {rise(d, xp, 'rss_before_direct')} MiB")
            hn = mib_of(herd.get(("peak_rss_noauth", m)))
            if hn is not None:
                note += f"; herd HERD_AUTH=off {fmt(hn, 'mib')} ({rise(herd, hn, 'rss_before_noauth')})"
            rows.append((f"client peak RSS, gather {m} MiB", "MiB", "mib", False, hp, dp, xp, best_of(dp, xp, False), note))
    if "spread" in cfg.workloads:
        for suffix, tail in (("", ""), ("_noauth", ", HERD_AUTH=off")):
            for m in cfg.spread_mib:
                if ("w2w" + suffix, m) not in herd and suffix:
                    continue
                rep, task = d.get(("w2w", m)), d.get(("w2w_task", m))
                note = f"Dask: replicate; task on B {fmt(task, 'rate')} MB/s"
                if not suffix and raw_note(m):
                    note += "; " + raw_note(m, "")
                rows.append((f"worker_to_worker {m} MiB{tail}", "MB/s", "rate", True, herd.get(("w2w" + suffix, m)),
                             rep, None, best_of(rep, task, True), note))
            for m in cfg.spread_mib:
                if ("bcast" + suffix, m) not in herd and suffix:
                    continue
                rows.append((f"scatter_broadcast {m} MiB to {cfg.spread_workers}w{tail}", "MB/s", "rate", True,
                             herd.get(("bcast" + suffix, m)), d.get(("bcast", m)), None, None,
                             f"MB/s = bytes x {cfg.spread_workers} workers / s"))
    if "startup" in cfg.workloads:
        rows.append((f"startup {cfg.tree_workers}w (extra)", "s", "s", False, herd.get("startup"), d.get("startup"), None,
                     None, "cluster + client"))
    return rows


def print_table(rows, cfg, out):
    header = ["workload", "unit", "herd", "Dask default", "Dask direct", "Dask best", "ratio vs default",
              "ratio vs best", "note"]
    lines = []
    for name, metric, unit, hib, h, dd, dx, db, note in rows:
        rd, rb = ratio(h, dd, hib), ratio(h, db, hib)
        out.record({"system": "compare", "summary": True, "workload": name, "unit": metric,
                    "higher_is_better": hib, "herd": h, "dask_default": dd, "dask_direct": dx, "dask_best": db,
                    "ratio_default": rd, "ratio_best": rb, "repeat": cfg.repeat, "note": note})
        lines.append([name, metric, fmt(h, unit), fmt(dd, unit), fmt(dx, unit), fmt(db, unit),
                      fmt_ratio(rd), fmt_ratio(rb), note])
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    left = (0, 1, 8)

    def row(cells):  # a Markdown table, readable as plain text too
        return "| " + " | ".join(c.ljust(widths[i]) if i in left else c.rjust(widths[i])
                                 for i, c in enumerate(cells)) + " |"

    sep = "|" + "|".join((":" + "-" * (w + 1)) if i in left else ("-" * (w + 1) + ":") for i, w in enumerate(widths)) + "|"
    print()
    print(f"herd vs Dask distributed: medians of {cfg.repeat} run(s); ratio > 1 means herd is better "
          "(tasks/s and MB/s: herd / Dask; times in us or s, and MiB: Dask / herd).")
    print("Dask default = stock config and path. Dask direct = client.gather(f, direct=True) (data only). "
          "Dask best = worker-saturation: inf (throughput, tree); the better of default and direct (data); "
          "the faster of replicate and a task on the second worker (worker_to_worker).")
    if "throughput" in cfg.workloads and cfg.dask_default_tasks != cfg.tasks:
        print(f"NOTE: Dask's default config ran {cfg.dask_default_tasks:,} tasks per throughput run, not "
              f"{cfg.tasks:,} (herd, Dask best): compare tasks/s only.")
    print()
    print(row(header))
    print(sep)
    for line in lines:
        print(row(line))
    sys.stdout.flush()


# --- main ---------------------------------------------------------------------------------
def parse_args():
    p = argparse.ArgumentParser(description="herd vs Dask distributed on the same workloads (bench/README.md).")
    p.add_argument("--small", action="store_true",
                   help="tiny sizes (2,000 tasks, 50 rounds, 256 leaves, 1 and 4 MiB, spread 4 MiB, 1 repeat): a smoke test")
    p.add_argument("--repeat", type=int, default=None, help="runs per figure; the median is reported (default 3, 1 with --small)")
    p.add_argument("--herd-bench", default=os.path.join(REPO_ROOT, "build", "bench", "herd_bench"),
                   help="the herd_bench binary (default: build/bench/herd_bench in the repo)")
    p.add_argument("--skip-dask", action="store_true", help="run herd only")
    p.add_argument("--json", metavar="FILE", help="write the JSON lines there instead of stdout")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated subset of {','.join(WORKLOADS)} (default: all)")
    p.add_argument("--tasks", type=int, help="tasks per throughput run (default 100000)")
    p.add_argument("--dask-default-tasks", type=int,
                   help="tasks per throughput run for Dask's DEFAULT config only, which runs at ~600 tasks/s "
                        "(default 20000 at full size, --tasks with --small); the table then compares tasks/s")
    p.add_argument("--workers", default="1,2", help="worker counts for throughput; the last one is used for the tree")
    p.add_argument("--rounds", type=int, help="round trips for latency (default 1000)")
    p.add_argument("--leaves", type=int, help="leaves of the tree reduction (default 8192)")
    p.add_argument("--mib", help="result sizes for data, comma separated (default 1,16,256,1024)")
    p.add_argument("--spread-mib", help="sizes for spread (worker-to-worker copy, scatter broadcast), comma "
                                        "separated (default 256; 4 with --small)")
    p.add_argument("--spread-workers", type=int, default=4,
                   help="workers that spread's scatter broadcast reaches (default 4, at least 2)")
    p.add_argument("--herd-timeout", type=float, default=900, help="seconds before a herd_bench run counts as hung")
    a = p.parse_args()
    small = dict(tasks=2000, rounds=50, leaves=256, mib="1,4", spread_mib="4", repeat=1)
    full = dict(tasks=100000, rounds=1000, leaves=8192, mib="1,16,256,1024", spread_mib="256", repeat=3)
    d = small if a.small else full
    for k in ("tasks", "rounds", "leaves", "mib", "spread_mib", "repeat"):
        if getattr(a, k) is None:
            setattr(a, k, d[k])
    if a.dask_default_tasks is None:
        a.dask_default_tasks = a.tasks if a.small else min(a.tasks, 20000)
    try:
        a.mib = [int(x) for x in str(a.mib).split(",")]
        a.spread_mib = [int(x) for x in str(a.spread_mib).split(",")]
    except ValueError:
        p.error("--mib and --spread-mib take whole MiB, comma separated")
    if min(a.mib + a.spread_mib) < 1:
        p.error("--mib and --spread-mib must be >= 1")
    if a.spread_workers < 2:
        p.error("--spread-workers must be >= 2")
    a.workers = [int(x) for x in a.workers.split(",")]
    a.tree_workers = a.workers[-1]
    a.workloads = [x.strip() for x in a.workloads.split(",") if x.strip()]
    bad = set(a.workloads) - set(WORKLOADS)
    if bad:
        p.error(f"unknown workload(s): {', '.join(sorted(bad))}")
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    a.herd_bench = os.path.abspath(a.herd_bench)
    return a


def main():
    cfg = parse_args()
    if not (os.path.isfile(cfg.herd_bench) and os.access(cfg.herd_bench, os.X_OK)):
        sys.exit(f"compare_dask.py: no herd_bench at {cfg.herd_bench}: build herd first (scripts/setup.sh) "
                 "or give its path with --herd-bench")
    if not cfg.skip_dask:
        ensure_distributed()  # fail (or switch interpreter) before spending time on herd
    out = Output(cfg.json)
    t_start = time.monotonic()
    load_start = os.getloadavg()
    progress(f"sizes: tasks={cfg.tasks:,} (Dask default: {cfg.dask_default_tasks:,}) rounds={cfg.rounds} "
             f"leaves={cfg.leaves} mib={cfg.mib} spread_mib={cfg.spread_mib} (to {cfg.spread_workers} workers) "
             f"repeat={cfg.repeat} workloads={','.join(cfg.workloads)}")
    # herd first, then Dask: never both at once (the machine may have only a couple of cores).
    t0 = time.monotonic()
    herd, errors = run_herd(cfg, out)
    herd_s = time.monotonic() - t0
    dask, dask_s = {}, 0.0
    if not cfg.skip_dask:
        t0 = time.monotonic()
        try:
            run_dask(cfg, out, dask, errors)
        except Exception as e:  # report what was measured so far
            errors.append(f"Dask run failed: {type(e).__name__}: {e}")
            progress("ERROR " + errors[-1])
        dask_s = time.monotonic() - t0
    total = time.monotonic() - t_start
    load_end = os.getloadavg()
    out.record({"system": "compare", "bench": "wall_time", "herd_s": herd_s, "dask_s": dask_s, "total_s": total,
                "loadavg_start": load_start, "loadavg_end": load_end, "cpus": os.cpu_count()})
    print_table(build_rows(cfg, herd, dask), cfg, out)
    print(f"\nwall time: herd {herd_s:.1f} s, Dask {dask_s:.1f} s, total {total:.1f} s; "
          f"{os.cpu_count()} CPUs, load average {load_start[0]:.2f} at start, {load_end[0]:.2f} at end "
          "(other work on the machine skews every figure)")
    out.close()
    if errors:
        print("\nERRORS:", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
