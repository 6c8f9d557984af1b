"""How long a restore spends agreeing, beside the restore itself (docs/coordination.md).

The operator scenario of docs/recovery.md "One decision per job": a 4-node DP4 job (one rank
per node, `--mib` MiB of replicated state per rank, arc1), three committed steps; node 1 is
killed with SIGKILL and its memory wiped, a replacement reftd with the same node id is started,
and the four ranks restart the moment `reftctl status` answers on it. Per run:

- restore: wall time from launching the four trainers to the slowest one printing
  `restored <step> ok` (every byte verified by the trainer);
- agreement: the largest agreement time the four trainers were told (`LastRestore()`: reading
  the commit point and the decision, waiting for silent holders, recording or following the
  decision), a part of the restore.

Prints one JSON line with the per-run values and their medians.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "system"))
from reft_cluster import LocalCluster  # noqa: E402
from trainer import SampleTrainer  # noqa: E402

M = 4


def launch(cluster, nodes, job, size, restore_only):
    out = []
    for d, node in enumerate(nodes):
        extra = ["--dp", str(d), "--dp-size", str(M), "--protection", "arc1"]
        if restore_only:
            extra.append("--restore-only")
        out.append(SampleTrainer(cluster, node, job, steps=3, size=size, buffers=3, extra=extra))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--mib", type=int, default=48, help="replicated state per rank (MiB)")
    args = ap.parse_args()
    size = args.mib * (1 << 20) // 2  # two replicated buffers (and a unique one of this size)
    restore_s, agreement_s = [], []
    with LocalCluster(nodes=M) as cluster:
        nodes = list(cluster.nodes)
        for run in range(args.runs):
            job = f"agree-{run}"
            for t in launch(cluster, nodes, job, size, restore_only=False):
                assert t.finish(timeout=600) == 0, t.lines[-5:]
            nodes[1].kill()
            nodes[1].wipe_memory()
            nodes[1].start(wait=True)
            t0 = time.monotonic()
            trainers = launch(cluster, nodes, job, size, restore_only=True)
            for t in trainers:
                ev = t.wait_for("restored", timeout=600)
                assert ev[2] == "ok", ev
            restore_s.append(time.monotonic() - t0)
            agreed = 0.0
            for t in trainers:
                t.finish()
                report = next(line for line in t.lines if line.startswith("restore-report "))
                agreed = max(agreed, float(report.split(" ", 3)[2]))
            agreement_s.append(agreed)
    print(json.dumps({
        "bench": "restore_agreement", "nodes": M, "mib_per_rank": args.mib, "protection": "arc1",
        "runs": args.runs, "restore_s": restore_s, "agreement_s": agreement_s,
        "restore_median_s": statistics.median(restore_s),
        "agreement_median_s": statistics.median(agreement_s),
        "agreement_share_median": statistics.median(a / r for a, r in zip(agreement_s,
                                                                           restore_s)),
    }))


if __name__ == "__main__":
    main()
