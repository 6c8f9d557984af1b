"""Failure detection: how long after a node's death the cluster declares it, against the
harness's own kill time (docs/coordination.md "Suspicions").

Each run starts `--nodes` reftd on one real etcd (production lease TTL unless `--ttl`), a job of
one rank per node (the sample trainer, dp = nodes, arc1) that commits a step every ~150 ms, and
then kills one node in one of four ways:

- `killed_reported`: the node's reftd and trainer SIGKILLed; a trainer on another node reports
  it at once (`reft.elastic.report_failure`, as a launcher does when its worker group's
  collective fails; the time a real collective takes to fail is not in this figure);
- `killed_coordinator`: the job's coordinator killed the same way, nobody reports: the peer calls
  that fail to reach it (completion reports) are the suspicion;
- `killed_member`: another node killed, nobody reports: found by whichever peer call reaches it
  first, or else when its lease lapses (`found_by` says which);
- `silent`: the node's reftd and trainer SIGSTOPped (alive to the kernel, silent): found when
  its lease lapses, never earlier.

"Declared" is the moment the node's registration leaves etcd (every node's departure watch fires
then), polled every 5 ms. After each run every other node must still be registered and have
heard exactly one departure: a false death fails the run. Prints one JSON line per run and one
summary line (min / median / max per kind; target: killed ≤ 2 s, silent ≤ the lease TTL + 1 s).
"""
import argparse
import json
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "system"))
import reft  # noqa: E402
import reft.elastic  # noqa: E402
from reft_cluster import LocalCluster  # noqa: E402
from trainer import SampleTrainer  # noqa: E402

KINDS = ("killed_reported", "killed_coordinator", "killed_member", "silent")
JOB = "detect"
DEFAULT_TTL_S = 5  # reftd's etcd.lease_ttl_s (the floor; a large cluster lengthens it)


def declared_count(node):
    return node.metrics().get("reft_node_deaths_declared_total", 0)


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.005)


def one_run(kind, nodes, ttl):
    config = "[store]\nchunk_size = \"16K\"\n"
    if ttl:
        config += f"[etcd]\nlease_ttl_s = {ttl}\n"
    with LocalCluster(nodes=nodes, config=config, metrics=True) as cluster:
        trainers = []
        for d, node in enumerate(cluster.nodes):
            trainers.append(SampleTrainer(
                cluster, node, JOB, steps=1_000_000, size=65536, buffers=2, sleep_us=150_000,
                extra=["--dp", str(d), "--dp-size", str(nodes), "--protection", "arc1",
                       "--step-commit-timeout-ms", "200"]))
        try:
            wait(lambda: (cluster.committed_step(JOB) or -1) >= 2, 60, "the job did not commit")
            lead = cluster.coordinator_of(JOB)
            if kind == "killed_coordinator":
                victim = lead
            else:
                victim = next(n for n in cluster.nodes if n is not lead)
            witness = next(n for n in cluster.nodes if n is not victim)
            rank = cluster.nodes.index(victim)
            sig = signal.SIGSTOP if kind == "silent" else signal.SIGKILL
            t_kill = time.monotonic()
            trainers[rank].proc.send_signal(sig)
            victim.kill(sig)
            if kind == "killed_reported":
                reft.elastic.report_failure(witness.socket, JOB, "allreduce: connection reset",
                                            peer_rank=rank)
            wait(lambda: not cluster.registered(victim), 120, "never declared")
            declared_s = time.monotonic() - t_kill
            live = [n for n in cluster.nodes if n is not victim]
            wait(lambda: all(declared_count(n) >= 1 for n in live), 30, "departure not heard")
            false_deaths = sum(declared_count(n) - 1 for n in live) + sum(
                0 if cluster.registered(n) else 1 for n in live)
            # What found it: the suspicion a live node confirmed, if one did (its log line).
            found_by = "lease lapse"
            for n in live:
                for line in n.log().splitlines():
                    marker = f"node {victim.node_id}: suspected ("
                    if marker in line and "refused twice" in line:
                        found_by = " ".join(line.split(marker, 1)[1].split()[:2])
            if kind == "silent":
                victim.resume()
                trainers[rank].proc.send_signal(signal.SIGCONT)
            return {"bench": "detection", "kind": kind, "nodes": nodes,
                    "lease_ttl_s": ttl or DEFAULT_TTL_S,
                    "declared_s": round(declared_s, 3), "found_by": found_by,
                    "false_deaths": int(false_deaths)}
        finally:
            for t in trainers:
                t.proc.kill()
                t.proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ttl", type=int, default=0, help="lease TTL in s (0: reftd's default)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    results = {}
    for kind in args.kinds.split(","):
        for _ in range(args.runs):
            r = one_run(kind, args.nodes, args.ttl)
            print(json.dumps(r), flush=True)
            results.setdefault(kind, []).append(r)
    summary = {"bench": "detection_summary", "nodes": args.nodes}
    for kind, rs in results.items():
        xs = [r["declared_s"] for r in rs]
        summary[kind] = {"min_s": min(xs), "median_s": statistics.median(xs), "max_s": max(xs),
                         "runs": len(xs), "false_deaths": sum(r["false_deaths"] for r in rs),
                         "lease_ttl_s": rs[0]["lease_ttl_s"]}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
