"""Shared fixtures: a real local daemon (reft_local_testd) per test, and client construction."""

import os
import subprocess
import tempfile

import pytest

import reft


def start_daemon(prefix, env=None, shm_parent=None, stderr=None):
    """Starts reft_local_testd on a fresh socket; returns (process, socket path, tmp dir).
    `shm_parent`: where its slot files go (default: the temporary directory, under /tmp);
    `stderr`: a file for its log (default: inherited)."""
    tmp = tempfile.TemporaryDirectory(prefix=prefix, dir=shm_parent)
    sock = os.path.join(tmp.name, "reftd.sock")
    proc = subprocess.Popen([os.environ["REFT_LOCAL_TESTD"], sock, os.path.join(tmp.name, "shm")],
                            stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env=None if env is None else dict(os.environ, **env))
    assert proc.stdout.readline().strip() == "ready"
    return proc, sock, tmp


def stop_daemon(proc, tmp):
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    tmp.cleanup()


@pytest.fixture
def daemon():
    proc, sock, tmp = start_daemon("reft-py-")
    yield sock
    stop_daemon(proc, tmp)


def client(sock, **kw):
    args = dict(socket=sock, job="py-job", pp=0, tp=0, dp=0,
                layout=reft.Layout(dp=1, tp=1, pp=1, zero=0), protection="none")
    args.update(kw)
    return reft.Client(**args)


def op_recorder():
    """A context manager recording every aten op dispatched on this thread (`.ops`): proof that
    a call does no tensor work."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    return OpRecorder()


def storage_ptr(t):
    """The address of a tensor's storage (untyped_storage on torch 2, where storage() is
    deprecated)."""
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()
