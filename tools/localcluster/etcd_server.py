"""Real etcd servers for the local cluster (tools/localcluster), the demo and the tests.

One member, or a three-member cluster for the fault tests, each an `etcd` process (Debian's
etcd-server) on loopback with its own data directory. Members are killed with real signals and
restarted on their data directory. reftd reaches them with --etcd HOST:PORT,... Optionally the
client port speaks TLS and requires a client certificate (EtcdTls), as production etcd should.
"""
from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import List, Optional


_handed_out = set()  # every port free_port() returned in this process


def _ports_outside_the_ephemeral_range() -> List[int]:
    """Ports from 10000 up that the kernel never picks for a bind to port 0 or an outgoing
    connection (ip_local_port_range): a port handed out here cannot be taken, between this
    check and the daemon's bind, by some process's ephemeral port -- reftd's own bulk
    listener binds port 0, and a spare started later once lost its port to one."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return []
    return [p for p in range(10000, 65536) if p < low or p > high]


_candidates = _ports_outside_the_ephemeral_range()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# Test processes running at once (ctest runs several) must not hand out the same port: each
# port handed out holds a lock on byte `port` of one file for as long as the process lives
# (POSIX record locks go away with their process, so nothing is ever stale). The C++ test
# fixtures take the same locks (tests/coord/etcd_fixture.cc).
_PORT_LOCKS = os.path.join(os.environ.get("TMPDIR") or "/tmp", "reft-test-ports.lock")
_port_locks_fd: Optional[int] = None


def _claim(port: int) -> bool:
    """Whether this process now holds `port` among the test processes (True when the lock
    file cannot be used at all: then only the bind check protects it)."""
    global _port_locks_fd
    if _port_locks_fd is None:
        try:
            _port_locks_fd = os.open(_PORT_LOCKS, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            _port_locks_fd = -1
    if _port_locks_fd < 0:
        return True
    try:
        fcntl.lockf(_port_locks_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError:
        return False  # another test process handed it out
    return True


def free_port() -> int:
    """A loopback port nothing listens on now, that this process never handed out before (two
    calls in a row could otherwise return the same port before either is bound) and that no
    other test process holds, drawn at random outside the kernel's ephemeral range."""
    for _ in range(1000):
        if _candidates:
            port = random.choice(_candidates)
        else:  # no ephemeral range to avoid: let the kernel choose
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if port in _handed_out or not _bindable(port) or not _claim(port):
            continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free loopback port left for this process")


def etcd_binary() -> str:
    path = shutil.which("etcd") or "/usr/bin/etcd"
    if not os.access(path, os.X_OK):
        raise FileNotFoundError("etcd not found: install Debian's etcd-server (tools/setup.sh)")
    return path


@dataclass
class EtcdTls:
    """Client-port TLS: the CA both sides trust, the server's certificate (naming the address
    clients dial) and the client certificate etcdctl presents."""
    ca: str
    cert: str
    key: str
    client_cert: str
    client_key: str


class EtcdMember:
    def __init__(self, cluster: "EtcdCluster", index: int):
        self.cluster = cluster
        self.name = f"etcd{index}"
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = os.path.join(cluster.root, self.name + ".data")
        self.log_path = os.path.join(cluster.root, self.name + ".log")
        self.proc: Optional[subprocess.Popen] = None

    @property
    def endpoint(self) -> str:
        return f"{self.cluster.host}:{self.client_port}"

    def warnings(self, lines: int = 20) -> List[str]:
        """The last `lines` warnings and errors of this member's log (slow applies, fsyncs,
        elections: what stalls a lease's expiry or a commit)."""
        try:
            with open(self.log_path, errors="replace") as f:
                notable = [l.rstrip("\n") for l in f
                           if '"level":"warn"' in l or '"level":"error"' in l]
        except FileNotFoundError:
            return []
        return notable[-lines:]

    def start(self, new_cluster: bool) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        tls = self.cluster.tls
        client = f"{'https' if tls else 'http'}://{self.endpoint}"
        args = [etcd_binary(), "--name", self.name, "--data-dir", self.data_dir,
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", self.cluster.initial_cluster,
                "--initial-cluster-state", "new" if new_cluster else "existing",
                "--initial-cluster-token", "reft-local",
                # Elections in half a second and 1 s minimum leases: failures are noticed in
                # seconds on loopback (production keeps etcd's defaults).
                "--heartbeat-interval", "50", "--election-timeout", "500",
                "--logger", "zap", "--log-outputs", self.log_path]
        if tls:
            args += ["--cert-file", tls.cert, "--key-file", tls.key, "--client-cert-auth",
                     "--trusted-ca-file", tls.ca]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            if sig == signal.SIGKILL:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(timeout=30)

    def pause(self) -> None:
        self.kill(signal.SIGSTOP)

    def resume(self) -> None:
        self.kill(signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start(new_cluster=False)
        self.cluster.wait_healthy()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class EtcdCluster:
    """`members` etcd processes under `root` (created if missing), serving clients on `host`
    (loopback, or a bridge address when daemons run in network namespaces)."""

    def __init__(self, root: str, members: int = 1, host: str = "127.0.0.1",
                 tls: Optional[EtcdTls] = None):
        self.root = root
        self.host = host
        self.tls = tls
        os.makedirs(root, exist_ok=True)
        self.members: List[EtcdMember] = [EtcdMember(self, i) for i in range(members)]
        self.initial_cluster = ",".join(f"{m.name}=http://127.0.0.1:{m.peer_port}"
                                        for m in self.members)

    @property
    def endpoints(self) -> str:
        """HOST:PORT,... for reftd's --etcd."""
        return ",".join(m.endpoint for m in self.members)

    def start(self, timeout: float = 30.0) -> "EtcdCluster":
        for m in self.members:
            m.start(new_cluster=True)
        self.wait_healthy(timeout)
        return self

    def restart_all(self, timeout: float = 30.0) -> None:
        """Starts every member that is down on its data directory, then waits for a quorum."""
        for m in self.members:
            if not m.running:
                m.start(new_cluster=False)
        self.wait_healthy(timeout)

    def etcdctl(self, *args: str, check: bool = True, timeout: float = 10.0):
        env = dict(os.environ, ETCDCTL_API="3")
        cmd = ["etcdctl", "--endpoints", self.endpoints, "--dial-timeout", "1s",
               "--command-timeout", "2s"]
        if self.tls:
            cmd += ["--cacert", self.tls.ca, "--cert", self.tls.client_cert,
                    "--key", self.tls.client_key]
        cmd += args
        return subprocess.run(cmd, capture_output=True, text=True, check=check, env=env,
                              timeout=timeout)

    def healthy(self) -> bool:
        try:
            return self.etcdctl("get", "/reft-local/health", check=False).returncode == 0
        except (subprocess.TimeoutExpired, FileNotFoundError):
            return False

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(m.running for m in self.members) and self.healthy():
                return
            time.sleep(0.05)
        logs = ""
        for m in self.members:
            try:
                with open(m.log_path, errors="replace") as f:
                    logs += f"---- {m.name}\n" + f.read()[-3000:]
            except FileNotFoundError:
                pass
        raise TimeoutError(f"etcd did not become healthy within {timeout}s\n{logs}")

    def get(self, key: str) -> Optional[str]:
        """The value of `key` (linearizable), or None."""
        out = self.etcdctl("get", key, "--print-value-only").stdout
        return out.rstrip("\n") if out else None

    def close(self) -> None:
        for m in self.members:
            try:
                m.kill()
            except Exception:  # noqa: BLE001 - best effort teardown
                pass
