"""The mistakes of a first hour with reft, through the Python client against a real reftd: each
is refused when the client connects, with a message that names what was tried and the fix —
a wrong socket path, a reftd that is not running, a uid reftd does not admit, a job name in
use (another user's job, or the same job under another layout), a protection the layout cannot
hold, and a rank connected twice. One reftd (no etcd) serves every case. The other-uid cases
run under setpriv (root needed; under CI=true they fail rather than skip)."""
import os
import socket as pysocket

import pytest

import reft
from other_uid import NOBODY, open_to, package_copy, require_other_uid, run_as
from reft_cluster import LocalCluster

STRANGER = NOBODY - 1  # a uid reftd does not admit (allowed_uids names only NOBODY)

# Another uid's client: connects to `job` and reports how it went.
CONNECT = r"""
import json, sys
import reft
try:
    reft.Client(socket=sys.argv[1], job=sys.argv[2], timeout=20.0, connect_timeout=0).close()
    print(json.dumps({"ok": True}))
except reft.Error as e:
    print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}))
"""


@pytest.fixture(scope="module")
def node():
    with LocalCluster(nodes=1, etcd=0,
                      config=f"[local]\nallowed_uids = [{NOBODY}]\n") as cluster:
        open_to(cluster)  # other uids reach the socket; SO_PEERCRED and the owners decide
        yield cluster.nodes[0]


@pytest.fixture(scope="module")
def package():
    require_other_uid()
    return package_copy()


def connect(sock, job, **kw):
    return reft.Client(socket=sock, job=job, timeout=20.0, connect_timeout=0, **kw)


def connect_as(uid, package, sock, job):
    return run_as(uid, CONNECT, [sock, job], package)


def test_a_wrong_socket_path_names_the_path_and_how_to_point_at_reftd(node, tmp_path):
    wrong = str(tmp_path / "reftd.sock")
    with pytest.raises(reft.UnavailableError) as e:
        connect(wrong, "first-hour")
    msg = str(e.value)
    assert f"'{wrong}' (given as socket=): no such socket" in msg, msg
    assert "socket=<path> or REFT_SOCKET=<path>" in msg and "systemctl" in msg, msg


def test_a_reftd_that_is_not_running_says_start_it(node, tmp_path, monkeypatch):
    # What a stopped or crashed reftd leaves: its socket file, nobody listening on it.
    left = str(tmp_path / "left.sock")
    s = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_SEQPACKET)
    s.bind(left)
    s.close()
    monkeypatch.setenv("REFT_SOCKET", left)
    with pytest.raises(reft.UnavailableError) as e:
        connect(None, "first-hour")
    msg = str(e.value)
    assert f"'{left}' (from REFT_SOCKET): connection refused" in msg, msg
    assert "no reftd listens on it" in msg and "systemctl start reftd" in msg, msg


def test_a_uid_reftd_does_not_admit_is_told_about_allowed_uids(node, package):
    r = connect_as(STRANGER, package, node.socket, "first-hour-stranger")
    assert r["error"] == "PermissionDeniedError", r
    assert f"uid {STRANGER} gid {STRANGER} is not allowed to use this reftd socket" in \
        r["message"], r
    assert "local.allowed_uids" in r["message"], r


def test_another_users_job_name_names_the_job_and_the_release(node, package):
    job = "first-hour-taken"
    connect(node.socket, job).close()  # root's job from now on
    r = connect_as(NOBODY, package, node.socket, job)
    assert r["error"] == "PermissionDeniedError", r
    assert f"job '{job}' belongs to another user" in r["message"], r
    assert "use another job name" in r["message"], r
    assert f"reftctl jobs release --job {job}" in r["message"], r
    # The fix named works: once released, the name is free for the next trainer.
    node.ctl("jobs", "release", "--job", job)
    assert connect_as(NOBODY, package, node.socket, job) == {"ok": True}


def test_the_same_job_under_another_layout_names_both_layouts_and_the_fix(node):
    job = "first-hour-layout"
    with connect(node.socket, job, dp=0, layout=reft.Layout(dp=2)):
        with pytest.raises(reft.InvalidArgumentError) as e:
            connect(node.socket, job, dp=1, layout=reft.Layout(dp=4))
    msg = str(e.value)
    assert f"job '{job}' is running with layout dp=2" in msg, msg
    assert "connected with dp=4" in msg, msg
    assert "declare the layout the job runs with, use another job name" in msg, msg


def test_a_protection_the_layout_cannot_hold_is_refused_at_connect(node):
    with pytest.raises(reft.InvalidArgumentError) as e:
        connect(node.socket, "first-hour-arc", layout=reft.Layout(dp=1), protection="arc1")
    msg = str(e.value)
    assert "protection 'arc1' does not fit a layout with dp=1: arc1 needs dp >= 2" in msg, msg
    assert "use protection='none' or a layout with dp >= 2" in msg, msg
    # The protection suggested connects.
    connect(node.socket, "first-hour-arc", layout=reft.Layout(dp=1), protection="none").close()


def test_a_rank_connected_twice_is_one_trainer_per_rank(node):
    job = "first-hour-twice"
    with connect(node.socket, job):
        with pytest.raises(reft.AlreadyExistsError) as e:
            connect(node.socket, job)
    msg = str(e.value)
    assert f"rank {job}/pp0-tp0-dp0 is already joined on this node (pid {os.getpid()})" in msg, msg
    assert "one trainer per rank: stop that process first" in msg, msg
