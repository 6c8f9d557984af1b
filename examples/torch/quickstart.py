# reft quickstart: data-parallel training that resumes from reftd's memory after a crash.
#   TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=3 \
#       --max_restarts=3 examples/torch/quickstart.py --steps 100
import argparse
import os

import torch
import torch.distributed as dist

import reft.torch  # also imports reft

ap = argparse.ArgumentParser()
ap.add_argument("--socket", default=os.environ.get("REFT_SOCKET", reft.DEFAULT_SOCKET))
ap.add_argument("--job", default="quickstart")
ap.add_argument("--steps", type=int, default=100)
args = ap.parse_args()
dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)  # the same initial model on every rank
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
ddp = torch.nn.parallel.DistributedDataParallel(model)
ddp(torch.zeros(1, 32)).sum().backward()  # DDP settles its gradient buckets now, not at step 1,
model.zero_grad()  # so a resumed run sums the gradients in the order this one does
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.manual_seed(1 + rank)  # each rank its own data; the Checkpointer saves the RNG too
client = reft.Client(socket=args.socket, job=args.job, dp=rank,
                     layout=reft.Layout(dp=world), protection="arc1")
ckpt = reft.torch.Checkpointer(client, ddp, optimizer)
last = ckpt.restore()  # the newest step every rank committed (model, optimizer, RNG), or None
for step in range(0 if last is None else last + 1, args.steps):
    x = torch.randn(16, 32)
    loss = torch.nn.functional.mse_loss(ddp(x), x.sum(dim=1, keepdim=True))
    optimizer.zero_grad()
    loss.backward()  # DDP all-reduces the gradients
    ckpt.fence()  # the previous snapshot no longer reads the model or the optimizer
    optimizer.step()
    ckpt.snapshot(step)  # returns at once; reftd copies and protects the step meanwhile
    print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
client.wait_committed(args.steps - 1)
print(f"rank {rank} done {reft.torch.state_digest(model, optimizer)}", flush=True)
