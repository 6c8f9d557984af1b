"""Time the trainer's thread spends in reft.torch.Checkpointer.snapshot() per step.

An AdamW job whose optimizer state (exp_avg + exp_avg_sq, fp32) is >= 2 GiB: a 350M-parameter
model scaled to fit this machine (--params, default 272M parameters: 2.03 GiB of state, 1 GiB
of parameters). Each step: fence(), optimizer.step() (gradients preset, no forward/backward:
the figure is about snapshot()), then the timed snapshot(step); wait_committed(step) runs
outside the timing, so one step's copy never overlaps the next step's snapshot() call.

Two variants, each against a fresh real reftd (tools/localcluster):
- gather: reft.torch before the zero-copy state (kept below as GatherCheckpointer, the
  reference): every snapshot() waits for the previous copy and gathers the optimizer state
  into registered flat buffers on the trainer's thread;
- zero_copy: reft.torch.Checkpointer, whose state tensors are views of the registered buffers.
The same run measures one single-threaded memcpy (libc, through ctypes) of the optimizer
state's bytes between two already-faulted buffers: the cost of copying the state once.

Prints one JSON line per variant and one for the memcpy: the wall time in snapshot() and the
CPU time of the trainer's thread in it (time.thread_time: on a loaded machine the wall time
also holds the time the thread waited for a core). Target: zero_copy < 1 ms.
usage: checkpointer_bench.py [--params 272M] [--steps 5] [--build-dir build]
"""
import argparse
import ctypes
import gc
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "localcluster"))


def parse_count(text):
    mult = {"K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9}
    return int(float(text[:-1]) * mult[text[-1]]) if text[-1] in mult else int(text)


class GatherCheckpointer:
    """reft.torch.Checkpointer as it was before the zero-copy optimizer state (the reference
    for this figure): the state is flattened into one registered tensor per dtype, refreshed by
    a gather in every snapshot()."""

    def __init__(self, client, model, optimizer):
        import torch
        self.client, self.optimizer, self.torch = client, optimizer, torch
        for name, p in model.named_parameters():
            client.register("param/" + name, p.data)
        self._slices, sizes = [], {}
        for key, t in self._state_tensors():
            off = sizes.get(t.dtype, 0)
            self._slices.append((key, t.dtype, off, t.numel()))
            sizes[t.dtype] = off + t.numel()
        self._flat = {dt: torch.zeros(max(n, 1), dtype=dt) for dt, n in sizes.items()}
        for dt, flat in self._flat.items():
            client.register("optim/" + str(dt).replace("torch.", ""), flat)

    def _state_tensors(self):
        index = {id(p): (gi, pi) for gi, g in enumerate(self.optimizer.param_groups)
                 for pi, p in enumerate(g["params"])}
        out = [((*index[id(p)], k), v) for p, st in self.optimizer.state.items()
               for k, v in sorted(st.items()) if isinstance(v, self.torch.Tensor)]
        return sorted(out, key=lambda kv: kv[0])

    def snapshot(self, step):
        self.client.fence()
        live = dict(self._state_tensors())
        with self.torch.no_grad():
            for key, dt, off, n in self._slices:
                self._flat[dt][off:off + n].copy_(live[key].reshape(-1))
        self.client.snapshot(step)

    def fence(self):
        self.client.fence()


def build_job(params, torch):
    """A stack of square fp32 layers holding `params` parameters, gradients preset."""
    width = 4096
    rows = [width] * (params // (width * width)) + [params % (width * width) // width]
    layers = [torch.nn.Parameter(torch.zeros(r, width)) for r in rows if r > 0]
    for i, p in enumerate(layers):
        p.data.normal_(generator=torch.Generator().manual_seed(i))
        p.grad = torch.full_like(p, 1e-3)
    model = torch.nn.ParameterList(layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    return model, opt


def run_variant(name, args, reft, rt, torch, LocalCluster):
    model, opt = build_job(args.params, torch)
    with LocalCluster(nodes=1, build_dir=args.build_dir) as cluster:
        node = cluster.nodes[0]
        with reft.Client(socket=node.socket, job="bench-" + name, timeout=600.0) as c:
            if name == "gather":
                opt.step()  # the gather layout is read from existing state
                ckpt = GatherCheckpointer(c, model, opt)
            else:
                ckpt = rt.Checkpointer(c, model, opt)
            times, cpu = [], []
            for step in range(1, args.steps + 1):
                ckpt.fence()
                opt.step()
                c0, t0 = time.thread_time(), time.perf_counter()
                ckpt.snapshot(step)
                times.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
                assert c.wait_committed(step, timeout=600)
            state_bytes = sum(v.numel() * v.element_size() for st in opt.state.values()
                              for v in st.values() if isinstance(v, torch.Tensor))
            flat = None
            if name == "zero_copy":
                flat = max(ckpt.optimizer_buffers.values(), key=lambda t: t.numel())
    result = {"bench": "checkpointer_snapshot", "variant": name, "params": args.params,
              "state_bytes": state_bytes, "steps": args.steps,
              "snapshot_ms_median": 1e3 * statistics.median(times),
              "snapshot_ms_max": 1e3 * max(times), "snapshot_ms": [1e3 * t for t in times],
              "snapshot_cpu_ms_median": 1e3 * statistics.median(cpu),
              "snapshot_cpu_ms_max": 1e3 * max(cpu), "load_average": os.getloadavg()[0]}
    return result, flat


def memcpy_ms(src, reps=3):
    """Median of `reps` single-threaded libc memcpy of `src`'s bytes into a faulted buffer."""
    import torch
    n = src.numel() * src.element_size()
    dst = torch.empty(n, dtype=torch.uint8)
    ctypes.memmove(dst.data_ptr(), src.data_ptr(), n)  # fault the destination in
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), n)
        out.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(out), n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=parse_count, default=parse_count("272M"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--build-dir", default=os.environ.get("REFT_BUILD_DIR",
                                                          os.path.join(ROOT, "build")))
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    sys.path.insert(0, os.path.join(args.build_dir, "client", "python"))
    import torch
    import reft
    import reft.torch as rt
    from reft_cluster import LocalCluster
    torch.set_num_threads(os.cpu_count() or 1)
    results = []
    for name in ("gather", "zero_copy"):
        result, flat = run_variant(name, args, reft, rt, torch, LocalCluster)
        results.append(result)
        if flat is not None:
            # The reference in the same run: one memcpy of the optimizer state's bytes (the
            # exp_avg/exp_avg_sq flat; the CPU step counters are a few bytes).
            ms, n = memcpy_ms(flat)
            results.append({"bench": "checkpointer_snapshot", "variant": "memcpy",
                            "bytes": n, "ms_median": ms, "gib_s": n / (1 << 30) / (ms / 1e3)})
        del flat
        gc.collect()
    copy = next(r for r in results if r["variant"] == "memcpy")["ms_median"]
    for r in results:
        if "snapshot_ms_median" in r:
            r["ratio_vs_memcpy"] = r["snapshot_ms_median"] / copy
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
