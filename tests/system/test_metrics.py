"""reftd's Prometheus endpoint: metrics appear, and change after snapshots."""
from reft_cluster import LocalCluster, free_port
from reft_cluster import scrape_metrics as scrape
from trainer import SampleTrainer


def test_metrics_change_after_snapshots():
    port = free_port()
    with LocalCluster(nodes=1, extra_args=["--metrics-listen", f"127.0.0.1:{port}",
                                           "--memory-limit", "1G"]) as cluster:
        node = cluster.nodes[0]
        before = scrape(port)
        assert before["reft_snapshots_total"] == 0
        assert before["reft_memory_limit_bytes"] == 1 << 30
        assert before["reft_memory_used_bytes"] == 0
        t = SampleTrainer(cluster, node, "metrics", steps=5, size=100_000, buffers=2)
        assert t.finish() == 0
        after = scrape(port)
        assert after["reft_snapshots_total"] == 5
        # Each snapshot writes its whole slot: the two buffers (dp = 1: one shard holds the
        # replicated one, the unique one has its own region) plus the slot's meta region.
        slots = node.ctl("snapshots", "list", "--job", "metrics", json_output=True)["snapshots"]
        payload = slots[-1]["payload_bytes"]
        assert payload > 100_000 + 100_007
        assert after["reft_snapshot_bytes_total"] == 5 * payload
        assert after["reft_memory_used_bytes"] > 0
        assert after["reft_slots"] >= 1
        assert after["reft_commit_latency_seconds_count"] == 5
