"""Oobleck's churn experiment (A10) with real daemons: N reftd on loopback over etcd run a DP x PP job
(tests/system/reshape_trainer.py, one rank per node); nodes fail at random (SIGKILL, memory wiped)
and come back (restarted, memory empty) while the cluster shrinks from N towards --floor. After each
event the job's coordinator decides (docs/planner.md "The online path"), every node of the new
layout stages what it lacks, and this script plays the launcher: it starts every rank of the
published layout on the node the decision put it on (reft.elastic), each restores with
reshape=True, checks every byte and commits a step more. Production defaults throughout (the
planner's default policy costs, automatic mode, no spare wait); the attached profile says only
what a job would: per-layer times and sizes, its global batch and the device memory.

Per event: live nodes N', the policy, the layout, idle live nodes (live but in no position),
the layout's estimated step against the best plan on the same positions when pipelines may
differ (Odyssey's unrestricted search; `unrestricted_step_ms`), bytes staged by the transfer plan
and read from peers by the restores, and whether every restored byte was right. Targets (A10):
no idle node while N' >= (f+1)·n0, no exit while every layer has a live copy, the plan within
10 % of the best plan's throughput for N', bytes copied reported.

    PYTHONPATH=build/client/python REFT_BUILD_DIR=build /usr/bin/python3 \\
        tools/bench/planner/churn_bench.py --nodes 30 --floor 15 --events 20 --pp 2
"""
import argparse
import json
import os
import random
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "localcluster"))
sys.path.insert(0, os.path.join(ROOT, "tests", "system"))

import reft  # noqa: E402
import reft.elastic  # noqa: E402
import reshape_trainer as rt  # noqa: E402
from reft_cluster import LocalCluster  # noqa: E402
from test_reshape import CONFIG, Trainer, grid, lose, run  # noqa: E402

JOB = "a10"
RESTARTS = ("restart_on_spare", "reroute", "reconfigure", "restart", "grow")


def show(node):
    return node.ctl("plan", "show", "--job", JOB, json_output=True)


def layout_nodes(doc):
    return {r["node"] for r in doc["ranks"] if r["node"]}


def wait_decision(watcher, accept, timeout=300):
    """`plan show` on `watcher` until `accept(doc)`; the document."""
    deadline = time.time() + timeout
    while True:
        doc = show(watcher)
        if accept(doc):
            return doc
        assert time.time() < deadline, json.dumps(doc.get("publication"))
        time.sleep(0.1)


def published_final(doc, basis_has):
    pub = doc["publication"]
    if not (pub and pub["current"] and pub["state"] == "decided" and basis_has(pub["basis"])):
        return False
    transfer = pub.get("transfer")
    return "transfer" not in doc["decision"] or (transfer and transfer["state"] in ("done", "failed"))


def relaunch(doc, by_id):
    """Every rank of the published layout on its node: restore(reshape=True), check, a step more."""
    world = reft.elastic.world_size(doc)
    places = [reft.elastic.placement_from_plan(doc, r, world) for r in range(world)]
    trainers = [Trainer(by_id[p.node], JOB, p.pp_rank, p.dp_rank, p.pp, p.dp, "arc1",
                        "--layers", f"{p.layers[0]}:{p.layers[1]}", "--restore", "--reshape", "--then", "1")
                for p in places]
    steps, bad, from_peers = set(), 0, 0
    for t in trainers:
        lines = t.result(timeout=600)
        first = lines[0]
        assert "error" not in first, first
        steps.add(first["step"])
        bad += len(first["bad"])
        m = re.search(r"(\d+) bytes from peers", first["report"]["detail"])
        from_peers += int(m.group(1)) if m else 0
        assert lines[1:] == [{"committed": first["step"] + 1}], lines
    return steps, bad, from_peers, places[0]


def attach(node, profile):
    node.ctl("plan", "attach", "--job", JOB, "-i", profile)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=30)
    ap.add_argument("--floor", type=int, default=15, help="fail nodes while more than this many are live")
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--pp", type=int, default=2, help="pipeline stages of the initial layout")
    ap.add_argument("--rejoin", type=float, default=0.3, help="probability that an event is a node coming back")
    ap.add_argument("--memory-fraction", type=float, default=0.75,
                    help="device memory as a fraction of the model's state (below 1/k no node holds the "
                         "model, so pipelines keep >= k stages); 0: unchecked")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="JSON lines of every event")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    dp = args.nodes // args.pp
    config = CONFIG + '\n[planner]\nmode = "automatic"\nspare_wait_ms = 0\n'
    out = open(args.out, "w") if args.out else None
    with LocalCluster(nodes=args.nodes, config=config) as cluster:
        nodes = cluster.nodes
        by_id = {n.node_id: n for n in nodes}
        for rank, lines in run(grid(nodes, args.pp, dp), JOB, args.pp, dp, "arc1", "--train", "2").items():
            assert lines == [{"committed": 1}], (rank, lines)
        # The profile a job would attach: per-layer times and state, the device memory.
        layer_state = [4 * w + b + o for w, b, o in zip(rt.WEIGHT, rt.BIAS, rt.OPTIM)]
        profile = os.path.join(cluster.root, "profile.json")
        model = {"layers": [{"forward_ms": 10.0, "param_bytes": s // 4} for s in layer_state]}
        # A training job keeps its global batch whatever its layout: 4 micro-batches per position
        # of the initial layout.
        doc = {"model": model, "job": {"global_batch": 4 * args.nodes, "micro_batch": 1}}
        if args.memory_fraction > 0:
            doc["cluster"] = {"device_memory": int(args.memory_fraction * sum(layer_state)), "memory_margin": 0}
        with open(profile, "w") as f:
            json.dump(doc, f)
        for n in nodes:
            attach(n, profile)

        live, dead = list(nodes), []
        current = show(nodes[0])
        print(f"A10 churn: {args.nodes} reftd, DP{dp} x PP{args.pp}, {len(rt.WEIGHT)} layers, device memory "
              f"{args.memory_fraction:g} x the model, seed {args.seed}", flush=True)
        print(f"{'#':>2} {'event':>14} {'live':>4} {'policy':>16} {'layout':>9} {'idle':>4} {'step ms':>8} "
              f"{'best ms':>8} {'thr/best':>8} {'staged KiB':>10} {'peers KiB':>9} {'decided s':>9} {'ok':>3}",
              flush=True)
        for e in range(args.events):
            fail = len(live) > args.floor and (not dead or rng.random() >= args.rejoin)
            t0 = time.time()
            if fail:
                node = rng.choice(live)
                live.remove(node)
                dead.append(node)
                in_layout = node.node_id in layout_nodes(current)
                lose(node)
                watcher = live[0]
                if in_layout:
                    doc = wait_decision(watcher, lambda d: published_final(d, lambda b: node.node_id in b.split(",")))
                else:  # an idle node: nothing of the job was there
                    watcher.wait_member_state(node.node_id, "dead", timeout=60)
                    doc = show(watcher)
            else:
                node = rng.choice(dead)
                dead.remove(node)
                node.start()
                attach(node, profile)
                live.append(node)
                watcher = live[0]
                watcher.wait_member_state(node.node_id, "alive", timeout=60)
                doc = show(watcher)  # this node's view: the coordinator decides the same
                if doc["decision"]["policy"] == "grow":
                    doc = wait_decision(watcher, lambda d: published_final(d, lambda b: node.node_id in b[1:].split(",")))
            decided_s = time.time() - t0
            decision = doc["decision"]
            policy = decision["policy"]
            row = {"event": e, "kind": "fail" if fail else "back", "node": node.node_id, "live": len(live),
                   "policy": policy, "decided_s": decided_s}
            if policy in RESTARTS:
                pub = doc["publication"]
                transfer = pub.get("transfer") or {}
                steps, bad, from_peers, place = relaunch(doc, by_id)
                current = show(watcher)
                positions = place.dp * place.pp
                nl = decision["new_layout"]
                row.update(layout=f"{place.dp}x{place.pp}", positions=positions, idle=len(live) - positions,
                           step_ms=nl["step_ms"], best_ms=nl.get("unrestricted_step_ms"),
                           staged=transfer.get("bytes_staged", 0), from_peers=from_peers,
                           restored=sorted(steps), bad=bad, ok=bad == 0 and len(steps) == 1)
            else:
                lay = current["layout"]
                positions = lay["dp"] * lay["pp"]
                row.update(layout=f"{lay['dp']}x{lay['pp']}", positions=positions, idle=len(live) - positions,
                           reason=decision.get("reason"), ok=policy != "exit")
            if policy == "none" and not fail:
                print(f"   {decision.get('reason')}", flush=True)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
            best = row.get("best_ms")
            thr = f"{best / row['step_ms']:.3f}" if best and row.get("step_ms") else "-"
            print(f"{e:>2} {row['kind'] + ' ' + node.node_id:>14} {len(live):>4} {policy:>16} {row['layout']:>9} "
                  f"{row['idle']:>4} {row.get('step_ms', 0):>8.1f} {best or 0:>8.1f} {thr:>8} "
                  f"{row.get('staged', 0) / 1024:>10.0f} {row.get('from_peers', 0) / 1024:>9.0f} {decided_s:>9.1f} "
                  f"{'yes' if row['ok'] else 'NO':>3}", flush=True)
            if policy not in RESTARTS and policy != "none":
                print(f"   {policy}: {decision.get('reason')}", flush=True)
                if policy == "exit":
                    break


if __name__ == "__main__":
    main()
