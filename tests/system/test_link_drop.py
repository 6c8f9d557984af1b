"""Links that fail, with every reftd in its own network namespace joined by veth pairs to a
bridge; every link is mutual TLS, etcd's client port (on the bridge's address in the root
namespace) included.

- a dropped link (the node's veth down: cut from its peers and from etcd) is detected within the
  heartbeat timeout or the etcd lease TTL and no restore hangs, under both control planes (the
  gossip one's SWIM probes, etcd's lease);
- a partition between the nodes only (tc netem drops what node2 and the others send each
  other, etcd stays reachable): a restore that needs node2's bytes waits for it and answers
  "undecided", never "lost"; after healing every rank restores the same step.

Skipped where network namespaces (or netem) cannot be created (not root, no iproute2/tc)."""
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
agreement_timeout_ms = 3000
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

    def cut_peers(self, i):
        """Silently drops what node i and the other nodes send each other (netem loss 100 %);
        its traffic with the bridge's address (etcd) still flows."""
        others = [h for j, h in enumerate(self.hosts) if j != i]
        # Towards node i (the bridge side of its veth): from the other nodes.
        self._drop([], self.veth[i], "src", others)
        # From node i (inside its namespace): to the other nodes.
        self._drop(["ip", "netns", "exec", self.ns[i]], self.veth[i] + "p", "dst", others)

    def heal_peers(self, i):
        sh("tc", "qdisc", "del", "dev", self.veth[i], "root", check=False)
        sh("ip", "netns", "exec", self.ns[i], "tc", "qdisc", "del", "dev", self.veth[i] + "p",
           "root", check=False)

    @staticmethod
    def _drop(prefix, dev, field, hosts):
        # Band 3 of a prio qdisc drops everything; only the filtered addresses go there.
        try:
            sh(*prefix, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "prio")
            sh(*prefix, "tc", "qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:",
               "netem", "loss", "100%")
        except (OSError, subprocess.CalledProcessError) as e:
            pytest.skip(f"cannot drop packets with tc netem here: {e}")
        for h in hosts:
            sh(*prefix, "tc", "filter", "add", "dev", dev, "parent", "1:0", "protocol", "ip",
               "prio", "1", "u32", "match", "ip", field, h + "/32", "flowid", "1:3")

    def __exit__(self, *exc):
        for ns, veth in zip(self.ns, self.veth):
            sh("ip", "link", "del", veth, check=False)
            sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", self.bridge, check=False)



def start_cluster(net, etcd=1):
    # The daemons listen on the bridge's addresses, not loopback: mutual TLS, each node's
    # certificate naming its node id and its address. etcd listens on the root namespace's end
    # of the bridge, which every namespace reaches.
    cluster = LocalCluster(nodes=0, config=CONFIG, tls=True, etcd=etcd, etcd_host=net.root)
    nodes = [cluster.add_node(f"node{i}", start=False, host=net.hosts[i], netns=net.ns[i])
             for i in range(RANKS)]
    return cluster, nodes


def restore_only(cluster, node, job, dp):
    return SampleTrainer(cluster, node, job, steps=0, size=200_001, buffers=2,
                         extra=["--dp", str(dp), "--dp-size", str(RANKS), "--protection", "arc1",
                                "--restore-only"])


def train(cluster, nodes, job):
    trainers = [SampleTrainer(cluster, n, job, steps=STEPS, size=200_001, buffers=2,
                              extra=["--dp", str(d), "--dp-size", str(RANKS), "--protection",
                                     "arc1"])
                for d, n in enumerate(nodes)]
    for t in trainers:
        assert t.finish(timeout=120) == 0, t.lines[-5:]
        assert f"committed {STEPS - 1}" in t.lines, t.lines[-5:]


@pytest.mark.parametrize("etcd", [0, 1], ids=["gossip", "etcd"])
def test_a_dropped_link_is_detected_and_restore_goes_around_it(etcd):
    with Netns() as net:
        cluster, nodes = start_cluster(net, etcd)
        with cluster:
            train(cluster, nodes, "link")
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
            t = restore_only(cluster, nodes[0], "link", 0)
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


def test_a_partition_between_nodes_makes_a_restore_wait_never_lose_bytes():
    with Netns() as net:
        cluster, nodes = start_cluster(net)
        with cluster:
            train(cluster, nodes, "split")

            net.cut_peers(2)
            try:
                # node2 is alive for etcd (its lease holds) but its peers cannot reach it nor it
                # them: its rank's restore needs shards only node0 and node1 hold. It waits the
                # agreement timeout and answers "undecided" (Unavailable), never Lost.
                t = restore_only(cluster, nodes[2], "split", 2)
                ev = t.wait_for("restore-error", timeout=60)
                assert int(ev[1]) == 6, ev  # StatusCode::kUnavailable
                assert "did not answer" in " ".join(ev[2:]), ev
                t.finish()
                assert nodes[0].member_state("node2") == "alive"
            finally:
                net.heal_peers(2)
            # Healed: every rank restores the same committed step, bit for bit.
            trainers = [restore_only(cluster, n, "split", d) for d, n in enumerate(nodes)]
            for t in trainers:
                ev = t.wait_for("restored", timeout=120)
                assert ev == ["restored", str(STEPS - 1), "ok"], ev
                assert t.finish() == 0
