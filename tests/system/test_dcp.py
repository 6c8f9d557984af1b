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


def run_ranks(nodes, job, placement, *args, timeout=300):
    """One gloo rank per entry of `placement` (its node), the example's `args`; rank 0's
    events. Fails with every failed rank's error output."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, node in enumerate(placement):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(len(placement)), LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONPATH=os.pathsep.join([REFT_PATH, os.environ.get("PYTHONPATH", "")]))
        procs.append(subprocess.Popen(
            [sys.executable, EXAMPLE, "--socket",
             nodes[node].socket, "--job", job, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [p.communicate(timeout=timeout) + (p.returncode,) for p in procs]
    failed = [(rank, err[-3000:]) for rank, (_, err, rc) in enumerate(outs) if rc != 0]
    assert not failed, failed
    return [json.loads(line) for line in outs[0][0].splitlines() if line.startswith("{")]


def event(events, name):
    found = [e for e in events if e["event"] == name]
    assert found, events
    return found[-1]


def test_a_checkpoint_loads_under_another_tensor_parallel_mesh():
    """(dp_shard 2, tp 2) on 2 nodes saves with async_save, zero copy (the trainer fences before
    optimizer.step()); the last step loads into (dp_shard 2, tp 1) and into one rank (DCP
    reshards, reft serves the byte ranges), bit for bit."""
    with LocalCluster(nodes=2, etcd=1, config=CONFIG) as c:
        saved = run_ranks(c.nodes, "tp", [0, 0, 1, 1], "--shard", "2", "--tp", "2",
                          "--steps", "3", "--async-save", "--zero-copy")
        want = event(saved, "saved")
        assert want["step"] == 3
        for placement, mesh in (([0, 1], ["--shard", "2"]), ([1], ["--shard", "1"])):
            loaded = event(run_ranks(c.nodes, "tp", placement, *mesh, "--steps", "0", "--load"),
                           "loaded")
            assert (loaded["step"], loaded["digest"]) == (3, want["digest"]), (mesh, loaded)
            assert loaded["source"] == "memory", loaded
        refusals(c.nodes[0], "tp")


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
