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
