"""reft.torch._dcp_layout: how a DCP save is laid out in reft buffers (pure; no daemon, no
torch.distributed): layers read from FQNs, equal shard parts sized by the coordinator, names
that carry sizes."""
import pytest

pytest.importorskip("torch")  # reft.torch's package imports torch
from reft.torch import _dcp_layout as L  # noqa: E402


def rank(pp, tp, dp, chunks, held=None, meta_held=0, reserve=L.BYTES_RESERVE):
    offsets, ends = L.local_layout(chunks)
    return L.RankPlan(pp, tp, dp, offsets, ends, held or {}, meta_held, reserve)


def test_layers_and_optimizer_state_are_read_from_the_fqn():
    assert L.bucket_of("model.layers.3.attention.wq.weight") == (3, False)
    assert L.bucket_of("optim.state.layers.3.attention.wq.weight.exp_avg") == (3, True)
    assert L.bucket_of("model.tok_embeddings.weight") == (None, False)
    assert L.bucket_of("optim.state.output.weight.step") == (None, True)


def test_a_rank_lays_each_bucket_out_on_its_own_aligned():
    offsets, ends = L.local_layout([("b", "layers.0.w2", 10), ("a", "layers.0.w1", 100),
                                    ("c", "layers.1.w1", 8), ("d", "norm.weight", 4)])
    assert offsets["a"] == ((0, False), 0, 100)
    assert offsets["b"] == ((0, False), 128, 10)  # after "a", 64-byte aligned
    assert offsets["c"] == ((1, False), 0, 8)
    assert ends == {(0, False): 192, (1, False): 64, (None, False): 64}


def test_stack_indexes_are_numbered_over_the_job_and_the_rest_goes_first_or_last():
    first = rank(0, 0, 0, [("e", "tok_embeddings.weight", 8), ("a", "layers.0.w", 8)])
    last = rank(1, 0, 0, [("b", "layers.7.w", 8), ("n", "norm.weight", 8)])
    assert L.layer_numbers([first, last]) == {(0, None): 0, (0, 0): 1, (1, 7): 2, (1, None): 3}


def test_replicas_plan_the_same_chunks_shards_do_not():
    chunks = [(("w", (0,)), "layers.0.w", 64)]
    assert L.replicas_alike([rank(0, 0, 0, chunks), rank(0, 0, 1, chunks)])
    other = [(("w", (8,)), "layers.0.w", 64)]
    assert not L.replicas_alike([rank(0, 0, 0, chunks), rank(0, 0, 1, other)])


def test_shards_of_a_group_get_equal_parts_named_by_their_size():
    small = rank(0, 0, 0, [(("w", (0,)), "layers.0.w", 5000)])
    large = rank(0, 0, 1, [(("w", (5,)), "layers.0.w", 9000), (("x", (0,)), "norm.w", 10)])
    out = L.tensor_buffers([small, large], sharded=True)
    a, b = out[0][(0, False)], out[1][(0, False)]
    assert a.size == b.size == 3 * L.TENSOR_UNIT  # the larger need, in units
    assert (a.name, a.base, b.base) == ("dcp/L1/param.3", 0, a.size)
    assert a.layer == b.layer == 1
    # Every member registers every bucket of its group, used or not: the parts must tile.
    assert set(out[0]) == set(out[1]) == {(0, False), (None, False)}
    assert out[0][(None, False)].name == out[1][(None, False)].name


def test_a_size_every_member_holds_is_kept_while_it_fits_and_replaced_when_it_does_not():
    held = {(0, False): 4 * L.TENSOR_UNIT}
    ranks = [rank(0, 0, d, [((d,), "layers.0.w", 5000)], held=held) for d in range(2)]
    assert L.tensor_buffers(ranks, sharded=True)[0][(0, False)].size == 4 * L.TENSOR_UNIT
    grown = [rank(0, 0, d, [((d,), "layers.0.w", 20000)], held=held) for d in range(2)]
    assert L.tensor_buffers(grown, sharded=True)[0][(0, False)].size == 5 * L.TENSOR_UNIT


def test_replicas_register_their_parts_whole():
    chunks = [(("w", (0,)), "optim.state.layers.2.w.exp_avg", 4096)]
    out = L.tensor_buffers([rank(0, 0, 0, chunks), rank(0, 0, 1, chunks)], sharded=False)
    assert out[0] == out[1] == {(2, True): L.Buffer("dcp/L1/optim.1", 4096, 0, 1, True)}


def test_the_metadata_part_has_room_for_the_items_each_rank_asks_for():
    ranks = [rank(0, 0, 0, [], reserve=1000), rank(0, 0, 1, [], reserve=300000)]
    metas = L.meta_buffers(ranks, md_len=5000)
    assert metas[0].size == metas[1].size >= 305000
    assert metas[0].size % L.META_UNIT == 0
    assert (metas[0].base, metas[1].base) == (0, metas[0].size)
    kept = [rank(0, 0, d, [], meta_held=metas[0].size) for d in range(2)]
    assert L.meta_buffers(kept, md_len=5000)[0].size == metas[0].size
    assert L.replica_meta_size(5000, 0) == L.META_UNIT * 2
    assert L.replica_meta_size(5000, L.META_UNIT) == L.META_UNIT
