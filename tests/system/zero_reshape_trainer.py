"""One rank of the GPT-like model (gpt_trainer.py, one stage) trained with data parallelism and
a ZeroRedundancyOptimizer (AdamW) over gloo, checkpointed by reft.torch (test_reshape.py).

The global batch is GLOBAL micro-batches per step whatever the world size: rank d computes the
micro-batches i with i % world == d, the gradients are summed over the ranks and divided by
GLOBAL. So DP4 and DP3 train the same model on the same data, their sums rounding differently.

--train S --more K: steps 0..S with a snapshot each, wait for step S to commit, write this
rank's view of the global state at S to --state (the model, and its optimizer shard keyed by
parameter name), then K more steps without snapshots: the uninterrupted run.
--restore --more K: restore(reshape=True), write the restored view to --state, train K steps.
Each step's mean loss is printed as "loss <step> <float.hex>", the restored step as
"restored <step>".
"""
import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer

import reft
import reft.torch
from gpt_trainer import VOCAB, Stage, tokens

GLOBAL = 12  # micro-batches per step: divisible by 4 and 3


def train_step(model, opt, step, rank, world):
    mine = [i for i in range(GLOBAL) if i % world == rank]
    total = torch.zeros(())
    for i in mine:
        x, y = tokens(step, 0, i)
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1)) / GLOBAL
        loss.backward()
        total += loss.detach()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    dist.all_reduce(total)
    return total


def view(model, opt):
    """This rank's view of the global state: the model, and the optimizer state of the
    parameters its shard holds, by parameter name."""
    names = {id(p): n for n, p in model.named_parameters()}
    state = {"model": {k: v.clone() for k, v in model.state_dict().items()}, "optim": {}}
    for p, st in opt.optim.state.items():
        state["optim"][names[id(p)]] = {k: v.clone() for k, v in st.items()}
    return state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--dp", type=int, required=True)
    ap.add_argument("--dp-size", type=int, required=True)
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--train", type=int)
    ap.add_argument("--restore", action="store_true")
    ap.add_argument("--more", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.master_port}",
                            rank=args.dp, world_size=args.dp_size)
    torch.manual_seed(1234 if args.train is not None else 99)  # a restore overwrites it all
    model = Stage(0, 1)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW,
                                  lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    client = reft.Client(socket=args.socket, job=args.job, dp=args.dp,
                         layout=reft.Layout(dp=args.dp_size, zero=1), protection="arc1")
    ckpt = reft.torch.Checkpointer(client, model, opt)

    def step(s, snapshot):
        loss = train_step(model, opt, s, args.dp, args.dp_size)
        ckpt.fence()
        opt.step()  # this rank's partition, then the owners broadcast their parameters
        opt.zero_grad(set_to_none=True)
        if snapshot:
            ckpt.snapshot(s)
        print(f"loss {s} {float(loss).hex()}", flush=True)

    if args.train is not None:
        for s in range(args.train + 1):
            step(s, True)
        ckpt.fence()
        assert client.wait_committed(args.train, timeout=120)
        last = args.train
    else:
        last = ckpt.restore(reshape=True)
        print(f"restored {last}", flush=True)
    torch.save(view(model, opt), args.state)
    for s in range(last + 1, last + 1 + args.more):
        step(s, False)
    client.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
