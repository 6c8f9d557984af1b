"""The faults the chaos soak injects. Each takes the Soak (cluster, job, placement of ranks on
nodes, random source), injects one fault, brings the cluster back to a state the job can run
on (the job itself is then restarted and verified by the soak), and returns what it did.
Raising FaultCheckFailed reports a broken expectation of the fault itself (e.g. a daemon that
died of a malformed frame, or a persist that claimed success on a full disk).
"""
from __future__ import annotations

import errno
import os

import hostile_client


class FaultCheckFailed(Exception):
    pass


def wait_seen(soak, node, state: str, timeout: float = 30.0) -> None:
    """Every other live node sees `node` in `state` (alive / dead)."""
    for other in soak.live_nodes():
        if other is not node:
            other.wait_member_state(node.node_id, state, timeout=timeout)


def settle_membership(soak, node) -> None:
    """With gossip, a restore on a node whose membership view is still partial can choose
    differently from its peers (docs/recovery.md, the "Limits" of one decision per job): wait
    until every peer sees `node` alive. With etcd the job-wide restore decision does not depend
    on anyone's view, so the trainers restart at once, as a launcher does once the node is up."""
    if soak.args.gossip:
        wait_seen(soak, node, "alive")


def trainer_kill(soak) -> dict:
    """kill -9 of one rank's trainer in the middle of training (the job restart follows)."""
    t = soak.rng.choice(soak.job.trainers)
    t.kill()
    return {"rank": t.rank}


def reftd_restart(soak) -> dict:
    """kill -9 of one reftd, then a restart on the same memory: it adopts its segments."""
    node = soak.rng.choice(soak.live_nodes())
    node.kill()
    node.start()
    settle_membership(soak, node)
    return {"node": node.node_id}


def _lose(soak, node) -> None:
    node.kill()
    node.wipe_memory()
    for other in soak.live_nodes():
        if other is not node:
            other.wait_member_state(node.node_id, "dead", timeout=30)
            break


def node_loss_spare(soak) -> dict:
    """A node lost with its memory; a spare machine (a new node id) takes over its rank."""
    node = soak.rng.choice(soak.live_nodes())
    _lose(soak, node)
    spare = soak.chaos.add_spare()
    soak.replace(node, spare)
    soak.chaos.retire(node)
    settle_membership(soak, spare)
    return {"lost": node.node_id, "spare": spare.node_id}


def node_loss_reboot(soak) -> dict:
    """A node lost with its memory and no spare: the same machine comes back empty under its
    own node id once its peers declared it dead."""
    node = soak.rng.choice(soak.live_nodes())
    _lose(soak, node)
    node.start()
    settle_membership(soak, node)
    return {"node": node.node_id}


def link_drop(soak) -> dict:
    """A node's link goes black for longer than the failure detector's timeout: its peers
    declare it dead; the link comes back and the node rejoins."""
    node = soak.rng.choice(soak.live_nodes())
    links = soak.chaos.links
    links.set_down(node.node_id)
    try:
        for other in soak.live_nodes():
            if other is not node:
                try:
                    other.wait_member_state(node.node_id, "dead", timeout=30)
                except TimeoutError as e:
                    # What the proxies carried when the wait gave up: a connection of the cut
                    # node attributed to another (or to none) is one the cut let through.
                    raise FaultCheckFailed(f"{e}; proxied connections while {node.node_id}'s "
                                           f"link was down: {links.connections()}") from e
                break
    finally:
        links.set_up(node.node_id)
    wait_seen(soak, node, "alive", timeout=60)
    return {"node": node.node_id}


def link_delay(soak) -> dict:
    """Every chunk to and from one node is delayed while training goes on: commits must
    continue."""
    node = soak.rng.choice(soak.live_nodes())
    delay = soak.rng.choice([0.02, 0.05, 0.1])
    before = soak.job.committed()
    links = soak.chaos.links
    links.set_delay(node.node_id, delay)
    try:
        if not soak.job.wait_committed(before + 2, timeout=60):
            raise FaultCheckFailed(f"no commit in 60 s with {delay * 1000:.0f} ms delay on the "
                                   f"link of {node.node_id}")
    finally:
        links.set_up(node.node_id)
    return {"node": node.node_id, "delay_ms": int(delay * 1000),
            "committed_during": soak.job.committed() - before}


def disk_full(soak) -> dict:
    """The persistent tier fills up: a persist fails with a clear error, the in-memory
    snapshots are unaffected (training commits on), and once space is back a persist works."""
    tier = soak.chaos.persist_tmpfs
    filler = os.path.join(tier, ".chaos-filler")
    node = soak.rng.choice(soak.live_nodes())
    try:
        with open(filler, "wb") as f:
            chunk = b"\0" * (1 << 20)
            try:
                while True:
                    f.write(chunk)
                    f.flush()
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
        r = node.ctl("persist", "--job", soak.job.job, check=False)
        out = (r.stdout + r.stderr).lower()
        if r.returncode == 0 or "space" not in out:
            raise FaultCheckFailed(f"persist on a full tier: exit {r.returncode}, "
                                   f"{(r.stdout + r.stderr).strip()[-300:]}")
        before = soak.job.committed()
        if not soak.job.wait_committed(before + 2, timeout=60):
            raise FaultCheckFailed("training stopped committing while the tier was full")
    finally:
        if os.path.exists(filler):
            os.unlink(filler)
    r = node.ctl("persist", "--job", soak.job.job, check=False)
    if r.returncode != 0:
        raise FaultCheckFailed(f"persist after space came back: exit {r.returncode}: "
                               f"{(r.stdout + r.stderr).strip()[-300:]}")
    return {"node": node.node_id}


def hostile_client_fault(soak) -> dict:
    """Malformed, oversized and truncated frames on a node's local socket and its gRPC port,
    with disconnects mid-frame: the daemon keeps serving (and the job keeps committing)."""
    node = soak.rng.choice(soak.live_nodes())
    local = hostile_client.attack_local_socket(node.socket, soak.rng)
    grpc_conns = hostile_client.attack_grpc_port(node.host, node.port, soak.rng)
    if node.proc.poll() is not None:
        raise FaultCheckFailed(f"reftd {node.node_id} exited ({node.proc.returncode}) after "
                               f"the hostile client")
    if node.ctl("status", check=False).returncode != 0:
        raise FaultCheckFailed(f"reftd {node.node_id} stopped answering after the hostile client")
    before = soak.job.committed()
    if not soak.job.wait_committed(before + 1, timeout=60):
        raise FaultCheckFailed("no commit after the hostile client")
    return {"node": node.node_id, "local_frames": local["frames"], "grpc_connections": grpc_conns}


# kind -> (function, weight). Structural faults (node loss) are rarer than the light ones.
FAULTS = {
    "trainer_kill": (trainer_kill, 3),
    "reftd_kill_restart": (reftd_restart, 3),
    "node_loss_spare": (node_loss_spare, 2),
    "node_loss_no_spare": (node_loss_reboot, 2),
    "link_drop": (link_drop, 2),
    "link_delay": (link_delay, 2),
    "disk_full": (disk_full, 1),
    "hostile_client": (hostile_client_fault, 2),
}
