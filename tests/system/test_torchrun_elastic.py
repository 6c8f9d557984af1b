"""torchrun runs the example trainer (examples/torchrun/train_gpt.py) as a real elastic job: one
torchrun agent per node (`--nnodes=2:3`, c10d rendezvous), a GPT-like model trained with data
parallelism over gloo, snapshotting every step through the node's reftd.

Mid-training a node is lost: its agent, its trainer and its reftd are SIGKILLed and its memory
wiped. torchrun restarts the surviving ranks at once, with WORLD_SIZE 2, usually before the
control plane has declared the node dead; each rank asks reft.elastic where it runs, which waits
for the decision the job's coordinator publishes (a reroute onto the two survivors), restores the
newest committed step with reshape=True — the state the three ranks saved, checked bit for bit
against the digest recorded at that step — and training goes on to the end with two ranks.

When the node comes back (its reftd restarted with its memory wiped, its agent started again)
torchrun restarts every rank with WORLD_SIZE 3 at once; the coordinator has decided to grow the
job back onto the node that came (policy "grow": it runs below the size it had), and each rank
restores the newest step the two committed, bit for bit, in the layout of three (the node that
came reads its state from the two).
"""
import glob
import os
import signal
import socket
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402

from reft_cluster import LocalCluster, free_port  # noqa: E402
from test_reftctl_json import validate  # noqa: E402
from torchrun_process import Torchrun  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torchrun", "train_gpt.py")
JOB = "gpt"
STEPS = 40
LOSE_AFTER = 6  # the node is lost once step LOSE_AFTER is committed

CONFIG = """
[etcd]
lease_ttl_s = 2

[planner]
mode = "automatic"
spare_wait_ms = 0

[restore]
piece_timeout_ms = 5000
timeout_ms = 60000
"""

pytestmark = pytest.mark.skipif(not torch.distributed.is_available()
                                or not torch.distributed.is_gloo_available(),
                                reason="torch without gloo")


class Agent(Torchrun):
    """One torchrun agent (and its worker) for `node`; stdout lines collected by a thread."""

    def __init__(self, cluster, node, rdzv_port, record_dir, steps=STEPS):
        self.log_dir = os.path.join(node.root, "torchrun")
        self.node = node
        self.cluster = cluster
        super().__init__(node.socket, [
            "--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=c10d",
            f"--rdzv_endpoint=127.0.0.1:{rdzv_port}", f"--rdzv_id={JOB}", "--max_restarts=3",
            "--rdzv_conf=last_call_timeout=1,join_timeout=120", "--monitor_interval=0.5",
            f"--log_dir={self.log_dir}", EXAMPLE, "--job", JOB, "--steps", str(steps),
            "--record-dir", record_dir, "--step-sleep", "0.05"])

    def wait_for(self, predicate, timeout, what, since=0):
        """The first event line `predicate` accepts (an event, never a sleep), from line `since`."""
        with self.cv:
            seen = since
            deadline = time.monotonic() + timeout
            while True:
                for line in self.lines[seen:]:
                    if predicate(line):
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, (
                    f"{self.node.node_id}: no {what}:" + self.worker_stderr() + "\n--- agent output:\n"
                    + "\n".join(self.lines[-60:]))
                self.cv.wait(min(left, 1.0))

    def worker_stderr(self):
        """Why it failed, first (a CI excerpt keeps the head): each worker attempt's last line
        (its exception) and the planner's log lines of every node; then the tails of every
        attempt's stderr (torchrun's --log_dir)."""
        paths = sorted(glob.glob(os.path.join(self.log_dir, "*", "attempt_*", "*", "stderr.log")))
        tails = {}
        for path in paths:
            with open(path) as f:
                tails[path] = f.read()[-3000:]
        head = "\n--- last line of each attempt:\n" + "\n".join(
            f"{os.path.relpath(p, self.log_dir)}: {(t.strip().splitlines() or [''])[-1]}" for p, t in tails.items())
        planners = [f"{n.node_id}: {line}" for n in self.cluster.nodes
                    for line in n.log().splitlines() if "planner:" in line]
        head += "\n--- planner log lines:\n" + "\n".join(planners[-20:])
        return head + "".join(f"\n--- {p}\n{t}" for p, t in tails.items())


def wait_listening(port, agent, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline and agent.proc.poll() is None, (
                "\n".join(agent.lines[-40:]) + agent.worker_stderr())
            time.sleep(0.05)


def committed_at_least(step):
    return lambda line: line.startswith("committed ") and int(line.split()[1]) >= step


def start_training(cluster, port, record, agents, steps=STEPS):
    """One agent per node (appended to `agents` as it starts, for the caller to kill), every rank
    started fresh, step LOSE_AFTER committed."""
    # The first agent hosts the rendezvous store (the node that stays): the others start once
    # it listens.
    agents.append(Agent(cluster, cluster.nodes[0], port, record, steps))
    wait_listening(port, agents[0])
    for node in cluster.nodes[1:]:
        agents.append(Agent(cluster, node, port, record, steps))
    for a in agents:
        assert a.wait_for(lambda l: l == "fresh", 180, "fresh start")
    agents[0].wait_for(committed_at_least(LOSE_AFTER), 180, f"commit of step {LOSE_AFTER}")


def lose_node(agent):
    """The node's agent, trainer and reftd SIGKILLed, its memory wiped."""
    agent.kill()
    agent.node.kill(signal.SIGKILL)
    agent.node.wipe_memory()


def test_torchrun_restarts_the_survivors_smaller_and_they_restore_bit_for_bit(tmp_path):
    with LocalCluster(nodes=3, config=CONFIG) as cluster:
        port = free_port()
        record = str(tmp_path / "digests")
        agents = []
        try:
            start_training(cluster, port, record, agents)
            lost = agents[2]
            lose_node(lost)

            restored = []
            for a in agents[:2]:
                # Each survivor takes the position the decision put on its own node.
                placed = a.wait_for(lambda l: l.startswith("placed dp ") and " of 2 " in l, 240,
                                    "placement after the loss")
                assert placed.endswith(" on " + a.node.node_id), (a.node.node_id, placed)
                line = a.wait_for(lambda l: l.startswith("restored "), 240, "restore after the loss")
                _, step, verdict = line.split()
                assert verdict == "ok", (a.node.node_id, line)
                restored.append(int(step))
            assert restored[0] == restored[1] >= LOSE_AFTER, restored
            for a in agents[:2]:
                a.wait_for(lambda l: l == f"done {STEPS - 1}", 300, "end of training")
                assert a.proc.wait(timeout=60) == 0, "\n".join(a.lines[-40:]) + a.worker_stderr()

            # What the ranks acted on: the coordinator's published reroute onto the survivors.
            doc = cluster.nodes[0].ctl("plan", "show", "--job", JOB, json_output=True)
            assert doc["publication"]["state"] == "decided", doc["publication"]
            assert doc["publication"]["basis"] == lost.node.node_id
        finally:
            for a in agents:
                if a.proc.poll() is None:
                    a.kill()


def test_a_node_that_comes_back_grows_the_job_and_every_rank_restores_bit_for_bit(tmp_path):
    steps = 90
    with LocalCluster(nodes=3, config=CONFIG) as cluster:
        port = free_port()
        record = str(tmp_path / "digests")
        agents = []
        try:
            start_training(cluster, port, record, agents, steps)
            lost = agents[2]
            lose_node(lost)
            shrunk = []
            for a in agents[:2]:
                a.wait_for(lambda l: l.startswith("placed dp ") and " of 2 " in l, 240, "placement after the loss")
                line = a.wait_for(lambda l: l.startswith("restored "), 240, "restore after the loss")
                assert line.split()[2] == "ok", (a.node.node_id, line)
                shrunk.append(int(line.split()[1]))
            # The two train on; the node comes back while they do.
            agents[0].wait_for(committed_at_least(shrunk[0] + 3), 180, "a commit of the two",
                               since=len(agents[0].lines))

            lost.node.start()
            agents[2] = Agent(cluster, lost.node, port, record, steps)
            grown = []
            for a in agents:
                placed = a.wait_for(lambda l: l.startswith("placed dp ") and " of 3 " in l, 240,
                                    "placement after the node came back")
                since = a.lines.index(placed)
                assert placed.endswith(" on " + a.node.node_id), (a.node.node_id, placed)
                line = a.wait_for(lambda l: l.startswith("restored "), 240, "restore in the grown layout", since)
                _, step, verdict = line.split()
                assert verdict == "ok", (a.node.node_id, line)
                grown.append(int(step))
            assert grown[0] == grown[1] == grown[2] > shrunk[0], (shrunk, grown)
            for a in agents:
                a.wait_for(lambda l: l == f"done {steps - 1}", 300, "end of training")
                assert a.proc.wait(timeout=60) == 0, "\n".join(a.lines[-40:]) + a.worker_stderr()

            # What the ranks acted on: the coordinator's growth onto the node that came back.
            doc = cluster.nodes[0].ctl("plan", "show", "--job", JOB, json_output=True)
            assert doc["publication"]["basis"] == "+" + lost.node.node_id, doc["publication"]
            assert doc["layout"]["dp"] == 3 and doc["decision"]["policy"] == "none", doc["decision"]
            assert doc["peak_units"] == 3
            validate(doc, "plan-show.schema.json")
        finally:
            for a in agents:
                if a.proc.poll() is None:
                    a.kill()
