"""gRPC security of real reftd processes (docs/security.md): the token on every call (never
logged), mutual TLS with node identities bound to certificates, the rules for plain text and
clear-text tokens beyond loopback, and the admin socket that only operators may use."""
import os
import shutil
import subprocess
import time

import pytest

from reft_cluster import LocalCluster, find_build_dir, free_port

TOKEN = "s3cret-token-0123456789abcdef"
BUILD = find_build_dir()
REFTD = os.path.join(BUILD, "daemon", "app", "reftd")
REFTCTL = os.path.join(BUILD, "tools", "reftctl", "reftctl")
NOBODY = 65534


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def wait_until(pred, timeout=30.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached after {timeout}s")


def alive_peers(node, *auth):
    """The peers `node` sees alive (`auth`: reftctl credential flags, e.g. --token-file F)."""
    nodes = node.ctl(*auth, "nodes", "list", json_output=True)["nodes"]
    return sorted(n["node_id"] for n in nodes if n["state"] == "alive" and not n["self"])


def test_token_is_required_and_never_logged(tmp_path):
    token_file = write(tmp_path / "token", TOKEN + "\n")
    wrong_file = write(tmp_path / "wrong", "not-the-token-but-long-enough\n")
    cfg = write(tmp_path / "reftd.toml", f'[security]\ntoken_file = "{token_file}"\n')
    with LocalCluster(nodes=1, extra_args=["--config", str(cfg)], metrics=True) as cluster:
        node = cluster.nodes[0]
        # Admin over TCP from this very host: the token is required like from anywhere else.
        r = node.ctl("status", check=False)
        assert r.returncode == 1 and "no token" in r.stderr
        r = node.ctl("--token-file", str(wrong_file), "status", check=False)
        assert r.returncode == 1 and "wrong token" in r.stderr
        r = node.ctl("--token-file", str(token_file), "status", check=False)
        assert r.returncode == 0, r.stderr
        log = node.log()
        assert "wrong token" in log
        assert TOKEN not in log and "not-the-token" not in log
        # Both refusals are counted for the operator's dashboards.
        assert node.metrics()['reft_refused_total{endpoint="grpc"}'] == 2


def test_nodes_sharing_the_token_form_a_cluster(tmp_path):
    """Peer calls carry the token: without it the nodes would never see each other."""
    token_file = write(tmp_path / "token", TOKEN + "\n")
    config = f'[security]\ntoken_file = "{token_file}"\n'
    with LocalCluster(nodes=2, config=config) as cluster:
        a, b = cluster.nodes
        for node, other in ((a, "node1"), (b, "node0")):
            wait_until(lambda n=node, o=other: alive_peers(n, "--token-file", token_file) == [o],
                       what=f"{node.node_id} sees {other} alive")
        assert "refused" not in a.log() and "refused" not in b.log()


def test_mutual_tls_cluster_binds_node_ids_to_certificates(tmp_path):
    with LocalCluster(nodes=2, tls=True) as cluster:
        a, b = cluster.nodes
        wait_until(lambda: alive_peers(a) == ["node1"] and alive_peers(b) == ["node0"],
                   what="the TLS cluster to converge")
        tls = cluster.tls
        # Admin over TCP: plain text, or TLS without a client certificate, is refused.
        r = subprocess.run([REFTCTL, "--addr", a.addr, "status"], capture_output=True, text=True)
        assert r.returncode != 0
        r = subprocess.run([REFTCTL, "--addr", a.addr, "--tls-ca", tls.ca, "status"],
                           capture_output=True, text=True)
        assert r.returncode != 0
        # A node's certificate is no operator's: node1's key cannot drop node0's snapshots.
        for verb in (["status"], ["snapshots", "drop", "--job", "j", "--step", "1"]):
            r = subprocess.run([REFTCTL, "--addr", a.addr] + tls.ctl_args("node1") + verb,
                               capture_output=True, text=True)
            assert r.returncode == 1, r.stderr
            assert "'node1'" in r.stderr and "security.operator_identities" in r.stderr, r.stderr
        assert "Admin over TCP is for operators" in a.log()
        # The operator certificate (what ctl() presents) is listed: served.
        assert a.ctl("status", check=False).returncode == 0

        # A reftd holding node1's certificate but claiming to be node9: every call it makes to
        # node0 is refused, so node9 never becomes a member there.
        root = tmp_path / "rogue"
        root.mkdir()
        cfg = write(root / "reftd.toml",
                    "[security]\n" + tls.security_toml("node1") + tls.operator_toml())
        rogue = subprocess.Popen(
            [REFTD, "--node-id", "node9", "--listen", f"127.0.0.1:{free_port()}",
             "--socket", str(root / "reftd.sock"), "--shm-dir", str(root / "shm"),
             "--peers", a.addr, "--config", str(cfg)],
            stdout=open(root / "log", "wb"), stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: "claims node 'node9' but its certificate names 'node1'" in a.log(),
                       what="node0 refusing node9")
            ids = [n["node_id"] for n in a.ctl("nodes", "list", json_output=True)["nodes"]]
            assert "node9" not in ids
        finally:
            rogue.terminate()
            rogue.wait(timeout=30)


def test_plain_text_on_a_non_loopback_address_is_a_config_error(tmp_path):
    r = subprocess.run([REFTD, "--listen", "0.0.0.0:7999", "--socket", str(tmp_path / "s"),
                        "--shm-dir", str(tmp_path / "shm")], capture_output=True, text=True)
    assert r.returncode == 2 and "not a loopback address" in r.stderr
    cfg = write(tmp_path / "reftd.toml", '[security]\ntls_cert = "/x.pem"\n')
    r = subprocess.run([REFTD, "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2 and "together" in r.stderr


def test_a_name_that_looks_like_loopback_refuses_to_start(tmp_path):
    """Without TLS and token reftd starts only on loopback; a name beginning with "127." is a
    name (its owner decides where it resolves), and reftd does not resolve it to find out."""
    for listen in ("127.attacker.invalid:0", "127.0.0.1.nip.io:0", "localhost.evil:0"):
        r = subprocess.run([REFTD, "--node-id", "n", "--listen", listen,
                            "--socket", str(tmp_path / "reftd.sock"),
                            "--shm-dir", str(tmp_path / "shm")],
                           capture_output=True, text=True, timeout=30)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 2, r.stderr
        assert len(lines) == 1 and f"'{listen}'" in lines[0], lines
        assert "not a loopback address" in lines[0] and "not resolved" in lines[0], lines
        assert not os.path.exists(tmp_path / "reftd.sock")


def test_mutual_tls_without_operator_identities_refuses_to_start(tmp_path):
    cfg = write(tmp_path / "reftd.toml", '[security]\ntls_cert = "/x.pem"\n'
                                         'tls_key = "/x.key"\ntls_ca = "/ca.pem"\n')
    r = subprocess.run([REFTD, "--node-id", "n", "--config", str(cfg),
                        "--socket", str(tmp_path / "reftd.sock"),
                        "--shm-dir", str(tmp_path / "shm")], capture_output=True, text=True,
                       timeout=30)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and "security.operator_identities" in lines[0], lines


def test_a_token_in_clear_text_beyond_loopback_refuses_to_start(tmp_path):
    token_file = write(tmp_path / "token", TOKEN + "\n")
    cfg = write(tmp_path / "reftd.toml", f'[security]\ntoken_file = "{token_file}"\n')
    args = [REFTD, "--node-id", "n", "--listen", f"0.0.0.0:{free_port()}",
            "--socket", str(tmp_path / "reftd.sock"), "--shm-dir", str(tmp_path / "shm"),
            "--config", str(cfg)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "clear text" in lines[0] and "allow_insecure" in lines[0], lines
    assert TOKEN not in r.stderr
    # The operator may insist (a private network): then it starts, with a warning.
    write(cfg, f'[security]\ntoken_file = "{token_file}"\nallow_insecure = true\n')
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: subprocess.run([REFTCTL, "--socket", str(tmp_path / "reftd.sock"),
                                           "status"], capture_output=True).returncode == 0,
                   what="reftd with allow_insecure serving")
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "clear text" in out


def as_user(uid, gid, groups=()):
    """setpriv prefix running a command as uid/gid with exactly `groups` as supplementary."""
    g = ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}"] + g + ["--"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root (to run reftctl as another uid) and setpriv")
def test_admin_socket_is_for_operators_only(tmp_path):
    # nogroup (65534) is the operator group; nobody's primary group is set per case.
    config = '[security]\noperator_group = "nogroup"\n'
    with LocalCluster(nodes=1, config=config) as cluster:
        node = cluster.nodes[0]
        admin = node.socket + ".admin"
        st = os.stat(admin)
        assert oct(st.st_mode & 0o777) == "0o660" and st.st_gid == NOBODY
        # Let every user reach the socket file (a directory and mode loosened by mistake): the
        # peer-credential check alone must still keep non-operators out.
        for d in (cluster.root, node.root):
            os.chmod(d, 0o755)
        os.chmod(admin, 0o666)
        ctl = [REFTCTL, "--socket", node.socket, "status"]
        r = subprocess.run(as_user(NOBODY, 1) + ctl, capture_output=True, text=True)
        assert r.returncode == 1, r.stderr
        assert "the admin socket is for operators" in r.stderr and f"uid {NOBODY}" in r.stderr
        assert "'nogroup'" in r.stderr
        r = subprocess.run(as_user(NOBODY, 1) + [REFTCTL, "--socket", node.socket,
                                                  "snapshots", "drop", "--job", "j", "--step",
                                                  "1"], capture_output=True, text=True)
        assert r.returncode == 1 and "operators" in r.stderr
        # The operator group, as the primary or as a supplementary group: served.
        for prefix in (as_user(NOBODY, NOBODY), as_user(NOBODY, 1, [NOBODY])):
            r = subprocess.run(prefix + ctl, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        # Root (the slurm prolog/epilog's user) and the daemon's uid are operators.
        assert subprocess.run(ctl, capture_output=True).returncode == 0
        assert "is not an operator" in node.log()
