"""Persist and commit ordered, with real reftd on etcd (docs/persist.md "Persist and commit"):
`reftctl persist` of the newest step while trainers commit a step every few milliseconds. The
job's coordinator holds the next commit until every node pinned the step being persisted, so
each persist writes the step it chose, on every node, at the first try — where, without the
hold, the next commit freed the step on some node before the request reached it (the persist
then chased the commits, a warning in its report)."""
import threading

from test_persist import committed, ctl_json, make_cluster, scrape, wait_until
from test_reftctl_json import validate
from trainer import SampleTrainer

JOB = "order"
PERSISTS = 20


def drain(trainer):
    """Reads the trainer's output as it comes (a full pipe would stop it mid-step)."""
    def run():
        for line in trainer.proc.stdout:
            trainer.lines.append(line.strip())
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def persist_newest_repeatedly(config=None):
    """PERSISTS persists of the newest step of a fast job on 3 nodes; ([(exit code, report,
    stderr)], metrics of every node)."""
    cluster, ports = make_cluster(3, config=config, metrics=True)
    with cluster:
        nodes = cluster.nodes
        trainers = [SampleTrainer(cluster, n, JOB, steps=10_000_000, size=20_001, buffers=2,
                                  extra=["--dp", str(i), "--dp-size", str(len(nodes)),
                                         "--protection", "none"])
                    for i, n in enumerate(nodes)]
        for t in trainers:
            drain(t)
        reports = []
        try:
            assert wait_until(lambda: committed(nodes[0], JOB) >= 10, timeout=60)
            for i in range(PERSISTS):
                asked = nodes[i % len(nodes)]
                before = committed(asked, JOB)
                code, doc, err = ctl_json(asked, "persist", "--job", JOB)
                assert doc is not None, err
                validate(doc, "persist.schema.json")
                assert doc["step"] >= before, doc
                reports.append((code, doc, err))
            # The training went on meanwhile.
            last = max(doc["step"] for _, doc, _ in reports)
            assert wait_until(lambda: committed(nodes[0], JOB) > last, timeout=30)
        finally:
            for t in trainers:
                t.kill()
        metrics = [scrape(p) for p in ports]
    return reports, metrics


def test_persist_of_the_newest_step_wins_against_fast_commits_every_time():
    reports, metrics = persist_newest_repeatedly()
    for code, doc, err in reports:
        # At the first try: no chase after a freed step, nothing failed on any node.
        assert code == 0, err
        assert doc["ok"] and doc["complete"], doc
        assert doc["warnings"] == [], doc["warnings"]
        assert all(n["ok"] for n in doc["nodes"]), doc["nodes"]
    # Commits waited for the pins (counted by the job's coordinator); no hold ran out.
    assert sum(m.get("reft_commit_held_seconds_total", 0) for m in metrics) > 0
    assert sum(m["reft_commit_hold_timeouts_total"] for m in metrics) == 0


def test_a_hold_of_zero_ms_leaves_persist_and_commit_unordered():
    """`persist.commit_hold_ms = 0`: no commit waits (the persist races the commit, as on gossip)."""
    reports, metrics = persist_newest_repeatedly(config="[persist]\ncommit_hold_ms = 0\n")
    assert len(reports) == PERSISTS
    assert sum(m.get("reft_commit_held_seconds_total", 0) for m in metrics) == 0
    lost = sum(1 for code, doc, _ in reports if code != 0 or doc["warnings"])
    print(f"without a hold, {lost} of {PERSISTS} persists lost the race to the next commit")
