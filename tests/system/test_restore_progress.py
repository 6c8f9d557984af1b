"""reft.Client.restore(progress=...): reports of a real restore of 256 MiB from a real reftd.

The callback gets monotone byte counts and a last report whose bytes_done equals bytes_total
equals the bytes restored; the same reports reach the `reft` logger at INFO; a callback that
raises is logged and dropped while the restore goes on and restores every byte.
"""
import logging

import reft
import reft._progress
from reft_cluster import LocalCluster

SIZE = 256 << 20
PATTERN = bytes(range(251))  # a prime period: no two 4 KiB pages of the state are alike


def pattern(size):
    b = bytearray(PATTERN) * (size // len(PATTERN) + 1)
    del b[size:]
    return b


def connect(node):
    return reft.Client(socket=node.socket, job="progress", timeout=60.0)


def restore_into(node, nbytes, progress):
    """A restarted trainer: fresh zeroed buffers, restored; returns (step, buffers)."""
    big, small = bytearray(nbytes), bytearray(4096)
    with connect(node) as c:
        c.register("big", big)
        c.register("small", small)
        return c.restore(progress=progress), (big, small)


def test_restore_reports_progress_to_the_callback_and_the_reft_logger(caplog, monkeypatch):
    # Reports every 50 ms instead of every second, so that a sub-second restore shows some
    # while it runs (libreft's counter is read the same way).
    monkeypatch.setattr(reft._progress, "INTERVAL_S", 0.05)
    caplog.set_level(logging.INFO, logger="reft")
    with LocalCluster(nodes=1, etcd=0) as cluster:
        node = cluster.nodes[0]
        saved_big, saved_small = pattern(SIZE), pattern(4096)[::-1]
        with connect(node) as c:
            c.register("big", saved_big)
            c.register("small", saved_small)
            c.snapshot(7)
            assert c.wait_committed(7, timeout=60.0)

        reports = []
        step, (big, small) = restore_into(node, SIZE, reports.append)
        assert step == 7
        assert big == saved_big and small == saved_small
        restored = SIZE + 4096
        assert reports, "the progress callback was never called"
        done = [r["bytes_done"] for r in reports]
        assert done == sorted(done), f"bytes_done went back: {done}"
        for r in reports[:-1]:
            assert r["phase"] in ("deciding", "fetching", "copying", "staging"), r
            assert r["bytes_total"] in (0, restored), r  # 0 until reftd placed the state
        last = reports[-1]
        assert last["phase"] == "done"
        assert last["bytes_done"] == last["bytes_total"] == restored, last
        assert last["bytes_per_s"] > 0
        logged = [rec for rec in caplog.records
                  if rec.name == "reft" and rec.levelno == logging.INFO
                  and hasattr(rec, "reft_restore_progress")]
        assert [rec.reft_restore_progress for rec in logged] == reports

        # A callback that raises: logged once at WARNING, not called again, the restore whole.
        caplog.clear()
        calls = []

        def broken(report):
            calls.append(report)
            raise ValueError("progress bar broke")

        step, (big, small) = restore_into(node, SIZE, broken)
        assert step == 7
        assert big == saved_big and small == saved_small
        assert len(calls) == 1
        warned = [rec for rec in caplog.records
                  if rec.name == "reft" and rec.levelno == logging.WARNING]
        assert len(warned) == 1 and "progress bar broke" in caplog.text
        # The reports still reach the log after the callback is dropped.
        assert any(getattr(rec, "reft_restore_progress", {}).get("phase") == "done"
                   for rec in caplog.records)
