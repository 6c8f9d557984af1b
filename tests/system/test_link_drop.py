"""A dropped link, with every reftd in its own network namespace joined by veth pairs to a
bridge (docs/failure-model.md "a peer hangs or a link drops": detected within the heartbeat timeout or the etcd lease
TTL, no restore hangs), under both control planes: the gossip one (SWIM probes) and etcd
(listening on the bridge's address in the root namespace; the cut node loses it too, so its
lease expires). Skipped where network namespaces cannot be created (not root, no iproute2)."""
import os
import subprocess
import time

import pytest

from reft_cluster import LocalCluster
from trainer import SampleTrainer

CONFIG = """
[peer]
probe_interval_ms = 100
probe_timeout_ms = 80
suspicion_timeout_ms = 600

[etcd]
lease_ttl_s = 2
request_timeout_ms = 1000

[restore]
piece_size = "64K"
piece_timeout_ms = 2000

[security]
# The daemons listen on the bridge's addresses, not loopback: plain text must be explicit.
allow_insecure = true
"""
RANKS = 3
STEPS = 5


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


class Netns:
    """RANKS namespaces on a bridge 10.77.0.0/24 (root side 10.77.0.254)."""

    root = "10.77.0.254"  # the bridge's address: etcd listens here

    def __init__(self):
        tag = str(os.getpid() % 100000)
        self.bridge = f"rb{tag}"
        self.ns = [f"reftns{tag}-{i}" for i in range(RANKS)]
        self.veth = [f"rv{tag}x{i}" for i in range(RANKS)]
        self.hosts = [f"10.77.0.{i + 1}" for i in range(RANKS)]

    def __enter__(self):
        try:
            sh("ip", "link", "add", self.bridge, "type", "bridge")
        except (OSError, subprocess.CalledProcessError) as e:
            pytest.skip(f"cannot create network namespaces here: {e}")
        sh("ip", "addr", "add", "10.77.0.254/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for ns, veth, host in zip(self.ns, self.veth, self.hosts):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p")
            sh("ip", "link", "set", veth + "p", "netns", ns)
            sh("ip", "link", "set", veth, "master", self.bridge)
            sh("ip", "link", "set", veth, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", host + "/24", "dev", veth + "p")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", veth + "p", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        return self

    def drop(self, i):
        sh("ip", "link", "set", self.veth[i], "down")

    def restore(self, i):
        sh("ip", "link", "set", self.veth[i], "up")

    def __exit__(self, *exc):
        for ns, veth in zip(self.ns, self.veth):
            sh("ip", "link", "del", veth, check=False)
            sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", self.bridge, check=False)



@pytest.mark.parametrize("etcd", [0, 1], ids=["gossip", "etcd"])
def test_a_dropped_link_is_detected_and_restore_goes_around_it(etcd):
    with Netns() as net:
        cluster = LocalCluster(nodes=0, config=CONFIG, etcd=etcd, etcd_host=net.root)
        nodes = [cluster.add_node(f"node{i}", start=False, host=net.hosts[i], netns=net.ns[i])
                 for i in range(RANKS)]
        with cluster:
            trainers = [SampleTrainer(cluster, n, "link", steps=STEPS, size=200_001, buffers=2,
                                      extra=["--dp", str(d), "--dp-size", str(RANKS),
                                             "--protection", "arc1"])
                        for d, n in enumerate(nodes)]
            for t in trainers:
                assert t.finish(timeout=120) == 0, t.lines[-5:]
            assert nodes[0].member_state("node2") == "alive"

            dropped = time.time()
            net.drop(2)
            # Detected by the SWIM probes within the suspicion timeout plus a few periods, or by
            # etcd when node2's lease (2 s) expires.
            while nodes[0].member_state("node2") != "dead":
                assert time.time() - dropped < 10, "link drop not detected"
                time.sleep(0.05)
            detected = time.time() - dropped
            assert detected < 5, detected

            # Rank 0 restores: shard 2 comes from rank 1's ARC copy, not from the cut node.
            t = SampleTrainer(cluster, nodes[0], "link", steps=0, size=200_001, buffers=2,
                              extra=["--dp", "0", "--dp-size", str(RANKS),
                                     "--protection", "arc1", "--restore-only"])
            ev = t.wait_for("restored", timeout=60)
            assert ev == ["restored", str(STEPS - 1), "ok"], ev
            assert t.finish() == 0

            # The link comes back: node2 rejoins with a new epoch (it refutes its death, or
            # registers again under a new lease).
            net.restore(2)
            deadline = time.time() + 20
            while nodes[0].member_state("node2") != "alive":
                assert time.time() < deadline, "node2 did not rejoin"
                time.sleep(0.1)
