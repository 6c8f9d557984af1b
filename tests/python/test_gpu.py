"""The device path through real CUDA (or ROCm) tensors: run by run_gpu.py, label gpu.

The same properties as test_device.py and test_torch_zero_copy.py on the emulated device:
pulled and restored bit-exactly with the buffer overwritten right after fence(); the ready
event follows the current stream's work without synchronising the device; memory the backend
cannot export is staged with one warning; a libreft without the backend stages through torch;
reft.torch keeps the optimizer state in the registered buffers and resumes bit-identically.
"""

import os
import subprocess
import sys
import time
import warnings

import pytest
import torch

import reft
import reft._device
import reft.torch as rt
from conftest import client, op_recorder, start_daemon, stop_daemon, storage_ptr

DEV = torch.device("cuda", 0)  # run_gpu.py runs this file only when torch sees a device


@pytest.fixture
def daemon():
    """Slots on tmpfs, as reftd's --shm-dir in production: the path where the device copies
    land in page-locked memory (test_device.py covers a slot dir the kernel cannot pin)."""
    proc, sock, tmp = start_daemon("reft-gpu-", shm_parent="/dev/shm")
    yield sock
    stop_daemon(proc, tmp)



def _staged_warnings(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    return [w for w in seen if issubclass(w.category, reft.StagedWarning)]


def _round_trip(c, t, steps=(1, 2, 3)):
    """Snapshots `t` filled by work on a side stream that is current at snapshot(); overwrites
    it right after fence(); restores the last step and checks it bit for bit."""
    side = torch.cuda.Stream(DEV)
    want = None
    for step in steps:
        g = torch.Generator(device=DEV).manual_seed(step)
        src = torch.randn(t.numel(), device=DEV, generator=g)
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # a long kernel before the bytes are produced
            t.copy_(src.view_as(t))
            t0 = time.monotonic()
            c.snapshot(step)               # must not wait for the kernel above
            in_snapshot = time.monotonic() - t0
            c.fence()
            t.fill_(-1.0)                  # the next optimizer step, right after the fence
        assert in_snapshot < 0.02, in_snapshot
        want = src.view_as(t).clone()
        assert c.wait_committed(step, timeout=60)
    side.synchronize()
    assert c.restore() == steps[-1]
    torch.cuda.synchronize()
    assert torch.equal(t, want)


def test_cuda_tensor_is_pulled_stream_ordered_and_restored(daemon):
    t = torch.empty(3 << 20, device=DEV)
    with client(daemon) as c:
        assert _staged_warnings(lambda: c.register("w", t)) == []
        assert c._c.staged_reason("w") == ""
        _round_trip(c, t)


def test_libreft_without_the_backend_stages_through_torch(daemon, monkeypatch):
    monkeypatch.setattr(reft._device, "_built", frozenset([reft._device.MEMORY_HOST,
                                                           reft._device.MEMORY_EMULATED]))
    t = torch.empty(1 << 20, device=DEV)
    with client(daemon) as c:
        warned = _staged_warnings(lambda: c.register("w", t))
        assert len(warned) == 1 and "built without the" in str(warned[0].message)
        _round_trip(c, t)


STAGED_CHILD = r"""
import sys, warnings, torch, reft
sys.path.insert(0, sys.argv[2])
from test_gpu import _round_trip, _staged_warnings
t = torch.empty(1 << 20, device="cuda")
with reft.Client(socket=sys.argv[1], job="staged") as c:
    warned = _staged_warnings(lambda: c.register("w", t))
    assert len(warned) == 1, warned
    print("reason:", warned[0].message, flush=True)
    _round_trip(c, t)
print("staged round trip ok")
"""


@pytest.mark.parametrize("conf", ["expandable_segments:True", "backend:cudaMallocAsync"])
def test_unexportable_allocator_memory_is_staged(daemon, conf):
    """Expandable segments (VMM) and the stream-ordered allocator's pools are not legacy-IPC
    capable: staged, warned once, restored bit-exactly."""
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", STAGED_CHILD, daemon, here], env=env,
                         capture_output=True, text=True, timeout=240)
    if out.returncode != 0 and "Unrecognized CachingAllocator option" in out.stderr:
        pytest.skip("this torch has no %s" % conf)
    assert out.returncode == 0 and "staged round trip ok" in out.stdout, out.stdout + out.stderr


def _train(model, opt, ckpt, step):
    g = torch.Generator(device=DEV).manual_seed(1000 + step)
    x = torch.randn(16, 32, device=DEV, generator=g)
    y = torch.randn(16, 8, device=DEV, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    if ckpt is not None:
        ckpt.fence()
    opt.step()


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                               torch.nn.Linear(64, 8)).to(DEV)


@pytest.mark.parametrize("foreach", [False, True])
def test_checkpointer_on_cuda_is_zero_copy_and_resumes_bit_identical(daemon, foreach):
    model = _model(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=foreach)
    job = "gpu-ckpt-%s" % foreach
    with client(daemon, job=job) as c:
        made = []
        assert _staged_warnings(lambda: made.append(rt.Checkpointer(c, model, opt))) == []
        ckpt = made[0]
        assert all(t.is_cuda for name, t in ckpt.optimizer_buffers.items()
                   if name.endswith("/cuda"))
        for step in (1, 2, 3):
            _train(model, opt, ckpt, step)
            with op_recorder() as seen:
                ckpt.snapshot(step)
            assert seen.ops == []
        ckpt.fence()
        flats = {t.data_ptr() for t in ckpt.optimizer_buffers.values()}
        for st in opt.state.values():
            for v in st.values():
                assert storage_ptr(v) in flats
        assert c.wait_committed(3, timeout=60)
        for step in (4, 5):
            _train(model, opt, None, step)
        want = {k: v.clone() for k, v in model.state_dict().items()}
        want_opt = [v.clone() for st in opt.state.values() for v in st.values()]
    model2 = _model(1)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-3, weight_decay=0.1, foreach=foreach)
    with client(daemon, job=job) as c:
        ckpt2 = rt.Checkpointer(c, model2, opt2)
        assert ckpt2.restore() == 3
        for step in (4, 5):
            _train(model2, opt2, ckpt2, step)
        ckpt2.fence()
        torch.cuda.synchronize()
        for k, v in model2.state_dict().items():
            assert torch.equal(v, want[k]), k
        got_opt = [v for st in opt2.state.values() for v in st.values()]
        assert len(got_opt) == len(want_opt)
        for a, b in zip(got_opt, want_opt):
            assert torch.equal(a, b)
