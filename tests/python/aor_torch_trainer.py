#!/usr/bin/python3
"""A ZeRO-1 job (dp ranks in one process) whose optimizer is torch's Adam/AdamW, snapshotting
every step through the `reft` module under protection "aor".

Each rank owns a ZeRO-1 optimizer shard laid out the way reftd replays it: ONE flat float32
tensor of 3n elements, [fp32 master | exp_avg | exp_avg_sq]; the master slice is the
torch Parameter and the optimizer's exp_avg / exp_avg_sq state are views into the same tensor,
so torch updates the registered buffer in place. The gradient (the same on every rank, as after
an all-reduce) is registered with kind "gradient"; every iteration the trainer clips it with
clip_grad_norm_'s coefficient, steps (or skips, as on an fp16 overflow), and passes the
iteration's hyper-parameters with snapshot(step, optimizer=...).

OWNER: "torch" (default), "torch-foreach", "torch-fused": torch.optim.AdamW with those flags;
"adam-fused": torch.optim.Adam(fused=True) with L2 weight decay; "torch-bf16",
"torch-fused-bf16": AdamW over bf16 parameters (bf16 state and gradient: the registered
buffer is 3n bf16); "lerp-form": torch.optim's
single-tensor AdamW as written since torch 2.0 (exp_avg.lerp_), whatever torch runs it.
DECLARE is what the snapshots tell reftd about the owner's rounding: "auto" (default:
OptimizerStep.from_torch, which probes the owner's optimizer; for "lerp-form" the probe of
torch.optim.AdamW's default path, the same ops), "lerp" or "mul-add" (lerp_first_moment given,
no fused multiply-adds).

After training it prints one JSON line per rank: the AOR state reftd reports (aor_state()),
last_restore["aor"] after a restore of the last step, and the AorWarnings the client issued;
then "trained STEPS", and waits for stdin to close before it disconnects.

usage: aor_torch_trainer.py SOCKET DP STEPS [OWNER [DECLARE [unique|sharded]]]
"""
import json
import math
import sys
import warnings

import torch

import reft

OPTIMIZERS = {  # owner: (class, flags, parameter and state dtype)
    "torch": (torch.optim.AdamW, {"foreach": False}, torch.float32),
    "torch-foreach": (torch.optim.AdamW, {"foreach": True}, torch.float32),
    "torch-fused": (torch.optim.AdamW, {"fused": True}, torch.float32),
    "adam-fused": (torch.optim.Adam, {"fused": True}, torch.float32),
    "torch-bf16": (torch.optim.AdamW, {"foreach": False}, torch.bfloat16),
    "torch-fused-bf16": (torch.optim.AdamW, {"fused": True}, torch.bfloat16),
    "lerp-form": (torch.optim.AdamW, {"foreach": False}, torch.float32),
}


def adamw_step_lerp_form(param, grad, state, lr, beta1, beta2, eps, weight_decay):
    """torch.optim's _single_tensor_adam with decoupled weight decay, line by line as torch
    2.x writes it (exp_avg.lerp_, bias_correction2 ** 0.5)."""
    exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
    step_t += 1
    param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
    step = step_t.item()
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    bias_correction2_sqrt = bias_correction2 ** 0.5
    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


def hyper(owner, declare, opt, step, lr, beta1, beta2, eps, wd, clip, skipped):
    if declare == "auto" and owner != "lerp-form":
        return reft.OptimizerStep.from_torch(opt, clip_coef=clip, skipped=skipped)
    lerp = {"auto": None, "lerp": True, "mul-add": False}[declare]
    return reft.OptimizerStep(step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                              weight_decay=wd, clip_coef=clip, skipped=skipped,
                              lerp_first_moment=lerp)


def main():
    sock, dp, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    owner = sys.argv[4] if len(sys.argv) > 4 else "torch"
    declare = sys.argv[5] if len(sys.argv) > 5 else "auto"
    # "sharded": each shard declared as the rank's part of one global optimizer buffer.
    sharded = len(sys.argv) > 6 and sys.argv[6] == "sharded"
    n = 4109  # odd, and n mod 16 > 8: vector body and scalar tails of every width differ
    gen = torch.Generator().manual_seed(7)
    master0 = torch.randn(dp * n, generator=gen) * 0.5
    beta1, beta2, eps = 0.9, 0.95, 1e-8
    cls, flags, dtype = OPTIMIZERS[owner]
    ranks = []
    for d in range(dp):
        c = reft.Client(socket=sock, job="aor-torch", dp=d,
                        layout=reft.Layout(dp=dp, zero=1), protection="aor")
        flat = torch.zeros(3 * n, dtype=dtype)
        flat[:n].copy_(master0[d * n:(d + 1) * n])
        param = torch.nn.Parameter(flat[:n])  # shares flat's storage
        opt = cls([param], lr=0.0, betas=(beta1, beta2), eps=eps, weight_decay=0.1, **flags)
        opt.state[param] = {"step": torch.tensor(0.0), "exp_avg": flat[n:2 * n],
                            "exp_avg_sq": flat[2 * n:]}
        # The all-reduced gradient, in the parameters' dtype (torch's optimizers want that).
        grad = torch.zeros(dp * n, dtype=dtype)
        part = flat.numel() * flat.element_size()
        c.register("opt", flat, kind="unique", optimizer=True,
                   shard=(d * part, dp * part) if sharded else None)
        c.register("grad", grad, kind="gradient")
        ranks.append((c, flat, param, opt, grad))
    max_norm = 0.05 * math.sqrt(dp * n)
    caught = [[] for _ in range(dp)]
    for it in range(1, steps + 1):
        lr = 1e-3 * min(1.0, it / 4) * (0.5 + 0.5 * math.cos(math.pi * it / steps))
        wd = 0.1 if it <= steps // 2 else 0.05
        g = (torch.randn(dp * n, generator=gen) * (10.0 ** float(-3 + (it % 4)))).to(dtype)
        skipped = it % 9 == 0  # as if the loss scaler found an overflow
        total_norm = torch.linalg.vector_norm(g.float(), 2)
        clip = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)  # clip_grad_norm_
        for d, (c, flat, param, opt, grad) in enumerate(ranks):
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", reft.AorWarning)
                c.fence()  # the previous snapshot no longer reads the buffers
            caught[d] += [str(w.message) for w in seen if w.category is reft.AorWarning]
            grad.copy_(g)
            opt.param_groups[0]["lr"] = lr
            opt.param_groups[0]["weight_decay"] = wd
            if not skipped:
                own = g[d * n:(d + 1) * n].clone()
                own.mul_(clip)
                param.grad = own
                if owner != "lerp-form":
                    opt.step()
                else:
                    with torch.no_grad():
                        adamw_step_lerp_form(param, own, opt.state[param], lr, beta1, beta2,
                                             eps, wd)
            step = int(opt.state[param]["step"].item())
            hp = hyper(owner, declare, opt, step, lr, beta1, beta2, eps, wd, float(clip), skipped)
            if d == 0:
                c.snapshot(it, optimizer=hp)
            else:  # per-buffer form, fields as a dict
                c.snapshot(it, optimizer={"opt": dict(vars(hp))})
    for c, *_ in ranks:
        c.fence()
    for c, *_ in ranks:
        assert c.wait_committed(steps, timeout=30)
    for d, (c, *_) in enumerate(ranks):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always", reft.AorWarning)
            state = c.aor_state()
            assert c.restore() == steps
        caught[d] += [str(w.message) for w in seen if w.category is reft.AorWarning]
        print(json.dumps({"dp": d, "aor_state": state, "restore_aor": c.last_restore["aor"],
                          "warnings": caught[d]}), flush=True)
    # Keep the sessions (and the daemon's counters) until the test has looked at them.
    print("trained", steps, flush=True)
    sys.stdin.read()
    for c, *_ in ranks:
        c.close()


if __name__ == "__main__":
    main()
