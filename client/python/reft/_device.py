"""Device memory handed to reft.Client.register: what it is, and the streams that produce it.

A torch tensor on a CUDA device (or a ROCm one: torch calls those "cuda" too), or any object
with `__cuda_array_interface__` (CuPy, Numba, reft.testing.EmulatedDeviceArray), is described
as a DeviceBuffer: pointer, size, dtype, memory kind and device. libreft exports it to reftd or,
when the backend refuses to export it, stages it (docs/client.md "Transfer modes").
"""

from . import _reft

MEMORY_HOST, MEMORY_EMULATED, MEMORY_CUDA, MEMORY_HIP = 0, 1, 2, 3
MEMORY_NAMES = {MEMORY_EMULATED: "emulated", MEMORY_CUDA: "CUDA", MEMORY_HIP: "HIP"}

# __cuda_array_interface__ typestr (kind, itemsize) -> reft dtype name.
_TYPESTR = {("f", 2): "float16", ("f", 4): "float32", ("f", 8): "float64",
            ("i", 1): "int8", ("i", 2): "int16", ("i", 4): "int32", ("i", 8): "int64",
            ("u", 1): "uint8", ("u", 2): "uint16", ("u", 4): "uint32", ("u", 8): "uint64",
            ("b", 1): "bool"}

# __cuda_array_interface__ v3 "stream": 1 = legacy default stream, 2 = per-thread default
# stream (cudaStreamPerThread is the handle value 2), any other integer is a cudaStream_t.
_CAI_LEGACY_STREAM = 1

_built = None


def built_memory_kinds():
    """Memory kinds this libreft registers (host and emulated always, CUDA/HIP when built)."""
    global _built
    if _built is None:
        _built = frozenset(_reft.built_memory_kinds())
    return _built


class DeviceBuffer:
    """One device buffer: `tensor` is the torch tensor (None for other objects); `stream` the
    stream its producer declared through `__cuda_array_interface__` (None: none declared)."""

    __slots__ = ("ptr", "nbytes", "dtype", "memory", "device", "tensor", "stream")

    def __init__(self, ptr, nbytes, dtype, memory, device, tensor=None, stream=None):
        self.ptr, self.nbytes, self.dtype = ptr, nbytes, dtype
        self.memory, self.device, self.tensor, self.stream = memory, device, tensor, stream

    def where(self):
        return "%s:%d" % (MEMORY_NAMES.get(self.memory, "?"), self.device)


def torch_tensor(obj):
    """`obj` if it is a torch tensor (without importing torch for anything else), else None."""
    if not type(obj).__module__.startswith("torch"):
        return None
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    return obj if isinstance(obj, torch.Tensor) else None


def describe(obj, name, dtype=None):
    """A DeviceBuffer for device memory, None for host memory; raises reft errors for memory
    reft cannot take (other device types, non-contiguous or read-only arrays)."""
    from . import InvalidArgumentError, UnsupportedError
    t = torch_tensor(obj)
    if t is not None:
        if t.device.type == "cpu":
            return None
        if t.device.type != "cuda":
            raise UnsupportedError("tensor %r is on %s: reft takes CPU, CUDA and ROCm tensors"
                                   % (name, t.device))
        if not t.is_contiguous():
            raise InvalidArgumentError("tensor %r is not contiguous" % (name,))
        import torch
        memory = MEMORY_HIP if getattr(torch.version, "hip", None) else MEMORY_CUDA
        return DeviceBuffer(t.data_ptr(), t.numel() * t.element_size(),
                            dtype or str(t.dtype).replace("torch.", ""), memory, t.device.index, t)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        return None
    return _from_array_interface(cai, name, dtype)


def _from_array_interface(cai, name, dtype):
    from . import InvalidArgumentError
    ptr, readonly = cai["data"]
    if readonly:
        raise InvalidArgumentError("buffer %r is read-only: restore writes into it" % (name,))
    if cai.get("mask") is not None:
        raise InvalidArgumentError("buffer %r is masked: reft takes plain arrays" % (name,))
    typestr = cai["typestr"]
    kind, itemsize = typestr[1], int(typestr[2:])
    shape = tuple(int(n) for n in cai["shape"])
    count = 1
    for n in shape:
        count *= n
    strides = cai.get("strides")
    if strides is not None:
        expect = itemsize
        for n, s in reversed(list(zip(shape, strides))):
            if n > 1 and s != expect:
                raise InvalidArgumentError("buffer %r is not C-contiguous" % (name,))
            expect *= n
    if dtype is None:
        dtype = _TYPESTR.get((kind, itemsize))
        if dtype is None:
            raise InvalidArgumentError("buffer %r: no reft dtype for typestr %r; pass dtype="
                                       % (name, typestr))
    memory, device = _reft.locate(int(ptr))
    if memory == MEMORY_HOST:
        # No backend of this libreft claims it: CUDA memory under a build without CUDA (the
        # register call says so), or not device memory at all.
        memory, device = MEMORY_CUDA, -1
    stream = cai.get("stream") if int(cai.get("version", 0)) >= 3 else None
    if stream == _CAI_LEGACY_STREAM:
        stream = 0
    return DeviceBuffer(int(ptr), count * itemsize, dtype, memory, device, None, stream)


class StreamTracker:
    """Tells libreft, before every snapshot, the stream that produces each device's buffers:
    torch's current stream for devices holding torch tensors (read at each snapshot: a trainer
    may switch streams), else the stream an `__cuda_array_interface__` producer declared."""

    def __init__(self):
        self._torch_devices = {}  # (memory, device) -> True
        self._declared = {}       # (memory, device) -> stream handle
        self._set = {}            # (memory, device) -> handle last given to libreft

    def add(self, buf):
        if buf.memory not in (MEMORY_CUDA, MEMORY_HIP):
            return  # emulated memory has no streams
        key = (buf.memory, buf.device)
        if buf.tensor is not None:
            self._torch_devices[key] = True
        elif buf.stream is not None:
            self._declared.setdefault(key, int(buf.stream))

    def torch_devices(self):
        return [device for (_, device) in self._torch_devices]

    def update(self, client):
        """Called at every snapshot: a few attribute reads per device, no device call."""
        if self._torch_devices:
            import torch
            for key in self._torch_devices:
                self._give(client, key, torch.cuda.current_stream(key[1]).cuda_stream)
        for key, handle in self._declared.items():
            if key not in self._torch_devices:
                self._give(client, key, handle)

    def _give(self, client, key, handle):
        if self._set.get(key) != handle:
            client.set_stream(key[0], key[1], handle)
            self._set[key] = handle

    def synchronize(self):
        """Waits for the work queued on torch's current streams (before a restore overwrites
        the buffers that work may still read or write)."""
        if self._torch_devices:
            import torch
            for _, device in self._torch_devices:
                torch.cuda.current_stream(device).synchronize()
