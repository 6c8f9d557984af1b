"""reft.torch: snapshot a torch.nn.Module and its optimizer through a reft.Client.

    ckpt = reft.torch.Checkpointer(client, model, optimizer)   # registers everything
    step = ckpt.restore()        # None on a fresh start
    for step in ...:
        ckpt.fence()             # before optimizer.step(): previous copy done
        optimizer.step()
        ckpt.snapshot(step)

Parameters and buffers are registered in place (no copy). Optimizer state (e.g. AdamW's
exp_avg / exp_avg_sq / step) is flattened into one contiguous tensor per dtype, which is
refreshed from the live state before each snapshot and scattered back after restore.
"""

import torch as _torch

__all__ = ["Checkpointer"]


def _state_tensors(optimizer):
    """(key, tensor) for every tensor in the optimizer state, in a stable order."""
    index = {}
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            index[id(p)] = (gi, pi)
    out = []
    for p, st in optimizer.state.items():
        gi, pi = index[id(p)]
        for k in sorted(st):
            v = st[k]
            if isinstance(v, _torch.Tensor):
                out.append(((gi, pi, k), v))
    out.sort(key=lambda kv: kv[0])
    return out


class Checkpointer:
    """Registers `model` (parameters and buffers) and `optimizer` state with `client`.

    The optimizer must have its state initialised (one optimizer step, or a zero-grad step)
    before construction so the flattened layout is known; the layout is then fixed.
    """

    def __init__(self, client, model, optimizer=None, kind="replicated"):
        self.client = client
        self.model = model
        self.optimizer = optimizer
        for name, p in model.named_parameters():
            self._register("param/" + name, p.data, kind)
        for name, b in model.named_buffers():
            self._register("buffer/" + name, b, kind)
        self._flat = {}
        self._slices = []
        if optimizer is not None:
            tensors = _state_tensors(optimizer)
            sizes = {}
            for key, t in tensors:
                off = sizes.get(t.dtype, 0)
                self._slices.append((key, t.dtype, off, t.numel(), t.shape))
                sizes[t.dtype] = off + t.numel()
            for dt, n in sizes.items():
                flat = _torch.zeros(max(n, 1), dtype=dt)
                self._flat[dt] = flat
                self._register("optim/" + str(dt).replace("torch.", ""), flat, "unique"
                               if kind == "unique" else kind)
            self._gather()

    def _register(self, name, tensor, kind):
        if not tensor.is_contiguous():
            raise ValueError("tensor %s is not contiguous" % name)
        self.client.register(name, tensor, kind=kind)

    def _state_by_key(self):
        return dict(_state_tensors(self.optimizer))

    def _gather(self):
        live = self._state_by_key()
        for key, dt, off, n, _ in self._slices:
            self._flat[dt][off:off + n].copy_(live[key].reshape(-1))

    def _scatter(self):
        live = self._state_by_key()
        for key, dt, off, n, shape in self._slices:
            live[key].copy_(self._flat[dt][off:off + n].reshape(shape))

    def snapshot(self, step):
        """Copies optimizer state into its flat buffers, then starts the snapshot."""
        if self.optimizer is not None:
            self.client.fence()  # the flat buffers may still be read by the previous copy
            with _torch.no_grad():
                self._gather()
        self.client.snapshot(step)

    def fence(self):
        self.client.fence()

    def restore(self):
        """Restores the newest committed step into the model and optimizer; returns it or None."""
        with _torch.no_grad():
            step = self.client.restore()
            if step is not None and self.optimizer is not None:
                self._scatter()
        return step
