"""`reftctl plan ...` and `reftctl reliability` end to end: the real binary on the worked examples,
every figure checked against a value computed here (from the paper, from the layout, or by an
independent computation), not only for presence."""
import itertools
import json
import math
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples", "planner")
PROTECT_JOB = os.path.join(ROOT, "tests", "protect", "data", "job.json")
REFTCTL = os.environ.get("REFTCTL") or os.path.join(os.environ.get("REFT_BUILD_DIR", "build"), "tools", "reftctl", "reftctl")
MiB = 1 << 20


def run(*args, expect=0):
    p = subprocess.run([REFTCTL, "-o", "json", *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == expect, p.stderr
    return json.loads(p.stdout) if expect == 0 else p.stderr


def example(name):
    return os.path.join(EXAMPLES, name)


def ring_ms(nbytes, p, gbps=100.0, latency_us=5.0):
    """Ring all-reduce, written out: 2(p−1)·α + 2(p−1)/p · n/β."""
    if p < 2:
        return 0.0
    beta = gbps * 1.25e5  # bytes per ms
    return 2 * (p - 1) * latency_us / 1000 + 2 * (p - 1) / p * nbytes / beta


def test_templates_cover_the_model_and_add_up():
    out = run("plan", "templates", "-i", example("templates.toml"))
    assert (out["n0"], out["n_max"], out["f"], out["layers"]) == (2, 6, 1, 24)  # n_max = 8 − f·n0
    assert [t["nodes"] for t in out["templates"]] == [2, 3, 4, 5, 6]
    for t in out["templates"]:
        nxt, gpus = 0, {}
        for s in t["stages"]:
            assert s["layers"][0] == nxt
            nxt = s["layers"][1]
            gpus[s["node"]] = gpus.get(s["node"], 0) + s["gpus"]
            assert s["first_gpu"] + s["gpus"] <= 2
        assert nxt == 24
        assert gpus == {n: 2 for n in range(t["nodes"])}  # every GPU of every node, once
        costs = [s["forward_ms"] + s["backward_ms"] for s in t["stages"]]
        S, slow = len(costs), max(costs)
        kstar = max(i for i, c in enumerate(costs) if c >= slow * (1 - 1e-9))  # the latest tie
        t3 = sum(costs[kstar:])
        assert t["kstar"] == kstar
        assert t["t1_ms"] == pytest.approx(sum(costs), rel=1e-12)
        assert t["t2_ms"] == pytest.approx((3 * S + kstar - 1) * slow, rel=1e-12)
        assert t["iteration_ms"] == pytest.approx(sum(costs) + (3 * S + kstar - 1) * slow + t3, rel=1e-12)
        assert t["iteration_ms"] <= t["simulated_iteration_ms"] * (1 + 1e-9)
    assert "planning_seconds" not in out


def test_output_is_deterministic():
    a = subprocess.run([REFTCTL, "-o", "json", "plan", "templates", "-i", example("templates.toml")], capture_output=True)
    b = subprocess.run([REFTCTL, "-o", "json", "plan", "templates", "-i", example("templates.toml")], capture_output=True)
    assert a.returncode == 0 and a.stdout == b.stdout


def test_instantiate_ranks_every_option():
    out = run("plan", "instantiate", "-i", example("instantiate.json"))
    # 9 nodes, templates 2..5 (9 − f·n0 with f = 2), at least f+1 = 3 pipelines.
    parts = [c for n in range(3, 5) for c in itertools.combinations_with_replacement(range(2, 6), n) if sum(c) == 9]
    assert out["num_options"] == len(parts) == 4
    assert out["complete"] is True
    assert sorted(tuple(sorted(o["pipeline_nodes"])) for o in out["options"]) == sorted(parts)
    tps = [o["throughput_samples_per_s"] for o in out["options"]]
    assert tps == sorted(tps, reverse=True)
    assert out["best"] == out["options"][0]
    templates = {t["nodes"]: t for t in run("plan", "templates", "-i", example("instantiate.json"))["templates"]}
    for o in out["options"]:
        assert sum(o["micro_batches"]) == 256 // 4
        assert o["step_ms"] == pytest.approx(o["compute_ms"] + o["allreduce_ms"])
        assert o["throughput_samples_per_s"] == pytest.approx(256 / o["step_ms"] * 1000)
        # The compute step is the slowest pipeline's T1 + (N − S + k* − 1)·slow + T3.
        longest = 0
        for n, mb in zip(o["pipeline_nodes"], o["micro_batches"]):
            t = templates[n]
            S = t["num_stages"]
            slow = t["t2_ms"] / (3 * S + t["kstar"] - 1)
            longest = max(longest, t["t1_ms"] + (mb - S + t["kstar"] - 1) * slow + t["t3_ms"])
        assert o["compute_ms"] == pytest.approx(longest)
        if len(set(o["pipeline_nodes"])) == 1:
            # Symmetric: as many all-reduce rounds as layers on one stage, each a ring of 32 MiB.
            t = templates[o["pipeline_nodes"][0]]
            per_stage = max(s["layers"][1] - s["layers"][0] for s in t["stages"])
            assert o["allreduce_rounds"] == per_stage
            assert o["allreduce_ms"] == pytest.approx(per_stage * ring_ms(32 * MiB, len(o["pipeline_nodes"])))


def test_odyssey_failover_picks_the_best_score():
    inp = json.load(open(example("failover_odyssey.json")))
    out = run("plan", "failover", "-i", example("failover_odyssey.json"))
    assert [c["policy"] for c in out["candidates"]] == ["reroute", "reconfigure", "restart"]
    live = 2 * 4 - 1
    d = inp["policy"]["mtbf_hours_per_node"] * 3.6e6 / live
    assert out["expected_interval_ms"] == pytest.approx(d)
    best, best_score = None, -1
    for c in out["candidates"]:
        if not c["feasible"]:
            continue
        score = inp["plan"]["global_batch"] / c["step_ms"] * max(0.0, d - c["transition_ms"]) / d
        assert c["score"] == pytest.approx(score)
        if score > best_score:
            best, best_score = c["policy"], score
    assert out["choice"] == best
    restart = out["candidates"][2]
    assert restart["transition_ms"] == pytest.approx(inp["policy"]["restart_ms"] + inp["policy"]["snapshot_load_ms"])
    # The new plan uses the 7 live nodes, holds every layer in each pipeline, runs the batch.
    plan = out["new_plan"]
    assert sum(len(p) for p in plan["pipelines"]) == live
    assert all(sum(p) == 32 for p in plan["pipelines"])
    assert sum(plan["micro_batches"]) == inp["plan"]["micro_batches"]
    assert plan["step_ms"] == pytest.approx(plan["compute_ms"] + plan["allreduce_ms"])
    # Copies come from live nodes only; the reconfiguration pays restart + the busiest link.
    failed = inp["failure"]["failed_nodes"][0]
    tr = out["transfer"]
    assert all(m["from_node"] != failed and m["to_node"] != failed for m in tr["moves"])
    link = max(tr["max_sender_bytes"], tr["max_receiver_bytes"])
    bw = inp["policy"]["transfer_bytes_per_s"] / 1000
    assert out["candidates"][1]["transition_ms"] == pytest.approx(inp["policy"]["restart_ms"] + link / bw)
    assert tr["total_bytes"] == sum(m["bytes"] for m in tr["moves"])


def test_oobleck_failover_keeps_every_live_node():
    out = run("plan", "failover", "-i", example("failover_oobleck.json"))
    assert out["exit_required"] is False
    nodes = sorted(n for p in out["pipelines"] for n in p)
    assert nodes == [n for n in range(14) if n != 7]  # 13 nodes − node 7 + joined node 13
    assert all(2 <= len(p) <= 9 for p in out["pipelines"])  # template sizes 2..13 − f·n0
    assert len(out["pipelines"]) >= 3  # f + 1
    assert all(m["from_node"] != 7 for m in out["copies"]["moves"])
    assert sum(out["micro_batches"]) == 64 // 2
    assert out["step_ms"] == pytest.approx(out["compute_ms"] + out["allreduce_ms"])


def test_transfer_reproduces_the_papers_example():
    inp = json.load(open(example("transfer.json")))
    out = run("plan", "transfer", "-i", example("transfer.json"))
    assert out["total_layers"] == 3 and out["positional_total_layers"] == 10
    assert out["total_bytes"] == 3 * 256 * MiB
    names = inp["node_names"]
    pos = {a["node"]: a["position"] for a in out["assignment"]}
    assert sorted(pos.values()) == list(range(8))
    for m in out["moves"]:
        assert m["layer"] in inp["held"][names.index(m["from"])]
        assert m["layer"] in inp["roles"][pos[m["to"]]]
        assert m["layer"] not in inp["held"][names.index(m["to"])]


def weibull_days_to(survival, threshold=0.9):
    lo, hi = 0.0, 1000.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if survival(mid) > threshold else (lo, mid)
    return lo


def reft_survival(t, c, k=3072, g=6, lam=1e-4):
    ps = math.exp(-lam * t ** c)
    return (ps ** g + g * (1 - ps) * ps ** (g - 1)) ** (k / g)


@pytest.mark.parametrize("shape", [1.0, 1.3, 1.5, 2.0])
def test_reliability_against_an_independent_computation(shape):
    out = run("reliability", "--shape", str(shape))
    assert out["reft_days"] == pytest.approx(weibull_days_to(lambda t: reft_survival(t, shape)), rel=1e-4)
    ck = weibull_days_to(lambda t: math.exp(-(1e-4 + 1e-5) * t ** shape * 3072))
    assert out["checkpoint_days"] == pytest.approx(ck, rel=1e-4)
    if shape == 1.3:
        assert out["reft_days"] == pytest.approx(16.22, rel=0.01)  # the paper's figure
        assert 0.40 <= out["checkpoint_days"] <= 0.50


def test_reliability_monte_carlo_agrees():
    out = run("reliability", "-i", example("reliability.toml"), "--trials", "20000")
    for p in out["monte_carlo"]["points"]:
        assert p["closed_form"] == pytest.approx(reft_survival(p["days"], 1.3), abs=1e-9)
        assert abs(p["monte_carlo"] - p["closed_form"]) < 0.01


def test_bad_input_names_the_field(tmp_path):
    err = run("plan", "templates", "-i", str(tmp_path / "missing.toml"), expect=2)
    assert "cannot open" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": {"num_layers": 4, "layer": {"forward_ms": -1}}, "cluster": {"nodes": 2}}))
    err = run("plan", "templates", "-i", str(bad), expect=2)
    assert "model.layer.forward_ms" in err
    bad.write_text(json.dumps({"model": {"num_layers": 4, "layer": {"forward_ms": 1}},
                               "cluster": {"nodes": 4, "network_gbps": -3}, "job": {"n0": 1}}))
    err = run("plan", "templates", "-i", str(bad), expect=2)
    assert "cluster.network_gbps" in err


# `reftctl plan protection` (the protection planner): volumes checked against the layout.
def protection_expectations(scheme):
    m, W = 4, 96 * MiB                      # dp = 4 members per sharding group; params replicated
    unique = 48 * MiB + 5056                # optim + rng, own copy and the ring predecessor's copy
    shard = W // m
    redundancy = {"arc1": shard, "arc1+aec": shard + math.ceil(shard / (m - 1)), "rs2": 2 * math.ceil(shard / (m - 2))}[scheme]
    return shard + redundancy + 2 * unique, redundancy + unique


def test_protection_plan_volumes():
    out = run("plan", "protection", "-i", PROTECT_JOB, "--no-ranks")
    assert out["scheme"] == "arc1+aec"
    assert out["node_failures"] == 1
    total, redundancy = protection_expectations("arc1+aec")
    assert len(out["groups"]) == 2  # tp = 2, pp = 1
    for g in out["groups"]:
        assert (g["members"], g["replicated_bytes"]) == (4, 96 * MiB)
        assert g["max_rank_bytes"] == total
        assert g["max_rank_redundancy_bytes"] == redundancy
        assert g["formula"]["arc_bytes_per_rank"] == 2 * 96 * MiB / 4
        assert g["formula"]["aec_bytes_per_rank"] == 96 * MiB / 4 + 96 * MiB / 12
        assert len(g["first_fatal"]) == 2


def test_protection_plan_compare():
    out = run("plan", "protection", "-i", PROTECT_JOB, "--no-ranks", "--scheme", "arc1,rs2")
    plans = {p["scheme"]: p for p in out["plans"]}
    assert set(plans) == {"arc1", "rs2"}
    for scheme, p in plans.items():
        total, redundancy = protection_expectations(scheme)
        for g in p["groups"]:
            assert g["max_rank_bytes"] == total
            assert g["max_rank_redundancy_bytes"] == redundancy
        # RS(2) survives two lost shards of the replicated state, ARC(1) one; the unique buffers
        # have a single ring copy, so both tolerate one node failure overall.
        assert [g["replicated_node_failures"] for g in p["groups"]] == [1 if scheme == "arc1" else 2] * 2
        assert p["node_failures"] == 1
    assert plans["rs2"]["groups"][0]["formula"]["rs_bytes_per_rank"] == 96 * MiB / 4 + 2 * 96 * MiB / 8
