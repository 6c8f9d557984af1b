"""The persistent tier with real reftd processes (docs/data-paths.md "Persist", docs/failure-model.md): `reftctl persist`
for a whole job from one node, every K steps in the background, a missing directory reported
(exit 1, status, metrics) while snapshots keep committing, and the restore fallback decided
job-wide (`reftctl restore-check`, every trainer restores the persisted step)."""
import json
import os
import re
import shutil
import time
import urllib.request

from reft_cluster import LocalCluster, free_port
from trainer import SampleTrainer
from test_reftctl_json import validate


def wait_until(pred, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+(?:\{[^}]*\})?) ([0-9.eE+-]+)$", line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def make_cluster(nodes, config=None, metrics=False):
    """A LocalCluster (started by `with`); each node with its own metrics port when asked."""
    cluster = LocalCluster(nodes=nodes)
    ports = []
    for n in cluster.nodes:
        if config is not None:
            path = os.path.join(cluster.root, f"{n.node_id}.toml")
            with open(path, "w") as f:
                f.write(config)
            n.extra_args += ["--config", path]
        if metrics:
            port = free_port()
            ports.append(port)
            n.extra_args += ["--metrics-listen", f"127.0.0.1:{port}"]
    return cluster, ports


def run_job(cluster, job, steps, protection="none", nodes=None, sleep_us=0, size=60_001):
    """One trainer per node (dp = index), all to the end; returns their output lines."""
    nodes = nodes or cluster.nodes
    trainers = [SampleTrainer(cluster, n, job, steps=steps, size=size, buffers=2,
                              sleep_us=sleep_us,
                              extra=["--dp", str(i), "--dp-size", str(len(nodes)),
                                     "--protection", protection])
                for i, n in enumerate(nodes)]
    for t in trainers:
        assert t.finish(timeout=120) == 0, t.lines
    return [t.lines for t in trainers]


def ctl_json(node, *args):
    """reftctl -o json ARGS on `node`: (exit code, parsed stdout or None, stderr)."""
    r = node.ctl(*args, check=False, json_output=True)
    if isinstance(r, dict):
        return 0, r, ""
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), r.stderr


def committed(node, job):
    for j in node.ctl("status", json_output=True)["jobs"]:
        if j["job"] == job:
            return j["newest_committed_step"]
    return -1


def test_persist_a_whole_job_from_one_node_and_check_it():
    cluster, ports = make_cluster(2, metrics=True)
    with cluster:
        a, b = cluster.nodes
        run_job(cluster, "pj", steps=4)
        assert wait_until(lambda: committed(a, "pj") == 3 and committed(b, "pj") == 3)

        code, doc, err = ctl_json(b, "persist", "--job", "pj")
        assert code == 0, err
        validate(doc, "persist.schema.json")
        assert doc["ok"] and doc["complete"] and doc["step"] == 3
        assert doc["newest_complete_step"] == 3
        assert [n["node_id"] for n in doc["nodes"]] == ["node1", "node0"]
        for n in doc["nodes"]:
            assert n["ok"] and not n["skipped"] and len(n["ranks"]) == 1 and n["bytes_written"] > 0
        # Files of both ranks, written by their own nodes, in the shared directory.
        step_dir = os.path.join(cluster.persist_dir, "pj", "step-000000000003")
        assert sorted(f for f in os.listdir(step_dir) if f.endswith(".reft")) == \
            ["pp0-tp0-dp0.reft", "pp0-tp0-dp1.reft"]

        # Again: the step is complete, nothing is rewritten; an uncommitted step is refused.
        code, again, _ = ctl_json(a, "persist", "--job", "pj", "--step", "3")
        assert code == 0 and again["ok"] and all(n["skipped"] for n in again["nodes"])
        code, _, err = ctl_json(a, "persist", "--job", "pj", "--step", "99")
        assert code == 1 and "not committed" in err
        code, _, err = ctl_json(a, "persist", "--job", "nope")
        assert code == 1 and "no committed step" in err

        code, check, err = ctl_json(a, "restore-check", "--job", "pj")
        assert code == 0, err
        validate(check, "restore-check.schema.json")
        assert check["restore_source"] == "memory" and check["restore_step"] == 3
        assert check["persistent"]["newest_complete_step"] == 3
        assert check["persistent"]["step_complete"]

        status = a.ctl("status", json_output=True)
        validate(status, "status.schema.json")
        assert status["persist"]["enabled"] and status["persist"]["healthy"]
        assert {"job": "pj", "newest_complete_step": 3} in status["persist"]["jobs"]
        table = a.ctl("status").stdout
        assert "healthy" in table and "PERSISTED" in table
        assert a.ctl("persist", "--job", "pj").returncode == 0
        assert "restore:  step 3 from memory" in a.ctl("restore-check", "--job", "pj").stdout

        metrics = scrape(ports[1])
        assert metrics["reft_persist_bytes_total"] > 0
        assert metrics["reft_persist_duration_seconds_count"] == 1
        assert metrics['reft_persist_failures_total{reason="missing_dir"}'] == 0


def test_every_k_steps_in_the_background():
    cluster, _ = make_cluster(2, config="[persist]\nevery_steps = 3\nkeep = 0\n")
    with cluster:
        a, b = cluster.nodes
        # Slow steps, so the schedule sees the commits one by one.
        run_job(cluster, "every", steps=12, sleep_us=250_000)
        assert a.ctl("status", json_output=True)["persist"]["every_steps"] == 3

        def persisted():
            code, doc, _ = ctl_json(a, "restore-check", "--job", "every")
            p = doc["persistent"]
            return p["steps"] if p["newest_complete_step"] >= 0 else []

        assert wait_until(lambda: len(persisted()) >= 3)
        steps = persisted()
        # Nothing in the tier at first: the first commit the schedule sees is persisted at once.
        assert steps[0] <= 2, steps
        assert all(later - earlier >= 3 for earlier, later in zip(steps, steps[1:])), steps
        for s in steps:  # every step directory the schedule made is complete: same step on both
            d = os.path.join(cluster.persist_dir, "every", f"step-{s:012d}")
            assert sorted(f for f in os.listdir(d) if f.endswith(".reft")) == \
                ["pp0-tp0-dp0.reft", "pp0-tp0-dp1.reft"], (s, os.listdir(d))


def test_missing_persist_dir_is_reported_while_snapshots_keep_committing():
    cluster, ports = make_cluster(2, metrics=True)
    with cluster:
        a, b = cluster.nodes
        shutil.rmtree(cluster.persist_dir)  # e.g. the NFS mount went away
        run_job(cluster, "gone", steps=3)
        assert wait_until(lambda: committed(a, "gone") == 2)

        code, doc, err = ctl_json(a, "persist", "--job", "gone")
        assert code == 1, (doc, err)
        validate(doc, "persist.schema.json")
        assert not doc["ok"] and not doc["complete"]
        for n in doc["nodes"]:
            assert not n["ok"] and n["code"] == "NOT_FOUND", n
            assert "does not exist" in n["message"]
        table = a.ctl("persist", "--job", "gone", check=False)
        assert table.returncode == 1 and "NOT complete" in table.stdout

        status = a.ctl("status", json_output=True)
        validate(status, "status.schema.json")
        assert not status["persist"]["healthy"]
        assert "does not exist" in status["persist"]["last_error"]
        for port in ports:
            assert scrape(port)['reft_persist_failures_total{reason="missing_dir"}'] >= 1

        # Memory is untouched: the trainers restart, restore step 2 and commit on.
        lines = run_job(cluster, "gone", steps=3)
        assert all("restored 2 ok" in ls for ls in lines), lines
        assert wait_until(lambda: committed(a, "gone") == 5 and committed(b, "gone") == 5)

        # The mount is back: the next persist opens the tier again.
        os.makedirs(cluster.persist_dir)
        code, doc, err = ctl_json(b, "persist", "--job", "gone")
        assert code == 0, (doc, err)
        assert doc["ok"] and doc["step"] == 5
        assert wait_until(lambda: b.ctl("status", json_output=True)["persist"]["healthy"])


def test_restore_falls_back_to_the_persisted_step_on_every_rank():
    cluster, ports = make_cluster(3, metrics=True)
    with cluster:
        a, b, c = cluster.nodes
        # Protection "none": losing a node loses its shard, memory cannot rebuild the step.
        run_job(cluster, "fb", steps=3, nodes=[a, b])
        code, doc, err = ctl_json(a, "persist", "--job", "fb")
        assert code == 0 and doc["ok"] and doc["step"] == 2, (doc, err)
        run_job(cluster, "fb", steps=3, nodes=[a, b])  # restores 2, commits 3..5
        assert wait_until(lambda: committed(a, "fb") == 5)

        b.kill()
        b.wipe_memory()
        assert wait_until(lambda: any(n["node_id"] == "node1" and n["state"] == "dead"
                                      for n in a.ctl("nodes", "list", json_output=True)["nodes"]))
        code, check, err = ctl_json(c, "restore-check", "--job", "fb")
        assert code == 1, err  # the committed step 5 is not restorable
        validate(check, "restore-check.schema.json")
        assert check["step"] == 5 and not check["recoverable"]
        assert check["restore_source"] == "fallback" and check["restore_step"] == 2
        assert check["groups"][0]["shards"][1]["state"] == "lost"
        assert "FALLBACK" in c.ctl("restore-check", "--job", "fb", check=False).stdout

        # The restarted trainers (dp1 on the replacement node): both get step 2, none step 5.
        dp0 = SampleTrainer(cluster, a, "fb", steps=0, size=60_001, buffers=2,
                            extra=["--dp", "0", "--dp-size", "2", "--restore-only"])
        dp1 = SampleTrainer(cluster, c, "fb", steps=0, size=60_001, buffers=2,
                            extra=["--dp", "1", "--dp-size", "2", "--restore-only"])
        assert dp0.finish(timeout=120) == 0, dp0.lines
        assert dp1.finish(timeout=120) == 0, dp1.lines
        assert "restored 2 ok" in dp0.lines and "restored 2 ok" in dp1.lines
        assert "fell back" in a.log() or "memory cannot rebuild step 5" in a.log() + c.log()
        recovered = scrape(ports[0])['reft_recovered_bytes_total{source="persistent"}']
        recovered += scrape(ports[2])['reft_recovered_bytes_total{source="persistent"}']
        assert recovered > 0

        # Training goes on from step 3 on a and c, and commits again.
        lines = run_job(cluster, "fb", steps=3, nodes=[a, c])
        assert all("restored 2 ok" in ls for ls in lines), lines
        assert wait_until(lambda: committed(a, "fb") == 5 and committed(c, "fb") == 5)
        code, check, _ = ctl_json(a, "restore-check", "--job", "fb")
        assert code == 0 and check["restore_source"] == "memory" and check["generation"] == 1
        for node in (a, c):
            job = next(j for j in node.ctl("status", json_output=True)["jobs"] if j["job"] == "fb")
            assert job["generation"] == 1 and job["newest_committed_step"] == 5
