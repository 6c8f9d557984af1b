"""reft: keep training state in the node's memory (client of the local reftd).

    c = reft.Client(socket=PATH, job="run-1", pp=0, tp=0, dp=RANK,
                    layout=reft.Layout(dp=4, tp=1, pp=1, zero=0), protection="arc1")
    c.register("params", obj, kind="replicated", layer=None)   # CPU or CUDA/ROCm tensor, numpy,
                                                                # __cuda_array_interface__ ...
    c.snapshot(step)              # returns at once; never synchronises the device
    # ZeRO-1 under protection "aor": the gradient reftd replays the neighbour's optimizer
    # shard from, and each step's hyper-parameters (docs/client.md "AOR"):
    c.register("grad", flat_grad, kind="gradient")
    c.register("opt", shard, kind="unique", optimizer=True)     # [master | exp_avg | exp_avg_sq]
    c.snapshot(step, optimizer=reft.OptimizerStep(step=k, lr=lr, weight_decay=0.1))
    c.fence()                     # buffers may be modified again
    c.wait_committed(step, timeout=None)
    step = c.restore()            # newest committed step, or None
    c.close()

Errors raise reft.Error subclasses, one per status code. The library prints nothing and
starts one thread (the copy worker), plus one for the length of a restore() whose progress is
reported (a callback, or the `reft` logger at INFO); a device buffer that has to be staged is
reported by one reft.StagedWarning at registration.
"""

import os as _os
import sys as _sys
import warnings as _warnings
from dataclasses import dataclass as _dataclass
from typing import Optional as _Optional

from ._version import __version__, FROM_BUILD_TREE as _FROM_BUILD_TREE
from . import _install_check
from . import _reft

_install_check.check_extension(__version__, _reft.__version__, _reft.__file__)
_install_check.check_cuda_driver(*_reft.cuda_runtime_and_driver())
_install_check.warn_if_shadowing(__version__, _FROM_BUILD_TREE, _os.path.dirname(__file__))

from . import _device  # noqa: E402 - after the release check
from . import _progress  # noqa: E402

__all__ = ["Client", "Layout", "OptimizerStep", "Error", "StagedWarning", "__version__"]

DEFAULT_SOCKET = "/run/reft/reftd.sock"


class Error(Exception):
    """A reft operation failed; `code` is the status name, the message says what and why."""

    code = "unknown"


class InvalidArgumentError(Error):
    code = "invalid_argument"


class NotFoundError(Error):
    code = "not_found"


class AlreadyExistsError(Error):
    code = "already_exists"


class OutOfMemoryError(Error):
    code = "out_of_memory"


class CorruptedError(Error):
    code = "corrupted"


class UnavailableError(Error):
    code = "unavailable"


class TimeoutError(Error):  # noqa: A001 - the status name; also subclasses reft.Error only
    code = "timeout"


class PermissionDeniedError(Error):
    code = "permission_denied"


class LostError(Error):
    code = "lost"


class IoError(Error):
    code = "io_error"


class ProtocolError(Error):
    code = "protocol"


class BusyError(Error):
    code = "busy"


class CancelledError(Error):
    code = "cancelled"


class UnsupportedError(Error):
    code = "unsupported"


class InternalError(Error):
    code = "internal"


# Index = reft::StatusCode value (0 is OK).
_BY_CODE = [None, InvalidArgumentError, NotFoundError, AlreadyExistsError, OutOfMemoryError,
            CorruptedError, UnavailableError, TimeoutError, PermissionDeniedError, LostError,
            IoError, ProtocolError, BusyError, CancelledError, UnsupportedError, InternalError]
__all__ += [c.__name__ for c in _BY_CODE if c is not None]


def _raise(code, message):
    cls = _BY_CODE[code] if 0 < code < len(_BY_CODE) else Error
    raise cls(message)


_reft._set_raise_hook(_raise)

from ._plan import plan  # noqa: E402 - needs the error classes above
from . import elastic  # noqa: E402 - reft.elastic.coordinates: a rank's place after a decision

__all__ += ["plan", "elastic"]


from ._aor import AorWarning  # noqa: E402
from . import _aor  # noqa: E402

__all__ += ["AorWarning"]


class StagedWarning(UserWarning):
    """A device buffer reftd cannot pull is staged: this process copies it device->host at
    every snapshot (more trainer work and a pinned host copy of the buffer). Issued once, at
    registration, naming the buffer and why."""


@_dataclass(frozen=True)
class Layout:
    """Parallel layout of the job: dp * tp * pp ranks, ZeRO stage."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0


def _parse_layout(text):
    """reft.Layout from reftd's "dp=4,tp=1,pp=1,zero=1"."""
    fields = dict(kv.split("=", 1) for kv in text.split(","))
    return Layout(**{k: int(v) for k, v in fields.items() if k in ("dp", "tp", "pp", "zero")})


@_dataclass(frozen=True)
class OptimizerStep:
    """One iteration's AdamW hyper-parameters (torch.optim.AdamW semantics), sent with
    snapshot() so reftd can replay the ring neighbour's ZeRO-1 optimizer update on the host
    (protection "aor").

    step: optimizer step count after this iteration's update (torch's state['step']), >= 1;
    unchanged on a skipped iteration. clip_coef: min(1, max_norm / (total_norm + 1e-6)), 1 when
    not clipping. grad_scale: 1 / loss_scale under fp16 loss scaling, else 1. skipped: the
    optimizer step was skipped (fp16 overflow).

    How the owner's optimizer rounds (docs/protection.md "What is exact"); the replay is
    bit-identical only in the owner's form. kernel: "torch", "torch-foreach" or "torch-fused"
    (torch.optim.AdamW with those flags: this process runs it on a probe once and declares the
    replay form that reproduces it bit for bit, or that none does, and then reftd copies the
    shard instead of replaying it), or a form itself ("lerp+fma", "fused8+fma", "mul-add", ...,
    "off:sqrt"). None (default): the form lerp_first_moment names when it is given (the owner
    exp_avg.lerp_(grad, 1 - beta1) as torch.optim >= 2.0 does, or mul_(beta1).add_(grad, alpha=
    1 - beta1) as torch 1.x does, with no fused multiply-adds: reft's own kernel), else "torch"
    when this process imported torch, else reft's kernel ("mul-add"). OptimizerStep.from_torch
    fills everything from the trainer's torch optimizer, its kernel included.
    """

    step: int
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip_coef: float = 1.0
    grad_scale: float = 1.0
    skipped: bool = False
    lerp_first_moment: _Optional[bool] = None
    kernel: _Optional[str] = None

    @classmethod
    def from_torch(cls, optimizer, clip_coef=1.0, grad_scale=1.0, skipped=False, group=0):
        """This iteration's record for param group `group` of a torch.optim.Adam / AdamW, taken
        after its step() (or after skipping it): lr, betas, eps, weight_decay and the step count
        from the optimizer, the kernel probed from its class and flags (foreach, fused)."""
        g = optimizer.param_groups[group]
        first = next((p for p in g["params"] if p is not None), None)
        step = optimizer.state.get(first, {}).get("step", 0) if first is not None else 0
        step = int(step.item()) if hasattr(step, "item") else int(step)
        beta1, beta2 = g.get("betas", (0.9, 0.999))
        return cls(step=step, lr=float(g["lr"]), beta1=float(beta1), beta2=float(beta2),
                   eps=float(g.get("eps", 1e-8)), weight_decay=float(g.get("weight_decay", 0.0)),
                   clip_coef=float(clip_coef), grad_scale=float(grad_scale), skipped=bool(skipped),
                   kernel=str(_aor.form_of_optimizer(optimizer, group)))


_STEP_FIELDS = frozenset(OptimizerStep.__dataclass_fields__)


def _optimizer_step(value, where):
    if isinstance(value, OptimizerStep):
        return value
    if isinstance(value, dict):
        unknown = set(value) - _STEP_FIELDS
        if unknown:
            raise InvalidArgumentError("%s: unknown optimizer field(s) %s (expected %s)" % (
                where, ", ".join(sorted(unknown)), ", ".join(sorted(_STEP_FIELDS))))
        try:
            return OptimizerStep(**value)
        except TypeError as e:
            raise InvalidArgumentError("%s: %s" % (where, e)) from None
    raise InvalidArgumentError("%s: expected a reft.OptimizerStep or a dict of its fields, not %r"
                               % (where, type(value).__name__))


def _replay_form(o):
    """The replay form OptimizerStep `o` declares (see its `kernel`)."""
    if o.kernel is not None:
        try:
            form = _aor.form_of_kernel(o.kernel)
        except ValueError as e:
            raise InvalidArgumentError("OptimizerStep.kernel: %s" % (e,)) from None
        if (o.lerp_first_moment is not None and not form.not_replayable
                and form.lerp != bool(o.lerp_first_moment)):
            raise InvalidArgumentError(
                "OptimizerStep: lerp_first_moment=%s contradicts kernel %r (%s)"
                % (o.lerp_first_moment, o.kernel, form))
        return form
    if o.lerp_first_moment is not None:  # the owner named its form itself
        return _aor.Form(lerp=bool(o.lerp_first_moment))
    if "torch" in _sys.modules:
        return _aor.form_of_kernel("torch")
    return _aor.Form()  # reft's own kernel


def _record(name, o):
    form = _replay_form(o)
    return (name, int(o.step), float(o.lr), float(o.beta1), float(o.beta2), float(o.eps),
            float(o.weight_decay), float(o.clip_coef), float(o.grad_scale), bool(o.skipped),
            form.lerp, form.fma, form.fused_width, form.l2, form.not_replayable)


_KINDS = {"replicated": 0, "unique": 1, "gradient": 2}


class Client:
    """A trainer rank's connection to its node's reftd. Also a context manager.

    `timeout`: the longest wait for one reply of reftd, in seconds. `connect_timeout`: how long
    a hello that reftd refuses because this rank is still joined (another live session of it
    on this node, or its join on another node — usually this trainer's previous process, whose
    close reftd has not seen yet when a launcher restarts the ranks at once) is retried, in
    seconds, with a backoff from 50 ms doubling to 500 ms, before reft.AlreadyExistsError is
    raised; 0 = not retried. No other error is retried."""

    def __init__(self, socket=None, job=None, pp=0, tp=0, dp=0, layout=None,
                 protection="none", timeout=60.0, connect_timeout=10.0):
        if socket is None:
            socket = _os.environ.get("REFT_SOCKET", DEFAULT_SOCKET)
        if job is None:
            job = _os.environ.get("TORCHELASTIC_RUN_ID")
            if not job:
                raise InvalidArgumentError("job is required (or set TORCHELASTIC_RUN_ID)")
        layout = layout or Layout()
        if not isinstance(layout, Layout):
            raise InvalidArgumentError("layout must be a reft.Layout")
        self._buffers = []  # keeps registered objects alive while the daemon may copy them
        self._streams = _device.StreamTracker()
        self._torch_stager = None  # CUDA/ROCm tensors staged by torch (libreft lacks the backend)
        # Protection "aor": fence() looks at reftd's AOR state now and then (aor_state()).
        self._aor_watch = _aor.StateWatch() if "aor" in str(protection).split("+") else None
        self.layout = layout
        self.job = str(job)
        self.coordinates = Layout(dp=int(dp), tp=int(tp), pp=int(pp), zero=layout.zero)
        self._c = _reft._Client(str(socket), str(job), int(pp), int(tp), int(dp), int(layout.dp),
                                int(layout.tp), int(layout.pp), int(layout.zero),
                                str(protection), int(timeout * 1000),
                                int(connect_timeout * 1000))

    def register(self, name, obj, kind="replicated", layer=None, dtype=None, optimizer=False,
                 gradient=None, shard=None):
        """Registers a writable, contiguous buffer: bytearray, numpy array, torch tensor (CPU,
        CUDA or ROCm), or any object with `__cuda_array_interface__`.

        Device memory is pulled by reftd from an IPC export of its allocation; memory the
        backend cannot export (expandable segments, VMM, or a libreft built without the backend
        for a torch tensor) is staged by this process instead, with one reft.StagedWarning.
        kind: "replicated", "unique", or "gradient" (the flat all-reduced gradient that
        protection "aor" replays optimizer shards from: read at every snapshot, never stored).
        optimizer=True marks optimizer state: on a "unique" buffer a ZeRO-1 optimizer shard
        [master | exp_avg | exp_avg_sq] (float32, or bfloat16 for an optimizer over bf16
        parameters; protection "aor" replays it); on a "replicated" one a plain optimizer's state,
        counted as optimizer bytes of its layer by the planner;
        gradient= names its gradient buffer when several are registered.
        shard=(offset, total) (kind "unique"): this rank holds bytes [offset, offset+len) of a
        global buffer of `total` bytes named `name` (a ZeRO optimizer partition, an FSDP flat
        shard). The dp ranks split it in equal parts in dp order: every rank registers
        ceil(total/dp) bytes at offset dp*that, the last part padded. restore(reshape=True)
        gives a rank of another layout its range, gathered from the saved parts.
        """
        if kind not in _KINDS:
            raise InvalidArgumentError(
                "kind must be 'replicated', 'unique' or 'gradient', not %r" % (kind,))
        layer_i = -1 if layer is None else int(layer)
        optimizer = bool(optimizer)
        gradient = "" if gradient is None else str(gradient)
        if shard is None:
            shard = (0, 0)
        else:
            try:
                shard = (int(shard[0]), int(shard[1]))
            except (TypeError, ValueError, IndexError):
                raise InvalidArgumentError("shard must be (offset, total), not %r" % (shard,))
            if shard[0] < 0 or shard[1] <= 0:
                raise InvalidArgumentError("shard %r: offset must be >= 0 and total > 0" % (shard,))
        device = _device.describe(obj, name, dtype)
        if device is not None:
            self._register_device(name, obj, device, _KINDS[kind], layer_i, optimizer, gradient,
                                  shard)
            return
        t = _device.torch_tensor(obj)
        if t is not None:
            if not t.is_contiguous():
                raise InvalidArgumentError("tensor %r is not contiguous" % (name,))
            self._c.register_ptr(name, t.data_ptr(), t.numel() * t.element_size(), _KINDS[kind],
                                 dtype or str(t.dtype).replace("torch.", ""), layer_i, 0,
                                 optimizer, gradient, *shard)
        else:
            if isinstance(obj, (bytes, str)) or (isinstance(obj, memoryview) and obj.readonly):
                raise InvalidArgumentError("buffer %r is read-only: restore writes into it" % (name,))
            if dtype is None:
                dtype = str(getattr(obj, "dtype", "uint8"))
            self._c.register_buffer(name, obj, _KINDS[kind], dtype, layer_i, optimizer, gradient,
                                    *shard)
        self._buffers.append(obj)

    def _register_device(self, name, obj, buf, kind, layer, optimizer, gradient, shard):
        built = _device.built_memory_kinds()
        backend = _device.MEMORY_NAMES[buf.memory]
        if buf.memory in built and buf.device >= 0:
            try:
                self._c.register_ptr(name, buf.ptr, buf.nbytes, kind, buf.dtype, layer,
                                     buf.memory, optimizer, gradient, *shard)
            except UnsupportedError as e:
                if buf.tensor is None:
                    raise
                # libreft's backend cannot use this device at all (e.g. a driver older than
                # libreft's runtime); torch can.
                why = "libreft's %s backend cannot use it (%s); torch copies it to pinned host " \
                      "memory at every snapshot" % (backend, e)
            else:
                self._buffers.append(obj)
                self._streams.add(buf)
                why = self._c.staged_reason(name)
                if why:
                    self._warn_staged(name, buf, why)
                return
        elif buf.memory in built:
            raise InvalidArgumentError(
                "buffer %r: its __cuda_array_interface__ pointer is not device memory of any "
                "backend of this libreft" % (name,))
        elif buf.tensor is None:
            raise UnsupportedError(
                "buffer %r is %s device memory, but this libreft was built without the %s "
                "backend, and without it only torch tensors can be staged (this is a %s)"
                % (name, backend, backend, type(obj).__name__))
        else:
            why = "this libreft was built without the %s backend; torch copies it to pinned " \
                  "host memory at every snapshot" % (backend,)
        if self._torch_stager is None:
            from ._torch_staging import TorchStager
            self._torch_stager = TorchStager()
        mirror = self._torch_stager.mirror(buf.tensor)
        self._c.register_ptr(name, mirror.data_ptr(), buf.nbytes, kind, buf.dtype, layer, 0,
                             optimizer, gradient, *shard)
        self._torch_stager.add(buf.tensor, mirror)
        self._buffers.append(obj)
        self._streams.add(buf)
        self._warn_staged(name, buf, why)

    @staticmethod
    def _warn_staged(name, buf, why):
        # stacklevel: the caller of Client.register (through register, _register_device).
        _warnings.warn("reft: buffer %r (%s) is staged by this process, not pulled by reftd: %s"
                       % (name, buf.where(), why), StagedWarning, stacklevel=4)

    def snapshot(self, step, optimizer=None):
        """Starts the snapshot of `step`; returns at once (the copy runs in the background).

        optimizer: this iteration's optimizer hyper-parameters, required under protection "aor"
        when reftd replays optimizer shards: a reft.OptimizerStep (or a dict of its fields) for
        every shard, or {buffer_name: OptimizerStep or dict of fields} per shard (a dict whose
        values are all OptimizerSteps or dicts). Ignored when nothing is replayed.

        Device buffers: the ready event is recorded on torch's current stream of each device
        (for `__cuda_array_interface__` objects, the stream they declare), so reftd's pull
        starts after the work queued there; nothing waits for the device.
        """
        self._streams.update(self._c)
        if self._torch_stager is not None:
            self._c.fence()  # the mirrors are overwritten below: the previous copy must be done
            self._torch_stager.stage(self._c)
        if optimizer is None:
            self._c.snapshot(int(step))
            return
        if isinstance(optimizer, dict) and optimizer and all(
                isinstance(v, (OptimizerStep, dict)) for v in optimizer.values()):
            records = [_record(str(name), _optimizer_step(v, "optimizer[%r]" % (name,)))
                       for name, v in optimizer.items()]
        else:
            records = [_record("", _optimizer_step(optimizer, "optimizer"))]
        self._c.snapshot_aor(int(step), records)

    def fence(self):
        """Waits until the last snapshot no longer needs the buffers; raises its error.
        Under protection "aor" it also looks at reftd's AOR state now and then (aor_state())."""
        self._c.fence()
        if self._aor_watch is not None and self._aor_watch.due():
            try:
                self._aor_state(stacklevel=4)
            except Error:
                pass  # the fence succeeded; a reftd that cannot answer now is asked again later

    def aor_state(self):
        """reftd's AOR state of this rank's replay of its ring neighbour's optimizer shards
        (protection "aor"; docs/protection.md "AOR in reftd"): a dict with `state` ("" when
        nothing is replayed, "probation", "on", "off: <why>" such as "off: mismatch at step 7"
        or "off: optimizer on cuda", or one of those per shard, "'opt': on; 'opt2': off: ..."),
        and the counters `replays`, `copies`, `verified` (replays compared with the owner's
        copy) and `mismatches`. None from a reftd that does not report it. reftd answers at
        once: what the step just fenced changes shows one fence later. A state with AOR off
        issues one reft.AorWarning (fence() looks too: the first 8 times, then every 16th)."""
        return self._aor_state(stacklevel=4)

    def _aor_state(self, stacklevel):
        r = self._c.aor_state()
        if r is not None and self._aor_watch is not None:
            self._aor_watch.saw(r["state"], stacklevel)
        return r

    def bubble_begin(self):
        """HAS hint: the device is idle (a pipeline bubble) from now until bubble_end().

        Cheap (two atomic stores in a page shared with reftd); reftd copies the current
        snapshot into these windows first. The first call attaches the hint page.
        """
        self._c.bubble_begin()

    def bubble_end(self):
        """HAS hint: the bubble started by bubble_begin() is over."""
        self._c.bubble_end()

    def enable_has(self, stages=0, stage=0, micro_batches=0, forward=0.0, backward=0.0):
        """Attaches the HAS hint page, optionally describing this rank's 1F1B pipeline
        (seconds per micro-batch) so reftd starts from the simulator's bubble estimate."""
        self._c.enable_has(int(stages), int(stage), int(micro_batches), float(forward),
                           float(backward))

    def wait_committed(self, step, timeout=None):
        """True once `step` is committed job-wide; False when `timeout` seconds pass."""
        return self._c.wait_committed(int(step), None if timeout is None else float(timeout))

    def restore(self, reshape=False, remap=None, progress=None):
        """Fills the registered buffers from the newest committed step; returns it, or None.
        Waits first for the work queued on the devices' current streams (it may still use the
        buffers). A step saved under another layout raises InvalidArgumentError naming both
        layouts, unless reshape=True: then every buffer is found by its global name wherever the
        old layout saved it (docs/recovery.md "Reshape"); unique buffers without a shard whose
        coordinates the old layout lacks keep their bytes (last_restore["untouched"]).

        remap (with reshape=True), for state whose placement depends on the layout (a ZeRO
        optimizer partitioned by parameter): a callable given the reft.Layout the chosen step was
        saved under, returning None (nothing to remap) or {buffer name: [(src, dst, length),
        ...]}: bytes [src, src+length) of the saved global buffer of that name go to `dst` bytes
        into the registered one, bytes no segment covers become zero. The restore is probed
        first (the job-wide decision, nothing copied) to learn that layout; should a newer step
        saved under yet another layout be chosen in between, it is probed again.

        progress: a callable given a dict {"phase", "bytes_done", "bytes_total", "bytes_per_s"}
        at most once a second while the restore runs, from another thread, and once more when
        it returns (phase "done", bytes_done == bytes_total: the bytes delivered into this
        process's buffers). The same reports are logged at INFO on logging.getLogger("reft").
        A callback that raises is logged there (WARNING) and not called again; the restore
        goes on unaffected (docs/client.md "Restore progress")."""
        if remap is not None and not reshape:
            raise InvalidArgumentError("remap needs reshape=True")
        self._streams.synchronize()
        with _progress.RestoreWatch(self._c.restore_progress, progress):
            if remap is None:
                step = self._c.restore(bool(reshape))
            else:
                step = self._restore_remapped(remap)
            if step is not None and self._torch_stager is not None:
                self._torch_stager.unstage()
        return step

    def _restore_remapped(self, remap, attempts=3):
        for attempt in range(attempts):
            probed = self._c.probe_restore()
            if probed is None:
                return self._c.restore(True)  # nothing committed: a fresh start
            saved = _parse_layout(probed[1])
            segments = remap(saved)
            if not segments:
                return self._c.restore(True)
            segments = {str(name): [(int(a), int(b), int(n)) for a, b, n in segs]
                        for name, segs in segments.items()}
            try:
                return self._c.restore(True, probed[1], segments)
            except BusyError:  # a newer step under another layout was chosen meanwhile
                if attempt + 1 == attempts:
                    raise

    def close(self):
        self._c.close()

    @property
    def last_restore(self):
        """How the last restore() went, or None before one: a dict with `step` (None when
        nothing was committed job-wide), `source` ("memory", "tier" or "none"),
        `agreement_s` (time spent agreeing on the job-wide decision) and `agreement_reason`
        (why it waited, whose decision it followed), `daemon_s` (the restore inside reftd),
        `total_s` (restore() as seen here), `detail` (where each part came from), and for a
        reshape `reshaped` (True when the step was saved under another layout), `from_layout`
        (that layout, else None), `filled` and `untouched` (buffer names); under protection
        "aor", `aor`: reftd's AOR state at the restore (aor_state()'s `state`, e.g. "on" or
        "off: mismatch at step 7"; None when nothing is replayed); `phases`: when each phase
        of the recovery happened, `lost_at`, `declared_at`, `decided_at`, `staged_at`,
        `reconnected_at`, `restore_started_at`, `restore_ended_at`, each {"at_ms": unix ms,
        "node": the node that observed it} or None where the phase did not happen
        (docs/recovery.md "Phases of a recovery"; nodes' clocks may differ)."""
        return self._c.last_restore()

    @property
    def session_id(self):
        return self._c.session_id

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False
