"""A TCP proxy in front of one reftd's gRPC port: the node advertises the proxy's address, so
every call its peers make to it crosses the proxy, which can delay or drop that link.

Used by the chaos soak where `tc netem` is not available (it needs the sch_netem module and
root). A dropped link is a black hole, like a pulled cable: connections stay open but nothing
gets through in either direction (the callers' deadlines and probes time out) and new
connections are accepted and then held. Restoring the link closes the held connections, so the
callers reconnect at once. The proxy acts on the node's inbound link: calls the node makes
itself go through its peers' proxies.
"""
from __future__ import annotations

import select
import socket
import threading
import time
from typing import List


class LinkProxy:
    UP, DELAY, DOWN = "up", "delay", "down"

    def __init__(self, target_port: int, host: str = "127.0.0.1"):
        self.target = (host, target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.mode = self.UP
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._conns: List[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def address(self) -> str:
        return f"{self.target[0]}:{self.port}"

    def set_up(self) -> None:
        self._set(self.UP, 0.0, close_held=True)

    def set_delay(self, seconds: float) -> None:
        self._set(self.DELAY, seconds, close_held=False)

    def set_down(self) -> None:
        self._set(self.DOWN, 0.0, close_held=False)

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        self._close_all()

    def _set(self, mode: str, delay: float, close_held: bool) -> None:
        was_down = self.mode == self.DOWN
        self.mode, self.delay_s = mode, delay
        if close_held and was_down:
            self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()  # the node is down: as if nothing listened
                continue
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self._stop:
                if self.mode == self.DOWN:
                    time.sleep(0.02)  # hold everything: neither side hears from the other
                    continue
                readable, _, _ = select.select([a, b], [], [], 0.05)
                for s in readable:
                    data = s.recv(65536)
                    if not data:
                        return
                    if self.mode == self.DELAY and self.delay_s > 0:
                        time.sleep(self.delay_s)
                    peers[s].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass
