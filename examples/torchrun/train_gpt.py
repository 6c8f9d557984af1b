"""A GPT-like model trained with data parallelism under torchrun, kept in host memory by reft, that
goes on with fewer nodes when one is lost (docs/planner.md "The online path").

Run one torchrun agent per node (`--nnodes=MIN:MAX`, one process per node here), each pointed at
its node's reftd:

    REFT_SOCKET=/run/reft/reftd.sock TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 \\
        torchrun --nnodes=2:3 --nproc_per_node=1 \\
        --rdzv_backend=c10d --rdzv_endpoint=HOST:29400 --rdzv_id=gpt --max_restarts=3 \\
        examples/torchrun/train_gpt.py --job gpt --steps 200 --record-dir /shared/gpt-digests

When a node is lost, torchrun restarts the surviving ranks with a smaller WORLD_SIZE. Each rank
then asks reft where it runs (reft.elastic.coordinates: the decision the job's coordinator
published — for a data-parallel job a reroute onto the survivors), builds its process groups
from that layout, and restores the newest committed step with reshape=True: the state saved by
the larger job, bit for bit (checked against the digest recorded at that step), and training
goes on from the next step.

The model: token and position embeddings, BLOCKS pre-norm transformer blocks, a final LayerNorm
and the LM head; reft.torch infers the planner's layers from the module tree (the embeddings,
each block, the final norm with the head: docs/client.md "Layers"). Every step
takes a global batch of GLOBAL_BATCH sequences drawn from the step number, split evenly over
the data-parallel ranks, so the data does not depend on how many ranks there are.

Events on stdout, one per line: `restored <step> ok|MISMATCH`, `fresh`, `committed <step>`,
`done <step>`.

TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (torch >= 2.4; older torch ignores it) gives every round of
the rendezvous a store of its own for the workers' init_process_group, as torch 1.13 always did.
Without it the agents share one store with every attempt of the workers, for the agents' whole
life, and the keys of a process group have the same names in every attempt: a restarted rank can
read the address a rank of the previous attempt listened on (that process is gone), fail to
connect, and leave its peer waiting for it until the gloo timeout (30 min) — after a node loss
the survivors then never get past init_process_group (pytorch/pytorch#135712); and when the lost
node's agent was the one hosting that store, the survivors keep its address. The trainer refuses
to start under such an agent (shared_store_hazard).

Note for Debian bookworm's torch 1.13 on Python 3.11: torchrun's default `--redirects 0` /
`--tee 0` fail there (`'NoneType' object has no attribute 'get'`); pass `--redirects 2 --tee 1`
(stderr to torchrun's log directory, stdout to the console).
"""
import argparse
import os
import re
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import reft
import reft.elastic
import reft.torch

VOCAB, WIDTH, HEADS, BLOCKS, CONTEXT = 256, 64, 4, 2, 32
GLOBAL_BATCH = 12  # sequences per step, split over the data-parallel ranks (1, 2, 3, 4, 6, 12)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True,
                                       norm_first=True) for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.register_buffer("causal", torch.triu(torch.full((CONTEXT, CONTEXT), float("-inf")), 1))

    def forward(self, tokens):
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x, src_mask=self.causal[:tokens.shape[1], :tokens.shape[1]])
        return self.head(self.norm(x))


def build():
    torch.manual_seed(0)  # every rank starts from the same model, as data parallelism requires
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    # One zero step so the optimizer state exists before it is registered.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return model, optimizer


def batch(step, dp_rank, dp):
    """This rank's share of step `step`'s global batch: (inputs, next-token targets)."""
    g = torch.Generator().manual_seed(1_000_003 * step + 17)
    seqs = torch.randint(0, VOCAB, (GLOBAL_BATCH, CONTEXT + 1), generator=g)
    share = GLOBAL_BATCH // dp
    mine = seqs[dp_rank * share:(dp_rank + 1) * share]
    return mine[:, :-1], mine[:, 1:]


def shared_store_hazard():
    """Why restarted workers could hang in init_process_group under this torchrun, None if they
    cannot: torch >= 2.4's agent shares the TCPStore of its rendezvous with the workers (env
    TORCHELASTIC_USE_AGENT_STORE) without a namespace per attempt, so a restart finds the keys of
    the attempt before it (see the note above)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if m is None or (int(m.group(1)), int(m.group(2))) < (2, 4):
        return None  # torch < 2.4 shares only a static rendezvous's store, one prefix per attempt
    return ("torchrun shares its rendezvous store with the workers, and a restarted rank may read "
            "the address of a rank of the attempt before it and hang in init_process_group: start "
            "torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (pytorch/pytorch#135712)")


def placement(socket, job, wait_s):
    """Where this rank runs: the layout reft says the job goes on with, or — nothing committed
    yet — a fresh data-parallel job over the launcher's world."""
    try:
        # By node: torchrun numbers ranks in rendezvous order, not by where the decision put
        # each position (and moved its layers).
        return reft.elastic.coordinates(socket, job, wait_s=wait_s, by_node=True)
    except reft.NotFoundError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", default=os.environ.get("REFT_SOCKET", "/run/reft/reftd.sock"))
    ap.add_argument("--job", default="gpt")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--record-dir", required=True, help="digests of every step (a shared directory)")
    ap.add_argument("--protection", default="arc1")
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--wait-s", type=float, default=120.0, help="how long to wait for reft's decision")
    args = ap.parse_args()
    torch.set_num_threads(1)
    hazard = shared_store_hazard()
    if hazard is not None:
        raise SystemExit(hazard)

    place = placement(args.socket, args.job, args.wait_s)
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    dp, dp_rank = (world, rank) if place is None else (place.dp, place.dp_rank)
    if place is not None and (place.pp, place.tp) != (1, 1):
        raise SystemExit(f"this example trains data parallelism only; the job's layout is "
                         f"dp={place.dp}, tp={place.tp}, pp={place.pp}")
    dist.init_process_group("gloo")  # torchrun's MASTER_ADDR / MASTER_PORT, RANK, WORLD_SIZE
    # With tp = pp = 1 the data-parallel group is the whole world, whatever order torchrun gave
    # the ranks; a pipeline would gather every rank's Placement and group by pp_rank / dp_rank.
    dp_group = dist.new_group(list(range(world)))
    if place is not None:
        print(f"placed dp {dp_rank} of {dp} on {place.node}", flush=True)

    model, optimizer = build()
    ddp = nn.parallel.DistributedDataParallel(model, process_group=dp_group)
    client = reft.Client(socket=args.socket, job=args.job, pp=0, tp=0, dp=dp_rank,
                         layout=reft.Layout(dp=dp, tp=1, pp=1, zero=0),
                         protection=args.protection if dp > 1 else "none")
    ckpt = reft.torch.Checkpointer(client, model, optimizer)

    restored = ckpt.restore(reshape=True)  # the layout may be another than the one that saved
    if restored is None:
        print("fresh", flush=True)
        start = 0
    else:
        with open(os.path.join(args.record_dir, f"{restored}.digest")) as f:
            ok = reft.torch.state_digest(model, optimizer) == f.read().strip()
        print(f"restored {restored} {'ok' if ok else 'MISMATCH'}", flush=True)
        if not ok:
            return 1
        start = restored + 1

    loss_fn = nn.CrossEntropyLoss()
    os.makedirs(args.record_dir, exist_ok=True)
    for step in range(start, args.steps):
        x, y = batch(step, dp_rank, dp)
        loss = loss_fn(ddp(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()  # gradients all-reduced over the data-parallel group
        ckpt.fence()     # the previous snapshot no longer reads the buffers
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if dp_rank == 0:  # written before the snapshot starts, so a restore can always check it
            tmp = os.path.join(args.record_dir, f".{step}.tmp")
            with open(tmp, "w") as f:
                f.write(reft.torch.state_digest(model, optimizer))
            os.replace(tmp, os.path.join(args.record_dir, f"{step}.digest"))
        ckpt.snapshot(step)
        if step > start and client.wait_committed(step - 1, timeout=60):
            print(f"committed {step - 1}", flush=True)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    client.wait_committed(args.steps - 1, timeout=60)
    print(f"done {args.steps - 1}", flush=True)
    client.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
