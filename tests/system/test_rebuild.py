"""`reftctl rebuild` and `reftctl restore-check` with real reftd processes: a replacement node
takes over a dead node's ranks (their slots regenerated from the survivors' redundancy), the
second rebuild does nothing, and the JSON validates against the documented schemas."""
import json
import time

from reft_cluster import LocalCluster
from trainer import SampleTrainer
from test_reftctl_json import validate


def wait_until(pred, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def ctl_json(node, *args):
    r = node.ctl(*args, check=False, json_output=True)
    if isinstance(r, dict):
        return 0, r, ""
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else None), r.stderr


def test_a_replacement_node_rebuilds_the_dead_nodes_ranks():
    with LocalCluster(nodes=3) as cluster:
        a, b, c = cluster.nodes
        trainers = [SampleTrainer(cluster, n, "rb", steps=4, size=70_001, buffers=2,
                                  extra=["--dp", str(i), "--dp-size", "2", "--protection", "arc1"])
                    for i, n in enumerate((a, b))]
        for t in trainers:
            assert t.finish(timeout=120) == 0, t.lines

        # Nothing lost: restore-check says memory, rebuild has nothing to do.
        code, check, err = ctl_json(c, "restore-check", "--job", "rb")
        assert code == 0, err
        validate(check, "restore-check.schema.json")
        assert check["recoverable"] and check["step"] == 3
        code, rep, err = ctl_json(c, "rebuild", "--job", "rb")
        assert code == 0, err
        validate(rep, "rebuild.schema.json")
        assert rep["ok"] and rep["ranks"] == []

        b.kill()
        b.wipe_memory()
        assert wait_until(lambda: any(n["node_id"] == "node1" and n["state"] == "dead"
                                      for n in c.ctl("nodes", "list", json_output=True)["nodes"]))
        code, check, err = ctl_json(c, "restore-check", "--job", "rb")
        assert code == 0, err
        validate(check, "restore-check.schema.json")
        assert check["recoverable"] and check["restore_source"] == "memory"
        group = check["groups"][0]
        assert group["shards"][1]["state"] == "rebuilt"
        assert "rep/arc+1" in group["shards"][1]["detail"]
        assert group["ranks"][1]["nodes"] == [] and group["ranks"][1]["rebuildable"]

        # node2 takes over dp1: its slot is regenerated there from node0's ARC and peer copies.
        code, rep, err = ctl_json(c, "rebuild", "--job", "rb")
        assert code == 0, err
        validate(rep, "rebuild.schema.json")
        assert rep["ok"] and rep["step"] == 3
        assert [r["rank"]["dp"] for r in rep["ranks"]] == [1]
        assert rep["ranks"][0]["ok"] and rep["bytes_peer"] > 0
        slots = c.ctl("snapshots", "list", "--job", "rb", json_output=True)["snapshots"]
        assert [(s["rank"]["dp"], s["step"], s["state"]) for s in slots] == [(1, 3, "committed")]
        assert c.ctl("snapshots", "verify", "--job", "rb", json_output=True)["ok"]

        code, check, _ = ctl_json(a, "restore-check", "--job", "rb")
        assert code == 0
        assert check["groups"][0]["ranks"][1]["nodes"] == ["node2"]
        assert all(s["state"] == "slot" for s in check["groups"][0]["shards"])
        # Idempotent: a second rebuild finds every rank held.
        code, rep, _ = ctl_json(c, "rebuild", "--job", "rb")
        assert code == 0 and rep["ranks"] == []
        assert "nothing to rebuild" in c.ctl("rebuild", "--job", "rb").stdout

        # The trainer of dp1 restarts on node2 and finds its state there.
        t = SampleTrainer(cluster, c, "rb", steps=0, size=70_001, buffers=2,
                          extra=["--dp", "1", "--dp-size", "2", "--protection", "arc1",
                                 "--restore-only"])
        assert t.finish(timeout=120) == 0 and "restored 3 ok" in t.lines, t.lines

        # An unknown job: nothing committed anywhere (exit 1, one clear line).
        code, _, err = ctl_json(c, "rebuild", "--job", "nope")
        assert code == 1 and err.startswith("reftctl: rebuild:"), err


def test_unreachable_daemon_is_exit_3():
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        node.stop()
        for args in (["persist", "--job", "x"], ["restore-check", "--job", "x"],
                     ["rebuild", "--job", "x"]):
            r = node.ctl(*args, check=False)
            assert r.returncode == 3, (args, r.stderr)
        r = node.ctl("persist", check=False)  # --job missing: usage
        assert r.returncode == 2
