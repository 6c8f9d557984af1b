"""A trainer that is not an operator goes on after a node loss (docs/security.md "Jobs belong to
their owner", docs/planner.md "The online path"): every trainer, reft.plan and reft.elastic call
runs as `nobody` — not root, not reftd's uid, in no operator group. A pp = 2 × dp = 2 job
(reshape_trainer.py) trains on four nodes on etcd, a node is lost, the job's coordinator publishes
its decision; nobody reads its job's plan and every rank's place on the trainers' local socket,
and the ranks restart there, restore bit for bit and commit a step more. nobody cannot read the
plan of root's job (the refusal names nothing of it), and the admin socket still refuses it."""
import os
import re
import shutil
import subprocess

import pytest

import reft
from other_uid import NOBODY, as_uid, open_to, package_copy, require_other_uid, run_as
from reft_cluster import LocalCluster
from test_plan_online import JOB, wait_transfer
from test_reshape import CONFIG, HERE, Trainer, lose, reshaped_ok, train

ROOTS = "owned-by-root"

# As a trainer would before it restarts: its job's plan and every rank's place; then another
# owner's job's plan and places on each of the other sockets.
AS_TRAINER = r"""
import dataclasses, json, sys
import reft, reft.elastic
socket, job, other, others = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
doc = reft.plan(socket, job)
world = reft.elastic.world_size(doc)
places = [dataclasses.asdict(reft.elastic.coordinates(socket, job, rank=r, world_size=world))
          for r in range(world)]
refused = []
for s in others:
    for ask in (lambda: reft.plan(s, other),
                lambda: reft.elastic.coordinates(s, other, rank=0, world_size=1, wait_s=0)):
        try:
            ask()
            refused.append(None)
        except reft.Error as e:
            refused.append({"error": type(e).__name__, "message": str(e)})
print(json.dumps({"plan": doc, "places": places, "refused": refused}))
"""


@pytest.fixture(scope="module")
def package():
    require_other_uid()
    root = package_copy()
    shutil.copy(os.path.join(HERE, "reshape_trainer.py"), root)  # readable by nobody
    os.chmod(os.path.join(root, "reshape_trainer.py"), 0o644)
    return root


def test_a_non_operator_trainer_goes_on_after_a_node_loss_through_reft_elastic(package):
    config = (CONFIG + '\n[planner]\nmode = "automatic"\nspare_wait_ms = 0\n'
              + f"\n[local]\nallowed_uids = [{NOBODY}]\n")
    prefix, env = as_uid(NOBODY, package)
    as_nobody = dict(prefix=prefix, env=env, script=os.path.join(package, "reshape_trainer.py"))
    with LocalCluster(nodes=4, config=config) as cluster:
        open_to(cluster)
        nodes = cluster.nodes
        # Root's own job on node3: one committed step.
        with reft.Client(socket=nodes[3].socket, job=ROOTS, timeout=20.0) as mine:
            mine.register("w", bytearray(4096))
            mine.snapshot(1)
            assert mine.wait_committed(1, timeout=20.0)
        train(nodes, JOB, 2, 2, "arc1", **as_nobody)
        owners = {j["job"]: j["owner"]["uid"]
                  for j in nodes[3].ctl("jobs", "list", json_output=True)["jobs"]}
        assert owners == {JOB: NOBODY, ROOTS: 0}, owners

        lost = nodes[1]  # of the heavier stage: a reconfiguration onto the three survivors
        lose(lost)
        survivors = [n for n in nodes if n is not lost]
        shown = wait_transfer(survivors[0])  # the operator waits for the published decision
        assert shown["publication"]["state"] == "decided", shown["publication"]

        # Another owner's job asked where it never ran (node0) and where it runs (node3).
        got = run_as(NOBODY, AS_TRAINER, [survivors[0].socket, JOB, ROOTS, nodes[0].socket,
                                          nodes[3].socket], package)
        pub = got["plan"]["publication"]
        assert pub["version"] == shown["publication"]["version"] and pub["current"], pub
        assert pub["state"] == "decided" and pub["basis"] == lost.node_id, pub
        assert got["plan"]["decision"] == shown["decision"]
        places = got["places"]  # every rank of the new layout, on a survivor
        assert sorted((p["pp_rank"], p["dp_rank"]) for p in places) == sorted(
            (pp, dp) for pp in range(places[0]["pp"]) for dp in range(places[0]["dp"])), places
        assert all(p["version"] == pub["version"] and p["transfer"] == "done" for p in places)
        by_id = {n.node_id: n for n in survivors}
        assert {p["node"] for p in places} <= set(by_id), places

        # Another owner's plan: refused, naming nothing of that job.
        assert len(got["refused"]) == 4
        for refusal in got["refused"]:
            assert refusal and refusal["error"] == "PermissionDeniedError", refusal
            msg = refusal["message"]
            assert f"uid {NOBODY}" in msg and not re.search(r"uid 0\b", msg), msg
            for leak in [n.node_id for n in nodes] + ["dp=", "pp=", "layout", "'w'"]:
                assert leak not in msg, f"the refusal names {leak!r}: {msg}"

        trainers = {(p["pp_rank"], p["dp_rank"]): Trainer(
            by_id[p["node"]], JOB, p["pp_rank"], p["dp_rank"], p["pp"], p["dp"], "arc1",
            "--layers", "%d:%d" % tuple(p["layers"]), "--restore", "--reshape", "--then", "1",
            **as_nobody) for p in places}
        reshaped_ok({rank: t.result() for rank, t in trainers.items()}, "dp=2", then=1)

        # nobody needed no operator rights, and has none: the admin socket (reachable by its
        # mode here) refuses it by its credentials.
        os.chmod(survivors[0].socket + ".admin", 0o666)
        r = subprocess.run(prefix + [cluster.reftctl, "--socket", survivors[0].socket, "plan",
                                     "show", "--job", JOB], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode != 0 and "the admin socket is for operators" in r.stderr, r
