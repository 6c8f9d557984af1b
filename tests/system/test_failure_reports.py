"""Suspicions find a dead node long before its lease lapses, and never kill a live one
(docs/coordination.md "Suspicions: faster detection without false deaths").

Four real reftd on one real etcd with a 10 s lease TTL, a job of four ranks (dp = 4, rank d on
node d). A trainer's `reft.elastic.report_failure` and a peer call that finds a node unreachable
are suspicions: reftd knocks at the suspected node's port and revokes its lease only when the
port refuses twice (the process is gone).

* About live nodes — running, or SIGSTOPped (silent: the kernel still holds its port) — a report
  is refuted: no death, no lease lost.
* A report about a rank outside the layout, one from a uid that does not own the job, and a
  flood of reports are refused with clear errors and look into nothing.
* A reftd SIGKILLed and reported by a trainer on another node is declared dead within 2 s (the
  lease would take 10 s); the job's coordinator SIGKILLed with nobody reporting it is found by
  the peer calls that fail to reach it, also well within the TTL.
"""
import time

import pytest

import reft
import reft.elastic
from other_uid import NOBODY, open_to, package_copy, require_other_uid, run_as
from reft_cluster import LocalCluster
from test_control_plane_faults import start_trainers, wait_until

JOB = "suspected"
TTL = 10  # seconds: far longer than the 2 s a killed process may take to be declared dead
CONFIG = f"""
[etcd]
lease_ttl_s = {TTL}

[local]
allowed_uids = [{NOBODY}]

[store]
chunk_size = "16K"
"""

REPORT_AS_STRANGER = r"""
import json, sys
import reft, reft.elastic
try:
    reft.elastic.report_failure(sys.argv[1], sys.argv[2], "I want this job restarted", peer_rank=1)
    print(json.dumps({"ok": True}))
except reft.Error as e:
    print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}))
"""


def suspicions(node, outcome):
    return node.metrics().get(f'reft_node_suspicions_total{{outcome="{outcome}"}}', 0)


def declared(node):
    return node.metrics().get("reft_node_deaths_declared_total", 0)


def test_suspicions_confirm_dead_processes_fast_and_never_live_ones():
    with LocalCluster(nodes=4, config=CONFIG, metrics=True) as cluster:
        nodes = cluster.nodes
        trainers = start_trainers(cluster, nodes, JOB, steps=100_000)
        try:
            wait_until(lambda: (cluster.committed_step(JOB) or -1) >= 2, 60, "no commit")

            # About live nodes — SIGSTOPped (silent: the kernel still holds its port), or
            # running — a report is refuted: nothing declared, no lease lost.
            reporter = nodes[1]
            nodes[2].pause()
            try:
                assert reft.elastic.report_failure(reporter.socket, JOB, "rank 2 silent",
                                                   peer_rank=2) == [nodes[2].node_id]
                wait_until(lambda: suspicions(reporter, "refuted") >= 1, 10,
                           lambda: f"not refuted: {reporter.metrics()}")
            finally:
                nodes[2].resume()
            assert reft.elastic.report_failure(reporter.socket, JOB, "allreduce slow",
                                               peer_rank=3) == [nodes[3].node_id]
            wait_until(lambda: suspicions(reporter, "refuted") >= 2, 10,
                       lambda: f"not refuted: {reporter.metrics()}")
            assert all(cluster.registered(n) for n in nodes)
            assert all(declared(n) == 0 for n in nodes)
            assert suspicions(reporter, "confirmed") == 0

            # The job's coordinator SIGKILLed, reported by nobody: the peer calls that cannot
            # reach it (completion reports) are suspicions, its closed port confirms them.
            coordinator = cluster.coordinator_of(JOB)
            killed = time.time()
            coordinator.kill()
            wait_until(lambda: not cluster.registered(coordinator), TTL - 4,
                       "the coordinator's death was not found before its lease lapsed")
            unreachable_s = time.time() - killed
            live = [n for n in nodes if n is not coordinator]
            assert sum(suspicions(n, "confirmed") for n in live) >= 1

            # Another node SIGKILLed and reported by a trainer on the job's new coordinator
            # (the one node that might call it on its own): declared within 2 s.
            wait_until(lambda: cluster.coordinator_of(JOB) in live, 10, "no new coordinator")
            witness = cluster.coordinator_of(JOB)
            victim = next(n for n in live if n is not witness)
            survivors = [n for n in live if n is not victim]
            confirmed = sum(suspicions(n, "confirmed") for n in survivors)
            killed = time.time()
            victim.kill()
            assert reft.elastic.report_failure(witness.socket, JOB, "allreduce: connection reset",
                                               peer_rank=nodes.index(victim)) == [victim.node_id]
            wait_until(lambda: not cluster.registered(victim), 2.0,
                       "a killed reftd reported by a trainer was not declared within 2 s")
            reported_s = time.time() - killed
            # Confirmed by a probe (the lease revoked, not lapsed) — by the witness, or by the
            # other survivor when its own broken peer stream got there first (the witness then
            # finds the registration gone and counts nothing).
            wait_until(lambda: sum(suspicions(n, "confirmed") for n in survivors) > confirmed, 5,
                       lambda: "no survivor confirmed: " + str(
                           {n.node_id: suspicions(n, "confirmed") for n in survivors}))
            print(f"declared after: unreachable {unreachable_s:.2f} s, reported {reported_s:.2f} s "
                  f"(lease TTL {TTL} s)")
            # The survivors heard both departures.
            live = survivors
            wait_until(lambda: all(declared(n) >= 2 for n in live), 10,
                       lambda: str({n.node_id: declared(n) for n in live}))

            other = next(n for n in live if n is not witness)
            # Bad input, asked of the other live node: refused, naming the layout; looks into nothing.
            received = suspicions(other, "received")
            with pytest.raises(reft.InvalidArgumentError, match=r"peer_rank 9 is outside .*ranks 0\.\.3"):
                reft.elastic.report_failure(other.socket, JOB, "typo", peer_rank=9)
            with pytest.raises(reft.InvalidArgumentError, match="peer_rank must be >= 0"):
                reft.elastic.report_failure(other.socket, JOB, "negative", peer_rank=-1)
            assert suspicions(other, "received") == received

            # A flood: the job's allowance on a node (3 at once, 1 a second) is spent fast: of
            # eight reports at most three get through (its own rank: nothing to knock at).
            outcomes = []
            for _ in range(8):
                try:
                    outcomes.append(reft.elastic.report_failure(
                        other.socket, JOB, "flood", peer_rank=nodes.index(other)))
                except reft.BusyError as e:
                    assert "reported failures faster than" in str(e)
                    outcomes.append("busy")
            assert outcomes.count("busy") >= 5, outcomes
            # No live node was declared dead by any of this.
            assert all(declared(n) == 2 for n in live), {n.node_id: declared(n) for n in live}
            assert all(cluster.registered(n) for n in live)
        finally:
            for t in trainers:
                t.proc.kill()
                t.proc.wait()


@pytest.fixture(scope="module")
def package():
    require_other_uid()
    return package_copy()


def test_a_stranger_cannot_report_failures_of_another_users_job(package):
    with LocalCluster(nodes=2, config=CONFIG, metrics=True) as cluster:
        open_to(cluster)
        trainers = start_trainers(cluster, cluster.nodes, JOB, steps=100_000)
        try:
            wait_until(lambda: (cluster.committed_step(JOB) or -1) >= 1, 60, "no commit")
            # From the node the job runs on and from the other: refused, naming nothing.
            for node in cluster.nodes:
                r = run_as(NOBODY, REPORT_AS_STRANGER, [node.socket, JOB], package)
                assert not r["ok"] and r["error"] == "PermissionDeniedError", r
                assert all(n.node_id not in r["message"] for n in cluster.nodes), r
                assert suspicions(node, "received") == 0
        finally:
            for t in trainers:
                t.proc.kill()
                t.proc.wait()
