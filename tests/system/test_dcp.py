"""PyTorch Distributed Checkpoint into reft (reft.torch.dcp), with real reftd processes on etcd
and real gloo ranks: FSDP2 (fully_shard), HSDP and tensor parallel state saved with dcp.save /
dcp.async_save, loaded with dcp.load under another mesh, and after a node is lost for good.

Every run prints the digest of the full (gathered) model and optimizer state: a load is correct
when its digest is the saved step's, whatever the mesh. The ranks run the example trainer,
examples/torch/dcp_llama.py, as a user would.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 (fully_shard) needs torch >= 2.6")
if not hasattr(__import__("torch.distributed.fsdp", fromlist=["x"]), "fully_shard"):
    pytest.skip("FSDP2 (fully_shard) needs torch >= 2.6", allow_module_level=True)

import reft  # noqa: E402
from reft_cluster import LocalCluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch", "dcp_llama.py")
# The ranks import the reft this test imported (the venv's installed package on the torch2 leg).
REFT_PATH = os.path.dirname(os.path.dirname(os.path.abspath(reft.__file__)))
CONFIG = """
[etcd]
lease_ttl_s = 2
"""


def start_ranks(nodes, job, placement, *args, env=None, wrapper=()):
    """One gloo rank per entry of `placement` (its node) running the example with `args`
    (under `wrapper`, a script that runs it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, node in enumerate(placement):
        rank_env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(len(placement)),
                        LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        PYTHONPATH=os.pathsep.join([REFT_PATH, HERE,
                                                    os.environ.get("PYTHONPATH", "")]),
                        **(env or {}))
        procs.append(subprocess.Popen(
            [sys.executable, *wrapper, EXAMPLE, "--socket", nodes[node].socket, "--job", job, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=rank_env))
    return procs


def finish_ranks(procs, timeout=300):
    """[(stdout, stderr, returncode)] of every rank, once all have exited."""
    return [p.communicate(timeout=timeout) + (p.returncode,) for p in procs]


def run_ranks(nodes, job, placement, *args, timeout=300):
    """Runs the ranks; rank 0's events. Fails with every failed rank's error output."""
    outs = finish_ranks(start_ranks(nodes, job, placement, *args), timeout)
    failed = [(rank, err[-3000:]) for rank, (_, err, rc) in enumerate(outs) if rc != 0]
    assert not failed, failed
    return events_of(outs[0][0])


def events_of(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def event(events, name):
    found = [e for e in events if e["event"] == name]
    assert found, events
    return found[-1]


def test_fsdp2_tp_checkpoint_loads_under_another_mesh_and_after_a_node_is_lost():
    """(dp_shard 2, tp 2) on 2 nodes, no replicas: each rank's shard is copied to its ring
    neighbour on the other node (arc1). Saved with async_save, zero copy (the trainer fences
    before optimizer.step()); the last step loads into (dp_shard 2, tp 1) and, after node1 is
    lost for good, into (dp_shard 1, tp 2) on node0 alone (DCP reshards, reft serves the byte
    ranges, node1's shards from their copies), bit for bit."""
    with LocalCluster(nodes=2, etcd=1, config=CONFIG) as c:
        saved = run_ranks(c.nodes, "tp", [0, 0, 1, 1], "--shard", "2", "--tp", "2",
                          "--protection", "arc1", "--steps", "3", "--async-save", "--zero-copy")
        want = event(saved, "saved")
        assert want["step"] == 3
        loaded = event(run_ranks(c.nodes, "tp", [0, 1], "--shard", "2", "--steps", "0",
                                 "--load"), "loaded")
        assert (loaded["step"], loaded["digest"], loaded["source"]) == \
            (3, want["digest"], "memory"), loaded
        refusals(c.nodes[0], "tp")
        c.nodes[1].kill()
        c.nodes[1].wipe_memory()
        loaded = event(run_ranks(c.nodes, "tp", [0, 0], "--shard", "1", "--tp", "2",
                                 "--steps", "0", "--load"), "loaded")
        assert (loaded["step"], loaded["digest"], loaded["source"]) == \
            (3, want["digest"], "memory"), loaded


def test_fsdp2_job_of_four_nodes_resumes_on_three_placed_by_reft_elastic():
    """Pure FSDP (dp_shard 4, one rank per node) under arc1: no rank holds another's bytes, so
    reftd copies each shard to its ring neighbour's node before the step is sealed. node3 is
    lost for good; the planner sees the job's bytes per layer (the writer registers them so)
    and decides how it goes on, and reft.elastic says where: three ranks on the other nodes,
    which load the last step (node3's shard from its copy) bit for bit, and go on saving."""
    config = CONFIG + "\n[planner]\nspare_wait_ms = 0\n"  # no spare will come: decide now
    with LocalCluster(nodes=4, etcd=1, config=config) as c:
        saved = run_ranks(c.nodes, "fsdp", [0, 1, 2, 3], "--shard", "4",
                          "--protection", "arc1", "--steps", "2", "--async-save")
        want = event(saved, "saved")
        c.nodes[3].kill()
        c.nodes[3].wipe_memory()
        import reft.elastic
        placed = {}
        for n in range(3):  # each node's launcher asks its own reftd for its one rank
            p = reft.elastic.coordinates(c.nodes[n].socket, "fsdp", by_node=True, local_rank=0,
                                         world_size=3)
            assert (p.world_size, p.dp, p.tp, p.pp, p.node) == (3, 3, 1, 1, "node%d" % n), p
            placed[p.rank] = n
        plan = reft.plan(c.nodes[0].socket, "fsdp")
        assert plan["decision"]["policy"] in ("reroute", "reconfigure"), plan["decision"]
        # Embeddings (with the norm and head) and the three blocks, parameters and optimizer
        # state counted apart, as for a native job.
        layers = plan["model"]["layers"]
        assert len(layers) == 4 and all(
            0 < l["param_bytes"] < l["optimizer_bytes"]  # AdamW: two moments per parameter
            for l in layers), layers
        resumed = run_ranks(c.nodes, "fsdp", [placed[r] for r in range(3)], "--shard", "3",
                            "--steps", "1", "--load")
        loaded = event(resumed, "loaded")
        assert (loaded["step"], loaded["digest"], loaded["source"]) == \
            (want["step"], want["digest"], "memory"), loaded
        assert event(resumed, "saved")["step"] == want["step"] + 1


def test_fsdp2_ranks_placed_as_torchrun_does_survive_a_node_loss():
    """Pure FSDP (dp_shard 4) with two ranks per node, consecutive ranks on one node as
    torchrun places them: client_for orders reft's ring so that every rank's copy is kept on
    the other node (in mesh order, ranks 2 and 3 would keep each other's), so the job resumes
    from memory on the node that remains."""
    with LocalCluster(nodes=2, etcd=1, config=CONFIG) as c:
        saved = run_ranks(c.nodes, "fsdp2", [0, 0, 1, 1], "--shard", "4",
                          "--protection", "arc1", "--steps", "1")
        want = event(saved, "saved")
        c.nodes[1].kill()
        c.nodes[1].wipe_memory()
        loaded = event(run_ranks(c.nodes, "fsdp2", [0, 0], "--shard", "2", "--steps", "0",
                                 "--load"), "loaded")
        assert (loaded["step"], loaded["digest"], loaded["source"]) == \
            (want["step"], want["digest"], "memory"), loaded


def test_a_node_lost_while_async_save_is_in_flight_leaves_the_last_committed_step():
    """Pure FSDP on two nodes saves step 1; the next run holds both ranks right before
    dcp.async_save of step 2, node1's reftd is killed, and the save goes on: it fails (its
    future raises on every rank) and is never half a checkpoint: the job resumes on node0 from
    step 1, from memory, bit for bit."""
    import tempfile
    import time
    with LocalCluster(nodes=2, etcd=1, config=CONFIG) as c, \
            tempfile.TemporaryDirectory() as hold:
        first = event(run_ranks(c.nodes, "inflight", [0, 1], "--shard", "2",
                                "--protection", "arc1", "--steps", "1", "--async-save"), "saved")
        procs = start_ranks(c.nodes, "inflight", [0, 1], "--shard", "2", "--protection", "arc1",
                            "--steps", "1", "--async-save", "--load",
                            wrapper=[os.path.join(HERE, "dcp_paused.py")],
                            env={"REFT_TEST_PAUSE_STEP": "2", "REFT_TEST_PAUSE_DIR": hold})
        deadline = time.monotonic() + 120
        while not all(os.path.exists(os.path.join(hold, "paused.%d" % r)) for r in (0, 1)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                finish_ranks(procs)
            time.sleep(0.01)
        c.nodes[1].kill()
        open(os.path.join(hold, "go"), "w").close()
        outs = finish_ranks(procs)
        # Every rank's future raised, naming the rank whose reftd is gone.
        assert all(rc != 0 and "CheckpointException" in err and "UnavailableError" in err
                   for _, err, rc in outs), outs
        assert "saved" not in [e["event"] for e in events_of(outs[0][0])]
        c.nodes[1].wipe_memory()
        loaded = event(run_ranks(c.nodes, "inflight", [0], "--shard", "1", "--steps", "0",
                                 "--load"), "loaded")
        assert (loaded["step"], loaded["digest"], loaded["source"]) == \
            (1, first["digest"], "memory"), loaded


def refusals(node, job):
    """Bad input to the writer and reader, as a rank of `job` (committed step 3) meets it."""
    import pickle
    import reft.torch.dcp as reft_dcp
    client = reft.Client(socket=node.socket, job=job, layout=reft.Layout(tp=2), tp=1)
    try:
        writer = reft_dcp.Writer(client)
        for bad in ("/ckpt/step-100", "step-3", -1, 1.5):
            assert not reft_dcp.Writer.validate_checkpoint_id(bad)
            with pytest.raises(reft.InvalidArgumentError, match="its step"):
                writer.reset(bad)
        assert reft_dcp.Writer.validate_checkpoint_id("100")
        assert reft_dcp.Reader.validate_checkpoint_id(None)
        with pytest.raises(reft.UnsupportedError, match="thread mode"):
            pickle.dumps(writer)  # DCP's process mode would carry it to a child process
        # Two async saves at once: the second staging would overwrite what the first one has
        # not written yet.
        state = {"w": torch.arange(8.0)}
        staged = writer.stage(state)
        assert torch.equal(staged["w"], state["w"]) and staged["w"].data_ptr() != \
            state["w"].data_ptr()
        with pytest.raises(reft.BusyError, match="previous save has not written"):
            writer.stage(state)
        reader = reft_dcp.Reader(client)
        reader.reset(1)
        with pytest.raises(reft.NotFoundError, match="newest step committed job-wide is 3"):
            reader.read_metadata()
        # A state dict that does not match the saved one: DCP's own error, nothing loaded.
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException
        wrong = {"model": {"no.such.weight": torch.zeros(4)}}
        with pytest.raises(CheckpointException, match="Missing key .*no.such.weight"):
            dcp.load(wrong, storage_reader=reft_dcp.Reader(client), no_dist=True)
        assert torch.equal(wrong["model"]["no.such.weight"], torch.zeros(4))
        shaped = {"model": {"tok_embeddings.weight": torch.zeros(3, 3)}}
        with pytest.raises(CheckpointException, match="[Ss]ize mismatch"):
            dcp.load(shaped, storage_reader=reft_dcp.Reader(client), no_dist=True)
        assert torch.equal(shaped["model"]["tok_embeddings.weight"], torch.zeros(3, 3))
    finally:
        client.close()


def test_fsdp2_tp_job_loses_a_node_and_resumes_on_fewer_ranks_from_memory():
    """FSDP2 as HSDP (dp_replicate 2) with tensor parallel 2, under arc1, saved every step with
    dcp.async_save; node1's reftd is killed and its memory wiped; two ranks on node0, now
    dp_shard 2 without tensor parallel, load the last step from memory (node1's half rebuilt
    from the redundancy), bit for bit, and go on saving."""
    with LocalCluster(nodes=2, etcd=1, config=CONFIG) as c:
        saved = run_ranks(c.nodes, "hsdp", [0, 0, 1, 1], "--replicate", "2", "--tp", "2",
                          "--protection", "arc1", "--steps", "2", "--async-save")
        want = event(saved, "saved")
        c.nodes[1].kill()
        c.nodes[1].wipe_memory()
        resumed = run_ranks(c.nodes, "hsdp", [0, 0], "--shard", "2", "--steps", "1", "--load")
        loaded = event(resumed, "loaded")
        assert (loaded["step"], loaded["digest"]) == (want["step"], want["digest"]), loaded
        assert loaded["source"] == "memory", loaded
        assert event(resumed, "saved")["step"] == want["step"] + 1
