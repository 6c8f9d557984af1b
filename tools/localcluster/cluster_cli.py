"""tools/localcluster.sh: a local reft cluster that outlives the command starting it.

    cluster_cli.py up [--nodes N] [--tls] [--dir DIR] [--build-dir B]
    cluster_cli.py status [--dir DIR]
    cluster_cli.py down [--dir DIR]

`up` starts one etcd and N reftd on loopback through LocalCluster (the processes the system
tests run), detached, records their pids in DIR/cluster.json and prints, as shell comments, each
node's socket, address and log, then one `export REFT_SOCKET=...` line for node 0, so that
`eval "$(tools/localcluster.sh up)"` sets it. `down` stops what cluster.json names and removes
DIR and the nodes' shared-memory directory. DIR defaults to $TMPDIR/reft-localcluster.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import List, Optional

from etcd_server import etcd_binary
from reft_cluster import LocalCluster, find_build_dir

STATE = "cluster.json"
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL
ADMIN_SUFFIX = ".admin"  # reftd's admin socket lies beside its socket


class Refused(Exception):
    """Something the user has to fix first; the message says what and how."""


def default_dir() -> str:
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", "reft-localcluster")


def check_prerequisites(build_dir: str, tls: bool) -> None:
    if not os.path.isdir(build_dir):
        raise Refused(f"no build tree at {build_dir}: build reft first with "
                      "`tools/build.sh reftd reftctl` (or set REFT_BUILD_DIR / --build-dir to "
                      "your build directory)")
    for target, rel in (("reftd", "daemon/app/reftd"), ("reftctl", "tools/reftctl/reftctl")):
        if not os.access(os.path.join(build_dir, rel), os.X_OK):
            raise Refused(f"{target} is not built ({os.path.join(build_dir, rel)} is missing): "
                          f"run `tools/build.sh reftd reftctl` (or `cmake --build {build_dir} "
                          "--target reftd reftctl`)")
    try:
        etcd_binary()
    except FileNotFoundError as e:
        raise Refused(f"{e}, e.g. `sudo apt-get install etcd-server etcd-client`") from None
    if not shutil.which("etcdctl"):
        raise Refused("etcdctl not found (it checks that etcd is up): install Debian's "
                      "etcd-client (tools/setup.sh), e.g. `sudo apt-get install etcd-client`")
    if tls and not shutil.which("openssl"):
        raise Refused("--tls needs openssl to make the certificates: `sudo apt-get install "
                      "openssl`")


def alive(pid: int, binary: str) -> bool:
    """Whether `pid` is still the process that was started from `binary` (not a zombie, not a
    reused pid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
    except (OSError, IndexError):
        return False
    return os.path.basename(argv0) == os.path.basename(binary)


def read_state(root: str) -> Optional[dict]:
    try:
        with open(os.path.join(root, STATE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def processes(state: dict) -> List[dict]:
    """Every process of the cluster, daemons first (they leave etcd last)."""
    return state["nodes"] + state["etcd"]


def running(state: dict) -> List[dict]:
    return [p for p in processes(state) if alive(p["pid"], p["binary"])]


def write_state(cluster: LocalCluster) -> None:
    state = {
        "root": cluster.root,
        "shm_root": cluster.shm_root,
        "reftctl": cluster.reftctl,
        "tls": cluster.tls is not None,
        "nodes": [{"name": n.node_id, "pid": n.proc.pid, "binary": cluster.reftd,
                   "socket": n.socket, "addr": n.addr, "log": n.log_path}
                  for n in cluster.nodes],
        "etcd": [{"name": m.name, "pid": m.proc.pid, "binary": etcd_binary(),
                  "addr": m.endpoint, "log": m.log_path} for m in cluster.etcd.members],
    }
    path = os.path.join(cluster.root, STATE)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=1)
    os.replace(path + ".tmp", path)


def up(args) -> int:
    root = os.path.abspath(args.dir)
    state = read_state(root)
    if state is not None:
        if running(state):
            raise Refused(f"a local cluster already runs in {root}: stop it first with "
                          f"`tools/localcluster.sh down --dir {root}`")
        stop_and_remove(state, quiet=True)  # left over from a cluster that is gone
    elif os.path.isdir(root) and os.listdir(root):
        # `down` removes DIR: never one that holds anything else.
        raise Refused(f"{root} exists and is not a local cluster's directory: pass another "
                      "--dir (a new or empty one)")
    socket = os.path.join(root, f"node{args.nodes - 1}", "reftd.sock" + ADMIN_SUFFIX)
    if len(socket.encode()) > SOCKET_PATH_MAX:
        raise Refused(f"{socket} is longer than a unix socket path may be "
                      f"({SOCKET_PATH_MAX} bytes): pass a shorter --dir")
    build_dir = os.path.abspath(args.build_dir or find_build_dir())
    check_prerequisites(build_dir, args.tls)
    cluster = LocalCluster(nodes=args.nodes, build_dir=build_dir, tls=args.tls, root=root,
                           detach=True)
    try:
        cluster.start()
        # Every node registered before anyone asks `reftctl nodes list`.
        for n in cluster.nodes:
            cluster.nodes[0].wait_member_state(n.node_id, "alive")
        write_state(cluster)
    except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError) as e:
        cluster.print_log_tails()
        cluster.close()
        raise Refused(f"the cluster did not come up, stopped it again: "
                      f"{str(e).splitlines()[0]} (the logs' last lines are above)") from None
    except BaseException:
        cluster.close()
        raise
    node0 = cluster.nodes[0]
    tls = " with mutual TLS" if args.tls else ""
    print(f"# reft local cluster in {root}: etcd at {cluster.etcd.endpoints}, "
          f"{args.nodes} reftd{tls}")
    for n in cluster.nodes:
        print(f"#   {n.node_id}: socket {n.socket}  address {n.addr}  log {n.log_path}")
    print(f"# etcd log: {cluster.etcd.members[0].log_path}")
    print(f"# reftctl: {cluster.reftctl} --socket {node0.socket} status")
    print(f"# stop it: tools/localcluster.sh down --dir {root}")
    print(f"export REFT_SOCKET={node0.socket}")
    return 0


def stop(proc: dict, timeout: float = 30.0) -> None:
    """SIGTERM (SIGKILL after `timeout`), then waits until the process is gone."""
    pid = proc["pid"]
    for sig in (signal.SIGCONT, signal.SIGTERM):  # a stopped process handles SIGTERM only then
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
    deadline = time.time() + timeout
    while alive(pid, proc["binary"]):
        if time.time() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.time() + timeout
        time.sleep(0.02)


def stop_and_remove(state: dict, quiet: bool = False) -> None:
    for proc in running(state):
        stop(proc)
        if not quiet:
            print(f"stopped {proc['name']} (pid {proc['pid']})")
    shutil.rmtree(state["shm_root"], ignore_errors=True)
    shutil.rmtree(state["root"], ignore_errors=True)


def down(args) -> int:
    root = os.path.abspath(args.dir)
    state = read_state(root)
    if state is None:
        print(f"no local cluster in {root} (nothing to stop)", file=sys.stderr)
        return 0
    stop_and_remove(state)
    print(f"removed {root}")
    return 0


def status(args) -> int:
    root = os.path.abspath(args.dir)
    state = read_state(root)
    if state is None:
        print(f"no local cluster in {root}: start one with `tools/localcluster.sh up`",
              file=sys.stderr)
        return 1
    healthy = True
    for proc in processes(state):
        up_now = alive(proc["pid"], proc["binary"])
        what = "running" if up_now else "not running"
        if up_now and "socket" in proc:
            r = subprocess.run([state["reftctl"], "--socket", proc["socket"], "status"],
                               capture_output=True, text=True, timeout=30)
            what = "serving" if r.returncode == 0 else f"not answering: {r.stderr.strip()}"
            up_now = r.returncode == 0
        healthy = healthy and up_now
        print(f"{proc['name']:8} pid {proc['pid']:<8} {proc['addr']:22} {what}  "
              f"(log {proc['log']})")
    return 0 if healthy else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tools/localcluster.sh",
                                 description="A local reft cluster on loopback: one etcd and N "
                                             "reftd, running in the background.")
    sub = ap.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start etcd and N reftd, detached")
    p_up.add_argument("--nodes", type=int, default=3, help="reftd to start (default 3)")
    p_up.add_argument("--tls", action="store_true",
                      help="mutual TLS between the daemons and to etcd (certificates under DIR)")
    p_up.add_argument("--build-dir", help="the build tree (default $REFT_BUILD_DIR or build/)")
    for p in (p_up, sub.add_parser("status", help="which processes run and answer"),
              sub.add_parser("down", help="stop everything and remove DIR")):
        p.add_argument("--dir", default=default_dir(),
                       help="where sockets, logs and state live (default $TMPDIR/"
                            "reft-localcluster)")
    args = ap.parse_args(argv)
    if args.command == "up" and args.nodes < 1:
        ap.error("--nodes must be at least 1")
    try:
        return {"up": up, "down": down, "status": status}[args.command](args)
    except Refused as e:
        print(f"localcluster: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
