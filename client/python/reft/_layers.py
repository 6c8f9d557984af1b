"""The model layer of every tensor reft.torch registers, read from the module tree.

The planner moves a job's state layer by layer after a node is lost (docs/planner.md "The
online path"), so every registered tensor should name its layer, numbered 0..L-1 over the whole
job with each pipeline stage holding consecutive layers. reft.torch infers them (unless the
trainer passes layer_of=) by this rule:

1. Layer stacks: every nn.ModuleList or nn.Sequential with at least two children, all of one
   class, that holds a tensor and is not inside another stack (repeated blocks: GPT's `h`,
   `layers`, `blocks`, `decoder.layers`). A module with none falls back to its top-level
   children as the one stack (of any classes) — after stepping into its only child while it
   holds no tensor of its own and has exactly one child (a wrapper).
2. Walk the tensors in module order (named_modules() order; per module its parameters, then its
   buffers), keeping only the registered ones (parameters, persistent buffers). A tensor under
   child N of a stack belongs to that child's layer; consecutive tensors outside any stack form
   one layer together (the embeddings before the blocks, the final norm with the head after).
3. Layers are numbered 0, 1, ... in the order of their first tensor, counting only those that
   hold a registered tensor. Under pipeline parallelism (layout pp > 1) each stage numbers its
   own layers from the sum of the counts of the stages before it, which the ranks exchange over
   torch.distributed when the Checkpointer is created.

A GPT (wte, wpe, h.0..h.N-1, ln_f, lm_head): wte and wpe are layer 0, h.i is layer 1+i, ln_f
with lm_head is layer N+1. nn.Sequential(Linear, GELU, LayerNorm, Linear): 0, 1, 2 (GELU holds
nothing). A bare nn.Linear: layer 0.
"""

import torch

_CONTAINERS = (torch.nn.ModuleList, torch.nn.Sequential)


def _inside(name, prefixes):
    return any(p == "" or name == p or name.startswith(p + ".") for p in prefixes)


def _has_own_tensors(module):
    return any(True for _ in module.parameters(recurse=False)) or any(
        True for _ in module.buffers(recurse=False))


def _holds_tensors(module):
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def stacks(model):
    """Names of the layer stacks of `model` (module names; "" is the model itself)."""
    out = []
    for name, m in model.named_modules():
        if _inside(name, out) or not isinstance(m, _CONTAINERS):
            continue
        kids = list(m.children())
        if len(kids) >= 2 and len({type(k) for k in kids}) == 1 and _holds_tensors(m):
            out.append(name)
    if out:
        return out
    name, m = "", model
    while not _has_own_tensors(m) and len(list(m.children())) == 1:
        child, m = next(m.named_children())
        name = child if not name else name + "." + child
    return [name]


def _in_module_order(model):
    """Every tensor name (as named_parameters() / named_buffers() give it), in module order."""
    for prefix, m in model.named_modules():
        for own in (m.named_parameters(recurse=False), m.named_buffers(recurse=False)):
            for leaf, _ in own:
                yield prefix + "." + leaf if prefix else leaf


def infer(model, names):
    """{name: layer (0..)} for the tensor `names` of `model` (the rule above, first layer 0)."""
    wanted = set(names)
    tops = stacks(model)
    units, out, previous = {}, {}, None
    for name in _in_module_order(model):
        if name not in wanted or name in out:
            continue
        unit = None
        for top in tops:
            if top == "" or name.startswith(top + "."):
                rest = name[len(top) + 1:] if top else name
                if "." in rest:  # a tensor of the stack's own (not of a child) is outside
                    unit = (top, rest.split(".", 1)[0])
                break
        if unit is None:  # outside every stack: joins the run it continues
            unit = previous if previous is not None and previous[0] is None else (
                None, len(units))
        previous = unit
        out[name] = units.setdefault(unit, len(units))
    missing = wanted - set(out)
    if missing:  # not reachable through named_modules (cannot happen for a module's tensors)
        raise ValueError("tensors %s are not in the module tree" % sorted(missing))
    return out


def count(layers):
    """How many layers a stage numbered: one more than its highest, 0 when it has none."""
    return 1 + max(layers.values()) if layers else 0


def stage_offset(reports, pp, pp_size):
    """The first layer of stage `pp` from every rank's (stage, layer count): the counts of the
    stages before it. The ranks of one stage must agree."""
    counts = {}
    for stage, n in reports:
        if counts.setdefault(stage, n) != n:
            from . import InvalidArgumentError
            raise InvalidArgumentError(
                "the ranks of pipeline stage pp%d infer different numbers of layers (%d and %d): "
                "their modules differ; pass layer_of= to reft.torch.Checkpointer" % (
                    stage, counts[stage], n))
    lacking = [s for s in range(pp) if s not in counts]
    if lacking:
        from . import InvalidArgumentError
        raise InvalidArgumentError(
            "no rank of pipeline stage(s) %s took part in the layer count: every rank of the "
            "job creates its Checkpointer in the same torch.distributed world" % (
                ", ".join("pp%d" % s for s in lacking)))
    return sum(counts[s] for s in range(pp))


def offset(client, n):
    """The first global layer of this rank's stage, which numbered `n` layers of its own: 0 for
    a job without pipeline stages, else agreed over the default torch.distributed group."""
    pp_size = client.layout.pp
    if pp_size <= 1:
        return 0
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        from . import InvalidArgumentError
        raise InvalidArgumentError(
            "pipeline stage pp%d of %d numbers its layers after those of the stages before it, "
            "which reft.torch asks over torch.distributed: call init_process_group before "
            "creating the Checkpointer, or pass layer_of= (a function of a parameter name to its "
            "layer in the whole model)" % (client.coordinates.pp, pp_size))
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (client.coordinates.pp, n))
    return stage_offset(everyone, client.coordinates.pp, pp_size)
