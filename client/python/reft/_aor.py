"""Which replay form reproduces this process's optimizer bit for bit (protection "aor").

reftd replays a ring neighbour's Adam/AdamW update on the host with reft's kernel, which knows
the ways torch's CPU kernels round (docs/protection.md "What is exact"): the first moment by
mul_+add_ (torch 1.x) or lerp_ (torch >= 2.0); multiply-adds fused or not (ATen's AVX2/AVX-512
kernels fuse them, its portable ones do not); torch's fused kernel (`fused=True`), whose scalar
tail rounds the second moment in another order; Adam's L2 weight decay or AdamW's decoupled
one. Each step's record says which form the owner runs. Rather than guessing it from versions
and CPU flags, this module runs the trainer's own optimizer class with its flags for a few
steps on synthetic data and replays them with reft's kernel in every candidate form: the first
form that reproduces every bit is the one declared. When none does, the update is declared not
replayable, with the reason, and reftd copies the shard instead of replaying it; reftd also
compares the first replays of every replica with the owner's copy (probation), so a form this
probe accepted wrongly is caught too.

A form is written as text, e.g. "lerp+fma", "fused8+fma+l2", "mul-add", or "off:<reason>".
"""

import re
import sys
from dataclasses import dataclass

# aor::NotReplayable codes (protect/aor/include/reft/aor/step_hyper.h).
SQRT_NOT_CORRECTLY_ROUNDED = 1
NO_MATCHING_FORM = 2
UNSUPPORTED_OPTIMIZER = 3
DEVICE_OPTIMIZER = 4
_REASONS = {"sqrt": SQRT_NOT_CORRECTLY_ROUNDED, "no-match": NO_MATCHING_FORM,
            "unsupported": UNSUPPORTED_OPTIMIZER, "device": DEVICE_OPTIMIZER}
_REASON_NAMES = {v: k for k, v in _REASONS.items()}

# Owner kernels the probe can run: what OptimizerStep(kernel=...) accepts besides a form.
TORCH_KERNELS = {"torch": {}, "torch-foreach": {"foreach": True}, "torch-fused": {"fused": True}}


class AorWarning(UserWarning):
    """reftd does not replay this rank's ring neighbour's optimizer shard bit for bit, so it
    copies it instead (docs/protection.md "AOR in reftd"): the trainer's optimizer cannot be
    replayed ("off: <why>"), or a replay differed from the owner's state ("off: mismatch at
    step S"). Training is unaffected; the copy costs network bandwidth every step."""


@dataclass(frozen=True)
class Form:
    """How the owner's update rounds: the record fields of hyper_codec.h."""

    lerp: bool = False
    fma: bool = False
    fused_width: int = 0
    l2: bool = False
    not_replayable: int = 0

    def __str__(self):
        if self.not_replayable:
            return "off:" + _REASON_NAMES.get(self.not_replayable, str(self.not_replayable))
        first = "fused%d" % self.fused_width if self.fused_width else (
            "lerp" if self.lerp else "mul-add")
        return first + ("+fma" if self.fma else "") + ("+l2" if self.l2 else "")


def parse_form(text):
    """Form of "lerp+fma", "fused8+fma+l2", "mul-add", "off:sqrt"; ValueError otherwise."""
    text = str(text).strip()
    if text.startswith("off:"):
        reason = text[4:].strip()
        if reason in _REASONS:
            return Form(not_replayable=_REASONS[reason])
        if reason.isdigit() and 0 < int(reason) < 256:
            return Form(not_replayable=int(reason))
        raise ValueError("unknown reason %r in %r (expected one of %s)"
                         % (reason, text, ", ".join(sorted(_REASONS))))
    parts = text.split("+")
    first, rest = parts[0], parts[1:]
    m = re.fullmatch(r"fused(\d+)", first)
    if m and 0 < int(m.group(1)) <= 64:
        form = dict(lerp=True, fused_width=int(m.group(1)))
    elif first in ("lerp", "mul-add"):
        form = dict(lerp=first == "lerp")
    else:
        raise ValueError("unknown replay form %r (e.g. 'lerp+fma', 'fused8+fma', 'mul-add')"
                         % (text,))
    for flag in rest:
        if flag not in ("fma", "l2") or flag in form:
            raise ValueError("unknown or repeated part %r in replay form %r" % (flag, text))
        form[flag] = True
    return Form(**form)


_CACHE = {}


def form_of_kernel(kernel):
    """The Form of OptimizerStep.kernel: a form's text, or "torch" / "torch-foreach" /
    "torch-fused" (torch.optim.AdamW with those flags, probed once per process)."""
    if kernel not in _CACHE:
        _CACHE[kernel] = _form_of_kernel(kernel)
    return _CACHE[kernel]


def _form_of_kernel(kernel):
    if kernel in TORCH_KERNELS:
        torch = sys.modules.get("torch")
        if torch is None:
            import torch
        flags = TORCH_KERNELS[kernel]
        return probe(torch.optim.AdamW, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                     foreach=flags.get("foreach"), fused=flags.get("fused"))
    return parse_form(kernel)


def form_of_optimizer(optimizer, group=0):
    """The Form of a torch optimizer's param group, probed once per (class, options)."""
    import torch
    g = optimizer.param_groups[group]
    params = [p for p in g["params"] if p is not None]
    if any(p.device.type != "cpu" for p in params):
        return Form(not_replayable=DEVICE_OPTIMIZER)
    dtypes = {p.dtype for p in params}
    if len(dtypes) != 1 or not dtypes <= {torch.float32, torch.bfloat16}:
        return Form(not_replayable=UNSUPPORTED_OPTIMIZER)  # fp32 or bf16 state only
    return probe(type(optimizer), betas=tuple(g.get("betas", (0.9, 0.999))),
                 eps=g.get("eps", 1e-8), weight_decay=g.get("weight_decay", 0.0),
                 foreach=g.get("foreach"), fused=g.get("fused"),
                 decoupled=g.get("decoupled_weight_decay"),
                 unsupported=any(g.get(k) for k in ("amsgrad", "maximize", "capturable",
                                                    "differentiable")),
                 bf16=dtypes == {torch.bfloat16})


def probe(cls, betas, eps, weight_decay, foreach=None, fused=None, decoupled=None,
          unsupported=False, bf16=False):
    """Runs `cls` (torch.optim.Adam or AdamW, or a subclass) with these options on a probe
    (bf16 parameters and state with `bf16`) and returns the first Form whose replay reproduces
    it bit for bit."""
    import torch
    key = (cls, tuple(float(b) for b in betas), float(eps), float(weight_decay) != 0.0, foreach,
           fused, decoupled, bool(unsupported), bool(bf16))
    if key not in _CACHE:
        _CACHE[key] = _probe(torch, *key)
    return _CACHE[key]


def _torch_major(torch):
    m = re.match(r"(\d+)", getattr(torch, "__version__", ""))
    return int(m.group(1)) if m else 0


def _l2(cls, torch, decoupled, has_wd):
    """Adam (not AdamW) with weight decay adds it to the gradient."""
    if not has_wd:
        return False
    if issubclass(cls, torch.optim.AdamW):
        return False
    return not decoupled


def _probe(torch, cls, betas, eps, has_wd, foreach, fused, decoupled, unsupported, bf16):
    if unsupported or not issubclass(cls, (torch.optim.Adam, torch.optim.AdamW)):
        return Form(not_replayable=UNSUPPORTED_OPTIMIZER)
    l2 = _l2(cls, torch, decoupled, has_wd)
    major = _torch_major(torch)
    if fused and bf16:
        # bf16 hides most of the tail's rounding: the fp32 probe of the same kernel says how it
        # fuses and its vector width; ATen's bf16 vectors hold twice as many elements.
        base = probe(cls, betas, eps, 1.0 if has_wd else 0.0, foreach, fused, decoupled)
        candidates = [] if base.not_replayable else [
            Form(lerp=True, fma=base.fma, fused_width=min(64, 2 * base.fused_width), l2=l2)]
    elif fused:
        candidates = [Form(lerp=True, fused_width=8, l2=l2)] + [
            Form(lerp=True, fma=True, fused_width=w, l2=l2) for w in (8, 16, 32, 4, 64)]
    else:
        lerp = major >= 2
        candidates = [Form(lerp=lerp, l2=l2), Form(lerp=lerp, fma=True, l2=l2)]
    dtype = torch.bfloat16 if bf16 else torch.float32
    trace = _run_owner(torch, cls, betas, eps, has_wd, foreach, fused, decoupled, dtype)
    if trace is None:
        return Form(not_replayable=UNSUPPORTED_OPTIMIZER)
    # ATen's bf16 sqrt is not MKL's: the fp32 probe of the sqrt stands for fp32 state only.
    sqrt_ok = bf16 or _sqrt_correctly_rounded(torch)
    matched = [form for form in candidates if _replays(torch, form, trace)]
    # The per-op kernels take torch's sqrt; a probe may miss a rarely wrong one.
    if not fused and not sqrt_ok:
        return Form(not_replayable=SQRT_NOT_CORRECTLY_ROUNDED)
    if len(matched) == 1:
        return matched[0]
    # None, or several that the probe cannot tell apart: never a guess.
    return Form(not_replayable=NO_MATCHING_FORM)


# The probe's parameters: one tensor with a long vector body and a tail, and for the fused
# kernel 64 small ones whose tails differ for every vector width it may have (121 elements:
# 1, 9, 25 and 57 left over for widths 8, 16, 32 and 64), since its scalar tail rounds the
# second moment differently and each tensor has one. bf16 state hides most fp32 rounding
# differences (a fused and an unfused lerp differ in about 1e-4 of bf16 results), so its long
# tensor is 64 times longer, that the forms are told apart; a probe that cannot tell two forms
# apart declares neither.
_PROBE_N = 4096 + 45
_PROBE_N_BF16 = 64 * 4096 + 45
_PROBE_SMALL = (64, 121)
_PROBE_STEPS = ((1e-3, 0.1, -3), (7e-4, 0.05, -1), (3e-3, 0.1, 0), (1e-4, 0.02, -2))


def _run_owner(torch, cls, betas, eps, has_wd, foreach, fused, decoupled, dtype):
    """[(per tensor (pre-state, grad, post-state), hyper)] of a few steps of the owner's
    optimizer."""
    gen = torch.Generator().manual_seed(0x5EED)
    sizes = [_PROBE_N_BF16 if dtype == torch.bfloat16 else _PROBE_N]
    if fused:
        sizes += [_PROBE_SMALL[1]] * _PROBE_SMALL[0]
    params = [torch.nn.Parameter((torch.randn(k, generator=gen) * 0.5).to(dtype)) for k in sizes]
    kw = dict(lr=1e-3, betas=betas, eps=eps, weight_decay=0.1 if has_wd else 0.0)
    if foreach is not None:
        kw["foreach"] = foreach
    if fused is not None:
        kw["fused"] = fused
    if decoupled and not issubclass(cls, torch.optim.AdamW):  # Adam behaving as AdamW
        kw["decoupled_weight_decay"] = True
    try:
        opt = cls(params, **kw)
    except (TypeError, ValueError, RuntimeError):
        return None
    trace = []
    for lr, wd, scale in _PROBE_STEPS:
        tensors = []
        for p in params:
            state = opt.state.get(p, {})
            zeros = torch.zeros_like(p.detach())
            pre = (p.detach().clone(), state.get("exp_avg", zeros).clone(),
                   state.get("exp_avg_sq", zeros).clone())
            p.grad = (torch.randn(p.numel(), generator=gen) * (10.0 ** scale)).to(dtype)
            tensors.append([pre, p.grad.clone()])
        opt.param_groups[0]["lr"] = lr
        if has_wd:
            opt.param_groups[0]["weight_decay"] = wd
        with torch.no_grad():
            opt.step()
        for p, t in zip(params, tensors):
            state = opt.state[p]
            t.append((p.detach().clone(), state["exp_avg"].clone(), state["exp_avg_sq"].clone()))
        step = opt.state[params[0]]["step"]
        step = int(step.item()) if hasattr(step, "item") else int(step)
        trace.append((tensors, (step, lr, betas[0], betas[1], eps, wd if has_wd else 0.0)))
    return trace


def _replays(torch, form, trace):
    from . import _reft
    for tensors, (step, lr, beta1, beta2, eps, wd) in trace:
        record = ("", step, lr, beta1, beta2, eps, wd, 1.0, 1.0, False, form.lerp, form.fma,
                  form.fused_width, form.l2, 0)
        for pre, grad, post in tensors:
            p, m, v = (t.clone() for t in pre)
            bf16 = p.dtype == torch.bfloat16
            code = 2 if bf16 else 0  # aor::StateDtype / GradDtype
            _reft.replay_optimizer_step(p.data_ptr(), m.data_ptr(), v.data_ptr(), code,
                                        grad.data_ptr(), code, p.numel(), record)
            bits = torch.int16 if bf16 else torch.int32
            for ours, theirs in zip((p, m, v), post):
                if not torch.equal(ours.view(bits), theirs.view(bits)):
                    return False
    return True


def _sqrt_correctly_rounded(torch):
    """Whether torch's CPU sqrt of float32 tensors is IEEE's (ATen calls MKL VML, whose result
    depends on the CPU; 2^16 values in [1, 4) stand for every exponent, sqrt(4x) = 2 sqrt(x)).
    s is sqrt(x) correctly rounded iff x lies strictly between the squares of the midpoints
    to s's neighbours, all exact in double (25-bit midpoints, 50-bit squares)."""
    gen = torch.Generator().manual_seed(0x50A7)
    x = 1.0 + 3.0 * torch.rand(1 << 16, generator=gen)
    s = x.sqrt()
    up = torch.nextafter(s, torch.full_like(s, float("inf"))).double()
    down = torch.nextafter(s, torch.zeros_like(s)).double()
    s64, x64 = s.double(), x.double()
    lo, hi = (s64 + down) / 2, (s64 + up) / 2
    return bool(((lo * lo < x64) & (x64 < hi * hi)).all())


class StateWatch:
    """The trainer's side of reftd's AOR state: when Client.fence() asks for it (the first 8
    fences, then every 16th: one round trip, answered at once by reftd), and one AorWarning per
    new state that has AOR off for some shard."""

    def __init__(self):
        self._fences = 0
        self._warned = set()

    def due(self):
        self._fences += 1
        return self._fences <= 8 or self._fences % 16 == 0

    def saw(self, state, stacklevel):
        if "off:" not in state or state in self._warned:
            return
        self._warned.add(state)
        import warnings
        warnings.warn("reft: reftd does not replay this rank's ring neighbour's optimizer shard "
                      "(AOR %s); it copies the shard every step instead" % (state,), AorWarning,
                      stacklevel=stacklevel)
