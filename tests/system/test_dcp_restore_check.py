"""`reftctl restore-check --layout` for a PyTorch DCP job, with real reftd processes on etcd
(docs/dcp.md "A job that lost a node"): a job whose buffers are all named "dcp/..." (the names
reft.torch.dcp uses) may change tp, since DCP's planner reshards on load, so the check says
possible whenever memory can rebuild the step — before and after a node is lost for good; a
job with one buffer outside "dcp/" keeps the native rule and is refused naming tp.

No torch: plain reft.Client ranks register bytearrays under the DCP names, as the writer does.
"""
import json

import reft
from reft_cluster import LocalCluster
from ranks import snapshot_all
from test_reftctl_json import validate

CONFIG = "[etcd]\nlease_ttl_s = 2\n"
SAVED = reft.Layout(dp=2, tp=2)
SIZE = 2 * 65536 + 100  # several shards of the replicated state, not a multiple of any


def save_one_step(nodes, job, names):
    """One rank per (tp, dp) of SAVED, rank dp on nodes[dp]; each registers `names`
    (replicated, SIZE bytes; "…head" 256) and snapshots step 1, committed job-wide."""
    clients, buffers = [], []
    for tp in range(SAVED.tp):
        for dp in range(SAVED.dp):
            c = reft.Client(socket=nodes[dp].socket, job=job, tp=tp, dp=dp, layout=SAVED,
                            protection="arc1")
            for name in names:
                b = bytearray((tp * 31 + i) & 0xFF for i in range(256 if "head" in name else SIZE))
                c.register(name, b)
                buffers.append(b)
            clients.append(c)
    snapshot_all(clients, 1)
    for c in clients:
        c.close()


def reshape_check(node, job, layout):
    """`restore-check --job J --layout L -o json`: (exit status, document), schema checked."""
    r = node.ctl("-o", "json", "restore-check", "--job", job, "--layout", layout, check=False)
    assert r.returncode in (0, 1), (r.returncode, r.stderr)
    doc = json.loads(r.stdout)
    validate(doc, "restore-check.schema.json")
    return r.returncode, doc


def assert_dcp_reshape_possible(node, job, layout, ranks):
    rc, doc = reshape_check(node, job, layout)
    assert doc["dcp"] is True and doc["recoverable"] is True, doc
    r = doc["reshape"]
    assert rc == 0 and r["possible"] is True and r["dcp"] is True, r
    assert r["from_layout"] == "dp=2,tp=2,pp=1", r
    assert "DCP's planner reshards on load" in r["reason"], r
    assert "every saved byte range of step 1 can be read from memory" in r["reason"], r
    assert len(r["ranks"]) == ranks, r
    assert all(k["per_rank_state"].startswith("read by range") for k in r["ranks"]), r


def test_a_dcp_job_may_change_tp_and_a_native_one_may_not():
    with LocalCluster(nodes=2, etcd=1, config=CONFIG) as cluster:
        n0, n1 = cluster.nodes
        save_one_step(cluster.nodes, "dcp-job", ["dcp/head", "dcp/state"])
        save_one_step(cluster.nodes, "native-job", ["dcp/head", "dcp/state", "model.w"])

        # tp 2 -> 1 (and -> 4 over two stages) for the DCP job; the table says so too.
        assert_dcp_reshape_possible(n0, "dcp-job", "dp=1,tp=1", ranks=1)
        assert_dcp_reshape_possible(n0, "dcp-job", "dp=1,tp=4,pp=2", ranks=8)
        table = n0.ctl("restore-check", "--job", "dcp-job", "--layout", "dp=1,tp=1")
        assert "POSSIBLE from memory" in table.stdout, table.stdout
        assert "DCP's load plan" in table.stdout, table.stdout

        # One buffer outside "dcp/": the native rule, tp is refused (dp alone may change).
        rc, doc = reshape_check(n0, "native-job", "dp=1,tp=1")
        assert doc["dcp"] is False and doc["reshape"]["dcp"] is False, doc
        assert rc == 1 and doc["reshape"]["possible"] is False, doc["reshape"]
        assert "tp cannot change in a reshape (saved with tp=2)" in doc["reshape"]["reason"]
        rc, doc = reshape_check(n0, "native-job", "dp=1,tp=2")
        assert rc == 0 and doc["reshape"]["possible"] is True, doc["reshape"]

        # node1 lost for good: its shards are rebuilt from node0's ARC copies, so the DCP job
        # still reshapes into one rank on the survivor; the native one still may not change tp.
        n1.kill()
        n1.wipe_memory()
        n0.wait_member_state("node1", "dead")
        assert_dcp_reshape_possible(n0, "dcp-job", "dp=1,tp=1", ranks=1)
        rc, doc = reshape_check(n0, "dcp-job", "dp=1,tp=1")
        assert any(s["state"] == "rebuilt" for g in doc["groups"] for s in g["shards"]), doc
        rc, doc = reshape_check(n0, "native-job", "dp=1,tp=1")
        assert rc == 1 and "tp cannot change" in doc["reshape"]["reason"], doc["reshape"]
