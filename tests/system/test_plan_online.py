"""The planner over a running job with real reftd processes (docs/planner.md "The online path").

A pp = 2 × dp = 2 job (reshape_trainer.py: per layer a replicated weight and bias and a sharded
optimizer buffer) runs one rank per node on four nodes and commits a few steps. `reftctl plan
show` then reports the job model — every rank's node, the bytes of every layer as registered, the
measured step time — and no decision. A node of the heavier stage is lost (kill -9 of its
reftd, its memory wiped); once a survivor sees it dead, `plan show` on the survivor reports the
decision: no spare, rerouting would nearly double the step, so a reconfiguration onto the three
survivors, with a transfer plan whose layers and bytes are those
the trainers registered. `reft.plan` returns the same document; `plan attach` refuses a profile
of another model and then uses the one that fits.
"""
import json

import pytest

import reft
from reft_cluster import LocalCluster
from test_reftctl_json import validate
from test_reshape import CONFIG, STEPS, lose, train
import reshape_trainer as rt

JOB = "planned"


def registered_layers():
    """Per layer: (stage, parameter bytes, optimizer bytes) as reshape_trainer registers them."""
    out = []
    for l in range(rt.LAYERS):
        stage = [s for s in range(2) if l in rt.layers_of(s, 2)][0]
        out.append((stage, rt.WEIGHT[l] * 4 + rt.BIAS[l], rt.OPTIM[l]))
    return out


def test_plan_show_reconfigures_onto_the_survivors_after_a_node_is_lost(tmp_path):
    with LocalCluster(nodes=4, config=CONFIG) as cluster:
        nodes = cluster.nodes
        train(nodes, JOB, 2, 2, "arc1")
        layers = registered_layers()

        before = nodes[0].ctl("plan", "show", "--job", JOB, json_output=True)
        validate(before, "plan-show.schema.json")
        assert before["step"] == STEPS - 1
        assert before["layout"] == {"dp": 2, "tp": 1, "pp": 2}
        assert {(r["pp"], r["dp"]): r["node"] for r in before["ranks"]} == {
            (pp, dp): nodes[pp * 2 + dp].node_id for pp in range(2) for dp in range(2)}
        assert [(l["stage"], l["param_bytes"], l["optimizer_bytes"])
                for l in before["model"]["layers"]] == layers
        assert before["model"]["step_ms"] > 0 and before["model"]["step_samples"] >= 1
        assert before["profile"]["source"] == "measured_step_time"
        assert before["decision"]["needed"] is False and before["decision"]["policy"] == "none"
        table = nodes[0].ctl("plan", "show", "--job", JOB).stdout
        assert "no decision needed" in table and "LAYER" in table, table

        # Rank (pp0, dp1): stage 0 holds the heavier layers, so rerouting its work onto the other
        # stage-0 node nearly doubles the step and moving to a new plan scores higher. (Losing a
        # stage-1 node would be rerouted: that stage has slack, the planner sees it.)
        lost = nodes[1]
        lose(lost)
        nodes[0].wait_member_state(lost.node_id, "dead", timeout=60)

        after = nodes[0].ctl("plan", "show", "--job", JOB, json_output=True)
        validate(after, "plan-show.schema.json")
        d = after["decision"]
        assert after["lost_nodes"] == [lost.node_id], after
        assert after["spare_nodes"] == []
        assert "no profile attached" in after["profile"]["note"]
        assert d["needed"] is True and d["policy"] == "reconfigure", json.dumps(d, indent=1)
        survivors = {n.node_id for n in nodes if n is not lost}
        placed = [st for p in d["new_layout"]["pipelines"] for st in p["stages"]]
        assert {st["node"] for st in placed} <= survivors
        # Which survivor holds which layer now, and which it needs in the new layout.
        held = {nodes[pp * 2 + dp].node_id: {l for l in range(rt.LAYERS) if layers[l][0] == pp}
                for pp in range(2) for dp in range(2) if nodes[pp * 2 + dp] is not lost}
        needs = {}
        for st in placed:
            needs.setdefault(st["node"], set()).update(
                range(st["layers"]["first"], st["layers"]["last"] + 1))
        moves = d["transfer"]["moves"]
        assert moves, d
        for mv in moves:
            l = mv["layer"]
            assert mv["bytes"] == layers[l][1] + layers[l][2], mv
            assert l in held[mv["from_node"]] and mv["to_node"] in survivors, mv
        assert sorted((m["to_node"], m["layer"]) for m in moves) == sorted(
            (n, l) for n, ls in needs.items() for l in ls - held[n])
        assert d["transfer"]["total_bytes"] == sum(m["bytes"] for m in moves)
        assert d["transfer"]["executed"] is False
        table = nodes[2].ctl("plan", "show", "--job", JOB).stdout
        assert "reconfigure" in table and "transfer plan (not executed yet)" in table, table

        # The Python API returns the same document.
        doc = reft.plan(nodes[0].socket, JOB, reftctl=cluster.reftctl)
        after.pop("schema")
        assert doc["decision"] == after["decision"] and doc["model"]["layers"] == after["model"]["layers"]

        with pytest.raises(reft.Error):
            reft.plan(nodes[0].socket, "no-such-job", reftctl=cluster.reftctl)
        assert nodes[0].ctl("plan", "show", "--job", "no-such-job", check=False).returncode == 1

        # A profile of another model is refused (and the old state kept); one that fits is used.
        r = nodes[0].ctl("plan", "attach", "--job", JOB, "-i", str(tmp_path / "missing.toml"),
                         check=False)
        assert r.returncode == 2, r
        wrong = tmp_path / "wrong.toml"
        wrong.write_text("[model]\nnum_layers = 4\n[model.layer]\nforward_ms = 1.0\n")
        r = nodes[0].ctl("plan", "attach", "--job", JOB, "-i", str(wrong), check=False)
        assert r.returncode != 0 and "the job registered 6" in r.stderr, r.stderr
        assert nodes[0].ctl("plan", "show", "--job", JOB,
                            json_output=True)["profile"]["source"] == "measured_step_time"
        good = tmp_path / "profile.toml"
        good.write_text("[model]\nnum_layers = 6\n[model.layer]\nforward_ms = 10.0\n"
                        "[policy]\nrestart_ms = 1000\n")
        attached = nodes[0].ctl("plan", "attach", "--job", JOB, "-i", str(good), json_output=True)
        assert attached["layers"] == 6 and attached["layers_checked"] is True
        with_profile = nodes[0].ctl("plan", "show", "--job", JOB, json_output=True)
        assert with_profile["profile"]["source"] == "attached"
        assert with_profile["decision"]["policy"] in ("reconfigure", "restart", "reroute")
