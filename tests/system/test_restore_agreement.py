"""A restore is one job-wide decision, also right after replacement nodes start.

What operators and launchers do: kill -9 the lost nodes, wipe their memory, start replacement
reftd with the same node ids, and restart every rank the moment `reftctl status` answers —
no wait for the cluster to settle. Every rank must then restore the same step, bit for bit
(the sample trainer checks every byte against the pattern of the step it restored), or every
rank must fail alike; no rank may start fresh while another resumes.

REFT_AGREEMENT_RUNS (default 3) sets how many times each scenario repeats; the `slow` ctest
runs 50.
"""
import os
import signal
import threading

import pytest

from reft_cluster import LocalCluster
from trainer import SampleTrainer

M = 4            # one rank per node, dp = 4: one sharding group over the four nodes
STEPS = 3        # steps 0..2 committed before the failure
SIZE = 400_001   # bytes per buffer (odd: unaligned shard and parity tails)
BUFFERS = 3      # two replicated buffers and one unique buffer per rank
RUNS = int(os.environ.get("REFT_AGREEMENT_RUNS", "3"))

CONFIG = """
[etcd]
lease_ttl_s = {ttl}

[restore]
piece_size = "64K"
piece_timeout_ms = 3000
timeout_ms = 60000

[store]
chunk_size = "16K"
"""


def ranks(cluster, nodes, job, protection, restore_only, steps=STEPS):
    out = []
    for d, node in enumerate(nodes):
        extra = ["--dp", str(d), "--dp-size", str(M), "--protection", protection]
        if restore_only:
            extra.append("--restore-only")
        out.append(SampleTrainer(cluster, node, job, steps=steps, size=SIZE, buffers=BUFFERS,
                                 extra=extra))
    return out


def train(cluster, nodes, job, protection):
    for t in ranks(cluster, nodes, job, protection, restore_only=False):
        assert t.finish(timeout=120) == 0, t.lines[-5:]
        assert f"committed {STEPS - 1}" in t.lines, t.lines[-5:]


def outcome(trainer, timeout=120):
    """('restored', step, 'ok'|...) or ('restore-error', code, message)."""
    while True:
        ev = trainer.next_event(timeout=timeout)
        if ev is None:
            raise RuntimeError(f"trainer exited ({trainer.proc.wait()}): {trainer.lines[-5:]} "
                               f"{trainer.proc.stderr.read()}")
        if ev[0] == "restored":
            return ("restored", int(ev[1]), ev[2])
        if ev[0] == "restore-error":
            return ("restore-error", int(ev[1]), " ".join(ev[2:]))


def replace(nodes, lost):
    """kill -9 and wipe, then the replacement reftd (same node id) is started; returns as soon
    as `reftctl status` answers on it, like an operator script or a launcher would."""
    for i in lost:
        nodes[i].kill()
        nodes[i].wipe_memory()
    for i in lost:
        nodes[i].start(wait=True)


def restore_report(trainer):
    """(source, agreement seconds, reason) from the trainer's LastRestore() line."""
    for line in trainer.lines:
        if line.startswith("restore-report "):
            _, source, seconds, reason = line.split(" ", 3)
            return source, float(seconds), reason
    raise AssertionError(f"no restore report: {trainer.lines[-5:]}")


def restore_at_once(cluster, nodes, job, protection, reports=None):
    """Every rank restores at once; the outcomes in rank order (and, into `reports`, the
    restore report of each rank that reached a decision)."""
    trainers = ranks(cluster, nodes, job, protection, restore_only=True)
    results = [outcome(t) for t in trainers]
    for t in trainers:
        t.finish(timeout=60)
        if reports is not None:
            reports.append(restore_report(t))
    return results


# Two lost nodes are not ring neighbours: a rank's unique buffers (RNG, data position) have one
# copy, in its ring predecessor's slot, under every protection.
@pytest.mark.parametrize("protection,lost", [
    ("arc1", [1]),
    ("arc2", [1, 3]),
    ("aec", [1]),
    ("rs2", [1, 3]),
])
def test_ranks_restarted_at_once_after_replacement_restore_the_same_step(protection, lost):
    with LocalCluster(nodes=M, config=CONFIG.format(ttl=5)) as cluster:
        nodes = list(cluster.nodes)
        for run in range(RUNS):
            job = f"agree-{protection}-{run}"
            train(cluster, nodes, job, protection)
            replace(nodes, lost)
            results = restore_at_once(cluster, nodes, job, protection)
            assert results == [("restored", STEPS - 1, "ok")] * M, (run, results, [
                n.log()[-3000:] for n in nodes])


def test_a_peer_paused_during_the_restore_is_waited_for():
    # node1 is replaced (its shard must be rebuilt from node2's ARC copy), and node2 hangs for
    # 1.5 s (SIGSTOP) just as the ranks restore: alive (its lease holds) but silent. The
    # restore must wait for it instead of declaring its bytes lost.
    with LocalCluster(nodes=M, config=CONFIG.format(ttl=5)) as cluster:
        nodes = list(cluster.nodes)
        train(cluster, nodes, "paused", "arc1")
        replace(nodes, [1])
        nodes[2].pause()
        timer = threading.Timer(1.5, nodes[2].resume)
        timer.start()
        reports = []
        try:
            results = restore_at_once(cluster, nodes, "paused", "arc1", reports)
        finally:
            timer.cancel()
            nodes[2].resume()
        assert results == [("restored", STEPS - 1, "ok")] * M, results
        log = "".join(n.log() for n in nodes)
        assert "waiting for node(s) node2" in log
        # The trainers are told how long they waited and why (LastRestore()).
        assert all(source == "memory" for source, _, _ in reports), reports
        waited = [(sec, why) for _, sec, why in reports if "node2" in why]
        assert waited and all(0.2 < sec < 30 for sec, _ in waited), reports


def test_beyond_the_tolerance_every_rank_fails_alike_then_falls_back_together():
    with LocalCluster(nodes=M, config=CONFIG.format(ttl=1)) as cluster:
        nodes = list(cluster.nodes)
        # Nothing persisted: two of four lost under AEC (tolerance 1) is a job-wide error.
        train(cluster, nodes, "beyond", "aec")
        replace(nodes, [1, 2])
        results = restore_at_once(cluster, nodes, "beyond", "aec")
        assert {r[0] for r in results} == {"restore-error"}, results
        assert len({r[1] for r in results}) == 1, results      # the same status code
        assert all("lost" in r[2].lower() for r in results), results

        # With a persisted step, every rank falls back to it: the same step everywhere.
        train(cluster, nodes, "tier", "aec")
        nodes[0].ctl("persist", "--job", "tier")  # step 2 persisted
        # Memory moves on past the persisted step (the ranks resume at 3 and commit up to 5).
        for t in ranks(cluster, nodes, "tier", "aec", restore_only=False, steps=STEPS + 3):
            assert t.finish(timeout=120) == 0, t.lines[-5:]
            assert f"committed {STEPS + 2}" in t.lines, t.lines[-5:]
        replace(nodes, [1, 2])
        reports = []
        results = restore_at_once(cluster, nodes, "tier", "aec", reports)
        assert results == [("restored", STEPS - 1, "ok")] * M, results
        assert [source for source, _, _ in reports] == ["tier"] * M, reports


def test_a_rank_on_a_node_without_slots_never_starts_fresh_beside_resuming_ranks():
    # node3 is replaced; its reftd holds nothing of the job and has never heard of it. Its rank
    # must restore the committed step like the others (never "nothing to restore").
    with LocalCluster(nodes=M, config=CONFIG.format(ttl=5)) as cluster:
        nodes = list(cluster.nodes)
        train(cluster, nodes, "fresh", "arc1")
        replace(nodes, [3])
        # The replaced node's rank restores first and alone: no other rank has decided yet.
        t = SampleTrainer(cluster, nodes[3], "fresh", steps=STEPS, size=SIZE, buffers=BUFFERS,
                          extra=["--dp", "3", "--dp-size", str(M), "--protection", "arc1",
                                 "--restore-only"])
        assert outcome(t) == ("restored", STEPS - 1, "ok"), t.lines
        t.finish()
        results = restore_at_once(cluster, nodes, "fresh", "arc1")
        assert results == [("restored", STEPS - 1, "ok")] * M, results


def test_a_trainer_that_did_not_restart_with_the_job_is_fenced():
    """Rank 0 restarts and restores while rank 1 trains on: the restore is a new restore epoch,
    so rank 1's next snapshot is refused (cancelled, telling it to restart) and nothing it
    writes counts. Once its launcher restarts it too, both resume from the same step."""
    with LocalCluster(nodes=2, config=CONFIG.format(ttl=5)) as cluster:
        nodes = cluster.nodes
        go = os.path.join(cluster.root, "go")

        def rank(d, wait=False):
            extra = ["--dp", str(d), "--dp-size", "2", "--protection", "arc1"]
            if wait:
                extra += ["--wait-file", go]
            return SampleTrainer(cluster, nodes[d], "fence", steps=100_000, size=SIZE,
                                 buffers=BUFFERS, sleep_us=20_000, extra=extra)

        first = [rank(0), rank(1)]
        try:
            for t in first:
                while int(t.wait_for("committed")[1]) < 2:
                    pass
            first[0].kill()
            again = rank(0, wait=True)
            kind, step, check = outcome(again)
            assert (kind, check) == ("restored", "ok"), again.lines[-5:]
            assert step >= 2
            # Rank 1 never restarted: its next snapshot is refused and it exits -- at once, also
            # when that snapshot already waits for rank 0's unique buffers (a peer copy that
            # never comes): the restore ends the wait, not the copy's 30 s timeout.
            ev = first[1].wait_for("snapshot-error", timeout=10)
            assert ev[2] == "13", ev  # cancelled
            assert "restart the trainer" in " ".join(ev), ev
            assert first[1].proc.wait(timeout=30) == 3
            late = rank(1, wait=True)
            assert outcome(late) == ("restored", step, "ok"), late.lines[-5:]
            open(go, "w").close()
            for t in (again, late):
                while int(t.wait_for("committed")[1]) < step + 2:
                    pass
        finally:
            for t in first + [locals().get("again"), locals().get("late")]:
                if t is not None:
                    t.kill()
