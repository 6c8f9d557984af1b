"""reft: keep training state in the node's memory (client of the local reftd).

    c = reft.Client(socket=PATH, job="run-1", pp=0, tp=0, dp=RANK,
                    layout=reft.Layout(dp=4, tp=1, pp=1, zero=0), protection="arc1")
    c.register("params", obj, kind="replicated", layer=None)
    c.snapshot(step)              # returns at once
    c.fence()                     # buffers may be modified again
    c.wait_committed(step, timeout=None)
    step = c.restore()            # newest committed step, or None
    c.close()

Errors raise reft.Error subclasses, one per status code. The library prints nothing and
starts one thread (the copy worker).
"""

import os as _os
from dataclasses import dataclass as _dataclass

from . import _reft

__all__ = ["Client", "Layout", "Error"]
__version__ = "0.1.0"

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


@_dataclass(frozen=True)
class Layout:
    """Parallel layout of the job: dp * tp * pp ranks, ZeRO stage."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    zero: int = 0


_KINDS = {"replicated": 0, "unique": 1}


def _torch_tensor(obj):
    mod = type(obj).__module__
    if not mod.startswith("torch"):
        return None
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    return obj if isinstance(obj, torch.Tensor) else None


class Client:
    """A trainer rank's connection to its node's reftd. Also a context manager."""

    def __init__(self, socket=None, job=None, pp=0, tp=0, dp=0, layout=None,
                 protection="none", timeout=60.0):
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
        self._c = _reft._Client(str(socket), str(job), int(pp), int(tp), int(dp), int(layout.dp),
                                int(layout.tp), int(layout.pp), int(layout.zero),
                                str(protection), int(timeout * 1000))

    def register(self, name, obj, kind="replicated", layer=None, dtype=None):
        """Registers a writable, contiguous buffer: bytearray, numpy array, CPU torch tensor."""
        if kind not in _KINDS:
            raise InvalidArgumentError(
                "kind must be 'replicated' or 'unique', not %r" % (kind,))
        layer_i = -1 if layer is None else int(layer)
        t = _torch_tensor(obj)
        if t is not None:
            if t.device.type != "cpu":
                raise UnsupportedError(
                    "tensor %r is on %s: this build registers CPU tensors only" % (name, t.device))
            if not t.is_contiguous():
                raise InvalidArgumentError("tensor %r is not contiguous" % (name,))
            self._c.register_ptr(name, t.data_ptr(), t.numel() * t.element_size(), _KINDS[kind],
                                 dtype or str(t.dtype).replace("torch.", ""), layer_i, 0)
        else:
            if isinstance(obj, (bytes, str)) or (isinstance(obj, memoryview) and obj.readonly):
                raise InvalidArgumentError("buffer %r is read-only: restore writes into it" % (name,))
            if dtype is None:
                dtype = str(getattr(obj, "dtype", "uint8"))
            self._c.register_buffer(name, obj, _KINDS[kind], dtype, layer_i)
        self._buffers.append(obj)

    def snapshot(self, step):
        """Starts the snapshot of `step`; returns at once (the copy runs in the background)."""
        self._c.snapshot(int(step))

    def fence(self):
        """Waits until the last snapshot no longer needs the buffers; raises its error."""
        self._c.fence()

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

    def restore(self):
        """Fills the registered buffers from the newest committed step; returns it, or None."""
        return self._c.restore()

    def close(self):
        self._c.close()

    @property
    def session_id(self):
        return self._c.session_id

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False
