"""Unthrottled restore of a lost node against the machine's limit, measured in the same run
(BENCHMARKS.md "Cluster", docs/bench/recovery.md "Unthrottled restore").

M reftd on loopback form one sharding group (a DP-M job, one rank per node), links NOT
throttled. The job snapshots; node 1 is lost (reftd SIGKILLed, memory wiped) and a fresh reftd
takes over its rank; all M ranks restart at once and restore the committed step from memory.
The figure is the slowest rank's Restore() (as the trainer reports it: reftd's work plus the
copy into the trainer's buffers). Every restarted trainer allocates and registers its buffers,
then waits at a barrier; the M restores start together once all have registered. On a cluster
each rank allocates its model on its own node; here all M share two cores, and without the
barrier one trainer's page zeroing (hundreds of MiB) ran inside another's restore. For the
same reason the trainers check the restored bytes (regenerating W bytes of expected pattern
each) only after every rank has reported its restore time.

The limit, measured right after on the same machine: every rank receives over raw loopback TCP,
all at once, the bytes it must receive in a restore (a survivor: the M-1 shards it does not
hold; the replacement: the whole replicated state, its own shard being rebuilt from the others'
redundancy), then every rank makes one memcpy of its restored bytes, all at once. Prints one
JSON line per (scheme, size) with the restore, the limit, the ratio and reftd's per-phase times
(the slowest rank's log line).
"""
import argparse
import ctypes
import json
import os
import re
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "tests", "system"))
from reft_cluster import LocalCluster  # noqa: E402
from trainer import SampleTrainer  # noqa: E402

CONFIG = """
[peer]
probe_interval_ms = 200
probe_timeout_ms = 150
suspicion_timeout_ms = 1000
link_bandwidth = {link}

[restore]
piece_timeout_ms = 60000
timeout_ms = 600000
"""

PHASES = ("agreement", "locate", "fetch", "decode", "deliver", "rebuild", "allocate")
PHASE_RE = re.compile(r"restore: .*\[agreement ([\d.]+)s, locate ([\d.]+)s, fetch ([\d.]+)s, "
                      r"decode ([\d.]+)s, deliver ([\d.]+)s, rebuild ([\d.]+)s"
                      r"(?:, allocate ([\d.]+)s)?")


def launch(cluster, nodes, job, m, size, protection, barrier=None):
    """Starts a trainer per node; with `barrier` (a path) they restore only, each after
    registering and once the file exists."""
    out = []
    for d, node in enumerate(nodes):
        extra = ["--dp", str(d), "--dp-size", str(m), "--protection", protection,
                 "--reply-timeout-ms", "900000"]
        if barrier:
            extra += ["--restore-only", "--restore-after-file", barrier,
                      "--verify-after-file", barrier + ".verify"]
        out.append(SampleTrainer(cluster, node, job, steps=2, size=size, buffers=2,
                                 extra=extra, unique_size=4096))
    return out


def last_phases(node):
    found = PHASE_RE.findall(node.log())
    return {k: float(v) for k, v in zip(PHASES, found[-1]) if v} if found else {}


def restore_once(m, size, protection, link=0):
    job = "fast"
    with LocalCluster(nodes=m, config=CONFIG.format(link=link)) as cluster:
        nodes = list(cluster.nodes)
        for t in launch(cluster, nodes, job, m, size, protection):
            if t.finish(timeout=900) != 0:
                raise RuntimeError(f"training failed: {t.lines[-3:]}")
        nodes[1].kill()
        nodes[1].wipe_memory()
        spare = cluster.add_node("spare1")
        nodes[0].wait_member_state("node1", "dead")
        nodes[1] = spare
        barrier = os.path.join(cluster.root, "restore-barrier")
        trainers = launch(cluster, nodes, job, m, size, protection, barrier)
        for t in trainers:
            t.wait_for("registered", timeout=900)
        start = time.monotonic()
        open(barrier, "w").close()
        totals, daemons = [], []
        for t in trainers:
            ev = t.wait_for("restore-time", timeout=900)
            totals.append(float(ev[1]))
            daemons.append(float(ev[2]))
        wall = time.monotonic() - start
        open(barrier + ".verify", "w").close()
        for t in trainers:
            ev = t.wait_for("restored", timeout=900)
            if ev[1:] != ["1", "ok"]:
                raise RuntimeError(f"restore failed: {ev} {t.lines[-3:]}")
            t.finish()
        slowest = max(range(m), key=lambda r: totals[r])
        return {"restore_s": totals[slowest], "slowest_rank": slowest,
                "daemon_s": daemons[slowest], "wall_s": wall,
                "phases": last_phases(nodes[slowest]),
                "replacement_phases": last_phases(nodes[1])}


def tcp_all(sizes, chunk=4 << 20):
    """Raw loopback TCP: one connection per rank, all at once; returns the wall seconds."""
    src = bytearray(os.urandom(1 << 20)) * (chunk >> 20)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(len(sizes))
    port = srv.getsockname()[1]
    sinks = [bytearray(chunk) for _ in sizes]  # a receive buffer per rank, reused

    def send(r, n):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(r.to_bytes(4, "little"))  # which rank's bytes: accept order is arbitrary
        view = memoryview(src)
        while n > 0:
            k = min(n, len(src))
            c.sendall(view[:k])
            n -= k
        c.close()

    def recv(conn, sink):
        header = b""
        while len(header) < 4:
            header += conn.recv(4 - len(header))
        n = sizes[int.from_bytes(header, "little")]
        view = memoryview(sink)
        while n > 0:
            got = conn.recv_into(view[:min(n, len(sink))])
            if got == 0:
                raise RuntimeError("short TCP transfer")
            n -= got
        conn.close()

    start = time.monotonic()
    threads = [threading.Thread(target=send, args=(r, n)) for r, n in enumerate(sizes)]
    for t in threads:
        t.start()
    for r in range(len(sizes)):
        conn, _ = srv.accept()
        t = threading.Thread(target=recv, args=(conn, sinks[r]))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    srv.close()
    return time.monotonic() - start


def memcpy_all(m, size):
    """One memcpy of `size` bytes per rank, all at once (ctypes releases the GIL)."""
    src = bytearray(os.urandom(1 << 20)) * (size >> 20)
    dsts = [bytearray(size) for _ in range(m)]  # zero-filled: already faulted in
    s = (ctypes.c_char * size).from_buffer(src)

    def copy(d):
        ctypes.memmove((ctypes.c_char * size).from_buffer(d), s, size)

    start = time.monotonic()
    threads = [threading.Thread(target=copy, args=(d,)) for d in dsts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start


def limit(m, size):
    survivor = size * (m - 1) // m
    sizes = [survivor] * m
    sizes[1] = size  # the replacement receives everything
    return tcp_all(sizes), memcpy_all(m, size)


def sweep(args):
    """Restore time vs link rate: link-bound while the slowest rank's bytes / rate dominate."""
    for scheme in args.schemes.split(","):
        for text in args.sizes.split(","):
            size = int(text[:-1]) << (30 if text.endswith("G") else 20)
            for rate_text in args.link_rates.split(","):
                rate = int(rate_text.rstrip("M")) << (20 if rate_text.endswith("M") else 0)
                r = restore_once(args.members, size, scheme, rate)
                # The replacement receives the whole replicated state over its link.
                link_s = size / rate if rate else 0.0
                print(json.dumps({
                    "bench": "restore_vs_link_rate", "scheme": scheme, "members": args.members,
                    "replicated_bytes": size, "link_bandwidth": rate,
                    "restore_s": round(r["restore_s"], 3), "link_bound_s": round(link_s, 3),
                    "phases_slowest": r["phases"]}), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--sizes", default="64M,256M",
                    help="replicated bytes per rank (W), comma separated, suffix M or G")
    ap.add_argument("--schemes", default="arc1,aec")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--link-rates", default="",
                    help="instead: restore time against each node's link rate (bytes/s, suffix "
                         "M; 0 = unthrottled), one run each, e.g. 2M,8M,32M,0")
    args = ap.parse_args()
    if args.link_rates:
        return sweep(args)
    for scheme in args.schemes.split(","):
        for text in args.sizes.split(","):
            size = int(text[:-1]) << (30 if text.endswith("G") else 20)
            runs = []
            for _ in range(args.runs):
                r = restore_once(args.members, size, scheme)
                tcp, copy = limit(args.members, size)
                r.update(tcp_s=tcp, memcpy_s=copy, limit_s=tcp + copy,
                         ratio=r["restore_s"] / (tcp + copy))
                runs.append(r)
            ratios = sorted(r["ratio"] for r in runs)
            med = min(runs, key=lambda r: abs(r["ratio"] - statistics.median(ratios)))
            print(json.dumps({
                "bench": "restore_unthrottled", "scheme": scheme, "members": args.members,
                "replicated_bytes": size, "runs": len(runs),
                "restore_s": round(med["restore_s"], 3), "daemon_s": round(med["daemon_s"], 3),
                "wall_s": round(med["wall_s"], 3), "limit_s": round(med["limit_s"], 3),
                "tcp_s": round(med["tcp_s"], 3), "memcpy_s": round(med["memcpy_s"], 3),
                "ratio_median": round(statistics.median(ratios), 2),
                "ratio_min": round(ratios[0], 2), "ratio_max": round(ratios[-1], 2),
                "restore_all_s": [round(r["restore_s"], 3) for r in runs],
                "limit_all_s": [round(r["limit_s"], 3) for r in runs],
                "phases_slowest": med["phases"], "phases_replacement": med["replacement_phases"],
            }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
