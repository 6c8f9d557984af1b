"""Overload never declares a live node dead (docs/coordination.md "Deaths held while the
control plane is suspect").

Eight real reftd on one real etcd, a job of four ranks training on four of them. etcd is
stopped (SIGSTOP) for longer than the lease TTL, or made slow by a stop/continue duty cycle:
every lease lapses, and every lapse must be held and refuted (the node registers again), not
declared. The job must not start a recovery (no plan, no restore decision, no generation), no
trainer may be refused or fenced, no completion may be lost (every step commits in the end).
A node SIGKILLed while etcd is stopped must still be found dead afterwards: its lapse is held
like the others, and confirmed by a direct probe that nobody answers. A three-member etcd whose
leader is killed mid-run elects another and declares nobody dead either.
"""
import time

import pytest

from reft_cluster import LocalCluster
from test_control_plane_faults import finish, start_trainers, wait_until

N = 8        # reftd
RANKS = 4    # the job's ranks, on nodes 0..3
TTL = 2      # seconds: the lease TTL
CONFIG = """
[etcd]
lease_ttl_s = {ttl}
request_timeout_ms = 1000

[store]
chunk_size = "16K"
"""


def deaths(node):
    return node.ctl("status", json_output=True)["control_plane"]["deaths"]


def recovery_records(cluster, job):
    """What a recovery leaves in etcd: a published plan, a restore decision (the trainers'
    first start records one too: "nothing to restore"), a generation."""
    return {key: cluster.etcd.get(f"/reft/v1/jobs/{job}/{key}")
            for key in ("plan", "restore", "generation")}


def wait_registered_again(nodes):
    """Every node in `nodes` registered again after its lease lapsed."""
    wait_until(lambda: all(deaths(n)["reregistrations_total"] >= 1 for n in nodes), 30,
               lambda: "nodes did not register again: " + str({n.node_id: deaths(n) for n in nodes}))


def training(cluster, job, steps):
    """The job's trainers, once it committed a few steps, and its recovery records then."""
    trainers = start_trainers(cluster, cluster.nodes[:RANKS], job, steps)
    wait_until(lambda: (cluster.committed_step(job) or -1) >= 2, 60, "no commit")
    return trainers, recovery_records(cluster, job)


def check_nothing_declared(live, declared_each, trainers, cluster, job, steps, before,
                           lapsed=True):
    finish(trainers, steps - 1)  # every step commits: no completion lost
    assert cluster.committed_step(job) == steps - 1
    for t in trainers:
        assert not any("fenced" in l or "refused" in l for l in t.lines), t.lines[-8:]
    assert recovery_records(cluster, job) == before
    for n in live:
        d = deaths(n)
        assert d["deaths_declared_total"] == declared_each, (n.node_id, d)
        if lapsed:
            assert d["held_total"] >= 1, (n.node_id, d)  # the lapses were seen, and held


def test_etcd_stopped_past_the_ttl_declares_no_live_node_dead_and_a_killed_one_dead():
    steps = 60
    with LocalCluster(nodes=N, config=CONFIG.format(ttl=TTL)) as cluster:
        nodes = cluster.nodes
        trainers, before = training(cluster, "stall", steps)
        etcd = cluster.etcd.members[0]
        etcd.pause()
        stopped = time.time()
        nodes[-1].kill()  # dies while etcd cannot see it
        # The fault itself: etcd stopped for twice the lease TTL.
        time.sleep(max(0.0, stopped + 2 * TTL - time.time()))
        etcd.resume()

        live = nodes[:-1]
        wait_registered_again(live)
        # The killed node is found dead by every live node, after its probe went unanswered.
        for n in live:
            n.wait_member_state(nodes[-1].node_id, "dead", timeout=30)
        wait_until(lambda: all(deaths(n)["deaths_declared_total"] >= 1 for n in live), 30,
                   lambda: str({n.node_id: deaths(n) for n in live}))
        check_nothing_declared(live, 1, trainers, cluster, "stall", steps, before)


# A slow etcd, as a stop/continue duty cycle on its process: stopped 150 ms of every 200 ms
# (it answers at a quarter of its speed; leases are renewed in time, late answers make the
# control plane suspect), and stalls longer than the TTL again and again (a slow disk or long
# pauses: every lease lapses at each stall, every lapse must be held and refuted).
@pytest.mark.parametrize("stopped_ms,period_ms,lapsed", [(150, 200, False), (3000, 4000, True)],
                         ids=["quarter-speed", "repeated-stalls"])
def test_slow_etcd_declares_no_live_node_dead(stopped_ms, period_ms, lapsed):
    steps = 60
    with LocalCluster(nodes=N, config=CONFIG.format(ttl=TTL)) as cluster:
        nodes = cluster.nodes
        trainers, before = training(cluster, "slow", steps)
        etcd = cluster.etcd.members[0]
        # The fault, for 5 lease TTLs (at least two cycles).
        end = time.time() + max(5 * TTL, 2 * period_ms / 1000)
        while time.time() < end:
            etcd.pause()
            time.sleep(stopped_ms / 1000)
            etcd.resume()
            time.sleep((period_ms - stopped_ms) / 1000)
        if lapsed:
            wait_registered_again(nodes)
        check_nothing_declared(nodes, 0, trainers, cluster, "slow", steps, before, lapsed=lapsed)


def test_etcd_leader_killed_mid_run_declares_no_live_node_dead():
    steps = 60
    with LocalCluster(nodes=N, etcd=3, config=CONFIG.format(ttl=TTL)) as cluster:
        nodes = cluster.nodes
        trainers, before = training(cluster, "elect", steps)
        endpoints = nodes[0].ctl("status", json_output=True)["control_plane"]["endpoints"]
        leader = next(e["address"] for e in endpoints if e["leader"])
        next(m for m in cluster.etcd.members if m.endpoint == leader).kill()
        # The two others elect a leader; the job commits on through it.
        check_nothing_declared(nodes, 0, trainers, cluster, "elect", steps, before, lapsed=False)
