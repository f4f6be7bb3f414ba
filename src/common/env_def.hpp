// Every HERD_* environment variable that is not a numeric knob (those are in config_def.hpp),
// one X-macro: the one registry of herd's variables, which `herd config` prints, README's
// table lists, and tests/unit/test_knobs.cpp holds the sources and the README to.
//
// HERD_ENV(id, name, who, default (as text, "" = none), description)
//   who: user     — set it to change herd's behaviour
//        internal — herd sets it for the processes it starts (workers, the scheduler, a job's
//                   commands, a trial's command); read there, never to be set by hand
// A name ending in '_' is a prefix: the variables are named <prefix><name>.
HERD_ENV(auth, "HERD_AUTH", user, "on",
         "off: no authentication and no encryption on any port (a network nobody else can reach); refused "
         "without an explicit listen address")
HERD_ENV(key_file, "HERD_KEY_FILE", user, "~/.herd/cluster.keys",
         "the cluster's CURVE keys, created on first use; 0600 in a directory only you can write")
HERD_ENV(ring_encryption, "HERD_RING_ENCRYPTION", user, "on",
         "off: a gang's CPU ring stays authenticated but its data travels unencrypted")
HERD_ENV(listen, "HERD_LISTEN", user, "",
         "the scheduler's ZeroMQ endpoint (herd scheduler --listen); default a free loopback port, or every "
         "interface with a Slurm pool")
HERD_ENV(listen_host, "HERD_LISTEN_HOST", user, "",
         "where a worker's data port, lanes and ring listen (an address or an interface such as ib0); default "
         "the address that routes to the scheduler")
HERD_ENV(journal, "HERD_JOURNAL", user, "",
         "the scheduler's journal file (herd scheduler --journal): keyed and campaign results outlive it")
HERD_ENV(record_file, "HERD_RECORD_FILE", user, "",
         "the scheduler's run record (herd scheduler --record); default beside the journal (JOURNAL.record), "
         "else in its log directory, else a file in /tmp/herd-UID removed when the scheduler exits")
HERD_ENV(dashboard_address, "HERD_DASHBOARD_ADDRESS", user, "127.0.0.1:8787",
         "the dashboard's HOST:PORT (a busy port falls back to a free one)")
HERD_ENV(log_level, "HERD_LOG_LEVEL", user, "warning", "error, warning, info or debug: what herd's processes log")
HERD_ENV(local_directory, "HERD_LOCAL_DIRECTORY", user, "$SLURM_TMPDIR, else $TMPDIR or /tmp",
         "where a worker spills results to disk")
HERD_ENV(checkpoint_dir, "HERD_CHECKPOINT_DIR", user, "",
         "where this_task().checkpoint_path() puts checkpoints when the task names no directory")
HERD_ENV(scheduler, "HERD_SCHEDULER", user, "", "the scheduler herd status, explain and logs ask (--scheduler)")
HERD_ENV(slurm_poll_ms, "HERD_SLURM_POLL_MS", user, "1000", "how often a Slurm pool asks squeue (milliseconds)")
HERD_ENV(validate_state, "HERD_VALIDATE_STATE", user, "0",
         "1: the scheduler checks its core's invariants after every event and stops naming a broken one (tests)")
HERD_ENV(role, "HERD_ROLE", internal, "", "worker or scheduler: the role a re-executed program takes")
HERD_ENV(role_args, "HERD_ROLE_ARGS", internal, "", "that role's command-line arguments")
HERD_ENV(job_id, "HERD_JOB_ID", internal, "",
         "a worker's job (Slurm's job id, or local-N): its name and its pool's record; in a command of `herd submit`, "
         "its job's id")
HERD_ENV(task_id, "HERD_TASK_ID", internal, "", "a `herd submit` task's id in its job (its array index)")
HERD_ENV(entry, "HERD_ENTRY", internal, "", "a `herd submit --each-line` task's line")
HERD_ENV(pool, "HERD_POOL", internal, "", "the pool that started a worker")
HERD_ENV(workers_per_job, "HERD_WORKERS_PER_JOB", internal, "", "workers one job starts (processes x nodes)")
HERD_ENV(worker_index, "HERD_WORKER_INDEX", internal, "", "a worker's number among its node's workers of one job")
HERD_ENV(processes_per_node, "HERD_PROCESSES_PER_NODE", internal, "", "workers per node of one job: they share its memory")
HERD_ENV(walltime_s, "HERD_WALLTIME_S", internal, "", "the job's time limit, where Slurm does not say when it ends")
HERD_ENV(retire_before_s, "HERD_RETIRE_BEFORE_S", internal, "", "how long before its job's end a worker retires")
HERD_ENV(gpus_per_worker, "HERD_GPUS_PER_WORKER", internal, "", "each worker's share of its node's GPUs")
HERD_ENV(local_gpu_slices, "HERD_LOCAL_GPU_SLICES", internal, "", "a LocalCluster's GPUs, one slice per worker")
HERD_ENV(jobs_file, "HERD_JOBS_FILE", internal, "", "where a SlurmCluster's scheduler records its jobs")
HERD_ENV(trial_id, "HERD_TRIAL_ID", internal, "", "a sweep trial's id, in its command's environment")
HERD_ENV(trial_index, "HERD_TRIAL_INDEX", internal, "", "a sweep trial's index")
HERD_ENV(trial_budget, "HERD_TRIAL_BUDGET", internal, "", "a sweep trial's budget (early stopping)")
HERD_ENV(param, "HERD_PARAM_", internal, "", "a sweep trial's parameter <name>, as text")
HERD_ENV(param_quoted, "HERD_P_", internal, "", "a sweep parameter's value referenced from a shell command")
HERD_ENV(node_file, "HERD_NODE_FILE", internal, "", "a multi-node task's hosts, one a line (an MPI hostfile), in its shell commands' environment")
HERD_ENV(num_nodes, "HERD_NUM_NODES", internal, "", "how many nodes a multi-node task holds")
HERD_ENV(nodes, "HERD_NODES", internal, "", "a multi-node task's hosts, space-separated, its own first")
