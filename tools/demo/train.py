"""Sample trainer for the reft demo: a small torch model trained with AdamW, snapshotting
every step through reftd, restoring after a crash.

Every step it records a digest of the full training state (parameters, buffers, optimizer
state) in --record-dir, so a restarted trainer can prove that what it restored is bit for bit
what was saved at that step. Prints one line per event on stdout (the orchestrator reads it):
  restored <step> <ok|MISMATCH|fresh>
  committed <step>
  done <step>
"""
import argparse
import hashlib
import os
import sys
import time

import torch

import reft
import reft.torch


def state_digest(model, optimizer):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    for group_state in sorted(optimizer.state_dict()["state"].items()):
        pid, st = group_state
        for k in sorted(st):
            v = st[k]
            h.update(f"{pid}/{k}".encode())
            h.update(v.detach().contiguous().numpy().tobytes() if torch.is_tensor(v)
                     else repr(v).encode())
    return h.hexdigest()


def build(seed, width):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.GELU(),
                                torch.nn.LayerNorm(width), torch.nn.Linear(width, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    # One zero step so the optimizer state exists and its layout is fixed before registering.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def batch(step):
    g = torch.Generator().manual_seed(10_000 + step)
    x = torch.randn(32, 64, generator=g)
    return x, torch.roll(x, 1, dims=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--job", default="demo")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--record-dir", required=True)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    args = ap.parse_args()
    os.makedirs(args.record_dir, exist_ok=True)

    model, optimizer = build(0, args.width)
    client = reft.Client(socket=args.socket, job=args.job, pp=0, tp=0, dp=0,
                         layout=reft.Layout(dp=1, tp=1, pp=1, zero=0), protection="none")
    ckpt = reft.torch.Checkpointer(client, model, optimizer)

    restored = ckpt.restore()
    if restored is None:
        print("restored -1 fresh", flush=True)
        start = 0
    else:
        with open(os.path.join(args.record_dir, f"{restored}.digest")) as f:
            expected = f.read().strip()
        ok = state_digest(model, optimizer) == expected
        print(f"restored {restored} {'ok' if ok else 'MISMATCH'}", flush=True)
        if not ok:
            return 1
        start = restored + 1

    loss_fn = torch.nn.MSELoss()
    for step in range(start, args.steps):
        x, y = batch(step)
        loss = loss_fn(model(x), y)
        loss.backward()
        ckpt.fence()  # the previous snapshot no longer reads the buffers
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        ckpt.snapshot(step)
        digest = state_digest(model, optimizer)
        tmp = os.path.join(args.record_dir, f".{step}.tmp")
        with open(tmp, "w") as f:
            f.write(digest)
        os.replace(tmp, os.path.join(args.record_dir, f"{step}.digest"))
        if step > start and client.wait_committed(step - 1, timeout=30):
            print(f"committed {step - 1}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    client.wait_committed(args.steps - 1, timeout=60)
    print(f"done {args.steps - 1}", flush=True)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
