"""reft.plan(socket, job): the planner's view of a running job and its decision, for launchers
(docs/planner.md "The online path"). It asks the reftd behind `socket` (the trainers' local
socket) with a plan query of the local channel, which needs neither a hello nor operator
rights: reftd answers the job's owner only (docs/security.md "Jobs belong to their owner").
The answer is the document `reftctl plan show --job J -o json` prints (which operators keep
for every job)."""

import json as _json
import os as _os


def plan(socket, job, reftctl=None, timeout=120):
    """The job model and decision of `job` as a dict (schema: docs/reftctl/schemas/
    plan-show.schema.json): ranks and their nodes, per-layer bytes, the measured step time, the
    profile used and, when nodes of the job are lost, the scored policies, the chosen one, the
    new layout with every rank's node and the transfer plan, and `publication`: the decision the
    job's coordinator published (state, version, the transfer plan's progress), or None.

    `socket`: None = $REFT_SOCKET, else the default socket. `timeout`: seconds to wait for the
    answer. `reftctl`: accepted and ignored (reft.plan no longer runs reftctl; kept so that
    callers written for it keep working). Raises reft.InvalidArgumentError (bad job name or job
    model), reft.NotFoundError (the job has no committed step, or no job of that name),
    reft.PermissionDeniedError (another user's job; the message names nothing of it),
    reft.UnavailableError (reftd not reachable), reft.TimeoutError (no answer in `timeout`),
    reft.Error for any other failure, with reftd's message."""
    from . import Error, _reft

    del reftctl  # see the docstring: kept for compatibility only
    if socket is None:
        socket = _os.environ.get("REFT_SOCKET", "")
    text = _reft.query_plan(str(socket), str(job), max(1, int(timeout * 1000)))
    try:
        doc = _json.loads(text)
    except ValueError as e:
        raise Error(f"reftd's plan of job '{job}' is not JSON: {e}") from None
    doc.pop("schema", None)
    return doc
