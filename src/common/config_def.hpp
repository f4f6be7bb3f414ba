// Liveness and sizing knobs, one X-macro so that the struct, the environment variables and the
// documentation cannot drift apart. Every knob can be set through its environment variable;
// the scheduler tells workers and clients its own values in the hello reply.
//
// HERD_CONFIG(name, type, default, environment variable, description with unit)
HERD_CONFIG(heartbeat_ms, std::uint32_t, 500, "HERD_HEARTBEAT_MS",
            "interval between heartbeats, both ways (milliseconds)")
HERD_CONFIG(timeout_ms, std::uint32_t, 10000, "HERD_TIMEOUT_MS",
            "silence after which a worker, client or the scheduler is declared lost (milliseconds)")
HERD_CONFIG(connect_timeout_ms, std::uint32_t, 10000, "HERD_CONNECT_TIMEOUT_MS",
            "how long a client or worker waits for the scheduler's hello reply (milliseconds)")
HERD_CONFIG(max_message_bytes, std::int64_t, 2147483647, "HERD_MAX_MESSAGE_BYTES",
            "largest ZeroMQ message the scheduler accepts (bytes, ZMQ_MAXMSGSIZE)")
HERD_CONFIG(queue_horizon_us, std::uint32_t, 20000, "HERD_QUEUE_HORIZON_US",
            "work queued on a worker beyond its free slots, in expected run time (microseconds)")
HERD_CONFIG(max_queue_per_slot, std::uint32_t, 2000, "HERD_MAX_QUEUE_PER_SLOT",
            "hard cap on tasks queued per worker slot, whatever their run time")
HERD_CONFIG(batch_us, std::uint32_t, 1000, "HERD_BATCH_US",
            "tasks of a function whose mean run time is below this go to a worker this much expected "
            "work at a time (one message, not one per idle thread), within its queue, and are stolen "
            "back only from a worker that reported no result for 100 ms (microseconds; 0 = off)")
HERD_CONFIG(result_batch_us, std::uint32_t, 1000, "HERD_RESULT_BATCH_US",
            "while a worker has more tasks queued, how long the results of the ones it finished may "
            "wait to travel to the scheduler together (microseconds; the first of a burst goes at "
            "once, and all go as soon as the worker runs out of work; 0 = each at once)")
HERD_CONFIG(inline_us, std::uint32_t, 100, "HERD_INLINE_US",
            "a task of a function whose last 8 runs on a worker each took less than this runs on "
            "that worker's I/O thread when it is the only one to start, saving the hand-off to an "
            "executor thread and back; one that then holds the thread for 100 ms hands the "
            "sockets to a fresh one (microseconds; 0 = never)")
HERD_CONFIG(allowed_failures, std::uint32_t, 3, "HERD_ALLOWED_FAILURES",
            "worker deaths a task may be present at; one more and it fails (Dask's allowed-failures)")
HERD_CONFIG(drain_grace_ms, std::uint32_t, 20000, "HERD_DRAIN_GRACE_MS",
            "after SIGTERM or the walltime warning signal, how long a worker drains before it leaves "
            "anyway (milliseconds; never past its job's end)")
HERD_CONFIG(worker_log_bytes, std::uint32_t, 4194304, "HERD_WORKER_LOG_BYTES",
            "how much of its recent log (herd's lines, stdout, stderr) a worker keeps in memory for "
            "`herd logs` (bytes; 0 = no capture)")
HERD_CONFIG(task_output_bytes, std::uint32_t, 65536, "HERD_TASK_OUTPUT_BYTES",
            "how much of each task's captured output a worker keeps: the end of it (bytes)")
HERD_CONFIG(task_output_tasks, std::uint32_t, 256, "HERD_TASK_OUTPUT_TASKS",
            "tasks whose captured output a worker keeps; the oldest finished go first")
HERD_CONFIG(chunk_bytes, std::uint32_t, 4194304, "HERD_CHUNK_BYTES",
            "results bigger than this travel as a stream of chunks of this size, so a transfer that "
            "keeps moving is never cut by a deadline and is written straight into its buffer (bytes)")
HERD_CONFIG(data_lanes, std::uint32_t, 1, "HERD_DATA_LANES",
            "1: results bigger than chunk_bytes travel on a bulk lane, a plain TCP connection to a port "
            "beside the holder's data port (sealed with a fresh key when the cluster encrypts); 0: as "
            "chunks on the data port itself (slower; for firewalls that open only the data port)")
HERD_CONFIG(links, std::uint32_t, 1, "HERD_LINKS",
            "1: once a worker has joined, its messages to and from the scheduler travel on a control "
            "link, a plain TCP connection to a port beside the scheduler's (sealed with a fresh key "
            "when the cluster encrypts; one thread wakes per hop instead of ZeroMQ's three); a worker "
            "that cannot reach that port stays on ZeroMQ. 0 (on the scheduler or the worker): ZeroMQ only")
HERD_CONFIG(journal_memory_bytes, std::uint64_t, 1048576, "HERD_JOURNAL_MEMORY_BYTES",
            "journaled results up to this size stay in the scheduler's memory; larger ones are read "
            "back from the journal file when a restarted scheduler needs them (bytes)")
HERD_CONFIG(command_timeout_s, std::uint32_t, 30, "HERD_COMMAND_TIMEOUT_S",
            "how long a batch-system command (sbatch, squeue, sacct, scancel) may take before it is "
            "killed and counted as failed (seconds; they run off the scheduler's event loop)")
HERD_CONFIG(pool_crash_limit, std::uint32_t, 5, "HERD_POOL_CRASH_LIMIT",
            "jobs in a row that end before their worker connects after which a pool pauses until "
            "scale() or adapt(); from the second on it submits one job at a time with doubling pauses")
HERD_CONFIG(pool_crash_backoff_s, std::uint32_t, 5, "HERD_POOL_CRASH_BACKOFF_S",
            "first pause of a pool in a crash loop (seconds; doubles with each crash)")
HERD_CONFIG(pool_stalled_s, std::uint32_t, 60, "HERD_POOL_STALLED_S",
            "a job suspended, stopped or held this long stops counting as one of its pool's workers, "
            "so that a replacement is submitted (seconds)")
HERD_CONFIG(memory_target_percent, std::uint32_t, 60, "HERD_MEMORY_TARGET_PERCENT",
            "a worker with a memory limit writes its least-recently-used results to its local "
            "directory once the results it holds in memory pass this share of the limit (percent, "
            "Dask's distributed.worker.memory.target; 0 = off)")
HERD_CONFIG(memory_spill_percent, std::uint32_t, 70, "HERD_MEMORY_SPILL_PERCENT",
            "... and once its resident memory passes this share of the limit, whatever holds it "
            "(percent, Dask's memory.spill; 0 = off)")
HERD_CONFIG(memory_pause_percent, std::uint32_t, 80, "HERD_MEMORY_PAUSE_PERCENT",
            "resident memory past this share of the limit pauses the worker: it starts no new task "
            "until spilling or released results bring it back under; `herd status` says so "
            "(percent, Dask's memory.pause; 0 = off)")
HERD_CONFIG(record, std::uint32_t, 1, "HERD_RECORD",
            "1: the scheduler records every task run (its phases, worker, thread, bytes fetched, errors), "
            "its pools' events and its workers' load in a run record for `herd report`; 0: nothing is recorded")
HERD_CONFIG(record_bytes, std::uint64_t, 268435456, "HERD_RECORD_BYTES",
            "size of one run record file: past it the file becomes FILE.1 (replacing the one before) and a "
            "new one starts, so the record holds about twice this at most (bytes)")
