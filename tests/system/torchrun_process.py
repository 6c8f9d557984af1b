"""A torchrun started by a system test: its workers' output as lines (events to wait for, never
sleeps) and its end, workers included, as a node loss takes them."""
import os
import re
import signal
import subprocess
import sys
import threading

import reft

# The workers import the reft the test imported: the build tree's on the torch 1.13 leg, the
# venv's installed package on the torch2 leg.
REFT_PATH = os.path.dirname(os.path.dirname(os.path.abspath(reft.__file__)))
TEE_PREFIX = re.compile(r"\[default\d+\]:")  # torchrun --tee's mark of a worker's output


class Torchrun:
    """`python -m torch.distributed.run ARGS` against the reftd at `socket`, in a session of its
    own; `lines` (under `cv`) holds what its workers printed, `ended` says stdout closed."""

    def __init__(self, socket, args):
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE: a store of its own for each round of the workers,
        # not the agents' one store, shared by every attempt (torch >= 2.4; examples/torchrun).
        env = dict(os.environ, REFT_SOCKET=socket, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
                   PYTHONPATH=os.pathsep.join([REFT_PATH, os.environ.get("PYTHONPATH", "")]))
        # --redirects/--tee: torch 1.13 on Python 3.11 reads the default "0" as None.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--redirects=2", "--tee=1", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True)
        self.lines, self.cv, self.ended = [], threading.Condition(), False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                # --tee prefixes every piece of the worker's output it reads, and a piece may
                # end inside a line ("[default0]:committed 10[default0]:\n"): drop them all.
                self.lines.append(TEE_PREFIX.sub("", line.rstrip("\n")))
                self.cv.notify_all()
        with self.cv:
            self.ended = True
            self.cv.notify_all()

    def kill(self):
        """The agent and its workers, as a node loss takes them: torch >= 2 starts each worker in
        a session of its own, out of the agent's process group. Stopped first, so that the agent
        starts no worker between the listing and the kill."""
        os.killpg(self.proc.pid, signal.SIGSTOP)
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def descendants(root):
    """Every process below `root`, from /proc's parent links."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
