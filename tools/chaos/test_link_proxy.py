"""The soak's link proxy attributes a connection to the daemon that opened it, even when another
process holds a socket on the same local port (the kernel hands one ephemeral port to
connections to different destinations) and when one of the daemon's descriptors closes while
the proxy looks: else a dropped link lets that connection through.

  /usr/bin/python3 -m pytest -q tools/chaos/test_link_proxy.py
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from link_proxy import LinkProxy, LinkTable, owner_pid  # noqa: E402

# A process holding a connection from a local port of its choosing to `sys.argv[1]`: prints the
# port, then holds the connection until its stdin closes.
_HOLDER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.connect(("127.0.0.1", int(sys.argv[1])))
print(s.getsockname()[1], flush=True)
sys.stdin.read()
"""


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


@pytest.fixture
def other_process_on_a_port():
    """(pid, port): another process holding a connection from 127.0.0.1:port elsewhere."""
    elsewhere = _listener()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(elsewhere.getsockname()[1])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        port = int(holder.stdout.readline())
        yield holder.pid, port
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
        elsewhere.close()


def _connect_from(port: int, to: int) -> socket.socket:
    """A connection from 127.0.0.1:`port` (shared with the other process: both sockets set
    SO_REUSEADDR and neither listens, as with two connect()-chosen ephemeral ports)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.connect(("127.0.0.1", to))
    return s


def test_owner_is_found_by_both_ports(other_process_on_a_port):
    other_pid, port = other_process_on_a_port
    server = _listener()
    mine = _connect_from(port, server.getsockname()[1])
    accepted, addr = server.accept()
    try:
        assert addr[1] == port
        # The other process is asked first: matched by the local port alone, it was the owner.
        assert owner_pid(port, server.getsockname()[1], [other_pid, os.getpid()]) == os.getpid()
    finally:
        for s in (accepted, mine, server):
            s.close()


def test_a_descriptor_closed_during_the_scan_hides_none_of_the_others(monkeypatch):
    server = _listener()
    mine = socket.create_connection(server.getsockname())
    accepted, addr = server.accept()
    this_socket = f"socket:[{os.fstat(mine.fileno()).st_ino}]"
    readlink, closed = os.readlink, []

    def closing_readlink(path):
        # The first other descriptor of this process is closed between the listing and its
        # readlink, as a daemon reconnecting closes sockets while the proxy looks.
        if (not closed and path.startswith(f"/proc/{os.getpid()}/fd/")
                and readlink(path) != this_socket):
            closed.append(path)
            raise FileNotFoundError(path)
        return readlink(path)

    monkeypatch.setattr(os, "readlink", closing_readlink)
    try:
        assert owner_pid(addr[1], server.getsockname()[1], [os.getpid()]) == os.getpid()
        assert closed
    finally:
        for s in (accepted, mine, server):
            s.close()


def _echo_server() -> socket.socket:
    server = _listener()

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server


def _echo(conn: socket.socket) -> None:
    with conn:
        while True:
            try:
                data = conn.recv(4096)
            except OSError:
                return
            if not data:
                return
            conn.sendall(data)


def test_dropped_link_cuts_a_connection_on_a_shared_port(other_process_on_a_port):
    other_pid, port = other_process_on_a_port
    echo = _echo_server()
    table = LinkTable(lambda: {other_pid: "other", os.getpid(): "cut"})
    proxy = LinkProxy("etcd", echo.getsockname()[1], table)
    conn = _connect_from(port, proxy.port)
    try:
        conn.sendall(b"ping")
        assert conn.recv(4) == b"ping"  # through the proxy: it accepted and attributed it
        assert table.connections() == [f"cut -> etcd ({port})"]
        table.set_down("cut")
        conn.settimeout(1.0)
        conn.sendall(b"keep-alive")
        with pytest.raises(socket.timeout):
            conn.recv(16)  # a black hole: nothing comes back while the link is down
    finally:
        conn.close()
        proxy.close()
        echo.close()
