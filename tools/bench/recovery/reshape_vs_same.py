"""Reshaped restore DP8 -> DP7 against the same-layout restore (REFT-load) of the same bytes, in
one run (docs/recovery.md "Reshape"; docs/bench/recovery.md#reshape).

8 reftd on loopback over etcd, arc1. Every rank holds --mib MiB of replicated state (four
float32 buffers) and its part of a ZeRO-style sharded optimizer buffer of --zero-mib MiB in all
(registered with shard=(offset, total)). Two jobs are trained to a committed step:
- same layout: node7 is killed (SIGKILL, memory wiped) and replaced by a fresh reftd with the
  same id; the 8 ranks restore (REFT-load: node7's shard from the ARC copy, its optimizer part
  from the peer copy);
- reshape: node7 is killed and wiped for good; once the cluster declares it dead (lease
  expiry, reported apart as node7_declared_dead_after_s), 7 ranks of dp = 7 restore with
  reshape=True
  (every rank assembles the whole replicated state, and its new part of the optimizer buffer
  from the overlapping saved parts, node7's from its peer copy).
Per job the figure is the slowest rank's restore() as the trainer saw it (`total_s`); every
rank checks its bytes. Prints one JSON line; the ratio is reshape / same layout.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))
from reft_cluster import LocalCluster  # noqa: E402

TRAINER = r'''
import json, sys
import numpy as np
import reft
sock, job, dp, dp_size, mib, zero_mib, mode = sys.argv[1:8]
dp, dp_size, mib, zero_mib = int(dp), int(dp_size), int(mib), int(zero_mib)
c = reft.Client(socket=sock, job=job, dp=dp, layout=reft.Layout(dp=dp_size, zero=1),
                protection="arc1")
weights = [np.zeros(mib * (1 << 20) // 16, dtype=np.float32) for _ in range(4)]
for i, w in enumerate(weights):
    c.register("layers.%d.weight" % i, w, layer=i, dtype="float32")
total = zero_mib * (1 << 20) + 12345          # no dp divides it
size = -(-total // dp_size)
offset, valid = dp * size, max(0, min(size, total - dp * size))
optim = np.zeros(size, dtype=np.uint8)
c.register("optim.flat", optim, kind="unique", shard=(offset, total))
block = 1 << 16
def global_part(step):  # byte i of the global buffer = (i // 64 KiB + step) mod 251
    first, last = offset // block, (offset + valid + block - 1) // block
    vals = ((np.arange(first, last) + step) % 251).astype(np.uint8)
    return np.repeat(vals, block)[offset - first * block:offset - first * block + valid]
if mode == "train":
    for i, w in enumerate(weights):
        w[:] = i + 1.5
    optim[:valid] = global_part(0)
    c.snapshot(0); c.fence()
    assert c.wait_committed(0, timeout=600)
    print(json.dumps({"committed": 0}), flush=True)
else:
    step = c.restore(reshape=(mode == "reshape"))
    r = c.last_restore
    ok = step == 0 and all((w == i + 1.5).all() for i, w in enumerate(weights)) and \
        np.array_equal(optim[:valid], global_part(0)) and not optim[valid:].any()
    print(json.dumps({"step": step, "ok": bool(ok), "total_s": r["total_s"],
                      "daemon_s": r["daemon_s"], "agreement_s": r["agreement_s"],
                      "reshaped": r["reshaped"]}), flush=True)
'''


def launch(nodes, job, dp_size, args, mode):
    procs = [subprocess.Popen([sys.executable, "-c", TRAINER, node.socket, job, str(d),
                               str(dp_size), str(args.mib), str(args.zero_mib), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for d, node in enumerate(nodes)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(stderr[-2000:])
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="replicated state per rank (MiB)")
    ap.add_argument("--zero-mib", type=int, default=256, help="sharded optimizer state (MiB)")
    args = ap.parse_args()
    config = '[restore]\ntimeout_ms = 600000\n[etcd]\nlease_ttl_s = 2\n'
    with LocalCluster(nodes=8, config=config) as cluster:
        nodes = list(cluster.nodes)
        launch(nodes, "same", 8, args, "train")
        nodes[7].kill()
        nodes[7].wipe_memory()
        nodes[7].start(wait=True)
        same = launch(nodes, "same", 8, args, "restore")
        launch(nodes, "shrink", 8, args, "train")
        nodes[7].kill()
        nodes[7].wipe_memory()
        # Lost for good: the job is restarted at dp=7 once the cluster has declared node7 dead
        # (its etcd lease expired), as a launcher that sees the node gone would. Restoring at
        # once would add that wait to the restore: reftd waits for a node that is alive but not
        # answering (it may be a reftd restarting on its slots), while the same-layout side's
        # replacement re-registers node7 at once.
        detect_s = nodes[0].wait_member_state("node7", "dead")
        reshaped = launch(nodes[:7], "shrink", 7, args, "reshape")
    assert all(r["ok"] for r in same + reshaped), (same, reshaped)
    assert all(r["reshaped"] for r in reshaped), reshaped
    t_same = max(r["total_s"] for r in same)
    # Ranks 0..6 only: rank 7's restore also regenerates its slot on the replacement node.
    t_same_survivors = max(r["total_s"] for r in same[:7])
    t_reshape = max(r["total_s"] for r in reshaped)
    print(json.dumps({"mib": args.mib, "zero_mib": args.zero_mib,
                      "same_layout_s": round(t_same, 3), "reshape_s": round(t_reshape, 3),
                      "ratio": round(t_reshape / t_same, 3),
                      "same_layout_ranks_0_6_s": round(t_same_survivors, 3),
                      "ratio_vs_ranks_0_6": round(t_reshape / t_same_survivors, 3),
                      "node7_declared_dead_after_s": round(detect_s, 3),
                      "same_ranks_s": [round(r["total_s"], 3) for r in same],
                      "reshape_ranks_s": [round(r["total_s"], 3) for r in reshaped],
                      "reshape_agreement_s": [round(r["agreement_s"], 3) for r in reshaped]}))


if __name__ == "__main__":
    main()
