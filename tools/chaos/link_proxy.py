"""TCP proxies in front of the reftd gRPC ports: every node advertises its proxy's address, so
every call between nodes crosses the proxy of the node it goes to, which can delay or drop
the link.

Used by the chaos soak where `tc netem` is not available (it needs the sch_netem module and
root). A link belongs to a node: dropping it cuts every connection into the node and every
connection out of it (the proxy finds which process opened a loopback connection from
/proc/net/tcp and /proc/PID/fd, so a node's own calls to its peers are caught at their
proxies). A dropped link is a black hole, like a pulled cable: connections stay open but
nothing gets through in either direction, so the callers' deadlines and probes time out; new
connections are accepted and then held. Restoring the link closes the held connections and
the callers reconnect at once. A delayed link holds every chunk for the delay, both ways.
"""
from __future__ import annotations

import os
import select
import socket
import threading
import time
from typing import Callable, Dict, List, Optional, Set


def owner_pid(port: int, candidates: List[int]) -> Optional[int]:
    """The process among `candidates` that owns the loopback TCP socket bound to `port` (an
    IPv4 socket, or an IPv6 one with the v4-mapped address, as gRPC makes them)."""
    # Every socket bound to the port, not the first listed: an earlier connection from the
    # same port to another destination may linger in TIME_WAIT, owned by no process (inode 0);
    # stopping at it left the new connection unattributed, and a dropped link let it through.
    targets = set()
    suffix = f"0100007F:{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if fields[1].endswith(suffix) and fields[9] != "0":
                        targets.add(f"socket:[{fields[9]}]")
        except OSError:
            continue
    if not targets:
        return None
    for pid in candidates:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    return pid
        except OSError:
            continue
    return None


class LinkTable:
    """The state of every node's link, shared by the proxies."""

    def __init__(self, pids: Callable[[], Dict[int, str]]):
        self.pids = pids  # pid -> node id of the running daemons
        self.down: Set[str] = set()
        self.delay: Dict[str, float] = {}

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
            pids = self.table.pids()
            src = pids.get(owner_pid(addr[1], list(pids)))
            threading.Thread(target=self._serve, args=(client, src), daemon=True).start()

    def _serve(self, client: socket.socket, src: Optional[str]) -> None:
        upstream = None
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
            for s in readable:
                data = s.recv(65536)
                if not data:
                    return
                if delay > 0:
                    time.sleep(delay)
                peers[s].sendall(data)
