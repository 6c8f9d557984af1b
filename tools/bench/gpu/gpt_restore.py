#!/usr/bin/python3
"""B7: a small GPT-like model trained with deterministic kernels, killed with SIGKILL mid-run and
restored from reft: the loss of every step after the restore must be bit-identical to the
uninterrupted run's.

One real reftd (LocalCluster, one node), two jobs: `ref` runs steps 1..N uninterrupted; `kill`
runs until the step --kill-at printed its loss, is killed with SIGKILL, restarts, restores the
newest committed step s and trains s+1..N. Both runs snapshot every step through
reft.torch.Checkpointer (parameters and AdamW state). Losses are compared as float hex strings.
Prints one JSON line. Runs on CPU too (--device cpu) to check the harness without a GPU.

  REFT_BUILD_DIR=build python3 tools/bench/gpu/gpt_restore.py --device cuda
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))

TRAINER = r"""
import os, sys
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch, reft, reft.torch
sock, job, device, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
VOCAB, CTX, D, LAYERS, HEADS, BATCH = 512, 64, 128, 4, 4, 8

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(),
                                       torch.nn.Linear(4 * D, D))
    def forward(self, x, mask):
        # Attention written out (plain matmuls and softmax): no fused kernel whose backward
        # could be nondeterministic.
        n, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / (D // HEADS) ** 0.5
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(n, t, D))
        return x + self.mlp(self.ln2(x))

class TinyGPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, D)
        self.pos = torch.nn.Parameter(torch.zeros(CTX, D))
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, VOCAB, bias=False)
    def forward(self, idx):
        mask = torch.triu(torch.ones(CTX, CTX, dtype=torch.bool, device=idx.device), 1)
        x = self.tok(idx) + self.pos
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))

torch.manual_seed(0)
model = TinyGPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
client = reft.Client(socket=sock, job=job, pp=0, tp=0, dp=0,
                     layout=reft.Layout(dp=1, tp=1, pp=1, zero=0), protection="none")
ckpt = reft.torch.Checkpointer(client, model, opt)
start = ckpt.restore() or 0
print("restored", start, flush=True)
for step in range(start + 1, steps + 1):
    g = torch.Generator(device=device).manual_seed(step)  # the batch is a function of the step
    seq = torch.randint(0, VOCAB, (BATCH, CTX + 1), device=device, generator=g)
    logits = model(seq[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=False)
    loss.backward()
    ckpt.fence()  # the previous snapshot has left the buffers the optimizer is about to change
    opt.step()
    ckpt.snapshot(step)
    print("loss", step, loss.item().hex(), flush=True)
ckpt.fence()
assert client.wait_committed(steps, timeout=60)
print("done", flush=True)
"""


def run_trainer(cluster, job, device, steps, kill_at=None):
    """Runs a trainer; returns ({step: loss_hex}, restored_step, killed)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-c", TRAINER, cluster.nodes[0].socket, job, device,
                          str(steps)], stdout=subprocess.PIPE, text=True, env=env)
    losses, restored, killed = {}, None, False
    for line in p.stdout:
        f = line.split()
        if f[0] == "restored":
            restored = int(f[1])
        elif f[0] == "loss":
            losses[int(f[1])] = f[2]
            if kill_at is not None and int(f[1]) == kill_at:
                p.send_signal(signal.SIGKILL)
                killed = True
                break
    rc = p.wait(timeout=300)
    if not killed and rc != 0:
        raise RuntimeError(f"trainer {job} exited {rc}")
    return losses, restored, killed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--kill-at", type=int, default=37)
    a = ap.parse_args()
    from reft_cluster import LocalCluster
    with LocalCluster(nodes=1, etcd=0, log_level="warn") as cluster:
        t0 = time.monotonic()
        ref, _, _ = run_trainer(cluster, "ref", a.device, a.steps)
        before, _, killed = run_trainer(cluster, "kill", a.device, a.steps, kill_at=a.kill_at)
        after, restored, _ = run_trainer(cluster, "kill", a.device, a.steps)
        elapsed = time.monotonic() - t0
    resumed = sorted(after)
    same_before = all(ref[s] == v for s, v in before.items())
    mismatched = [s for s in resumed if ref.get(s) != after[s]]
    ok = (killed and restored is not None and 0 < restored <= a.kill_at and
          resumed == list(range(restored + 1, a.steps + 1)) and same_before and not mismatched)
    print(json.dumps({"bench": "gpt_kill_restore_loss", "device": a.device, "steps": a.steps,
                      "killed_after_step": a.kill_at, "restored_step": restored,
                      "steps_compared_after_restore": len(resumed),
                      "mismatched_steps": mismatched, "identical": ok,
                      "wall_s": round(elapsed, 1)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
