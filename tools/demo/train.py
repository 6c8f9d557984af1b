"""Sample data-parallel trainer for the reft demo: a small torch model trained with AdamW under
DistributedDataParallel (gloo on loopback), one process per rank, each rank snapshotting every
step through its node's reftd and restoring after a crash or the loss of its node.

Parameters and optimizer state are replicated across the ranks (DDP all-reduces the
gradients), so reftd shards them over the sharding group; each rank also has a small unique
state (how many samples it has consumed), which reftd keeps on the ring neighbour's node.

Every step each rank records digests of its training state (of the parameters and optimizer
state, and of those with its unique state) in --record-dir, so a restarted rank proves that what
it restored is bit for bit what was saved at that step. One line per event on stdout (the orchestrator reads it):
  restored <step> <ok|MISMATCH|fresh>
  committed <step>
  done <step>
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import reft
import reft.torch


def build(width):
    torch.manual_seed(0)  # every rank starts from the same model, as DDP requires
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.GELU(),
                                torch.nn.LayerNorm(width), torch.nn.Linear(width, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    # One zero step so the optimizer state exists and its layout is fixed before registering.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def layer_of(model):
    """The model's layers for the planner: each module of the Sequential that has parameters is
    one layer, numbered in order (the GELU between them has none)."""
    index = {}
    for name, _ in model.named_parameters():
        index.setdefault(name.split(".")[0], len(index))
    return lambda name: index.get(name.split(".")[0])


def batch(step, rank):
    """This rank's share of the global batch of `step` (data parallelism)."""
    g = torch.Generator().manual_seed(10_000 + 1_000 * step + rank)
    x = torch.randn(32, 64, generator=g)
    return x, torch.roll(x, 1, dims=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--job", default="demo")
    ap.add_argument("--dp", type=int, default=0)
    ap.add_argument("--dp-size", type=int, default=1)
    ap.add_argument("--master-port", type=int, default=0, help="gloo rendezvous (dp-size > 1)")
    ap.add_argument("--protection", default="none")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--record-dir", required=True)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--reshape", action="store_true",
                    help="restore a step saved under another data-parallel size")
    args = ap.parse_args()
    torch.set_num_threads(1)
    record_dir = os.path.join(args.record_dir, f"rank{args.dp}")
    os.makedirs(record_dir, exist_ok=True)

    model, optimizer = build(args.width)
    if args.dp_size > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.master_port}",
                                rank=args.dp, world_size=args.dp_size)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
    else:
        ddp = model
    samples = torch.zeros(2, dtype=torch.int64)  # unique to this rank: [rank, samples seen]
    samples[0] = args.dp

    client = reft.Client(socket=args.socket, job=args.job, pp=0, tp=0, dp=args.dp,
                         layout=reft.Layout(dp=args.dp_size, tp=1, pp=1, zero=0),
                         protection=args.protection)
    ckpt = reft.torch.Checkpointer(client, model, optimizer, layer_of=layer_of(model))
    client.register("data/samples", samples, kind="unique")

    restored = ckpt.restore(reshape=args.reshape)
    if restored is None:
        print("restored -1 fresh", flush=True)
        start = 0
    else:
        # A rank the saved layout did not have (the job grew) gets the replicated state every
        # rank recorded, and starts its own unique state afresh (reft leaves it untouched).
        new_rank = "data/samples" in (client.last_restore or {}).get("untouched", [])
        mine = os.path.join(record_dir, f"{restored}.digest")
        with open(mine if not new_rank else os.path.join(args.record_dir, "rank0", f"{restored}.digest")) as f:
            replicated, unique = f.read().split()
        ok = reft.torch.state_digest(model, optimizer) == replicated and (
            new_rank or reft.torch.state_digest(model, optimizer, samples) == unique)
        print(f"restored {restored} {'ok' if ok else 'MISMATCH'}", flush=True)
        if not ok:
            return 1
        start = restored + 1

    loss_fn = torch.nn.MSELoss()
    for step in range(start, args.steps):
        x, y = batch(step, args.dp)
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP all-reduces the gradients: every rank gets the same update
        ckpt.fence()  # the previous snapshot no longer reads the buffers
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        samples[1] += x.shape[0]
        # The record is written before the snapshot starts: a rank killed right after its
        # snapshot of this step can still prove the restore of this step.
        # The replicated state's digest (equal on every rank) and the whole state's.
        digests = (reft.torch.state_digest(model, optimizer), reft.torch.state_digest(model, optimizer, samples))
        tmp = os.path.join(record_dir, f".{step}.tmp")
        with open(tmp, "w") as f:
            f.write(" ".join(digests))
        os.replace(tmp, os.path.join(record_dir, f"{step}.digest"))
        ckpt.snapshot(step)
        if step > start and client.wait_committed(step - 1, timeout=30):
            print(f"committed {step - 1}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    client.wait_committed(args.steps - 1, timeout=60)
    print(f"done {args.steps - 1}", flush=True)
    client.close()
    if args.dp_size > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
