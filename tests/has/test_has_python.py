"""HAS hints from Python (c.bubble_begin / c.bubble_end / c.enable_has) against a real daemon."""

import os
import subprocess
import tempfile
import time

import pytest

import reft


@pytest.fixture
def daemon():
    tmp = tempfile.TemporaryDirectory(prefix="reft-has-py-")
    sock = os.path.join(tmp.name, "reftd.sock")
    for d in ("shm", "persist"):
        os.mkdir(os.path.join(tmp.name, d))
    # Port 0: the kernel picks one when reftd binds; nothing dials this lone daemon's peer port.
    proc = subprocess.Popen([os.environ["REFT_REFTD"], "--node-id", "has-py", "--listen",
                             "127.0.0.1:0", "--socket", sock, "--shm-dir",
                             os.path.join(tmp.name, "shm"), "--persist-dir",
                             os.path.join(tmp.name, "persist"), "--log-level", "warn"])
    deadline = time.time() + 20
    while not os.path.exists(sock):
        assert proc.poll() is None, "reftd exited"
        assert time.time() < deadline, "reftd did not create its socket"
        time.sleep(0.05)
    yield sock
    proc.kill()
    proc.wait(timeout=30)
    tmp.cleanup()


def test_hints_round_trip_and_restore(daemon):
    data = bytearray(os.urandom(1 << 16))
    with reft.Client(socket=daemon, job="has-py") as c:
        c.register("w", data)
        with pytest.raises(reft.InvalidArgumentError):
            c.enable_has(2, 3, 4, 0.01, 0.02)  # stage 3 of 2 stages
        c.enable_has(2, 0, 4, 0.01, 0.02)
        for step in range(3):
            data[0] = step
            c.snapshot(step)
            c.bubble_begin()
            c.bubble_end()
            c.fence()
        assert c.wait_committed(2, 10.0)
    want = bytes(data)
    data[:] = bytes(len(data))
    with reft.Client(socket=daemon, job="has-py") as c:
        c.register("w", data)
        assert c.restore() == 2
    assert bytes(data) == want
