"""One gloo rank of tools/bench/dcp/dcp_bench.py (launched by it, torchrun-like environment).

--mode save: DTensors of --size bytes per rank on the --mesh: hsdp (dp_replicate --nodes x
dp_shard WORLD_SIZE/nodes: replicated across the nodes, sharded within one; each replica's chunks
are the same) or fsdp (dp_shard WORLD_SIZE: every rank holds other chunks). Each rep, all ranks
at once (a barrier before each): one single-threaded memcpy (ctypes memmove) of the rank's
state into an already-faulted buffer; dcp.async_save into reft
(reft.torch.dcp.Writer, step = rep + 1, and the zero-copy Writer on a job of its own);
dcp.async_save with DCP's FileSystemWriter into --shm-dir. The order of the saves alternates
between reps. Then one FileSystemWriter save to --disk-dir (the load's reference). Every writer
runs with its defaults; every save gets a gloo group of its own (process_group=), as a trainer
passes one so DCP's background collectives never share a communicator with the training's.
With --metrics-ports, rank 0 reads each reftd's reft_peer_copy_bytes_total before and after
each reft save: the bytes the save's ring copies read on a node and pulled from other nodes.

--mode load: the same global state on a 1-D dp_shard mesh of WORLD_SIZE ranks (DCP reshards):
dcp.load from reft (the newest committed step), from --disk-dir with its pages evicted first,
and again warm. Every load is checked against the saved pattern.

Rank 0 prints one JSON line: every measurement, a list over ranks per rep.
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.tensor as dt
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

import reft.torch.dcp as reft_dcp

TENSORS = 4   # the state: 4 fp32 tensors (like a parameter and its optimizer moments)
COLS = 1024   # 4 KiB rows


def global_shape(size, shards):
    rows = size // (TENSORS * COLS * 4)
    return (rows * shards, COLS)


def pattern(i, shape, offset):
    """Tensor i's values at rows [offset[0], offset[0] + shape[0]): exact in fp32."""
    start = offset[0] * COLS
    idx = torch.arange(start, start + shape[0] * COLS, dtype=torch.int64)
    return ((idx * 3 + i) % (1 << 24)).to(torch.float32).view(shape)


def make_state(mesh, placements, gshape, fill):
    state = {"step": 0}
    for i in range(TENSORS):
        t = dt.zeros(gshape, device_mesh=mesh, placements=placements)
        if fill:
            shape, offset = compute_local_shape_and_global_offset(gshape, mesh, placements)
            t.to_local().copy_(pattern(i, shape, offset))
        state["t%d" % i] = t
    return state


def check(state, mesh, placements, gshape, what):
    shape, offset = compute_local_shape_and_global_offset(gshape, mesh, placements)
    for i in range(TENSORS):
        local = state["t%d" % i].to_local()
        if not torch.equal(local, pattern(i, shape, offset)):
            raise SystemExit("rank %d: %s loaded wrong bytes in t%d" % (dist.get_rank(), what, i))
        local.zero_()


def timed(fn):
    dist.barrier()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def memcpy_state(state, dsts):
    for i in range(TENSORS):
        src = state["t%d" % i].to_local()
        ctypes.memmove(dsts[i].data_ptr(), src.data_ptr(), src.numel() * 4)


def loopback_bytes():
    """Bytes sent on the loopback interface so far, machine-wide (every process on it)."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])
    return 0


def peer_copy_bytes(ports):
    """[(local, remote)] of reft_peer_copy_bytes_total, one per reftd (its metrics port)."""
    out = []
    for port in ports:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            text = r.read().decode()
        got = dict(re.findall(r'^reft_peer_copy_bytes_total\{source="(local|remote)"\} (\S+)$',
                              text, re.M))
        out.append((int(float(got["local"])), int(float(got["remote"]))))
    return out


def async_save(state, writer, group, step=None, fence=None, ports=()):
    """(seconds blocked in dcp.async_save, seconds until its future is done, loopback bytes
    sent meanwhile as rank 0 sees them: an upper bound of the save's network traffic, and on
    rank 0 with `ports` the [local, remote] peer-copy bytes each reftd counted for the save)."""
    rank0 = dist.get_rank() == 0
    before = peer_copy_bytes(ports) if rank0 and ports else None
    dist.barrier()
    lo = loopback_bytes()
    t0 = time.perf_counter()
    fut = dcp.async_save(state, storage_writer=writer, checkpoint_id=step, process_group=group)
    blocked = time.perf_counter() - t0
    if fence is not None:
        fence()  # zero copy: the trainer fences before it modifies the state
    # On rank 0, the coordinator: once every rank's part is written / committed job-wide (for
    # reft, after every rank's ring copy: a rank's step is sealed only once its copy is made).
    fut.result()
    done = time.perf_counter() - t0
    lo = (loopback_bytes() - lo) if rank0 else 0
    copies = None
    if before is not None:
        copies = [[a - b for a, b in zip(after, was)]
                  for after, was in zip(peer_copy_bytes(ports), before)]
    return blocked, done, lo, copies


def instrument(reader):
    """Times the Reader's metadata read and its byte-range reads (read_saved) on this rank,
    wrapping the instance's methods (reft.torch.dcp itself is unchanged)."""
    spent = {"read_metadata_s": 0.0, "read_saved_s": 0.0, "read_saved_bytes": 0}

    def wrap(fn, key):
        def timed_fn(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            spent[key] += time.perf_counter() - t0
            if key == "read_saved_s":
                spent["read_saved_bytes"] += sum(len(b) for b in out)
            return out
        return timed_fn

    reader.read_metadata = wrap(reader.read_metadata, "read_metadata_s")
    reader._read = wrap(reader._read, "read_saved_s")
    return spent


def gather(value):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def evict(root):
    """Drops the checkpoint's pages from the page cache; returns the bytes still resident."""
    files = []
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            files.append(path)
    res = subprocess.run(["fincore", "-b", "-n", "-o", "RES"] + files, capture_output=True,
                         text=True)
    return sum(int(x) for x in res.stdout.split()) if res.returncode == 0 else None


def save_mesh(kind, nodes):
    """(mesh, placements) of the saving job: HSDP (a replica per node) or pure FSDP over every
    rank."""
    world = dist.get_world_size()
    if kind == "hsdp":
        return (init_device_mesh("cpu", (nodes, world // nodes),
                                 mesh_dim_names=("dp_replicate", "dp_shard")),
                [Replicate(), Shard(0)])
    return init_device_mesh("cpu", (world,), mesh_dim_names=("dp_shard",)), [Shard(0)]


def save(args, client_for):
    mesh, placements = save_mesh(args.mesh, args.nodes)
    gshape = global_shape(args.size, mesh.size(mesh.ndim - 1))
    group = dist.new_group(backend="gloo")  # DCP's collectives: a group of their own
    ports = [int(p) for p in args.metrics_ports.split(",")] if args.metrics_ports else ()
    state = make_state(mesh, placements, gshape, fill=True)
    dsts = [torch.ones_like(state["t%d" % i].to_local()) for i in range(TENSORS)]  # faulted in
    writer = reft_dcp.Writer(client_for(mesh))
    # Writer(zero_copy=True) on a job of its own: one rank has one session per job.
    zero_copy = reft_dcp.Writer(client_for(mesh, "-zc"), zero_copy=True)
    out = {"memcpy": [], "reft": [], "reft_zero_copy": [], "fs_shm": [], "gshape": list(gshape),
           "local_bytes": gather(sum(state["t%d" % i].to_local().numel() * 4
                                     for i in range(TENSORS)))}
    for rep in range(args.reps):
        state["step"] = rep + 1
        fs_dir = os.path.join(args.shm_dir, "rep%d" % rep)  # a directory per checkpoint
        out["memcpy"].append(gather(timed(lambda: memcpy_state(state, dsts))[0]))
        runs = [("reft", lambda: async_save(state, writer, group, rep + 1, ports=ports)),
                ("reft_zero_copy", lambda: async_save(state, zero_copy, group, rep + 1,
                                                      fence=zero_copy.fence, ports=ports)),
                ("fs_shm", lambda: async_save(state, dcp.FileSystemWriter(fs_dir), group))]
        for name, fn in (runs if rep % 2 == 0 else runs[::-1]):
            out[name].append(gather(fn()))
        dist.barrier()
        if dist.get_rank() == 0:  # the previous checkpoint's retention, outside the timing
            shutil.rmtree(fs_dir)
    out["fs_disk"] = [gather(async_save(state, dcp.FileSystemWriter(args.disk_dir), group))]
    out["reft_step"] = args.reps
    return out


def load(args, client_for):
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp_shard",))
    placements = [Shard(0)]
    gshape = tuple(args.gshape)
    state = make_state(mesh, placements, gshape, fill=False)
    out = {"local_bytes": gather(sum(state["t%d" % i].to_local().numel() * 4
                                     for i in range(TENSORS)))}
    client = client_for(mesh)
    reader = reft_dcp.Reader(client)
    spent = instrument(reader)
    out["reft"] = [gather(timed(lambda: dcp.load(state, storage_reader=reader))[0])]
    out["reft_parts"] = gather(spent)
    if state["step"] != args.step:
        raise SystemExit("reft loaded step %r, saved %d" % (state["step"], args.step))
    check(state, mesh, placements, gshape, "reft")
    out["reft_source"] = client.last_restore["source"] if client.last_restore else None
    client.close()
    dist.barrier()
    if dist.get_rank() == 0:
        out["fs_resident_after_evict"] = evict(args.disk_dir)
    out["fs_disk_cold"] = [gather(timed(lambda: dcp.load(
        state, storage_reader=dcp.FileSystemReader(args.disk_dir)))[0])]
    check(state, mesh, placements, gshape, "FileSystemReader (cold)")
    out["fs_disk_warm"] = [gather(timed(lambda: dcp.load(
        state, storage_reader=dcp.FileSystemReader(args.disk_dir)))[0])]
    check(state, mesh, placements, gshape, "FileSystemReader (warm)")
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("save", "load"), required=True)
    p.add_argument("--socket", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--protection", default="none")
    p.add_argument("--mesh", choices=("hsdp", "fsdp"), default="hsdp", help="the save's mesh")
    p.add_argument("--nodes", type=int, default=2, help="nodes of the save (hsdp: replicas)")
    p.add_argument("--metrics-ports", help="each reftd's metrics port, comma-separated (save)")
    p.add_argument("--size", type=int, help="bytes of state per rank (save)")
    p.add_argument("--gshape", type=int, nargs=2, help="global shape of each tensor (load)")
    p.add_argument("--step", type=int, help="the step the load must find")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--shm-dir")
    p.add_argument("--disk-dir", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")

    def client_for(mesh, job_suffix=""):
        return reft_dcp.client_for(mesh, args.socket, args.job + job_suffix, args.protection)

    out = (save if args.mode == "save" else load)(args, client_for)
    if dist.get_rank() == 0:
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
