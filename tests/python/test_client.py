"""The Python module `reft` against a real local daemon (reft_local_testd)."""

import os
import subprocess
import tempfile
import threading

import pytest

import reft


@pytest.fixture
def daemon():
    tmp = tempfile.TemporaryDirectory(prefix="reft-py-")
    sock = os.path.join(tmp.name, "reftd.sock")
    proc = subprocess.Popen([os.environ["REFT_LOCAL_TESTD"], sock, os.path.join(tmp.name, "shm")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield sock
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    tmp.cleanup()


def client(sock, **kw):
    args = dict(socket=sock, job="py-job", pp=0, tp=0, dp=0,
                layout=reft.Layout(dp=1, tp=1, pp=1, zero=0), protection="none")
    args.update(kw)
    return reft.Client(**args)


def test_bytearray_numpy_torch_round_trip(daemon):
    import numpy as np
    import torch
    ba = bytearray(os.urandom(4097))
    arr = np.random.default_rng(1).standard_normal(1001).astype(np.float32)
    ten = torch.randn(33, 7, dtype=torch.float64)
    want = (bytes(ba), arr.copy(), ten.clone())
    with client(daemon) as c:
        c.register("ba", ba)
        c.register("arr", arr, kind="unique", layer=3)
        c.register("ten", ten, layer=0)
        assert c.restore() is None
        c.snapshot(5)
        c.fence()
        assert c.wait_committed(5, timeout=10) is True
        ba[:] = b"\0" * len(ba)
        arr[:] = 0
        ten.zero_()
        assert c.restore() == 5
        assert bytes(ba) == want[0]
        assert np.array_equal(arr, want[1])
        assert torch.equal(ten, want[2])


def test_snapshot_returns_at_once_and_fence_waits(daemon):
    import numpy as np
    big = np.ones(16 << 20, dtype=np.uint8)
    with client(daemon) as c:
        c.register("big", big)
        c.snapshot(1)
        c.fence()
        assert c.wait_committed(1, timeout=10)
        assert c.wait_committed(2, timeout=0.05) is False


def test_errors_are_typed(daemon):
    with pytest.raises(reft.InvalidArgumentError, match="protection"):
        client(daemon, protection="raid5")
    with pytest.raises(reft.UnavailableError):
        client(daemon + ".missing")
    with pytest.raises(reft.InvalidArgumentError, match="layout"):
        client(daemon, dp=3, layout=reft.Layout(dp=2))
    assert issubclass(reft.CorruptedError, reft.Error)
    with client(daemon) as c:
        c.register("x", bytearray(8))
        with pytest.raises(reft.AlreadyExistsError):
            c.register("x", bytearray(8))
        with pytest.raises(reft.InvalidArgumentError):
            c.register("ro", b"readonly")
        with pytest.raises(reft.InvalidArgumentError):
            c.register("k", bytearray(8), kind="mirrored")


def test_torch_module_and_optimizer_round_trip(daemon):
    import torch
    import reft.torch as rt
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                                torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def train_step():
        x = torch.randn(4, 8)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    train_step()
    with client(daemon) as c:
        ck = rt.Checkpointer(c, model, opt)
        ck.snapshot(1)
        ck.fence()
        assert c.wait_committed(1, timeout=10)
        saved_model = {k: v.clone() for k, v in model.state_dict().items()}
        saved_opt = {k: (v["exp_avg"].clone(), v["exp_avg_sq"].clone())
                     for k, v in opt.state_dict()["state"].items()}
        for _ in range(3):
            train_step()
        assert ck.restore() == 1
        for k, v in model.state_dict().items():
            assert torch.equal(v, saved_model[k]), k
        for k, v in opt.state_dict()["state"].items():
            assert torch.equal(v["exp_avg"], saved_opt[k][0])
            assert torch.equal(v["exp_avg_sq"], saved_opt[k][1])
        # Training continues from the restored state.
        train_step()


def test_gil_released_while_waiting(daemon):
    import numpy as np
    big = np.ones(32 << 20, dtype=np.uint8)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.001)

    with client(daemon) as c:
        c.register("big", big)
        t = threading.Thread(target=ticker, daemon=True)
        t.start()
        try:
            c.snapshot(1)
            c.fence()
            assert c.wait_committed(1, timeout=10)
        finally:
            stop.set()
            t.join()
    assert len(ticks) > 0


def test_no_stdout_from_the_library(daemon, capfd):
    with client(daemon) as c:
        c.register("x", bytearray(100))
        c.snapshot(1)
        c.fence()
        c.wait_committed(1, timeout=10)
        c.restore()
    out, _ = capfd.readouterr()
    assert out == ""
