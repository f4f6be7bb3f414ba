#!/usr/bin/env bash
# local-slurm.sh — bring up a REAL Slurm cluster in a private directory: one node on this machine
# (the default), or a login host and N compute hosts emulated with network namespaces.
#
# Usage:
#@  scripts/local-slurm.sh start [--nodes N]  # install packages if missing, write config, start
#@                                            # daemons, wait until every node is idle (idempotent).
#@                                            # Without --nodes: one node, no namespaces.
#@  scripts/local-slurm.sh stop [--multi]     # cancel all jobs, stop every daemon (idempotent);
#@                                            # --multi: the multi-node cluster, namespaces and all
#@  scripts/local-slurm.sh status [--multi]   # daemons, hosts, sinfo, squeue; exit 0 if up, 1 if down
#@  scripts/local-slurm.sh env [--multi]      # export lines: eval "$(scripts/local-slurm.sh env)"
#@ Multi-node cluster only (HOST: login, node1..nodeN):
#@  scripts/local-slurm.sh exec HOST -- CMD [ARGS...]  # run CMD on HOST (its network, hostname and
#@                                            # /etc/hosts; your environment; CMD's exit code)
#@  scripts/local-slurm.sh link-down HOST | link-up HOST     # pull / plug HOST's cable (silent)
#@  scripts/local-slurm.sh crash HOST | revive HOST          # SIGKILL all of HOST / start it again
#@  scripts/local-slurm.sh freeze HOST | thaw HOST           # stop every process of HOST where it
#@                                            # is (a hung node) / let them all go on
#@  scripts/local-slurm.sh slow HOST RATE [DELAY] | unslow HOST  # e.g. slow node2 20mbit
#@  scripts/local-slurm.sh partition HOST_A HOST_B            # drop traffic between the two hosts
#@  scripts/local-slurm.sh heal [HOST_A HOST_B]               # undo one partition, or all of them
#@  scripts/local-slurm.sh firewall HOST PORT... | unfirewall HOST  # HOST drops new TCP connections
#@                                            # except to PORTs and Slurm's own (silently, as a firewall)
#@  scripts/local-slurm.sh repair          # undo every fault: links up, full speed, no partition,
#@                                        # frozen hosts thawed, crashed hosts revived; wait until
#@                                        # every node is usable
#
# Environment (all optional; change them only while the cluster is stopped):
#   HERD_SLURM_DIR              one-node state directory         (default /tmp/herd-slurm)
#   HERD_SLURM_MULTI_DIR        multi-node state directory       (default /tmp/herd-slurm-multi)
#   HERD_SLURM_CTLD_PORT        SlurmctldPort                    (default 16817)
#   HERD_SLURM_SLURMD_PORT      SlurmdPort                       (default 16818)
#   HERD_SLURM_DB_PORT          private MariaDB TCP port         (default 16819)
#   HERD_SLURM_DBD_PORT         slurmdbd port (DbdPort)          (default 16820)
#   HERD_SLURM_ACCOUNTING       1: slurmdbd + private MariaDB, sacct works (default)
#                               0: no slurmdbd, sacct does not work
#   HERD_SLURM_CPUS             CPUs advertised by each node     (default 16)
#   HERD_SLURM_MEM_MB           RealMemory advertised (MB)       (default 16000)
#   HERD_SLURM_DEF_MEM_PER_CPU  DefMemPerCPU (MB)                (default 1000)
#   HERD_SLURM_GPUS             fake gpu GRES on each node       (default 4)
#   HERD_SLURM_CRED_EXPIRE      AuthInfo cred_expire (s)         (default 10)
#   HERD_SLURM_START_TIMEOUT    seconds to wait for idle nodes   (default 60)
# Multi-node cluster only:
#   HERD_SLURM_SUBNET           the hosts' /24                   (default 198.18.0.0/24, RFC 2544)
#   HERD_SLURM_NETNS_PREFIX     prefix of the namespace names    (default herd-)
#   HERD_SLURM_SLURMD_TIMEOUT   SlurmdTimeout (s)                (default 10)
#
# Nothing system-wide is configured or started: slurm.conf, slurmdbd.conf, gres.conf, spool and
# state dirs, logs, pid files, the munge key/socket/seed, and the MariaDB data dir and socket
# all live under the state directory. Slurm reaches the private munged through
# AuthInfo=socket=..., clients find the private slurm.conf through SLURM_CONF (see `env`).
# The only system-wide effect of the one-node cluster is installing Debian packages (slurm-wlm,
# slurm-client, munge, and with accounting slurmdbd + mariadb-server; their own services are
# not started). The ports are those of this machine's network namespace.
#
# Daemons run as root (SlurmUser=root). Cluster state (job ids, finished jobs, the accounting
# database) is kept across stop/start; `rm -rf` the state directory while stopped for a fresh one.
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
#
# Many hosts on one machine (start --nodes N):
# * Hosts `login` and `node1`..`nodeN`. Each is a network namespace (herd-login, herd-node1...:
#   `ip netns list`; prefix HERD_SLURM_NETNS_PREFIX) with one interface, eth0, at <subnet>.1
#   (login) or <subnet>.(10+I) (nodeI), and no route but its /24: nothing it sends can leave the
#   namespaces made here. The eth0s are veths whose other ends hang on a bridge, br0, in one more
#   namespace, herd-switch, which has no address at all. The machine's own namespace (its
#   interfaces, routes, firewall) is not touched. IPv6 is off on eth0 and in the switch.
# * Everything started "on" a host goes through `exec`: it enters the host's network namespace
#   and a fresh UTS namespace (hostname = the host's name) and mount namespace in which
#   $DIR/etc/hosts.HOST is bind-mounted over /etc/hosts (Debian style: 127.0.0.1 localhost,
#   127.0.1.1 the host's own name, the other hosts' names → their addresses). The rest of the
#   filesystem is shared, as on a cluster: /tmp, $HOME, the build tree, the munge socket.
#   Every process of a host also sits in the cgroup <cgroup2 root>/herd-hosts/HOST (on a
#   hybrid v1/v2 machine the root is /sys/fs/cgroup/unified), so that `crash` kills all of them
#   at once (cgroup.kill), and then anything else found in the host's network namespace.
# * slurmctld, slurmdbd, MariaDB and munged run on login; one slurmd per compute host
#   (NodeName=nodeI NodeAddr=<its address>; spool, log and pid file per node). Partitions cpu and
#   gpu span all nodes; CR_LLN spreads jobs over the least loaded nodes. Slurm commands work on
#   any host (`exec login -- sinfo`), not in this machine's own namespace (no route there).
#   Ports are the same as the one-node cluster's, in other namespaces: both can run at once.
#   SlurmdTimeout=10 s and MessageTimeout=5 s (one-node: 300 and 30), so that Slurm notices a
#   dead node within a test's patience.
# * link-down takes the switch's end of HOST's veth down: HOST's eth0 loses carrier, nothing is
#   answered, no RST. Established TCP connections hang (retransmissions) and go on after
#   link-up (1-3 s later). A new connection to a host whose link is down fails with "No route
#   to host" once ARP gives up: after 3 s without a cached entry, ~40 s with one (measured).
#   partition drops (nft, in both hosts' namespaces) every packet coming from the other host:
#   silent, connections hang, other pairs are unaffected. slow puts a tbf on both directions of
#   HOST's link (20mbit: 5 MB in 1.8 s; measured). DELAY needs the kernel's sch_netem: this
#   machine's kernel has none, so `slow HOST RATE DELAY` says so and changes nothing (the netem
#   path is untested).
# * crash SIGKILLs every process of HOST at once (slurmd, slurmstepd, jobs, anything `exec`ed
#   there). The host's kernel stays: its address still answers, closed ports with RST (for a
#   host that vanishes silently: crash, then link-down). revive starts slurmd again (on login:
#   munged, MariaDB, slurmdbd, slurmctld) and waits until Slurm has the node back: ~1 s.
# * Measured here (Slurm 22.05.8, 2 cores, load average 2-6 from other builds): `start --nodes
#   3` 3.5-4 s (11 s the first time: MariaDB initialisation); `stop --multi` 2-4 s, ~11 s when
#   a crashed node still holds a job (5 s of waiting for the cancelled job, 4-5 s for slurmctld
#   to give up on the node). After a crash, sinfo shows the node `idle*` (not responding) at
#   10-11 s and `down*` at 17-20 s (7 runs), and its running job ends NODE_FAIL then;
#   `revive` takes ~1 s (login: ~7 s, MariaDB recovers from the SIGKILL). With MessageTimeout=10 it was 25-28 s:
#   slurmctld waits for a failed ping for MessageTimeout, and sets a node DOWN only on the ping
#   cycle after SlurmdTimeout has passed since its last answer (ping_nodes.c). A link down for
#   longer than that (~20 s) does the same (its jobs are requeued: JobRequeue=1); after
#   link-up or revive the node is back in 1-3 s by itself (ReturnToService=2). The bed's smoke
#   test (test_multinode_bed) takes ~35 s, the crash case ~20 s of it; herd's own multinode
#   tests (test_multinode_herd) ~2.5-3 min. A node that is frozen with its cable out is `down*`
#   after 12-18 s; the jobs it ran are then NODE_FAIL and requeued, and Slurm kills what is left
#   of them there when the node comes back.
# * freeze stops every process of HOST where it is (the cgroup's freezer, cgroup.freeze; what
#   else runs in its network namespace gets SIGSTOP), as a hung node does: slurmd and the jobs
#   answer nothing, connections stay open, and after thaw every process goes on from where it
#   was, with all that it believed then: a node that was given up for lost comes back stale.
#   With link-down first, nothing at all leaves it (no FIN, no RST) until link-up + thaw.
# * Slurm quirks met: srun and sbatch -N 2 work across hosts although each host calls itself
#   127.0.1.1, because slurmd answers at the address a request came from, and NodeAddr gives
#   slurmctld the nodes' real addresses. munged's credentials carry origin 127.0.1.1 (login);
#   Slurm does not check it. Restarting with another node count keeps the state: jobs that
#   named a node that is gone are logged as errors ("Node node3 has vanished"), harmlessly.
set -euo pipefail

PROG="local-slurm.sh"
SELF="$(realpath -- "${BASH_SOURCE[0]}")"
log() { echo "[$PROG] $*" >&2; }
die() { echo "[$PROG] ERROR: $*" >&2; exit 1; }

usage() {
    grep '^#@' "$SELF" | sed 's/^#@//' >&2
    exit 2
}

# --------------------------------------------------------------------------------------------
# command line: the verb decides which cluster (one-node or multi-node) it is about

VERB="${1:-}"
[[ $# -gt 0 ]] && shift
MULTI=0
NODES_ARG=""
ARGS=()
case "$VERB" in
    start)
        while (($#)); do
            case "$1" in
                --nodes) (($# >= 2)) || die "--nodes needs a number"; NODES_ARG=$2; shift 2 ;;
                --nodes=*) NODES_ARG=${1#--nodes=}; shift ;;
                --multi) MULTI=1; shift ;;
                *) die "start: unknown argument '$1' (start [--nodes N])" ;;
            esac
        done
        if [[ -n $NODES_ARG ]]; then
            [[ $NODES_ARG =~ ^[0-9]+$ ]] && ((NODES_ARG >= 1 && NODES_ARG <= 200)) \
                || die "--nodes must be a number from 1 to 200, got '$NODES_ARG'"
            NODES_ARG=$((10#$NODES_ARG))
            MULTI=1
        fi ;;
    stop | status | env)
        while (($#)); do
            case "$1" in
                --multi) MULTI=1; shift ;;
                *) die "$VERB: unknown argument '$1' ($VERB [--multi])" ;;
            esac
        done ;;
    exec | link-down | link-up | crash | revive | freeze | thaw | slow | unslow | partition | heal | firewall | \
        unfirewall | repair)
        MULTI=1
        ARGS=("$@") ;;
    -h | --help | help | "") usage ;;
    *) echo "[$PROG] ERROR: unknown command '$VERB'" >&2; usage ;;
esac

if ((MULTI)); then
    DIR="${HERD_SLURM_MULTI_DIR:-/tmp/herd-slurm-multi}"
else
    DIR="${HERD_SLURM_DIR:-/tmp/herd-slurm}"
fi
DIR="$(realpath -m -- "$DIR")"   # absolute, so the script works from any directory
case "$DIR" in
    / | /bin* | /boot* | /dev* | /etc* | /lib* | /proc* | /run | /sbin* | /sys* | /usr* | /var) \
        die "refusing state directory $DIR" ;;
esac
if ((MULTI)); then
    [[ $DIR != "$(realpath -m -- "${HERD_SLURM_DIR:-/tmp/herd-slurm}")" ]] \
        || die "HERD_SLURM_MULTI_DIR and HERD_SLURM_DIR are both $DIR; the two clusters need their own"
elif [[ -e $DIR/etc/nodes ]]; then
    die "$DIR holds the multi-node cluster; use --multi (its directory is HERD_SLURM_MULTI_DIR)"
fi
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
SLURMD_TIMEOUT="${HERD_SLURM_SLURMD_TIMEOUT:-10}"
STOP_TIMEOUT=30
for v in CTLD_PORT SLURMD_PORT DB_PORT DBD_PORT NODE_CPUS NODE_MEM DEF_MEM_PER_CPU NODE_GPUS \
    CRED_EXPIRE START_TIMEOUT SLURMD_TIMEOUT; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
[[ $ACCOUNTING == 0 || $ACCOUNTING == 1 ]] || die "HERD_SLURM_ACCOUNTING must be 0 or 1"

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

if ((MULTI)); then
    # The controller's host, and the prefix that runs a command there (see in_host).
    HOST=login
    CTL=(in_host login)
    PREFIX="${HERD_SLURM_NETNS_PREFIX:-herd-}"
    SUBNET="${HERD_SLURM_SUBNET:-198.18.0.0/24}"
    # Every verb but start works on the cluster as it was started (start records both).
    if [[ $VERB != start && -s $DIR/etc/network ]]; then
        read -r SUBNET PREFIX <"$DIR/etc/network" || true
    fi
    [[ $PREFIX =~ ^[a-z][a-z0-9-]{0,7}$ ]] \
        || die "HERD_SLURM_NETNS_PREFIX must be 1-8 of [a-z0-9-], starting with a letter; got '$PREFIX'"
    [[ $SUBNET =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.0/24$ ]] \
        && ((BASH_REMATCH[1] <= 255 && BASH_REMATCH[2] <= 255 && BASH_REMATCH[3] <= 255)) \
        || die "HERD_SLURM_SUBNET must be a /24 written a.b.c.0/24, got '$SUBNET'"
    NET3="${SUBNET%.0/24}"
    SWITCH_NS="${PREFIX}switch"
    NETNS_DIR=/run/netns
else
    HOST="$(hostname -s)"
    CTL=()
fi

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
    if ((MULTI)); then
        # ip/tc (iproute2), nsenter/unshare (util-linux), nft (nftables) for the hosts.
        want+=(iproute2 util-linux nftables)
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
    if ((MULTI)); then
        for bin in ip tc nft nsenter unshare; do
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

# check_port PORT WHAT VAR: fail early with a clear message when the port is taken. The
# multi-node cluster's ports are in namespaces made for it: nothing else can hold them.
check_port() {
    ((MULTI)) && return 0
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
# hosts of the multi-node cluster: names, addresses, namespaces, cgroups

# The node count of the cluster in $DIR (recorded by start), or nothing.
recorded_nodes() {
    local n
    n="$(cat "$DIR/etc/nodes" 2>/dev/null || true)"
    [[ $n =~ ^[0-9]+$ ]] && echo "$n"
    return 0
}

NODES=0
HOSTS=()      # login node1 .. nodeN
set_nodes() {
    local i
    NODES=$1
    HOSTS=(login)
    for ((i = 1; i <= NODES; i++)); do HOSTS+=("node$i"); done
}

compute_hosts() { echo "${HOSTS[@]:1}"; }

host_addr() {
    case "$1" in
        login) echo "$NET3.1" ;;
        node*) echo "$NET3.$((10 + ${1#node}))" ;;
    esac
}

host_ns() { echo "${PREFIX}$1"; }

ns_exists() { [[ -e $NETNS_DIR/$1 ]]; }

# Our namespaces that exist now (also those of an earlier run with another node count).
existing_ns() {
    local f name
    for f in "$NETNS_DIR"/*; do
        [[ -e $f ]] || continue
        name="${f##*/}"
        [[ $name =~ ^${PREFIX}(login|switch|node[0-9]+)$ ]] && echo "$name"
    done
    return 0
}

# in_ns NS CMD...: CMD in network namespace NS only (administration: sysctl, nft).
in_ns() {
    local ns=$1
    shift
    nsenter --net="$NETNS_DIR/$ns" -- "$@"
}

# The cgroup2 hierarchy (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid system).
cgroup2_root() {
    awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts
}
CG_DIR=""
if ((MULTI)); then
    CG_DIR="$(cgroup2_root)"
    [[ -n $CG_DIR ]] && CG_DIR="$CG_DIR/${PREFIX}hosts"
fi

cg_usable() { [[ -n $CG_DIR && -w $CG_DIR ]]; }

# Puts the calling (sub)shell into HOST's cgroup, so that all it starts belongs to HOST.
cg_join() {
    [[ -n $CG_DIR && -d $CG_DIR/$1 ]] || return 0
    echo "$BASHPID" >"$CG_DIR/$1/cgroup.procs" 2>/dev/null || true
}

host_argv() {
    local host=$1
    shift
    HOST_ARGV=(nsenter "--net=$NETNS_DIR/$(host_ns "$host")" --
        unshare --uts --mount --propagation slave --
        /bin/sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
        herd-host "$host" "$DIR/etc/hosts.$host" "$@")
}

# in_host HOST CMD...: runs CMD on HOST and waits for it (see "Many hosts on one machine").
in_host() {
    local host=$1
    shift
    host_argv "$host" "$@"
    (
        cg_join "$host"
        exec "${HOST_ARGV[@]}"
    )
}

# Pids of every process of HOST: its cgroup and its network namespace.
host_pids() {
    local h=$1
    {
        [[ -n $CG_DIR && -r $CG_DIR/$h/cgroup.procs ]] && cat "$CG_DIR/$h/cgroup.procs"
        ns_exists "$(host_ns "$h")" && ip netns pids "$(host_ns "$h")" 2>/dev/null
        true
    } | grep -vx -e "$$" -e "$BASHPID" | sort -un
}

# SIGKILL every process of HOST: the cgroup at once, then whatever else is in the namespace.
# Prints how many processes there were.
kill_host() {
    local h=$1 pids n i
    pids="$(host_pids "$h")"
    n=$(grep -c . <<<"$pids" || true)
    if [[ -n $CG_DIR && -e $CG_DIR/$h/cgroup.kill ]]; then
        echo 1 >"$CG_DIR/$h/cgroup.kill" 2>/dev/null || true
    fi
    for ((i = 0; i < 100; i++)); do
        pids="$(host_pids "$h")"
        [[ -z $pids ]] && break
        # shellcheck disable=SC2086
        { kill -STOP $pids; kill -KILL $pids; } 2>/dev/null || true
        sleep 0.05
    done
    [[ -z "$(host_pids "$h")" ]] || log "warning: processes left on $h: $(host_pids "$h" | tr '\n' ' ')"
    echo "$n"
}

# Pids of HOST's network namespace that are not in its cgroup (what the freezer cannot reach).
ns_only_pids() {
    local h=$1
    ns_exists "$(host_ns "$h")" || return 0
    local in_cg=""
    [[ -n $CG_DIR && -r $CG_DIR/$h/cgroup.procs ]] && in_cg="$(cat "$CG_DIR/$h/cgroup.procs")"
    ip netns pids "$(host_ns "$h")" 2>/dev/null | grep -vx -e "$$" -e "$BASHPID" | grep -vxF -f <(echo "$in_cg") || true
}

# "1" if HOST is frozen (its cgroup's freezer is on), else "0".
frozen_state() {
    local f="$CG_DIR/$1/cgroup.freeze"
    if [[ -n $CG_DIR && -r $f ]]; then cat "$f"; else echo 0; fi
}

# Stops (1) or lets go on (0) every process of HOST: the cgroup's freezer, and SIGSTOP/SIGCONT
# for anything in its namespace outside the cgroup.
freeze_host() {
    local h=$1 on=$2 i pids
    if [[ -n $CG_DIR && -e $CG_DIR/$h/cgroup.freeze ]]; then
        echo "$on" >"$CG_DIR/$h/cgroup.freeze" || die "could not write $CG_DIR/$h/cgroup.freeze"
        # The freezer takes effect asynchronously: cgroup.events says when every task is there.
        for ((i = 0; i < 100; i++)); do
            grep -qx "frozen $on" "$CG_DIR/$h/cgroup.events" 2>/dev/null && break
            sleep 0.02
        done
    fi
    pids="$(ns_only_pids "$h")"
    if [[ -n $pids ]]; then
        # shellcheck disable=SC2086
        if ((on)); then kill -STOP $pids 2>/dev/null || true; else kill -CONT $pids 2>/dev/null || true; fi
    fi
}

write_hosts_files() {
    local h o
    for h in "${HOSTS[@]}"; do
        {
            echo "# Generated by scripts/local-slurm.sh for host $h; bind-mounted over /etc/hosts there."
            printf '127.0.0.1\tlocalhost\n'
            printf '127.0.1.1\t%s\n' "$h"
            for o in "${HOSTS[@]}"; do
                [[ $o == "$h" ]] || printf '%s\t%s\n' "$(host_addr "$o")" "$o"
            done
            echo
            echo "# The following lines are desirable for IPv6 capable hosts"
            echo "::1     localhost ip6-localhost ip6-loopback"
            echo "ff02::1 ip6-allnodes"
            echo "ff02::2 ip6-allrouters"
        } >"$DIR/etc/hosts.$h.tmp"
        mv -f "$DIR/etc/hosts.$h.tmp" "$DIR/etc/hosts.$h"
    done
}

# The subnet must not be one this machine already uses (traffic would not leak, but a host
# and this machine would disagree about who has an address).
check_subnet() {
    local hit
    hit="$(ip -4 -o addr show 2>/dev/null | awk -v p="$NET3." 'index($4, p) == 1 { print $2 " " $4 }' | head -n 1)"
    [[ -z $hit ]] || die "HERD_SLURM_SUBNET=$SUBNET: this machine has $hit in it; choose another /24"
    hit="$(ip -4 route show 2>/dev/null | awk -v p="$NET3." 'index($1, p) == 1' | head -n 1)"
    [[ -z $hit ]] || die "HERD_SLURM_SUBNET=$SUBNET: this machine routes it ($hit); choose another /24"
}

# Switch namespace with bridge br0; per host a namespace with eth0 (veth) on the bridge.
net_up() {
    local h ns
    ip netns add "$SWITCH_NS" \
        || die "could not create network namespace $SWITCH_NS (needs root with CAP_SYS_ADMIN and a kernel with network namespaces)"
    in_ns "$SWITCH_NS" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$SWITCH_NS" link add br0 type bridge
    ip -n "$SWITCH_NS" link set br0 up
    for h in "${HOSTS[@]}"; do
        ns="$(host_ns "$h")"
        ip netns add "$ns"
        ip -n "$SWITCH_NS" link add "$h" type veth peer name eth0 netns "$ns"
        ip -n "$SWITCH_NS" link set "$h" master br0 up
        in_ns "$ns" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1
        ip -n "$ns" addr add "$(host_addr "$h")/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
    done
    if cg_usable || mkdir -p "$CG_DIR" 2>/dev/null; then
        for h in "${HOSTS[@]}"; do mkdir -p "$CG_DIR/$h"; done
    else
        log "warning: no writable cgroup2 hierarchy; crash kills by network namespace only"
        CG_DIR=""
    fi
}

# Removes every namespace (and with them the bridge, veths, qdiscs and nft rules) and cgroup
# of the multi-node cluster. Processes must be gone already.
net_down() {
    local ns d i
    for ns in $(existing_ns); do
        ip netns delete "$ns" 2>/dev/null || log "warning: could not delete network namespace $ns"
    done
    if [[ -n $CG_DIR && -d $CG_DIR ]]; then
        for ((i = 0; i < 50; i++)); do
            for d in "$CG_DIR"/*/; do
                [[ -d $d ]] && rmdir "$d" 2>/dev/null
            done
            rmdir "$CG_DIR" 2>/dev/null && break
            sleep 0.1
        done
        [[ -d $CG_DIR ]] && log "warning: could not remove cgroup $CG_DIR"
    fi
    # ip netns made /run/netns a mount point; leave nothing behind when no namespace is left.
    if [[ -d $NETNS_DIR ]] && [[ -z "$(ls -A "$NETNS_DIR" 2>/dev/null)" ]]; then
        umount "$NETNS_DIR" 2>/dev/null || true
        rmdir "$NETNS_DIR" 2>/dev/null || true
    fi
    return 0
}

# --------------------------------------------------------------------------------------------
# config

write_config() {
    if ((MULTI)); then
        mkdir -p "$DIR"/{etc,log,run,dev,spool/slurmctld} "$MUNGE_DIR"
        local h
        for h in $(compute_hosts); do
            mkdir -p "$DIR/spool/$h"
            chmod 0755 "$DIR/spool/$h"
        done
    else
        mkdir -p "$DIR"/{etc,log,run,dev,spool/slurmctld,spool/slurmd} "$MUNGE_DIR"
        chmod 0700 "$DIR/spool/slurmd"
    fi
    chmod 0755 "$DIR" "$DIR/etc" "$DIR/run" "$DIR/dev" "$DIR/spool" "$DIR/log"
    chmod 0700 "$DIR/spool/slurmctld"
    chmod 0755 "$MUNGE_DIR" # clients (any user) must reach the socket

    # What differs between the one-node and the multi-node cluster.
    local title ctld_host acct_host slurmd_spool slurmd_pid slurmd_log select_params
    local slurmd_timeout message_timeout nodes_line nodelist gres_nodes
    local node_gres=""
    ((NODE_GPUS > 0)) && node_gres=" Gres=gpu:${NODE_GPUS}"
    if ((MULTI)); then
        title="private multi-node cluster: login + ${NODES} compute hosts"
        ctld_host="login($(host_addr login))"
        acct_host="$(host_addr login)"
        slurmd_spool="${DIR}/spool/%n"
        slurmd_pid="${DIR}/run/slurmd-%n.pid"
        slurmd_log="${DIR}/log/slurmd-%n.log"
        # CR_LLN: jobs go to the least loaded node, so that workers spread over the hosts.
        select_params="CR_Core_Memory,CR_LLN"
        slurmd_timeout=$SLURMD_TIMEOUT
        message_timeout=5
        nodelist="node[1-${NODES}]"
        ((NODES == 1)) && nodelist=node1
        nodes_line=""
        for h in $(compute_hosts); do
            nodes_line+="NodeName=${h} NodeAddr=$(host_addr "$h") NodeHostname=${h} CPUs=${NODE_CPUS} RealMemory=${NODE_MEM}${node_gres} State=UNKNOWN"$'\n'
        done
        nodes_line="${nodes_line%$'\n'}"
        gres_nodes=$nodelist
    else
        title="private one-node cluster"
        ctld_host="${HOST}(127.0.0.1)"
        acct_host=127.0.0.1
        slurmd_spool="${DIR}/spool/slurmd"
        slurmd_pid="${SLURMD_PID}"
        slurmd_log="${SLURMD_LOG}"
        select_params="CR_Core_Memory"
        slurmd_timeout=300
        message_timeout=30
        nodelist="${HOST}"
        nodes_line="NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${NODE_CPUS} RealMemory=${NODE_MEM}${node_gres} State=UNKNOWN"
        gres_nodes="${HOST}"
    fi

    local acct
    if [[ $ACCOUNTING == 1 ]]; then
        acct="# Accounting through the private slurmdbd (+ private MariaDB): sacct works.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=${acct_host}
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

    local tmp="$CONF.tmp.$$"
    cat >"$tmp" <<EOF
# Generated by scripts/local-slurm.sh (${title}); rewritten by every start.
ClusterName=${CLUSTER}
SlurmctldHost=${ctld_host}
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
SlurmdSpoolDir=${slurmd_spool}
SlurmctldPidFile=${CTLD_PID}
SlurmdPidFile=${slurmd_pid}
SlurmctldLogFile=${CTLD_LOG}
SlurmdLogFile=${slurmd_log}
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
SelectTypeParameters=${select_params}
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
SlurmdTimeout=${slurmd_timeout}
MessageTimeout=${message_timeout}
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
${nodes_line}
PartitionName=cpu Nodes=${nodelist} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=${nodelist} Default=NO MaxTime=00:10:00 State=UP
EOF
    mv -f "$tmp" "$CONF"

    # Fake GPUs. gres/gpu in Slurm 22.05 drops file-less GPUs (node INVAL: "gres/gpu count
    # reported lower than configured"), so each fake GPU gets a File= that is a private
    # symlink to /dev/null (a character device; no mknod needed). All nodes share the files.
    rm -f "$DIR"/dev/gpu*
    local i
    for ((i = 0; i < NODE_GPUS; i++)); do
        ln -s /dev/null "$DIR/dev/gpu$i"
    done
    {
        echo "# Generated by scripts/local-slurm.sh. Fake GPUs: symlinks to /dev/null."
        if ((NODE_GPUS > 0)); then
            echo "NodeName=${gres_nodes} Name=gpu File=${DIR}/dev/gpu[0-$((NODE_GPUS - 1))]"
        fi
    } >"$GRES_CONF"

    # No cgroup plugin is configured; a private file keeps any system-wide one out of the way.
    echo "# Generated by scripts/local-slurm.sh. No cgroup plugins are used." >"$DIR/etc/cgroup.conf"
    # Empty private SPANK plugin stack (the system /etc/slurm/plugstack.conf is not used).
    : >"$DIR/etc/plugstack.conf"

    if [[ $ACCOUNTING == 1 ]]; then
        local dbd_addr=127.0.0.1
        ((MULTI)) && dbd_addr="$(host_addr login)"
        tmp="$DBD_CONF.tmp.$$"
        (
            umask 077
            cat >"$tmp" <<EOF
# Generated by scripts/local-slurm.sh. Must be mode 0600 and owned by SlurmUser (root).
AuthType=auth/munge
AuthInfo=socket=${MUNGE_SOCKET}
DbdHost=${HOST}
DbdAddr=${dbd_addr}
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
# daemons ("${CTL[@]}": nothing for the one-node cluster, "in_host login" for the multi-node one)

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
    "${CTL[@]}" munged --force --num-threads=4 \
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
        "${CTL[@]}" setsid mariadbd --no-defaults --user=root --datadir="$DB_DATA" \
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
    SLURM_CONF="$CONF" "${CTL[@]}" slurmdbd </dev/null >>"$DIR/log/slurmdbd.out" 2>&1 \
        || { dump_logs "$DBD_LOG" "$DIR/log/slurmdbd.out"; die "slurmdbd failed to start"; }
    # Ready once it answers sacctmgr (first start creates the database tables: a few seconds).
    local deadline=$((SECONDS + START_TIMEOUT))
    until SLURM_CONF="$CONF" "${CTL[@]}" timeout 10 sacctmgr -n -P list cluster >/dev/null 2>&1; do
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
    if ! SLURM_CONF="$CONF" "${CTL[@]}" sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER"; then
        SLURM_CONF="$CONF" "${CTL[@]}" sacctmgr -i add cluster "$CLUSTER" >/dev/null \
            || die "sacctmgr add cluster $CLUSTER failed (log: $DBD_LOG)"
    fi
}

start_slurmctld() {
    pid_alive "$CTLD_PID" slurmctld >/dev/null && return 0
    check_port "$CTLD_PORT" "slurmctld" HERD_SLURM_CTLD_PORT
    SLURM_CONF="$CONF" "${CTL[@]}" slurmctld -f "$CONF" </dev/null >>"$DIR/log/slurmctld.out" 2>&1 \
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

# Multi-node: slurmd of compute host $1, on that host. Its start time goes to
# $DIR/run/slurmd-HOST.started (see nodes_ready).
node_slurmd_pid() { echo "$DIR/run/slurmd-$1.pid"; }
node_slurmd_log() { echo "$DIR/log/slurmd-$1.log"; }
start_node_slurmd() {
    local h=$1
    pid_alive "$(node_slurmd_pid "$h")" slurmd >/dev/null && return 0
    date +%s >"$DIR/run/slurmd-$h.started"
    SLURM_CONF="$CONF" in_host "$h" slurmd -f "$CONF" -N "$h" </dev/null >>"$DIR/log/slurmd-$h.out" 2>&1 \
        || { dump_logs "$(node_slurmd_log "$h")" "$DIR/log/slurmd-$h.out"; die "slurmd on $h failed to start"; }
}

# "name pidfile" for every daemon of the cluster, in start order (multi-node: "slurmd@nodeI").
daemons() {
    echo "munged $MUNGE_PID"
    if [[ $ACCOUNTING == 1 || -s $DB_PID || -s $DBD_PID ]]; then
        echo "mariadbd $DB_PID"
        echo "slurmdbd $DBD_PID"
    fi
    echo "slurmctld $CTLD_PID"
    if ((MULTI)); then
        local h
        for h in $(compute_hosts); do echo "slurmd@$h $(node_slurmd_pid "$h")"; done
    else
        echo "slurmd $SLURMD_PID"
    fi
}

all_up() {
    local name pidfile
    while read -r name pidfile; do
        pid_alive "$pidfile" "${name%@*}" >/dev/null || return 1
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

# Multi-node: prints "node state" for every node slurmctld knows (state lower-case, as
# scontrol says it: idle, mixed, down+not_responding, ...), "state" followed by "!" when the
# node's slurmd has not registered since we last started it.
nodes_states() {
    local line name state ts epoch started
    SLURM_CONF="$CONF" in_host login timeout 10 scontrol -o show node 2>/dev/null | while read -r line; do
        name="$(grep -o 'NodeName=[^ ]*' <<<"$line" | cut -d= -f2)"
        state="$(grep -o ' State=[^ ]*' <<<"$line" | cut -d= -f2)"
        ts="$(grep -o 'SlurmdStartTime=[^ ]*' <<<"$line" | cut -d= -f2 || true)"
        state="${state,,}"
        started="$(cat "$DIR/run/slurmd-$name.started" 2>/dev/null || echo 0)"
        epoch=0
        [[ -n $ts && $ts != None ]] && epoch="$(date -d "$ts" +%s 2>/dev/null || echo 0)"
        ((epoch >= started - 1)) || state+="!"
        echo "$name $state"
    done
    return 0
}

# Multi-node: waits until every node in $@ is registered and usable; brings back nodes left
# DOWN or DRAINED (by an earlier run, or a crash) once their slurmd has registered.
wait_nodes_ready() {
    local deadline=$((SECONDS + START_TIMEOUT)) states name state notready h
    while :; do
        states="$(nodes_states)"
        notready=()
        for h in "$@"; do
            state="$(awk -v n="$h" '$1 == n { print $2 }' <<<"$states")"
            case "$state" in
                idle | mixed | allocated | completing) ;;
                down* | drain* | fail* | *+drain*)
                    notready+=("$h:${state:-?}")
                    if [[ $state != *! ]]; then
                        SLURM_CONF="$CONF" in_host login scontrol update NodeName="$h" State=RESUME >/dev/null 2>&1 || true
                    fi ;;
                *) notready+=("$h:${state:-no answer}") ;;
            esac
        done
        ((${#notready[@]} == 0)) && return 0
        if ((SECONDS > deadline)); then
            local logs=("$CTLD_LOG" "$DIR/log/slurmctld.out")
            for h in "$@"; do logs+=("$(node_slurmd_log "$h")" "$DIR/log/slurmd-$h.out"); done
            dump_logs "${logs[@]}"
            die "nodes not ready after ${START_TIMEOUT}s (${notready[*]}; '!' = slurmd not registered)"
        fi
        pid_alive "$CTLD_PID" slurmctld >/dev/null || {
            sleep 1
            pid_alive "$CTLD_PID" slurmctld >/dev/null || { dump_logs "$CTLD_LOG" "$DIR/log/slurmctld.out"; die "slurmctld exited"; }
        }
        for h in "$@"; do
            pid_alive "$(node_slurmd_pid "$h")" slurmd >/dev/null && continue
            sleep 1
            pid_alive "$(node_slurmd_pid "$h")" slurmd >/dev/null \
                || { dump_logs "$(node_slurmd_log "$h")" "$DIR/log/slurmd-$h.out"; die "slurmd on $h exited"; }
        done
        sleep 0.3
    done
}

# --------------------------------------------------------------------------------------------
# commands: one-node cluster

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

# Cancels every job of this private cluster (any user), then lets slurmd kill them.
cancel_all_jobs() {
    pid_alive "$CTLD_PID" slurmctld >/dev/null || return 0
    local ids i
    ids="$(SLURM_CONF="$CONF" "${CTL[@]}" timeout 10 squeue -h -o '%F' 2>/dev/null | sort -u || true)"
    [[ -n $ids ]] || return 0
    log "cancelling jobs: $(tr '\n' ' ' <<<"$ids")"
    # shellcheck disable=SC2086
    SLURM_CONF="$CONF" "${CTL[@]}" timeout 20 scancel --quiet $ids 2>/dev/null || true
    # Multi-node: a job on a crashed or cut-off node never finishes completing, and everything
    # on the hosts is killed next anyway; so a shorter wait.
    local rounds=40
    ((MULTI)) && rounds=10
    for ((i = 0; i < rounds; i++)); do
        [[ -z "$(SLURM_CONF="$CONF" "${CTL[@]}" timeout 10 squeue -h -t pending,running,completing -o '%i' 2>/dev/null || true)" ]] && break
        sleep 0.5
    done
}

cmd_stop() {
    cancel_all_jobs
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

# --------------------------------------------------------------------------------------------
# commands: multi-node cluster

need_root() {
    [[ $(id -u) -eq 0 ]] || die "$VERB needs root (network namespaces, Slurm daemons as SlurmUser=root)"
}

# For every verb but start and stop: the cluster exists; HOSTS from its record.
need_cluster() {
    need_root
    local n
    n="$(recorded_nodes)"
    [[ -n $n ]] && ns_exists "$(host_ns login)" && ns_exists "$SWITCH_NS" \
        || die "the multi-node cluster ($DIR) is not running; start it: $PROG start --nodes N"
    set_nodes "$n"
}

need_host() {
    local h
    [[ -n ${1:-} ]] || die "$VERB: which host? (${HOSTS[*]})"
    for h in "${HOSTS[@]}"; do
        [[ $h == "$1" ]] && return 0
    done
    die "$VERB: unknown host '$1' (hosts: ${HOSTS[*]})"
}

need_compute_host() {
    need_host "$1"
    [[ $1 != login ]] || die "$VERB: '$1' is the login host, not a compute node"
}

multi_up() {
    local n
    n="$(recorded_nodes)"
    [[ -n $n ]] || return 1
    set_nodes "$n"
    local h
    for h in "${HOSTS[@]}" switch; do
        ns_exists "$(host_ns "$h")" || return 1
    done
    all_up
}

cmd_start_multi() {
    need_root
    local n="${NODES_ARG:-$(recorded_nodes)}"
    [[ -n $n ]] || die "start: how many compute hosts? start --nodes N"
    if multi_up; then
        ((NODES == n)) || die "the multi-node cluster runs with $NODES nodes; stop it first ($PROG stop --multi)"
        local bad
        bad="$(nodes_states | awk '$2 !~ /^(idle|mixed|allocated|completing)$/' | tr '\n' ' ')"
        if [[ -z $bad ]]; then
            log "already running (login + ${HOSTS[*]:1}); run things there with: $PROG exec login -- CMD"
            return 0
        fi
        log "running, but nodes not ready ($bad): restarting"
    fi
    mkdir -p "$DIR/log" "$DIR/etc"
    ensure_packages
    local t0=$SECONDS
    # Leftovers of an earlier run (killed, a partial start, another network): a stop that
    # reads what that run recorded takes all of it away first.
    if [[ -s $DIR/etc/network && "$(cat "$DIR/etc/network")" != "$SUBNET $PREFIX" ]] \
        || [[ -n "$(existing_ns)" ]] || [[ -n $CG_DIR && -d $CG_DIR ]] || all_up_any; then
        log "cleaning up what an earlier run left behind"
        "$SELF" stop --multi
    fi
    set_nodes "$n"
    check_subnet
    echo "$n" >"$DIR/etc/nodes"
    echo "$SUBNET $PREFIX" >"$DIR/etc/network"
    write_hosts_files
    net_up
    in_host login true \
        || die "cannot enter the login host (nsenter + unshare --uts --mount + a bind mount over /etc/hosts); see the error above"
    write_config
    start_munged
    if [[ $ACCOUNTING == 1 ]]; then
        start_mariadb
        start_slurmdbd
    fi
    start_slurmctld
    local h
    for h in $(compute_hosts); do start_node_slurmd "$h"; done
    # shellcheck disable=SC2046
    wait_nodes_ready $(compute_hosts)
    log "up in $((SECONDS - t0))s: login $(host_addr login), $(for h in $(compute_hosts); do printf '%s %s, ' "$h" "$(host_addr "$h")"; done | sed 's/, $//')"
    log "run things on the login host: $PROG exec login -- CMD (e.g. sinfo, bash)"
}

# True if any daemon of the cluster in $DIR is alive (whatever its node count).
all_up_any() {
    local f
    for f in "$MUNGE_PID" "$DB_PID" "$DBD_PID" "$CTLD_PID" "$DIR"/run/slurmd-*.pid; do
        [[ -s $f ]] || continue
        running "$(tr -dc '0-9' <"$f")" && return 0
    done
    return 1
}

# Stops everything of the multi-node cluster: daemons, every process on its hosts, namespaces,
# cgroups. Works on a partial start, and on leftovers of a run with another node count.
teardown_multi() {
    local f h
    # A frozen host's daemons could not hear SIGTERM: let everything go on first.
    if [[ -n $CG_DIR && -d $CG_DIR ]]; then
        for f in "$CG_DIR"/*/; do
            [[ -d $f ]] || continue
            h="$(basename "$f")"
            [[ $(frozen_state "$h") == 1 ]] && freeze_host "$h" 0
        done
    fi
    # Daemons first, gently, so that slurmctld saves its state and MariaDB shuts down cleanly.
    if ns_exists "$(host_ns login)"; then
        [[ -n "$(recorded_nodes)" ]] && set_nodes "$(recorded_nodes)"
        cancel_all_jobs
    fi
    for f in "$DIR"/run/slurmd-*.pid; do
        [[ -e $f ]] || continue
        stop_daemon "$f" slurmd
    done
    stop_daemon "$CTLD_PID" slurmctld
    stop_daemon "$DBD_PID" slurmdbd
    stop_daemon "$DB_PID" mariadbd
    stop_daemon "$MUNGE_PID" munged
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock" "$DB_SOCKET" "$DIR"/run/slurmd-*.started
    # Then whatever else runs on the hosts (jobs, shells, a scheduler...).
    local ns n
    for ns in $(existing_ns); do
        h="${ns#"$PREFIX"}"
        [[ $h == switch ]] && continue
        n="$(kill_host "$h")"
        ((n == 0)) || log "killed $n processes left on $h"
    done
    if [[ -n $CG_DIR && -d $CG_DIR ]]; then
        for f in "$CG_DIR"/*/; do
            [[ -d $f ]] || continue
            h="$(basename "$f")"
            [[ -z "$(host_pids "$h")" ]] || kill_host "$h" >/dev/null
        done
    fi
    net_down
}

cmd_stop_multi() {
    need_root
    local t0=$SECONDS
    teardown_multi
    log "stopped in $((SECONDS - t0))s: no namespace, link, rule or process left (state kept in $DIR)"
}

link_state() {
    # "up", "down" (cable pulled), or "?" when the link does not exist.
    local line flags
    line="$(ip -n "$SWITCH_NS" -o link show dev "$1" 2>/dev/null)" || { echo "?"; return; }
    flags="${line#*<}"
    flags="${flags%%>*}"
    if [[ ,$flags, == *,UP,* ]]; then echo up; else echo down; fi
}

slow_state() {
    local q rate delay
    q="$(tc -n "$SWITCH_NS" qdisc show dev "$1" 2>/dev/null || true)"
    rate="$(grep '^qdisc tbf' <<<"$q" | grep -o 'rate [^ ]*' | head -n 1 | cut -d' ' -f2 || true)"
    delay="$(grep '^qdisc netem' <<<"$q" | grep -o 'delay [^ ]*' | head -n 1 | cut -d' ' -f2 || true)"
    [[ -n $rate$delay ]] || { echo "-"; return; }
    echo "${rate:-?}${delay:++$delay}"
}

blocked_of() {
    local out
    out="$(in_ns "$(host_ns "$1")" nft -j list set inet herd_faults blocked 2>/dev/null || true)"
    out="$(grep -oE '"elem": \[[^]]*\]' <<<"$out" | grep -oE '[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+' || true)"
    local a h names=()
    for a in $out; do
        for h in "${HOSTS[@]}"; do [[ $(host_addr "$h") == "$a" ]] && names+=("$h"); done
    done
    ((${#names[@]})) && echo "${names[*]}" | tr ' ' ',' || echo "-"
}

cmd_status_multi() {
    local n up=1
    n="$(recorded_nodes)"
    if [[ -z $n ]] || ! ns_exists "$(host_ns login)"; then
        echo "hosts: none (no namespaces ${PREFIX}*)"
        [[ -n "$(existing_ns)" ]] && echo "leftover namespaces: $(existing_ns | tr '\n' ' ')"
        echo "multi-node slurm cluster: DOWN"
        return 1
    fi
    set_nodes "$n"
    printf '%-8s %-15s %-5s %-16s %-16s %-9s %s\n' HOST ADDRESS LINK SLOW PARTITIONED FIREWALL PROCESSES
    local h
    for h in "${HOSTS[@]}"; do
        printf '%-8s %-15s %-5s %-16s %-16s %-9s %s\n' "$h" "$(host_addr "$h")" "$(link_state "$h")" \
            "$(slow_state "$h")" "$(blocked_of "$h")" "$(firewall_of "$h")" \
            "$(host_pids "$h" | grep -c . || true)$([[ $(frozen_state "$h") == 1 ]] && echo ' (frozen)')"
    done
    local name pidfile pid
    while read -r name pidfile; do
        if pid="$(pid_alive "$pidfile" "${name%@*}")"; then
            echo "$name: running (pid $pid)"
        else
            echo "$name: not running"
            up=0
        fi
    done < <(daemons)
    echo "SLURM_CONF=$CONF (use it on the hosts: $PROG exec login -- sinfo)"
    if pid_alive "$CTLD_PID" slurmctld >/dev/null; then
        echo "--- sinfo (on login)"
        SLURM_CONF="$CONF" in_host login timeout 10 sinfo -N -o '%N %P %T %E' || up=0
        echo "--- squeue (on login)"
        SLURM_CONF="$CONF" in_host login timeout 10 squeue || up=0
    fi
    if ((up)); then
        echo "multi-node slurm cluster: UP"
        return 0
    fi
    echo "multi-node slurm cluster: DEGRADED (a daemon is not running; see above)"
    return 1
}

cmd_env_multi() {
    local n
    n="$(recorded_nodes)"
    [[ -n $n ]] || n="${NODES_ARG:-0}"
    set_nodes "$n"
    printf 'export SLURM_CONF=%q\n' "$CONF"
    printf 'export HERD_SLURM_MULTI_DIR=%q\n' "$DIR"
    printf 'export HERD_SLURM_NODES=%q\n' "$(compute_hosts)"
    printf '# Slurm answers on the hosts only: %s exec login -- sinfo\n' "$SELF"
}

cmd_exec() {
    need_cluster
    local host="${ARGS[0]:-}"
    need_host "$host"
    local argv=("${ARGS[@]:1}")
    [[ ${argv[0]:-} == -- ]] && argv=("${argv[@]:1}")
    ((${#argv[@]})) || die "exec $host: no command (exec HOST -- CMD [ARGS...])"
    local names
    names="$(compute_hosts)"
    export SLURM_CONF="$CONF" HERD_SLURM_MULTI_DIR="$DIR" HERD_SLURM_NODES="$names"
    # A HOSTNAME from this machine's environment would lie about where CMD runs.
    if [[ -n "$(printenv HOSTNAME || true)" ]]; then export HOSTNAME="$host"; fi
    host_argv "$host" "${argv[@]}"
    cg_join "$host"
    exec "${HOST_ARGV[@]}"
}

cmd_link() {
    need_cluster
    local h="${ARGS[0]:-}"
    need_host "$h"
    ((${#ARGS[@]} == 1)) || die "$VERB HOST: one host"
    local state=up
    [[ $VERB == link-down ]] && state=down
    ip -n "$SWITCH_NS" link set dev "$h" "$state" || die "could not set the link of $h $state"
    log "link of $h ($(host_addr "$h")) is $state"
}

cmd_crash() {
    need_cluster
    local h="${ARGS[0]:-}"
    need_host "$h"
    ((${#ARGS[@]} == 1)) || die "crash HOST: one host"
    local n
    n="$(kill_host "$h")"
    log "crashed $h: $n processes killed (revive: $PROG revive $h)"
}

cmd_freeze() {
    need_cluster
    local h="${ARGS[0]:-}"
    need_host "$h"
    ((${#ARGS[@]} == 1)) || die "$VERB HOST: one host"
    [[ -n $CG_DIR && -e $CG_DIR/$h/cgroup.freeze ]] \
        || log "warning: no cgroup freezer for $h; only SIGSTOP/SIGCONT of its namespace's processes"
    if [[ $VERB == freeze ]]; then
        freeze_host "$h" 1
        log "froze $h: $(host_pids "$h" | grep -c . || true) processes stopped where they were (thaw: $PROG thaw $h)"
    else
        freeze_host "$h" 0
        log "thawed $h: its processes go on"
    fi
}

cmd_revive() {
    need_cluster
    local h="${ARGS[0]:-}"
    need_host "$h"
    ((${#ARGS[@]} == 1)) || die "revive HOST: one host"
    local t0=$SECONDS
    # A crashed host may have been frozen first: what starts there now must not freeze at once.
    [[ $(frozen_state "$h") == 1 ]] && freeze_host "$h" 0
    if [[ $h == login ]]; then
        start_munged
        if [[ $ACCOUNTING == 1 ]]; then
            start_mariadb
            start_slurmdbd
        fi
        start_slurmctld
        # shellcheck disable=SC2046
        wait_nodes_ready $(compute_hosts)
    else
        start_node_slurmd "$h"
        wait_nodes_ready "$h"
    fi
    log "revived $h in $((SECONDS - t0))s"
}

# RATE in tc's words (e.g. 20mbit, 500kbit, 1gbit, 2mbps) → bits per second.
rate_bits() {
    [[ $1 =~ ^([0-9]+)(k|m|g)?(bit|bps)$ ]] || return 1
    local v=${BASH_REMATCH[1]} mult=1
    case "${BASH_REMATCH[2]}" in k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; esac
    [[ ${BASH_REMATCH[3]} == bps ]] && mult=$((mult * 8))
    echo $((10#$v * mult))
}

cmd_slow() {
    need_cluster
    local h="${ARGS[0]:-}" rate="${ARGS[1]:-}" delay="${ARGS[2]:-}"
    need_host "$h"
    ((${#ARGS[@]} >= 2 && ${#ARGS[@]} <= 3)) || die "slow HOST RATE [DELAY], e.g. slow $h 20mbit 50ms"
    local bits
    bits="$(rate_bits "$rate")" && ((bits >= 8000)) \
        || die "slow: bad RATE '$rate' (a number and kbit, mbit, gbit, bit or kbps, mbps...; at least 8kbit)"
    [[ -z $delay || $delay =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "slow: bad DELAY '$delay' (e.g. 50ms)"
    # Token bucket: one burst is 10 ms of traffic, and at least a jumbo GSO frame's worth.
    local burst=$((bits / 8 / 100))
    ((burst < 65536)) && burst=65536
    local dev ns
    for dev in "$SWITCH_NS:$h" "$(host_ns "$h"):eth0"; do
        ns="${dev%%:*}"
        dev="${dev#*:}"
        tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
        if [[ -n $delay ]]; then
            # netem delays, tbf under it shapes (the layout of the netem documentation).
            tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 2>"$DIR/log/tc.err" \
                || { grep -q -i 'unknown\|not found\|No such file' "$DIR/log/tc.err" \
                    && die "slow: DELAY needs the kernel's sch_netem, which this kernel lacks (RATE alone works: slow $h $rate)"
                    die "slow: tc netem failed: $(cat "$DIR/log/tc.err")"; }
            tc -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst "$burst" latency 200ms \
                || die "slow: tc tbf failed on $dev"
        else
            tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" latency 200ms \
                || die "slow: tc tbf failed on $dev"
        fi
    done
    log "link of $h is slow: $rate each way${delay:+, +$delay each way}"
}

cmd_unslow() {
    need_cluster
    local h="${ARGS[0]:-}"
    need_host "$h"
    ((${#ARGS[@]} == 1)) || die "unslow HOST: one host"
    tc -n "$SWITCH_NS" qdisc del dev "$h" root 2>/dev/null || true
    tc -n "$(host_ns "$h")" qdisc del dev eth0 root 2>/dev/null || true
    log "link of $h at full speed"
}

# nft in HOST's namespace: a set of addresses whose packets are dropped on arrival.
nft_block() {
    local ns
    ns="$(host_ns "$1")"
    if ! in_ns "$ns" nft list table inet herd_faults >/dev/null 2>&1; then
        in_ns "$ns" nft -f - <<'EOF' || die "nft failed in $ns"
table inet herd_faults {
    set blocked { type ipv4_addr; }
    chain prerouting {
        type filter hook prerouting priority -300; policy accept;
        ip saddr @blocked drop
    }
}
EOF
    fi
    in_ns "$ns" nft add element inet herd_faults blocked "{ $2 }" || die "nft failed in $ns"
}

nft_unblock() {
    in_ns "$(host_ns "$1")" nft delete element inet herd_faults blocked "{ $2 }" 2>/dev/null || true
}

cmd_partition() {
    need_cluster
    ((${#ARGS[@]} == 2)) || die "partition HOST_A HOST_B: two hosts"
    local a="${ARGS[0]}" b="${ARGS[1]}"
    need_host "$a"
    need_host "$b"
    [[ $a != "$b" ]] || die "partition: $a and $b are the same host"
    nft_block "$a" "$(host_addr "$b")"
    nft_block "$b" "$(host_addr "$a")"
    log "$a and $b no longer hear each other (heal: $PROG heal $a $b)"
}

cmd_heal() {
    need_cluster
    if ((${#ARGS[@]} == 0)); then
        local h
        for h in "${HOSTS[@]}"; do
            in_ns "$(host_ns "$h")" nft delete table inet herd_faults 2>/dev/null || true
        done
        log "every partition healed"
        return 0
    fi
    ((${#ARGS[@]} == 2)) || die "heal [HOST_A HOST_B]: two hosts, or none for all"
    local a="${ARGS[0]}" b="${ARGS[1]}"
    need_host "$a"
    need_host "$b"
    nft_unblock "$a" "$(host_addr "$b")"
    nft_unblock "$b" "$(host_addr "$a")"
    log "$a and $b hear each other again"
}

# A host firewall: new TCP connections into HOST (from other hosts) are dropped unless to one of
# the ports named or to Slurm's own (slurmd's, and slurmctld's on login), as a site that opens
# only a worker's data port, or a login node that opens only the scheduler's port, would. Its
# own table, so that partitions and firewalls come and go independently.
cmd_firewall() {
    need_cluster
    ((${#ARGS[@]} >= 2)) || die "firewall HOST PORT...: a host and the ports that stay open"
    local h="${ARGS[0]}" p
    need_host "$h"
    local ports=("${ARGS[@]:1}")
    for p in "${ports[@]}"; do
        [[ $p =~ ^[0-9]+$ ]] && ((p > 0 && p < 65536)) || die "firewall: '$p' is not a TCP port"
    done
    local ns open
    ns="$(host_ns "$h")"
    open="$(IFS=,; echo "$SLURMD_PORT,$CTLD_PORT,${ports[*]}")"
    in_ns "$ns" nft delete table inet herd_firewall 2>/dev/null || true
    in_ns "$ns" nft -f - <<EOF || die "nft failed in $ns"
table inet herd_firewall {
    chain input {
        type filter hook input priority 0; policy accept;
        iif lo accept
        tcp flags & (syn | ack) == syn tcp dport != { $open } drop
    }
}
EOF
    log "$h drops new TCP connections except to ports $open (undo: $PROG unfirewall $h)"
}

firewall_of() {
    in_ns "$(host_ns "$1")" nft list table inet herd_firewall >/dev/null 2>&1 && echo on || echo "-"
}

cmd_unfirewall() {
    need_cluster
    ((${#ARGS[@]} == 1)) || die "unfirewall HOST: one host"
    need_host "${ARGS[0]}"
    in_ns "$(host_ns "${ARGS[0]}")" nft delete table inet herd_firewall 2>/dev/null || true
    log "${ARGS[0]} takes connections on every port again"
}

cmd_repair() {
    need_cluster
    ((${#ARGS[@]} == 0)) || die "repair takes no arguments"
    local h done=()
    for h in "${HOSTS[@]}"; do
        if [[ $(link_state "$h") != up ]]; then
            ip -n "$SWITCH_NS" link set dev "$h" up
            done+=("link-up $h")
        fi
        if [[ $(slow_state "$h") != - ]]; then
            tc -n "$SWITCH_NS" qdisc del dev "$h" root 2>/dev/null || true
            tc -n "$(host_ns "$h")" qdisc del dev eth0 root 2>/dev/null || true
            done+=("unslow $h")
        fi
        if [[ $(frozen_state "$h") == 1 ]]; then
            freeze_host "$h" 0
            done+=("thaw $h")
        fi
        if in_ns "$(host_ns "$h")" nft list table inet herd_faults >/dev/null 2>&1; then
            [[ $(blocked_of "$h") != - ]] && done+=("heal $h")
            in_ns "$(host_ns "$h")" nft delete table inet herd_faults
        fi
        if [[ $(firewall_of "$h") == on ]]; then
            in_ns "$(host_ns "$h")" nft delete table inet herd_firewall
            done+=("unfirewall $h")
        fi
    done
    if ! pid_alive "$MUNGE_PID" munged >/dev/null || ! pid_alive "$CTLD_PID" slurmctld >/dev/null \
        || { [[ $ACCOUNTING == 1 ]] && ! pid_alive "$DBD_PID" slurmdbd >/dev/null; }; then
        start_munged
        if [[ $ACCOUNTING == 1 ]]; then
            start_mariadb
            start_slurmdbd
        fi
        start_slurmctld
        done+=("revive login")
    fi
    for h in $(compute_hosts); do
        pid_alive "$(node_slurmd_pid "$h")" slurmd >/dev/null && continue
        start_node_slurmd "$h"
        done+=("revive $h")
    done
    # shellcheck disable=SC2046
    wait_nodes_ready $(compute_hosts)
    log "repaired: ${done[*]:-nothing was broken}"
}

if ((MULTI)); then
    case "$VERB" in
        start) cmd_start_multi ;;
        stop) cmd_stop_multi ;;
        status) cmd_status_multi ;;
        env) cmd_env_multi ;;
        exec) cmd_exec ;;
        link-down | link-up) cmd_link ;;
        crash) cmd_crash ;;
        revive) cmd_revive ;;
        freeze | thaw) cmd_freeze ;;
        slow) cmd_slow ;;
        unslow) cmd_unslow ;;
        partition) cmd_partition ;;
        heal) cmd_heal ;;
        firewall) cmd_firewall ;;
        unfirewall) cmd_unfirewall ;;
        repair) cmd_repair ;;
    esac
else
    case "$VERB" in
        start) cmd_start ;;
        stop) cmd_stop ;;
        status) cmd_status ;;
        env) cmd_env ;;
    esac
fi
