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
                 protection: str, size: int, buffers: int, sleep_us: int, wait_file: str):
        self.rank = rank
        self.args = [exe, "--socket", socket_path, "--job", job, "--dp", str(rank),
                     "--dp-size", str(ranks), "--protection", protection,
                     "--steps", "1000000000", "--size", str(size), "--buffers", str(buffers),
                     "--sleep-us", str(sleep_us), "--reply-timeout-ms", "120000"]
        self.args += ["--wait-file", wait_file]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: List[str] = []
        self.restored: Optional[List[str]] = None  # the first event: restored/restore-error/...
        self.fenced: Optional[str] = None  # its snapshot was refused: an older restore epoch
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
                if len(words) > 2 and words[0] == "snapshot-error" and words[2] == "13":
                    self.fenced = line.rstrip()  # 13: cancelled
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
    def __init__(self, build_dir: str, job: str, ranks: int, barrier_dir: str,
                 protection: str = "arc1", size: int = 120_001, buffers: int = 3,
                 sleep_us: int = 20_000):
        self.exe = os.path.join(build_dir, "tools", "demo", "reft_sample_trainer")
        self.job, self.ranks, self.protection = job, ranks, protection
        self.size, self.buffers, self.sleep_us = size, buffers, sleep_us
        self.trainers: List[Trainer] = []
        self.barrier_dir = barrier_dir  # where start() puts its barrier files
        self.generation = 0
        self.committed_earlier = -1  # the newest commit seen by trainers killed since

    @property
    def bytes_per_rank(self) -> int:
        """Bytes one rank's restore checks (buffer b holds size + 7 b bytes)."""
        return sum(self.size + 7 * b for b in range(self.buffers))

    def start(self, sockets: List[str]) -> str:
        """Starts rank r on the daemon listening on sockets[r]; each restores, then waits for
        the returned barrier file before it trains (create it with release())."""
        self.generation += 1
        barrier = os.path.join(self.barrier_dir, f"{self.job}-go-{self.generation}")
        self.trainers = [Trainer(self.exe, sockets[r], self.job, r, self.ranks, self.protection,
                                 self.size, self.buffers, self.sleep_us, barrier)
                         for r in range(self.ranks)]
        return barrier

    @staticmethod
    def release(barrier: str) -> None:
        with open(barrier, "w"):
            pass

    def kill(self) -> None:
        for t in self.trainers:
            t.kill()
        self.committed_earlier = self.committed()

    def committed(self) -> int:
        """The newest step any rank (of this or an earlier start) was told is committed."""
        return max([self.committed_earlier] + [t.committed for t in self.trainers])

    def wait_committed(self, step: int, timeout: float) -> bool:
        """Every rank saw `step` (or a later one) committed."""
        return all(t.wait(lambda t=t: t.committed >= step, timeout) for t in self.trainers)

    def restart_and_verify(self, sockets: List[str], timeout: float = 180.0,
                           fenced_retry: bool = True) -> dict:
        """Kills every rank and restarts the job the way a launcher does: every rank restores
        and checks its state, and no rank trains before all have restored (a real job's first
        collective holds them; here a barrier file). Returns {"ok", "step", "bytes",
        "restores", "errors", "fenced"}: ok when every rank restored the same step, bit-exact
        (the trainer checks every byte), no older than what was committed before.

        Ranks that restored different steps are not a loss if reft fences them: a second
        failure during the restore (bytes of the decided step lost) moves the job to the
        persistent tier after some ranks restored from memory; those ranks are of an older
        restore epoch, and their first snapshot must be refused (the trainer exits), whereupon
        the launcher restarts the job once more. Not being fenced is counted as lost."""
        committed_before = self.committed()
        self.kill()
        errors: List[str] = []
        barrier = self.start(sockets)
        step, nbytes = self._collect_restores(timeout, errors)
        if fenced_retry and step is None and any("different steps" in e for e in errors):
            self.release(barrier)
            if any(t.wait(lambda t=t: t.fenced is not None, 30.0) for t in self.trainers):
                fenced = [t.fenced for t in self.trainers if t.fenced]
                again = self.restart_and_verify(sockets, timeout, fenced_retry=False)
                again["fenced"] = {"first_restore": errors, "refused": fenced}
                again["restores"] += self.ranks
                return again
            errors.append("the ranks of the older restore were not fenced")
        if step is not None and step < committed_before:
            errors.append(f"restored step {step} is older than committed step "
                          f"{committed_before}: committed data lost")
        self.release(barrier)
        return {"ok": not errors, "step": step, "committed_before": committed_before,
                "bytes": nbytes, "restores": self.ranks if step is not None else 0,
                "errors": errors, "fenced": None}

    def _collect_restores(self, timeout: float, errors: List[str]):
        """Waits for every rank's restore event; returns (the step they agree on or None,
        bytes checked). Disagreement, refusals and mismatches go to `errors`."""
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
        if len(steps) != self.ranks:
            return None, 0
        if len(set(steps)) != 1:
            errors.append(f"ranks restored different steps: {steps}")
            return None, 0
        return steps[0], (self.ranks * self.bytes_per_rank if steps[0] >= 0 else 0)
