#!/usr/bin/python3
"""AOR replay vs torch.optim.AdamW (docs/protection.md "AOR": compared with the training optimizer).

For each gradient dtype (fp32, fp16 with dynamic loss scaling, bf16) this script runs a small
mixed-precision training loop the way a PyTorch trainer does it:

  grad = raw_grad.float(); grad.mul_(inv_scale)            # GradScaler.unscale_
  clip = clamp(max_norm / (||grad|| + 1e-6), max=1)        # clip_grad_norm_ (fp32 tensor)
  grad.mul_(clip); param_groups[0]["lr"] = schedule(it); optimizer.step()
  overflow (non-finite gradient) -> no optimizer.step(), scale halves

with torch.optim.AdamW(foreach=False) on CPU, records what a trainer would send to reftd
(the 80-byte hyper-parameter record of hyper_codec.h and the raw gradient) into a trace, runs
reft_aor_replay on it, and compares the replayed fp32 state with torch's.

The records declare the owner's form (docs/protection.md "What is exact"): torch 1.x updates the
first moment by mul_+add_, and ATen's AVX2/AVX-512 kernels fuse its multiply-adds (add_ with
alpha, addcmul_) in vector bodies and tails alike, its portable ones (ATEN_CPU_CAPABILITY=default)
do not. --form auto (default) declares what the torch at hand runs (torch.__config__'s "CPU
capability usage").

--expect exact (both ctest entries: ATEN_CPU_CAPABILITY=default, and the CPU's own kernels):
  the replay must equal torch bit for bit for every dtype. A negative control then perturbs one
  lr in the trace by 2^-20 relative and requires the replay to differ, so the comparison can fail.

--expect tolerance (by hand, e.g. with --form plain on AVX2 kernels: the form the records
  declared before the fma flag existed): within TOLERANCE, the last-ulp drift a wrong rounding
  form accumulates. The bounds were measured with this script (docs/protection.md, "AOR") and
  carry a margin of about 3x; a wrong formula is off by orders of magnitude more (no bias
  correction of v, no clipping or no weight decay: param off by 1.2e-3 to 2e-2 of its scale,
  measured by breaking the kernel on purpose).

torch >= 2.0 lerps the first moment and takes MKL's sqrt in this path: skipped (77) there;
tests/python/test_client.py covers torch 2.x through the probe of reft.OptimizerStep.

Exit status: 0 pass, 1 fail, 77 skipped (no torch / numpy in this interpreter).
"""
import argparse
import json
import math
import os
import platform
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # the first python3 on PATH may lack torch; /usr/bin/python3 has it
    print(f"SKIP: {e}")
    sys.exit(77)

# Bounds for --expect tolerance (docs/protection.md "AOR"), as max |ours - torch| divided by
# max |torch| of the same array ("abs_over_scale"), and for parameters with |torch| >= 1e-3 the
# max elementwise relative difference ("rel"). Largest values measured over 12 runs (seeds
# 1234, 1, 2, 3 x fp32/fp16/bf16, 500 steps, n = 32771; and seed 9, 2000 steps, n = 8191):
# param 1.35e-7 / 1.07e-5, exp_avg 3.06e-7, exp_avg_sq 2.11e-7.
TOLERANCE = {
    "param": {"abs_over_scale": 5e-7, "rel": 5e-5},
    "exp_avg": {"abs_over_scale": 1e-6, "rel": None},
    "exp_avg_sq": {"abs_over_scale": 1e-6, "rel": None},
}

DTYPES = {"fp32": (0, torch.float32), "fp16": (1, torch.float16), "bf16": (2, torch.bfloat16)}


def lr_at(it, total, peak=1e-3, floor=1e-4, warmup=50):
    if it <= warmup:
        return peak * it / warmup
    t = min(1.0, (it - warmup) / (total - warmup))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * t))


FMA = 0x04  # hyper_codec.h flag bit 2: the owner's kernels fuse multiply-adds


def hyper_record(iteration, step, lr, beta1, beta2, eps, wd, clip, grad_scale, skipped,
                 form_flags=0):
    return struct.pack("<BBBBIQQ7d", 1, (1 if skipped else 0) | form_flags, 0, 0, 0, iteration,
                       step, lr, beta1, beta2, eps, wd, clip, grad_scale)


def aten_fuses():
    """Whether ATen's CPU kernels this torch runs are its AVX2/AVX-512 ones, which fuse
    multiply-adds (docs/protection.md "What is exact"); its portable ones do not."""
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage:" in line:
            return line.split(":", 1)[1].strip().upper() not in ("NO AVX", "DEFAULT")
    return os.environ.get("ATEN_CPU_CAPABILITY", "") not in ("", "default")


def run_torch(dtype_name, n, steps, seed, trace_path, form_flags=0):
    """Trains with torch, writes the trace; returns torch's final (param, exp_avg, exp_avg_sq)."""
    code, tdtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(seed)
    p0 = torch.randn(n, generator=gen) * 0.5
    param = torch.nn.Parameter(p0.clone())
    beta1, beta2, eps = 0.9, 0.95, 1e-8
    opt = torch.optim.AdamW([param], lr=0.0, betas=(beta1, beta2), eps=eps, weight_decay=0.1,
                            foreach=False)
    max_norm = 0.05 * math.sqrt(n)
    scale, good, skipped_count = 65536.0, 0, 0
    with open(trace_path, "wb") as f:
        f.write(b"REFTAORT" + bytes([code]) + bytes(7))
        f.write(struct.pack("<QQQQ", n, steps, 0, 0))
        f.write(p0.numpy().astype("<f4").tobytes())
        f.write(bytes(8 * n))  # exp_avg and exp_avg_sq start at zero, as in torch
        for it in range(1, steps + 1):
            lr = lr_at(it, steps)
            wd = 0.1 if it <= steps // 3 else 0.05
            sigma = 10.0 ** float(torch.empty(1).uniform_(-4.0, 0.5, generator=gen))
            g = torch.randn(n, generator=gen) * sigma
            g[:: 101] *= 1e-6  # subnormal territory for fp16 / bf16
            if dtype_name == "fp16":
                raw = (g * scale).to(torch.float16)
                overflow = not bool(torch.isfinite(raw).all())
                inv_scale = torch.tensor(1.0 / scale, dtype=torch.float32)
            else:
                raw = g.to(tdtype)
                overflow = float(torch.rand(1, generator=gen)) < 0.02
                if overflow:
                    raw[int(torch.randint(n, (1,), generator=gen))] = float("nan")
                inv_scale = torch.tensor(1.0, dtype=torch.float32)
            # The bytes the trainer hands over, taken before anything below touches them
            # (for fp32, .to()/.float() return the same tensor, not a copy).
            raw_bytes = raw.view(torch.int16 if tdtype != torch.float32 else torch.int32) \
                .numpy().tobytes()
            step_before = int(opt.state[param]["step"].item()) if opt.state[param] else 0
            if overflow:
                skipped_count += 1
                f.write(hyper_record(it, step_before, lr, beta1, beta2, eps, wd, float("nan"),
                                     float(inv_scale), True, form_flags))
                f.write(raw_bytes)
                if dtype_name == "fp16":
                    scale, good = max(1.0, scale / 2), 0
                continue
            grad = raw.float().clone()
            grad.mul_(inv_scale)  # GradScaler.unscale_
            total_norm = torch.linalg.vector_norm(grad, 2)
            clip = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)  # clip_grad_norm_
            grad.mul_(clip)
            param.grad = grad
            opt.param_groups[0]["lr"] = lr
            opt.param_groups[0]["weight_decay"] = wd
            opt.step()
            step = int(opt.state[param]["step"].item())
            assert step == step_before + 1
            f.write(hyper_record(it, step, lr, beta1, beta2, eps, wd, float(clip),
                                 float(inv_scale), False, form_flags))
            f.write(raw_bytes)
            if dtype_name == "fp16":
                good += 1
                if good % 50 == 0:
                    scale = min(65536.0, scale * 2)
    st = opt.state[param]
    return (param.detach().numpy().copy(), st["exp_avg"].numpy().copy(),
            st["exp_avg_sq"].numpy().copy(), int(st["step"].item()), skipped_count,
            float((param.detach() - p0).abs().max()))


def compare(ours, theirs):
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    scale = float(np.abs(theirs).max())
    big = np.abs(theirs) >= 1e-3
    rel = float((diff[big] / np.abs(theirs[big]).astype(np.float64)).max()) if big.any() else 0.0
    return {"max_abs": float(diff.max()), "abs_over_scale": float(diff.max()) / scale,
            "rel": rel, "differing": int((diff > 0).sum()), "exact": bool((diff == 0).all())}


def perturb_lr(trace, n, esize, steps, factor):
    """Copy of `trace` with the lr of the first non-skipped record from the middle on scaled."""
    data = bytearray(open(trace, "rb").read())
    rec = 80 + n * esize
    for k in range(steps // 2, steps):
        off = 48 + 12 * n + k * rec
        if data[off + 1] & 1:
            continue
        (lr,) = struct.unpack_from("<d", data, off + 24)
        struct.pack_into("<d", data, off + 24, lr * factor)
        out = trace + ".perturbed"
        open(out, "wb").write(bytes(data))
        return out
    raise RuntimeError("no non-skipped record to perturb")


def replay(binary, trace, out, n):
    res = subprocess.run([binary, "--threads", "2", "--chunks", "3", trace, out],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"reft_aor_replay failed ({res.returncode}): {res.stderr}")
    state = np.fromfile(out, dtype="<f4")
    return json.loads(res.stdout), {"param": state[:n], "exp_avg": state[n:2 * n],
                                    "exp_avg_sq": state[2 * n:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--replay", required=True)
    ap.add_argument("--expect", choices=["exact", "tolerance"], default="tolerance")
    ap.add_argument("--n", type=int, default=32771)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtypes", default="fp32,fp16,bf16")
    # The replay form declared in the records: "auto" = fused multiply-adds where ATen runs its
    # AVX2/AVX-512 kernels (what reft.OptimizerStep's probe finds for torch 1.x), "plain" = none.
    ap.add_argument("--form", choices=["auto", "plain", "fma"], default="auto")
    args = ap.parse_args()
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "native")
    if int(torch.__version__.split(".")[0]) >= 2:
        # torch >= 2.0 lerps the first moment and takes MKL's sqrt: tests/python covers it.
        print(f"SKIP: this comparison replays torch 1.x's AdamW, not torch {torch.__version__}")
        return 77
    if args.expect == "exact" and platform.machine() not in ("x86_64", "AMD64"):
        print(f"SKIP: bit-exact comparison is defined for x86-64, not {platform.machine()}")
        return 77
    fuses = {"auto": aten_fuses(), "plain": False, "fma": True}[args.form]
    form_flags = FMA if fuses else 0
    torch.set_num_threads(1)  # shared build machines; results do not depend on it
    failed = False
    n = args.n
    with tempfile.TemporaryDirectory(prefix="reft-aor-") as tmp:
        for name in args.dtypes.split(","):
            trace, out = os.path.join(tmp, "trace.bin"), os.path.join(tmp, "out.bin")
            tp, tm, tv, tstep, skipped, moved = run_torch(name, n, args.steps, args.seed, trace,
                                                          form_flags)
            counters, ours = replay(args.replay, trace, out, n)
            theirs = {"param": tp, "exp_avg": tm, "exp_avg_sq": tv}
            line = {"dtype": name, "aten_cpu_capability": capability, "fma": fuses,
                    "expect": args.expect,
                    "n": n, "steps": args.steps, "skipped": skipped, "torch_step": tstep,
                    "replay_step": counters["step"], "param_moved": moved}
            ok = counters["step"] == tstep and counters["iteration"] == args.steps
            ok &= skipped > 0 and moved > 0.01  # the run exercised skips and moved the weights
            for key, bound in TOLERANCE.items():
                c = compare(ours[key], theirs[key])
                line[key] = c
                if args.expect == "exact":
                    ok &= c["exact"]
                else:
                    ok &= c["abs_over_scale"] <= bound["abs_over_scale"]
                    if bound["rel"] is not None:
                        ok &= c["rel"] <= bound["rel"]
            if args.expect == "exact":
                # Negative control: one lr off by 2^-20 relative must show.
                esize = 4 if name == "fp32" else 2
                bad = perturb_lr(trace, n, esize, args.steps, 1.0 + 2.0 ** -20)
                _, perturbed = replay(args.replay, bad, out, n)
                control = not np.array_equal(perturbed["param"], theirs["param"])
                line["negative_control_differs"] = control
                ok &= control
            line["pass"] = bool(ok)
            print(json.dumps(line))
            failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
