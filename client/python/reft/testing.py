"""For tests only: emulated device memory reachable from Python.

EmulatedDeviceArray is a block of libreft's emulated device (host memory in a memfd that reftd
imports and pulls like GPU memory, through the same export, fence and copy code) dressed as a
device array: it has `__cuda_array_interface__`, so reft.Client.register takes it exactly as it
takes a CuPy array or a CUDA tensor, and a numpy view `host` to read and write its bytes. It is
not CUDA memory: never hand it to a CUDA library.

    a = reft.testing.EmulatedDeviceArray((1024,), "float32")
    a.host[:] = 1.0
    client.register("w", a)                      # pulled by reftd
    b = reft.testing.EmulatedDeviceArray(4096, exportable=False)
    client.register("v", b)                      # staged, with one reft.StagedWarning
"""

from . import _reft

__all__ = ["EmulatedDeviceArray"]


class EmulatedDeviceArray:
    def __init__(self, shape, dtype="uint8", exportable=True):
        import numpy
        self.shape = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)
        self.dtype = numpy.dtype(dtype)
        count = 1
        for n in self.shape:
            count *= n
        self.nbytes = count * self.dtype.itemsize
        # exportable=False stands in for memory the backend refuses to export (CUDA VMM /
        # expandable segments): libreft stages it instead of letting reftd pull it.
        self._memory = _reft._EmulatedDeviceMemory(self.nbytes, bool(exportable))
        self.host = numpy.frombuffer(self._memory, dtype=self.dtype).reshape(self.shape)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self._memory.ptr, False),
                "strides": None, "version": 3, "stream": None}
