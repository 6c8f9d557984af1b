"""A TCP proxy on loopback for partition tests: a daemon reaches its target (etcd, a peer)
through it, and the test cuts and heals the link.

A cut behaves like a network partition, not like a crash: nothing is closed or refused, bytes
simply stop moving in both directions (new connections are accepted but go nowhere), so the
daemon only notices through its own deadlines. Healing delivers what was held back, as TCP
retransmission would after a partition heals.
"""
from __future__ import annotations

import socket
import threading
from typing import List


class TcpProxy:
    def __init__(self, target: str):
        """`target`: HOST:PORT to forward to. Listens on 127.0.0.1:<free port>."""
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._cond = threading.Condition()
        self._cut = False
        self._closed = False
        self._sockets: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._cond:
            self._cut = True

    def heal(self) -> None:
        with self._cond:
            self._cut = False
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cut = False
            self._cond.notify_all()
            sockets = list(self._sockets)
        for s in sockets + [self._listener]:
            try:
                s.close()
            except OSError:
                pass

    def _wait_link(self) -> bool:
        """Blocks while the link is cut; False once the proxy is closed."""
        with self._cond:
            while self._cut and not self._closed:
                self._cond.wait()
            return not self._closed

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        if not self._wait_link():
            client.close()
            return
        try:
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._cond:
            self._sockets += [client, upstream]
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or not self._wait_link():
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
