"""reftd as a process: flags, config errors, readiness, clean shutdown, exit codes."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

import pytest

import etcd_server
from etcd_server import free_port
from reft_cluster import LocalCluster, find_build_dir

BUILD = find_build_dir()
REFTD = os.path.join(BUILD, "daemon", "app", "reftd")
REFTCTL = os.path.join(BUILD, "tools", "reftctl", "reftctl")


def run(*args, timeout=30):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


def test_bad_flag_is_usage_error_with_one_line():
    r = run(REFTD, "--no-such-flag")
    assert r.returncode == 2
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "no-such-flag" in lines[0]


def test_bad_memory_limit_is_usage_error():
    r = run(REFTD, "--memory-limit", "12Q")
    assert r.returncode == 2
    assert "--memory-limit" in r.stderr


def test_bad_config_names_the_key(tmp_path):
    cfg = tmp_path / "reftd.toml"
    cfg.write_text('[store]\nchunk_sise = "1M"\n')
    r = run(REFTD, "--config", str(cfg))
    assert r.returncode == 2
    assert "store.chunk_sise" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_ready_status_and_clean_sigterm():
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        status = node.ctl("status", json_output=True)
        assert status["node_id"] == "node0"
        assert status["health"] == "serving"
        assert status["schema"] == 1
        assert "emulated" in status["device_kinds"]
        # SIGINT is as clean as SIGTERM.
        node.proc.send_signal(signal.SIGINT)
        assert node.proc.wait(timeout=30) == 0
        assert "stopped" in node.log()


def test_port_in_use_is_runtime_failure(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run(REFTD, "--node-id", "x", "--listen", f"127.0.0.1:{port}",
                "--socket", str(tmp_path / "s.sock"), "--shm-dir", str(tmp_path / "shm"))
    assert r.returncode == 1
    assert "cannot listen" in r.stderr


def test_listen_on_port_zero_serves_and_names_the_port_the_kernel_picked(tmp_path):
    """--listen HOST:0: the start line and the daemon's own address carry the real port, and
    reftctl reaches the daemon there."""
    os.mkdir(tmp_path / "shm")
    proc = subprocess.Popen([REFTD, "--node-id", "x", "--listen", "127.0.0.1:0",
                             "--socket", str(tmp_path / "s.sock"), "--shm-dir",
                             str(tmp_path / "shm"), "--log-level", "info"],
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:  # the log up to readiness, no sleeping
            lines.append(line)
            if "serving on" in line:
                break
        serving = lines[-1].split("serving on ")[1].split()[0]
        host, port = serving.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0, "".join(lines)
        r = run(REFTCTL, "--addr", serving, "-o", "json", "nodes", "list")
        assert r.returncode == 0, r.stderr
        assert f'"{serving}"' in r.stdout, r.stdout  # the address peers are told
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_a_port_the_harness_handed_out_is_held_against_other_test_processes():
    """Test processes run at once: a port one handed out (and may not have bound yet, or bound
    by a daemon it will restart) is never handed out by another, which can claim the rest."""
    port = free_port()
    other = next(p for p in range(port + 1, 65536) if p not in etcd_server._handed_out)
    child = ("import sys, etcd_server; "
             f"sys.exit(0 if not etcd_server._claim({port}) and etcd_server._claim({other}) "
             "else 1)")
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(etcd_server.__file__)))
    assert r.returncode == 0, r.stderr


def test_reftctl_exit_codes():
    # 3: nothing listens there.
    r = run(REFTCTL, "--addr", f"127.0.0.1:{free_port()}", "status")
    assert r.returncode == 3 and "cannot reach" in r.stderr
    # 2: usage.
    assert run(REFTCTL, "snapshots", "verify").returncode == 2
    assert run(REFTCTL, "-o", "yaml", "status").returncode == 2
    with LocalCluster(nodes=1) as cluster:
        node = cluster.nodes[0]
        # 1: the operation failed (unknown job).
        r = node.ctl("snapshots", "verify", "--job", "nope", check=False)
        assert r.returncode == 1 and "nope" in r.stderr
        listing = node.ctl("snapshots", "list", json_output=True)
        assert listing["snapshots"] == []


@pytest.mark.parametrize("where", ["tmpfs", "disk"])
def test_shm_dir_off_tmpfs_is_named_in_a_warning_at_start(where, tmp_path):
    """Slots outside tmpfs cannot be page-locked for device copies and are written back to
    disk: reftd says so once when it opens the store, and serves anyway."""
    parent = "/dev/shm" if where == "tmpfs" else str(tmp_path)
    fs = run("stat", "-f", "-c", "%T", parent).stdout.strip()
    if (where == "tmpfs") != (fs in ("tmpfs", "hugetlbfs")):
        pytest.skip("%s is on %s here" % (parent, fs))
    shm = tempfile.mkdtemp(prefix="reft-shm-", dir=parent)
    sock = str(tmp_path / "s.sock")
    proc = subprocess.Popen([REFTD, "--node-id", "x", "--listen", f"127.0.0.1:{free_port()}",
                             "--socket", sock, "--shm-dir", shm, "--log-level", "info"],
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stderr:  # the log up to readiness, no sleeping
            lines.append(line)
            if "ready" in line or "serving" in line:
                break
        assert proc.poll() is None, "".join(lines)
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
        log = "".join(lines) + rest
        assert proc.returncode == 0, log
        warned = [l for l in log.splitlines() if "not tmpfs" in l and shm in l]
        assert len(warned) == (0 if where == "tmpfs" else 1), log
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(shm, ignore_errors=True)
