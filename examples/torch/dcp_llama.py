"""A TorchTitan-style trainer that checkpoints through PyTorch Distributed Checkpoint into reft:
a small llama-like model (attention + SwiGLU blocks, RMSNorm) under FSDP2 (`fully_shard`),
optionally HSDP (--replicate) and tensor parallel (--tp), saved every step with `dcp.save` or
`dcp.async_save` (--async-save) and, with --load, resumed with `dcp.load` under whatever mesh it
is started with now: fewer ranks after a node is lost, another tp (docs/dcp.md).

    torchrun --nproc-per-node 4 examples/torch/dcp_llama.py --socket /run/reft/reftd.sock \
        --job run-1 --shard 2 --tp 2 --steps 100 --async-save --load

CPU and gloo here (the tests and CI); on GPUs build the mesh on "cuda" and use nccl. Prints one
JSON line per event on rank 0:
  {"event": "loaded", "step": S | null, "source": "memory" | "tier" | null, "digest": ...}
  {"event": "saved", "step": S, "digest": ...}     after each committed save (async: the last)
The digest is of the full (gathered) model and optimizer state, so runs under different meshes
compare bit for bit (tests/system/test_dcp.py).
"""
import argparse
import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict, \
    StateDictOptions
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, \
    parallelize_module

import reft
import reft.torch.dcp as reft_dcp


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wk = torch.nn.Linear(dim, dim, bias=False)
        self.wv = torch.nn.Linear(dim, dim, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        # -1 heads: under tensor parallel each rank holds its share of them.
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attention_norm = torch.nn.RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = torch.nn.RMSNorm(dim)
        self.feed_forward = FeedForward(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Model(torch.nn.Module):
    def __init__(self, dim=64, heads=4, layers=3, vocab=128):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(dim)
        self.output = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


# TorchTitan's llama plan: q, k, v and the SwiGLU's w1, w3 split by output, wo and w2 by input.
TP_PLAN = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
           "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
           "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
           "feed_forward.w2": RowwiseParallel()}


def build(args):
    dims, names = [], []
    for name, size in (("dp_replicate", args.replicate), ("dp_shard", args.shard),
                       ("tp", args.tp)):
        if size > 1 or name == "dp_shard":
            dims.append(size)
            names.append(name)
    mesh = init_device_mesh("cpu", tuple(dims), mesh_dim_names=tuple(names))
    torch.manual_seed(0)  # every rank builds the same model; FSDP shards it
    model = Model()
    if args.tp > 1:
        for block in model.layers:
            parallelize_module(block, mesh["tp"], TP_PLAN)
    dp_mesh = mesh["dp_replicate", "dp_shard"] if args.replicate > 1 else mesh["dp_shard"]
    for block in model.layers:
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return mesh, model, opt


def digest(model, opt):
    """SHA-256 of the full state: gathered to every rank, so any mesh gives the same value."""
    full = StateDictOptions(full_state_dict=True, cpu_offload=False)
    msd, osd = get_state_dict(model, opt, options=full)
    h = hashlib.sha256()
    for name, t in sorted(msd.items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().float().numpy().tobytes())
    for fqn, st in sorted(osd["state"].items()):
        for k in sorted(st):
            v = st[k]
            h.update(("%s/%s" % (fqn, k)).encode())
            h.update(v.detach().contiguous().float().numpy().tobytes()
                     if torch.is_tensor(v) else repr(v).encode())
    return h.hexdigest()


def train_step(model, opt, step, writer):
    g = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, 128, (4, 16), generator=g)  # same batch on every rank
    loss = model(tokens).float().logsumexp(-1).mean()
    loss.backward()
    if isinstance(writer, reft_dcp.ZeroCopyWriter):
        writer.fence()  # the last async_save has copied the parameters and optimizer state
    opt.step()
    opt.zero_grad()


def say(**event):
    if dist.get_rank() == 0:
        print(json.dumps(event), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--protection", default="none")
    p.add_argument("--replicate", type=int, default=1)
    p.add_argument("--shard", type=int, default=1)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--load", action="store_true")
    p.add_argument("--async-save", action="store_true")
    p.add_argument("--zero-copy", action="store_true",
                   help="with --async-save: nothing copied on this thread; fence before step()")
    args = p.parse_args()
    dist.init_process_group("gloo")
    mesh, model, opt = build(args)
    client = reft_dcp.client_for(mesh, args.socket, args.job, args.protection)
    start = 0
    if args.load:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "step": 0}
        try:
            dcp.load(state, storage_reader=reft_dcp.Reader(client))
        except reft.NotFoundError:
            state["step"] = None  # nothing committed yet: a fresh start
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        reader_step = state.get("step")
        source = client.last_restore["source"] if client.last_restore else None
        say(event="loaded", step=reader_step, source=source, digest=digest(model, opt))
        start = 0 if reader_step is None else reader_step
    writer = reft_dcp.Writer(client, zero_copy=args.zero_copy)
    # async_save plans and finishes in a background thread with collectives of its own: on a
    # group of their own, or they interleave with FSDP's on the same communicator (TorchTitan
    # does the same).
    ckpt_group = dist.new_group(backend="gloo")
    pending = None
    for step in range(start + 1, start + 1 + args.steps):
        train_step(model, opt, step, writer)
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd, "step": step}
        if pending is not None:
            pending.result()  # one save at a time: the previous one is committed job-wide
        if args.async_save:
            pending = dcp.async_save(state, storage_writer=writer, checkpoint_id=step,
                                     process_group=ckpt_group)
        else:
            dcp.save(state, storage_writer=writer, checkpoint_id=step, process_group=ckpt_group)
        if not args.async_save:
            say(event="saved", step=step, digest=digest(model, opt))
    if pending is not None:
        pending.result()
        say(event="saved", step=start + args.steps, digest=digest(model, opt))
    client.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
