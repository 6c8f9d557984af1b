"""README's quickstart (examples/torch/quickstart.py) as a user runs it: torchrun, 3 ranks
against a real reftd. One run goes straight through; in another a rank is SIGKILLed mid-run,
torchrun restarts the ranks, they restore the newest step every rank committed (model,
optimizer and RNG) and finish with the same state, bit for bit, as the run that never stopped."""
import os
import signal
import subprocess
import sys
import threading

import reft
from reft_cluster import LocalCluster
from test_torchrun_elastic import TEE_PREFIX, descendants

HERE = os.path.dirname(os.path.abspath(__file__))
QUICKSTART = os.path.join(HERE, "..", "..", "examples", "torch", "quickstart.py")
STEPS = 1000  # the kill at step 20 lands long before the end (a step takes ~1-3 ms here)
REFT_PATH = os.path.dirname(os.path.dirname(reft.__file__))  # this leg's reft


class Run:
    """One torchrun of the quickstart; its workers' lines, collected as they come."""

    def __init__(self, node, job):
        env = dict(os.environ, REFT_SOCKET=node.socket, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
                   PYTHONPATH=os.pathsep.join([REFT_PATH, os.environ.get("PYTHONPATH", "")]))
        # --redirects/--tee: torch 1.13 on Python 3.11 reads the default "0" as None.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
             "--max_restarts=1", "--redirects=2", "--tee=1", QUICKSTART, "--job", job,
             "--steps", str(STEPS)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True)
        self.lines, self.cv, self.ended = [], threading.Condition(), False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(TEE_PREFIX.sub("", line.rstrip("\n")))
                self.cv.notify_all()
        with self.cv:
            self.ended = True
            self.cv.notify_all()

    def wait_line(self, prefix, timeout=300):
        """Until a worker printed a line starting with `prefix` (an event, never a sleep)."""
        seen = lambda: any(l.startswith(prefix) for l in self.lines)  # noqa: E731
        with self.cv:
            self.cv.wait_for(lambda: seen() or self.ended, timeout)
            assert seen(), "\n".join(self.lines[-40:])

    def finish(self, timeout=300):
        assert self.proc.wait(timeout=timeout) == 0, "\n".join(self.lines[-60:])
        with self.cv:
            return sorted(l for l in self.lines if " done " in l), list(self.lines)

    def kill_rank(self, rank):
        for pid in descendants(self.proc.pid):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in env and b"LOCAL_RANK=%d" % rank in env:
                os.kill(pid, signal.SIGKILL)
                return pid
        raise AssertionError(f"no worker of rank {rank} under torchrun {self.proc.pid}")


def test_the_quickstart_resumes_after_a_rank_is_killed_bit_for_bit():
    with LocalCluster(nodes=1, etcd=0) as cluster:
        node = cluster.nodes[0]
        straight, _ = Run(node, "straight").finish()
        assert len(straight) == 3, straight

        run = Run(node, "killed")
        run.wait_line(f"rank 1 step {STEPS // 2} ")
        run.kill_rank(1)
        resumed, lines = run.finish()
        # Started over from a committed step, not from step 0; and ended where the
        # uninterrupted run did, on every rank.
        assert sum(l.startswith("rank 0 step 0 ") for l in lines) == 1, lines[-40:]
        assert len(resumed) == 3, resumed  # the killed attempt had not finished
        assert resumed == straight, (resumed, straight)
