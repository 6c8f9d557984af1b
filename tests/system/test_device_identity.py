"""GPUs by UUID (docs/security.md): the trainer numbers its devices its own way
(CUDA_VISIBLE_DEVICES renumbers them), so libreft sends each buffer's device UUID and PCI bus
id and reftd opens the device with that UUID. Through the emulated device, whose visible
devices REFT_EMULATED_DEVICE_UUIDS lists per process the way CUDA_VISIBLE_DEVICES does."""
import json
import os
import subprocess
import sys

from reft_cluster import LocalCluster

REFTD_SEES = "EMU-aaaaaaaa-0000-0000-0000-000000000000,EMU-bbbbbbbb-0000-0000-0000-000000000000"

CLIENT = r"""
import json, sys
import reft, reft.testing
socket_path = sys.argv[1]
out = {}
try:
    a = reft.testing.EmulatedDeviceArray(1 << 16)
    a.host[:] = 0x6b
    with reft.Client(socket=socket_path, job="uuid", timeout=20.0) as c:
        c.register("w", a)
        c.snapshot(1)
        out["committed"] = c.wait_committed(1, timeout=20.0)
    b = reft.testing.EmulatedDeviceArray(1 << 16)
    with reft.Client(socket=socket_path, job="uuid", timeout=20.0) as c:
        c.register("w", b)
        out["restored"] = c.restore()
    out["intact"] = bool((b.host == 0x6b).all())
except reft.Error as e:
    out["error"] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"""


def run_client(node, visible):
    env = dict(os.environ, REFT_EMULATED_DEVICE_UUIDS=visible)
    r = subprocess.run([sys.executable, "-c", CLIENT, node.socket], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_device_is_found_by_uuid_and_a_mismatch_names_both():
    cluster = LocalCluster(nodes=1, etcd=0)
    cluster.env["REFT_EMULATED_DEVICE_UUIDS"] = REFTD_SEES
    with cluster:
        node = cluster.nodes[0]
        # The trainer sees only reftd's second device, as its device 0.
        assert run_client(node, "EMU-bbbbbbbb-0000-0000-0000-000000000000") == {
            "committed": True, "restored": 1, "intact": True}
        # A device reftd does not have: refused, naming the client's and reftd's device 0.
        out = run_client(node, "EMU-cccccccc-0000-0000-0000-000000000000")
        err = out.get("error", "")
        assert err.startswith("InvalidArgumentError"), out
        assert "EMU-cccccccc" in err and "client's device 0" in err, err
        assert "reftd's device 0 is UUID EMU-aaaaaaaa" in err, err
