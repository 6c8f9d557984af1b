#!/usr/bin/env python3
"""Control-plane scale bench: N simulated nodes x R ranks of one job, data plane stubbed.

The members run in a few coord_scale_host processes (C++, real PeerNodes over an in-memory
store) against one real etcd (tools/localcluster's EtcdCluster), or over today's gossip
(SWIM membership + completion-set exchange, one Peer server per member). Process layout:
  host 0    member 0 alone: joins first, so it coordinates the job (etcd); its own traffic
  host 1    member 1 alone: one ordinary node in a process of its own (per-node figures)
  stall     ceil(N/100) members, SIGSTOPped for --stall-ms once (false failure detections)
  the rest  --per-process members per process (one EtcdClient each: pooled threads/connection)

Each N is run --runs times (fresh etcd and hosts each; with several --aggregate-from-nodes
values, each run with each value in turn). Every run prints one JSON line (stdout) with:
control messages and bytes per committed step (total, per node, the coordinator's and one
ordinary node's), commit latency from the last rank's completion to the commit being visible on
every member (p50/p99/max; and to the coordinator's commit alone), CPU per committed step
(coordinator, etcd, all members), threads and resident memory (per member, and of the
one-member process), and the failure-detection figures under the stall: deaths declared
(registrations that left etcd, departures a member heard, members whose own lease lapsed) and
recoveries started (losses the coordinator's planner published, restore decisions recorded in
etcd). Then one summary line per N (and value) with min / median / max of the main figures.
--cpus confines the whole bench (etcd, every host, the harness) to some CPUs; a run stops
itself after --run-budget seconds (15 minutes), reported incomplete with what it measured.
docs/bench/coordination.md describes the method and the figures.
"""
import argparse
import base64
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

    def __init__(self, binary, name, args, budget):
        self.name = name
        self.budget = budget
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
        deadline = min(time.time() + timeout, self.budget.end)
        while True:
            left = deadline - time.time()
            if left <= 0:
                self.budget.check(f"waiting for '{word}' from {self.name}")
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
            os.kill(self.proc.pid, signal.SIGCONT)
            self.send("quit")
        except (OSError, ValueError):  # best effort teardown: it exited already
            pass

    def reap(self, deadline):
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cpu_ms(pid):
    """User + system CPU time of process `pid` so far, in ms (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(p / 100 * len(v)) - 1))]


class EtcdWatch:
    """An etcdctl watch (JSON output) of a key or a prefix, independent of the members: every
    event as (time.time(), "PUT" | "DELETE", key, value)."""

    def __init__(self, etcd, key, prefix=False):
        env = dict(os.environ, ETCDCTL_API="3")
        cmd = ["etcdctl", "--endpoints", etcd.endpoints, "watch", "-w", "json", key]
        if prefix:
            cmd.append("--prefix")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        self.events = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                events = json.loads(line).get("Events") or []
            except ValueError:
                continue
            now = time.time()
            for e in events:
                kv = e.get("kv", {})
                self.events.append((now, "DELETE" if e.get("type") == 1 else "PUT",
                                    base64.b64decode(kv.get("key", "")).decode(),
                                    base64.b64decode(kv.get("value", "")).decode()))

    def close(self):
        self.proc.terminate()
        self.proc.wait()


class Deaths:
    """Nodes declared dead while nothing failed: registrations that left etcd (node keys
    deleted: a lapse, whether or not a member then held it), departures a member heard (each
    host's first member listens, as every reftd's planner does), and members whose own lease
    lapsed (they registered again). A node counts once, at its first sign."""

    def __init__(self):
        self.first = {}    # node -> time.time() of its first sign
        self.sources = {"registration_deleted": set(), "departure_heard": set(),
                        "lease_lost": set()}

    def add(self, source, node, when):
        self.sources[source].add(node)
        if node not in self.first or when < self.first[node]:
            self.first[node] = when

    def by_phase(self, marks):
        """{phase: nodes whose first sign fell in it}; marks: [(phase, start)] in order."""
        out = {name: 0 for name, _ in marks}
        for when in self.first.values():
            phase = marks[0][0]
            for name, start in marks:
                if when >= start:
                    phase = name
            out[phase] += 1
        return out


class Recoveries:
    """Recoveries started for the job, from its keys in etcd (docs/coordination.md), watched
    from before the job starts: the losses the planner published a decision for (/plan: one
    per (generation, step, lost nodes); its withdrawal, "no_loss", is not one) and the restore
    decisions recorded (/restore; a generation started — /generation — records one with it).
    The bench has no trainers, so no restore decision is ever the sequel of a published loss:
    each counts once."""

    def __init__(self, etcd, job):
        prefix = f"/reft/v1/jobs/{job}/"
        self.watches = {k: EtcdWatch(etcd, prefix + k) for k in ("plan", "restore", "generation")}

    def puts(self, key, since=0.0):
        return [(t, json.loads(v) if v else {}) for t, kind, _, v in self.watches[key].events
                if kind == "PUT" and t >= since]

    def figures(self, marks):
        plans = self.puts("plan")
        losses = {(p.get("generation"), p.get("step"), p.get("basis")): t for t, p in plans
                  if p.get("state") != "no_loss"}
        restores = self.puts("restore")
        generations = self.puts("generation")
        started = sorted(list(losses.values()) + [t for t, _ in restores])
        states = {}
        for _, p in plans:
            states[p.get("state", "?")] = states.get(p.get("state", "?"), 0) + 1
        by_phase = {name: 0 for name, _ in marks}
        for when in started:
            phase = marks[0][0]
            for name, start in marks:
                if when >= start:
                    phase = name
            by_phase[phase] += 1
        return {"recoveries_started": len(started), "recoveries_by_phase": by_phase,
                "plan_publications": len(plans), "plan_states": states,
                "losses_planned": sorted(str(b) for _, _, b in losses),
                "restore_decisions": len(restores),
                "generations_started": len(generations)}

    def close(self):
        for w in self.watches.values():
            w.close()


class BudgetExhausted(TimeoutError):
    """The run's wall-clock budget ran out: it is reported incomplete, with what it has."""


class Budget:
    def __init__(self, seconds):
        self.end = time.time() + seconds

    def left(self):
        return self.end - time.time()

    def check(self, phase):
        if self.left() <= 0:
            raise BudgetExhausted(f"the run's budget ran out in phase {phase}")

    def sleep(self, seconds, phase):
        time.sleep(max(0.0, min(seconds, self.left())))
        self.check(phase)


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


class Run:
    """One run of N: fresh etcd and hosts; what it measured so far (a run the budget stops
    reports it)."""

    def __init__(self, backend, n, a, binary, aggregate_from_nodes=None):
        self.backend, self.n, self.a, self.binary = backend, n, a, binary
        self.aggregate_from_nodes = aggregate_from_nodes  # None: the host's (reftd's) default
        self.budget = Budget(a.run_budget - TEARDOWN_S)
        self.phase = "startup"
        self.marks = []  # [(phase, time.time() it began)]
        self.hosts, self.etcd, self.watches, self.recoveries = [], None, [], None
        self.deaths = Deaths()
        self.latencies, self.decided, self.stall_latencies = [], [], []
        self.before = self.after = self.final = None
        self.etcd_cpu_before = self.etcd_cpu_after = None
        self.t_steps = self.t_steps_end = None
        self.plan = layout(n, a.per_process)
        self.startup_s = self.settle_s = None
        self.traffic_partial = False
        self.sized = None
        self.step = 0

    def enter(self, phase):
        self.phase = phase
        self.marks.append((phase, time.time()))

    def one_step(self):
        self.step += 1
        step = self.step
        for h in self.hosts:
            h.send(f"complete {step}")
        completed = [int(h.expect("completed", self.a.step_timeout, step)[3]) for h in self.hosts]
        visible = [int(h.expect("visible", self.a.step_timeout, step)[3]) for h in self.hosts]
        # Host 0 is the coordinator alone: its commit is visible there when it decided.
        self.decided.append((visible[0] - max(completed)) / 1e9)
        return (max(visible) - max(completed)) / 1e9

    def measure(self):
        a, n, backend, binary = self.a, self.n, self.backend, self.binary
        common = ["--backend", backend, "--nodes", str(n), "--ranks", str(a.ranks),
                  "--lease-ttl", str(a.lease_ttl), "--lease-renewals", str(a.lease_renewals)]
        if self.aggregate_from_nodes is not None:
            common += ["--aggregate-from-nodes", str(self.aggregate_from_nodes)]
        self.enter("startup")
        if backend == "etcd":
            self.etcd = EtcdCluster(os.path.join(self.root, "etcd"), 1).start()
            common += ["--etcd", self.etcd.endpoints]
            self.watches.append(EtcdWatch(self.etcd, "/reft/v1/nodes/", prefix=True))
            self.recoveries = Recoveries(self.etcd, "scale")
        t0 = time.time()
        name, first, count = self.plan[0]
        coordinator = Host(binary, name, common + ["--first", str(first), "--count", str(count)],
                           self.budget)
        self.hosts.append(coordinator)
        seed = coordinator.expect("ready", 120)[1]
        if backend == "etcd":
            while coordinator.ask("lead")[1] != "1":
                if time.time() - t0 > 30:
                    raise TimeoutError("member 0 did not become the job's coordinator")
                self.budget.sleep(0.05, "startup")
        else:
            common += ["--seeds", seed]
        for name, first, count in self.plan[1:]:
            self.hosts.append(Host(binary, name, common + ["--first", str(first), "--count",
                                                           str(count)], self.budget))
        for h in self.hosts[1:]:
            h.expect("ready", 600)
        if backend == "gossip":
            deadline = time.time() + 120
            while min(int(h.ask("live")[1]) for h in self.hosts) < n - 1:
                if time.time() > deadline:
                    raise TimeoutError("gossip membership did not converge")
                self.budget.sleep(0.5, "startup")
        self.startup_s = time.time() - t0
        # Leases follow the cluster's size: members that registered while it was small move to
        # the sized TTL at their next check (every 60 s +-50%); the steps measure the cluster
        # once they have (a member moves only on a 2x change, so "settled" is: no member's TTL
        # below half the sized one).
        self.enter("settle")
        self.sized = self.hosts[0].stats().get("lease_ttl_sized_s", a.lease_ttl)  # reftd's rule
        if backend == "etcd" and a.lease_renewals > 0:
            t_settle = time.time()
            # (A host whose only member coordinates the job reports 0: it keeps its lease.)
            while min(x for x in (h.stats()["lease_ttl_min_s"] for h in self.hosts) if x) * 2 \
                    <= self.sized:
                if time.time() - t_settle > 200:
                    raise TimeoutError("leases did not move to their sized TTL within 200 s")
                self.budget.sleep(1, "settle")
            self.settle_s = time.time() - t_settle

        self.enter("warmup")
        for _ in range(a.warmup):
            self.one_step()
        del self.decided[:]
        self.enter("steps")
        self.before = [h.stats() for h in self.hosts]
        self.etcd_cpu_before = cpu_ms(self.etcd.members[0].proc.pid) if self.etcd else 0
        self.t_steps = time.time()
        for _ in range(a.steps):
            self.latencies.append(self.one_step())
            self.budget.sleep(a.gap, "steps")
        self.t_steps_end = time.time()
        self.after = [h.stats() for h in self.hosts]
        self.etcd_cpu_after = cpu_ms(self.etcd.members[0].proc.pid) if self.etcd else 0

        # Stall ceil(N/100) members for --stall-ms, then keep stepping and give failure
        # detection time to (wrongly) fire: two lease TTLs / suspicion timeouts.
        self.enter("stall")
        stall = self.hosts[2]
        os.kill(stall.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(a.stall_ms / 1000)
        finally:
            os.kill(stall.proc.pid, signal.SIGCONT)
        steady = self.decided[:]
        for _ in range(3):
            self.stall_latencies.append(self.one_step())
        self.decided = steady
        self.enter("after_stall")
        longest_ttl = max(h.stats().get("lease_ttl_max_s", a.lease_ttl) for h in self.hosts)
        self.budget.sleep(2 * max(longest_ttl, 2), "after_stall")
        self.final = [h.stats() for h in self.hosts]
        self.enter("done")

    def collect_deaths(self):
        """Every host's deaths (their last stats, or asked now within a few seconds) and the
        node keys the watch saw deleted."""
        if self.watches:
            for when, kind, key, _ in self.watches[0].events:
                if kind == "DELETE":
                    self.deaths.add("registration_deleted", key.rsplit("/", 1)[-1], when)
        stats = self.final
        if stats is None:
            stats = []
            deadline = time.time() + 20
            for h in self.hosts:
                try:
                    if time.time() < deadline:
                        h.send("stats")
                except (OSError, ValueError):
                    pass
            for h in self.hosts:
                try:
                    h.budget = Budget(max(0.0, deadline - time.time()))
                    stats.append(json.loads(" ".join(h.expect("stats", 20)[1:])))
                except (TimeoutError, RuntimeError, ValueError):
                    pass
            if self.before is not None and self.after is None and len(stats) == len(self.hosts) \
                    and self.latencies:
                # Stopped while stepping: the traffic of the steps it measured (and of the one
                # in progress).
                self.after, self.t_steps_end, self.traffic_partial = stats, time.time(), True
                self.etcd_cpu_after = cpu_ms(self.etcd.members[0].proc.pid) if self.etcd else 0
        for st in stats:
            for node, ms in st.get("departed", []):
                self.deaths.add("departure_heard", node, ms / 1000)
            for node, ms in st.get("lease_lost", []):
                self.deaths.add("lease_lost", node, ms / 1000)
        return stats

    def result(self, complete, error=None):
        a, n, backend = self.a, self.n, self.backend
        end = time.time()
        stats = self.collect_deaths()
        r = {"backend": backend, "nodes": n, "ranks_per_node": a.ranks, "steps": a.steps,
             "complete": complete, "processes": len(self.hosts),
             "cpus": sorted(os.sched_getaffinity(0)),
             "aggregate_from_nodes": self.before[0].get("aggregate_from_nodes")
             if self.before else self.aggregate_from_nodes,
             "wall_s": round(end - self.marks[0][1], 1) if self.marks else 0,
             # When each phase began (unix s): lines up the run with outside samples.
             "phase_starts_unix": {name: round(t, 2) for name, t in self.marks},
             "startup_s": None if self.startup_s is None else round(self.startup_s, 1),
             "lease_ttl_sized_s": self.sized if backend == "etcd" else None,
             "lease_settle_s": None if self.settle_s is None else round(self.settle_s, 1)}
        if error is not None:
            r["stopped_in"] = self.phase
            r["error"] = error[-2000:]
        if self.latencies:
            r["steps_measured"] = len(self.latencies)
            r["commit_latency_p50_ms"] = round(1000 * statistics.median(self.latencies), 1)
            r["commit_latency_p99_ms"] = round(1000 * percentile(self.latencies, 99), 1)
            r["commit_latency_max_ms"] = round(1000 * max(self.latencies), 1)
        if self.decided:
            r["coordinator_commit_p50_ms"] = round(1000 * statistics.median(self.decided), 1)
        if self.stall_latencies:
            r["commit_latency_after_stall_ms"] = [round(1000 * x, 1) for x in self.stall_latencies]
        if self.after is not None:
            r.update(self.traffic())
            if self.traffic_partial:
                r["traffic_includes_an_unfinished_step"] = True
        if stats:
            threads = sum(s["threads"] for s in stats)
            rss = sum(s["rss_kib"] for s in stats)
            r.update({"threads_per_member": round(threads / n, 3),
                      "rss_kib_per_member": round(rss / n, 1),
                      "suspicions": sum(s["suspect_events"] for s in stats)})
            if len(stats) > 1:
                r["one_member_process_threads"] = stats[1]["threads"]
                r["one_member_process_rss_kib"] = stats[1]["rss_kib"]
            if backend == "etcd":
                for key in ("deaths_held", "deaths_held_released", "deaths_held_declared",
                            "reregistrations"):
                    r[key] = sum(s.get(key, 0) for s in stats)
        # Deaths declared while nothing failed (the failure-detection figure), and when.
        marks = self.marks + [("teardown", end)]
        r["stalled_members"], r["stall_ms"] = self.plan[2][2], a.stall_ms
        r["deaths_declared"] = len(self.deaths.first)
        r["false_failure_detections"] = r["deaths_declared"]  # the name of earlier tables
        r["deaths_by_source"] = {k: len(v) for k, v in self.deaths.sources.items()}
        r["deaths_by_phase"] = {k: v for k, v in self.deaths.by_phase(marks[:-1]).items() if v}
        if self.recoveries is not None:
            r.update(self.recoveries.figures(marks[:-1]))
            r["recoveries_by_phase"] = {k: v for k, v in r["recoveries_by_phase"].items() if v}
        r["leases_lost_by_host"] = {h.name: h.leases_lost for h in self.hosts if h.leases_lost}
        return r

    def traffic(self):
        """Messages, bytes and CPU per committed step over the steady steps."""
        a, n, backend, before, after = self.a, self.n, self.backend, self.before, self.after
        steps = len(self.latencies)
        elapsed = self.t_steps_end - self.t_steps

        def delta(key, i=None):
            pick = range(len(after)) if i is None else [i]
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
            return msgs / steps, byts / steps

        total_msgs, total_bytes = per_step()
        coord_msgs, coord_bytes = per_step(0)
        probe_msgs, probe_bytes = per_step(1)
        etcd = backend == "etcd"
        return {
            # Leases: the TTLs the members held while stepping.
            "lease_ttl_range_s": [min(x["lease_ttl_min_s"] for x in after if x["lease_ttl_min_s"]),
                                  max(x["lease_ttl_max_s"] for x in after)] if etcd else None,
            "msgs_per_step": round(total_msgs, 1),
            "bytes_per_step": round(total_bytes),
            "msgs_per_step_per_node": round((total_msgs - coord_msgs) / (n - 1), 2),
            "bytes_per_step_per_node": round((total_bytes - coord_bytes) / (n - 1)),
            "coordinator_msgs_per_step": round(coord_msgs + served / steps, 1),
            # How completions travelled (etcd): reports to the coordinator, reports it did not
            # take, and completion records written to etcd, per step.
            "reports_per_step": round(delta("reports_sent") / steps, 1) if etcd else None,
            "report_failures_per_step":
                round(delta("report_failures") / steps, 1) if etcd else None,
            # Of those, late ones waited out and sent again rather than written to etcd.
            "reports_late_per_step":
                round(delta("reports_late") / steps, 1) if etcd else None,
            # The report RPCs the coordinator took (an aggregator's batch counts one), and the
            # reports aggregators carried (docs/coordination.md "Reports aggregate on the way").
            "coordinator_report_rpcs_per_step":
                round(delta("report_messages_received", 0) / steps, 1) if etcd else None,
            "reports_forwarded_per_step":
                round(delta("reports_forwarded") / steps, 1) if etcd else None,
            "completion_writes_per_step":
                round(delta("completion_writes") / steps, 1) if etcd else None,
            "coordinator_bytes_per_step":
                round(coord_bytes + (delta("peer_server_bytes", 0) / steps if served else 0)),
            "one_node_msgs_per_step": round(probe_msgs, 2),
            "one_node_bytes_per_step": round(probe_bytes),
            "background_msgs_per_s_per_node": round(delta("background_messages") / elapsed / n, 3),
            "background_bytes_per_s_per_node": round(delta("background_bytes") / elapsed / n, 1),
            # CPU per committed step (including the --gap idle time's background work): the
            # coordinator's process (member 0 alone), etcd, and all simulated members together.
            "cpu_ms_per_step_coordinator": round(delta("cpu_ms", 0) / steps, 1),
            "cpu_ms_per_step_etcd":
                round((self.etcd_cpu_after - self.etcd_cpu_before) / steps, 1) if etcd else None,
            "cpu_ms_per_step_all_members": round(delta("cpu_ms") / steps, 1),
        }

    def execute(self):
        """The run's JSON line (complete, or incomplete with what it has)."""
        if self.n < 3 + max(1, math.ceil(self.n / 100)):
            raise ValueError(f"N={self.n} too small for the host layout")
        self.root = tempfile.mkdtemp(prefix="reft-coord-scale-", dir=self.a.etcd_dir)
        try:
            try:
                self.measure()
                r = self.result(True)
            except (TimeoutError, RuntimeError, OSError) as e:
                # What every host logged last (the daemon's warnings: failed reports, lost
                # leases).
                tails = {h.name: "".join(h.stderr[-3:])[-600:] for h in self.hosts[:3]}
                r = self.result(False, f"{e}; host logs: {json.dumps(tails)}")
            t_teardown = time.time()
        finally:
            deadline = time.time() + TEARDOWN_S - 25  # 20 s of it may have gone to collect_deaths
            for h in self.hosts:
                h.quit()
            for h in self.hosts:
                h.reap(deadline)
            for w in self.watches:
                w.close()
            if self.recoveries is not None:
                self.recoveries.close()
            if self.etcd is not None:
                self.etcd.close()
            shutil.rmtree(self.root, ignore_errors=True)
        r["teardown_s"] = round(time.time() - t_teardown, 1)
        return r


# Of a run's budget, what its teardown keeps (hosts quit, etcd stops).
TEARDOWN_S = 60

# The figures the summary line gives min / median / max of.
SUMMARY_FIGURES = [
    "commit_latency_p50_ms", "commit_latency_p99_ms", "coordinator_commit_p50_ms",
    "msgs_per_step_per_node", "coordinator_msgs_per_step", "coordinator_report_rpcs_per_step",
    "cpu_ms_per_step_coordinator", "cpu_ms_per_step_etcd", "cpu_ms_per_step_all_members",
    "deaths_declared", "recoveries_started", "startup_s", "wall_s"]


def summary(n, runs):
    """min / median / max of each figure over the runs that measured it."""
    figures = {}
    for key in SUMMARY_FIGURES:
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            figures[key] = {"min": min(values), "median": round(statistics.median(values), 2),
                            "max": max(values), "runs": len(values)}
    return {"summary": True, "nodes": n, "runs": len(runs),
            "complete": sum(1 for r in runs if r.get("complete")),
            "cpus": runs[0].get("cpus") if runs else None,
            "aggregate_from_nodes": runs[0].get("aggregate_from_nodes") if runs else None,
            "figures": figures}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="etcd", choices=["etcd", "gossip"])
    p.add_argument("--nodes", default="64,256,1024,4096",
                   help="comma-separated N; stops after the first N with a run that did not "
                        "complete")
    p.add_argument("--runs", type=int, default=3,
                   help="runs of each N (fresh etcd and hosts each): one line per run, then a "
                        "summary line (min / median / max)")
    p.add_argument("--cpus", default=None,
                   help="CPUs the whole bench runs on (e.g. 0 or 0,1): the harness confines "
                        "itself before starting anything, etcd and the hosts inherit it")
    p.add_argument("--run-budget", type=float, default=900,
                   help="wall-clock seconds a run may take, teardown included; a run out of "
                        "budget is reported incomplete with what it measured")
    p.add_argument("--aggregate-from-nodes", default=None,
                   help="reftd's coordinator.aggregate_from_nodes for the members (0: every "
                        "report straight to the coordinator; default: reftd's, 64); several, "
                        "comma-separated (0,64): each run of each N is made with each value in "
                        "turn (alternating: a before/after pair on one build), a summary per value")
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
    # A SIGTERM (a timeout, a kill from the shell) unwinds like Ctrl-C, so each run's cleanup
    # stops its etcd, hosts and watchers instead of leaving them running.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if a.cpus is not None:
        os.sched_setaffinity(0, {int(c) for c in a.cpus.split(",")})
    binary = os.path.join(a.build_dir, "tools", "bench", "coord", "coord_scale_host")
    if not os.access(binary, os.X_OK):
        sys.exit(f"{binary} not built (cmake --build {a.build_dir} --target coord_scale_host)")
    variants = [None] if a.aggregate_from_nodes is None else \
        [int(v) for v in a.aggregate_from_nodes.split(",")]
    for n in [int(x) for x in a.nodes.split(",")]:
        runs = {v: [] for v in variants}
        for i in range(a.runs):
            for v in variants:
                r = Run(a.backend, n, a, binary, v).execute()
                r["run"] = i + 1
                runs[v].append(r)
                print(json.dumps(r), flush=True)
        for v in variants:
            print(json.dumps(summary(n, runs[v])), flush=True)
        if not all(r["complete"] for v in variants for r in runs[v]):
            break


if __name__ == "__main__":
    main()
