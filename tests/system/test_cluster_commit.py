"""Several reftd on loopback: membership, and a step committed only when every rank of the
job, on every node, completed it (docs/data-paths.md "Commit", two-phase)."""
import time

from reft_cluster import LocalCluster
from trainer import SampleTrainer


def wait_until(pred, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_membership_converges_and_nodes_list_shows_it():
    with LocalCluster(nodes=3) as cluster:
        for node in cluster.nodes:
            assert wait_until(lambda n=node: sum(
                1 for x in n.ctl("nodes", "list", json_output=True)["nodes"]
                if x["state"] == "alive") == 3), node.ctl("nodes", "list").stdout
        listing = cluster.nodes[0].ctl("nodes", "list", json_output=True)["nodes"]
        assert sorted(n["node_id"] for n in listing) == ["node0", "node1", "node2"]
        assert sum(1 for n in listing if n["self"]) == 1


def test_commit_waits_for_ranks_on_other_nodes():
    with LocalCluster(nodes=2) as cluster:
        a, b = cluster.nodes
        assert wait_until(lambda: len(a.ctl("status", json_output=True)["peers"]) == 1)
        # Rank dp0 on node0 snapshots steps 0..4 alone: nothing may commit job-wide.
        t0 = SampleTrainer(cluster, a, "spread", steps=5, size=50_000, buffers=2,
                           extra=["--dp", "0", "--dp-size", "2"])
        time.sleep(3)
        status = a.ctl("status", json_output=True)
        job = next(j for j in status["jobs"] if j["job"] == "spread")
        assert job["newest_committed_step"] == -1, status
        # Rank dp1 on node1 completes the same steps: both nodes commit.
        t1 = SampleTrainer(cluster, b, "spread", steps=5, size=50_000, buffers=2,
                           extra=["--dp", "1", "--dp-size", "2"])
        assert t1.finish(timeout=90) == 0, t1.lines
        assert t0.finish(timeout=90) == 0, t0.lines
        for node in (a, b):
            assert wait_until(lambda n=node: next(
                j for j in n.ctl("status", json_output=True)["jobs"]
                if j["job"] == "spread")["newest_committed_step"] == 4)
            listing = node.ctl("snapshots", "list", "--job", "spread", json_output=True)
            assert {s["state"] for s in listing["snapshots"]} == {"committed"}
