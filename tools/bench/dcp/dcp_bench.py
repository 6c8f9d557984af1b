"""PyTorch Distributed Checkpoint into reft (reft.torch.dcp) against DCP's own FileSystemWriter /
FileSystemReader and against the machine's limits, measured in the same run on the same bytes
(BENCHMARKS.md "PyTorch DCP", docs/bench/dcp.md).

Per size (bytes of state per rank), mesh and protection, on a fresh LocalCluster of --nodes (2)
reftd on etcd:
1. save: 4 gloo ranks placed as torchrun would ([0, 0, 1, 1] on 2 nodes, one per node on 4), on
   the mesh HSDP dp_replicate <nodes> x dp_shard 4/<nodes> (a replica per node) or pure FSDP
   dp_shard 4 (client_for orders reft's ring so that every rank's shard is copied to a rank on
   another node); each
   rep times one memcpy of each rank's state, dcp.async_save into reft and dcp.async_save with
   FileSystemWriter into /dev/shm (dcp_rank.py). Per rep the figure is the slowest rank; the
   line gives the median over reps.
2. node1's reftd is SIGKILLed and its memory wiped; once node0 sees it dead, ranks on the nodes
   left (--load-ranks, default 3, in turn over them) load the newest step with reft's Reader, then the same state saved
   by FileSystemWriter to --disk-dir, its pages evicted, then warm. The limit: raw loopback TCP of
   each loading rank's bytes (one connection per rank, all at once) + one memcpy of them per
   rank, all at once.
3. host memory per node: the bytes allocated under each reftd's shm dir after the saves (per
   job: the bench saves with two writers, the default and the zero-copy one, each its own job),
   and reftd's reft_memory_used_bytes; network per save: the bytes each reftd's ring copies
   pulled from the other node during each measured save (reft_peer_copy_bytes_total, read by
   rank 0 before and after the save).

Prints one JSON line per measurement, then a human summary on stderr. Every writer and reader
runs with its defaults.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "localcluster"))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench", "recovery"))
from reft_cluster import LocalCluster  # noqa: E402
from restore_unthrottled import last_phases, memcpy_all, tcp_all  # noqa: E402

CONFIG = """
[etcd]
lease_ttl_s = 2
"""
MIB = 1 << 20


def parse_size(text):
    return int(text[:-1]) << (30 if text.endswith("G") else 20)


def run_ranks(nodes, placement, args, timeout=900):
    """One dcp_rank.py per entry of `placement` (its node); rank 0's JSON output."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, node in enumerate(placement):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(len(placement)), LOCAL_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "dcp_rank.py"), "--socket", nodes[node].socket,
             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [p.communicate(timeout=timeout) + (p.returncode,) for p in procs]
    failed = [(rank, err[-3000:]) for rank, (_, err, rc) in enumerate(outs) if rc != 0]
    if failed:
        raise RuntimeError("ranks failed: %s" % failed)
    return json.loads([line for line in outs[0][0].splitlines() if line.startswith("{")][-1])


def slowest(reps, field=None):
    """Median over reps of the slowest rank (field: index into a rank's tuple)."""
    return statistics.median(max(r if field is None else r[field] for r in rep) for rep in reps)


def allocated(path, prefix=""):
    """Bytes allocated under `path` in files whose name starts with `prefix`."""
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            if not n.startswith(prefix):
                continue
            try:
                total += os.stat(os.path.join(d, n)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def node_memory(node, jobs):
    m = node.metrics()
    # A slot's segment file is named "<job>.pp<P>-tp<T>-dp<D>.s<slot>.seg" (daemon/store).
    return {"node": node.node_id, "shm_allocated_bytes": allocated(node.shm_dir),
            "shm_allocated_bytes_per_job": {j: allocated(node.shm_dir, j + ".pp") for j in jobs},
            "memory_used_bytes": m.get("reft_memory_used_bytes"),
            "snapshot_bytes_total": m.get("reft_snapshot_bytes_total")}


RANKS = 4


def mesh_name(mesh, nodes):
    return ("dp_replicate %d x dp_shard %d" % (nodes, RANKS // nodes) if mesh == "hsdp"
            else "dp_shard %d" % RANKS)


def emit(line):
    print(json.dumps(line), flush=True)
    return line


def one_size(size, mesh, protection, args, disk_root):
    """Saves, node loss, loads and the limits for one size, mesh and protection; returns its
    JSON lines."""
    job = "dcp"
    nodes = args.nodes
    disk_dir = tempfile.mkdtemp(prefix="dcp-bench-", dir=disk_root)
    try:
        with LocalCluster(nodes=nodes, etcd=1, config=CONFIG, metrics=True) as c:
            shm_dir = tempfile.mkdtemp(prefix="dcp-bench-fs-", dir=c.shm_root)
            placement = [r * nodes // RANKS for r in range(RANKS)]  # consecutive ranks per node
            s = run_ranks(c.nodes, placement, [
                "--mode", "save", "--job", job, "--protection", protection, "--size", str(size),
                "--mesh", mesh, "--nodes", str(nodes),
                "--reps", str(args.warmup + args.reps), "--shm-dir", shm_dir,
                "--disk-dir", disk_dir,
                "--metrics-ports", ",".join(str(n.metrics_port) for n in c.nodes)])
            shutil.rmtree(shm_dir)
            node_mem = [node_memory(n, (job, job + "-zc")) for n in c.nodes]
            c.nodes[1].kill()
            c.nodes[1].wipe_memory()
            c.nodes[0].wait_member_state("node1", "dead")
            left = [i for i in range(nodes) if i != 1]
            ld = run_ranks(c.nodes, [left[r % len(left)] for r in range(args.load_ranks)], [
                "--mode", "load", "--job", job, "--gshape", *map(str, s["gshape"]),
                "--step", str(s["reft_step"]), "--disk-dir", disk_dir])
            phases = last_phases(c.nodes[0])  # reftd's restore phases, the last rank's read
    finally:
        shutil.rmtree(disk_dir, ignore_errors=True)
    # The machine's limit for the load, right after it: every loading rank's bytes over raw
    # loopback TCP, all at once, then one memcpy of them per rank, all at once.
    fetched = ld["local_bytes"]
    tcp_s = tcp_all(fetched)
    memcpy_s = memcpy_all(len(fetched), (max(fetched) + MIB - 1) // MIB * MIB)
    common = {"bytes_per_rank": size, "save_ranks": RANKS, "node_count": nodes,
              "mesh": mesh_name(mesh, nodes),
              "protection": protection, "reps": args.reps, "warmup": args.warmup}
    lines = save_lines(common, s, args.warmup)
    lines.append(load_line(common, ld, args.load_ranks, phases, tcp_s, memcpy_s))
    lines.append(memory_line(common, node_mem, lines[1]["loopback_bytes_reft"],
                             args.warmup + args.reps, (job, job + "-zc")))
    lines.append(network_line(common, s, args.warmup, [n.node_id for n in c.nodes]))
    return lines


def save_lines(common, s, w):
    """The save's two lines: time blocked in async_save and time until its future is done."""
    # Steady state: the first saves into a reft job allocate its slots (two: the step being
    # written and the last committed one); they are reported apart.
    first = {k: [round(max(r if k == "memcpy" else r[0] for r in rep), 4) for rep in s[k][:w]]
             for k in ("memcpy", "reft", "reft_zero_copy", "fs_shm")}
    first_done = {k: [round(max(r[1] for r in rep), 4) for rep in s[k][:w]]
                  for k in ("reft", "reft_zero_copy", "fs_shm")}
    s = dict(s, **{k: s[k][w:] for k in ("memcpy", "reft", "reft_zero_copy", "fs_shm")})
    memcpy = slowest(s["memcpy"])
    reft_blocked, reft_done = slowest(s["reft"], 0), slowest(s["reft"], 1)
    fs_blocked, fs_done = slowest(s["fs_shm"], 0), slowest(s["fs_shm"], 1)
    zc_blocked, zc_done = slowest(s["reft_zero_copy"], 0), slowest(s["reft_zero_copy"], 1)
    return [emit(dict(common, bench="dcp_async_save_blocked", memcpy_s=round(memcpy, 4),
                       reft_s=round(reft_blocked, 4), fs_shm_s=round(fs_blocked, 4),
                       reft_over_memcpy=round(reft_blocked / memcpy, 2),
                       reft_over_fs_shm=round(reft_blocked / fs_blocked, 2),
                       fs_shm_over_memcpy=round(fs_blocked / memcpy, 2),
                       reft_zero_copy_s=round(zc_blocked, 4),
                       reft_zero_copy_over_memcpy=round(zc_blocked / memcpy, 3),
                       per_rep_slowest={k: [round(max(r[0] if k != "memcpy" else r
                                                      for r in rep), 4) for rep in s[k]]
                                        for k in ("memcpy", "reft", "reft_zero_copy",
                                                  "fs_shm")},
                       warmup_slowest=first)),
             emit(dict(common, bench="dcp_async_save_done", reft_committed_s=round(reft_done, 4),
                       fs_shm_written_s=round(fs_done, 4),
                       reft_zero_copy_committed_s=round(zc_done, 4),
                       fs_disk_written_s=round(slowest(s["fs_disk"], 1), 4),
                       reft_over_fs_shm=round(reft_done / fs_done, 2),
                       reft_over_memcpy=round(reft_done / memcpy, 2),
                       per_rep_reft_s=[round(max(r[1] for r in rep), 4) for rep in s["reft"]],
                       per_rep_fs_shm_s=[round(max(r[1] for r in rep), 4)
                                         for rep in s["fs_shm"]],
                       loopback_bytes_reft=int(slowest(s["reft"], 2)),
                       loopback_bytes_fs_shm=int(slowest(s["fs_shm"], 2)),
                       warmup_done_s=first_done))]


def load_line(common, ld, load_ranks, phases, tcp_s, memcpy_s):
    fetched = ld["local_bytes"]
    limit = tcp_s + memcpy_s
    reft_load = slowest(ld["reft"])
    cold, warm = slowest(ld["fs_disk_cold"]), slowest(ld["fs_disk_warm"])
    return emit(dict(
        common, bench="dcp_load_after_node_loss", load_ranks=load_ranks,
        load_mesh="dp_shard %d" % load_ranks, bytes_fetched=sum(fetched),
        bytes_per_load_rank=fetched, reft_source=ld.get("reft_source"),
        reft_s=round(reft_load, 4), fs_disk_cold_s=round(cold, 4), fs_disk_warm_s=round(warm, 4),
        fs_resident_after_evict=ld.get("fs_resident_after_evict"),
        reft_parts_slowest={k: round(max(p[k] for p in ld["reft_parts"]), 4)
                            for k in ("read_metadata_s", "read_saved_s")},
        reft_read_saved_bytes=[p["read_saved_bytes"] for p in ld["reft_parts"]],
        reftd_phases_last_read=phases,
        tcp_s=round(tcp_s, 4), memcpy_s=round(memcpy_s, 4), limit_s=round(limit, 4),
        reft_over_limit=round(reft_load / limit, 2), reft_over_fs_cold=round(reft_load / cold, 2),
        reft_over_fs_warm=round(reft_load / warm, 2)))


def job_state(common):
    """The job's state: the distinct bytes of its tensors (HSDP: the dp_shard shards of one
    replica, each held by every replica; FSDP: every rank's shard)."""
    hsdp = common["mesh"].startswith("dp_replicate")
    return (RANKS // common["node_count"] if hsdp else RANKS) * common["bytes_per_rank"]


def node_state(common):
    """The state of one node's ranks."""
    return RANKS // common["node_count"] * common["bytes_per_rank"]


def memory_line(common, node_mem, lo, saves, jobs):
    unique, node_state_bytes = job_state(common), node_state(common)
    return emit(dict(common, bench="dcp_host_memory", state_bytes_per_node=node_state_bytes,
                           unique_state_bytes=unique, nodes=node_mem,
                           shm_over_node_state=[round(n["shm_allocated_bytes"] / node_state_bytes,
                                                      2)
                                                for n in node_mem],
                           # Per job (the bench runs two: the default and the zero-copy writer):
                           # each job's slots on the node vs the node's ranks' state, and all
                           # nodes' slots of the job vs the job's state.
                           shm_per_job_over_node_state={
                               j: [round(n["shm_allocated_bytes_per_job"][j] / node_state_bytes,
                                         3)
                                   for n in node_mem] for j in jobs},
                           shm_per_job_over_job_state={
                               j: round(sum(n["shm_allocated_bytes_per_job"][j]
                                            for n in node_mem) / unique, 3) for j in jobs},
                           # Bytes reftd ingested per save vs the ranks' state on the node.
                           ingest_per_save_over_node_state=[
                               round(n["snapshot_bytes_total"] / saves / node_state_bytes, 3)
                               for n in node_mem],
                           network_bytes_per_save_upper_bound=lo,
                           network_over_unique_state=round(lo / unique, 4),
                           network_note="the bound is every byte sent on loopback during a "
                                        "reft save (gloo, etcd, reftd, other processes); "
                                        "dcp_network_per_save has reftd's own count"))


def network_line(common, s, w, node_ids):
    """Bytes the ring copies of each measured save read on each node and pulled from other nodes
    (reft_peer_copy_bytes_total, per save: rank 0's before/after deltas), vs the state."""
    node_state_bytes, unique = node_state(common), job_state(common)
    out = dict(common, bench="dcp_network_per_save", state_bytes_per_node=node_state_bytes,
               unique_state_bytes=unique, saves=len(s["reft"]) - w)
    for writer in ("reft", "reft_zero_copy"):
        reps = [rep[0][3] for rep in s[writer][w:]]  # rank 0's [node][local, remote] per save
        remote = [sum(r[i][1] for r in reps) / len(reps) for i in range(len(node_ids))]
        local = [sum(r[i][0] for r in reps) / len(reps) for i in range(len(node_ids))]
        out[writer] = {"remote_bytes_per_save": dict(zip(node_ids, remote)),
                       "local_bytes_per_save": dict(zip(node_ids, local)),
                       "remote_per_save_over_node_state": [round(b / node_state_bytes, 4)
                                                           for b in remote],
                       "remote_per_save_per_node_over_job_state": [round(b / unique, 4)
                                                                   for b in remote],
                       "remote_per_save_over_job_state": round(sum(remote) / unique, 4),
                       "per_save_remote_total": [sum(n[1] for n in r) for r in reps]}
    return emit(out)


def summary(lines):
    out = []
    for ln in lines:
        mib = "%4d MiB/rank %d nodes %-4s %-4s" % (
            ln["bytes_per_rank"] >> 20, ln["node_count"],
            "hsdp" if ln["mesh"].startswith("dp_replicate") else "fsdp", ln["protection"])
        b = ln["bench"]
        if b == "dcp_async_save_blocked":
            out.append("%s  blocked in async_save: reft %.3f s = %.2fx memcpy (%.3f s), "
                       "%.2fx FileSystemWriter/shm (%.3f s)  [targets <= 1.2x, <= 0.5x: %s, %s]" % (
                           mib, ln["reft_s"], ln["reft_over_memcpy"], ln["memcpy_s"],
                           ln["reft_over_fs_shm"], ln["fs_shm_s"],
                           "met" if ln["reft_over_memcpy"] <= 1.2 else "missed",
                           "met" if ln["reft_over_fs_shm"] <= 0.5 else "missed"))
        elif b == "dcp_async_save_done":
            out.append("%s  save done: reft committed %.3f s, FileSystemWriter shm "
                       "%.3f s (%.2fx), disk %.3f s" % (mib, ln["reft_committed_s"],
                                                 ln["fs_shm_written_s"], ln["reft_over_fs_shm"],
                                                 ln["fs_disk_written_s"]))
        elif b == "dcp_load_after_node_loss":
            out.append("%s  load 4->%d after a node loss: reft %.3f s = %.2fx limit "
                       "(tcp %.3f + memcpy %.3f), %.2fx FileSystemReader cold (%.3f s), %.2fx "
                       "warm (%.3f s)" % (mib, ln["load_ranks"], ln["reft_s"],
                                          ln["reft_over_limit"], ln["tcp_s"], ln["memcpy_s"],
                                          ln["reft_over_fs_cold"], ln["fs_disk_cold_s"],
                                          ln["reft_over_fs_warm"], ln["fs_disk_warm_s"]))
        elif b == "dcp_host_memory":
            per_job = ln["shm_per_job_over_node_state"]["dcp"]
            out.append("%s  host memory per node (shm of one job / its ranks' state on the "
                       "node): %s; all nodes' / the job's state: %.2fx" % (
                           mib, ", ".join("%s %.2fx" % (n["node"], r) for n, r in
                                          zip(ln["nodes"], per_job)),
                           ln["shm_per_job_over_job_state"]["dcp"]))
        elif b == "dcp_network_per_save":
            r = ln["reft"]
            out.append("%s  network per save (peer copies pulled from other nodes): %s; "
                       "total %.3fx the job's state" % (
                           mib, ", ".join("%s %.1f MB = %.3fx its state" % (
                               n, v / 1e6, x) for (n, v), x in zip(
                                   r["remote_bytes_per_save"].items(),
                                   r["remote_per_save_over_node_state"])),
                           r["remote_per_save_over_job_state"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64M,256M", help="bytes of state per rank, suffix M or G")
    ap.add_argument("--reps", type=int, default=3, help="measured saves per size")
    ap.add_argument("--warmup", type=int, default=2,
                    help="saves before them (reft allocates its two slots), reported apart")
    ap.add_argument("--load-ranks", type=int, default=3)
    ap.add_argument("--mesh", choices=("hsdp", "fsdp", "both"), default="both",
                    help="the save's mesh: HSDP dp_replicate <nodes> x dp_shard 4/<nodes>, "
                         "pure FSDP dp_shard 4, or both in turn")
    ap.add_argument("--nodes", type=int, choices=(2, 4), default=2,
                    help="reftd nodes the 4 saving ranks are spread over (hsdp: a replica each)")
    ap.add_argument("--protections", default="arc1,aec",
                    help="protections to run, comma-separated (each mesh, each size)")
    ap.add_argument("--disk-root", default="/var/tmp",
                    help="where FileSystemWriter's on-disk reference goes (not tmpfs)")
    args = ap.parse_args()
    started = time.monotonic()
    lines = []
    meshes = ("hsdp", "fsdp") if args.mesh == "both" else (args.mesh,)
    for text in args.sizes.split(","):
        for mesh in meshes:
            for protection in args.protections.split(","):
                lines += one_size(parse_size(text), mesh, protection, args, args.disk_root)
    print(summary(lines), file=sys.stderr)
    print("(%.0f s)" % (time.monotonic() - started), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
