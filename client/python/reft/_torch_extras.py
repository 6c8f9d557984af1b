"""What a run needs besides its model and optimizer to go on as if it had not stopped: the
random number generators' states and objects with state_dict()/load_state_dict() (a sampler's
epoch and position). reft.torch.Checkpointer saves them with every step and puts them back
after a restore (docs/client.md "reft.torch").

Each is one per-rank ("unique") buffer registered once, of a fixed capacity (the same in
every process, as a restore requires): an 8-byte little-endian length, then the bytes (a
generator's raw state, or a pickle); CAPACITY bytes for a pickle. Writing it is a Python byte copy: no tensor operation runs in snapshot(). The pickles
come back only from the job's own snapshots, which only the job's owner can read
(docs/security.md "Jobs belong to their owner").
"""

import ctypes
import pickle
import random

import torch

_HEADER = 8
CAPACITY = 64 * 1024  # a pickled generator state is ~4-8 KiB; a sampler's state_dict far less
RNG_SOURCES = ("torch", "device", "python", "numpy")
DEFAULT_RNG = ("torch", "device")


def _tensor_bytes(t):
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _byte_tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _pickled(get, put):
    return (lambda: pickle.dumps(get(), protocol=4)), (lambda data: put(pickle.loads(data)))


def _rng_source(name):
    """(get bytes, put bytes) of one generator, or None when there is none here (no CUDA)."""
    if name == "torch":
        return (lambda: _tensor_bytes(torch.get_rng_state()),
                lambda data: torch.set_rng_state(_byte_tensor(data)))
    if name == "device":
        if not torch.cuda.is_available():
            return None
        return _pickled(lambda: [_tensor_bytes(s) for s in torch.cuda.get_rng_state_all()],
                        lambda states: torch.cuda.set_rng_state_all([_byte_tensor(s)
                                                                     for s in states]))
    if name == "python":
        return _pickled(random.getstate, random.setstate)
    if name == "numpy":
        import numpy as np
        return _pickled(np.random.get_state, np.random.set_state)
    raise ValueError("rng source %r: the sources are %s" % (name, ", ".join(RNG_SOURCES)))


class _Record:
    """One registered buffer: [length | bytes] of capacity `capacity`."""

    def __init__(self, name, get, put, capacity):
        self.name, self._get, self._put = name, get, put
        self.buffer = bytearray(_HEADER + capacity)

    def save(self):
        data = self._get()
        capacity = len(self.buffer) - _HEADER
        if len(data) > capacity:
            raise ValueError("%s: its state is %d bytes now, more than the %d registered when the "
                             "Checkpointer was created" % (self.name, len(data), capacity))
        self.buffer[:_HEADER] = len(data).to_bytes(_HEADER, "little")
        self.buffer[_HEADER:_HEADER + len(data)] = data

    def load(self):
        """Puts the restored state back; False when the step holds none for this rank (a
        reshape's new rank: the buffer kept this process's empty bytes)."""
        n = int.from_bytes(self.buffer[:_HEADER], "little")
        if n == 0:
            return False
        if n > len(self.buffer) - _HEADER:
            from . import CorruptedError
            raise CorruptedError("%s: the restored record says %d bytes, more than its %d"
                                 % (self.name, n, len(self.buffer) - _HEADER))
        self._put(bytes(self.buffer[_HEADER:_HEADER + n]))
        return True


def records(rng, extra):
    """The records of `rng` sources and `extra` objects ({name: obj with state_dict()})."""
    out = []
    for name in rng:
        source = _rng_source(name)
        if source is not None:
            get, put = source
            # torch's CPU generator state has one size; pickles vary with the values.
            capacity = len(get()) if name == "torch" else CAPACITY
            out.append(_Record("rng/" + name, get, put, capacity))
    for name, obj in (extra or {}).items():
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError("extra %r: %r has no state_dict()/load_state_dict()" % (name, obj))
        get, put = _pickled(obj.state_dict, obj.load_state_dict)
        out.append(_Record("extra/" + name, get, put, CAPACITY))
    return out
