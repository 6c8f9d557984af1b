"""reft.plan(socket, job): the planner's view of a running job and its decision, for launchers
(docs/planner.md "The online path"). It asks the reftd behind `socket` (the trainers' local
socket; Admin is reached over its ".admin" sibling, like `reftctl --socket`) through reftctl,
so the answer is exactly `reftctl plan show --job J -o json`."""

import json as _json
import os as _os
import shutil as _shutil
import subprocess as _subprocess


def _find_reftctl(reftctl):
    for candidate in (reftctl, _os.environ.get("REFTCTL"), _shutil.which("reftctl")):
        if candidate:
            return candidate
    return None


def plan(socket, job, reftctl=None, timeout=120):
    """The job model and decision of `job` as a dict (schema: docs/reftctl/schemas/
    plan-show.schema.json): ranks and their nodes, per-layer bytes, the measured step time, the
    profile used and, when nodes of the job are lost, the scored policies, the chosen one, the
    new layout with every rank's node and the transfer plan, and `publication`: the decision the
    job's coordinator published (state, version, the transfer plan's progress), or None.

    `reftctl`: the reftctl executable (default: $REFTCTL, else reftctl on PATH). Raises
    reft.InvalidArgumentError (bad job name or job model), reft.NotFoundError (the job has
    no committed step), reft.UnavailableError (reftd not reachable), reft.Error for any other
    failure, with reftctl's message."""
    from . import Error, InvalidArgumentError, NotFoundError, UnavailableError

    exe = _find_reftctl(reftctl)
    if exe is None:
        raise UnavailableError("reft.plan needs reftctl: set REFTCTL or put reftctl on PATH")
    r = _subprocess.run([exe, "--socket", socket, "-o", "json", "plan", "show", "--job", job],
                        capture_output=True, text=True, timeout=timeout)
    message = r.stderr.strip().removeprefix("reftctl: ")
    if r.returncode == 2:
        raise InvalidArgumentError(message)
    if r.returncode == 3:
        raise UnavailableError(message)
    if r.returncode != 0:
        # A job with nothing committed has no model yet (a launcher starts it fresh).
        raise (NotFoundError if "has no committed step" in message else Error)(message)
    doc = _json.loads(r.stdout)
    doc.pop("schema", None)
    return doc
