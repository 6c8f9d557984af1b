"""reft.torch infers each registered tensor's model layer from the module tree (reft._layers),
lays the optimizer state out layer by layer and registers each layer's part with its layer;
layer_of= overrides the inference."""

import pytest
import torch
import torch.nn as nn

import reft
import reft.torch as rt
from reft import _layers
from conftest import client

BLOCKS = 3


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.attn = nn.Linear(8, 24)
        self.mlp = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
        self.register_buffer("mask", torch.ones(4, 4))


class GPT(nn.Module):
    """GPT-2's shape: token and position embeddings, blocks `h.N`, a final norm, the head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.wte = nn.Embedding(16, 8)
        self.wpe = nn.Embedding(4, 8)
        self.h = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.ln_f = nn.LayerNorm(8)
        self.head = nn.Linear(8, 16, bias=False)
        self.register_buffer("scratch", torch.zeros(3), persistent=False)  # not registered

    def forward(self, tokens):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.h:
            x = x + block.mlp(block.ln(x)) + block.attn(x)[..., :8]
        return self.head(self.ln_f(x))


def gpt_layers():
    """The documented rule for GPT: embeddings 0, block i 1+i, ln_f with the head last."""
    want = {"wte.weight": 0, "wpe.weight": 0, "ln_f.weight": BLOCKS + 1,
            "ln_f.bias": BLOCKS + 1, "head.weight": BLOCKS + 1}
    for i in range(BLOCKS):
        for name, _ in Block().named_parameters():
            want["h.%d.%s" % (i, name)] = 1 + i
        want["h.%d.mask" % i] = 1 + i
    return want


def adam_after_a_step(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randint(0, 16, (2, 4))).sum().backward()
    opt.step()
    return opt


def test_gpt_blocks_are_layers_between_embeddings_and_head(daemon):
    model = GPT()
    with client(daemon, job="layers-gpt") as c:
        ckpt = rt.Checkpointer(c, model)
        assert ckpt.layers == gpt_layers()


def test_sequential_children_with_tensors_are_layers_in_order(daemon):
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.BatchNorm1d(8), nn.Linear(8, 2))
    with client(daemon, job="layers-seq") as c:
        ckpt = rt.Checkpointer(c, model)
    want = {"0.weight": 0, "0.bias": 0, "3.weight": 2, "3.bias": 2}
    want.update({"2." + n: 1 for n in ("weight", "bias", "running_mean", "running_var",
                                       "num_batches_tracked")})
    assert ckpt.layers == want
    # A wrapper around such a Sequential, and a module with no children at all.
    wrapped = nn.Module()
    wrapped.net = model
    names = [n for n, _ in wrapped.named_parameters()]
    assert _layers.infer(wrapped, names) == {"net." + n: want[n]
                                             for n, _ in model.named_parameters()}
    assert _layers.infer(nn.Linear(2, 2), ["weight", "bias"]) == {"weight": 0, "bias": 0}


def test_a_ddp_wrapper_gives_the_modules_names_and_layers(daemon, tmp_path):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "rdzv"), rank=0,
                            world_size=1)
    try:
        model = GPT()
        wrapper = nn.parallel.DistributedDataParallel(model)
        with client(daemon, job="layers-ddp") as c:
            direct = rt.Checkpointer(c, model).layers
        with client(daemon, job="layers-ddp-wrapped") as c:
            through = rt.Checkpointer(c, wrapper).layers
        assert through == direct == gpt_layers()
    finally:
        dist.destroy_process_group()


def _parts_by_layer(ckpt):
    """{layer: [registered optimizer part]} (the "present" bytes excluded)."""
    out = {}
    for name, part, layer in ckpt.state.layer_parts():
        if name != "present":
            out.setdefault(layer, []).append(part)
    return out


def _inside(t, parts):
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    return any(p.data_ptr() <= start and end <= p.data_ptr() + p.numel() * p.element_size()
               for p in parts)


def test_optimizer_state_is_registered_with_its_parameters_layer(daemon):
    model = GPT()
    opt = adam_after_a_step(model)
    with client(daemon, job="layers-optim") as c:
        ckpt = rt.Checkpointer(c, model, opt)
        parts = _parts_by_layer(ckpt)
        assert sorted(parts) == list(range(BLOCKS + 2))  # every layer, nothing without one
        layer_of = {id(p): ckpt.layers[n] for n, p in model.named_parameters()}
        want = {}
        for p, st in opt.state.items():
            for v in st.values():
                # Every state tensor lies in its parameter's layer's part...
                assert _inside(v, parts[layer_of[id(p)]]), (ckpt.layers, v.shape)
                want[layer_of[id(p)]] = want.get(layer_of[id(p)], 0) + v.numel() * v.element_size()
        # ... and the parts hold exactly the optimizer's bytes, per layer.
        got = {l: sum(t.numel() * t.element_size() for t in ts) for l, ts in parts.items()}
        assert got == want
        # The registered parts are the state itself: a step and a restore go through them.
        model(torch.randint(0, 16, (2, 4))).sum().backward()
        opt.step()
        ckpt.snapshot(1)
        assert c.wait_committed(1, timeout=30)
        saved = {k: v.clone() for k, v in opt.state[model.head.weight].items()}
        for st in opt.state.values():
            for v in st.values():
                v.zero_()
        assert ckpt.restore() == 1
        for k, v in saved.items():
            assert torch.equal(opt.state[model.head.weight][k], v), k


def test_layer_of_overrides_and_none_means_no_layer(daemon):
    model = GPT()
    opt = adam_after_a_step(model)

    def layer_of(name):
        return 5 if name.startswith("h.1.") else None

    with client(daemon, job="layers-override") as c:
        ckpt = rt.Checkpointer(c, model, opt, layer_of=layer_of)
        assert ckpt.layers == {n: layer_of(n) for n in gpt_layers()}
        names = {layer: name for name, _, layer in ckpt.state.layer_parts() if name != "present"}
        assert sorted(names, key=lambda l: -1 if l is None else l) == [None, 5]
        assert names[5].endswith("/layer5") and "layer" not in names[None]
        mine = {id(p) for p in model.h[1].parameters()}
        five = _parts_by_layer(ckpt)[5]
        for p, st in opt.state.items():
            for v in st.values():
                assert _inside(v, five) == (id(p) in mine)


def test_a_pipeline_stage_numbers_after_the_stages_before_it(daemon):
    assert _layers.stage_offset([(0, 3), (1, 4), (0, 3), (2, 2), (1, 4)], 2, 3) == 7
    assert _layers.stage_offset([(0, 3)], 0, 2) == 0
    with pytest.raises(reft.InvalidArgumentError, match="pp1"):
        _layers.stage_offset([(0, 3), (1, 4), (1, 5)], 2, 3)
    with pytest.raises(reft.InvalidArgumentError, match="pp0"):
        _layers.stage_offset([(1, 4)], 1, 2)
    # Without torch.distributed a stage cannot learn its first layer: the error names the fix.
    layout = reft.Layout(dp=1, tp=1, pp=2, zero=0)
    with client(daemon, job="layers-pp", pp=1, layout=layout) as c:
        with pytest.raises(reft.InvalidArgumentError,
                           match="init_process_group.*or pass layer_of="):
            rt.Checkpointer(c, GPT())
        ckpt = rt.Checkpointer(c, GPT(), layer_of=lambda name: 9)
        assert set(ckpt.layers.values()) == {9}
