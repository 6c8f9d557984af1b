"""reft._zero: the ZeroRedundancyOptimizer partition reft computes for another world size is
torch's own, and the remap it derives moves every parameter's state from its saved place to
its new one (the daemon side is test_reshape.py's DP4 -> DP3)."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

from reft._optim_state import flat_layout, spec_of
from reft._zero import Placement, partition, remap_segments


@pytest.fixture(scope="module")
def one_process_group(tmp_path_factory):
    if not dist.is_initialized():
        init = "file://" + str(tmp_path_factory.mktemp("pg") / "store")
        dist.init_process_group("gloo", init_method=init, rank=0, world_size=1)
    yield


def _zero(groups=2):
    torch.manual_seed(0)
    # Equal sizes (ties keep torch's stable order) and uneven ones, in two parameter groups.
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8),
                                torch.nn.Linear(8, 3), torch.nn.Linear(3, 17, bias=False))
    params = list(model.parameters())
    param_groups = [{"params": params}] if groups == 1 else [
        {"params": params[:3], "weight_decay": 0.0}, {"params": params[3:], "lr": 3e-3}]
    return ZeroRedundancyOptimizer(param_groups, optimizer_class=torch.optim.AdamW, lr=1e-2)


def _torch_partition(zero, world_size):
    """torch's _partition_parameters for `world_size`, run on the live object and put back."""
    saved = zero.world_size, zero._partition_parameters_cache
    zero.world_size, zero._partition_parameters_cache = world_size, []
    try:
        return [[list(g["params"]) for g in groups] for groups in zero._partition_parameters()]
    finally:
        zero.world_size, zero._partition_parameters_cache = saved


@pytest.mark.parametrize("groups", [1, 2])
def test_the_partition_for_any_world_size_is_torchs(one_process_group, groups):
    zero = _zero(groups)
    for world in range(1, 8):
        ours = [[[id(p) for p in g] for g in rank] for rank in partition(zero, world)]
        theirs = [[[id(p) for p in g] for g in rank] for rank in _torch_partition(zero, world)]
        assert ours == theirs, world


def test_the_remap_moves_every_parameters_state_from_dp4_to_dp3(one_process_group):
    """The saved global flats of a DP4 job are built from Placement(4), each state element set
    to a value naming (parameter, key, element); every rank of DP3 applies its remap to them
    and must find exactly its parameters' values, and present = 1 for each of them."""
    zero = _zero()
    local = zero.optim
    params = [p for g in zero.param_groups for p in g["params"]]
    index = {id(p): i for i, p in enumerate(params)}
    old = Placement(zero, local, 4)
    keys = {"exp_avg": 1, "exp_avg_sq": 2, "step": 3}

    def value(p, key, j):
        return 1000.0 * index[id(p)] + 100.0 * keys[key] + j

    saved = {name: torch.zeros(4 * n) for name, n in old.padded.items() if name != "present"}
    present = torch.zeros(4 * old.padded["present"], dtype=torch.uint8)
    for p in params:
        rank, slot, entries = old.of[id(p)]
        present[rank * old.padded["present"] + slot] = 1
        for key, (name, offset, numel) in entries.items():
            at = rank * old.padded[name] + offset
            saved[name][at:at + numel] = torch.tensor([value(p, key, j) for j in range(numel)])

    new = Placement(zero, local, 3)
    for rank, groups in enumerate(partition(zero, 3)):
        mine = [(zero.param_groups[gi], p) for gi, ps in enumerate(groups) for p in ps]
        sizes, names, placed = flat_layout([spec_of(local, g, p) for g, p in mine])
        flats = {name: torch.full((new.padded[name],), -1.0) for name in saved}
        got_present = torch.zeros(new.padded["present"], dtype=torch.uint8)
        element = {name: 4 for name in saved}
        element["present"] = 1
        segments = remap_segments(old, [p for _, p in mine], placed, element)
        for name, segs in segments.items():
            src = (present.numpy().tobytes() if name == "present"
                   else saved[name].numpy().tobytes())
            dst = got_present if name == "present" else flats[name]
            view = dst.numpy().view("uint8")
            for a, b, n in segs:
                view[b:b + n] = memoryview(src)[a:a + n]
        assert got_present[:len(mine)].tolist() == [1] * len(mine)
        for slot, ((_, p), entries) in enumerate(zip(mine, placed)):
            for key, name, offset, numel in entries:
                want = torch.tensor([value(p, key, j) for j in range(numel)])
                assert torch.equal(flats[name][offset:offset + numel], want), (rank, key)


def test_a_digest_tells_placements_apart(one_process_group):
    zero = _zero()
    digests = {Placement(zero, zero.optim, w).digest() for w in (1, 2, 3, 4)}
    assert len(digests) == 4
    assert Placement(zero, zero.optim, 3).digest() == Placement(zero, zero.optim, 3).digest()
