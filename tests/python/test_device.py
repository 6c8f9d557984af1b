"""Device memory through the Python module, on the emulated device (CI has no GPU).

reft.testing.EmulatedDeviceArray is emulated device memory with `__cuda_array_interface__`:
reft.Client.register takes it like a CUDA array, reftd imports and pulls it through the same
export / ready event / copy stream code as CUDA memory. The daemon's copy engine is paced
(REFT_EMULATED_BANDWIDTH, set by CMake for this test) so a pull takes tens of milliseconds and
a fence that returned early, or a snapshot that waited, shows.
"""

import os
import subprocess
import time
import warnings

import numpy as np
import pytest

import reft
import reft.testing
from conftest import client, start_daemon, stop_daemon


def _bandwidth():
    v = os.environ["REFT_EMULATED_BANDWIDTH"]
    assert v.endswith("M")
    return int(v[:-1]) << 20


def _pattern(n, seed):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def _register_quietly(c, name, obj, **kw):
    """Registers and returns the StagedWarnings it issued."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        c.register(name, obj, **kw)
    return [w for w in seen if issubclass(w.category, reft.StagedWarning)]


def _snapshot_fence_overwrite(c, arr, step, seed):
    """Fills `arr` with a pattern, snapshots it, fences, and overwrites it the moment fence()
    returns; returns the pattern and the time spent in snapshot() and until fence() returned."""
    flat = arr.host.reshape(-1)
    want = _pattern(flat.size, seed)
    flat[:] = want
    t0 = time.monotonic()
    c.snapshot(step)
    t1 = time.monotonic()
    c.fence()
    t2 = time.monotonic()
    flat[:] = -1.0  # the trainer's next optimizer step
    return want, t1 - t0, t2 - t0


def test_device_array_is_pulled_fenced_and_restored_bit_exactly(daemon):
    n = 6 << 20  # 24 MiB of float32: the paced pull takes ~190 ms
    pull = 4 * n / _bandwidth()  # seconds the paced pull takes at least
    dev = reft.testing.EmulatedDeviceArray(n, "float32")
    host = np.arange(1000, dtype=np.float64)  # a staged host buffer alongside
    with client(daemon) as c:
        assert _register_quietly(c, "w", dev, layer=0) == []  # pulled: no warning
        c.register("h", host, kind="unique")
        assert c.restore() is None
        for step in (1, 2, 3):
            want, in_snapshot, until_fenced = _snapshot_fence_overwrite(c, dev, step, step)
            host[:] = step
            # snapshot() only records the ready event; fence() waited for the paced pull.
            assert until_fenced >= 0.9 * pull, (until_fenced, pull)
            assert in_snapshot < 0.5 * until_fenced, (in_snapshot, until_fenced)
            assert c.wait_committed(step, timeout=30)
        assert c.restore() == 3
        assert np.array_equal(dev.host, want)  # not the -1.0 written right after fence()
        assert np.array_equal(host, np.full(1000, 2.0))  # host[:] = 3 came after snapshot 3


def test_overwrite_without_fence_tears_the_snapshot(daemon):
    """The control for the test above: writing while the pull is in flight does reach the
    snapshot, so a fence that returned early would have been caught there."""
    n = 3 << 20
    dev = reft.testing.EmulatedDeviceArray(n, "float32")
    with client(daemon) as c:
        c.register("w", dev)
        want = _pattern(n, 7)
        dev.host[:] = want
        c.snapshot(1)
        dev.host[:] = -1.0  # no fence: races the daemon's paced pull
        c.fence()
        assert c.wait_committed(1, timeout=30)
        dev.host[:] = 0
        assert c.restore() == 1
        assert not np.array_equal(dev.host, want)
        assert np.any(dev.host == -1.0)


def _file_system(path):
    return subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("where", ["tmpfs", "disk"])
def test_slot_memory_the_kernel_cannot_page_lock_is_copied_unpinned_with_one_warning(
        where, tmp_path):
    """Linux refuses to page-lock shared file mappings outside tmpfs/hugetlbfs (the emulated
    device keeps that rule, as cudaHostRegister meets it): with --shm-dir on such a file system
    the pull still runs and restores bit-exactly, and reftd says why it is slow, once."""
    parent = "/dev/shm" if where == "tmpfs" else str(tmp_path)
    fs = _file_system(parent)
    if (where == "tmpfs") != (fs in ("tmpfs", "hugetlbfs")):
        pytest.skip("%s is on %s here" % (parent, fs))
    log = tmp_path / "reftd.log"
    with open(log, "w") as err:
        proc, sock, tmp = start_daemon("reft-pin-", shm_parent=parent, stderr=err)
        try:
            dev = reft.testing.EmulatedDeviceArray(1 << 20, "float32")
            with client(sock) as c:
                c.register("w", dev)
                for step in (1, 2, 3):
                    want, _, _ = _snapshot_fence_overwrite(c, dev, step, step)
                assert c.wait_committed(3, timeout=30)
                assert c.restore() == 3
                assert np.array_equal(dev.host.reshape(-1), want)
        finally:
            stop_daemon(proc, tmp)
    warned = log.read_text().count("cannot be page-locked")
    assert warned == (0 if where == "tmpfs" else 1), log.read_text()


def test_unexportable_device_memory_is_staged_warned_once_and_restored(daemon):
    n = 4 << 20
    pull = 4 * n / _bandwidth()
    dev = reft.testing.EmulatedDeviceArray((2, n // 2), "float32", exportable=False)
    with client(daemon) as c:
        warned = _register_quietly(c, "moments", dev, kind="unique")
        assert len(warned) == 1
        message = str(warned[0].message)
        assert "'moments'" in message and "emulated:0" in message
        assert "not exportable" in message  # the backend's reason
        with warnings.catch_warnings(record=True) as later:
            warnings.simplefilter("always")
            for step in (1, 2):
                want, in_snapshot, until_fenced = _snapshot_fence_overwrite(c, dev, step, 10 + step)
                # Staged: this process's copy worker copies it (paced too); fence waits for it.
                assert until_fenced >= 0.9 * pull, (until_fenced, pull)
                assert in_snapshot < 0.5 * until_fenced, (in_snapshot, until_fenced)
                assert c.wait_committed(step, timeout=30)
            assert c.restore() == 2
        assert [w for w in later if issubclass(w.category, reft.StagedWarning)] == []
        assert np.array_equal(dev.host.reshape(-1), want)


class _ArrayInterface:
    """A bare `__cuda_array_interface__` over memory no backend of libreft claims."""

    def __init__(self, ptr, nbytes, **extra):
        self.__cuda_array_interface__ = dict(
            {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3,
             "strides": None}, **extra)


def test_array_interface_errors(daemon, monkeypatch):
    host = bytearray(4096)
    ptr = np.frombuffer(host, np.uint8).ctypes.data
    with client(daemon) as c:
        with pytest.raises(reft.InvalidArgumentError, match="read-only"):
            c.register("ro", _ArrayInterface(ptr, 4096, data=(ptr, True)))
        with pytest.raises(reft.InvalidArgumentError, match="not C-contiguous"):
            c.register("strided", _ArrayInterface(ptr, 1024, shape=(2, 512), strides=(1024, 1)))
        if reft._device.MEMORY_CUDA in reft._device.built_memory_kinds():
            with pytest.raises(reft.InvalidArgumentError, match="not device memory"):
                c.register("host", _ArrayInterface(ptr, 4096))
        # A libreft without the CUDA backend can stage torch tensors only.
        monkeypatch.setattr(reft._device, "_built", frozenset([0, 1]))
        with pytest.raises(reft.UnsupportedError,
                           match="built without the CUDA backend.*only torch tensors"):
            c.register("cupy-like", _ArrayInterface(ptr, 4096))


class _RecordingClient:
    def __init__(self):
        self.calls = []

    def set_stream(self, memory, device, stream):
        self.calls.append((memory, device, stream))


def test_declared_streams_reach_libreft_once():
    """`__cuda_array_interface__` v3 streams: 1 is the legacy default stream (handle 0), other
    values are stream handles; libreft hears of each device's stream once, not per snapshot."""
    from reft._device import DeviceBuffer, MEMORY_CUDA, MEMORY_EMULATED, StreamTracker
    tracker = StreamTracker()
    tracker.add(DeviceBuffer(1, 8, "uint8", MEMORY_CUDA, 0, stream=0x7f00))
    tracker.add(DeviceBuffer(2, 8, "uint8", MEMORY_CUDA, 1, stream=0))
    tracker.add(DeviceBuffer(3, 8, "uint8", MEMORY_EMULATED, 0, stream=0x55))
    rec = _RecordingClient()
    for _ in range(3):
        tracker.update(rec)
    assert sorted(rec.calls) == [(MEMORY_CUDA, 0, 0x7f00), (MEMORY_CUDA, 1, 0)]
    legacy = reft._device._from_array_interface(
        {"shape": (8,), "typestr": "<f4", "data": (4096, False), "version": 3, "stream": 1},
        "x", None)
    assert (legacy.stream, legacy.dtype, legacy.nbytes) == (0, "float32", 32)


def test_optimizer_shard_on_the_device_is_copied_not_replayed(daemon):
    """Protection "aor" with the ZeRO-1 optimizer shard in device memory (the emulated device
    standing in for CUDA/ROCm): the trainer's GPU kernels are not what the host replays, so
    reftd has AOR off for it from the registration on ("off: optimizer on emulated device"),
    copies it every step, and the trainer hears of it once (reft.AorWarning) and in its
    restore report."""
    n = 1031
    ranks = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for d in range(2):
            c = client(daemon, job="aor-device", dp=d, layout=reft.Layout(dp=2, zero=1),
                       protection="aor")
            opt = reft.testing.EmulatedDeviceArray(3 * n, "float32")
            opt.host[:] = _pattern(3 * n, d)
            grad = np.zeros(2 * n, np.float32)
            c.register("opt", opt, kind="unique", optimizer=True)
            c.register("grad", grad, kind="gradient")
            state = c.aor_state()
            assert state["state"] == "off: optimizer on emulated device", state
            ranks.append((c, opt, grad))
        for step in range(1, 4):
            for d, (c, opt, grad) in enumerate(ranks):
                c.fence()
                opt.host[:] = _pattern(3 * n, 10 * step + d)  # the owner's update, on the device
                c.snapshot(step, optimizer=reft.OptimizerStep(step=step, lr=1e-3,
                                                              kernel="lerp+fma"))
        for c, _, _ in ranks:
            c.fence()
        for c, _, _ in ranks:
            assert c.wait_committed(3, timeout=30)
        for c, _, _ in ranks:
            state = c.aor_state()
            assert (state["copies"], state["replays"]) == (3, 0), state
            assert c.restore() == 3
            assert c.last_restore["aor"] == "off: optimizer on emulated device"
            c.close()
    aor_warnings = [w for w in seen if issubclass(w.category, reft.AorWarning)]
    assert len(aor_warnings) == 2, [str(w.message) for w in aor_warnings]  # one per rank
    assert all("off: optimizer on emulated device" in str(w.message) for w in aor_warnings)
