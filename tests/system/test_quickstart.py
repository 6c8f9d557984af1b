"""README's quickstart (examples/torch/quickstart.py) as a user runs it: torchrun, 3 ranks
against a real reftd. One run goes straight through; in another a rank is SIGKILLed mid-run,
torchrun restarts the ranks, they restore the newest step every rank committed (model,
optimizer and RNG) and finish with the same state, bit for bit, as the run that never stopped."""
import os
import signal

from reft_cluster import LocalCluster
from torchrun_process import Torchrun, descendants

HERE = os.path.dirname(os.path.abspath(__file__))
QUICKSTART = os.path.join(HERE, "..", "..", "examples", "torch", "quickstart.py")
STEPS = 1000  # the kill at step 20 lands long before the end (a step takes ~1-3 ms here)


class Run(Torchrun):
    """One torchrun of the quickstart (3 ranks on one node)."""

    def __init__(self, node, job):
        super().__init__(node.socket, ["--standalone", "--nproc_per_node=3", "--max_restarts=1",
                                       QUICKSTART, "--job", job, "--steps", str(STEPS)])

    def wait_line(self, prefix, timeout=300):
        """Until a worker printed a line starting with `prefix` (an event, never a sleep)."""
        seen = lambda: any(l.startswith(prefix) for l in self.lines)  # noqa: E731
        with self.cv:
            self.cv.wait_for(lambda: seen() or self.ended, timeout)
            assert seen(), "\n".join(self.lines[-40:])

    def finish(self, timeout=300):
        assert self.proc.wait(timeout=timeout) == 0, "\n".join(self.lines[-60:])
        with self.cv:
            self.cv.wait_for(lambda: self.ended, timeout)  # every line read, not only printed
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
