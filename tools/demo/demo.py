"""The reft main job on an embedded local cluster (README command 1).

1. Starts reftd on loopback and a torch trainer that snapshots every step.
2. SIGKILLs the trainer mid-run, restarts it: it restores the newest committed step and
   proves the restored bytes equal what was saved at that step.
3. SIGKILLs reftd mid-run (the trainer dies with it), restarts reftd, which adopts its
   shared-memory segments after checking them, and restarts the trainer: same proof.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "localcluster"))
from reft_cluster import LocalCluster, find_build_dir  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def have_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


class Trainer:
    """The torch sample trainer (train.py), or the C++ one when torch is not installed. Both
    print the same events and verify restored bytes against what they saved."""

    def __init__(self, cluster, node, record_dir, steps):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(cluster.build_dir, "client", "python")
        if have_torch():
            cmd = [sys.executable, os.path.join(HERE, "train.py"), "--socket", node.socket,
                   "--job", "demo", "--steps", str(steps), "--record-dir", record_dir,
                   "--step-sleep", "0.02"]
        else:
            cmd = [os.path.join(cluster.build_dir, "tools", "demo", "reft_sample_trainer"),
                   "--socket", node.socket, "--job", "demo", "--steps", str(steps),
                   "--size", "3000001", "--sleep-us", "20000"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.events = []

    def wait_for(self, word, min_step=-1, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()
                raise RuntimeError(f"trainer exited ({self.proc.wait()}) before '{word}':\n{err}")
            parts = line.split()
            self.events.append(parts)
            if parts[0] in ("restore-error", "connect-error"):
                raise RuntimeError(f"trainer failed: {line.strip()}")
            if parts[0] == "restored" and len(parts) > 2 and parts[2] == "MISMATCH":
                raise RuntimeError(f"restored step {parts[1]} does not match what was saved")
            if parts[0] == word and int(parts[1]) >= min_step:
                return parts
        raise TimeoutError(f"trainer did not report '{word}' within {timeout}s")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def say(msg):
    print(f"[demo] {msg}", flush=True)


def main():
    say("trainer: " + ("torch sample (tools/demo/train.py)" if have_torch()
                       else "C++ sample (torch not installed)"))
    with LocalCluster(nodes=1, build_dir=find_build_dir()) as cluster:
        node = cluster.nodes[0]
        record = os.path.join(cluster.root, "records")
        say(f"reftd {node.node_id} serving on {node.addr}, socket {node.socket}")

        t = Trainer(cluster, node, record, steps=400)
        t.wait_for("restored")
        say("trainer started fresh, snapshotting every step")
        committed = int(t.wait_for("committed", min_step=25)[1])
        t.kill()
        say(f"SIGKILLed the trainer after step {committed} was committed")
        print(node.ctl("snapshots", "list", "--job", "demo").stdout, end="")

        t = Trainer(cluster, node, record, steps=400)
        restored = t.wait_for("restored")
        say(f"restarted trainer restored step {restored[1]}: restored bytes equal the saved "
            f"bytes ({restored[2]})")
        assert int(restored[1]) >= committed

        committed = int(t.wait_for("committed", min_step=int(restored[1]) + 20)[1])
        node.kill(signal.SIGKILL)
        t.kill()
        say(f"SIGKILLed reftd (and with it the trainer) after step {committed} was committed")
        node.start()
        say("restarted reftd: it adopted its segments after checking headers and checksums")
        print(node.ctl("snapshots", "verify", "--job", "demo").stdout, end="")

        t = Trainer(cluster, node, record, steps=int(restored[1]) + 60)
        restored2 = t.wait_for("restored")
        say(f"restarted trainer restored step {restored2[1]} ({restored2[2]})")
        assert int(restored2[1]) >= committed
        done = t.wait_for("done")
        say(f"training finished at step {done[1]}")
        print(node.ctl("status").stdout, end="")
    say("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
