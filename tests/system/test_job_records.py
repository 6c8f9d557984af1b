"""`reftctl jobs list|release` on a single node without etcd (docs/reftctl.md "jobs"): the node's
own records of its jobs — owner, state, nodes, trainers, committed step, last activity — an
operator's release, refused while a trainer is connected, snapshots are held or the persistent
tier holds a step unless --force, and the sweeper that forgets a gone job's owner after
jobs.forget_after_s. The JSON output validates against its schemas."""
import os
import time

import reft
from reft_cluster import LocalCluster
from test_reftctl_json import validate

FORGET_AFTER_S = 2


def jobs(node):
    doc = node.ctl("jobs", "list", json_output=True)
    validate(doc, "jobs-list.schema.json")
    return {j["job"]: j for j in doc["jobs"]}


def release(node, job, *extra):
    return node.ctl("jobs", "release", "--job", job, *extra, check=False)


def snapshot(client, buf, step):
    buf[:] = bytes([step % 251]) * len(buf)
    client.snapshot(step)
    assert client.wait_committed(step, timeout=20.0)


def test_jobs_list_and_release_on_a_single_node():
    config = f"[jobs]\nforget_after_s = {FORGET_AFTER_S}\n"
    with LocalCluster(nodes=1, etcd=0, config=config) as cluster:
        node = cluster.nodes[0]
        assert jobs(node) == {}

        # A running job: its owner (this test's uid), one trainer, the committed step.
        buf = bytearray(8192)
        client = reft.Client(socket=node.socket, job="run-a", timeout=20.0)
        try:
            client.register("w", buf)
            snapshot(client, buf, 1)
            listed = jobs(node)
            a = listed["run-a"]
            assert a["owner"]["uid"] == os.getuid(), a
            assert a["owner"]["gid"] is None and a["owner"]["claimed_on"] == "node0", a
            assert a["state"] == "running" and a["trainers"] == 1, a
            assert a["nodes"] == ["node0"] and a["committed_step"] == 1, a
            assert a["forget_in_ms"] is None, a
            now = node.ctl("jobs", "list", json_output=True)["now_ms"]
            assert 0 <= now - a["last_activity_ms"] < 60_000, a

            table = node.ctl("jobs", "list").stdout
            header, row = table.splitlines()[0], next(
                line for line in table.splitlines() if line.startswith("run-a"))
            for column in ("JOB", "OWNER", "STATE", "NODES", "TRAINERS", "COMMITTED",
                           "LAST ACTIVITY", "FORGET IN"):
                assert column in header, table
            assert f"uid {os.getuid()}" in row and "running" in row and "ago" in row, table

            # Not while its trainer is connected...
            r = release(node, "run-a")
            assert r.returncode == 1, (r.returncode, r.stderr)
            assert "1 trainer(s) connected (on node0)" in r.stderr and "--force" in r.stderr, \
                r.stderr
            assert jobs(node)["run-a"]["owner"] is not None
            # ...unless forced: the owner goes, the trainer goes on.
            out = node.ctl("jobs", "release", "--job", "run-a", "--force", json_output=True)
            validate(out, "jobs-release.schema.json")
            assert out == {"schema": 1, "job": "run-a", "released": True, "forced": True}
            a = jobs(node)["run-a"]
            assert a["owner"] is None and a["state"] == "running", a
            snapshot(client, buf, 2)
        finally:
            client.close()

        # An idle job (its snapshots stay on the node), then one only the tier holds.
        with reft.Client(socket=node.socket, job="run-b", timeout=20.0) as c:
            c.register("w", buf)
            snapshot(c, buf, 1)
        assert jobs(node)["run-b"]["state"] == "idle"
        r = release(node, "run-b")
        assert r.returncode == 1 and "reftctl snapshots drop" in r.stderr, r.stderr
        node.ctl("persist", "--job", "run-b")
        node.ctl("snapshots", "drop", "--job", "run-b", "--step", "1", "--force")
        b = jobs(node)["run-b"]
        assert b["state"] == "persisted" and b["persisted_step"] == 1 and b["nodes"] == [], b
        r = release(node, "run-b")
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "the persistent tier holds step 1 of job 'run-b'" in r.stderr, r.stderr
        assert "persisted" == jobs(node)["run-b"]["state"]  # kept past forget_after too
        assert release(node, "run-b", "--force").returncode == 0
        assert "run-b" not in jobs(node)

        # A job gone (its trainer left before snapshotting) is forgotten after forget_after_s,
        # and its name is free again; an unknown job is exit 1.
        with reft.Client(socket=node.socket, job="run-c", timeout=20.0) as c:
            c.register("w", buf)
        c_rec = jobs(node)["run-c"]
        assert c_rec["state"] == "gone", c_rec
        assert 0 <= c_rec["forget_in_ms"] <= FORGET_AFTER_S * 1000, c_rec
        assert "FORGET IN" in node.ctl("jobs", "list").stdout
        deadline = time.time() + FORGET_AFTER_S + 15
        while "run-c" in jobs(node):
            assert time.time() < deadline, jobs(node)
            time.sleep(0.2)
        assert "forgot 1 job(s)" in node.log() and "run-c" in node.log()
        r = release(node, "run-c")
        assert r.returncode == 1 and "no job 'run-c' has records" in r.stderr, r.stderr
        assert "run-b" not in jobs(node) and "run-a" in jobs(node)  # run-a: its slots

        # Usage errors are exit 2.
        assert node.ctl("jobs", "release", check=False).returncode == 2
