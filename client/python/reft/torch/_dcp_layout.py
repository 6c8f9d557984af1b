"""How reft.torch.dcp lays one DCP save out in reft buffers (docs/dcp.md "How it is stored").

Pure bookkeeping, no torch: each rank says which tensor chunks it holds and how many bytes each
takes (its local plan); DCP's coordinator assigns every rank its buffers (its global plan).

A rank's chunks are grouped by model layer, one buffer per (layer, parameters or optimizer
state), so that reft's planner sees a DCP job's bytes per layer as it sees a native job's.
The layer is read from the chunk's FQN: the first path component that is a number is a layer
stack's index ("layers.3.attention.wq.weight", "optim.state.layers.3.….exp_avg"); stack indexes
are numbered 1, 2, … in order over the job, and what is outside every stack is layer 0 on the
first pipeline stage and the last layer after the stacks on the others (embeddings before,
norm and output after). An FQN with a path component "state" is optimizer state.

Replicas (ranks of one (pp, tp) group that plan the same chunks: HSDP's dp_replicate) register
the buffers as replicated; shards (pure FSDP) as their equal parts of one sharded buffer per
group, which needs every part of the group sized alike: the coordinator sizes them. A buffer's
name carries its size ("dcp/L3/param.12": 12 units of 4 KiB), so the ranks of a group, which
are assigned the same sizes, register the same names, and a size that changes is a new buffer.
"""

import dataclasses

TENSOR_UNIT = 1 << 12   # tensor buffers are sized in 4 KiB units
META_UNIT = 1 << 16     # the metadata buffer in 64 KiB units
BYTES_RESERVE = 1 << 16  # a shard's room for its non-tensor items, at least
ALIGN = 64              # each chunk starts 64-byte aligned


def round_up(n, unit):
    return (n + unit - 1) // unit * unit


def bucket_of(fqn):
    """(stack index or None, optimizer state?) of a chunk's FQN."""
    parts = fqn.split(".")
    index = next((int(p) for p in parts if p.isdigit()), None)
    return index, "state" in parts


def local_layout(chunks):
    """[(key, fqn, nbytes)] of a rank's tensor chunks -> ({key: (bucket, offset, nbytes)},
    {bucket: bytes used}): each bucket's chunks in key order, 64-byte aligned."""
    offsets, ends = {}, {}
    for key, fqn, n in sorted(chunks, key=lambda c: repr(c[0])):
        bucket = bucket_of(fqn)
        at = ends.get(bucket, 0)
        offsets[key] = (bucket, at, n)
        ends[bucket] = round_up(at + n, ALIGN)
    return offsets, ends


@dataclasses.dataclass
class RankPlan:
    """What a rank tells the coordinator with its local plan."""

    pp: int
    tp: int
    dp: int
    offsets: dict             # {key: (bucket, offset, nbytes)}, before DCP's deduplication
    ends: dict                # {bucket: bytes used}
    held: dict                # {bucket: size of the buffer it holds for it now}
    meta_held: int = 0        # size of its metadata buffer now (0: none)
    bytes_reserve: int = BYTES_RESERVE  # the room it asks for its non-tensor items


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One of a rank's buffers: its name, the size of the rank's part, where that part starts
    in the buffer (dp x size for a shard, 0 for a replica), its layer (-1: none)."""

    name: str
    size: int
    base: int = 0
    layer: int = -1
    optimizer: bool = False


@dataclasses.dataclass
class Assignment:
    """What the coordinator hands a rank: the pickled DCP metadata, whether the job saves as
    shards, the rank's tensor buffers by bucket and (shards only) its metadata buffer; a
    replica sizes its metadata buffer itself."""

    metadata: bytes
    sharded: bool
    buffers: dict
    meta: Buffer = None


def replicas_alike(ranks):
    """True when the ranks of each (pp, tp) group plan the same chunks: replicas."""
    seen = {}
    for r in ranks:
        if seen.setdefault((r.pp, r.tp), set(r.offsets)) != set(r.offsets):
            return False
    return True


def layer_numbers(ranks):
    """{(pp, stack index or None): layer} over the job (see the module's doc)."""
    indexes = sorted({b[0] for r in ranks for b in r.ends if b[0] is not None})
    numbers = {i: 1 + n for n, i in enumerate(indexes)}
    out = {}
    for r in ranks:
        for index, _ in r.ends:
            if index is not None:
                out[(r.pp, index)] = numbers[index]
            else:
                out[(r.pp, None)] = 0 if r.pp == 0 else len(indexes) + 1
    return out


def _groups(ranks):
    groups = {}
    for r in ranks:
        groups.setdefault((r.pp, r.tp), []).append(r)
    return groups


def _kept_or_new(need, held, unit, room=0):
    """The size every member already holds ({size}: one size, 0 for none) while it fits, else
    the need plus `room` to grow, rounded to units."""
    if len(held) == 1 and need <= min(held) and min(held) > 0:
        return held.pop()
    return round_up(max(need, 1) + room, unit)


def tensor_buffers(ranks, sharded):
    """[{bucket: Buffer}] per rank: one buffer per bucket of its group, every member's part
    of one size (a shard's members register every bucket of the group, used or not)."""
    layers = layer_numbers(ranks)
    sized = {}
    for group, members in _groups(ranks).items():
        for bucket in sorted({b for r in members for b in r.ends}, key=repr):
            need = max(r.ends.get(bucket, 0) for r in members)
            held = {r.held.get(bucket, 0) for r in members}
            sized[group, bucket] = _kept_or_new(need, held, TENSOR_UNIT)
    out = []
    for r in ranks:
        mine = {}
        for (group, bucket), size in sized.items():
            if group != (r.pp, r.tp):
                continue
            index, optimizer = bucket
            layer = layers[(r.pp, index)]
            name = "dcp/L%d/%s.%d" % (layer, "optim" if optimizer else "param",
                                      size // TENSOR_UNIT)
            mine[bucket] = Buffer(name, size, r.dp * size if sharded else 0, layer, optimizer)
        out.append(mine)
    return out


def meta_buffers(ranks, md_len):
    """[Buffer] per rank for shards: the metadata and non-tensor items, every part of a group
    sized alike (the items' size is known only when they are written: each rank asks for
    room, twice what they took at its last save, at least BYTES_RESERVE)."""
    sizes = {}
    for group, members in _groups(ranks).items():
        need = md_len + max(r.bytes_reserve for r in members)
        # Room for the metadata to grow without a new buffer.
        sizes[group] = _kept_or_new(need, {r.meta_held for r in members}, META_UNIT,
                                    room=max(md_len // 4, META_UNIT))
    return [Buffer(meta_name(sizes[(r.pp, r.tp)]), sizes[(r.pp, r.tp)],
                   r.dp * sizes[(r.pp, r.tp)]) for r in ranks]


def meta_name(size):
    return "dcp/meta.%d" % (size // META_UNIT)


def replica_meta_size(need, held):
    """A replica's metadata buffer: the one it holds while it fits, else `need` with room for
    the metadata and items to grow without a new buffer."""
    return _kept_or_new(need, {held}, META_UNIT, room=max(need // 4, META_UNIT))
