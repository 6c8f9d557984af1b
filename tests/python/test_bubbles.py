"""reft.torch.PipelineBubbles: HAS hints from a pipeline schedule's waits and a stage's hooks."""

import threading

import torch

import reft
import reft.torch as rt
from conftest import client


class _Recorder:
    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail

    def bubble_begin(self):
        if self.fail:
            raise self.fail
        self.calls.append("begin")

    def bubble_end(self):
        self.calls.append("end")

    def enable_has(self, *pipeline):
        self.calls.append(("enable", pipeline))


def test_stage_hooks_mark_the_time_between_computations():
    rec = _Recorder()
    stage = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    bubbles = rt.PipelineBubbles(rec, stages=2, stage=1, micro_batches=2, forward=0.1,
                                 backward=0.2).attach(stage)
    assert rec.calls == [("enable", (2, 1, 2, 0.1, 0.2))]
    del rec.calls[:]
    outs = [stage(torch.randn(3, 4)) for _ in range(2)]  # 1F1B warm-up: two forwards
    for out in reversed(outs):
        out.sum().backward()
    stage(torch.randn(3, 4))
    # idle after each forward; busy from when backward reaches the stage to its end.
    assert rec.calls == ["begin", "end", "begin", "end", "begin", "end", "begin", "end", "begin"]
    bubbles.detach()
    stage(torch.randn(3, 4)).sum().backward()
    assert len(rec.calls) == 9


def test_wrapped_waits_nest_and_errors_disable_the_hints():
    rec = _Recorder()
    bubbles = rt.PipelineBubbles(rec)
    event = threading.Event()
    event.set()
    wait = bubbles.wrap(event.wait)
    with bubbles.idle():
        assert wait(1.0) is True  # nested: one bubble, not two
    assert rec.calls == ["begin", "end"]
    off = _Recorder(fail=reft.UnsupportedError("reftd has no HAS"))
    hints = rt.PipelineBubbles(off)
    with hints.idle():  # advisory: the error is dropped once, the hints stop
        pass
    with hints.idle():
        pass
    assert off.calls == []


def test_hints_reach_a_real_client(daemon):
    import numpy as np
    with client(daemon, job="bubbles") as c:
        c.register("w", np.ones(1 << 16, np.float32))
        bubbles = rt.PipelineBubbles(c, stages=2, stage=0, micro_batches=4, forward=0.001,
                                     backward=0.002)
        for step in (1, 2):
            c.snapshot(step)
            with bubbles.idle():
                pass
            c.fence()
        assert c.wait_committed(2, timeout=30)
