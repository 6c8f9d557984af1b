"""reft_peer_copy_bytes_total (docs/metrics.md): the bytes of a ring copy, counted on the node
that copies them, as `remote` when the ring neighbour is on another node and `local` when it is
on the same one. A job of two ranks (dp=2) registers one sharded unique buffer, each rank its
equal part, as pure FSDP's DCP shards are (docs/dcp.md "How it is stored")."""

import reft
from reft_cluster import LocalCluster
from ranks import snapshot_all

PART = 3 * 65536 + 4096  # bytes of each rank's part: several chunks, not a power of two
STEPS = 2


def snapshot_steps(clients, parts, steps):
    for step in steps:
        for d, p in enumerate(parts):
            p[:] = bytes([(step * 16 + d) & 0xFF]) * PART
        snapshot_all(clients, step, timeout=60)


def copied(node):
    m = node.metrics()
    return (m['reft_peer_copy_bytes_total{source="local"}'],
            m['reft_peer_copy_bytes_total{source="remote"}'])


def run_job(nodes, job):
    """Ranks dp=0 and dp=1 of `job` on `nodes` (one node each); STEPS committed steps."""
    layout = reft.Layout(dp=2)
    clients = [reft.Client(socket=n.socket, job=job, dp=d, layout=layout, protection="arc1")
               for d, n in enumerate(nodes)]
    parts = [bytearray(PART) for _ in clients]
    for d, (c, p) in enumerate(zip(clients, parts)):
        c.register("shard", p, kind="unique", shard=(d * PART, 2 * PART))
    snapshot_steps(clients, parts, range(1, STEPS + 1))
    for c in clients:
        c.close()


def test_a_ring_copy_is_counted_as_remote_across_nodes_and_local_on_one():
    with LocalCluster(nodes=2, etcd=1, config="[etcd]\nlease_ttl_s = 2\n", metrics=True) as c:
        assert [copied(n) for n in c.nodes] == [(0, 0), (0, 0)]

        # One rank per node: each node pulls its rank's neighbour's part from the other node,
        # once per step, and nothing is copied locally.
        run_job(c.nodes, "across")
        assert [copied(n) for n in c.nodes] == [(0, STEPS * PART), (0, STEPS * PART)]

        # Both ranks on node0: both copies are read on node0, no byte crosses the network.
        run_job([c.nodes[0], c.nodes[0]], "one-node")
        assert copied(c.nodes[0]) == (2 * STEPS * PART, STEPS * PART)
        assert copied(c.nodes[1]) == (0, STEPS * PART)
