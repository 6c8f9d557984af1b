#!/usr/bin/env bash
# A local reft cluster on this machine: one etcd and N reftd on loopback, in the background
# (docs/operations.md "Try it on one machine").
#
#   tools/localcluster.sh up [--nodes N] [--tls] [--dir DIR] [--build-dir BUILD]
#   tools/localcluster.sh status [--dir DIR]
#   tools/localcluster.sh down [--dir DIR]
#
# `up` prints each node's socket, address and log as comments and one `export REFT_SOCKET=...`
# line (node 0), so `eval "$(tools/localcluster.sh up)"` points trainers and reftctl at it.
# DIR (default $TMPDIR/reft-localcluster, /tmp without TMPDIR) holds the sockets, logs and the
# pids `down` stops. Needs the build tree (tools/build.sh reftd reftctl; BUILD defaults to
# $REFT_BUILD_DIR or build/) and Debian's etcd-server and etcd-client (tools/setup.sh).
# The processes are LocalCluster's (tools/localcluster/reft_cluster.py), the system tests' own.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python=/usr/bin/python3
[ -x "$python" ] || python=python3
exec "$python" "$here/localcluster/cluster_cli.py" "$@"
