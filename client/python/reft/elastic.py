"""reft.elastic: where this rank runs once the planner has decided how a job goes on after a
node loss (or grows back onto nodes that came), for a trainer started by torchrun (`--nnodes=MIN:MAX`; docs/planner.md "The online
path"). The job's coordinator publishes the decision in etcd; every rank reads it from its own
reftd (reft.plan: on the local socket, as the job's owner; no operator rights needed) and, from RANK and WORLD_SIZE, gets its coordinates in the new layout, builds its process
groups from them and restores with `restore(reshape=True)`.

Rank order: tensor-parallel fastest, then data-parallel, then pipeline stages (Megatron's):
`rank = (pp_rank * dp + dp_rank) * tp + tp_rank`."""

import os as _os
import time as _time
from dataclasses import dataclass as _dataclass
from typing import List as _List
from typing import Optional as _Optional
from typing import Tuple as _Tuple

# Publication states a rank can act on; the others are waited for.
_FINAL = ("decided", "confirmed")


@_dataclass(frozen=True)
class Placement:
    """This rank's place in the layout the job goes on with."""
    job: str
    rank: int
    world_size: int
    dp: int
    tp: int
    pp: int
    dp_rank: int
    tp_rank: int
    pp_rank: int
    layers: _Tuple[int, int]                  # this stage's layers, first and last (inclusive)
    stage_layers: _List[_Tuple[int, int]]     # every stage's, in stage order
    node: _Optional[str]                      # the node the decision places this position on
    policy: str                               # "none": no node lost, the running layout
    step: int                                 # the committed step the decision was made on
    version: _Optional[int]                   # the publication's version (None: not published)
    transfer: _Optional[str] = None           # the transfer plan: "done", "failed", "running"; None: none


def _stages_of_running_layout(doc):
    stages = {}
    for layer in doc["model"]["layers"]:
        first, last = stages.get(layer["stage"], (layer["layer"], layer["layer"]))
        stages[layer["stage"]] = (min(first, layer["layer"]), max(last, layer["layer"]))
    return [stages[s] for s in sorted(stages)]


def _layout_of(doc, running=False):
    """(dp, tp, pp, stage_layers, nodes, policy) of the layout the job goes on with (`running`:
    the one it runs in, whatever the decision); nodes[(pp, dp)] is the node of that position."""
    from . import Error

    decision = doc["decision"]
    policy = decision.get("policy")
    tp = doc["layout"]["tp"]
    if running or not decision.get("needed"):
        nodes = {(r["pp"], r["dp"]): r["node"] for r in doc["ranks"] if r["tp"] == 0}
        return doc["layout"]["dp"], tp, doc["layout"]["pp"], _stages_of_running_layout(doc), nodes, "none"
    if policy in (None, "exit"):
        raise Error(f"job '{doc['job']}' cannot go on in memory: {decision.get('reason')}")
    pipelines, nodes = [], {}
    for pipe in decision["new_layout"]["pipelines"]:
        stages = pipe["stages"]
        live = [st for st in stages if not st.get("rerouted")]
        if not live:
            continue  # a data-parallel replica whose work its peers take over
        if len(live) != len(stages):
            raise Error(f"job '{doc['job']}': the decision ({policy}) reroutes a stage of a pipeline, "
                        "which no dp x tp x pp layout expresses")
        for s, st in enumerate(stages):
            nodes[(s, len(pipelines))] = st["node"]
        pipelines.append([(st["layers"]["first"], st["layers"]["last"]) for st in stages])
    if not pipelines or any(p != pipelines[0] for p in pipelines):
        raise Error(f"job '{doc['job']}': the decision ({policy}) has pipelines of different shapes "
                    f"({pipelines}); reft restores uniform dp x tp x pp layouts only")
    return len(pipelines), tp, len(pipelines[0]), pipelines[0], nodes, policy


def _ranks(doc):
    dp, tp, pp, _, _, _ = _layout_of(doc)
    return dp * tp * pp


def _running_ranks(doc):
    layout = doc["layout"]
    return layout["dp"] * layout["tp"] * layout["pp"]


def world_size(doc):
    """How many ranks the layout a `reft.plan` document gives the job has (for a launcher that
    starts them); raises like placement_from_plan."""
    return _ranks(doc)


def placement_from_plan(doc, rank, world_size, running=False):
    """This rank's Placement from a `reft.plan` document (pure: no daemon); `running`: in the
    layout the job runs in, not the one the decision grows it to."""
    from . import Error, InvalidArgumentError

    dp, tp, pp, stage_layers, nodes, policy = _layout_of(doc, running)
    if world_size != dp * tp * pp:
        raise Error(f"job '{doc['job']}' goes on with dp={dp}, tp={tp}, pp={pp} ({dp * tp * pp} ranks), "
                    f"not the {world_size} this process group was started with")
    if not 0 <= rank < world_size:
        raise InvalidArgumentError(f"rank {rank} is not in 0..{world_size - 1}")
    tp_rank = rank % tp
    dp_rank = (rank // tp) % dp
    pp_rank = rank // (tp * dp)
    pub = doc.get("publication")
    return Placement(job=doc["job"], rank=rank, world_size=world_size, dp=dp, tp=tp, pp=pp,
                     dp_rank=dp_rank, tp_rank=tp_rank, pp_rank=pp_rank,
                     layers=stage_layers[pp_rank], stage_layers=list(stage_layers),
                     node=nodes.get((pp_rank, dp_rank)), policy=policy,
                     step=doc["step"], version=pub["version"] if pub and pub.get("current") else None,
                     transfer=None if running else _transfer_state(doc))


def placement_on_node(doc, node, local_rank, world_size, running=False):
    """The Placement of the `local_rank`-th position (in rank order) that the layout of a
    `reft.plan` document puts on `node` (pure: no daemon)."""
    from . import Error

    dp, tp, pp, _, nodes, _ = _layout_of(doc, running)
    mine = [r for r in range(dp * tp * pp) if nodes.get((r // (tp * dp), (r // tp) % dp)) == node]
    if local_rank >= len(mine):
        raise Error(f"job '{doc['job']}': the layout it goes on with puts {len(mine)} rank(s) on node "
                    f"'{node}', none for local rank {local_rank}")
    return placement_from_plan(doc, mine[local_rank], world_size, running)


def _transfer_state(doc):
    """The state of the decision's transfer plan ("pending" before it runs), None without one."""
    if "transfer" not in doc["decision"]:
        return None
    pub = doc.get("publication")
    progress = pub.get("transfer") if pub and pub.get("current") else None
    return progress["state"] if progress else "pending"


def coordinates(socket, job, rank=None, world_size=None, reftctl=None, wait_s=60.0, poll_s=0.5,
                by_node=False, local_rank=None):
    """This rank's Placement in the layout `job` goes on with, from the decision its
    coordinator published (reft.plan). `rank`, `world_size` default to $RANK and $WORLD_SIZE
    (torchrun sets them).

    With no node of the job lost the running layout is returned — unless `world_size` differs
    from it: a launcher restarts the ranks as soon as it notices a node gone, usually before the
    control plane declares the node dead, so the decision is waited for. After a loss it waits up to
    `wait_s` for the published decision to be final ("decided", or "confirmed" by an operator
    in `planner.mode = "confirm"`) — it may still wait for a spare or for the operator — and
    raises reft.UnavailableError when it is not by then. A final reconfiguration is returned
    once its transfer plan ran (the layers are on the nodes that will host them), or at
    `wait_s` while it still runs. When nodes came to a job that runs below its peak size the
    coordinator may decide to grow onto them ("grow"): a launcher that restarted the ranks onto
    them (a larger `world_size`, as torchrun does when a node joins) gets the grown layout the
    same way; one that restarted them at the running size gets the running layout. Raises
    reft.Error when the job cannot
    go on in memory (exit), when the decision's layout is not a uniform dp x tp x pp one, or
    when it has another number of ranks than `world_size`.

    `by_node`: the position comes from the node instead of the rank — the `local_rank`-th
    (default $LOCAL_RANK) of the positions the decision put on the node whose reftd answers —
    so that a rank runs where the decision placed it (and finds the layers a transfer plan
    moved there) even when the launcher numbers ranks in another order, as torchrun does
    (rendezvous order). Placement.rank is then the rank in the new layout, which may differ
    from $RANK: build the process groups from every rank's Placement (e.g. all_gather).

    The plan is read on the local socket (reft.plan): no operator rights are needed, and reftd
    answers for the caller's own jobs only (reft.PermissionDeniedError for another user's).
    `reftctl` is accepted and ignored (kept for callers written when this ran reftctl)."""
    from . import UnavailableError
    from ._plan import plan

    rank = int(_os.environ["RANK"]) if rank is None and not by_node else rank
    world_size = int(_os.environ["WORLD_SIZE"]) if world_size is None else world_size
    if by_node and local_rank is None:
        local_rank = int(_os.environ.get("LOCAL_RANK", "0"))

    def place(doc, running=False):
        if by_node:
            return placement_on_node(doc, doc["node"], local_rank, world_size, running)
        return placement_from_plan(doc, rank, world_size, running)

    deadline = _time.monotonic() + wait_s
    while True:
        doc = plan(socket, job)
        pub = doc.get("publication")
        needed = doc["decision"].get("needed")
        final = needed and pub is not None and pub.get("current") and pub["state"] in _FINAL
        # A growth onto nodes that came is taken by a launcher that restarted the ranks onto them;
        # restarted at the running size (a rank crashed, say), the job goes on as it runs.
        if needed and doc["decision"].get("policy") == "grow" and _running_ranks(doc) == world_size:
            return place(doc, running=True)
        # No loss known yet while the launcher already restarted the ranks at another size: a
        # node it lost has not been declared dead yet (the lease runs out first); wait for it.
        if not needed and (_ranks(doc) == world_size
                           or _time.monotonic() >= deadline):
            return place(doc)
        # A reconfiguration moves layers to the nodes that will host them before the ranks
        # restore (then each reads its layers on its own node); past `wait_s` the rank goes on
        # anyway: a restore fetches what was not moved from the nodes that hold it.
        if final and (_transfer_state(doc) not in ("pending", "running") or _time.monotonic() >= deadline):
            return place(doc)
        if _time.monotonic() >= deadline:
            state = pub["state"] if pub and pub.get("current") else "not published"
            raise UnavailableError(f"job '{job}': the planner's decision is {state} after {wait_s:g} s"
                                   + (" (reftctl plan confirm approves it)" if state == "awaiting_confirmation"
                                      else ""))
        _time.sleep(poll_s)


def report_failure(socket, job, reason, peer_rank=None, timeout=10.0):
    """Tells reftd that a node of `job` may have failed, so that a dead one is found without
    waiting for its lease to lapse (docs/coordination.md "Suspicions"). Call it where the
    failure shows first: a trainer whose collective raised (`peer_rank`: the rank it was
    talking to, when known), a launcher whose worker group failed (no `peer_rank`: every other
    node of the job is looked into).

    A report is a suspicion, never a death: reftd knocks at the suspected node's reftd port and
    ends its lease at once only if nothing listens there any more (its process is gone). A node
    that is alive, stopped or unreachable is left to its lease, so a wrong report costs one
    connection attempt and never a recovery.

    `socket`: None = $REFT_SOCKET, else the default socket; the caller must own the job (no
    operator rights needed). Returns the ids of the nodes being looked into ([] when the rank
    runs on this node). Raises reft.BusyError when the job reports faster than reftd takes
    reports (3 at once, then 1 a second), reft.InvalidArgumentError for a rank outside the
    job's layout, reft.NotFoundError when no node is known for the rank, and the errors of
    reft.plan otherwise."""
    from . import _reft

    if socket is None:
        socket = _os.environ.get("REFT_SOCKET", "")
    rank = None if peer_rank is None else int(peer_rank)
    return list(_reft.report_failure(str(socket), str(job), str(reason), rank,
                                     max(1, int(timeout * 1000))))
