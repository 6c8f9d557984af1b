"""Odyssey's transfer experiment (A13) executed by the agents: 8 reftd on loopback run a DP4 x PP2
job of L equal layers (reshape_trainer.py --uniform L:MIB); one node is lost with no spare; the
job's coordinator decides a reconfiguration onto the 7 survivors and every node of the new
layout stages what it lacks of its layers — the layers the Kuhn-Munkres plan moves to it, and
the other members' shards of the layers it keeps (docs/planner.md "Executing the transfer
plan") — each node's link throttled to --link. The same run with the baseline assignment
(survivor i keeps position i, attached as `policy.assignment = "positional"`) gives the
comparison.

Per run: the plan's moved bytes, the bytes actually staged, the busiest node's staged bytes, the
transfer time (first stage call to the last one done, from the published progress) against the
link limit (busiest node's bytes / link bandwidth: every node pulls through its own throttled
link, in parallel), and the time from the loss to the state being in place (detection by the
lease, the decision, the transfer). Reduction = 1 - Kuhn-Munkres / positional.

    REFT_BUILD_DIR=build /usr/bin/python3 tools/bench/planner/transfer_exec_bench.py \\
        --layers 4,8,16 --mib 16 --link 25M
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "localcluster"))
sys.path.insert(0, os.path.join(ROOT, "tests", "system"))

from reft_cluster import LocalCluster  # noqa: E402
import reshape_trainer as rt  # noqa: E402
from test_reshape import CONFIG, grid, lose, run  # noqa: E402

JOB = "a13"
DP, PP = 4, 2


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def ratio(a, b):
    return f"{a / b:.2f}" if b > 0 else "-"  # nothing to move: no limit to compare with


def publication(node):
    doc = node.ctl("plan", "show", "--job", JOB, json_output=True)
    return doc, doc["publication"]


def one_run(layers, mib, link, assignment, lost_index, memory_fraction):
    config = (CONFIG + '\n[planner]\nmode = "automatic"\nspare_wait_ms = 0\n'
              + f'\n[peer]\nlink_bandwidth = "{link}"\n')
    with LocalCluster(nodes=DP * PP, config=config) as cluster:
        nodes = cluster.nodes
        for rank, lines in run(grid(nodes, PP, DP), JOB, PP, DP, "arc1", "--train", "2",
                               "--uniform", f"{layers}:{mib}").items():
            assert lines == [{"committed": 1}], (rank, lines)
        profile = os.path.join(cluster.root, "profile.json")
        with open(profile, "w") as f:
            doc = {"policy": {"assignment": assignment}}
            if memory_fraction > 0:  # a node holds only part of the model: pipelines stay
                # What the planner counts per layer: parameters and as much again of gradients
                # (the replicated weights and bias), and the optimizer state.
                rt.use_uniform_model(layers, mib)
                per_layer = 2 * (4 * rt.WEIGHT[0] + rt.BIAS[0]) + rt.OPTIM[0]
                doc["cluster"] = {"device_memory": int(memory_fraction * layers * per_layer),
                                  "memory_margin": 0}
            json.dump(doc, f)
        for n in nodes:  # whichever node coordinates the job decides with it
            n.ctl("plan", "attach", "--job", JOB, "-i", profile)
        lost = nodes[lost_index]
        t_loss = time.time()
        lose(lost)
        watcher = next(n for n in nodes if n is not lost)
        deadline = time.time() + 600
        while True:
            doc, pub = publication(watcher)
            t = pub and pub["current"] and pub["transfer"]
            if pub and pub["current"] and pub["state"] == "decided" and doc["decision"]["policy"] != "reconfigure":
                return {"policy": doc["decision"]["policy"]}
            if t and t["state"] in ("done", "failed"):
                break
            assert time.time() < deadline, pub
            time.sleep(0.2)
        assert t["state"] == "done", t
        moves = t["moves"]
        # What each node of the new layout pulled: the moved layers, and the other members'
        # shards of the layers it kept.
        busiest = max((h.get("bytes_staged", 0) for h in t["hosts"]), default=0)
        transfer_s = (t["finished_at_ms"] - t["started_at_ms"]) / 1000
        limit_s = busiest / parse_bytes(link)
        shape = [len(p["stages"]) for p in doc["decision"]["new_layout"]["pipelines"]]
        return {"policy": "reconfigure", "shape": shape, "moves": len(moves),
                "moved": sum(m["bytes"] for m in moves), "bytes": t["bytes_staged"],
                "fetched": t["bytes_fetched"], "busiest": busiest, "transfer_s": transfer_s,
                "limit_s": limit_s, "to_layers_in_place_s": t["finished_at_ms"] / 1000 - t_loss,
                "decided_after_s": pub["decided_at_ms"] / 1000 - t_loss}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", default="4,8,16")
    ap.add_argument("--mib", type=int, default=16, help="MiB per layer")
    ap.add_argument("--link", default="200M", help="each node's link (bytes/s, K/M/G suffix)")
    ap.add_argument("--lost", type=int, default=1, help="index of the node lost (grid: pp * 4 + dp)")
    ap.add_argument("--memory-fraction", type=float, default=0.7,
                    help="device memory as a fraction of the model's state as the planner counts it "
                         "(parameters, gradients, optimizer state; attached with the profile; "
                         "below 1 no node can hold the whole model, so the new plan keeps pipelines, "
                         "as in Odyssey's setting); 0: unchecked")
    args = ap.parse_args()
    print(f"A13 executed: DP{DP} x PP{PP} on {DP * PP} reftd, {args.mib} MiB per layer, links {args.link}/s, "
          f"node{args.lost} lost, device memory {args.memory_fraction:g} x the model's state", flush=True)
    print(f"{'L':>3} {'assignment':>13} {'moves':>5} {'MiB moved':>9} {'MiB staged':>10} {'busiest MiB':>11} {'transfer s':>10} "
          f"{'limit s':>8} {'xfer/limit':>10} {'loss->in place s':>16}  new plan (stages per pipeline)", flush=True)
    for layers in (int(x) for x in args.layers.split(",")):
        results = {}
        for assignment in ("kuhn_munkres", "positional"):
            r = one_run(layers, args.mib, args.link, assignment, args.lost, args.memory_fraction)
            results[assignment] = r
            if r["policy"] != "reconfigure":
                print(f"{layers:>3} {assignment:>13} decision {r['policy']}: no transfer", flush=True)
                continue
            print(f"{layers:>3} {assignment:>13} {r['moves']:>5} {r['moved'] / 2**20:>9.1f} {r['bytes'] / 2**20:>10.1f} "
                  f"{r['busiest'] / 2**20:>11.1f} {r['transfer_s']:>10.2f} {r['limit_s']:>8.2f} "
                  f"{ratio(r['transfer_s'], r['limit_s']):>10} {r['to_layers_in_place_s']:>16.2f}  {r['shape']}",
                  flush=True)
        km, pos = results["kuhn_munkres"], results["positional"]
        if km["policy"] == pos["policy"] == "reconfigure" and pos["bytes"] > 0:
            print(f"    L={layers}: bytes staged -{1 - km['bytes'] / pos['bytes']:.1%}, transfer time "
                  f"-{1 - km['transfer_s'] / pos['transfer_s']:.1%}, loss to layers in place "
                  f"-{1 - km['to_layers_in_place_s'] / pos['to_layers_in_place_s']:.1%} (Kuhn-Munkres vs positional)",
                  flush=True)


if __name__ == "__main__":
    main()
