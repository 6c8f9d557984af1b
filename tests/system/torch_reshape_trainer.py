"""reft.torch across a layout change: a small model with AdamW, registered by module names
(replicated across dp), trained under one dp and restored under another with reshape=True.

--train N: N steps (the same batches on every rank, as data parallelism with an all-reduce
would give), each snapshotted; rank 0 saves the model's and optimizer's state after the last
one to --reference. --restore: restores with reshape=True and prints one JSON line saying
whether the model and optimizer state equal the reference bit for bit, and the report.
"""
import argparse
import json
import sys

import torch

import reft
import reft.torch


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--dp", type=int, default=0)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--train", type=int, default=0)
    p.add_argument("--restore", action="store_true")
    p.add_argument("--reference", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    c = reft.Client(socket=args.socket, job=args.job, dp=args.dp,
                    layout=reft.Layout(dp=args.dp_size), protection="arc1" if args.dp_size > 1
                    else "none")
    ckpt = reft.torch.Checkpointer(c, model, opt)
    if args.train:
        for step in range(args.train):
            x, y = batch(step)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            ckpt.fence()
            opt.step()
            opt.zero_grad()
            ckpt.snapshot(step)
        ckpt.fence()
        assert c.wait_committed(args.train - 1, timeout=120)
        if args.dp == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, args.reference)
        print(json.dumps({"committed": args.train - 1}), flush=True)
        return 0
    step = ckpt.restore(reshape=True)
    ref = torch.load(args.reference)
    same_model = all(torch.equal(v, ref["model"][k]) for k, v in model.state_dict().items())
    mine, theirs = opt.state_dict()["state"], ref["opt"]["state"]
    same_opt = mine.keys() == theirs.keys() and all(
        torch.equal(torch.as_tensor(v), torch.as_tensor(theirs[i][k]))
        for i, st in mine.items() for k, v in st.items())
    # Training goes on from the restored state.
    x, y = batch(step + 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    print(json.dumps({"step": step, "model": same_model, "optimizer": same_opt,
                      "loss": float(loss), "report": c.last_restore}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
