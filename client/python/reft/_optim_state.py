"""Optimizer state that lives in a few flat buffers reft registers once (zero-copy snapshots).

Every state tensor of the optimizer (AdamW's step / exp_avg / exp_avg_sq, SGD's
momentum_buffer, ...) becomes a view into one flat tensor per (dtype, device). torch's
optimizers update their state in place, so after that the registered buffers ARE the state:
a snapshot copies nothing on the trainer's thread, and a restore writes the state back
directly. A parameter's state becomes views once:
- at construction, when the optimizer already has state for it (one copy);
- at construction too for Adam/AdamW without state yet: the views are installed zeroed with
  step 0, which is exactly torch's lazy initialisation, so torch's first step finds them;
- otherwise (e.g. SGD, whose first step clones the gradient into momentum_buffer) at the
  first snapshot after torch created it (one copy).
Given each parameter's model layer, the state is laid out layer by layer, so that every flat
is a sequence of one range per layer, registered with that layer (layer_parts()).
A byte per parameter ("present") is registered with the state, so a restore knows which
parameters had state when the snapshot was taken (SGD before its first step has none).

If something replaces the state tensors later (optimizer.load_state_dict, user code), the next
snapshot notices and copies them into the flat buffers once more (`readoptions` counts it); the
layout (dtype, device, size of every state tensor) must stay the one fixed at construction.

`agree` lets the ranks of a sharded optimizer register the same buffers: reftd copies each
rank's "unique" buffers to its ring neighbour's slot, which has room for buffers of the same
names and sizes only, while ZeRO shards differ in size. It maps this rank's {name: (numel,
dtype)} to the job's (every name any rank has, each at its largest size); buffers are padded
with zeros, and a name this rank lacks gets a zero buffer.
"""

import operator

import torch

_is = operator.is_


class _Entry:
    __slots__ = ("key", "shape", "dtype", "device", "flat", "offset", "numel", "view")

    def __init__(self, key, shape, dtype, device):
        self.key, self.shape, self.dtype, self.device = key, torch.Size(shape), dtype, device
        self.numel = self.shape.numel()
        self.flat = self.offset = self.view = None


def _spec_of(state):
    """(key, shape, dtype, device) of the tensors in one parameter's live state, by key."""
    return [(k, v.shape, v.dtype, v.device) for k, v in sorted(state.items())
            if isinstance(v, torch.Tensor)]


def _lazy_adam(optimizer):
    return isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)) and not (
        optimizer.defaults.get("capturable") or optimizer.defaults.get("fused"))


def _predicted_spec(optimizer, group, p):
    """The state torch's first step will create for `p`, or None for an optimizer whose state
    layout reft does not know."""
    if not p.requires_grad:
        return []
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        if _lazy_adam(optimizer):
            step = ("step", (), torch.tensor(0.).dtype, torch.device("cpu"))
        else:  # capturable / fused: the step counter lives on the parameter's device
            step = ("step", (1,), torch.float32, p.device)
        keys = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group.get("amsgrad") else [])
        return sorted([step] + [(k, p.shape, p.dtype, p.device) for k in keys])
    if isinstance(optimizer, torch.optim.SGD):
        if group.get("momentum", 0) == 0:
            return []  # torch stores momentum_buffer = None
        return [("momentum_buffer", p.shape, p.dtype, p.device)]
    return None


def _names(keys):
    """{(dtype, device): "<dtype>/<device type>"}, the device type numbered ("cuda.0",
    "cuda.1") when this process holds state on several devices of one type. Names carry no
    device index, which torchrun may change between restarts."""
    indices = {}
    for _, device in keys:
        indices.setdefault(device.type, set()).add(-1 if device.index is None else device.index)
    out = {}
    for dtype, device in keys:
        where = device.type
        if len(indices[device.type]) > 1:
            order = sorted(indices[device.type])
            where += ".%d" % order.index(-1 if device.index is None else device.index)
        out[(dtype, device)] = "%s/%s" % (str(dtype).replace("torch.", ""), where)
    return out


def flat_layout(specs, order=None):
    """Where the state tensors of parameters with state `specs` (one list of (key, shape, dtype,
    device) per parameter, in the local optimizer's order) live: ({(dtype, device): numel of its
    flat}, {(dtype, device): flat name}, per parameter [(key, flat name, offset, numel)]).
    `order`: the parameters' indexes in the order their state is laid out (default: theirs)."""
    sizes, placed = {}, [None] * len(specs)
    for i in range(len(specs)) if order is None else order:
        entries = []
        for key, shape, dtype, device in specs[i]:
            numel = torch.Size(shape).numel()
            offset = sizes.get((dtype, device), 0)
            sizes[(dtype, device)] = offset + numel
            entries.append((key, (dtype, device), offset, numel))
        placed[i] = entries
    sizes = {key: n for key, n in sizes.items() if n > 0}
    names = _names(sizes)
    return sizes, names, [[(k, names.get(where), o, n) for k, where, o, n in entries]
                          for entries in placed]


def spec_of(optimizer, group, p, where="the Checkpointer"):
    """The state layout of parameter `p` of `group`: its live state, else the state torch's
    first step will create; InvalidArgumentError for an optimizer whose layout reft does not
    know before its first step."""
    live = optimizer.state.get(p)
    spec = _spec_of(live) if live else _predicted_spec(optimizer, group, p)
    if spec is None:
        from . import InvalidArgumentError
        raise InvalidArgumentError(
            "%s has no state for a parameter yet, and reft.torch does not know its layout: run "
            "one optimizer step before creating %s" % (type(optimizer).__name__, where))
    return spec


def _layer_key(layer):
    return (0, 0) if layer is None else (1, layer)  # the state of no layer first


class FlatOptimizerState:
    def __init__(self, optimizer, agree=None, layer_of=None):
        """layer_of: a function of a parameter to its model layer (or None); the state is then
        laid out layer by layer, so that each layer's is one range of every flat (layer_parts).
        Not with `agree` (a sharded optimizer's parts are the same size on every rank)."""
        self.optimizer = optimizer
        self.readoptions = 0
        self._slots = []  # per parameter: (param, [_Entry])
        params = [(group, p) for group in optimizer.param_groups for p in group["params"]]
        specs = [spec_of(optimizer, group, p) for group, p in params]
        self.layers = [None if layer_of is None else layer_of(p) for _, p in params]
        order = None
        if layer_of is not None:
            assert agree is None, "per-layer layout of a sharded optimizer's state"
            order = sorted(range(len(params)), key=lambda i: (_layer_key(self.layers[i]), i))
        sizes, names, placed = flat_layout(specs, order)
        for (_, p), spec, where in zip(params, specs, placed):
            entries = [_Entry(*s) for s in spec]
            for e, (_, _, offset, _) in zip(entries, where):
                e.offset = offset
            self._slots.append((p, entries))
        self.placement = placed  # per slot [(key, flat name, offset, numel)] (reft._zero)
        want = {names[key]: (n, key[0]) for key, n in sizes.items()}
        want["present"] = (len(self._slots), torch.uint8)
        if agree is not None:
            want = agree(want)
        # Element counts of the registered buffers ("present" at least one byte).
        self.agreed = {name: n for name, (n, _) in want.items()}
        self.agreed["present"] = max(self.agreed["present"], 1)
        self.flats = {key: torch.zeros(want[names[key]][0], dtype=key[0], device=key[1])
                      for key in sizes}
        for _, entries in self._slots:
            for e in entries:
                e.flat = self.flats[(e.dtype, e.device)]
                e.view = e.flat[e.offset:e.offset + e.numel].view(e.shape)
        self.present = torch.zeros(max(want.pop("present")[0], 1), dtype=torch.uint8)
        self._buffers = [(names[key], flat) for key, flat in self.flats.items()]
        self._buffers += [(name, torch.zeros(n, dtype=dtype))  # other ranks' kinds of state
                          for name, (n, dtype) in sorted(want.items(), key=lambda kv: kv[0])
                          if name not in names.values()]
        self._buffers.append(("present", self.present))
        self._pending = set()  # slots whose state torch has not created yet
        with torch.no_grad():
            for i, (p, entries) in enumerate(self._slots):
                if not entries:
                    continue
                if optimizer.state.get(p):
                    self._adopt(i)
                elif _lazy_adam(optimizer):
                    self._install(i)  # zeros and step 0: torch's own initial state
                else:
                    self._pending.add(i)
        self._watch()

    def named_buffers(self):
        """(name, tensor) of the buffers to register: "<dtype>/<device type>" flats, then
        "present"."""
        return list(self._buffers)

    def layer_parts(self):
        """(name, tensor, layer) of the state laid out per layer: every flat cut into one view
        per layer ("<flat>/layer<N>"; the state of parameters of no layer keeps the flat's name),
        then "present" (no layer). The views tile their flat: registering them registers it."""
        ranges = {}  # flat name: {layer: [first, end)}
        for layer, entries in zip(self.layers, self.placement):
            for _, name, offset, numel in entries:
                if numel:
                    r = ranges.setdefault(name, {}).setdefault(layer, [offset, offset + numel])
                    r[0], r[1] = min(r[0], offset), max(r[1], offset + numel)
        out = []
        for name, flat in self._buffers:
            if flat is self.present:
                continue
            at = 0
            for layer, (first, end) in sorted(ranges.get(name, {}).items(),
                                              key=lambda kv: _layer_key(kv[0])):
                assert first == at, "the state of layer %s is not one range of %s" % (layer, name)
                out.append((name if layer is None else "%s/layer%d" % (name, layer),
                            flat[first:end], layer))
                at = end
            assert at == flat.numel(), "flat %s is not tiled by its layers' state" % name
        out.append(("present", self.present, None))
        return out

    def sync(self):
        """Before every snapshot: no tensor work unless the state changed hands. Adopts state
        torch created since (SGD's first step) and state something replaced (one copy each)."""
        state = self.optimizer.state
        if (state is self._state and all(map(_is, map(state.get, self._params), self._dicts))
                and all(map(_is, map(dict.get, self._entry_dicts, self._keys), self._views))
                and not self._pending):
            return
        with torch.no_grad():
            for i, (p, entries) in enumerate(self._slots):
                st = state.get(p)
                if not st or not entries:
                    continue
                if i in self._pending:
                    self._pending.discard(i)
                    self._adopt(i)
                elif any(st.get(e.key) is not e.view for e in entries):
                    self.readoptions += 1
                    self._adopt(i)
        self._watch()

    def restored(self):
        """After a restore filled the flat buffers: makes the optimizer's state the views for
        every parameter that had state in the snapshot, and drops it for those that had none."""
        present = self.present.tolist()
        for i, (p, entries) in enumerate(self._slots):
            if not entries:
                continue
            if present[i]:
                self._install(i)
            elif self.optimizer.state.get(p):
                del self.optimizer.state[p]
                self._pending.add(i)
        self._watch()

    def _adopt(self, i):
        p, entries = self._slots[i]
        st = self.optimizer.state[p]
        have = {k: (s, d, dev) for k, s, d, dev in _spec_of(st)}
        for e in entries:
            shape, dtype, device = have.get(e.key, (None, None, None))
            if shape is None or shape.numel() != e.numel or dtype != e.dtype or device != e.device:
                from . import InvalidArgumentError
                raise InvalidArgumentError(
                    "optimizer state %r of parameter %d is %s, reft.torch laid it out as %s %s "
                    "%s: the state layout changed after the Checkpointer was created" % (
                        e.key, i, "missing" if shape is None else "%s %s %s" % (
                            tuple(shape), dtype, device), tuple(e.shape), e.dtype, e.device))
            e.view = e.flat[e.offset:e.offset + e.numel].view(shape)
            e.view.copy_(st[e.key])
            st[e.key] = e.view
        self.present[i] = 1

    def _install(self, i):
        p, entries = self._slots[i]
        st = self.optimizer.state[p]
        for e in entries:
            st[e.key] = e.view
        self.present[i] = 1
        self._pending.discard(i)

    def _watch(self):
        """What sync() compares by identity: the state dict, each parameter's state dict, and
        each installed view."""
        state = self.optimizer.state
        self._state = state
        installed = [(p, entries) for i, (p, entries) in enumerate(self._slots)
                     if entries and i not in self._pending and state.get(p)]
        self._params = [p for p, _ in installed]
        self._dicts = [state.get(p) for p in self._params]
        self._entry_dicts, self._keys, self._views = [], [], []
        for (p, entries), d in zip(installed, self._dicts):
            for e in entries:
                self._entry_dicts.append(d)
                self._keys.append(e.key)
                self._views.append(e.view)
