"""reft.elastic: a rank's place in the layout a planner decision gives a job (the daemon side is
tests/system/test_plan_online.py). Plan documents here follow plan-show.schema.json."""

import pytest

import reft
from reft.elastic import placement_from_plan


def _doc(dp, pp, decision, tp=1):
    ranks = [{"pp": p, "tp": t, "dp": d, "node": f"n{p * dp + d}", "state": "alive"}
             for p in range(pp) for t in range(tp) for d in range(dp)]
    per_stage = 6 // pp
    layers = [{"layer": l, "stage": l // per_stage} for l in range(6)]
    return {"job": "j", "step": 9, "layout": {"dp": dp, "tp": tp, "pp": pp}, "ranks": ranks,
            "model": {"layers": layers}, "decision": decision,
            "publication": {"state": "decided", "version": 42, "current": True}}


def _answer_with(monkeypatch, answers):
    """reft.plan answers the documents of `answers` in turn (then the last one again); returns
    the list of the calls made."""
    seen = []

    def plan(socket, job, reftctl=None):
        seen.append(job)
        return answers[min(len(seen), len(answers)) - 1]

    monkeypatch.setattr(reft._plan, "plan", plan)
    return seen


def _stage(node, first, last, rerouted=False):
    st = {"node": node, "layers": {"first": first, "last": last}}
    if rerouted:
        st["rerouted"] = True
    return st


def test_no_loss_keeps_the_running_layout_in_megatron_rank_order():
    doc = _doc(2, 2, {"needed": False, "policy": "none"}, tp=2)
    places = [placement_from_plan(doc, r, 8) for r in range(8)]
    # tp fastest, then dp, then pp.
    assert [(p.pp_rank, p.dp_rank, p.tp_rank) for p in places] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    assert places[5].layers == (3, 5) and places[5].stage_layers == [(0, 2), (3, 5)]
    assert places[5].node == "n2" and places[5].policy == "none" and places[5].version == 42


def test_a_reconfiguration_gives_the_new_layout_its_split_and_nodes():
    new = {"pipelines": [{"stages": [_stage("n0", 0, 1), _stage("n2", 2, 3), _stage("n3", 4, 5)]}]}
    doc = _doc(2, 2, {"needed": True, "policy": "reconfigure", "new_layout": new})
    assert reft.elastic.world_size(doc) == 3
    places = [placement_from_plan(doc, r, 3) for r in range(3)]
    assert [(p.dp, p.tp, p.pp) for p in places] == [(1, 1, 3)] * 3
    assert [(p.pp_rank, p.layers, p.node) for p in places] == [
        (0, (0, 1), "n0"), (1, (2, 3), "n2"), (2, (4, 5), "n3")]


def test_a_data_parallel_reroute_drops_the_replica_a_pipeline_with_a_hole_is_refused():
    new = {"pipelines": [{"stages": [_stage("n0", 0, 5)]}, {"stages": [_stage(None, 0, 5, True)]},
                         {"stages": [_stage("n2", 0, 5)]}]}
    doc = _doc(3, 1, {"needed": True, "policy": "reroute", "new_layout": new})
    assert [(p.dp, p.dp_rank, p.node) for p in (placement_from_plan(doc, r, 2) for r in range(2))] == [
        (2, 0, "n0"), (2, 1, "n2")]
    holed = {"pipelines": [{"stages": [_stage("n0", 0, 2), _stage(None, 3, 5, True)]},
                           {"stages": [_stage("n2", 0, 2), _stage("n3", 3, 5)]}]}
    with pytest.raises(reft.Error, match="reroutes a stage of a pipeline"):
        placement_from_plan(_doc(2, 2, {"needed": True, "policy": "reroute", "new_layout": holed}), 0, 3)


def test_what_no_uniform_layout_or_process_group_fits_is_refused():
    uneven = {"pipelines": [{"stages": [_stage("n0", 0, 2), _stage("n1", 3, 5)]},
                            {"stages": [_stage("n2", 0, 5)]}]}
    with pytest.raises(reft.Error, match="pipelines of different shapes"):
        placement_from_plan(_doc(2, 2, {"needed": True, "policy": "reconfigure", "new_layout": uneven}), 0, 3)
    with pytest.raises(reft.Error, match="persistent tier"):
        placement_from_plan(_doc(2, 1, {"needed": True, "policy": "exit",
                                        "reason": "... restarts from the persistent tier"}), 0, 1)
    with pytest.raises(reft.Error, match="not the 3 this process group"):
        placement_from_plan(_doc(2, 2, {"needed": False, "policy": "none"}), 0, 3)
    with pytest.raises(reft.InvalidArgumentError):
        placement_from_plan(_doc(2, 2, {"needed": False, "policy": "none"}), 4, 4)


def test_ranks_restarted_before_the_loss_is_known_wait_for_the_decision(monkeypatch):
    # torchrun restarts the survivors at world size 2 at once; the daemon still shows dp = 3 with
    # no loss until the lost node's lease runs out, then the decision and its transfer plan.
    reroute = {"pipelines": [{"stages": [_stage("n0", 0, 5)]}, {"stages": [_stage(None, 0, 5, True)]},
                             {"stages": [_stage("n2", 0, 5)]}]}
    decided = _doc(3, 1, {"needed": True, "policy": "reroute", "new_layout": reroute})
    answers = [_doc(3, 1, {"needed": False, "policy": "none"})] * 3 + [decided]
    seen = _answer_with(monkeypatch, answers)
    place = reft.elastic.coordinates("sock", "j", rank=1, world_size=2, wait_s=10, poll_s=0)
    assert len(seen) == 4 and (place.dp, place.dp_rank, place.node) == (2, 1, "n2")
    # Past wait_s a size that fits nothing is refused, naming both sizes.
    answers[:] = [_doc(3, 1, {"needed": False, "policy": "none"})]
    with pytest.raises(reft.Error, match="not the 2 this process group"):
        reft.elastic.coordinates("sock", "j", rank=1, world_size=2, wait_s=0, poll_s=0)


def test_a_reconfiguration_is_returned_once_its_layers_moved(monkeypatch):
    new = {"pipelines": [{"stages": [_stage("n0", 0, 1), _stage("n2", 2, 3), _stage("n3", 4, 5)]}]}
    transfer = {"moves": [{"layer": 2, "from_node": "n1", "to_node": "n2", "bytes": 10}],
                "total_bytes": 10, "max_sender_bytes": 10, "max_receiver_bytes": 10, "executed": False}
    docs = []
    for state in (None, "running", "done"):
        d = _doc(2, 2, {"needed": True, "policy": "reconfigure", "new_layout": new, "transfer": transfer})
        d["publication"]["transfer"] = None if state is None else {"state": state}
        docs.append(d)
    seen = _answer_with(monkeypatch, docs)
    place = reft.elastic.coordinates("sock", "j", rank=2, world_size=3, wait_s=10, poll_s=0)
    assert len(seen) == 3 and place.transfer == "done" and place.node == "n3"
    # At wait_s the rank goes on while the layers still move (its restore fetches them).
    docs[:] = [docs[1]]
    place = reft.elastic.coordinates("sock", "j", rank=2, world_size=3, wait_s=0, poll_s=0)
    assert place.transfer == "running"


def test_by_node_a_rank_takes_the_position_the_decision_put_on_its_node(monkeypatch):
    # A reroute of dp = 3 onto n0 and n2: torchrun may number the rank on n2 as 0.
    reroute = {"pipelines": [{"stages": [_stage("n0", 0, 5)]}, {"stages": [_stage(None, 0, 5, True)]},
                             {"stages": [_stage("n2", 0, 5)]}]}
    doc = _doc(3, 1, {"needed": True, "policy": "reroute", "new_layout": reroute})
    doc["node"] = "n2"
    monkeypatch.setattr(reft._plan, "plan", lambda socket, job, reftctl=None: doc)
    place = reft.elastic.coordinates("sock", "j", world_size=2, by_node=True, local_rank=0, poll_s=0)
    assert (place.rank, place.dp_rank, place.node) == (1, 1, "n2")
    with pytest.raises(reft.Error, match="puts 1 rank\\(s\\) on node 'n2', none for local rank 1"):
        reft.elastic.coordinates("sock", "j", world_size=2, by_node=True, local_rank=1, poll_s=0)
    # Two stages on one node (tp = 1): local ranks take them in rank order.
    two = _doc(1, 2, {"needed": False, "policy": "none"})
    two["ranks"] = [{"pp": p, "tp": 0, "dp": 0, "node": "n0", "state": "alive"} for p in range(2)]
    assert [reft.elastic.placement_on_node(two, "n0", k, 2).pp_rank for k in (0, 1)] == [0, 1]


def test_a_growth_is_taken_by_ranks_restarted_onto_it_and_not_by_a_restart_at_the_running_size(monkeypatch):
    # DP2 on n0, n1 grows onto n2 (back after a loss): torchrun restarts the three ranks with
    # WORLD_SIZE 3; a rank that crashed alone is restarted with WORLD_SIZE 2 and goes on in DP2.
    grown = {"pipelines": [{"stages": [_stage(n, 0, 5)]} for n in ("n0", "n1", "n2")]}
    doc = _doc(2, 1, {"needed": True, "policy": "grow", "joining_nodes": ["n2"], "new_layout": grown,
                      "transfer": {"moves": [], "hosts": [], "total_bytes": 0, "executed": False}})
    doc["publication"]["transfer"] = {"state": "done"}
    doc["node"] = "n2"
    monkeypatch.setattr(reft._plan, "plan", lambda socket, job, reftctl=None: doc)
    place = reft.elastic.coordinates("sock", "j", world_size=3, by_node=True, local_rank=0, poll_s=0)
    assert (place.dp, place.dp_rank, place.node, place.policy, place.transfer) == (3, 2, "n2", "grow", "done")
    doc["node"] = "n1"
    place = reft.elastic.coordinates("sock", "j", world_size=2, by_node=True, local_rank=0, poll_s=0)
    assert (place.dp, place.dp_rank, place.node, place.transfer) == (2, 1, "n1", None)
    # By rank: the same.
    assert reft.elastic.coordinates("sock", "j", rank=1, world_size=2, poll_s=0).dp == 2
    assert reft.elastic.coordinates("sock", "j", rank=1, world_size=3, poll_s=0).dp == 3
    # A size that is neither is refused once the wait is over.
    with pytest.raises(reft.Error, match="not the 4 this process group"):
        reft.elastic.coordinates("sock", "j", rank=1, world_size=4, wait_s=0, poll_s=0)
