#!/usr/bin/env bash
# A real single-node Slurm cluster on this machine, for the `slurm` tests and for trying the job
# scripts by hand: munged, slurmctld and slurmd from Debian's packages, one node (this host), no
# cgroups (containers rarely have a delegated cgroup tree), everything under one state directory.
#
#   scripts/slurm/cluster.sh start    # installs slurm-wlm + munge if missing; waits for the node
#   export SLURM_CONF=$(scripts/slurm/cluster.sh conf)
#   srun -n1 hostname; sbatch ...; sinfo
#   scripts/slurm/cluster.sh stop     # stops the daemons, removes the state directory
#
# HYLO_SLURM_DIR (default /tmp/hylo-slurm) holds slurm.conf, the munge key and socket, the spool
# and state directories and the logs. HYLO_SLURM_CPUS (default: at least 8) is the node's CPU
# count as Slurm sees it: tiny test jobs may share cores, so that an array and a 2-rank job fit at
# once on a 2-core CI machine. HYLO_SLURM_PORT (default 6817; slurmd uses the next one).
# Needs root (the daemons run as root; SlurmUser=root). Exit status 0 once `sinfo` shows the node
# idle; otherwise a line saying which daemon failed, and the tail of its log.
set -euo pipefail

dir=${HYLO_SLURM_DIR:-/tmp/hylo-slurm}
port=${HYLO_SLURM_PORT:-6817}
conf=$dir/slurm.conf

die() { echo "cluster.sh: $*" >&2; exit 1; }

pid_of() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && cat "$1"; }

stop_daemon() {  # pidfile name
  local pid
  pid=$(pid_of "$1") || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  echo "cluster.sh: $2 (pid $pid) did not stop on SIGTERM; killed" >&2
}

stop() {
  [ -d "$dir" ] || return 0
  # Jobs first, so that slurmd has no steps to wait for.
  [ -f "$conf" ] && SLURM_CONF=$conf scancel --quiet --user=root 2>/dev/null || true
  stop_daemon "$dir/slurmd.pid" slurmd
  stop_daemon "$dir/slurmctld.pid" slurmctld
  stop_daemon "$dir/munged.pid" munged
  rm -rf "$dir"
}

wait_for() {  # seconds description command...
  local seconds=$1 what=$2
  shift 2
  for _ in $(seq $((seconds * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

fail_with_log() {  # what log
  echo "cluster.sh: $1; the end of $2:" >&2
  tail -n 15 "$2" >&2 2>/dev/null || true
  stop
  exit 1
}

start() {
  [ "$(id -u)" -eq 0 ] || die "needs root (the Slurm daemons run as root here)"
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
    "$(dirname "$0")/../install_deps.sh" --slurm || die "cannot install slurm-wlm and munge"
  fi
  [ -f "$conf" ] && { echo "cluster.sh: stopping the cluster already in $dir"; stop; }
  mkdir -p "$dir"/{munge,ctld,spool,log}
  chmod 700 "$dir" "$dir/munge"

  # munge: a key of our own and a socket inside $dir, so that a system munged is left alone.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" 2>>"$dir/log/munged.log" ||
    fail_with_log "munged did not start" "$dir/log/munged.log"

  local node cpus memory plugins mpi
  node=$(hostname -s)
  cpus=${HYLO_SLURM_CPUS:-$(($(nproc) > 8 ? $(nproc) : 8))}
  # What slurmd itself measures, less 1 GiB for the system; jobs ask --mem within it.
  memory=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  memory=$((memory > 2048 ? memory - 1024 : memory))
  plugins=$(dirname "$(find /usr/lib -name 'mpi_none.so' -path '*slurm*' 2>/dev/null | head -n1)")
  mpi=none
  [ -f "$plugins/mpi_pmix.so" ] && mpi=pmix
  cat >"$conf" <<EOF
# Written by scripts/slurm/cluster.sh: one node, no cgroups, state under $dir.
ClusterName=hylo-test
SlurmctldHost=$node
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without it a job that names no --mem gets the whole node's, and the jobs would run one by one.
DefMemPerCPU=256
SchedulerType=sched/builtin
MpiDefault=$mpi
ReturnToService=2
# Finished jobs stay visible to scontrol for 10 minutes: what the tests read their states from.
MinJobAge=600
JobRequeue=1
# Test jobs are seconds long: tighter timers than the defaults.
SchedulerParameters=sched_interval=2
MessageTimeout=30
KillWait=10
SlurmdParameters=config_overrides
NodeName=$node CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  export SLURM_CONF=$conf
  slurmctld -f "$conf" 2>>"$dir/log/slurmctld.log" || fail_with_log "slurmctld did not start" "$dir/log/slurmctld.log"
  wait_for 30 slurmctld scontrol ping || fail_with_log "slurmctld does not answer scontrol ping" "$dir/log/slurmctld.log"
  slurmd -f "$conf" 2>>"$dir/log/slurmd.log" || fail_with_log "slurmd did not start" "$dir/log/slurmd.log"
  node_idle() { [ "$(sinfo -h -n "$node" -o %t)" = idle ]; }
  wait_for 60 "node idle" node_idle || fail_with_log "node $node is not idle: $(sinfo -h -o '%t %E' 2>&1)" \
    "$dir/log/slurmd.log"
  echo "cluster.sh: node $node idle ($cpus CPUs, ${memory} MB, MpiDefault=$mpi); export SLURM_CONF=$conf"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  conf) [ -f "$conf" ] || die "no cluster in $dir (run: $0 start)"; echo "$conf" ;;
  status) [ -f "$conf" ] || die "no cluster in $dir"; SLURM_CONF=$conf sinfo ;;
  *) die "usage: $0 start|stop|conf|status" ;;
esac
