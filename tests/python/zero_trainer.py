#!/usr/bin/python3
"""One rank of a ZeroRedundancyOptimizer (AdamW) job over gloo, checkpointed by reft.torch.

Phase 1 trains FIRST steps with a snapshot each, waits for the commit, then trains MORE steps
without snapshots: the uninterrupted reference. Phase 2 builds a fresh model (other initial
weights) and optimizer (no state), reconnects, restores, and trains the same MORE steps; the
parameters and this rank's optimizer shard must equal the reference bit for bit. Prints
"resumed bit-identical" on success.

usage: zero_trainer.py SOCKET INIT_METHOD RANK WORLD
"""
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

import reft
import reft.torch as rt

FIRST, MORE = 3, 3


def build(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8),
                                torch.nn.Tanh(), torch.nn.Linear(8, 3))
    ddp = DistributedDataParallel(model)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-2,
                                  weight_decay=0.1)
    return model, ddp, opt


def step(ddp, opt, ckpt, it, rank):
    g = torch.Generator().manual_seed(1000 * it + rank)  # each rank its own batch
    x, y = torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(ddp(x), y).backward()  # DDP all-reduces the gradients
    if ckpt is not None:
        ckpt.fence()
    opt.step()  # this rank's shard, then the owners broadcast their parameters


def snapshot_of(model, opt):
    out = {"p/" + k: v.clone() for k, v in model.state_dict().items()}
    for index, st in opt.optim.state_dict()["state"].items():
        for k, v in st.items():
            out["o/%d/%s" % (index, k)] = v.clone()
    return out


def main():
    sock, init, rank, world = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)

    def connect():
        return reft.Client(socket=sock, job="zero", dp=rank,
                           layout=reft.Layout(dp=world, zero=1), protection="none")

    model, ddp, opt = build(0)
    with connect() as c:
        ckpt = rt.Checkpointer(c, model, opt)
        assert ckpt.restore() is None
        for it in range(1, FIRST + 1):
            step(ddp, opt, ckpt, it, rank)
            ckpt.snapshot(it)
        ckpt.fence()
        assert c.wait_committed(FIRST, timeout=60)
        for it in range(FIRST + 1, FIRST + MORE + 1):
            step(ddp, opt, None, it, rank)
        want = snapshot_of(model, opt)
        dist.barrier()  # every rank is done with its client before anyone reconnects

    model2, ddp2, opt2 = build(100 + rank)  # other weights; DDP broadcast makes them equal
    with connect() as c:
        ckpt2 = rt.Checkpointer(c, model2, opt2)
        restored = ckpt2.restore()
        assert restored == FIRST, restored
        for it in range(FIRST + 1, FIRST + MORE + 1):
            step(ddp2, opt2, ckpt2, it, rank)
        got = snapshot_of(model2, opt2)
        ckpt2.fence()
        dist.barrier()
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert len([k for k in want if k.startswith("o/")]) > 0, "this rank holds no optimizer state"
    print("resumed bit-identical", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
