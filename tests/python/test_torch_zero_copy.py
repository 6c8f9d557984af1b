"""reft.torch keeps the optimizer state in the registered buffers: no copy per snapshot, and a
resume from a restored step is bit-identical to an uninterrupted run."""

import copy
import os
import subprocess
import sys

import pytest
import torch

import reft.torch as rt
from conftest import client, op_recorder, storage_ptr



def _model(seed, batchnorm=False):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(6, 12)]
    if batchnorm:
        layers.append(torch.nn.BatchNorm1d(12))
    layers += [torch.nn.Tanh(), torch.nn.Linear(12, 3)]
    return torch.nn.Sequential(*layers)


OPTIMIZERS = {
    "adamw": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1),
    "adam_amsgrad": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True),
    "sgd_momentum": lambda m: torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9,
                                              dampening=0.1),
    "adamw_foreach": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True),
    "sgd_foreach": lambda m: torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9,
                                             nesterov=True, foreach=True),
    "two_groups": lambda m: torch.optim.AdamW(
        [{"params": m[0].parameters(), "weight_decay": 0.0},
         {"params": m[-1].parameters(), "lr": 3e-3, "weight_decay": 0.2}], lr=1e-2),
}


def _train_step(model, opt, ckpt, step):
    g = torch.Generator().manual_seed(1000 + step)  # the batch depends on the step only
    x = torch.randn(8, 6, generator=g)
    y = torch.randn(8, 3, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    if ckpt is not None:
        ckpt.fence()  # the previous snapshot's copy is done before the optimizer writes
    opt.step()


def _state(model, opt):
    out = {"model/" + k: v.clone() for k, v in model.state_dict().items()}
    for index, st in opt.state_dict()["state"].items():  # keyed by parameter index
        for k, v in st.items():
            out["opt/%d/%s" % (index, k)] = v.clone() if isinstance(v, torch.Tensor) else v
    return out


def _assert_identical(got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        if isinstance(want[k], torch.Tensor):
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
        else:
            assert got[k] == want[k], k


def _state_tensors(opt):
    return [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_snapshot_copies_no_optimizer_state(daemon, name):
    model = _model(0)
    opt = OPTIMIZERS[name](model)
    with client(daemon, job="zc-" + name) as c:
        ckpt = rt.Checkpointer(c, model, opt)  # before the first step: the state is empty
        _train_step(model, opt, ckpt, 1)
        ckpt.snapshot(1)  # SGD: torch created momentum_buffer in step 1, adopted here, once
        for step in (2, 3):
            _train_step(model, opt, ckpt, step)
            with op_recorder() as seen:
                ckpt.snapshot(step)
            assert seen.ops == [], seen.ops  # no gather, no copy: not a single tensor op
        ckpt.fence()
        # The optimizer's state IS the registered memory.
        flats = {t.data_ptr(): t for t in ckpt.optimizer_buffers.values()}
        state = _state_tensors(opt)
        assert state and ckpt.state.readoptions == 0
        for t in state:
            base = storage_ptr(t)
            assert base in flats, (t.shape, t.dtype)
            flat = flats[base]
            assert base <= t.data_ptr() < base + flat.numel() * flat.element_size()
        if name.startswith("adam"):
            # Adam/AdamW: views installed at construction, torch's lazy init never ran.
            assert ckpt.state.present.all()
        assert c.wait_committed(3, timeout=30)


def test_dispatch_recorder_sees_a_gather():
    """The control for the test above: the per-step gather reft.torch used to do is visible."""
    flat = torch.zeros(10)
    live = torch.ones(10)
    with op_recorder() as seen:
        flat[0:10].copy_(live.reshape(-1))
    assert any("copy_" in op for op in seen.ops)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_resume_is_bit_identical(daemon, name):
    first, more = 3, 3
    model = _model(1, batchnorm=True)
    opt = OPTIMIZERS[name](model)
    with client(daemon, job="resume-" + name) as c:
        ckpt = rt.Checkpointer(c, model, opt)
        assert ckpt.restore() is None
        for step in range(1, first + 1):
            _train_step(model, opt, ckpt, step)
            ckpt.snapshot(step)
        ckpt.fence()
        assert c.wait_committed(first, timeout=30)
        for step in range(first + 1, first + more + 1):  # the uninterrupted run goes on
            _train_step(model, opt, None, step)
        want = _state(model, opt)
    # A restarted trainer: other initial weights, an optimizer without state.
    model2 = _model(2, batchnorm=True)
    opt2 = OPTIMIZERS[name](model2)
    with client(daemon, job="resume-" + name) as c:
        ckpt2 = rt.Checkpointer(c, model2, opt2)
        assert ckpt2.restore() == first
        for step in range(first + 1, first + more + 1):
            _train_step(model2, opt2, ckpt2, step)
            ckpt2.snapshot(step)
        ckpt2.fence()
        _assert_identical(_state(model2, opt2), want)


def test_load_state_dict_after_construction_is_adopted_again(daemon):
    model = _model(3)
    opt = OPTIMIZERS["adamw"](model)
    with client(daemon, job="reload") as c:
        ckpt = rt.Checkpointer(c, model, opt)
        _train_step(model, opt, ckpt, 1)
        # A copy: torch 2.x loads tensors of the right dtype and device by reference, so loading
        # the optimizer's own state_dict() would hand back the registered views themselves.
        saved = copy.deepcopy(opt.state_dict())
        opt.load_state_dict(saved)  # new state tensors, not the registered views
        ckpt.snapshot(1)
        assert ckpt.state.readoptions > 0
        flats = {t.data_ptr() for t in ckpt.optimizer_buffers.values()}
        assert all(storage_ptr(t) in flats for t in _state_tensors(opt))
        ckpt.fence()


def test_unknown_optimizer_needs_its_state_first(daemon):
    model = _model(4)
    opt = torch.optim.Adagrad(model.parameters(), lr=1e-2)
    opt.state.clear()  # Adagrad creates its state eagerly; pretend it does not
    with client(daemon, job="adagrad") as c:
        with pytest.raises(Exception, match="run one optimizer step"):
            rt.Checkpointer(c, model, opt)


def test_zero_redundancy_optimizer_resumes_bit_identical(daemon, tmp_path):
    """ZeroRedundancyOptimizer over gloo: each rank's shard of the AdamW state is registered as
    "unique"; the ranks restore and continue exactly like the uninterrupted run."""
    world = 2
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zero_trainer.py")
    init = "file://" + str(tmp_path / "pg")
    procs = [subprocess.Popen([sys.executable, script, daemon, init, str(r), str(world)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        outs.append((p.returncode, out))
    for rank, (rc, out) in enumerate(outs):
        assert rc == 0 and "resumed bit-identical" in out, "rank %d:\n%s" % (rank, out)
