"""reft.torch: snapshot a torch.nn.Module and its optimizer through a reft.Client.

    ckpt = reft.torch.Checkpointer(client, model, optimizer)   # registers everything, once
    step = ckpt.restore()        # None on a fresh start
    for step in ...:
        loss = model(batch); loss.backward()   # the previous snapshot's copy overlaps this
        ckpt.fence()             # before optimizer.step(): previous copy done
        optimizer.step()
        ckpt.snapshot(step)      # returns at once; copies nothing on this thread

Parameters are registered in place, each with its model layer (inferred: reft._layers). The
optimizer's state becomes views into one flat buffer per dtype and device, laid out layer by
layer and registered once as one view per layer (zero copy: see reft._optim_state), so a snapshot
gathers nothing and a restore writes the state straight back. CPU, CUDA and ROCm tensors are
all taken (reftd pulls device memory itself). Persistent module buffers (BatchNorm running
statistics) change during the forward pass, which runs while the copy is in flight, so they are
snapshotted from a shadow copy refreshed by snapshot() (small; queued on the current stream).
ZeroRedundancyOptimizer: its local shard's state is laid out in flats padded to the same size on
every rank (agreed once, over the optimizer's process group) and registered as the dp-ordered
parts of one global buffer per flat.
Reshape (restore(reshape=True), docs/recovery.md "Reshape"): parameters and persistent buffers
are registered under their module names ("param/<name>", "buffer/<name>"), which do not depend
on the layout, so a job that restarts with another dp restores them by name. The optimizer
state of a plain optimizer is replicated and reshapes the same way. A ZeroRedundancyOptimizer's
state is partitioned by parameter, and torch's partition changes with the world size: the
restarted rank computes where each of its parameters' state was saved and restores exactly
those ranges (reft._zero), checked against a digest of the saved placement.
PipelineBubbles sends HAS hints from a pipeline schedule (reft._bubbles). state_digest(model,
optimizer, *tensors) hashes a training state, to check a restore bit for bit.
"""

import hashlib
import torch as _torch

from .._torch_version import require_supported as _require_supported

_require_supported(_torch.__version__)

from .._bubbles import PipelineBubbles  # noqa: E402 - after the torch check
from .._torch_extras import DEFAULT_RNG, records as _extra_records
from .._optim_state import FlatOptimizerState
from .. import _layers
from .._zero import PLACEMENT, ZeroState

__all__ = ["Checkpointer", "PipelineBubbles", "state_digest"]


def state_digest(model, optimizer, *extra):
    """SHA-256 (hex) of a training state: the model's state_dict, the optimizer's state and any
    `extra` tensors, in a fixed order. Equal digests mean equal bytes, so a trainer that records
    it at each step can check a restore bit for bit (the examples and tests do)."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    for pid, st in sorted(optimizer.state_dict()["state"].items()):
        for k in sorted(st):
            v = st[k]
            h.update(f"{pid}/{k}".encode())
            h.update(v.detach().contiguous().cpu().numpy().tobytes() if _torch.is_tensor(v) else repr(v).encode())
    for t in extra:
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def _local_optimizer(optimizer):
    """(optimizer whose state to keep, the ZeroRedundancyOptimizer around it or None)."""
    try:
        from torch.distributed.optim import ZeroRedundancyOptimizer
    except ImportError:  # pragma: no cover - torch without distributed
        ZeroRedundancyOptimizer = ()
    if isinstance(optimizer, ZeroRedundancyOptimizer):
        if not hasattr(optimizer, "optim"):
            from .. import UnsupportedError
            raise UnsupportedError("ZeroRedundancyOptimizer(overlap_with_ddp=True) builds its "
                                   "local optimizer during training; reft.torch needs it first")
        return optimizer.optim, optimizer
    return optimizer, None


def _unwrapped(model):
    """The module a DistributedDataParallel / DataParallel wrapper trains: buffers are named
    alike whether the trainer passes the wrapper or its module."""
    wrappers = tuple(w for w in (getattr(_torch.nn.parallel, "DistributedDataParallel", None),
                                 getattr(_torch.nn, "DataParallel", None)) if w is not None)
    return model.module if isinstance(model, wrappers) else model


def _largest_across(group, sizes):
    """{name: (numel, dtype)} of every rank of `group`, each name at its largest numel."""
    import torch.distributed as dist
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, sizes, group=group)
    out = {}
    for rank_sizes in everyone:
        for name, (numel, dtype) in rank_sizes.items():
            out[name] = (max(numel, out.get(name, (0, dtype))[0]), dtype)
    return out


def _digest(names):
    """8 hex digits naming a list of parameter names (layout-independent, stable)."""
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:8]


class Checkpointer:
    """Registers `model` (parameters, persistent buffers) and `optimizer` state with `client`.

    kind: how the model (and a plain optimizer's state) is registered, "replicated" (identical
    across data parallel ranks) or "unique". Create it after the model is on its device and,
    for optimizers other than Adam, AdamW and SGD, after one optimizer step (their state
    layout is read from the state). With a ZeroRedundancyOptimizer the construction is a
    collective over its process group (the ranks agree on the buffers' sizes). Every parameter
    and persistent buffer is registered with its model layer, and the optimizer state with its
    parameter's: the planner sizes the layers it moves after a node loss from them
    (docs/planner.md "The online path"). The layers are inferred from the module tree
    (reft._layers, docs/client.md "Layers"; `self.layers` is {name: layer}); with pipeline
    stages (layout pp > 1) that is a collective over the default torch.distributed group.
    layer_of overrides it: a function of a parameter's or buffer's name (as named_parameters()
    gives it) to its layer (0..L-1 over the job, consecutive per pipeline stage) or None (no
    layer); nothing is inferred then. Between
    snapshot() and fence() the trainer must not modify the registered memory (docs/client.md
    "Between snapshot and fence"). `model` may be the module or its DistributedDataParallel
    wrapper: the buffers are named after the module either way.

    rng: the random number generators saved with every step and put back by restore(), so that
    a resumed run draws what an uninterrupted one would: "torch" (CPU), "device" (every CUDA
    device's, when CUDA is available), "python" (`random`), "numpy" (`numpy.random`); () saves
    none. extra: {name: obj} of objects with state_dict()/load_state_dict() saved and restored
    alike (a sampler's epoch and position). Both are per rank; a step saved without them (or
    with other ones) restores only with the same rng and extra.
    """

    def __init__(self, client, model, optimizer=None, kind="replicated", layer_of=None,
                 rng=DEFAULT_RNG, extra=None):
        self.client = client
        model = _unwrapped(model)
        self.model = model
        self.optimizer = optimizer
        persistent = set(model.state_dict(keep_vars=True))
        # Non-persistent buffers are derived caches, not training state.
        buffers = [(name, b) for name, b in model.named_buffers() if name in persistent]
        self.layers = self._layers(client, model, buffers, layer_of)
        for name, p in model.named_parameters():
            self._register("param/" + name, p.data, kind, layer=self.layers[name])
        self._shadows = []  # (module buffer, registered copy)
        for name, b in buffers:
            shadow = b.detach().clone(memory_format=_torch.contiguous_format)
            self._shadows.append((b, shadow))
            self._register("buffer/" + name, shadow, kind, layer=self.layers[name])
        self.state = None
        self._zero = None  # ZeroState when the optimizer is a ZeroRedundancyOptimizer
        # The optimizer's flats hold the state of this module's parameters only: one pipeline
        # stage's. Their names carry a digest of the parameter names, so the stages of one job
        # never save two tensors under one name (reftd refuses that), while every data
        # parallel rank of a stage, and every restart of it, names them alike.
        self._optim = "optim/%s/" % _digest(name for name, _ in model.named_parameters())
        if optimizer is not None:
            local, zero = _local_optimizer(optimizer)
            if zero is None:
                # Laid out layer by layer: each layer's state is registered with its layer.
                of_param = {id(p): self.layers[name] for name, p in model.named_parameters()}
                self.state = FlatOptimizerState(local, layer_of=lambda p: of_param.get(id(p)))
                for name, part, layer in self.state.layer_parts():
                    # optimizer=True: the planner counts replicated state as optimizer bytes.
                    self._register(self._optim + name, part, kind, layer=layer,
                                   optimizer=kind == "replicated")
            else:
                # A rank's flats hold the state of the parameters torch gave it, of any layers,
                # and are the same size on every rank: they are registered whole, with no layer.
                self._zero = ZeroState(zero, client, self._optim)
                agree = lambda sizes: _largest_across(zero.process_group, sizes)  # noqa: E731
                self.state = FlatOptimizerState(local, agree)
                self._zero.bind(self.state, self.state.agreed)
                for name, flat in self.state.named_buffers():
                    self._register(self._optim + name, flat, "unique", shard=self._zero.shard(name))
                self._register(self._optim + PLACEMENT, self._zero.digest, "replicated")
        self._records = _extra_records(rng, extra)
        for record in self._records:
            client.register(record.name, record.buffer, kind="unique")

    @staticmethod
    def _layers(client, model, buffers, layer_of):
        """{name: layer or None} of the parameters and `buffers` to register: layer_of's, else
        inferred from the module tree (reft._layers), numbered after the earlier stages'."""
        names = [name for name, _ in model.named_parameters()] + [name for name, _ in buffers]
        if layer_of is not None:
            return {name: layer_of(name) for name in names}
        local = _layers.infer(model, names)
        first = _layers.offset(client, _layers.count(local))
        return {name: first + layer for name, layer in local.items()}

    def _register(self, name, tensor, kind, shard=None, layer=None, optimizer=False):
        if not tensor.is_contiguous():
            raise ValueError("tensor %s is not contiguous" % name)
        self.client.register(name, tensor, kind=kind, shard=shard, layer=layer,
                             optimizer=optimizer)

    @property
    def optimizer_buffers(self):
        """{name: flat tensor} of the registered optimizer state (the state tensors are views)."""
        return dict(self.state.named_buffers()) if self.state is not None else {}

    def snapshot(self, step, **kwargs):
        """Starts the snapshot of `step` and returns; keyword arguments go to client.snapshot."""
        if self._shadows:
            self.client.fence()  # the shadows are rewritten: the previous copy must be done
            with _torch.no_grad():
                for live, shadow in self._shadows:
                    shadow.copy_(live)
        if self.state is not None:
            self.state.sync()
        if self._records:
            self.client.fence()  # no-op in a loop that fenced: the last copy no longer reads them
            for record in self._records:
                record.save()
        self.client.snapshot(step, **kwargs)

    def fence(self):
        """Waits until the last snapshot's copy no longer reads the registered memory."""
        self.client.fence()

    def restore(self, reshape=False, progress=None):
        """Restores the newest committed step into the model and optimizer; returns it or None.
        reshape=True restores a step saved under another layout by the buffers' names, a
        ZeroRedundancyOptimizer's state by its parameters (see the module docstring).
        progress: called with the restore's progress reports (reft.Client.restore)."""
        with _torch.no_grad():
            remap = self._zero.remap if reshape and self._zero is not None else None
            if self._zero is not None and remap is None:
                self._zero.expected = self._zero.current  # same layout: same placement
            step = self.client.restore(reshape=reshape, remap=remap, progress=progress)
            if step is None:
                return None
            for live, shadow in self._shadows:
                live.copy_(shadow)
            if self._zero is not None:
                self._zero.check_restored(step)
            if self.state is not None:
                self.state.restored()
        for record in self._records:
            record.load()
        return step
