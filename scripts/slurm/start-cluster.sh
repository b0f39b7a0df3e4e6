#!/usr/bin/env bash
# Start a one-node Slurm cluster on this machine (Debian 12, run as root).
# Idempotent: installs slurm-wlm + munge if missing, (re)writes slurm.conf,
# creates a munge key if missing, starts whatever daemon is not running, and
# waits until `sinfo` shows the node idle.
#
# Env knobs:
#   SLURM_START_TIMEOUT  seconds to wait for the node to become idle (default 60)
#   SLURM_STATE_DIR      base for state/spool/logs (default /var/spool/slurm-roar)
set -euo pipefail

TIMEOUT="${SLURM_START_TIMEOUT:-60}"
BASE="${SLURM_STATE_DIR:-/var/spool/slurm-roar}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
HOST="$(hostname)"
T0=$(date +%s.%N)

log() { printf '[start-cluster] %s\n' "$*" >&2; }
die() { printf '[start-cluster] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"

# --- 1. packages -----------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
  log "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# --- 2. munge ----------------------------------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile=/etc/munge/munge.key --force
  else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "starting munged"
  # a stale pid/socket from an unclean stop makes munged refuse to start
  if [ -f /run/munge/munged.pid ] && ! kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; then
    rm -f /run/munge/munged.pid /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  fi
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
  munge -n | unmunge >/dev/null || die "munged did not come up (see /var/log/munge/munged.log)"
fi

# --- 3. slurm.conf -----------------------------------------------------------
install -d -m 0755 "$CONF_DIR" "$BASE" "$BASE/ctld" "$BASE/d" "$BASE/log"
# `slurmd -C` prints e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1
# CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"; keep the hardware fields.
HW="$(slurmd -C | head -n1 | tr ' ' '\n' \
      | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' \
      | tr '\n' ' ')"
[ -n "$HW" ] || die "slurmd -C gave no hardware line"

NEW_CONF="$(cat <<EOF
# Written by start-cluster.sh: a one-node test cluster.
ClusterName=roar
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# without a default, a job with no --mem is given the whole node memory and
# blocks every other job (MinMemoryNode=0 = all)
DefMemPerCPU=1024
SchedulerType=sched/backfill
ReturnToService=2
# keep finished jobs visible to scontrol for 10 min (sacct needs slurmdbd)
MinJobAge=600
StateSaveLocation=${BASE}/ctld
SlurmdSpoolDir=${BASE}/d
SlurmctldPidFile=${BASE}/slurmctld.pid
SlurmdPidFile=${BASE}/slurmd.pid
SlurmctldLogFile=${BASE}/log/slurmctld.log
SlurmdLogFile=${BASE}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=${BASE}/log/jobcomp.txt
# short intervals so a test cluster reacts fast
SchedulerParameters=sched_interval=1
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
NodeName=${HOST} NodeAddr=127.0.0.1 ${HW}State=UNKNOWN
PartitionName=debug Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP
EOF
)"
CONF_CHANGED=0
if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$NEW_CONF" ]; then
  printf '%s\n' "$NEW_CONF" > "$CONF"
  CONF_CHANGED=1
  log "wrote $CONF"
fi

# --- 4. daemons --------------------------------------------------------------
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if running "$BASE/slurmctld.pid"; then
  [ "$CONF_CHANGED" = 1 ] && { log "reconfiguring slurmctld"; scontrol reconfigure || true; }
else
  log "starting slurmctld"
  slurmctld            # daemonises; logs to $BASE/log/slurmctld.log
fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.2; done
scontrol ping | grep -q 'is UP' || die "slurmctld not responding (see $BASE/log/slurmctld.log)"

if ! running "$BASE/slurmd.pid"; then
  log "starting slurmd"
  slurmd               # daemonises; logs to $BASE/log/slurmd.log
fi

# --- 5. wait for the node ----------------------------------------------------
deadline=$(( $(date +%s) + TIMEOUT ))
state=""
while :; do
  state="$(sinfo -h -N -n "$HOST" -o '%T' 2>/dev/null | head -n1 || true)"
  case "$state" in idle|mixed|allocated|completing) break ;; esac
  if [ "$(date +%s)" -ge "$deadline" ]; then
    sinfo -N -l >&2 || true
    tail -n 20 "$BASE/log/slurmd.log" "$BASE/log/slurmctld.log" >&2 || true
    die "node $HOST not idle after ${TIMEOUT}s (state: '${state:-none}')"
  fi
  # a node left DOWN/DRAIN by an earlier unclean stop: bring it back
  case "$state" in down*|drain*|drained*) scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true ;; esac
  sleep 0.5
done
T1=$(date +%s.%N)
log "cluster up: node $HOST is $state ($(awk "BEGIN{printf \"%.1f\", $T1-$T0}") s)"
sinfo
