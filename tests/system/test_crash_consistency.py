"""docs/failure-model.md on one node with real processes: trainer and daemon SIGKILLs at many points,
a flipped byte in a slot, the memory limit, malformed frames on the socket."""
import glob
import os
import random
import signal
import socket
import time

import pytest

from reft_cluster import LocalCluster
from trainer import SampleTrainer

SEED = int(os.environ.get("REFT_TEST_SEED", "20261122"))


def restore_and_check(cluster, node, job, at_least, **trainer_args):
    t = SampleTrainer(cluster, node, job, steps=0, **trainer_args)
    ev = t.wait_for("restored")
    t.finish()
    assert ev[2] == "ok", f"restore of {job} failed: {ev}"
    assert int(ev[1]) >= at_least, f"restored {ev[1]} but step {at_least} had been committed"
    return int(ev[1])


def test_trainer_sigkill_at_many_points_never_loses_the_committed_step():
    rng = random.Random(SEED)
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        committed = -1
        for attempt in range(12):
            t = SampleTrainer(cluster, node, "kill-trainer", size=2_000_003)
            ev = t.wait_for("restored")
            assert ev[2] in ("ok", "fresh"), ev
            assert int(ev[1]) >= committed
            # Kill somewhere inside the snapshot loop: at a random delay after start.
            time.sleep(rng.uniform(0.0, 0.3))
            t.kill()
            for line in t.lines:
                parts = line.split()
                if parts and parts[0] == "committed":
                    committed = max(committed, int(parts[1]))
        restore_and_check(cluster, node, "kill-trainer", committed, size=2_000_003)
        # No partial slot survives a kill: nothing is left in state "writing" once sessions end.
        listing = node.ctl("snapshots", "list", "--job", "kill-trainer", json_output=True)
        assert all(s["state"] != "writing" for s in listing["snapshots"])


def test_reftd_sigkill_during_snapshots_and_commits_then_adopt():
    rng = random.Random(SEED + 1)
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        committed = -1
        for attempt in range(6):
            t = SampleTrainer(cluster, node, "kill-daemon", size=1_000_001)
            ev = t.wait_for("restored")
            assert ev[2] in ("ok", "fresh"), ev
            assert int(ev[1]) >= committed
            t.wait_for("committed")
            time.sleep(rng.uniform(0.0, 0.2))
            node.kill(signal.SIGKILL)  # mid-copy, mid-seal or mid-commit
            t.kill()
            for line in t.lines:
                parts = line.split()
                if parts and parts[0] == "committed":
                    committed = max(committed, int(parts[1]))
            node.start()  # adopts the segments after checking headers and checksums
            assert "adopted" in node.log()
        step = restore_and_check(cluster, node, "kill-daemon", committed, size=1_000_001)
        verify = node.ctl("snapshots", "verify", "--job", "kill-daemon", json_output=True)
        assert verify["ok"] and verify["step"] == step


def test_flipped_byte_is_reported_and_restore_refuses_it():
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        t = SampleTrainer(cluster, node, "flip", steps=3, size=1 << 20, buffers=1)
        assert t.finish() == 0
        ok = node.ctl("snapshots", "verify", "--job", "flip", json_output=True)
        assert ok["ok"] and ok["step"] == 2
        listing = node.ctl("snapshots", "list", "--job", "flip", json_output=True)
        slot = next(s for s in listing["snapshots"] if s["step"] == 2)
        seg = glob.glob(os.path.join(node.shm_dir, f"flip.*.s{slot['slot']}.seg"))
        assert len(seg) == 1, os.listdir(node.shm_dir)
        # The single region is 1 MiB, page aligned, at the end of the file: flip a byte in it.
        with open(seg[0], "r+b") as f:
            f.seek(-12345, os.SEEK_END)
            b = f.read(1)
            f.seek(-12345, os.SEEK_END)
            f.write(bytes([b[0] ^ 0x40]))
        r = node.ctl("-o", "json", "snapshots", "verify", "--job", "flip", check=False)
        assert r.returncode == 1
        assert '"ok": false' in r.stdout and "buf0" in r.stdout
        t = SampleTrainer(cluster, node, "flip", steps=0, size=1 << 20, buffers=1)
        ev = t.wait_for("restore-error")
        assert ev[1] == "5", ev  # reft::StatusCode::kCorrupted
        assert "buf0" in " ".join(ev) or "chunk" in " ".join(ev)


def test_memory_limit_refuses_new_snapshots_and_keeps_committed():
    with LocalCluster(nodes=1, extra_args=["--memory-limit", "12M"]) as cluster:
        node = cluster.nodes[0]
        t = SampleTrainer(cluster, node, "small", steps=4, size=1_000_000, buffers=1)
        assert t.finish() == 0
        # A second job whose slots do not fit next to the first one's.
        t = SampleTrainer(cluster, node, "big", steps=3, size=8_000_000, buffers=1)
        t.finish()
        errors = [l for l in t.lines if l.startswith("snapshot-error")]
        assert errors, t.lines
        assert all(l.split()[2] == "4" for l in errors), errors  # kOutOfMemory
        assert "memory limit" in errors[0] or "limit" in errors[0]
        restore_and_check(cluster, node, "small", 3, size=1_000_000, buffers=1)


def test_malformed_frames_are_rejected_and_daemon_keeps_serving():
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        payloads = [b"", b"\x00", b"garbage" * 10, b"REFT" + b"\xff" * 60, os.urandom(4096),
                    b"\x52\x45\x46\x54" + b"\x00" * 12 + b"\xff\xff\xff\x7f"]
        for p in payloads:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.settimeout(5)
            s.connect(node.socket)
            try:
                s.send(p) if p else s.shutdown(socket.SHUT_WR)
                s.recv(65536)  # an error reply or a hang-up; never a crash
            except (ConnectionResetError, BrokenPipeError, socket.timeout):
                pass
            s.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(node.socket)
        try:
            s.send(b"x" * (8 << 20))  # oversized
        except OSError:
            pass
        s.close()
        assert node.proc.poll() is None
        node.ctl("status")
        t = SampleTrainer(cluster, node, "after-garbage", steps=2, size=1000, buffers=1)
        assert t.finish() == 0
