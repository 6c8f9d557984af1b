"""reft as PyTorch Distributed Checkpoint's storage: dcp.save / dcp.async_save / dcp.load into
the node's memory, protected like any reft step (docs/dcp.md).

    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp_replicate", "dp_shard"))
    client = reft.torch.dcp.client_for(mesh, socket, job, protection="arc1")
    dcp.save(state, storage_writer=reft.torch.dcp.Writer(client), checkpoint_id=step)
    dcp.load(state, storage_reader=reft.torch.dcp.Reader(client))   # the newest committed step

A save is one reft step (checkpoint_id, an int or its decimal string). Every rank lays the
chunks its state dict holds into host buffers registered with reft, one per model layer and
kind (parameters, optimizer state: "dcp/L<layer>/param.<size>", ".../optim.<size>", so reft's
planner sees the job's bytes per layer), and the step's DCP metadata with the pickled
non-tensor items into one more ("dcp/meta.<size>"); _dcp_layout.py says how.

How reft protects them depends on who else holds their bytes:
- replicas (a `dp_replicate` group, HSDP: reft's dp) hold the same chunks: the buffers are
  kind replicated, protected as data-parallel replicas are (ARC/AEC from the node's own copy,
  nothing sent at save time);
- shards (pure FSDP: `dp_shard` is reft's dp) hold other chunks each: each buffer is this
  rank's equal part of one sharded buffer of the group, which reftd copies to the ring
  neighbour's node before the step is sealed (a peer copy over the bulk transport). The parts
  must be equal, so the coordinator sizes them while planning.
The coordinator tells which case a save is from the plans (replicas plan the same chunks).

A small "dcp/head" (replicated, or a sharded part of 256 bytes per rank) names the metadata
buffer and where this rank's metadata and items are in it. The metadata is computed once, by
the coordinator, while planning (DCP's global plan), and handed to every rank with its plan, so
each rank's step holds all of it: losing the coordinator's node loses nothing. A load reads the
head and the metadata of rank (pp 0, tp 0, dp 0), then exactly the byte ranges DCP's planner
asks for (the metadata names each chunk's buffer and range), from whichever node holds them
(reft.Client's read of saved ranges; a lost rank's part is read from its peer copy), so DCP
reshards onto any new mesh or world size.
"""

import dataclasses
import io
import pickle
import struct
import threading

import torch
from torch.futures import Future
from torch.distributed.checkpoint import StorageReader, StorageWriter
from torch.distributed.checkpoint.default_planner import create_default_global_save_plan
from torch.distributed.checkpoint.planner import WriteItemType, LoadItemType
from torch.distributed.checkpoint.storage import WriteResult

import reft
from reft.torch import _dcp_layout as layout

__all__ = ["Writer", "ZeroCopyWriter", "Reader", "client_for", "MESH_DIMS"]

# DeviceMesh dimension names reft understands (TorchTitan's), with their aliases.
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
_ALIASES = {"dp": "dp_shard", "fsdp": "dp_shard"}

HEAD = "dcp/head"
# magic, version, step, metadata buffer's name, this rank's part's offset in it, 0, (offset,
# length) of the metadata and of the non-tensor items within the part
_HEAD = struct.Struct("<8sQQ32sQQQQQQ")
_HEAD_BYTES = 256
_MAGIC = b"reftdcp1"
_VERSION = 2  # per-layer buffers and a metadata buffer


def client_for(mesh, socket=None, job=None, protection="none", **client_kwargs):
    """This rank's reft.Client for a job whose state DCP saves, placed by its DeviceMesh.

    `mesh.mesh_dim_names` may use pp, dp_replicate, dp_shard (or dp, fsdp), cp and tp.
    pp is reft's pipeline axis. With a dp_replicate dimension (HSDP) it is reft's data-parallel
    axis (its ranks hold the same chunks: the sharding group), and dp_shard x cp x tp one
    tensor-parallel axis of reft (each of those ranks holds other chunks). Without one (pure
    FSDP), dp_shard is reft's data-parallel axis, whose ranks' shards reft copies to their ring
    neighbours, and cp x tp its tensor-parallel axis; the ring is ordered so that neighbours
    are on different nodes where the group spans several (a collective over the dp_shard
    group: every rank of the mesh calls client_for). Other keyword arguments go to
    reft.Client."""
    names = getattr(mesh, "mesh_dim_names", None)
    if not names:
        raise reft.InvalidArgumentError(
            "the DeviceMesh has no mesh_dim_names: build it with init_device_mesh(..., "
            "mesh_dim_names=(...)) using %s" % ", ".join(MESH_DIMS))
    where, size = {}, {}
    for i, raw in enumerate(names):
        name = _ALIASES.get(raw, raw)
        if name not in MESH_DIMS:
            raise reft.InvalidArgumentError(
                "DeviceMesh dimension %r: reft knows %s (aliases: %s)" % (
                    raw, ", ".join(MESH_DIMS),
                    ", ".join("%s = %s" % kv for kv in sorted(_ALIASES.items()))))
        if name in where:
            raise reft.InvalidArgumentError("DeviceMesh names dimension %r twice" % (name,))
        where[name] = mesh.get_local_rank(i)
        size[name] = mesh.size(i)
    coord = {n: where.get(n, 0) for n in MESH_DIMS}
    dims = {n: size.get(n, 1) for n in MESH_DIMS}
    dp_axis = "dp_replicate" if dims["dp_replicate"] > 1 else "dp_shard"
    tp_axes = ("dp_shard", "cp", "tp") if dp_axis == "dp_replicate" else ("cp", "tp")
    tp, tp_size = 0, 1
    for axis in tp_axes:  # row-major over the axes reft flattens into its tp
        tp = tp * dims[axis] + coord[axis]
        tp_size *= dims[axis]
    layout = reft.Layout(dp=dims[dp_axis], tp=tp_size, pp=dims["pp"])
    dp = coord[dp_axis]
    if dp_axis == "dp_shard" and dims["dp_shard"] > 1:
        shard_dim = [_ALIASES.get(n, n) for n in names].index("dp_shard")
        dp = _ring_position(mesh.get_group(shard_dim), socket, coord["dp_shard"])
    return reft.Client(socket=socket, job=job, pp=coord["pp"], tp=tp, dp=dp, layout=layout,
                       protection=protection, **client_kwargs)


def _node_key(socket):
    """What tells this rank's node from the others': the host and its reftd's socket."""
    import os
    import socket as net
    path = socket or os.environ.get("REFT_SOCKET", reft.DEFAULT_SOCKET)
    return net.gethostname(), os.path.realpath(path)


def _ring_position(group, socket, rank_in_group):
    """This rank's place in its dp_shard group's ring, as reft's dp. reftd keeps a copy of
    each rank's shard with the rank before it in the ring (dp - 1), so that copy protects
    against a node loss only when the two are on different nodes — which the mesh's own order
    rarely gives (a launcher puts consecutive ranks on one node). The ring takes the nodes'
    first ranks in turn, then their second ranks, and so on."""
    import torch.distributed as dist
    members = [None] * dist.get_world_size(group)
    dist.all_gather_object(members, (_node_key(socket), rank_in_group), group=group)
    by_node = {}
    for node, r in sorted(members, key=lambda m: m[1]):
        by_node.setdefault(node, []).append(r)
    ring = [ranks[i] for i in range(max(map(len, by_node.values())))
            for ranks in by_node.values() if i < len(ranks)]
    return ring.index(rank_in_group)


def _step_of(checkpoint_id, for_load):
    """The reft step a DCP checkpoint_id names (None for a load: the newest committed)."""
    if checkpoint_id is None and for_load:
        return None
    if isinstance(checkpoint_id, int) and not isinstance(checkpoint_id, bool) \
            and checkpoint_id >= 0:
        return checkpoint_id
    text = str(checkpoint_id) if isinstance(checkpoint_id, str) else None
    if text is not None and text.isdigit():
        return int(text)
    raise reft.InvalidArgumentError(
        "checkpoint_id %r: reft names a checkpoint by its step, an int >= 0 or its decimal "
        "string%s (a path such as '.../step-100' is not one: pass 100)" % (
            checkpoint_id, "; None loads the newest step committed job-wide" if for_load else ""))


def _valid_id(checkpoint_id, for_load):
    try:
        _step_of(checkpoint_id, for_load)
    except reft.Error:
        return False
    return True


def _key(index):
    """A write item's place in a rank's state: its FQN and chunk offset."""
    return (index.fqn, tuple(index.offset) if index.offset is not None else None)


def _tensor_bytes(item):
    chunk = item.tensor_data.chunk
    n = 1
    for s in chunk.sizes:
        n *= s
    return n * torch.empty((), dtype=item.tensor_data.properties.dtype).element_size()


def _structure(state_dict):
    """What a staged copy depends on: the containers, and each tensor's local shape, dtype
    and placement (a DTensor's local shard)."""
    leaves, spec = torch.utils._pytree.tree_flatten(state_dict)
    out = []
    for v in leaves:
        if torch.is_tensor(v):
            local = v.to_local() if hasattr(v, "to_local") else v
            out.append((tuple(local.shape), local.dtype, tuple(getattr(v, "placements", ()))))
        else:
            out.append(type(v))
    return spec, out


@dataclasses.dataclass(frozen=True)
class Location:
    """Where a saved item lives: the rank (pp, tp, dp; dp is 0 where replicas hold it), and
    either a byte range of one of its buffers (a tensor chunk: `buffer`, `offset` in it,
    `length`) or its non-tensor item `fqn`."""

    pp: int
    tp: int
    offset: int = 0
    length: int = 0
    fqn: str = None
    dp: int = 0
    buffer: str = None


def _chunks(items):
    """[(key, fqn, nbytes)] of a local plan's tensor chunks."""
    return [(_key(i.index), i.index.fqn, _tensor_bytes(i)) for i in items
            if i.type != WriteItemType.BYTE_IO]


class Writer(StorageWriter):
    """DCP storage writer into reftd: each save is reft step `checkpoint_id`, complete when it is
    committed job-wide (finish() waits for that on the coordinator and raises if it is not).

    The writer is DCP's stager for `dcp.async_save`: by default it copies the state once, on the
    trainer's thread, into host memory it keeps from save to save (allocated at the first save
    and again only when the state's tensors change), and the save goes on in the background.
    One save at a time: staging while the previous save has not written its state yet is
    reft.BusyError (wait for the previous future first, as DCP asks).

    zero_copy=True: `dcp.async_save` copies nothing on the trainer's thread (the writer stages
    nothing); the state is copied out of the live tensors in the background, so the trainer
    calls `writer.fence()` before it modifies them (before optimizer.step())."""

    _synchronize_after_execute = False  # stage() returns only once the state is copied

    def __new__(cls, client=None, zero_copy=False, **kwargs):
        if zero_copy and cls is Writer:
            cls = ZeroCopyWriter
        return super().__new__(cls)

    def __init__(self, client, zero_copy=False, commit_timeout=None):
        super().__init__()
        self.client = client
        self.commit_timeout = commit_timeout if commit_timeout is not None else 120.0
        self.step = None
        self._items = []
        self._offsets = {}        # {key: (bucket, offset, nbytes)} of this save's chunks
        self._parts = {}          # the buffers registered: {name: this rank's part}
        self._held = {}           # {bucket: size} of the tensor buffers the last save used
        self._meta = None         # the metadata buffer the last save used (a layout.Buffer)
        self._extras_len = 0      # the non-tensor items' size at the last save
        self._sharded = None      # the job saves as shards (True) or replicas (False)
        self._head = torch.zeros(_HEAD_BYTES, dtype=torch.uint8)
        self._head_registered = False
        self._last_step = None
        self._committing = None
        self._saving = None  # the step between planning and writing (one save at a time)
        self._staged = False  # stage() ran and that save has not written its state yet
        self._cache = None    # the staged copy of the state, kept between saves
        self._cache_shape = None

    def __getstate__(self):
        # DCP's process mode pickles the writer into a child process; the child cannot use this
        # rank's session (reftd admits one per rank), and a second session would be refused.
        raise reft.UnsupportedError(
            "reft.torch.dcp.Writer holds this rank's session with reftd and cannot move to "
            "another process: use dcp.async_save in thread mode (the default), not "
            "AsyncCheckpointerType.PROCESS")

    # -- DCP's AsyncStager ---------------------------------------------------------------
    @property
    def should_synchronize_after_execute(self):
        return False

    def stage(self, state_dict):
        """A copy of `state_dict` the trainer may not touch: one copy into kept host memory."""
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
        if self._staged:
            raise reft.BusyError(
                "dcp.async_save: the previous save has not written its state into reft yet: "
                "wait for its future before the next async_save")
        shape = _structure(state_dict)
        if self._cache is None or shape != self._cache_shape:
            self._cache = _create_cpu_state_dict(state_dict)
            self._cache_shape = shape
        staged = _copy_state_dict(state_dict, self._cache)
        self._staged = True
        return staged

    def synchronize_staging(self):
        pass  # stage() copied synchronously

    def close(self):
        self._cache = None

    # -- DCP's StorageWriter -------------------------------------------------------------
    def reset(self, checkpoint_id=None):
        self.step = None if checkpoint_id is None else _step_of(checkpoint_id, for_load=False)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return _valid_id(checkpoint_id, for_load=False)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator

    def storage_meta(self):
        return None

    def prepare_local_plan(self, plan):
        try:
            return self._prepare_local_plan(plan)
        except Exception:
            self._staged = False  # this save writes nothing: the staged copy is free again
            raise

    def _prepare_local_plan(self, plan):
        if self.step is None:
            raise reft.InvalidArgumentError(
                "a save into reft needs checkpoint_id=<step> (an int or its decimal string)")
        if self._last_step is not None and self.step <= self._last_step:
            raise reft.InvalidArgumentError(
                "step %d is not newer than step %d this writer saved last: a reft step only "
                "goes forward" % (self.step, self._last_step))
        if self._saving is not None:
            raise reft.BusyError(
                "step %d: this writer is still saving step %d (one save at a time: wait for "
                "the previous dcp.async_save's future first)" % (self.step, self._saving))
        self._saving = self.step
        self._items = list(plan.items)
        self._offsets, ends = layout.local_layout(_chunks(self._items))
        c = self.client.coordinates
        reserve = layout.round_up(max(layout.BYTES_RESERVE, 2 * self._extras_len), 64)
        return dataclasses.replace(plan, storage_data=layout.RankPlan(
            c.pp, c.tp, c.dp, self._offsets, ends, dict(self._held),
            self._meta.size if self._meta else 0, reserve))

    def prepare_global_plan(self, plans):
        _, metadata = create_default_global_save_plan(plans, rewrite_index_hints=False)
        ranks = [p.storage_data for p in plans]
        sharded = not layout.replicas_alike(ranks)
        buffers = layout.tensor_buffers(ranks, sharded)
        storage = {}
        for rank, plan, mine in zip(ranks, plans, buffers):
            dp = rank.dp if sharded else 0  # any replica holds it
            for item in plan.items:
                if item.type == WriteItemType.BYTE_IO:
                    storage[item.index] = Location(rank.pp, rank.tp, fqn=item.index.fqn, dp=dp)
                else:
                    bucket, off, n = rank.offsets[_key(item.index)]
                    b = mine[bucket]
                    storage[item.index] = Location(rank.pp, rank.tp, b.base + off, n, dp=dp,
                                                   buffer=b.name)
        mappings = {}
        for plan in plans:
            if isinstance(plan.planner_data, dict):
                mappings.update(plan.planner_data)
        metadata.storage_data = storage
        metadata.planner_data = mappings
        blob = pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL)
        metas = layout.meta_buffers(ranks, len(blob)) if sharded else [None] * len(ranks)
        return [dataclasses.replace(p, storage_data=layout.Assignment(blob, sharded, b, m))
                for p, b, m in zip(plans, buffers, metas)]

    def write_data(self, plan, planner):
        try:
            return self._write(plan, planner)
        finally:
            self._saving = None
            self._staged = False

    def _copied_out(self):
        """The state dict's tensors are no longer read by this save."""

    def _write(self, plan, planner):
        a = plan.storage_data
        metadata = a.metadata
        extras = {}
        for item in self._items:  # every local item, also those another replica writes
            if item.type == WriteItemType.BYTE_IO:
                extras[item.index.fqn] = planner.resolve_data(item).getvalue()
        extras_blob = pickle.dumps(extras, protocol=pickle.HIGHEST_PROTOCOL)
        self._extras_len = len(extras_blob)
        meta = self._meta_buffer(a, len(metadata) + len(extras_blob))
        parts = {bucket: self._part(b, a.sharded) for bucket, b in a.buffers.items()}
        self._held = {bucket: b.size for bucket, b in a.buffers.items()}
        with torch.no_grad():
            for item in self._items:
                if item.type == WriteItemType.BYTE_IO:
                    continue
                bucket, off, n = self._offsets[_key(item.index)]
                src = planner.resolve_data(item).detach()
                parts[bucket][off:off + n].view(src.dtype).view(src.shape).copy_(src)
        self._copied_out()
        part = self._part(meta, a.sharded)
        part[:len(metadata)] = torch.frombuffer(bytearray(metadata), dtype=torch.uint8)
        if extras_blob:
            part[len(metadata):len(metadata) + len(extras_blob)] = torch.frombuffer(
                bytearray(extras_blob), dtype=torch.uint8)
        self._write_head(meta, len(metadata), len(extras_blob))
        step = self._saving
        self.client.snapshot(step)
        self.client.fence()  # the buffers are this writer's again; the step is in reftd
        self._last_step = self._committing = step
        results = []
        for item in plan.items:
            if item.type == WriteItemType.BYTE_IO:
                size = len(extras[item.index.fqn])
            else:
                size = self._offsets[_key(item.index)][2]
            results.append(WriteResult(index=item.index, size_in_bytes=size, storage_data=None))
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        step = self._committing
        if not self.client.wait_committed(step, timeout=self.commit_timeout):
            raise reft.TimeoutError(
                "step %d was not committed job-wide within %.0f s: a rank's snapshot did not "
                "complete (its reftd's log says why); the save is not a checkpoint"
                % (step, self.commit_timeout))

    # -- the buffers ---------------------------------------------------------------------
    def _meta_buffer(self, a, need):
        """The buffer of the metadata and the non-tensor items: a shard's as the coordinator
        sized it for the group, a replica's sized here."""
        if a.sharded:
            if need > a.meta.size:
                raise reft.BusyError(
                    "step %d: the non-tensor items of this rank take %d bytes more than the "
                    "room its group agreed on while planning (their size is known only once "
                    "they are written); the next save reserves it: save again"
                    % (self._saving, need - a.meta.size))
            self._meta = a.meta
        else:
            size = layout.replica_meta_size(need, self._meta.size if self._meta else 0)
            self._meta = layout.Buffer(layout.meta_name(size), size)
        return self._meta

    def _part(self, b, sharded):
        """This rank's part of buffer `b`, registered with reft the first time it is used."""
        if b.name not in self._parts:
            if self._parts and sharded != self._sharded:
                raise reft.InvalidArgumentError(
                    "the ranks of job %r saved as %s and now as %s: a writer keeps the "
                    "parallelism it started with" % (
                        self.client.job, *(("replicas", "shards") if sharded
                                           else ("shards", "replicas"))))
            part = torch.zeros(b.size, dtype=torch.uint8)
            layer = b.layer if b.layer >= 0 else None
            if sharded:
                m = self.client.layout.dp
                self.client.register(b.name, part, kind="unique", layer=layer,
                                     optimizer=b.optimizer, shard=(b.base, m * b.size))
            else:
                self.client.register(b.name, part, kind="replicated", layer=layer,
                                     optimizer=b.optimizer)
            self._parts[b.name] = part
            self._sharded = sharded
            self._register_head(sharded)
        return self._parts[b.name]

    def _register_head(self, sharded):
        if self._head_registered:
            return
        if sharded:
            m = self.client.layout.dp
            shard = (self.client.coordinates.dp * _HEAD_BYTES, m * _HEAD_BYTES)
            self.client.register(HEAD, self._head, kind="unique", shard=shard)
        else:
            self.client.register(HEAD, self._head, kind="replicated")
        self._head_registered = True

    def _write_head(self, meta, md_len, ex_len):
        packed = _HEAD.pack(_MAGIC, _VERSION, self._saving, meta.name.encode(), meta.base, 0,
                            0, md_len, md_len, ex_len)
        self._head.zero_()
        self._head[:len(packed)] = torch.frombuffer(bytearray(packed), dtype=torch.uint8)


class ZeroCopyWriter(Writer):
    """Writer(client, zero_copy=True): DCP's stager for `dcp.async_save` that stages nothing.
    fence() returns once the running save no longer reads the state dict's tensors."""

    def __init__(self, client, zero_copy=True, commit_timeout=None):
        super().__init__(client, zero_copy=True, commit_timeout=commit_timeout)
        self._out = threading.Event()
        self._out.set()

    def stage(self, state_dict):
        self._out.clear()  # the save that starts now reads the live tensors until it copied them
        return state_dict

    def synchronize_staging(self):
        self.fence()

    def fence(self, timeout=None):
        """Waits until the running save has copied the state out of the live tensors. A save that
        fails before it copies anything (its future says why) ends the wait after `timeout`
        seconds (default: the client's reply timeout, 60 s) with reft.TimeoutError."""
        if not self._out.wait(60.0 if timeout is None else timeout):
            raise reft.TimeoutError(
                "the DCP save started by dcp.async_save has not copied the state out of the "
                "tensors; if its future failed, it never will (see the future's exception)")

    def _copied_out(self):
        self._out.set()

    def write_data(self, plan, planner):
        try:
            return super().write_data(plan, planner)
        finally:
            self._out.set()  # also when the write failed: it reads the tensors no more


class Reader(StorageReader):
    """DCP storage reader from reftd: checkpoint_id None (the default) is the newest step
    committed job-wide; a step is accepted only when it is that one."""

    def __init__(self, client):
        super().__init__()
        self.client = client
        self.step = None
        self.wanted = None
        self.metadata = None
        self._heads = {}
        self._extras = {}

    def reset(self, checkpoint_id=None):
        self.wanted = _step_of(checkpoint_id, for_load=True)
        self.metadata = None
        self._heads = {}
        self._extras = {}

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return _valid_id(checkpoint_id, for_load=True)

    def read_metadata(self, *args, **kwargs):
        if self.metadata is not None:
            return self.metadata
        probed = self.client._c.probe_restore()
        if probed is None:
            raise reft.NotFoundError("job %r has no committed step to load" % (
                self.client.job,))
        step = probed[0]
        if self.wanted is not None and self.wanted != step:
            raise reft.NotFoundError(
                "step %d is not what reft restores for job %r: its newest step committed "
                "job-wide is %d (load with checkpoint_id=None or %d)" % (
                    self.wanted, self.client.job, step, step))
        self.step = step
        self.metadata = pickle.loads(self._meta_part(0, 0, 0, "md"))
        return self.metadata

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.metadata = metadata

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        storage = self.metadata.storage_data
        direct, staged, wanted = [], [], {}
        for req in plan.items:
            loc = storage[req.storage_index]
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(self._extra(loc)))
                continue
            # The saved chunk's rows [first, last) cover the request: read just those bytes.
            md = self.metadata.state_dict_metadata[req.storage_index.fqn]
            chunk = next(c for c in md.chunks
                         if tuple(c.offsets) == tuple(req.storage_index.offset))
            sizes = list(chunk.sizes)
            row = loc.length // sizes[0] if sizes and sizes[0] else loc.length
            first, last = (req.storage_offsets[0], req.storage_offsets[0] + req.lengths[0]) \
                if sizes else (0, 1)
            key = (loc.buffer, loc.pp, loc.tp, loc.offset + first * row,
                   loc.offset + last * row)
            target = planner.resolve_tensor(req).detach()
            whole_rows = list(req.lengths[1:]) == sizes[1:] and not any(req.storage_offsets[1:])
            if (whole_rows and target.device.type == "cpu" and target.is_contiguous()
                    and target.dtype == md.properties.dtype and target.numel() > 0):
                direct.append((req, target, key))  # reftd's bytes land in the tensor itself
            else:
                wanted.setdefault(key, None)
                staged.append((req, target, md, sizes, first, last, key))
        if direct:
            self._read([k for _, _, k in direct], [t for _, t, _ in direct])
            for req, target, _ in direct:
                planner.commit_tensor(req, target)
        keys = list(wanted)
        got = dict(zip(keys, self._read(keys)))
        for req, target, md, sizes, first, last, key in staged:
            shape = sizes[:1] and [last - first] + sizes[1:]
            src = got[key].view(md.properties.dtype).view(shape)
            offsets = list(req.storage_offsets)
            if offsets:
                offsets[0] -= first
            for dim, (off, n) in enumerate(zip(offsets, req.lengths)):
                src = src.narrow(dim, off, n)
            if target.size() != src.size():
                raise reft.InvalidArgumentError(
                    "%s: the saved chunk gives %s, the state dict wants %s" % (
                        req.storage_index.fqn, tuple(src.size()), tuple(target.size())))
            target.copy_(src)
            planner.commit_tensor(req, target)
        fut = Future()
        fut.set_result(None)
        return fut

    # -- reads ---------------------------------------------------------------------------
    def _read(self, ranges, into=None):
        """[(state name, pp, tp, begin, end)] of step self.step, each into the matching tensor
        of `into` (contiguous CPU, exactly its size), else into new uint8 tensors (returned)."""
        if into is None:
            into = [torch.empty(end - begin, dtype=torch.uint8) for *_, begin, end in ranges]
        for (*_, begin, end), t in zip(ranges, into):
            if t.numel() * t.element_size() != end - begin:
                raise reft.InternalError("a read of %d bytes into a tensor of %d" % (
                    end - begin, t.numel() * t.element_size()))
        self.client._c.read_saved(self.step, [
            (name, pp, tp, begin, end, t.data_ptr() if end > begin else 0)
            for (name, pp, tp, begin, end), t in zip(ranges, into)])
        return into

    def _head(self, pp, tp, dp):
        """Rank (pp, tp, dp)'s head: dp 0 reads a replicated head, any dp a sharded one (its
        part is the dp-th 256 bytes)."""
        if (pp, tp, dp) not in self._heads:
            at = dp * _HEAD_BYTES
            raw = self._read([(HEAD, pp, tp, at, at + _HEAD.size)])[0]
            magic, version, step, name, base, tensor_end, md_at, md_len, ex_at, ex_len = \
                _HEAD.unpack(raw.numpy().tobytes())
            if magic == _MAGIC and version != _VERSION:
                raise reft.UnsupportedError(
                    "step %d of job %r was saved by a reft.torch.dcp of another layout "
                    "(version %d, this one reads %d): load it with that reft" % (
                        self.step, self.client.job, version, _VERSION))
            if magic != _MAGIC or step != self.step:
                raise reft.CorruptedError(
                    "the DCP head of rank pp%d-tp%d-dp%d in step %d is not reft's (magic %r, "
                    "step %d)" % (pp, tp, dp, self.step, magic, step))
            self._heads[(pp, tp, dp)] = {"meta": name.rstrip(b"\0").decode(), "base": base,
                                         "md": (md_at, md_len), "extras": (ex_at, ex_len)}
        return self._heads[(pp, tp, dp)]

    def _extra(self, loc):
        rank = (loc.pp, loc.tp, loc.dp)
        if rank not in self._extras:
            self._extras[rank] = pickle.loads(self._meta_part(*rank, "extras"))
        return self._extras[rank][loc.fqn]

    def _meta_part(self, pp, tp, dp, part):
        """The bytes of rank (pp, tp, dp)'s metadata ("md") or non-tensor items ("extras"),
        where its head says they are in its part of the metadata buffer."""
        head = self._head(pp, tp, dp)
        at, n = head[part]
        at += head["base"]
        return self._read([(head["meta"], pp, tp, at, at + n)])[0].numpy().tobytes()
