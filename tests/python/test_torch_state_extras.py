"""reft.torch.Checkpointer saves what a run needs besides model and optimizer to go on as if
uninterrupted — the random number generators and objects with state_dict() (a sampler) — and
names a DistributedDataParallel wrapper's buffers after its module (a real reft_local_testd)."""
import os
import random

import numpy as np
import pytest
import torch
import torch.distributed as dist

import reft.torch as rt
from conftest import client


class Sampler:
    """What a trainer's sampler keeps: its epoch and the position in it."""

    def __init__(self):
        self.epoch, self.position = 0, 0

    def state_dict(self):
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state):
        self.epoch, self.position = state["epoch"], state["position"]


def draws():
    return (torch.rand(4).tolist(), random.random(), np.random.rand(2).tolist())


def test_the_generators_and_extra_state_come_back_with_the_step(daemon):
    torch.manual_seed(1), random.seed(2), np.random.seed(3)
    model = torch.nn.Linear(8, 4)
    sampler = Sampler()
    with client(daemon) as c:
        ckpt = rt.Checkpointer(c, model, torch.optim.SGD(model.parameters(), lr=0.1),
                               rng=("torch", "python", "numpy"), extra={"sampler": sampler})
        draws()  # the run draws before the step...
        sampler.epoch, sampler.position = 3, 1234
        ckpt.snapshot(5)
        ckpt.fence()
        assert c.wait_committed(5, timeout=20)
        expected = draws()  # ...and after it: what a resumed run must draw next
    torch.manual_seed(99), random.seed(99), np.random.seed(99)
    resumed = Sampler()
    with client(daemon) as c:
        fresh = torch.nn.Linear(8, 4)
        ckpt = rt.Checkpointer(c, fresh, torch.optim.SGD(fresh.parameters(), lr=0.1),
                               rng=("torch", "python", "numpy"), extra={"sampler": resumed})
        assert ckpt.restore() == 5
    assert draws() == expected
    assert resumed.state_dict() == {"epoch": 3, "position": 1234}


def test_without_rng_the_generators_are_left_alone(daemon):
    with client(daemon) as c:
        ckpt = rt.Checkpointer(c, torch.nn.Linear(2, 2), rng=())
        ckpt.snapshot(1)
        ckpt.fence()
        assert c.wait_committed(1, timeout=20)
    model = torch.nn.Linear(2, 2)  # its initialisation draws: before the seed
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    with client(daemon) as c:
        assert rt.Checkpointer(c, model, rng=()).restore() == 1
    assert torch.equal(torch.rand(3), expected)


def test_bad_rng_sources_and_extras_are_refused_by_name(daemon):
    with client(daemon) as c:
        with pytest.raises(ValueError, match="rng source 'cuda': the sources are torch, device"):
            rt.Checkpointer(c, torch.nn.Linear(2, 2), rng=("cuda",))
    with client(daemon) as c:
        with pytest.raises(TypeError, match="extra 'step': 3 has no state_dict"):
            rt.Checkpointer(c, torch.nn.Linear(2, 2), extra={"step": 3})


def test_an_extra_that_outgrows_its_record_is_refused_naming_both_sizes(daemon):
    sampler = Sampler()
    with client(daemon) as c:
        ckpt = rt.Checkpointer(c, torch.nn.Linear(2, 2), extra={"sampler": sampler})
        sampler.position = "x" * (1 << 20)
        with pytest.raises(ValueError, match=r"extra/sampler: its state is \d+ bytes now, more "
                                             r"than the 65536 registered"):
            ckpt.snapshot(1)


def test_a_ddp_wrapper_and_its_module_name_the_buffers_alike(daemon, tmp_path):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp_path, "store"),
                            rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        with client(daemon) as c:
            ckpt = rt.Checkpointer(c, torch.nn.parallel.DistributedDataParallel(module))
            ckpt.snapshot(1)
            ckpt.fence()
            assert c.wait_committed(1, timeout=20)
        saved = {k: v.clone() for k, v in module.state_dict().items()}
        fresh = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        with client(daemon) as c:  # the plain module restores what the wrapper saved
            assert rt.Checkpointer(c, fresh).restore() == 1
        assert all(torch.equal(fresh.state_dict()[k], v) for k, v in saved.items())
    finally:
        dist.destroy_process_group()
