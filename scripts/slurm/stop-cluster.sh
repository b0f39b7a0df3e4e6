#!/usr/bin/env bash
# Stop the one-node Slurm cluster started by start-cluster.sh (slurmd,
# slurmctld, munged). Idempotent; leaves packages, config and state in place.
# Set SLURM_PURGE_STATE=1 to also remove the state/spool/log directory.
set -uo pipefail
BASE="${SLURM_STATE_DIR:-/var/spool/slurm-roar}"
log() { printf '[stop-cluster] %s\n' "$*" >&2; }

stop_pidfile() { # name pidfile
  local name=$1 pf=$2 pid
  [ -f "$pf" ] || { log "$name: not running"; return 0; }
  pid=$(cat "$pf")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then log "$name: SIGKILL $pid"; kill -KILL "$pid"; fi
    log "$name: stopped ($pid)"
  else
    log "$name: stale pidfile"
  fi
  rm -f "$pf"
}

# cancel whatever is still queued/running so no job step outlives slurmd
command -v scancel >/dev/null && scancel --user=root 2>/dev/null || true
stop_pidfile slurmd    "$BASE/slurmd.pid"
stop_pidfile slurmctld "$BASE/slurmctld.pid"
stop_pidfile munged    /run/munge/munged.pid

if [ "${SLURM_PURGE_STATE:-0}" = 1 ]; then
  rm -rf "$BASE"
  log "removed $BASE"
fi
exit 0
