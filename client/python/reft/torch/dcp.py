"""reft as PyTorch Distributed Checkpoint's storage: dcp.save / dcp.async_save / dcp.load into
the node's memory, protected like any reft step (docs/dcp.md).

    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp_replicate", "dp_shard"))
    client = reft.torch.dcp.client_for(mesh, socket, job, protection="arc1")
    dcp.save(state, storage_writer=reft.torch.dcp.Writer(client), checkpoint_id=step)
    dcp.load(state, storage_reader=reft.torch.dcp.Reader(client))   # the newest committed step

A save is one reft step (checkpoint_id, an int or its decimal string). Every rank lays the
chunks its state dict holds into one host buffer per rank, "dcp/state" (kind replicated: the
ranks of a `dp_replicate` group hold the same chunks, so reft protects them as it protects
data-parallel replicas), behind the step's DCP metadata and the pickled non-tensor items:

    [tensor chunks, in the order of their keys][metadata][non-tensor items]

A small replicated "dcp/head" buffer says where each part is and which state buffer holds them
(a state that outgrows its buffer gets a new one: "dcp/state.1", ...). The metadata is computed
once, by the coordinator, while planning (DCP's global plan), and handed to every rank with its
plan, so each rank's step holds all of it: losing the coordinator's node loses nothing. A load
reads the head and the metadata of sharding group (pp 0, tp 0), then exactly the byte ranges
DCP's planner asks for, from whichever node holds them (reft.Client's read of saved ranges),
so DCP reshards onto any new mesh or world size.
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

__all__ = ["Writer", "ZeroCopyWriter", "Reader", "client_for", "MESH_DIMS"]

# DeviceMesh dimension names reft understands (TorchTitan's), with their aliases.
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
_ALIASES = {"dp": "dp_shard", "fsdp": "dp_shard"}

HEAD = "dcp/head"
STATE = "dcp/state"
_HEAD = struct.Struct("<8sQQ32sQQQQQQ")  # magic, version, step, state name, 3 (offset, length)
_HEAD_BYTES = 256
_MAGIC = b"reftdcp1"


def client_for(mesh, socket=None, job=None, protection="none", **client_kwargs):
    """This rank's reft.Client for a job whose state DCP saves, placed by its DeviceMesh.

    `mesh.mesh_dim_names` may use pp, dp_replicate, dp_shard (or dp, fsdp), cp and tp.
    dp_replicate is reft's data-parallel axis (its ranks hold the same chunks: the sharding
    group), pp its pipeline axis, and dp_shard x cp x tp one tensor-parallel axis of reft (each
    of those ranks holds other chunks). Other keyword arguments go to reft.Client."""
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
    tp = (coord["dp_shard"] * dims["cp"] + coord["cp"]) * dims["tp"] + coord["tp"]
    layout = reft.Layout(dp=dims["dp_replicate"], tp=dims["dp_shard"] * dims["cp"] * dims["tp"],
                         pp=dims["pp"])
    return reft.Client(socket=socket, job=job, pp=coord["pp"], tp=tp, dp=coord["dp_replicate"],
                       layout=layout, protection=protection, **client_kwargs)


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
    """Where a saved item lives: sharding group (pp, tp), and either a byte range of its state
    buffer (a tensor chunk) or its non-tensor item `fqn`."""

    pp: int
    tp: int
    offset: int = 0
    length: int = 0
    fqn: str = None


@dataclasses.dataclass
class _RankPlan:
    """What a rank tells the coordinator with its local plan: its group, where each of its
    tensor chunks goes in its state buffer (before deduplication: replicas lay out alike)."""

    pp: int
    tp: int
    offsets: dict


def _layout(items):
    """{key: (offset, length)} of a rank's tensor chunks in its state buffer, and their end."""
    offsets, at = {}, 0
    for item in sorted((i for i in items if i.type != WriteItemType.BYTE_IO),
                       key=lambda i: repr(_key(i.index))):
        n = _tensor_bytes(item)
        offsets[_key(item.index)] = (at, n)
        at += (n + 63) // 64 * 64
    return offsets, at


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
        self._offsets = {}
        self._tensor_end = 0
        self._state = None        # the registered state buffer (uint8 CPU tensor)
        self._state_name = None
        self._generation = 0
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
        self._offsets, self._tensor_end = _layout(self._items)
        c = self.client.coordinates
        return dataclasses.replace(plan, storage_data=_RankPlan(c.pp, c.tp, self._offsets))

    def prepare_global_plan(self, plans):
        _, metadata = create_default_global_save_plan(plans, rewrite_index_hints=False)
        storage = {}
        for plan in plans:
            rank = plan.storage_data
            for item in plan.items:
                if item.type == WriteItemType.BYTE_IO:
                    storage[item.index] = Location(rank.pp, rank.tp, fqn=item.index.fqn)
                else:
                    off, n = rank.offsets[_key(item.index)]
                    storage[item.index] = Location(rank.pp, rank.tp, off, n)
        mappings = {}
        for plan in plans:
            if isinstance(plan.planner_data, dict):
                mappings.update(plan.planner_data)
        metadata.storage_data = storage
        metadata.planner_data = mappings
        blob = pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL)
        return [dataclasses.replace(p, storage_data=blob) for p in plans]

    def write_data(self, plan, planner):
        try:
            return self._write(plan, planner)
        finally:
            self._saving = None
            self._staged = False

    def _copied_out(self):
        """The state dict's tensors are no longer read by this save."""

    def _write(self, plan, planner):
        metadata = plan.storage_data
        extras = {}
        for item in self._items:  # every local item, also those another replica writes
            if item.type == WriteItemType.BYTE_IO:
                extras[item.index.fqn] = planner.resolve_data(item).getvalue()
        extras_blob = pickle.dumps(extras, protocol=pickle.HIGHEST_PROTOCOL)
        md_at = self._tensor_end
        ex_at = md_at + len(metadata)
        self._ensure_state(ex_at + len(extras_blob), len(metadata) + len(extras_blob))
        with torch.no_grad():
            for item in self._items:
                if item.type == WriteItemType.BYTE_IO:
                    continue
                off, n = self._offsets[_key(item.index)]
                src = planner.resolve_data(item).detach()
                dst = self._state[off:off + n].view(src.dtype).view(src.shape)
                dst.copy_(src)
        self._copied_out()
        self._state[md_at:ex_at] = torch.frombuffer(bytearray(metadata), dtype=torch.uint8)
        if extras_blob:
            self._state[ex_at:ex_at + len(extras_blob)] = torch.frombuffer(
                bytearray(extras_blob), dtype=torch.uint8)
        self._write_head(md_at, len(metadata), ex_at, len(extras_blob))
        step = self._saving
        self.client.snapshot(step)
        self.client.fence()  # the state buffer is this writer's again; the step is in reftd
        self._last_step = self._committing = step
        results = []
        for item in plan.items:
            if item.type == WriteItemType.BYTE_IO:
                size = len(extras[item.index.fqn])
            else:
                size = self._offsets[_key(item.index)][1]
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
    def _ensure_state(self, need, variable):
        """A registered state buffer of at least `need` bytes, of which `variable` (the metadata
        and the non-tensor items) may change size from save to save."""
        if self._state is not None and need <= self._state.numel():
            return
        # Room for the variable part to grow without a new buffer; no more, since every save
        # copies the whole buffer into reftd.
        size = need + max(variable // 4, 1 << 16)
        size = (size + (1 << 16) - 1) >> 16 << 16
        if self._state is not None:
            self._generation += 1
        name = STATE if self._generation == 0 else "%s.%d" % (STATE, self._generation)
        state = torch.zeros(size, dtype=torch.uint8)
        self.client.register(name, state, kind="replicated")
        self._state, self._state_name = state, name
        if not self._head_registered:
            self.client.register(HEAD, self._head, kind="replicated")
            self._head_registered = True

    def _write_head(self, md_at, md_len, ex_at, ex_len):
        packed = _HEAD.pack(_MAGIC, 1, self._saving, self._state_name.encode(), 0,
                            self._tensor_end, md_at, md_len, ex_at, ex_len)
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
        head = self._head(0, 0)
        blob = self._read([(head["state"], 0, 0, head["md"][0], head["md"][0] + head["md"][1])])
        self.metadata = pickle.loads(blob[0].numpy().tobytes())
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
            key = (loc.pp, loc.tp, loc.offset + first * row, loc.offset + last * row)
            target = planner.resolve_tensor(req).detach()
            whole_rows = list(req.lengths[1:]) == sizes[1:] and not any(req.storage_offsets[1:])
            if (whole_rows and target.device.type == "cpu" and target.is_contiguous()
                    and target.dtype == md.properties.dtype and target.numel() > 0):
                direct.append((req, target, key))  # reftd's bytes land in the tensor itself
            else:
                wanted.setdefault(key, None)
                staged.append((req, target, md, sizes, first, last, key))
        if direct:
            self._read([(self._head(k[0], k[1])["state"], *k) for _, _, k in direct],
                       [t for _, t, _ in direct])
            for req, target, _ in direct:
                planner.commit_tensor(req, target)
        keys = list(wanted)
        got = dict(zip(keys, self._read([(self._head(k[0], k[1])["state"], *k) for k in keys])))
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

    def _head(self, pp, tp):
        if (pp, tp) not in self._heads:
            raw = self._read([(HEAD, pp, tp, 0, _HEAD.size)])[0]
            magic, version, step, name, _, tensor_end, md_at, md_len, ex_at, ex_len = \
                _HEAD.unpack(raw.numpy().tobytes())
            if magic != _MAGIC or step != self.step:
                raise reft.CorruptedError(
                    "the DCP head of group pp%d-tp%d in step %d is not reft's (magic %r, step %d)"
                    % (pp, tp, self.step, magic, step))
            self._heads[(pp, tp)] = {"state": name.rstrip(b"\0").decode(),
                                     "md": (md_at, md_len), "extras": (ex_at, ex_len)}
        return self._heads[(pp, tp)]

    def _extra(self, loc):
        group = (loc.pp, loc.tp)
        if group not in self._extras:
            head = self._head(*group)
            at, n = head["extras"]
            raw = self._read([(head["state"], loc.pp, loc.tp, at, at + n)])[0]
            self._extras[group] = pickle.loads(raw.numpy().tobytes())
        return self._extras[group][loc.fqn]
