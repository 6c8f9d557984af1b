"""A hostile client cannot crash reftd (docs/security.md): a trainer that garbles every page it
shares with reftd, truncates every file behind them (its slot files, the HAS hint page, its
emulated device memory and event counter), then sends half a frame and disconnects, must leave
reftd serving, its own later snapshots refused with an error, and another job's snapshot
intact and restorable."""
import json
import os
import subprocess
import sys

import reft
from reft_cluster import LocalCluster, free_port, scrape_metrics

SIZE = 1 << 20

HOSTILE = r"""
import json, os, mmap, socket, struct, sys
import reft, reft.testing
sock_path, shm_dir = sys.argv[1], sys.argv[2]
out = {"truncated": [], "sealed": [], "garbled": 0}
c = reft.Client(socket=sock_path, job="hostile", timeout=20.0)
host = bytearray(%(size)d)
dev = reft.testing.EmulatedDeviceArray(%(size)d)
c.register("host", host)
c.register("dev", dev)
c.enable_has()
for step in (1, 2):  # both slots of the rank have been handed out and mapped here
    host[:] = bytes([step]) * len(host)
    dev.host[:] = step
    c.snapshot(step)
    assert c.wait_committed(step, timeout=20.0)

# Every file this process shares with reftd: its shared mappings (slot files, the HAS page,
# emulated memory, event counters) and its open fds.
targets = {}
for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) >= 6 and f[1][3] == "s" and (f[5].startswith(shm_dir) or f[5].startswith("/memfd:")):
        targets[f[5] + " " + f[4]] = "/proc/self/map_files/" + f[0]
for fd in os.listdir("/proc/self/fd"):
    try:
        link = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    if link.startswith(shm_dir) or link.startswith("/memfd:"):
        targets.setdefault(link + " fd", "/proc/self/fd/" + fd)
garbage = os.urandom(4096)
for name, path in sorted(targets.items()):
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        continue
    size = os.fstat(fd).st_size
    if size:
        m = mmap.mmap(fd, size)
        for off in range(0, size, 4096):
            n = min(4096, size - off)
            m[off:off + n] = garbage[:n]
        m.close()
        out["garbled"] += 1
    try:
        os.ftruncate(fd, 0)
        out["truncated"].append(name)
    except OSError:
        out["sealed"].append(name)
    os.close(fd)

# reftd now writes the slot's meta into a file that is gone (and libreft refuses the short
# file): this session's snapshot fails; a restore reads slots that are gone.
try:
    host[:] = b"\x03" * len(host)
    c.snapshot(3)
    c.fence()
    out["step3"] = "committed" if c.wait_committed(3, timeout=10.0) else "not committed"
except reft.Error as e:
    out["step3"] = type(e).__name__ + ": " + str(e)
try:
    out["restore"] = c.restore()
except reft.Error as e:
    out["restore"] = type(e).__name__ + ": " + str(e)

# Half a frame, then a header promising more than follows, then gone without a goodbye.
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sock_path)
header = struct.pack("<IHHIIII", 0x4C544652, 3, 1, 0, 1, 4096, 0)
s.send(header[:10])
s.send(header + b"x" * 16)
s.close()
print(json.dumps(out), flush=True)
os._exit(0)  # no close(): the session is cut with its fds and mappings
""" % {"size": SIZE}


def test_hostile_client_leaves_reftd_and_other_jobs_intact():
    metrics_port = free_port()
    with LocalCluster(nodes=1, etcd=0,
                      extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}"]) as cluster:
        node = cluster.nodes[0]
        victim = bytearray(os.urandom(SIZE))
        with reft.Client(socket=node.socket, job="victim", timeout=20.0) as c:
            c.register("w", victim)
            c.snapshot(1)
            assert c.wait_committed(1, timeout=20.0)

        r = subprocess.run([sys.executable, "-c", HOSTILE, node.socket, node.shm_dir],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        # It really reached reftd's files: both slot files were truncated...
        assert sum(1 for t in out["truncated"] if t.startswith(node.shm_dir)) >= 2, out
        # ...while the memfds reftd maps (HAS page, emulated memory, event counter) are sealed.
        for memfd in ("reft-has-hints", "reft-event", "reft-emulated-device"):
            assert any(memfd in s for s in out["sealed"]), (memfd, out)
            assert not any(memfd in t for t in out["truncated"]), (memfd, out)
        assert out["step3"].startswith("ProtocolError"), out  # the short slot file

        assert node.proc.poll() is None, "reftd died:\n" + node.log()
        # Without the guard, reftd's first write into the truncated slot (its meta region, at
        # snapshot begin) would have been a SIGBUS.
        assert scrape_metrics(metrics_port)["reft_client_mapping_faults_total"] >= 1
        verify = node.ctl("snapshots", "verify", "--job", "victim", json_output=True)
        assert verify["ok"], verify
        restored = bytearray(SIZE)
        with reft.Client(socket=node.socket, job="victim", timeout=20.0) as c:
            c.register("w", restored)
            assert c.restore() == 1
        assert restored == victim
        # The hostile job's own committed state is garbage now: reftd says so, it does not crash.
        hostile = node.ctl("snapshots", "verify", "--job", "hostile", check=False)
        assert node.proc.poll() is None, "reftd died verifying the truncated slots:\n" + node.log()
        assert hostile.returncode != 0 or '"ok": false' in hostile.stdout or "FAIL" in hostile.stdout
