#!/usr/bin/python3
"""B3: HAS on one pipeline stage emulated on a real device. Compute is a GEMM loop; the idle
windows of one 1F1B stage are host-side gaps (the device is synchronized and idle while the
host sleeps, as when a stage blocks on a peer). The "parameters" (--gib, device memory) are
registered with a real reftd and snapshotted every iteration in four modes:

  none         no snapshot (the reference iteration time)
  blocking     snapshot(), then fence() at once: the copy is on the critical path
  naive_async  snapshot() at iteration start, fence() before the optimizer, no hints
  has          as naive_async, plus enable_has() and bubble_begin()/bubble_end() around the gaps

Overhead = median iteration time / `none` - 1 (after --warmup iterations that fill
every slot reftd rotates through), same process, same device, one fresh reftd per
mode (production defaults). Prints one JSON line per (size, mode). Runs on CPU (--device cpu)
to check the harness; the figure is the device run's.

  REFT_BUILD_DIR=build python3 tools/bench/gpu/has_gemm.py --gib 2 8
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))

import torch  # noqa: E402

import reft  # noqa: E402
from reft_cluster import LocalCluster  # noqa: E402

MODES = ("none", "blocking", "naive_async", "has")


class Stage:
    """One stage of an S-stage 1F1B pipeline: GEMM bursts of `f`/`b` seconds per micro-batch,
    idle stage*f before the first forward and the rest of the (S-1)(f+b) bubble after the last
    backward."""

    def __init__(self, device, stages, stage, micro_batches, f, b, n):
        self.device, self.stages, self.stage, self.m = device, stages, stage, micro_batches
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        self.a = torch.randn(n, n, device=device, dtype=dtype)
        self.w = torch.randn(n, n, device=device, dtype=dtype)
        self.c = torch.empty(n, n, device=device, dtype=dtype)
        per = self._time_one_gemm()
        self.f_gemms = max(1, round(f / per))
        self.b_gemms = max(1, round(b / per))
        self.f, self.b = self.f_gemms * per, self.b_gemms * per
        self.idle_start = stage * self.f
        self.idle_end = (stages - 1) * (self.f + self.b) - self.idle_start

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _time_one_gemm(self):
        self._compute(3)
        t0, k = time.perf_counter(), 20
        self._compute(k)
        return (time.perf_counter() - t0) / k

    def _compute(self, gemms):
        for _ in range(gemms):
            torch.mm(self.a, self.w, out=self.c)
        self._sync()

    def _idle(self, seconds, bubbles):
        if seconds <= 0:
            return
        if bubbles:
            bubbles.bubble_begin()
        time.sleep(seconds)
        if bubbles:
            bubbles.bubble_end()

    def iteration(self, bubbles=None):
        self._idle(self.idle_start, bubbles)
        for _ in range(self.m):
            self._compute(self.f_gemms)
            self._compute(self.b_gemms)
        self._idle(self.idle_end, bubbles)


def run_mode(args, stage, params, mode):
    """The measured iterations' times and the longest fence wait of `mode`."""
    cluster = client = None
    if mode != "none":
        cluster = LocalCluster(nodes=1, etcd=0, log_level="warn").__enter__()
        client = reft.Client(socket=cluster.nodes[0].socket, job="has-" + mode, pp=0, tp=0,
                             dp=0, layout=reft.Layout(dp=1, tp=1, pp=1, zero=0),
                             protection="none")
        for i, p in enumerate(params):
            client.register("param%d" % i, p)
        if mode == "has":
            client.enable_has(args.stages, args.stage, args.micro_batches, stage.f, stage.b)
    try:
        times, fence_max = [], 0.0
        for it in range(args.warmup + args.iterations):
            t0 = time.perf_counter()
            if client is not None:
                client.snapshot(it + 1)
                if mode == "blocking":
                    tf = time.perf_counter()
                    client.fence()
                    fence_max = max(fence_max, time.perf_counter() - tf)
            stage.iteration(client if mode == "has" else None)
            if mode in ("naive_async", "has"):
                tf = time.perf_counter()
                client.fence()  # the optimizer is about to change the parameters
                fence_max = max(fence_max, time.perf_counter() - tf)
            for p in params:  # the optimizer step changes the state
                p[:1].add_(1)
            stage._sync()
            if it >= args.warmup:
                times.append(time.perf_counter() - t0)
        if client is not None:
            assert client.wait_committed(args.warmup + args.iterations, timeout=120)
        return times, fence_max
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.__exit__(None, None, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gib", type=float, nargs="+", default=[2.0])
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--stage", type=int, default=1)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--forward-ms", type=float, default=20.0)
    ap.add_argument("--backward-ms", type=float, default=40.0)
    ap.add_argument("--gemm-n", type=int, default=8192)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()
    device = torch.device(args.device)
    stage = Stage(device, args.stages, args.stage, args.micro_batches, args.forward_ms / 1e3,
                  args.backward_ms / 1e3, args.gemm_n)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    for gib in args.gib:
        shm = os.statvfs("/dev/shm")
        if gib * 2.2 * (1 << 30) > shm.f_bavail * shm.f_frsize:  # two slots per buffer + room
            print(json.dumps({"bench": "has_gemm_stage", "device": name, "gib": gib,
                              "skipped": "/dev/shm has %.1f GiB free" %
                              (shm.f_bavail * shm.f_frsize / (1 << 30))}), flush=True)
            continue
        chunk = 1 << 30
        total = int(gib * (1 << 30))
        params = [torch.zeros(min(chunk, total - o) // 4, device=device)
                  for o in range(0, total, chunk)]
        base = None
        for mode in args.modes.split(","):
            times, fence_max = run_mode(args, stage, params, mode)
            t_iter = statistics.median(times)
            base = t_iter if mode == "none" else base
            print(json.dumps({
                "bench": "has_gemm_stage", "device": name, "gib": gib, "mode": mode,
                "stages": args.stages, "stage": args.stage,
                "micro_batches": args.micro_batches, "f_ms": round(stage.f * 1e3, 2),
                "b_ms": round(stage.b * 1e3, 2),
                "bubble_ms": round((stage.idle_start + stage.idle_end) * 1e3, 1),
                "t_iter_ms": round(t_iter * 1e3, 2),
                "iterations_ms": [round(t * 1e3, 1) for t in times],
                "max_fence_wait_ms": round(fence_max * 1e3, 2),
                "overhead_vs_none": None if base is None else round(t_iter / base - 1, 4)}),
                flush=True)
        del params
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
