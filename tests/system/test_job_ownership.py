"""Jobs belong to their owner (docs/security.md), on one node without etcd: the uid that opens a
job's first session owns it; another uid can neither open a session of it (so neither snapshot
nor restore it) nor drop or persist it; every refusal names the job and the caller, nothing else
of the job, and counts in reft_job_access_denied_total; the ownership survives a reftd restart
and `reftctl status` shows it; an owner group shares the job, and only its members may name it.
The other uid runs under setpriv (root needed; under CI=true the test fails rather than skip);
the cluster-wide half is test_job_ownership_cluster.py."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import reft
from other_uid import NOBODY, open_to, package_copy, require_other_uid, run_as
from reft_cluster import LocalCluster, free_port, scrape_metrics

JOB = "owned-by-root"

# The other uid's client: opens a session of `job` (a restore needs one) and reports how it went.
CLIENT = r"""
import json, sys
import reft
socket, job = sys.argv[1], sys.argv[2]
try:
    buf = bytearray(4096)
    c = reft.Client(socket=socket, job=job, timeout=20.0)
    c.register("w", buf)
    if sys.argv[3] == "snapshot":
        buf[:] = b"\x5a" * len(buf)
        c.snapshot(1)
        ok = c.wait_committed(1, timeout=20.0)
        print(json.dumps({"ok": bool(ok)}))
    else:
        print(json.dumps({"ok": True, "restored": c.restore()}))
    c.close()
except reft.Error as e:
    print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}))
"""

@pytest.fixture(scope="module")
def package():
    require_other_uid()
    return package_copy()


def as_nobody():
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


def other_uid_client(package, node, job, action, uid=NOBODY, **kw):
    return run_as(uid, CLIENT, [node.socket, job, action], package, **kw)


def denied_total(port):
    return scrape_metrics(port)["reft_job_access_denied_total"]


def admin_as_nobody(node, *args):
    return subprocess.run(as_nobody() + [node.cluster.reftctl, "--socket", node.socket] +
                          list(args), capture_output=True, text=True, timeout=60)


def snapshot_as_root(node, job, fill):
    buf = bytearray(4096)
    with reft.Client(socket=node.socket, job=job, timeout=20.0) as c:
        c.register("w", buf)
        buf[:] = bytes([fill]) * len(buf)
        c.snapshot(1)
        assert c.wait_committed(1, timeout=20.0)


def restore_as_root(node, job):
    buf = bytearray(4096)
    with reft.Client(socket=node.socket, job=job, timeout=20.0) as c:
        c.register("w", buf)
        step = c.restore()
    return step, bytes(buf)


def assert_refused(result, job, caller_uid):
    assert not result["ok"], result
    assert result["error"] == "PermissionDeniedError", result
    msg = result["message"]
    assert msg == (f"job '{job}' belongs to another user; uid {caller_uid} may not use it: use "
                   f"another job name, or have an operator release the job once its trainers "
                   f"are gone (reftctl jobs release --job {job})"), msg


def test_other_uid_cannot_use_a_job_and_ownership_survives_a_restart(package):
    metrics_port = free_port()
    config = f"[local]\nallowed_uids = [{NOBODY}]\n"
    with LocalCluster(nodes=1, etcd=0, config=config,
                      extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}"]) as cluster:
        node = cluster.nodes[0]
        open_to(cluster)  # nobody reaches the socket; SO_PEERCRED decides the rest
        snapshot_as_root(node, JOB, 0x11)
        assert denied_total(metrics_port) == 0

        # Allowed on the socket (its own job works)...
        assert other_uid_client(package, node, "owned-by-nobody", "snapshot") == {"ok": True}
        # ...but not on root's job: neither a session to write nor one to restore.
        assert_refused(other_uid_client(package, node, JOB, "snapshot"), JOB, NOBODY)
        assert_refused(other_uid_client(package, node, JOB, "restore"), JOB, NOBODY)
        # Owners are uids, root included: root cannot take nobody's job over either.
        with pytest.raises(reft.PermissionDeniedError, match="owned-by-nobody"):
            snapshot_as_root(node, "owned-by-nobody", 0x22)
        assert denied_total(metrics_port) == 3

        # Drop and persist are Admin calls: a loosened admin socket still refuses them.
        os.chmod(node.socket + ".admin", 0o666)
        for args in (["snapshots", "drop", "--job", JOB, "--step", "1", "--force"],
                     ["persist", "--job", JOB]):
            r = admin_as_nobody(node, *args)
            assert r.returncode == 1, r.stderr
            # Not an operator; the job's owner is not named to a stranger.
            assert "is for operators" in r.stderr and f"uid {NOBODY}" in r.stderr, r.stderr
            assert "belongs to" not in r.stderr, r.stderr
        assert denied_total(metrics_port) == 5
        # The owner's data is untouched.
        assert restore_as_root(node, JOB) == (1, b"\x11" * 4096)

        status = node.ctl("status", json_output=True)
        owners = {j["job"]: j["owner"] for j in status["jobs"]}
        assert owners[JOB] == {"uid": 0, "gid": None, "group": ""}
        assert owners["owned-by-nobody"]["uid"] == NOBODY
        table = node.ctl("status").stdout
        assert re.search(rf"^{JOB}\s.*\buid 0\s*$", table, re.M), table

        # A restarted reftd adopts the slots and enforces the same owners.
        node.stop()
        node.start()
        status = node.ctl("status", json_output=True)
        assert {j["job"]: j["owner"] for j in status["jobs"]} == owners
        assert_refused(other_uid_client(package, node, JOB, "restore"), JOB, NOBODY)
        assert denied_total(metrics_port) == 1  # a new process counts from 0
        assert restore_as_root(node, JOB) == (1, b"\x11" * 4096)
        # An operator may still drop the job's snapshot.
        dropped = node.ctl("snapshots", "drop", "--job", JOB, "--step", "1", "--force",
                           json_output=True)
        assert dropped["slots_freed"] >= 1


def test_owner_group_shares_the_job(package):
    config = f"[local]\nallowed_uids = [{NOBODY}, {NOBODY - 1}]\n"
    with LocalCluster(nodes=1, etcd=0, config=config) as cluster:
        node = cluster.nodes[0]
        open_to(cluster)
        # A claim may not share a job with a group its claimer is not in: root is no member of
        # nogroup.
        os.environ["REFT_OWNER_GROUP"] = "nogroup"
        try:
            with pytest.raises(reft.PermissionDeniedError, match="not a member of owner group"):
                snapshot_as_root(node, "shared", 0x33)
        finally:
            del os.environ["REFT_OWNER_GROUP"]
        # nobody (primary group nogroup) claims it for the group...
        group = {"REFT_OWNER_GROUP": "nogroup"}
        assert other_uid_client(package, node, "shared", "snapshot", env=group) == {"ok": True}
        owner = {j["job"]: j["owner"] for j in node.ctl("status", json_output=True)["jobs"]}
        assert owner["shared"] == {"uid": NOBODY, "gid": NOBODY, "group": "nogroup"}
        # ...another uid with nogroup as a supplementary group restores it; without, refused.
        member = other_uid_client(package, node, "shared", "restore", uid=NOBODY - 1,
                                  gid=NOBODY - 1, groups=[NOBODY])
        assert member == {"ok": True, "restored": 1}
        stranger = other_uid_client(package, node, "shared", "restore", uid=NOBODY - 1,
                                    gid=NOBODY - 1)
        assert_refused(stranger, "shared", NOBODY - 1)
