"""TCP proxies in front of the reftd gRPC ports: every node advertises its proxy's address, so
every call between nodes crosses the proxy of the node it goes to, which can delay or drop
the link.

Used by the chaos soak where `tc netem` is not available (it needs the sch_netem module and
root). A link belongs to a node: dropping it cuts every connection into the node and every
connection out of it (the proxy finds which process opened a loopback connection from
/proc/net/tcp and /proc/PID/fd, so a node's own calls to its peers are caught at their
proxies; by the connection's two ports, since the kernel gives one local port to connections
to different destinations). A dropped link is a black hole, like a pulled cable: connections
stay open but nothing gets through in either direction, so the callers' deadlines and probes
time out; new connections are accepted and then held. Restoring the link closes the held
connections and the callers reconnect at once. A delayed link holds every chunk for the delay,
both ways.
"""
from __future__ import annotations

import os
import select
import socket
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple


def _loopback(port: int) -> str:
    # How /proc/net/tcp{,6} ends a loopback address (127.0.0.1, or v4-mapped in tcp6).
    return f"0100007F:{port:04X}"


def owner_pid(client_port: int, server_port: int, candidates: List[int]) -> Optional[int]:
    """The process among `candidates` that owns the client end of the loopback TCP connection
    127.0.0.1:`client_port` -> 127.0.0.1:`server_port` (an IPv4 socket, or an IPv6 one with the
    v4-mapped address, as gRPC makes them)."""
    # Both ends, not the local port alone: the kernel hands one ephemeral port to several
    # connections when their destinations differ, so another daemon may hold a socket on the
    # same local port (to another peer); matched by the port alone, a connection of the node
    # being cut was taken for that daemon's and let through (issue 42's link drop whose node
    # kept its etcd lease). Every matching socket, not the first listed: an earlier connection
    # with the same ports may linger in TIME_WAIT, owned by no process (inode 0).
    targets = set()
    local, remote = _loopback(client_port), _loopback(server_port)
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if (fields[1].endswith(local) and fields[2].endswith(remote)
                            and fields[9] != "0"):
                        targets.add(f"socket:[{fields[9]}]")
        except OSError:
            continue
    if not targets:
        return None
    for pid in candidates:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # the process is gone
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    return pid
            except OSError:
                # Closed since listed, as a daemon reconnecting closes sockets: the rest of its
                # descriptors are still looked at (giving up on the process here left the
                # connection unattributed, never cut: issue 42's node that kept its lease).
                continue
    return None


def attribute(client_port: int, server_port: int, pids: Dict[int, str]) -> Optional[str]:
    """The node id of the daemon that opened the connection, or None; looked up a few times,
    since /proc/net/tcp is read in pieces and may miss a socket while others come and go."""
    for attempt in range(5):
        pid = owner_pid(client_port, server_port, list(pids))
        if pid is not None:
            return pids[pid]
        time.sleep(0.01 * (attempt + 1))
    return None


class LinkTable:
    """The state of every node's link, shared by the proxies."""

    def __init__(self, pids: Callable[[], Dict[int, str]]):
        self.pids = pids  # pid -> node id of the running daemons
        self.down: Set[str] = set()
        self.delay: Dict[str, float] = {}
        # The connections the proxies carry, as attributed when accepted: what a failed link
        # drop reports (a connection of the cut node counted as another's is not cut).
        self._lock = threading.Lock()
        self._open: Dict[int, Tuple[Optional[str], str, int]] = {}  # key -> (src, dst, port)
        self.unattributed = 0  # connections into a proxy that no running daemon opened

    def state(self, src: Optional[str], dst: str):
        """("down", 0) | ("delay", seconds) | ("up", 0) for a connection src -> dst."""
        if dst in self.down or src in self.down:
            return "down", 0.0
        d = max(self.delay.get(dst, 0.0), self.delay.get(src, 0.0) if src else 0.0)
        return ("delay", d) if d > 0 else ("up", 0.0)

    def set_down(self, node: str) -> None:
        self.down.add(node)

    def set_delay(self, node: str, seconds: float) -> None:
        self.delay[node] = seconds

    def set_up(self, node: str) -> None:
        self.down.discard(node)
        self.delay.pop(node, None)

    def opened(self, key: int, src: Optional[str], dst: str, client_port: int) -> None:
        with self._lock:
            self._open[key] = (src, dst, client_port)
            if src is None:
                self.unattributed += 1

    def closed(self, key: int) -> None:
        with self._lock:
            self._open.pop(key, None)

    def connections(self) -> List[str]:
        """Every open proxied connection, "src -> dst (client port)"; src "?" when no running
        daemon owned it when it was accepted."""
        with self._lock:
            return sorted(f"{src or '?'} -> {dst} ({port})"
                          for src, dst, port in self._open.values())


class LinkProxy:
    def __init__(self, node_id: str, target_port: int, table: LinkTable, host: str = "127.0.0.1"):
        self.node_id, self.table = node_id, table
        self.target = (host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def address(self) -> str:
        return f"{self.target[0]}:{self.port}"

    def close(self) -> None:
        self._stop = True
        self.listener.close()

    def _accept_loop(self) -> None:
        while not self._stop:
            try:
                client, addr = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client, addr[1]), daemon=True).start()

    def _serve(self, client: socket.socket, client_port: int) -> None:
        upstream = None
        src = attribute(client_port, self.port, self.table.pids())
        self.table.opened(id(client), src, self.node_id, client_port)
        try:
            held = False
            while self.table.state(src, self.node_id)[0] == "down":
                if self._stop:
                    return
                held = True
                time.sleep(0.02)  # a new connection on a dropped link: held, never answered
            if held:
                return  # the link came back: the caller reconnects
            upstream = socket.create_connection(self.target, timeout=5)
            self._pump(client, upstream, src)
        except OSError:
            return
        finally:
            self.table.closed(id(client))
            for s in (client, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    def _pump(self, a: socket.socket, b: socket.socket, src: Optional[str]) -> None:
        peers = {a: b, b: a}
        was_down = False
        while not self._stop:
            mode, delay = self.table.state(src, self.node_id)
            if mode == "down":
                was_down = True
                time.sleep(0.02)  # hold everything: neither side hears from the other
                continue
            if was_down:
                return  # back up: drop this connection, the caller reconnects
            readable, _, _ = select.select([a, b], [], [], 0.05)
            if self.table.state(src, self.node_id)[0] == "down":
                continue  # cut while waiting: what arrived stays unread, like the rest
            for s in readable:
                data = s.recv(65536)
                if not data:
                    return
                if delay > 0:
                    time.sleep(delay)
                peers[s].sendall(data)
