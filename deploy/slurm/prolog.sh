#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/reft.sh, runs as root on every node
# of the allocation before the job starts). Ensures reftd is up and serving, so trainers can
# connect at their first snapshot. A non-zero exit drains the node (Slurm's behaviour), so
# fail only when reftd really cannot be made to run.
set -u
REFTCTL=${REFTCTL:-/usr/bin/reftctl}
SOCKET=${REFT_SOCKET:-/run/reft/reftd.sock}
WAIT_S=${REFT_PROLOG_WAIT_S:-30}

log() { logger -t reft-prolog "job=${SLURM_JOB_ID:-?} $*"; }

if ! systemctl is-active --quiet reftd.service; then
  log "reftd not active; starting it"
  # start, not restart: a running daemon holds other jobs' sessions.
  systemctl start reftd.service || { log "systemctl start reftd failed"; exit 1; }
fi

# Type=notify means "started" already implies READY=1, but the admin socket is the real test.
for ((i = 0; i < WAIT_S; i++)); do
  if "$REFTCTL" --socket "$SOCKET" status >/dev/null 2>&1; then
    log "reftd serving"
    exit 0
  fi
  sleep 1
done
log "reftd did not answer 'reftctl status' within ${WAIT_S}s"
exit 1
