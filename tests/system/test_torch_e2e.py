"""PyTorch end to end: a small GPT-like model trains over four reftd with DP=4 and with PP=2 × DP=2
(gloo, CPU), snapshotting every step. Mid-training one node is lost: its trainer and its reftd
are SIGKILLed and its memory wiped. Like torchelastic, the job is restarted as a whole, with a
fresh reftd (a new identity) in place of the lost node; every rank restores the newest committed
step through reft (the lost rank by REFT-load from the other nodes) and training goes on.

The resumed run must be bit-identical to an uninterrupted run of the same seed: every step's
loss (compared as float.hex) and every rank's final parameters and optimizer state (sha256).
"""
import os
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed  # noqa: E402

from reft_cluster import LocalCluster, free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 14
KILL_AFTER = 5  # the node is lost once step KILL_AFTER is committed

CONFIG = """
[peer]
probe_interval_ms = 100
probe_timeout_ms = 80
suspicion_timeout_ms = 600

[restore]
piece_timeout_ms = 5000
timeout_ms = 60000
"""

pytestmark = pytest.mark.skipif(not torch.distributed.is_available()
                                or not torch.distributed.is_gloo_available(),
                                reason="torch without gloo")


class GptRank:
    """One gpt_trainer.py process; its stdout lines are collected by a reader thread."""

    def __init__(self, cluster, node, job, pp, dp, pp_size, dp_size, port):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(cluster.build_dir, "client", "python")
        self.pp, self.dp = pp, dp
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "gpt_trainer.py"), "--socket", node.socket,
             "--job", job, "--pp", str(pp), "--pp-size", str(pp_size), "--dp", str(dp),
             "--dp-size", str(dp_size), "--master-port", str(port), "--steps", str(STEPS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.split())

    def events(self, word):
        return [ev[1:] for ev in list(self.lines) if ev and ev[0] == word]

    def wait_event(self, word, arg, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if [arg] in [ev[:1] for ev in self.events(word)]:
                return
            if self.proc.poll() is not None:
                self.reader.join(5)
                if [arg] in [ev[:1] for ev in self.events(word)]:
                    return
                raise AssertionError(f"rank pp{self.pp} dp{self.dp} exited "
                                     f"({self.proc.returncode}) before '{word} {arg}': "
                                     f"{self.lines[-3:]} {self.proc.stderr.read()[-2000:]}")
            time.sleep(0.05)
        raise TimeoutError(f"rank pp{self.pp} dp{self.dp}: no '{word} {arg}' in {timeout}s")

    def finish(self, timeout=300):
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.reader.join(5)
        assert rc == 0, f"rank pp{self.pp} dp{self.dp} exited {rc}: {self.lines[-3:]} " \
                        f"{self.proc.stderr.read()[-3000:]}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.reader.join(5)

    def losses(self):
        return {int(step): value for step, value in self.events("loss")}

    def final(self):
        (digest,), = self.events("final")
        return digest


def planner_layers(pp_size):
    """Per model layer (stage, parameter bytes, optimizer bytes) as the default Checkpointer
    registers them (docs/client.md "Layers"): the embeddings, each block, the final norm with
    the head; AdamW's state of a parameter is exp_avg and exp_avg_sq (its size each) and a
    float32 step."""
    import gpt_trainer
    out = []
    for pp in range(pp_size):
        stage = gpt_trainer.Stage(pp, pp_size)
        groups = ([[stage.tok, stage.pos]] if stage.first else []) + [[b] for b in stage.blocks]
        groups += [[stage.ln_f, stage.head]] if stage.last else []
        for modules in groups:
            params = [p for m in modules for p in m.parameters()]
            tensors = params + [b for m in modules for b in m.buffers()]
            out.append((pp, sum(t.numel() * t.element_size() for t in tensors),
                        sum(2 * p.numel() * p.element_size() + 4 for p in params)))
    return out


def launch(cluster, nodes, job, pp_size, dp_size):
    """Rank (pp, dp) on nodes[pp * dp_size + dp]: each sharding group spans dp_size nodes."""
    port = free_port()
    return [GptRank(cluster, nodes[pp * dp_size + dp], job, pp, dp, pp_size, dp_size, port)
            for pp in range(pp_size) for dp in range(dp_size)]


def last_stage(ranks, pp_size):
    return [r for r in ranks if r.pp == pp_size - 1]


@pytest.mark.parametrize("pp_size,dp_size,lost", [(1, 4, 1), (2, 2, 2)],
                         ids=["dp4", "pp2xdp2"])
def test_resumed_training_is_bit_identical(pp_size, dp_size, lost):
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = list(cluster.nodes)

        # The reference: the same job, uninterrupted.
        reference = launch(cluster, nodes, "reference", pp_size, dp_size)
        for r in reference:
            r.finish()
        want_losses = [r.losses() for r in last_stage(reference, pp_size)]
        want_final = {(r.pp, r.dp): r.final() for r in reference}
        for losses in want_losses:
            assert sorted(losses) == list(range(STEPS))
        # The planner's job model has every layer, its optimizer state included, without the
        # trainer naming any (the stages numbered their layers one after the other). Under
        # pp = 2 both stages name their blocks "blocks.0", "blocks.1": one name saved by two
        # stages is a tied weight to the job model, counted once, in stage 0's layer; so the
        # parameter bytes are compared with pp = 1 only (the optimizer state's names carry
        # their stage).
        doc = nodes[0].ctl("plan", "show", "--job", "reference", json_output=True)
        got = [(l["layer"], l["stage"], l["param_bytes"], l["optimizer_bytes"])
               for l in doc["model"]["layers"]]
        want = [(i,) + layer for i, layer in enumerate(planner_layers(pp_size))]
        if pp_size > 1:
            got, want = ([(l, st, o) for l, st, _, o in x] for x in (got, want))
        assert got == want
        # Data parallel replicas see different data: their losses differ, their states do not.
        assert len({want_final[(p, d)] for p in range(pp_size) for d in range(dp_size)}) \
            == pp_size

        # The same job, and node `lost` is lost once step KILL_AFTER is committed.
        run = launch(cluster, nodes, "e2e", pp_size, dp_size)
        run[lost].wait_event("committed", str(KILL_AFTER))
        run[lost].kill()
        nodes[lost].kill()
        nodes[lost].wipe_memory()
        for r in run:  # the orchestrator restarts the whole job
            r.kill()
        before = [r.losses() for r in last_stage(run, pp_size)]

        spare = cluster.add_node("spare")
        nodes[0].wait_member_state(nodes[lost].node_id, "dead")
        nodes[lost] = spare
        resumed = launch(cluster, nodes, "e2e", pp_size, dp_size)
        for r in resumed:
            r.finish()

        restored = {r.events("restored")[0][0] for r in resumed}
        assert len(restored) == 1, f"ranks restored different steps: {restored}"
        step = int(restored.pop())
        assert KILL_AFTER <= step < STEPS - 1
        for r, want in zip(last_stage(resumed, pp_size), want_losses):
            got = r.losses()
            assert sorted(got) == list(range(step + 1, STEPS))
            assert got == {s: want[s] for s in got}
        for got, want in zip(before, want_losses):
            assert got == {s: want[s] for s in got}
        assert {(r.pp, r.dp): r.final() for r in resumed} == want_final
