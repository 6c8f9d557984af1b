#!/usr/bin/env python3
"""Chaos soak: a loopback cluster of reftd (>= 4 nodes, one rank of a synthetic job on each,
coordinating through one etcd member, or by gossip with --gossip) trains for --duration seconds while faults are injected at random, one at a time: trainer
kill -9, reftd kill -9 and restart, node loss with a spare and without one (the node comes
back empty under its own id), a dropped and a delayed link (a proxy in front of each node's
gRPC port), a full persistent tier, and a hostile client (malformed, oversized and truncated
frames, disconnects mid-frame). After every fault the job restarts on every rank and each
rank checks, byte for byte, the state it restored against the trainer's own generator, and
that nothing committed before the fault was lost; then the job must commit again before the
next fault.

  tools/chaos/chaos.py --duration 600 [--nodes 4] [--seed N] [--tls] [--json FILE]

Prints a summary and writes it as JSON: faults by kind, recoveries, bytes verified, anything
lost (must be 0) and failed checks (must be 0). Exit 0 when both are 0, 1 otherwise, 2 on a
usage error. The daemons' and etcd's logs at every loss or failed check are copied (the
cluster's directories go with it) under --logs, or a fresh directory the summary names.
Needs a build (REFT_BUILD_DIR or ./build): reftd, reftctl, reft_sample_trainer.
The disk-full fault needs root (it mounts a small tmpfs as the persistent tier); without it
that fault is reported as unavailable.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "localcluster"))

from chaos_cluster import ChaosCluster  # noqa: E402
from chaos_job import ChaosJob  # noqa: E402
from faults import FAULTS, FaultCheckFailed  # noqa: E402
from reft_cluster import find_build_dir  # noqa: E402

CONFIG = """
[peer]
probe_interval_ms = 100
probe_timeout_ms = 80
suspicion_timeout_ms = 800

[etcd]
lease_ttl_s = 2

[restore]
piece_size = "64K"
piece_timeout_ms = 3000
timeout_ms = 60000

[store]
chunk_size = "16K"

[persist]
keep = 2
"""


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.chaos = ChaosCluster(args.nodes, CONFIG, tls=args.tls, etcd=not args.gossip,
                                  keep=args.keep)
        self.jobs_started = 0
        self.logs_dir = args.logs  # created at the first loss or failed check
        self.barrier_dir = tempfile.mkdtemp(prefix="reft-chaos-barrier-")
        self.job = self.new_job()
        self.placement = list(self.chaos.nodes)  # rank r runs on placement[r]
        self.report = {
            "duration_s": args.duration, "seed": args.seed, "nodes": args.nodes,
            "protection": args.protection, "tls": args.tls,
            "control_plane": "gossip" if args.gossip else "etcd", "bytes_per_rank": 0,
            "faults": {}, "unavailable": {}, "recoveries": 0, "restores_verified": 0,
            "bytes_verified": 0, "lost": 0, "failed_checks": 0, "unsettled": 0,
            "fenced_restarts": 0,
            "steps_committed": 0,
            "recovery_seconds": {}, "events": [],
        }
        if self.chaos.persist_tmpfs is None:
            self.report["unavailable"]["disk_full"] = "cannot mount a tmpfs for the tier (root)"

    def new_job(self):
        """A fresh job (after the previous one lost its state, training goes on under a new
        name so the soak keeps measuring)."""
        self.jobs_started += 1
        name = "chaos" if self.jobs_started == 1 else f"chaos-{self.jobs_started}"
        return ChaosJob(find_build_dir(), name, self.args.nodes, self.barrier_dir,
                        protection=self.args.protection, size=self.args.size)

    def live_nodes(self):
        return [n for n in self.chaos.nodes if n.proc is not None and n.proc.poll() is None]

    def replace(self, old, new):
        self.placement = [new if n is old else n for n in self.placement]

    def sockets(self):
        return [n.socket for n in self.placement]

    def event(self, **fields):
        fields["t"] = round(time.time() - self.t0, 2)
        self.report["events"].append(fields)
        print(json.dumps(fields), flush=True)

    def newest_committed(self):
        """node id -> the newest step committed on every local rank of the job there."""
        out = {}
        for n in self.live_nodes():
            r = n.ctl("status", check=False, json_output=True)
            if isinstance(r, dict):
                for j in r["jobs"]:
                    if j["job"] == self.job.job:
                        out[n.node_id] = j["newest_committed_step"]
        return out

    def wait_commit_settled(self, timeout=30.0):
        """Gossip only: waits until every node reports the same newest committed step twice, a
        second apart (commit state spreads by exchanges every 500 ms). Without a consensus
        store, ranks that restore while a commit is still spreading can restore different steps
        (seen by this soak: [24, 24, 24, 25]); with etcd the job-wide decision makes the wait
        unnecessary, and the soak restarts the trainers at once, as a launcher does."""
        deadline = time.time() + timeout
        last = seen = None
        while time.time() < deadline:
            seen = self.newest_committed()
            if len(set(seen.values())) == 1 and seen == last:
                return
            last = seen if len(set(seen.values())) == 1 else None
            time.sleep(1.0)
        self.report["unsettled"] += 1
        self.event(kind="settle", verdict="UNSETTLED", newest_committed=seen)

    def keep_logs(self, kind: str) -> str:
        """Copies every daemon's log (retired nodes' too) and etcd's as they are now into a
        directory of their own under the logs directory; returns it."""
        if self.logs_dir is None:
            self.logs_dir = tempfile.mkdtemp(prefix="reft-chaos-logs-")
        dest = os.path.join(self.logs_dir, f"{time.time() - self.t0:07.1f}s-{kind}")
        os.makedirs(dest, exist_ok=True)
        for log in glob.glob(os.path.join(self.chaos.cluster.root, "*", "reftd.log")):
            shutil.copy(log, os.path.join(dest, os.path.basename(os.path.dirname(log)) + ".log"))
        etcd = self.chaos.cluster.etcd
        for m in (etcd.members if etcd else []):
            if os.path.exists(m.log_path):
                shutil.copy(m.log_path, os.path.join(dest, m.name + ".log"))
        return dest

    def failed_check(self, kind: str) -> str:
        """Counts a failed check; returns where its logs were kept."""
        self.report["failed_checks"] += 1
        return self.keep_logs(kind)

    def verify(self, kind):
        """Restarts the job and checks every rank's restore; counts what was lost."""
        self.job.kill()
        if self.args.gossip:
            self.wait_commit_settled()  # gossip has no job-wide decision (docs/recovery.md)
        result = self.job.restart_and_verify(self.sockets())
        self.report["restores_verified"] += result["restores"]
        self.report["bytes_verified"] += result["bytes"]
        if result["fenced"]:
            self.report["fenced_restarts"] += 1
            self.event(kind=kind, verdict="FENCED", **result["fenced"])
        if not result["ok"]:
            self.report["lost"] += 1
            self.event(kind=kind, verdict="LOST", **result, kept_logs=self.keep_logs(kind),
                       logs={n.node_id: n.log()[-3000:] for n in self.chaos.nodes})
        return result

    def wait_progress(self, kind, steps=2, timeout=90.0):
        target = self.job.committed() + steps
        if not self.job.wait_committed(target, timeout):
            self.event(kind=kind, verdict="STALLED", waiting_for=target,
                       kept_logs=self.failed_check(kind),
                       trainers={t.rank: t.tail() for t in self.job.trainers})
            return False
        return True

    def run(self):
        self.t0 = time.time()
        self.chaos.start()
        self.job.release(self.job.start(self.sockets()))
        self.report["bytes_per_rank"] = self.job.bytes_per_rank
        self.wait_progress("start")
        kinds = [k for k in (self.args.faults or FAULTS) if k not in self.report["unavailable"]]
        weights = [FAULTS[k][1] for k in kinds]
        durations = {}
        while time.time() - self.t0 < self.args.duration:
            kind = self.rng.choices(kinds, weights)[0]
            started = time.time()
            try:
                detail = FAULTS[kind][0](self)
            except FaultCheckFailed as e:
                detail = {"check_failed": str(e), "kept_logs": self.failed_check(kind)}
            except Exception as e:  # noqa: BLE001 - a broken recovery is a finding, not a crash
                detail = {"error": f"{type(e).__name__}: {e}",
                          "trace": traceback.format_exc()[-1500:],
                          "kept_logs": self.failed_check(kind)}
            self.report["faults"][kind] = self.report["faults"].get(kind, 0) + 1
            try:
                result = self.verify(kind)
            except Exception as e:  # noqa: BLE001 - e.g. a daemon that stopped answering
                result = {"ok": False, "step": None, "committed_before": self.job.committed(),
                          "errors": [f"{type(e).__name__}: {e}"],
                          "kept_logs": self.failed_check(kind)}
            took = time.time() - started
            if result["ok"]:
                self.report["recoveries"] += 1
                durations.setdefault(kind, []).append(took)
            self.event(kind=kind, detail=detail, restored=result["step"],
                       committed_before=result["committed_before"], seconds=round(took, 2),
                       ok=result["ok"])
            if not self.wait_progress(kind):
                # The job cannot train any more (its state is lost): count it, start a new one.
                self.job.kill()
                self.report["steps_committed"] += self.job.committed() + 1
                self.job = self.new_job()
                self.job.release(self.job.start(self.sockets()))
                if not self.wait_progress("new job"):
                    break  # not even a fresh job trains: further faults would prove nothing
        self.report["steps_committed"] += self.job.committed() + 1
        self.report["jobs"] = self.jobs_started
        self.report["recovery_seconds"] = {
            k: {"n": len(v), "median": round(statistics.median(v), 2), "max": round(max(v), 2)}
            for k, v in durations.items()}
        self.report["elapsed_s"] = round(time.time() - self.t0, 1)
        self.report["failure_logs"] = self.logs_dir
        # Connections into a link proxy that no running daemon had opened: a link drop cannot
        # cut those (expected 0; the cut node's logs then tell more).
        self.report["unattributed_connections"] = self.chaos.links.unattributed

    def close(self):
        self.job.kill()
        shutil.rmtree(self.barrier_dir, ignore_errors=True)
        self.chaos.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=60, help="seconds of fault injection")
    p.add_argument("--nodes", type=int, default=4, help="reftd processes = ranks (>= 4)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    p.add_argument("--protection", default="arc1", help="the job's protection (tolerates 1 loss)")
    p.add_argument("--size", type=int, default=120_001, help="bytes per trainer buffer")
    p.add_argument("--tls", action="store_true", help="mutual TLS between the daemons")
    p.add_argument("--gossip", action="store_true",
                   help="no etcd: the daemons agree by gossip (default: one etcd member)")
    p.add_argument("--faults", type=lambda s: s.split(","), default=None,
                   help="comma-separated fault kinds to draw from (default: all): "
                        + ", ".join(FAULTS))
    p.add_argument("--json", help="write the summary here")
    p.add_argument("--keep", action="store_true", help="keep the cluster's directories")
    p.add_argument("--logs", help="where to copy the logs of a loss or failed check "
                                  "(default: a fresh directory under the temp dir)")
    args = p.parse_args()
    if args.nodes < 4:
        p.error("--nodes must be at least 4")
    unknown = set(args.faults or []) - set(FAULTS)
    if unknown:
        p.error(f"unknown fault kinds: {', '.join(sorted(unknown))}")
    if args.seed is None:
        args.seed = int(time.time())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ctest's timeout: clean up first

    soak = Soak(args)
    try:
        soak.run()
    finally:
        soak.close()
    report = soak.report
    summary = {k: v for k, v in report.items() if k != "events"}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if report["lost"] == 0 and report["failed_checks"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
