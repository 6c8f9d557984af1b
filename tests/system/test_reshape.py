"""Reshape with real reftd processes: a committed step restores into another layout (fewer
nodes with no spare, another pp split, more nodes), bit for bit (docs/recovery.md "Reshape").

reshape_trainer.py registers per layer a replicated float32 weight, a replicated bias and a
ZeRO-style sharded optimizer buffer (totals that no dp divides), plus a per-rank "rng"; every
byte is a function of (name, step, global index), so each rank of the new layout checks every
byte it got, padding included. A node is lost by kill -9 of its reftd and a wipe of its memory.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from reft_cluster import LocalCluster

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 3

CONFIG = """
[etcd]
lease_ttl_s = 2

[restore]
piece_size = "64K"
piece_timeout_ms = 3000
timeout_ms = 60000

[store]
chunk_size = "16K"
"""


class Trainer:
    def __init__(self, node, job, pp, dp, pp_size, dp_size, protection, *mode, prefix=(),
                 env=None, script=os.path.join(HERE, "reshape_trainer.py")):
        """`prefix` (e.g. other_uid.as_uid's), `env` (default ours) and `script` run it as
        another user would."""
        args = [*prefix, sys.executable, script, "--socket", node.socket,
                "--job", job, "--pp", str(pp), "--dp", str(dp), "--pp-size", str(pp_size),
                "--dp-size", str(dp_size), "--protection", protection, *mode]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=dict(os.environ) if env is None else env)

    def result(self, timeout=180, check=True):
        out, err = self.proc.communicate(timeout=timeout)
        if check:
            assert self.proc.returncode == 0, (out, err[-3000:])
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def run(placement, job, pp_size, dp_size, protection, *mode, **how):
    """One trainer per rank: placement[(pp, dp)] is its node (`how`: Trainer's keywords).
    Returns each rank's JSON lines."""
    trainers = {(pp, dp): Trainer(node, job, pp, dp, pp_size, dp_size, protection, *mode, **how)
                for (pp, dp), node in placement.items()}
    return {rank: t.result() for rank, t in trainers.items()}


def grid(nodes, pp_size, dp_size):
    return {(pp, dp): nodes[pp * dp_size + dp] for pp in range(pp_size) for dp in range(dp_size)}


def train(nodes, job, pp_size, dp_size, protection, **how):
    for rank, lines in run(grid(nodes, pp_size, dp_size), job, pp_size, dp_size, protection,
                           "--train", str(STEPS), **how).items():
        assert lines == [{"committed": STEPS - 1}], (rank, lines)


def wait_no_slots_before(node, job, step, timeout=30):
    """Polls `reftctl snapshots list` until `node` holds no slot of `job` older than `step`."""
    deadline = time.time() + timeout
    while True:
        old = [s for s in node.ctl("snapshots", "list", json_output=True)["snapshots"]
               if s["rank"]["job"] == job and s["step"] < step]
        if not old:
            return
        assert time.time() < deadline, (node.node_id, old)
        time.sleep(0.1)


def lose(node):
    node.kill()
    node.wipe_memory()


def reshaped_ok(results, from_layout, then=0):
    for rank, lines in results.items():
        first = lines[0]
        assert "error" not in first, (rank, first)
        assert first["step"] == STEPS - 1, (rank, first)
        assert first["bad"] == [], (rank, first)
        report = first["report"]
        assert report["reshaped"] is True and report["source"] == "memory", (rank, report)
        assert report["from_layout"].startswith(from_layout), (rank, report)
        assert report["filled"], (rank, report)
        if then:
            assert lines[1:] == [{"committed": STEPS - 1 + then}], (rank, lines)


def check_reshape_with_reftctl(node, job):
    """`reftctl restore-check --layout`: possible into dp=3 (table and JSON, the schema holds),
    not into another tp."""
    from test_reftctl_json import validate
    doc = node.ctl("restore-check", "--job", job, "--layout", "dp=3,pp=1,tp=1", json_output=True)
    validate(doc, "restore-check.schema.json")
    r = doc["reshape"]
    assert r["possible"] and r["from_layout"] == "dp=4,tp=1,pp=1", r
    assert [k["rank"]["dp"] for k in r["ranks"]] == [0, 1, 2], r
    assert all(k["per_rank_state"].startswith("from ") for k in r["ranks"]), r
    table = node.ctl("restore-check", "--job", job, "--layout", "dp=3,pp=1,tp=1")
    assert "POSSIBLE from memory" in table.stdout and "NEW RANK" in table.stdout, table.stdout
    other = node.ctl("restore-check", "--job", job, "--layout", "dp=2,tp=2", check=False)
    assert other.returncode == 1 and "tp cannot change" in other.stdout, other.stdout
    bad = node.ctl("restore-check", "--job", job, "--layout", "dp=x", check=False)
    assert bad.returncode == 2, bad


@pytest.mark.parametrize("protection", ["arc1", "aec", "rs2"])
def test_dp4_to_dp3_after_a_node_is_lost_for_good(protection):
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = cluster.nodes
        job = "shrink-" + protection
        train(nodes, job, 1, 4, protection)
        lose(nodes[3])  # no spare: the job goes on with dp = 3 on the three survivors
        three = grid(nodes, 1, 3)
        if protection == "arc1":
            check_reshape_with_reftctl(nodes[0], job)

        # A plain restore names both layouts and the way out.
        plain = run({(0, 0): nodes[0]}, job, 1, 3, protection, "--restore")[(0, 0)][0]
        assert plain["error"] == "InvalidArgumentError", plain
        assert "dp=4" in plain["message"] and "dp=3" in plain["message"], plain
        assert "reshape" in plain["message"], plain

        results = run(three, job, 1, 3, protection, "--restore", "--reshape", "--then", "2")
        reshaped_ok(results, "dp=4", then=2)
        # Every rank still exists at its coordinates: its per-rank state came back too.
        assert all(lines[0]["report"]["untouched"] == [] for lines in results.values())


def test_pipeline_reshape_pp2_dp2_to_pp1_dp3_and_to_pp3_dp1():
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = cluster.nodes
        train(nodes, "pipe-a", 2, 2, "arc1")
        train(nodes, "pipe-b", 2, 2, "arc1")
        # Each layer's buffers are found where the stage that held them saved them.
        wide = run(grid(nodes, 1, 3), "pipe-a", 1, 3, "arc1", "--restore", "--reshape",
                   "--then", "1")
        reshaped_ok(wide, "dp=2", then=1)
        # Once a step committed under the new layout, the slots of ranks that no longer exist
        # (pp1-*) are released on every node; the new ranks' older slots went with the commit.
        for node in nodes:
            wait_no_slots_before(node, "pipe-a", STEPS)
        # The rank at (pp0, dp2) did not exist before: its per-rank state is left alone.
        assert wide[(0, 2)][0]["report"]["untouched"] == ["rng"], wide[(0, 2)]
        assert wide[(0, 0)][0]["report"]["untouched"] == [], wide[(0, 0)]

        deep = run(grid(nodes, 3, 1), "pipe-b", 3, 1, "none", "--restore", "--reshape",
                   "--then", "1")
        reshaped_ok(deep, "dp=2")
        assert deep[(2, 0)][0]["report"]["untouched"] == ["rng"], deep[(2, 0)]


def test_without_etcd_a_commit_under_the_new_layout_releases_the_removed_ranks_slots():
    with LocalCluster(nodes=4, config=CONFIG, etcd=0) as cluster:  # gossip, no etcd
        nodes = cluster.nodes
        train(nodes, "pipe-g", 2, 2, "arc1")
        wide = run(grid(nodes, 1, 3), "pipe-g", 1, 3, "arc1", "--restore", "--reshape",
                   "--then", "1")
        reshaped_ok(wide, "dp=2", then=1)
        # nodes[2] held pp1-dp0, a rank the new layout does not have: its slots go with the
        # first commit under the new layout, as with etcd. (nodes[3] holds only a removed rank
        # and no new one: gossip cannot order its old layout against the new one, so it keeps
        # its slots until they are dropped by hand; docs/recovery.md "Reshape".)
        for node in nodes[:3]:
            wait_no_slots_before(node, "pipe-g", STEPS)


def test_scale_up_dp2_to_dp4_on_added_nodes():
    with LocalCluster(nodes=2, config=CONFIG) as cluster:
        nodes = list(cluster.nodes)
        train(nodes, "grow", 1, 2, "arc1")
        nodes += [cluster.add_node("node2"), cluster.add_node("node3")]
        results = run(grid(nodes, 1, 4), "grow", 1, 4, "arc1", "--restore", "--reshape",
                      "--then", "1")
        reshaped_ok(results, "dp=2", then=1)


def test_a_reshape_beyond_the_tolerance_fails_alike_on_every_rank_and_can_be_retried():
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = cluster.nodes
        train(nodes, "beyond", 1, 4, "arc1")
        # A layout naming a buffer the step does not have fails cleanly, and changes nothing.
        wrong = run({(0, 0): nodes[0]}, "beyond", 1, 3, "arc1", "--restore", "--reshape",
                    "--register-unknown")
        assert wrong[(0, 0)][0]["error"] == "InvalidArgumentError", wrong
        assert "does not exist in committed step" in wrong[(0, 0)][0]["message"], wrong
        # Two ring neighbours lost under arc1: node3's shard had its only copy on node2.
        lose(nodes[3])
        lose(nodes[2])
        results = run(grid(nodes, 1, 2), "beyond", 1, 2, "arc1", "--restore", "--reshape")
        errors = [lines[0] for lines in results.values()]
        assert all(e.get("error") == "LostError" for e in errors), errors
        assert len({e["message"] for e in errors}) == 1, errors  # one job-wide decision


def test_dp4_to_dp2_from_the_persistent_tier_when_memory_cannot_serve():
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = cluster.nodes
        train(nodes, "tiered", 1, 4, "arc1")
        nodes[0].ctl("persist", "--job", "tiered")  # step 2 persisted under dp=4
        lose(nodes[3])
        lose(nodes[2])  # beyond arc1: memory cannot rebuild step 2
        results = run(grid(nodes, 1, 2), "tiered", 1, 2, "arc1", "--restore", "--reshape",
                      "--then", "1")
        for rank, lines in results.items():
            first = lines[0]
            assert "error" not in first, (rank, first)
            assert first["step"] == STEPS - 1 and first["bad"] == [], (rank, first)
            report = first["report"]
            assert report["source"] == "tier" and report["reshaped"], (rank, report)
            assert report["from_layout"].startswith("dp=4"), (rank, report)
            assert lines[1:] == [{"committed": STEPS}], (rank, lines)


def test_kill_9_of_a_new_rank_and_of_a_source_node_midway_then_the_retry_succeeds():
    # rs2 tolerates two lost members; node3 and node1 are not ring neighbours, so every unique
    # part keeps its copy in the predecessor's slot.
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = cluster.nodes
        train(nodes, "retry", 1, 4, "rs2")
        lose(nodes[3])
        victim = Trainer(nodes[0], "retry", 0, 0, 1, 3, "rs2", "--restore", "--reshape")
        victim.kill()  # a new rank killed while it restores
        first = {rank: Trainer(node, "retry", 0, rank[1], 1, 3, "rs2", "--restore", "--reshape")
                 for rank, node in grid(nodes, 1, 3).items()}
        lose(nodes[1])  # a source node killed while the ranks reshape
        for rank, t in first.items():
            lines = t.result(check=False)  # the rank on node1 loses its reftd
            # Whatever the timing: all bytes right, or an error; never wrong bytes.
            assert not lines or "error" in lines[0] or lines[0]["bad"] == [], (rank, lines)
        # The retry on the two survivors, once node1's lease expired (before that a restore is
        # told to wait for it: alive but silent).
        nodes[0].wait_member_state("node1", "dead")
        nodes[2].wait_member_state("node1", "dead")
        placement = {(0, 0): nodes[0], (0, 1): nodes[2], (0, 2): nodes[2]}
        results = run(placement, "retry", 1, 3, "rs2", "--restore", "--reshape", "--then", "1")
        reshaped_ok(results, "dp=4", then=1)


def test_reft_torch_restores_a_model_and_its_optimizer_into_another_dp():
    pytest.importorskip("torch")
    with LocalCluster(nodes=2, config=CONFIG) as cluster:
        nodes = cluster.nodes
        reference = os.path.join(cluster.root, "reference.pt")
        script = os.path.join(HERE, "torch_reshape_trainer.py")

        def launch(node, dp, dp_size, *mode):
            return subprocess.Popen([sys.executable, script, "--socket", node.socket, "--job",
                                     "torch", "--dp", str(dp), "--dp-size", str(dp_size),
                                     "--reference", reference, *mode],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def lines(proc):
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            return [json.loads(l) for l in out.splitlines() if l.startswith("{")]

        trainers = [launch(n, d, 2, "--train", "3") for d, n in enumerate(nodes)]
        assert all(lines(t) == [{"committed": 2}] for t in trainers)
        lose(nodes[1])
        got = lines(launch(nodes[0], 0, 1, "--restore"))[0]
        assert got["step"] == 2 and got["model"] and got["optimizer"], got
        assert got["report"]["reshaped"] and got["report"]["from_layout"].startswith("dp=2"), got
        assert "param/0.weight" in got["report"]["filled"], got
        assert got["loss"] == got["loss"] and got["loss"] < 1e6, got  # finite


def test_zero_redundancy_optimizer_dp4_to_dp3_restores_the_global_state_bit_for_bit():
    """The GPT-like model under DP4 with a ZeroRedundancyOptimizer (AdamW) loses a node for good
    and goes on with DP3: torch partitions the optimizer state by parameter, differently for 3
    ranks, so every rank restores its new parameters' state from wherever DP4 saved it. The
    assembled global state (model + every parameter's optimizer state, by name) equals the
    uninterrupted run's at that step bit for bit, and training goes on tracking it."""
    pytest.importorskip("torch")
    import torch
    from reft_cluster import free_port
    last, more = 3, 3
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = cluster.nodes
        script = os.path.join(HERE, "zero_reshape_trainer.py")

        def launch(world, mode, port):
            procs = []
            for dp in range(world):
                state = os.path.join(cluster.root, "state-%d-of-%d.pt" % (dp, world))
                procs.append((state, subprocess.Popen(
                    [sys.executable, script, "--socket", nodes[dp].socket, "--job", "zero",
                     "--dp", str(dp), "--dp-size", str(world), "--master-port", str(port),
                     "--state", state, "--more", str(more), *mode],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    env=dict(os.environ, PYTHONPATH=HERE + os.pathsep +
                             os.environ.get("PYTHONPATH", "")))))
            out = []
            for state, p in procs:
                stdout, stderr = p.communicate(timeout=300)
                assert p.returncode == 0, stderr[-3000:]
                out.append((torch.load(state), stdout.splitlines()))
            return out

        def merged(views):
            """The global state from every rank's view: one model, each parameter's optimizer
            state from the one rank that holds it."""
            model, optim = views[0]["model"], {}
            for v in views:
                assert v["model"].keys() == model.keys()
                assert all(torch.equal(v["model"][k], model[k]) for k in model)
                assert not optim.keys() & v["optim"].keys(), "a parameter held twice"
                optim.update(v["optim"])
            return model, optim

        def losses(lines):
            return {int(s): float.fromhex(h) for w, s, h in
                    (l.split() for l in lines if l.startswith("loss "))}

        before = launch(4, ["--train", str(last)], free_port())
        ref_model, ref_optim = merged([v for v, _ in before])
        assert len(ref_optim) == len(ref_model) - 4  # every parameter (not the 4 masks)
        reference = losses(before[0][1])

        lose(nodes[3])
        after = launch(3, ["--restore"], free_port())
        assert all(("restored %d" % last) in lines for _, lines in after), after[0][1]
        model, optim = merged([v for v, _ in after])
        assert all(torch.equal(model[k], ref_model[k]) for k in ref_model)
        assert optim.keys() == ref_optim.keys()
        for name, st in ref_optim.items():
            assert st.keys() == optim[name].keys(), name
            for k, v in st.items():
                assert torch.equal(optim[name][k], v), (name, k)
        resumed = losses(after[0][1])
        assert sorted(resumed) == list(range(last + 1, last + 1 + more))
        for s, loss in resumed.items():
            assert loss == loss and abs(loss - reference[s]) <= 1e-4 * abs(reference[s]), (
                s, loss, reference[s])


def test_a_remap_fills_scattered_ranges_only_for_the_probed_layout():
    """restore(reshape=True, remap=...) on real reftd: the probe names the saved layout without
    restoring; the remap takes the saved global buffer's parts in another order and zero-fills
    what it does not cover; a remap computed for another layout is Busy; a remap that names a
    buffer this trainer did not register, or a remap without reshape, is refused."""
    import reft
    part = 4096
    with LocalCluster(nodes=1, config=CONFIG) as cluster:
        sock = cluster.nodes[0].socket

        def connect(dp, dp_size):
            return reft.Client(socket=sock, job="remap", dp=dp, layout=reft.Layout(dp=dp_size),
                               protection="none")

        savers = [connect(d, 2) for d in range(2)]
        for d, c in enumerate(savers):
            c.register("s", bytearray(bytes([d + 1]) * part), kind="unique",
                       shard=(d * part, 2 * part))
            c.register("r", bytearray(b"r" * 64))
        for c in savers:
            c.snapshot(0)
        for c in savers:
            c.fence()
        assert all(c.wait_committed(0, timeout=60) for c in savers)
        for c in savers:
            c.close()

        with connect(0, 1) as c:
            got = bytearray(3 * part)
            r = bytearray(64)
            c.register("s", got, kind="unique", shard=(0, 3 * part))
            c.register("r", r)
            seen = []

            def remap(saved):
                seen.append(saved)
                # part 1 first, then part 0, then nothing (zeros)
                return {"s": [(part, 0, part), (0, part, part)]}

            with pytest.raises(reft.InvalidArgumentError, match="needs reshape"):
                c.restore(remap=remap)
            with pytest.raises(reft.InvalidArgumentError, match="needs reshape"):  # reftd's check
                c._c.restore(False, "dp=2,tp=1,pp=1,zero=0", {"s": [(0, 0, 8)]})
            with pytest.raises(reft.InvalidArgumentError, match="did not register"):
                c.restore(reshape=True, remap=lambda saved: {"t": [(0, 0, 1)]})
            got[:] = b"\xff" * len(got)
            assert c.restore(reshape=True, remap=remap) == 0
            assert seen[-1] == reft.Layout(dp=2, tp=1, pp=1, zero=0)
            assert bytes(got) == b"\x02" * part + b"\x01" * part + bytes(part)
            assert bytes(r) == b"r" * 64
            assert c.last_restore["reshaped"] and c.last_restore["from_layout"].startswith("dp=2")
            # Computed for another layout (what a newer step under another layout would mean).
            with pytest.raises(reft.BusyError, match="probe again"):
                c._c.restore(True, "dp=3,tp=1,pp=1,zero=0", {"s": [(0, 0, 8)]})


def test_a_replicated_name_with_two_shapes_on_two_stages_is_refused_at_the_first_snapshot():
    """Tied embeddings saved by the first and the last stage must be one tensor: a stage that
    registers the name with another size is refused when it snapshots, naming both stages, and
    nothing of the other stage is lost; with the same shape both stages snapshot and commit."""
    import reft
    with LocalCluster(nodes=1, config=CONFIG) as cluster:
        sock = cluster.nodes[0].socket

        def stage(pp, embed_bytes):
            c = reft.Client(socket=sock, job="tied", pp=pp, layout=reft.Layout(pp=2),
                            protection="none")
            c.register("embed", bytearray(b"e" * embed_bytes))
            c.register("layers.%d" % pp, bytearray(bytes([pp]) * 256), layer=pp)
            return c

        first = stage(0, 4096)
        first.snapshot(1)
        first.fence()
        last = stage(1, 2048)
        with pytest.raises(reft.InvalidArgumentError,
                           match=r"'embed' is 2048 bytes of .* on stage pp1-tp0 but 4096 bytes"):
            last.snapshot(1)  # snapshots run in the background: the error comes with the fence
            last.fence()
        last.close()
        last = stage(1, 4096)
        last.snapshot(1)
        last.fence()
        assert first.wait_committed(1, timeout=60) and last.wait_committed(1, timeout=60)
        first.close()
        last.close()
