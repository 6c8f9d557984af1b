"""Jobs belong to their owner (docs/security.md): the uid that opens a job's first session owns
it on the node; another uid can neither open a session of it (so neither snapshot nor restore
it) nor drop or persist it; every refusal names the job, the owner and the caller and counts in
reft_job_access_denied_total; the ownership survives a reftd restart and `reftctl status` shows
it. The second client runs as `nobody` under setpriv, so the test needs root."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import reft
from reft_cluster import LocalCluster, free_port, scrape_metrics

NOBODY = 65534
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

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root (to run the second client as another uid) and setpriv")


def as_nobody():
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


def other_uid_client(node, job, action):
    r = subprocess.run(as_nobody() + [sys.executable, "-c", CLIENT, node.socket, job, action],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", "")))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


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


def assert_refused(result, job, owner_uid, caller_uid):
    assert not result["ok"], result
    assert result["error"] == "PermissionDeniedError", result
    msg = result["message"]
    assert f"job '{job}'" in msg and f"uid {owner_uid}" in msg and f"uid {caller_uid}" in msg, msg


def test_other_uid_cannot_use_a_job_and_ownership_survives_a_restart():
    metrics_port = free_port()
    config = f"[local]\nallowed_uids = [{NOBODY}]\n"
    with LocalCluster(nodes=1, etcd=0, config=config,
                      extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}"]) as cluster:
        node = cluster.nodes[0]
        for d in (cluster.root, node.root):
            os.chmod(d, 0o755)  # nobody reaches the socket; SO_PEERCRED decides the rest
        snapshot_as_root(node, JOB, 0x11)
        assert denied_total(metrics_port) == 0

        # Allowed on the socket (its own job works)...
        assert other_uid_client(node, "owned-by-nobody", "snapshot") == {"ok": True}
        # ...but not on root's job: neither a session to write nor one to restore.
        assert_refused(other_uid_client(node, JOB, "snapshot"), JOB, 0, NOBODY)
        assert_refused(other_uid_client(node, JOB, "restore"), JOB, 0, NOBODY)
        # Owners are uids, root included: root cannot take nobody's job over either.
        with pytest.raises(reft.PermissionDeniedError, match="owned-by-nobody"):
            snapshot_as_root(node, "owned-by-nobody", 0x22)
        assert denied_total(metrics_port) == 3

        # Drop and persist are Admin calls: a loosened admin socket still refuses them, and
        # names the owner.
        os.chmod(node.socket + ".admin", 0o666)
        for args in (["snapshots", "drop", "--job", JOB, "--step", "1", "--force"],
                     ["persist", "--job", JOB]):
            r = admin_as_nobody(node, *args)
            assert r.returncode == 1, r.stderr
            assert f"job '{JOB}' belongs to uid 0" in r.stderr and f"uid {NOBODY}" in r.stderr
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
        assert_refused(other_uid_client(node, JOB, "restore"), JOB, 0, NOBODY)
        assert denied_total(metrics_port) == 1  # a new process counts from 0
        assert restore_as_root(node, JOB) == (1, b"\x11" * 4096)
        # An operator may still drop the job's snapshot.
        dropped = node.ctl("snapshots", "drop", "--job", JOB, "--step", "1", "--force",
                           json_output=True)
        assert dropped["slots_freed"] >= 1


def test_owner_group_shares_the_job():
    config = f"[local]\nallowed_uids = [{NOBODY}]\n"
    with LocalCluster(nodes=1, etcd=0, config=config) as cluster:
        node = cluster.nodes[0]
        for d in (cluster.root, node.root):
            os.chmod(d, 0o755)
        os.environ["REFT_OWNER_GROUP"] = "nogroup"
        try:
            snapshot_as_root(node, "shared", 0x33)
        finally:
            del os.environ["REFT_OWNER_GROUP"]
        owner = {j["job"]: j["owner"] for j in node.ctl("status", json_output=True)["jobs"]}
        assert owner["shared"] == {"uid": 0, "gid": NOBODY, "group": "nogroup"}
        # nobody's primary group is nogroup: a member of the owner group restores the job.
        assert other_uid_client(node, "shared", "restore") == {"ok": True, "restored": 1}
