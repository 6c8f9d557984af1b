"""HAS hints from a PyTorch pipeline schedule: tells reftd when this rank's device is idle.

reftd copies the current snapshot into pipeline bubbles first (docs/has.md). A schedule knows
its bubbles: the stage idles while it blocks on a peer (warm-up waiting for the first
activation, cool-down waiting for gradients, every blocking receive). PipelineBubbles turns
that knowledge into client.bubble_begin() / bubble_end() calls (two atomic stores each):

    bubbles = reft.torch.PipelineBubbles(client, stages=4, stage=rank, micro_batches=8)
    recv = bubbles.wrap(torch.distributed.recv)    # idle while a blocking receive waits
    with bubbles.idle():                           # or mark any wait by hand
        work.wait()
    bubbles.attach(stage_module)                   # or: busy while the stage computes,
                                                   # idle between (forward/backward hooks)

wrap()/idle() are exact around blocking waits. attach() uses module hooks, which run when
the host queues the work, not when the device runs it, so on an asynchronous device it marks
the bubble early; prefer wrapping the schedule's waits. Hints are advisory: if reftd has no
HAS, the first call's error is dropped and later calls do nothing. Calls nest (only the
outermost begin/end reach the client).
"""

import contextlib
import functools


class PipelineBubbles:
    def __init__(self, client, stages=0, stage=0, micro_batches=0, forward=0.0, backward=0.0):
        """`stages` > 0 describes this rank's 1F1B pipeline (seconds per micro-batch) so reftd
        starts from the simulator's bubble estimate before it has measured an iteration."""
        self._client = client
        self._depth = 0
        self._enabled = True
        self._handles = []
        if stages > 0:
            self._call(client.enable_has, stages, stage, micro_batches, forward, backward)

    def begin(self):
        self._depth += 1
        if self._depth == 1:
            self._call(self._client.bubble_begin)

    def end(self):
        if self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0:
            self._call(self._client.bubble_end)

    @contextlib.contextmanager
    def idle(self):
        self.begin()
        try:
            yield
        finally:
            self.end()

    def wrap(self, fn):
        """`fn` marked as a bubble while it runs (a blocking receive, a work handle's wait)."""
        @functools.wraps(fn)
        def waiting(*args, **kwargs):
            with self.idle():
                return fn(*args, **kwargs)
        return waiting

    def attach(self, module):
        """Busy from the start of `module`'s forward to its end and during its backward; idle
        in between. The backward ends when every trainable parameter of `module` has its
        gradient (tensor hooks: a module's full backward hook does not fire on the first stage,
        whose inputs need no gradient). Returns self; detach() removes the hooks."""
        self._handles.append(module.register_forward_pre_hook(lambda m, args: self.end()))
        self._handles.append(module.register_forward_hook(self._after_forward))
        params = [p for p in module.parameters() if p.requires_grad]
        pending = [len(params)]

        def grad_ready(grad):
            pending[0] -= 1
            if pending[0] == 0:  # the last of this backward's parameter gradients
                pending[0] = len(params)
                self.begin()
            return grad

        self._handles.extend(p.register_hook(grad_ready) for p in params)
        return self

    def detach(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def _after_forward(self, module, args, output):
        self.begin()
        # The stage computes again when backward reaches its output.
        for t in _tensors(output):
            if t.requires_grad:
                t.register_hook(self._backward_starts)
                break

    def _backward_starts(self, grad):
        self.end()
        return grad

    def _call(self, fn, *args):
        if not self._enabled:
            return
        from . import Error
        try:
            fn(*args)
        except Error:
            self._enabled = False  # advisory: a reftd without HAS says so once


def _tensors(output):
    import torch
    if isinstance(output, torch.Tensor):
        yield output
    elif isinstance(output, (list, tuple)):
        for o in output:
            yield from _tensors(o)
    elif isinstance(output, dict):
        for o in output.values():
            yield from _tensors(o)
