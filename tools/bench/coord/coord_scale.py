#!/usr/bin/env python3
"""Control-plane scale bench: N simulated nodes x R ranks of one job, data plane stubbed.

The members run in a few coord_scale_host processes (C++, real PeerNodes over an in-memory
store) against one real etcd (tools/localcluster's EtcdCluster), or over today's gossip
(SWIM membership + completion-set exchange, one Peer server per member). Process layout:
  host 0    member 0 alone: joins first, so it coordinates the job (etcd); its own traffic
  host 1    member 1 alone: one ordinary node in a process of its own (per-node figures)
  stall     ceil(N/100) members, SIGSTOPped for --stall-ms once (false failure detections)
  the rest  --per-process members per process (one EtcdClient each: pooled threads/connection)

Per N it prints one JSON line (stdout) with: control messages and bytes per committed step
(total, per node, the coordinator's and one ordinary node's), commit latency from the last
rank's completion to the commit being visible on every member (p50/p99/max; and to the
coordinator's commit alone), CPU per committed step (coordinator, etcd, all members), threads and
resident memory (per member, and of the one-member process), and false failure detections
under the stall. docs/bench/coordination.md describes the method and the figures.
"""
import argparse
import json
import math
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "localcluster"))
from etcd_server import EtcdCluster  # noqa: E402


class Host:
    """One coord_scale_host process; its stdout lines are read by a thread into a queue."""

    def __init__(self, binary, name, args):
        self.name = name
        self.proc = subprocess.Popen([binary] + args, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.lines = queue.Queue()
        self.held = []
        self.stderr = []
        self.leases_lost = 0  # its members' "etcd lease expired" warnings
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.split())
        self.lines.put(None)

    def _read_err(self):
        for line in self.proc.stderr:
            if "etcd lease expired" in line:
                self.leases_lost += 1
            self.stderr.append(line)
            del self.stderr[:-20]

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, word, timeout, step=None):
        """The next line starting with `word` (and `step`); other lines wait their turn."""
        def wanted(msg):
            return msg[0] == word and (step is None or int(msg[1]) == step)
        for i, msg in enumerate(self.held):
            if wanted(msg):
                return self.held.pop(i)
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"{self.name}: no '{word}' within {timeout}s; its stderr "
                                   "ends: " + "".join(self.stderr[-5:]))
            try:
                msg = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                raise RuntimeError(f"{self.name} exited ({self.proc.wait()}): "
                                   + "".join(self.stderr))
            if wanted(msg):
                return msg
            self.held.append(msg)

    def ask(self, cmd, timeout=60):
        self.send(cmd)
        return self.expect(cmd.split()[0], timeout)

    def stats(self):
        msg = self.ask("stats")
        return json.loads(" ".join(msg[1:]))

    def quit(self):
        try:
            self.send("quit")
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - best effort teardown
            self.proc.kill()


def cpu_ms(pid):
    """User + system CPU time of process `pid` so far, in ms (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))]


class NodeDeletions:
    """An independent observer of false failure detections under etcd: every lease expiry
    deletes a node key; etcdctl watches them."""

    def __init__(self, etcd):
        env = dict(os.environ, ETCDCTL_API="3")
        self.proc = subprocess.Popen(["etcdctl", "--endpoints", etcd.endpoints, "watch",
                                      "--prefix", "/reft/v1/nodes/"], stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.deletes = 0
        self.times = []  # when each deletion was seen (time.time())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip() == "DELETE":
                self.deletes += 1
                self.times.append(time.time())

    def between(self, start, end):
        return sum(1 for t in self.times if start <= t < end)

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def layout(n, per_process):
    """[(name, first, count)]: coordinator, probe, stall group, the rest."""
    stall = max(1, math.ceil(n / 100))
    hosts = [("coordinator", 0, 1), ("probe", 1, 1), ("stall", 2, stall)]
    first = 2 + stall
    while first < n:
        count = min(per_process, n - first)
        hosts.append((f"pool{len(hosts) - 3}", first, count))
        first += count
    return hosts


def run(backend, n, a, binary):
    if n < 3 + max(1, math.ceil(n / 100)):
        raise ValueError(f"N={n} too small for the host layout")
    root = tempfile.mkdtemp(prefix="reft-coord-scale-", dir=a.etcd_dir)
    etcd, observer, hosts = None, None, []
    try:
        common = ["--backend", backend, "--nodes", str(n), "--ranks", str(a.ranks),
                  "--lease-ttl", str(a.lease_ttl), "--lease-renewals", str(a.lease_renewals)]
        if backend == "etcd":
            etcd = EtcdCluster(os.path.join(root, "etcd"), 1).start()
            common += ["--etcd", etcd.endpoints]
            observer = NodeDeletions(etcd)
        plan = layout(n, a.per_process)
        t0 = time.time()
        name, first, count = plan[0]
        coordinator = Host(binary, name, common + ["--first", str(first), "--count", str(count)])
        hosts.append(coordinator)
        seed = coordinator.expect("ready", 120)[1]
        if backend == "etcd":
            deadline = time.time() + 30
            while coordinator.ask("lead")[1] != "1":
                if time.time() > deadline:
                    raise TimeoutError("member 0 did not become the job's coordinator")
                time.sleep(0.05)
        else:
            common += ["--seeds", seed]
        for name, first, count in plan[1:]:
            hosts.append(Host(binary, name, common + ["--first", str(first), "--count",
                                                      str(count)]))
        for h in hosts[1:]:
            h.expect("ready", 600)
        if backend == "gossip":
            deadline = time.time() + 120
            while min(int(h.ask("live")[1]) for h in hosts) < n - 1:
                if time.time() > deadline:
                    raise TimeoutError("gossip membership did not converge")
                time.sleep(0.5)
        startup_s = time.time() - t0
        # Leases follow the cluster's size: members that registered while it was small move to
        # the sized TTL at their next check (every 60 s +-50%); the steps measure the cluster
        # once they have (a member moves only on a 2x change, so "settled" is: no member's TTL
        # below half the sized one).
        sized = hosts[0].stats().get("lease_ttl_sized_s", a.lease_ttl)  # reftd's own rule
        settle_s = 0.0
        if backend == "etcd" and a.lease_renewals > 0:
            t_settle = time.time()
            # (A host whose only member coordinates the job reports 0: it keeps its lease.)
            while min(x for x in (h.stats()["lease_ttl_min_s"] for h in hosts) if x) * 2 <= sized:
                if time.time() - t_settle > 200:
                    raise TimeoutError("leases did not move to their sized TTL within 200 s")
                time.sleep(1)
            settle_s = time.time() - t_settle
        t_ready = time.time()

        step = 0
        decided = []

        def one_step(timeout):
            nonlocal step
            step += 1
            for h in hosts:
                h.send(f"complete {step}")
            completed = [int(h.expect("completed", timeout, step)[3]) for h in hosts]
            visible = [int(h.expect("visible", timeout, step)[3]) for h in hosts]
            # Host 0 is the coordinator alone: its commit is visible there when it decided.
            decided.append((visible[0] - max(completed)) / 1e9)
            return (max(visible) - max(completed)) / 1e9

        for _ in range(a.warmup):
            one_step(a.step_timeout)
        del decided[:]
        before = [h.stats() for h in hosts]
        etcd_cpu_before = cpu_ms(etcd.members[0].proc.pid) if etcd else 0
        latencies = []
        t_steps = time.time()
        for _ in range(a.steps):
            latencies.append(one_step(a.step_timeout))
            time.sleep(a.gap)
        elapsed = time.time() - t_steps
        after = [h.stats() for h in hosts]
        etcd_cpu = (cpu_ms(etcd.members[0].proc.pid) - etcd_cpu_before) / a.steps if etcd else 0

        # Stall ceil(N/100) members for --stall-ms, then keep stepping and give failure
        # detection time to (wrongly) fire: two lease TTLs / suspicion timeouts.
        stall = hosts[2]
        t_stall = time.time()
        os.kill(stall.proc.pid, signal.SIGSTOP)
        time.sleep(a.stall_ms / 1000)
        os.kill(stall.proc.pid, signal.SIGCONT)
        decided_steady = decided[:]
        stall_latencies = [one_step(a.step_timeout) for _ in range(3)]
        longest_ttl = max(h.stats().get("lease_ttl_max_s", a.lease_ttl) for h in hosts)
        time.sleep(2 * max(longest_ttl, 2))
        final = [h.stats() for h in hosts]

        def delta(key, i=None):
            pick = range(len(hosts)) if i is None else [i]
            return sum(after[j][key] - before[j][key] for j in pick)

        # etcd: completion reports go to the coordinator over the Peer service. Each counts
        # once, as its sender's (request + response); their bytes are measured where they
        # arrive, at the coordinator's server.
        served = delta("peer_server_messages", 0) if backend == "etcd" else 0
        bytes_per_peer_msg = delta("peer_server_bytes", 0) / served if served else 0

        def per_step(i=None):
            msgs = delta("messages", i) - delta("background_messages", i)
            byts = delta("bytes", i) - delta("background_bytes", i)
            if backend == "etcd":
                msgs += 2 * delta("reports_sent", i)
                byts += 2 * delta("reports_sent", i) * bytes_per_peer_msg
            return msgs / a.steps, byts / a.steps

        total_msgs, total_bytes = per_step()
        coord_msgs, coord_bytes = per_step(0)
        probe_msgs, probe_bytes = per_step(1)
        threads = sum(s["threads"] for s in final)
        rss = sum(s["rss_kib"] for s in final)
        false_detections = sum(s["dead_events"] for s in final) + \
            sum(s["self_declared_dead"] for s in final)
        if observer is not None:
            false_detections = max(false_detections, observer.deletes)
        result = {
            "backend": backend, "nodes": n, "ranks_per_node": a.ranks, "steps": a.steps,
            "processes": len(hosts), "startup_s": round(startup_s, 1),
            # Leases: the sized TTL for N, how long until every member had moved to it (or a
            # TTL within 2x of it), and the TTLs the members held while stepping.
            "lease_ttl_sized_s": sized if backend == "etcd" else None,
            "lease_settle_s": round(settle_s, 1) if backend == "etcd" else None,
            "lease_ttl_range_s": [min(x["lease_ttl_min_s"] for x in after if x["lease_ttl_min_s"]),
                                  max(x["lease_ttl_max_s"] for x in after)]
            if backend == "etcd" else None,
            "msgs_per_step": round(total_msgs, 1),
            "bytes_per_step": round(total_bytes),
            "msgs_per_step_per_node": round((total_msgs - coord_msgs) / (n - 1), 2),
            "bytes_per_step_per_node": round((total_bytes - coord_bytes) / (n - 1)),
            "coordinator_msgs_per_step": round(coord_msgs + served / a.steps, 1),
            # How completions travelled (etcd): reports to the coordinator, reports it did not
            # take, and completion records written to etcd, per step.
            "reports_per_step": round(delta("reports_sent") / a.steps, 1)
            if backend == "etcd" else None,
            "report_failures_per_step": round(delta("report_failures") / a.steps, 1)
            if backend == "etcd" else None,
            # The report RPCs the coordinator took (an aggregator's batch counts one), and the
            # reports aggregators carried (docs/coordination.md "Reports aggregate on the way").
            "coordinator_report_rpcs_per_step":
                round(delta("report_messages_received", 0) / a.steps, 1)
            if backend == "etcd" else None,
            "reports_forwarded_per_step": round(delta("reports_forwarded") / a.steps, 1)
            if backend == "etcd" else None,
            "completion_writes_per_step": round(delta("completion_writes") / a.steps, 1)
            if backend == "etcd" else None,
            "coordinator_bytes_per_step":
                round(coord_bytes + (delta("peer_server_bytes", 0) / a.steps if served else 0)),
            "one_node_msgs_per_step": round(probe_msgs, 2),
            "one_node_bytes_per_step": round(probe_bytes),
            "background_msgs_per_s_per_node":
                round(delta("background_messages") / elapsed / n, 3),
            "background_bytes_per_s_per_node":
                round(delta("background_bytes") / elapsed / n, 1),
            "commit_latency_p50_ms": round(1000 * statistics.median(latencies), 1),
            "commit_latency_p99_ms": round(1000 * percentile(latencies, 99), 1),
            "commit_latency_max_ms": round(1000 * max(latencies), 1),
            "coordinator_commit_p50_ms": round(1000 * statistics.median(decided_steady), 1),
            "commit_latency_after_stall_ms": [round(1000 * x, 1) for x in stall_latencies],
            # CPU per committed step (including the --gap idle time's background work): the
            # coordinator's process (member 0 alone), etcd, and all simulated members together.
            "cpu_ms_per_step_coordinator": round(delta("cpu_ms", 0) / a.steps, 1),
            "cpu_ms_per_step_etcd": round(etcd_cpu, 1) if etcd else None,
            "cpu_ms_per_step_all_members": round(delta("cpu_ms") / a.steps, 1),
            "threads_per_member": round(threads / n, 3),
            "rss_kib_per_member": round(rss / n, 1),
            "one_member_process_threads": final[1]["threads"],
            "one_member_process_rss_kib": final[1]["rss_kib"],
            "stalled_members": plan[2][2], "stall_ms": a.stall_ms,
            "false_failure_detections": false_detections,
            "suspicions": sum(s["suspect_events"] for s in final),
        }
        # Which processes' members lost their leases (a pooled client falling behind, the
        # coordinator, the stalled group).
        result["leases_lost_by_host"] = {h.name: h.leases_lost for h in hosts if h.leases_lost}
        if observer is not None:
            # When the node keys were deleted: while the members registered and joined, while
            # they stepped, or from the stall on.
            result["false_detections_by_phase"] = {
                "startup": observer.between(t0, t_ready),
                "steps": observer.between(t_ready, t_stall),
                "stall": observer.between(t_stall, time.time())}
        return result
    except (TimeoutError, RuntimeError) as e:
        # What every host logged last (the daemon's warnings: failed reports, lost leases).
        tails = {h.name: "".join(h.stderr[-3:])[-600:] for h in hosts[:3]}
        raise type(e)(f"{e}; host logs: {json.dumps(tails)}") from e
    finally:
        for h in hosts:
            try:
                os.kill(h.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            h.quit()
        if observer is not None:
            observer.close()
        if etcd is not None:
            etcd.close()
        shutil.rmtree(root, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="etcd", choices=["etcd", "gossip"])
    p.add_argument("--nodes", default="64,256,1024,4096",
                   help="comma-separated N; stops at the first N that fails")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--gap", type=float, default=0.2, help="seconds between steps")
    p.add_argument("--per-process", type=int, default=256)
    p.add_argument("--stall-ms", type=int, default=500)
    p.add_argument("--lease-ttl", type=int, default=5,
                   help="etcd lease TTL of a small cluster (reftd's default)")
    p.add_argument("--lease-renewals", type=float, default=1000,
                   help="renewals/s the cluster may ask of etcd (reftd's default; 0: fixed TTL)")
    p.add_argument("--step-timeout", type=float, default=60)
    p.add_argument("--etcd-dir", default=None, help="where etcd keeps its data (default /tmp)")
    p.add_argument("--build-dir", default=os.environ.get("REFT_BUILD_DIR", "build"))
    a = p.parse_args()
    binary = os.path.join(a.build_dir, "tools", "bench", "coord", "coord_scale_host")
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary} not built (cmake --build {a.build_dir} --target coord_scale_host)")
    for n in [int(x) for x in a.nodes.split(",")]:
        try:
            print(json.dumps(run(a.backend, n, a, binary)), flush=True)
        except (TimeoutError, RuntimeError, OSError) as e:
            print(json.dumps({"backend": a.backend, "nodes": n, "failed": str(e)[-2000:]}),
                  flush=True)
            break


if __name__ == "__main__":
    main()
