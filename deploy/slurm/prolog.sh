#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/reft.sh, runs as root on every node
# of the allocation before the job starts). Ensures reftd is up and serving, so trainers can
# connect at their first snapshot. A non-zero exit drains the node (Slurm's behaviour), so
# fail only when reftd really cannot be made to run.
#
# Security (docs/security.md): reftctl talks to reftd over the admin socket, whose access is
# checked by the caller's uid (root, the reft user, or security.operator_group), so no token or
# certificate is needed here. Between nodes reftd uses mutual TLS: every node has a certificate
# naming its node id (tools/reft-certs.sh, or the site's CA). An expired certificate would cut
# this node off from its peers, so it drains the node like a daemon that does not start.
set -u
REFTCTL=${REFTCTL:-/usr/bin/reftctl}
SOCKET=${REFT_SOCKET:-/run/reft/reftd.sock}
WAIT_S=${REFT_PROLOG_WAIT_S:-30}
CONFIG=${REFT_CONFIG:-/etc/reft/reftd.toml}

log() { logger -t reft-prolog "job=${SLURM_JOB_ID:-?} $*"; }

# The node certificate (security.tls_cert): expired = no peer accepts this node's calls.
cert=$(sed -n 's/^[[:space:]]*tls_cert[[:space:]]*=[[:space:]]*"\(.*\)".*/\1/p' "$CONFIG" 2>/dev/null | head -1)
if [ -n "$cert" ] && command -v openssl >/dev/null 2>&1; then
  if ! openssl x509 -noout -checkend 0 -in "$cert" >/dev/null 2>&1; then
    log "node certificate $cert is expired or unreadable; peers would refuse this node"
    exit 1
  fi
  openssl x509 -noout -checkend $((7 * 86400)) -in "$cert" >/dev/null 2>&1 ||
    log "node certificate $cert expires within 7 days; renew it"
fi

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
