#!/bin/bash
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/reft.sh, runs as root on every node
# of the allocation after the job ends). Frees the job's snapshots ONLY when the job
# completed successfully. After a failure, timeout, preemption or node failure the snapshots
# are exactly what the requeued/resubmitted job restores from, so they stay; they are also
# freed when the same job id runs again and succeeds, or by an operator with
# `reftctl snapshots drop`.
#
# The drops go over the admin socket as root, an operator (docs/security.md): its access is
# checked by the caller's uid, so no credentials are stored for the epilog. Between nodes reftd
# uses mutual TLS; nothing here crosses the network.
#
# The reft job id is the Slurm job id unless the trainer sets another one: export
# REFT_JOB=<name> in the job and in slurm.conf's TaskEpilog environment, or edit JOB below.
set -u -o pipefail
REFTCTL=${REFTCTL:-/usr/bin/reftctl}
SOCKET=${REFT_SOCKET:-/run/reft/reftd.sock}
JOB=${REFT_JOB:-${SLURM_JOB_ID:?SLURM_JOB_ID not set}}

log() { logger -t reft-epilog "job=$JOB $*"; }

# Slurm sets SLURM_JOB_EXIT_CODE (wait status) and SLURM_JOB_DERIVED_EC in the epilog on
# recent versions; treat anything but an explicit 0 as "not successful".
exit_code=${SLURM_JOB_EXIT_CODE:-${SLURM_JOB_DERIVED_EC:-unknown}}
if [ "$exit_code" != "0" ]; then
  log "job did not complete successfully (exit=$exit_code); keeping its snapshots"
  exit 0
fi

if ! command -v jq >/dev/null 2>&1; then
  log "jq not installed; cannot list the job's steps, keeping its snapshots"
  exit 0
fi

# Every step of this job that holds slots on this node (JSON schema: docs/reftctl/schemas).
steps=$("$REFTCTL" --socket "$SOCKET" -o json snapshots list --job "$JOB" 2>/dev/null |
        jq -r '[.snapshots[].step] | unique | .[]') || {
  log "reftd unreachable; nothing dropped"
  exit 0
}

for step in $steps; do
  # --force: the newest committed step is refused without it (it is normally the restore
  # point); for a job that finished successfully nothing will restore from it.
  if "$REFTCTL" --socket "$SOCKET" snapshots drop --job "$JOB" --step "$step" --force >/dev/null; then
    log "dropped step $step"
  else
    log "could not drop step $step (reftctl exit $?)"
  fi
done
# Never fail the epilog for reft's sake: a failing epilog drains the node.
exit 0
