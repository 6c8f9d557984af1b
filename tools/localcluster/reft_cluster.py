"""An embedded local reft cluster: several real reftd processes on loopback.

Used by the demo (tools/demo.sh), the system tests (tests/system) and benchmarks. Every
daemon gets its own shm dir, socket, persist dir and a free TCP port; everything lives under
one temporary root that is removed on close(). The control plane is a real etcd on loopback
(one member, or three with etcd=3; etcd=0 runs the daemons' own gossip instead). Nothing here
fakes a component: the daemons are the real binaries, killed with real signals.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import List, Optional

from etcd_server import EtcdCluster, free_port
from reft_tls import ClusterTls


def scrape_metrics(port: int) -> dict:
    """reftd's Prometheus samples on 127.0.0.1:`port` (--metrics-listen): {"name{labels}": value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.eE+-]+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def find_build_dir() -> str:
    env = os.environ.get("REFT_BUILD_DIR")
    if env:
        return os.path.abspath(env)
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.abspath(os.path.join(here, "..", "..", "build"))


@dataclass
class Node:
    """One reftd process and its private directories."""
    cluster: "LocalCluster"
    node_id: str
    port: int
    root: str
    extra_args: List[str] = field(default_factory=list)
    proc: Optional[subprocess.Popen] = None
    host: str = "127.0.0.1"
    netns: Optional[str] = None  # run reftd inside this network namespace (ip netns exec)
    etcd_via: Optional[str] = None  # reach etcd at this HOST:PORT (a TcpProxy) instead
    metrics_port: Optional[int] = None  # --metrics-listen 127.0.0.1:PORT (LocalCluster(metrics=True))

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def socket(self) -> str:
        return os.path.join(self.root, "reftd.sock")

    @property
    def shm_dir(self) -> str:
        return os.path.join(self.cluster.shm_root, self.node_id)

    @property
    def persist_dir(self) -> str:
        # One directory for the whole cluster, like an NFS mount shared by the nodes.
        return self.cluster.persist_dir

    @property
    def log_path(self) -> str:
        return os.path.join(self.root, "reftd.log")

    def args(self) -> List[str]:
        peers = ",".join(n.addr for n in self.cluster.nodes if n is not self)
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        a = prefix + [self.cluster.reftd, "--node-id", self.node_id, "--listen", self.addr,
             "--socket", self.socket, "--shm-dir", self.shm_dir,
             "--persist-dir", self.persist_dir, "--log-level", self.cluster.log_level]
        if peers:
            a += ["--peers", peers]
        if self.cluster.etcd is not None:
            a += ["--etcd", self.etcd_via or self.cluster.etcd.endpoints]
        config = self.cluster.config_path
        if self.cluster.tls:
            config = self.cluster.tls.config_for(self.node_id, self.root, config, self.host,
                                                 etcd=self.cluster.etcd is not None)
        if config:
            a += ["--config", config]
        if self.metrics_port:
            a += ["--metrics-listen", f"127.0.0.1:{self.metrics_port}"]
        return a + self.extra_args

    def metrics(self) -> dict:
        """This reftd's Prometheus samples (LocalCluster(metrics=True))."""
        assert self.metrics_port, "start the cluster with metrics=True"
        return scrape_metrics(self.metrics_port)

    def start(self, wait: bool = True, timeout: float = 20.0) -> "Node":
        os.makedirs(self.root, exist_ok=True)
        os.makedirs(self.persist_dir, exist_ok=True)
        log = open(self.log_path, "ab")
        # detach: a session of its own, so that it outlives the process that started it and the
        # terminal's hangup (tools/localcluster.sh up).
        detach = self.cluster.detach
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=subprocess.STDOUT,
                                     env=self.cluster.env, start_new_session=detach,
                                     stdin=subprocess.DEVNULL if detach else None)
        log.close()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"reftd {self.node_id} exited with {self.proc.returncode}:\n"
                                   + self.log())
            # Over the local admin socket: ready even when the TCP endpoint requires TLS.
            r = subprocess.run([self.cluster.reftctl, "--socket", self.socket, "status"],
                               capture_output=True, text=True, timeout=30)
            serving = r.returncode == 0 or "refused:" in r.stderr  # a token-protected daemon
            if serving and os.path.exists(self.socket):
                return
            time.sleep(0.05)
        raise TimeoutError(f"reftd {self.node_id} not ready after {timeout}s:\n" + self.log())

    def ctl(self, *args: str, check: bool = True, json_output: bool = False):
        cmd = [self.cluster.reftctl, "--addr", self.addr]
        if self.cluster.tls:
            cmd += self.cluster.tls.ctl_args()
        if json_output:
            cmd += ["-o", "json"]
        r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError(f"reftctl {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        if json_output and r.returncode == 0:
            return json.loads(r.stdout)
        return r

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused daemon handles SIGTERM only then
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        return self.proc.returncode

    def member_state(self, node_id: str) -> Optional[str]:
        """How this daemon sees `node_id`: "alive", "suspect", "dead", or None if unknown.
        With etcd a node is registered (alive) or not (dead: its lease expired)."""
        for n in self.ctl("nodes", "list", json_output=True)["nodes"]:
            if n["node_id"] == node_id:
                return n["state"]
        return "dead" if self.cluster.etcd is not None else None

    def wait_member_state(self, node_id: str, state: str, timeout: float = 30.0) -> float:
        """Polls until this daemon sees `node_id` in `state`; returns the seconds it took."""
        start = time.time()
        while self.member_state(node_id) != state:
            if time.time() - start > timeout:
                raise TimeoutError(f"{self.node_id} does not see {node_id} {state} after "
                                   f"{timeout}s")
            time.sleep(0.05)
        return time.time() - start

    def pause(self) -> None:
        """SIGSTOP: the daemon hangs (alive to the kernel, silent to its peers)."""
        self.kill(signal.SIGSTOP)

    def resume(self) -> None:
        self.kill(signal.SIGCONT)

    def wipe_memory(self) -> None:
        """What a lost node loses: its shared-memory segments."""
        shutil.rmtree(self.shm_dir, ignore_errors=True)

    def log(self) -> str:
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


class LocalCluster:
    """N reftd on loopback. Use as a context manager."""

    def __init__(self, nodes: int = 1, build_dir: Optional[str] = None,
                 log_level: str = "info", extra_args: Optional[List[str]] = None,
                 keep: bool = False, config: Optional[str] = None, etcd: int = 1,
                 etcd_host: str = "127.0.0.1", tls: bool = False, metrics: bool = False,
                 root: Optional[str] = None, detach: bool = False):
        """`config`: TOML text every daemon reads with --config (flags still override it).
        `etcd`: members of the etcd cluster the daemons coordinate through (0: gossip);
        `etcd_host`: the address they listen on (a bridge address when daemons run in network
        namespaces). `tls`: mutual TLS between the daemons and for ctl() (certificates per node
        id). `metrics`: every daemon serves Prometheus metrics on a port of its own
        (Node.metrics()). `root`: the directory for the daemons' sockets, logs and persist dir
        (created; default a fresh temporary one); `detach`: the daemons run in sessions of
        their own and outlive this process (tools/localcluster/cluster_cli.py)."""
        self.build_dir = build_dir or find_build_dir()
        self.reftd = os.path.join(self.build_dir, "daemon", "app", "reftd")
        self.reftctl = os.path.join(self.build_dir, "tools", "reftctl", "reftctl")
        for b in (self.reftd, self.reftctl):
            if not os.access(b, os.X_OK):
                raise FileNotFoundError(f"{b} not built (set REFT_BUILD_DIR)")
        if root is not None:
            os.makedirs(root, exist_ok=True)
            self.root = os.path.abspath(root)
        else:
            self.root = tempfile.mkdtemp(prefix="reft-cluster-")
        self.detach = detach
        # Segments go to tmpfs like in production; a private subdirectory per cluster.
        shm_base = "/dev/shm" if os.path.isdir("/dev/shm") else self.root
        self.shm_root = tempfile.mkdtemp(prefix="reft-cluster-", dir=shm_base)
        self.persist_dir = os.path.join(self.root, "persist")
        self.log_level = log_level
        self.keep = keep
        self.extra_args = list(extra_args or [])
        self.with_metrics = metrics
        self.config_path = None
        if config is not None:
            self.config_path = os.path.join(self.root, "reftd.toml")
            with open(self.config_path, "w") as f:
                f.write(config)
        self.env = dict(os.environ)
        self.tls = ClusterTls(self.root) if tls else None
        self.etcd: Optional[EtcdCluster] = (
            # On tmpfs: etcd fsyncs every write, and on a disk shared with a loaded build an
            # fsync can take seconds (leases expire, commits stall); nothing here must outlive
            # the machine.
            EtcdCluster(os.path.join(self.shm_root, "etcd"), etcd, host=etcd_host,
                        tls=self.tls.etcd(etcd_host) if self.tls else None) if etcd > 0
            else None)
        self.nodes: List[Node] = []
        for i in range(nodes):
            self.nodes.append(Node(self, f"node{i}", free_port(),
                                   os.path.join(self.root, f"node{i}"), list(extra_args or []),
                                   metrics_port=free_port() if metrics else None))

    def add_node(self, node_id: str, start: bool = True, host: str = "127.0.0.1",
                 netns: Optional[str] = None) -> Node:
        """A new node (a replacement machine: empty memory, a new identity) seeded with the
        addresses of every node known so far; optionally inside a network namespace."""
        node = Node(self, node_id, free_port(), os.path.join(self.root, node_id),
                    list(self.extra_args), host=host, netns=netns,
                    metrics_port=free_port() if self.with_metrics else None)
        self.nodes.append(node)
        if start:
            node.start()
        return node

    # What the daemons recorded in etcd, read directly (clusters on etcd only).
    def registered(self, node: "Node") -> bool:
        """Whether `node` is registered in etcd: its lease is alive, nobody declared it dead."""
        return self.etcd.get(f"/reft/v1/nodes/{node.node_id}") is not None

    def committed_step(self, job: str) -> Optional[int]:
        """The step `job` last committed job-wide, as etcd records it (None: none yet)."""
        value = self.etcd.get(f"/reft/v1/jobs/{job}/committed")
        return json.loads(value)["step"] if value else None

    def coordinator_of(self, job: str) -> Optional["Node"]:
        """The node that coordinates `job`'s commits now (None while nobody does)."""
        value = self.etcd.get(f"/reft/v1/jobs/{job}/coordinator")
        node_id = json.loads(value)["node"] if value else None
        return next((n for n in self.nodes if n.node_id == node_id), None)

    def start(self) -> "LocalCluster":
        if self.etcd is not None:
            self.etcd.start()
        if self.tls:
            self.tls.issue([self.tls.spec(n.node_id, n.host) for n in self.nodes])  # one run
        for n in self.nodes:
            n.start(wait=False)
        for n in self.nodes:
            n.wait_ready()
        return self

    def close(self) -> None:
        for n in self.nodes:
            try:
                n.stop()
            except Exception:  # noqa: BLE001 - best effort teardown
                n.kill()
        if self.etcd is not None:
            self.etcd.close()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(self.shm_root, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            # A daemon that did not come up leaves the others (and etcd) running: __exit__ is
            # not called for a failed __enter__.
            self.close()
            raise

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.print_log_tails()  # the daemons' side of a failed test, before close() drops it
        self.close()

    def print_log_tails(self, lines: int = 40) -> None:
        """The last `lines` lines of every daemon's log, and etcd's last warnings, on stderr
        (pytest shows them with the failure)."""
        for n in self.nodes:
            tail = n.log().splitlines()[-lines:]
            print(f"--- last {len(tail)} lines of reftd {n.node_id} ({n.log_path})",
                  "\n".join(tail), sep="\n", file=sys.stderr)
        for m in self.etcd.members if self.etcd is not None else []:
            warned = m.warnings()
            print(f"--- last {len(warned)} warnings of {m.name} ({m.log_path})",
                  "\n".join(warned), sep="\n", file=sys.stderr)
