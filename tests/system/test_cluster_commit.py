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
        # Rank tp0 on node0 snapshots alone: nothing may commit job-wide.
        # Two tensor-parallel ranks (tp=2, dp=1): each is a sharding group of its own, so with
        # no protection a rank completes its steps alone and only the commit rule keeps them
        # uncommitted. (Data-parallel ranks of one group could not even complete alone.)
        t0 = SampleTrainer(cluster, a, "spread", steps=5, size=50_000, buffers=2,
                           extra=["--tp", "0", "--tp-size", "2", "--protection", "none"])
        # The event a wrong commit would follow: tp0 completed step 0 (and, since the trainer
        # snapshots step 1 only once step 0's copy is done, step 1 too).
        assert wait_until(lambda: {0, 1} <= {
            s["step"] for s in a.ctl("snapshots", "list", "--job", "spread",
                                     json_output=True)["snapshots"]
            if s["state"] == "complete"}), a.ctl("snapshots", "list").stdout
        status = a.ctl("status", json_output=True)
        job = next(j for j in status["jobs"] if j["job"] == "spread")
        assert job["newest_committed_step"] == -1, status
        # Rank tp1 on node1 completes the same steps: both nodes commit.
        t1 = SampleTrainer(cluster, b, "spread", steps=5, size=50_000, buffers=2,
                           extra=["--tp", "1", "--tp-size", "2", "--protection", "none"])
        assert t1.finish(timeout=90) == 0, t1.lines
        assert t0.finish(timeout=90) == 0, t0.lines
        for node in (a, b):
            assert wait_until(lambda n=node: next(
                j for j in n.ctl("status", json_output=True)["jobs"]
                if j["job"] == "spread")["newest_committed_step"] == 4)
            listing = node.ctl("snapshots", "list", "--job", "spread", json_output=True)
            assert {s["state"] for s in listing["snapshots"]} == {"committed"}
