"""Control-plane faults with real reftd processes and a real etcd (docs/coordination.md):

- a node cut off from etcd (a TCP proxy between them stops moving bytes, like a partition):
  snapshots go on locally, no step commits anywhere while it is cut off (the commit needs every
  rank), and after healing the queued completions commit and every rank restores the same step;
- a three-member etcd: with one member killed commits go on; with all of them killed snapshots
  go on locally and commits resume, nothing lost, when etcd comes back;
- a kill -9'd reftd (the job's coordinator) is declared dead when its lease expires, within the
  configured TTL; another node takes over the commits and the replacement node restores.

Trainers run paced (--sleep-us) with a short per-step commit wait, so they keep snapshotting
while the control plane is away; every wait here is for an event, with a deadline.
"""
import time

from reft_cluster import LocalCluster
from tcp_proxy import TcpProxy
from trainer import SampleTrainer

M = 3
SIZE = 100_001
CONFIG = """
[etcd]
lease_ttl_s = {ttl}
request_timeout_ms = 1000

[restore]
piece_size = "64K"
piece_timeout_ms = 2000
timeout_ms = 60000

[store]
chunk_size = "16K"
"""


def start_trainers(cluster, nodes, job, steps, restore_only=False):
    out = []
    for d, node in enumerate(nodes):
        extra = ["--dp", str(d), "--dp-size", str(len(nodes)), "--protection", "arc1"]
        if restore_only:
            extra.append("--restore-only")
        else:
            extra += ["--step-commit-timeout-ms", "200"]
        out.append(SampleTrainer(cluster, node, job, steps=steps, size=SIZE, buffers=2,
                                 sleep_us=0 if restore_only else 150_000, extra=extra))
    return out


def slots(node, job):
    return node.ctl("snapshots", "list", "--job", job, json_output=True)["snapshots"]


def wait_until(pred, timeout, what):
    """`what`: the failure message, or a function returning it (called only on failure)."""
    deadline = time.time() + timeout
    while not pred():
        assert time.time() < deadline, what() if callable(what) else what
        time.sleep(0.1)


def where_things_are(nodes, job, trainers):
    """Every node's slots of `job` and each trainer's last lines, for a failure message."""
    out = []
    for n in nodes:
        out.append(f"{n.node_id}: " + ", ".join(f"{s['step']} {s['state']}" for s in slots(n, job)))
    for t in trainers:
        out.append(f"trainer: {t.lines[-3:]}")
    return "\n".join(out)


def wait_committed(cluster, job, step, timeout=30):
    wait_until(lambda: (cluster.committed_step(job) or -1) >= step, timeout,
               f"step {step} of {job} not committed within {timeout}s")


def snapshots_beyond(nodes, job, step):
    """Every node holds a sealed (complete) slot of a step newer than `step`."""
    return all(any(s["state"] == "complete" and s["step"] > step for s in slots(n, job))
               for n in nodes)


def restore_all(cluster, nodes, job):
    trainers = start_trainers(cluster, nodes, job, 0, restore_only=True)
    results = [tuple(t.wait_for("restored", timeout=120)[1:]) for t in trainers]
    for t in trainers:
        assert t.finish() == 0
    return results


def finish(trainers, last):
    for t in trainers:
        assert t.finish(timeout=180) == 0, t.lines[-5:]
        assert f"committed {last}" in t.lines, t.lines[-8:]


def test_a_node_cut_off_from_etcd_commits_nothing_and_catches_up_after_healing():
    cluster = LocalCluster(nodes=M, config=CONFIG.format(ttl=5))
    proxy = TcpProxy(cluster.etcd.endpoints)  # etcd's port is chosen before it starts
    cluster.nodes[2].etcd_via = proxy.address
    with cluster:
        nodes = cluster.nodes
        steps = 40
        trainers = start_trainers(cluster, nodes, "cut", steps)
        wait_committed(cluster, "cut", 2)

        proxy.cut()
        # Whatever was in flight settles within a request timeout; from then on the commit point
        # must not move while snapshots keep being sealed on every node, node2 included.
        stalled = lambda: ("snapshots did not continue while node2 was cut off from etcd:\n" +
                           where_things_are(nodes, "cut", trainers))
        wait_until(lambda: snapshots_beyond(nodes, "cut", (cluster.committed_step("cut") or 0) + 1),
                   30, stalled)
        frozen = cluster.committed_step("cut")
        wait_until(lambda: snapshots_beyond(nodes, "cut", frozen + 3), 30, stalled)
        assert cluster.committed_step("cut") == frozen, "a step committed without node2"
        for n in nodes:  # no node committed locally either
            assert max(s["step"] for s in slots(n, "cut") if s["state"] == "committed") <= frozen

        proxy.heal()
        finish(trainers, steps - 1)
        assert cluster.committed_step("cut") == steps - 1
        assert restore_all(cluster, nodes, "cut") == [(str(steps - 1), "ok")] * M
    proxy.close()


def test_three_member_etcd_one_down_commits_go_on_all_down_nothing_is_lost():
    with LocalCluster(nodes=M, etcd=3, config=CONFIG.format(ttl=5)) as cluster:
        nodes = cluster.nodes
        steps = 60
        trainers = start_trainers(cluster, nodes, "quorum", steps)
        wait_committed(cluster, "quorum", 2)

        # One member of three down: the other two keep a quorum; commits go on.
        cluster.etcd.members[0].kill()
        before = cluster.committed_step("quorum")
        wait_committed(cluster, "quorum", before + 3)

        # Every member down: snapshots go on locally, the commit point stays.
        frozen_at_least = cluster.committed_step("quorum")
        for m in cluster.etcd.members[1:]:
            m.kill()
        wait_until(lambda: snapshots_beyond(nodes, "quorum", frozen_at_least + 3), 30,
                   "snapshots did not continue without etcd")
        committed_local = [max(s["step"] for s in slots(n, "quorum") if s["state"] == "committed")
                           for n in nodes]

        cluster.etcd.restart_all()
        # Commits resume beyond what was snapshotted while etcd was away; nothing is lost: the
        # last step commits and every rank restores it.
        finish(trainers, steps - 1)
        assert min(committed_local) >= frozen_at_least
        assert cluster.committed_step("quorum") == steps - 1
        assert restore_all(cluster, nodes, "quorum") == [(str(steps - 1), "ok")] * M


def test_a_killed_daemons_lease_expires_within_the_ttl_and_the_job_recovers():
    ttl = 2
    with LocalCluster(nodes=M, config=CONFIG.format(ttl=ttl)) as cluster:
        nodes = cluster.nodes
        for t in start_trainers(cluster, nodes, "lease", 3):
            assert t.finish(timeout=120) == 0, t.lines[-5:]
        leader = cluster.coordinator_of("lease").node_id
        victim = next(i for i, n in enumerate(nodes) if n.node_id == leader)
        observer = nodes[(victim + 1) % M]

        killed = time.time()
        nodes[victim].kill()
        nodes[victim].wipe_memory()
        # The lease was renewed at most ttl/3 before the kill; etcd checks expiry every 500 ms.
        observer.wait_member_state(leader, "dead", timeout=ttl + 5)
        noticed = time.time() - killed
        assert noticed <= ttl + 1.0, noticed
        # The dead coordinator's key went with its lease; a survivor holding the job's slots
        # takes over at once (no trainer needs to be running for the job to have one).
        deadline = time.time() + 10
        while True:
            now = cluster.coordinator_of("lease")
            if now is not None and now.node_id != leader:
                break
            assert time.time() < deadline, now
            time.sleep(0.05)

        # Recovery as without etcd: a replacement with the same id restores the lost shard, every
        # rank restores the same step, and training goes on under a new coordinator.
        nodes[victim].start(wait=True)
        assert restore_all(cluster, nodes, "lease") == [("2", "ok")] * M
        trainers = start_trainers(cluster, nodes, "lease", 2)
        finish(trainers, 4)
        assert cluster.committed_step("lease") == 4
