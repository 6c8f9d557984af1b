"""Drives tools/demo/sample_trainer (the C++ trainer) as a subprocess for system tests."""
import os
import signal
import subprocess
import time


class SampleTrainer:
    def __init__(self, cluster, node, job, steps=1000, size=300_001, buffers=3, sleep_us=0,
                 extra=(), unique_size=0):
        exe = os.path.join(cluster.build_dir, "tools", "demo", "reft_sample_trainer")
        self.args = [exe, "--socket", node.socket, "--job", job, "--steps", str(steps),
                     "--size", str(size), "--buffers", str(buffers), "--sleep-us", str(sleep_us),
                     "--unique-size", str(unique_size), *extra]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = []

    def next_event(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                return None
            self.lines.append(line.strip())
            return line.split()
        raise TimeoutError("trainer silent")

    def wait_for(self, word, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            ev = self.next_event(timeout=deadline - time.time())
            if ev is None:
                raise RuntimeError(f"trainer exited ({self.proc.wait()}) before '{word}': "
                                   f"{self.lines[-5:]} {self.proc.stderr.read()}")
            if ev[0] == word:
                return ev
        raise TimeoutError(f"no '{word}' within {timeout}s")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def finish(self, timeout=60):
        out, err = self.proc.communicate(timeout=timeout)
        self.lines += out.split("\n")
        return self.proc.returncode
