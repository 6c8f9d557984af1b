"""A small GPT-like model trained with data and pipeline parallelism over gloo, snapshotting
every step through reft (the PyTorch end-to-end test, test_torch_e2e.py).

Ranks: pp_size pipeline stages × dp_size data-parallel replicas, global rank pp·dp_size + dp.
Stage 0 holds the token and position embeddings and the first half of the transformer blocks,
the last stage the rest plus the final LayerNorm and the LM head (pp_size = 1: everything).
Each step runs GPipe over MICRO_BATCHES micro-batches: every forward, then every backward in
reverse order; activations and their gradients cross stages with send/recv. Gradients are
all-reduced in each stage's data-parallel group, then AdamW steps.

Everything that decides the numbers is a function of the seed and the step: initial weights,
each (step, dp, micro-batch)'s tokens, the reduction order (gloo's, fixed by the group). So a
run that is killed, restored from reft and resumed must reproduce an uninterrupted run bit for
bit: the last stage prints each step's loss (as float.hex), every rank prints a digest of its
final parameters and optimizer state.

Events on stdout, one per line:
  restored <step>|fresh     loss <step> <hex>     committed <step>     final <sha256>
"""
import argparse
import math
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import reft
import reft.torch

VOCAB = 64
SEQ = 16
WIDTH = 32
HEADS = 2
LAYERS = 4
MICRO_BATCHES = 2
MICRO_BATCH_SIZE = 4


class Block(nn.Module):
    """Pre-LN transformer block with causal self-attention (no dropout: deterministic)."""

    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.out = nn.Linear(4 * WIDTH, WIDTH)
        self.register_buffer("mask", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(WIDTH, dim=2)
        q, k, v = (y.view(b, t, HEADS, c // HEADS).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // HEADS)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Stage(nn.Module):
    def __init__(self, pp, pp_size):
        super().__init__()
        per = LAYERS // pp_size
        self.first = pp == 0
        self.last = pp == pp_size - 1
        if self.first:
            self.tok = nn.Embedding(VOCAB, WIDTH)
            self.pos = nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(per))
        if self.last:
            self.ln_f = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, x):
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x)) if self.last else x


def build(pp, pp_size):
    # The same seed for every stage count: stage modules are built in layer order from one
    # generator, so each stage's weights depend only on (seed, pp, pp_size).
    torch.manual_seed(1234)
    stages = [Stage(p, pp_size) for p in range(pp_size)]
    model = stages[pp]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    for p in model.parameters():  # a zero step so the optimizer state exists before registering
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return model, opt


def tokens(step, dp, micro):
    """The micro-batch `micro` of data-parallel replica `dp` at `step`: a noisy counting task."""
    g = torch.Generator().manual_seed(1_000_000 * step + 1_000 * dp + micro)
    start = torch.randint(0, VOCAB, (MICRO_BATCH_SIZE, 1), generator=g)
    seq = (start + torch.arange(SEQ + 1)) % VOCAB
    noise = torch.randint(0, VOCAB, seq.shape, generator=g)
    keep = torch.rand(seq.shape, generator=g) < 0.9
    seq = torch.where(keep, seq, noise)
    return seq[:, :-1], seq[:, 1:]


def train_step(model, opt, step, args, dp_group, prev_rank, next_rank):
    """One GPipe step; returns the mean loss on the last stage, None elsewhere."""
    acts = []
    losses = []
    for micro in range(MICRO_BATCHES):
        x, y = tokens(step, args.dp, micro)
        if model.first:
            inp = x
        else:
            inp = torch.empty(MICRO_BATCH_SIZE, SEQ, WIDTH)
            dist.recv(inp, src=prev_rank)
            inp.requires_grad_(True)
        out = model(inp)
        if model.last:
            loss = F.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1)) / MICRO_BATCHES
            losses.append(loss)
            acts.append((inp, loss))
        else:
            dist.send(out.detach(), dst=next_rank)
            acts.append((inp, out))
    for inp, out in reversed(acts):
        if model.last:
            out.backward()
        else:
            grad = torch.empty_like(out)
            dist.recv(grad, src=next_rank)
            out.backward(grad)
        if not model.first:
            dist.send(inp.grad, dst=prev_rank)
    if args.dp_size > 1:
        for p in model.parameters():
            dist.all_reduce(p.grad, group=dp_group)
            p.grad.div_(args.dp_size)
    return sum(l.detach() for l in losses) if model.last else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--dp", type=int, default=0)
    ap.add_argument("--dp-size", type=int, default=1)
    ap.add_argument("--pp", type=int, default=0)
    ap.add_argument("--pp-size", type=int, default=1)
    ap.add_argument("--master-port", type=int, required=True)
    ap.add_argument("--protection", default="arc1")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    rank = args.pp * args.dp_size + args.dp
    world = args.pp_size * args.dp_size
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.master_port}",
                            rank=rank, world_size=world)
    dp_group = None
    for p in range(args.pp_size):  # every rank creates every group, in the same order
        g = dist.new_group([p * args.dp_size + d for d in range(args.dp_size)])
        if p == args.pp:
            dp_group = g
    prev_rank = rank - args.dp_size
    next_rank = rank + args.dp_size

    model, opt = build(args.pp, args.pp_size)
    client = reft.Client(socket=args.socket, job=args.job, pp=args.pp, tp=0, dp=args.dp,
                         layout=reft.Layout(dp=args.dp_size, tp=1, pp=args.pp_size, zero=0),
                         protection=args.protection)
    ckpt = reft.torch.Checkpointer(client, model, opt)
    restored = ckpt.restore()
    print("restored fresh" if restored is None else f"restored {restored}", flush=True)
    start = 0 if restored is None else restored + 1

    for step in range(start, args.steps):
        loss = train_step(model, opt, step, args, dp_group, prev_rank, next_rank)
        ckpt.fence()  # the previous snapshot no longer reads the parameters
        opt.step()
        opt.zero_grad(set_to_none=True)
        ckpt.snapshot(step)
        if loss is not None:
            print(f"loss {step} {float(loss).hex()}", flush=True)
        if client.wait_committed(step, timeout=60):
            print(f"committed {step}", flush=True)
    print(f"final {reft.torch.state_digest(model, opt)}", flush=True)
    client.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
