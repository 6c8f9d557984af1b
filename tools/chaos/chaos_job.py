"""The job the chaos soak trains: one sample trainer (tools/demo/sample_trainer) per rank, one
rank per node. The trainer's buffers are a pure function of (step, buffer, rank), and after
every (re)start it restores and checks every byte against that function: the reference is
independent of reft. A restart of the job kills every rank (as a launcher does when one rank
dies) and starts them again; each must restore the same step, bit-exact, and no older than the
newest step any rank was told was committed (anything older is data lost).
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import List, Optional


class Trainer:
    """One rank's trainer process; a reader thread records its events."""

    def __init__(self, exe: str, socket_path: str, job: str, rank: int, ranks: int,
                 protection: str, size: int, buffers: int, sleep_us: int):
        self.rank = rank
        self.args = [exe, "--socket", socket_path, "--job", job, "--dp", str(rank),
                     "--dp-size", str(ranks), "--protection", protection,
                     "--steps", "1000000000", "--size", str(size), "--buffers", str(buffers),
                     "--sleep-us", str(sleep_us), "--reply-timeout-ms", "120000"]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: List[str] = []
        self.restored: Optional[List[str]] = None  # the first event: restored/restore-error/...
        self.committed = -1
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            words = line.split()
            with self.cond:
                self.lines.append(line.rstrip())
                del self.lines[:-50]
                if words and self.restored is None and words[0] in (
                        "restored", "restore-error", "connect-error", "register-error"):
                    self.restored = words
                if len(words) == 2 and words[0] == "committed":
                    self.committed = max(self.committed, int(words[1]))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait(self, pred, timeout: float) -> bool:
        deadline = time.time() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.time()
                if left <= 0 or (self.proc.poll() is not None and not pred()):
                    return pred()
                self.cond.wait(min(left, 0.5))
            return True

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def tail(self) -> List[str]:
        with self.cond:
            return list(self.lines[-10:])


class ChaosJob:
    def __init__(self, build_dir: str, job: str, ranks: int, protection: str = "arc1",
                 size: int = 120_001, buffers: int = 3, sleep_us: int = 20_000):
        self.exe = os.path.join(build_dir, "tools", "demo", "reft_sample_trainer")
        self.job, self.ranks, self.protection = job, ranks, protection
        self.size, self.buffers, self.sleep_us = size, buffers, sleep_us
        self.trainers: List[Trainer] = []

    @property
    def bytes_per_rank(self) -> int:
        """Bytes one rank's restore checks (buffer b holds size + 7 b bytes)."""
        return sum(self.size + 7 * b for b in range(self.buffers))

    def start(self, sockets: List[str]) -> None:
        """Starts rank r on the daemon listening on sockets[r]."""
        self.trainers = [Trainer(self.exe, sockets[r], self.job, r, self.ranks, self.protection,
                                 self.size, self.buffers, self.sleep_us)
                         for r in range(self.ranks)]

    def kill(self) -> None:
        for t in self.trainers:
            t.kill()

    def committed(self) -> int:
        """The newest step any rank was told is committed job-wide."""
        return max((t.committed for t in self.trainers), default=-1)

    def wait_committed(self, step: int, timeout: float) -> bool:
        """Every rank saw `step` (or a later one) committed."""
        return all(t.wait(lambda t=t: t.committed >= step, timeout) for t in self.trainers)

    def restart_and_verify(self, sockets: List[str], timeout: float = 180.0) -> dict:
        """Kills every rank, starts them again and waits for their restores. Returns
        {"ok", "step", "bytes", "errors"}: ok when every rank restored the same step, bit-exact
        (the trainer checks every byte), no older than what was committed before."""
        committed_before = self.committed()
        self.kill()
        self.start(sockets)
        errors = []
        steps = []
        for t in self.trainers:
            if not t.wait(lambda t=t: t.restored is not None, timeout):
                errors.append(f"rank {t.rank}: no restore within {timeout}s: {t.tail()}")
                continue
            ev = t.restored
            if ev[0] != "restored":
                errors.append(f"rank {t.rank}: {' '.join(ev)}")
            elif ev[1:] == ["-1", "fresh"]:
                steps.append(-1)  # nothing to restore (an error if something was committed)
            elif ev[2] != "ok":
                errors.append(f"rank {t.rank}: restored step {ev[1]} does not match: "
                              f"{' '.join(ev)}")
            else:
                steps.append(int(ev[1]))
        if steps and len(set(steps)) != 1:
            errors.append(f"ranks restored different steps: {steps}")
        restored = min(steps) if steps else None
        if restored is not None and restored < committed_before:
            errors.append(f"restored step {restored} is older than committed step "
                          f"{committed_before}: committed data lost")
        return {"ok": not errors, "step": restored, "committed_before": committed_before,
                "bytes": len(steps) * self.bytes_per_rank if restored is not None and
                restored >= 0 else 0,
                "errors": errors}
