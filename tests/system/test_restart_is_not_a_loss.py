"""A routine reftd restart never blocks a job, and no published decision outlives its reason
(docs/planner.md "A restart is not a loss").

Four real reftd on etcd (lease TTL 2 s), a pp = 2 × dp = 2 job with layered buffers that
committed its steps (test_reshape's trainer), the planner in the loop with a 15 s spare wait:

* One node's reftd is stopped (SIGTERM, as for a configuration change) and started again: its
  lease went, so the coordinator publishes `waiting_for_spare` for the "loss" — and withdraws it
  within a lease TTL of the node's return (`no_loss`, version + 1); `reft.elastic` then places
  every rank in the running layout at once instead of waiting for a spare that cannot come.
* Another node stays down past the spare wait: within a lease TTL of `wait_until_ms` the wait is
  replaced by the decision without a spare, whose transfer plan moves layers — which makes it
  final: when the node comes back (its slots adopted) the decision stands.
"""
import json
import time

import reft
from reft_cluster import LocalCluster
from test_plan_online import JOB, wait_publication, wait_transfer
from test_reshape import CONFIG, STEPS, train

LEASE_TTL_MS = 2000  # CONFIG's etcd.lease_ttl_s
CONFIG_WAITING = CONFIG + '\n[planner]\nmode = "automatic"\nspare_wait_ms = 15000\n'


def wait_log(node, text, timeout=30):
    """`node`'s log once it holds `text` (a line the daemon writes when it acted)."""
    deadline = time.time() + timeout
    while text not in node.log():
        assert time.time() < deadline, (node.node_id, text, node.log()[-3000:])
        time.sleep(0.1)


def test_a_restarted_reftd_withdraws_its_loss_and_a_final_decision_stands():
    with LocalCluster(nodes=4, config=CONFIG_WAITING) as cluster:
        nodes = cluster.nodes
        train(nodes, JOB, 2, 2, "arc1")
        coordinator_id = json.loads(cluster.etcd.get(f"/reft/v1/jobs/{JOB}/coordinator"))["node"]
        coordinator = next(n for n in nodes if n.node_id == coordinator_id)
        others = [n for n in nodes if n is not coordinator]
        # Restarted: a node of the lighter stage; kept down: one of the heavier (a reconfiguration
        # with moves, as in test_plan_online).
        restarted = next(n for n in others if n in nodes[2:])
        kept_down = next(n for n in others if n in nodes[:2])

        # --- a restart: the loss is published, then withdrawn when the node is back ---
        restarted.stop()
        waiting = wait_publication(coordinator, "waiting_for_spare")["publication"]
        assert waiting["basis"] == restarted.node_id, waiting
        restarted.start()
        back_ms = time.time() * 1000
        withdrawn = wait_publication(coordinator, "no_loss", timeout=30)
        pub = withdrawn["publication"]
        assert pub["basis"] == restarted.node_id and pub["version"] > waiting["version"], pub
        assert pub["step"] == STEPS - 1 and pub["wait_until_ms"] is None, pub
        assert pub["decided_at_ms"] - back_ms <= LEASE_TTL_MS, (pub, back_ms)
        assert withdrawn["decision"]["needed"] is False and withdrawn["lost_nodes"] == [], withdrawn
        wait_log(coordinator, f"{restarted.node_id} came back before the decision (waiting_for_spare) "
                              "was acted on; the loss is withdrawn")
        # Every rank, restarted by its launcher at the running size, is placed at once (a
        # withdrawn loss is not waited on) in the layout the job runs in.
        started = time.monotonic()
        places = [reft.elastic.coordinates(restarted.socket, JOB, rank=r, world_size=4, wait_s=20)
                  for r in range(4)]
        assert time.monotonic() - started < 10, "reft.elastic waited on a withdrawn loss"
        assert {(p.policy, p.dp, p.pp) for p in places} == {("none", 2, 2)}, places
        assert {p.node for p in places} == {n.node_id for n in nodes}, places

        # --- a real wait: it ends at wait_until_ms, and the decision it makes is final ---
        kept_down.stop()
        waiting = wait_publication(coordinator, "waiting_for_spare")["publication"]
        assert waiting["basis"] == kept_down.node_id and waiting["version"] > pub["version"], waiting
        assert waiting["wait_until_ms"] > time.time() * 1000 + 5000, waiting
        decided = wait_publication(coordinator, "decided", timeout=40)["publication"]
        assert 0 <= decided["decided_at_ms"] - waiting["wait_until_ms"] <= LEASE_TTL_MS, (decided, waiting)
        moved = wait_transfer(coordinator)
        assert moved["publication"]["transfer"]["state"] == "done", moved["publication"]
        assert moved["decision"]["policy"] == "reconfigure", moved["decision"]
        kept_down.start()
        wait_log(coordinator, f"{kept_down.node_id} came back; the decision (decided) stands: "
                              "its transfer plan moved layers")
        after = coordinator.ctl("plan", "show", "--job", JOB, json_output=True)["publication"]
        assert after["state"] == "decided" and after["version"] == moved["publication"]["version"], after
