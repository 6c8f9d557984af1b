"""REFT-load of a lost node vs loading the same state from the persistent tier (BENCHMARKS.md "Cluster").

M reftd on loopback form one sharding group (a DP-M job, one rank per node). Each node's link
to the others is throttled to B_net (peer.link_bandwidth: everything a node receives from all
peers together) and its link to the persistent tier to B_tier (persist.read_bandwidth), with the
paper's ratio B_net : B_tier = 100 Gbps : 10 Gbps scaled down so M concurrent streams fit this
machine. The job snapshots, its committed step is persisted, then:

- memory: one node is lost (reftd SIGKILLed, memory wiped); a fresh reftd takes over its rank;
  every rank restarts and restores the committed step from memory (REFT-load: own shard local,
  the others streamed from peers, the lost shard rebuilt from ARC copies or AEC parity).
- tier: every node is lost; fresh reftd everywhere; every rank restores the same step from the
  persistent tier.

The figure is the ratio of the two times from "restart" (trainers launched) to "every rank has
its state loaded and checksum-verified" (every trainer printed `restored <step> ok`), measured
in the same run. Analytic expectation: a rank reads W from the tier at B_tier, but only
(M-1)/M of W from peers at B_net, so the ratio is about (B_net/B_tier) * M/(M-1).
Prints one JSON line per scheme.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "system"))
from reft_cluster import LocalCluster  # noqa: E402
from trainer import SampleTrainer  # noqa: E402


def config(net, tier):
    return f"""
[peer]
probe_interval_ms = 200
probe_timeout_ms = 150
suspicion_timeout_ms = 1000
link_bandwidth = {net}

[persist]
read_bandwidth = {tier}

[restore]
piece_timeout_ms = 60000
timeout_ms = 600000
"""


def launch(cluster, nodes, job, m, size, protection, restore_only, steps=2):
    out = []
    for d, node in enumerate(nodes):
        extra = ["--dp", str(d), "--dp-size", str(m), "--protection", protection,
                 "--reply-timeout-ms", "900000"]
        if restore_only:
            extra.append("--restore-only")
        out.append(SampleTrainer(cluster, node, job, steps=steps, size=size, buffers=2,
                                 extra=extra, unique_size=4096))
    return out


def timed_restore(cluster, nodes, job, m, size, protection, expect_step):
    start = time.monotonic()
    trainers = launch(cluster, nodes, job, m, size, protection, restore_only=True)
    for t in trainers:
        ev = t.wait_for("restored", timeout=900)
        if ev[1:] != [str(expect_step), "ok"]:
            raise RuntimeError(f"restore failed: {ev} {t.lines[-3:]}")
    elapsed = time.monotonic() - start
    for t in trainers:
        t.finish()
    return elapsed



def run(protection, m, size, net, tier):
    job = "a3"
    with LocalCluster(nodes=m, config=config(net, tier)) as cluster:
        nodes = list(cluster.nodes)
        for t in launch(cluster, nodes, job, m, size, protection, restore_only=False):
            if t.finish(timeout=600) != 0:
                raise RuntimeError(f"training failed: {t.lines[-3:]}")
        step = 1
        r = nodes[0].ctl("-o", "json", "persist", "--job", job, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"persist failed: {r.stdout} {r.stderr}")

        # Memory: one node lost and replaced.
        nodes[1].kill()
        nodes[1].wipe_memory()
        spare = cluster.add_node("spare1")
        nodes[0].wait_member_state("node1", "dead")
        nodes[1] = spare
        t_memory = timed_restore(cluster, nodes, job, m, size, protection, step)

        # Tier: every node lost and replaced.
        for n in nodes:
            n.kill()
            n.wipe_memory()
        fresh = [cluster.add_node(f"fresh{i}") for i in range(m)]
        t_tier = timed_restore(cluster, fresh, job, m, size, protection, step)

    replicated = size  # buffer 0 is replicated (the sample trainer's last buffer is unique)
    analytic = (net / tier) * m / (m - 1)
    return {"bench": "restore_vs_tier", "scheme": protection, "members": m,
            "replicated_bytes": replicated, "link_bandwidth": net, "tier_bandwidth": tier,
            "memory_restore_s": round(t_memory, 3), "tier_restore_s": round(t_tier, 3),
            "speedup": round(t_tier / t_memory, 3), "analytic_speedup": round(analytic, 3),
            "relative_to_analytic": round(t_tier / t_memory / analytic, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--size", type=int, default=16 << 20, help="replicated bytes (W)")
    ap.add_argument("--net", type=int, default=2 << 20, help="B_net bytes/s per node")
    ap.add_argument("--tier", type=int, default=(2 << 20) // 10, help="B_tier bytes/s per node")
    ap.add_argument("--schemes", default="arc1,aec")
    args = ap.parse_args()
    for scheme in args.schemes.split(","):
        print(json.dumps(run(scheme, args.members, args.size, args.net, args.tier)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
