"""The planner over a running job with real reftd processes (docs/planner.md "The online path").

A pp = 2 × dp = 2 job (reshape_trainer.py: per layer a replicated weight and bias and a sharded
optimizer buffer) runs one rank per node on four nodes and commits a few steps. `reftctl plan
show` then reports the job model — every rank's node, the bytes of every layer as registered, the
measured step time — and no decision. A node of the heavier stage is lost (kill -9 of its
reftd, its memory wiped); once a survivor sees it dead, `plan show` on the survivor reports the
decision: no spare, rerouting would nearly double the step, so a reconfiguration onto the three
survivors, with a transfer plan whose layers and bytes are those
the trainers registered. `reft.plan` returns the same document; `plan attach` refuses a profile
of another model and then uses the one that fits. That test runs with `planner.mode = "off"`:
every answer is the asked node's own view.

The others run the planner in the loop: the job's coordinator (elected in etcd among the nodes
with its trainers or slots) publishes its decision there and every survivor shows the same
publication; reft.elastic places each rank of the new layout and the job goes on under it; in operator-confirmed mode it waits for `reftctl plan confirm`, and without a spare
it waits up to `planner.spare_wait_ms` for one when restarting on a spare after the wait would
still train more than reconfiguring now — a spare that comes meanwhile takes the lost node's ranks;
a loss below (f+1)·n0 is decided as an exit, with its reason.
"""
import json
import time

import pytest

import reft
from reft_cluster import LocalCluster
from test_reftctl_json import validate
from test_reshape import CONFIG, STEPS, Trainer, grid, lose, reshaped_ok, run, train
import reshape_trainer as rt

JOB = "planned"


def registered_layers():
    """Per layer: (stage, parameter bytes, optimizer bytes) as reshape_trainer registers them."""
    out = []
    for l in range(rt.LAYERS):
        stage = [s for s in range(2) if l in rt.layers_of(s, 2)][0]
        out.append((stage, rt.WEIGHT[l] * 4 + rt.BIAS[l], rt.OPTIM[l]))
    return out


OFF = CONFIG + '\n[planner]\nmode = "off"\n'


def wait_publication(node, state, timeout=60):
    """`plan show` on `node` until the job's publication is in `state`; returns the document."""
    deadline = time.time() + timeout
    while True:
        doc = node.ctl("plan", "show", "--job", JOB, json_output=True)
        pub = doc["publication"]
        if pub is not None and pub["state"] == state and pub["current"]:
            validate(doc, "plan-show.schema.json")
            return doc
        assert time.time() < deadline, (node.node_id, pub)
        time.sleep(0.1)


def wait_transfer(node, timeout=60):
    """`plan show` on `node` until the published decision's transfer plan ran; returns the
    document."""
    deadline = time.time() + timeout
    while True:
        doc = node.ctl("plan", "show", "--job", JOB, json_output=True)
        pub = doc["publication"]
        progress = pub and pub["current"] and pub["transfer"]
        if progress and progress["state"] in ("done", "failed"):
            validate(doc, "plan-show.schema.json")
            return doc
        assert time.time() < deadline, (node.node_id, pub)
        time.sleep(0.1)


SKEW_MS = 5  # every node here reads one clock; the phases of different nodes may differ by this
PHASES = ["lost_at", "declared_at", "decided_at", "staged_at", "reconnected_at", "restore_started_at",
          "restore_ended_at"]


def check_phases(results, killed_ms, coordinator, restoring_nodes):
    """Every rank's last_restore()["phases"] after a reconfiguration with a transfer plan: every
    phase happened, in order, the job-wide ones observed by the coordinator and the rank's own by
    its node; the harness's kill between the lost node's last sign of life and its declaration."""
    for (_, _, node), lines in results.items():
        phases = lines[0]["report"]["phases"]
        assert sorted(phases) == sorted(PHASES), phases
        assert all(phases[p] is not None for p in PHASES), phases
        at = [phases[p]["at_ms"] for p in PHASES]
        assert all(b >= a - SKEW_MS for a, b in zip(at, at[1:])), phases
        assert {phases[p]["node"] for p in PHASES[:4]} == {coordinator}, phases
        assert {phases[p]["node"] for p in PHASES[4:]} == {node}, phases
        assert phases["lost_at"]["at_ms"] - 100 <= killed_ms <= phases["declared_at"]["at_ms"], (killed_ms, phases)


def test_plan_show_reconfigures_onto_the_survivors_after_a_node_is_lost(tmp_path):
    with LocalCluster(nodes=4, config=OFF) as cluster:
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
        assert before["publication"] is None and before["planner_mode"] == "off"
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
        assert "reconfigure" in table and "not executed yet" in table, table

        # The Python API returns the same document.
        doc = reft.plan(nodes[0].socket, JOB)
        after.pop("schema")
        assert doc["decision"] == after["decision"] and doc["model"]["layers"] == after["model"]["layers"]

        with pytest.raises(reft.Error):
            reft.plan(nodes[0].socket, "no-such-job")
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


def test_the_planner_node_publishes_one_decision_that_every_survivor_shows():
    config = CONFIG + "\n[planner]\nmode = \"automatic\"\nspare_wait_ms = 0\n"
    with LocalCluster(nodes=4, config=config, metrics=True) as cluster:
        nodes = cluster.nodes
        train(nodes, JOB, 2, 2, "arc1")
        assert nodes[2].ctl("plan", "show", "--job", JOB, json_output=True)["publication"] is None

        # A node of the heavier stage: the decision is a reconfiguration (as in the first test).
        lost = nodes[1]
        killed_ms = time.time() * 1000
        lose(lost)
        survivors = [n for n in nodes if n is not lost]
        # The coordinator moves the layers each survivor will host and does not hold to it
        # (every move's state and the bytes in the publication) before the ranks restart.
        moved = wait_transfer(survivors[0])
        progress = moved["publication"]["transfer"]
        assert progress["state"] == "done", progress
        assert moved["decision"]["transfer"]["executed"] is True
        moves = moved["decision"]["transfer"]["moves"]
        assert moves and [m["state"] for m in progress["moves"]] == ["done"] * len(moves), progress
        # Exactly the layers' registered bytes (weights, biases and the sharded optimizer state).
        assert progress["bytes_staged"] == sum(m["bytes"] for m in moves), progress
        receivers = {m["to_node"] for m in moves}
        # Each byte read once: a layer of a stage is read from the shards that hold it (the lost
        # member's from its ARC copy), not by assembling the whole stage.
        assert progress["bytes_fetched"] == progress["bytes_staged"] > 0, progress
        metrics = {n.node_id: n.metrics() for n in survivors}
        for n in survivors:
            staged = metrics[n.node_id].get("reft_plan_staged_bytes", 0)
            assert (staged > 0) == (n.node_id in receivers), (n.node_id, staged, receivers)
        coordinator = moved["publication"]["planner"]
        assert metrics[coordinator]['reft_plan_transfer_hosts_total{result="done"}'] == len(progress["hosts"])

        shown = [wait_publication(n, "decided") for n in survivors]
        pubs = [d["publication"] for d in shown]
        # One publication, by the job's coordinator, on the loss it decided.
        assert len({p["version"] for p in pubs}) == 1, pubs
        assert pubs[0]["planner"] in {n.node_id for n in survivors}, pubs[0]
        assert json.loads(cluster.etcd.get(f"/reft/v1/jobs/{JOB}/coordinator"))["node"] == pubs[0]["planner"]
        assert pubs[0]["basis"] == lost.node_id and pubs[0]["step"] == STEPS - 1
        assert pubs[0]["generation"] == 0
        for d in shown:
            assert d["decision"] == shown[0]["decision"]
            assert d["decision"]["policy"] == "reconfigure", d["decision"]
            assert d["lost_nodes"] == [lost.node_id]
        table = survivors[-1].ctl("plan", "show", "--job", JOB).stdout
        assert "published: decided by " + pubs[0]["planner"] in table, table
        assert ": done (attempt 1; " in table and "STATE" in table, table

        # The job goes on under the published layout: each rank gets its place from reft.elastic
        # (RANK and WORLD_SIZE as torchrun would give them), runs on the node the decision put
        # it on with the layers it gave its stage, and restores with reshape=True — every byte
        # checked, then a step more committed under the new layout.
        new = shown[0]["decision"]["new_layout"]["pipelines"]
        world = sum(len(p["stages"]) for p in new)
        places = [reft.elastic.coordinates(nodes[0].socket, JOB, rank=r, world_size=world)
                  for r in range(world)]
        assert {p.node for p in places} <= {n.node_id for n in survivors}, places
        assert all(p.policy == shown[0]["decision"]["policy"] and p.version == pubs[0]["version"]
                   for p in places)
        by_id = {n.node_id: n for n in survivors}
        trainers = {(p.pp_rank, p.dp_rank): Trainer(by_id[p.node], JOB, p.pp_rank, p.dp_rank, p.pp, p.dp,
                                                    "arc1", "--layers", f"{p.layers[0]}:{p.layers[1]}",
                                                    "--restore", "--reshape", "--then", "1")
                    for p in places}
        results = {(p.pp_rank, p.dp_rank, p.node): t.result() for p, t in
                   ((p, trainers[(p.pp_rank, p.dp_rank)]) for p in places)}
        reshaped_ok(results, "dp=2", then=1)
        check_phases(results, killed_ms, coordinator, {p.node for p in places})
        # Each restoring node observed every phase of the recovery in reft_recovery_phase_seconds.
        for node in {p.node for p in places}:
            counts = by_id[node].metrics()
            for phase in ("detect", "decide", "stage", "reconnect", "restore"):
                assert counts[f'reft_recovery_phase_seconds_count{{phase="{phase}"}}'] >= 1, (node, phase)
        # restore-check and plan show: the job's last recovery and its first commit after it.
        check = by_id[places[0].node].ctl("restore-check", "--job", JOB, json_output=True)
        validate(check, "restore-check.schema.json")
        last = check["last_recovery"]
        assert last["first_commit_step"] == STEPS, last
        assert last["first_commit_at"]["at_ms"] >= last["phases"]["staged_at"]["at_ms"], last
        assert last["phases"]["restore_started_at"] is None and last["phases"]["lost_at"] is not None, last
        assert "last recovery" in by_id[places[0].node].ctl("plan", "show", "--job", JOB).stdout
        # A rank on a node that received layers read them there (staged), not from the holders.
        for (_, _, node), lines in results.items():
            detail = lines[0]["report"]["detail"]
            assert ("staged on this node" in detail) == (node in receivers), (node, detail)

        # A decided plan is not confirmed: nothing awaits confirmation.
        r = survivors[1].ctl("plan", "confirm", "--job", JOB, check=False)
        assert r.returncode != 0 and "not awaiting confirmation" in r.stderr, r
        # A node that comes lets the job grow back towards the four positions it had: the
        # coordinator hears the registration and publishes a growth onto it — a decision of its
        # own (basis "+spare9"), not the loss's again.
        cluster.add_node("spare9")
        deadline = time.time() + 60
        while True:
            again = survivors[0].ctl("plan", "show", "--job", JOB, json_output=True)
            if again["publication"]["basis"] != pubs[0]["basis"]:
                break
            assert time.time() < deadline, again["publication"]
            time.sleep(0.1)
        validate(again, "plan-show.schema.json")
        pub = again["publication"]
        assert pub["basis"] == "+spare9" and pub["current"] and pub["state"] == "decided", pub
        assert pub["version"] > pubs[0]["version"] and pub["planner"] == pubs[0]["planner"], pub
        grow = again["decision"]
        assert again["peak_units"] == 4 and grow["policy"] == "grow" and grow["joining_nodes"] == ["spare9"], grow
        placed = [st["node"] for p in grow["new_layout"]["pipelines"] for st in p["stages"]]
        assert sorted(placed) == sorted([n.node_id for n in survivors] + ["spare9"]), grow
        assert "transfer" not in grow and grow["restore_fetch_bytes"] > 0, grow
        # Ranks restarted at the running size (not onto the node that came) go on as they run.
        running = reft.elastic.coordinates(nodes[0].socket, JOB, rank=0, world_size=world)
        assert (running.dp, running.pp) == (places[0].dp, places[0].pp) and running.policy == "none"
        # The node that came is lost before the ranks restart onto it: the growth no longer
        # stands, and no rank is placed on a dead node.
        lose(cluster.nodes[-1])
        deadline = time.time() + 60
        while True:
            gone = survivors[0].ctl("plan", "show", "--job", JOB, json_output=True)
            if not gone["publication"]["current"]:
                break
            assert time.time() < deadline, gone["publication"]
            time.sleep(0.1)
        assert gone["decision"]["policy"] == "none" and "spare9" not in gone["live_nodes"], gone["decision"]


def test_operator_confirmed_mode_waits_for_a_spare_then_for_the_operator():
    # Five minutes: reconfiguring onto the three survivors runs about 5 % slower than the job
    # does, and waiting five minutes for a spare costs about 3 % of the expected 3.3 h to the
    # next failure, so the coordinator waits (ten minutes would cost more: it would decide now).
    config = CONFIG + '\n[planner]\nmode = "confirm"\nspare_wait_ms = 300000\n'
    with LocalCluster(nodes=4, config=config) as cluster:
        nodes = cluster.nodes
        train(nodes, JOB, 2, 2, "arc1")
        # The job's coordinator is lost: every trainer has exited, so the nodes holding the
        # job's slots elect the next one, which decides.
        coordinator = json.loads(cluster.etcd.get(f"/reft/v1/jobs/{JOB}/coordinator"))["node"]
        lost = next(n for n in nodes if n.node_id == coordinator)
        lose(lost)
        survivors = [n for n in nodes if n is not lost]
        # No spare: the planner waits for one (five minutes here) and says why.
        waiting = wait_publication(survivors[0], "waiting_for_spare")
        pub = waiting["publication"]
        assert pub["planner"] != lost.node_id and pub["basis"] == lost.node_id, pub
        assert json.loads(cluster.etcd.get(f"/reft/v1/jobs/{JOB}/coordinator"))["node"] == pub["planner"]
        assert pub["wait_until_ms"] > time.time() * 1000 + 200_000, pub
        assert waiting["spare_nodes"] == [] and waiting["decision"]["policy"] is not None
        assert waiting["decision"]["spare_wait"]["reason"].startswith("no spare; waiting up to 5 min"), waiting
        r = survivors[0].ctl("plan", "confirm", "--job", JOB, check=False)
        assert r.returncode != 0 and "waiting_for_spare, not awaiting confirmation" in r.stderr, r

        # A spare comes: it takes the lost node's ranks at once, and the operator is asked.
        spare = cluster.add_node("spare9")
        asked = wait_publication(survivors[1], "awaiting_confirmation")
        d = asked["decision"]
        assert asked["spare_nodes"] == [spare.node_id], asked["spare_nodes"]
        assert d["policy"] == "restart_on_spare", d
        # The decision says how long it waited for the spare.
        assert 0 < d["spare_wait"]["waited_ms"] < 300_000, d["spare_wait"]
        assert d["spare_wait"]["reason"].startswith("a spare is registered for every lost node"), d["spare_wait"]
        placed = {(s, p): st["node"] for p, pipe in enumerate(d["new_layout"]["pipelines"])
                  for s, st in enumerate(pipe["stages"])}
        before = {(r["pp"], r["dp"]): r["node"] for r in asked["ranks"]}
        assert placed == {k: spare.node_id if n == lost.node_id else n for k, n in before.items()}, placed
        version = asked["publication"]["version"]

        # A confirmation of a version the operator did not see is refused; the shown one is taken.
        r = survivors[2].ctl("plan", "confirm", "--job", JOB, "--version", str(version + 1000), check=False)
        assert r.returncode != 0 and "changed since version" in r.stderr, r
        confirmed = survivors[2].ctl("plan", "confirm", "--job", JOB, "--version", str(version),
                                     json_output=True)
        assert confirmed["state"] == "confirmed" and confirmed["version"] > version
        for n in survivors + [spare]:
            doc = n.ctl("plan", "show", "--job", JOB, json_output=True)
            assert doc["publication"]["state"] == "confirmed", (n.node_id, doc["publication"])
            assert doc["publication"]["version"] == confirmed["version"]
            assert doc["decision"]["policy"] == "restart_on_spare"


def test_a_loss_the_plan_cannot_absorb_is_decided_as_an_exit_with_its_reason():
    # dp = 2 with f = 1: two pipelines are the fewest that tolerate a failure, (f+1)·n0 = 2.
    config = CONFIG + '\n[planner]\nmode = "automatic"\nspare_wait_ms = 0\n'
    with LocalCluster(nodes=2, config=config) as cluster:
        nodes = cluster.nodes
        train(nodes, JOB, 1, 2, "arc1")
        lose(nodes[1])
        doc = wait_publication(nodes[0], "decided")
        d = doc["decision"]
        assert d["policy"] == "exit", d
        assert "fewer than (f+1)·n0 = 2" in d["reason"] and "persistent tier" in d["reason"], d
        with pytest.raises(reft.Error, match="cannot go on in memory"):
            reft.elastic.coordinates(nodes[0].socket, JOB, rank=0, world_size=1, wait_s=0)


def test_a_sender_lost_while_the_layers_move_is_planned_again_and_nothing_is_lost():
    # Operator-confirmed mode; each node's link throttled (2 MB/s) and the layers 8x larger, so
    # that the ~7 MB that stage 0's layers weigh take seconds to move to a node.
    config = (CONFIG + '\n[planner]\nmode = "confirm"\nspare_wait_ms = 0\n'
              + '\n[peer]\nlink_bandwidth = "2M"\n')
    scale = ("--scale", "8")
    with LocalCluster(nodes=6, config=config) as cluster:
        nodes = cluster.nodes
        # Stage 0 on node0..node2, stage 1 on node3..node5.
        for rank, lines in run(grid(nodes, 2, 3), JOB, 2, 3, "arc1", "--train", str(STEPS), *scale).items():
            assert lines == [{"committed": STEPS - 1}], (rank, lines)
        coordinator = json.loads(cluster.etcd.get(f"/reft/v1/jobs/{JOB}/coordinator"))["node"]
        # A node of the heavier stage (layers 0-2), not the coordinator.
        first = next(n for n in nodes[:3] if n.node_id != coordinator)
        lose(first)
        survivors = [n for n in nodes if n is not first]
        asked = wait_publication(survivors[0], "awaiting_confirmation")
        assert asked["decision"]["policy"] == "reconfigure", asked["decision"]
        # Nothing moves before the operator confirms.
        assert asked["publication"]["transfer"] is None, asked["publication"]
        survivors[0].ctl("plan", "confirm", "--job", JOB, "--version", str(asked["publication"]["version"]))

        # While the layers move, a node that sends some of them is lost.
        deadline = time.time() + 60
        while True:
            doc = survivors[0].ctl("plan", "show", "--job", JOB, json_output=True)
            progress = doc["publication"]["transfer"]
            if progress is not None and progress["state"] == "running":
                break
            assert progress is None or progress["state"] == "pending", progress
            assert time.time() < deadline, doc["publication"]
            time.sleep(0.05)
        senders = {m["from_node"] for m in progress["moves"] if m["state"] != "done"}
        second = next(n for n in nodes[3:] if n.node_id != coordinator and n.node_id in senders)
        lose(second)
        survivors = [n for n in survivors if n is not second]

        # The coordinator plans again from what survives: one decision on both losses, confirmed,
        # its moves done.
        basis = ",".join(sorted([first.node_id, second.node_id]))
        deadline = time.time() + 120
        while True:
            doc = survivors[0].ctl("plan", "show", "--job", JOB, json_output=True)
            pub = doc["publication"]
            if pub and pub["current"] and pub["basis"] == basis and pub["state"] == "awaiting_confirmation":
                break
            assert time.time() < deadline, (pub, doc["decision"].get("policy"), doc["decision"].get("reason"))
            time.sleep(0.1)
        assert doc["decision"]["policy"] == "reconfigure", doc["decision"]
        survivors[1].ctl("plan", "confirm", "--job", JOB, "--version", str(pub["version"]))
        moved = wait_transfer(survivors[0], timeout=120)
        progress = moved["publication"]["transfer"]
        assert moved["publication"]["basis"] == basis and progress["state"] == "done", progress
        assert all(m["to_node"] in {n.node_id for n in survivors} for m in progress["moves"]), progress

        # Every rank of the new layout restores every byte and the job commits under it.
        new = moved["decision"]["new_layout"]["pipelines"]
        world = sum(len(p["stages"]) for p in new)
        places = [reft.elastic.coordinates(survivors[0].socket, JOB, rank=r, world_size=world)
                  for r in range(world)]
        assert all(p.transfer == "done" for p in places), places
        by_id = {n.node_id: n for n in survivors}
        trainers = {(p.pp_rank, p.dp_rank): Trainer(by_id[p.node], JOB, p.pp_rank, p.dp_rank, p.pp, p.dp,
                                                    "arc1", "--layers", f"{p.layers[0]}:{p.layers[1]}",
                                                    "--restore", "--reshape", "--then", "1", *scale)
                    for p in places}
        reshaped_ok({rank: t.result() for rank, t in trainers.items()}, "dp=3", then=1)


def test_each_node_of_the_new_layout_stages_the_shards_it_lacks_and_restores_locally():
    # A data-parallel job of 3 ranks, ARC(1): each node holds its own shard of the replicated
    # state and a copy of its neighbour's, not the third. One node is lost with no spare; the
    # job goes on with 2 ranks, each of which needs every byte. Before the ranks restart, each
    # survivor pulls exactly the part it lacks (one shard: the lost node's, or the survivor's
    # whose copy was on the lost node — the latter from the ARC copy the other survivor holds),
    # and the restores then read nothing from peers but a per-rank buffer whose rank's node is
    # gone (per-rank state goes only to the rank with the same coordinates; it is not staged).
    # Each rank also holds stage-wide state without a layer (as a flat optimizer state is),
    # staged with the stage's layers by the nodes that run that whole stage again.
    config = CONFIG + "\n[planner]\nmode = \"automatic\"\nspare_wait_ms = 0\n"
    stage_state = ["--stage-state", "100000"]
    with LocalCluster(nodes=3, config=config, metrics=True) as cluster:
        nodes = cluster.nodes
        for rank, lines in run(grid(nodes, 1, 3), JOB, 1, 3, "arc1", "--train", str(STEPS),
                               *stage_state).items():
            assert lines == [{"committed": STEPS - 1}], (rank, lines)
        lost = nodes[1]
        lose(lost)
        survivors = [nodes[0], nodes[2]]
        doc = wait_transfer(survivors[0])
        progress = doc["publication"]["transfer"]
        assert progress["state"] == "done", progress
        assert doc["decision"]["policy"] in ("reroute", "reconfigure", "restart"), doc["decision"]
        assert doc["decision"]["transfer"]["executed"] is True
        hosts = {h["node"]: h for h in progress["hosts"]}
        assert set(hosts) == {n.node_id for n in survivors}, progress
        # Every layer's replicated and sharded bytes, as registered, and the stage's state.
        total = sum(p + o for _, p, o in registered_layers()) + 100000
        for node, h in hosts.items():
            assert h["state"] == "done" and h["layers"] == list(range(rt.LAYERS)), h
            # About a third of the state each (one of three shards; the sharding rounds).
            assert total / 4 < h["bytes_staged"] < total / 2, (h, total)
        assert progress["bytes_staged"] == sum(h["bytes_staged"] for h in hosts.values())
        assert progress["bytes_from_peers"] == progress["bytes_staged"], progress
        table = survivors[1].ctl("plan", "show", "--job", JOB).stdout
        assert "staging what they lack" in table and "STAGED" in table, table

        world = reft.elastic.world_size(doc)
        assert world == 2
        places = [reft.elastic.coordinates(survivors[0].socket, JOB, rank=r, world_size=world)
                  for r in range(world)]
        assert all(p.transfer == "done" for p in places), places
        by_id = {n.node_id: n for n in survivors}
        trainers = {(p.dp_rank, p.node): Trainer(by_id[p.node], JOB, 0, p.dp_rank, 1, p.dp, "arc1",
                                                 "--restore", "--reshape", "--then", "1", *stage_state)
                    for p in places}
        results = {rank: t.result() for rank, t in trainers.items()}
        reshaped_ok(results, "dp=3", then=1)
        for (dp_rank, node), lines in results.items():
            detail = lines[0]["report"]["detail"]
            saved_here = nodes[dp_rank].node_id == node  # the saved rank's "rng" is on this node
            from_peers = 0 if saved_here else rt.RNG_BYTES
            assert "staged on this node" in detail, (node, detail)
            assert detail.endswith(f"; {from_peers} bytes from peers"), (dp_rank, node, detail)
