"""A ZeroRedundancyOptimizer's state across a change of world size (restore(reshape=True)).

torch partitions a ZeroRedundancyOptimizer's parameters, not its bytes: per parameter group,
largest first, each parameter goes to the rank holding the fewest elements so far. Each rank's
local optimizer keeps the state of its parameters, which reft.torch lays out in flat buffers
(reft._optim_state), padded to the same size on every rank. Those flats are registered as the
equal, dp-ordered parts of one global buffer per name, so the bytes of every parameter's state
have a global address: (its rank's part) + (its offset in that rank's flat).

Under another world size the partition changes, so a rank's new state is scattered over the old
ranks' parts. The partition and the flat layout are deterministic functions of the model, the
optimizer and the world size, so a restarted rank computes both for the saved world size and
asks reftd for exactly its parameters' ranges (Client.restore's remap). To catch a layout that
differs from what was saved (another torch, another model), every snapshot carries a digest of
the job's placement ("optim/<stage>/zero_placement", replicated); a reshaped restore compares the saved
digest with the one computed for the saved world size and refuses to go on when they differ.
"""

import hashlib
import json

import torch

from ._optim_state import flat_layout, spec_of

PLACEMENT = "zero_placement"  # registered as "optim/<stage>/zero_placement"


def partition(zero, world_size):
    """torch's partition of `zero`'s parameters over `world_size` ranks
    (ZeroRedundancyOptimizer._partition_parameters): per rank, per parameter group, the
    parameters in the order that rank's local optimizer holds them."""
    ranks = [[[] for _ in zero.param_groups] for _ in range(world_size)]
    sizes = [0] * world_size
    for gi, group in enumerate(zero.param_groups):
        for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):  # stable
            rank = min(range(world_size), key=sizes.__getitem__)  # the first smallest
            ranks[rank][gi].append(p)
            sizes[rank] += p.numel()
    return ranks


class Placement:
    """Where every parameter's state lives under one world size: per parameter (by identity)
    its rank, slot in that rank's local optimizer and [(key, flat name, offset, numel)], and
    each flat's padded size (elements; "present": one byte per slot)."""

    def __init__(self, zero, local, world_size):
        index = {id(p): i for i, p in enumerate(p for g in zero.param_groups for p in g["params"])}
        self.world_size = world_size
        self.of = {}
        self.padded = {"present": 1}
        self._described = []
        for rank, groups in enumerate(partition(zero, world_size)):
            params = [(zero.param_groups[gi], p) for gi, ps in enumerate(groups) for p in ps]
            specs = [spec_of(local, group, p, "the Checkpointer (ZeRO reshape)")
                     for group, p in params]
            sizes, names, placed = flat_layout(specs)
            for slot, ((_, p), entries) in enumerate(zip(params, placed)):
                self.of[id(p)] = (rank, slot, {key: (name, off, n) for key, name, off, n in entries})
                self._described.append((rank, slot, index[id(p)], entries))
            for key, n in sizes.items():
                self.padded[names[key]] = max(self.padded.get(names[key], 0), n)
            self.padded["present"] = max(self.padded["present"], len(params))

    def digest(self):
        """32 bytes that change with any parameter's rank, slot, keys, flats or offsets."""
        text = json.dumps([self.world_size, sorted(self.padded.items()), self._described])
        return hashlib.sha256(text.encode()).digest()


def remap_segments(old, params, placed, element_sizes):
    """{flat name: [(src, dst, length) in bytes]} filling a rank whose local optimizer holds
    `params` laid out as `placed` (FlatOptimizerState.placement) from the state saved under
    placement `old`: each state tensor from its old rank's part of the global flat, each slot's
    "present" byte likewise. Names this rank registers but no segment fills get [] (zeros)."""
    out = {name: [] for name in element_sizes}
    for slot, (p, entries) in enumerate(zip(params, placed)):
        rank, old_slot, old_entries = old.of[id(p)]
        out["present"].append((rank * old.padded["present"] + old_slot, slot, 1))
        for key, name, offset, numel in entries:
            old_name, old_offset, old_numel = old_entries[key]
            if old_name != name or old_numel != numel:
                from . import InvalidArgumentError
                raise InvalidArgumentError(
                    "optimizer state %r of a parameter was saved as %s[%d] and is laid out as "
                    "%s[%d] now: the optimizer's state layout changed" % (
                        key, old_name, old_numel, name, numel))
            size = element_sizes[name]
            src = (rank * old.padded[name] + old_offset) * size
            out[name].append((src, offset * size, numel * size))
    return out


class ZeroState:
    """What reft.torch keeps for a ZeroRedundancyOptimizer: the current placement (checked
    against the sizes the ranks agreed on), the flats' shard coordinates and the remap."""

    def __init__(self, zero, client, prefix="optim/"):
        import torch.distributed as dist
        self.zero = zero
        self.prefix = prefix  # of the registered names (the Checkpointer's stage scope)
        self.rank = dist.get_rank(zero.process_group)
        self.world_size = dist.get_world_size(zero.process_group)
        if client.layout.dp != self.world_size or client.coordinates.dp != self.rank:
            from . import InvalidArgumentError
            raise InvalidArgumentError(
                "the ZeroRedundancyOptimizer is rank %d of %d in its process group, the reft "
                "client is dp %d of %d: the optimizer must be partitioned over the job's data "
                "parallel ranks" % (self.rank, self.world_size, client.coordinates.dp,
                                    client.layout.dp))
        self.digest = torch.zeros(32, dtype=torch.uint8)  # registered; holds `current`
        self.current = bytes(32)  # this layout's placement digest (zeros: not computable)
        self.expected = None  # the digest a restore must find
        self.reason = None    # why a reshape into another world size is not possible

    def bind(self, state, agreed):
        """After FlatOptimizerState laid out this rank's state with the agreed sizes."""
        self.state = state
        self.element_sizes = {name: flat.element_size() for name, flat in state.named_buffers()}
        try:
            now = Placement(self.zero, state.optimizer, self.world_size)
        except Exception as e:  # an optimizer whose layout is known only after its first step
            self.reason = str(e)
            return
        computed = {name: n for name, n in now.padded.items()}
        if computed != agreed or self._own(now) != state.placement:
            self.reason = ("torch's partition or reft.torch's layout of it is not what reft "
                           "computes (sizes %s, agreed %s)" % (computed, agreed))
            return
        self.current = now.digest()
        self.digest.copy_(torch.frombuffer(bytearray(self.current), dtype=torch.uint8))

    def _own(self, placement):
        params = [p for g in self.state.optimizer.param_groups for p in g["params"]]
        return [[(k, name, off, n) for k, (name, off, n) in sorted(
            placement.of[id(p)][2].items(), key=lambda kv: kv[0])] for p in params]

    def shard(self, name):
        """(offset, total) in bytes of this rank's part of global flat `name`."""
        part = self.element_sizes[name] * dict(self.state.named_buffers())[name].numel()
        return self.rank * part, self.world_size * part

    def remap(self, saved):
        """Client.restore's remap for a step saved under layout `saved`."""
        if saved.dp == self.world_size:
            self.expected = self.current
            return None
        if self.reason is not None:
            from . import UnsupportedError
            raise UnsupportedError("the ZeroRedundancyOptimizer state saved with dp=%d cannot "
                                   "be reshaped into dp=%d: %s" % (saved.dp, self.world_size,
                                                                   self.reason))
        old = Placement(self.zero, self.state.optimizer, saved.dp)
        self.expected = old.digest()
        params = [p for g in self.state.optimizer.param_groups for p in g["params"]]
        segments = remap_segments(old, params, self.state.placement, self.element_sizes)
        return {self.prefix + name: segs for name, segs in segments.items()}

    def check_restored(self, step):
        """After a restore: the saved placement is the one the remap assumed. The digest buffer
        then holds this layout's again, for the next snapshot."""
        got, want = bytes(self.digest.tolist()), self.expected
        self.expected = None
        self.digest.copy_(torch.frombuffer(bytearray(self.current), dtype=torch.uint8))
        if want is not None and got != want:
            from . import CorruptedError
            raise CorruptedError(
                "step %d's ZeroRedundancyOptimizer placement digest differs from the one this "
                "process computes for the layout it was saved under: the model, the optimizer "
                "or torch's partition changed since; its optimizer state is not usable" % step)
