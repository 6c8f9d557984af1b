"""The soak's cluster: a LocalCluster whose nodes each sit behind a LinkProxy (peers dial the
proxy, so a node's link can be delayed or dropped; the daemons reach etcd through proxies too,
so a dropped link cuts a node off the control plane as well), and whose persistent tier is a
small tmpfs of its own (so it can be filled up without touching the machine's disks).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional

from link_proxy import LinkProxy, LinkTable
from reft_cluster import LocalCluster, Node, free_port
from reft_tls import add_to_section


@dataclass
class ProxiedNode(Node):
    """A Node that advertises its proxy's address and dials its peers' and etcd's proxies."""
    proxy: Optional[LinkProxy] = field(default=None)
    etcd_endpoints: Optional[str] = field(default=None)

    def args(self) -> List[str]:
        a = super().args()
        if "--etcd" in a and self.etcd_endpoints:
            a[a.index("--etcd") + 1] = self.etcd_endpoints
        peers = [n.proxy.address for n in self.cluster.nodes
                 if n is not self and getattr(n, "proxy", None)]
        if "--peers" in a:
            i = a.index("--peers")
            if peers:
                a[i + 1] = ",".join(peers)
            else:
                del a[i:i + 2]
        base = None
        if "--config" in a:
            i = a.index("--config")
            base = a[i + 1]
            del a[i:i + 2]
        text = ""
        if base:
            with open(base) as f:
                text = f.read()
        path = os.path.join(self.root, "reftd-chaos.toml")
        os.makedirs(self.root, exist_ok=True)
        with open(path, "w") as f:
            f.write(add_to_section(text, "peer", [f'advertise = "{self.proxy.address}"']))
        return a + ["--config", path]


class ChaosCluster:
    def __init__(self, nodes: int, config: str, tls: bool, etcd: bool = True,
                 persist_mb: int = 48, keep: bool = False):
        self.cluster = LocalCluster(nodes=0, config=config, tls=tls, keep=keep,
                                    etcd=1 if etcd else 0)
        self.links = LinkTable(self._daemon_pids)
        self.etcd_proxies = [LinkProxy("etcd", m.client_port, self.links)
                             for m in (self.cluster.etcd.members if self.cluster.etcd else [])]
        self.spares = 0
        for i in range(nodes):
            self._new_node(f"node{i}")
        self.persist_tmpfs = self._mount_persist_tmpfs(persist_mb)

    def _new_node(self, node_id: str) -> ProxiedNode:
        c = self.cluster
        port = free_port()
        node = ProxiedNode(c, node_id, port, os.path.join(c.root, node_id), list(c.extra_args),
                           proxy=LinkProxy(node_id, port, self.links),
                           etcd_endpoints=",".join(p.address for p in self.etcd_proxies))
        c.nodes.append(node)
        return node

    def _mount_persist_tmpfs(self, mb: int) -> Optional[str]:
        """A tmpfs of `mb` MiB at the persistent directory, or None when mounting is not
        allowed here (the disk-full fault is then unavailable)."""
        path = self.cluster.persist_dir
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mb}m,mode=0755", "tmpfs", path],
                           capture_output=True, text=True)
        return path if r.returncode == 0 else None

    def _daemon_pids(self):
        return {n.proc.pid: n.node_id for n in self.cluster.nodes
                if n.proc is not None and n.proc.poll() is None}

    @property
    def nodes(self) -> List[ProxiedNode]:
        return self.cluster.nodes

    def start(self) -> "ChaosCluster":
        self.cluster.start()
        return self

    def add_spare(self) -> ProxiedNode:
        """A fresh node with a new identity (a spare machine), started."""
        self.spares += 1
        node = self._new_node(f"spare{self.spares}")
        if self.cluster.tls:
            self.cluster.tls.issue([node.node_id])
        node.start()
        return node

    def retire(self, node: ProxiedNode) -> None:
        """Forgets a lost node (its process is gone)."""
        node.proxy.close()
        self.cluster.nodes.remove(node)

    def close(self) -> None:
        for n in list(self.cluster.nodes):
            try:
                n.stop()
            except Exception:  # noqa: BLE001 - best effort teardown
                n.kill()
            if n.proxy:
                n.proxy.close()
        for p in self.etcd_proxies:
            p.close()
        if self.persist_tmpfs:  # before the cluster removes its directories
            subprocess.run(["umount", "-l", self.persist_tmpfs], capture_output=True)
        self.cluster.close()
