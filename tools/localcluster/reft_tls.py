"""Mutual TLS for a LocalCluster (LocalCluster(tls=True)): a CA of its own, a certificate per
node named after the node id (made by tools/reft-certs.sh), a per-node configuration that
points reftd at them, and the operator certificate reftctl presents. With an etcd, its client
port is TLS too (certificate "etcd"), and each reftd presents its node certificate to it.
"""
from __future__ import annotations

import os
import subprocess
from typing import List, Optional

from etcd_server import EtcdTls

CERTS_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reft-certs.sh")
# The common name tools/reft-certs.sh gives the operator certificate (its --operator default).
OPERATOR_CN = "reft-operator"


def add_to_section(toml_text: str, section: str, lines: List[str]) -> str:
    """`toml_text` with `lines` (key = value) added to table [section], created if missing."""
    out = toml_text.splitlines()
    header = f"[{section}]"
    if header in (line.strip() for line in out):
        i = next(i for i, line in enumerate(out) if line.strip() == header)
        out[i + 1:i + 1] = lines
    else:
        out += [header] + lines
    return "\n".join(out) + "\n"


class ClusterTls:
    def __init__(self, root: str):
        self.dir = os.path.join(root, "tls")

    def issue(self, node_ids: List[str]) -> None:
        """Certificates for `node_ids` (and the CA and operator certificate on first use); an
        id may carry extra subject alternative names: "node4=IP:10.1.0.2"."""
        missing = [n for n in node_ids if not os.path.exists(self.cert(n.split("=")[0]))]
        if missing or not os.path.exists(self.ca):
            subprocess.run(["bash", CERTS_SCRIPT, "--days", "2", self.dir] + missing, check=True,
                           capture_output=True, text=True)

    @staticmethod
    def spec(node_id: str, host: str = "127.0.0.1") -> str:
        """issue()'s name for a node: its id, plus its address when that is not loopback."""
        return node_id if host == "127.0.0.1" else f"{node_id}=IP:{host}"

    @property
    def ca(self) -> str:
        return os.path.join(self.dir, "ca.pem")

    def cert(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.pem")

    def key(self, name: str) -> str:
        return os.path.join(self.dir, f"{name}.key")

    def security_toml(self, node_id: str) -> str:
        return (f'tls_cert = "{self.cert(node_id)}"\ntls_key = "{self.key(node_id)}"\n'
                f'tls_ca = "{self.ca}"\n')

    @staticmethod
    def operator_toml() -> str:
        """Who may make Admin calls over TCP: the operator certificate reft-certs.sh made
        (common name "reft-operator", no subject alternative name), which ctl() presents."""
        return f'operator_identities = ["{OPERATOR_CN}"]\n'

    def etcd(self, host: str) -> EtcdTls:
        """TLS of an etcd serving clients on `host`; reftctl's operator certificate is
        etcdctl's."""
        self.issue([self.spec("etcd", host)])
        return EtcdTls(ca=self.ca, cert=self.cert("etcd"), key=self.key("etcd"),
                       client_cert=self.cert("operator"), client_key=self.key("operator"))

    def config_for(self, node_id: str, node_root: str, base_config: Optional[str],
                   host: str = "127.0.0.1", etcd: bool = False) -> str:
        """Path of a TOML file: the cluster's configuration plus this node's certificate, which
        names the node id and the address its peers dial (also presented to etcd when `etcd`)."""
        self.issue([self.spec(node_id, host)])
        text = ""
        if base_config:
            with open(base_config) as f:
                text = f.read()
        security = self.security_toml(node_id).rstrip("\n").split("\n")
        text = add_to_section(text, "security", security)
        if "operator_identities" not in text:  # a test's own list wins
            text = add_to_section(text, "security", [self.operator_toml().rstrip("\n")])
        if etcd:
            text = add_to_section(text, "etcd", security)
        os.makedirs(node_root, exist_ok=True)
        path = os.path.join(node_root, "reftd-tls.toml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def ctl_args(self, name: str = "operator") -> List[str]:
        """reftctl flags that present certificate `name` (default: the operator's)."""
        return ["--tls-ca", self.ca, "--tls-cert", self.cert(name), "--tls-key", self.key(name)]
