"""The reft main job on an embedded local cluster (README command 1).

Three reftd on loopback, one per "node", and a data-parallel training job of three ranks (one
per node, torch DDP over gloo; the C++ sample trainer when torch is missing) that snapshots
every step with ARC(1) protection. Then:

1. A trainer is SIGKILLed. Like torchelastic, the orchestrator restarts every rank; each
   restores the newest committed step and proves it bit for bit (state digests).
2. reftd of node0 is SIGKILLed (its trainers die with it) and restarted: it adopts its
   shared-memory segments after checking them; the job restores again.
3. node1 is lost: its reftd is SIGKILLed and its memory wiped. A fresh reftd with a new identity
   takes over rank 1; REFT-load rebuilds rank 1's state from the other nodes (rank 0 holds
   its ARC copy and its unique state's ring copy) and regenerates its slot on the new node, so
   the job is protected again; every rank restores bit for bit.
4. node2 is lost for good and no spare comes (torch trainer only). The job's coordinator waits
   a few seconds for one, then decides how the job goes on with two nodes (Odyssey's score
   over restarting on a spare, rerouting, reconfiguring and restarting) and publishes the
   decision in etcd; `reftctl plan show` prints it. Before the ranks restart, each survivor
   pulls the shards of the state that no slot of its own holds. The launcher places the ranks of the new layout with reft.elastic, each restores with
   reshape=True — bit for bit, the same digests — and training finishes with two ranks.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "localcluster"))
from reft_cluster import LocalCluster, find_build_dir, free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = 3
PROTECTION = "arc1"
JOB = "demo"
SPARE_WAIT_S = 3
CONFIG = f"""
[peer]
probe_interval_ms = 200
probe_timeout_ms = 150
suspicion_timeout_ms = 1500

[planner]
spare_wait_ms = {SPARE_WAIT_S * 1000}
"""


def have_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
        return dist.is_available() and dist.is_gloo_available()
    except ImportError:
        return False


class Rank:
    """One trainer process: the torch DDP sample (train.py) or the C++ sample trainer. Both print
    the same events and verify restored bytes against what they saved."""

    all = []  # every rank started, for the post-mortem of a failed demo

    def __init__(self, cluster, node, dp, record_dir, steps, master_port, dp_size=RANKS,
                 reshape=False):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(cluster.build_dir, "client", "python")
        if have_torch():
            cmd = [sys.executable, os.path.join(HERE, "train.py"), "--socket", node.socket,
                   "--job", JOB, "--dp", str(dp), "--dp-size", str(dp_size),
                   "--master-port", str(master_port), "--protection", PROTECTION,
                   "--steps", str(steps), "--record-dir", record_dir, "--step-sleep", "0.02"]
            if reshape:
                cmd.append("--reshape")
        else:
            cmd = [os.path.join(cluster.build_dir, "tools", "demo", "reft_sample_trainer"),
                   "--socket", node.socket, "--job", JOB, "--dp", str(dp),
                   "--dp-size", str(RANKS), "--protection", PROTECTION, "--steps", str(steps),
                   "--size", "3000001", "--sleep-us", "20000"]
        self.dp = dp
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        Rank.all.append(self)

    def wait_for(self, word, min_step=-1, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()
                raise RuntimeError(f"rank {self.dp} exited ({self.proc.wait()}) before "
                                   f"'{word}':\n{err}")
            parts = line.split()
            if parts[0] in ("restore-error", "connect-error"):
                raise RuntimeError(f"rank {self.dp} failed: {line.strip()}")
            if parts[0] == "restored" and len(parts) > 2 and parts[2] == "MISMATCH":
                raise RuntimeError(f"rank {self.dp}: restored step {parts[1]} does not match "
                                   "what was saved")
            if parts[0] == word and int(parts[1]) >= min_step:
                return parts
        raise TimeoutError(f"rank {self.dp} did not report '{word}' within {timeout}s")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def say(msg):
    print(f"[demo] {msg}", flush=True)


def start_job(cluster, nodes, record, steps, reshape=False):
    """Starts every rank (rank d on nodes[d]) and waits until each restored or started fresh."""
    port = free_port()
    ranks = [Rank(cluster, node, d, record, steps, port, dp_size=len(nodes), reshape=reshape)
             for d, node in enumerate(nodes)]
    restored = [r.wait_for("restored") for r in ranks]
    steps_restored = {int(ev[1]) for ev in restored}
    if len(steps_restored) != 1:
        raise RuntimeError(f"ranks restored different steps: {restored}")
    return ranks, steps_restored.pop()


def stop_job(ranks):
    for r in ranks:
        r.kill()



def wait_for_decision(node, timeout=120):
    """The job's published decision once final and its transfer plan ran (reft.plan through
    node's socket)."""
    import reft
    deadline = time.time() + timeout
    while True:
        doc = reft.plan(node.socket, JOB)
        pub = doc["publication"]
        final = pub is not None and pub["current"] and pub["state"] in ("decided", "confirmed")
        moved = "transfer" not in doc["decision"] or (
            pub["transfer"] is not None and pub["transfer"]["state"] in ("done", "failed"))
        if final and moved:
            return doc
        if time.time() > deadline:
            raise TimeoutError(f"no final decision for job '{JOB}' after {timeout}s: {pub}")
        time.sleep(0.2)


def lose_a_node_for_good(cluster, nodes, ranks, record, steps, restored):
    """Act 4: node2 is lost and no spare comes; the planner decides, the job goes on smaller."""
    sys.path.insert(0, os.path.join(cluster.build_dir, "client", "python"))
    import reft.elastic
    committed = int(ranks[0].wait_for("committed", min_step=restored + 15)[1])
    lost = nodes[2]
    lost.kill(signal.SIGKILL)
    lost.wipe_memory()
    stop_job(ranks)
    say(f"{lost.node_id} lost for good after step {committed} was committed; no spare node "
        f"comes: the job's coordinator waits {SPARE_WAIT_S} s for one, then decides")
    doc = wait_for_decision(nodes[0])
    print(nodes[0].ctl("plan", "show", "--job", JOB).stdout, end="")
    world = reft.elastic.world_size(doc)
    places = [reft.elastic.placement_from_plan(doc, r, world) for r in range(world)]
    say(f"decision of {doc['publication']['planner']}: {doc['decision']['policy']}; the job goes "
        f"on with {world} ranks: " + ", ".join(f"dp rank {p.dp_rank} on {p.node}" for p in places))
    transfer = doc["publication"]["transfer"]
    if transfer is not None:
        say("before the ranks restart, each node of the new layout pulled the shards of the "
            "job's state that no slot of its own holds: " +
            ", ".join(f"{h['node']} {h.get('bytes_staged', 0)} bytes" for h in transfer["hosts"]) +
            f" ({transfer['state']})")
    by_id = {n.node_id: n for n in nodes if n is not lost}
    ranks, again = start_job(cluster, [by_id[p.node] for p in sorted(places, key=lambda p: p.dp_rank)],
                             record, steps, reshape=True)
    say(f"every rank of the smaller job restored step {again} bit for bit (reshape=True: "
        f"the state was saved by {RANKS} ranks)")
    assert again >= committed
    return ranks, lost, again


def a_node_comes_back(cluster, nodes, lost, ranks, record, steps, restored):
    """Act 5: the lost node comes back (memory empty); the planner grows the job onto it."""
    import reft.elastic
    committed = int(ranks[0].wait_for("committed", min_step=restored + 10)[1])
    lost.start()
    say(f"{lost.node_id} is back after step {committed} was committed (its memory empty): the "
        "job runs below the size it had, so its coordinator decides whether to grow onto it")
    deadline = time.time() + 120
    while True:
        doc = wait_for_decision(nodes[0])
        if doc["decision"]["policy"] == "grow":
            break
        if time.time() > deadline:
            raise TimeoutError(f"no growth onto {lost.node_id}: {doc['decision'].get('reason')}")
        time.sleep(0.2)
    stop_job(ranks)  # a launcher restarts every rank at the larger size (torchrun does, at once)
    world = reft.elastic.world_size(doc)
    places = [reft.elastic.placement_from_plan(doc, r, world) for r in range(world)]
    say(f"decision: grow onto {', '.join(doc['decision']['joining_nodes'])} — "
        f"{doc['decision']['reason']}; the job goes on with {world} ranks: " +
        ", ".join(f"dp rank {p.dp_rank} on {p.node}" for p in places))
    by_id = {n.node_id: n for n in nodes}
    by_id[lost.node_id] = lost
    ranks, again = start_job(cluster, [by_id[p.node] for p in sorted(places, key=lambda p: p.dp_rank)],
                             record, steps, reshape=True)
    say(f"every rank restored step {again} bit for bit; {lost.node_id} read what it lacked from the "
        f"two ({doc['decision']['restore_fetch_bytes']} bytes by the plan)")
    assert again >= committed
    return ranks


def main():
    try:
        return run()
    except Exception:
        for r in Rank.all[-RANKS:]:  # the job that was running
            if r.proc.poll() is not None and r.proc.returncode not in (0, -9):
                say(f"rank {r.dp} exited with {r.proc.returncode}: " + r.proc.stderr.read()[-3000:])
        raise


def run():
    steps = 120
    say("trainer: " + ("torch DDP sample over gloo (tools/demo/train.py)" if have_torch()
                       else "C++ sample (torch not installed)"))
    # Mutual TLS between the daemons (and for reftctl), as in production: a CA of the
    # cluster's own and a certificate per node id (tools/reft-certs.sh, docs/security.md).
    with LocalCluster(nodes=RANKS, build_dir=find_build_dir(), config=CONFIG,
                      tls=True, keep=bool(os.environ.get("REFT_DEMO_KEEP"))) as cluster:
        nodes = list(cluster.nodes)
        record = os.path.join(cluster.root, "records")
        say(f"mutual TLS: CA and per-node certificates in {cluster.tls.dir}")
        for n in nodes:
            say(f"reftd {n.node_id} serving on {n.addr}, socket {n.socket}")
        say(f"job '{JOB}': {RANKS} data-parallel ranks, one per node, protection {PROTECTION}")

        ranks, _ = start_job(cluster, nodes, record, steps)
        say("every rank started fresh and snapshots every step")
        committed = int(ranks[0].wait_for("committed", min_step=15)[1])

        # 1. A trainer crash.
        ranks[1].kill()
        stop_job(ranks)  # the elastic agent restarts the whole group
        say(f"SIGKILLed rank 1's trainer after step {committed} was committed; restarting "
            "every rank")
        print(nodes[0].ctl("snapshots", "list", "--job", JOB).stdout, end="")
        ranks, restored = start_job(cluster, nodes, record, steps)
        say(f"every rank restored step {restored} from memory: restored state equals the "
            "saved state bit for bit")
        assert restored >= committed

        # 2. A daemon crash: segments outlive reftd, which adopts them.
        committed = int(ranks[0].wait_for("committed", min_step=restored + 15)[1])
        nodes[0].kill(signal.SIGKILL)
        stop_job(ranks)
        say(f"SIGKILLed reftd on node0 (its trainer died with it) after step {committed} was "
            "committed")
        nodes[0].start()
        say("restarted reftd on node0: it adopted its segments after checking headers and "
            "checksums")
        print(nodes[0].ctl("snapshots", "verify", "--job", JOB).stdout, end="")
        ranks, restored = start_job(cluster, nodes, record, steps)
        say(f"every rank restored step {restored} bit for bit")
        assert restored >= committed

        # 3. A node is lost: its daemon and its memory are gone.
        committed = int(ranks[0].wait_for("committed", min_step=restored + 15)[1])
        nodes[1].kill(signal.SIGKILL)
        nodes[1].wipe_memory()
        stop_job(ranks)
        say(f"node1 lost after step {committed} was committed: reftd SIGKILLed, its shared "
            "memory wiped")
        spare = cluster.add_node("spare1")
        say(f"replacement reftd {spare.node_id} on {spare.addr} takes over rank 1")
        nodes[0].wait_member_state("node1", "dead")
        print(nodes[0].ctl("nodes", "list").stdout, end="")
        check = nodes[0].ctl("restore-check", "--job", JOB, check=False)
        print(check.stdout, end="")
        nodes[1] = spare
        ranks, restored = start_job(cluster, nodes, record, steps)
        say(f"every rank restored step {restored} bit for bit; rank 1's state was rebuilt from "
            "node0 and node2")
        assert restored >= committed
        print(spare.ctl("snapshots", "list", "--job", JOB).stdout, end="")
        say("the replacement regenerated rank 1's slot (shard, ARC copy, ring copy): the job "
            "is protected again")

        if have_torch():
            ranks, lost, restored = lose_a_node_for_good(cluster, nodes, ranks, record, steps, restored)
            ranks = a_node_comes_back(cluster, nodes, lost, ranks, record, steps, restored)
        else:
            say("acts 4 and 5 (the planner in the loop) need the torch trainer; skipped")
        for r in ranks:
            r.wait_for("done")
        say(f"training finished at step {steps - 1}")
        print(nodes[0].ctl("status").stdout, end="")
    say("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
