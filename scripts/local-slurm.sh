#!/usr/bin/env bash
# local-slurm.sh — bring up a REAL one-node Slurm cluster in a private directory.
#
# Usage:
#   scripts/local-slurm.sh start    # install packages if missing, write config, start daemons,
#                                   # wait until the node is idle (idempotent)
#   scripts/local-slurm.sh stop     # cancel all jobs, stop every daemon of the cluster (idempotent)
#   scripts/local-slurm.sh status   # print daemons, sinfo and squeue; exit 0 if up, 1 if down
#   scripts/local-slurm.sh env      # print export lines: eval "$(scripts/local-slurm.sh env)"
#
# Environment (all optional; change them only while the cluster is stopped):
#   HERD_SLURM_DIR              private state directory          (default /tmp/herd-slurm)
#   HERD_SLURM_CTLD_PORT        SlurmctldPort                    (default 16817)
#   HERD_SLURM_SLURMD_PORT      SlurmdPort                       (default 16818)
#   HERD_SLURM_DB_PORT          private MariaDB TCP port         (default 16819)
#   HERD_SLURM_DBD_PORT         slurmdbd port (DbdPort)          (default 16820)
#   HERD_SLURM_ACCOUNTING       1: slurmdbd + private MariaDB, sacct works (default)
#                               0: no slurmdbd, sacct does not work
#   HERD_SLURM_CPUS             CPUs advertised by the node      (default 16)
#   HERD_SLURM_MEM_MB           RealMemory advertised (MB)       (default 16000)
#   HERD_SLURM_DEF_MEM_PER_CPU  DefMemPerCPU (MB)                (default 1000)
#   HERD_SLURM_GPUS             fake gpu GRES on the node        (default 4)
#   HERD_SLURM_CRED_EXPIRE      AuthInfo cred_expire (s)         (default 10)
#   HERD_SLURM_START_TIMEOUT    seconds to wait for an idle node (default 60)
#
# Nothing system-wide is configured or started: slurm.conf, slurmdbd.conf, gres.conf, spool and
# state dirs, logs, pid files, the munge key/socket/seed, and the MariaDB data dir and socket
# all live under $HERD_SLURM_DIR. Slurm reaches the private munged through
# AuthInfo=socket=..., clients find the private slurm.conf through SLURM_CONF (see `env`).
# The only system-wide effect is installing Debian packages (slurm-wlm, slurm-client, munge,
# and with accounting slurmdbd + mariadb-server; their own services are not started).
#
# Daemons run as root (SlurmUser=root). Cluster state (job ids, finished jobs, the accounting
# database) is kept across stop/start; `rm -rf $HERD_SLURM_DIR` while stopped for a fresh one.
#
# Behaviour worth knowing (Slurm 22.05.8, Debian 12):
# * `start` takes about 2-4 s (first start with a fresh dir: 4-11 s, MariaDB initialisation);
#   `stop` about 2-3 s. Jobs start 0.1-1.5 s after sbatch when resources are free
#   (sched_interval=2).
# * sacct works only with HERD_SLURM_ACCOUNTING=1 (slurmdbd); with 0 it prints "Slurm
#   accounting storage is disabled". State/ExitCode reach sacct about 0.1 s after the job
#   ends in scontrol, but for a very short job some fields (Partition, Start) may stay empty
#   for a few seconds more; sacct's default window starts at midnight (use -S for older jobs). Either way
#   finished jobs stay in `scontrol show job` / `squeue -t all` for MinJobAge=300 s and are
#   appended to $HERD_SLURM_DIR/log/jobcomp.log.
# * A submission rejected for a partition limit still uses a job id and shows in sacct as
#   FAILED (Reason PartitionTimeLimit); an invalid partition (-p nope) uses none.
# * Fake GPUs: Slurm 22.05 drops file-less gpu GRES ("Removing file-less GPU ... from final
#   GRES list", node INVAL), so each fake GPU gets File=$HERD_SLURM_DIR/dev/gpuI, a symlink to
#   /dev/null. `sbatch -p gpu --gres=gpu:1` runs, with CUDA_VISIBLE_DEVICES/SLURM_JOB_GPUS set.
# * A requeued job (scontrol requeue) waits Reason=BeginTime until its old credential expired,
#   i.e. cred_expire+1 s (about 11-15 s here instead of the default 121 s).
# * --signal=[B:]SIG@T may be delivered up to 60 s earlier than T before the time limit
#   (documented Slurm resolution), and slurmstepd writes "*** JOB n ON host CANCELLED AT ..."
#   into the output when it delivers it, although the job goes on (and may end COMPLETED).
#   Time limits are enforced with up to ~30 s delay, then TERM, KillWait=5 s, KILL.
# * EnforcePartLimits=ALL: a job over a partition limit (e.g. -p gpu -t 20) is rejected at
#   submission ("Requested time limit is invalid") instead of pending forever.
set -euo pipefail

PROG="local-slurm.sh"
log() { echo "[$PROG] $*" >&2; }
die() { echo "[$PROG] ERROR: $*" >&2; exit 1; }

DIR="${HERD_SLURM_DIR:-/tmp/herd-slurm}"
DIR="$(realpath -m -- "$DIR")"   # absolute, so the script works from any directory
case "$DIR" in
    / | /bin* | /boot* | /dev* | /etc* | /lib* | /proc* | /run | /sbin* | /sys* | /usr* | /var) \
        die "refusing HERD_SLURM_DIR=$DIR" ;;
esac
CTLD_PORT="${HERD_SLURM_CTLD_PORT:-16817}"
SLURMD_PORT="${HERD_SLURM_SLURMD_PORT:-16818}"
DB_PORT="${HERD_SLURM_DB_PORT:-16819}"
DBD_PORT="${HERD_SLURM_DBD_PORT:-16820}"
ACCOUNTING="${HERD_SLURM_ACCOUNTING:-1}"
NODE_CPUS="${HERD_SLURM_CPUS:-16}"
NODE_MEM="${HERD_SLURM_MEM_MB:-16000}"
DEF_MEM_PER_CPU="${HERD_SLURM_DEF_MEM_PER_CPU:-1000}"
NODE_GPUS="${HERD_SLURM_GPUS:-4}"
CRED_EXPIRE="${HERD_SLURM_CRED_EXPIRE:-10}"
START_TIMEOUT="${HERD_SLURM_START_TIMEOUT:-60}"
STOP_TIMEOUT=30
for v in CTLD_PORT SLURMD_PORT DB_PORT DBD_PORT NODE_CPUS NODE_MEM DEF_MEM_PER_CPU NODE_GPUS \
    CRED_EXPIRE START_TIMEOUT; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
[[ $ACCOUNTING == 0 || $ACCOUNTING == 1 ]] || die "HERD_SLURM_ACCOUNTING must be 0 or 1"

HOST="$(hostname -s)"
CLUSTER=herd

CONF="$DIR/etc/slurm.conf"
DBD_CONF="$DIR/etc/slurmdbd.conf"
GRES_CONF="$DIR/etc/gres.conf"
MUNGE_DIR="$DIR/munge"
MUNGE_KEY="$MUNGE_DIR/munge.key"
MUNGE_SOCKET="$MUNGE_DIR/munge.socket"
MUNGE_SEED="$MUNGE_DIR/munged.seed"
MUNGE_PID="$DIR/run/munged.pid"
MUNGE_LOG="$DIR/log/munged.log"
DB_DATA="$DIR/db/data"
DB_SOCKET="$DIR/run/mariadb.sock"
DB_PID="$DIR/run/mariadbd.pid"
DB_LOG="$DIR/log/mariadb.log"
DB_USER=slurm
DB_PASS=herd-local-slurm
DBD_PID="$DIR/run/slurmdbd.pid"
DBD_LOG="$DIR/log/slurmdbd.log"
CTLD_PID="$DIR/run/slurmctld.pid"
CTLD_LOG="$DIR/log/slurmctld.log"
SLURMD_PID="$DIR/run/slurmd.pid"
SLURMD_LOG="$DIR/log/slurmd.log"

# --------------------------------------------------------------------------------------------
# packages

is_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

ensure_packages() {
    # slurm-wlm pulls slurmctld + slurmd; slurm-client: sbatch/squeue/...; munge: munged.
    local want=(slurm-wlm slurmctld slurmd slurm-client munge) missing=() pkg bin
    if [[ $ACCOUNTING == 1 ]]; then
        want+=(slurmdbd mariadb-server mariadb-client)
    fi
    for pkg in "${want[@]}"; do
        is_installed "$pkg" || missing+=("$pkg")
    done
    if ((${#missing[@]} > 0)); then
        [[ $(id -u) -eq 0 ]] || die "packages missing (${missing[*]}) and not root to install them"
        log "installing missing packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null || die "apt-get update failed"
        # policy-rc.d or no init: the packages' own services need not (and should not) start.
        apt-get install -y -qq "${missing[@]}" >"$DIR/log/apt.log" 2>&1 \
            || { tail -n 20 "$DIR/log/apt.log" >&2; die "apt-get install ${missing[*]} failed"; }
    fi
    for bin in munged munge unmunge slurmctld slurmd sbatch sinfo squeue scancel scontrol; do
        command -v "$bin" >/dev/null || die "'$bin' not found (package install incomplete?)"
    done
    if [[ $ACCOUNTING == 1 ]]; then
        for bin in slurmdbd sacct sacctmgr mariadbd mariadb-install-db mariadb mariadb-admin; do
            command -v "$bin" >/dev/null || die "'$bin' not found (package install incomplete?)"
        done
    fi
}

# --------------------------------------------------------------------------------------------
# pid helpers

# True if process $1 exists and is not a zombie (a dead daemon waits for its reaper, init,
# which in some containers reaps only every few seconds).
running() {
    local stat
    kill -0 "$1" 2>/dev/null || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ ${stat:0:1} != Z && ${stat:0:1} != X ]]
}

# Prints the pid in pid file $1 if that process is alive and its command is $2; fails otherwise.
pid_alive() {
    local pidfile=$1 name=$2 pid comm
    [[ -s $pidfile ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n $pid ]] || return 1
    running "$pid" || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
    [[ $comm == "$name"* ]] || return 1
    echo "$pid"
}

# stop_daemon PIDFILE NAME: SIGTERM, bounded wait, then SIGKILL.
stop_daemon() {
    local pidfile=$1 name=$2 pid i
    if ! pid="$(pid_alive "$pidfile" "$name")"; then
        rm -f "$pidfile"
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
        running "$pid" || break
        sleep 0.1
    done
    if running "$pid"; then
        log "$name (pid $pid) did not exit within ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            running "$pid" || break
            sleep 0.2
        done
        running "$pid" && die "could not kill $name (pid $pid)"
    fi
    rm -f "$pidfile"
}

port_in_use() {
    command -v ss >/dev/null || return 1
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# check_port PORT WHAT VAR: fail early with a clear message when the port is taken.
check_port() {
    if port_in_use "$1"; then
        die "TCP port $1 for $2 is already in use (set $3 to another port)"
    fi
}

dump_logs() {
    local f
    for f in "$@"; do
        [[ -s $f ]] || continue
        echo "----- tail $f -----" >&2
        tail -n 25 "$f" >&2
    done
}

# --------------------------------------------------------------------------------------------
# config

write_config() {
    mkdir -p "$DIR"/{etc,log,run,dev,spool/slurmctld,spool/slurmd} "$MUNGE_DIR"
    chmod 0755 "$DIR" "$DIR/etc" "$DIR/run" "$DIR/dev" "$DIR/spool" "$DIR/log"
    chmod 0700 "$DIR/spool/slurmctld" "$DIR/spool/slurmd"
    chmod 0755 "$MUNGE_DIR" # clients (any user) must reach the socket

    local acct
    if [[ $ACCOUNTING == 1 ]]; then
        acct="# Accounting through the private slurmdbd (+ private MariaDB): sacct works.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=${DBD_PORT}
# For accounting_storage/slurmdbd this is the munge socket used to talk to slurmdbd (clients
# such as sacct/sacctmgr and slurmctld); AuthInfo=socket= alone does not cover that link.
AccountingStoragePass=${MUNGE_SOCKET}
# As on real clusters, a job must name an account the user belongs to (root is in 'root'):
# a wrong --account is refused at submission.
AccountingStorageEnforce=associations"
    else
        acct="# No slurmdbd: sacct does not work (\"Slurm accounting storage is disabled\").
AccountingStorageType=accounting_storage/none"
    fi
    local node_gres=""
    ((NODE_GPUS > 0)) && node_gres=" Gres=gpu:${NODE_GPUS}"

    local tmp="$CONF.tmp.$$"
    cat >"$tmp" <<EOF
# Generated by scripts/local-slurm.sh (private one-node cluster); rewritten by every start.
ClusterName=${CLUSTER}
SlurmctldHost=${HOST}(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${SLURMD_PORT}
SlurmUser=root
SlurmdUser=root

# Private munged. cred_expire is lowered from 120 s so that a requeued batch job becomes
# eligible again quickly: Slurm holds a requeued job (Reason=BeginTime) until its old launch
# credential has expired (cred_expire + 1 s).
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${MUNGE_SOCKET},cred_expire=${CRED_EXPIRE}

StateSaveLocation=${DIR}/spool/slurmctld
SlurmdSpoolDir=${DIR}/spool/slurmd
SlurmctldPidFile=${CTLD_PID}
SlurmdPidFile=${SLURMD_PID}
SlurmctldLogFile=${CTLD_LOG}
SlurmdLogFile=${SLURMD_LOG}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=${DIR}/etc/plugstack.conf
MailProg=/bin/true

# No cgroups (works in containers and sandboxes). The node advertises more CPUs/memory than
# the machine has (config_overrides) so that many small jobs run side by side.
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SwitchType=switch/none
LaunchType=launch/slurm
ReturnToService=2

SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default a job that gives no --mem gets all the node's memory, and jobs would run
# one at a time.
DefMemPerCPU=${DEF_MEM_PER_CPU}
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2,sched_min_interval=0,batch_sched_delay=0
SchedulerTimeSlice=30
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=120
SlurmdTimeout=300
MessageTimeout=30
MaxJobCount=100000
MaxArraySize=10001
JobRequeue=1
# Reject at submission a job that exceeds a partition limit (e.g. -p gpu -t 20 > MaxTime)
# instead of leaving it PENDING forever (Reason=PartitionTimeLimit).
EnforcePartLimits=ALL

${acct}
# Every finished job is also appended here, one line each (JobState=..., ExitCode=...).
JobCompType=jobcomp/filetxt
JobCompLoc=${DIR}/log/jobcomp.log

GresTypes=gpu
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${NODE_CPUS} RealMemory=${NODE_MEM}${node_gres} State=UNKNOWN
PartitionName=cpu Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=${HOST} Default=NO MaxTime=00:10:00 State=UP
EOF
    mv -f "$tmp" "$CONF"

    # Fake GPUs. gres/gpu in Slurm 22.05 drops file-less GPUs (node INVAL: "gres/gpu count
    # reported lower than configured"), so each fake GPU gets a File= that is a private
    # symlink to /dev/null (a character device; no mknod needed).
    rm -f "$DIR"/dev/gpu*
    local i
    for ((i = 0; i < NODE_GPUS; i++)); do
        ln -s /dev/null "$DIR/dev/gpu$i"
    done
    {
        echo "# Generated by scripts/local-slurm.sh. Fake GPUs: symlinks to /dev/null."
        if ((NODE_GPUS > 0)); then
            echo "NodeName=${HOST} Name=gpu File=${DIR}/dev/gpu[0-$((NODE_GPUS - 1))]"
        fi
    } >"$GRES_CONF"

    # No cgroup plugin is configured; a private file keeps any system-wide one out of the way.
    echo "# Generated by scripts/local-slurm.sh. No cgroup plugins are used." >"$DIR/etc/cgroup.conf"
    # Empty private SPANK plugin stack (the system /etc/slurm/plugstack.conf is not used).
    : >"$DIR/etc/plugstack.conf"

    if [[ $ACCOUNTING == 1 ]]; then
        tmp="$DBD_CONF.tmp.$$"
        (
            umask 077
            cat >"$tmp" <<EOF
# Generated by scripts/local-slurm.sh. Must be mode 0600 and owned by SlurmUser (root).
AuthType=auth/munge
AuthInfo=socket=${MUNGE_SOCKET}
DbdHost=${HOST}
DbdAddr=127.0.0.1
DbdPort=${DBD_PORT}
SlurmUser=root
DebugLevel=info
LogFile=${DBD_LOG}
PidFile=${DBD_PID}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${DB_PORT}
StorageUser=${DB_USER}
StoragePass=${DB_PASS}
StorageLoc=slurm_acct_db
EOF
        )
        chmod 0600 "$tmp"
        mv -f "$tmp" "$DBD_CONF"
    else
        rm -f "$DBD_CONF"
    fi
}

# --------------------------------------------------------------------------------------------
# daemons

start_munged() {
    pid_alive "$MUNGE_PID" munged >/dev/null && return 0
    if [[ ! -s $MUNGE_KEY ]]; then
        log "creating private munge key $MUNGE_KEY"
        (umask 077; mungekey --create --keyfile="$MUNGE_KEY" --force >/dev/null 2>&1) \
            || (umask 077; dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none) \
            || die "could not create munge key $MUNGE_KEY"
    fi
    chmod 0600 "$MUNGE_KEY"
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    # --force: run although the dirs are not owned by the munge user.
    munged --force --num-threads=4 \
        --key-file="$MUNGE_KEY" \
        --socket="$MUNGE_SOCKET" \
        --pid-file="$MUNGE_PID" \
        --log-file="$MUNGE_LOG" \
        --seed-file="$MUNGE_SEED" \
        </dev/null >>"$DIR/log/munged.out" 2>&1 \
        || { dump_logs "$DIR/log/munged.out" "$MUNGE_LOG"; die "munged failed to start"; }
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -S $MUNGE_SOCKET ]] && pid_alive "$MUNGE_PID" munged >/dev/null && break
        sleep 0.1
    done
    [[ -S $MUNGE_SOCKET ]] || { dump_logs "$MUNGE_LOG"; die "munged socket $MUNGE_SOCKET did not appear"; }
    munge -n --socket="$MUNGE_SOCKET" | unmunge --socket="$MUNGE_SOCKET" >/dev/null 2>&1 \
        || { dump_logs "$MUNGE_LOG"; die "munge/unmunge round-trip through $MUNGE_SOCKET failed"; }
}

db_sql() {
    mariadb --no-defaults --protocol=socket --socket="$DB_SOCKET" -u root -N -B -e "$1"
}

start_mariadb() {
    pid_alive "$DB_PID" mariadbd >/dev/null && return 0
    check_port "$DB_PORT" "MariaDB" HERD_SLURM_DB_PORT
    mkdir -p "$DIR/db"
    if [[ ! -d $DB_DATA/mysql ]]; then
        log "initialising private MariaDB in $DB_DATA"
        rm -rf "$DB_DATA"
        mariadb-install-db --no-defaults --user=root --datadir="$DB_DATA" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$DIR/log/mariadb-install.log" 2>&1 \
            || { dump_logs "$DIR/log/mariadb-install.log"; die "mariadb-install-db failed"; }
    fi
    rm -f "$DB_SOCKET" "$DB_SOCKET.lock"
    # mariadbd does not daemonize itself: detach it into its own session.
    (
        cd "$DIR/db"
        setsid mariadbd --no-defaults --user=root --datadir="$DB_DATA" \
            --socket="$DB_SOCKET" --port="$DB_PORT" --bind-address=127.0.0.1 \
            --pid-file="$DB_PID" --log-error="$DB_LOG" --skip-name-resolve --skip-log-bin \
            --innodb-buffer-pool-size=512M --innodb-log-file-size=64M \
            --innodb-lock-wait-timeout=900 --max-connections=100 \
            </dev/null >>"$DIR/log/mariadb.out" 2>&1 &
    )
    local deadline=$((SECONDS + START_TIMEOUT))
    until mariadb-admin --no-defaults --protocol=socket --socket="$DB_SOCKET" -u root \
        --connect-timeout=2 ping >/dev/null 2>&1; do
        if ((SECONDS > deadline)); then
            dump_logs "$DB_LOG" "$DIR/log/mariadb.out"
            die "MariaDB did not answer on $DB_SOCKET within ${START_TIMEOUT}s"
        fi
        sleep 0.3
    done
    db_sql "CREATE USER IF NOT EXISTS '${DB_USER}'@'127.0.0.1' IDENTIFIED BY '${DB_PASS}';
            GRANT ALL ON slurm_acct_db.* TO '${DB_USER}'@'127.0.0.1';" \
        || die "could not create the MariaDB user for slurmdbd (log: $DB_LOG)"
}

start_slurmdbd() {
    pid_alive "$DBD_PID" slurmdbd >/dev/null && return 0
    check_port "$DBD_PORT" "slurmdbd" HERD_SLURM_DBD_PORT
    SLURM_CONF="$CONF" slurmdbd </dev/null >>"$DIR/log/slurmdbd.out" 2>&1 \
        || { dump_logs "$DBD_LOG" "$DIR/log/slurmdbd.out"; die "slurmdbd failed to start"; }
    # Ready once it answers sacctmgr (first start creates the database tables: a few seconds).
    local deadline=$((SECONDS + START_TIMEOUT))
    until SLURM_CONF="$CONF" timeout 10 sacctmgr -n -P list cluster >/dev/null 2>&1; do
        if ((SECONDS > deadline)); then
            dump_logs "$DBD_LOG" "$DIR/log/slurmdbd.out"
            die "slurmdbd did not answer on port $DBD_PORT within ${START_TIMEOUT}s"
        fi
        if ! pid_alive "$DBD_PID" slurmdbd >/dev/null; then
            sleep 1
            pid_alive "$DBD_PID" slurmdbd >/dev/null \
                || { dump_logs "$DBD_LOG" "$DIR/log/slurmdbd.out"; die "slurmdbd exited during start-up"; }
        fi
        sleep 0.5
    done
    # Register the cluster so that slurmctld's records are accepted from the first job on.
    if ! SLURM_CONF="$CONF" sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER"; then
        SLURM_CONF="$CONF" sacctmgr -i add cluster "$CLUSTER" >/dev/null \
            || die "sacctmgr add cluster $CLUSTER failed (log: $DBD_LOG)"
    fi
}

start_slurmctld() {
    pid_alive "$CTLD_PID" slurmctld >/dev/null && return 0
    check_port "$CTLD_PORT" "slurmctld" HERD_SLURM_CTLD_PORT
    SLURM_CONF="$CONF" slurmctld -f "$CONF" </dev/null >>"$DIR/log/slurmctld.out" 2>&1 \
        || { dump_logs "$CTLD_LOG" "$DIR/log/slurmctld.out"; die "slurmctld failed to start"; }
}

SLURMD_STARTED_AT=0
start_slurmd() {
    pid_alive "$SLURMD_PID" slurmd >/dev/null && return 0
    check_port "$SLURMD_PORT" "slurmd" HERD_SLURM_SLURMD_PORT
    SLURMD_STARTED_AT=$(date +%s)
    SLURM_CONF="$CONF" slurmd -f "$CONF" -N "$HOST" </dev/null >>"$DIR/log/slurmd.out" 2>&1 \
        || { dump_logs "$SLURMD_LOG" "$DIR/log/slurmd.out"; die "slurmd failed to start"; }
}

# "name pidfile" for every daemon of the cluster, in start order.
daemons() {
    echo "munged $MUNGE_PID"
    if [[ $ACCOUNTING == 1 || -s $DB_PID || -s $DBD_PID ]]; then
        echo "mariadbd $DB_PID"
        echo "slurmdbd $DBD_PID"
    fi
    echo "slurmctld $CTLD_PID"
    echo "slurmd $SLURMD_PID"
}

all_up() {
    local name pidfile
    while read -r name pidfile; do
        pid_alive "$pidfile" "$name" >/dev/null || return 1
    done < <(daemons)
}

# Prints the node state as sinfo sees it ("idle", "mixed", "down*", ...), or nothing.
node_state() {
    SLURM_CONF="$CONF" timeout 10 sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | head -n 1 || true
}

# True once slurmctld has processed a registration of the slurmd we started (SlurmdStartTime
# not older than its launch). Needed because slurmctld restores the node as IDLE from its
# saved state before slurmd has registered, and a job sent to it then would fail to launch.
slurmd_registered() {
    ((SLURMD_STARTED_AT > 0)) || return 0
    local line ts epoch
    line="$(SLURM_CONF="$CONF" timeout 10 scontrol -o show node "$HOST" 2>/dev/null || true)"
    ts="$(grep -o 'SlurmdStartTime=[^ ]*' <<<"$line" | cut -d= -f2 || true)"
    [[ -n $ts && $ts != None ]] || return 1
    epoch="$(date -d "$ts" +%s 2>/dev/null)" || return 1
    ((epoch >= SLURMD_STARTED_AT - 1))
}

# --------------------------------------------------------------------------------------------
# commands

cmd_start() {
    if all_up; then
        local st
        st="$(node_state)"
        case "$st" in
            idle | mixed | allocated | alloc | completing)
                log "already running (node $HOST: $st); SLURM_CONF=$CONF"
                return 0 ;;
        esac
    fi
    [[ $(id -u) -eq 0 ]] || die "start must run as root (the daemons run as SlurmUser=root)"
    mkdir -p "$DIR/log"
    ensure_packages
    local t0=$SECONDS
    # Fail before starting anything when a port of a daemon still to start is taken.
    pid_alive "$CTLD_PID" slurmctld >/dev/null || check_port "$CTLD_PORT" slurmctld HERD_SLURM_CTLD_PORT
    pid_alive "$SLURMD_PID" slurmd >/dev/null || check_port "$SLURMD_PORT" slurmd HERD_SLURM_SLURMD_PORT
    if [[ $ACCOUNTING == 1 ]]; then
        pid_alive "$DB_PID" mariadbd >/dev/null || check_port "$DB_PORT" MariaDB HERD_SLURM_DB_PORT
        pid_alive "$DBD_PID" slurmdbd >/dev/null || check_port "$DBD_PORT" slurmdbd HERD_SLURM_DBD_PORT
    fi
    write_config
    start_munged
    if [[ $ACCOUNTING == 1 ]]; then
        start_mariadb
        start_slurmdbd
    fi
    start_slurmctld
    start_slurmd

    local st="" deadline=$((SECONDS + START_TIMEOUT)) logs=("$CTLD_LOG" "$SLURMD_LOG" "$DIR/log/slurmctld.out" "$DIR/log/slurmd.out")
    while :; do
        st="$(node_state)"
        case "$st" in
            idle | mixed | allocated | alloc | completing) slurmd_registered && break ;;
        esac
        if ((SECONDS > deadline)); then
            dump_logs "${logs[@]}"
            case "$st" in
                idle | mixed | allocated | alloc | completing)
                    die "slurmd on $HOST did not register with slurmctld within ${START_TIMEOUT}s" ;;
                *) die "node $HOST not idle after ${START_TIMEOUT}s (state: '${st:-no answer from slurmctld}')" ;;
            esac
        fi
        if ! pid_alive "$CTLD_PID" slurmctld >/dev/null; then
            sleep 1 # slurmctld writes its pid file a moment after forking
            pid_alive "$CTLD_PID" slurmctld >/dev/null || { dump_logs "${logs[@]}"; die "slurmctld exited during start-up"; }
        fi
        if ! pid_alive "$SLURMD_PID" slurmd >/dev/null; then
            sleep 1
            pid_alive "$SLURMD_PID" slurmd >/dev/null || { dump_logs "${logs[@]}"; die "slurmd exited during start-up"; }
        fi
        # A node left DOWN/DRAINED by an earlier run: bring it back.
        case "$st" in
            down* | drain* | fail*)
                SLURM_CONF="$CONF" scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        sleep 0.3
    done
    log "up in $((SECONDS - t0))s: node $HOST $st; eval \"\$($0 env)\" to use it (SLURM_CONF=$CONF)"
}

cmd_stop() {
    if pid_alive "$CTLD_PID" slurmctld >/dev/null; then
        # Cancel every job of this private cluster (any user), then let slurmd kill them.
        local ids i
        ids="$(SLURM_CONF="$CONF" timeout 10 squeue -h -o '%F' 2>/dev/null | sort -u || true)"
        if [[ -n $ids ]]; then
            log "cancelling jobs: $(tr '\n' ' ' <<<"$ids")"
            # shellcheck disable=SC2086
            SLURM_CONF="$CONF" timeout 20 scancel --quiet $ids 2>/dev/null || true
            for ((i = 0; i < 40; i++)); do
                [[ -z "$(SLURM_CONF="$CONF" timeout 10 squeue -h -t pending,running,completing -o '%i' 2>/dev/null || true)" ]] && break
                sleep 0.5
            done
        fi
    fi
    # Reverse start order, and always every daemon that has a pid file (whatever the mode).
    stop_daemon "$SLURMD_PID" slurmd
    stop_daemon "$CTLD_PID" slurmctld
    stop_daemon "$DBD_PID" slurmdbd
    stop_daemon "$DB_PID" mariadbd
    stop_daemon "$MUNGE_PID" munged
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock" "$DB_SOCKET"
    log "stopped (state kept in $DIR)"
}

cmd_status() {
    local up=1 name pidfile pid
    while read -r name pidfile; do
        if pid="$(pid_alive "$pidfile" "$name")"; then
            echo "$name: running (pid $pid)"
        else
            echo "$name: not running"
            up=0
        fi
    done < <(daemons)
    if ((up)); then
        echo "SLURM_CONF=$CONF"
        echo "--- sinfo"
        SLURM_CONF="$CONF" timeout 10 sinfo || up=0
        echo "--- squeue"
        SLURM_CONF="$CONF" timeout 10 squeue || up=0
    fi
    if ((up)); then
        echo "local slurm cluster: UP"
        return 0
    fi
    echo "local slurm cluster: DOWN"
    return 1
}

cmd_env() {
    printf 'export SLURM_CONF=%q\n' "$CONF"
    printf 'export HERD_SLURM_DIR=%q\n' "$DIR"
}

usage() {
    sed -n '4,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) usage ;;
esac
